"""``mx.npx.save`` and ``mx.npx.load``: mx.np arrays in MXNet's NDArray file format.

>>> import os, tempfile
>>> from ember import numpy as np, numpy_extension as npx
>>> path = os.path.join(tempfile.mkdtemp(), 'arrays')
>>> npx.save(path, {'w': np.ones((2,))})
>>> npx.load(path)
{'w': array([1., 1.])}
"""
from __future__ import annotations

from ember import ndarray as _nd
from ember.ndarray.ndarray import NDArray
from ember.numpy.multiarray import as_np

__all__ = ['save', 'load']


def save(file, arr):
    """Save an mx.np array, a list or a dict of them."""
    if isinstance(arr, NDArray):
        arr = [arr]
    _nd.save(file, arr)


def load(file):
    """Load arrays saved by :func:`save` as mx.np arrays (a list or a dict, as saved)."""
    loaded = _nd.load(file)
    if isinstance(loaded, dict):
        return {k: as_np(v) for k, v in loaded.items()}
    return [as_np(v) for v in loaded]
