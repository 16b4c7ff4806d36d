"""``mx.sym``: symbols, the graph IR, MXNet's JSON format, and one function per operator.

Operator functions are generated from the registry (``ember.symbol.register``); the names
starting with ``_`` (hidden ``_backward_*`` operators included) are also in
``mx.sym._internal``, as in MXNet. An operator registered after this package was imported is
found on first use. The graph IR that passes work on is in ``ember.symbol.graph``.

>>> import ember.symbol as sym
>>> data = sym.var('data')
>>> net = sym.FullyConnected(data, num_hidden=8, name='fc1')
>>> net = sym.Activation(net, act_type='relu', name='relu1')
>>> net = sym.SoftmaxOutput(sym.FullyConnected(net, num_hidden=3, name='fc2'), name='softmax')
>>> net.list_arguments()
['data', 'fc1_weight', 'fc1_bias', 'fc2_weight', 'fc2_bias', 'softmax_label']
>>> arg_shapes, out_shapes, aux_shapes = net.infer_shape(data=(4, 10))
>>> arg_shapes[1], out_shapes
((8, 10), [(4, 3)])
"""
from __future__ import annotations

import sys as _sys
import types as _types

from ember import ndarray as _ndarray_package
from ember.op import frontend as _frontend
from ember.op import registry as _registry
from ember.symbol import graph, image, infer, json_io  # noqa: F401
from ember.symbol import symbol as _symbol
from ember.symbol.attribute import AttrScope  # noqa: F401
from ember.symbol.name import NameManager, Prefix  # noqa: F401
from ember.symbol.symbol import (Group, NotImplementedForSymbol, Symbol, Variable,  # noqa: F401
                                 fromjson, load, load_json, node_symbols, var)
from ember.symbol import creation as _creation
from ember.symbol import tape as _tape  # noqa: F401  (installs autograd.get_symbol's builder)
from ember.symbol.creation import *  # noqa: F401,F403
from ember.symbol.register import make_function as _make_function
from ember.symbol import contrib, linalg, random, sparse  # noqa: F401
from ember.symbol import functions as _functions
from ember.symbol.functions import *  # noqa: F401,F403

_symbol.bind_namespace(_sys.modules[__name__])      # the operator methods call into mx.sym
# MXNet defines these functions in mxnet.symbol.symbol; Ember's live in creation and
# functions, which import symbol.py, so the package lists them there as well.
for _module in (_creation, _functions):
    for _name in _module.__all__:
        if not hasattr(_symbol, _name):
            setattr(_symbol, _name, getattr(_module, _name))
            _symbol.__all__.append(_name)

_internal = _types.ModuleType('ember.symbol._internal',
                              'Operators whose names start with an underscore.')
# mx.sym.op: the operator functions alone (the same objects as mx.sym's), as MXNet's module
op = _types.ModuleType('ember.symbol.op', 'The function of every public operator.')
_sys.modules[op.__name__] = op
_generator = _frontend.Generator(globals(), _internal, _make_function, 'ember.symbol',
                                 public=op)


_LATE_NAMESPACES = ('np', 'numpy', 'npx', 'numpy_extension')


def __getattr__(name):
    if name in _LATE_NAMESPACES:     # mx.sym.np comes with mx.np, as mx.nd.np
        _ndarray_package.late_namespaces[name]()
        return globals()[name]
    return _generator.getattr(name)


op.__getattr__ = _generator.public_getattr
_generator.populate()

__all__ = sorted(['Symbol', 'var', 'Variable', 'Group', 'load', 'load_json', 'fromjson',
                  'AttrScope', 'NameManager', 'Prefix', 'NotImplementedForSymbol', 'graph', 'image',
                  'contrib', 'linalg', 'random', 'sparse', 'numpy', 'numpy_extension', 'op']
                 + list(_creation.__all__) + list(_functions.__all__)
                 + [n for n in _registry.all_ops() if not n.startswith('_')
                    and n not in _generator.hand_written])
op.__all__ = sorted(n for n in _registry.all_ops() if not n.startswith('_'))
