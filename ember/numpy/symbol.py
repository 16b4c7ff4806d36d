"""Symbols with ``mx.np``'s semantics: what a hybridized ``use_np`` block traces.

An ``mx.np`` function given a Symbol adds a node to the graph and returns this Symbol class,
whose operators and methods are ``mx.np``'s (``x + y`` broadcasts and promotes, ``x[1:]``
slices). The graph runs through the same executor as any other.

>>> import ember as mx
>>> from ember import numpy as np
>>> x = np.symbol.var('x')
>>> y = (x * 2 + 1).sum(axis=0)
>>> type(y).__name__, y.list_arguments()
('_Symbol', ['x'])
"""
from __future__ import annotations

import numpy as onp

from ember import symbol as _symbol
from ember.numpy import multiarray
from ember.symbol.symbol import Symbol, create as _create

__all__ = ['var', 'create', 'as_np_symbol']


class _Symbol(Symbol):
    """A Symbol whose operators follow ``mx.np``."""

    def as_np_ndarray(self):
        return self

    def as_nd_ndarray(self):
        return Symbol(self._heads)

    def __getitem__(self, key):
        if isinstance(key, (int, onp.integer, str)) and len(self._heads) > 1:
            return as_np_symbol(Symbol.__getitem__(self, key))
        return _slice(self, key if isinstance(key, tuple) else (key,))

    def __iter__(self):
        if len(self._heads) > 1:
            return (self[i] for i in range(len(self._heads)))
        raise TypeError('iterating over a Symbol needs its shape; index it instead')

    # arithmetic
    def __add__(self, other):
        return _ops().add(self, other)

    def __radd__(self, other):
        return _ops().add(other, self)

    def __sub__(self, other):
        return _ops().subtract(self, other)

    def __rsub__(self, other):
        return _ops().subtract(other, self)

    def __mul__(self, other):
        return _ops().multiply(self, other)

    def __rmul__(self, other):
        return _ops().multiply(other, self)

    def __truediv__(self, other):
        return _ops().true_divide(self, other)

    def __rtruediv__(self, other):
        return _ops().true_divide(other, self)

    def __floordiv__(self, other):
        return _ops().floor_divide(self, other)

    def __mod__(self, other):
        return _ops().mod(self, other)

    def __rmod__(self, other):
        return _ops().mod(other, self)

    def __pow__(self, other):
        return _ops().power(self, other)

    def __rpow__(self, other):
        return _ops().power(other, self)

    def __matmul__(self, other):
        return _ops().matmul(self, other)

    def __rmatmul__(self, other):
        return _ops().matmul(other, self)

    def __neg__(self):
        return _ops().negative(self)

    def __abs__(self):
        return _ops().absolute(self)

    def __eq__(self, other):
        return _ops().equal(self, other)

    def __ne__(self, other):
        return _ops().not_equal(self, other)

    def __gt__(self, other):
        return _ops().greater(self, other)

    def __ge__(self, other):
        return _ops().greater_equal(self, other)

    def __lt__(self, other):
        return _ops().less(self, other)

    def __le__(self, other):
        return _ops().less_equal(self, other)

    __hash__ = Symbol.__hash__

    # methods
    def reshape(self, *args, **kwargs):
        shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
        return _ops().reshape(self, tuple(kwargs.pop('newshape', shape)), **kwargs)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return _ops().transpose(self, tuple(axes) if axes else None)

    @property
    def T(self):
        return _ops().transpose(self)

    def astype(self, dtype, *args, **kwargs):
        from ember.numpy.multiarray import apply
        from ember.base import dtype_of
        return apply('Cast', [self], {'dtype': dtype_of(dtype)})

    def flatten(self, order='C'):
        return _ops().reshape(self, (-1,))


_METHODS = ('sum', 'mean', 'max', 'min', 'prod', 'std', 'var', 'all', 'any', 'argmax',
            'argmin', 'cumsum', 'clip', 'squeeze', 'swapaxes', 'repeat', 'tile', 'flip',
            'take', 'dot', 'round', 'sort', 'argsort', 'diagonal', 'trace', 'split',
            'broadcast_to', 'abs', 'sqrt', 'square', 'exp', 'log', 'sin', 'cos', 'tanh',
            'sign', 'floor', 'ceil')


def _method(name):
    def method(self, *args, **kwargs):
        return getattr(_ops(), name)(self, *args, **kwargs)
    method.__name__ = name
    method.__qualname__ = f'_Symbol.{name}'
    method.__doc__ = f'``mx.np.{name}(self, ...)`` on a Symbol.'
    return method


for _name in _METHODS:
    setattr(_Symbol, _name, _method(_name))


def _ops():
    from ember.numpy import _op
    return _op


def as_np_symbol(sym):
    """`sym` (the same graph outputs) with ``mx.np``'s operators."""
    if isinstance(sym, _Symbol):
        return sym
    return _Symbol(sym._heads)


def var(name, **kwargs):
    """A graph input with ``mx.np``'s operators (``mx.sym.var`` otherwise)."""
    return as_np_symbol(_symbol.var(name, **kwargs))


def create(op, inputs, attrs):
    """The node of `op` on symbols `inputs`; one Symbol per visible output (a list for
    several)."""
    sym = _create(op, op.name.lower().lstrip('_'), list(inputs), None, attrs)
    heads = sym._heads
    if len(heads) == 1:
        return _Symbol(heads)
    return [_Symbol([head]) for head in heads]


def _slice(sym, key):
    """Basic indexing (ints, slices, None, Ellipsis) of a symbol of unknown shape."""
    from ember.numpy.multiarray import apply
    return apply('_npi_basic_index', [sym], {'key': key})


multiarray._hooks.symbol_node = create          # mx.np functions given Symbols build nodes
