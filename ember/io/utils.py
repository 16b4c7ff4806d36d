"""``mx.io.utils``: the array helpers of MXNet's iterators, which take dense and csr arrays
(``sparse_array`` is ``mx.nd.sparse.array``, ``array`` is ``mx.nd.array``).

>>> import numpy as np, scipy.sparse
>>> from ember.io import utils
>>> utils.array(np.ones((2, 2))).stype, utils.sparse_array(scipy.sparse.eye(2).tocsr()).stype
('default', 'csr')
"""
from ember.ndarray import NDArray
from ember.ndarray.sparse import CSRNDArray, array as sparse_array
from ember.ndarray.utils import array

__all__ = ['NDArray', 'CSRNDArray', 'array', 'sparse_array']
