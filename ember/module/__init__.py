"""The Module API of MXNet 1.x (``mx.mod``): a symbol bound to devices with its parameters
and optimizer, trained with ``fit`` and evaluated with ``score`` and ``predict``.

>>> import numpy as np
>>> import ember as mx
>>> net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2,
...                                                  name='fc'), name='softmax')
>>> mod = Module(net)
>>> it = mx.io.NDArrayIter(np.ones((8, 3)), np.zeros(8), batch_size=4)
>>> mod.fit(it, num_epoch=1, optimizer_params={'learning_rate': 0.1})
>>> mod.predict(it).shape
(8, 2)
"""
from ember import callback as _callback
from ember.module.base_module import BaseModule
from ember.module.bucketing_module import BucketingModule
from ember.module.checkpoint import load_checkpoint, load_params, save_checkpoint
from ember.module.executor_group import DataParallelExecutorGroup
from ember.module.module import Module
from ember.module.python_module import PythonLossModule, PythonModule
from ember.module.sequential_module import SequentialModule

__all__ = ['BaseModule', 'Module', 'BucketingModule', 'DataParallelExecutorGroup',
           'save_checkpoint', 'load_checkpoint', 'load_params', 'base_module', 'bucketing_module',
           'executor_group', 'module', 'PythonModule', 'PythonLossModule', 'SequentialModule',
           'python_module', 'sequential_module']

# mx.callback.do_checkpoint saves through this (the callback layer cannot import us).
_callback.set_checkpoint_saver(save_checkpoint)
