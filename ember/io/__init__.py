"""``mx.io``: data iterators that feed the Module API, and RecordIO files (``io.recordio``,
MXNet's ``mx.recordio``).

>>> import numpy as np
>>> from ember import io
>>> batch = next(io.NDArrayIter(np.ones((3, 2)), batch_size=3))
>>> batch.data[0].shape, batch.pad
((3, 2), 0)
"""
from ember.io import recordio
from ember.io.libsvm import LibSVMIter
from ember.io.io import (DataBatch, DataDesc, DataIter, NDArrayIter, PrefetchingIter,
                         ResizeIter)
from ember.io.array_iters import CSVIter, MNISTIter
from ember.io.image_record import ImageRecordIter, ImageRecordUInt8Iter

__all__ = ['DataDesc', 'DataBatch', 'DataIter', 'NDArrayIter', 'ResizeIter', 'PrefetchingIter',
           'recordio', 'ImageRecordIter', 'ImageRecordUInt8Iter', 'CSVIter', 'MNISTIter',
           'LibSVMIter', 'io']
