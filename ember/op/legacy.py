"""MXNet's legacy operators, kept so that old symbol files and scripts run.

``Convolution_v1``, ``BatchNorm_v1`` and ``choose_element_0index`` compute what their successors
compute (``Convolution``, ``BatchNorm``, ``pick``): they are declared here from those
declarations under their old names. ``Pooling_v1`` differs from ``Pooling``: it pads with zeros
(max pooling too) and averages over whole windows, so it runs Pooling's kernels on explicitly
padded data. The others are their own: ``SoftmaxActivation``, ``IdentityAttachKLSparseReg``,
``batch_take``, ``fill_element_0index`` and ``_onehot_encode`` (behind
``mx.nd.onehot_encode``).

>>> import numpy as np
>>> from ember.op import registry
>>> op, out = registry.get('batch_take'), np.empty(2, np.float32)
>>> op.kernel({}, [np.array([[1, 2], [3, 4]], np.float32), np.array([1, 0])], [out],
...           registry.KernelContext(None))
>>> out
array([2., 3.], dtype=float32)
"""
from __future__ import annotations

from dataclasses import fields

import numpy as np

from ember.op import registry
from ember.op.host import register
from ember.op.registry import OpDef, Param, ShapeError, p_enum, p_float, same_shape

__all__ = []


def _renamed(old_name, new_name, doc):
    """Declare `old_name` with everything `new_name` is declared with."""
    op = registry.get(new_name)
    copied = {f.name: getattr(op, f.name) for f in fields(OpDef)
              if f.name not in ('name', 'kernel', 'aliases', 'doc')}
    # the successor's kernel handles every device itself
    registry.register(old_name, op.kernel, doc=doc, **copied)


_renamed('Convolution_v1', 'Convolution', 'The legacy convolution: Convolution.')
_renamed('BatchNorm_v1', 'BatchNorm', 'The legacy batch normalisation: BatchNorm.')
_renamed('choose_element_0index', 'pick', 'The legacy name of pick.')


# ----------------------------------------------------------------------------------------------
# Pooling_v1: Pooling over data padded with zeros up to whole windows.

_POOLING = registry.get('Pooling')
_POOLING_BACKWARD = registry.get('_backward_Pooling')
_POOL_V1 = tuple(p for p in _POOLING.params if p.name in (
    'kernel', 'pool_type', 'global_pool', 'pooling_convention', 'stride', 'pad'))


def _pooling_attrs(attrs):
    """Pooling's attributes for the pre-padded data: no padding, valid windows."""
    dims = len(attrs['kernel'])
    return _POOLING.parse_attrs({**attrs, 'pad': (0,) * dims, 'pooling_convention': 'valid'})


def _v1_padding(attrs, spatial):
    """(before, after) zeros per spatial axis so that every window of the output is whole."""
    if attrs['global_pool']:
        return [(0, 0)] * len(spatial)
    dims = len(spatial)
    stride = attrs['stride'] or (1,) * dims
    pad = attrs['pad'] or (0,) * dims
    padding = []
    for size, k, s, p in zip(spatial, attrs['kernel'], stride, pad):
        span = size + 2 * p - k
        steps = -(-span // s) if attrs['pooling_convention'] == 'full' else span // s
        padding.append((p, steps * s + k - size - p))
    return padding


def _v1_padded(xp, attrs, x):
    return xp.pad(x, [(0, 0), (0, 0)] + _v1_padding(attrs, x.shape[2:]))


def _pool_v1_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    padded = tuple(data[:2]) + tuple(n + a + b for n, (a, b) in
                                     zip(data[2:], _v1_padding(attrs, data[2:])))
    return [data], _POOLING.infer_shape(_pooling_attrs(attrs), [padded])[1]


def _pool_v1_kernel(attrs, ins, outs, ctx):
    _POOLING.kernel(_pooling_attrs(attrs), [_v1_padded(ctx.xp, attrs, ins[0])], outs, ctx)


def _pool_v1_backward(attrs, ins, outs, ctx):
    grad, data, out = ins
    padded = _v1_padded(ctx.xp, attrs, data)
    padded_grad = ctx.xp.empty_like(padded)
    _POOLING_BACKWARD.kernel(_pooling_attrs(attrs), [grad, padded, out], [padded_grad], ctx)
    crop = tuple(slice(before, before + n) for n, (before, _) in
                 zip(data.shape[2:], _v1_padding(attrs, data.shape[2:])))
    outs[0][...] = padded_grad[(slice(None), slice(None)) + crop]


# Pooling's kernels handle every device; these only pad (with the device's pad) and crop
registry.register('Pooling_v1', _pool_v1_kernel, infer_shape=_pool_v1_shape, params=_POOL_V1,
         resources=('temp',),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_Pooling_v1(og[0], ins[0], outs[0],
                                                                          **attrs)],
         doc='The legacy pooling: zero padding (max pooling too), averages over whole windows.')
registry.register('_backward_Pooling_v1', _pool_v1_backward, inputs=('out_grad', 'data', 'output'),
         params=_POOL_V1, resources=('temp',),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='The gradient of Pooling_v1.')


# ----------------------------------------------------------------------------------------------
# SoftmaxActivation.

def _softmax_axes(attrs, ndim):
    if attrs['mode'] == 'channel':
        if ndim < 2:
            raise ShapeError('channel mode needs data with a channel axis (at least 2-D)')
        return (1,)
    return (ndim - 1,)


def _softmax_kernel(attrs, ins, outs, ctx):
    x = ins[0]
    axes = _softmax_axes(attrs, x.ndim)
    shifted = np.exp(x - x.max(axis=axes, keepdims=True))
    outs[0][...] = shifted / shifted.sum(axis=axes, keepdims=True)


def _softmax_backward(attrs, ins, outs, ctx):
    grad, out = ins
    axes = _softmax_axes(attrs, out.ndim)
    outs[0][...] = out * (grad - (grad * out).sum(axis=axes, keepdims=True))


_MODE = (Param('mode', p_enum('instance', 'channel'), 'instance',
               'instance: softmax over the last axis; channel: over axis 1.'),)
register('SoftmaxActivation', _softmax_kernel, params=_MODE,
         gradient=lambda F, attrs, ins, outs, og: [F._backward_SoftmaxActivation(
             og[0], outs[0], **attrs)],
         doc='Softmax over the last axis (instance) or over the channels of each position '
             '(channel).')
register('_backward_SoftmaxActivation', _softmax_backward, inputs=('out_grad', 'output'),
         params=_MODE, infer_shape=same_shape, doc='The gradient of SoftmaxActivation.')


# ----------------------------------------------------------------------------------------------
# IdentityAttachKLSparseReg: the identity whose gradient pushes mean activations toward a
# target (a sparse auto-encoder's KL penalty); the moving average is updated by the backward.

_KL = (Param('sparseness_target', p_float, 0.1, 'The target mean activation.'),
       Param('penalty', p_float, 0.001, 'Weight of the penalty.'),
       Param('momentum', p_float, 0.9, 'Decay of the moving average of mean activations.'))


def _kl_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    if len(data) < 2:
        raise ShapeError(f'data must have a channel axis (batch, channels, ...), got {data}')
    return [data, (data[1],)], [data]


def _identity(attrs, ins, outs, ctx):
    if outs[0] is not ins[0]:
        outs[0][...] = ins[0]


def _kl_backward(attrs, ins, outs, ctx):
    grad, data, moving_avg = ins
    axes = (0,) + tuple(range(2, data.ndim))
    average = data.mean(axis=axes)
    momentum = attrs['momentum']
    moving_avg[...] = momentum * moving_avg + (1 - momentum) * average
    target = attrs['sparseness_target']
    shape = (1, -1) + (1,) * (data.ndim - 2)
    avg = moving_avg.reshape(shape)
    outs[0][...] = grad + attrs['penalty'] * (-target / avg + (1 - target) / (1 - avg))


register('IdentityAttachKLSparseReg', _identity, inputs=('data', 'moving_avg'),
         aux=('moving_avg',), mutate=(1,), infer_shape=_kl_shape, params=_KL,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_IdentityAttachKLSparseReg(og[0], *ins, **attrs), None],
         doc='The identity; its gradient adds the derivative of a KL sparseness penalty on '
             'the moving average of each channel\'s mean activation.')
register('_backward_IdentityAttachKLSparseReg', _kl_backward,
         inputs=('out_grad', 'data', 'moving_avg'), mutate=(2,), params=_KL,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='The gradient of IdentityAttachKLSparseReg; updates moving_avg.')


# ----------------------------------------------------------------------------------------------
# batch_take, fill_element_0index, _onehot_encode.

def _rows_and_positions(shape, index, what):
    if len(shape) != 2 or index is not None and tuple(index) != (shape[0],):
        raise ShapeError(f'{what} needs a matrix and one index per row, got {shape} and {index}')


def _batch_take_shape(attrs, in_shapes):
    a, index = in_shapes
    if a is None:
        return list(in_shapes), [None]
    _rows_and_positions(a, index, 'batch_take')
    return [a, (a[0],)], [(a[0],)]


def _positions(index, width):
    return np.clip(index.astype(np.int64), 0, width - 1)


def _batch_take_kernel(attrs, ins, outs, ctx):
    a, index = ins
    outs[0][...] = a[np.arange(len(a)), _positions(index, a.shape[1])]


register('batch_take', _batch_take_kernel, inputs=('a', 'indices'),
         infer_shape=_batch_take_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
         doc='a[i, indices[i]] for each row i (the legacy form of pick).')


def _fill_shape(attrs, in_shapes):
    lhs, mhs, rhs = in_shapes
    if lhs is None:
        return list(in_shapes), [None]
    _rows_and_positions(lhs, mhs, 'fill_element_0index')
    return [lhs, (lhs[0],), (lhs[0],)], [lhs]


def _fill_kernel(attrs, ins, outs, ctx):
    lhs, values, index = ins
    out = outs[0]
    if out is not lhs:
        out[...] = lhs
    out[np.arange(len(lhs)), _positions(index, lhs.shape[1])] = values


register('fill_element_0index', _fill_kernel, inputs=('lhs', 'mhs', 'rhs'),
         infer_shape=_fill_shape, inplace=((0, 0),),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
         doc='A copy of lhs with lhs[i, rhs[i]] = mhs[i] for each row i.')


def _onehot_kernel(attrs, ins, outs, ctx):
    index = ins[0]
    out = outs[0]
    out[...] = 0
    out[np.arange(len(out)), _positions(index, out.shape[1])] = 1


def _onehot_shape(attrs, in_shapes):
    index, like = in_shapes
    if like is None:
        return list(in_shapes), [None]
    _rows_and_positions(like, index, 'onehot_encode')
    return [(like[0],), like], [like]


register('_onehot_encode', _onehot_kernel, inputs=('lhs', 'rhs'), infer_shape=_onehot_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='Rows of rhs\'s shape with a 1 at column lhs[i] (onehot_encode).')
