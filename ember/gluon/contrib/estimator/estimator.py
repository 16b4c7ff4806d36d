"""The Estimator: a training loop over a Gluon net, its loss, metrics and event handlers."""
from __future__ import annotations

import copy
import logging
import sys
import warnings

from ember.backend import num_gpus
from ember.device import Device, cpu, gpu
from ember.gluon.contrib.estimator.batch_processor import BatchProcessor
from ember.gluon.contrib.estimator.event_handler import (
    BatchBegin, BatchEnd, EpochBegin, EpochEnd, GradientUpdateHandler, LoggingHandler,
    MetricHandler, StoppingHandler, TrainBegin, TrainEnd, ValidationHandler,
    _check_event_handlers)
from ember.gluon.contrib.estimator.utils import (_check_handler_metric_ref, _check_metrics,
                                                 _suggest_metric_for_loss)
from ember.gluon.data import DataLoader
from ember.gluon.loss import Loss
from ember.gluon.trainer import Trainer
from ember.metric import Loss as LossMetric

__all__ = ['Estimator']

_EVENTS = (('train_begin', TrainBegin), ('epoch_begin', EpochBegin),
           ('batch_begin', BatchBegin), ('batch_end', BatchEnd), ('epoch_end', EpochEnd),
           ('train_end', TrainEnd))


class Estimator:
    """Trains `net` with `loss` through ``fit`` and evaluates it through ``evaluate``.

    Training metrics default to the loss's mean (and accuracy for a softmax cross-entropy
    loss), named ``'training <name>'``; validation metrics to copies of them named
    ``'validation <name>'``. The net is initialized (with `initializer`) unless it already
    is; the trainer defaults to SGD at learning rate 0.001. `context` is a device or a list of
    devices (batches are split across them); `val_net` and `val_loss` default to `net` and
    `loss`; `batch_processor` (a :class:`BatchProcessor`) does the work of each batch.
    ``logger`` (a ``logging.Logger`` writing to stdout) receives every message.

    >>> import ember as mx
    >>> from ember.gluon.contrib.estimator import Estimator
    >>> net = mx.gluon.nn.Dense(2)
    >>> est = Estimator(net, mx.gluon.loss.SoftmaxCrossEntropyLoss(),
    ...                 trainer=mx.gluon.Trainer(net.collect_params(), 'sgd'))
    >>> [m.name for m in est.train_metrics], [m.name for m in est.val_metrics]
    (['training accuracy', 'training softmaxcrossentropyloss'], \
['validation accuracy', 'validation softmaxcrossentropyloss'])
    """

    logger = None

    def __init__(self, net, loss, train_metrics=None, val_metrics=None, initializer=None,
                 trainer=None, context=None, val_net=None, val_loss=None,
                 batch_processor=None):
        self.net = net
        self.loss = self._check_loss(loss)
        self._train_metrics = _check_metrics(train_metrics)
        self._val_metrics = _check_metrics(val_metrics)
        self._add_default_training_metrics()
        self._add_validation_metrics()
        self.val_loss = self.loss if val_loss is None else self._check_loss(val_loss)
        self.val_net = self.net if val_net is None else val_net
        self.logger = logging.Logger(name='Estimator', level=logging.INFO)
        self.logger.addHandler(logging.StreamHandler(sys.stdout))
        self.context = self._check_context(context)
        self._initialize(initializer)
        self.trainer = self._check_trainer(trainer)
        self.batch_processor = self._check_batch_processor(batch_processor)
        self.max_epoch = self.max_batch = None
        self.batch_axis = 0

    # ------------------------------------------------------------------------------------------
    # Checks and defaults

    @staticmethod
    def _check_loss(loss):
        if not isinstance(loss, Loss):
            raise ValueError(f'loss must be a gluon.loss.Loss, got {loss!r}')
        return loss

    @staticmethod
    def _check_context(context):
        if not context:
            if num_gpus() > 1:
                warnings.warn('Estimator: several GPUs are present and only gpu(0) is used; '
                              'give context=[mx.gpu(0), mx.gpu(1), ...] to use them all')
            return [gpu(0)] if num_gpus() else [cpu()]
        devices = [context] if isinstance(context, Device) else context
        if not isinstance(devices, list) or not all(isinstance(d, Device) for d in devices):
            raise ValueError(f'context must be a device or a list of devices (mx.cpu(), '
                             f'[mx.gpu(0), mx.gpu(1)]), got {context!r}')
        for device in devices:
            if device.device_type == 'gpu' and device.device_id >= num_gpus():
                raise ValueError(f'{device} is not available: this machine has '
                                 f'{num_gpus()} GPUs')
        return devices

    @staticmethod
    def _check_batch_processor(batch_processor):
        if batch_processor is None:
            return BatchProcessor()
        if not (callable(getattr(batch_processor, 'fit_batch', None))
                and callable(getattr(batch_processor, 'evaluate_batch', None))):
            raise ValueError('batch_processor must have fit_batch() and evaluate_batch() '
                             'methods (see BatchProcessor)')
        return batch_processor

    def _is_initialized(self):
        try:
            for param in self.net.collect_params().values():
                param.list_ctx()
        except RuntimeError:
            return False
        return True

    def _initialize(self, initializer):
        if not self._is_initialized():
            if initializer:
                self.net.initialize(init=initializer, ctx=self.context)
            else:
                self.net.initialize(ctx=self.context)
        elif initializer:
            warnings.warn('Estimator: the network is already initialized; initializer is '
                          'ignored (net.initialize(init, force_reinit=True) re-initializes '
                          'it)')

    def _check_trainer(self, trainer):
        if not trainer:
            warnings.warn('Estimator: no trainer given; using SGD with learning rate 0.001')
            return Trainer(self.net.collect_params(), 'sgd', {'learning_rate': 0.001})
        if not isinstance(trainer, Trainer):
            raise ValueError(f'trainer must be a gluon.Trainer, got {trainer!r}')
        return trainer

    def _add_default_training_metrics(self):
        if not self._train_metrics:
            suggested = _suggest_metric_for_loss(self.loss)
            self._train_metrics = [suggested] if suggested else []
            self._train_metrics.append(LossMetric(self.loss.name.rstrip('1234567890')))
        for metric in self._train_metrics:
            metric.name = 'training ' + metric.name

    def _add_validation_metrics(self):
        if not self._val_metrics:
            self._val_metrics = [copy.deepcopy(metric) for metric in self._train_metrics]
        for metric in self._val_metrics:
            metric.name = (metric.name.replace('training', 'validation')
                           if 'training' in metric.name else 'validation ' + metric.name)

    @property
    def train_metrics(self):
        return self._train_metrics

    @property
    def val_metrics(self):
        return self._val_metrics

    # ------------------------------------------------------------------------------------------
    # Training and evaluation

    def evaluate(self, val_data, batch_axis=0, event_handlers=None):
        """Run the validation net over `val_data` (a DataLoader), updating ``val_metrics``;
        a MetricHandler and a LoggingHandler are added unless given."""
        self._check_loader(val_data)
        for metric in self.val_metrics:
            metric.reset()
        handlers = self._by_event(self._prepare_default_validation_handlers(event_handlers))
        self._call(handlers['epoch_begin'], 'epoch_begin')
        for batch in val_data:
            self._call(handlers['batch_begin'], 'batch_begin', batch=batch)
            _, label, pred, loss = self.batch_processor.evaluate_batch(self, batch, batch_axis)
            self._call(handlers['batch_end'], 'batch_end', batch=batch, pred=pred, label=label,
                       loss=loss)
        self._call(handlers['epoch_end'], 'epoch_end')

    def fit(self, train_data, val_data=None, epochs=None, event_handlers=None, batches=None,
            batch_axis=0):
        """Train on `train_data` (a DataLoader) for `epochs` epochs or `batches` batches
        (exactly one of them), validating on `val_data` after each epoch when given.
        StoppingHandler, GradientUpdateHandler, MetricHandler, LoggingHandler (and a
        ValidationHandler with `val_data`) are added unless handlers of their kind are given."""
        self._check_loader(train_data)
        if (not epochs) == (not batches):
            raise ValueError('fit: give exactly one of epochs and batches')
        self.max_epoch, self.max_batch, self.batch_axis = epochs, batches, batch_axis
        handlers = self._by_event(self._prepare_default_handlers(val_data, event_handlers))
        self._call(handlers['train_begin'], 'train_begin')
        while True:
            self._call(handlers['epoch_begin'], 'epoch_begin')
            for batch in train_data:
                self._call(handlers['batch_begin'], 'batch_begin', batch=batch)
                _, label, pred, loss = self.batch_processor.fit_batch(self, batch, batch_axis)
                if self._call(handlers['batch_end'], 'batch_end', batch=batch, pred=pred,
                              label=label, loss=loss):
                    break
            if self._call(handlers['epoch_end'], 'epoch_end'):
                break
        self._call(handlers['train_end'], 'train_end')

    @staticmethod
    def _check_loader(data):
        if not isinstance(data, DataLoader):
            raise ValueError(f'Estimator takes a gluon.data.DataLoader, got '
                             f'{type(data).__name__}; wrap arrays in a Dataset and a '
                             f'DataLoader')

    def _call(self, handlers, event, **kwargs) -> bool:
        """Call `event` on every handler; whether any asked to stop (all are called)."""
        results = [getattr(handler, event)(self, **kwargs) for handler in handlers]
        return any(results)

    def _by_event(self, handlers) -> dict:
        return {event: [h for h in handlers if isinstance(h, marker)]
                for event, marker in _EVENTS}

    def _prepare_default_handlers(self, val_data, event_handlers):
        handlers = _check_event_handlers(event_handlers)
        added = [StoppingHandler(self.max_epoch, self.max_batch)]
        if not any(isinstance(h, GradientUpdateHandler) for h in handlers):
            added.append(GradientUpdateHandler())
        if not any(isinstance(h, MetricHandler) for h in handlers):
            added.append(MetricHandler(metrics=self.train_metrics))
        if val_data and not any(isinstance(h, ValidationHandler) for h in handlers):
            added.append(ValidationHandler(val_data=val_data, eval_fn=self.evaluate))
        if not any(isinstance(h, LoggingHandler) for h in handlers):
            added.append(LoggingHandler(metrics=self.train_metrics))
        return self._merged(handlers, added, self.train_metrics + self.val_metrics)

    def _prepare_default_validation_handlers(self, event_handlers):
        handlers = _check_event_handlers(event_handlers)
        added = []
        if not any(isinstance(h, MetricHandler) for h in handlers):
            added.append(MetricHandler(metrics=self.val_metrics))
        if not any(isinstance(h, LoggingHandler) for h in handlers):
            added.append(LoggingHandler(metrics=self.val_metrics))
        return self._merged(handlers, added, self.val_metrics)

    @staticmethod
    def _merged(handlers, added, known_metrics):
        """The user's handlers and the defaults, sorted by priority; where both are present,
        every handler must watch the estimator's own metrics."""
        if handlers and added:
            for handler in handlers + added:
                _check_handler_metric_ref(handler, set(known_metrics))
        merged = handlers + added
        merged.sort(key=lambda handler: getattr(handler, 'priority', 0))
        return merged
