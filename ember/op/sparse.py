"""Sparse storage at the operator level: what kernels see of csr and row_sparse arrays, and the
storage-type rules that operators declare beside their dense facts (MXNet's
``FInferStorageType`` with ``FComputeEx``).

Storage types are ``'default'`` (dense), ``'row_sparse'`` (a sorted subset of rows of the
first axis) and ``'csr'`` (compressed sparse rows of a matrix). A kernel of a storage rule is
called like a dense kernel, ``kernel(attrs, ins, outs, ctx)``, except that a sparse input or
output is a :class:`CSR` or :class:`RowSparse` whose parts are backend arrays. How many
entries an output stores is known only when its kernel runs, so the kernel fills it with
``out.set(...)``. Kernels replace parts and never write into the index arrays they are
given, so an output may share index arrays with an input; data arrays are never shared.

A rule is ``infer(attrs, in_stypes, in_shapes) -> out_stypes``, or None when no kernel of the
rule takes those inputs. :func:`decide` settles an operator call before it runs: the rule's
kernel, the dense kernel when every input is dense, or else the *fallback*: the sparse inputs
are made dense, the dense kernel runs and the outputs are dense, which
``MXNET_STORAGE_FALLBACK_LOG_VERBOSE`` logs once per operator and storage signature.

>>> import numpy as np
>>> m = CSR((2, 3), np.float32)
>>> m.set(np.array([5., 6.]), np.array([2, 0]), np.array([0, 1, 2]))
>>> m.to_dense(np).tolist(), m.nnz
([[0.0, 0.0, 5.0], [6.0, 0.0, 0.0]], 2)
>>> r = from_dense(np.array([[0., 0.], [1., 2.], [0., 0.]]), 'row_sparse')
>>> r.indices.tolist(), r.data.tolist()
([1], [[1.0, 2.0]])
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ember import config
from ember.base import EmberError

__all__ = ['DEFAULT', 'ROW_SPARSE', 'CSR_TYPE', 'STYPES', 'INDEX_DTYPE', 'CSR', 'RowSparse',
           'parts_for', 'from_dense', 'cast_into', 'check_csr', 'check_row_sparse',
           'StorageRule', 'storage_rule', 'rule_of', 'Dispatch', 'decide', 'produces_sparse',
           'reset_fallback_log']

DEFAULT, ROW_SPARSE, CSR_TYPE = 'default', 'row_sparse', 'csr'
STYPES = (DEFAULT, ROW_SPARSE, CSR_TYPE)
INDEX_DTYPE = np.dtype(np.int64)     # MXNet's aux type for indices and indptr

_log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------
# The parts of a sparse array, as kernels see them.

class CSR:
    """A csr matrix: row ``i`` stores ``data[indptr[i]:indptr[i+1]]`` at columns
    ``indices[indptr[i]:indptr[i+1]]`` (ascending)."""

    __slots__ = ('shape', 'dtype', 'data', 'indices', 'indptr')
    stype = CSR_TYPE

    def __init__(self, shape, dtype, xp=np):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.set(xp.zeros(0, self.dtype), xp.zeros(0, INDEX_DTYPE),
                 xp.zeros(self.shape[0] + 1, INDEX_DTYPE))

    def set(self, data, indices, indptr):
        self.data = _contiguous(data, self.dtype)
        self.indices = _contiguous(indices, INDEX_DTYPE)
        self.indptr = _contiguous(indptr, INDEX_DTYPE)

    @property
    def nnz(self) -> int:
        return int(self.data.shape[0])

    def to_dense(self, xp):
        out = xp.zeros(self.shape, self.dtype)
        rows = xp.repeat(xp.arange(self.shape[0]), xp.diff(self.indptr))
        out[rows, self.indices] = self.data
        return out

    def scipy(self):
        """A ``scipy.sparse.csr_matrix`` over the parts (no copy; host arrays only)."""
        import scipy.sparse
        matrix = scipy.sparse.csr_matrix(self.shape, dtype=self.dtype)
        matrix.data, matrix.indices, matrix.indptr = self.data, self.indices, self.indptr
        matrix.has_sorted_indices = True
        return matrix


class RowSparse:
    """Rows ``indices`` (ascending) of an array whose other rows are zero: ``data[k]`` is row
    ``indices[k]``."""

    __slots__ = ('shape', 'dtype', 'data', 'indices')
    stype = ROW_SPARSE

    def __init__(self, shape, dtype, xp=np):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.set(xp.zeros((0,) + self.shape[1:], self.dtype), xp.zeros(0, INDEX_DTYPE))

    def set(self, data, indices):
        self.data = _contiguous(data, self.dtype)
        self.indices = _contiguous(indices, INDEX_DTYPE)

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    def to_dense(self, xp):
        out = xp.zeros(self.shape, self.dtype)
        out[self.indices] = self.data
        return out


_PARTS = {CSR_TYPE: CSR, ROW_SPARSE: RowSparse}


def _contiguous(values, dtype):
    """`values` as a C-contiguous array of `dtype` (itself when it is one already)."""
    if values.dtype == dtype and values.flags.c_contiguous:
        return values
    return values.astype(dtype, order='C')


def parts_for(stype, shape, dtype, xp=np):
    """Empty parts (all zeros) of a sparse array of `stype`."""
    return _PARTS[stype](shape, dtype, xp)


def is_parts(value) -> bool:
    return type(value) in (CSR, RowSparse)


def dense_of(value, xp):
    """The dense values of a raw array or of sparse parts."""
    return value.to_dense(xp) if is_parts(value) else value


# ----------------------------------------------------------------------------------------------
# Conversions.

def from_dense(values, stype, xp=np):
    """New parts of `stype` holding the non-zeros of dense `values`."""
    parts = parts_for(stype, values.shape, values.dtype, xp)
    fill_from_dense(parts, values, xp)
    return parts


def fill_from_dense(parts, values, xp):
    if parts.stype == CSR_TYPE:
        if values.ndim != 2:
            raise EmberError(f'csr storage holds 2-D arrays; got shape {values.shape}')
        rows, cols = xp.nonzero(values)
        indptr = xp.zeros(values.shape[0] + 1, INDEX_DTYPE)
        xp.cumsum(xp.bincount(rows, minlength=values.shape[0]), out=indptr[1:])
        parts.set(values[rows, cols], cols, indptr)
    else:
        kept = xp.flatnonzero(xp.any(values.reshape(values.shape[0], -1) != 0, axis=1))
        parts.set(values[kept], kept)


def cast_into(source, target, xp):
    """Write raw array or parts `source` into raw array or parts `target` of the same shape,
    converting the storage type where they differ."""
    if is_parts(target):
        if type(source) is type(target):
            target.set(*(xp.array(part, copy=True) for part in parts_tuple(source)))
        else:
            fill_from_dense(target, dense_of(source, xp), xp)
    else:
        target[...] = dense_of(source, xp)


def parts_tuple(parts):
    """(data, indices, indptr) of a csr, (data, indices) of a row_sparse."""
    if parts.stype == CSR_TYPE:
        return parts.data, parts.indices, parts.indptr
    return parts.data, parts.indices


# ----------------------------------------------------------------------------------------------
# Validation: errors name the array and the fault.

def check_csr(name, shape, data, indices, indptr, full=True):
    """Raise EmberError when (data, indices, indptr) is not a valid csr of `shape`."""
    if len(shape) != 2:
        raise EmberError(f'{name}: csr storage holds 2-D arrays; got shape {tuple(shape)}')
    if indptr.ndim != 1 or indptr.shape[0] != shape[0] + 1:
        raise EmberError(f'{name}: indptr has {indptr.shape[0] if indptr.ndim else 0} entries; '
                         f'a csr of {shape[0]} rows needs {shape[0] + 1}')
    if data.shape[0] != indices.shape[0]:
        raise EmberError(f'{name}: data has {data.shape[0]} entries and indices '
                         f'{indices.shape[0]}; they must have one entry per stored value')
    if int(indptr[0]) != 0 or int(indptr[-1]) != indices.shape[0]:
        raise EmberError(f'{name}: indptr must start at 0 and end at the number of stored '
                         f'values ({indices.shape[0]}); it runs from {int(indptr[0])} to '
                         f'{int(indptr[-1])}')
    if not full:
        return
    steps = np.diff(np.asarray(indptr))
    if steps.size and steps.min() < 0:
        row = int(np.argmax(steps < 0))
        raise EmberError(f'{name}: indptr is not monotone: indptr[{row + 1}] = '
                         f'{int(indptr[row + 1])} < indptr[{row}] = {int(indptr[row])}')
    _check_csr_indices(name, shape, np.asarray(indices), np.asarray(indptr))


def _check_csr_indices(name, shape, indices, indptr):
    if not indices.size:
        return
    low, high = int(indices.min()), int(indices.max())
    if low < 0 or high >= shape[1]:
        bad = low if low < 0 else high
        raise EmberError(f'{name}: column index {bad} is out of range for {shape[1]} columns')
    rising = np.diff(indices) > 0
    row_starts = indptr[1:-1]
    rising[row_starts[(row_starts > 0) & (row_starts < indices.size)] - 1] = True
    if not rising.all():
        at = int(np.argmin(rising)) + 1
        row = int(np.searchsorted(indptr, at, side='right')) - 1
        raise EmberError(f'{name}: the column indices of row {row} are not in ascending order '
                         f'(or repeat): {indices[indptr[row]:indptr[row + 1]].tolist()[:8]}')


def check_row_sparse(name, shape, data, indices, full=True):
    """Raise EmberError when (data, indices) is not a valid row_sparse of `shape`."""
    if indices.ndim != 1:
        raise EmberError(f'{name}: indices must be 1-D; got shape {indices.shape}')
    if data.shape[0] != indices.shape[0] or tuple(data.shape[1:]) != tuple(shape[1:]):
        raise EmberError(f'{name}: data of shape {tuple(data.shape)} does not fit '
                         f'{indices.shape[0]} rows of an array of shape {tuple(shape)} (expected '
                         f'{(indices.shape[0],) + tuple(shape[1:])})')
    if not full or not indices.size:
        return
    host = np.asarray(indices)
    low, high = int(host.min()), int(host.max())
    if low < 0 or high >= shape[0]:
        bad = low if low < 0 else high
        raise EmberError(f'{name}: row index {bad} is out of range for {shape[0]} rows')
    steps = np.diff(host)
    if steps.size and steps.min() <= 0:
        at = int(np.argmax(steps <= 0))
        raise EmberError(f'{name}: row indices must be ascending without repeats; indices[{at}]'
                         f' = {int(host[at])}, indices[{at + 1}] = {int(host[at + 1])}')


# ----------------------------------------------------------------------------------------------
# Storage rules and dispatch.

@dataclass(frozen=True)
class StorageRule:
    """The sparse kernels of one operator: ``infer(attrs, in_stypes, in_shapes) -> out_stypes
    or None`` and the kernel that runs when infer returns output types. `from_dense`: the
    rule may give sparse outputs for dense inputs (an embedding's row_sparse gradient), so
    the imperative path consults it even when every input is dense."""
    infer: Callable
    kernel: Callable
    from_dense: bool = False


_RULES: dict = {}
_FROM_DENSE: set = set()


def storage_rule(name, infer, kernel, from_dense=False) -> StorageRule:
    """Declare the sparse kernel of operator `name` (once per operator)."""
    if name in _RULES:
        raise RuntimeError(f'operator {name!r} has a storage rule already')
    rule = _RULES[name] = StorageRule(infer, kernel, from_dense)
    if from_dense:
        _FROM_DENSE.add(name)
    return rule


def rule_of(op) -> StorageRule | None:
    return _RULES.get(op.name)


def produces_sparse(op) -> bool:
    """Whether `op` may give sparse outputs for dense inputs (see StorageRule.from_dense)."""
    return op.name in _FROM_DENSE


@dataclass(frozen=True)
class Dispatch:
    """How one call runs: the storage type of each output, the kernel, and whether that is
    the fallback (dense inputs made from sparse ones, dense kernel)."""
    out_stypes: tuple
    kernel: Callable
    fallback: bool = False


def decide(op, attrs, in_stypes, in_shapes, num_outputs) -> Dispatch:
    """Settle a call of `op` on inputs of `in_stypes` and `in_shapes` before it runs (logging
    a fallback)."""
    in_stypes = tuple(in_stypes)
    rule = _RULES.get(op.name)
    if rule is not None:
        out_stypes = rule.infer(attrs, in_stypes, tuple(in_shapes))
        if out_stypes is not None:
            return Dispatch(tuple(out_stypes), rule.kernel)
    dense = (DEFAULT,) * num_outputs
    if all(stype == DEFAULT for stype in in_stypes):
        return Dispatch(dense, op.kernel)
    _log_fallback(op, attrs, in_stypes, dense, rule is not None)
    return Dispatch(dense, fallback_kernel(op, in_stypes), True)


def fallback_kernel(op, in_stypes):
    """`op`'s dense kernel on dense copies of its sparse inputs; sparse inputs the operator
    updates in place (optimizer states) get the new values back."""
    sparse = tuple(i for i, stype in enumerate(in_stypes) if stype != DEFAULT)
    kernel = op.kernel

    def run(attrs, ins, outs, ctx):
        dense_ins = list(ins)
        for i in sparse:
            dense_ins[i] = ins[i].to_dense(ctx.xp)
        kernel(attrs, dense_ins, outs, ctx)
        for i in op.mutate_indices(attrs):
            if i in sparse:
                fill_from_dense(ins[i], dense_ins[i], ctx.xp)
    return run


def into_outputs(kernel, made_stypes, wanted_stypes):
    """`kernel` writing outputs of `made_stypes` into outputs of `wanted_stypes` (given by
    the caller: ``out=`` arrays, an executor's bound arrays), through temporaries where the
    two differ."""
    differ = tuple(i for i, (made, wanted) in enumerate(zip(made_stypes, wanted_stypes))
                   if made != wanted)
    if not differ:
        return kernel

    def run(attrs, ins, outs, ctx):
        made = list(outs)
        for i in differ:
            made[i] = (ctx.xp.empty(outs[i].shape, outs[i].dtype) if made_stypes[i] == DEFAULT
                       else parts_for(made_stypes[i], outs[i].shape, outs[i].dtype, ctx.xp))
        kernel(attrs, ins, made, ctx)
        for i in differ:
            cast_into(made[i], outs[i], ctx.xp)
    return run


# Operator and storage signatures whose fallback was logged (once each, as MXNet does).
_logged: set = set()


def reset_fallback_log() -> None:
    """Forget which fallbacks were logged, so that each logs again once."""
    _logged.clear()


def _log_fallback(op, attrs, in_stypes, out_stypes, has_rule):
    if not config.get('MXNET_STORAGE_FALLBACK_LOG_VERBOSE'):
        return
    key = (op.name, in_stypes, out_stypes)
    if key in _logged:
        return
    _logged.add(key)
    why = ('its sparse kernels do not take these storage types' if has_rule
           else 'it has no sparse kernel')
    shown = {k: v for k, v in attrs.items() if v is not None}
    _log.warning('storage fallback: operator %s, inputs (%s), attributes %s: %s, so its '
                 'inputs were made dense and its dense kernel ran, giving outputs (%s). The '
                 'results are right; the dense copies cost time and memory. '
                 'MXNET_STORAGE_FALLBACK_LOG_VERBOSE=0 silences this.',
                 op.name, ', '.join(in_stypes), shown, why, ', '.join(out_stypes))
