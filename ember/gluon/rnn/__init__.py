"""Recurrent layers and cells (``mx.gluon.rnn``), as in MXNet 1.x.

The layers (RNN, LSTM, GRU) run whole sequences through the fused ``RNN`` operator; the cells
run one step at a time and can be unrolled, stacked, made bidirectional or wrapped by modifier
cells (dropout, zoneout, residual connections).
"""
from ember.gluon.rnn.rnn_cell import *  # noqa: F401,F403
from ember.gluon.rnn.rnn_cell import __all__ as _cells
from ember.gluon.rnn.rnn_layer import *  # noqa: F401,F403
from ember.gluon.rnn.rnn_layer import __all__ as _layers

__all__ = _cells + _layers + ['rnn_cell', 'rnn_layer']
