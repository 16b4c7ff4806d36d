"""``mx.nd``: NDArray, the functions that make arrays, and one function per operator.

Operator functions are generated from the registry (``ember.ndarray.register``); the names
starting with ``_`` are also in ``mx.nd._internal``, as in MXNet. An operator registered after
this package was imported is found on first use.

>>> import ember.ndarray as nd
>>> a = nd.array([[1, 2], [3, 4]])
>>> nd.dot(a, a).asnumpy().tolist()
[[7.0, 10.0], [15.0, 22.0]]
>>> nd.sum(a, axis=1).asnumpy().tolist(), nd.concat(a, a, dim=0).shape
([3.0, 7.0], (4, 2))
"""
from __future__ import annotations

import sys as _sys
import types as _types

from ember.op import frontend as _frontend
from ember.op import registry as _registry
from ember.ndarray import ndarray as _ndarray
from ember.ndarray.ndarray import NDArray, View, invoke, waitall
from ember.ndarray import creation as _creation
from ember.ndarray.creation import *  # noqa: F401,F403
from ember.ndarray import image, indexing, io, random  # noqa: F401
from ember.ndarray.io import load, load_frombuffer, save  # noqa: F401
from ember.ndarray import contrib, linalg  # noqa: F401
from ember.ndarray import functions as _functions
from ember.ndarray.functions import *  # noqa: F401,F403
from ember.ndarray import sparse  # noqa: F401  (mx.nd.sparse; installs the storage path)
from ember.ndarray import utils  # noqa: F401
from ember.ndarray.utils import array, empty, zeros  # noqa: F401  (any storage type)
from ember.ndarray.register import make_function as _make_function

_ndarray.bind_namespace(_sys.modules[__name__])     # the operator methods call into mx.nd
# MXNet defines its dense array functions in mxnet.ndarray.ndarray; Ember's live in creation
# and functions, which import ndarray.py, so the package lists them there as well.
for _module in (_creation, _functions):
    for _name in _module.__all__:
        if not hasattr(_ndarray, _name):
            setattr(_ndarray, _name, getattr(_module, _name))
            _ndarray.__all__.append(_name)

_internal = _types.ModuleType('ember.ndarray._internal',
                              'Operators whose names start with an underscore.')
# mx.nd.op: the operator functions alone (the same objects as mx.nd's), as MXNet's module
op = _types.ModuleType('ember.ndarray.op', 'The function of every public operator.')
_sys.modules[op.__name__] = op
_generator = _frontend.Generator(globals(), _internal, _make_function, 'ember.ndarray',
                                 public=op)


# Namespaces that a higher layer provides (mx.nd.np comes with mx.np): name -> loader, filled
# in by that layer's registration (ember/__init__.py), looked up when the name is first asked.
late_namespaces: dict = {}


def __getattr__(name):
    if name in late_namespaces:
        return late_namespaces[name]()
    return _generator.getattr(name)


def _op_getattr(name):
    if name == 'CachedOp':
        return late_namespaces[name]()
    return _generator.public_getattr(name)


op.__getattr__ = _op_getattr


_generator.populate()

__all__ = sorted(['NDArray', 'View', 'invoke', 'waitall', 'random', 'indexing', 'image',
                  'contrib', 'linalg', 'sparse', 'numpy', 'numpy_extension', 'op', 'utils']
                 + list(_creation.__all__) + list(_functions.__all__)
                 + ['save', 'load', 'load_frombuffer']
                 + [n for n in _registry.all_ops() if not n.startswith('_')
                    and n not in _generator.hand_written])
op.__all__ = sorted([n for n in _registry.all_ops() if not n.startswith('_')] + ['CachedOp'])
__all__.append('CachedOp')
