"""Modules written in Python (MXNet's ``mx.mod.PythonModule`` and ``PythonLossModule``): no
parameters and no executors, the computation is the subclass's own.

>>> import numpy as np
>>> import ember as mx
>>> loss = PythonLossModule(grad_func=lambda scores, labels: scores - labels)
>>> loss.bind([('data', (2, 1))], [('softmax_label', (2, 1))])
>>> batch = mx.io.DataBatch([mx.nd.array([[3.0], [1.0]])], [mx.nd.array([[1.0], [1.0]])])
>>> loss.forward(batch, is_train=True); loss.backward()
>>> loss.get_input_grads()[0].asnumpy().ravel().tolist()
[2.0, 0.0]
"""
from __future__ import annotations

import logging

from ember import ndarray as nd
from ember.initializer import Uniform
from ember.module.base_module import BaseModule

__all__ = ['PythonModule', 'PythonLossModule', 'BaseModule', 'Uniform']


class PythonModule(BaseModule):
    """A module without parameters whose outputs a subclass computes in Python: it defines
    ``_compute_output_shapes``, ``forward``, ``get_outputs`` and, to train, ``backward`` and
    ``get_input_grads``. Binding checks the names and records the shapes."""

    def __init__(self, data_names, label_names, output_names, logger=logging):
        super().__init__(logger=logger)
        self._data_names = list(data_names) if isinstance(data_names, tuple) else data_names
        self._label_names = list(label_names) if isinstance(label_names, tuple) else label_names
        self._output_names = output_names
        self._data_shapes = self._label_shapes = self._output_shapes = None

    @property
    def data_names(self):
        return self._data_names

    @property
    def output_names(self):
        return self._output_names

    @property
    def data_shapes(self):
        return self._data_shapes

    @property
    def label_shapes(self):
        return self._label_shapes

    @property
    def output_shapes(self):
        return self._output_shapes

    def get_params(self):
        return {}, {}

    def init_params(self, initializer=Uniform(0.01), arg_params=None, aux_params=None,
                    allow_missing=False, force_init=False, allow_extra=False):
        """Nothing to initialize."""
        self.params_initialized = True

    def init_optimizer(self, kvstore='local', optimizer='sgd',
                       optimizer_params=(('learning_rate', 0.01),), force_init=False):
        """Nothing to optimize."""
        self.optimizer_initialized = True

    def update(self):
        """No parameters to update."""

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        if self._label_shapes is None:
            return
        if pre_sliced:
            raise ValueError('PythonModule takes whole labels, not labels sliced per device')
        eval_metric.update(labels, self.get_outputs())

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False,
             force_rebind=False, shared_module=None, grad_req='write'):
        if self.binded and not force_rebind:
            self.logger.warning('Already bound, ignoring bind()')
            return
        if grad_req != 'write':
            raise ValueError(f"PythonModule: grad_req={grad_req!r}: only 'write' is supported")
        _check_names('data', self._data_names, data_shapes)
        if label_shapes is not None:
            _check_names('label', self._label_names or [], label_shapes)
        self.for_training, self.inputs_need_grad = for_training, inputs_need_grad
        self._data_shapes, self._label_shapes = data_shapes, label_shapes
        self._output_shapes = self._compute_output_shapes()
        self.binded = True

    def _compute_output_shapes(self):
        """[(output name, shape)] from ``self._data_shapes``: the subclass says."""
        raise TypeError(f'{type(self).__name__} must say its output shapes '
                        '(_compute_output_shapes)')


def _check_names(kind, names, shapes):
    given = [shape[0] for shape in shapes]
    if given != list(names):
        raise ValueError(f'{kind} shapes name {given}, but the module takes {list(names)}')


class PythonLossModule(PythonModule):
    """A loss written in Python after a network: its output is its input (the scores), and
    its gradient ``grad_func(scores, labels)`` (an NDArray, or anything ``nd.array`` takes).
    Chain it after a Module in a :class:`~ember.module.SequentialModule`."""

    def __init__(self, name='pyloss', data_names=('data',), label_names=('softmax_label',),
                 logger=logging, grad_func=None):
        super().__init__(data_names, label_names, [name + '_output'], logger=logger)
        if len(data_names) != 1 or len(label_names) != 1:
            raise ValueError(f'PythonLossModule takes one data and one label input, got '
                             f'{list(data_names)} and {list(label_names)}')
        if grad_func is not None and not callable(grad_func):
            raise TypeError(f'grad_func: expected a function, got {grad_func!r}')
        self._name = name
        self._grad_func = grad_func
        self._scores = self._labels = self._scores_grad = None

    def _compute_output_shapes(self):
        return [(self._name + '_output', self._data_shapes[0][1])]

    def forward(self, data_batch, is_train=None):
        self._scores = data_batch.data[0]
        if self.for_training if is_train is None else is_train:
            self._labels = data_batch.label[0]

    def get_outputs(self, merge_multi_context=True):
        return [self._scores]

    def backward(self, out_grads=None):
        if out_grads is not None:
            raise ValueError('a loss module takes no head gradients (out_grads=None)')
        if not self.for_training:
            raise RuntimeError('backward of a module bound for prediction (for_training=False)')
        if self._grad_func is None:
            raise TypeError(f'{type(self).__name__} has no grad_func: give one, or subclass '
                            'and define _backward_impl')
        self._backward_impl()

    def _backward_impl(self):
        grad = self._grad_func(self._scores, self._labels)
        self._scores_grad = grad if isinstance(grad, nd.NDArray) else nd.array(grad)

    def get_input_grads(self, merge_multi_context=True):
        return [self._scores_grad]

    def install_monitor(self, mon):
        raise TypeError('PythonLossModule runs no executor for a monitor to watch')
