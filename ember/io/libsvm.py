"""``mx.io.LibSVMIter``: batches of csr data from files in the LibSVM text format.

Each line is ``label index:value index:value ...`` with zero-based column indices (as MXNet
reads them). Batches hold the data as a ``CSRNDArray`` of ``(batch_size,) + data_shape`` and
the labels as a dense array of ``(batch_size,) + label_shape``, or, with a ``label_libsvm``
file, as a ``CSRNDArray`` read from that file (its lines' leading values are ignored).

With ``round_batch`` (the default, as in MXNet) the last batch of an epoch is completed with
the first samples of the file (``batch.pad`` counts them) and the next epoch starts after
those; without it the last batch is completed with empty rows.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), 'train.libsvm')
>>> with open(path, 'w') as f:
...     _ = f.write('1 0:1.5 2:3\\n0 1:2\\n-1 3:4\\n')
>>> it = LibSVMIter(data_libsvm=path, data_shape=(4,), batch_size=2)
>>> batch = next(it)
>>> batch.data[0].stype, batch.data[0].asnumpy().tolist(), batch.label[0].asnumpy().tolist()
('csr', [[1.5, 0.0, 3.0, 0.0], [0.0, 2.0, 0.0, 0.0]], [1.0, 0.0])
>>> next(it).pad
1
"""
from __future__ import annotations

import numpy as np

from ember.base import EmberError
from ember.io.io import DataBatch, DataDesc, DataIter
from ember.ndarray import sparse
from ember.ndarray.creation import array

__all__ = ['LibSVMIter']


class _Rows:
    """The lines of a LibSVM file as host csr parts plus the leading value of each line."""

    def __init__(self, path, width):
        leading, data, indices, indptr = [], [], [], [0]
        with open(path) as stream:
            for number, line in enumerate(stream, 1):
                tokens = line.split()
                if not tokens:
                    continue
                leading.append(_number(path, number, tokens[0]))
                columns, values = _entries(path, number, tokens[1:], width)
                indices.extend(columns)
                data.extend(values)
                indptr.append(len(indices))
        self.leading = np.asarray(leading, np.float32)
        self.data = np.asarray(data, np.float32)
        self.indices = np.asarray(indices, np.int64)
        self.indptr = np.asarray(indptr, np.int64)
        self.width = width

    def __len__(self):
        return self.leading.shape[0]

    def part(self, begin, end):
        """Rows [begin, end) as (data, indices, indptr)."""
        low, high = self.indptr[begin], self.indptr[end]
        return (self.data[low:high], self.indices[low:high],
                self.indptr[begin:end + 1] - low)


def _number(path, line, text):
    try:
        return float(text)
    except ValueError:
        raise EmberError(f'{path}:{line}: {text!r} is not a number') from None


def _entries(path, line, tokens, width):
    pairs = []
    for token in tokens:
        index, colon, value = token.partition(':')
        if not colon or not index.isdigit():
            raise EmberError(f'{path}:{line}: {token!r} is not index:value (zero-based index)')
        column = int(index)
        if column >= width:
            raise EmberError(f'{path}:{line}: column index {column} is out of range for '
                             f'data_shape ({width},)')
        pairs.append((column, _number(path, line, value)))
    pairs.sort()
    columns = [c for c, _ in pairs]
    if any(a == b for a, b in zip(columns, columns[1:])):
        raise EmberError(f'{path}:{line}: a column index appears twice')
    return columns, [v for _, v in pairs]


class LibSVMIter(DataIter):
    """Batches of csr data (and labels) from LibSVM files; see the module docstring."""

    def __init__(self, data_libsvm, data_shape, label_libsvm=None, label_shape=(1,),
                 batch_size=1, round_batch=True, num_parts=1, part_index=0,
                 data_name='data', label_name='softmax_label', **kwargs):
        super().__init__(batch_size)
        unknown = sorted(set(kwargs) - {'prefetch_buffer', 'dtype', 'ctx'})
        if unknown:
            raise TypeError(f'LibSVMIter: unknown arguments {unknown}')
        self.data_shape, self.label_shape = tuple(data_shape), tuple(label_shape)
        if len(self.data_shape) != 1:
            raise EmberError(f'LibSVMIter: data_shape must be 1-D (the number of features), '
                             f'got {data_shape}')
        self._data = _Rows(data_libsvm, self.data_shape[0])
        self._labels = None if label_libsvm is None else _Rows(label_libsvm,
                                                                self.label_shape[0])
        if self._labels is not None and len(self._labels) != len(self._data):
            raise EmberError(f'LibSVMIter: {label_libsvm} has {len(self._labels)} lines, '
                             f'{data_libsvm} {len(self._data)}')
        self._range = _part_range(len(self._data), num_parts, part_index)
        self.round_batch = bool(round_batch)
        self.data_name, self.label_name = data_name, label_name
        self._start = self._range[0]
        self._cursor = None
        self._batch = None
        self.reset()

    @property
    def provide_data(self):
        return [DataDesc(self.data_name, (self.batch_size,) + self.data_shape, np.float32)]

    @property
    def provide_label(self):
        return [DataDesc(self.label_name, self._label_batch_shape(), np.float32)]

    def _label_batch_shape(self):
        if self._labels is None:
            return (self.batch_size,)          # one leading value per line, as MXNet gives
        return (self.batch_size,) + self.label_shape

    def reset(self):
        self._cursor = self._start

    def iter_next(self):
        begin, end = self._range
        if self._cursor >= end:
            return False
        rows = [(self._cursor, min(self._cursor + self.batch_size, end))]
        pad = self.batch_size - (rows[0][1] - rows[0][0])
        if pad and self.round_batch:
            rows.append((begin, begin + pad))       # wraps around, as MXNet's loader does
            self._start = begin + pad if begin + pad < end else begin
        elif not pad:
            self._start = begin
        self._cursor = rows[0][1]
        self._batch = DataBatch([self._csr(self._data, rows, self.data_shape)],
                                [self._label(rows)], pad=pad)
        return True

    def next(self):
        if not self.iter_next():
            raise StopIteration
        return self._batch

    def getdata(self):
        return self._batch.data

    def getlabel(self):
        return self._batch.label

    def getpad(self):
        return self._batch.pad

    def _csr(self, source, rows, shape):
        pieces = [source.part(b, e) for b, e in rows]
        data = np.concatenate([p[0] for p in pieces])
        indices = np.concatenate([p[1] for p in pieces])
        indptr = [np.zeros(1, np.int64)]
        for piece in pieces:
            indptr.append(piece[2][1:] + indptr[-1][-1])
        indptr = np.concatenate(indptr)
        empty = self.batch_size - (indptr.shape[0] - 1)
        indptr = np.concatenate([indptr, np.full(empty, indptr[-1])])
        return sparse.csr_matrix((data, indices, indptr), shape=(self.batch_size,) + shape)

    def _label(self, rows):
        if self._labels is not None:
            return self._csr(self._labels, rows, self.label_shape)
        values = np.concatenate([self._data.leading[b:e] for b, e in rows])
        missing = self.batch_size - values.shape[0]
        return array(np.concatenate([values, np.zeros(missing, np.float32)]))


def _part_range(count, num_parts, part_index):
    if not 0 <= part_index < num_parts:
        raise EmberError(f'LibSVMIter: part_index {part_index} must lie in [0, {num_parts})')
    size = -(-count // num_parts)
    return min(part_index * size, count), min((part_index + 1) * size, count)
