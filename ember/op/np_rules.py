"""What the ``mx.np`` operator families share: dtype rules, attribute converters and shape
helpers.

Ember's ``mx.np`` follows NumPy's results except where MXNet deliberately chose otherwise:

- float32 is the default float: creation without a dtype, integer division, float-valued
  functions of integers (``sin``, ``sqrt``, ``mean``) give float32 where NumPy gives float64;
- an integer (or bool) array meeting a float array takes the float's dtype
  (``int64 + float16 -> float16``), while floats and integers among themselves promote as NumPy;
- a Python scalar never widens an array: ``int32 + 2 -> int32``, ``float16 * 2.5 -> float16``,
  ``int32 + 2.5 -> float32`` (the default float), ``bool + 1 -> int64``;
- sums and products keep an integer array's dtype (NumPy widens to int64; bools give int64).

>>> import numpy as np
>>> promote(np.dtype('int64'), np.dtype('float16')), promote_scalar(np.dtype('int32'), 2.5)
(dtype('float16'), dtype('float32'))
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ember.op.registry import ShapeError, _literal

__all__ = ['unknown', 'outputs_of', 'gradient_shapes', 'FLOAT32', 'BOOL', 'INT64', 'promote',
           'promote_all', 'promote_scalar', 'float_of', 'p_scalar', 'p_any', 'p_int_tuple',
           'p_shape_or_int', 'scalar_as', 'normalize_axis', 'reduced_shape', 'sum_to_shape',
           'broadcast_all', 'eval_shapes', 'is_float']

FLOAT32 = np.dtype(np.float32)
BOOL = np.dtype(np.bool_)
INT64 = np.dtype(np.int64)


def unknown(dtypes) -> bool:
    """Whether any of `dtypes` is None (``None in dtypes`` is wrong: a dtype equals None)."""
    return any(d is None for d in dtypes)


def outputs_of(value) -> list:
    """The outputs of an ``F.<op>(...)`` call as a list: a list of arrays from ``mx.nd``, a
    Symbol of several outputs from ``mx.sym`` (one Symbol per output)."""
    if isinstance(value, (list, tuple)):
        return list(value)
    heads = getattr(value, '_heads', None)
    if heads is not None and len(heads) > 1:
        return [type(value)([head]) for head in heads]
    return [value]


def is_float(dtype) -> bool:
    """Float kinds, bfloat16 (kind 'V' in ml_dtypes) included."""
    return dtype.kind in 'fc' or dtype.name == 'bfloat16'


def promote(lhs, rhs):
    """The dtype of an operation between arrays of dtypes `lhs` and `rhs`."""
    if lhs == rhs:
        return lhs
    lf, rf = is_float(lhs), is_float(rhs)
    if lf != rf:
        return lhs if lf else rhs
    if lhs.name == 'bfloat16' or rhs.name == 'bfloat16':
        other = rhs if lhs.name == 'bfloat16' else lhs
        return lhs if other.itemsize <= 2 and other.name != 'float16' else np.dtype(np.float32)
    return np.promote_types(lhs, rhs)


def promote_all(dtypes):
    result = dtypes[0]
    for dtype in dtypes[1:]:
        result = promote(result, dtype)
    return result


def promote_scalar(dtype, scalar):
    """The dtype of an operation between an array of `dtype` and a Python scalar."""
    if isinstance(scalar, (bool, np.bool_)):
        return dtype
    if isinstance(scalar, numbers.Integral):
        return INT64 if dtype.kind == 'b' else dtype
    return dtype if is_float(dtype) else FLOAT32


def float_of(dtype):
    """`dtype` if it is a float, else the default float32."""
    return dtype if is_float(dtype) else FLOAT32


def scalar_as(value, dtype):
    """Python scalar `value` as a NumPy scalar of `dtype` (integers wrap around as in C)."""
    if dtype.kind == 'b':
        return np.bool_(value)
    if dtype.kind in 'iu':
        if isinstance(value, float) and not math.isfinite(value):
            return np.array(0, dtype)[()]
        return np.array(math.trunc(value)).astype(dtype)[()]
    return np.array(value, dtype)[()]


# ----------------------------------------------------------------------------------------------
# Attribute converters

def p_scalar(value):
    """A Python bool, int or float, kept as its type (the result's dtype depends on it)."""
    value = _literal(value)
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise ValueError('a number')


def p_any(value):
    """Any value, from MXNet's text form where it is one (None, numbers, tuples, strings)."""
    return _literal(value)


def p_int_tuple(value):
    """A tuple of ints from an int or a sequence."""
    value = _literal(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, (tuple, list)):
        return tuple(int(v) for v in value)
    raise ValueError('an int or a tuple of ints')


def p_shape_or_int(value):
    """An int, or a tuple of ints (``indices_or_sections``, ``repeats``)."""
    value = _literal(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (tuple, list)):
        return tuple(int(v) for v in value)
    raise ValueError('an int or a tuple of ints')


# ----------------------------------------------------------------------------------------------
# Shapes

def normalize_axis(axis, ndim, what='axis'):
    """Axis or axes (None: all) as a sorted tuple of non-negative ints, checked."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    result = []
    for a in axes:
        if not -ndim <= a < max(ndim, 1) or (ndim == 0 and a not in (0, -1)):
            raise ShapeError(f'{what} {a} is out of bounds for an array of {ndim} dimensions')
        result.append(a % max(ndim, 1) if ndim else 0)
    if len(set(result)) != len(result):
        raise ShapeError(f'{what} {axis}: repeated axis')
    return tuple(sorted(result)) if ndim else ()


def reduced_shape(shape, axis, keepdims):
    axes = normalize_axis(axis, len(shape))
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def sum_to_shape(xp, grad, shape):
    """Sum the broadcast axes of `grad` away so it has `shape`."""
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(extra + i for i, d in enumerate(shape)
                                       if d == 1 and grad.shape[extra + i] != 1)
    return xp.sum(grad, axis=axes).reshape(shape)


def broadcast_all(shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f'shapes {" ".join(str(tuple(s)) for s in shapes)} cannot be '
                         f'broadcast together') from None


def gradient_shapes(grad_count, forward_shapes, result):
    """infer_shape of a backward operator whose first `grad_count` inputs are output gradients:
    unknown ones take the shapes of the forward outputs, ``forward_shapes(attrs, shapes)``. A
    graph marks the shape () as unknown, so the head gradient of a zero-dim output gets its
    shape only this way. ``result(attrs, shapes)`` gives the backward's output shapes."""
    def infer(attrs, shapes):
        shapes = list(shapes)
        if any(s is None for s in shapes[:grad_count]):
            found = forward_shapes(attrs, shapes)
            for i in range(grad_count):
                if shapes[i] is None and found is not None and i < len(found):
                    shapes[i] = None if found[i] is None else tuple(found[i])
        return shapes, result(attrs, shapes)
    return infer


def eval_shapes(fn, shapes, dtypes=None, attrs=None):
    """Output shapes of `fn(np, *arrays, **attrs)` run on stand-ins of `shapes`: zero-stride
    arrays that take no memory (outputs of gathers over them still do)."""
    dtypes = dtypes or [np.dtype(np.int8)] * len(shapes)
    stand_ins = [np.broadcast_to(np.zeros((), d), s) for d, s in zip(dtypes, shapes)]
    try:
        result = fn(np, *stand_ins, **(attrs or {}))
    except (ValueError, IndexError, TypeError, np.exceptions.AxisError) as exc:
        raise ShapeError(str(exc)) from None
    results = result if isinstance(result, (list, tuple)) else [result]
    return [tuple(np.shape(r)) for r in results]
