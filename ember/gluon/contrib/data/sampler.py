"""IntervalSampler: indices taken every `interval` items, then (with `rollover`) again from
each skipped offset, so that consecutive batches read interleaved streams of a sequence.

>>> list(IntervalSampler(13, interval=3))
[0, 3, 6, 9, 12, 1, 4, 7, 10, 2, 5, 8, 11]
>>> sampler = IntervalSampler(13, interval=3, rollover=False)
>>> list(sampler), len(sampler)
([0, 3, 6, 9, 12], 5)
"""
from __future__ import annotations

from ember.gluon.data.sampler import Sampler

__all__ = ['IntervalSampler']


class IntervalSampler(Sampler):
    """Indices 0, interval, 2 * interval, ... below `length`; with `rollover`, then from 1,
    2, ... up to interval - 1 the same way, until every index came once. Its length is the
    number of indices it gives (MXNet 1.9.1 says `length` even without rollover)."""

    def __init__(self, length, interval, rollover=True):
        if not 0 < interval <= length:
            raise ValueError(f'IntervalSampler: interval={interval} must be between 1 and '
                             f'length={length}')
        self._length, self._interval, self._rollover = length, interval, rollover

    def __iter__(self):
        for start in range(self._interval if self._rollover else 1):
            yield from range(start, self._length, self._interval)

    def __len__(self):
        if self._rollover:
            return self._length
        return len(range(0, self._length, self._interval))
