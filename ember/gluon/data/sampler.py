"""Samplers: the order in which a DataLoader visits a dataset, and how it forms batches.

>>> from ember.gluon.data import BatchSampler, SequentialSampler
>>> list(BatchSampler(SequentialSampler(5), 2, 'keep'))
[[0, 1], [2, 3], [4]]
>>> list(BatchSampler(SequentialSampler(5), 2, 'discard'))
[[0, 1], [2, 3]]
"""
from __future__ import annotations

import numpy as np

__all__ = ['Sampler', 'SequentialSampler', 'RandomSampler', 'BatchSampler', 'IntervalSampler',
           'FilterSampler']

_LAST_BATCH = ('keep', 'discard', 'rollover')


class Sampler:
    """Abstract sampler: an iterable of indices with a length."""

    def __iter__(self):
        raise NotImplementedError(f'{type(self).__name__} must define __iter__')

    def __len__(self):
        raise NotImplementedError(f'{type(self).__name__} must define __len__')


class SequentialSampler(Sampler):
    """``start, start + 1, ..., start + length - 1``."""

    def __init__(self, length, start=0):
        self._length, self._start = length, start

    def __iter__(self):
        return iter(range(self._start, self._start + self._length))

    def __len__(self):
        return self._length


class RandomSampler(Sampler):
    """A random permutation of ``range(length)``, new at each pass (NumPy's global generator,
    as in MXNet, so ``np.random.seed`` makes it reproducible)."""

    def __init__(self, length):
        self._length = length

    def __iter__(self):
        indices = np.arange(self._length)
        np.random.shuffle(indices)
        return iter(indices.tolist())

    def __len__(self):
        return self._length


class FilterSampler(Sampler):
    """The indices of the samples of `dataset` for which ``fn(sample)`` is true (decided
    once, when the sampler is made).

    >>> list(FilterSampler(lambda x: x % 3 == 0, list(range(10))))
    [0, 3, 6, 9]
    """

    def __init__(self, fn, dataset):
        self._indices = [i for i in range(len(dataset)) if fn(dataset[i])]

    def __iter__(self):
        return iter(self._indices)

    def __len__(self):
        return len(self._indices)


class IntervalSampler(Sampler):
    """``0, k, 2k, ..., 1, k + 1, ...``: every `interval`-th index, then the next offset
    (only the first pass when `rollover` is False).

    >>> list(IntervalSampler(6, 3))
    [0, 3, 1, 4, 2, 5]
    """

    def __init__(self, length, interval, rollover=True):
        if not 0 < interval <= length:
            raise ValueError(f'IntervalSampler: interval={interval}: expected 0 < interval '
                             f'<= length ({length})')
        self._length, self._interval, self._rollover = length, interval, rollover

    def __iter__(self):
        offsets = range(self._interval) if self._rollover else range(1)
        for offset in offsets:
            yield from range(offset, self._length, self._interval)

    def __len__(self):
        if self._rollover:
            return self._length
        return len(range(0, self._length, self._interval))


class BatchSampler(Sampler):
    """Group the indices of `sampler` into lists of `batch_size`.

    `last_batch` says what happens to a final incomplete batch: 'keep' yields it, 'discard'
    drops it, 'rollover' carries its indices into the next pass.
    """

    def __init__(self, sampler, batch_size, last_batch='keep'):
        if last_batch not in _LAST_BATCH:
            raise ValueError(f"last_batch={last_batch!r}: expected 'keep', 'discard' or "
                             f"'rollover'")
        if batch_size < 1:
            raise ValueError(f'batch_size={batch_size}: expected a positive integer')
        self._sampler, self._batch_size, self._last_batch = sampler, batch_size, last_batch
        self._prev = []

    def __iter__(self):
        batch, self._prev = self._prev, []
        for index in self._sampler:
            batch.append(index)
            if len(batch) == self._batch_size:
                yield batch
                batch = []
        if batch and self._last_batch == 'keep':
            yield batch
        elif batch and self._last_batch == 'rollover':
            self._prev = batch

    def __len__(self):
        if self._last_batch == 'keep':
            return (len(self._sampler) + self._batch_size - 1) // self._batch_size
        if self._last_batch == 'discard':
            return len(self._sampler) // self._batch_size
        return (len(self._prev) + len(self._sampler)) // self._batch_size
