"""Optimizers (MXNet 1.x's ``mx.optimizer``): SGD, NAG, Signum, Adam, AdamW, RMSProp, AdaGrad,
AdaDelta, Ftrl, FTML, LAMB, Adamax, Nadam, LARS, LBSGD, DCASGD, SGLD, Test (and GroupAdaGrad in
``contrib``); the Updater that holds their states.

Each update is one update operator of :mod:`ember.op.optimizer_ops` (one engine operation);
SGD updates up to ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` weights with one operator.

>>> import ember as mx
>>> opt = mx.optimizer.create('nag', learning_rate=0.1, momentum=0.9)
>>> updater = mx.optimizer.get_updater(opt)
>>> weight = mx.nd.ones((2,))
>>> updater(0, mx.nd.ones((2,)), weight)
>>> weight.asnumpy()
array([0.81, 0.81], dtype=float32)
"""
from ember.optimizer.optimizer import Optimizer, create, register
from ember.optimizer.sgd import NAG, SGD, Signum, ccSGD
from ember.optimizer.adaptive import (FTML, FTRL, LAMB, AdaDelta, AdaGrad, Adam, Adamax, AdamW,
                                      Ftrl, Nadam, RMSProp)
from ember.optimizer.sgd_variants import DCASGD, LARS, LBSGD, SGLD, Test
from ember.optimizer.updater import Updater, get_updater
from ember.optimizer import contrib, optimizer
from ember.optimizer.optimizer import NDabs

# MXNet defines every optimizer in mxnet.optimizer.optimizer; Ember's live in modules that
# import optimizer.py, so the package lists them there as well.
for _name in ('SGD', 'ccSGD', 'NAG', 'Signum', 'Adam', 'RMSProp', 'AdaGrad', 'AdaDelta', 'Ftrl',
              'FTML', 'LAMB', 'Adamax', 'Nadam', 'LARS', 'LBSGD', 'DCASGD', 'SGLD', 'Test',
              'Updater', 'get_updater'):
    setattr(optimizer, _name, globals()[_name])
    optimizer.__all__.append(_name)

__all__ = ['Optimizer', 'create', 'register', 'SGD', 'ccSGD', 'NAG', 'Signum', 'Adam', 'AdamW',
           'RMSProp', 'AdaGrad', 'AdaDelta', 'Ftrl', 'FTRL', 'FTML', 'LAMB', 'Adamax', 'Nadam',
           'LARS', 'LBSGD', 'DCASGD', 'SGLD', 'Test', 'Updater', 'get_updater', 'NDabs',
           'contrib', 'optimizer']
