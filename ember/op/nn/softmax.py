"""softmax, log_softmax and softmin along one axis, with temperature, output dtype and an
optional length input that masks the tail of each row."""
from __future__ import annotations

import numpy as np

from ember.op.nn import onednn_provider
from ember.op.nn._common import accumulation_dtype, assign_shape, normalize_axis
from ember.op.registry import Param, p_bool, p_dtype, p_float, p_int, p_optional, register

__all__ = ['softmax_of']


def _float_dtype(value):
    dtype = p_dtype(value)
    if dtype is None or dtype.name not in ('float16', 'float32', 'float64'):
        raise ValueError('float16, float32 or float64')
    return dtype


PARAMS = (
    Param('axis', p_int, -1),
    Param('temperature', p_optional(p_float), None, 'Divides the input (None means 1).'),
    Param('dtype', p_optional(_float_dtype), None, 'Output dtype (None: the input dtype).'),
    Param('use_length', p_optional(p_bool), False,
          'Take a second input `length`: only the first length[i] entries of each row count.'),
)


def _inputs(attrs):
    return ['data', 'length'] if attrs['use_length'] else ['data']


def _infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None]
    axis = normalize_axis('softmax', attrs['axis'], len(data))
    if attrs['use_length']:
        assign_shape('softmax', in_shapes, 1, 'length', data[:axis] + data[axis + 1:])
    return in_shapes, [tuple(data)]


def _infer_type(attrs, in_dtypes):
    data = in_dtypes[0]
    out = attrs['dtype'] if attrs['dtype'] is not None else data
    ins = [data] + ([in_dtypes[1] or np.dtype(np.int32)] if attrs['use_length'] else [])
    return ins, [out]


def _tail_mask(xp, attrs, shape, length):
    """True at the positions of each row beyond its length (None without use_length)."""
    if not attrs['use_length']:
        return None
    axis = attrs['axis'] % len(shape)
    positions = xp.arange(shape[axis]).reshape((-1,) + (1,) * (len(shape) - axis - 1))
    return positions >= xp.expand_dims(length, axis)


def softmax_of(xp, x, axis, log=False, temperature=None, mask=None, dtype=None, safe=None):
    """softmax (or log_softmax) of `x` along `axis`; masked positions give 0. `safe` is the
    call's ``MXNET_SAFE_ACCUMULATION`` (``ctx.safe_accumulation``; None reads it now)."""
    z = x.astype(accumulation_dtype(dtype or x.dtype, safe), copy=False)
    if temperature is not None and temperature != 1:
        z = z / temperature
    if mask is not None:
        z = xp.where(mask, -xp.inf, z)
    peak = z.max(axis=axis, keepdims=True)
    z = z - xp.where(xp.isfinite(peak), peak, 0)
    with np.errstate(divide='ignore', invalid='ignore'):
        if log:
            result = z - xp.log(xp.exp(z).sum(axis=axis, keepdims=True))
        else:
            result = xp.exp(z)
            result /= result.sum(axis=axis, keepdims=True)
    return result if mask is None else xp.where(mask, 0, result)


def _kernel_for(log, negate):
    def kernel(attrs, ins, outs, ctx):
        xp, x, safe = ctx.xp, ins[0], ctx.safe_accumulation
        if not negate and onednn_provider.softmax_forward(attrs, x, outs[0], log, safe):
            return
        mask = _tail_mask(xp, attrs, x.shape, ins[1] if attrs['use_length'] else None)
        outs[0][...] = softmax_of(xp, -x if negate else x, attrs['axis'], log,
                                  attrs['temperature'], mask, outs[0].dtype, safe)
    return kernel


def _backward_kernel_for(log, negate):
    def kernel(attrs, ins, outs, ctx):
        """Inputs (out_grad, output[, length][, data])."""
        xp, (dy, y), axis = ctx.xp, ins[:2], attrs['axis']
        if not negate and onednn_provider.softmax_backward(attrs, dy, y, outs[0], log):
            return
        mask = _tail_mask(xp, attrs, y.shape, ins[2] if attrs['use_length'] else None)
        if mask is not None:
            dy = xp.where(mask, 0, dy)
        if log:
            prob = xp.exp(y) if mask is None else xp.where(mask, 0, xp.exp(y))
            grad = dy - prob * dy.sum(axis=axis, keepdims=True)
        else:
            grad = y * (dy - (dy * y).sum(axis=axis, keepdims=True))
        scale = (-1 if negate else 1) / (attrs['temperature'] or 1)
        outs[0][...] = grad * scale if scale != 1 else grad
    return kernel


def _backward_inputs(attrs):
    return (['out_grad', 'output'] + (['length'] if attrs['use_length'] else [])
            + (['data'] if attrs['dtype'] is not None else []))


def _backward_type(attrs, in_dtypes):
    """The data gradient has the data's dtype: the last input when dtype is set."""
    data = in_dtypes[-1] if attrs['dtype'] is not None else in_dtypes[1]
    return list(in_dtypes), [data]


def _gradient_for(backward_name):
    def gradient(F, attrs, inputs, outputs, out_grads):
        extra = ([inputs[1]] if attrs['use_length'] else []) + \
            ([inputs[0]] if attrs['dtype'] is not None else [])
        data_grad = getattr(F, backward_name)(out_grads[0], outputs[0], *extra, **attrs)
        return [data_grad] + ([None] if attrs['use_length'] else [])
    return gradient


def _register(name, log, negate, doc):
    backward = f'_backward_{name}'
    register(name, _kernel_for(log, negate), infer_shape=_infer, infer_type=_infer_type,
             inputs=_inputs, params=PARAMS, gradient=_gradient_for(backward), doc=doc)
    register(backward, _backward_kernel_for(log, negate), inputs=_backward_inputs,
             infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
             infer_type=_backward_type, outputs=('data_grad',), params=PARAMS)


_register('softmax', log=False, negate=False,
          doc='exp(x / t) normalised to sum to 1 along `axis`.')
_register('log_softmax', log=True, negate=False, doc='The logarithm of softmax, computed stably.')
_register('softmin', log=False, negate=True, doc='softmax of -x.')
