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
           'from_numpy', 'from_dlpack', 'to_dlpack_for_read', 'to_dlpack_for_write']


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
