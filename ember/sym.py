"""``mx.sym``: the facade over :mod:`ember.symbol` (``from ember import sym``).

Everything of ``ember.symbol`` is reachable here, operators registered later included.

>>> from ember import sym, symbol
>>> sym.var('x').list_outputs(), sym.Symbol is symbol.Symbol
(['x'], True)
"""
from ember import symbol as _symbol
# every public name but the namespaces a higher layer brings later (mx.nd.np)
globals().update((_name, getattr(_symbol, _name)) for _name in _symbol.__all__
                 if _name not in _symbol._LATE_NAMESPACES)
from ember.symbol import Symbol, _internal  # noqa: F401

__all__ = list(_symbol.__all__)


def __getattr__(name):
    return getattr(_symbol, name)
