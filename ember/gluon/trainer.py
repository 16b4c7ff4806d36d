"""Trainer: applies an optimizer to a set of Gluon parameters (MXNet 1.x's ``gluon.Trainer``)."""
from __future__ import annotations

import warnings

from ember import autograd, optimizer as opt
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
        self._scale = optimizer_params.get('rescale_grad', 1.0)
        self._init_optimizer(optimizer, optimizer_params)
        self._kvstore_type = kvstore
        self._compression_params = compression_params
        self._update_on_kvstore = update_on_kvstore
        self._contexts = None
        self._updaters = None

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

    def step(self, batch_size, ignore_stale_grad=False):
        """Reduce gradients across devices and update, scaling gradients by 1/batch_size."""
        self._ensure_contexts()
        self._optimizer.rescale_grad = self._scale / batch_size
        self.allreduce_grads()
        self._update(ignore_stale_grad)

    def allreduce_grads(self):
        """Sum each parameter's gradient over its devices into every copy."""
        self._ensure_contexts()
        if len(self._contexts) < 2:
            return
        with autograd.pause():
            for param in self._trainable():
                grads = param.list_grad()
                total = grads[0].copy()
                for g in grads[1:]:
                    total += g.as_in_context(total.context)
                for g in grads:
                    total.copyto(g)

    def update(self, batch_size, ignore_stale_grad=False):
        """Update without reducing (after a manual allreduce_grads)."""
        self._ensure_contexts()
        self._optimizer.rescale_grad = self._scale / batch_size
        self._update(ignore_stale_grad)

    def _trainable(self):
        return [p for p in self._params if p.grad_req != 'null']

    def _update(self, ignore_stale_grad):
        if not ignore_stale_grad:
            self._check_fresh()
        updates = [[] for _ in self._updaters]
        for param in self._trainable():
            index = self._param2idx[param.name]
            for update, data, grad in zip(updates, param.list_data(), param.list_grad()):
                # With ignore_stale_grad, copies whose gradient backward did not write keep
                # their value (MXNet's rule).
                if not ignore_stale_grad or grad._fresh_grad:
                    update.append((index, grad, data))
                    grad._fresh_grad = False
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

    def save_states(self, fname):
        """Save the optimizer and its states (momenta etc.) to ``fname``.

        The file is MXNet's NDArray list format with a JSON header (no pickle); see
        :class:`ember.optimizer.Updater`.
        """
        self._ensure_contexts()
        if not self._updaters:
            raise EmberError('save_states: the parameters of this Trainer have not been '
                             'initialized on any device yet')
        with open(fname, 'wb') as f:
            f.write(self._updaters[0].get_states(dump_optimizer=True))

    def load_states(self, fname):
        """Load what :meth:`save_states` wrote; the saved optimizer replaces the current one."""
        self._ensure_contexts()
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
