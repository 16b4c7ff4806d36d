"""``mx.io``: data iterators that feed the Module API, and RecordIO files (``io.recordio``,
MXNet's ``mx.recordio``).

>>> import numpy as np
>>> from ember import io
>>> batch = next(io.NDArrayIter(np.ones((3, 2)), batch_size=3))
>>> batch.data[0].shape, batch.pad
((3, 2), 0)
"""
from ember.io import io, recordio, utils
from ember.io.libsvm import LibSVMIter
from ember.io.io import (DataBatch, DataDesc, DataIter, NDArrayIter, PrefetchingIter,
                         ResizeIter)
from ember.io.array_iters import CSVIter, MNISTIter
from ember.io.image_record import (ImageRecordInt8Iter, ImageRecordIter, ImageRecordIter_v1,
                                   ImageRecordUInt8Iter, ImageRecordUInt8Iter_v1)

_FILE_ITERATORS = ['ImageRecordIter', 'ImageRecordUInt8Iter', 'ImageRecordInt8Iter',
                   'ImageRecordIter_v1', 'ImageRecordUInt8Iter_v1', 'CSVIter', 'MNISTIter',
                   'LibSVMIter']
# MXNet puts the iterators over files in mxnet.io.io too; Ember's live in modules beside it.
for _name in _FILE_ITERATORS:
    setattr(io, _name, globals()[_name])
    io.__all__.append(_name)

__all__ = ['DataDesc', 'DataBatch', 'DataIter', 'NDArrayIter', 'ResizeIter', 'PrefetchingIter',
           'recordio', 'io', 'utils'] + _FILE_ITERATORS
