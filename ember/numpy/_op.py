"""The functions of ``mx.np``: NumPy's signatures over the ``_npi_*`` operators.

Every function takes ``mx.np`` arrays (Python numbers and array-likes where NumPy takes them)
and returns ``mx.np`` arrays recorded by autograd; given Symbols it builds graph nodes, so the
same code runs in hybridized blocks. Functions whose output shape depends on values (unique,
nonzero, boolean masks, bincount) wait for their input and run on the host, as MXNet's do.

>>> from ember import numpy as np
>>> a = np.array([[1., 2.], [3., 4.]])
>>> np.concatenate([a, a]).shape, np.stack([a, a], axis=-1).shape
((4, 2), (2, 2, 2))
>>> np.einsum('ij,jk->ik', a, a), np.linalg.det(a).round(3)
(array([[ 7., 10.],
       [15., 22.]]), array(-2.))
"""
from __future__ import annotations

import builtins
import numbers
import sys

import numpy as onp

from ember.base import dtype_of
from ember.ndarray.ndarray import NDArray, parse_device
from ember.numpy import _ufunc, multiarray
from ember.numpy.multiarray import (NotForSymbol, _graph_scope, _op, _scalar_or_array, apply,
                                    array, as_array, as_np, fallback, is_symbol, wrap)
from ember.op.np_elemwise import BINARY, UNARY

_builtin_sum, _builtin_max, _builtin_min, _builtin_abs = (builtins.sum, builtins.max,
                                                          builtins.min, builtins.abs)
_builtin_round, _builtin_all, _builtin_any = builtins.round, builtins.all, builtins.any


def _is_number(value):
    return isinstance(value, numbers.Number) and not isinstance(value, complex)


def _array_arg(value, like=None):
    """An array argument: mx arrays and Symbols as they are, anything else converted."""
    if isinstance(value, NDArray) or is_symbol(value):
        return value
    return as_array(value, like)


def _values(name, value):
    """A value argument that must be known now (it becomes an attribute)."""
    if is_symbol(value):
        raise NotForSymbol(f'np.{name}: this argument must be a number or an array with '
                           f'values, not a Symbol')
    if isinstance(value, NDArray):
        return value.asnumpy()
    return value


def _host(name, value):
    """The values of an array argument, waiting for them (functions whose shape depends on
    values)."""
    if is_symbol(value):
        raise NotForSymbol(f'np.{name}: the shape of its result depends on values, so it cannot '
                           f'be part of a traced graph')
    if isinstance(value, NDArray):
        return value.asnumpy()
    return onp.asarray(value)


def _device_of(*values):
    for value in values:
        if isinstance(value, NDArray):
            return value.context
    return None


def _from_host(values, device, dtype=None):
    return array(onp.asarray(values), dtype=dtype or onp.asarray(values).dtype, ctx=device)


def _axis_attr(axis):
    if axis is None:
        return None
    if isinstance(axis, (list, tuple)):
        return tuple(int(a) for a in axis)
    return int(axis)


# ----------------------------------------------------------------------------------------------
# Universal functions

def _finish(result, dtype, where, out):
    return _ufunc.finish(result, dtype, where, out, where_function=where_)


def _unary(public, op_name=None):
    op_name = f'_npi_{op_name or public}'
    numpy_function = getattr(onp, public, None)

    def function(x, out=None, **kwargs):
        dtype, where = _ufunc.options(public, kwargs)
        if _is_number(x) and out is None and numpy_function is not None:
            return numpy_function(x)
        result = apply(op_name, [_array_arg(x)])
        return _finish(result, dtype, where, out)
    function.__name__ = function.__qualname__ = public
    function.__doc__ = f'``np.{public}`` element by element (ufunc keywords accepted).'
    return function


def _binary_call(name, x1, x2):
    a, b = _scalar_or_array(x1, x2), _scalar_or_array(x2, x1)
    if _is_number(a) and _is_number(b):
        return getattr(onp, name)(a, b)
    if _is_number(b):
        return apply(f'_npi_{name}_scalar', [a], {'scalar': b, 'reverse': False})
    if _is_number(a):
        return apply(f'_npi_{name}_scalar', [b], {'scalar': a, 'reverse': True})
    return apply(f'_npi_{name}', [a, b])


def _binary(public, op_name=None):
    name = op_name or public

    def function(x1, x2, out=None, **kwargs):
        dtype, where = _ufunc.options(public, kwargs)
        result = _binary_call(name, x1, x2)
        if not isinstance(result, (NDArray,)) and not is_symbol(result):
            return result
        return _finish(result, dtype, where, out)
    function.__name__ = function.__qualname__ = public
    function.__doc__ = (f'``np.{public}`` with broadcasting and a Python scalar on either '
                        f'side.')
    return function


_UNARY_NAMES = {name: name for name in UNARY}
_UNARY_NAMES.update(abs='absolute', bitwise_not='invert', rad2deg='degrees',
                    deg2rad='radians')
for _public, _name in _UNARY_NAMES.items():
    globals()[_public] = _unary(_public, _name)

_BINARY_NAMES = {name: name for name in BINARY}
_BINARY_NAMES.update(divide='true_divide', remainder='mod')
for _public, _name in _BINARY_NAMES.items():
    globals()[_public] = _binary(_public, _name)


def around(x, decimals=0, out=None, **kwargs):
    """``np.around``: round half to even at `decimals` digits (ufunc keywords accepted)."""
    dtype, where = _ufunc.options('around', kwargs)
    if _is_number(x):
        return onp.around(x, decimals)
    return _finish(apply('_npi_around', [_array_arg(x)], {'decimals': decimals}), dtype, where,
                   out)


def round(x, decimals=0, out=None, **kwargs):  # noqa: A001  (NumPy's name)
    """``np.round``, the same as :func:`around`."""
    return around(x, decimals, out, **kwargs)


round_ = round


def clip(a, a_min=None, a_max=None, out=None, **kwargs):
    """``np.clip`` with scalar bounds."""
    if a_min is None and a_max is None:
        raise ValueError('clip: give a_min, a_max or both')
    dtype, where = _ufunc.options('clip', kwargs)
    bounds = {'a_min': None if a_min is None else float(_values('clip', a_min)),
              'a_max': None if a_max is None else float(_values('clip', a_max))}
    return _finish(apply('_npi_clip', [_array_arg(a)], bounds), dtype, where, out)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None, **kwargs):
    """``np.nan_to_num``: NaN and infinities replaced by finite numbers (in place for
    copy=False)."""
    if kwargs:
        raise TypeError(f'nan_to_num: unknown arguments {sorted(kwargs)}')
    result = apply('_npi_nan_to_num', [_array_arg(x)],
                   {'nan': nan, 'posinf': posinf, 'neginf': neginf})
    if not copy and isinstance(x, NDArray):
        x[...] = result
        return x
    return result


def divmod(x1, x2, out=None):  # noqa: A001  (NumPy's name)
    """``np.divmod``: (floor quotient, remainder)."""
    quotient, remainder_ = floor_divide(x1, x2), mod(x1, x2)
    if out is not None:
        out[0][...], out[1][...] = quotient, remainder_
        return out
    return quotient, remainder_


def modf(x, out=None):
    """``np.modf``: (fractional part, integral part), both with x's sign."""
    whole = trunc(x)
    parts = (subtract(x, whole), whole)
    if out is not None:
        out[0][...], out[1][...] = parts
        return out
    return parts


frexp = fallback(onp.frexp, 'frexp')
nansum = fallback(onp.nansum, 'nansum')       # NumPy's on a host copy, as MXNet's fallbacks
nanprod = fallback(onp.nanprod, 'nanprod')


# ----------------------------------------------------------------------------------------------
# Creation

def _shape_of(shape):
    if isinstance(shape, (int, onp.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


def _creation(op_name, attrs, ctx, out=None):
    result = apply(op_name, [], attrs, ctx=ctx)
    if out is not None:
        out[...] = result
        return out
    return result


def _dtype_attr(dtype):
    return None if dtype is None else dtype_of(dtype)


def _row_major(name, order):
    if order not in ('C', 'K', 'A'):
        raise ValueError(f"{name}: order={order!r}: arrays are row-major ('C')")


def zeros(shape, dtype=None, order='C', ctx=None, out=None):
    """``np.zeros`` (float32 unless `dtype`)."""
    _row_major('zeros', order)
    return _creation('_npi_zeros', {'shape': _shape_of(shape), 'dtype': _dtype_attr(dtype)},
                     ctx, out)


def ones(shape, dtype=None, order='C', ctx=None, out=None):
    """``np.ones`` (float32 unless `dtype`)."""
    _row_major('ones', order)
    return _creation('_npi_ones', {'shape': _shape_of(shape), 'dtype': _dtype_attr(dtype)},
                     ctx, out)


def empty(shape, dtype=None, order='C', ctx=None):
    """``np.empty``: an array whose values are not set (float32 unless `dtype`; zeros in a
    graph)."""
    _row_major('empty', order)
    if _graph_scope.active:
        return zeros(shape, dtype, order, ctx)
    from ember.ndarray.ndarray import empty as nd_empty
    return wrap(nd_empty(_shape_of(shape), parse_device(ctx),
                         _dtype_attr(dtype) or onp.dtype(onp.float32)))


def full(shape, fill_value, dtype=None, order='C', ctx=None, out=None):
    """``np.full``: `fill_value` everywhere (float32 unless `dtype`, bool for a bool)."""
    _row_major('full', order)
    if isinstance(fill_value, NDArray):
        dtype = dtype or fill_value.dtype
        result = broadcast_to(fill_value.astype(dtype_of(dtype)), _shape_of(shape)).copy()
        return _finish(result, None, True, out)
    if isinstance(fill_value, (onp.number, onp.bool_)):
        fill_value = fill_value.item()
    return _creation('_npi_full', {'shape': _shape_of(shape), 'value': fill_value,
                                   'dtype': _dtype_attr(dtype)}, ctx, out)


def identity(n, dtype=None, ctx=None):
    """``np.identity``: the n x n identity matrix."""
    return eye(n, dtype=dtype, ctx=ctx)


def eye(N, M=None, k=0, dtype=None, ctx=None, **kwargs):
    """``np.eye``: ones on diagonal `k`."""
    if kwargs:
        raise TypeError(f'eye: unknown arguments {sorted(kwargs)}')
    return _creation('_npi_eye', {'N': N, 'M': M, 'k': k, 'dtype': _dtype_attr(dtype)}, ctx)


def arange(start, stop=None, step=1, dtype=None, ctx=None):
    """``np.arange`` (float32 unless `dtype`, as MXNet)."""
    return _creation('_npi_arange', {'start': start, 'stop': stop, 'step': step,
                                     'dtype': _dtype_attr(dtype)}, ctx)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0,
             ctx=None):
    """``np.linspace``: `num` values evenly spaced from start to stop."""
    if axis != 0:
        raise ValueError(f'linspace: axis={axis}: the values lie along axis 0')
    result = _creation('_npi_linspace', {'start': start, 'stop': stop, 'num': num,
                                         'endpoint': endpoint, 'dtype': _dtype_attr(dtype)},
                       ctx)
    if retstep:
        step = (stop - start) / max(num - 1 if endpoint else num, 1)
        return result, step
    return result


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0, ctx=None):
    """``np.logspace``: `num` values evenly spaced on a log scale."""
    if axis != 0:
        raise ValueError(f'logspace: axis={axis}: the values lie along axis 0')
    return _creation('_npi_logspace', {'start': start, 'stop': stop, 'num': num,
                                       'endpoint': endpoint, 'base': base,
                                       'dtype': _dtype_attr(dtype)}, ctx)


def indices(dimensions, dtype=None, ctx=None):
    """``np.indices``: the index grid of a shape (int32 unless `dtype`, as MXNet)."""
    return _creation('_npi_indices', {'dimensions': _shape_of(dimensions),
                                      'dtype': _dtype_attr(dtype) or onp.dtype(onp.int32)},
                     ctx)


def _window(name):
    def window(M, dtype=None, ctx=None):
        return _creation(f'_npi_{name}', {'M': M, 'dtype': _dtype_attr(dtype)}, ctx)
    window.__name__ = window.__qualname__ = name
    window.__doc__ = f'``np.{name}``: the {name} window of M points (float32).'
    return window


hanning, hamming, blackman = (_window(n) for n in ('hanning', 'hamming', 'blackman'))


def full_like(a, fill_value, dtype=None, order='C', ctx=None, out=None, **kwargs):
    """``np.full_like``: the shape (and dtype) of `a`, every element `fill_value`."""
    if isinstance(fill_value, (onp.number, onp.bool_)):
        fill_value = fill_value.item()
    a = _array_arg(a)
    result = apply('_npi_full_like', [a], {'fill_value': fill_value,
                                           'dtype': _dtype_attr(dtype)})
    if ctx is not None and not is_symbol(result):
        result = result.as_in_ctx(parse_device(ctx))
    if out is not None:
        out[...] = result
        return out
    return result


def zeros_like(a, dtype=None, order='C', ctx=None, out=None):
    """``np.zeros_like``."""
    return full_like(a, 0, dtype, order, ctx, out)


def ones_like(a, dtype=None, order='C', ctx=None, out=None):
    """``np.ones_like``."""
    return full_like(a, 1, dtype, order, ctx, out)


def empty_like(prototype, dtype=None, order='C', subok=False, shape=None):
    """``np.empty_like``: an array shaped like `prototype` (its values are zeros here)."""
    if shape is not None:
        return empty(shape, dtype or prototype.dtype, ctx=prototype.context)
    return full_like(prototype, 0, dtype)


def copy(a, out=None, order='C'):
    """``np.copy``: a new array with the same values."""
    a = _array_arg(a)
    if is_symbol(a):
        return apply('_copy', [a])
    return _finish(a.copy(order), None, True, out)


def asarray(a, dtype=None, ctx=None):
    """``np.asarray``: `a` itself when it is already an mx.np array of that dtype."""
    if isinstance(a, NDArray) and (dtype is None or dtype_of(dtype) == a._view.dtype) and \
            (ctx is None or parse_device(ctx) == a.context):
        return as_np(a)
    return array(a, dtype=dtype, ctx=ctx)


def meshgrid(*xi, **kwargs):
    """``np.meshgrid``: coordinate arrays from coordinate vectors ('xy' or 'ij' indexing)."""
    indexing = kwargs.pop('indexing', 'xy')
    sparse = kwargs.pop('sparse', False)
    copy_ = kwargs.pop('copy', True)
    if kwargs:
        raise TypeError(f'meshgrid: unknown arguments {sorted(kwargs)}')
    if indexing not in ('xy', 'ij'):
        raise ValueError(f"meshgrid: indexing={indexing!r}: expected 'xy' or 'ij'")
    count = len(xi)
    shapes = []
    for i in range(count):
        shape = [1] * count
        shape[i] = -1
        if indexing == 'xy' and count > 1 and i < 2:
            shape[0], shape[1] = shape[1], shape[0]
        shapes.append(tuple(shape))
    grids = [reshape(_array_arg(x), shape) for x, shape in zip(xi, shapes)]
    if sparse:
        return grids
    full_shape = tuple(_builtin_max(g.shape[d] for g in grids) for d in range(count))
    grids = [broadcast_to(g, full_shape) for g in grids]
    return [g.copy() for g in grids] if copy_ else grids


# ----------------------------------------------------------------------------------------------
# Reductions

def _where_masked(a, where, identity):
    if where is None or where is True:
        return a
    return where_(where, a, identity)


def _reduce(name, a, axis=None, keepdims=False, out=None, **attrs):
    a = _array_arg(a)
    attrs['axis'] = _axis_attr(axis)
    attrs['keepdims'] = bool(keepdims)
    result = apply(f'_npi_{name}', [a], attrs)
    if out is not None:
        return _finish(result, None, True, out)
    return result


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):  # noqa
    """``np.sum`` (an integer array keeps its dtype, as MXNet; bools sum to int64)."""
    a = _where_masked(_array_arg(a), where, 0)
    return _reduce('sum', a, axis, keepdims, out, dtype=_dtype_attr(dtype), initial=initial)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    """``np.prod`` (dtypes as :func:`sum`)."""
    a = _where_masked(_array_arg(a), where, 1)
    return _reduce('prod', a, axis, keepdims, out, dtype=_dtype_attr(dtype), initial=initial)


product = prod


def mean(a, axis=None, dtype=None, out=None, keepdims=False, where=None):
    """``np.mean`` (float32 for integer arrays, as MXNet)."""
    if where is not None and where is not True:
        a = _array_arg(a)
        mask = broadcast_to(_array_arg(where, a), a.shape)
        total = sum(a, axis, dtype, None, keepdims, where=mask)
        count = sum(mask.astype(onp.float32), axis, keepdims=keepdims)
        return _finish(true_divide(total, count), None, True, out)
    return _reduce('mean', a, axis, keepdims, out, dtype=_dtype_attr(dtype))


def _minmax(name):
    def reduction(a, axis=None, out=None, keepdims=False, initial=None, where=None):
        a = _array_arg(a)
        if where is not None and where is not True:
            if initial is None:
                raise ValueError(f'{name}: where= needs initial= (the value of an empty '
                                 f'selection)')
            a = where_(where, a, initial)
        return _reduce(name, a, axis, keepdims, out, initial=initial)
    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = f'``np.{name}`` over the given axes (NumPy\'s ``a{name}``).'
    return reduction


max = _minmax('max')  # noqa: A001
min = _minmax('min')  # noqa: A001
amax, amin = max, min


def ptp(a, axis=None, out=None, keepdims=False):
    """``np.ptp``: max - min along the axes."""
    return _finish(subtract(max(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims)),
                   None, True, out)


def _deviation(name):
    def reduction(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=None):
        if where is not None and where is not True:
            raise ValueError(f'{name}: where= is not supported; select the elements first')
        return _reduce(name, a, axis, keepdims, out, dtype=_dtype_attr(dtype), ddof=ddof)
    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = f'``np.{name}`` (float32 for integer arrays).'
    return reduction


std = _deviation('std')
var = _deviation('var')


def _logical(name):
    def reduction(a, axis=None, out=None, keepdims=False, where=None):
        a = _array_arg(a)
        if where is not None and where is not True:
            a = where_(where, a, name == 'all')
        return _reduce(name, a, axis, keepdims, out)
    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = f'``np.{name}``: a bool array.'
    return reduction


all = _logical('all')  # noqa: A001
any = _logical('any')  # noqa: A001


def _arg(name):
    def reduction(a, axis=None, out=None, keepdims=False):
        a = _array_arg(a)
        result = apply(f'_npi_{name}', [a], {'axis': axis, 'keepdims': keepdims})
        return _finish(result, None, True, out)
    reduction.__name__ = reduction.__qualname__ = name
    reduction.__doc__ = f'``np.{name}``: int64 positions.'
    return reduction


argmax = _arg('argmax')
argmin = _arg('argmin')


def cumsum(a, axis=None, dtype=None, out=None):
    """``np.cumsum``: running sums (of the flattened array for axis=None)."""
    result = apply('_npi_cumsum', [_array_arg(a)], {'axis': axis, 'dtype': _dtype_attr(dtype)})
    return _finish(result, None, True, out)


def average(a, axis=None, weights=None, returned=False, out=None, keepdims=False):
    """``np.average``: the weighted mean (weights broadcast along `axis` when 1-D)."""
    if out is not None:
        result = average(a, axis, weights, returned, None, keepdims)
        value = result[0] if returned else result
        _finish(value, None, True, out)
        return (out, result[1]) if returned else out
    a = _array_arg(a)
    if weights is None:
        result = mean(a, axis, keepdims=keepdims)
        scale = a.size / (result.size or 1) if not is_symbol(a) else None
        total = full_like(result, scale) if returned else None
        return (result, total) if returned else result
    weights = _array_arg(weights, a)
    if weights.shape != a.shape:
        if axis is None or weights.ndim != 1:
            raise TypeError('average: weights of another shape than a need axis= and must '
                            'be 1-D')
        shape = [1] * a.ndim
        shape[axis] = weights.shape[0]
        weights = reshape(weights, tuple(shape))
    total = sum(broadcast_to(weights, a.shape), axis, keepdims=keepdims)
    result = true_divide(sum(multiply(a, weights), axis, keepdims=keepdims), total)
    return (result, total.astype(result.dtype)) if returned else result


def _quantile(a, q, axis, out, interpolation, keepdims, percent, method=None):
    a = _array_arg(a)
    if method is not None:
        interpolation = method
    q_values = _values('quantile', q)
    q_attr = tuple(float(v) for v in onp.ravel(q_values)) if onp.ndim(q_values) else \
        float(q_values)
    result = apply('_npi_quantile', [a], {'q': q_attr, 'axis': _axis_attr(axis),
                                         'interpolation': interpolation,
                                         'keepdims': keepdims, 'percent': percent})
    if onp.ndim(q_values) > 1:
        result = reshape(result, onp.shape(q_values) + result.shape[1:])
    return _finish(result, None, True, out)


def percentile(a, q, axis=None, out=None, overwrite_input=None, interpolation='linear',
               keepdims=False, method=None):
    """``np.percentile``: values below which q percent of the data fall."""
    return _quantile(a, q, axis, out, interpolation, keepdims, True, method)


def quantile(a, q, axis=None, out=None, overwrite_input=None, interpolation='linear',
             keepdims=False, method=None):
    """``np.quantile``: values below which a fraction q of the data falls."""
    return _quantile(a, q, axis, out, interpolation, keepdims, False, method)


# ----------------------------------------------------------------------------------------------
# Shapes (views for arrays; operators for symbols and autograd)

def _view(a, op_name, attrs, shape):
    """A view of `a` with `shape`: shares storage and variable; recorded as `op_name`."""
    return wrap(a._reshaped(shape, _op(op_name), _op(op_name).parse_attrs(attrs)))


def reshape(a, newshape, order='C', out=None):
    """``np.reshape``: a view with a new shape (one -1 inferred; a copy into `out`)."""
    if out is not None:
        return _finish(reshape(a, newshape, order), None, True, out)
    if order not in ('C', 'A'):
        raise ValueError(f"reshape: order={order!r}: arrays are row-major ('C')")
    a = _array_arg(a)
    newshape = _shape_of(newshape)
    if is_symbol(a):
        return apply('_npi_reshape', [a], {'newshape': newshape})
    from ember.op.np_shape import numpy_reshape_shape
    shape = numpy_reshape_shape(a.shape, newshape)
    return _view(a, '_npi_reshape', {'newshape': newshape}, shape)


def ravel(x, order='C'):
    """``np.ravel``: the flattened array (a view)."""
    return reshape(x, (-1,), order)


def expand_dims(a, axis):
    """``np.expand_dims``: axes of length one inserted."""
    a = _array_arg(a)
    axis = _axis_attr(axis)
    if is_symbol(a):
        return apply('_npi_expand_dims', [a], {'axis': axis})
    from ember.op.np_shape import expand_dims_shape
    return _view(a, '_npi_expand_dims', {'axis': axis}, expand_dims_shape(a.shape, axis))


def squeeze(a, axis=None, out=None):
    """``np.squeeze``: axes of length one removed."""
    if out is not None:
        return _finish(squeeze(a, axis), None, True, out)
    a = _array_arg(a)
    axis = _axis_attr(axis)
    if is_symbol(a):
        return apply('_npi_squeeze', [a], {'axis': axis})
    from ember.op.np_shape import squeeze_shape
    from ember.op.registry import ShapeError
    try:
        shape = squeeze_shape(a.shape, axis)
    except ShapeError as exc:
        raise ValueError(str(exc)) from None
    return _view(a, '_npi_squeeze', {'axis': axis}, shape)


def _atleast(count):
    def function(*arys):
        results = []
        for ary in arys:
            a = _array_arg(ary)
            if a.ndim < count:
                shape = {0: (1,) * count, 1: (1, a.size) if count >= 2 else a.shape,
                         2: a.shape + (1,)}[a.ndim]
                if count == 3 and a.ndim == 1:
                    shape = (1, a.shape[0], 1)
                a = reshape(a, shape)
            results.append(a)
        return results[0] if len(results) == 1 else results
    function.__name__ = function.__qualname__ = f'atleast_{count}d'
    function.__doc__ = f'``np.atleast_{count}d``: views with at least {count} dimensions.'
    return function


atleast_1d, atleast_2d, atleast_3d = _atleast(1), _atleast(2), _atleast(3)


def transpose(a, axes=None):
    """``np.transpose``: axes permuted (reversed for None)."""
    return apply('_npi_transpose', [_array_arg(a)], {'axes': _axis_attr(axes)})


def swapaxes(a, axis1, axis2):
    """``np.swapaxes``: two axes interchanged."""
    return apply('_npi_swapaxes', [_array_arg(a)], {'axis1': axis1, 'axis2': axis2})


def moveaxis(a, source, destination):
    """``np.moveaxis``: axes moved to new positions."""
    source = (source,) if isinstance(source, int) else tuple(source)
    destination = (destination,) if isinstance(destination, int) else tuple(destination)
    return apply('_npi_moveaxis', [_array_arg(a)], {'source': source,
                                                   'destination': destination})


def rollaxis(a, axis, start=0):
    """``np.rollaxis``: `axis` moved before position `start`."""
    a = _array_arg(a)
    ndim = a.ndim
    axis, start = axis % ndim, start + ndim if start < 0 else start
    if not 0 <= start <= ndim:
        raise ValueError(f'rollaxis: start={start} is out of range for {ndim} dimensions')
    if axis < start:
        start -= 1
    if axis == start:
        return a
    return moveaxis(a, axis, start)


def broadcast_to(array, shape):  # noqa: F811  (MXNet's parameter name)
    """``np.broadcast_to`` (a copy)."""
    return apply('_npi_broadcast_to', [_array_arg(array)], {'shape': _shape_of(shape)})


def broadcast_arrays(*args):
    """``np.broadcast_arrays``: every array broadcast to their common shape."""
    arrays = [_array_arg(a) for a in args]
    shape = onp.broadcast_shapes(*[a.shape for a in arrays])
    return [a if a.shape == shape else broadcast_to(a, shape) for a in arrays]


def shape(a):
    """``np.shape``."""
    return onp.shape(a) if not isinstance(a, NDArray) else a.shape


def size(a, axis=None):
    """``np.size``: the number of elements (along `axis`)."""
    if isinstance(a, NDArray):
        return a.size if axis is None else a.shape[axis]
    return onp.size(a, axis)


def ndim(a):
    """``np.ndim``."""
    return a.ndim if isinstance(a, NDArray) else onp.ndim(a)


# ----------------------------------------------------------------------------------------------
# Joining and splitting

def _sequence(arrays):
    if isinstance(arrays, NDArray):
        return [arrays[i] for i in range(arrays.shape[0])]
    items = list(arrays)
    like = next((x for x in items if isinstance(x, NDArray)), None)
    return [_array_arg(x, like) for x in items]


def concatenate(seq, axis=0, out=None):
    """``np.concatenate`` along an axis (of the flattened arrays for None)."""
    arrays = _sequence(seq)
    result = apply('_npi_concatenate', arrays, {'num_args': len(arrays), 'axis': axis})
    return _finish(result, None, True, out)


def stack(arrays, axis=0, out=None):
    """``np.stack``: arrays of one shape along a new axis."""
    arrays = _sequence(arrays)
    result = apply('_npi_stack', arrays, {'num_args': len(arrays), 'axis': axis})
    return _finish(result, None, True, out)


def vstack(arrays, out=None):
    """``np.vstack``: along the first axis, 1-D arrays as rows."""
    return concatenate([atleast_2d(a) for a in _sequence(arrays)], axis=0, out=out)


row_stack = vstack


def hstack(arrays):
    """``np.hstack``: along the second axis (the first for 1-D arrays)."""
    arrays = [atleast_1d(a) for a in _sequence(arrays)]
    return concatenate(arrays, axis=0 if arrays and arrays[0].ndim == 1 else 1)


def dstack(arrays):
    """``np.dstack``: along the third axis."""
    return concatenate([atleast_3d(a) for a in _sequence(arrays)], axis=2)


def column_stack(tup):
    """``np.column_stack``: 1-D arrays as columns of a 2-D array."""
    arrays = [a if a.ndim >= 2 else reshape(a, (-1, 1)) for a in _sequence(tup)]
    return concatenate(arrays, axis=1)


def append(arr, values, axis=None):
    """``np.append``: values after the array (both flattened for axis=None)."""
    arr = _array_arg(arr)
    return concatenate([arr, _array_arg(values, arr)], axis=axis)


def _split(ary, indices_or_sections, axis, uneven):
    ary = _array_arg(ary)
    sections = indices_or_sections
    if isinstance(sections, NDArray):
        sections = tuple(int(v) for v in sections.asnumpy())
    elif not isinstance(sections, (int, onp.integer)):
        sections = tuple(int(v) for v in sections)
    else:
        sections = int(sections)
    result = apply('_npi_split', [ary], {'indices_or_sections': sections, 'axis': axis,
                                         'uneven': uneven})
    return result if isinstance(result, list) else [result]


def split(ary, indices_or_sections, axis=0):
    """``np.split``: equal parts, or parts between the given positions."""
    return _split(ary, indices_or_sections, axis, False)


def array_split(ary, indices_or_sections, axis=0):
    """``np.array_split``: like split, allowing unequal parts."""
    return _split(ary, indices_or_sections, axis, True)


def hsplit(ary, indices_or_sections):
    """``np.hsplit``: split along the second axis (the first for 1-D arrays)."""
    ary = _array_arg(ary)
    return split(ary, indices_or_sections, axis=0 if ary.ndim == 1 else 1)


def vsplit(ary, indices_or_sections):
    """``np.vsplit``: split along the first axis."""
    if _array_arg(ary).ndim < 2:
        raise ValueError('vsplit needs an array of at least 2 dimensions')
    return split(ary, indices_or_sections, axis=0)


def dsplit(ary, indices_or_sections):
    """``np.dsplit``: split along the third axis."""
    if _array_arg(ary).ndim < 3:
        raise ValueError('dsplit needs an array of at least 3 dimensions')
    return split(ary, indices_or_sections, axis=2)


# ----------------------------------------------------------------------------------------------
# Rearranging

def flip(m, axis=None, out=None):
    """``np.flip``: elements in reverse order along axes."""
    return _finish(apply('_npi_flip', [_array_arg(m)], {'axis': _axis_attr(axis)}), None, True,
                   out)


def fliplr(m):
    """``np.fliplr``: columns in reverse order."""
    return flip(m, 1)


def flipud(m):
    """``np.flipud``: rows in reverse order."""
    return flip(m, 0)


def roll(a, shift, axis=None):
    """``np.roll``: elements shifted cyclically."""
    shift = (shift,) if isinstance(shift, int) else tuple(shift)
    return apply('_npi_roll', [_array_arg(a)], {'shift': shift, 'axis': _axis_attr(axis)})


def rot90(m, k=1, axes=(0, 1)):
    """``np.rot90``: rotation by 90 degrees in the plane of two axes."""
    return apply('_npi_rot90', [_array_arg(m)], {'k': k, 'axes': tuple(axes)})


def tile(A, reps):
    """``np.tile``: the array repeated as tiles."""
    reps = (reps,) if isinstance(reps, int) else tuple(reps)
    return apply('_npi_tile', [_array_arg(A)], {'reps': reps})


def repeat(a, repeats, axis=None):
    """``np.repeat``: each element repeated (a count, or one count per element)."""
    if isinstance(repeats, NDArray):
        repeats = tuple(int(v) for v in repeats.asnumpy().reshape(-1))
    elif not isinstance(repeats, (int, onp.integer)):
        repeats = tuple(int(v) for v in repeats)
    return apply('_npi_repeat', [_array_arg(a)], {'repeats': repeats, 'axis': axis})


def _pad_width(width):
    values = onp.asarray(_values('pad', width), dtype=onp.int64)
    return tuple(tuple(int(v) for v in row) for row in onp.atleast_2d(values)) \
        if values.ndim else int(values)


def pad(x, pad_width, mode='constant', **kwargs):
    """``np.pad``: modes constant, edge, reflect, symmetric, wrap (with gradients), maximum,
    minimum, mean, median, linear_ramp, empty."""
    constant = kwargs.pop('constant_values', 0)
    reflect_type = kwargs.pop('reflect_type', 'even')
    if kwargs:
        raise TypeError(f'pad: unknown arguments {sorted(kwargs)}')
    if mode not in ('constant', 'edge', 'reflect', 'symmetric', 'wrap', 'maximum', 'minimum',
                    'mean', 'median', 'linear_ramp', 'empty'):
        raise ValueError(f'pad: mode={mode!r} is not a mode of np.pad')
    constant = _values('pad', constant)
    if isinstance(constant, onp.ndarray):
        constant = constant.tolist()
    return apply('_npi_pad', [_array_arg(x)], {'pad_width': _pad_width(pad_width),
                                               'mode': mode, 'constant_values': constant,
                                               'reflect_type': reflect_type})


def diag(array, k=0):  # noqa: F811  (MXNet's parameter name)
    """``np.diag``: the diagonal of a matrix, or a matrix with a vector on a diagonal."""
    return apply('_npi_diag', [_array_arg(array)], {'k': k})


def diagflat(array, k=0):  # noqa: F811  (MXNet's parameter name)
    """``np.diagflat``: a matrix with the flattened input on diagonal `k`."""
    return apply('_npi_diagflat', [_array_arg(array)], {'k': k})


def diagonal(a, offset=0, axis1=0, axis2=1):
    """``np.diagonal``: diagonals over two axes (a copy)."""
    return apply('_npi_diagonal', [_array_arg(a)], {'offset': offset, 'axis1': axis1,
                                                   'axis2': axis2})


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """``np.trace``: sums along diagonals."""
    return sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype, out=out)


def tril(m, k=0):
    """``np.tril``: zeros above diagonal `k`."""
    return apply('_npi_tril', [_array_arg(m)], {'k': k})


def triu(m, k=0):
    """``np.triu``: zeros below diagonal `k`."""
    return apply('_npi_triu', [_array_arg(m)], {'k': k})


def take(a, indices, axis=None, mode='raise', out=None):
    """``np.take``: elements at integer positions along an axis."""
    if mode not in ('raise', 'wrap', 'clip'):
        raise ValueError(f"take: mode={mode!r}: expected 'raise', 'wrap' or 'clip'")
    a = _array_arg(a)
    indices = _array_arg(indices, a)
    result = apply('_npi_take', [a, indices], {'axis': axis, 'mode': mode})
    return _finish(result, None, True, out)


def take_along_axis(arr, indices, axis):
    """``np.take_along_axis``: elements picked by index arrays along an axis."""
    arr = _array_arg(arr)
    return apply('_npi_take_along_axis', [arr, _array_arg(indices, arr)], {'axis': axis})


def where_(condition, x=None, y=None):
    """``np.where``: elements of x where the condition holds, else y; positions of the true
    elements with one argument."""
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError('where: give both x and y, or neither')
    like = next((v for v in (x, y, condition) if isinstance(v, NDArray)), None)
    condition = _array_arg(condition, like)
    x, y = _scalar_or_array(x, like), _scalar_or_array(y, like)
    if _is_number(x) and _is_number(y):
        y = full_like(condition, y, dtype=_python_scalars_dtype(x, y))
    if _is_number(x):
        return apply('_npi_where_scalar', [condition, y], {'scalar': x, 'reverse': True})
    if _is_number(y):
        return apply('_npi_where_scalar', [condition, x], {'scalar': y, 'reverse': False})
    return apply('_npi_where', [condition, x, y])


def _python_scalars_dtype(*values):
    """The dtype of an operation between Python scalars only: float32, int64 or bool."""
    if _builtin_any(isinstance(v, float) for v in values):
        return onp.dtype(onp.float32)
    if _builtin_all(isinstance(v, bool) for v in values):
        return onp.dtype(onp.bool_)
    return onp.dtype(onp.int64)


def delete(arr, obj, axis=None):
    """``np.delete``: the array without the given positions."""
    arr = _array_arg(arr)
    if isinstance(obj, slice):
        length = arr.size if axis is None else arr.shape[axis]
        obj = tuple(range(*obj.indices(length)))
    elif isinstance(obj, NDArray) or not isinstance(obj, (int, onp.integer)):
        obj = tuple(int(v) for v in onp.ravel(_values('delete', obj)))
    return apply('_npi_delete', [arr], {'obj': obj, 'axis': axis})


def insert(arr, obj, values, axis=None):
    """``np.insert``: values inserted before the given positions."""
    arr = _array_arg(arr)
    if isinstance(obj, slice):
        length = arr.size if axis is None else arr.shape[axis]
        obj = tuple(range(*obj.indices(length)))
    elif isinstance(obj, NDArray) or not isinstance(obj, (int, onp.integer)):
        obj = tuple(int(v) for v in onp.ravel(_values('insert', obj)))
    else:
        obj = int(obj)
    return apply('_npi_insert', [arr, _array_arg(values, arr).astype(arr.dtype)],
                 {'obj': obj, 'axis': axis})


def resize(a, new_shape):
    """``np.resize``: the flattened array repeated or cut to a new shape."""
    return apply('_npi_resize', [_array_arg(a)], {'new_shape': _shape_of(new_shape)})


def sort(a, axis=-1, kind=None, order=None):
    """``np.sort`` (stable), with gradients."""
    a = _array_arg(a)
    if axis is None:
        a, axis = ravel(a), -1
    return take_along_axis(a, argsort(a, axis), axis)


def argsort(a, axis=-1, kind=None, order=None):
    """``np.argsort``: int64 positions that sort the array (stable)."""
    if order is not None:
        raise ValueError('argsort: order= applies to structured arrays, which mx.np has not')
    return apply('_npi_argsort', [_array_arg(a)], {'axis': axis})


def msort(a):
    """Sort along the first axis (NumPy's former ``msort``)."""
    return sort(a, axis=0)


def diff(a, n=1, axis=-1, prepend=None, append=None):
    """``np.diff``: n-th differences along an axis."""
    a = _array_arg(a)
    if prepend is not None or append is not None:
        parts = []
        for extra in (prepend, None, append):
            if extra is None and parts and parts[-1] is a:
                continue
            if extra is None:
                parts.append(a)
                continue
            extra = _array_arg(extra, a)
            if extra.ndim == 0:
                shape = list(a.shape)
                shape[axis] = 1
                extra = broadcast_to(extra, tuple(shape))
            parts.append(extra.astype(a.dtype))
        if a not in parts:
            parts.insert(1 if prepend is not None else 0, a)
        a = concatenate(parts, axis=axis)
    return apply('_npi_diff', [a], {'n': n, 'axis': axis})


def ediff1d(ary, to_end=None, to_begin=None):
    """``np.ediff1d``: differences of the flattened array, with values before and after."""
    flat = ravel(_array_arg(ary))
    parts = [diff(flat)]
    if to_begin is not None:
        parts.insert(0, ravel(_array_arg(to_begin, flat)).astype(flat.dtype))
    if to_end is not None:
        parts.append(ravel(_array_arg(to_end, flat)).astype(flat.dtype))
    return concatenate(parts) if len(parts) > 1 else parts[0]


def polyval(p, x):
    """``np.polyval``: the polynomial with coefficients p at x."""
    if _is_number(x):
        return onp.polyval(_host('polyval', p), x)
    x = _array_arg(x)
    return apply('_npi_polyval', [_array_arg(p, x), x])


# ----------------------------------------------------------------------------------------------
# Products

def tensordot(a, b, axes=2):
    """``np.tensordot`` over paired axes (or the last `axes` of a with the first of b)."""
    a, b = _array_arg(a), _array_arg(b)
    if isinstance(axes, (int, onp.integer)):
        if is_symbol(a) or is_symbol(b):
            raise NotForSymbol('np.tensordot with an int axes needs arrays; give the pairs of '
                               'axes for Symbols')
        a_axes = tuple(range(a.ndim - axes, a.ndim))
        b_axes = tuple(range(axes))
    else:
        a_axes, b_axes = axes
        a_axes = (a_axes,) if isinstance(a_axes, int) else tuple(a_axes)
        b_axes = (b_axes,) if isinstance(b_axes, int) else tuple(b_axes)
    return apply('_npi_tensordot', [a, b], {'a_axes': a_axes, 'b_axes': b_axes})


def dot(a, b, out=None):
    """``np.dot``: products of matrices, vectors and scalars."""
    if _is_number(a) or _is_number(b):
        return _finish(multiply(a, b), None, True, out)
    a = _array_arg(a)
    result = apply('_npi_dot', [a, _array_arg(b, a)])
    return _finish(result, None, True, out)


def matmul(a, b, out=None, **kwargs):
    """``np.matmul`` (``@``): matrix products broadcast over stacks."""
    dtype, where = _ufunc.options('matmul', kwargs)
    a = _array_arg(a)
    return _finish(apply('_npi_matmul', [a, _array_arg(b, a)]), dtype, where, out)


def inner(a, b):
    """``np.inner``: sums over the last axes."""
    a = _array_arg(a)
    b = _array_arg(b, a)
    if a.ndim == 0 or b.ndim == 0:
        return multiply(a, b)
    return tensordot(a, b, ((a.ndim - 1,), (b.ndim - 1,)))


def outer(a, b, out=None):
    """``np.outer``: every product of the flattened inputs."""
    a = ravel(_array_arg(a))
    b = ravel(_array_arg(b, a))
    return _finish(multiply(reshape(a, (-1, 1)), reshape(b, (1, -1))), None, True, out)


def vdot(a, b):
    """``np.vdot``: the dot product of the flattened inputs."""
    a = ravel(_array_arg(a))
    return tensordot(a, ravel(_array_arg(b, a)), ((0,), (0,)))


def einsum(*operands, **kwargs):
    """``np.einsum``: Einstein summation (``optimize`` picks the contraction order)."""
    out = kwargs.pop('out', None)
    optimize = kwargs.pop('optimize', False)
    if kwargs:
        raise TypeError(f'einsum: unknown arguments {sorted(kwargs)}')
    subscripts, arrays = operands[0], [_array_arg(x) for x in operands[1:]]
    if not isinstance(subscripts, str):
        raise TypeError('einsum: the first argument must be the subscripts string')
    result = apply('_npi_einsum', arrays, {'num_args': len(arrays), 'subscripts': subscripts,
                                           'optimize': bool(optimize)})
    return _finish(result, None, True, out)


# ----------------------------------------------------------------------------------------------
# Values decide the shape: computed on the host

def nonzero(a):
    """``np.nonzero``: int64 positions of the nonzero elements, one array per axis."""
    values = _host('nonzero', a)
    device = _device_of(a)
    return tuple(_from_host(p.astype(onp.int64), device) for p in onp.nonzero(values))


def argwhere(a):
    """``np.argwhere``: positions of the nonzero elements, one row each."""
    return _from_host(onp.argwhere(_host('argwhere', a)).astype(onp.int64), _device_of(a))


def flatnonzero(a):
    """``np.flatnonzero``: flat positions of the nonzero elements."""
    return _from_host(onp.flatnonzero(_host('flatnonzero', a)).astype(onp.int64),
                      _device_of(a))


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None):
    """``np.unique``: sorted unique elements (and positions, inverse, counts: int64)."""
    values = _host('unique', ar)
    device = _device_of(ar)
    found = onp.unique(values, return_index, return_inverse, return_counts, axis)
    if not isinstance(found, tuple):
        return _from_host(found, device)
    return tuple([_from_host(found[0], device)]
                 + [_from_host(f.astype(onp.int64), device) for f in found[1:]])


def bincount(x, weights=None, minlength=0):
    """``np.bincount``: counts of each non-negative integer, in x's dtype as MXNet (sums of the
    weights with `weights`)."""
    values = _host('bincount', x)
    if values.dtype.kind not in 'iub':
        raise TypeError(f'bincount: expected integers, got {values.dtype}')
    weight_values = None if weights is None else _host('bincount', weights)
    counts = onp.bincount(values.astype(onp.int64), weight_values, minlength)
    dtype = values.dtype if weights is None else (weight_values.dtype if weight_values.dtype.kind
                                                  == 'f' else onp.float32)
    return _from_host(counts.astype(dtype), _device_of(x))


def histogram(a, bins=10, range=None, normed=None, weights=None, density=None):  # noqa: A002
    """``np.histogram``: counts (int64) and bin edges, for a bin count or given edges."""
    if weights is not None or density:
        return fallback(onp.histogram)(a, bins=bins, range=range, weights=weights,
                                       density=density)
    a = _array_arg(a)
    if isinstance(bins, (int, onp.integer)):
        if range is None and not is_symbol(a):
            values = a.asnumpy()
            range = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
        hist, edges = apply('_npi_histogram', [a], {'bin_cnt': int(bins), 'range': None if
                                                    range is None else tuple(range)})
    else:
        edges_in = _array_arg(bins, a)
        hist, edges = apply('_npi_histogram', [a, edges_in], {'bin_cnt': None})
    return hist, edges


def unravel_index(indices, shape, order='C'):
    """``np.unravel_index``: flat positions as a tuple of coordinate arrays (of the positions'
    dtype, as MXNet)."""
    values = _host('unravel_index', indices)
    device = _device_of(indices)
    found = onp.unravel_index(values.astype(onp.int64), shape, order)
    return tuple(_from_host(f.astype(values.dtype), device) for f in found)


def diag_indices_from(arr):
    """``np.diag_indices_from``: positions of the main diagonal of a square array."""
    found = onp.diag_indices_from(onp.empty(arr.shape, onp.uint8))
    return tuple(_from_host(f.astype(onp.int64), _device_of(arr)) for f in found)


def may_share_memory(a, b, max_work=None):
    """Whether arrays a and b are views of the same storage (overlapping or not)."""
    return isinstance(a, NDArray) and isinstance(b, NDArray) and a._handle is b._handle


def shares_memory(a, b, max_work=None):
    """Whether arrays a and b have elements in the same memory."""
    if not may_share_memory(a, b):
        return False
    start_a, start_b = a._view.offset, b._view.offset
    return start_a < start_b + b._view.nbytes and start_b < start_a + a._view.nbytes


def set_printoptions(precision=None, threshold=None, **kwargs):
    """Printing options of arrays (NumPy's ``set_printoptions``)."""
    onp.set_printoptions(precision=precision, threshold=threshold, **kwargs)


where = where_


multiarray._hooks.functions = sys.modules[__name__]      # the array's methods call these
