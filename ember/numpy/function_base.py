"""MXNet's ``mxnet.numpy.function_base``: ``meshgrid``.

>>> from ember import numpy as np
>>> [g.shape for g in np.function_base.meshgrid(np.arange(3), np.arange(2))]
[(2, 3), (2, 3)]
"""
from ember.numpy._op import meshgrid

__all__ = ['meshgrid']
