"""MXNet 1.x's ``mx.rnn``: symbolic recurrent cells, bucketing sentence iterators and
checkpoints that store the cells' weights per gate.

>>> import ember as mx
>>> stack = mx.rnn.SequentialRNNCell()
>>> stack.add(mx.rnn.GRUCell(3, prefix='gru0_'))
>>> stack.add(mx.rnn.DropoutCell(0.5))
>>> outputs, states = stack.unroll(2, mx.sym.var('data'), layout='TNC', merge_outputs=True)
>>> outputs.infer_shape(data=(2, 4, 6))[1]
[(2, 4, 3)]
"""
from ember import initializer as init  # noqa: F401  (MXNet's mx.rnn names these modules)
from ember import ndarray, symbol  # noqa: F401
from ember.rnn import io, rnn, rnn_cell
from ember.rnn.io import *  # noqa: F401,F403
from ember.rnn.rnn import *  # noqa: F401,F403
from ember.rnn.rnn_cell import *  # noqa: F401,F403
