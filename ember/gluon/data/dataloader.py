"""DataLoader: batches of a dataset, built in this process, by threads, or by worker
processes that return them through shared memory.

>>> import ember as mx
>>> from ember.gluon.data import ArrayDataset, DataLoader
>>> loader = DataLoader(ArrayDataset(mx.nd.arange(10).reshape((5, 2)), [0, 1, 0, 1, 0]),
...                     batch_size=2, last_batch='discard')
>>> [(x.shape, y.asnumpy().tolist()) for x, y in loader]
[((2, 2), [0, 1]), ((2, 2), [0, 1])]
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ember import ndarray as nd
from ember.device import cpu_pinned
from ember.gluon.data import _dataloader_v1 as _v1
from ember.gluon.data import _shared_memory, _worker_pool
from ember.gluon.data._dataloader_v1 import (  # noqa: F401  (MXNet's names, held here)
    ConnectionWrapper, Queue, SimpleQueue, fetcher_loop_v1, rebuild_ndarray, rebuild_np_ndarray,
    reduce_ndarray, reduce_np_ndarray, worker_loop_v1)
from ember.gluon.data import sampler as _sampler
from ember.numpy.multiarray import wrap as as_np_inplace
from ember.util import is_np_array, is_np_shape, np_array, np_shape

__all__ = ['DataLoader', 'default_batchify_fn', 'default_mp_batchify_fn']


def default_batchify_fn(data):
    """Stack a list of samples into a batch: NDArrays with ``nd.stack``, tuples field by
    field, anything else (numbers, NumPy arrays) through ``np.asarray``, keeping its dtype."""
    if isinstance(data[0], nd.NDArray):
        return nd.stack(*data)
    if isinstance(data[0], tuple):
        return [default_batchify_fn(list(field)) for field in zip(*data)]
    array = np.asarray(data)
    batch = nd.array(array, dtype=array.dtype)
    return as_np_inplace(batch) if is_np_array() else batch     # mx.np under npx.set_np()


def default_mp_batchify_fn(data):
    """default_batchify_fn, stacking NDArrays straight into shared memory when it runs in a
    worker process (the batch then reaches the main process without a copy)."""
    if isinstance(data[0], nd.NDArray):
        out = _shared_memory.shared_empty((len(data),) + data[0].shape, data[0].dtype)
        return nd.stack(*data, out=out)
    if isinstance(data[0], tuple):
        return [default_mp_batchify_fn(list(field)) for field in zip(*data)]
    array = np.asarray(data)
    return nd.array(array, dtype=array.dtype)


def _as_in_context(data, device):
    if isinstance(data, nd.NDArray):
        return data.as_in_context(device)
    if isinstance(data, (list, tuple)):
        return [_as_in_context(d, device) for d in data]
    return data


class DataLoader:
    """Iterate over `dataset` in mini-batches.

    Give either `batch_size` (with optional `shuffle` or `sampler`, and `last_batch` one of
    'keep', 'discard', 'rollover') or a `batch_sampler` that yields lists of indices.
    `batchify_fn` turns a list of samples into a batch.

    With ``num_workers > 0`` that many worker processes build the batches (threads with
    `thread_pool`), up to `prefetch` (default ``2 * num_workers``) ahead, and the batches come
    back in order. Workers start at the first iteration and serve every epoch until
    :meth:`close` (or the loader is garbage-collected, or the program ends). A worker's
    exception is raised here with the worker's traceback attached; a worker that dies, or a
    batch not ready within `timeout` seconds, raises at once naming the worker; Ctrl-C stops
    the workers and removes their shared memory. `pin_memory` copies batches to
    ``cpu_pinned(pin_device_id)``. With `auto_reload` the next epoch's first batches start
    building as soon as an epoch ends. `mp_context` picks the multiprocessing start method
    ('fork' by default on Linux; 'spawn' and 'forkserver' need a picklable dataset).
    """

    def __init__(self, dataset, batch_size=None, shuffle=False, sampler=None, last_batch=None,
                 batch_sampler=None, batchify_fn=None, num_workers=0, pin_memory=False,
                 pin_device_id=0, prefetch=None, thread_pool=False, timeout=120,
                 auto_reload=False, mp_context=None):
        if not timeout > 0:
            raise ValueError(f'DataLoader: timeout={timeout!r}: expected a positive number of '
                             f'seconds')
        self._dataset = dataset
        self._pin_memory, self._pin_device_id = pin_memory, pin_device_id
        self._timeout = timeout
        self._batch_sampler = _make_batch_sampler(dataset, batch_size, shuffle, sampler,
                                                  last_batch, batch_sampler)
        self._num_workers = max(int(num_workers), 0)
        self._thread_pool = thread_pool
        self._mp_context = mp_context
        self._prefetch = max(0, int(prefetch) if prefetch is not None
                             else 2 * self._num_workers)
        if batchify_fn is None:
            in_processes = self._num_workers and not thread_pool
            batchify_fn = default_mp_batchify_fn if in_processes else default_batchify_fn
        self._batchify_fn = batchify_fn
        self._pool = None
        self._auto_reload = auto_reload
        self._next_epoch = None

    # ------------------------------------------------------------------------------------------

    def __iter__(self):
        epoch, self._next_epoch = self._next_epoch, None
        yield from epoch if epoch is not None else self._epoch()
        if self._auto_reload:
            self._next_epoch = self._epoch()

    def _epoch(self):
        if self._num_workers == 0:
            return (self._pinned(self._load(indices)) for indices in self._batch_sampler)
        if self._thread_pool:
            return self._threaded_epoch()
        return _WorkerEpoch(self, self._worker_pool())

    def _load(self, indices):
        return self._batchify_fn([self._dataset[i] for i in indices])

    def _load_with(self, semantics, indices):
        with np_shape(semantics[0]), np_array(semantics[1]):
            return self._load(indices)

    def _pinned(self, batch):
        if self._pin_memory:
            return _as_in_context(batch, cpu_pinned(self._pin_device_id))
        return batch

    def _threaded_epoch(self):
        pending = deque()
        indices = iter(self._batch_sampler)
        semantics = (is_np_shape(), is_np_array())      # the workers batch as this thread does
        with ThreadPoolExecutor(self._num_workers, thread_name_prefix='ember-data') as pool:
            for batch_indices in indices:
                pending.append(pool.submit(self._load_with, semantics, batch_indices))
                if len(pending) > self._prefetch:
                    yield self._pinned(pending.popleft().result(timeout=self._timeout))
            while pending:
                yield self._pinned(pending.popleft().result(timeout=self._timeout))

    def _worker_pool(self):
        if self._pool is None or self._pool.closed:
            self._pool = _worker_pool.WorkerPool(self._num_workers, self._dataset,
                                                 self._batchify_fn, self._mp_context)
        return self._pool

    def close(self):
        """Stop the worker processes (the next iteration starts new ones)."""
        self._next_epoch = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        pool = getattr(self, '_pool', None)
        if pool is not None:
            pool.close()

    def __len__(self):
        return len(self._batch_sampler)


class _WorkerEpoch:
    """One epoch's batches from the worker pool, `prefetch` of them in flight."""

    def __init__(self, loader, pool):
        self._loader, self._pool = loader, pool
        self._generation = pool.new_generation()
        self._indices = iter(loader._batch_sampler)
        self._sent = self._received = 0
        self._done = False
        for _ in range(loader._prefetch):
            self._push()

    def _push(self):
        indices = next(self._indices, None)
        if indices is not None:
            self._pool.submit(self._generation, self._sent, indices)
            self._sent += 1

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._pool.closed or self._pool.generation != self._generation:
            raise RuntimeError('DataLoader: this iteration was overtaken by a newer one (or '
                               'the loader was closed); start a new `for` loop')
        self._push()
        if self._received == self._sent:
            self._done = True
            raise StopIteration
        try:
            batch = self._pool.result(self._generation, self._received, self._loader._timeout)
        except (KeyboardInterrupt, _worker_pool.WorkerDied, TimeoutError):
            self._done = True
            self._loader.close()        # no worker outlives an interrupt, a death or a hang
            raise
        except BaseException:
            self._done = True           # a worker's own exception: the pool stays usable
            raise
        self._received += 1
        if is_np_array():               # mx.np under npx.set_np(), as the threads give them
            batch = _as_np_batch(batch)
        return self._loader._pinned(batch)

    next = __next__


def _as_np_batch(batch):
    """A worker's batch (NDArrays fresh from shared memory, or lists of them) as mx.np arrays."""
    if isinstance(batch, (list, tuple)):
        return type(batch)(_as_np_batch(part) for part in batch)
    return as_np_inplace(batch) if isinstance(batch, nd.NDArray) else batch


def _make_batch_sampler(dataset, batch_size, shuffle, sampler, last_batch, batch_sampler):
    if batch_sampler is not None:
        if batch_size is not None or shuffle or sampler is not None or last_batch is not None:
            raise ValueError('batch_size, shuffle, sampler and last_batch must not be '
                             'specified if batch_sampler is specified.')
        return batch_sampler
    if batch_size is None:
        raise ValueError('batch_size must be specified unless batch_sampler is specified')
    if sampler is None:
        sampler = _sampler.RandomSampler(len(dataset)) if shuffle \
            else _sampler.SequentialSampler(len(dataset))
    elif shuffle:
        raise ValueError('shuffle must not be specified if sampler is specified')
    return _sampler.BatchSampler(sampler, batch_size, last_batch or 'keep')


# MXNet's first multi-process loader; its plumbing, which this module holds in MXNet, is in
# _dataloader_v1.
class DataLoaderV1:
    """MXNet 1.x's first DataLoader: batches built in this process, or by `num_workers`
    processes started for each epoch. Prefer :class:`~ember.gluon.data.DataLoader`."""

    def __init__(self, dataset, batch_size=None, shuffle=False, sampler=None, last_batch=None,
                 batch_sampler=None, batchify_fn=None, num_workers=0, pin_memory=False,
                 pin_device_id=0):
        if batch_sampler is None:
            if batch_size is None:
                raise ValueError('DataLoaderV1: give batch_size, or a batch_sampler')
            if sampler is None:
                sampler = (_sampler.RandomSampler(len(dataset)) if shuffle
                           else _sampler.SequentialSampler(len(dataset)))
            elif shuffle:
                raise ValueError('DataLoaderV1: shuffle and sampler exclude each other')
            batch_sampler = _sampler.BatchSampler(sampler, batch_size, last_batch or 'keep')
        elif batch_size is not None or shuffle or sampler is not None or last_batch is not None:
            raise ValueError('DataLoaderV1: with a batch_sampler, give no batch_size, shuffle, '
                             'sampler or last_batch')
        self._dataset = dataset
        self._batch_sampler = batch_sampler
        self._pin_memory, self._pin_device_id = pin_memory, pin_device_id
        self._num_workers = max(int(num_workers), 0)
        if batchify_fn is None:
            batchify_fn = default_mp_batchify_fn if self._num_workers else default_batchify_fn
        self._batchify_fn = batchify_fn

    def __iter__(self):
        if self._num_workers:
            return _v1._MultiWorkerIterV1(self._num_workers, self._dataset, self._batchify_fn,
                                      self._batch_sampler, self._pin_memory,
                                      self._pin_device_id)
        return self._in_process()

    def _in_process(self):
        for keys in self._batch_sampler:
            batch = self._batchify_fn([self._dataset[i] for i in keys])
            if self._pin_memory:
                batch = _as_in_context(batch, cpu_pinned(self._pin_device_id))
            yield batch

    def __len__(self):
        return len(self._batch_sampler)
