"""``mx.nd.utils``: MXNet's functions that make an array of any storage type, and file I/O.

``mx.nd.array``, ``mx.nd.zeros`` and ``mx.nd.empty`` are these: dense unless the source is
sparse (a sparse NDArray, a ``scipy.sparse`` matrix) or `stype` says otherwise.

>>> import ember.ndarray as nd
>>> nd.zeros((2, 3), stype='csr').stype, nd.empty((2,), stype='default').stype
('csr', 'default')
>>> nd.array(nd.zeros((2, 2), stype='row_sparse')).stype
'row_sparse'
"""
from __future__ import annotations

from ember.ndarray import creation as _dense
from ember.ndarray import sparse as _sparse
from ember.ndarray.io import load, load_frombuffer, save
from ember.ndarray.storage import BaseSparseNDArray

__all__ = ['zeros', 'empty', 'array', 'load', 'load_frombuffer', 'save']


def _dense_stype(stype) -> bool:
    return stype is None or stype == 'default'


def zeros(shape, ctx=None, dtype=None, stype=None, **kwargs):
    """An array of zeros of storage type `stype` (float32 unless `dtype` is given)."""
    if _dense_stype(stype):
        return _dense.zeros(shape, ctx=ctx, dtype=dtype, **kwargs)
    return _sparse.zeros(stype, shape, ctx=ctx, dtype=dtype, **kwargs)


def empty(shape, ctx=None, dtype=None, stype=None):
    """An uninitialised array of storage type `stype` (sparse ones store nothing)."""
    if _dense_stype(stype):
        return _dense.empty(shape, ctx=ctx, dtype=dtype)
    return _sparse.empty(stype, shape, ctx=ctx, dtype=dtype)


def array(source_array, ctx=None, dtype=None):
    """An array with the values of `source_array`: sparse when it is sparse, else dense."""
    if isinstance(source_array, BaseSparseNDArray) or _is_scipy_sparse(source_array):
        return _sparse.array(source_array, ctx=ctx, dtype=dtype)
    return _dense.array(source_array, ctx=ctx, dtype=dtype)


def _is_scipy_sparse(value) -> bool:
    return hasattr(value, 'tocsr') and hasattr(value, 'nnz')
