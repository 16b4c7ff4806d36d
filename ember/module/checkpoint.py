"""Checkpoints in MXNet 1.x's files: ``prefix-symbol.json`` and ``prefix-%04d.params``.

The parameters file is an NDArray list (MXNet's binary format) with keys ``arg:<name>`` for
arguments and ``aux:<name>`` for auxiliary states, so checkpoints move between Ember and MXNet
both ways. ``mx.model`` re-exports these functions (MXNet's home for them); they live here
because the Module API, a layer below ``mx.model``, saves and loads checkpoints too.

>>> import os, tempfile
>>> import ember as mx
>>> net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2, name='fc')
>>> prefix = os.path.join(tempfile.mkdtemp(), 'net')
>>> save_checkpoint(prefix, 3, net, {'fc_weight': mx.nd.ones((2, 4)),
...                                  'fc_bias': mx.nd.zeros((2,))}, {})
>>> symbol, arg_params, aux_params = load_checkpoint(prefix, 3)
>>> symbol.list_arguments(), sorted(arg_params), aux_params
(['data', 'fc_weight', 'fc_bias'], ['fc_bias', 'fc_weight'], {})
"""
from __future__ import annotations

import logging

from ember import symbol as sym
from ember.device import cpu
from ember.ndarray import io as nd_io

__all__ = ['save_checkpoint', 'load_checkpoint', 'load_params', 'save_params_file',
           'load_params_file', 'params_file', 'symbol_file']


def symbol_file(prefix):
    """``prefix-symbol.json``."""
    return f'{prefix}-symbol.json'


def params_file(prefix, epoch):
    """``prefix-0001.params`` for epoch 1."""
    return f'{prefix}-{epoch:04d}.params'


def save_checkpoint(prefix, epoch, symbol, arg_params, aux_params, remove_amp_cast=True):
    """Save `symbol` (unless None) as ``prefix-symbol.json`` and the parameters as
    ``prefix-%04d.params`` (`epoch`), in MXNet's formats."""
    if symbol is not None:
        symbol.save(symbol_file(prefix), remove_amp_cast=remove_amp_cast)
    name = params_file(prefix, epoch)
    save_params_file(name, arg_params, aux_params)
    logging.info('Saved checkpoint to "%s"', name)


def save_params_file(fname, arg_params, aux_params):
    """Write the parameters to `fname` as ``arg:<name>``/``aux:<name>`` arrays."""
    save_dict = {f'arg:{k}': v.as_in_context(cpu()) for k, v in arg_params.items()}
    save_dict.update({f'aux:{k}': v.as_in_context(cpu()) for k, v in aux_params.items()})
    nd_io.save(fname, save_dict)


def load_params(prefix, epoch):
    """(arg_params, aux_params) of ``prefix-%04d.params``."""
    return load_params_file(params_file(prefix, epoch))


def load_params_file(fname):
    """(arg_params, aux_params) of a file of ``arg:<name>``/``aux:<name>`` arrays."""
    save_dict = nd_io.load(fname)
    if not save_dict:
        logging.warning("Params file '%s' is empty", fname)
        return {}, {}
    if not isinstance(save_dict, dict):
        raise ValueError(f'{fname}: holds a list of {len(save_dict)} unnamed arrays; a '
                         f'checkpoint holds arrays named arg:<name> and aux:<name>')
    arg_params, aux_params = {}, {}
    for key, value in save_dict.items():
        kind, _, param = key.partition(':')
        if kind == 'arg':
            arg_params[param] = value
        elif kind == 'aux':
            aux_params[param] = value
        else:
            raise ValueError(f'{fname}: array {key!r} is neither arg:<name> nor aux:<name>')
    return arg_params, aux_params


def load_checkpoint(prefix, epoch):
    """(symbol, arg_params, aux_params) saved by :func:`save_checkpoint` (or MXNet)."""
    symbol = sym.load(symbol_file(prefix))
    arg_params, aux_params = load_params(prefix, epoch)
    return symbol, arg_params, aux_params
