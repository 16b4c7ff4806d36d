"""Checkpoints of models built from ``mx.rnn`` cells: saved with each cell's weights split
per gate (``unpack_weights``), packed again when loaded (MXNet's ``mx.rnn.rnn``).

>>> import ember as mx
>>> cell = mx.rnn.GRUCell(2, prefix='g_')
>>> saver = do_rnn_checkpoint(cell, '/tmp/unused', period=2)
>>> callable(saver)
True
"""
from __future__ import annotations

import warnings

from ember.model import load_checkpoint, save_checkpoint
from ember.rnn.rnn_cell import BaseRNNCell

__all__ = ['rnn_unroll', 'save_rnn_checkpoint', 'load_rnn_checkpoint', 'do_rnn_checkpoint',
           'BaseRNNCell', 'save_checkpoint', 'load_checkpoint']


def _as_cells(cells):
    return [cells] if isinstance(cells, BaseRNNCell) else list(cells)


def rnn_unroll(cell, length, inputs=None, begin_state=None, input_prefix='', layout='NTC'):
    """Deprecated: ``cell.unroll(length, inputs, begin_state, layout)``."""
    warnings.warn('rnn_unroll is deprecated; call cell.unroll', DeprecationWarning, stacklevel=2)
    return cell.unroll(length, inputs=inputs, begin_state=begin_state, layout=layout)


def save_rnn_checkpoint(cells, prefix, epoch, symbol, arg_params, aux_params):
    """``save_checkpoint`` with the weights of `cells` (a cell or a list) split per gate."""
    for cell in _as_cells(cells):
        arg_params = cell.unpack_weights(arg_params)
    save_checkpoint(prefix, epoch, symbol, arg_params, aux_params)


def load_rnn_checkpoint(cells, prefix, epoch):
    """(symbol, arg_params, aux_params) of a checkpoint, the weights of `cells` packed again."""
    symbol, args, aux = load_checkpoint(prefix, epoch)
    for cell in _as_cells(cells):
        args = cell.pack_weights(args)
    return symbol, args, aux


def do_rnn_checkpoint(cells, prefix, period=1):
    """An epoch-end callback for ``Module.fit`` that saves an RNN checkpoint every `period`
    epochs."""
    period = int(max(1, period))

    def save(iter_no, sym=None, arg=None, aux=None):
        if (iter_no + 1) % period == 0:
            save_rnn_checkpoint(cells, prefix, iter_no + 1, sym, arg, aux)
    return save
