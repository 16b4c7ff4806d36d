"""MXNet's hand-written ``mx.sym`` functions over operators whose names start with an
underscore: eye, linspace, histogram, split_v2 and hypot.

>>> import ember.symbol as sym
>>> sym.eye(3, k=-1).infer_shape()[1], sym.hypot(sym.var('a'), 2.0).attr('op_name')
([(3, 3)], '_hypot_scalar')
"""
from __future__ import annotations

import numbers

import numpy as np

from ember.op import registry
from ember.symbol.symbol import Symbol, create

__all__ = ['eye', 'linspace', 'histogram', 'split_v2', 'hypot']


def _call(op_name, inputs=(), **params):
    name, attr = params.pop('name', None), params.pop('attr', None)
    return create(registry.get(op_name), op_name.lstrip('_').lower(), inputs, params=params,
                  name=name, attr=attr)


def eye(N, M=0, k=0, dtype=None, **kwargs) -> Symbol:
    """An N x M (M = 0: N x N) symbol with ones on diagonal k."""
    return _call('_eye', N=N, M=M, k=k, dtype=np.float32 if dtype is None else dtype, **kwargs)


def linspace(start, stop, num, endpoint=True, name=None, dtype=None) -> Symbol:
    """`num` evenly spaced values from start to stop."""
    return _call('_linspace', start=start, stop=stop, num=num, endpoint=endpoint, name=name,
                 dtype=np.float32 if dtype is None else dtype)


def histogram(a, bins=10, range=None, **kwargs) -> Symbol:
    """(counts, edges) of `a`: `bins` equal bins over `range`, or edges given as a symbol."""
    if isinstance(bins, Symbol):
        return _call('_histogram', [a, bins], **kwargs)
    if range is None:
        raise ValueError('histogram: bins given as a count needs range=(low, high)')
    return _call('_histogram', [a], bin_cnt=bins, range=tuple(range), **kwargs)


def split_v2(ary, indices_or_sections, axis=0, squeeze_axis=False) -> Symbol:
    """`ary` split along `axis` into equal sections (an int) or at the given points."""
    if isinstance(indices_or_sections, numbers.Integral):
        split = {'indices': (0,), 'sections': int(indices_or_sections)}
    elif isinstance(indices_or_sections, tuple):
        split = {'indices': (0,) + tuple(indices_or_sections), 'sections': 0}
    else:
        raise ValueError('indices_or_sections must be an int or a tuple of ints')
    return _call('_split_v2', [ary], axis=axis, squeeze_axis=squeeze_axis, **split)


def hypot(left, right):
    """sqrt(left^2 + right^2) of symbols and numbers."""
    if isinstance(left, Symbol) and isinstance(right, Symbol):
        return _call('_hypot', [left, right])
    if isinstance(left, Symbol) and isinstance(right, numbers.Number):
        return _call('_hypot_scalar', [left], scalar=right)
    if isinstance(right, Symbol) and isinstance(left, numbers.Number):
        return _call('_hypot_scalar', [right], scalar=left)
    if isinstance(left, numbers.Number) and isinstance(right, numbers.Number):
        return float(np.hypot(left, right))
    raise TypeError(f'hypot: expected symbols or numbers, got {type(left).__name__} and '
                    f'{type(right).__name__}')
