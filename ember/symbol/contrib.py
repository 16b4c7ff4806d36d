"""``mx.sym.contrib``: the operators registered as ``_contrib_*`` and MXNet's hand-written
contrib functions.

>>> import ember.symbol as sym
>>> sym.contrib.box_iou(sym.var('a'), sym.var('b')).infer_shape(a=(4, 4), b=(3, 4))[1]
[(4, 3)]
"""
from ember.op import frontend as _frontend
from ember.symbol.register import make_function as _make_function

_generator = _frontend.Submodule(globals(), ('_contrib_',), _make_function, __name__)


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ = _generator.names()
