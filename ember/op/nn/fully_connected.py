"""FullyConnected: y = x W^T + b, one GEMM (oneDNN's inner product where it runs)."""
from __future__ import annotations

from ember.base import prod
from ember.op.nn import onednn_provider
from ember.op.nn.convolution import weight_token
from ember.op.nn._common import assign_shape, outputs_of, reshape_view
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


def _rows(xp, attrs, array):
    return array.reshape((-1, _in_units(attrs, array.shape)))


def _kernel(attrs, ins, outs, ctx):
    bias = None if attrs['no_bias'] else ins[2]
    if onednn_provider.fully_connected_forward(attrs, ins[0], ins[1], bias, outs[0],
                                               weight_token(ctx, 1)):
        return
    xp, out = ctx.xp, outs[0]
    target = reshape_view(out, (-1, attrs['num_hidden']))
    result = xp.matmul(_rows(xp, attrs, ins[0]), ins[1].T, out=target)
    if target is None:
        out[...] = result.reshape(out.shape)
    if not attrs['no_bias']:
        out += ins[2]


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
         inputs=lambda attrs: ['data', 'weight'] + ([] if attrs['no_bias'] else ['bias']),
         doc='Dense layer: data (N, ...) times weight (num_hidden, in_units) transposed.')

register('_backward_FullyConnected', _backward_kernel, infer_shape=_backward_infer,
         infer_type=_backward_type, inputs=('out_grad', 'data', 'weight'),
         outputs=_grad_names, params=PARAMS)
