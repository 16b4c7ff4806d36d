"""Sparse NDArrays and the storage path of the imperative call.

A :class:`CSRNDArray` or :class:`RowSparseNDArray` is an NDArray whose storage is the parts of
:mod:`ember.op.sparse` (values and index arrays, of sizes known once the operator that writes
them has run) instead of a pooled buffer. It has an engine variable like any NDArray: every
operator reads and writes it through the engine, reading waits for pending writes, and a
failed operator poisons it.

:func:`invoke` takes an operator call in which a sparse array takes part (or whose storage
rule may give sparse outputs for dense inputs). It decides the storage type of every output
before the kernel runs (:func:`ember.op.sparse.decide`: the operator's sparse kernel, or the
fallback through dense copies, logged under ``MXNET_STORAGE_FALLBACK_LOG_VERBOSE``), makes the
outputs, and pushes one engine operation, as the dense path does.

>>> import numpy as np
>>> from ember.ndarray import sparse
>>> a = sparse.csr_matrix(np.array([[0, 2.], [3, 0]]))
>>> b = a * 2
>>> b.stype, b.asnumpy().tolist()
('csr', [[0.0, 4.0], [6.0, 0.0]])
"""
from __future__ import annotations

import numbers

import numpy as np

from ember import device as _device
from ember import engine
from ember.base import EmberError, dtype_of
from ember.ndarray import ndarray as _nd
from ember.ndarray.ndarray import NDArray, view_of
from ember.op import registry
from ember.op import sparse as _sp

__all__ = ['BaseSparseNDArray', 'CSRNDArray', 'RowSparseNDArray', 'SPARSE_CLASSES',
           'new_array', 'invoke', 'involved', 'is_sparse']


class BaseSparseNDArray(NDArray):
    """The common part of :class:`CSRNDArray` and :class:`RowSparseNDArray`."""

    __slots__ = ('_parts',)

    def __init__(self, parts, var, device):
        NDArray.__init__(self, None, view_of(parts.shape, parts.dtype), var, device)
        self._parts = parts

    @property
    def stype(self) -> str:
        return self._parts.stype

    @property
    def handle(self):
        raise EmberError(f'a {type(self).__name__} has no single storage buffer; its parts are '
                         f'.data and .indices')

    def _data(self):
        return self._parts

    def _alias(self):
        return type(self)(self._parts, self._var, self._device)

    def __repr__(self):
        shape_info = 'x'.join(str(d) for d in self.shape)
        return f'\n<{type(self).__name__} {shape_info} @{self._device}>'

    def __reduce__(self):
        self.wait_to_read()
        parts = tuple(_host(p) for p in _sp.parts_tuple(self._parts))
        return _rebuild, (self.stype, self.shape, self._view.dtype.name, parts,
                          str(self._device))

    # -- values ----------------------------------------------------------------------------------
    def asnumpy(self) -> np.ndarray:
        """The dense values as a NumPy array (waits for pending writes)."""
        self.wait_to_read()
        return _host(self._parts.to_dense(_nd._xp(self._device)))

    @property
    def data(self) -> NDArray:
        """The stored values (a dense copy)."""
        return self._part('data')

    @property
    def indices(self) -> NDArray:
        """The column indices (csr) or row indices (row_sparse) of the stored values, int64."""
        return self._part('indices')

    def _part(self, name):
        from ember.ndarray.creation import array
        self.wait_to_read()
        values = _host(getattr(self._parts, name))
        return array(values, ctx=self._device, dtype=values.dtype)

    def check_format(self, full_check=True):
        """Raise EmberError when the parts do not form a valid array of this storage type
        (with `full_check`, also index ranges and order)."""
        self.wait_to_read()
        parts = self._parts
        host = [_host(p) for p in _sp.parts_tuple(parts)]
        if parts.stype == _sp.CSR_TYPE:
            _sp.check_csr(type(self).__name__, self.shape, *host, full=full_check)
        else:
            _sp.check_row_sparse(type(self).__name__, self.shape, *host, full=full_check)

    # -- copies and conversions ------------------------------------------------------------------
    def copy(self):
        return invoke(_COPY, [self], {})[0]

    def copyto(self, other):
        """Copy into `other` (an NDArray of the same shape, converting the storage type to
        its own) or onto a device; returns the copy."""
        if isinstance(other, NDArray):
            if other is self:
                return self
            if other.shape != self.shape:
                raise ValueError(f'copyto: shape {self.shape} does not match the destination '
                                 f'{other.shape}')
            invoke(_COPYTO, [self], {}, out=[other])
            return other
        if isinstance(other, _device.Device):
            return invoke(_COPYTO, [self], {}, device=other)[0]
        raise TypeError(f'copyto: expected an NDArray or a device, got {type(other).__name__}')

    def astype(self, dtype, copy=True):
        """The values converted to `dtype`, in the same storage type."""
        dtype = dtype_of(dtype)
        if not copy and dtype == self._view.dtype:
            return self
        out = new_array(self.stype, self.shape, dtype, self._device)
        source, xp = self._parts, _nd._xp(self._device)
        engine.get().push(lambda: _sp.cast_into(source, out._parts, xp), [self._var],
                          [out._var], self._device, 0, 'astype')
        return out

    def tostype(self, stype):
        """The same values in storage type `stype` ('default', 'row_sparse' or 'csr')."""
        return invoke(_CAST_STORAGE, [self], {'stype': _checked_stype(stype)})[0]

    def reshape(self, *args, **kwargs):
        raise EmberError(f'{type(self).__name__} cannot be reshaped; convert it with '
                         f"tostype('default') first")

    @property
    def T(self):
        return invoke(registry.get('transpose'), [self], {'axes': ()})[0]

    # -- indexing --------------------------------------------------------------------------------
    def __setitem__(self, key, value):
        """Only ``x[:] = value``: an NDArray (converted to this storage type), array-like
        values, or 0."""
        if not (isinstance(key, slice) and key == slice(None)):
            raise EmberError(f'{type(self).__name__} supports only x[:] = value for '
                             f'assignment, got key {key!r}')
        if isinstance(value, NDArray):
            value.copyto(self)
        elif isinstance(value, numbers.Real) and value == 0:
            invoke(registry.get('zeros_like'), [self], {}, out=[self])
        elif isinstance(value, numbers.Real):
            raise EmberError(f'assigning {value} to a {type(self).__name__} would store every '
                             f"entry; assign to tostype('default') instead")
        else:
            from ember.ndarray.creation import array
            array(np.asarray(value), ctx=self._device, dtype=self.dtype).copyto(self)

    # -- arithmetic (MXNet's sparse add/subtract/multiply/divide) --------------------------------
    def __add__(self, other):
        return _arithmetic(self, other, 'add', '_plus_scalar')

    __radd__ = __add__

    def __sub__(self, other):
        return _arithmetic(self, other, 'sub', '_minus_scalar')

    def __rsub__(self, other):
        return _arithmetic(self, other, None, '_rminus_scalar')

    def __mul__(self, other):
        return _arithmetic(self, other, 'mul', '_mul_scalar')

    __rmul__ = __mul__

    def __truediv__(self, other):
        return _arithmetic(self, other, 'div', '_div_scalar')

    def __rtruediv__(self, other):
        return _arithmetic(self, other, None, '_rdiv_scalar')

    def __pow__(self, other):
        return _arithmetic(self, other, 'power', '_power_scalar')

    def __neg__(self):
        return invoke(registry.get('negative'), [self], {})[0]

    def __abs__(self):
        return invoke(registry.get('abs'), [self], {})[0]

    def __iadd__(self, other):
        return _in_place(self, other, 'add', '_plus_scalar')

    def __isub__(self, other):
        return _in_place(self, other, 'sub', '_minus_scalar')

    def __imul__(self, other):
        return _in_place(self, other, 'mul', '_mul_scalar')

    def __itruediv__(self, other):
        return _in_place(self, other, 'div', '_div_scalar')

    def __eq__(self, other):
        return _arithmetic(self, other, 'equal', '_equal_scalar', broadcast_only=True)

    def __ne__(self, other):
        return _arithmetic(self, other, 'not_equal', '_not_equal_scalar', broadcast_only=True)

    def __gt__(self, other):
        return _arithmetic(self, other, 'greater', '_greater_scalar', broadcast_only=True)

    def __ge__(self, other):
        return _arithmetic(self, other, 'greater_equal', '_greater_equal_scalar',
                           broadcast_only=True)

    def __lt__(self, other):
        return _arithmetic(self, other, 'lesser', '_lesser_scalar', broadcast_only=True)

    def __le__(self, other):
        return _arithmetic(self, other, 'lesser_equal', '_lesser_equal_scalar',
                           broadcast_only=True)

    __hash__ = NDArray.__hash__


class CSRNDArray(BaseSparseNDArray):
    """A 2-D array in compressed sparse row storage (MXNet's ``CSRNDArray``).

    >>> from ember.ndarray import sparse
    >>> m = sparse.csr_matrix(([1.0, 2.0], [1, 0], [0, 1, 2]), shape=(2, 3))
    >>> m.indptr.asnumpy().tolist(), m[1:2].asnumpy().tolist()
    ([0, 1, 2], [[2.0, 0.0, 0.0]])
    """

    __slots__ = ()

    @property
    def indptr(self) -> NDArray:
        """Where each row's entries start in .data and .indices (rows + 1 entries), int64."""
        return self._part('indptr')

    def asscipy(self):
        """A ``scipy.sparse.csr_matrix`` with a copy of the values."""
        self.wait_to_read()
        import scipy.sparse
        data, indices, indptr = (_host(p) for p in _sp.parts_tuple(self._parts))
        return scipy.sparse.csr_matrix((data.copy(), indices.copy(), indptr.copy()),
                                       shape=self.shape)

    def __getitem__(self, key):
        """Rows: ``m[i]`` (one row, kept 2-D) or ``m[i:j]`` (contiguous)."""
        if isinstance(key, numbers.Integral):
            begin = int(key) + (self.shape[0] if key < 0 else 0)
            if not 0 <= begin < self.shape[0]:
                raise IndexError(f'row {key} is out of range for {self.shape[0]} rows')
            key = slice(begin, begin + 1)
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise EmberError(f'CSRNDArray supports only contiguous row slices (m[i] or m[i:j]), '
                             f'got {key!r}')
        return invoke(registry.get('slice'), [self],
                      {'begin': (key.start,), 'end': (key.stop,), 'step': ()})[0]


class RowSparseNDArray(BaseSparseNDArray):
    """An array of which only some rows are stored (MXNet's ``RowSparseNDArray``): the usual
    gradient of an embedding.

    >>> from ember.ndarray import sparse
    >>> g = sparse.row_sparse_array(([[1.0, 2.0]], [3]), shape=(5, 2))
    >>> g.indices.asnumpy().tolist(), g.asnumpy()[3].tolist()
    ([3], [1.0, 2.0])
    """

    __slots__ = ()

    def __getitem__(self, key):
        if isinstance(key, slice) and key == slice(None):
            return self
        raise EmberError(f'RowSparseNDArray supports only x[:], got {key!r}; use '
                         f"retain() to pick rows or tostype('default')")

    def retain(self, indices):
        """The rows of this array whose indices are in `indices`."""
        return invoke(registry.get('_sparse_retain'), [self, indices], {})[0]


_CLASSES = {_sp.CSR_TYPE: CSRNDArray, _sp.ROW_SPARSE: RowSparseNDArray}
SPARSE_CLASSES = _SPARSE = frozenset(_CLASSES.values())


def is_sparse(array) -> bool:
    return array.__class__ in _SPARSE


def new_array(stype, shape, dtype, device) -> NDArray:
    """A new array of `stype`: zeros when sparse (nothing stored), uninitialised when dense."""
    if stype == _sp.DEFAULT:
        return _nd._empty(tuple(shape), dtype_of(dtype), device)
    parts = _sp.parts_for(stype, tuple(shape), dtype_of(dtype), _nd._xp(device))
    return _CLASSES[stype](parts, _nd._new_var(), device)


def _checked_stype(stype):
    if stype not in _sp.STYPES:
        import difflib
        close = difflib.get_close_matches(str(stype), _sp.STYPES, n=1)
        hint = f'; did you mean {close[0]!r}?' if close else ''
        raise ValueError(f'stype {stype!r}: expected one of {", ".join(_sp.STYPES)}{hint}')
    return stype


def _host(values):
    return values if isinstance(values, np.ndarray) else values.get()


def _rebuild(stype, shape, dtype, parts, device_text):
    """A pickled sparse array, its parts checked as construction checks them."""
    if stype == _sp.CSR_TYPE:
        _sp.check_csr('CSRNDArray', shape, *parts)
    else:
        _sp.check_row_sparse('RowSparseNDArray', shape, *parts)
    device = _nd.parse_device(device_text)
    array = new_array(stype, shape, dtype, device)
    array._parts.set(*(_nd._xp(device).asarray(p) for p in parts))
    return array


# ----------------------------------------------------------------------------------------------
# Arithmetic with MXNet's choice of operator: elemwise_* for equal shapes, broadcast_* else.

def _arithmetic(lhs, rhs, kind, scalar_op, broadcast_only=False):
    if isinstance(rhs, NDArray):
        if kind is None:
            return NotImplemented
        same = lhs.shape == rhs.shape and kind in ('add', 'sub', 'mul', 'div')
        name = f'elemwise_{kind}' if same and not broadcast_only else f'broadcast_{kind}'
        return invoke(registry.get(name), [lhs, rhs], {})[0]
    if isinstance(rhs, numbers.Real):
        return invoke(registry.get(scalar_op), [lhs], {'scalar': float(rhs)})[0]
    return NotImplemented


def _in_place(lhs, rhs, kind, scalar_op):
    if isinstance(rhs, NDArray):
        name = f'elemwise_{kind}' if lhs.shape == rhs.shape else f'broadcast_{kind}'
        invoke(registry.get(name), [lhs, rhs], {}, out=[lhs])
    elif isinstance(rhs, numbers.Real):
        invoke(registry.get(scalar_op), [lhs], {'scalar': float(rhs)}, out=[lhs])
    else:
        return NotImplemented
    return lhs


# ----------------------------------------------------------------------------------------------
# The storage path of the imperative call.

def involved(op, inputs, out) -> bool:
    """Whether a call must take the storage path: a sparse input or output, or an operator
    whose rule may give sparse outputs for dense inputs."""
    if _sp.produces_sparse(op):
        return True
    for x in inputs:
        if x.__class__ in _SPARSE:
            return True
    if out is not None:
        for o in (out if isinstance(out, (list, tuple)) else (out,)):
            if o.__class__ in _SPARSE:
                return True
    return False


def invoke(op, inputs, attrs, out=None, device=None) -> list:
    """Run `op` as :func:`ember.ndarray.ndarray.invoke` does, with the storage type of each
    output decided first (sparse kernel, dense kernel or fallback)."""
    out_shapes, out_dtypes = _nd._infer(op, attrs, inputs)
    if device is None:
        device = _nd._device_of(op, attrs, inputs, out)
    dispatch = _sp.decide(op, attrs, [x.stype for x in inputs], [x.shape for x in inputs],
                          len(out_shapes))
    kernel = dispatch.kernel
    if out is not None:
        outputs = _nd._check_out(op, out, out_shapes, out_dtypes)
        kernel = _sp.into_outputs(kernel, dispatch.out_stypes, [o.stype for o in outputs])
    else:
        outputs = [new_array(stype, shape, dtype, device) for stype, shape, dtype
                   in zip(dispatch.out_stypes, out_shapes, out_dtypes)]
    ctx, extra_writes = _nd._kernel_context(device, tuple(op.resources))
    writes = [o._var for o in outputs]
    writes += [inputs[i]._var for i in op.mutate_indices(attrs)] + list(extra_writes)

    def run():
        try:
            kernel(attrs, [x._data() for x in inputs], [o._data() for o in outputs], ctx)
        finally:
            _nd._finished.append((inputs, outputs))
    engine.get().push(run, [x._var for x in inputs], writes, device, 0, op.name)
    _nd._maybe_record(op, attrs, inputs, outputs)
    return outputs


_COPY = registry.get('_copy')
_COPYTO = registry.get('_copyto')
_CAST_STORAGE = registry.get('cast_storage')

_nd._sparse_involved = involved
_nd._sparse_invoke = invoke
