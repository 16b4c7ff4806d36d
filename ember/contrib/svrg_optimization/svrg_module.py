"""SVRGModule: a Module trained with stochastic variance-reduced gradients (Johnson & Zhang,
2013). Every `update_freq` epochs it takes a snapshot of the weights and the mean gradient of
the whole data set there; each step then uses the batch's gradient minus the same batch's
gradient at the snapshot plus that mean, which keeps the step unbiased and shrinks its variance.
A second module (the snapshot's) computes the batch gradients at the snapshot.

>>> import ember as mx
>>> net = mx.sym.LinearRegressionOutput(mx.sym.FullyConnected(mx.sym.var('data'),
...                                     num_hidden=1, name='fc'), name='lin')
>>> it = mx.io.NDArrayIter(mx.nd.ones((8, 2)), mx.nd.ones((8, 1)), batch_size=4,
...                        label_name='lin_label')
>>> mod = SVRGModule(net, label_names=['lin_label'], update_freq=2)
>>> mod.fit(it, num_epoch=2, optimizer_params=(('learning_rate', 0.1),), eval_metric='mse')
>>> mod.get_params()[0]['fc_weight'].shape
(1, 2)
"""
from __future__ import annotations

import logging

from ember import ndarray as nd
from ember.device import cpu
from ember.module import Module

__all__ = ['SVRGModule', 'Module']


class SVRGModule(Module):
    """A Module whose updates are variance-reduced; `update_freq` (a positive int): the
    epochs between snapshots. Outside ``fit``, call :meth:`update_full_grads` to take a
    snapshot before the first :meth:`update`."""

    def __init__(self, symbol, data_names=('data',), label_names=('softmax_label',),
                 logger=logging, context=cpu(), work_load_list=None, fixed_param_names=None,
                 state_names=None, group2ctxs=None, compression_params=None, update_freq=None):
        if not isinstance(update_freq, int) or isinstance(update_freq, bool):
            raise TypeError(f'SVRGModule: update_freq={update_freq!r}: expected the number of '
                            f'epochs between full gradients (a positive int)')
        if update_freq <= 0:
            raise ValueError(f'SVRGModule: update_freq={update_freq} must be positive')
        args = (symbol, data_names, label_names, logger, context, work_load_list,
                fixed_param_names, state_names, group2ctxs, compression_params)
        self._mod_aux = Module(*args)       # the snapshot's module
        super().__init__(*args)
        self.update_freq = update_freq
        self._full_grads = None             # per device: name -> mean gradient at the snapshot

    def _reset_bind(self):
        super()._reset_bind()
        self._mod_aux._reset_bind()

    def reshape(self, data_shapes, label_shapes=None):
        super().reshape(data_shapes, label_shapes=label_shapes)
        self._mod_aux.reshape(data_shapes, label_shapes=label_shapes)

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False,
             force_rebind=False, shared_module=None, grad_req='write'):
        super().bind(data_shapes, label_shapes, for_training, inputs_need_grad, force_rebind,
                     shared_module, grad_req)
        if for_training:
            self._mod_aux.bind(data_shapes, label_shapes, for_training, inputs_need_grad,
                               force_rebind, shared_module, grad_req)

    def prepare(self, data_batch, sparse_row_id_fn=None):
        super().prepare(data_batch, sparse_row_id_fn=sparse_row_id_fn)
        self._mod_aux.prepare(data_batch, sparse_row_id_fn=sparse_row_id_fn)

    def forward(self, data_batch, is_train=None):
        super().forward(data_batch, is_train)
        if is_train:
            self._mod_aux.forward(data_batch, is_train=True)

    def backward(self, out_grads=None):
        super().backward(out_grads)
        if self._mod_aux.binded:
            self._mod_aux.backward(out_grads)

    def update_full_grads(self, train_data):
        """Snapshot the weights and average the gradient there over every batch of
        `train_data` (a last batch's padding counted as a fraction of a batch)."""
        arg_params, aux_params = self.get_params()
        self._mod_aux.set_params(arg_params, aux_params)
        group = self._mod_aux._exec_group
        sums = [{name: None for name in group.param_names} for _ in self._context]
        batches, padding = 0, 0
        train_data.reset()
        for batch in train_data:
            self._mod_aux.forward(batch, is_train=True)
            self._mod_aux.backward()
            for index, name in enumerate(group.param_names):
                for device, grad in enumerate(group.grad_arrays[index]):
                    total = sums[device][name]
                    sums[device][name] = grad.copy() if total is None else total + grad
            batches += 1
            padding = batch.pad
        if not batches:
            raise ValueError('update_full_grads: train_data gave no batch')
        count = batches - padding / train_data.batch_size
        self._full_grads = [{name: total / count for name, total in grads.items()}
                            for grads in sums]

    def update(self):
        """Replace each gradient by the variance-reduced one, then update as a Module does."""
        if self._full_grads is None:
            raise RuntimeError('SVRGModule.update: no full gradient yet; call '
                               'update_full_grads(train_data) first (fit does)')
        regular, snapshot = self._exec_group, self._mod_aux._exec_group
        for index, name in enumerate(regular.param_names):
            for device, grad in enumerate(regular.grad_arrays[index]):
                grad[:] = (grad - snapshot.grad_arrays[index][device]
                           + self._full_grads[device][name])
        super().update()

    def _fit_epoch(self, train_data, epoch, eval_metric, batch_end_callback, monitor,
                   sparse_row_id_fn):
        if epoch % self.update_freq == 0:
            self.update_full_grads(train_data)
            train_data.reset()
        super()._fit_epoch(train_data, epoch, eval_metric, batch_end_callback, monitor,
                           sparse_row_id_fn)
