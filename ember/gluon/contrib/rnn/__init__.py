"""``mx.gluon.contrib.rnn``: convolutional recurrent cells, LSTMP, variational dropout."""
from ember.gluon.contrib.rnn import conv_rnn_cell, rnn_cell
from ember.gluon.contrib.rnn.conv_rnn_cell import *  # noqa: F401,F403
from ember.gluon.contrib.rnn.rnn_cell import *  # noqa: F401,F403

__all__ = conv_rnn_cell.__all__ + rnn_cell.__all__ + ['conv_rnn_cell', 'rnn_cell']
