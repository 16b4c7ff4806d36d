"""``mx.sym.sparse``: the operators under MXNet's sparse symbol namespace.

Every public operator of ``mx.sym`` is reachable here, as in ``mx.nd.sparse``; a graph keeps
the storage types its inputs are bound with (``var(..., stype='csr')``) where the operator has
a sparse kernel, and ``retain`` is ``_sparse_retain``.

>>> import ember as mx
>>> x = mx.sym.var('x', stype='csr')
>>> y = mx.sym.sparse.dot(x, mx.sym.var('w'), transpose_a=True)
>>> csr = mx.nd.array([[0, 1], [2, 0]]).tostype('csr')
>>> out = y.bind(mx.cpu(), {'x': csr, 'w': mx.nd.ones((2, 3))}).forward()[0]
>>> out.stype, out.asnumpy().tolist()
('row_sparse', [[2.0, 2.0, 2.0], [1.0, 1.0, 1.0]])
"""
from __future__ import annotations

from ember.op import registry as _registry
from ember.symbol.register import make_function as _make_function

retain = _make_function(_registry.get('_sparse_retain'), 'retain')
retain.__module__ = __name__

__all__ = sorted(['retain'] + [n for n in _registry.all_ops() if not n.startswith('_')])


def __getattr__(name):
    if name.startswith('_'):
        raise AttributeError(f'module {__name__} has no attribute {name!r}')
    try:
        op = _registry.get(name)
    except AttributeError as exc:
        raise AttributeError(f'module {__name__} has no attribute {name!r}: {exc}') from None
    function = globals()[name] = _make_function(op, name)
    function.__module__ = __name__
    return function
