"""The plumbing of MXNet 1.x's first multi-process DataLoader (``DataLoaderV1``): worker
processes fed by a key queue, a fetcher thread that puts their batches in order, and the
pickling of NDArrays through shared memory (``reduce_ndarray`` / ``rebuild_ndarray``) that
``ConnectionWrapper`` and ``SimpleQueue`` use. ``mx.gluon.data.dataloader`` holds these names,
as MXNet's does; :class:`~ember.gluon.data.DataLoader` is the loader to use.

An NDArray pickled this way is copied into a shared-memory segment; the process that unpickles
it maps the segment and unlinks it (once: a pickle of an NDArray is read by one receiver). A
segment pickled but never read stays in /dev/shm until removed. The ``fd`` of MXNet's
``rebuild_ndarray(pid, fd, shape, dtype)`` is the segment's name here.

>>> import pickle, ember as mx
>>> rebuild, args = reduce_ndarray(mx.nd.array([1, 2]))
>>> rebuild(*args).asnumpy().tolist()
[1.0, 2.0]
"""
from __future__ import annotations

import io
import multiprocessing
import multiprocessing.queues
import os
import pickle
import threading
from multiprocessing.reduction import ForkingPickler

import numpy as np

from ember import ndarray as nd
from ember.device import cpu, cpu_pinned
from ember.gluon.data import _shared_memory
from ember.numpy.multiarray import ndarray as _np_ndarray
from ember.numpy.multiarray import wrap as _as_np

__all__ = ['ConnectionWrapper', 'Queue', 'SimpleQueue', 'fetcher_loop_v1',
           'rebuild_ndarray', 'rebuild_np_ndarray', 'reduce_ndarray', 'reduce_np_ndarray',
           'worker_loop_v1']

_writer = _shared_memory.SegmentWriter(_shared_memory.segment_prefix('v1'))


def _to_segment(data):
    """(this process id, the name of a new segment holding `data`'s values)."""
    placed = _writer._copy([data])
    name, _ = placed[id(data)]
    return os.getpid(), name


def reduce_ndarray(data):
    """``(rebuild_ndarray, args)``: how a pickler sends `data` through shared memory."""
    pid, name = _to_segment(data)
    return rebuild_ndarray, (pid, name, data.shape, np.dtype(data.dtype).str)


def rebuild_ndarray(pid, fd, shape, dtype):
    """The NDArray over segment `fd` that process `pid` wrote (the segment is unlinked)."""
    return _shared_memory.unpack(('nd', fd, 0, tuple(shape), dtype))


def reduce_np_ndarray(data):
    """:func:`reduce_ndarray` for ``mx.np`` arrays."""
    pid, name = _to_segment(data)
    return rebuild_np_ndarray, (pid, name, data.shape, np.dtype(data.dtype).str)


def rebuild_np_ndarray(pid, fd, shape, dtype):
    """:func:`rebuild_ndarray` giving an ``mx.np`` array."""
    return _as_np(rebuild_ndarray(pid, fd, shape, dtype))


class _SharedPickler(ForkingPickler):
    """ForkingPickler sending (mx.np and mx.nd) NDArrays through shared memory."""

    _extra_reducers = dict(ForkingPickler._extra_reducers)
    _extra_reducers[nd.NDArray] = reduce_ndarray
    _extra_reducers[_np_ndarray] = reduce_np_ndarray


class ConnectionWrapper:
    """A multiprocessing connection whose ``send`` pickles NDArrays through shared memory;
    everything else is the wrapped connection's."""

    def __init__(self, conn):
        self._conn = conn

    def send(self, obj):
        buffer = io.BytesIO()
        _SharedPickler(buffer, pickle.HIGHEST_PROTOCOL).dump(obj)
        self._conn.send_bytes(buffer.getvalue())

    def recv(self):
        return pickle.loads(self._conn.recv_bytes())

    def __getattr__(self, name):
        conn = self.__dict__.get('_conn')
        if conn is None:
            raise AttributeError(name)
        return getattr(conn, name)


class Queue(multiprocessing.queues.Queue):
    """A multiprocessing Queue (of the default context) over wrapped connections."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, ctx=multiprocessing.get_context(), **kwargs)
        self._reader = ConnectionWrapper(self._reader)
        self._writer = ConnectionWrapper(self._writer)
        self._send = self._writer.send
        self._recv = self._reader.recv


class SimpleQueue(multiprocessing.queues.SimpleQueue):
    """A multiprocessing SimpleQueue whose NDArrays travel through shared memory."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, ctx=multiprocessing.get_context(), **kwargs)
        self._reader = ConnectionWrapper(self._reader)
        self._writer = ConnectionWrapper(self._writer)

    def put(self, obj):
        with self._wlock:
            self._writer.send(obj)

    def get(self):
        with self._rlock:
            return self._reader.recv()


def _to_device(batch, device):
    if isinstance(batch, nd.NDArray):
        return batch.as_in_context(device)
    if isinstance(batch, (list, tuple)):
        return [_to_device(item, device) for item in batch]
    return batch


def worker_loop_v1(dataset, key_queue, data_queue, batchify_fn):
    """A worker process: batchify the samples of each (index, sample indices) key until a key
    of None, putting (index, batch) on `data_queue`."""
    while True:
        index, samples = key_queue.get()
        if index is None:
            return
        data_queue.put((index, batchify_fn([dataset[i] for i in samples])))


def fetcher_loop_v1(data_queue, data_buffer, pin_memory=False, pin_device_id=0,
                    data_buffer_lock=None):
    """The fetcher thread: move batches from `data_queue` to `data_buffer` by index (on the
    CPU, pinned with `pin_memory`) until an index of None."""
    device = cpu_pinned(pin_device_id) if pin_memory else cpu()
    while True:
        index, batch = data_queue.get()
        if index is None:
            return
        batch = _to_device(batch, device)
        if data_buffer_lock is None:
            data_buffer[index] = batch
        else:
            with data_buffer_lock:
                data_buffer[index] = batch


class _MultiWorkerIterV1:
    """One epoch of DataLoaderV1 with worker processes, 2 batches per worker in flight."""

    def __init__(self, num_workers, dataset, batchify_fn, batch_sampler, pin_memory=False,
                 pin_device_id=0, worker_fn=worker_loop_v1):
        self._num_workers = num_workers
        self._batch_sampler = batch_sampler
        self._key_queue, self._data_queue = Queue(), SimpleQueue()
        self._buffer, self._lock = {}, threading.Lock()
        self._received = self._sent = 0
        self._keys = iter(batch_sampler)
        self._shutdown = False
        self._workers = []
        for _ in range(num_workers):
            worker = multiprocessing.Process(target=worker_fn, daemon=True, args=(
                dataset, self._key_queue, self._data_queue, batchify_fn))
            worker.start()
            self._workers.append(worker)
        self._fetcher = threading.Thread(target=fetcher_loop_v1, daemon=True, args=(
            self._data_queue, self._buffer, pin_memory, pin_device_id, self._lock))
        self._fetcher.start()
        for _ in range(2 * num_workers):
            self._push_next()

    def __len__(self):
        return len(self._batch_sampler)

    def _push_next(self):
        keys = next(self._keys, None)
        if keys is not None:
            self._key_queue.put((self._sent, keys))
            self._sent += 1

    def __iter__(self):
        return self

    def __next__(self):
        if self._shutdown:
            raise StopIteration
        if self._received == self._sent:
            self.shutdown()
            raise StopIteration
        while True:
            with self._lock:
                if self._received in self._buffer:
                    batch = self._buffer.pop(self._received)
                    break
            if not any(w.is_alive() for w in self._workers):
                self.shutdown()
                raise RuntimeError('DataLoaderV1: every worker process has exited')
            threading.Event().wait(0.001)
        self._received += 1
        self._push_next()
        return batch

    def shutdown(self):
        if self._shutdown:
            return
        self._shutdown = True
        self._data_queue.put((None, None))
        self._fetcher.join()
        for _ in self._workers:
            self._key_queue.put((None, None))
        for worker in self._workers:
            worker.join(timeout=5)
            if worker.is_alive():
                worker.terminate()

    def __del__(self):
        self.shutdown()
