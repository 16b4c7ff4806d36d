"""``mx.sym.linalg``: linear algebra on the last two axes, batched over the others.

The functions are generated from the operators registered as ``_linalg_*`` (``gemm2`` is
``_linalg_gemm2``, also reachable as ``mx.sym.linalg_gemm2``).

>>> import ember.symbol as sym
>>> c = sym.linalg.gemm2(sym.var('a'), sym.var('b'), transpose_b=True)
>>> c.infer_shape(a=(5, 2, 3), b=(5, 4, 3))[1]
[(5, 2, 4)]
"""
from ember.op import frontend as _frontend
from ember.symbol.register import make_function as _make_function

_generator = _frontend.Submodule(globals(), ('_linalg_',), _make_function, __name__)


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ = _generator.names()
