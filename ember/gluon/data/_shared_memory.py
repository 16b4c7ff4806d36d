"""Batches passed from DataLoader worker processes to the main process in shared memory.

A worker writes a batch's arrays into segments (files in ``/dev/shm`` named
``ember-dl-<main pid>-<pool>-...``) and sends only a small description through its pipe; the
main process maps each segment, unlinks it at once and wraps NDArrays around the mapping, so
array payloads are never pickled or copied on the way. A segment lives on only while arrays
use its mapping. Whatever a worker wrote but the main process never received (a worker killed,
an interrupted epoch) is removed by :func:`remove_segments` when the pool stops.

>>> import numpy as np
>>> from ember import ndarray as nd
>>> writer = SegmentWriter(segment_prefix('doc'))
>>> spec = writer.pack([nd.array([[1, 2], [3, 4]]), np.arange(3), 'tag'])
>>> data, indices, tag = unpack(spec)
>>> data.asnumpy().tolist(), indices.tolist(), tag
([[1.0, 2.0], [3.0, 4.0]], [0, 1, 2], 'tag')
>>> remove_segments(segment_prefix('doc'))
0
"""
from __future__ import annotations

import glob
import itertools
import mmap
import os
import tempfile

import numpy as np

from ember import engine
from ember import ndarray as nd
from ember.ndarray.ndarray import NDArray, view_of
from ember.storage.borrowed import Borrowed

__all__ = ['SHM_DIR', 'segment_prefix', 'SegmentWriter', 'unpack', 'discard',
           'remove_segments', 'shared_empty']

SHM_DIR = '/dev/shm' if os.path.isdir('/dev/shm') else tempfile.gettempdir()
_ALIGN = 64


def segment_prefix(pool_token) -> str:
    """The name prefix of every segment of one worker pool of this process."""
    return f'ember-dl-{os.getpid()}-{pool_token}-'


def remove_segments(prefix) -> int:
    """Unlink the segments left under `prefix`; returns how many there were."""
    removed = 0
    for path in glob.glob(os.path.join(SHM_DIR, glob.escape(prefix) + '*')):
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass
    return removed


class SharedStorage(Borrowed):
    """The storage of NDArrays in a shared-memory segment's mapping, which closes when no
    array uses it."""

    __slots__ = ('segment',)

    def __init__(self, mapping, segment):
        super().__init__(np.frombuffer(mapping, np.uint8))
        self.segment = segment


def _ndarray_over(storage, offset, shape, dtype):
    view = view_of(tuple(shape), np.dtype(dtype), offset)
    return NDArray(storage, view, engine.get().new_var(), storage.device)


def _map(path, nbytes, create):
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            os.ftruncate(fd, max(nbytes, 1))
        else:
            nbytes = os.fstat(fd).st_size
        return mmap.mmap(fd, max(nbytes, 1))
    finally:
        os.close(fd)


class SegmentWriter:
    """A worker's side: new segments named ``<prefix>w<pid>-<n>``, and batches packed into
    descriptions that :func:`unpack` turns back into arrays."""

    def __init__(self, prefix):
        self.prefix = prefix
        self._numbers = itertools.count()

    def new_segment(self, nbytes):
        """(name, a writable mapping of `nbytes`)."""
        name = f'{self.prefix}w{os.getpid()}-{next(self._numbers)}'
        return name, _map(os.path.join(SHM_DIR, name), nbytes, create=True)

    def empty(self, shape, dtype):
        """An uninitialised NDArray in a segment of its own (default_mp_batchify_fn)."""
        dtype = np.dtype(dtype)
        name, mapping = self.new_segment(int(np.prod(shape)) * dtype.itemsize)
        return _ndarray_over(SharedStorage(mapping, name), 0, shape, dtype)

    def pack(self, batch):
        """The description of `batch` (nested lists and tuples of NDArrays, NumPy arrays and
        plain values); arrays outside shared memory are copied into one new segment."""
        to_copy = [leaf for leaf in _leaves(batch) if _needs_copy(leaf)]
        placed = self._copy(to_copy) if to_copy else {}
        return _describe(batch, placed)

    def _copy(self, arrays):
        offsets, total = [], 0
        for array in arrays:
            offsets.append(total)
            total += -(-_nbytes(array) // _ALIGN) * _ALIGN
        name, mapping = self.new_segment(total)
        buffer = np.frombuffer(mapping, np.uint8)
        placed = {}
        for array, offset in zip(arrays, offsets):
            values = _host_values(array)
            target = np.ndarray(values.shape, values.dtype, buffer, offset)
            np.copyto(target, values)
            placed[id(array)] = (name, offset)
        del buffer, target
        mapping.close()
        return placed


def _nbytes(array):
    return array.size * np.dtype(array.dtype).itemsize


def _host_values(array):
    if isinstance(array, NDArray):
        array.wait_to_read()
        return array._data()
    return np.ascontiguousarray(array)


def _leaves(batch):
    if isinstance(batch, (list, tuple)):
        for item in batch:
            yield from _leaves(item)
    elif isinstance(batch, (NDArray, np.ndarray)):
        yield batch


def _needs_copy(array):
    return not (isinstance(array, NDArray) and isinstance(array._handle, SharedStorage))


def _describe(batch, placed):
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__, [_describe(item, placed) for item in batch])
    if isinstance(batch, NDArray):
        if isinstance(batch._handle, SharedStorage):
            batch.wait_to_read()
            where = (batch._handle.segment, batch._view.offset)
        else:
            where = placed[id(batch)]
        return ('nd',) + where + (batch.shape, np.dtype(batch.dtype).str)
    if isinstance(batch, np.ndarray):
        return ('np',) + placed[id(batch)] + (batch.shape, batch.dtype.str)
    return ('value', batch)


def segments_of(spec):
    """The segment names a description refers to."""
    kind = spec[0]
    if kind in ('list', 'tuple'):
        return {name for item in spec[1] for name in segments_of(item)}
    return {spec[1]} if kind in ('nd', 'np') else set()


def unpack(spec):
    """The batch a worker described: arrays over the segments, which are unlinked here."""
    storages = {}
    for name in segments_of(spec):
        path = os.path.join(SHM_DIR, name)
        mapping = _map(path, 0, create=False)
        os.unlink(path)
        storages[name] = SharedStorage(mapping, name)
    return _rebuild(spec, storages)


def _rebuild(spec, storages):
    kind = spec[0]
    if kind in ('list', 'tuple'):
        items = [_rebuild(item, storages) for item in spec[1]]
        return items if kind == 'list' else tuple(items)
    if kind == 'value':
        return spec[1]
    _, name, offset, shape, dtype = spec
    storage = storages[name]
    if kind == 'nd':
        return _ndarray_over(storage, offset, shape, dtype)
    return np.ndarray(shape, np.dtype(dtype), storage.buffer, offset)


def discard(spec):
    """Unlink the segments of a batch that nobody will read."""
    for name in segments_of(spec):
        try:
            os.unlink(os.path.join(SHM_DIR, name))
        except FileNotFoundError:
            pass


# Set in a worker process: where default_mp_batchify_fn puts its batches.
current_writer: SegmentWriter | None = None


def shared_empty(shape, dtype):
    """An empty NDArray in shared memory inside a worker, an ordinary one elsewhere."""
    if current_writer is None:
        return nd.empty(shape, dtype=dtype)
    return current_writer.empty(shape, dtype)
