"""Trainer: applies an optimizer to a set of Gluon parameters (MXNet 1.x's ``gluon.Trainer``).

With parameters on several devices, or a distributed store, the gradients meet in a KVStore
(``kvstore``: a type name or a store). The optimizer then runs either on the store
(``update_on_kvstore``: the summed gradient updates the store's copy, which every device pulls)
or on each device after the gradients are summed; ``None`` lets ``MXNET_UPDATE_ON_KVSTORE``
and the store decide, as MXNet does. An asynchronous store always updates on the store.

A row_sparse parameter (``stype='row_sparse'``) lives in the store, which always runs the
optimizer: ``kvstore`` must name a store (or be one), a step pushes the gradient and the next
forward pass pulls the rows it needs (``Parameter.row_sparse_data``).

The gradients go to the store in one call, last parameter first: that is the order backward
writes them, so a distributed store's first bucket (``BUCKET_CAP_MB``) is reduced while
backward still computes the others.
"""
from __future__ import annotations

import warnings

from ember import autograd, kvstore as kvs, optimizer as opt
from ember.base import EmberError
from ember.gluon.parameter import Parameter, ParameterDict

__all__ = ['Trainer', 'StaleGradientError']


class Trainer:
    """Update parameters with an optimizer after each backward pass.

    >>> import ember as mx
    >>> net = mx.gluon.nn.Dense(1, in_units=2)
    >>> net.initialize(mx.init.Zero())
    >>> trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.5})
    >>> x = mx.nd.ones((4, 2))
    >>> with mx.autograd.record():
    ...     loss = ((net(x) - 1) ** 2).mean()
    >>> loss.backward()
    >>> trainer.step(1)
    >>> float(net.bias.data().asscalar())
    1.0
    """

    def __init__(self, params, optimizer, optimizer_params=None, kvstore='device',
                 compression_params=None, update_on_kvstore=None):
        self._params = _parameter_list(params)
        self._param2idx = {p.name: i for i, p in enumerate(self._params)}
        optimizer_params = dict(optimizer_params or {})
        self._init_optimizer(optimizer, optimizer_params)
        self._scale = self._optimizer.rescale_grad
        self._compression_params = compression_params
        self._kvstore_params = {'kvstore': kvstore, 'update_on_kvstore': update_on_kvstore}
        self._contexts = None
        self._updaters = None
        self._kv_initialized = False
        self._kvstore = None
        self._update_on_kvstore = None
        self._distributed = None
        self._params_to_init = list(self._params)
        self._sparse_weights = any(p._stype != 'default' for p in self._params)
        for param in self._params:
            param._set_trainer(self)

    def _init_optimizer(self, optimizer, optimizer_params):
        param_dict = {i: p for i, p in enumerate(self._params)}
        if isinstance(optimizer, opt.Optimizer):
            if optimizer_params:
                raise ValueError('optimizer_params must be None when optimizer is an '
                                 'Optimizer instance')
            self._optimizer = optimizer
            self._optimizer.param_dict = param_dict
        else:
            self._optimizer = opt.create(optimizer, param_dict=param_dict, **optimizer_params)

    def _ensure_contexts(self):
        if self._contexts is not None:
            return
        contexts = None
        for param in self._params:
            devices = param.list_ctx()
            if contexts is not None and devices != contexts:
                raise EmberError(f'all parameters must live on the same devices: {param.name} is '
                                 f'on {devices}, others on {contexts}')
            contexts = devices
        self._contexts = contexts or []
        self._updaters = [opt.get_updater(self._optimizer) for _ in self._contexts]

    # -- the store ------------------------------------------------------------------------------
    def _init_kvstore(self):
        """Create the store and decide where the optimizer runs (MXNet's rules)."""
        self._ensure_contexts()
        asked = self._kvstore_params['update_on_kvstore']
        if self._sparse_weights:
            self._install(self._sparse_store(asked), True)
            return
        shapes = {p.name: p.shape for p in self._params}
        store, update_on_kvstore = kvs.create_kvstore(self._kvstore_params['kvstore'],
                                                      len(self._contexts), shapes)
        self._distributed = store is not None and 'dist' in store.type
        if self._distributed and 'async' in store.type:
            if asked is False:
                raise ValueError('update_on_kvstore=False: an asynchronous store '
                                 f'({store.type!r}) applies every update itself; set '
                                 'update_on_kvstore=True or leave it None')
            update_on_kvstore = True
        if asked is not None:
            update_on_kvstore = bool(asked)
        if store is not None and update_on_kvstore and not store.is_capable('optimizer'):
            if asked:
                raise ValueError(f'update_on_kvstore=True: the store {store.type!r} cannot '
                                 f'run an optimizer; set update_on_kvstore=False')
            update_on_kvstore = False
        self._install(store, update_on_kvstore)

    def _sparse_store(self, asked):
        """The store of row_sparse weights (MXNet's rules: one is always made)."""
        if asked is False:
            raise ValueError('update_on_kvstore=False: row_sparse weights are updated by the '
                             'store; leave update_on_kvstore None or True')
        kind = self._kvstore_params['kvstore']
        if isinstance(kind, kvs.KVStore):
            store = kind
        elif isinstance(kind, str):
            store = kvs.create(kind)
        else:
            raise TypeError(f"Cannot create {kind!r} KVStore with row_sparse parameters: "
                            f"kvstore must be a KVStore or its type name (e.g. 'local')")
        self._distributed = 'dist' in store.type
        return store

    def _reset_kvstore(self):
        """Forget the store (a row_sparse parameter's value was replaced): the next step
        makes it again from the parameters' values."""
        if self._kvstore is not None and self._distributed:
            raise EmberError('Cannot reset a distributed KVStore: set the values of row_sparse '
                             'parameters before the first step')
        self._kv_initialized = False
        self._kvstore = self._update_on_kvstore = self._distributed = None
        self._params_to_init = list(self._params)

    def _row_sparse_pull(self, param, arrays, row_id, full=False):
        """Pull rows `row_id` of row_sparse `param` from the store into `arrays`."""
        self._prepare()
        key = self._param2idx[param.name]
        with autograd.pause():
            if full and not self._distributed:
                self._kvstore.pull(key, out=arrays, ignore_sparse=False)
            else:
                self._kvstore.row_sparse_pull(key, out=arrays, row_ids=[row_id] * len(arrays))

    def _install(self, store, update_on_kvstore):
        if store is not None:
            if self._compression_params:
                store.set_gradient_compression(self._compression_params)
            if update_on_kvstore:
                store.set_optimizer(self._optimizer)
        self._kvstore = store
        self._update_on_kvstore = update_on_kvstore if store is not None else None
        self._kv_initialized = True

    def _init_params(self):
        """Give the store every parameter that is initialized, broadcasting its value (rank
        0's, in a distributed store) to all devices; deferred ones wait for a later step."""
        waiting = []
        for param in self._params_to_init:
            if param._data is None:
                waiting.append(param)
            elif param._stype != 'default':
                self._kvstore.init(self._param2idx[param.name], param._list_arrays()[0])
            elif self._kvstore is not None:
                arrays = param.list_data()
                self._kvstore.broadcast(self._param2idx[param.name], arrays[0], arrays)
        self._params_to_init = waiting

    def _prepare(self):
        if not self._kv_initialized:
            self._init_kvstore()
        if self._params_to_init:
            self._init_params()

    @property
    def learning_rate(self):
        """The optimizer's current learning rate."""
        return self._optimizer.learning_rate

    @property
    def optimizer(self):
        return self._optimizer

    def set_learning_rate(self, lr):
        """Set the optimizer's learning rate (refused when an lr_scheduler drives it)."""
        self._optimizer.set_learning_rate(lr)

    def _check_and_rescale_grad(self, scale):
        if self._update_on_kvstore and self._distributed and self._kv_initialized:
            if self._optimizer.rescale_grad != scale:
                raise UserWarning('batch_size changed since the last step: with a '
                                  'distributed store that runs the optimizer '
                                  '(update_on_kvstore), the gradient scale cannot follow it')
        self._optimizer.rescale_grad = scale

    # -- steps ----------------------------------------------------------------------------------
    def step(self, batch_size, ignore_stale_grad=False):
        """Reduce gradients across devices and workers and update, scaling gradients by
        1/batch_size."""
        self._ensure_contexts()
        self._check_and_rescale_grad(self._scale / batch_size)
        self._prepare()
        self._allreduce_grads()
        self._update(ignore_stale_grad)

    def allreduce_grads(self):
        """Sum each parameter's gradient over its devices (and workers) into every copy; for
        a manual step with :meth:`update` (not with ``update_on_kvstore``)."""
        self._ensure_contexts()
        self._prepare()
        self._refuse_on_store('allreduce_grads')
        self._allreduce_grads()

    def update(self, batch_size, ignore_stale_grad=False):
        """Update without reducing (after :meth:`allreduce_grads`)."""
        self._ensure_contexts()
        self._prepare()
        self._refuse_on_store('update')
        self._check_and_rescale_grad(self._scale / batch_size)
        self._update(ignore_stale_grad)

    def _refuse_on_store(self, what):
        if self._kvstore is not None and self._update_on_kvstore:
            raise EmberError(f'{what}() cannot run while the store applies the optimizer '
                             f'(update_on_kvstore); create the Trainer with '
                             f'update_on_kvstore=False')

    def _trainable(self):
        return [p for p in self._params if p.grad_req != 'null']

    def _allreduce_grads(self):
        if self._kvstore is None:
            return
        keys, grads, outs = [], [], []
        for param in reversed(self._trainable()):
            if param._stype != 'default':
                # the store updates the weight; the next forward pass pulls its rows
                with autograd.pause():
                    self._kvstore.push(self._param2idx[param.name], param.list_grad())
                continue
            keys.append(self._param2idx[param.name])
            grads.append(param.list_grad())
            outs.append(param.list_data() if self._update_on_kvstore else param.list_grad())
        if keys:
            with autograd.pause():
                kvs.pushpull_all(self._kvstore, keys, grads, out=outs)

    def _update(self, ignore_stale_grad):
        scaler = getattr(self, '_amp_loss_scaler', None)     # mx.contrib.amp.init_trainer
        if scaler is not None and scaler.has_overflow(self._params):
            return      # an overflowed step is skipped; the loss scale halves
        if not ignore_stale_grad:
            self._check_fresh()
        updates = [[] for _ in self._updaters]
        for param in self._trainable():
            index = self._param2idx[param.name]
            for update, data, grad in zip(updates, param._list_arrays(), param.list_grad()):
                # With ignore_stale_grad, copies whose gradient backward did not write keep
                # their value (MXNet's rule).
                if not ignore_stale_grad or grad._fresh_grad:
                    update.append((index, grad, data))
                    grad._fresh_grad = False
        if self._kvstore is not None and self._update_on_kvstore:
            return      # the store updated the weights and the devices pulled them
        with autograd.pause():
            for updater, update in zip(self._updaters, updates):
                if update:
                    indices, grads, weights = map(list, zip(*update))
                    updater(indices, grads, weights)

    def _check_fresh(self):
        # autograd sets _fresh_grad on a gradient array when backward writes it. MXNet keeps
        # the flag on the parameter's data array; the meaning is the same.
        for param in self._trainable():
            for grad in param.list_grad():
                if not grad._fresh_grad:
                    raise StaleGradientError(
                        f'the gradient of parameter {param.name!r} on {grad.context} was not '
                        f'written by backward since the last step; if the model uses only some '
                        f'of its parameters on purpose, call step(..., ignore_stale_grad=True) '
                        f'to skip the stale ones')

    # -- states ---------------------------------------------------------------------------------
    def save_states(self, fname):
        """Save the optimizer and its states (momenta etc.) to ``fname``.

        The file is MXNet's NDArray list format with a JSON header (no pickle); see
        :class:`ember.optimizer.Updater`.
        """
        self._ensure_contexts()
        self._prepare()
        if self._update_on_kvstore:
            self._kvstore.save_optimizer_states(fname, dump_optimizer=True)
            return
        if not self._updaters:
            raise EmberError('save_states: the parameters of this Trainer have not been '
                             'initialized on any device yet')
        with open(fname, 'wb') as f:
            f.write(self._updaters[0].get_states(dump_optimizer=True))

    def load_states(self, fname):
        """Load what :meth:`save_states` wrote; the saved optimizer replaces the current one."""
        self._ensure_contexts()
        self._prepare()
        if self._update_on_kvstore:
            self._kvstore.load_optimizer_states(fname)
            self._optimizer = self._kvstore._updater.optimizer
        else:
            with open(fname, 'rb') as f:
                blob = f.read()
            for updater in self._updaters:
                updater.set_states(blob)
                updater.optimizer = self._updaters[0].optimizer
            if self._updaters:
                self._optimizer = self._updaters[0].optimizer
        self._optimizer.param_dict = {i: p for i, p in enumerate(self._params)}


class StaleGradientError(EmberError, UserWarning):
    """Trainer.step found a gradient that backward has not written since the last step.

    It is a UserWarning too: MXNet raises UserWarning here and programs catch that.
    """


def _parameter_list(params):
    if isinstance(params, (dict, ParameterDict)):
        params = list(params.values())
    if not isinstance(params, (list, tuple)):
        raise ValueError(f'params: expected a ParameterDict, dict or list of Parameters, got '
                         f'{type(params).__name__}')
    seen, result = set(), []
    for param in params:
        if not isinstance(param, Parameter):
            raise ValueError(f'params: expected Parameters, got {type(param).__name__}')
        if param.name in seen:
            warnings.warn(f'parameter {param.name} appears twice; updating it once')
            continue
        seen.add(param.name)
        result.append(param)
    return result
