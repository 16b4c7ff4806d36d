"""Convolution on any array module (NumPy, CuPy): im2col and one batched GEMM per group, and
its two adjoints, on channel-first arrays; with the operator's layouts, bias, residual and
activation around them (:func:`forward`, :func:`backward_data`, :func:`backward_weights`).

These are what runs off the CPU's fast paths: on another device, and as the 'gemm' gradients of
:mod:`ember.op.nn.conv.algorithms`. A 1x1, stride-1 convolution is the GEMM alone; a batch is
lowered a few samples at a time (:func:`workspace_bytes`). Deconvolution is the adjoint: its
forward pass is the convolution's data gradient and vice versa.

>>> import numpy as np
>>> window = conv_window('Convolution', {'kernel': (3,), 'stride': (), 'dilate': (), 'pad': (1,)},
...                      (5,))
>>> x, w = np.ones((1, 1, 5), np.float32), np.ones((1, 1, 3), np.float32)
>>> y = np.empty((1, 1, 5), np.float32)
>>> conv_forward(np, x, w, window, 1, y)
>>> y.ravel()
array([2., 3., 3., 3., 2.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from ember.base import prod
from ember.op.nn._common import (
    channel_first, col2im, dilated, im2col, interior, is_channel_last, make_window, padded_input,
    reshape_view, scratch, spatial_defaults, weight_channel_first)
from ember.op.nn.activation import ACTIVATIONS
from ember.op.nn.conv import tuning
from ember.op.registry import ShapeError

__all__ = ['conv_forward', 'conv_backward_data', 'conv_backward_weight', 'workspace_bytes',
           'conv_window', 'forward', 'backward_data', 'backward_weights', 'add_bias',
           'spatial_axes']


# ----------------------------------------------------------------------------------------------
# The three primitives, on channel-first arrays: x (N, C, *in), weight (F, C/groups, *kernel),
# y (N, F, *out).

def conv_forward(xp, x, weight, window, groups, y, ctx=None, workspace=None):
    """Write the convolution of `x` with `weight` into `y` (in batch chunks whose scratch fits
    `workspace` bytes, when given)."""
    chunks = _batch_chunks(x, weight, window, workspace)
    if len(chunks) > 1:
        for lo, hi in chunks:
            conv_forward(xp, x[lo:hi], weight, window, groups, y[lo:hi], ctx)
        return
    n, channels = x.shape[:2]
    filters, size_out = weight.shape[0], prod(window.size_out)
    w3 = weight.reshape((groups, filters // groups, -1))
    target = reshape_view(y, (n, groups, filters // groups, size_out))
    pad_buf, cols_buf, y_buf = scratch(
        ctx, xp,
        None if window.is_pointwise or not window.has_padding else (
            x.shape[:2] + window.padded, x.dtype),
        None if window.is_pointwise else ((n, channels) + window.kernel + window.size_out,
                                          x.dtype),
        None if target is not None else ((n, groups, filters // groups, size_out), y.dtype))
    if window.is_pointwise:
        cols = x.reshape((n, groups, channels // groups, size_out))
    else:
        padded = padded_input(xp, x, window, 0, pad_buf)
        cols = im2col(padded, window, cols_buf).reshape(n, groups, -1, size_out)
    xp.matmul(w3, cols, out=target if target is not None else y_buf)
    if target is None:
        y[...] = y_buf.reshape(y.shape)


def conv_backward_data(xp, dy, weight, window, groups, dx, ctx=None, workspace=None):
    """Write the gradient of the convolution with respect to its data into `dx`."""
    chunks = _batch_chunks(dx, weight, window, workspace)
    if len(chunks) > 1:
        for lo, hi in chunks:
            conv_backward_data(xp, dy[lo:hi], weight, window, groups, dx[lo:hi], ctx)
        return
    n, channels = dx.shape[:2]
    filters, size_out = weight.shape[0], prod(window.size_out)
    wt = weight.reshape((groups, filters // groups, -1)).transpose(0, 2, 1)
    dy4 = dy.reshape((n, groups, filters // groups, size_out))
    if window.is_pointwise:
        target = reshape_view(dx, (n, groups, channels // groups, size_out))
        if target is not None:
            xp.matmul(wt, dy4, out=target)
        else:
            dx[...] = xp.matmul(wt, dy4).reshape(dx.shape)
        return
    dcols, dpad = scratch(ctx, xp, ((n, groups, wt.shape[1], size_out), dx.dtype),
                          ((n, channels) + window.padded, dx.dtype) if window.has_padding
                          else None)
    xp.matmul(wt, dy4, out=dcols)
    if dpad is None:
        dx.fill(0)
        col2im(dcols.reshape((n, channels) + window.kernel + window.size_out), window, dx)
        return
    dpad.fill(0)
    col2im(dcols.reshape((n, channels) + window.kernel + window.size_out), window, dpad)
    dx[...] = dpad[interior(window)]


def conv_backward_weight(xp, dy, x, window, groups, dw, ctx=None, workspace=None):
    """Write the gradient of the convolution with respect to its weight into `dw`."""
    chunks = _batch_chunks(x, dw, window, workspace)
    if len(chunks) > 1:
        part = xp.empty_like(dw)
        dw[...] = 0
        for lo, hi in chunks:
            conv_backward_weight(xp, dy[lo:hi], x[lo:hi], window, groups, part, ctx)
            dw += part
        return
    n, channels = x.shape[:2]
    filters, size_out = dw.shape[0], prod(window.size_out)
    dy4 = dy.reshape((n, groups, filters // groups, size_out))
    pad_buf, cols_buf, acc = scratch(
        ctx, xp,
        None if window.is_pointwise or not window.has_padding else (
            x.shape[:2] + window.padded, x.dtype),
        None if window.is_pointwise else ((n, channels) + window.kernel + window.size_out,
                                          x.dtype),
        ((2, groups, filters // groups, prod(dw.shape[1:])), dw.dtype))
    if window.is_pointwise:
        cols = x.reshape((n, groups, channels // groups, size_out))
    else:
        padded = padded_input(xp, x, window, 0, pad_buf)
        cols = im2col(padded, window, cols_buf).reshape(n, groups, -1, size_out)
    # one batched GEMM (over groups) per sample: (Fg, O) x (O, Cg*K), summed over samples
    total, term = acc[0], acc[1]
    total.fill(0)
    for i in range(n):
        xp.matmul(dy4[i], cols[i].transpose(0, 2, 1), out=term)
        total += term
    dw[...] = total.reshape(dw.shape)


def workspace_bytes(attrs):
    """The scratch one call lowers a batch in: `workspace` MB, at most
    ``TUNING.workspace_cap_mb`` (a whole batch's patches take gigabytes, and each temp space
    keeps its largest buffer; MXNet's CPU kernels lower a few samples at a time too)."""
    return min(attrs['workspace'], tuning.TUNING.workspace_cap_mb) << 20


def _batch_chunks(x, weight, window, workspace):
    """[(start, stop)] sample ranges whose scratch fits `workspace` bytes (one range if None)."""
    n = x.shape[0]
    if workspace is None or n < 2 or window.is_pointwise:
        return [(0, n)]
    per_sample = x.dtype.itemsize * (prod(x.shape[1:2] + window.padded)
                                     + x.shape[1] * prod(window.kernel) * prod(window.size_out)
                                     + weight.shape[0] * prod(window.size_out))
    step = max(1, workspace // max(per_sample, 1))
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def conv_window(op, attrs, size_in):
    """The window of operator `op` (Convolution's `attrs`) over data of spatial size
    `size_in`; ShapeError where the kernel does not fit."""
    kernel = attrs['kernel']
    stride, dilate, pad = spatial_defaults(op, attrs, len(kernel))
    size_out = tuple((n + 2 * p - dk) // s + 1 for n, p, dk, s in
                     zip(size_in, pad, dilated(kernel, dilate), stride))
    if any(o <= 0 for o in size_out):
        raise ShapeError(f'{op}: kernel {kernel} with dilate {dilate} does not fit data of '
                         f'spatial size {size_in} padded by {pad}')
    return make_window(kernel, stride, dilate, pad, size_in, size_out)



def spatial_axes(ndim):
    return (0,) + tuple(range(2, ndim))


def add_bias(y, bias):
    y += bias.reshape((1, -1) + (1,) * (y.ndim - 2))



def forward(attrs, data, weight, bias, out, ctx, residual, act_type):
    """Convolution's forward pass in any array module: im2col + GEMM, then bias, residual
    (aside, since it may be `out`'s memory) and activation."""
    xp, layout = ctx.xp, attrs['layout']
    target = out if residual is None else xp.empty_like(out)
    x, y = channel_first(xp, data, layout), channel_first(xp, target, layout)
    window = conv_window('Convolution', attrs, x.shape[2:])
    conv_forward(xp, x, weight_channel_first(xp, weight, layout), window, attrs['num_group'],
                 y, ctx, workspace_bytes(attrs))
    if bias is not None:
        add_bias(y, bias)
    if residual is not None:
        xp.add(target, residual, out=out)
    if act_type == 'relu':
        xp.maximum(out, 0, out=out)
    elif act_type is not None:
        out[...] = ACTIVATIONS[act_type][0](xp, out)



def _pointwise_channel_last(attrs, ctx):
    """Whether Convolution's `attrs` describe a 1x1, unpadded, ungrouped convolution of
    channel-last NumPy data: its gradients are then single GEMMs over the (N*H*W, C) rows."""
    return (ctx.xp is np and is_channel_last(attrs['layout']) and attrs['num_group'] == 1
            and all(k == 1 for k in attrs['kernel']) and not any(attrs['pad']))


def _rows(array):
    """Channel-last `array` as (rows, channels), a view where possible."""
    return array.reshape((-1, array.shape[-1]))


def _sampled(attrs, array):
    """The positions of channel-last `array` that a 1x1 convolution with `attrs` reads."""
    stride = attrs['stride'] or (1,) * (array.ndim - 2)
    if all(step == 1 for step in stride):
        return array
    return array[(slice(None),) + tuple(slice(None, None, step) for step in stride)]


def _pointwise_data_gradient(attrs, dy, weight, dx):
    """dx of a 1x1 channel-last convolution: dy rows (N*H'*W', F) times the (F, C) weight,
    scattered to the strided positions (zeros elsewhere)."""
    w = weight.reshape((weight.shape[0], weight.shape[-1]))
    target = _sampled(attrs, dx)
    rows = reshape_view(target, (-1, dx.shape[-1]))
    if target is not dx:
        dx.fill(0)
    if rows is not None:
        np.matmul(_rows(dy), w, out=rows)
    else:
        target[...] = np.matmul(_rows(dy), w).reshape(target.shape)


def _pointwise_weight_gradient(attrs, dy, x, dweight, dbias):
    """dweight (F, 1.., C) of a 1x1 channel-last convolution: dy rows transposed times the
    rows of x it read; dbias the column sums of dy."""
    dy_rows = _rows(dy)
    x_rows = _rows(np.ascontiguousarray(_sampled(attrs, x)))
    target = reshape_view(dweight, (dweight.shape[0], dweight.shape[-1]))
    if target is not None:
        np.matmul(dy_rows.T, x_rows, out=target)
    else:
        dweight[...] = np.matmul(dy_rows.T, x_rows).reshape(dweight.shape)
    if dbias is not None:
        dbias[...] = dy_rows.sum(axis=0)


def backward_data(attrs, dy, weight, dx, ctx):
    """Convolution's data gradient by GEMM and col2im, in any array module."""
    if _pointwise_channel_last(attrs, ctx):
        _pointwise_data_gradient(attrs, dy, weight, dx)
        return
    xp, layout = ctx.xp, attrs['layout']
    dxc = channel_first(xp, dx, layout)
    window = conv_window('Convolution', attrs, dxc.shape[2:])
    conv_backward_data(xp, channel_first(xp, dy, layout), weight_channel_first(xp, weight, layout),
                       window, attrs['num_group'], dxc, ctx, workspace_bytes(attrs))


def backward_weights(attrs, dy, x, dweight, dbias, ctx):
    """Convolution's weight (and bias) gradient by im2col and GEMM, in any array module."""
    if _pointwise_channel_last(attrs, ctx):
        _pointwise_weight_gradient(attrs, dy, x, dweight, dbias)
        return
    xp, layout = ctx.xp, attrs['layout']
    dyc, xc = channel_first(xp, dy, layout), channel_first(xp, x, layout)
    window = conv_window('Convolution', attrs, xc.shape[2:])
    conv_backward_weight(xp, dyc, xc, window, attrs['num_group'],
                         weight_channel_first(xp, dweight, layout), ctx, workspace_bytes(attrs))
    if dbias is not None:
        dbias[...] = dyc.sum(axis=spatial_axes(dyc.ndim))
