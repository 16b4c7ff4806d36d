"""FullyConnected: y = x W^T + b: the compiled dense kernel for a few rows, else one GEMM
(oneDNN's inner product where it runs)."""
from __future__ import annotations

import numpy as np

from ember.backend import native
from ember.base import prod
from ember.engine.threads import kernel_threads
from ember.op.nn import onednn_provider
from ember.op.nn._common import assign_shape, outputs_of, reshape_view, weight_token
from ember.op.nn.conv.compiled import run_compiled
from ember.op.registry import REQUIRED, Param, ShapeError, p_bool, p_int, register, same_type

PARAMS = (
    Param('num_hidden', p_int, REQUIRED, 'Output units.'),
    Param('no_bias', p_bool, False),
    Param('flatten', p_bool, True,
          'Flatten every axis after the first into the input units; else use the last axis.'),
)


def _in_units(attrs, data):
    return prod(data[1:]) if attrs['flatten'] else data[-1]


def _infer(attrs, in_shapes):
    op, in_shapes = 'FullyConnected', list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None]
    if len(data) < 1 or (attrs['flatten'] and len(data) < 2):
        raise ShapeError(f'{op}: data has shape {tuple(data)}; it needs a batch axis')
    units, hidden = _in_units(attrs, data), attrs['num_hidden']
    weight = in_shapes[1]
    if weight is not None and len(weight) == 2 and weight[1] != units:
        raise ShapeError(f'{op}: data {tuple(data)} has {units} input units, weight '
                         f'{tuple(weight)} expects {weight[1]}')
    assign_shape(op, in_shapes, 1, 'weight', (hidden, units))
    if not attrs['no_bias']:
        assign_shape(op, in_shapes, 2, 'bias', (hidden,))
    batch = (data[0],) if attrs['flatten'] else tuple(data[:-1])
    return in_shapes, [batch + (hidden,)]


def _data_from_output(attrs, in_shapes, out_shapes):
    """The output's batch axes are the data's (a zeros begin state of shape (0, H) learns its
    batch from the step it feeds)."""
    data, out = in_shapes[0], out_shapes[0]
    if out is None:
        return in_shapes
    if attrs['flatten']:
        if data is None or len(data) < 2:
            return in_shapes
        in_shapes[0] = (out[0],) + tuple(data[1:])
    else:
        in_shapes[0] = tuple(out[:-1]) + ((data[-1],) if data is not None else (0,))
    return in_shapes


def _rows(xp, attrs, array):
    return array.reshape((-1, _in_units(attrs, array.shape)))


_winograd = native.compiled_module('_winograd')

# Up to DENSE_MAX_ROWS rows (a batch of 1 to 4 images) on plain weights run on the compiled
# dense kernel (ember._winograd.dense), which reads every row of the weight once for all the
# rows: such a product runs at the memory's speed, faster than oneDNN's inner product on the
# plain weight and NumPy's matmul (benchmark_score.py alexnet). oneDNN on a kept blocked copy
# is as fast at one row and faster at 2 to 4 (onednn_provider's fc_blocked_min_rows); past 4
# rows the kernel would read the weight again for each 4 and oneDNN's GEMM does better.
DENSE_MAX_ROWS = 4
_DENSE_CHUNK = 32               # outputs a thread takes at a time


def _dense(rows, weight, bias, out_rows, relu) -> bool:
    """out_rows = relu?(rows @ weight^T + bias) on the compiled dense kernel, on every kernel
    thread; False (nothing done) where it does not run these arrays (an output that overlaps
    an input among them: the kernel reads the rows while it writes)."""
    arrays = (rows, weight, out_rows) + (() if bias is None else (bias,))
    if (_winograd is None or rows is None or out_rows is None
            or not 0 < rows.shape[0] <= DENSE_MAX_ROWS
            or not all(type(a) is np.ndarray and a.dtype == np.float32
                       and a.flags.c_contiguous for a in arrays)
            or any(np.may_share_memory(out_rows, a) for a in arrays[:2])):
        return False
    hidden = weight.shape[0]
    threads = max(1, min(kernel_threads(), -(-hidden // _DENSE_CHUNK)))
    claim = np.zeros(1, np.int64)
    run_compiled(_winograd.dense, rows.size * hidden,
                 [(rows, weight, bias, out_rows, relu, (0, hidden), _DENSE_CHUNK, claim)]
                 * threads)
    return True


def forward(attrs, ins, outs, ctx, relu=False) -> bool:
    """FullyConnected's forward of `ins` into `outs`; with `relu` (``_sg_fc``) also max(.,
    0) where the kernel that ran applies it. Returns whether it did."""
    bias, version = None if attrs['no_bias'] else ins[2], weight_token(ctx, 1)
    if ins[1].ndim == 2:
        rows, out_rows = onednn_provider.fc_rows(attrs, ins[0], ins[1], outs[0])
        if (rows is not None
                and (rows.shape[0] == 1 or not onednn_provider.fc_keeps_blocked(
                    rows.shape[0], ins[1], version))
                and _dense(rows, ins[1], bias, out_rows, relu)):
            return relu
    if onednn_provider.fully_connected_forward(attrs, ins[0], ins[1], bias, outs[0], version):
        return False
    xp, out = ctx.xp, outs[0]
    target = reshape_view(out, (-1, attrs['num_hidden']))
    result = xp.matmul(_rows(xp, attrs, ins[0]), ins[1].T, out=target)
    if target is None:
        out[...] = result.reshape(out.shape)
    if not attrs['no_bias']:
        out += ins[2]
    return False


def _kernel(attrs, ins, outs, ctx):
    forward(attrs, ins, outs, ctx)


def _backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, weight) -> data, weight (and bias) gradients."""
    bias_grad = None if attrs['no_bias'] else outs[2]
    if onednn_provider.fully_connected_backward(attrs, *ins, outs[0], outs[1], bias_grad):
        return
    xp = ctx.xp
    dy = ins[0].reshape((-1, attrs['num_hidden']))
    x, weight = _rows(xp, attrs, ins[1]), ins[2]
    outs[0][...] = xp.matmul(dy, weight).reshape(outs[0].shape)
    xp.matmul(dy.T, x, out=outs[1])
    if not attrs['no_bias']:
        dy.sum(axis=0, out=outs[2])


def _grad_names(attrs):
    names = ['data_grad', 'weight_grad']
    return names if attrs['no_bias'] else names + ['bias_grad']


def _backward_infer(attrs, in_shapes):
    outs = [in_shapes[1], in_shapes[2]]
    return list(in_shapes), outs if attrs['no_bias'] else outs + [(attrs['num_hidden'],)]


def _backward_type(attrs, in_dtypes):
    ins, outs = same_type(attrs, in_dtypes)
    return ins, outs * len(_grad_names(attrs))


def _gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_FullyConnected(out_grads[0], inputs[0], inputs[1], **attrs)
    return outputs_of(grads, len(_grad_names(attrs)))


register('FullyConnected', _kernel, infer_shape=_infer, params=PARAMS, gradient=_gradient,
         infer_shape_from_outputs=_data_from_output,
         inputs=lambda attrs: ['data', 'weight'] + ([] if attrs['no_bias'] else ['bias']),
         doc='Dense layer: data (N, ...) times weight (num_hidden, in_units) transposed.')

register('_backward_FullyConnected', _backward_kernel, infer_shape=_backward_infer,
         infer_type=_backward_type, inputs=('out_grad', 'data', 'weight'),
         outputs=_grad_names, params=PARAMS)
