"""Functions that make arrays, and MXNet's hand-written ``mx.nd`` helpers.

``array`` follows MXNet 1.x: the result is float32 unless `dtype` is given, except that an
NDArray source keeps its dtype. ``zeros``, ``ones``, ``full`` and ``arange`` run their operators
through the engine; ``empty`` only allocates.

>>> import ember.ndarray as nd
>>> nd.array([[1, 2], [3, 4]]).dtype, nd.zeros((2, 3), dtype='int32').asnumpy().tolist()
(<class 'numpy.float32'>, [[0, 0, 0], [0, 0, 0]])
>>> nd.arange(0, 6, 2, repeat=2).asnumpy().tolist()
[0.0, 0.0, 2.0, 2.0, 4.0, 4.0]
>>> nd.maximum(nd.array([1, 5]), 3).asnumpy().tolist()
[3.0, 5.0]
"""
from __future__ import annotations

import numbers

import numpy as np

from ember.base import dtype_of
from ember.op import registry
from ember.ndarray.ndarray import NDArray, empty as _empty, fill_fresh, invoke, parse_device

__all__ = ['array', 'empty', 'zeros', 'ones', 'full', 'arange', 'moveaxis', 'add', 'subtract',
           'multiply', 'divide', 'true_divide', 'modulo', 'power', 'maximum', 'minimum',
           'equal', 'not_equal', 'greater', 'greater_equal', 'lesser', 'lesser_equal',
           'logical_and', 'logical_or', 'logical_xor']

_FLOAT32 = np.dtype(np.float32)


def array(source_array, ctx=None, dtype=None) -> NDArray:
    """An array with the values of `source_array` (an NDArray or anything NumPy accepts).

    >>> import numpy as np, ember.ndarray as nd
    >>> nd.array(np.arange(3)).dtype, nd.array(np.arange(3), dtype='int64').dtype
    (<class 'numpy.float32'>, <class 'numpy.int64'>)
    """
    if isinstance(source_array, NDArray):
        dtype = source_array.dtype if dtype is None else dtype
        device = parse_device(ctx) if ctx is not None else source_array.context
        copied = source_array.astype(dtype)
        return copied if copied.context == device else copied.as_in_context(device)
    dtype = _FLOAT32 if dtype is None else dtype_of(dtype)
    if not isinstance(source_array, np.ndarray):
        try:
            source_array = np.array(source_array, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise TypeError(f'array: source_array must be array-like, got '
                            f'{type(source_array).__name__} ({exc})') from None
    result = _empty(source_array.shape, parse_device(ctx), dtype)
    fill_fresh(result, source_array)
    return result


def empty(shape, ctx=None, dtype=None) -> NDArray:
    """An array whose values are not initialised."""
    return _empty(shape, parse_device(ctx), dtype_of(dtype))


def _shape(shape):
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)


def _constant(op_name, shape, ctx, dtype, out, **extra):
    attrs = {'shape': _shape(shape), 'ctx': None, 'dtype': dtype_of(dtype)}
    attrs.update(extra)
    device = out.context if out is not None else parse_device(ctx)
    if op_name == '_zeros' and out is None:
        array = _empty(attrs['shape'], device, attrs['dtype'] or np.float32)
        if array._handle.zeroed:
            return array        # fresh from the system: already zeros, pages left untouched
        out = array
    result = invoke(registry.get(op_name), [], attrs, out=None if out is None else [out],
                    device=device)
    return result[0]


def zeros(shape, ctx=None, dtype=None, out=None, **kwargs) -> NDArray:
    """An array of zeros (float32 unless `dtype` is given)."""
    return _constant('_zeros', shape, ctx, dtype, out)


def ones(shape, ctx=None, dtype=None, out=None, **kwargs) -> NDArray:
    """An array of ones (float32 unless `dtype` is given)."""
    return _constant('_ones', shape, ctx, dtype, out)


def full(shape, val, ctx=None, dtype=None, out=None) -> NDArray:
    """An array filled with `val`."""
    return _constant('_full', shape, ctx, dtype, out, value=float(val))


def arange(start, stop=None, step=1.0, repeat=1, infer_range=False, ctx=None, dtype=None):
    """Values from `start` up to `stop` (exclusive) by `step`, each repeated `repeat` times."""
    attrs = registry.get('_arange').parse_attrs({
        'start': start, 'stop': stop, 'step': step, 'repeat': repeat,
        'infer_range': infer_range, 'dtype': dtype_of(dtype)})
    return invoke(registry.get('_arange'), [], attrs, device=parse_device(ctx))[0]


def moveaxis(tensor, source, destination) -> NDArray:
    """`tensor` with axis `source` moved to position `destination`.

    >>> import ember.ndarray as nd
    >>> moveaxis(nd.zeros((2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    ndim = tensor.ndim
    for name, axis in (('source', source), ('destination', destination)):
        if not -ndim <= axis < ndim:
            raise ValueError(f'moveaxis: {name} {axis} is out of bounds for {ndim} dimensions')
    order = [a for a in range(ndim) if a != source % ndim]
    order.insert(destination % ndim, source % ndim)
    return invoke(registry.get('transpose'), [tensor], {'axes': tuple(order)})[0]


# ----------------------------------------------------------------------------------------------
# Binary functions that take arrays or scalars on either side (MXNet's _ufunc_helper).

def _ufunc(array_op, scalar_op, rscalar_op, python_fn):
    array_op, scalar_op = registry.get(array_op), registry.get(scalar_op)
    rscalar_op = registry.get(rscalar_op)

    def apply(lhs, rhs):
        if isinstance(lhs, numbers.Real) and isinstance(rhs, numbers.Real):
            return python_fn(lhs, rhs)
        if isinstance(rhs, numbers.Real):
            return invoke(scalar_op, [lhs], {'scalar': float(rhs)})[0]
        if isinstance(lhs, numbers.Real):
            return invoke(rscalar_op, [rhs], {'scalar': float(lhs)})[0]
        if not isinstance(lhs, NDArray) or not isinstance(rhs, NDArray):
            raise TypeError(f'{array_op.name}: expected NDArrays or numbers, got '
                            f'{type(lhs).__name__} and {type(rhs).__name__}')
        return invoke(array_op, [lhs, rhs], {})[0]
    return apply


add = _ufunc('broadcast_add', '_plus_scalar', '_plus_scalar', lambda a, b: a + b)
subtract = _ufunc('broadcast_sub', '_minus_scalar', '_rminus_scalar', lambda a, b: a - b)
multiply = _ufunc('broadcast_mul', '_mul_scalar', '_mul_scalar', lambda a, b: a * b)
divide = _ufunc('broadcast_div', '_div_scalar', '_rdiv_scalar', lambda a, b: a / b)
true_divide = divide
modulo = _ufunc('broadcast_mod', '_mod_scalar', '_rmod_scalar', lambda a, b: a % b)
_power = _ufunc('broadcast_power', '_power_scalar', '_rpower_scalar', lambda a, b: a ** b)


def power(base, exp):
    """`base` to the power `exp`: arrays (broadcast) or numbers on either side."""
    return _power(base, exp)


maximum = _ufunc('broadcast_maximum', '_maximum_scalar', '_maximum_scalar', max)
minimum = _ufunc('broadcast_minimum', '_minimum_scalar', '_minimum_scalar', min)
equal = _ufunc('broadcast_equal', '_equal_scalar', '_equal_scalar',
               lambda a, b: float(a == b))
not_equal = _ufunc('broadcast_not_equal', '_not_equal_scalar', '_not_equal_scalar',
                   lambda a, b: float(a != b))
greater = _ufunc('broadcast_greater', '_greater_scalar', '_lesser_scalar',
                 lambda a, b: float(a > b))
greater_equal = _ufunc('broadcast_greater_equal', '_greater_equal_scalar',
                       '_lesser_equal_scalar', lambda a, b: float(a >= b))
lesser = _ufunc('broadcast_lesser', '_lesser_scalar', '_greater_scalar',
                lambda a, b: float(a < b))
lesser_equal = _ufunc('broadcast_lesser_equal', '_lesser_equal_scalar',
                      '_greater_equal_scalar', lambda a, b: float(a <= b))
logical_and = _ufunc('broadcast_logical_and', '_logical_and_scalar', '_logical_and_scalar',
                     lambda a, b: float(bool(a) and bool(b)))
logical_or = _ufunc('broadcast_logical_or', '_logical_or_scalar', '_logical_or_scalar',
                    lambda a, b: float(bool(a) or bool(b)))
logical_xor = _ufunc('broadcast_logical_xor', '_logical_xor_scalar', '_logical_xor_scalar',
                     lambda a, b: float(bool(a) != bool(b)))
