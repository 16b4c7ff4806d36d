"""``mx.nd``: the facade over :mod:`ember.ndarray` (``from ember import nd``).

Everything of ``ember.ndarray`` is reachable here, operators registered later included.

>>> from ember import nd, ndarray
>>> nd.ones((2,)).asnumpy().tolist(), nd.NDArray is ndarray.NDArray
([1.0, 1.0], True)
"""
from ember import ndarray as _ndarray
# every public name but the namespaces a higher layer brings later (mx.nd.np)
globals().update((_name, getattr(_ndarray, _name)) for _name in _ndarray.__all__
                 if _name not in _ndarray.late_namespaces)
from ember.ndarray import NDArray, _internal, random  # noqa: F401

__all__ = list(_ndarray.__all__)


def __getattr__(name):
    return getattr(_ndarray, name)
