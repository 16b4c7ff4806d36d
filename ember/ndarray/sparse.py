"""``mx.nd.sparse``: csr and row_sparse arrays, as in MXNet 1.9.1.

Make them with :func:`csr_matrix`, :func:`row_sparse_array`, :func:`zeros`, :func:`array` or
``x.tostype(stype)``; operators take them like dense arrays and keep them sparse where MXNet
does (``dot(csr, dense)``, ``csr * scalar``, row_sparse gradients, lazy optimizer updates),
falling back to dense kernels elsewhere. Every operator of ``mx.nd`` is also reachable here
(``mx.nd.sparse.dot``), as in MXNet.

Construction checks the parts: lengths that do not fit, column or row indices out of range,
indices not ascending, and an indptr that is not monotone raise an error naming the array and
the fault.

>>> import ember as mx
>>> x = mx.nd.sparse.csr_matrix(([1.0, 2.0, 3.0], [0, 2, 1], [0, 2, 2, 3]), shape=(3, 3))
>>> w = mx.nd.ones((3, 2))
>>> mx.nd.sparse.dot(x, w).asnumpy().tolist()
[[3.0, 3.0], [0.0, 0.0], [3.0, 3.0]]
>>> g = mx.nd.sparse.dot(x, w, transpose_a=True)
>>> g.stype, g.indices.asnumpy().tolist()
('row_sparse', [0, 1, 2])
>>> mx.nd.sparse.csr_matrix(([1.0], [5], [0, 1]), shape=(1, 3))
Traceback (most recent call last):
...
ember.base.EmberError: csr_matrix: column index 5 is out of range for 3 columns
"""
from __future__ import annotations

import numbers

import numpy as np

from ember.base import EmberError, dtype_of
from ember.ndarray import ndarray as _nd
from ember.ndarray.ndarray import NDArray, invoke, parse_device
from ember.ndarray.register import make_function
from ember.ndarray.storage import (BaseSparseNDArray, CSRNDArray, RowSparseNDArray,
                                   new_array, _arithmetic, _checked_stype)
from ember.op import registry
from ember.op import sparse as _sp

__all__ = ['BaseSparseNDArray', 'CSRNDArray', 'RowSparseNDArray', 'csr_matrix',
           'row_sparse_array', 'zeros', 'empty', 'array', 'cast_storage', 'retain', 'add',
           'subtract', 'multiply', 'divide', 'adagrad_update']

_FLOAT32 = np.dtype(np.float32)


# ----------------------------------------------------------------------------------------------
# Construction.

def csr_matrix(arg1, shape=None, ctx=None, dtype=None) -> CSRNDArray:
    """A :class:`CSRNDArray` from ``(data, indices, indptr)``, ``(data, (row, col))``, a shape
    ``(m, n)`` (all zeros), a ``scipy.sparse`` matrix, or dense values (NDArray or array-like).

    >>> csr_matrix(([7.0], ([1], [2])), shape=(2, 3)).asnumpy().tolist()
    [[0.0, 0.0, 0.0], [0.0, 0.0, 7.0]]
    """
    device = parse_device(ctx)
    if _is_shape(arg1):
        return zeros('csr', arg1, ctx=device, dtype=dtype)
    if isinstance(arg1, tuple) and len(arg1) == 3:
        data, indices, indptr = (_host(a) for a in arg1)
        return _csr_from_parts(data, indices, indptr, shape, device, _dtype(arg1[0], dtype))
    if isinstance(arg1, tuple) and len(arg1) == 2:
        import scipy.sparse
        values = _host(arg1[0])
        coo = scipy.sparse.coo_matrix((values, tuple(_host(a) for a in arg1[1])), shape=shape)
        return _from_scipy(coo, device, _dtype(arg1[0], dtype))
    if _is_scipy(arg1):
        return _from_scipy(arg1, device, dtype_of(dtype) if dtype else arg1.dtype)
    if isinstance(arg1, CSRNDArray):
        return _sparse_copy(arg1, device, dtype)
    if isinstance(arg1, NDArray):
        return _cast(arg1, 'csr', device, dtype)
    values = np.asarray(arg1)
    return _from_dense_host(values, 'csr', device, _dtype(arg1, dtype), shape)


def row_sparse_array(arg1, shape=None, ctx=None, dtype=None) -> RowSparseNDArray:
    """A :class:`RowSparseNDArray` from ``(data, indices)`` (rows ``indices`` hold ``data``),
    a shape (all zeros) or dense values (NDArray or array-like).

    >>> row_sparse_array(([[1.0, 2.0]], [1]), shape=(3, 2)).asnumpy().tolist()
    [[0.0, 0.0], [1.0, 2.0], [0.0, 0.0]]
    """
    device = parse_device(ctx)
    if _is_shape(arg1):
        return zeros('row_sparse', arg1, ctx=device, dtype=dtype)
    if isinstance(arg1, tuple) and len(arg1) == 2:
        data_type = _dtype(arg1[0], dtype)
        data = np.asarray(_host(arg1[0]), dtype=data_type)
        indices = np.asarray(_host(arg1[1]))
        if shape is None:
            if data.ndim < 1:
                raise EmberError('row_sparse_array: data must have at least one dimension')
            shape = (int(indices.max()) + 1 if indices.size else 0,) + data.shape[1:]
        return _rsp_from_parts(data, indices, tuple(shape), device, data_type)
    if isinstance(arg1, RowSparseNDArray):
        return _sparse_copy(arg1, device, dtype)
    if isinstance(arg1, NDArray):
        return _cast(arg1, 'row_sparse', device, dtype)
    values = np.asarray(arg1)
    return _from_dense_host(values, 'row_sparse', device, _dtype(arg1, dtype), shape)


def zeros(stype, shape, ctx=None, dtype=None, **kwargs) -> NDArray:
    """An array of zeros of storage type `stype` (nothing stored when sparse).

    >>> z = zeros('row_sparse', (4, 2))
    >>> z.stype, z.indices.shape
    ('row_sparse', (0,))
    """
    _checked_stype(stype)
    if kwargs.get('aux_types') is not None or kwargs.get('out') is not None:
        raise TypeError('zeros: aux_types and out are not supported')
    if stype == _sp.DEFAULT:
        from ember.ndarray.creation import zeros as dense_zeros
        return dense_zeros(shape, ctx=ctx, dtype=dtype)
    shape = (int(shape),) if isinstance(shape, numbers.Integral) else tuple(shape)
    if stype == _sp.CSR_TYPE and len(shape) != 2:
        raise EmberError(f'zeros: csr storage holds 2-D arrays; got shape {shape}')
    return new_array(stype, shape, dtype_of(dtype) if dtype else _FLOAT32, parse_device(ctx))


def empty(stype, shape, ctx=None, dtype=None) -> NDArray:
    """An array of storage type `stype`: sparse ones store nothing (zeros)."""
    if stype == _sp.DEFAULT:
        from ember.ndarray.creation import empty as dense_empty
        return dense_empty(shape, ctx=ctx, dtype=dtype)
    return zeros(stype, shape, ctx=ctx, dtype=dtype)


def array(source_array, ctx=None, dtype=None) -> BaseSparseNDArray:
    """A sparse array from a sparse NDArray (copied) or a ``scipy.sparse`` matrix (csr)."""
    if isinstance(source_array, BaseSparseNDArray):
        return _sparse_copy(source_array, parse_device(ctx) if ctx else source_array.context,
                            dtype)
    if _is_scipy(source_array):
        return csr_matrix(source_array, ctx=ctx, dtype=dtype)
    raise TypeError(f'sparse.array takes a sparse NDArray or a scipy.sparse matrix, got '
                    f'{type(source_array).__name__}; use mx.nd.array for dense values')


# ----------------------------------------------------------------------------------------------
# Functions of MXNet's sparse namespace beyond the operators.

def cast_storage(data=None, stype=None, out=None, name=None, **kwargs):
    """`data` in storage type `stype` ('default', 'row_sparse' or 'csr')."""
    if kwargs:
        raise TypeError(f'cast_storage: unknown arguments {sorted(kwargs)}')
    return invoke(registry.get('cast_storage'), [data], {'stype': _checked_stype(stype)},
                  out=None if out is None else [out])[0]


def retain(data=None, indices=None, out=None, name=None, **kwargs):
    """The rows of row_sparse `data` whose indices are listed in `indices` (an NDArray), as
    a row_sparse array; of dense `data`, its rows `indices` (an extension: MXNet refuses it).

    >>> import ember as mx
    >>> g = row_sparse_array(([[1.0], [2.0], [3.0]], [0, 2, 4]), shape=(5, 1))
    >>> retain(g, mx.nd.array([4, 0], dtype='int64')).indices.asnumpy().tolist()
    [0, 4]
    """
    if kwargs:
        raise TypeError(f'retain: unknown arguments {sorted(kwargs)}')
    return invoke(registry.get('_sparse_retain'), [data, indices], {},
                  out=None if out is None else [out])[0]


def add(lhs, rhs):
    """lhs + rhs: elemwise_add for arrays of one shape, broadcast_add otherwise."""
    return _arithmetic(lhs, rhs, 'add', '_plus_scalar')


def subtract(lhs, rhs):
    return _arithmetic(lhs, rhs, 'sub', '_minus_scalar')


def multiply(lhs, rhs):
    return _arithmetic(lhs, rhs, 'mul', '_mul_scalar')


def divide(lhs, rhs):
    return _arithmetic(lhs, rhs, 'div', '_div_scalar')


def adagrad_update(weight, grad, history, out=None, **kwargs):
    """AdaGrad's lazy update with a row_sparse gradient (MXNet's ``sparse.adagrad_update``):
    only the rows `grad` stores change in `weight` and `history`."""
    op = registry.get('_sparse_adagrad_update')
    attrs = op.parse_attrs(kwargs)
    outputs = invoke(op, [weight, grad, history], attrs, out=None if out is None else [out])
    return out if out is not None else outputs[0]


# Star imports bring every public operator, as MXNet's sparse namespace does (those without a
# sparse kernel take the storage fallback).
__all__ += sorted(name for name in registry.all_ops() if not name.startswith('_'))


def __getattr__(name):
    # The operators, as MXNet's sparse namespace lists them (sparse.dot, sparse.sum): the
    # functions mx.nd has, made from the registry on first use.
    if name.startswith('__'):
        raise AttributeError(name)
    try:
        op = registry.get(name)
    except AttributeError as exc:
        raise AttributeError(f'module ember.ndarray.sparse has no attribute {name!r}: '
                             f'{exc}') from None
    function = globals()[name] = make_function(op, name)
    return function


# ----------------------------------------------------------------------------------------------

def _is_shape(value):
    return (isinstance(value, tuple) and len(value) in (1, 2)
            and all(isinstance(v, numbers.Integral) for v in value))


def _is_scipy(value):
    return hasattr(value, 'tocsr') and hasattr(value, 'nnz')


def _host(value):
    if isinstance(value, NDArray):
        return value.asnumpy()
    return value


def _dtype(source, dtype):
    """The dtype of a new sparse array: given, else the source's when it has one, else
    float32 (MXNet's rule)."""
    if dtype is not None:
        return dtype_of(dtype)
    if isinstance(source, (np.ndarray, NDArray)):
        return np.dtype(source.dtype)
    return _FLOAT32


def _csr_from_parts(data, indices, indptr, shape, device, dtype):
    data = np.asarray(data, dtype=dtype)
    indices, indptr = np.asarray(indices), np.asarray(indptr)
    for name, part in (('indices', indices), ('indptr', indptr)):
        if part.size and part.dtype.kind not in 'iu':
            raise EmberError(f'csr_matrix: {name} must hold integers; got {part.dtype}')
    if shape is None:
        columns = int(indices.max()) + 1 if indices.size else 0
        shape = (max(indptr.shape[0] - 1, 0), columns)
    shape = tuple(int(d) for d in shape)
    if data.ndim != 1 or indices.ndim != 1:
        raise EmberError(f'csr_matrix: data and indices must be 1-D; got shapes {data.shape} '
                         f'and {indices.shape}')
    _sp.check_csr('csr_matrix', shape, data, indices, indptr)
    return _made('csr', shape, dtype, device, data, indices, indptr)


def _rsp_from_parts(data, indices, shape, device, dtype):
    if indices.size and indices.dtype.kind not in 'iu':
        raise EmberError(f'row_sparse_array: indices must hold integers; got {indices.dtype}')
    _sp.check_row_sparse('row_sparse_array', shape, data, indices.reshape(-1)
                         if indices.ndim == 1 else indices)
    return _made('row_sparse', shape, dtype, device, data, indices)


def _made(stype, shape, dtype, device, *parts):
    array = new_array(stype, shape, dtype, device)
    xp = _nd._xp(device)
    array._parts.set(*(xp.array(p, copy=True) for p in parts))
    return array


def _from_scipy(matrix, device, dtype):
    csr = matrix.tocsr(copy=True)
    csr.sum_duplicates()                  # also sorts the indices of each row
    return _made('csr', csr.shape, dtype_of(dtype), device, csr.data.astype(dtype_of(dtype)),
                 csr.indices, csr.indptr)


def _from_dense_host(values, stype, device, dtype, shape):
    if shape is not None and tuple(shape) != values.shape:
        raise EmberError(f'{stype} array: the values have shape {values.shape}, not {shape}')
    parts = _sp.from_dense(values.astype(dtype, copy=False), stype)
    return _made(stype, values.shape, dtype, device, *_sp.parts_tuple(parts))


def _cast(array, stype, device, dtype):
    result = array.tostype(stype)
    if dtype is not None and dtype_of(dtype) != result._view.dtype:
        result = result.astype(dtype)
    return result.as_in_context(device)


def _sparse_copy(array, device, dtype):
    copied = array.copyto(device) if array.context != device else array.copy()
    return copied.astype(dtype) if dtype is not None else copied
