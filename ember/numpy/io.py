r"""MXNet's ``mxnet.numpy.io``: ``genfromtxt`` giving ``mx.np`` arrays (on `ctx`).

>>> import io
>>> from ember import numpy as np
>>> np.genfromtxt(io.StringIO('1,2\n3,4'), delimiter=',')
array([[1., 2.],
       [3., 4.]], dtype=float64)
"""
from __future__ import annotations

import numpy as onp

from ember.numpy.multiarray import array

__all__ = ['genfromtxt']


def genfromtxt(*args, ctx=None, **kwargs):
    """NumPy's ``genfromtxt``, the result as an ``mx.np`` array on `ctx`."""
    values = onp.genfromtxt(*args, **kwargs)
    return array(values, dtype=values.dtype, ctx=ctx)
