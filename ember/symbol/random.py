"""``mx.sym.random``: symbols that draw random numbers.

>>> import ember.symbol as sym
>>> sym.random.uniform(0, 1, shape=(2, 3)).infer_shape()[1]
[(2, 3)]
"""
from ember.op import frontend as _frontend
from ember.symbol.register import make_function as _make_function

_generator = _frontend.Submodule(globals(), ('_random_',), _make_function, __name__,
                                 select=lambda name: name.endswith('_like'))


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ = _generator.names()
