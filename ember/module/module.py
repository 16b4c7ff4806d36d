"""Module: a symbol bound to devices, with parameters and an optimizer (MXNet 1.x's
``mx.mod.Module``).

>>> import numpy as np
>>> import ember as mx
>>> data = mx.sym.var('data')
>>> net = mx.sym.FullyConnected(data, num_hidden=3, name='fc')
>>> net = mx.sym.SoftmaxOutput(net, name='softmax')
>>> mod = Module(net, context=mx.cpu())
>>> mod.bind(data_shapes=[('data', (4, 5))], label_shapes=[('softmax_label', (4,))])
>>> mod.init_params(mx.init.Xavier())
>>> mod.forward(mx.io.DataBatch([mx.nd.ones((4, 5))], [mx.nd.zeros((4,))]), is_train=False)
>>> mod.get_outputs()[0].shape, mod.output_shapes
((4, 3), [('softmax_output', (4, 3))])
"""
from __future__ import annotations

import logging
import warnings

from ember import ndarray as nd
from ember import optimizer as opt
from ember.base import EmberError
from ember.device import Context, cpu
from ember.initializer import InitDesc, Uniform
from ember.io import DataDesc
from ember.module import checkpoint
from ember.module.base_module import BaseModule, check_input_names, parse_data_desc
from ember.module.checkpoint import load_checkpoint
from ember.ndarray import zeros
from ember.module.executor_group import DataParallelExecutorGroup
from ember.module.param_update import (create_kvstore, initialize_kvstore, update_params,
                                       update_params_on_kvstore)

__all__ = ['Module', 'BaseModule', 'DataDesc', 'DataParallelExecutorGroup', 'InitDesc', 'Uniform',
           'load_checkpoint', 'zeros']


class Module(BaseModule):
    """Runs `symbol` on `context` (one device or a list: data parallelism, each device taking
    a share of the batch in proportion to `work_load_list`).

    `data_names` and `label_names` name the symbol's inputs fed from batches; every other
    argument is a parameter, except `state_names` (inputs kept between batches, set with
    ``set_states``). `fixed_param_names` get no gradient and no update.
    """

    def __init__(self, symbol, data_names=('data',), label_names=('softmax_label',),
                 logger=logging, context=cpu(), work_load_list=None, fixed_param_names=None,
                 state_names=None, group2ctxs=None, compression_params=None):
        super().__init__(logger=logger)
        self._context = [context] if isinstance(context, Context) else list(context)
        if work_load_list is None:
            work_load_list = [1] * len(self._context)
        if len(work_load_list) != len(self._context):
            raise ValueError(f'work_load_list has {len(work_load_list)} entries for '
                             f'{len(self._context)} contexts; give one per context')
        self._work_load_list = list(work_load_list)
        self._group2ctxs = group2ctxs
        self._symbol = symbol
        self._set_names(symbol, data_names, label_names, state_names, fixed_param_names)
        self._arg_params = None
        self._aux_params = None
        self._params_dirty = False
        self._compression_params = compression_params
        self._optimizer = None
        self._kvstore = None
        self._update_on_kvstore = None
        self._updater = None
        self._preload_opt_states = None
        self._grad_req = None
        self._reset_bind()

    def _set_names(self, symbol, data_names, label_names, state_names, fixed_param_names):
        data_names = list(data_names) if data_names is not None else []
        label_names = list(label_names) if label_names is not None else []
        state_names = list(state_names) if state_names is not None else []
        fixed_param_names = list(fixed_param_names) if fixed_param_names is not None else []
        check_input_names(symbol, data_names, 'data', True)
        check_input_names(symbol, label_names, 'label', False)
        check_input_names(symbol, state_names, 'state', True)
        check_input_names(symbol, fixed_param_names, 'fixed_param', True)
        inputs = data_names + label_names + state_names
        self._param_names = [x for x in symbol.list_arguments() if x not in inputs]
        self._fixed_param_names = fixed_param_names
        self._aux_names = symbol.list_auxiliary_states()
        self._data_names = data_names
        self._label_names = label_names
        self._state_names = state_names
        self._output_names = symbol.list_outputs()

    @staticmethod
    def load(prefix, epoch, load_optimizer_states=False, **kwargs):
        """A Module of the checkpoint ``prefix-symbol.json``/``prefix-%04d.params``; keyword
        arguments go to ``Module(...)``. Bind it (and init the optimizer) before use.

        With `load_optimizer_states`, ``init_optimizer`` loads ``prefix-%04d.states``.
        """
        symbol, arg_params, aux_params = checkpoint.load_checkpoint(prefix, epoch)
        mod = Module(symbol=symbol, **kwargs)
        mod._arg_params = arg_params
        mod._aux_params = aux_params
        mod.params_initialized = True
        if load_optimizer_states:
            mod._preload_opt_states = f'{prefix}-{epoch:04d}.states'
        return mod

    def save_checkpoint(self, prefix, epoch, save_optimizer_states=False, remove_amp_cast=True):
        """Save ``prefix-symbol.json``, ``prefix-%04d.params`` and, with
        `save_optimizer_states`, ``prefix-%04d.states``."""
        self._symbol.save(checkpoint.symbol_file(prefix), remove_amp_cast=remove_amp_cast)
        param_name = checkpoint.params_file(prefix, epoch)
        self.save_params(param_name)
        logging.info('Saved checkpoint to "%s"', param_name)
        if save_optimizer_states:
            state_name = f'{prefix}-{epoch:04d}.states'
            self.save_optimizer_states(state_name)
            logging.info('Saved optimizer state to "%s"', state_name)

    def _reset_bind(self):
        self.binded = False
        self._exec_group = None
        self._data_shapes = None
        self._label_shapes = None

    # ------------------------------------------------------------------------------------------
    # Names and shapes

    @property
    def data_names(self):
        return self._data_names

    @property
    def label_names(self):
        return self._label_names

    @property
    def output_names(self):
        return self._output_names

    @property
    def data_shapes(self):
        """DataDescs of the data inputs (a bound module)."""
        self._check_bound('data_shapes')
        return self._data_shapes

    @property
    def label_shapes(self):
        """DataDescs of the label inputs, or None when bound without labels."""
        self._check_bound('label_shapes')
        return self._label_shapes

    @property
    def output_shapes(self):
        """[(name, shape)] of the outputs for a whole batch."""
        self._check_bound('output_shapes')
        return self._exec_group.get_output_shapes()

    def _check_bound(self, what):
        if not self.binded:
            raise RuntimeError(f'{what} needs a bound module; call bind() first')

    # ------------------------------------------------------------------------------------------
    # Parameters

    def get_params(self):
        """(arg_params, aux_params) on the CPU, averaged over the devices."""
        self._check_ready('get_params')
        if self._params_dirty:
            self._sync_params_from_devices()
        return self._arg_params, self._aux_params

    def init_params(self, initializer=Uniform(0.01), arg_params=None, aux_params=None,
                    allow_missing=False, force_init=False, allow_extra=False):
        """Give every parameter a value: from `arg_params`/`aux_params` where they have it,
        else from `initializer` (a name missing from given dicts is an error unless
        `allow_missing`). `allow_extra` accepts dict entries the symbol does not have."""
        if self.params_initialized and not force_init:
            warnings.warn('Parameters already initialized and force_init=False. init_params '
                          'call ignored.', stacklevel=2)
            return
        self._check_bound('init_params')
        attrs = self._symbol.attr_dict()
        for own, given in ((self._arg_params, arg_params), (self._aux_params, aux_params)):
            for name, arr in sorted(own.items()):
                desc = InitDesc(name, attrs.get(name, None))
                self._init_one(desc, arr, given, initializer, allow_missing)
        self.params_initialized = True
        self._params_dirty = False
        self._exec_group.set_params(self._arg_params, self._aux_params, allow_extra=allow_extra)

    @staticmethod
    def _init_one(name, arr, given, initializer, allow_missing):
        if given is not None and name in given:
            source = given[name]
            if source is not arr:
                _copy_checked(name, source, arr)
            return
        if given is not None and not allow_missing:
            raise RuntimeError(f'{name} is not presented')
        if initializer is not None:
            initializer(name, arr)

    def _sync_params_from_devices(self):
        self._exec_group.get_params(self._arg_params, self._aux_params)
        self._params_dirty = False

    def get_states(self, merge_multi_context=True):
        """The state inputs: merged over devices, or one list per state of per-device
        arrays."""
        self._check_ready('get_states')
        return self._exec_group.get_states(merge_multi_context=merge_multi_context)

    def set_states(self, states=None, value=None):
        """Set the state inputs from arrays (as ``get_states(False)`` returns) or to `value`."""
        self._check_ready('set_states')
        self._exec_group.set_states(states, value)

    # ------------------------------------------------------------------------------------------
    # Binding

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False,
             force_rebind=False, shared_module=None, grad_req='write'):
        """Bind executors for inputs of `data_shapes`/`label_shapes` (DataDescs or (name,
        shape) pairs). `shared_module` (bound and initialized) lends its parameters."""
        if force_rebind:
            self._reset_bind()
        if self.binded:
            self.logger.warning('Already bound, ignoring bind()')
            return
        if inputs_need_grad and not for_training:
            raise ValueError('inputs_need_grad=True needs for_training=True')
        self.for_training = for_training
        self.inputs_need_grad = inputs_need_grad
        self._grad_req = grad_req
        self._data_shapes, self._label_shapes = parse_data_desc(
            self.data_names, self.label_names, data_shapes, label_shapes)
        shared_group = self._shared_group(shared_module)
        self._exec_group = DataParallelExecutorGroup(
            self._symbol, self._context, self._work_load_list, self._data_shapes,
            self._label_shapes, self._param_names, for_training, inputs_need_grad,
            shared_group, logger=self.logger, fixed_param_names=self._fixed_param_names,
            grad_req=grad_req, group2ctxs=self._group2ctxs, state_names=self._state_names)
        self.binded = True
        if shared_module is not None:
            self.params_initialized = True
            self._arg_params = shared_module._arg_params
            self._aux_params = shared_module._aux_params
        elif self.params_initialized:
            # a rebind (or Module.load): the devices get the parameters we hold
            self._exec_group.set_params(self._arg_params, self._aux_params)
        else:
            self._allocate_host_params()
        if shared_module is not None and shared_module.optimizer_initialized:
            self.borrow_optimizer(shared_module)

    def _shared_group(self, shared_module):
        if shared_module is None:
            return None
        if not (isinstance(shared_module, Module) and shared_module.binded
                and shared_module.params_initialized):
            raise EmberError('shared_module must be a bound Module with initialized '
                             'parameters')
        if len(shared_module._exec_group.execs) < len(self._context):
            raise EmberError(f'shared_module runs on {len(shared_module._exec_group.execs)} '
                             f'devices, fewer than this module\'s {len(self._context)}')
        return shared_module._exec_group

    def _allocate_host_params(self):
        group = self._exec_group
        self._arg_params = {name: nd.zeros(block[0].shape, ctx=cpu(), dtype=block[0].dtype)
                            for name, block in zip(self._param_names, group.param_arrays)}
        self._aux_params = {name: nd.zeros(block[0].shape, ctx=cpu(), dtype=block[0].dtype)
                            for name, block in zip(self._aux_names, group.aux_arrays)}

    def reshape(self, data_shapes, label_shapes=None):
        """Rebind for new input shapes (a new batch size), keeping the parameters."""
        self._check_bound('reshape')
        self._data_shapes, self._label_shapes = parse_data_desc(
            self.data_names, self.label_names, data_shapes, label_shapes)
        self._exec_group.reshape(self._data_shapes, self._label_shapes)

    # ------------------------------------------------------------------------------------------
    # Optimizer

    def init_optimizer(self, kvstore='local', optimizer='sgd',
                       optimizer_params=(('learning_rate', 0.01),), force_init=False):
        """Create the optimizer (a name with `optimizer_params`, or an Optimizer) and the way
        gradients meet across devices (`kvstore`). Gradients are rescaled by 1/batch size
        unless `optimizer_params` set ``rescale_grad``."""
        self._check_ready('init_optimizer')
        if self.optimizer_initialized and not force_init:
            self.logger.warning('optimizer already initialized, ignoring...')
            return
        if self._params_dirty:
            self._sync_params_from_devices()
        kvstore, update_on_kvstore = create_kvstore(kvstore, len(self._context),
                                                    self._arg_params)
        optimizer = self._make_optimizer(optimizer, optimizer_params, kvstore, update_on_kvstore)
        self._optimizer = optimizer
        self._kvstore = kvstore
        self._update_on_kvstore = update_on_kvstore
        self._updater = None
        if kvstore is not None:
            if self._compression_params:
                kvstore.set_gradient_compression(self._compression_params)
            if update_on_kvstore:
                kvstore.set_optimizer(self._optimizer)
            initialize_kvstore(kvstore, self._exec_group.param_arrays, self._arg_params,
                               self._param_names, update_on_kvstore)
        if not update_on_kvstore:
            self._updater = opt.get_updater(optimizer)
        self.optimizer_initialized = True
        if self._preload_opt_states is not None:
            self.load_optimizer_states(self._preload_opt_states)
            self._preload_opt_states = None

    def _make_optimizer(self, optimizer, optimizer_params, kvstore, update_on_kvstore):
        batch_size = self._exec_group.batch_size
        kv_type = getattr(kvstore, 'type', '')
        if 'dist' in kv_type and '_sync' in kv_type:
            batch_size *= kvstore.num_workers
        rescale_grad = 1.0 / batch_size
        idx2name = self._index_to_name(update_on_kvstore)
        if isinstance(optimizer, str):
            params = dict(optimizer_params)
            params.setdefault('rescale_grad', rescale_grad)
            return opt.create(optimizer, sym=self.symbol, param_idx2name=idx2name, **params)
        if not isinstance(optimizer, opt.Optimizer):
            raise TypeError(f'optimizer {optimizer!r}: expected a name or an Optimizer')
        if optimizer.rescale_grad != rescale_grad:
            warnings.warn(f'Optimizer created manually outside Module but rescale_grad is not '
                          f'normalized to 1.0/batch_size/num_workers ({optimizer.rescale_grad} '
                          f'vs. {rescale_grad}). Is this intended?', stacklevel=3)
        if not optimizer.idx2name:
            optimizer.idx2name = idx2name.copy()
        return optimizer

    def _index_to_name(self, update_on_kvstore):
        names = self._exec_group.param_names
        if update_on_kvstore:
            return dict(enumerate(names))
        count = len(self._context)
        return {i * count + k: name for k in range(count) for i, name in enumerate(names)}

    def borrow_optimizer(self, shared_module):
        """Use `shared_module`'s optimizer, store and updater (bucketing shares one)."""
        if not shared_module.optimizer_initialized:
            raise EmberError('borrow_optimizer: the shared module has no optimizer yet')
        self._optimizer = shared_module._optimizer
        self._kvstore = shared_module._kvstore
        self._update_on_kvstore = shared_module._update_on_kvstore
        self._updater = shared_module._updater
        self.optimizer_initialized = True

    def save_optimizer_states(self, fname):
        """Write the optimizer's states (momenta, update counts) to `fname`."""
        self._check_optimizer('save_optimizer_states')
        if self._update_on_kvstore:
            self._kvstore.save_optimizer_states(fname)
            return
        with open(fname, 'wb') as stream:
            stream.write(self._updater.get_states())

    def load_optimizer_states(self, fname):
        """Read states written by :meth:`save_optimizer_states`."""
        self._check_optimizer('load_optimizer_states')
        if self._update_on_kvstore:
            self._kvstore.load_optimizer_states(fname)
            return
        with open(fname, 'rb') as stream:
            self._updater.set_states(stream.read())

    def _check_optimizer(self, what):
        if not self.optimizer_initialized:
            raise RuntimeError(f'{what} needs an optimizer; call init_optimizer() first')

    # ------------------------------------------------------------------------------------------
    # Computations

    def forward(self, data_batch, is_train=None):
        """Run forward on a DataBatch (training mode unless `is_train` is False; by default
        the mode the module was bound for). A batch of another shape rebinds first."""
        self._check_ready('forward')
        new_shapes = tuple(d.shape for d in data_batch.data)
        if tuple(tuple(d.shape) for d in self._data_shapes) != new_shapes:
            self.reshape(*self._shapes_of(data_batch, new_shapes))
        self._exec_group.forward(data_batch, is_train)

    def _shapes_of(self, data_batch, new_shapes):
        if getattr(data_batch, 'provide_data', None):
            data = data_batch.provide_data
        else:
            data = [DataDesc(d.name, shape, d.dtype, d.layout)
                    for d, shape in zip(self._data_shapes, new_shapes)]
        if getattr(data_batch, 'provide_label', None):
            label = data_batch.provide_label
        elif data_batch.label and self._label_shapes:
            label = [DataDesc(d.name, array.shape, d.dtype, d.layout)
                     for d, array in zip(self._label_shapes, data_batch.label)]
        else:
            label = None
        return data, label

    def backward(self, out_grads=None):
        """Backward from the outputs (`out_grads` for outputs that are not losses)."""
        self._check_ready('backward')
        self._exec_group.backward(out_grads=out_grads)

    def update(self):
        """Apply the optimizer to every parameter with the gradients of the last backward."""
        self._check_ready('update')
        self._check_optimizer('update')
        self._params_dirty = True
        group = self._exec_group
        if self._update_on_kvstore:
            update_params_on_kvstore(group.param_arrays, group.grad_arrays, self._kvstore,
                                     group.param_names)
        else:
            update_params(group.param_arrays, group.grad_arrays, updater=self._updater,
                          num_device=len(self._context), kvstore=self._kvstore,
                          param_names=group.param_names)

    def get_outputs(self, merge_multi_context=True):
        """The outputs of the last forward: one array per output (merged over devices), or
        per output a list of per-device arrays."""
        self._check_ready('get_outputs')
        return self._exec_group.get_outputs(merge_multi_context=merge_multi_context)

    def get_input_grads(self, merge_multi_context=True):
        """Gradients of the data inputs (bind with ``inputs_need_grad=True``)."""
        self._check_ready('get_input_grads')
        return self._exec_group.get_input_grads(merge_multi_context=merge_multi_context)

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        """Update `eval_metric` with the last outputs and `labels`."""
        self._exec_group.update_metric(eval_metric, labels, pre_sliced)

    def install_monitor(self, mon):
        """Let `mon` watch the executors (``mon.install(executor)``)."""
        self._check_bound('install_monitor')
        self._exec_group.install_monitor(mon)


def _copy_checked(name, source, target):
    if tuple(source.shape) != tuple(target.shape):
        raise EmberError(f'parameter {name!r}: the given array has shape {source.shape}, the '
                         f'symbol needs {target.shape}')
    if source.dtype != target.dtype:
        source = source.astype(target.dtype)
    source.copyto(target)
