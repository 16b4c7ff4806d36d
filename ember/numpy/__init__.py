"""``mx.np``: MXNet's NumPy-compatible interface on Ember's engine and autograd.

Arrays are :class:`ndarray` (an NDArray with NumPy's interface); functions follow NumPy's
signatures and results, with MXNet's deliberate differences (float32 as the default float,
see :mod:`ember.op.np_rules`). NumPy functions that MXNet offers without an operator of its
own run on host copies (:mod:`ember.numpy.fallback`). ``mx.nd.np`` and ``mx.sym.np`` are the
same functions, the latter making creation functions (``zeros``, ``arange``) graph nodes for
``hybrid_forward(F, ...)``.

>>> import ember as mx
>>> from ember import numpy as np
>>> x = np.array([[1., 2.], [3., 4.]])
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = (np.sin(x) * x).sum()
>>> y.backward()
>>> np.allclose(x.grad, np.cos(x) * x + np.sin(x))
True
"""
from __future__ import annotations

import sys as _sys
import types as _types

from ember.numpy import _op, multiarray, symbol, utils  # noqa: F401
from ember.numpy import fallback as _fallback_module
from ember.numpy.multiarray import ndarray, array  # noqa: F401
from ember.numpy.utils import *  # noqa: F401,F403
from ember.numpy import linalg, random, fallback, fallback_linalg  # noqa: F401
from ember.numpy import arrayprint, function_base, io, stride_tricks  # noqa: F401
from ember.numpy.io import genfromtxt  # noqa: F401

_PUBLIC_OPS = sorted(n for n, v in vars(_op).items()
                     if not n.startswith('_') and callable(v)
                     and getattr(v, '__module__', '') == 'ember.numpy._op'
                     and n not in ('where_',))

for _name in _PUBLIC_OPS:
    globals()[_name] = getattr(_op, _name)
for _name in _fallback_module.__all__:
    if _name not in globals():
        globals()[_name] = getattr(_fallback_module, _name)

multiarray.hold_every_function({n: globals()[n] for n in _PUBLIC_OPS + list(
    _fallback_module.__all__)})

__all__ = sorted(set(['ndarray', 'array', 'random', 'linalg', 'fallback', 'fallback_linalg',
                      'arrayprint', 'function_base', 'io', 'multiarray', 'stride_tricks',
                      'utils', 'genfromtxt'] + list(utils.__all__) + _PUBLIC_OPS
                     + list(_fallback_module.__all__)))


# ----------------------------------------------------------------------------------------------
# ``mx.nd.np`` and ``mx.sym.np``: the namespaces ``hybrid_forward(F, ...)`` reaches as F.np.

_CREATION = ('zeros', 'ones', 'full', 'empty', 'eye', 'identity', 'arange', 'linspace',
             'logspace', 'indices', 'hanning', 'hamming', 'blackman')

# Functions that MXNet's mx.nd.np and mx.sym.np generate from operators: their first argument
# may be given by the operator's input name, and they take ``name`` (and ``attr``).
_OPERATOR_STYLE = {'all': 'data', 'any': 'data', 'sometrue': 'data', 'diag': 'data',
                   'diagflat': 'data', 'diagonal': 'data', 'repeat': 'data', 'roll': 'data',
                   'trace': 'data', 'amax': 'a', 'amin': 'a', 'max': 'a', 'min': 'a',
                   'copy': 'a', 'cumsum': 'a', 'dot': 'a', 'moveaxis': 'a', 'prod': 'a',
                   'product': 'a', 'reshape': 'a', 'squeeze': 'a', 'sum': 'a',
                   'transpose': 'a', 'atleast_1d': None, 'atleast_2d': None,
                   'atleast_3d': None}


def _namespace(module_name, symbolic):
    namespace = _types.ModuleType(module_name, f'``mx.np`` for hybrid_forward(F, ...): '
                                               f'{"graph nodes" if symbolic else "arrays"}.')
    for name in __all__:
        setattr(namespace, name, globals()[name])
    namespace._internal = _types.ModuleType(module_name + '._internal',
                                            'Operators registered by numpy_op_fallback.')
    for name, first in _OPERATOR_STYLE.items():
        setattr(namespace, name, _operator_style(globals()[name], first))
    if symbolic:
        for name in _CREATION:
            setattr(namespace, name, _in_graph(getattr(namespace, name)))
        namespace.random = _types.ModuleType(module_name + '.random', random.__doc__)
        for name in random.__all__:
            setattr(namespace.random, name, _in_graph(getattr(random, name)))
        namespace.random.shuffle = _shuffled
    return namespace


def _operator_style(function, first):
    """`function` taking its first argument also by the operator's input name `first`, and
    MXNet's ``name`` / ``attr`` of generated operator functions (graph node names are
    Ember's own, so they are not used)."""
    def call(*args, name=None, attr=None, **kwargs):
        if first is not None and first in kwargs:
            args = (kwargs.pop(first),) + args
        return function(*args, **kwargs)
    call.__name__ = call.__qualname__ = function.__name__
    call.__doc__ = function.__doc__
    return call


def _in_graph(function):
    """`function` building graph nodes even without Symbol arguments (creation, sampling)."""
    def call(*args, **kwargs):
        kwargs.pop('ctx', None)
        with multiarray.building_graph():
            return function(*args, **kwargs)
    call.__name__ = call.__qualname__ = function.__name__
    call.__doc__ = function.__doc__
    call.__signature__ = _signature_of(function)
    return call


def _shuffled(x):
    """``mx.sym.np.random.shuffle``: the symbol of `x` with its first axis shuffled."""
    return multiarray.apply('_npi_shuffle', [x])


def _signature_of(function):
    import inspect
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None


ndarray_namespace = _namespace('ember.ndarray.numpy', symbolic=False)
symbol_namespace = _namespace('ember.symbol.numpy', symbolic=True)


def _attach():
    """``mx.nd.np``, ``mx.sym.np``, and the conversions MXNet's NDArray and Symbol have."""
    from ember import ndarray as _nd
    from ember import symbol as _sym
    from ember.numpy.symbol import as_np_symbol
    _nd.np = _nd.numpy = ndarray_namespace
    _sym.np = _sym.numpy = symbol_namespace
    _nd.NDArray.as_np_ndarray = multiarray.as_np
    _nd.NDArray.as_nd_ndarray = lambda self: self
    _sym.Symbol.as_np_ndarray = as_np_symbol
    _sym.Symbol.as_nd_ndarray = lambda self: self
    _sys.modules.setdefault('ember.ndarray.numpy', ndarray_namespace)
    _sys.modules.setdefault('ember.symbol.numpy', symbol_namespace)


_attach()
