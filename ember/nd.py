"""``mx.nd``: the facade over :mod:`ember.ndarray` (``from ember import nd``).

Everything of ``ember.ndarray`` is reachable here, operators registered later included.

>>> from ember import nd, ndarray
>>> nd.ones((2,)).asnumpy().tolist(), nd.NDArray is ndarray.NDArray
([1.0, 1.0], True)
"""
from ember import ndarray as _ndarray
from ember.ndarray import *  # noqa: F401,F403
from ember.ndarray import NDArray, _internal, random  # noqa: F401

__all__ = list(_ndarray.__all__)


def __getattr__(name):
    if name == 'CachedOp':      # MXNet's mx.nd.CachedOp: the executor's, above this layer
        from ember.executor.cached_op import CachedOp
        return CachedOp
    return getattr(_ndarray, name)
