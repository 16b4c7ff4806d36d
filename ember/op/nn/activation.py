"""Activation and LeakyReLU, and the activation functions the element-wise family shares.
Large arrays go through oneDNN where it runs."""
from __future__ import annotations

import math

from ember.op.nn import _special, onednn_provider
from ember.op.nn._common import assign_shape, outputs_of
from ember.op.registry import REQUIRED, Param, ShapeError, p_enum, p_float, register

__all__ = ['ACTIVATIONS', 'relu', 'sigmoid', 'softrelu', 'softsign']

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_LAMBDA = 1.0507009873554804934193349852946


def relu(xp, x):
    return xp.maximum(x, 0)


def sigmoid(xp, x):
    return 0.5 * (1 + xp.tanh(0.5 * x))  # no overflow for large |x|


def softrelu(xp, x):
    return xp.logaddexp(0, x)


def softsign(xp, x):
    return x / (1 + xp.abs(x))


# name -> (forward f(xp, x), derivative from the output g(xp, y)); every derivative here needs
# only the output, so the forward may overwrite its input.
ACTIVATIONS = {
    'relu': (relu, lambda xp, y: y > 0),
    'sigmoid': (sigmoid, lambda xp, y: y * (1 - y)),
    'tanh': (lambda xp, x: xp.tanh(x), lambda xp, y: 1 - y * y),
    'softrelu': (softrelu, lambda xp, y: -xp.expm1(-y)),
    'softsign': (softsign, lambda xp, y: (1 - xp.abs(y)) ** 2),
}

ACT_PARAMS = (Param('act_type', p_enum(*ACTIVATIONS), REQUIRED,
                    'relu, sigmoid, tanh, softrelu (log(1 + exp(x))) or softsign.'),)


def _act_kernel(attrs, ins, outs, ctx):
    if onednn_provider.activation_forward(attrs, ins[0], outs[0]):
        return
    outs[0][...] = ACTIVATIONS[attrs['act_type']][0](ctx.xp, ins[0])


def _act_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, output)."""
    if onednn_provider.activation_backward(attrs, ins[0], ins[1], outs[0]):
        return
    outs[0][...] = ins[0] * ACTIVATIONS[attrs['act_type']][1](ctx.xp, ins[1])


def _act_gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_Activation(out_grads[0], outputs[0], **attrs)]


register('Activation', _act_kernel, params=ACT_PARAMS, gradient=_act_gradient,
         inplace=((0, 0),), elemwise=True,
         doc='Element-wise activation: relu, sigmoid, tanh, softrelu or softsign.')

register('_backward_Activation', _act_backward_kernel, inputs=('out_grad', 'output'),
         outputs=('data_grad',), params=ACT_PARAMS, inplace=((0, 0),), elemwise=True)


# ----------------------------------------------------------------------------------------------
# LeakyReLU family.

LEAKY_PARAMS = (
    Param('act_type', p_enum('leaky', 'prelu', 'elu', 'selu', 'gelu', 'rrelu'), 'leaky'),
    Param('slope', p_float, 0.25, 'Negative slope of leaky; alpha of elu.'),
    Param('lower_bound', p_float, 0.125, 'rrelu: lowest random slope.'),
    Param('upper_bound', p_float, 0.334, 'rrelu: highest random slope.'),
)


def _leaky_inputs(attrs):
    return ['data', 'gamma'] if attrs['act_type'] == 'prelu' else ['data']


def _leaky_outputs(attrs):
    return ['output', 'mask'] if attrs['act_type'] == 'rrelu' else ['output']


def _leaky_infer(attrs, in_shapes):
    if attrs['act_type'] == 'rrelu' and attrs['lower_bound'] > attrs['upper_bound']:
        raise ShapeError(f'LeakyReLU: lower_bound={attrs["lower_bound"]} exceeds '
                         f'upper_bound={attrs["upper_bound"]}')
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    outs = [data] * len(_leaky_outputs(attrs))
    if data is None or attrs['act_type'] != 'prelu':
        return in_shapes, outs
    channels = data[1] if len(data) > 1 else 1
    if in_shapes[1] is not None and tuple(in_shapes[1]) == (1,):
        return in_shapes, outs
    assign_shape('LeakyReLU', in_shapes, 1, 'gamma (1 or one per channel)', (channels,))
    return in_shapes, outs


def _channel_gamma(gamma, ndim):
    return gamma.reshape((1, -1) + (1,) * (ndim - 2)) if ndim > 1 else gamma


def _gelu(xp, x):
    return 0.5 * x * (1 + _special.erf(xp, x / math.sqrt(2)))


def _gelu_slope(xp, x):
    return (0.5 * (1 + _special.erf(xp, x / math.sqrt(2)))
            + x * xp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))


def _rrelu_mask(attrs, x, ctx):
    low, high = attrs['lower_bound'], attrs['upper_bound']
    if not ctx.is_train:
        return (low + high) / 2
    uniform = ctx.random.generator.random(x.shape, dtype=_draw_dtype(x.dtype))
    return low + (high - low) * uniform


def _draw_dtype(dtype):
    return dtype if dtype.kind == 'f' and dtype.itemsize == 8 else 'float32'


def _leaky_kernel(attrs, ins, outs, ctx):
    if onednn_provider.leaky_relu_forward(attrs, ins[0], outs[0]):
        return
    xp, x, kind = ctx.xp, ins[0], attrs['act_type']
    positive = x > 0
    if kind == 'gelu':
        outs[0][...] = _gelu(xp, x)
    elif kind in ('elu', 'selu'):
        alpha, scale = (attrs['slope'], 1) if kind == 'elu' else (_SELU_ALPHA, _SELU_LAMBDA)
        outs[0][...] = scale * xp.where(positive, x, alpha * xp.expm1(xp.minimum(x, 0)))
    else:
        outs[0][...] = xp.where(positive, x, _negative_slope(attrs, ins, outs, ctx) * x)


def _negative_slope(attrs, ins, outs, ctx):
    """Slope of leaky, prelu and rrelu below zero; rrelu also stores it as its mask output."""
    kind = attrs['act_type']
    if kind == 'prelu':
        return _channel_gamma(ins[1], ins[0].ndim)
    if kind == 'rrelu':
        outs[1][...] = _rrelu_mask(attrs, ins[0], ctx)
        return outs[1]
    return attrs['slope']


def _leaky_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data[, gamma][, mask]) -> data (and gamma) gradients."""
    if onednn_provider.leaky_relu_backward(attrs, ins[0], ins[1], outs[0]):
        return
    xp, (dy, x), kind = ctx.xp, ins[:2], attrs['act_type']
    positive = x > 0
    if kind == 'gelu':
        slope = _gelu_slope(xp, x)
    elif kind in ('elu', 'selu'):
        alpha, scale = (attrs['slope'], 1) if kind == 'elu' else (_SELU_ALPHA, _SELU_LAMBDA)
        slope = scale * xp.where(positive, 1, alpha * xp.exp(xp.minimum(x, 0)))
    elif kind == 'prelu':
        slope = xp.where(positive, 1, _channel_gamma(ins[2], x.ndim))
    elif kind == 'rrelu':
        slope = xp.where(positive, 1, ins[2])
    else:
        slope = xp.where(positive, 1, attrs['slope'])
    outs[0][...] = dy * slope
    if kind == 'prelu':
        _prelu_gamma_grad(dy, x, positive, outs[1])


def _prelu_gamma_grad(dy, x, positive, out):
    contrib = dy * x * ~positive
    axes = tuple(i for i in range(x.ndim) if not (i == 1 and out.size > 1))
    out[...] = contrib.sum(axis=axes).reshape(out.shape)


def _leaky_gradient(F, attrs, inputs, outputs, out_grads):
    extra = list(inputs[1:]) + ([outputs[1]] if attrs['act_type'] == 'rrelu' else [])
    grads = F._backward_LeakyReLU(out_grads[0], inputs[0], *extra, **attrs)
    return outputs_of(grads, len(inputs))


def _leaky_backward_inputs(attrs):
    extra = {'prelu': ['gamma'], 'rrelu': ['mask']}.get(attrs['act_type'], [])
    return ['out_grad', 'data'] + extra


def _leaky_backward_infer(attrs, in_shapes):
    outs = [in_shapes[1]] + ([in_shapes[2]] if attrs['act_type'] == 'prelu' else [])
    return list(in_shapes), outs


def _leaky_type(attrs, in_dtypes):
    dtype = next((d for d in in_dtypes if d is not None), None)
    return [dtype] * len(in_dtypes), [dtype] * len(_leaky_outputs(attrs))


register('LeakyReLU', _leaky_kernel, infer_shape=_leaky_infer, infer_type=_leaky_type,
         inputs=_leaky_inputs, outputs=_leaky_outputs, visible_outputs=1,
         params=LEAKY_PARAMS, gradient=_leaky_gradient, resources=('random',), random=True,
         doc='Leaky rectifiers: leaky, prelu (learned slope gamma), elu, selu, gelu, and rrelu '
             '(random slope in training, the mean slope otherwise).')

register('_backward_LeakyReLU', _leaky_backward_kernel, infer_shape=_leaky_backward_infer,
         infer_type=lambda attrs, d: (list(d), [d[1]] * (2 if attrs['act_type'] == 'prelu'
                                                          else 1)),
         inputs=_leaky_backward_inputs,
         outputs=lambda attrs: ['data_grad'] + (['gamma_grad'] if attrs['act_type'] == 'prelu'
                                                else []),
         params=LEAKY_PARAMS)
