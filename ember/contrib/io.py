"""``mx.contrib.io``: a Gluon DataLoader as an ``mx.io`` iterator, for the Module API.

>>> import numpy as np
>>> import ember as mx
>>> dataset = mx.gluon.data.ArrayDataset(np.ones((5, 2)), np.arange(5))
>>> it = DataLoaderIter(mx.gluon.data.DataLoader(dataset, batch_size=2))
>>> [batch.pad for batch in it]
[0, 0, 1]
"""
from __future__ import annotations

from ember import ndarray as nd
from ember.io import DataDesc, DataIter

__all__ = ['DataLoaderIter', 'DataDesc', 'DataIter']


class DataLoaderIter(DataIter):
    """Batches of a DataLoader yielding (data, label): the last, smaller batch is padded to
    the batch size (``pad`` says by how many)."""

    def __init__(self, loader, data_name='data', label_name='softmax_label', dtype='float32'):
        super().__init__()
        self._loader = loader
        data, label = next(iter(loader))
        self.batch_size = data.shape[0]
        self.dtype = dtype
        self.provide_data = [DataDesc(data_name, data.shape, dtype)]
        self.provide_label = [DataDesc(label_name, label.shape, dtype)]
        self._current_batch = None
        self.reset()

    def reset(self):
        self._iter = iter(self._loader)

    def iter_next(self):
        self._current_batch = next(self._iter, None)
        return self._current_batch is not None

    def _padded(self, array):
        array = array.astype(self.dtype)
        if not self.getpad():
            return [array]
        full = nd.zeros((self.batch_size,) + tuple(array.shape[1:]), dtype=self.dtype)
        full[:array.shape[0]] = array
        return [full]

    def getdata(self):
        return self._padded(self._current_batch[0])

    def getlabel(self):
        return self._padded(self._current_batch[1])

    def getpad(self):
        return self.batch_size - self._current_batch[0].shape[0]

    def getindex(self):
        return None
