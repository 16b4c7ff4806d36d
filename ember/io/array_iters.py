"""``CSVIter`` and ``MNISTIter``: batches of arrays read from CSV files and from MNIST's idx
files (MXNet 1.x's iterators of the same names), held in memory.

>>> import os, tempfile, numpy as np
>>> path = os.path.join(tempfile.mkdtemp(), 'data.csv')
>>> np.savetxt(path, np.arange(12).reshape(6, 2), delimiter=',')
>>> it = CSVIter(data_csv=path, data_shape=(2,), batch_size=4)
>>> [(b.data[0].asnumpy()[:, 0].tolist(), b.pad) for b in it]
[([0.0, 2.0, 4.0, 6.0], 0), ([8.0, 10.0, 0.0, 2.0], 2)]
"""
from __future__ import annotations

import gzip
import os

import numpy as np

from ember import ndarray as nd
from ember.base import EmberError
from ember.io.io import DataBatch, DataDesc, DataIter

__all__ = ['CSVIter', 'MNISTIter']

_OUTPUT_DTYPES = (None, 'float32', 'float64', 'float16', 'int32', 'int64', 'int8', 'uint8')


def _output_dtype(name, dtype):
    if dtype not in _OUTPUT_DTYPES:
        raise ValueError(f'{name}: dtype={dtype!r}: expected one of '
                         f'{", ".join(str(d) for d in _OUTPUT_DTYPES)}')
    return np.dtype(dtype or np.float32)


class _ArrayBatches(DataIter):
    """Batches of in-memory `data` and `label` (first axis: examples). A short last batch
    either wraps around to the first examples (`round_batch`, and the next epoch starts after
    them, as MXNet does) or is dropped (`drop_last`), else is zero-padded; ``pad`` counts the
    places filled."""

    def __init__(self, data, label, batch_size, round_batch, drop_last, names):
        super().__init__(batch_size)
        self._data, self._label = data, label
        self.round_batch, self._drop_last = round_batch, drop_last
        self.provide_data = [DataDesc(names[0], (batch_size,) + data.shape[1:], data.dtype)]
        self.provide_label = [DataDesc(names[1], (batch_size,) + label.shape[1:],
                                       label.dtype)]
        self._start = 0         # where this epoch began
        self._next_start = 0    # where the next one begins: after the rows a wrap took
        self._cursor = 0
        self._batch = None
        self.reset()

    def reset(self):
        self._start, self._next_start = self._next_start, 0
        self._cursor = self._start

    def iter_next(self):
        count, size = len(self._data), self.batch_size
        if self._cursor >= count or (self._drop_last and self._cursor + size > count):
            return False
        rows = np.arange(self._cursor, self._cursor + size)
        self._cursor += size
        pad = max(0, self._cursor - count)
        if pad and self.round_batch:
            rows %= count
            self._next_start = pad % count
        self._batch = self._take(rows, pad)
        return True

    def _take(self, rows, pad):
        keep = rows[rows < len(self._data)] if not self.round_batch else rows
        data = np.zeros((self.batch_size,) + self._data.shape[1:], self._data.dtype)
        label = np.zeros((self.batch_size,) + self._label.shape[1:], self._label.dtype)
        data[:len(keep)], label[:len(keep)] = self._data[keep], self._label[keep]
        return DataBatch([nd.array(data, dtype=data.dtype)],
                         [nd.array(label, dtype=label.dtype)], pad=pad)

    def getdata(self):
        return self._batch.data

    def getlabel(self):
        return self._batch.label

    def getpad(self):
        return self._batch.pad


def _read_csv(name, path, shape, dtype):
    if not os.path.isfile(path):
        raise EmberError(f'{name}: no such file {path!r}')
    try:
        values = np.loadtxt(path, delimiter=',', dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise EmberError(f'{name}: {path!r} is not a CSV file of numbers: {exc}') from None
    width = int(np.prod(shape))
    if values.shape[1] != width:
        raise EmberError(f'{name}: {path!r} has rows of {values.shape[1]} values; the shape '
                         f'{tuple(shape)} needs {width}')
    return values.astype(dtype).reshape((len(values),) + tuple(shape))


class CSVIter(_ArrayBatches):
    """Batches of rows of `data_csv`, each reshaped to `data_shape`, with the rows of
    `label_csv` (`label_shape`; zeros when there is none). See the module docstring."""

    def __init__(self, data_csv, data_shape, batch_size, label_csv=None, label_shape=(1,),
                 round_batch=True, prefetch_buffer=4, ctx=None, dtype=None,
                 data_name='data', label_name='softmax_label'):
        dtype = _output_dtype('CSVIter', dtype)
        data = _read_csv('CSVIter', data_csv, tuple(data_shape), dtype)
        label_shape = tuple(label_shape)
        if label_csv is None or label_csv == 'NULL':
            label = np.zeros((len(data),) + label_shape, np.float32)
        else:
            label = _read_csv('CSVIter', label_csv, label_shape, np.float32)
        if len(label) != len(data):
            raise EmberError(f'CSVIter: {data_csv!r} has {len(data)} rows and {label_csv!r} '
                             f'{len(label)}; they must match')
        if label_shape == (1,):
            label = label.reshape(len(label))
        super().__init__(data, label, int(batch_size), bool(round_batch), False,
                         (data_name, label_name))


def _read_idx(name, path, magic, dims):
    """The array in an MNIST idx file (gzip or plain): `dims` big-endian sizes after `magic`."""
    if not os.path.isfile(path):
        raise EmberError(f'{name}: no such file {path!r}')
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rb') as file:
        raw = file.read()
    header = np.frombuffer(raw[:4 * (dims + 1)], '>i4')
    if len(header) != dims + 1 or header[0] != magic:
        raise EmberError(f'{name}: {path!r} is not an MNIST idx file (magic number '
                         f'{header[0] if len(header) else None}, expected {magic})')
    shape = tuple(int(d) for d in header[1:])
    body = np.frombuffer(raw, np.uint8, offset=4 * (dims + 1))
    if body.size != int(np.prod(shape)):
        raise EmberError(f'{name}: {path!r} holds {body.size} bytes of data; its header '
                         f'says {shape}')
    return body.reshape(shape)


def read_mnist(name, image_path, label_path):
    """(images (N, 28, 28) uint8, labels (N,) uint8) of MNIST's idx files."""
    images = _read_idx(name, image_path, 2051, 3)
    labels = _read_idx(name, label_path, 2049, 1)
    if len(images) != len(labels):
        raise EmberError(f'{name}: {image_path!r} has {len(images)} images and '
                         f'{label_path!r} {len(labels)} labels')
    return images, labels


class MNISTIter(_ArrayBatches):
    """Batches of MNIST images scaled by 1/256, (N, 1, 28, 28) or flat (N, 784), with their
    labels; shuffled once with `seed` when `shuffle`; a short last batch is dropped, as MXNet
    does. `num_parts` / `part_index` take a contiguous share. `input_shape` is accepted and
    ignored, as MXNet's iterator does (its test utilities pass it): `flat` sets the shape."""

    def __init__(self, image='./train-images-idx3-ubyte', label='./train-labels-idx1-ubyte',
                 batch_size=128, shuffle=True, flat=False, seed=0, silent=False, num_parts=1,
                 part_index=0, prefetch_buffer=4, ctx=None, dtype=None, data_name='data',
                 label_name='softmax_label', input_shape=None):
        images, labels = read_mnist('MNISTIter', image, label)
        if not 0 <= part_index < num_parts:
            raise ValueError(f'MNISTIter: part_index={part_index}: expected 0 <= part_index '
                             f'< num_parts ({num_parts})')
        share = len(images) // num_parts
        rows = np.arange(share * part_index, share * (part_index + 1))
        if shuffle:
            rows = np.random.default_rng(seed).permutation(rows)
        dtype = _output_dtype('MNISTIter', dtype)
        data = (images[rows].astype(np.float32) / 256).astype(dtype)
        data = data.reshape(len(rows), -1) if flat else data[:, None]
        super().__init__(data, labels[rows].astype(np.float32), int(batch_size), False, True,
                         (data_name, label_name))
