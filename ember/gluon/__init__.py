"""Gluon: imperative and hybridizable networks (MXNet 1.x's ``mx.gluon``)."""
import importlib as _importlib

from ember.gluon import block
from ember.gluon.block import Block, HybridBlock
from ember.gluon.parameter import (Constant, DeferredInitializationError, Parameter, ParameterDict,
                                   tensor_types)
from ember.gluon.symbol_block import SymbolBlock

# MXNet defines SymbolBlock in mxnet.gluon.block; Ember's imports block.py, so the package
# lists it there as well.
block.SymbolBlock = SymbolBlock
block.__all__.append('SymbolBlock')

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
    raise AttributeError(f"module 'ember.gluon' has no attribute {name!r}")


__all__ = ['Block', 'HybridBlock', 'Parameter', 'ParameterDict', 'Constant', 'Trainer', 'nn',
           'loss', 'utils', 'data', 'rnn', 'model_zoo', 'DeferredInitializationError',
           'SymbolBlock', 'block', 'parameter', 'trainer', 'contrib', 'tensor_types']
