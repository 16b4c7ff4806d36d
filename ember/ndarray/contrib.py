"""``mx.nd.contrib``: the operators registered as ``_contrib_*`` and MXNet's hand-written
contrib functions.

>>> import ember.ndarray as nd
>>> nd.contrib.arange_like(nd.zeros((2, 3)), axis=1).asnumpy().tolist()
[0.0, 1.0, 2.0]
"""
from ember.op import frontend as _frontend
from ember.ndarray.register import make_function as _make_function

_generator = _frontend.Submodule(globals(), ('_contrib_',), _make_function, __name__)


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ = _generator.names()
