"""Gluon: imperative and hybridizable networks (MXNet 1.x's ``mx.gluon``)."""
import importlib as _importlib

from ember.gluon.block import Block, HybridBlock
from ember.gluon.parameter import (Constant, DeferredInitializationError, Parameter, ParameterDict,
                                   tensor_types)

# Sub-packages load on first use so that `import ember` stays quick.
_LAZY = ('nn', 'loss', 'data', 'utils', 'rnn', 'model_zoo', 'contrib', 'trainer')


def __getattr__(name):
    if name in _LAZY:
        module = _importlib.import_module(f'ember.gluon.{name}')
        globals()[name] = module
        return module
    if name == 'Trainer':
        from ember.gluon.trainer import Trainer
        globals()['Trainer'] = Trainer
        return Trainer
    if name == 'SymbolBlock':
        from ember.gluon.symbol_block import SymbolBlock
        return SymbolBlock
    raise AttributeError(f"module 'ember.gluon' has no attribute {name!r}")


__all__ = ['Block', 'HybridBlock', 'Parameter', 'ParameterDict', 'Constant', 'Trainer', 'nn',
           'loss', 'utils', 'data', 'rnn', 'model_zoo', 'DeferredInitializationError',
           'SymbolBlock', 'block', 'parameter', 'trainer', 'contrib', 'tensor_types']
