"""BaseModule: what every module does with the primitives ``bind``, ``init_params``,
``init_optimizer``, ``forward``, ``backward``, ``update`` (MXNet 1.x's ``mx.module.BaseModule``).

The high-level loops live here: ``fit`` trains for some epochs with callbacks, ``score``
evaluates a metric over an iterator, ``predict`` and ``iter_predict`` collect outputs. A
subclass (:class:`~ember.module.Module`) provides the primitives.
"""
from __future__ import annotations

import logging
import time
import warnings

import numpy as np

from ember import metric as _metric
from ember import ndarray as nd
from ember.callback import BatchEndParam
from ember.initializer import Uniform
from ember.device import cpu
from ember.io import DataBatch, DataDesc, DataIter
from ember.module import checkpoint

__all__ = ['BaseModule', 'check_input_names', 'parse_data_desc', 'BatchEndParam', 'DataBatch',
           'DataDesc', 'Uniform', 'DataIter', 'cpu']


def _as_list(obj):
    return list(obj) if isinstance(obj, (list, tuple)) else [obj]


def check_input_names(symbol, names, typename, throw):
    """Check that each of `names` is an argument of `symbol`; raise (`throw`) or warn."""
    args = symbol.list_arguments()
    for name in names:
        if name in args:
            continue
        candidates = [arg for arg in args
                      if not arg.endswith(('_weight', '_bias', '_gamma', '_beta'))]
        msg = (f"You created Module with Module(..., {typename}_names={names}) but input with "
               f"name '{name}' is not found in symbol.list_arguments(). Did you mean one of:"
               f"\n\t" + '\n\t'.join(candidates))
        if throw:
            raise ValueError(msg)
        warnings.warn(msg, stacklevel=3)


def _check_names_match(names, descs, typename, throw):
    provided = [desc[0] for desc in descs]
    if sorted(names) != sorted(provided):
        msg = (f"Data provided by {typename}_shapes don't match names specified by "
               f"{typename}_names ({descs} vs. {names})")
        if throw:
            raise ValueError(msg)
        warnings.warn(msg, stacklevel=3)


def _as_descs(shapes):
    return [s if isinstance(s, DataDesc) else DataDesc(*s) for s in shapes]


def parse_data_desc(data_names, label_names, data_shapes, label_shapes):
    """DataDescs of the data and label inputs; data names must match, label names may not.

    >>> parse_data_desc(['data'], [], [('data', (2, 3))], None)
    ([DataDesc[data,(2, 3),<class 'numpy.float32'>,NCHW]], None)
    """
    data_shapes = _as_descs(data_shapes)
    _check_names_match(data_names, data_shapes, 'data', True)
    if label_shapes is not None:
        label_shapes = _as_descs(label_shapes)
        _check_names_match(label_names, label_shapes, 'label', False)
    else:
        _check_names_match(label_names, [], 'label', False)
    return data_shapes, label_shapes


class BaseModule:
    """The interface of modules and the training and evaluation loops built on it.

    State flags: ``binded`` (executors exist), ``for_training``, ``inputs_need_grad``,
    ``params_initialized``, ``optimizer_initialized``.
    """

    def __init__(self, logger=logging):
        self.logger = logger
        self.binded = False
        self.for_training = False
        self.inputs_need_grad = False
        self.params_initialized = False
        self.optimizer_initialized = False
        self._symbol = None
        self._total_exec_bytes = 0

    # ------------------------------------------------------------------------------------------
    # High-level loops

    def forward_backward(self, data_batch):
        """A forward pass in training mode, then backward."""
        self.forward(data_batch, is_train=True)
        self.backward()

    def _check_ready(self, what):
        if not (self.binded and self.params_initialized):
            raise RuntimeError(f'{what} needs a bound module with initialized parameters; call '
                               f'bind() and init_params() first')

    def score(self, eval_data, eval_metric, num_batch=None, batch_end_callback=None,
              score_end_callback=None, reset=True, epoch=0, sparse_row_id_fn=None):
        """Run `eval_data` through the module and return ``[(name, value)]`` of `eval_metric`
        (a metric or its name) over at most `num_batch` batches."""
        self._check_ready('score')
        if reset:
            eval_data.reset()
        if not isinstance(eval_metric, _metric.EvalMetric):
            eval_metric = _metric.create(eval_metric)
        eval_metric.reset()
        nbatch = 0
        for nbatch, eval_batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.prepare(eval_batch, sparse_row_id_fn=sparse_row_id_fn)
            self.forward(eval_batch, is_train=False)
            self._update_metric_of(eval_metric, eval_batch)
            _call_all(batch_end_callback, BatchEndParam(epoch, nbatch, eval_metric, locals()))
        _call_all(score_end_callback, BatchEndParam(epoch, nbatch, eval_metric, locals()))
        return eval_metric.get_global_name_value()

    def _update_metric_of(self, eval_metric, batch):
        if isinstance(batch, list):
            self.update_metric(eval_metric, [b.label for b in batch], pre_sliced=True)
        else:
            self.update_metric(eval_metric, batch.label)

    def iter_predict(self, eval_data, num_batch=None, reset=True, sparse_row_id_fn=None):
        """Yield ``(outputs, batch number, batch)`` for each batch, padding removed."""
        self._check_ready('iter_predict')
        if reset:
            eval_data.reset()
        for nbatch, eval_batch in enumerate(eval_data):
            if num_batch is not None and nbatch == num_batch:
                break
            self.prepare(eval_batch, sparse_row_id_fn=sparse_row_id_fn)
            self.forward(eval_batch, is_train=False)
            pad = eval_batch.pad or 0
            outputs = [out[0:out.shape[0] - pad] for out in self.get_outputs()]
            yield outputs, nbatch, eval_batch

    def predict(self, eval_data, num_batch=None, merge_batches=True, reset=True,
                always_output_list=False, sparse_row_id_fn=None):
        """The outputs for `eval_data` (an iterator, or one array taken as one batch).

        With `merge_batches` each output is one array over all batches (a single output is
        returned alone unless `always_output_list`); otherwise a list per batch.
        """
        self._check_ready('predict')
        if isinstance(eval_data, (nd.NDArray, np.ndarray)):
            if isinstance(eval_data, np.ndarray):
                eval_data = nd.array(eval_data)
            self.forward(DataBatch([eval_data]))
            return self.get_outputs()[0]
        if reset:
            eval_data.reset()
        per_batch = [[out.copy() for out in outputs] for outputs, _, _ in
                     self.iter_predict(eval_data, num_batch, reset=False,
                                       sparse_row_id_fn=sparse_row_id_fn)]
        if not per_batch or not merge_batches:
            return per_batch
        counts = {len(outputs) for outputs in per_batch}
        if len(counts) != 1:
            raise ValueError('Cannot merge batches, as num of outputs is not the same in '
                             'mini-batches. Maybe bucketing is used?')
        merged = [nd.concat(*[outputs[i] for outputs in per_batch], dim=0)
                  if len(per_batch) > 1 else per_batch[0][i]
                  for i in range(counts.pop())]
        if len(merged) == 1 and not always_output_list:
            return merged[0]
        return merged

    def fit(self, train_data, eval_data=None, eval_metric='acc', epoch_end_callback=None,
            batch_end_callback=None, kvstore='local', optimizer='sgd',
            optimizer_params=(('learning_rate', 0.01),), eval_end_callback=None,
            eval_batch_end_callback=None, initializer=Uniform(0.01), arg_params=None,
            aux_params=None, allow_missing=False, force_rebind=False, force_init=False,
            begin_epoch=0, num_epoch=None, validation_metric=None, monitor=None,
            sparse_row_id_fn=None):
        """Train on `train_data` for epochs `begin_epoch`..`num_epoch` - 1: bind, initialize
        the parameters and the optimizer, then per batch forward, backward, update and the
        metric; after each epoch the callbacks and, with `eval_data`, a validation score.

        Batch-end callbacks get a :data:`~ember.callback.BatchEndParam`; epoch-end callbacks
        ``(epoch, symbol, arg_params, aux_params)``.
        """
        if num_epoch is None:
            raise ValueError('fit: please specify number of epochs (num_epoch)')
        self.bind(data_shapes=train_data.provide_data, label_shapes=train_data.provide_label,
                  for_training=True, force_rebind=force_rebind)
        if monitor is not None:
            self.install_monitor(monitor)
        self.init_params(initializer=initializer, arg_params=arg_params, aux_params=aux_params,
                         allow_missing=allow_missing, force_init=force_init)
        self.init_optimizer(kvstore=kvstore, optimizer=optimizer,
                            optimizer_params=optimizer_params)
        if validation_metric is None:
            validation_metric = eval_metric
        if not isinstance(eval_metric, _metric.EvalMetric):
            eval_metric = _metric.create(eval_metric)
        for epoch in range(begin_epoch, num_epoch):
            tic = time.time()
            self._fit_epoch(train_data, epoch, eval_metric, batch_end_callback, monitor,
                            sparse_row_id_fn)
            self.logger.info('Epoch[%d] Time cost=%.3f', epoch, time.time() - tic)
            arg_params, aux_params = self.get_params()
            self.set_params(arg_params, aux_params)
            for callback in _as_list(epoch_end_callback or []):
                callback(epoch, self.symbol, arg_params, aux_params)
            if eval_data:
                res = self.score(eval_data, validation_metric,
                                 score_end_callback=eval_end_callback,
                                 batch_end_callback=eval_batch_end_callback, epoch=epoch)
                for name, val in res:
                    self.logger.info('Epoch[%d] Validation-%s=%f', epoch, name, val)
            train_data.reset()

    def _fit_epoch(self, train_data, epoch, eval_metric, batch_end_callback, monitor,
                   sparse_row_id_fn):
        eval_metric.reset()
        data_iter = iter(train_data)
        next_batch = next(data_iter)
        nbatch, end_of_batch = 0, False
        while not end_of_batch:
            data_batch = next_batch
            if monitor is not None:
                monitor.tic()
            self.forward_backward(data_batch)
            self.update()
            self._update_metric_of(eval_metric, data_batch)
            try:
                # fetch (and prepare) the next batch while this one's work is in flight
                next_batch = next(data_iter)
                self.prepare(next_batch, sparse_row_id_fn=sparse_row_id_fn)
            except StopIteration:
                end_of_batch = True
            if monitor is not None:
                monitor.toc_print()
            if end_of_batch:
                eval_name_vals = eval_metric.get_global_name_value()
            _call_all(batch_end_callback, BatchEndParam(epoch, nbatch, eval_metric, locals()))
            nbatch += 1
        for name, val in eval_name_vals:
            self.logger.info('Epoch[%d] Train-%s=%f', epoch, name, val)

    # ------------------------------------------------------------------------------------------
    # Symbol and input/output information (subclasses define them)

    @property
    def symbol(self):
        """The symbol this module runs."""
        return self._symbol

    @property
    def data_names(self):
        raise NotImplementedError(f'{type(self).__name__} must define data_names')

    @property
    def output_names(self):
        raise NotImplementedError(f'{type(self).__name__} must define output_names')

    @property
    def data_shapes(self):
        raise NotImplementedError(f'{type(self).__name__} must define data_shapes')

    @property
    def label_shapes(self):
        raise NotImplementedError(f'{type(self).__name__} must define label_shapes')

    @property
    def output_shapes(self):
        raise NotImplementedError(f'{type(self).__name__} must define output_shapes')

    # ------------------------------------------------------------------------------------------
    # Parameters

    def get_params(self):
        """(arg_params, aux_params): dicts of name -> NDArray on the CPU."""
        raise NotImplementedError(f'{type(self).__name__} must define get_params')

    def init_params(self, initializer=Uniform(0.01), arg_params=None, aux_params=None,
                    allow_missing=False, force_init=False, allow_extra=False):
        raise NotImplementedError(f'{type(self).__name__} must define init_params')

    def set_params(self, arg_params, aux_params, allow_missing=False, force_init=True,
                   allow_extra=False):
        """Set the parameters from dicts of name -> NDArray (``init_params`` without an
        initializer)."""
        self.init_params(initializer=None, arg_params=arg_params, aux_params=aux_params,
                         allow_missing=allow_missing, force_init=force_init,
                         allow_extra=allow_extra)

    def save_params(self, fname):
        """Save the parameters as ``arg:<name>``/``aux:<name>`` arrays in MXNet's format."""
        checkpoint.save_params_file(fname, *self.get_params())

    def load_params(self, fname):
        """Load parameters saved by :meth:`save_params` (or MXNet's ``.params`` files)."""
        self.set_params(*checkpoint.load_params_file(fname))

    def get_states(self, merge_multi_context=True):
        """The state inputs (``state_names``); a module without states has none."""
        self._check_ready('get_states')
        return []

    def set_states(self, states=None, value=None):
        """Set the state inputs; a module without states accepts none."""
        if states or value is not None:
            raise ValueError(f'{type(self).__name__} has no state inputs to set')

    def install_monitor(self, mon):
        raise NotImplementedError(f'{type(self).__name__} must define install_monitor')

    def prepare(self, data_batch, sparse_row_id_fn=None):
        """Get ready for `data_batch` (row-sparse pulls in MXNet; dense modules need none)."""
        if sparse_row_id_fn is not None:
            warnings.warn('sparse_row_id_fn is ignored: Ember modules hold dense parameters',
                          stacklevel=2)

    # ------------------------------------------------------------------------------------------
    # Computations (subclasses define them)

    def bind(self, data_shapes, label_shapes=None, for_training=True, inputs_need_grad=False,
             force_rebind=False, shared_module=None, grad_req='write'):
        raise NotImplementedError(f'{type(self).__name__} must define bind')

    def init_optimizer(self, kvstore='local', optimizer='sgd',
                       optimizer_params=(('learning_rate', 0.01),), force_init=False):
        raise NotImplementedError(f'{type(self).__name__} must define init_optimizer')

    def forward(self, data_batch, is_train=None):
        raise NotImplementedError(f'{type(self).__name__} must define forward')

    def backward(self, out_grads=None):
        raise NotImplementedError(f'{type(self).__name__} must define backward')

    def get_outputs(self, merge_multi_context=True):
        raise NotImplementedError(f'{type(self).__name__} must define get_outputs')

    def get_input_grads(self, merge_multi_context=True):
        raise NotImplementedError(f'{type(self).__name__} must define get_input_grads')

    def update(self):
        raise NotImplementedError(f'{type(self).__name__} must define update')

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        raise NotImplementedError(f'{type(self).__name__} must define update_metric')


def _call_all(callbacks, param):
    for callback in _as_list(callbacks or []):
        callback(param)
