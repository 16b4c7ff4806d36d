"""BucketingModule: one Module per input length (bucket), all sharing one set of parameters
(MXNet 1.x's ``mx.mod.BucketingModule``, for sequences of different lengths).

``sym_gen(bucket_key)`` returns ``(symbol, data_names, label_names)``. Each batch's
``bucket_key`` picks (or binds, sharing the default bucket's parameter arrays) the module that
runs it.

>>> import ember as mx
>>> def sym_gen(length):
...     data = mx.sym.mean(mx.sym.var('data'), axis=1)
...     net = mx.sym.FullyConnected(data, num_hidden=2, name='fc')
...     return mx.sym.SoftmaxOutput(net, name='softmax'), ('data',), ('softmax_label',)
>>> mod = BucketingModule(sym_gen, default_bucket_key=5)
>>> mod.bind(data_shapes=[('data', (4, 5, 3))], label_shapes=[('softmax_label', (4,))])
>>> mod.init_params()
>>> batch = mx.io.DataBatch([mx.nd.ones((4, 2, 3))], [mx.nd.zeros((4,))], bucket_key=2,
...                         provide_data=[('data', (4, 2, 3))],
...                         provide_label=[('softmax_label', (4,))])
>>> mod.forward(batch, is_train=False)
>>> mod.get_outputs()[0].shape, sorted(mod._buckets)
((4, 2), [2, 5])
"""
from __future__ import annotations

import logging
import warnings

from ember.device import cpu
from ember.initializer import Uniform
from ember.module.base_module import BaseModule, check_input_names
from ember.module.checkpoint import load_params
from ember.module.module import Module
from ember.symbol.name import NameManager

__all__ = ['BucketingModule', 'BaseModule', 'Module', 'Uniform', 'NameManager', 'load_params']


class BucketingModule(BaseModule):
    """Modules of ``sym_gen(bucket_key)`` for each bucket seen, sharing parameters and the
    optimizer with the module of `default_bucket_key` (bound by ``bind``)."""

    def __init__(self, sym_gen, default_bucket_key=None, logger=logging, context=cpu(),
                 work_load_list=None, fixed_param_names=None, state_names=None,
                 group2ctxs=None, compression_params=None):
        super().__init__(logger=logger)
        if default_bucket_key is None:
            raise ValueError('BucketingModule needs a default_bucket_key')
        self._default_bucket_key = default_bucket_key
        self._sym_gen = sym_gen
        symbol, data_names, label_names = sym_gen(default_bucket_key)
        check_input_names(symbol, list(data_names or []), 'data', True)
        check_input_names(symbol, list(label_names or []), 'label', False)
        check_input_names(symbol, list(state_names or []), 'state', True)
        check_input_names(symbol, list(fixed_param_names or []), 'fixed_param', True)
        self._module_args = dict(logger=logger, context=context, work_load_list=work_load_list,
                                 fixed_param_names=fixed_param_names, state_names=state_names,
                                 group2ctxs=group2ctxs, compression_params=compression_params)
        self._params_dirty = False
        self._monitor = None
        self._grad_req = None
        self._reset_bind()

    def _reset_bind(self):
        self.binded = False
        self._buckets = {}
        self._curr_module = None
        self._curr_bucket_key = None

    def _new_module(self, bucket_key):
        symbol, data_names, label_names = self._sym_gen(bucket_key)
        return Module(symbol, data_names, label_names, **self._module_args)

    # ------------------------------------------------------------------------------------------
    # Names and shapes (of the current bucket once bound, else of the default one)

    @property
    def default_bucket_key(self):
        return self._default_bucket_key

    @property
    def data_names(self):
        if self.binded:
            return self._curr_module.data_names
        return list(self._sym_gen(self._default_bucket_key)[1] or [])

    @property
    def output_names(self):
        if self.binded:
            return self._curr_module.output_names
        return self._sym_gen(self._default_bucket_key)[0].list_outputs()

    @property
    def data_shapes(self):
        self._check_bound('data_shapes')
        return self._curr_module.data_shapes

    @property
    def label_shapes(self):
        self._check_bound('label_shapes')
        return self._curr_module.label_shapes

    @property
    def output_shapes(self):
        self._check_bound('output_shapes')
        return self._curr_module.output_shapes

    @property
    def symbol(self):
        self._check_bound('symbol')
        return self._curr_module.symbol

    def _check_bound(self, what):
        if not self.binded:
            raise RuntimeError(f'{what} needs a bound module; call bind() first')

    # ------------------------------------------------------------------------------------------
    # Parameters

    def get_params(self):
        self._check_ready('get_params')
        self._curr_module._params_dirty = self._params_dirty
        params = self._curr_module.get_params()
        self._params_dirty = False
        return params

    def init_params(self, initializer=Uniform(0.01), arg_params=None, aux_params=None,
                    allow_missing=False, force_init=False, allow_extra=False):
        if self.params_initialized and not force_init:
            return
        self._check_bound('init_params')
        self._curr_module.init_params(initializer=initializer, arg_params=arg_params,
                                      aux_params=aux_params, allow_missing=allow_missing,
                                      force_init=force_init, allow_extra=allow_extra)
        self._params_dirty = False
        self.params_initialized = True

    def set_params(self, arg_params, aux_params, allow_missing=False, force_init=True,
                   allow_extra=False):
        if not allow_missing:
            self.init_params(initializer=None, arg_params=arg_params, aux_params=aux_params,
                             allow_missing=allow_missing, force_init=force_init,
                             allow_extra=allow_extra)
            return
        if self.params_initialized and not force_init:
            warnings.warn('Parameters already initialized and force_init=False. set_params '
                          'call ignored.', stacklevel=2)
            return
        self._curr_module.set_params(arg_params, aux_params, allow_missing=allow_missing,
                                     force_init=force_init, allow_extra=allow_extra)
        self._params_dirty = True
        self.params_initialized = True

    def get_states(self, merge_multi_context=True):
        self._check_ready('get_states')
        return self._curr_module.get_states(merge_multi_context=merge_multi_context)

    def set_states(self, states=None, value=None):
        self._check_ready('set_states')
        self._curr_module.set_states(states, value)

    # ------------------------------------------------------------------------------------------
    # Binding and buckets

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False,
             force_rebind=False, shared_module=None, grad_req='write'):
        """Bind the default bucket's module for these input shapes."""
        params = self.get_params() if self.params_initialized else None
        if force_rebind:
            self._reset_bind()
        if self.binded:
            self.logger.warning('Already bound, ignoring bind()')
            return
        if shared_module is not None:
            raise ValueError('shared_module for BucketingModule is not supported')
        self.for_training = for_training
        self.inputs_need_grad = inputs_need_grad
        self._grad_req = grad_req
        module = self._new_module(self._default_bucket_key)
        module.bind(data_shapes, label_shapes, for_training, inputs_need_grad,
                    force_rebind=False, shared_module=None, grad_req=grad_req)
        self._curr_module = module
        self._curr_bucket_key = self._default_bucket_key
        self._buckets[self._default_bucket_key] = module
        self.binded = True
        if params is not None:
            self.set_params(*params)

    def switch_bucket(self, bucket_key, data_shapes, label_shapes=None):
        """Make `bucket_key`'s module current, binding it (sharing the default module's
        parameters) the first time; a known bucket given new shapes is reshaped."""
        self._check_bound('switch_bucket')
        if bucket_key not in self._buckets:
            module = self._new_module(bucket_key)
            module.bind(data_shapes, label_shapes, self._curr_module.for_training,
                        self._curr_module.inputs_need_grad, force_rebind=False,
                        shared_module=self._buckets[self._default_bucket_key],
                        grad_req=self._grad_req)
            if self._monitor is not None:
                module.install_monitor(self._monitor)
            self._buckets[bucket_key] = module
        elif data_shapes is not None:
            module = self._buckets[bucket_key]
            if [tuple(d[1]) for d in data_shapes] != [tuple(d.shape)
                                                      for d in module.data_shapes]:
                module.reshape(data_shapes, label_shapes)
        self._curr_module = self._buckets[bucket_key]
        self._curr_bucket_key = bucket_key

    # ------------------------------------------------------------------------------------------
    # Optimizer and computations

    def init_optimizer(self, kvstore='local', optimizer='sgd',
                       optimizer_params=(('learning_rate', 0.01),), force_init=False):
        self._check_ready('init_optimizer')
        if self.optimizer_initialized and not force_init:
            self.logger.warning('optimizer already initialized, ignoring.')
            return
        self._curr_module.init_optimizer(kvstore, optimizer, optimizer_params,
                                         force_init=force_init)
        for module in self._buckets.values():
            if module is not self._curr_module:
                module.borrow_optimizer(self._curr_module)
        self.optimizer_initialized = True

    def prepare(self, data_batch, sparse_row_id_fn=None):
        """Bind the module of the batch's bucket ahead of its forward."""
        self._check_bound('prepare')
        current = self._curr_bucket_key
        self.switch_bucket(data_batch.bucket_key, data_batch.provide_data,
                           data_batch.provide_label)
        self._curr_module.prepare(data_batch, sparse_row_id_fn=sparse_row_id_fn)
        self.switch_bucket(current, None, None)

    def forward(self, data_batch, is_train=None):
        """Forward on the module of ``data_batch.bucket_key``."""
        self._check_ready('forward')
        key = data_batch.bucket_key
        if key is None:
            key = self._default_bucket_key
        self.switch_bucket(key, data_batch.provide_data, data_batch.provide_label)
        self._curr_module.forward(data_batch, is_train=is_train)

    def backward(self, out_grads=None):
        self._check_ready('backward')
        self._curr_module.backward(out_grads=out_grads)

    def update(self):
        self._check_ready('update')
        if not self.optimizer_initialized:
            raise RuntimeError('update needs an optimizer; call init_optimizer() first')
        self._params_dirty = True
        self._curr_module.update()
        # every bucket's parameters are the same arrays; their host copies are stale too
        for module in self._buckets.values():
            module._params_dirty = True

    def get_outputs(self, merge_multi_context=True):
        self._check_ready('get_outputs')
        return self._curr_module.get_outputs(merge_multi_context=merge_multi_context)

    def get_input_grads(self, merge_multi_context=True):
        self._check_ready('get_input_grads')
        return self._curr_module.get_input_grads(merge_multi_context=merge_multi_context)

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        self._check_ready('update_metric')
        self._curr_module.update_metric(eval_metric, labels, pre_sliced)

    def install_monitor(self, mon):
        self._check_bound('install_monitor')
        self._monitor = mon
        for module in self._buckets.values():
            module.install_monitor(mon)
