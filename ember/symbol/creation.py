"""MXNet's hand-written ``mx.sym`` functions: constants, ranges and two-way arithmetic.

>>> import ember.symbol as sym
>>> z = sym.zeros((2, 3), name='z')
>>> z.infer_shape(), z.infer_type()[1]
(([], [(2, 3)], []), [<class 'numpy.float32'>])
>>> sym.maximum(sym.var('a'), 0).attr('op_name'), sym.maximum(2, 3)
('_maximum_scalar', 3)
"""
from __future__ import annotations

import numbers

import numpy as np

from ember.op import registry
from ember.symbol.symbol import Symbol, create

__all__ = ['zeros', 'ones', 'full', 'arange', 'maximum', 'minimum', 'pow', 'power']


def _call(op_name, inputs=(), **params):
    name, attr = params.pop('name', None), params.pop('attr', None)
    return create(registry.get(op_name), op_name.lower(), inputs, params=params, name=name,
                  attr=attr)


def zeros(shape, dtype=None, **kwargs) -> Symbol:
    """A symbol of zeros (float32 unless `dtype` is given)."""
    return _call('_zeros', shape=shape, dtype=np.float32 if dtype is None else dtype, **kwargs)


def ones(shape, dtype=None, **kwargs) -> Symbol:
    """A symbol of ones (float32 unless `dtype` is given)."""
    return _call('_ones', shape=shape, dtype=np.float32 if dtype is None else dtype, **kwargs)


def full(shape, val, dtype=None, **kwargs) -> Symbol:
    """A symbol filled with `val`."""
    return _call('_full', shape=shape, dtype=np.float32 if dtype is None else dtype,
                 value=float(val), **kwargs)


def arange(start, stop=None, step=1.0, repeat=1, infer_range=False, name=None,
           dtype=None) -> Symbol:
    """Evenly spaced values in [start, stop), each repeated `repeat` times."""
    return _call('_arange', start=start, stop=stop, step=step, repeat=repeat,
                 infer_range=infer_range, name=name,
                 dtype=np.float32 if dtype is None else dtype)


def _two_way(left, right, symbol_op, scalar_op, reflected_op, python_fn):
    if isinstance(left, Symbol) and isinstance(right, Symbol):
        return _call(symbol_op, [left, right])
    if isinstance(left, Symbol) and isinstance(right, numbers.Number):
        return _call(scalar_op, [left], scalar=right)
    if isinstance(right, Symbol) and isinstance(left, numbers.Number):
        return _call(reflected_op, [right], scalar=left)
    if isinstance(left, numbers.Number) and isinstance(right, numbers.Number):
        return python_fn(left, right)
    raise TypeError(f'types ({type(left).__name__}, {type(right).__name__}) not supported; '
                    f'expected symbols and numbers')


def maximum(left, right):
    """Element-wise maximum of symbols and numbers (broadcasting between symbols)."""
    return _two_way(left, right, 'broadcast_maximum', '_MaximumScalar', '_MaximumScalar', max)


def minimum(left, right):
    """Element-wise minimum of symbols and numbers (broadcasting between symbols)."""
    return _two_way(left, right, 'broadcast_minimum', '_MinimumScalar', '_MinimumScalar', min)


def power(base, exp):
    """`base` to the power `exp`, symbols and numbers (broadcasting between symbols)."""
    return _two_way(base, exp, 'broadcast_power', '_PowerScalar', '_RPowerScalar',
                    lambda a, b: a ** b)


pow = power  # noqa: A001 (MXNet's name)
