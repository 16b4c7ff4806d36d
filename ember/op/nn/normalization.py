"""BatchNorm, LayerNorm, InstanceNorm and LRN; BatchNorm and LRN through oneDNN where it
runs, and BatchNorm of channel-first or channel-last float32 data through the compiled
``ember._kernels``."""
from __future__ import annotations

import math

import numpy as np

from ember import engine
from ember.backend import native
from ember.engine.threads import team_arguments
from ember.op.nn import onednn_provider
from ember.op.nn._common import accumulation_dtype, assign_shape, normalize_axis, outputs_of
from ember.op.reduce import reduced_shape
from ember.op.registry import (
    REQUIRED, Param, ShapeError, p_bool, p_enum, p_float, p_int, p_optional, register)

# BatchNorm's compiled kernels: a leaf C module that setup.py builds where it can; without it
# (no C compiler) the NumPy code runs
_kernels = native.compiled_module('_kernels')


def _param_dtype(dtype):
    """Scale, shift and statistics of 16-bit data are kept in float32, as MXNet does."""
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.kind == 'f' and dtype.itemsize < 4 else dtype


def _params_typed(num_params, num_outputs):
    """infer_type: data, then `num_params` float32-for-16-bit inputs; out 0 has data's dtype."""
    def infer(attrs, in_dtypes):
        data = in_dtypes[0]
        if data is None:
            return list(in_dtypes), [None] * num_outputs
        param = _param_dtype(data)
        ins = [data] + [d if d is not None else param for d in in_dtypes[1:1 + num_params]]
        return ins, [data] + [param] * (num_outputs - 1)
    return infer


def _broadcast_shape(ndim, axis, size):
    shape = [1] * ndim
    shape[axis] = size
    return tuple(shape)


def _other_axes(ndim, axis):
    return tuple(i for i in range(ndim) if i != axis)


def _normalized_grad(dxhat, xhat, invstd, axes):
    """Gradient through (x - mean(x)) * invstd(x) with statistics over `axes`."""
    mean_dxhat = dxhat.mean(axis=axes, keepdims=True)
    mean_both = (dxhat * xhat).mean(axis=axes, keepdims=True)
    return invstd * (dxhat - mean_dxhat - xhat * mean_both)


def _grads_like(indices):
    """infer_shape of a backward operator whose outputs are shaped like inputs `indices`."""
    def infer(attrs, in_shapes):
        return list(in_shapes), [in_shapes[i] for i in indices]
    return infer


def _backward_type(count):
    def infer(attrs, in_dtypes):
        data, param = in_dtypes[1], _param_dtype(in_dtypes[1])
        return list(in_dtypes), [data] + [param] * (count - 1)
    return infer


# ----------------------------------------------------------------------------------------------
# BatchNorm

BN_PARAMS = (
    Param('eps', p_float, 1e-3, 'Added to the variance before the square root.'),
    Param('momentum', p_float, 0.9, 'Decay of the moving statistics.'),
    Param('fix_gamma', p_bool, True, 'Use a scale of 1 and give gamma no gradient.'),
    Param('use_global_stats', p_bool, False, 'Normalise with the moving statistics in '
          'training too.'),
    Param('output_mean_var', p_bool, False, 'Also output the mean and inverse std used.'),
    Param('axis', p_int, 1, 'The channel axis.'),
    Param('cudnn_off', p_bool, False, 'Accepted for compatibility.'),
    Param('min_calib_range', p_optional(p_float), None, 'Accepted for compatibility.'),
    Param('max_calib_range', p_optional(p_float), None, 'Accepted for compatibility.'),
)


def _bn_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None] * 3
    axis = normalize_axis('BatchNorm', attrs['axis'], len(data))
    channels = (data[axis],)
    for index, name in enumerate(('gamma', 'beta', 'moving_mean', 'moving_var'), start=1):
        assign_shape('BatchNorm', in_shapes, index, name, channels)
    return in_shapes, [tuple(data), channels, channels]


def _uses_batch_stats(attrs, ctx):
    return ctx.is_train and not attrs['use_global_stats']


def _bn_kernel(attrs, ins, outs, ctx):
    """Training updates moving_mean and moving_var in place; outputs 1 and 2 are the mean and
    inverse standard deviation used (MXNet's layout)."""
    if _compiled_bn(attrs, ins, outs, ctx) or _onednn_bn(attrs, ins, outs, ctx):
        return
    x, gamma, beta, moving_mean, moving_var = ins
    axis = attrs['axis'] % x.ndim
    axes, acc = _other_axes(x.ndim, axis), accumulation_dtype(x.dtype, ctx.safe_accumulation)
    if _uses_batch_stats(attrs, ctx):
        mean, var = _batch_moments(x, axis, axes, acc)
        _update_moving(attrs, moving_mean, moving_var, mean, var)
    else:
        mean, var = moving_mean.astype(acc), moving_var.astype(acc)
    invstd = 1 / ctx.xp.sqrt(var + attrs['eps'])
    _normalize(attrs, x, gamma, beta, mean, invstd, outs[0])
    outs[1][...] = mean
    outs[2][...] = invstd


def _batch_moments(x, axis, axes, acc):
    """Per-channel mean and biased variance over `axes`. Channel-first contiguous data is
    reduced per block of channels, the blocks spread over the kernel threads (NumPy's
    mean/var over axes (0, 2, 3) ran on one thread at a third of the speed: 660 ms of a
    resnet50 training step at batch 16)."""
    if (not isinstance(x, np.ndarray) or axis != 1 or x.ndim < 3 or not x.flags.c_contiguous
            or acc != x.dtype or x.size == 0):
        return x.mean(axis=axes, dtype=acc), x.var(axis=axes, dtype=acc)
    rows = x.reshape(x.shape[0], x.shape[1], -1)
    count = rows.shape[0] * rows.shape[2]
    mean, var = np.empty(x.shape[1], acc), np.empty(x.shape[1], acc)

    def block(lo, hi):
        part = rows[:, lo:hi]
        centre = part.sum(axis=(0, 2)) / count
        deviation = part - centre[:, None]
        mean[lo:hi] = centre
        var[lo:hi] = np.einsum('nci,nci->c', deviation, deviation) / count
    engine.parallel_for(x.shape[1], block, split=x.size >= _SPLIT_SIZE and x.shape[1] > 1)
    return mean, var


_SPLIT_SIZE = 1 << 16        # elements: below it a split costs more than it saves


def _normalize(attrs, x, gamma, beta, mean, invstd, out):
    """out = x normalised with `mean` and `invstd`, scaled and shifted: the lines that
    ``_bn_apply`` repeats bit for bit when the mirror pass recomputes a training BatchNorm."""
    scale = invstd if attrs['fix_gamma'] else gamma * invstd
    shape = _broadcast_shape(x.ndim, attrs['axis'] % x.ndim, -1)
    scale, shift = scale.reshape(shape), (beta - mean * scale).reshape(shape)
    if out.dtype != scale.dtype or out.dtype != shift.dtype or x.dtype != out.dtype:
        out[...] = x * scale + shift
        return
    layout = _channel_layout(x, attrs['axis'] % x.ndim, out)
    if layout is not None:
        _normalize_compiled(x, scale.ravel(), shift.ravel(), out, layout)
        return
    # the same two roundings as x * scale + shift, without two full-size temporaries
    np.multiply(x, scale, out=out)
    np.add(out, shift, out=out)


def _update_moving(attrs, moving_mean, moving_var, mean, var):
    momentum = attrs['momentum']
    moving_mean[...] = moving_mean * momentum + mean * (1 - momentum)
    moving_var[...] = moving_var * momentum + var * (1 - momentum)


def _onednn_bn(attrs, ins, outs, ctx):
    """BatchNorm's forward pass through oneDNN; False when it declines.

    In training the output must equal, bit for bit, what ``_bn_apply`` recomputes from the
    mean and invstd (the mirror pass relies on it): oneDNN computes the batch statistics and
    the output is then normalised by :func:`_normalize`; with the moving statistics the
    NumPy kernel runs."""
    x, gamma, beta, moving_mean, moving_var = ins
    if not ctx.is_train:
        return onednn_provider.batch_norm_forward(attrs, x, gamma, beta, moving_mean,
                                                  moving_var, *outs)
    if attrs['use_global_stats']:
        return False
    var = np.empty_like(outs[2])
    if not onednn_provider.batch_norm_training_forward(attrs, x, gamma, beta, outs[0], outs[1],
                                                       var, ctx.safe_accumulation):
        return False
    _update_moving(attrs, moving_mean, moving_var, outs[1], var)
    invstd = 1 / ctx.xp.sqrt(var + attrs['eps'])
    _normalize(attrs, x, gamma, beta, outs[1], invstd, outs[0])
    outs[2][...] = invstd
    return True


def _bn_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, gamma, mean, invstd) -> data, gamma, beta gradients."""
    batch_stats = _uses_batch_stats(attrs, ctx)
    if _compiled_bn_backward(attrs, ins, outs, batch_stats):
        return
    if onednn_provider.batch_norm_backward(attrs, *ins, *outs, batch_stats):
        return
    dy, x, gamma, mean, invstd = ins
    axis = attrs['axis'] % x.ndim
    axes, shape = _other_axes(x.ndim, axis), _broadcast_shape(x.ndim, axis, -1)
    scale = 1 if attrs['fix_gamma'] else gamma.reshape(shape)
    invstd = invstd.reshape(shape)
    xhat = (x - mean.reshape(shape)) * invstd
    if _uses_batch_stats(attrs, ctx):
        outs[0][...] = _normalized_grad(dy * scale, xhat, invstd, axes)
    else:
        outs[0][...] = dy * (scale * invstd)
    if attrs['fix_gamma']:
        outs[1].fill(0)
    else:
        outs[1][...] = (dy * xhat).sum(axis=axes)
    outs[2][...] = dy.sum(axis=axes)


# ----------------------------------------------------------------------------------------------
# BatchNorm through ember._kernels: float32 data, channel-first (a channel's passes one after the
# other while its rows stay in cache, channels split across the kernel threads) or channel-last
# (passes over the rows; large data split across the threads by rows, see _train_by_rows).
# Each channel's result is independent of the split, so it is deterministic.
#
# The row splits of channel-last data run on the calling thread's OpenMP team where the module
# has one (_kernels.openmp; see ember/_team.h): the threads oneDNN's convolution before them
# just ran on, still spinning. The kernel pool's threads sleep between splits, and on a virtual
# machine waking one cost more than the split gained on resnet50_v1's 14x14 and 7x7 layers
# (0.3 ms a split at batch 16).

# values per channel and sample: a row shorter than a cache line shares its lines with other
# channels, so a channel's passes would read the lines of its neighbours too. Channel-last data
# (rows of one value) is taken: its kernels work on neighbouring channels side by side.
_MIN_ROW = 16


def _channel_layout(x, axis, *alike):
    """``(outer, channels, inner)`` of float32 C-contiguous NumPy `x` (and the arrays `alike`,
    shaped like it) with `axis` as channels, when the compiled kernels take it, else None."""
    arrays = (x,) + alike
    if _kernels is None or not all(_is_float32(a) and a.shape == x.shape for a in arrays):
        return None
    inner = math.prod(x.shape[axis + 1:])     # np.prod of a tuple costs ~10 us a call
    if x.size == 0 or 1 < inner < _MIN_ROW:
        return None
    return x.size // (x.shape[axis] * inner), x.shape[axis], inner


def _is_float32(array):
    return (isinstance(array, np.ndarray) and array.dtype == np.float32
            and array.flags.c_contiguous)


def _is_large(layout):
    outer, channels, inner = layout
    return outer * channels * inner >= _SPLIT_SIZE


def _over_channels(layout, fn):
    """``fn(lo, hi)`` over every channel, split across the kernel threads when large."""
    engine.parallel_for(layout[1], fn, split=_is_large(layout) and layout[1] > 1)


def _by_rows(layout):
    """Whether channel-last data is large enough to split across the threads by rows."""
    return layout[2] == 1 and _is_large(layout)


# Whether the row splits use the OpenMP team where the module has one (tests turn it off to run
# the kernel-pool path).
use_team = True


def _team():
    """Keyword arguments that split a compiled kernel's rows on the calling thread's OpenMP team
    as ``parallel_for`` would split them across the kernel threads, or None where the module
    has no team (or tests turned it off): then the kernel pool splits them."""
    return team_arguments() if use_team and _kernels.openmp else None


def _over_rows(layout, fn, *arrays):
    """``fn(*parts, part_layout)`` over ranges of rows of the channel-last `arrays`, split
    across the kernel threads."""
    outer, channels, _ = layout
    rows = [a.reshape(outer, channels) for a in arrays]

    def run(lo, hi):
        if lo < hi:
            fn(*(r[lo:hi] for r in rows), (hi - lo, channels, 1))
    engine.parallel_for(outer, run, split=True)


def _normalize_compiled(x, scale, shift, out, layout, relu=False, residual=None):
    scale, shift = np.ascontiguousarray(scale), np.ascontiguousarray(shift)
    team = _by_rows(layout) and _team()
    if team:
        _kernels.bn_normalize(x, out, scale, shift, layout, 0, layout[1], relu, residual,
                              **team)
        return
    if _by_rows(layout):
        arrays = (x, out) if residual is None else (x, out, residual)
        _over_rows(layout, lambda rows, out_rows, *more: _kernels.bn_normalize(
            rows, out_rows, scale, shift, more[-1], 0, layout[1], relu,
            more[0] if residual is not None else None), *arrays)
        return
    _over_channels(layout, lambda lo, hi: _kernels.bn_normalize(
        x, out, scale, shift, layout, lo, hi, relu, residual))


def _compiled_bn(attrs, ins, outs, ctx, relu=False, residual=None):
    """Training BatchNorm with the batch statistics, each channel read from memory once; False
    when the compiled kernels do not take the call. Under ``MXNET_SAFE_ACCUMULATION`` the
    NumPy code runs, in float64. The output is the one :func:`_normalize` gives for the mean
    and invstd written (the kernel repeats its float32 operations); with `residual` (shaped
    like x) that plus it, and with `relu` np.maximum of it and 0, each rounded in turn (in the
    normalisation pass when the data is split by rows, else after it)."""
    x, gamma, beta, moving_mean, moving_var = ins[:5]
    if not _uses_batch_stats(attrs, ctx) or ctx.safe_accumulation:
        return False
    extra = () if residual is None else (residual,)
    layout = _channel_layout(x, attrs['axis'] % x.ndim, outs[0], *extra)
    if layout is None or not all(_is_float32(v) for v in (gamma, beta)):
        return False
    if _by_rows(layout):
        mean, var, invstd = _train_by_rows(x, outs[0], gamma, beta, attrs, layout, relu,
                                           residual)
    else:
        mean, var, invstd = (np.empty(layout[1], np.float32) for _ in range(3))
        _over_channels(layout, lambda lo, hi: _kernels.bn_train_forward(
            x, outs[0], gamma, beta, mean, var, invstd, layout, lo, hi, attrs['eps'],
            attrs['fix_gamma']))
        _add_relu_after(outs[0], residual, relu)
    _update_moving(attrs, moving_mean, moving_var, mean, var)
    outs[1][...] = mean
    outs[2][...] = invstd
    return True


def _compiled_bn_backward(attrs, ins, outs, batch_stats):
    """BatchNorm's gradients with each channel's rows read from memory once; False when the
    compiled kernels do not take the call."""
    dy, x, gamma, mean, invstd = ins
    layout = _channel_layout(x, attrs['axis'] % x.ndim, dy, outs[0])
    vectors = (gamma, mean, invstd, outs[1], outs[2])
    if layout is None or not all(_is_float32(v) for v in vectors):
        return False
    if _by_rows(layout):
        _backward_by_rows(ins, outs, attrs['fix_gamma'], batch_stats, layout)
        return True
    _over_channels(layout, lambda lo, hi: _kernels.bn_backward(
        dy, x, gamma, mean, invstd, *outs, layout, lo, hi, attrs['fix_gamma'], batch_stats))
    return True


# Large channel-last data is split across the threads by rows: a thread given some of the
# channels would read part of every row, and the hardware prefetchers fetch the rest of the row
# too (on 2 cores a split of the channels took longer than one thread). The sums go by chunks of
# rows, added in order, and the float32 operations after them are bn_train_forward's and
# bn_backward's, so the results are those of the kernels for every channel in one call, whatever
# the split.

def _chunk_sums(x, dy, centre, layout, chunks, mask=()):
    """Each channel's two sums (see bn_chunk_sums, with its `mask` arguments) over the first
    `chunks` chunks of rows: the chunks across the kernel threads, then added one after the
    other, as the kernels add them."""
    part = np.empty((_chunks(layout), 2, layout[1]))
    team = chunks > 1 and _team()
    if team:
        _kernels.bn_chunk_sums(x, dy, centre, part, layout, 0, chunks, *mask, **team)
    else:
        engine.parallel_for(chunks, lambda lo, hi: _kernels.bn_chunk_sums(
            x, dy, centre, part, layout, lo, hi, *mask), split=chunks > 1)
    # a reduction over the outer axis adds the chunks one after the other, in order, as the
    # loop over them that it replaces did (98 np.add calls at 56x56, batch 16)
    return np.add.reduce(part[:chunks], axis=0)


def _chunks(layout):
    return -(-layout[0] // _kernels.CHUNK_ROWS)


def _moments_by_rows(x, layout):
    """channel_moments of every channel: the mean and biased variance, float32."""
    outer, channels, _ = layout
    first = _chunk_sums(x, None, np.zeros(channels, np.float32), layout, 1)
    centre = (first[0] / min(outer, _kernels.CHUNK_ROWS)).astype(np.float32)
    dev = _chunk_sums(x, None, centre, layout, _chunks(layout))
    far = dev[0] * dev[0] / outer > dev[1] / 2
    if far.any():
        # those channels' deviations from their mean instead; the others get theirs again
        centre = np.where(far, (centre + dev[0] / outer).astype(np.float32), centre)
        dev = _chunk_sums(x, None, centre, layout, _chunks(layout))
    spread = (dev[1] - dev[0] * dev[0] / outer) / outer
    mean = (centre + dev[0] / outer).astype(np.float32)
    return mean, np.where(spread > 0, spread, 0).astype(np.float32)


def _train_by_rows(x, out, gamma, beta, attrs, layout, relu=False, residual=None):
    """bn_train_forward of every channel: the mean, biased variance and invstd, with `out`
    written (plus `residual`, through relu with `relu`)."""
    mean, var = _moments_by_rows(x, layout)
    invstd = np.float32(1) / np.sqrt(var + np.float32(attrs['eps']))
    _normalize_compiled(x, *_scale_shift(attrs['fix_gamma'], gamma, beta, mean, invstd), out,
                        layout, relu, residual)
    return mean, var, invstd


def _add_relu_after(out, residual, relu, xp=np):
    """out += residual, then relu, in place: the passes that the compiled normalisation
    takes in where it can."""
    if residual is not None:
        xp.add(out, residual, out=out)
    if relu:
        xp.maximum(out, 0, out=out)


def _scale_shift(fix_gamma, gamma, beta, mean, invstd):
    """The float32 per-channel scale and shift of the normalisation, ``x * scale + shift``."""
    scale = invstd if fix_gamma else gamma * invstd
    return scale, beta - mean * scale


def _backward_by_rows(ins, outs, fix_gamma, batch_stats, layout, mask=()):
    """bn_backward of every channel; `mask`, (scale, shift), first takes dy through relu's
    gradient where ``x * scale + shift > 0`` (see BatchNormWithReLU)."""
    dy, x, gamma, mean, invstd = ins
    outer = layout[0]
    sums = _chunk_sums(x, dy, mean, layout, _chunks(layout), mask)
    wide = invstd.astype(np.float64)
    dgamma = sums[1] * wide
    scale = invstd if fix_gamma else gamma * invstd
    mean_dy = (sums[0] / outer).astype(np.float32)
    slope = (dgamma * wide / outer).astype(np.float32)
    team = _team()
    if team:
        _kernels.bn_data_grad(dy, x, mean, mean_dy, slope, scale, outs[0], layout, batch_stats,
                              *mask, **team)
    else:
        _over_rows(layout, lambda dy_rows, rows, dx_rows, part: _kernels.bn_data_grad(
            dy_rows, rows, mean, mean_dy, slope, scale, dx_rows, part, batch_stats, *mask),
            dy, x, outs[0])
    outs[1][...] = 0 if fix_gamma else dgamma
    outs[2][...] = sums[0]


def _bn_gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_BatchNorm(out_grads[0], inputs[0], inputs[1], outputs[1], outputs[2],
                                  **attrs)
    return outputs_of(grads, 3) + [None, None]


register('BatchNorm', _bn_kernel, infer_shape=_bn_infer, infer_type=_params_typed(4, 3),
         inputs=('data', 'gamma', 'beta', 'moving_mean', 'moving_var'),
         outputs=('output', 'mean', 'var'),
         visible_outputs=lambda attrs: 3 if attrs['output_mean_var'] else 1,
         params=BN_PARAMS, gradient=_bn_gradient, mutate=(3, 4),
         aux=('moving_mean', 'moving_var'),
         doc='Batch normalisation over every axis but `axis`; training uses the batch '
             'statistics and updates the moving ones in place.')

register('_backward_BatchNorm', _bn_backward_kernel, infer_shape=_grads_like((1, 2, 2)),
         infer_type=_backward_type(3), inputs=('out_grad', 'data', 'gamma', 'mean', 'invstd'),
         outputs=('data_grad', 'gamma_grad', 'beta_grad'), params=BN_PARAMS)


# ----------------------------------------------------------------------------------------------
# BatchNormWithReLU (MXNet's contrib operator): relu(BatchNorm(x)) as one operator. Training
# graphs get it for every BatchNorm whose output only a relu reads (ember.passes.subgraph): on
# large channel-last float32 data the relu costs no pass of its own, forward (inside the
# normalisation) or backward (the mask is recomputed from the input, x * scale + shift with
# the forward pass's float32 operations, where the sums and the data gradient read x anyway).
# Elsewhere the relu and its gradient are one pass each, as the two operators would be; the
# results are those of BatchNorm then relu, bit for bit.

def _bn_relu_kernel(attrs, ins, outs, ctx):
    if _compiled_bn(attrs, ins, outs, ctx, relu=True):
        return
    _bn_kernel(attrs, ins, outs, ctx)
    _add_relu_after(outs[0], None, True, ctx.xp)


def _bn_relu_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, gamma, beta, mean, invstd, output) -> data, gamma, beta
    gradients."""
    dy, x, gamma, beta, mean, invstd, output = ins
    batch_stats = _uses_batch_stats(attrs, ctx)
    layout = _channel_layout(x, attrs['axis'] % x.ndim, dy, outs[0])
    vectors = (gamma, beta, mean, invstd, outs[1], outs[2])
    # the compiled forward pass normalised with these very float32 constants
    if (layout is not None and _by_rows(layout) and batch_stats and not ctx.safe_accumulation
            and all(_is_float32(v) for v in vectors)):
        mask = tuple(np.ascontiguousarray(v) for v in _scale_shift(
            attrs['fix_gamma'], gamma, beta, mean, invstd))
        _backward_by_rows((dy, x, gamma, mean, invstd), outs, attrs['fix_gamma'], batch_stats,
                          layout, mask)
        return
    _bn_backward_kernel(attrs, [dy * (output > 0), x, gamma, mean, invstd], outs, ctx)


def _bn_relu_gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_BatchNormWithReLU(out_grads[0], inputs[0], inputs[1], inputs[2],
                                          outputs[1], outputs[2], outputs[0], **attrs)
    return outputs_of(grads, 3) + [None, None]


register('_contrib_BatchNormWithReLU', _bn_relu_kernel, infer_shape=_bn_infer,
         infer_type=_params_typed(4, 3),
         inputs=('data', 'gamma', 'beta', 'moving_mean', 'moving_var'),
         outputs=('output', 'mean', 'var'),
         visible_outputs=lambda attrs: 3 if attrs['output_mean_var'] else 1,
         params=BN_PARAMS, gradient=_bn_relu_gradient, mutate=(3, 4),
         aux=('moving_mean', 'moving_var'),
         doc='BatchNorm followed by relu, as one operator (MXNet\'s contrib operator).')

register('_backward_BatchNormWithReLU', _bn_relu_backward_kernel,
         infer_shape=_grads_like((1, 2, 2)), infer_type=_backward_type(3),
         inputs=('out_grad', 'data', 'gamma', 'beta', 'mean', 'invstd', 'output'),
         outputs=('data_grad', 'gamma_grad', 'beta_grad'), params=BN_PARAMS)


# ----------------------------------------------------------------------------------------------
# _sg_bn_add_relu: relu(BatchNorm(x) + residual), a residual block's end in a training graph
# (ember.passes.subgraph), the sum and the relu inside the compiled normalisation pass of large
# channel-last data: BatchNorm's output is never written or read back. Its gradient is relu's
# gradient, which is also the residual's, then BatchNorm's: the operators it replaced.

def _bn_add_relu_kernel(attrs, ins, outs, ctx):
    if _compiled_bn(attrs, ins, outs, ctx, relu=True, residual=ins[5]):
        return
    _bn_kernel(attrs, ins[:5], outs, ctx)
    _add_relu_after(outs[0], ins[5], True, ctx.xp)


def _bn_add_relu_gradient(F, attrs, inputs, outputs, out_grads):
    through = F._backward_Activation(out_grads[0], outputs[0], act_type='relu')
    grads = F._backward_BatchNorm(through, inputs[0], inputs[1], outputs[1], outputs[2],
                                  **attrs)
    return outputs_of(grads, 3) + [None, None, through]


def _bn_add_relu_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    if in_shapes[0] is None:
        in_shapes[0] = in_shapes[5]
    ins, outs = _bn_infer(attrs, in_shapes[:5])
    ins = list(ins) + [in_shapes[5]]
    if ins[0] is not None:
        assign_shape('_sg_bn_add_relu', ins, 5, 'residual', ins[0])
    return ins, outs


def _bn_add_relu_type(attrs, in_dtypes):
    ins, outs = _params_typed(4, 3)(attrs, in_dtypes[:5])
    return list(ins) + [in_dtypes[5] if in_dtypes[5] is not None else ins[0]], outs


register('_sg_bn_add_relu', _bn_add_relu_kernel, infer_shape=_bn_add_relu_infer,
         infer_type=_bn_add_relu_type,
         inputs=('data', 'gamma', 'beta', 'moving_mean', 'moving_var', 'residual'),
         outputs=('output', 'mean', 'var'),
         visible_outputs=lambda attrs: 3 if attrs['output_mean_var'] else 1,
         params=BN_PARAMS, gradient=_bn_add_relu_gradient, mutate=(3, 4),
         aux=('moving_mean', 'moving_var'),
         doc='relu(BatchNorm(data) + residual), residual shaped like data (emitted by the '
             'subgraph pass for training graphs).')


# ----------------------------------------------------------------------------------------------
# LayerNorm

LN_PARAMS = (
    Param('axis', p_int, -1, 'The axis normalised over.'),
    Param('eps', p_float, 1e-5),
    Param('output_mean_var', p_bool, False, 'Also output the mean and standard deviation.'),
)


def _ln_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None] * 3
    axis = normalize_axis('LayerNorm', attrs['axis'], len(data))
    assign_shape('LayerNorm', in_shapes, 1, 'gamma', (data[axis],))
    assign_shape('LayerNorm', in_shapes, 2, 'beta', (data[axis],))
    stats = tuple(1 if i == axis else n for i, n in enumerate(data))
    return in_shapes, [tuple(data), stats, stats]


def _ln_kernel(attrs, ins, outs, ctx):
    x, gamma, beta = ins
    axis = attrs['axis'] % x.ndim
    acc = accumulation_dtype(x.dtype, ctx.safe_accumulation)
    mean = x.mean(axis=axis, keepdims=True, dtype=acc)
    std = ctx.xp.sqrt(x.var(axis=axis, keepdims=True, dtype=acc) + attrs['eps'])
    shape = _broadcast_shape(x.ndim, axis, -1)
    outs[0][...] = (x - mean) / std * gamma.reshape(shape) + beta.reshape(shape)
    outs[1][...] = mean
    outs[2][...] = std


def _ln_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, gamma, mean, std) -> data, gamma, beta gradients."""
    dy, x, gamma, mean, std = ins
    axis = attrs['axis'] % x.ndim
    shape, others = _broadcast_shape(x.ndim, axis, -1), _other_axes(x.ndim, axis)
    xhat = (x - mean) / std
    outs[0][...] = _normalized_grad(dy * gamma.reshape(shape), xhat, 1 / std, axis)
    outs[1][...] = (dy * xhat).sum(axis=others)
    outs[2][...] = dy.sum(axis=others)


def _ln_gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_LayerNorm(out_grads[0], inputs[0], inputs[1], outputs[1], outputs[2],
                                  **attrs)
    return outputs_of(grads, 3)


register('LayerNorm', _ln_kernel, infer_shape=_ln_infer, infer_type=_params_typed(2, 3),
         inputs=('data', 'gamma', 'beta'), outputs=('output', 'mean', 'std'),
         visible_outputs=lambda attrs: 3 if attrs['output_mean_var'] else 1,
         params=LN_PARAMS, gradient=_ln_gradient,
         doc='Layer normalisation over `axis`, scaled by gamma and shifted by beta.')

register('_backward_LayerNorm', _ln_backward_kernel, infer_shape=_grads_like((1, 2, 2)),
         infer_type=_backward_type(3), inputs=('out_grad', 'data', 'gamma', 'mean', 'std'),
         outputs=('data_grad', 'gamma_grad', 'beta_grad'), params=LN_PARAMS)


# ----------------------------------------------------------------------------------------------
# InstanceNorm

IN_PARAMS = (Param('eps', p_float, 1e-3),)


def _in_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None] * 3
    if len(data) < 3:
        raise ShapeError(f'InstanceNorm: data has shape {tuple(data)}; expected (N, C, ...) '
                         'with at least one spatial axis')
    assign_shape('InstanceNorm', in_shapes, 1, 'gamma', (data[1],))
    assign_shape('InstanceNorm', in_shapes, 2, 'beta', (data[1],))
    return in_shapes, [tuple(data), tuple(data[:2]), tuple(data[:2])]


def _spatial(ndim):
    return tuple(range(2, ndim))


def _in_kernel(attrs, ins, outs, ctx):
    x, gamma, beta = ins
    axes, acc = _spatial(x.ndim), accumulation_dtype(x.dtype, ctx.safe_accumulation)
    mean, var = x.mean(axis=axes, dtype=acc), x.var(axis=axes, dtype=acc)
    shape = x.shape[:2] + (1,) * (x.ndim - 2)
    invstd = 1 / ctx.xp.sqrt(var.reshape(shape) + attrs['eps'])
    channel = (1, -1) + (1,) * (x.ndim - 2)
    outs[0][...] = (x - mean.reshape(shape)) * invstd * gamma.reshape(channel) \
        + beta.reshape(channel)
    outs[1][...] = mean
    outs[2][...] = var


def _in_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, gamma, mean, var) -> data, gamma, beta gradients."""
    dy, x, gamma, mean, var = ins
    axes = _spatial(x.ndim)
    shape, channel = x.shape[:2] + (1,) * (x.ndim - 2), (1, -1) + (1,) * (x.ndim - 2)
    invstd = 1 / ctx.xp.sqrt(var.reshape(shape) + attrs['eps'])
    xhat = (x - mean.reshape(shape)) * invstd
    outs[0][...] = _normalized_grad(dy * gamma.reshape(channel), xhat, invstd, axes)
    outs[1][...] = (dy * xhat).sum(axis=(0,) + axes)
    outs[2][...] = dy.sum(axis=(0,) + axes)


def _in_gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_InstanceNorm(out_grads[0], inputs[0], inputs[1], outputs[1],
                                     outputs[2], **attrs)
    return outputs_of(grads, 3)


register('InstanceNorm', _in_kernel, infer_shape=_in_infer, infer_type=_params_typed(2, 3),
         inputs=('data', 'gamma', 'beta'), outputs=('output', 'mean', 'var'),
         visible_outputs=1, params=IN_PARAMS, gradient=_in_gradient,
         doc='Normalises each (sample, channel) over the spatial axes.')

register('_backward_InstanceNorm', _in_backward_kernel, infer_shape=_grads_like((1, 2, 2)),
         infer_type=_backward_type(3), inputs=('out_grad', 'data', 'gamma', 'mean', 'var'),
         outputs=('data_grad', 'gamma_grad', 'beta_grad'), params=IN_PARAMS)


# ----------------------------------------------------------------------------------------------
# LRN: local response normalisation across channels.

LRN_PARAMS = (
    Param('alpha', p_float, 1e-4),
    Param('beta', p_float, 0.75),
    Param('knorm', p_float, 2.0),
    Param('nsize', p_int, REQUIRED, 'Channels in the window (odd).'),
)


def _lrn_infer(attrs, in_shapes):
    data = in_shapes[0]
    if attrs['nsize'] < 1 or attrs['nsize'] % 2 == 0:
        raise ShapeError(f'LRN: nsize={attrs["nsize"]} must be a positive odd number')
    if data is not None and len(data) < 2:
        raise ShapeError(f'LRN: data has shape {tuple(data)}; expected (N, C, ...)')
    return list(in_shapes), [data, data]


def _channel_window_sum(xp, values, nsize):
    """Sum of `values` over a window of `nsize` channels centred on each channel."""
    half, channels = nsize // 2, values.shape[1]
    padded = xp.zeros((values.shape[0], channels + 2 * half) + values.shape[2:], values.dtype)
    padded[:, half:half + channels] = values
    total = padded[:, :channels].copy()
    for offset in range(1, nsize):
        total += padded[:, offset:offset + channels]
    return total


def _lrn_norm(attrs, xp, x):
    return attrs['knorm'] + attrs['alpha'] / attrs['nsize'] * _channel_window_sum(
        xp, x * x, attrs['nsize'])


def _lrn_kernel(attrs, ins, outs, ctx):
    """Output 1 is the normaliser (MXNet's tmp_norm); oneDNN does not write it, so the
    backward pass recomputes it from the data rather than read it."""
    x = ins[0]
    if onednn_provider.lrn_forward(attrs, x, outs[0]):
        return
    norm = _lrn_norm(attrs, ctx.xp, x)
    outs[1][...] = norm
    outs[0][...] = x * norm ** -attrs['beta']


def _lrn_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, tmp_norm); the normaliser is recomputed from the data (see
    the forward kernel)."""
    dy, x = ins[:2]
    norm = _lrn_norm(attrs, ctx.xp, x)
    beta, nsize = attrs['beta'], attrs['nsize']
    through_norm = _channel_window_sum(ctx.xp, dy * x * norm ** (-beta - 1), nsize)
    outs[0][...] = dy * norm ** -beta - 2 * beta * attrs['alpha'] / nsize * x * through_norm


def _lrn_gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_LRN(out_grads[0], inputs[0], outputs[1], **attrs)]


register('LRN', _lrn_kernel, infer_shape=_lrn_infer, outputs=('output', 'tmp_norm'),
         visible_outputs=1, params=LRN_PARAMS, gradient=_lrn_gradient,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]] * 2),
         doc='out = x / (knorm + alpha / nsize * sum of x^2 over nsize channels) ** beta.')

register('_backward_LRN', _lrn_backward_kernel, inputs=('out_grad', 'data', 'tmp_norm'),
         infer_shape=_grads_like((1,)), outputs=('data_grad',), params=LRN_PARAMS,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]))


# ----------------------------------------------------------------------------------------------
# L2Normalization

_L2_MODES = p_enum('instance', 'channel', 'spatial')


def l2_axes(mode, ndim):
    """The axes L2Normalization's norm runs over in `mode` for `ndim`-D data."""
    return {'instance': tuple(range(1, ndim)), 'channel': (1,),
            'spatial': tuple(range(2, ndim))}[mode]


def _l2_axes_kwargs(mode):
    """The same axes as reduction arguments that need no ndim (for gradients of symbols)."""
    return {'instance': {'axis': (0,), 'exclude': True}, 'channel': {'axis': (1,)},
            'spatial': {'axis': (0, 1), 'exclude': True}}[mode]


def _l2_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None, None]
    least = 3 if attrs['mode'] == 'spatial' else 2
    if len(data) < least:
        raise ShapeError(f"L2Normalization: mode={attrs['mode']!r} needs data of at least "
                         f'{least} dimensions, got shape {tuple(data)}')
    axes = l2_axes(attrs['mode'], len(data))
    return list(in_shapes), [tuple(data), reduced_shape(data, axes, False)]


def _l2_kernel(attrs, ins, outs, ctx):
    xp, x = ctx.xp, ins[0]
    axes = l2_axes(attrs['mode'], x.ndim)
    wide = x.astype(accumulation_dtype(x.dtype, ctx.safe_accumulation), copy=False)
    norm = xp.sqrt((wide * wide).sum(axis=axes, keepdims=True) + attrs['eps'])
    outs[0][...] = wide / norm
    outs[1][...] = norm.reshape(outs[1].shape)


def _l2_gradient(F, attrs, inputs, outputs, out_grads):
    # d(x/n) = (g - y * sum(g * y)) / n, with the sums over the normalised axes
    x, y, g = inputs[0], outputs[0], out_grads[0]
    axes = _l2_axes_kwargs(attrs['mode'])
    dot = F.sum(g * y, keepdims=True, **axes)
    norm = F.sqrt(F.sum(F.square(x), keepdims=True, **axes) + attrs['eps'])
    return [F.broadcast_div(g - F.broadcast_mul(y, dot), norm)]


register('L2Normalization', _l2_kernel, infer_shape=_l2_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0], dt[0]]),
         outputs=('output', 'norm'), visible_outputs=1, gradient=_l2_gradient,
         params=(Param('eps', p_float, 1e-10, 'added to the sum of squares'),
                 Param('mode', _L2_MODES, 'instance', 'instance: each sample; channel: across '
                       'channels at each position; spatial: each channel across positions')),
         doc='x / sqrt(sum(x**2) + eps) over the axes that `mode` names.')
