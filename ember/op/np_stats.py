"""``mx.np`` operators of numerical analysis and statistics: diff, polyval, percentile and
quantile, histogram.

``diff`` and ``polyval`` have gradients (diff is linear: its backward scatters each difference
back to its two ends; polyval's is the polynomial's derivative and the powers of x). The
percentile of an array and a histogram record none, as in MXNet.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_npi_diff')
>>> op.infer_shape(op.parse_attrs({'n': 2, 'axis': 0}), [(5, 3)])[1]
[(3, 3)]
"""
from __future__ import annotations

import numpy as np

from ember.op.np_rules import INT64, float_of, gradient_shapes, normalize_axis, p_any, promote
from ember.op.np_rules import unknown as _unknown
from ember.op.registry import Param, ShapeError, p_bool, p_int, p_optional, p_str, register

__all__ = []


# ----------------------------------------------------------------------------------------------
# diff

def _diff_shape(attrs, shapes):
    shape = shapes[0]
    if shape is None:
        return list(shapes), [None]
    if not shape:
        raise ShapeError('diff needs an array of at least one dimension')
    if attrs['n'] < 0:
        raise ShapeError(f'diff: order n={attrs["n"]} must be non-negative')
    axis = normalize_axis(attrs['axis'], len(shape))[0]
    result = list(shape)
    result[axis] = max(shape[axis] - attrs['n'], 0)
    return list(shapes), [tuple(result)]


def _diff_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.diff(ins[0], n=attrs['n'], axis=attrs['axis'])


def _backward_diff_kernel(attrs, ins, outs, ctx):
    xp, grad, a = ctx.xp, ins[0], ins[1]
    axis = normalize_axis(attrs['axis'], a.ndim)[0]
    grad = xp.moveaxis(grad.astype(outs[0].dtype), axis, 0)
    for _ in range(attrs['n']):
        zero = xp.zeros((1,) + grad.shape[1:], grad.dtype)
        grad = xp.concatenate([zero, grad]) - xp.concatenate([grad, zero])
    outs[0][...] = xp.moveaxis(grad, 0, axis)


_DIFF = (Param('n', p_int, 1), Param('axis', p_int, -1))
register('_npi_diff', _diff_kernel, inputs=('a',), params=_DIFF, infer_shape=_diff_shape,
         gradient=lambda F, attrs, ins, outs, og: [F._backward_npi_diff(og[0], ins[0],
                                                                        **attrs)],
         doc='``np.diff``: n-th differences along an axis.')
register('_backward_npi_diff', _backward_diff_kernel, inputs=('ograd', 'a'), params=_DIFF,
         infer_shape=gradient_shapes(1, lambda attrs, s: _diff_shape(attrs, s[1:])[1],
                                     lambda attrs, s: [s[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='Gradient of ``_npi_diff``.')


# ----------------------------------------------------------------------------------------------
# polyval

def _polyval_kernel(attrs, ins, outs, ctx):
    p, x = (v.astype(outs[0].dtype, copy=False) for v in ins)
    outs[0][...] = ctx.xp.polyval(p, x)


def _backward_polyval_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    grad, p, x = ins
    dtype = float_of(grad.dtype)
    p, x, grad = p.astype(dtype), x.astype(dtype), grad.astype(dtype)
    degree = p.shape[0] - 1
    powers = xp.stack([x ** (degree - i) for i in range(degree + 1)])
    outs[0][...] = (powers * grad).reshape(degree + 1, -1).sum(axis=1)
    slope = xp.polyval(xp.polyder(p), x) if degree > 0 else xp.zeros_like(x)
    outs[1][...] = grad * slope


def _polyval_shape(attrs, shapes):
    p, x = shapes
    if p is not None and len(p) != 1:
        raise ShapeError(f'polyval: coefficients must be 1-D, got shape {tuple(p)}')
    return list(shapes), [x]


register('_npi_polyval', _polyval_kernel, inputs=('p', 'x'), infer_shape=_polyval_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [
             None if _unknown(dtypes) else promote(*dtypes)]),
         gradient=lambda F, attrs, ins, outs, og: F._backward_npi_polyval(og[0], ins[0],
                                                                          ins[1]),
         doc='``np.polyval``: the polynomial with coefficients p (highest power first) at x.')
register('_backward_npi_polyval', _backward_polyval_kernel, inputs=('ograd', 'p', 'x'),
         outputs=('p_grad', 'x_grad'),
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[2]],
                                     lambda attrs, s: [s[1], s[2]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1], dtypes[2]]),
         doc='Gradients of ``_npi_polyval``.')


# ----------------------------------------------------------------------------------------------
# percentile and quantile

def p_quantiles(value):
    value = p_any(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (tuple, list)):
        return tuple(float(v) for v in value)
    raise ValueError('a number or a tuple of numbers')


def _quantile_shape(attrs, shapes):
    shape = shapes[0]
    if shape is None:
        return list(shapes), [None]
    q = attrs['q']
    axis = attrs['axis']
    if axis is None:
        reduced = tuple(1 for _ in shape) if attrs['keepdims'] else ()
    else:
        axes = normalize_axis(axis, len(shape))
        reduced = tuple(1 if i in axes else d for i, d in enumerate(shape)
                        if attrs['keepdims'] or i not in axes)
    lead = (len(q),) if isinstance(q, tuple) else ()
    return list(shapes), [lead + reduced]


def _quantile_kernel(attrs, ins, outs, ctx):
    q = np.asarray(attrs['q'], dtype=np.float64) / (100.0 if attrs['percent'] else 1.0)
    if np.any((q < 0) | (q > 1)):
        raise ValueError(f'quantiles must lie in [0, {100 if attrs["percent"] else 1}], got '
                         f'{attrs["q"]}')
    axis = attrs['axis']
    axis = axis if axis is None or isinstance(axis, int) else tuple(axis)
    outs[0][...] = ctx.xp.quantile(ins[0].astype(np.float64), ctx.xp.asarray(q), axis=axis,
                                   method=attrs['interpolation'], keepdims=attrs['keepdims'])


register('_npi_quantile', _quantile_kernel, inputs=('a',),
         params=(Param('q', p_quantiles), Param('axis', p_optional(p_any), None),
                 Param('interpolation', p_str, 'linear'), Param('keepdims', p_bool, False),
                 Param('percent', p_bool, False)),
         infer_shape=_quantile_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [
             None if dtypes[0] is None else float_of(dtypes[0])]),
         doc='``np.quantile`` (``percent=True``: ``np.percentile``).')


# ----------------------------------------------------------------------------------------------
# histogram

def _histogram_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    data = ins[0].reshape(-1)
    bins = ins[1] if len(ins) > 1 else attrs['bin_cnt']
    value_range = attrs['range']
    counts, edges = xp.histogram(data, bins=bins, range=value_range)
    outs[0][...] = counts
    outs[1][...] = edges


def _histogram_shape(attrs, shapes):
    if len(shapes) > 1:
        edges = shapes[1]
        if edges is None:
            return list(shapes), [None, None]
        return list(shapes), [(edges[0] - 1,), tuple(edges)]
    count = attrs['bin_cnt']
    return list(shapes), [(count,), (count + 1,)]


register('_npi_histogram', _histogram_kernel,
         inputs=lambda attrs: ['a'] if attrs['bin_cnt'] is not None else ['a', 'bins'],
         outputs=('hist', 'bin_edges'),
         params=(Param('bin_cnt', p_optional(p_int), None),
                 Param('range', p_optional(p_any), None)),
         infer_shape=_histogram_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [
             INT64, float_of(dtypes[0]) if len(dtypes) < 2 else dtypes[1]]),
         doc='``np.histogram`` with a number of equal bins or given bin edges.')
