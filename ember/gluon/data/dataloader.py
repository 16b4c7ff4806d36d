"""DataLoader: batches of a dataset, in order or shuffled, built in-process or by threads.

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


# Workers are threads in this process, so batches need no shared-memory transfer.
default_mp_batchify_fn = default_batchify_fn


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
    `batchify_fn` turns a list of samples into a batch. With ``num_workers > 0`` batches are
    built by that many threads, up to `prefetch` (default ``2 * num_workers``) ahead, and
    returned in order; a batch not ready within `timeout` seconds raises TimeoutError.
    `pin_memory` copies batches to ``cpu_pinned(pin_device_id)``.
    """

    def __init__(self, dataset, batch_size=None, shuffle=False, sampler=None, last_batch=None,
                 batch_sampler=None, batchify_fn=None, num_workers=0, pin_memory=False,
                 pin_device_id=0, prefetch=None, thread_pool=False, timeout=120):
        self._dataset = dataset
        self._pin_memory, self._pin_device_id = pin_memory, pin_device_id
        self._timeout = timeout
        self._batch_sampler = _make_batch_sampler(dataset, batch_size, shuffle, sampler,
                                                  last_batch, batch_sampler)
        self._num_workers = max(num_workers, 0)
        self._prefetch = max(0, int(prefetch) if prefetch is not None
                             else 2 * self._num_workers)
        self._batchify_fn = batchify_fn or default_batchify_fn

    def _load(self, indices):
        batch = self._batchify_fn([self._dataset[i] for i in indices])
        if self._pin_memory:
            batch = _as_in_context(batch, cpu_pinned(self._pin_device_id))
        return batch

    def _load_with(self, semantics, indices):
        with np_shape(semantics[0]), np_array(semantics[1]):
            return self._load(indices)

    def __iter__(self):
        if self._num_workers == 0:
            return (self._load(indices) for indices in self._batch_sampler)
        return self._threaded_iter()

    def _threaded_iter(self):
        pending = deque()
        indices = iter(self._batch_sampler)
        semantics = (is_np_shape(), is_np_array())      # the workers batch as this thread does
        with ThreadPoolExecutor(self._num_workers, thread_name_prefix='ember-data') as pool:
            for batch_indices in indices:
                pending.append(pool.submit(self._load_with, semantics, batch_indices))
                if len(pending) > self._prefetch:
                    yield pending.popleft().result(timeout=self._timeout)
            while pending:
                yield pending.popleft().result(timeout=self._timeout)

    def __len__(self):
        return len(self._batch_sampler)


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
