"""``mx.nd.linalg``: linear algebra on the last two axes, batched over the others.

The functions are generated from the operators registered as ``_linalg_*`` (``gemm2`` is
``_linalg_gemm2``, also reachable as ``mx.nd.linalg_gemm2``).

>>> import ember.ndarray as nd
>>> a = nd.array([[4., 2.], [2., 3.]], dtype='float64')
>>> nd.linalg.potrf(a).asnumpy().round(3).tolist()
[[2.0, 0.0], [1.0, 1.414]]
>>> nd.linalg.gemm2(a, a, transpose_b=True).shape
(2, 2)
"""
from ember.op import frontend as _frontend
from ember.ndarray.register import make_function as _make_function

_generator = _frontend.Submodule(globals(), ('_linalg_',), _make_function, __name__)


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ = _generator.names()
