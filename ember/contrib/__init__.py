"""MXNet's ``mx.contrib``: contributed APIs (the first autograd interface, the DataLoader as a
``mx.io`` iterator, ``amp``: automatic mixed precision, ``text``: vocabularies and token
embeddings, ``svrg_optimization``: variance-reduced Module training). ``mx.contrib.nd``/``sym`` are the
contrib operators of ``mx.nd`` and ``mx.sym`` where this build has them."""
import importlib as _importlib

from ember.contrib import autograd, io, svrg_optimization, text

__all__ = ['autograd', 'io', 'amp', 'nd', 'ndarray', 'sym', 'symbol', 'svrg_optimization', 'text']

_OPERATORS = {'ndarray': 'ember.ndarray.contrib', 'nd': 'ember.ndarray.contrib',
              'symbol': 'ember.symbol.contrib', 'sym': 'ember.symbol.contrib'}


def __getattr__(name):
    if name == 'amp':           # loaded on first use: it imports Gluon's layers
        module = _importlib.import_module('ember.contrib.amp')
        globals()[name] = module
        return module
    if name in _OPERATORS:
        try:
            return _importlib.import_module(_OPERATORS[name])
        except ModuleNotFoundError:
            pass
    raise AttributeError(f"module 'ember.contrib' has no attribute {name!r}")
