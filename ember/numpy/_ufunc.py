"""NumPy's keywords of universal functions (where, casting, order, dtype, subok) for ``mx.np``
functions: checked once here, applied to the result.

>>> legal_option('casting', 'same_kind'), legal_option('casting', 'sometimes')
(True, False)
"""
from __future__ import annotations

import numpy as onp

__all__ = ['legal_option', 'options', 'finish']

_UFUNC_DTYPES = frozenset(['int8', 'uint8', 'int32', 'int64', 'float16', 'float32', 'float64'])
_CASTINGS = frozenset(['no', 'equiv', 'safe', 'same_kind', 'unsafe'])
_KEYS = ('where', 'casting', 'order', 'dtype', 'subok')


def legal_option(key, value) -> bool:
    """Whether ``key=value`` is a keyword a NumPy ufunc takes, with a value it accepts."""
    if key == 'where':
        return True
    if key == 'casting':
        return value in _CASTINGS
    if key == 'order':
        return isinstance(value, str)
    if key == 'dtype':
        try:
            return onp.dtype(value).name in _UFUNC_DTYPES
        except TypeError:
            return False
    if key == 'subok':
        return isinstance(value, bool)
    return False


def options(name, kwargs):
    """Check ufunc keywords; returns (dtype or None, where) to apply to the result."""
    dtype, where = None, True
    for key, value in kwargs.items():
        if not legal_option(key, value):
            if key in _KEYS:
                raise TypeError(f'{name}: {key}={value!r} is not understood')
            raise TypeError(f'{key!r} is an invalid keyword to function {name!r}')
        if key == 'order' and value not in ('C', 'K', 'A'):
            raise ValueError(f"{name}: order={value!r}: arrays are row-major; expected 'C', "
                             f"'K' or 'A'")
        if key == 'subok' and not value:
            raise ValueError(f'{name}: subok=False: results are always mx.np.ndarray')
        if key == 'dtype':
            dtype = onp.dtype(value)
        elif key == 'where':
            where = value
    return dtype, where


def finish(result, dtype, where, out, where_function):
    """Apply ufunc keywords: cast to `dtype`, keep `out` where `where` is False, write `out`."""
    if dtype is not None and result.dtype != dtype:
        result = result.astype(dtype)
    if where is not True:
        if out is None:
            raise ValueError('where= needs out=: the elements left out keep the values of out')
        result = where_function(where, result, out)
    if out is not None and result is not out:
        if tuple(out.shape) != tuple(result.shape):
            raise ValueError(f'out= has shape {out.shape}; the result has shape {result.shape}')
        out[...] = result
        return out
    return result
