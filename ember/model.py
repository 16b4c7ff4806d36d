"""``mx.model``: checkpoints in MXNet 1.x's files, and ``BatchEndParam``.

``save_checkpoint`` writes ``prefix-symbol.json`` and ``prefix-%04d.params`` (arrays named
``arg:<name>`` and ``aux:<name>``, MXNet's binary format); ``load_checkpoint`` reads them back,
from Ember or from MXNet. Importing this module installs ``save_checkpoint`` as the saver of
``mx.callback.do_checkpoint``.

>>> import os, tempfile
>>> import ember as mx
>>> net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2, name='fc')
>>> prefix = os.path.join(tempfile.mkdtemp(), 'net')
>>> mx.callback.do_checkpoint(prefix)(0, net, {'fc_weight': mx.nd.ones((2, 3)),
...                                           'fc_bias': mx.nd.zeros((2,))}, {})
>>> sorted(os.listdir(os.path.dirname(prefix)))
['net-0001.params', 'net-symbol.json']
>>> symbol, arg_params, aux_params = mx.model.load_checkpoint(prefix, 1)
>>> float(arg_params['fc_weight'].asnumpy().sum())
6.0
"""
from ember import callback as _callback
from ember.callback import BatchEndParam
from ember.module.checkpoint import load_checkpoint, load_params, save_checkpoint

__all__ = ['BatchEndParam', 'save_checkpoint', 'load_checkpoint', 'load_params']

_callback.set_checkpoint_saver(save_checkpoint)
