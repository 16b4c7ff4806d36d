"""Reductions: sum, mean, max, min, prod, norm, argmax, argmin, with MXNet's axis rules.

``axis`` is None or () for every axis, an int or a tuple; ``exclude=True`` reduces every axis
*but* those; ``keepdims=True`` keeps reduced axes with length 1. A reduction to a single value
has shape ``(1,)`` (MXNet 1.x has no 0-d arrays). With ``MXNET_SAFE_ACCUMULATION`` float16 sums
accumulate in float32 and float32 sums in float64.

>>> from ember.op.reduce import reduce_axes, reduced_shape
>>> axes = reduce_axes((1,), 3, exclude=True)
>>> axes, reduced_shape((2, 3, 4), axes, keepdims=False)
((0, 2), (3,))
"""
from __future__ import annotations

import contextlib

import numpy as np

from ember.base import prod
from ember.op.accumulate import accumulation_dtype
from ember.op.registry import (Param, ShapeError, p_axes, p_bool, p_enum, p_int, p_optional,
                               p_dtype, register, zero_gradient)

__all__ = ['reduce_axes', 'reduced_shape', 'keepdims_shape']

AXES_PARAMS = (
    Param('axis', p_axes, None, 'axes to reduce; None or () for all'),
    Param('keepdims', p_bool, False, 'keep reduced axes with length 1'),
    Param('exclude', p_bool, False, 'reduce every axis except those in `axis`'),
)


def reduce_axes(axis, ndim, exclude=False) -> tuple:
    """The sorted axes a reduction runs over; raises ShapeError for a bad axis."""
    if axis is None or axis == ():
        return tuple(range(ndim))
    axes = []
    for value in axis:
        if not -ndim <= value < ndim:
            raise ShapeError(f'axis {value} is out of bounds for an array of {ndim} dimensions')
        axes.append(value % ndim)
    if len(set(axes)) != len(axes):
        raise ShapeError(f'axis {tuple(axis)} names an axis twice')
    if exclude:
        axes = [i for i in range(ndim) if i not in axes]
    return tuple(sorted(axes))


def keepdims_shape(shape, axes) -> tuple:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def reduced_shape(shape, axes, keepdims) -> tuple:
    """The output shape: reduced axes dropped (or kept as 1); never empty."""
    if keepdims:
        return keepdims_shape(shape, axes) or (1,)
    return tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)


def _axes_of(attrs, ndim):
    return reduce_axes(attrs['axis'], ndim, attrs.get('exclude', False))


_PLANS: dict = {}


def _plan(attrs, shape):
    """(axes, keepdims shape) of a reduction of `shape`; memoised, kernels run it per call."""
    key = (attrs['axis'], attrs.get('exclude', False), shape)
    found = _PLANS.get(key)
    if found is None:
        if len(_PLANS) > 1024:
            _PLANS.clear()
        axes = reduce_axes(key[0], len(shape), key[1])
        found = _PLANS[key] = (axes, keepdims_shape(shape, axes))
    return found


def _reduce_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    axes = _plan(attrs, tuple(shape))[0]
    return list(in_shapes), [reduced_shape(shape, axes, attrs['keepdims'])]


def _accumulator(dtype, ctx):
    """The dtype to accumulate a sum of float `dtype` in; None (NumPy's choice) otherwise."""
    if dtype.kind != 'f':
        return None
    return accumulation_dtype(dtype, ctx.safe_accumulation)


_UFUNCS = {'sum': np.add, 'mean': np.add, 'prod': np.multiply, 'max': np.maximum,
           'min': np.minimum}


def _reduce_kernel(name, accumulates):
    ufunc = _UFUNCS[name]

    def kernel(attrs, ins, outs, ctx):
        x = ins[0]
        axes, kept = _plan(attrs, x.shape)
        target = outs[0].reshape(kept)
        if ctx.xp is not np:
            target[...] = getattr(ctx.xp, name)(x, axis=axes, keepdims=True)
            return
        acc = _accumulator(x.dtype, ctx) if accumulates else None
        with _quiet_if_half(x.dtype):       # an overflowing float16 sum is inf, as in MXNet
            if name != 'mean' and (acc is None or acc == x.dtype):
                ufunc.reduce(x, axis=axes, keepdims=True, out=target)
                return
            total = ufunc.reduce(x, axis=axes, dtype=acc, keepdims=True)
        if name == 'mean':
            # a NumPy float64 count: float16 cannot hold counts above 65504
            total = total / np.float64(max(prod(x.shape[a] for a in axes), 1))
        target[...] = total
    return kernel


_NOTHING = contextlib.nullcontext()


def _quiet_if_half(dtype):
    return np.errstate(over='ignore') if dtype.itemsize == 2 and dtype.kind == 'f' else _NOTHING


def _back(F, grad, like, attrs, mean=False):
    return F._broadcast_back(grad, like, axis=attrs['axis'], keepdims=attrs['keepdims'],
                             exclude=attrs.get('exclude', False), mean=mean)


_GRADIENTS = {
    'sum': lambda F, attrs, x, out, og: _back(F, og, x, attrs),
    'mean': lambda F, attrs, x, out, og: _back(F, og, x, attrs, mean=True),
    'max': lambda F, attrs, x, out, og: (_back(F, og, x, attrs)
                                         * F.broadcast_equal(x, _back(F, out, x, attrs))),
    'min': lambda F, attrs, x, out, og: (_back(F, og, x, attrs)
                                         * F.broadcast_equal(x, _back(F, out, x, attrs))),
    'prod': lambda F, attrs, x, out, og: _back(F, og * out, x, attrs) / x,
}

_REDUCTIONS = {
    # name: (NumPy function, accumulates (takes dtype=), aliases)
    'sum': ('sum', True, ('sum_axis',)),
    'mean': ('mean', True, ()),
    'prod': ('prod', True, ()),
    'max': ('max', False, ('max_axis',)),
    'min': ('min', False, ('min_axis',)),
}

for _name, (_fn, _accumulates, _aliases) in _REDUCTIONS.items():
    _rule = _GRADIENTS[_name]
    register(_name, _reduce_kernel(_fn, _accumulates), params=AXES_PARAMS,
             infer_shape=_reduce_infer, aliases=_aliases,
             gradient=(lambda rule: lambda F, attrs, ins, outs, og:
                       [rule(F, attrs, ins[0], outs[0], og[0])])(_rule),
             doc=f'{_name.capitalize()} over the given axes.')


# ----------------------------------------------------------------------------------------------
# norm

def _norm_kernel(attrs, ins, outs, ctx):
    xp, x = ctx.xp, ins[0]
    axes = _axes_of(attrs, x.ndim)
    target = outs[0].reshape(keepdims_shape(x.shape, axes))
    acc = _accumulator(x.dtype, ctx)
    if attrs['ord'] == 1:
        target[...] = xp.sum(xp.abs(x), axis=axes, keepdims=True, dtype=acc)
    else:
        wide = x.astype(acc) if acc is not None else x
        target[...] = xp.sqrt(xp.sum(wide * wide, axis=axes, keepdims=True))


def _norm_grad(F, attrs, ins, outs, og):
    x = ins[0]
    if attrs['ord'] == 1:
        return [F.sign(x) * _back(F, og[0], x, attrs)]
    return [x * _back(F, og[0] / outs[0], x, attrs)]


register('norm', _norm_kernel, infer_shape=_reduce_infer, gradient=_norm_grad,
         params=(Param('ord', p_enum(1, 2), 2, '1 (sum of absolute values) or 2 (Euclidean)'),
                 Param('axis', p_axes, None, 'axes to reduce; None for all'),
                 Param('out_dtype', p_optional(p_dtype), None, 'dtype of the result'),
                 Param('keepdims', p_bool, False, 'keep reduced axes with length 1')),
         infer_type=lambda attrs, dt: (list(dt), [attrs['out_dtype'] or dt[0]]),
         doc='The L1 or L2 norm over the given axes.')


# ----------------------------------------------------------------------------------------------
# argmax, argmin: the index as a value of the input's dtype, as in MXNet 1.x.

def _arg_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    axis = attrs['axis']
    axes = tuple(range(len(shape))) if axis is None else reduce_axes((axis,), len(shape))
    return list(in_shapes), [reduced_shape(shape, axes, attrs['keepdims'])]


def _arg_kernel(name):
    def kernel(attrs, ins, outs, ctx):
        x, out = ins[0], outs[0]
        axis = attrs['axis']
        if axis is None:
            index = getattr(ctx.xp, name)(x)
            out[...] = index
        else:
            index = getattr(ctx.xp, name)(x, axis=axis, keepdims=True)
            out[...] = index.reshape(out.shape)
    return kernel


for _name in ('argmax', 'argmin'):
    register(_name, _arg_kernel(_name), infer_shape=_arg_infer,
             params=(Param('axis', p_optional(p_int), None, 'the axis; None flattens'),
                     Param('keepdims', p_bool, False, 'keep the axis with length 1')),
             gradient=lambda F, attrs, ins, outs, og: [F.zeros_like(ins[0])],
             doc=f'Index of the {_name[3:]}imum along an axis (the flattened array if None).')


# ----------------------------------------------------------------------------------------------
# The gradient helper: broadcast a reduced array back to the shape it was reduced from.

def _broadcast_back_infer(attrs, in_shapes):
    data, like = in_shapes
    if like is not None and data is not None:
        axes = _axes_of(attrs, len(like))
        expected = reduced_shape(like, axes, attrs['keepdims'])
        if tuple(data) != expected:
            raise ShapeError(f'data of shape {tuple(data)} is not {tuple(like)} reduced over '
                             f'axes {axes} (expected {expected})')
    return list(in_shapes), [like]


def _broadcast_back_kernel(attrs, ins, outs, ctx):
    data, out = ins[0], outs[0]
    axes = _axes_of(attrs, out.ndim)
    out[...] = data.reshape(keepdims_shape(out.shape, axes))
    if attrs['mean']:
        count = 1
        for axis in axes:
            count *= out.shape[axis]
        out[...] = out / max(count, 1)


register('_broadcast_back', _broadcast_back_kernel, inputs=('data', 'like'),
         infer_shape=_broadcast_back_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]),
         params=AXES_PARAMS + (Param('mean', p_bool, False, 'divide by the reduced count'),),
         gradient=lambda F, attrs, ins, outs, og: [
             (F.mean if attrs['mean'] else F.sum)(og[0], axis=attrs['axis'],
                                                  keepdims=attrs['keepdims'],
                                                  exclude=attrs['exclude']),
             F.zeros_like(ins[1])],
         doc='Broadcast `data`, a reduction of `like` over `axis`, back to `like`\'s shape '
             '(divided by the reduced count when `mean`): the gradient of a reduction.')


# ----------------------------------------------------------------------------------------------
# moments, nansum, nanprod

def _moments_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None, None]
    out = reduced_shape(data, reduce_axes(attrs['axes'], len(data)), attrs['keepdims'])
    return list(in_shapes), [out, out]


def _moments_kernel(attrs, ins, outs, ctx):
    x = ins[0]
    axes = reduce_axes(attrs['axes'], x.ndim)
    wide = x.astype(accumulation_dtype(x.dtype, ctx.safe_accumulation), copy=False)
    mean = wide.mean(axis=axes, keepdims=True)
    centered = wide - mean
    outs[0][...] = mean.reshape(outs[0].shape)
    outs[1][...] = (centered * centered).mean(axis=axes, keepdims=True).reshape(outs[1].shape)


def _moments_gradient(F, attrs, inputs, outputs, out_grads):
    x, (mean_grad, var_grad) = inputs[0], out_grads
    where = {'axis': attrs['axes'], 'keepdims': attrs['keepdims']}
    mean = F._broadcast_back(outputs[0], x, **where)
    spread = F._broadcast_back(mean_grad, x, mean=True, **where)
    return [spread + 2 * (x - mean) * F._broadcast_back(var_grad, x, mean=True, **where)]


register('moments', _moments_kernel, infer_shape=_moments_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0], dt[0]]), outputs=('mean', 'var'),
         gradient=_moments_gradient,
         params=(Param('axes', p_axes, None, 'axes to reduce; None for all'),
                 Param('keepdims', p_bool, False, 'keep reduced axes with length 1')),
         doc='Mean and (biased) variance over the given axes.')


def _nan_reduce_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    axes = reduce_axes(attrs['axis'], len(data), attrs['exclude'])
    return list(in_shapes), [reduced_shape(data, axes, attrs['keepdims'])]


def _nan_reduce_kernel(name):
    def kernel(attrs, ins, outs, ctx):
        x = ins[0]
        axes = reduce_axes(attrs['axis'], x.ndim, attrs['exclude'])
        target = outs[0].reshape(keepdims_shape(x.shape, axes))
        floating = x.dtype.kind == 'f'
        dtype = accumulation_dtype(x.dtype, ctx.safe_accumulation) if floating else None
        target[...] = getattr(ctx.xp, name)(x, axis=axes, keepdims=True, dtype=dtype)
    return kernel


def _nansum_gradient(F, attrs, inputs, outputs, out_grads):
    x = inputs[0]
    return [_back(F, out_grads[0], x, attrs) * F.broadcast_equal(x, x)]   # 0 where x is NaN


def _nanprod_gradient(F, attrs, inputs, outputs, out_grads):
    x = inputs[0]
    through = _back(F, out_grads[0] * outputs[0], x, attrs) / x
    return [F.where(F.broadcast_equal(x, x), through, F.zeros_like(x))]


for _name, _gradient in (('nansum', _nansum_gradient), ('nanprod', _nanprod_gradient)):
    register(_name, _nan_reduce_kernel(_name), infer_shape=_nan_reduce_infer,
             params=AXES_PARAMS, gradient=_gradient,
             doc=f'{_name[3:].capitalize()} over the given axes, treating NaN as '
                 f'{0 if _name == "nansum" else 1}.')


# ----------------------------------------------------------------------------------------------
# argmax_channel

def _argmax_channel_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    return list(in_shapes), [tuple(data[:-1]) or (1,)]


def _argmax_channel_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.argmax(ins[0], axis=-1).reshape(outs[0].shape)


register('argmax_channel', _argmax_channel_kernel,
         infer_shape=_argmax_channel_infer, gradient=zero_gradient,
         doc='Index of the maximum of each row (along the last axis), in the input\'s '
             'dtype, as MXNet\'s argmax with axis=-1.')
