"""Gluon's neural-network layers (``mx.gluon.nn``), as in MXNet 1.x."""
from ember.gluon.block import Block, HybridBlock
from ember.gluon.nn.activations import *  # noqa: F401,F403
from ember.gluon.nn.activations import __all__ as _activations
from ember.gluon.nn.basic_layers import *  # noqa: F401,F403
from ember.gluon.nn.basic_layers import __all__ as _basic
from ember.gluon.nn.conv_layers import *  # noqa: F401,F403
from ember.gluon.nn.conv_layers import __all__ as _conv
from ember.gluon.symbol_block import SymbolBlock  # MXNet's mx.gluon.nn has it too

__all__ = (['Block', 'HybridBlock', 'SymbolBlock'] + _activations + _basic + _conv
           + ['activations', 'basic_layers', 'conv_layers'])
