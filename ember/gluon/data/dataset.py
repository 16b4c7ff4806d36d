"""Datasets: indexable collections of samples (MXNet 1.x's ``gluon.data``).

>>> from ember.gluon.data import ArrayDataset
>>> ds = ArrayDataset([1, 2, 3], ['a', 'b', 'c'])
>>> len(ds), ds[1]
(3, (2, 'b'))
>>> ds.transform_first(lambda x: x * 10)[2]
(30, 'c')
"""
from __future__ import annotations

import os

from ember import ndarray as nd
from ember.io import recordio

__all__ = ['Dataset', 'SimpleDataset', 'ArrayDataset', 'RecordFileDataset']


class Dataset:
    """Abstract dataset: subclasses define ``__getitem__`` and ``__len__``."""

    def __getitem__(self, idx):
        raise NotImplementedError(f'{type(self).__name__} must define __getitem__')

    def __len__(self):
        raise NotImplementedError(f'{type(self).__name__} must define __len__')

    def filter(self, fn):
        """A dataset of the samples for which ``fn(sample)`` is true."""
        return SimpleDataset([sample for sample in self if fn(sample)])

    def shard(self, num_shards, index):
        """Shard `index` of `num_shards` contiguous shards (the first ones one longer)."""
        if not 0 <= index < num_shards:
            raise ValueError(f'shard index={index}: expected 0 <= index < {num_shards}')
        length = len(self)
        base, extra = divmod(length, num_shards)
        start = base * index + min(index, extra)
        end = start + base + (1 if index < extra else 0)
        return _IndexedDataset(self, range(start, end))

    def take(self, count):
        """The first `count` samples (all of them when count is None)."""
        if count is None or count > len(self):
            count = len(self)
        return _IndexedDataset(self, range(count))

    def sample(self, sampler):
        """The samples at the indices that `sampler` yields."""
        return _IndexedDataset(self, list(sampler))

    def transform(self, fn, lazy=True):
        """Apply ``fn`` to each sample (a tuple sample is unpacked into its arguments)."""
        transformed = _LazyTransformDataset(self, fn)
        return transformed if lazy else SimpleDataset([s for s in transformed])

    def transform_first(self, fn, lazy=True):
        """Apply ``fn`` to the first element of each sample only."""
        return self.transform(_TransformFirst(fn), lazy)

    def __iter__(self):
        # Bounded by __len__, not by IndexError: NDArray indexing may not raise it.
        return (self[i] for i in range(len(self)))


class SimpleDataset(Dataset):
    """A dataset over any sequence (a list, a NumPy array, ...)."""

    def __init__(self, data):
        self._data = data

    def __len__(self):
        return len(self._data)

    def __getitem__(self, idx):
        return self._data[idx]


class _IndexedDataset(Dataset):
    def __init__(self, dataset, indices):
        self._dataset, self._indices = dataset, indices

    def __len__(self):
        return len(self._indices)

    def __getitem__(self, idx):
        return self._dataset[self._indices[idx]]


class _LazyTransformDataset(Dataset):
    def __init__(self, data, fn):
        self._data, self._fn = data, fn

    def __len__(self):
        return len(self._data)

    def __getitem__(self, idx):
        item = self._data[idx]
        return self._fn(*item) if isinstance(item, tuple) else self._fn(item)


class _TransformFirst:
    def __init__(self, fn):
        self._fn = fn

    def __call__(self, x, *args):
        return (self._fn(x),) + args if args else self._fn(x)


class ArrayDataset(Dataset):
    """Samples zipped from arrays of equal length: ``ds[i] == (a[i], b[i], ...)``.

    One-dimensional NDArrays are converted to NumPy so that a sample is a scalar.
    """

    def __init__(self, *args):
        if not args:
            raise ValueError('ArrayDataset needs at least one array')
        self._length = len(args[0])
        self._data = []
        for i, data in enumerate(args):
            if len(data) != self._length:
                raise ValueError(f'All arrays must have the same length; array[0] has length '
                                 f'{self._length} while array[{i}] has {len(data)}.')
            if isinstance(data, nd.NDArray) and len(data.shape) == 1:
                data = data.asnumpy()
            self._data.append(data)

    def __getitem__(self, idx):
        if len(self._data) == 1:
            return self._data[0][idx]
        return tuple(data[idx] for data in self._data)

    def __len__(self):
        return self._length


class RecordFileDataset(Dataset):
    """The records of a RecordIO file as bytes, by position, through its index (the ``.idx``
    beside the ``.rec``). Threads and worker processes may read it at once.

    >>> import os, tempfile
    >>> from ember.io import recordio
    >>> folder = tempfile.mkdtemp()
    >>> writer = recordio.MXIndexedRecordIO(os.path.join(folder, 'r.idx'),
    ...                                     os.path.join(folder, 'r.rec'), 'w')
    >>> for key in (7, 3):
    ...     writer.write_idx(key, b'record %d' % key)
    >>> writer.close()
    >>> records = RecordFileDataset(os.path.join(folder, 'r.rec'))
    >>> len(records), records[0], records[1]
    (2, b'record 7', b'record 3')
    """

    def __init__(self, filename):
        self.filename = os.fspath(filename)
        self.idx_file = os.path.splitext(self.filename)[0] + '.idx'
        self._offsets = [offset for _, offset in recordio.read_index(self.idx_file)]
        self._records = recordio.RecordFile(self.filename)

    def __getitem__(self, idx):
        try:
            offset = self._offsets[idx]
        except IndexError:
            raise IndexError(f'RecordFileDataset: index {idx} is out of range for the '
                             f'{len(self._offsets)} records of {self.filename!r}') from None
        return self._records.read_at(offset)

    def __len__(self):
        return len(self._offsets)
