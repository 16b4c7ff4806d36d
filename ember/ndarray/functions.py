"""MXNet's hand-written ``mx.nd`` functions over operators whose names start with an
underscore: eye, linspace, histogram, split_v2, concatenate and onehot_encode.

>>> import ember.ndarray as nd
>>> nd.eye(2, 3, k=1).asnumpy().tolist()
[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
>>> counts, edges = nd.histogram(nd.array([0.1, 0.5, 0.9, 1.0]), bins=2, range=(0, 1))
>>> counts.asnumpy().tolist(), edges.asnumpy().tolist()
([1, 3], [0.0, 0.5, 1.0])
"""
from __future__ import annotations

import numbers

import numpy as np

from ember.base import dtype_of
from ember.op import registry
from ember.ndarray.creation import array
from ember.ndarray.ndarray import NDArray, invoke, parse_device

__all__ = ['eye', 'linspace', 'histogram', 'split_v2', 'concatenate', 'onehot_encode',
           'from_numpy', 'from_dlpack', 'to_dlpack_for_read', 'to_dlpack_for_write',
           'get_indexing_dispatch_code', 'get_oshape_of_gather_nd_op',
           'indexing_key_expand_implicit_axes', 'check_boolean_array_dimension']


def _call(name, inputs, device=None, out=None, **params):
    op = registry.get(name)
    outputs = invoke(op, list(inputs), op.parse_attrs(params), device=device,
                     out=None if out is None else [out])
    return outputs[0] if len(outputs) == 1 else outputs


def eye(N, M=0, k=0, ctx=None, dtype=None, **kwargs) -> NDArray:
    """An N x M (M = 0: N x N) array with ones on diagonal k (float32 unless `dtype`)."""
    return _call('_eye', [], device=parse_device(ctx), N=N, M=M, k=k,
                 dtype=dtype_of(dtype or np.float32), **kwargs)


def linspace(start, stop, num, endpoint=True, ctx=None, dtype=np.float32) -> NDArray:
    """`num` evenly spaced values from start to stop (stop excluded unless `endpoint`)."""
    return _call('_linspace', [], device=parse_device(ctx), start=start, stop=stop, num=num,
                 endpoint=endpoint, dtype=dtype_of(dtype))


def histogram(a, bins=10, range=None):
    """(counts, edges) of the values of `a`: `bins` equal bins over `range`, or the bin edges
    given as an NDArray. The last bin includes its right edge (NumPy's rule)."""
    if isinstance(bins, NDArray):
        return _call('_histogram', [a, bins])
    if isinstance(bins, numbers.Integral):
        if range is None:
            raise ValueError('histogram: bins given as a count needs range=(low, high)')
        return _call('_histogram', [a], bin_cnt=bins, range=tuple(range))
    raise TypeError(f'histogram: bins must be an int or an NDArray of edges, got '
                    f'{type(bins).__name__}')


def _split_attrs(indices_or_sections):
    """_split_v2's attributes for an int (equal sections) or a tuple of split points."""
    if isinstance(indices_or_sections, numbers.Integral):
        return {'indices': (0,), 'sections': int(indices_or_sections)}
    if isinstance(indices_or_sections, tuple):
        return {'indices': (0,) + tuple(int(i) for i in indices_or_sections), 'sections': 0}
    raise ValueError('indices_or_sections must be an int or a tuple of ints')


def split_v2(ary, indices_or_sections, axis=0, squeeze_axis=False):
    """`ary` split along `axis` into equal sections (an int) or at the given points (a tuple),
    NumPy's ``split``; a list of arrays, or one array when there is one part."""
    return _call('_split_v2', [ary], axis=axis, squeeze_axis=squeeze_axis,
                 **_split_attrs(indices_or_sections))


def concatenate(arrays, axis=0, always_copy=True) -> NDArray:
    """The arrays joined along `axis` (one array is returned as is unless `always_copy`)."""
    if not arrays:
        raise ValueError('concatenate: no arrays given')
    if len(arrays) == 1 and not always_copy:
        return arrays[0]
    return _call('Concat', list(arrays), dim=axis, num_args=len(arrays))


def onehot_encode(indices, out) -> NDArray:
    """Write into `out` (rows, classes) the one-hot rows of `indices`; returns `out`."""
    return _call('_onehot_encode', [indices, out], out=out)


def from_numpy(ndarray, zero_copy=True, array_cls=NDArray):
    """An NDArray with the values of the NumPy array `ndarray`, in its dtype. Ember's arrays
    live in pooled storage, so the values are copied whatever `zero_copy` says (MXNet forbids
    changing the source afterwards either way)."""
    if array_cls is not NDArray:
        raise TypeError(f'from_numpy: array_cls must be NDArray, got {array_cls!r}')
    source = np.asarray(ndarray)
    return array(source, dtype=source.dtype)


def to_dlpack_for_read(data):
    """A DLPack capsule of `data`'s values, once the writes pending on it are done."""
    data.wait_to_read()
    return data._data().__dlpack__()


def to_dlpack_for_write(data):
    """A DLPack capsule of `data`'s memory, once every operation pending on it is done: what
    the consumer writes there is `data`'s new value."""
    from ember.ndarray.ndarray import waitall
    waitall()
    return data._data().__dlpack__()


class _Capsule:
    """What NumPy's from_dlpack needs around a bare DLPack capsule (on the CPU)."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)


def from_dlpack(dlpack):
    """An NDArray with the values of a DLPack capsule (or of an object with ``__dlpack__``),
    copied into Ember's storage."""
    source = dlpack if hasattr(dlpack, '__dlpack__') else _Capsule(dlpack)
    values = np.from_dlpack(source)
    return array(values, dtype=values.dtype)


# ----------------------------------------------------------------------------------------------
# MXNet's helpers for reading an indexing key (mx.nd.ndarray's public functions).

BASIC_INDEXING, ADVANCED_INDEXING, EMPTY_TUPLE_INDEXING = 0, 1, 2
NO_ZERO_DIM_BOOL, ZERO_DIM_BOOL_FALSE, ZERO_DIM_BOOL_TRUE = -1, 0, 1


def get_indexing_dispatch_code(key):
    """0 when tuple `key` is basic indexing (ints, slices, None), 1 when an entry is an array,
    list, tuple or range (advanced), 2 when an entry is an empty tuple.

    >>> get_indexing_dispatch_code((0, slice(1, 3))), get_indexing_dispatch_code((0, [1, 2]))
    (0, 1)
    """
    if not isinstance(key, tuple):
        raise TypeError(f'get_indexing_dispatch_code: expected a tuple key, got '
                        f'{type(key).__name__}')
    for index in key:
        if isinstance(index, (NDArray, np.ndarray, list, tuple, range)):
            return EMPTY_TUPLE_INDEXING if isinstance(index, tuple) and not index \
                else ADVANCED_INDEXING
        if not (index is None or isinstance(index, (slice, numbers.Integral))):
            raise ValueError(f'NDArray indexing: key entry {index!r} of type '
                             f'{type(index).__name__}; expected ints, slices, None or arrays')
    return BASIC_INDEXING


def get_oshape_of_gather_nd_op(dshape, ishape):
    """The output shape of gather_nd for data of `dshape` and indices of `ishape`.

    >>> get_oshape_of_gather_nd_op((4, 5, 6), (2, 7))
    (7, 6)
    """
    if not dshape or not ishape:
        raise ValueError(f'gather_nd: data shape {tuple(dshape)} and indices shape '
                         f'{tuple(ishape)} must both have an axis')
    return tuple(ishape[1:]) + tuple(dshape[ishape[0]:])


def check_boolean_array_dimension(array_shape, axis, bool_shape):
    """Raise IndexError unless a boolean index of `bool_shape` fits `array_shape` from
    `axis` on."""
    for offset, size in enumerate(bool_shape):
        if array_shape[axis + offset] != size:
            raise IndexError(f'boolean index does not match the indexed array along axis '
                             f'{axis + offset}: the array has {array_shape[axis + offset]}, '
                             f'the index {size}')


def indexing_key_expand_implicit_axes(key, shape):
    """(`key` with its ellipsis, or the missing trailing axes, spelled out as full slices;
    -1, or 0 / 1 when a 0-d boolean False / True was in it). Boolean arrays become the
    indices of their True entries; 0-d integer arrays become ints.

    >>> indexing_key_expand_implicit_axes((0, Ellipsis, None), (2, 3, 4))
    ((0, slice(None, None, None), slice(None, None, None), None), -1)
    """
    key = key if isinstance(key, tuple) else (key,)
    ellipsis_at, new_axes, explicit, prepend, axis = None, 0, [], NO_ZERO_DIM_BOOL, 0
    for position, index in enumerate(key):
        if index is Ellipsis:
            if ellipsis_at is not None:
                raise IndexError('an index can only have a single ellipsis (...)')
            ellipsis_at = position
            continue
        if isinstance(index, (bool, np.bool_)):
            index = np.array(index)
        if isinstance(index, NDArray):
            index = index.asnumpy()
        if index is None:
            new_axes += 1
        if isinstance(index, np.ndarray) and index.dtype == np.bool_:
            if index.ndim == 0:
                prepend = ZERO_DIM_BOOL_TRUE if index else ZERO_DIM_BOOL_FALSE
                continue
            check_boolean_array_dimension(shape, axis, index.shape)
            explicit.extend(np.nonzero(index))
            axis += index.ndim
        elif isinstance(index, np.ndarray) and index.ndim == 0:
            explicit.append(int(index))
            axis += 1
        else:
            explicit.append(index)
            axis += 1
    if ellipsis_at is None:
        ellipsis_at = len(explicit)
    filled = (slice(None),) * (len(shape) + new_axes - len(explicit))
    return tuple(explicit[:ellipsis_at]) + filled + tuple(explicit[ellipsis_at:]), prepend
