"""Helpers for testing programs and operators, as MXNet's ``mx.test_utils``.

Comparisons take NDArrays or NumPy arrays and choose tolerances from the dtypes compared;
gradient checks compare the backward pass against central finite differences; configuration
changes for a block go through :func:`ember.config.override`, never the process environment.

``check_numeric_gradient``, ``check_symbolic_forward`` and ``check_symbolic_backward`` take a
Symbol, bound and run through an executor as in MXNet, or a function of NDArrays, run through
``mx.autograd``. ``docs/test_utils.md`` describes each helper.

>>> import numpy as np
>>> import ember as mx
>>> from ember.test_utils import assert_almost_equal, check_numeric_gradient
>>> assert_almost_equal(mx.nd.array([1.0, 2.0]), np.array([1.0, 2.00001]))
>>> check_numeric_gradient(lambda x: mx.nd.sin(x) * x, [np.array([0.5, 1.5])],
...                        dtype=np.float64, rtol=1e-5, numeric_eps=1e-6)
>>> x = mx.sym.var('x')
>>> check_numeric_gradient(mx.sym.tanh(x) * 2, [np.array([0.1, -0.4])], dtype=np.float64,
...                        numeric_eps=1e-6, rtol=1e-5)
"""
from __future__ import annotations

import bz2
import contextlib
import functools
import gzip
import json
import logging
import numbers
import os
import platform
import shutil
import struct
import sys
import time
import urllib.request
import zipfile

import numpy as np

from ember import autograd, config, device, util
from ember import ndarray as nd
from ember import io as _io
from ember import symbol as _symbol
from ember import executor as _executor  # noqa: F401  (attaches Symbol.bind)
from ember.base import EmberError
from ember.context import num_gpus
from ember.device import Context, current_context
from ember.ndarray import NDArray, array
from ember.runtime import Features
from ember.symbol import Symbol
from ember.util import (get_cuda_compute_capability, getenv, setenv,  # noqa: F401
                        use_np)  # (MXNet's test_utils has them)
from ember.numpy.symbol import _Symbol as np_symbol  # noqa: F401  (mx.sym.np's class)

_log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# Devices and dtypes

def default_context():
    """The device tests run on: the current default device.

    >>> default_context()
    cpu(0)
    """
    return device.current_device()


def set_default_context(ctx) -> None:
    """Make `ctx` the default device of this thread (``with ctx:`` restores it afterwards and
    is what tests should prefer).

    >>> import ember as mx
    >>> before = default_context()
    >>> set_default_context(mx.cpu(1)); default_context()
    cpu(1)
    >>> set_default_context(before)
    """
    if not isinstance(ctx, device.Device):
        raise TypeError(f'set_default_context: expected a device such as mx.cpu(0), got {ctx!r}')
    device.set_current_device(ctx)


def default_dtype():
    """The dtype test data is drawn in (float32)."""
    return np.float32


# ----------------------------------------------------------------------------------------------
# Tolerances and comparisons

_EXACT = (np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
          np.uint64)


def default_rtols() -> dict:
    """Relative tolerance per dtype, as MXNet's."""
    found = {np.dtype(np.float16): 1e-2, np.dtype(np.float32): 1e-4,
             np.dtype(np.float64): 1e-5}
    found.update({np.dtype(t): 0 for t in _EXACT})
    return found


def default_atols() -> dict:
    """Absolute tolerance per dtype, as MXNet's."""
    found = {np.dtype(np.float16): 1e-1, np.dtype(np.float32): 1e-3,
             np.dtype(np.float64): 1e-20}
    found.update({np.dtype(t): 0 for t in _EXACT})
    return found


def default_numeric_eps() -> dict:
    """Finite-difference step per dtype: powers of two, so that x + eps loses no bits.

    >>> default_numeric_eps()[np.dtype(np.float32)]
    0.001953125
    """
    return {np.dtype(np.float16): 2.0 ** -6, np.dtype(np.float32): 2.0 ** -9,
            np.dtype(np.float64): 2.0 ** -14}


def effective_dtype(dat) -> np.dtype:
    """The dtype whose tolerances apply to `dat`: its own (Ember's GPU kernels keep float32's
    precision; MXNet lowered it to float16 on GPUs computing in TF32).

    >>> effective_dtype(np.ones(2, np.float16))
    dtype('float16')
    """
    if isinstance(dat, numbers.Number):
        dat = np.asarray(dat)
    return np.dtype(getattr(dat, 'dtype', np.asarray(dat).dtype))


def _dtype_of_data(value) -> np.dtype:
    return effective_dtype(value)


def get_tolerance(dat, tol, default_tol) -> float:
    """`tol` when it is a number; else its entry (a dict dtype -> tolerance) or the default
    table's for `dat`'s dtype (exotic dtypes such as bfloat16 compare like float16).

    >>> get_tolerance(np.ones(1), None, default_rtols()), get_tolerance(np.ones(1), 0.5, {})
    (1e-05, 0.5)
    """
    if isinstance(tol, numbers.Number):
        return tol
    dtype = effective_dtype(dat)
    chosen = {} if tol is None else {np.dtype(k): v for k, v in tol.items()}
    if dtype in chosen:
        return chosen[dtype]
    return default_tol.get(dtype, default_tol.get(np.dtype(np.float16)))


def get_tols(x, y, rtol, atol) -> tuple:
    """(rtol, atol) for comparing `x` with `y`: the given values (numbers or dicts by dtype),
    else the looser default of the two dtypes.

    >>> get_tols(np.float16(1), np.float32(1), None, None)
    (0.01, 0.1)
    """
    return (max(get_tolerance(x, rtol, default_rtols()), get_tolerance(y, rtol, default_rtols())),
            max(get_tolerance(x, atol, default_atols()), get_tolerance(y, atol, default_atols())))


def get_rtol(rtol=None, dtype=np.dtype(np.float64)) -> float:
    """`rtol`, or the default relative tolerance of `dtype` (float64's by default)."""
    return default_rtols()[np.dtype(dtype)] if rtol is None else rtol


def get_atol(atol=None, dtype=np.dtype(np.float64)) -> float:
    """`atol`, or the default absolute tolerance of `dtype` (float64's by default)."""
    return default_atols()[np.dtype(dtype)] if atol is None else atol


def get_etol(etol=None) -> float:
    """`etol` (the share of elements allowed to differ), or 0."""
    return 0 if etol is None else etol


def _host(value) -> np.ndarray:
    if isinstance(value, NDArray):
        return value.asnumpy()
    return np.asarray(value)


def checkShapes(a, b) -> None:  # noqa: N802 - MXNet's name
    """Raise AssertionError unless `a` and `b` have the same shape."""
    if np.shape(a) != np.shape(b):
        raise AssertionError(f'a.shape = {np.shape(a)} and b.shape = {np.shape(b)} are not '
                             'equal')


def almost_equal(a, b, rtol=None, atol=None, equal_nan=False, use_broadcast=True) -> bool:
    """Whether ``|a - b| <= atol + rtol * |b|`` everywhere (NDArrays or NumPy arrays);
    shapes broadcast unless `use_broadcast` is False.

    >>> almost_equal(np.array([1.0]), np.array([1.0 + 1e-6])), almost_equal([1.0], [1.1])
    (True, False)
    """
    if not use_broadcast:
        checkShapes(_host(a), _host(b))
    rtol, atol = get_tols(a, b, rtol, atol)
    return bool(np.allclose(_host(a), _host(b), rtol=rtol, atol=atol, equal_nan=equal_nan))


def assert_almost_equal(a, b, rtol=None, atol=None, names=('a', 'b'), equal_nan=False,
                        use_broadcast=True, mismatches=(10, 10)) -> None:
    """Raise AssertionError unless ``|a - b| <= atol + rtol * |b|`` everywhere; the message
    names the worst element, both values there, the share of elements out of tolerance and
    up to ``mismatches[0]`` further locations. Shapes broadcast, as in MXNet, unless
    `use_broadcast` is False.

    >>> assert_almost_equal(np.array([1.0, 2.0]), np.array([1.0, 2.5]), names=('got', 'want'))
    Traceback (most recent call last):
    ...
    AssertionError: got and want differ at (1,): 2.0 vs 2.5 (error 0.5 > tolerance 2.5e-05...
    """
    rtol, atol = get_tols(a, b, rtol, atol)
    got, want = _host(a), _host(b)
    if not use_broadcast:
        checkShapes(got, want)
    try:
        got, want = np.broadcast_arrays(got, want)
    except ValueError:
        raise AssertionError(f'{names[0]} has shape {got.shape} but {names[1]} has shape '
                             f'{want.shape}') from None
    if got.dtype == np.bool_ and want.dtype == np.bool_:
        if np.array_equal(got, want):
            return
        got, want, rtol, atol = got.astype(np.int8), want.astype(np.int8), 0, 0
    elif np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=equal_nan):
        return
    raise AssertionError(_violation_text(got, want, rtol, atol, names, equal_nan, mismatches))


def _violation_text(got, want, rtol, atol, names, equal_nan, mismatches=(10, 10)):
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    error = np.abs(wide_got - wide_want)
    tolerance = atol + rtol * np.abs(wide_want)
    bad = ~np.isclose(wide_got, wide_want, rtol=rtol, atol=atol, equal_nan=equal_nan)
    excess = np.where(bad, np.nan_to_num(error - tolerance, nan=np.inf), -np.inf)
    order = np.argsort(-excess, axis=None)[:max(1, int(mismatches[0]))]
    where = [np.unravel_index(int(i), got.shape) if got.ndim else () for i in order
             if bad.reshape(-1)[i]]
    index = where[0]
    share = 100.0 * bad.sum() / max(bad.size, 1)
    values = f'{float(wide_got[index])!r} vs {float(wide_want[index])!r}'
    text = (f'{names[0]} and {names[1]} differ at {tuple(int(i) for i in index)}: {values} '
            f'(error {error[index]:.6g} > tolerance {tolerance[index]:.6g}; rtol={rtol:g}, '
            f'atol={atol:g}); {share:.1f}% of {bad.size} elements out of tolerance')
    if len(where) > 1:
        text += '\n' + '\n'.join(locationError(wide_got, wide_want, i, names) for i in where[1:])
    return text


def locationError(a, b, index, names, maxError=False) -> str:  # noqa: N802,N803 - MXNet's
    """One line naming the location `index` and both values there.

    >>> locationError(np.array([1.0, 2.0]), np.array([1.0, 3.0]), (1,), ('a', 'b'), True)
    'Location of maximum error: (1,), a=2.00000000, b=3.00000000'
    """
    maximum = 'maximum ' if maxError else ''
    return (f'Location of {maximum}error: {tuple(int(i) for i in index)}, '
            f'{names[0]}={float(a[index]):.8f}, {names[1]}={float(b[index]):.8f}')


def assert_allclose(a, b, rtol=1e-07, atol=0, equal_nan=True) -> None:
    """:func:`assert_almost_equal` with NumPy's default tolerances of ``assert_allclose``.

    >>> import ember as mx
    >>> assert_allclose(mx.nd.array([1, 2]), [1, 2])
    """
    assert_almost_equal(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def assert_almost_equal_with_err(a, b, rtol=None, atol=None, etol=None, names=('a', 'b'),
                                 equal_nan=False, mismatches=(10, 10)) -> None:
    """Like :func:`assert_almost_equal`, but a share of at most `etol` of the elements may
    be out of tolerance.

    >>> assert_almost_equal_with_err(np.arange(10.0), np.r_[np.arange(9.0), 99], etol=0.1)
    >>> assert_almost_equal_with_err(np.arange(10.0), np.zeros(10), etol=0.1)
    Traceback (most recent call last):
    ...
    AssertionError: 90.0% of the elements differ, more than etol=0.1 allows; a and b differ...
    """
    etol = get_etol(etol)
    if etol <= 0:
        assert_almost_equal(a, b, rtol=rtol, atol=atol, names=names, equal_nan=equal_nan,
                            mismatches=mismatches)
        return
    rtol, atol = get_tols(a, b, rtol, atol)
    got, want = np.broadcast_arrays(_host(a), _host(b))
    close = np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=equal_nan)
    share = 1.0 - np.count_nonzero(close) / max(close.size, 1)
    if share > etol:
        raise AssertionError(f'{100 * share:.1f}% of the elements differ, more than '
                             f'etol={etol} allows; ' +
                             _violation_text(got, want, rtol, atol, names, equal_nan, mismatches))


def assert_almost_equal_ignore_nan(a, b, rtol=None, atol=None, names=('a', 'b')) -> None:
    """:func:`assert_almost_equal` over the elements where neither side is NaN.

    >>> assert_almost_equal_ignore_nan(np.array([1.0, np.nan]), np.array([1.0, 5.0]))
    """
    a, b = np.array(_host(a), copy=True), np.array(_host(b), copy=True)
    either = np.logical_or(np.isnan(a), np.isnan(b))
    a[either] = 0
    b[either] = 0
    assert_almost_equal(a, b, rtol, atol, names)


def same(a, b) -> bool:
    """Whether `a` and `b` have the same shape and exactly the same values.

    >>> same(np.array([1, 2]), np.array([1, 2])), same(np.array([1]), np.array([1, 1]))
    (True, False)
    """
    return bool(np.array_equal(_host(a), _host(b)))


def same_array(array1, array2) -> bool:
    """Whether two NDArrays share their memory: a change made through the first shows in the
    second (the values are put back).

    >>> import ember as mx
    >>> x = mx.nd.zeros((2, 3))
    >>> same_array(x, x.reshape((3, 2))), same_array(x, x.copy())
    (True, False)
    """
    array1 += 1
    shared = same(array1.asnumpy().reshape(-1), array2.asnumpy().reshape(-1))
    array1 -= 1
    return shared and same(array1.asnumpy().reshape(-1), array2.asnumpy().reshape(-1))


def compare_ndarray_tuple(t1, t2, rtol=None, atol=None) -> None:
    """Assert that two arrays, or nested tuples of arrays, are almost equal (None skips)."""
    if t1 is None or t2 is None:
        return
    if isinstance(t1, tuple):
        for first, second in zip(t1, t2):
            compare_ndarray_tuple(first, second, rtol, atol)
    else:
        assert_almost_equal(t1, t2, rtol=rtol, atol=atol)


def collapse_sum_like(a, shape) -> np.ndarray:
    """Sum `a` over the axes that broadcasting `shape` to ``a.shape`` adds or stretches.

    >>> collapse_sum_like(np.ones((2, 3, 4)), (3, 1)).tolist()
    [[8.0], [8.0], [8.0]]
    """
    shape = tuple(shape)
    if np.prod(shape) == 0 or a.size == 0:
        return np.zeros(shape, dtype=a.dtype)
    extra = a.ndim - len(shape)
    axes = list(range(extra)) + [extra + i for i, n in enumerate(shape)
                                 if n != a.shape[extra + i]]
    return np.sum(a, axis=tuple(axes)).reshape(shape)


# ----------------------------------------------------------------------------------------------
# Random shapes and data (drawn from NumPy's global generator, as in MXNet)

def _low(allow_zero_size):
    return 0 if allow_zero_size else 1


def rand_shape_2d(dim0=10, dim1=10, allow_zero_size=False) -> tuple:
    """A random 2-D shape with sides up to `dim0` and `dim1`.

    >>> all(1 <= n <= 4 for n in rand_shape_2d(4, 4))
    True
    """
    low = _low(allow_zero_size)
    return np.random.randint(low, dim0 + 1), np.random.randint(low, dim1 + 1)


def rand_shape_3d(dim0=10, dim1=10, dim2=10, allow_zero_size=False) -> tuple:
    """A random 3-D shape with sides up to `dim0`, `dim1` and `dim2`."""
    low = _low(allow_zero_size)
    return (np.random.randint(low, dim0 + 1), np.random.randint(low, dim1 + 1),
            np.random.randint(low, dim2 + 1))


def rand_shape_nd(num_dim, dim=10, allow_zero_size=False) -> tuple:
    """A random shape of `num_dim` axes, each up to `dim` long.

    >>> len(rand_shape_nd(5, 2))
    5
    """
    return tuple(int(n) for n in np.random.randint(_low(allow_zero_size), dim + 1,
                                                      size=num_dim))


def random_arrays(*shapes):
    """Standard-normal NumPy arrays of the given shapes in the default dtype (one array for one
    shape, else a list).

    >>> a, b = random_arrays((2, 3), (4,))
    >>> a.shape, b.shape, a.dtype
    ((2, 3), (4,), dtype('float32'))
    """
    arrays = [np.array(np.random.randn(), dtype=default_dtype()) if len(shape) == 0
              else np.random.randn(*shape).astype(default_dtype()) for shape in shapes]
    return arrays[0] if len(arrays) == 1 else arrays


def random_uniform_arrays(*shapes, **kwargs) -> list:
    """Uniform NumPy arrays of the given shapes: keywords `low` (0), `high` (1) and `dtype`
    (the default dtype); always a list.

    >>> [a.shape for a in random_uniform_arrays((2,), (1, 3), low=-1, high=1)]
    [(2,), (1, 3)]
    """
    low, high = kwargs.pop('low', 0.0), kwargs.pop('high', 1.0)
    dtype = kwargs.pop('dtype', default_dtype())
    if kwargs:
        raise TypeError(f'random_uniform_arrays: unexpected arguments {sorted(kwargs)}; '
                        'it takes low, high and dtype')
    return [np.random.uniform(low, high, size=shape).astype(dtype) for shape in shapes]


def random_sample(population, k) -> list:
    """`k` distinct elements of the sequence `population`, drawn with NumPy's generator.

    >>> sorted(random_sample([3, 1, 2], 3))
    [1, 2, 3]
    """
    if not 0 <= k <= len(population):
        raise ValueError(f'random_sample: k={k}: expected 0 to {len(population)} elements')
    shuffled = list(population)
    np.random.shuffle(shuffled)
    return shuffled[:k]


def rand_coord_2d(x_low, x_high, y_low, y_high) -> tuple:
    """A random integer point with x in [x_low, x_high) and y in [y_low, y_high)."""
    return (np.random.randint(x_low, x_high, dtype=np.int64),
            np.random.randint(y_low, y_high, dtype=np.int64))


def rand_ndarray(shape, stype='default', density=None, dtype=None, modifier_func=None,
                 shuffle_csr_indices=False, distribution=None, ctx=None):
    """An NDArray of standard-normal values, or for 'csr' and 'row_sparse' a sparse array
    storing a fraction `density` (random when None, as in MXNet) of its entries or rows,
    uniform in [0, 1) and passed through `modifier_func` when given (see
    :func:`rand_sparse_ndarray`).

    >>> rand_ndarray((2, 2), dtype='float64').dtype
    <class 'numpy.float64'>
    >>> rand_ndarray((100, 3), 'row_sparse', density=0.1).stype
    'row_sparse'
    """
    if stype == 'default':
        return nd.array(random_arrays(tuple(shape)), ctx=ctx, dtype=dtype or default_dtype())
    return rand_sparse_ndarray(shape, stype, density=density, dtype=dtype,
                               distribution=distribution, modifier_func=modifier_func,
                               shuffle_csr_indices=shuffle_csr_indices, ctx=ctx)[0]


def rand_sparse_ndarray(shape, stype, density=None, dtype=None, distribution=None,
                        data_init=None, rsp_indices=None, modifier_func=None,
                        shuffle_csr_indices=False, ctx=None):
    """A random sparse array and its parts: ``(row_sparse array, (values, row indices))`` or
    ``(csr array, (indptr, indices, data))``. About `density` of the rows (row_sparse) or
    entries (csr) are stored (random when None), uniform in [0, 1), all `data_init` when
    given, then passed through `modifier_func`; `rsp_indices` fixes the stored rows.
    `distribution` 'powerlaw' (csr only) gives row i about twice the entries of row i - 1.
    `shuffle_csr_indices` is accepted for MXNet's signature; Ember keeps a csr array's column
    indices sorted, as its kernels need.

    >>> array, (values, rows) = rand_sparse_ndarray((5, 2), 'row_sparse', rsp_indices=[1, 3],
    ...                                             data_init=2.0)
    >>> rows.tolist(), array.asnumpy()[[1, 3]].tolist()
    ([1, 3], [[2.0, 2.0], [2.0, 2.0]])
    """
    density = np.random.rand() if density is None else density
    dtype = dtype or default_dtype()
    if distribution not in (None, 'uniform', 'powerlaw'):
        raise ValueError(f"rand_sparse_ndarray: distribution={distribution!r}: expected "
                         "'uniform' or 'powerlaw'")

    def values_of(values):
        if data_init is not None:
            values = np.full_like(values, data_init)
        return assign_each(values, modifier_func) if modifier_func is not None else values

    if stype == 'row_sparse':
        if distribution == 'powerlaw':
            raise ValueError("rand_sparse_ndarray: distribution='powerlaw' is for csr arrays, "
                             "as in MXNet")
        rows = (np.asarray(rsp_indices, dtype=np.int64) if rsp_indices is not None
                else np.flatnonzero(np.random.rand(shape[0]) < density))
        values = values_of(np.random.uniform(size=(rows.size,) + tuple(shape[1:])))
        array = nd.sparse.row_sparse_array((values, rows), shape=shape, ctx=ctx, dtype=dtype)
        return array, (values.astype(dtype), rows)
    if stype != 'csr':
        raise ValueError(f"rand_sparse_ndarray: stype={stype!r}: expected 'csr' or "
                         f"'row_sparse'")
    import scipy.sparse
    if distribution == 'powerlaw':
        matrix = _powerlaw_csr(shape, density)
    else:
        matrix = scipy.sparse.random(shape[0], shape[1], density, format='csr',
                                     dtype=np.float64)
    matrix.data = np.asarray(values_of(matrix.data), dtype=np.float64)
    array = nd.sparse.csr_matrix(matrix, ctx=ctx, dtype=dtype)
    return array, (array.indptr, array.indices, array.data)


def create_sparse_array(shape, stype, data_init=None, rsp_indices=None, dtype=None,
                        modifier_func=None, density=.5, shuffle_csr_indices=False):
    """A random sparse array of storage type `stype` (see :func:`rand_sparse_ndarray`);
    `rsp_indices` (sorted here) fixes the stored rows of a row_sparse array.

    >>> create_sparse_array((4, 3), 'row_sparse', rsp_indices=[2, 0]).indices.asnumpy().tolist()
    [0, 2]
    """
    if stype not in ('row_sparse', 'csr'):
        raise ValueError(f"create_sparse_array: stype={stype!r}: expected 'csr' or "
                         f"'row_sparse'")
    rows = None if rsp_indices is None or stype != 'row_sparse' else np.sort(rsp_indices)
    return rand_sparse_ndarray(shape, stype, density=density, data_init=data_init,
                               rsp_indices=rows, dtype=dtype, modifier_func=modifier_func,
                               shuffle_csr_indices=shuffle_csr_indices)[0]


def create_sparse_array_zd(shape, stype, density, data_init=None, rsp_indices=None,
                           dtype=None, modifier_func=None, shuffle_csr_indices=False):
    """:func:`create_sparse_array` where a row_sparse array stores only `rsp_indices` (none
    when None: an array of zeros)."""
    if stype == 'row_sparse':
        density = 0.0
        if rsp_indices is not None and len(rsp_indices) > shape[0]:
            raise ValueError(f'create_sparse_array_zd: {len(rsp_indices)} row indices for '
                             f'{shape[0]} rows')
    return create_sparse_array(shape, stype, data_init=data_init, rsp_indices=rsp_indices,
                               dtype=dtype, modifier_func=modifier_func, density=density,
                               shuffle_csr_indices=shuffle_csr_indices)


def shuffle_csr_column_indices(csr):
    """Shuffle, in place, the column indices (with NumPy's global generator) within each row
    of a ``scipy.sparse`` csr matrix: a valid csr matrix whose indices are not sorted.
    Ember's own csr arrays keep sorted indices, so this is for SciPy inputs."""
    for row in range(len(csr.indptr) - 1):
        begin, end = csr.indptr[row], csr.indptr[row + 1]
        order = np.random.permutation(end - begin)
        csr.indices[begin:end] = csr.indices[begin:end][order]
        csr.data[begin:end] = csr.data[begin:end][order]


def _powerlaw_csr(shape, density):
    """A csr matrix whose rows hold 1, 2, 4, ... entries (capped by the columns) until
    `density` of all entries is reached, the rest of the rows empty."""
    import scipy.sparse
    rows, columns = shape
    budget, indptr, indices = int(density * rows * columns), [0], []
    count = 1
    for _ in range(rows):
        take = min(count, columns, max(budget, 0))
        indices.extend(sorted(np.random.choice(columns, take, replace=False).tolist()))
        indptr.append(indptr[-1] + take)
        budget -= take
        count *= 2
    data = np.random.uniform(size=len(indices))
    return scipy.sparse.csr_matrix((data, indices, indptr), shape=shape)


def assign_each(the_input, function) -> np.ndarray:
    """`function` applied to each element of `the_input` (a copy when it is None).

    >>> assign_each(np.array([1.0, 4.0]), np.sqrt).tolist()
    [1.0, 2.0]
    """
    if function is None:
        return np.array(the_input)
    return np.vectorize(function, otypes=[np.float64])(the_input)


def assign_each2(input1, input2, function) -> np.ndarray:
    """`function` applied to each pair of elements of two arrays of one shape."""
    if function is None:
        return np.array(input1)
    if np.shape(input1) != np.shape(input2):
        raise ValueError(f'assign_each2: shapes {np.shape(input1)} and {np.shape(input2)} '
                         'differ')
    return np.vectorize(function, otypes=[np.float64])(input1, input2)


def create_vector(size, dtype=np.int64):
    """``arange(size)`` as an NDArray (large-tensor tests)."""
    return nd.arange(0, size, dtype=dtype)


def create_2d_tensor(rows, columns, dtype=np.int64):
    """An NDArray whose row i holds i everywhere (large-tensor tests).

    >>> create_2d_tensor(2, 3).asnumpy().tolist()
    [[0, 0, 0], [1, 1, 1]]
    """
    column = nd.arange(0, rows, dtype=dtype).reshape((rows, 1))
    return nd.broadcast_to(column, shape=(rows, columns))


def get_identity_mat(size):
    """The `size` x `size` identity as a float32 NDArray."""
    return nd.array(np.eye(size, dtype=np.float32))


def get_identity_mat_batch(size):
    """Two identities of `size`, stacked: shape (2, size, size)."""
    return nd.array(np.stack([np.eye(size, dtype=np.float32)] * 2))


def new_matrix_with_real_eigvals_2d(n) -> np.ndarray:
    """A well-conditioned n x n matrix with real eigenvalues in [-10, 10]: ``Q^-1 D Q`` with
    Q a Householder reflection times a diagonal, kept when its condition number is below 3."""
    while True:
        diagonal = np.diag(np.random.uniform(-1.0, 1.0, n))
        v = np.random.uniform(-1.0, 1.0, (n, 1))
        v /= np.linalg.norm(v)
        q = (np.eye(n) - 2 * v @ v.T) @ diagonal
        if np.linalg.cond(q, 2) < 3:
            break
    return np.linalg.inv(q) @ np.diag(np.random.uniform(-10.0, 10.0, n)) @ q


def new_matrix_with_real_eigvals_nd(shape) -> np.ndarray:
    """A stack of :func:`new_matrix_with_real_eigvals_2d` matrices of shape (..., n, n)."""
    count = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return np.array([new_matrix_with_real_eigvals_2d(shape[-1])
                     for _ in range(count)]).reshape(shape)


def new_orthonormal_matrix_2d(n) -> np.ndarray:
    """A random n x n orthonormal matrix (Q of a QR factorisation).

    >>> q = new_orthonormal_matrix_2d(3)
    >>> bool(np.allclose(q @ q.T, np.eye(3)))
    True
    """
    x = np.random.randn(n, n)
    return np.linalg.qr(x.T @ x)[0]


def new_sym_matrix_with_real_eigvals_2d(n) -> np.ndarray:
    """A random symmetric n x n matrix with eigenvalues in [-10, 10]."""
    q = new_orthonormal_matrix_2d(n)
    return q.T @ np.diag(np.random.uniform(-10.0, 10.0, n)) @ q


def new_sym_matrix_with_real_eigvals_nd(shape) -> np.ndarray:
    """A stack of :func:`new_sym_matrix_with_real_eigvals_2d` matrices of shape (..., n, n)."""
    count = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return np.array([new_sym_matrix_with_real_eigvals_2d(shape[-1])
                     for _ in range(count)]).reshape(shape)


def np_reduce(dat, axis, keepdims, numpy_reduce_func):
    """Reduce `dat` over `axis` (an int, a sequence or None for all) one axis at a time with
    `numpy_reduce_func` (e.g. ``np.sum``): a reference for reduction operators.

    >>> np_reduce(np.ones((2, 3, 4)), (0, 2), True, np.sum).shape
    (1, 3, 1)
    """
    if isinstance(axis, int):
        axis = [axis]
    else:
        axis = list(axis) if axis is not None else list(range(len(dat.shape)))
    result = dat
    for index in reversed(sorted(a % dat.ndim for a in axis)):
        result = numpy_reduce_func(result, axis=index)
    if keepdims:
        shape = list(dat.shape)
        for index in axis:
            shape[index] = 1
        result = result.reshape(tuple(shape))
    return result


# ----------------------------------------------------------------------------------------------
# Gradient and forward checks: a function of NDArrays runs through autograd

def _as_function(sym):
    if not callable(sym):
        raise TypeError(f'expected a Symbol or a function of NDArrays, got '
                        f'{type(sym).__name__}')
    return sym


class _Arguments:
    """The named host values a function is called with: `location` first, then `aux_states`.

    A list is passed positionally (names are the indices), a dict by keyword."""

    def __init__(self, location, aux_states, dtype):
        self.by_keyword = isinstance(location, dict)
        self.names, self.values = self._split(location, dtype)
        if aux_states is not None and isinstance(aux_states, dict) != self.by_keyword:
            raise TypeError('location and aux_states must both be lists or both be dicts')
        self.aux_names, self.aux_values = self._split(aux_states or (), dtype)

    @staticmethod
    def _split(values, dtype):
        if isinstance(values, dict):
            names = list(values)
            values = [values[n] for n in names]
        else:
            values = list(values)
            names = list(range(len(values)))
        return names, [np.array(_host(v), dtype=dtype) for v in values]

    def arrays(self, ctx, values=None):
        values = self.values if values is None else values
        return ([nd.array(v, ctx=ctx, dtype=v.dtype) for v in values],
                [nd.array(v, ctx=ctx, dtype=v.dtype) for v in self.aux_values])

    def call(self, fn, arrays, aux_arrays):
        if self.by_keyword:
            kwargs = dict(zip(self.names, arrays))
            kwargs.update(zip(self.aux_names, aux_arrays))
            return _output_list(fn(**kwargs))
        return _output_list(fn(*arrays, *aux_arrays))

    def index_of(self, node):
        if node not in self.names:
            raise KeyError(f'grad_nodes names {node!r}, which is not an argument; arguments '
                           f'are {self.names}')
        return self.names.index(node)


def _output_list(result):
    if isinstance(result, NDArray):
        return [result]
    if isinstance(result, (list, tuple)) and all(isinstance(r, NDArray) for r in result):
        return list(result)
    raise TypeError(f'the checked function must return an NDArray or a list of NDArrays, got '
                    f'{type(result).__name__}')


def _grad_indices(args, grad_nodes):
    if grad_nodes is None:
        return list(range(len(args.names)))
    if isinstance(grad_nodes, dict):
        grad_nodes = [name for name, req in grad_nodes.items() if req != 'null']
    return [args.index_of(node) for node in grad_nodes]


def _projection(outputs, dtype):
    """Random weights of a linear functional of the outputs (MXNet's random projection), with
    random signs so that errors of opposite sign in two outputs cannot cancel."""
    weights = []
    for out in outputs:
        magnitude = np.random.uniform(0.1, 1.1, out.shape)
        sign = np.random.choice([-1.0, 1.0], out.shape)
        weights.append((magnitude * sign).astype(dtype))
    return weights


def _finite_differences(fn, values, index, eps, projection=None):
    """Central finite differences of ``sum(projection_i * fn(values)_i)`` with respect to
    ``values[index]``; `fn` maps the list of host arrays to a list of host arrays (weights of
    one when `projection` is None).

    >>> _finite_differences(lambda v: [v[0] ** 2], [np.array([1.0, 3.0])], 0, 1e-4).tolist()
    [2.0..., 6.0...]
    """
    def functional(current):
        outputs = fn(current)
        weights = projection or [np.ones_like(o) for o in outputs]
        return sum(float(np.sum(np.asarray(o, np.float64) * w)) for o, w in zip(outputs, weights))

    values = [np.array(v) for v in values]
    target = values[index]
    grad = np.zeros(target.shape, np.float64)
    flat_target, flat_grad = target.reshape(-1), grad.reshape(-1)
    for i in range(flat_target.size):
        original = flat_target[i]
        flat_target[i] = original + eps
        plus = functional(values)
        flat_target[i] = original - eps
        minus = functional(values)
        flat_target[i] = original
        flat_grad[i] = (plus - minus) / (2 * eps)
    return grad


def check_numeric_gradient(sym, location, aux_states=None, numeric_eps=1e-3, rtol=1e-2,
                           atol=None, grad_nodes=None, use_forward_train=True, ctx=None,
                           grad_stype_dict=None, dtype=np.float32):
    """Check the gradient of `sym` against central finite differences.

    `sym` is a Symbol (bound to an executor, as in MXNet; `location` and `aux_states` are lists
    in ``list_arguments()`` / ``list_auxiliary_states()`` order or dicts by name) or a function
    of NDArrays returning an NDArray or a list of them (run through autograd; `location` holds
    its arguments, a list passed positionally or a dict by keyword, and `aux_states` further
    arguments that are not differentiated). The gradient of a random linear functional of
    every output is compared for the arguments named in `grad_nodes` (names, or indices for a
    function; a dict of name -> grad_req for a Symbol; all by default), computed in `dtype`.
    `numeric_eps` None takes :func:`default_numeric_eps`. Raises AssertionError naming the
    argument that differs.

    >>> import ember as mx
    >>> w = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> check_numeric_gradient(lambda x, w: mx.nd.dot(x, w), {'x': np.ones((1, 2)), 'w': w},
    ...                        dtype=np.float64, rtol=1e-6, numeric_eps=1e-6)
    >>> check_numeric_gradient(lambda x: mx.nd.BlockGrad(x) * x, [np.array([2.0])])
    Traceback (most recent call last):
    ...
    AssertionError: NUMERICAL_0 and BACKWARD_0 differ at (0,): ...
    """
    if grad_stype_dict and set(grad_stype_dict.values()) - {'default'}:
        raise ValueError('check_numeric_gradient: grad_stype_dict: only dense gradients exist')
    if numeric_eps is None:
        numeric_eps = default_numeric_eps()[np.dtype(dtype)]
    if isinstance(sym, Symbol):
        _check_symbol_gradient(sym, location, aux_states, numeric_eps, rtol, atol, grad_nodes,
                               use_forward_train, ctx or default_context(), dtype)
        return
    fn, ctx = _as_function(sym), ctx or default_context()
    args = _Arguments(location, aux_states, dtype)
    indices = _grad_indices(args, grad_nodes)
    analytic, projection = _autograd_grads(fn, args, indices, use_forward_train, ctx, dtype)

    def host_outputs(values):
        arrays, aux_arrays = args.arrays(ctx, values)
        with autograd.pause(train_mode=use_forward_train):
            return [o.asnumpy() for o in args.call(fn, arrays, aux_arrays)]

    for index, computed in zip(indices, analytic):
        numeric = _finite_differences(host_outputs, args.values, index, numeric_eps,
                                      projection)
        name = args.names[index]
        assert_almost_equal(numeric.astype(dtype), computed, rtol, atol,
                            names=(f'NUMERICAL_{name}', f'BACKWARD_{name}'))


def _autograd_grads(fn, args, indices, train, ctx, dtype):
    arrays, aux_arrays = args.arrays(ctx)
    for index in indices:
        arrays[index].attach_grad()
    with autograd.record(train_mode=train):
        outputs = args.call(fn, arrays, aux_arrays)
    projection = _projection(outputs, dtype)
    heads = [nd.array(p, ctx=ctx, dtype=o.dtype) for p, o in zip(projection, outputs)]
    autograd.backward(outputs, heads, train_mode=train)
    return [arrays[i].grad.asnumpy() for i in indices], projection


def _expected_list(expected, names, what):
    if isinstance(expected, dict):
        missing = [n for n in expected if n not in names]
        if missing:
            raise KeyError(f'{what} names {missing}, which are not among {names}')
        return [(names.index(n), v) for n, v in expected.items()]
    return list(enumerate(expected))


def check_symbolic_forward(sym, location, expected, rtol=None, atol=None, aux_states=None,
                           ctx=None, equal_nan=False, dtype=np.float32):
    """Run `sym` in prediction mode on `location` and compare its outputs with `expected` (a
    list, one array per output, or a dict by output name). A Symbol is bound as in MXNet
    (`location` by ``list_arguments()``) and its outputs come back as NDArrays; a function of
    NDArrays gives its outputs as NumPy arrays.

    >>> import ember as mx
    >>> check_symbolic_forward(lambda x: x * 2, [np.array([1.0, 2.0])], [np.array([2.0, 4.0])])
    [array([2., 4.], dtype=float32)]
    """
    if isinstance(sym, Symbol):
        return _symbol_forward(sym, location, expected, rtol, atol, aux_states,
                               ctx or default_context(), equal_nan, dtype)
    fn, ctx = _as_function(sym), ctx or default_context()
    args = _Arguments(location, aux_states, dtype)
    with autograd.predict_mode():
        outputs = [o.asnumpy() for o in args.call(fn, *args.arrays(ctx))]
    names = [f'output{i}' for i in range(len(outputs))]
    for index, want in _expected_list(expected, names, 'expected'):
        assert_almost_equal(outputs[index], want, rtol, atol, equal_nan=equal_nan,
                            names=(f'EXPECTED_{names[index]}', f'FORWARD_{names[index]}'))
    return outputs


def check_symbolic_backward(sym, location, out_grads, expected, rtol=None, atol=None,
                            aux_states=None, grad_req='write', ctx=None, grad_stypes=None,
                            equal_nan=False, dtype=np.float32):
    """Run `sym` forward in training mode, backward with head gradients `out_grads`, and
    compare the arguments' gradients with `expected` (a list per argument, or a dict by
    argument name; None skips one). With grad_req='add' the gradients start from random values
    that the check adds to `expected`. A Symbol runs through an executor (its gradient arrays
    start from random values, as in MXNet, and come back as a dict of NDArrays by name); a
    function runs through autograd and gives its gradients as NumPy arrays.

    >>> import ember as mx
    >>> grads = check_symbolic_backward(lambda x: x * x, [np.array([3.0])], [np.array([1.0])],
    ...                                 [np.array([6.0])])
    >>> grads[0].tolist()
    [6.0]
    """
    if grad_stypes and set(grad_stypes.values()) - {'default', None}:
        raise ValueError('check_symbolic_backward: grad_stypes: only dense gradients exist')
    if isinstance(sym, Symbol):
        return _symbol_backward(sym, location, out_grads, expected, rtol, atol, aux_states,
                                grad_req, ctx or default_context(), equal_nan, dtype)
    fn, ctx = _as_function(sym), ctx or default_context()
    args = _Arguments(location, aux_states, dtype)
    arrays, aux_arrays = args.arrays(ctx)
    reqs = _grad_reqs(grad_req, args.names)
    initial = _attach_grads(arrays, reqs, dtype)
    with autograd.record(train_mode=True):
        outputs = args.call(fn, arrays, aux_arrays)
    heads = [nd.array(_host(g), ctx=ctx, dtype=o.dtype) for g, o in zip(out_grads, outputs)]
    autograd.backward(outputs, heads)
    grads = [None if a.grad is None else a.grad.asnumpy() for a in arrays]
    for index, want in _expected_list(expected, args.names, 'expected'):
        if want is None or reqs[index] == 'null':
            continue
        want = _host(want) + initial[index] if reqs[index] == 'add' else want
        name = args.names[index]
        assert_almost_equal(grads[index], want, rtol, atol, equal_nan=equal_nan,
                            names=(f'BACKWARD_{name}', f'EXPECTED_{name}'))
    return grads


def _grad_reqs(grad_req, names):
    if isinstance(grad_req, str):
        return [grad_req] * len(names)
    if isinstance(grad_req, dict):
        return [grad_req.get(n, 'null') for n in names]
    return list(grad_req)


def _attach_grads(arrays, reqs, dtype):
    initial = []
    for array, req in zip(arrays, reqs):
        start = np.random.normal(size=array.shape).astype(dtype) if req == 'add' else None
        if req != 'null':
            array.attach_grad(grad_req=req)
            if start is not None:
                array.grad[:] = start
        initial.append(start)
    return initial


# ----------------------------------------------------------------------------------------------
# Gradient and forward checks: a Symbol runs through an executor, as in MXNet

def _cast(value, ctx, dtype):
    if isinstance(value, NDArray):
        return value
    value = np.asarray(value)
    return nd.array(value, ctx=ctx, dtype=value.dtype if dtype == 'asnumpy' else dtype)


def _by_name(names, values, what, ctx, dtype):
    """`values` (a list in `names` order or a dict by name) as a dict of NDArrays."""
    if values is None:
        return None
    if isinstance(values, dict):
        if set(values) != set(names):
            raise ValueError(f'{what} names {sorted(values)}, but the symbol has {names}')
        items = values.items()
    else:
        if len(values) != len(names):
            raise ValueError(f'{what} holds {len(values)} arrays, but the symbol has '
                             f'{len(names)}: {names}')
        items = zip(names, values)
    return {name: _cast(value, ctx, dtype) for name, value in items}


def numeric_grad(executor, location, aux_states=None, eps=1e-4, use_forward_train=True,
                 dtype=np.float32) -> dict:
    """Central finite differences of the sum of `executor`'s first output with respect to each
    argument in `location` (name -> NumPy array; integer arguments get zeros): for each
    element, the output at x + eps/2 minus the output at x - eps/2, over eps. `aux_states`
    (name -> array) is set again before every forward pass, which may update it.

    >>> import ember as mx
    >>> x = mx.sym.var('x')
    >>> exe = (x * x).simple_bind(mx.cpu(), x=(2,), grad_req='null', type_dict={'x': 'float64'})
    >>> grads = numeric_grad(exe, {'x': np.array([1.0, 3.0])}, eps=1e-3, dtype=np.float64)
    >>> np.round(grads['x'], 6).tolist()
    [2.0, 6.0]
    """
    location = {name: np.array(value, order='C') for name, value in location.items()}
    for name, value in location.items():
        executor.arg_dict[name][:] = value.astype(dtype)
    grads = {name: np.zeros(value.shape, dtype=dtype) for name, value in location.items()}
    for name, value in location.items():
        if value.dtype.kind == 'f':
            _perturb_each(executor, name, value, grads[name], aux_states, eps,
                          use_forward_train, dtype)
    return grads


def _perturb_each(executor, name, value, grad, aux_states, eps, train, dtype):
    flat, flat_grad, target = value.reshape(-1), grad.reshape(-1), executor.arg_dict[name]

    def output_at(delta, i):
        flat[i] = original + delta
        target[:] = value.astype(dtype)
        for aux_name, aux_value in (aux_states or {}).items():
            executor.aux_dict[aux_name][:] = aux_value
        executor.forward(is_train=train)
        return executor.outputs[0].asnumpy().astype(np.float64).sum()

    for i in range(flat.size):
        original = flat[i]
        flat_grad[i] = (output_at(eps / 2, i) - output_at(-eps / 2, i)) / eps
        flat[i] = original
    target[:] = value.astype(dtype)


def _grad_requests(sym, grad_nodes) -> dict:
    if grad_nodes is None:
        return {name: 'write' for name in sym.list_arguments()}
    if isinstance(grad_nodes, dict):
        return dict(grad_nodes)
    return {name: 'write' for name in grad_nodes}


def _projected_loss(sym, shapes, ctx, dtype):
    """sum_i sum(output_i * P_i) with random P_i >= 0.1 (small weights lose precision), as
    a MakeLoss symbol, and the projections by argument name."""
    _, out_shapes, _ = sym.infer_shape(**shapes)
    terms, projections = [], {}
    for index, (output, shape) in enumerate(zip(sym, out_shapes)):
        name = f'__random_proj{index}'
        projections[name] = nd.array(np.random.rand(*shape) + 0.1, ctx=ctx, dtype=dtype)
        terms.append(_symbol.sum(output * _symbol.var(name)))
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return _symbol.MakeLoss(total), projections


def _check_symbol_gradient(sym, location, aux_states, eps, rtol, atol, grad_nodes, train,
                           ctx, dtype):
    location = _by_name(sym.list_arguments(), location, 'location', ctx, dtype)
    aux = _by_name(sym.list_auxiliary_states(), aux_states, 'aux_states', ctx, dtype)
    requests = _grad_requests(sym, grad_nodes)
    loss, projections = _projected_loss(sym, {k: v.shape for k, v in location.items()}, ctx,
                                        dtype)
    initial = {name: np.random.normal(0, 0.01, location[name].shape) for name in requests}
    executor = loss.bind(ctx, args={**location, **projections},
                         args_grad={k: nd.array(v, ctx=ctx, dtype=dtype)
                                    for k, v in initial.items()},
                         grad_req={**requests, **dict.fromkeys(projections, 'null')},
                         aux_states=aux)
    executor.forward(is_train=True)
    executor.backward()
    computed = {name: executor.grad_dict[name].asnumpy() for name in requests}
    host = {k: v.asnumpy() for k, v in location.items()}
    host.update({k: v.asnumpy() for k, v in projections.items()})
    aux_host = None if aux is None else {k: v.asnumpy() for k, v in aux.items()}
    numeric = numeric_grad(executor, host, aux_host, eps, train, dtype)
    for name, request in requests.items():
        _compare_gradient(name, request, numeric[name], computed[name], initial[name], rtol,
                          atol)


def _compare_gradient(name, request, numeric, computed, initial, rtol, atol):
    names = (f'NUMERICAL_{name}', f'BACKWARD_{name}')
    if request == 'write':
        assert_almost_equal(numeric, computed, rtol, atol, names)
    elif request == 'add':
        assert_almost_equal(numeric, computed - initial, rtol, atol, names)
    elif request == 'null':
        assert_almost_equal(initial, computed, rtol, atol, names)
    else:
        raise ValueError(f"grad_req {request!r} of {name}: expected 'write', 'add' or 'null'")


def _symbol_forward(sym, location, expected, rtol, atol, aux_states, ctx, equal_nan, dtype):
    location = _by_name(sym.list_arguments(), location, 'location', ctx, dtype)
    aux = _by_name(sym.list_auxiliary_states(), aux_states, 'aux_states', ctx, dtype)
    if isinstance(expected, dict):
        expected = [expected[name] for name in sym.list_outputs()]
    executor = sym.bind(ctx, args=location, aux_states=aux, grad_req='null')
    executor.forward(is_train=False)
    for name, want, got in zip(sym.list_outputs(), expected, executor.outputs):
        assert_almost_equal(want, got, rtol, atol, (f'EXPECTED_{name}', f'FORWARD_{name}'),
                            equal_nan=equal_nan)
    return executor.outputs


def _symbol_backward(sym, location, out_grads, expected, rtol, atol, aux_states, grad_req,
                     ctx, equal_nan, dtype):
    names = sym.list_arguments()
    location = _by_name(names, location, 'location', ctx, dtype)
    aux = _by_name(sym.list_auxiliary_states(), aux_states, 'aux_states', ctx, dtype)
    if not isinstance(expected, dict):
        expected = dict(zip(names, expected))
    requests = _requests_by_name(grad_req, names)
    # Gradient buffers start dirty, so that a gradient that is never written shows.
    initial = {name: np.random.normal(size=location[name].shape) for name in sorted(expected)}
    grads = {name: _cast(value, ctx, location[name].dtype if dtype == 'asnumpy' else dtype)
             for name, value in initial.items()}
    executor = sym.bind(ctx, args=location, args_grad=grads, grad_req=requests, aux_states=aux)
    executor.forward(is_train=True)
    executor.backward(_head_grads(out_grads, ctx, dtype))
    for name in expected:
        if expected[name] is None:
            continue
        got = grads[name].asnumpy()
        want = {'write': _host(expected[name]), 'add': _host(expected[name]) + initial[name],
                'null': initial[name]}[requests.get(name, 'null')]
        assert_almost_equal(want, got, rtol, atol, (f'EXPECTED_{name}', f'BACKWARD_{name}'),
                            equal_nan=equal_nan)
    return grads


def _requests_by_name(grad_req, names) -> dict:
    if isinstance(grad_req, str):
        return dict.fromkeys(names, grad_req)
    if isinstance(grad_req, dict):
        return dict(grad_req)
    return dict(zip(names, grad_req))


def _head_grads(out_grads, ctx, dtype):
    if out_grads is None:
        return None
    if isinstance(out_grads, dict):
        return {name: _cast(value, ctx, dtype) for name, value in out_grads.items()}
    return [_cast(value, ctx, dtype) for value in out_grads]


def simple_forward(sym, ctx=None, is_train=False, **inputs):
    """Run `sym` on NumPy inputs given by name; its output as NumPy (a list for several).

    >>> import ember as mx
    >>> simple_forward(mx.sym.var('a') * 2, a=np.array([1.0, 2.0])).tolist()
    [2.0, 4.0]
    """
    ctx = ctx or default_context()
    executor = sym.bind(ctx, args={k: array(v, ctx=ctx) for k, v in inputs.items()},
                        grad_req='null')
    executor.forward(is_train=is_train)
    outputs = [out.asnumpy() for out in executor.outputs]
    return outputs[0] if len(outputs) == 1 else outputs


def check_speed(sym, location=None, ctx=None, N=20, grad_req=None, typ='whole',  # noqa: N803
                **kwargs) -> float:
    """Seconds per run of `sym`: forward and backward (`typ` 'whole') or forward only
    ('forward'), averaged over `N` runs after one to warm up. Inputs come from `location`
    (name -> NumPy array) or are drawn for the shapes in `kwargs`."""
    if typ not in ('whole', 'forward'):
        raise ValueError(f"check_speed: typ={typ!r}: expected 'whole' or 'forward'")
    ctx = ctx or default_context()
    grad_req = grad_req or 'write'
    if location is None:
        executor = sym.simple_bind(ctx, grad_req=grad_req, **kwargs)
        location = {k: np.random.normal(size=a.shape) for k, a in executor.arg_dict.items()}
    else:
        executor = sym.simple_bind(ctx, grad_req=grad_req,
                                   **{k: v.shape for k, v in location.items()})
    for name, value in location.items():
        executor.arg_dict[name][:] = value.astype(executor.arg_dict[name].dtype)
    train = typ == 'whole'

    def run():
        executor.forward(is_train=train)
        if train:
            executor.backward(out_grads=executor.outputs)
    run()
    nd.waitall()
    start = time.perf_counter()
    for _ in range(N):
        run()
    nd.waitall()
    return (time.perf_counter() - start) / N


def check_consistency(sym, ctx_list, scale=1.0, grad_req='write', arg_params=None,
                      aux_params=None, rtol=None, atol=None, raise_on_err=True,
                      ground_truth=None, equal_nan=False, use_uniform=False,
                      rand_type=np.float64):
    """Check that `sym` (or one symbol per entry) gives the same outputs and gradients on
    every entry of `ctx_list`: dicts of ``simple_bind`` arguments (``ctx``, input shapes,
    ``type_dict``). The most precise entry is the reference unless `ground_truth` (name ->
    array) is given; returns the reference. Inputs are drawn with `scale` (normal, or uniform
    in +-0.92*scale with `use_uniform`) unless `arg_params` gives them."""
    if len(ctx_list) < 2:
        raise ValueError('check_consistency: ctx_list needs two or more entries to compare')
    symbols = [sym] * len(ctx_list) if isinstance(sym, Symbol) else list(sym)
    executors = [s.simple_bind(grad_req=grad_req, **dict(entry))
                 for s, entry in zip(symbols, ctx_list)]
    args = _drawn_params(executors[0], arg_params, scale, use_uniform, rand_type)
    aux = dict(aux_params or {})
    for executor in executors:
        _fill_executor(executor, args, aux, grad_req)
    dtypes = [np.dtype(executor.outputs[0].dtype) for executor in executors]
    reference = int(np.argmax([dt.itemsize for dt in dtypes]))
    truth = ground_truth
    if truth is None:
        truth = dict(executors[reference].output_dict)
        if grad_req != 'null':
            truth.update(executors[reference].grad_dict)
    compare = functools.partial(_consistent, truth, reference, rtol, atol, equal_nan,
                                raise_on_err)
    for executor in executors:
        executor.forward(is_train=False)
    compare(executors, symbols[0].list_outputs(), lambda e: e.outputs, 'predict')
    if grad_req != 'null':
        _train_all(executors)
        compare(executors, symbols[0].list_outputs() + symbols[0].list_arguments(),
                lambda e: e.outputs + e.grad_arrays, 'train')
    return truth


def _drawn_params(executor, given, scale, use_uniform, rand_type):
    params = dict(given or {})
    for name, arr in sorted(executor.arg_dict.items()):
        if name not in params:
            params[name] = (np.random.uniform(-0.92 * scale, 0.92 * scale, arr.shape)
                            if use_uniform else
                            np.random.normal(size=arr.shape, scale=scale)).astype(rand_type)
    return params


def _fill_executor(executor, args, aux, grad_req):
    for name, arr in executor.arg_dict.items():
        arr[:] = args[name]
    for name, arr in executor.aux_dict.items():
        arr[:] = aux.get(name, 0)
    if grad_req == 'add':
        for arr in executor.grad_arrays:
            if arr is not None:
                arr[:] = 0


def _train_all(executors):
    """Forward in training mode, then backward with the first executor's outputs (in the
    least precise output dtype) as head gradients everywhere."""
    for executor in executors:
        executor.forward(is_train=True)
    heads = [out.asnumpy() for out in executors[0].outputs]
    for executor in executors:
        heads = [h.astype(o.dtype) if np.dtype(o.dtype).itemsize < h.dtype.itemsize else h
                 for h, o in zip(heads, executor.outputs)]
    for executor in executors:
        executor.backward([nd.array(h, ctx=o.context, dtype=o.dtype)
                           for h, o in zip(heads, executor.outputs)])


def _consistent(truth, reference, rtol, atol, equal_nan, raise_on_err, executors, names,
                arrays_of, phase):
    for index, executor in enumerate(executors):
        if index == reference:
            continue
        for name, arr in zip(names, arrays_of(executor)):
            if truth.get(name) is None or arr is None:
                continue
            try:
                assert_almost_equal(arr, truth[name], rtol=rtol, atol=atol,
                                    names=(f'{phase} {name} on entry {index}',
                                           f'entry {reference}'), equal_nan=equal_nan)
            except AssertionError:
                if raise_on_err:
                    raise
                _log.exception('check_consistency: %s differs on entry %d', name, index)


def check_gluon_hybridize_consistency(net_builder, data_l, numpy_func=None, test_grad=True,
                                      rtol=1E-4, atol=1E-4):  # noqa: N803 - MXNet's names
    """Check that the block ``net_builder(prefix='net_')`` gives the same outputs (and input
    gradients with `test_grad`) hybridized and not, with the same parameters; and, when
    `numpy_func` is given, the same as it. The block must draw no random numbers."""
    saved = {'out': None, 'grads': None, 'params': None}
    for hybridize in (False, True):
        for use_autograd in ((False, True) if test_grad else (False,)):
            net = net_builder(prefix='net_')
            _initialize_like(net, saved['params'])
            if hybridize:
                net.hybridize()
            out, grads = _run_block(net, data_l, use_autograd)
            if saved['params'] is None:
                saved['params'] = {k: v.data().asnumpy()
                                   for k, v in net.collect_params().items()}
            _save_or_compare(saved, 'out', out.asnumpy(), rtol, atol)
            if use_autograd:
                _save_or_compare_all(saved, grads, rtol, atol)
    if numpy_func is not None:
        assert_almost_equal(saved['out'], numpy_func(*[d.asnumpy() for d in data_l]),
                            rtol=rtol, atol=atol)


def _initialize_like(net, params):
    net.initialize()
    if params is not None:
        for name, parameter in net.collect_params().items():
            parameter.set_data(nd.array(params[name]))


def _run_block(net, data_l, use_autograd):
    inputs = [data.copy() for data in data_l]
    if not use_autograd:
        return net(*inputs), None
    for data in inputs:
        data.attach_grad()
    with autograd.record():
        out = net(*inputs)
    out.backward(out)
    return out, [data.grad.asnumpy() for data in inputs]


def _save_or_compare(saved, key, value, rtol, atol):
    if saved[key] is None:
        saved[key] = value
    else:
        assert_almost_equal(value, saved[key], rtol=rtol, atol=atol)


def _save_or_compare_all(saved, grads, rtol, atol):
    if saved['grads'] is None:
        saved['grads'] = grads
        return
    for got, want in zip(grads, saved['grads']):
        assert_almost_equal(got, want, rtol=rtol, atol=atol)


def compare_optimizer(opt1, opt2, shape, dtype, w_stype='default', g_stype='default',
                      rtol=1e-4, atol=1e-5, compare_states=True, ntensors=1):
    """Check that two optimizers make the same update and states from the same uniform
    weights and gradients of `shape` (a list of shapes updates `ntensors` weights at once
    with `opt2`, one by one with `opt1`)."""
    if w_stype != 'default' or g_stype != 'default':
        raise ValueError(f'compare_optimizer: w_stype={w_stype!r}, g_stype={g_stype!r}: only '
                         "dense ('default') storage exists")
    ctx = default_context()

    def uniform(s):
        return nd.array(np.random.uniform(size=s), ctx=ctx, dtype=dtype)
    if not isinstance(shape, list):
        w2, g2 = uniform(shape), uniform(shape)
        w1, g1 = w2.copy(), g2.copy()
        state1 = opt1.create_state_multi_precision(0, w1)
        state2 = opt2.create_state_multi_precision(0, w2)
        if compare_states:
            compare_ndarray_tuple(state1, state2)
        opt1.update_multi_precision(0, w1, g1, state1)
        opt2.update_multi_precision(0, w2, g2, state2)
        if compare_states:
            compare_ndarray_tuple(state1, state2, rtol=rtol, atol=atol)
        assert_almost_equal(w1, w2, rtol=rtol, atol=atol)
        return
    w1 = [uniform(s) for s in shape]
    g1 = [uniform(s) for s in shape]
    w2, g2 = [w.copy() for w in w1], [g.copy() for g in g1]
    state2 = [opt2.create_state_multi_precision(i, w2[i]) for i in range(ntensors)]
    opt2.update_multi_precision(list(range(ntensors)), w2, g2, state2)
    for i in range(ntensors):
        state1 = opt1.create_state_multi_precision(i, w1[i])
        opt1.update_multi_precision(i, w1[i], g1[i], state1)
        if compare_states:
            compare_ndarray_tuple(state1, state2[i], rtol, atol)
        compare_ndarray_tuple(w1[i], w2[i], rtol, atol)


def same_symbol_structure(sym1, sym2) -> bool:
    """Whether the two symbols' graphs have the same operator at every node position.

    >>> import ember as mx
    >>> a, b = mx.sym.var('a'), mx.sym.var('b')
    >>> same_symbol_structure(mx.sym.relu(a), mx.sym.relu(b)), same_symbol_structure(
    ...     mx.sym.relu(a), mx.sym.tanh(a))
    (True, False)
    """
    nodes1 = json.loads(sym1.tojson())['nodes']
    nodes2 = json.loads(sym2.tojson())['nodes']
    return all(n1['op'] == n2['op'] for n1, n2 in zip(nodes1, nodes2))


# ----------------------------------------------------------------------------------------------
# Configuration, exceptions and flaky tests

def environment(*args):
    """Set configuration variables for a block or a function: ``environment(name, value)`` or
    ``environment({name: value, ...})``, through :func:`ember.config.override` (the process
    environment is never touched). ``None`` means unset (the default applies).

    >>> from ember import config
    >>> with environment('MXNET_SAFE_ACCUMULATION', '1'):
    ...     config.get('MXNET_SAFE_ACCUMULATION')
    True
    >>> @environment({'MXNET_CPU_PARALLEL_SIZE': 10})
    ... def parallel_size():
    ...     return config.get('MXNET_CPU_PARALLEL_SIZE')
    >>> parallel_size()
    10
    """
    if len(args) == 2 and isinstance(args[0], str):
        values = {args[0]: args[1]}
    elif len(args) == 1 and isinstance(args[0], dict):
        values = dict(args[0])
    else:
        raise TypeError(f'environment: expected (name, value) or a dict of names to values, '
                        f'got {args!r}')
    return config.override(**values)


def assert_exception(f, exception_type, *args, **kwargs) -> None:
    """Raise AssertionError unless ``f(*args, **kwargs)`` raises `exception_type`.

    >>> assert_exception(int, ValueError, 'x')
    >>> assert_exception(int, ValueError, '1')
    Traceback (most recent call last):
    ...
    AssertionError: int did not raise ValueError
    """
    try:
        f(*args, **kwargs)
    except exception_type:
        return
    name = getattr(f, '__name__', repr(f))
    raise AssertionError(f'{name} did not raise {exception_type.__name__}')


def retry(n: int):
    """Decorator: run a stochastic test up to `n` times; it fails only if every run fails an
    assertion (other exceptions propagate at once).

    >>> tries = []
    >>> @retry(3)
    ... def flaky():
    ...     tries.append(1)
    ...     assert len(tries) == 2
    >>> flaky(); len(tries)
    2
    """
    if not isinstance(n, numbers.Integral) or n < 1:
        raise ValueError(f'retry({n!r}): expected a positive number of attempts')

    def decorate(test):
        @functools.wraps(test)
        def run(*args, **kwargs):
            for attempt in range(n):
                try:
                    return test(*args, **kwargs)
                except AssertionError:
                    if attempt == n - 1:
                        raise
        return run
    return decorate



@contextlib.contextmanager
def discard_stderr():
    """Send what the process writes to standard error (file descriptor 2, native libraries
    included) to /dev/null for the block."""
    stderr_fd = 2      # what native code writes to, whatever sys.stderr is now
    sys.stderr.flush()
    saved = os.dup(stderr_fd)
    try:
        with open(os.devnull, 'w') as sink:
            os.dup2(sink.fileno(), stderr_fd)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, stderr_fd)
        os.close(saved)


def is_aarch64_run() -> bool:
    """Whether this is an ARM 64-bit machine."""
    return platform.machine() == 'aarch64'


def has_tvm_ops() -> bool:
    """Whether operators compiled by TVM exist (never in Ember)."""
    return Features().is_enabled('TVM_OP')


def is_op_runnable() -> bool:
    """Whether the operators under test run on the current device: always, since Ember has no
    TVM operators that need a recent GPU."""
    return current_context().device_type != 'gpu' or not has_tvm_ops()


def list_gpus() -> range:
    """The ids of the GPUs this process can use (empty without CUDA)."""
    return range(num_gpus())


# ----------------------------------------------------------------------------------------------
# Data iterators and data sets

class DummyIter(_io.DataIter):
    """An iterator that returns the first batch of `real_iter` forever (for speed tests).

    >>> import ember as mx
    >>> it = DummyIter(mx.io.NDArrayIter(np.arange(8.0).reshape(4, 2), batch_size=2))
    >>> [float(next(it).data[0].asnumpy()[0, 0]) for _ in range(3)]
    [0.0, 0.0, 0.0]
    """

    def __init__(self, real_iter):
        super().__init__(real_iter.batch_size)
        self.real_iter = real_iter
        self.provide_data = real_iter.provide_data
        self.provide_label = real_iter.provide_label
        self.the_batch = next(real_iter)

    def __iter__(self):
        return self

    def next(self):
        return self.the_batch

    def reset(self):
        pass


def download(url, fname=None, dirname=None, overwrite=False, retries=5) -> str:
    """Fetch `url` into `fname` (its last path part by default) in `dirname`, unless the file
    exists and `overwrite` is False; tries `retries` more times on failure. Returns the path.
    Any scheme urllib reads works (``https://``, ``file://``)."""
    if retries < 0:
        raise ValueError(f'download: retries={retries}: expected 0 or more')
    fname = fname or url.split('/')[-1]
    if dirname is None:
        dirname = os.path.dirname(fname)
    else:
        fname = os.path.join(dirname, fname)
    if dirname:
        os.makedirs(dirname, exist_ok=True)
    if os.path.exists(fname) and not overwrite:
        _log.info('%s exists, skipping download', fname)
        return fname
    for attempt in range(retries + 1):
        try:
            _fetch(url, fname)
            break
        except OSError:
            if attempt == retries:
                raise
            _log.warning('download of %s failed; %d attempts left', url, retries - attempt)
    _log.info('downloaded %s into %s', url, fname)
    return fname


def _fetch(url, fname):
    partial = fname + '.part'
    with urllib.request.urlopen(url) as response, open(partial, 'wb') as out:
        shutil.copyfileobj(response, out)
    os.replace(partial, fname)


MODEL_URL = 'http://data.mxnet.io/models/'
MODELS = {name: (f'{MODEL_URL}{path}-symbol.json', f'{MODEL_URL}{path}-{epoch}.params')
          for name, path, epoch in (
              ('imagenet1k-inception-bn', 'imagenet/inception-bn/Inception-BN', '0126'),
              ('imagenet1k-resnet-18', 'imagenet/resnet/18-layers/resnet-18', '0000'),
              ('imagenet1k-resnet-34', 'imagenet/resnet/34-layers/resnet-34', '0000'),
              ('imagenet1k-resnet-50', 'imagenet/resnet/50-layers/resnet-50', '0000'),
              ('imagenet1k-resnet-101', 'imagenet/resnet/101-layers/resnet-101', '0000'),
              ('imagenet1k-resnet-152', 'imagenet/resnet/152-layers/resnet-152', '0000'),
              ('imagenet1k-resnext-50', 'imagenet/resnext/50-layers/resnext-50', '0000'),
              ('imagenet1k-resnext-101', 'imagenet/resnext/101-layers/resnext-101', '0000'),
              ('imagenet1k-resnext-101-64x4d',
               'imagenet/resnext/101-layers/resnext-101-64x4d', '0000'),
              ('imagenet11k-resnet-152', 'imagenet-11k/resnet-152/resnet-152', '0000'),
              ('imagenet11k-place365ch-resnet-152',
               'imagenet-11k-place365-ch/resnet-152', '0000'),
              ('imagenet11k-place365ch-resnet-50', 'imagenet-11k-place365-ch/resnet-50',
               '0000'))}


def download_model(model_name, dst_dir='./', meta_info=None) -> tuple:
    """Fetch a model's symbol and parameters into `dst_dir` as ``<name>-symbol.json`` and
    ``<name>-0000.params``; `meta_info` maps names to {'symbol': url, 'params': url} (MXNet's
    model files by default). Returns (path prefix, 0), or (None, 0) for an unknown name."""
    meta_info = dict(meta_info) if meta_info is not None else {
        name: {'symbol': symbol, 'params': params} for name, (symbol, params) in MODELS.items()}
    if model_name not in meta_info:
        return None, 0
    os.makedirs(dst_dir, exist_ok=True)
    prefix = os.path.join(dst_dir, model_name)
    download(meta_info[model_name]['symbol'], prefix + '-symbol.json')
    download(meta_info[model_name]['params'], prefix + '-0000.params')
    return prefix, 0


MNIST_URL = 'http://data.mxnet.io/data/mnist/'


def read_mnist_pair(label_path, image_path) -> tuple:
    """(labels as int8, images as float32 in [0, 1] of shape (n, 1, rows, cols)) from MNIST's
    gzipped IDX files."""
    with gzip.open(label_path, 'rb') as labels_file:
        struct.unpack('>II', labels_file.read(8))
        labels = np.frombuffer(labels_file.read(), dtype=np.int8)
    with gzip.open(image_path, 'rb') as images_file:
        _, _, rows, cols = struct.unpack('>IIII', images_file.read(16))
        images = np.frombuffer(images_file.read(), dtype=np.uint8)
    images = images.reshape(len(labels), 1, rows, cols).astype(np.float32) / 255
    return labels, images


def get_mnist() -> dict:
    """MNIST as arrays ('train_data', 'train_label', 'test_data', 'test_label'), fetched into
    the current directory when its gzipped files are not there yet."""
    def pair(prefix):
        labels = download(f'{MNIST_URL}{prefix}-labels-idx1-ubyte.gz')
        images = download(f'{MNIST_URL}{prefix}-images-idx3-ubyte.gz')
        return read_mnist_pair(labels, images)
    train_label, train_data = pair('train')
    test_label, test_data = pair('t10k')
    return {'train_data': train_data, 'train_label': train_label,
            'test_data': test_data, 'test_label': test_label}


def get_mnist_pkl() -> None:
    """Fetch ``data/mnist.pkl.gz`` unless it is there."""
    if not os.path.exists('data/mnist.pkl.gz'):
        download('http://deeplearning.net/data/mnist/mnist.pkl.gz', dirname='data')


def _fetch_and_unzip(url, wanted) -> None:
    if not all(os.path.exists(os.path.join('data', name)) for name in wanted):
        with zipfile.ZipFile(download(url, dirname='data')) as archive:
            archive.extractall('data')


def get_mnist_ubyte() -> None:
    """Fetch and unpack MNIST's IDX files into ``data/`` unless they are there."""
    _fetch_and_unzip('http://data.mxnet.io/mxnet/data/mnist.zip',
                     ['train-images-idx3-ubyte', 'train-labels-idx1-ubyte',
                      't10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'])


def get_mnist_iterator(batch_size, input_shape, num_parts=1, part_index=0):
    """(training, validation) MNISTIters over MNIST's IDX files in ``data/`` (fetched when
    they are not there): training shuffled, both flat unless `input_shape` is (C, H, W)."""
    get_mnist_ubyte()
    flat = len(input_shape) != 3

    def iterator(prefix, **extra):
        return _io.MNISTIter(image=f'data/{prefix}-images-idx3-ubyte',
                             label=f'data/{prefix}-labels-idx1-ubyte', input_shape=input_shape,
                             batch_size=batch_size, flat=flat, num_parts=num_parts,
                             part_index=part_index, **extra)
    return iterator('train', shuffle=True), iterator('t10k')


def get_im2rec_path(home_env='MXNET_HOME'):
    """The path of a runnable ``im2rec.py`` (``python <path> PREFIX ROOT [options]``): the
    one under ``$<home_env>/tools`` when that variable names a folder that has it, else
    Ember's own (``ember/cli/im2rec.py``, the same tool as ``python -m ember im2rec``)."""
    home = util.getenv(home_env)
    if home:
        candidate = os.path.join(os.path.expanduser(home), 'tools', 'im2rec.py')
        if os.path.isfile(candidate):
            return candidate
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'cli', 'im2rec.py')


def is_cd_run():
    """Whether the tests run as part of a continuous-delivery job (``CD_JOB=1``, MXNet's
    CI flag)."""
    return util.getenv('CD_JOB') == '1'


def get_cifar10() -> None:
    """Fetch and unpack CIFAR-10's RecordIO files into ``data/cifar`` unless they are there."""
    _fetch_and_unzip('http://data.mxnet.io/mxnet/data/cifar10.zip',
                     ['cifar/train.rec', 'cifar/test.rec', 'cifar/train.lst', 'cifar/test.lst'])


def get_zip_data(data_dir, url, data_origin_name) -> None:
    """Fetch the zip file `url` into `data_dir` as `data_origin_name` and unpack it there,
    unless that file exists."""
    origin = os.path.join(data_dir, data_origin_name)
    if not os.path.exists(origin):
        download(url, fname=data_origin_name, dirname=data_dir)
        with zipfile.ZipFile(origin) as archive:
            archive.extractall(path=data_dir)


def get_bz2_data(data_dir, data_name, url, data_origin_name) -> None:
    """Fetch the bz2 file `url` into `data_dir` and decompress it into `data_name` (the
    compressed file is removed), unless `data_name` exists."""
    target = os.path.join(data_dir, data_name)
    origin = os.path.join(data_dir, data_origin_name)
    if os.path.exists(target):
        return
    download(url, fname=data_origin_name, dirname=data_dir)
    with bz2.open(origin, 'rb') as source, open(target, 'wb') as out:
        shutil.copyfileobj(source, out)
    os.remove(origin)


# ----------------------------------------------------------------------------------------------
# Statistical checks of random generators

def gen_buckets_probs_with_ppf(ppf, nbuckets) -> tuple:
    """`nbuckets` buckets of equal probability from a quantile function: ([(low, high), ...],
    [1/n, ...]).

    >>> gen_buckets_probs_with_ppf(lambda q: q * 4, 2)
    ([(0.0, 2.0), (2.0, 4.0)], [0.5, 0.5])
    """
    if nbuckets < 1:
        raise ValueError(f'gen_buckets_probs_with_ppf: nbuckets={nbuckets}: expected 1 or more')
    buckets = [(ppf(i / nbuckets), ppf((i + 1) / nbuckets)) for i in range(nbuckets)]
    return buckets, [1.0 / nbuckets] * nbuckets


def mean_check(generator, mu, sigma, nsamples=1000000) -> bool:
    """Whether the mean of ``generator(nsamples)`` lies within 3 standard errors of `mu`."""
    mean = np.asarray(generator(nsamples)).mean()
    bound = 3 * sigma / np.sqrt(nsamples)
    return bool(mu - bound < mean < mu + bound)


def var_check(generator, sigma, nsamples=1000000) -> bool:
    """Whether the sample variance of ``generator(nsamples)`` lies within 3 standard errors of
    ``sigma ** 2``."""
    variance = np.asarray(generator(nsamples)).var(ddof=1)
    bound = 3 * np.sqrt(2 * sigma ** 4 / (nsamples - 1))
    return bool(sigma ** 2 - bound < variance < sigma ** 2 + bound)


def chi_square_check(generator, buckets, probs, nsamples=1000000) -> tuple:
    """Pearson's chi-square test of ``generator(nsamples)`` against bucket probabilities:
    `buckets` are (low, high) ranges in increasing order, or the values of a discrete
    distribution. Returns (p-value, observed counts, expected counts); needs SciPy."""
    try:
        from scipy import stats
    except ImportError as error:
        raise ImportError('chi_square_check needs SciPy: pip install scipy') from error
    if len(probs) != len(buckets):
        raise ValueError(f'chi_square_check: {len(buckets)} buckets but {len(probs)} '
                         'probabilities')
    samples = np.asarray(generator(nsamples))
    expected = (nsamples * np.asarray(probs, dtype=np.float64)).astype(np.int64)
    observed = _bucket_counts(samples, buckets)
    # SciPy wants equal totals: scale the expectation to what was observed.
    _, p = stats.chisquare(observed, expected * observed.sum() / max(expected.sum(), 1))
    return p, observed, expected


def _bucket_counts(samples, buckets) -> np.ndarray:
    if isinstance(buckets[0], (list, tuple)):
        edges = np.array([edge for bucket in buckets for edge in bucket], dtype=np.float64)
        if np.any(np.diff(edges) < 0):
            raise ValueError('chi_square_check: buckets must be in increasing order and apart')
        ids = np.searchsorted(edges, samples, side='right') // 2
        return np.array([(ids == i).sum() for i in range(len(buckets))])
    return np.array([(samples == value).sum() for value in buckets])


def verify_generator(generator, buckets, probs, nsamples=1000000, nrepeat=5, success_rate=0.2,
                     alpha=0.05) -> list:
    """Run :func:`chi_square_check` `nrepeat` times; raise AssertionError unless at least a
    share `success_rate` of them have p > `alpha`. Returns the p-values."""
    runs = [chi_square_check(generator, buckets, probs, nsamples) for _ in range(nrepeat)]
    p_values = [run[0] for run in runs]
    if (np.array(p_values) > alpha).sum() < nrepeat * success_rate:
        raise AssertionError(f'generator test fails: chi-square p={p_values}, observed '
                             f'{[list(r[1]) for r in runs]}, expected {list(runs[0][2])}; '
                             f'buckets={buckets}, probs={probs}')
    return p_values
