"""``mx.model``: checkpoints in MXNet 1.x's files, ``BatchEndParam``, and ``FeedForward``,
the model API before the Module (it trains through one).

``save_checkpoint`` writes ``prefix-symbol.json`` and ``prefix-%04d.params`` (arrays named
``arg:<name>`` and ``aux:<name>``, MXNet's binary format); ``load_checkpoint`` reads them back,
from Ember or from MXNet. Importing this module installs ``save_checkpoint`` as the saver of
``mx.callback.do_checkpoint``.

>>> import os, tempfile
>>> import ember as mx
>>> net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2, name='fc')
>>> prefix = os.path.join(tempfile.mkdtemp(), 'net')
>>> mx.callback.do_checkpoint(prefix)(0, net, {'fc_weight': mx.nd.ones((2, 3)),
...                                           'fc_bias': mx.nd.zeros((2,))}, {})
>>> sorted(os.listdir(os.path.dirname(prefix)))
['net-0001.params', 'net-symbol.json']
>>> symbol, arg_params, aux_params = mx.model.load_checkpoint(prefix, 1)
>>> float(arg_params['fc_weight'].asnumpy().sum())
6.0
"""
from __future__ import annotations

import logging
import warnings

import numpy as np

from ember import callback as _callback
from ember import io, metric
from ember import ndarray as nd
from ember.base import mx_real_t
from ember.executor_manager import DataParallelExecutorManager
from ember.callback import BatchEndParam, LogValidationMetricsCallback
from ember.device import Context, cpu
from ember.initializer import Uniform
from ember.io import DataDesc
from ember.module import BucketingModule, Module
from ember.module.checkpoint import load_checkpoint, load_params, save_checkpoint
from ember.optimizer import Optimizer, get_updater
from ember.symbol import Symbol

__all__ = ['BatchEndParam', 'save_checkpoint', 'load_checkpoint', 'load_params', 'FeedForward',
           'BASE_ESTIMATOR', 'SKLEARN_INSTALLED', 'LogValidationMetricsCallback', 'Context',
           'DataDesc', 'Uniform', 'cpu', 'get_updater', 'mx_real_t',
           'DataParallelExecutorManager']

try:    # a FeedForward is a scikit-learn estimator where scikit-learn is installed
    from sklearn.base import BaseEstimator as BASE_ESTIMATOR
    SKLEARN_INSTALLED = True
except ImportError:
    BASE_ESTIMATOR = object
    SKLEARN_INSTALLED = False

_callback.set_checkpoint_saver(save_checkpoint)


class FeedForward(BASE_ESTIMATOR):
    """A network (`symbol`, or a function of a bucket key that makes one) trained with
    :meth:`fit` on NumPy arrays or a data iterator, as MXNet's deprecated model API (use
    ``mx.mod.Module``). Keyword arguments go to the optimizer (``learning_rate=0.1``); the
    gradient is scaled by 1/batch size. After training, ``arg_params`` and ``aux_params``
    hold the parameters.

    >>> import numpy as np
    >>> import ember as mx
    >>> net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2),
    ...                            name='softmax')
    >>> model = FeedForward(net, num_epoch=2, numpy_batch_size=4, learning_rate=0.1)
    >>> model.fit(np.ones((8, 3)), np.zeros(8))
    >>> model.predict(np.ones((5, 3))).shape
    (5, 2)
    """

    def __init__(self, symbol, ctx=None, num_epoch=None, epoch_size=None, optimizer='sgd',
                 initializer=Uniform(0.01), numpy_batch_size=128, arg_params=None,
                 aux_params=None, allow_extra_params=False, begin_epoch=0, **kwargs):
        warnings.warn('mx.model.FeedForward is deprecated; use mx.mod.Module',
                      DeprecationWarning, stacklevel=2)
        if isinstance(symbol, Symbol):
            self.symbol, self.sym_gen = symbol, None
        elif callable(symbol):
            self.symbol, self.sym_gen = None, symbol
        else:
            raise TypeError(f'FeedForward: expected a Symbol or a function of a bucket key, '
                            f'got {type(symbol).__name__}')
        self.arg_params, self.aux_params = arg_params, aux_params
        self.allow_extra_params = allow_extra_params
        if self.symbol is not None and allow_extra_params:
            self._drop_extra_params()
        self.ctx = [cpu()] if ctx is None else [ctx] if isinstance(ctx, Context) else list(ctx)
        self.num_epoch, self.epoch_size = num_epoch, epoch_size
        self.kwargs = kwargs.copy()
        self.optimizer, self.initializer = optimizer, initializer
        self.numpy_batch_size = numpy_batch_size
        self.begin_epoch = begin_epoch
        self._module = None

    def _drop_extra_params(self):
        args, aux = set(self.symbol.list_arguments()), set(self.symbol.list_auxiliary_states())
        if self.arg_params:
            self.arg_params = {k: v for k, v in self.arg_params.items() if k in args}
        if self.aux_params:
            self.aux_params = {k: v for k, v in self.aux_params.items() if k in aux}

    def __getstate__(self):
        state = self.__dict__.copy()
        state['_module'] = None
        return state

    # ------------------------------------------------------------------------------------------
    # Data

    def _init_iter(self, X, y, is_train):
        """An iterator over `X` (and `y`): NumPy arrays and NDArrays become an NDArrayIter of
        ``numpy_batch_size`` (shuffled, rolling over the last batch, in training)."""
        if isinstance(X, (np.ndarray, nd.NDArray)):
            return self._array_iter(X, y, is_train)
        if not isinstance(X, io.DataIter):
            raise TypeError(f'X: expected a DataIter, an NDArray or a NumPy array, got '
                            f'{type(X).__name__}')
        return X

    def _array_iter(self, X, y, is_train):
        if y is None:
            if is_train:
                raise ValueError('fit(X, y): y is needed when X is an array')
            y = np.zeros(X.shape[0])
        if not isinstance(y, (np.ndarray, nd.NDArray)):
            raise TypeError(f'y: expected an array like X, got {type(y).__name__}')
        if X.shape[0] != y.shape[0]:
            raise ValueError(f'{X.shape[0]} examples but {y.shape[0]} labels')
        if y.ndim == 2 and y.shape[1] == 1:
            y = y.reshape((-1,))
        if y.ndim != 1:
            raise ValueError(f'labels of shape {y.shape}: expected one label per example')
        batch = min(X.shape[0], self.numpy_batch_size)
        if is_train:
            return io.NDArrayIter(X, y, batch, shuffle=True, last_batch_handle='roll_over')
        return io.NDArrayIter(X, y, batch, shuffle=False)

    def _init_eval_iter(self, eval_data):
        if eval_data is None or isinstance(eval_data, io.DataIter):
            return eval_data
        if isinstance(eval_data, (tuple, list)) and len(eval_data) == 2:
            data, label = eval_data
            if data is None:
                raise ValueError('eval_data: the data is None')
            if label is None and isinstance(data, io.DataIter):
                return data
            return self._init_iter(np.array(data) if isinstance(data, list) else data,
                                   np.array(label) if isinstance(label, list) else label, True)
        raise TypeError('eval_data: expected a DataIter or a (data, label) pair of arrays')

    # ------------------------------------------------------------------------------------------
    # Training

    def _new_module(self, data, logger):
        logger = logger or logging
        data_names = [desc[0] for desc in data.provide_data]
        label_names = [desc[0] for desc in data.provide_label]
        if self.sym_gen is not None:
            made = self.sym_gen(data.default_bucket_key)
            self.symbol = made[0] if isinstance(made, tuple) else made
            return BucketingModule(self._bucket_generator(data_names, label_names),
                                   default_bucket_key=data.default_bucket_key, logger=logger,
                                   context=self.ctx)
        return Module(self.symbol, data_names=data_names, label_names=label_names,
                      logger=logger, context=self.ctx)

    def _bucket_generator(self, data_names, label_names):
        def generate(key):
            made = self.sym_gen(key)
            return made if isinstance(made, tuple) else (made, data_names, label_names)
        return generate

    def _optimizer(self, batch_size):
        if isinstance(self.optimizer, Optimizer):
            return self.optimizer, ()
        params = dict(self.kwargs)
        params.setdefault('rescale_grad', 1.0 / batch_size)
        return self.optimizer, tuple(params.items())

    def fit(self, X, y=None, eval_data=None, eval_metric='acc', epoch_end_callback=None,
            batch_end_callback=None, kvstore='local', logger=None, work_load_list=None,
            monitor=None, eval_end_callback=LogValidationMetricsCallback(),
            eval_batch_end_callback=None):
        """Train for ``num_epoch`` epochs (of ``epoch_size`` batches when given) from
        ``begin_epoch``, starting from ``arg_params``/``aux_params`` where given and from the
        initializer elsewhere."""
        data = self._init_iter(X, y, is_train=True)
        eval_data = self._init_eval_iter(eval_data)
        if self.epoch_size is not None:
            data = io.ResizeIter(data, self.epoch_size)
        module = self._new_module(data, logger)
        optimizer, optimizer_params = self._optimizer(data.batch_size)
        module.fit(data, eval_data=eval_data, eval_metric=eval_metric,
                   epoch_end_callback=epoch_end_callback,
                   batch_end_callback=batch_end_callback, kvstore=kvstore, optimizer=optimizer,
                   optimizer_params=optimizer_params, initializer=self.initializer,
                   arg_params=self.arg_params, aux_params=self.aux_params, allow_missing=True,
                   begin_epoch=self.begin_epoch, num_epoch=self.num_epoch, monitor=monitor,
                   eval_end_callback=eval_end_callback,
                   eval_batch_end_callback=eval_batch_end_callback)
        self.arg_params, self.aux_params = module.get_params()
        self._module = None

    # ------------------------------------------------------------------------------------------
    # Prediction

    def _predictor(self, data):
        if self._module is not None and self._module.data_shapes == [
                DataDesc(*d) if not isinstance(d, DataDesc) else d for d in data.provide_data]:
            return self._module
        if self.arg_params is None:
            raise RuntimeError('FeedForward: no parameters yet; fit() or load() first')
        names = [desc[0] for desc in data.provide_data]
        labels = [desc for desc in data.provide_label or []
                  if desc[0] in self.symbol.list_arguments()]
        module = Module(self.symbol, data_names=names, label_names=[d[0] for d in labels],
                        context=self.ctx[:1])
        module.bind(data.provide_data, labels or None, for_training=False)
        module.set_params(self.arg_params, self.aux_params or {},
                          allow_extra=self.allow_extra_params)
        self._module = module
        return module

    def predict(self, X, num_batch=None, return_data=False, reset=True):
        """The outputs on `X` as NumPy arrays (one array for a single output), padding left
        out; with `return_data`, (outputs, data, label)."""
        data = self._init_iter(X, None, is_train=False)
        if reset:
            data.reset()
        module = self._predictor(data)
        outputs, inputs, labels = [], [], []
        for index, batch in enumerate(data):
            if num_batch is not None and index == num_batch:
                break
            module.forward(batch, is_train=False)
            real = data.batch_size - batch.pad
            outputs.append([out[:real].asnumpy() for out in module.get_outputs()])
            inputs.append([x[:real].asnumpy() for x in batch.data])
            labels.append([x[:real].asnumpy() for x in batch.label or []])
        results = [_joined(outputs), _joined(inputs), _joined(labels)]
        return tuple(results) if return_data else results[0]

    def score(self, X, eval_metric='acc', num_batch=None, batch_end_callback=None, reset=True):
        """The value of `eval_metric` on `X`."""
        eval_metric = eval_metric if isinstance(eval_metric, metric.EvalMetric) else \
            metric.create(eval_metric)
        data = self._init_iter(X, None, is_train=False)
        if reset:
            data.reset()
        module = self._predictor(data)
        for index, batch in enumerate(data):
            if num_batch is not None and index == num_batch:
                break
            module.forward(batch, is_train=False)
            eval_metric.update(batch.label, module.get_outputs())
            for callback in _as_list(batch_end_callback):
                callback(BatchEndParam(epoch=0, nbatch=index, eval_metric=eval_metric,
                                       locals=locals()))
        return eval_metric.get()[1]

    # ------------------------------------------------------------------------------------------
    # Files

    def save(self, prefix, epoch=None, remove_amp_cast=True):
        """Save ``prefix-symbol.json`` and ``prefix-<epoch>.params`` (``num_epoch`` by
        default)."""
        epoch = self.num_epoch if epoch is None else epoch
        if epoch is None:
            raise ValueError('save: give the epoch (num_epoch is not set)')
        save_checkpoint(prefix, epoch, self.symbol, self.arg_params, self.aux_params,
                        remove_amp_cast=remove_amp_cast)

    @staticmethod
    def load(prefix, epoch, ctx=None, **kwargs):
        """A FeedForward from a checkpoint, ready to predict or to train on from `epoch`."""
        symbol, arg_params, aux_params = load_checkpoint(prefix, epoch)
        return FeedForward(symbol, ctx=ctx, arg_params=arg_params, aux_params=aux_params,
                           begin_epoch=epoch, **kwargs)

    @staticmethod
    def create(symbol, X, y=None, ctx=None, num_epoch=None, epoch_size=None, optimizer='sgd',
               initializer=Uniform(0.01), eval_data=None, eval_metric='acc',
               epoch_end_callback=None, batch_end_callback=None, kvstore='local', logger=None,
               work_load_list=None, eval_end_callback=LogValidationMetricsCallback(),
               eval_batch_end_callback=None, **kwargs):
        """A FeedForward made and trained in one call."""
        model = FeedForward(symbol, ctx=ctx, num_epoch=num_epoch, epoch_size=epoch_size,
                            optimizer=optimizer, initializer=initializer, **kwargs)
        model.fit(X, y, eval_data=eval_data, eval_metric=eval_metric,
                  epoch_end_callback=epoch_end_callback, batch_end_callback=batch_end_callback,
                  kvstore=kvstore, logger=logger, work_load_list=work_load_list,
                  eval_end_callback=eval_end_callback,
                  eval_batch_end_callback=eval_batch_end_callback)
        return model


def _joined(per_batch):
    """Per batch lists of arrays -> one array per position (one array for one position)."""
    if not per_batch or not per_batch[0]:
        return []
    joined = [np.concatenate(parts) for parts in zip(*per_batch)]
    return joined[0] if len(joined) == 1 else joined


def _as_list(callbacks):
    if callbacks is None:
        return []
    return callbacks if isinstance(callbacks, list) else [callbacks]
