"""``mx.np``'s creation operators: constants, ranges, grids and windows, float32 unless a dtype
is given (MXNet's default), and ``full_like`` over an input.

Each is one NumPy expression ``values(xp, **attrs)`` with the output's shape from its
attributes, so the same declaration serves ``mx.np.linspace`` and ``F.np.linspace`` in a
traced graph.

>>> from ember.op import registry
>>> op = registry.get('_npi_linspace')
>>> attrs = op.parse_attrs({'start': 0, 'stop': 1, 'num': 5})
>>> op.infer_shape(attrs, [])[1], op.infer_type(attrs, [])[1]
([(5,)], [dtype('float32')])
"""
from __future__ import annotations

import numpy as np

from ember.op.init import CTX, arange_length
from ember.op.np_rules import FLOAT32, p_scalar
from ember.op.registry import (Param, ShapeError, p_bool, p_dtype, p_float, p_int, p_optional,
                               p_shape, register)

__all__ = ['full_dtype']

_DTYPE = Param('dtype', p_optional(p_dtype), None, 'dtype of the output (None: float32)')
_SHAPE = Param('shape', p_shape, (), 'shape of the output')


def full_dtype(value, dtype):
    """The dtype of ``np.full(shape, value)``: as asked, else bool for a bool, else float32."""
    if dtype is not None:
        return dtype
    return np.dtype(np.bool_) if isinstance(value, bool) else FLOAT32


def _creation(name, values, shape, params, dtype_rule=None, doc=''):
    def kernel(attrs, ins, outs, ctx):
        outs[0][...] = values(ctx.xp, **{k: v for k, v in attrs.items() if k != 'ctx'})

    def infer_shape(attrs, in_shapes):
        return [], [tuple(shape(attrs))]

    def infer_type(attrs, in_dtypes):
        found = dtype_rule(attrs) if dtype_rule else attrs['dtype']
        return [], [found or FLOAT32]
    register(name, kernel, inputs=(), params=params + (CTX,), infer_shape=infer_shape,
             infer_type=infer_type, doc=doc)


_creation('_npi_zeros', lambda xp, shape, dtype: 0, lambda a: a['shape'], (_SHAPE, _DTYPE),
          doc='``np.zeros``.')
_creation('_npi_ones', lambda xp, shape, dtype: 1, lambda a: a['shape'], (_SHAPE, _DTYPE),
          doc='``np.ones``.')
_creation('_npi_full', lambda xp, shape, value, dtype: value, lambda a: a['shape'],
          (_SHAPE, Param('value', p_scalar, 0.0), _DTYPE),
          dtype_rule=lambda a: full_dtype(a['value'], a['dtype']), doc='``np.full``.')


def _arange_count(attrs):
    start, stop, step = attrs['start'], attrs['stop'], attrs['step']
    if stop is None:
        start, stop = 0, start
    return max(arange_length(start, stop, step), 0) if (stop - start) * step > 0 else 0


def _arange(xp, start, stop, step, dtype):
    if stop is None:
        start, stop = 0, start
    count = _arange_count({'start': start, 'stop': stop, 'step': step})
    return start + step * xp.arange(count, dtype=np.float64)


_creation('_npi_arange', _arange, lambda a: (_arange_count(a),),
          (Param('start', p_scalar, 0), Param('stop', p_optional(p_scalar), None),
           Param('step', p_scalar, 1), _DTYPE), doc='``np.arange``.')


def _linspace(xp, start, stop, num, endpoint, dtype):
    return xp.linspace(start, stop, num, endpoint=endpoint)


def _check_num(attrs):
    if attrs['num'] < 0:
        raise ShapeError(f'num={attrs["num"]} must be non-negative')
    return (attrs['num'],)


_LINSPACE = (Param('start', p_float), Param('stop', p_float), Param('num', p_int, 50),
             Param('endpoint', p_bool, True))
_creation('_npi_linspace', _linspace, _check_num, _LINSPACE + (_DTYPE,),
          doc='``np.linspace``: `num` values evenly spaced from start to stop.')
_creation('_npi_logspace',
          lambda xp, start, stop, num, endpoint, base, dtype:
          xp.logspace(start, stop, num, endpoint=endpoint, base=base),
          _check_num, _LINSPACE + (Param('base', p_float, 10.0), _DTYPE),
          doc='``np.logspace``: `num` values evenly spaced on a log scale.')


def _eye_shape(attrs):
    rows = attrs['N']
    cols = rows if attrs['M'] is None else attrs['M']
    if rows < 0 or cols < 0:
        raise ShapeError(f'eye: N={rows} and M={cols} must be non-negative')
    return (rows, cols)


_creation('_npi_eye', lambda xp, N, M, k, dtype: xp.eye(N, M, k), _eye_shape,
          (Param('N', p_int), Param('M', p_optional(p_int), None), Param('k', p_int, 0),
           _DTYPE), doc='``np.eye``: ones on diagonal `k`.')


def _indices_shape(attrs):
    return (len(attrs['dimensions']),) + tuple(attrs['dimensions'])


_creation('_npi_indices', lambda xp, dimensions, dtype: xp.indices(dimensions), _indices_shape,
          (Param('dimensions', p_shape), Param('dtype', p_optional(p_dtype), np.dtype('int32'))),
          doc='``np.indices``: the index grid of a shape (int32 by default, as MXNet).')

for _window in ('hanning', 'hamming', 'blackman'):
    _creation(f'_npi_{_window}',
              (lambda fn: lambda xp, M, dtype: getattr(xp, fn)(M))(_window),
              lambda a: (max(a['M'], 0),), (Param('M', p_int), _DTYPE),
              doc=f'``np.{_window}`` window of M points.')


# ----------------------------------------------------------------------------------------------
# full_like: an input for the shape (and dtype), a value

def _full_like_type(attrs, in_dtypes):
    if attrs['dtype'] is not None:
        return list(in_dtypes), [attrs['dtype']]
    return list(in_dtypes), [in_dtypes[0]]


def _full_like_kernel(attrs, ins, outs, ctx):
    outs[0].fill(attrs['fill_value'])


register('_npi_full_like', _full_like_kernel, inputs=('a',),
         params=(Param('fill_value', p_scalar), _DTYPE),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[0]]),
         infer_type=_full_like_type,
         gradient=lambda F, attrs, ins, outs, og: [F.zeros_like(ins[0])],
         doc='``np.full_like``: the shape (and dtype) of `a`, every element `fill_value`.')
