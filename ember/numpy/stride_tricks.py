"""MXNet's ``mxnet.numpy.stride_tricks``: ``broadcast_arrays``.

>>> from ember import numpy as np
>>> [a.shape for a in np.stride_tricks.broadcast_arrays(np.ones((2, 1)), np.ones(3))]
[(2, 3), (2, 3)]
"""
from ember.numpy._op import broadcast_arrays

__all__ = ['broadcast_arrays']
