"""``mx.np``'s reductions: sum, prod, mean, max, min, all, any, argmax, argmin, std, var and
cumsum, over any axes, with NumPy's ``keepdims`` and zero-dim results.

Dtypes follow :mod:`ember.op.np_rules` (MXNet's choices): sums keep an integer dtype and make
int64 of bools, means and deviations make float32 of integers, arg-reductions give int64.
Gradients come from ``_backward_npi_reduce``, which works them out in NumPy from the input and
the output: max and min pass the gradient to every element equal to the result, as MXNet does.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_npi_sum')
>>> attrs = op.parse_attrs({'axis': (0, 2)})
>>> op.infer_shape(attrs, [(2, 3, 4)])[1], op.infer_type(attrs, [np.dtype('int8')])[1]
([(3,)], [dtype('int8')])
"""
from __future__ import annotations

import numpy as np

from ember.op.np_rules import (BOOL, INT64, float_of, gradient_shapes, normalize_axis,
                               reduced_shape)
from ember.op.registry import (Param, ShapeError, p_axes, p_bool, p_dtype, p_float, p_int,
                               p_optional, p_str, register)

__all__ = ['REDUCTIONS']

_AXIS = Param('axis', p_optional(p_axes), None)
_KEEPDIMS = Param('keepdims', p_bool, False)
_DTYPE = Param('dtype', p_optional(p_dtype), None)
_DDOF = Param('ddof', p_int, 0)
_INITIAL = Param('initial', p_optional(p_float), None)

# name -> (NumPy function, params, output dtype from the input dtype and `dtype=`,
#          differentiable)
REDUCTIONS = {
    'sum': ('sum', (_AXIS, _DTYPE, _KEEPDIMS, _INITIAL), 'sum', True),
    'prod': ('prod', (_AXIS, _DTYPE, _KEEPDIMS, _INITIAL), 'sum', True),
    'mean': ('mean', (_AXIS, _DTYPE, _KEEPDIMS), 'float', True),
    'max': ('max', (_AXIS, _KEEPDIMS, _INITIAL), 'same', True),
    'min': ('min', (_AXIS, _KEEPDIMS, _INITIAL), 'same', True),
    'std': ('std', (_AXIS, _DTYPE, _DDOF, _KEEPDIMS), 'float', True),
    'var': ('var', (_AXIS, _DTYPE, _DDOF, _KEEPDIMS), 'float', True),
    'all': ('all', (_AXIS, _KEEPDIMS), 'bool', False),
    'any': ('any', (_AXIS, _KEEPDIMS), 'bool', False),
    'argmax': ('argmax', (Param('axis', p_optional(p_int), None), _KEEPDIMS), 'index', False),
    'argmin': ('argmin', (Param('axis', p_optional(p_int), None), _KEEPDIMS), 'index', False),
}


def _out_dtype(rule, dtype, asked):
    if rule == 'bool':
        return BOOL
    if rule == 'index':
        return INT64
    if rule == 'same':
        return dtype
    if asked is not None:
        return asked
    if rule == 'sum':
        return INT64 if dtype.kind == 'b' else dtype
    return float_of(dtype)


def _reduce_type(rule):
    def infer(attrs, in_dtypes):
        if in_dtypes[0] is None:
            return list(in_dtypes), [None]
        return list(in_dtypes), [_out_dtype(rule, in_dtypes[0], attrs.get('dtype'))]
    return infer


def _reduce_shape(name):
    def infer(attrs, in_shapes):
        shape = in_shapes[0]
        if shape is None:
            return list(in_shapes), [None]
        axes = normalize_axis(attrs['axis'], len(shape))
        if name in ('max', 'min', 'argmax', 'argmin') and attrs.get('initial') is None:
            empty = [a for a in axes if shape[a] == 0]
            if empty:
                raise ShapeError(f'{name} of an empty axis {empty[0]} has no identity')
        return list(in_shapes), [reduced_shape(shape, attrs['axis'], attrs['keepdims'])]
    return infer


def _np_axis(axis):
    return axis if axis is None or isinstance(axis, int) else tuple(axis)


def _reduce_kernel(name, function, rule):
    def kernel(attrs, ins, outs, ctx):
        xp, x, out = ctx.xp, ins[0], outs[0]
        kwargs = {'axis': _np_axis(attrs['axis']), 'keepdims': attrs['keepdims']}
        if rule in ('sum', 'float'):
            kwargs['dtype'] = out.dtype
        if name in ('std', 'var'):
            kwargs['ddof'] = attrs['ddof']
        if attrs.get('initial') is not None:
            kwargs['initial'] = attrs['initial']
        if rule == 'index' and x.ndim == 0:
            out[...] = 0
            return
        with np.errstate(all='ignore'):
            out[...] = getattr(xp, function)(x, **kwargs)
    return kernel


def _reduce_gradient(name):
    def gradient(F, attrs, ins, outs, og):
        return [F._backward_npi_reduce(og[0], ins[0], outs[0], func=name, axis=attrs['axis'],
                                       keepdims=attrs['keepdims'], ddof=attrs.get('ddof', 0))]
    return gradient


def _zeros_gradient(F, attrs, ins, outs, og):
    return [F.zeros_like(ins[0])]


for _name, (_function, _params, _rule, _differentiable) in REDUCTIONS.items():
    register(f'_npi_{_name}', _reduce_kernel(_name, _function, _rule), inputs=('a',),
             params=_params, infer_shape=_reduce_shape(_name), infer_type=_reduce_type(_rule),
             gradient=_reduce_gradient(_name) if _differentiable else _zeros_gradient,
             doc=f'``np.{_name}`` over the given axes.')


# ----------------------------------------------------------------------------------------------
# Gradients

def _kept(y, shape, axes):
    """The reduced array `y` with the reduced axes back as length 1."""
    return y.reshape(tuple(1 if i in axes else d for i, d in enumerate(shape)))


def _prod_slope(xp, x, axes):
    """d prod / d x_i: the product of the other elements of each group, exact with zeros."""
    moved = xp.moveaxis(x, axes, tuple(range(x.ndim - len(axes), x.ndim)))
    flat = moved.reshape(moved.shape[:x.ndim - len(axes)] + (-1,))
    ones = xp.ones(flat.shape[:-1] + (1,), dtype=flat.dtype)
    before = xp.cumprod(xp.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
    after = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(flat, -1)[..., :-1]], axis=-1),
                               axis=-1), -1)
    slope = (before * after).reshape(moved.shape)
    return xp.moveaxis(slope, tuple(range(x.ndim - len(axes), x.ndim)), axes)


def _backward_reduce_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    og, x, y = ins
    name, shape = attrs['func'], x.shape
    axes = normalize_axis(attrs['axis'], x.ndim)
    dtype = float_of(outs[0].dtype)
    x = x.astype(dtype, copy=False)
    g = _kept(og.astype(dtype, copy=False), shape, axes)
    y = _kept(y.astype(dtype, copy=False), shape, axes)
    count = int(np.prod([shape[a] for a in axes])) if axes else 1
    if name == 'sum':
        grad = xp.broadcast_to(g, shape)
    elif name == 'mean':
        grad = xp.broadcast_to(g / max(count, 1), shape)
    elif name == 'prod':
        grad = g * _prod_slope(xp, x, axes)
    elif name in ('max', 'min'):
        grad = g * (x == y)
    else:
        centred = x - xp.mean(x, axis=axes, keepdims=True)
        scale = 1.0 / max(count - attrs['ddof'], 1)
        with np.errstate(all='ignore'):
            grad = g * centred * (2 * scale if name == 'var' else scale / y)
    outs[0][...] = grad


register('_backward_npi_reduce', _backward_reduce_kernel, inputs=('ograd', 'a', 'y'),
         params=(Param('func', p_str), _AXIS, _KEEPDIMS, _DDOF),
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[2]], lambda attrs, s: [s[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='Gradient of an ``mx.np`` reduction from its input and output.')


# ----------------------------------------------------------------------------------------------
# Cumulative sums

def _cumsum_shape(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    if attrs['axis'] is None:
        return list(in_shapes), [(int(np.prod(shape)),)]
    normalize_axis(attrs['axis'], len(shape))
    return list(in_shapes), [tuple(shape)]


def _cumsum_kernel(attrs, ins, outs, ctx):
    ctx.xp.cumsum(ins[0], axis=attrs['axis'], dtype=outs[0].dtype, out=outs[0])


def _backward_cumsum_kernel(attrs, ins, outs, ctx):
    xp, og, x = ctx.xp, ins[0], ins[1]
    axis = 0 if attrs['axis'] is None else attrs['axis']
    reverse = xp.flip(xp.cumsum(xp.flip(og, axis), axis=axis), axis)
    outs[0][...] = reverse.reshape(x.shape)


_CUMSUM = (Param('axis', p_optional(p_int), None), _DTYPE)
register('_npi_cumsum', _cumsum_kernel, inputs=('a',), params=_CUMSUM,
         infer_shape=_cumsum_shape, infer_type=_reduce_type('sum'),
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_npi_cumsum(og[0], ins[0], axis=attrs['axis'])],
         doc='``np.cumsum``: running sums along an axis (of the flattened array for None).')
register('_backward_npi_cumsum', _backward_cumsum_kernel, inputs=('ograd', 'a'),
         params=(Param('axis', p_optional(p_int), None),),
         infer_shape=gradient_shapes(1, lambda attrs, s: _cumsum_shape(attrs, s[1:])[1],
                                     lambda attrs, s: [s[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='Gradient of ``_npi_cumsum``: running sums from the end.')
