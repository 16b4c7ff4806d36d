"""``mx.mod.SequentialModule``: modules chained, each one's outputs the next one's data.

>>> import numpy as np
>>> import ember as mx
>>> first = mx.mod.Module(mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=3, name='fc1'),
...                       label_names=None)
>>> second = mx.mod.Module(mx.sym.SoftmaxOutput(mx.sym.FullyConnected(
...     mx.sym.var('data'), num_hidden=2, name='fc2'), name='softmax'))
>>> chain = SequentialModule().add(first).add(second, take_labels=True, auto_wiring=True)
>>> it = mx.io.NDArrayIter(np.ones((4, 5)), np.zeros(4), batch_size=2)
>>> chain.fit(it, num_epoch=1)
>>> chain.predict(it).shape
(4, 2)
"""
from __future__ import annotations

import copy
import logging

from ember.initializer import Uniform
from ember.module.base_module import BaseModule

__all__ = ['SequentialModule', 'BaseModule', 'Uniform']


class SequentialModule(BaseModule):
    """A chain of modules. ``add(module, take_labels=True)`` gives a module the labels (the
    loss at the end); ``auto_wiring=True`` renames the previous outputs to its data names."""

    META_TAKE_LABELS = 'take_labels'
    META_AUTO_WIRING = 'auto_wiring'

    def __init__(self, logger=logging):
        super().__init__(logger=logger)
        self._modules = []
        self._metas = []
        self._label_shapes = None
        self._data_shapes = None
        self._meta_keys = {self.META_TAKE_LABELS, self.META_AUTO_WIRING}

    def add(self, module, **kwargs):
        """Append `module` (options: take_labels, auto_wiring); returns self to chain."""
        unknown = sorted(set(kwargs) - self._meta_keys)
        if unknown:
            raise ValueError(f'SequentialModule.add: unknown options {unknown}; it takes '
                             f'{sorted(self._meta_keys)}')
        self._modules.append(module)
        self._metas.append(kwargs)
        self.binded = self.params_initialized = self.optimizer_initialized = False
        return self

    @property
    def data_names(self):
        return self._modules[0].data_names if self._modules else []

    @property
    def output_names(self):
        return self._modules[-1].output_names if self._modules else []

    def _check_bound(self):
        if not self.binded:
            raise RuntimeError('SequentialModule: call bind() first')

    @property
    def data_shapes(self):
        self._check_bound()
        return self._modules[0].data_shapes

    @property
    def label_shapes(self):
        self._check_bound()
        return self._label_shapes

    @property
    def output_shapes(self):
        self._check_bound()
        return self._modules[-1].output_shapes

    def get_params(self):
        self._check_ready('get_params')
        arg_params, aux_params = {}, {}
        for module in self._modules:
            args, aux = module.get_params()
            arg_params.update(args)
            aux_params.update(aux)
        return arg_params, aux_params

    def init_params(self, initializer=Uniform(0.01), arg_params=None, aux_params=None,
                    allow_missing=False, force_init=False, allow_extra=False):
        if self.params_initialized and not force_init:
            return
        self._check_bound()
        for module in self._modules:
            module.init_params(initializer=initializer, arg_params=arg_params,
                               aux_params=aux_params, allow_missing=allow_missing,
                               force_init=force_init, allow_extra=allow_extra)
        self._check_unique_names()
        self.params_initialized = True

    def _check_unique_names(self):
        owners = [{}, {}]
        for index, module in enumerate(self._modules):
            for names, params in zip(owners, module.get_params()):
                for name in params:
                    if name in names:
                        raise ValueError(f'parameter {name!r} of module {index} '
                                         f'({type(module).__name__}) is also in module '
                                         f'{names[name]}: names must be unique in the chain')
                    names[name] = index

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False,
             force_rebind=False, shared_module=None, grad_req='write'):
        if self.binded and not force_rebind:
            self.logger.warning('Already bound, ignoring bind()')
            return
        if inputs_need_grad and not for_training:
            raise ValueError('inputs_need_grad needs for_training')
        if shared_module is not None:
            raise ValueError('SequentialModule cannot share another module\'s memory')
        if not self._modules:
            raise ValueError('SequentialModule: add modules before bind()')
        self.binded = True
        self.for_training, self.inputs_need_grad = for_training, inputs_need_grad
        self._label_shapes, shapes, labels_used = label_shapes, data_shapes, False
        for index, (module, meta) in enumerate(zip(self._modules, self._metas)):
            takes_labels = bool(meta.get(self.META_TAKE_LABELS))
            labels_used |= takes_labels
            if meta.get(self.META_AUTO_WIRING):
                shapes = self._wired(module, shapes)
            module.bind(data_shapes=shapes, label_shapes=label_shapes if takes_labels else None,
                        for_training=for_training,
                        inputs_need_grad=bool(inputs_need_grad or (for_training and index > 0)),
                        force_rebind=force_rebind, shared_module=None, grad_req=grad_req)
            shapes = module.output_shapes
        if not labels_used:
            self._label_shapes = None

    @staticmethod
    def _wired(module, shapes):
        if len(module.data_names) != len(shapes):
            raise ValueError(f'auto_wiring: {len(shapes)} outputs for data '
                             f'{module.data_names}')
        return [(name, desc[1]) for name, desc in zip(module.data_names, shapes)]

    def init_optimizer(self, kvstore='local', optimizer='sgd',
                       optimizer_params=(('learning_rate', 0.01),), force_init=False):
        self._check_ready('init_optimizer')
        if self.optimizer_initialized and not force_init:
            self.logger.warning('optimizer already initialized, ignoring.')
            return
        for module in self._modules:
            module.init_optimizer(kvstore=kvstore, optimizer=optimizer,
                                  optimizer_params=optimizer_params, force_init=force_init)
        self.optimizer_initialized = True

    def forward(self, data_batch, is_train=None):
        self._check_ready('forward')
        batch = copy.copy(data_batch)
        for index, module in enumerate(self._modules):
            module.forward(batch, is_train=is_train)
            if index + 1 == len(self._modules):
                break
            batch.data = module.get_outputs()
            if hasattr(batch, 'provide_data'):
                names = [shape[0] for shape in module.output_shapes]
                batch.provide_data = [(name, x.shape) for name, x in zip(names, batch.data)]

    def backward(self, out_grads=None):
        self._check_ready('backward')
        for index in range(len(self._modules) - 1, -1, -1):
            self._modules[index].backward(out_grads=out_grads)
            if index > 0:
                out_grads = self._modules[index].get_input_grads()

    def update(self):
        if not self.optimizer_initialized:
            raise RuntimeError('SequentialModule: call init_optimizer() before update()')
        for module in self._modules:
            module.update()

    def get_outputs(self, merge_multi_context=True):
        self._check_ready('get_outputs')
        return self._modules[-1].get_outputs(merge_multi_context=merge_multi_context)

    def get_input_grads(self, merge_multi_context=True):
        self._check_ready('get_input_grads')
        if not self.inputs_need_grad:
            raise RuntimeError('bind with inputs_need_grad=True to get the input gradients')
        return self._modules[0].get_input_grads(merge_multi_context=merge_multi_context)

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        self._check_ready('update_metric')
        for meta, module in zip(self._metas, self._modules):
            if meta.get(self.META_TAKE_LABELS):
                module.update_metric(eval_metric, labels, pre_sliced)

    def install_monitor(self, mon):
        self._check_bound()
        for module in self._modules:
            module.install_monitor(mon)
