"""NDArray indexing with MXNet 1.x's rules.

Basic indexing (ints, slices, None, Ellipsis) returns a *view* sharing storage and engine
variable when the selected region is contiguous in memory (``x[1]``, ``x[2:5]``, ``x[1, 3:]``),
and a copy otherwise (``x[:, 1]``, ``x[::2]``). An index that would give a 0-d result gives
shape ``(1,)``: MXNet 1.x has no 0-d arrays. Index arrays (NDArrays, lists, NumPy arrays)
follow NumPy's advanced indexing and always copy. Assignment writes through the engine.

>>> import ember.ndarray as nd
>>> x = nd.arange(12).reshape(3, 4)
>>> x[1].asnumpy().tolist(), x[:, 1].asnumpy().tolist(), x[1, 2].shape
([4.0, 5.0, 6.0, 7.0], [1.0, 5.0, 9.0], (1,))
>>> x[:, 1:3] = 0
>>> x[[0, 2]].asnumpy().tolist()
[[0.0, 0.0, 0.0, 3.0], [8.0, 0.0, 0.0, 11.0]]
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ember.op import registry
from ember.ndarray import ndarray as _nd
from ember.ndarray.creation import array
from ember.ndarray.ndarray import NDArray, invoke, view_of

__all__ = ['getitem', 'setitem', 'BasicIndex', 'parse_basic']


@dataclass(frozen=True)
class BasicIndex:
    """A basic index resolved against a shape: the region it selects and the result's shape."""
    begin: tuple          # per axis, first index
    end: tuple            # per axis, index past the last (None: before the start, step < 0)
    step: tuple
    region: tuple         # shape of the selected region (int axes have length 1)
    final: tuple          # shape of the result (int axes dropped, None axes added)


def _is_int(part):
    return isinstance(part, (int, np.integer)) and not isinstance(part, (bool, np.bool_))


def _is_array_index(part):
    return isinstance(part, (NDArray, np.ndarray, list))


def _expand(key, ndim):
    """The key as a tuple with Ellipsis expanded and missing trailing axes filled."""
    key = key if isinstance(key, tuple) else (key,)
    ellipses = [i for i, part in enumerate(key) if part is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError('an index can only have a single ellipsis (...)')
    real = sum(1 for part in key if part is not None and part is not Ellipsis)
    if real > ndim:
        raise IndexError(f'too many indices ({real}) for an array of {ndim} dimensions')
    fill = (slice(None),) * (ndim - real)
    if ellipses:
        at = ellipses[0]
        return key[:at] + fill + key[at + 1:]
    return key + fill


def parse_basic(key, shape) -> BasicIndex:
    """Resolve a basic key (already expanded) against `shape`."""
    begin, end, step, region, final = [], [], [], [], []
    axis = 0
    for part in key:
        if part is None:
            final.append(1)
            continue
        length = shape[axis]
        if _is_int(part):
            index = int(part) + length if part < 0 else int(part)
            if not 0 <= index < length:
                raise IndexError(f'index {int(part)} is out of bounds for axis {axis} with '
                                 f'size {length}')
            begin.append(index), end.append(index + 1), step.append(1), region.append(1)
        elif isinstance(part, slice):
            start, stop, s = part.indices(length)
            count = len(range(start, stop, s))
            begin.append(start), end.append(stop if stop >= 0 else None), step.append(s)
            region.append(count)
            final.append(count)
        else:
            raise IndexError(f'index {part!r} of type {type(part).__name__} is not an int, '
                             'a slice, None, Ellipsis or an array of indices')
        axis += 1
    return BasicIndex(tuple(begin), tuple(end), tuple(step), tuple(region),
                      tuple(final) or (1,))


def _contiguous_offset(shape, index):
    """Element offset of the region when it is one contiguous block of `shape`, else None."""
    k = len(shape) - 1
    while k >= 0 and index.region[k] == shape[k] and (index.step[k] == 1 or shape[k] <= 1):
        k -= 1
    if k >= 0 and index.step[k] != 1 and index.region[k] > 1:
        return None
    if any(index.region[j] != 1 for j in range(k)):
        return None
    offset, stride = 0, 1
    for axis in range(len(shape) - 1, -1, -1):
        offset += index.begin[axis] * stride
        stride *= shape[axis]
    return offset


def _recording():
    state = _nd._ag_state
    return _nd._record_hook is not None and (state is None or state.recording)


# ----------------------------------------------------------------------------------------------
# Reading

def getitem(x: NDArray, key):
    """``x[key]``: a view for a contiguous basic index, else a copy."""
    if _is_int(key) and x.ndim > 0:
        key = (key,)
    expanded = _expand(key, x.ndim)
    if any(_is_array_index(part) for part in expanded):
        return _advanced_get(x, expanded)
    index = parse_basic(expanded, x.shape)
    offset = _contiguous_offset(x.shape, index)
    if offset is not None and not _recording():
        view = x._view
        return NDArray(x._handle, view_of(index.final, view.dtype,
                                          view.offset + offset * view.stored.itemsize,
                                          view.stored), x._var, x._device)
    attrs = {'begin': index.begin, 'end': index.end, 'step': index.step}
    sliced = invoke(_SLICE, [x], attrs)[0]
    if sliced.shape == index.final:
        return sliced
    return sliced.reshape(index.final)


def _numpy_key(expanded):
    parts = []
    for part in expanded:
        if isinstance(part, NDArray):
            part = part.asnumpy()
        if isinstance(part, (list, np.ndarray)):
            part = np.asarray(part)
            if part.dtype.kind == 'f':
                part = part.astype(np.int64)
        parts.append(part)
    return tuple(parts)


def _advanced_get(x, expanded):
    key = _numpy_key(expanded)
    return invoke(_ADVANCED, [x], {'key': key})[0]


# ----------------------------------------------------------------------------------------------
# Writing

def setitem(x: NDArray, key, value) -> None:
    """``x[key] = value`` for a scalar, an NDArray or array-like value (broadcast)."""
    if x.ndim == 0 and isinstance(key, slice) and key == slice(None):
        key = Ellipsis          # x[:] = v writes the one element of a zero-dim array too
    if isinstance(value, NDArray) and value.stype != 'default':
        value = value.tostype('default')
    expanded = _expand(key, x.ndim)
    if any(_is_array_index(part) for part in expanded):
        _advanced_set(x, _numpy_key(expanded), value)
        return
    index = parse_basic(expanded, x.shape)
    attrs = {'begin': index.begin, 'end': index.end, 'step': index.step}
    if isinstance(value, numbers.Real):
        invoke(_ASSIGN_SCALAR, [x], dict(attrs, scalar=float(value)), out=[x])
        return
    if not isinstance(value, NDArray) and index.region == x.shape and not _recording():
        _nd.copy_from_host(x, value)
        return
    source = _value_array(x, value, index.final).reshape(index.region)
    invoke(_ASSIGN, [x, source], attrs, out=[x])


def _value_array(x, value, shape):
    """`value` as an NDArray of x's dtype and device, broadcast to `shape`."""
    if not isinstance(value, NDArray):
        value = array(np.asarray(value), ctx=x.context, dtype=x.dtype)
    if value.context != x.context:
        value = value.as_in_context(x.context)
    if value.dtype != x.dtype:
        value = value.astype(x.dtype)
    if value.shape == shape:
        return value
    extra = value.ndim - len(shape)
    if extra > 0 and all(d == 1 for d in value.shape[:extra]):
        value = value.reshape(value.shape[extra:])      # drop leading axes of length 1
    value = value.reshape((1,) * (len(shape) - value.ndim) + value.shape)
    if value.shape != shape:
        value = invoke(_BROADCAST_TO, [value], {'shape': shape})[0]
    return value


def _advanced_set(x, key, value):
    if isinstance(value, numbers.Real):
        invoke(_ADVANCED_ASSIGN_SCALAR, [x], {'key': key, 'scalar': float(value)}, out=[x])
        return
    region = registry.get('_advanced_index').infer_shape({'key': key}, [x.shape])[1][0]
    source = _value_array(x, value, region)
    invoke(_ADVANCED_ASSIGN, [x, source], {'key': key}, out=[x])


_SLICE = registry.get('slice')
_ASSIGN = registry.get('_slice_assign')
_ASSIGN_SCALAR = registry.get('_slice_assign_scalar')
_BROADCAST_TO = registry.get('broadcast_to')
_ADVANCED = registry.get('_advanced_index')
_ADVANCED_ASSIGN = registry.get('_advanced_index_assign')
_ADVANCED_ASSIGN_SCALAR = registry.get('_advanced_index_assign_scalar')


# x[key] and x[key] = value of every NDArray
NDArray.__getitem__ = getitem
NDArray.__setitem__ = setitem
