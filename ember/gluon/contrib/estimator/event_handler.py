"""Event handlers of the Estimator: what runs at the start and end of training, of each epoch
and of each batch.

A handler subclasses the markers of the events it handles (``TrainBegin``, ``EpochEnd``, ...)
and implements their methods; ``batch_end`` and ``epoch_end`` return True to stop training.
Handlers run in ascending ``priority`` (gradient updates, then metrics, then the others, the
logging last).
"""
from __future__ import annotations

import os
import re
import time
import warnings

import numpy as np

from ember.base import EmberError
from ember.gluon.block import HybridBlock
from ember.gluon.contrib.estimator.utils import _check_metrics
from ember.metric import CompositeEvalMetric, EvalMetric
from ember.metric import Loss as LossMetric

__all__ = ['TrainBegin', 'TrainEnd', 'EpochBegin', 'EpochEnd', 'BatchBegin', 'BatchEnd',
           'StoppingHandler', 'MetricHandler', 'ValidationHandler', 'LoggingHandler',
           'CheckpointHandler', 'EarlyStoppingHandler', 'GradientUpdateHandler']


class EventHandler:
    """The base of every handler."""


def _check_event_handlers(handlers) -> list:
    if isinstance(handlers, EventHandler):
        return [handlers]
    handlers = list(handlers or [])
    wrong = [h for h in handlers if not isinstance(h, EventHandler)]
    if wrong:
        raise ValueError(f'event handlers must be EventHandler instances, got {wrong[0]!r}')
    return handlers


class TrainBegin(EventHandler):
    def train_begin(self, estimator, *args, **kwargs):
        pass


class TrainEnd(EventHandler):
    def train_end(self, estimator, *args, **kwargs):
        pass


class EpochBegin(EventHandler):
    def epoch_begin(self, estimator, *args, **kwargs):
        pass


class EpochEnd(EventHandler):
    def epoch_end(self, estimator, *args, **kwargs):
        return False


class BatchBegin(EventHandler):
    def batch_begin(self, estimator, *args, **kwargs):
        pass


class BatchEnd(EventHandler):
    def batch_end(self, estimator, *args, **kwargs):
        return False


class StoppingHandler(TrainBegin, BatchEnd, EpochEnd):
    """Stops training after the estimator's ``max_epoch`` epochs or ``max_batch`` batches."""

    def __init__(self, max_epoch=None, max_batch=None):
        self.max_epoch, self.max_batch = max_epoch, max_batch
        self.current_batch = self.current_epoch = 0
        self.stop_training = False

    def train_begin(self, estimator, *args, **kwargs):
        self.max_epoch, self.max_batch = estimator.max_epoch, estimator.max_batch
        self.current_batch = self.current_epoch = 0
        self.stop_training = False

    def batch_end(self, estimator, *args, **kwargs):
        self.current_batch += 1
        self.stop_training |= self.current_batch == self.max_batch
        return self.stop_training

    def epoch_end(self, estimator, *args, **kwargs):
        self.current_epoch += 1
        self.stop_training |= self.current_epoch == self.max_epoch
        return self.stop_training


class MetricHandler(EpochBegin, BatchEnd):
    """Resets `metrics` at each epoch and updates them at each batch end: a ``metric.Loss``
    with the batch's losses, the others with its labels and predictions."""

    def __init__(self, metrics, priority=-1000):
        self.metrics = _check_metrics(metrics)
        self.priority = priority

    def epoch_begin(self, estimator, *args, **kwargs):
        for metric in self.metrics:
            metric.reset()

    def batch_end(self, estimator, *args, **kwargs):
        for metric in self.metrics:
            if isinstance(metric, LossMetric):
                metric.update(0, kwargs['loss'])
            else:
                metric.update(kwargs['label'], kwargs['pred'])


class ValidationHandler(TrainBegin, BatchEnd, EpochEnd):
    """Runs ``eval_fn(val_data=..., batch_axis=..., event_handlers=...)`` every
    `epoch_period` epochs and, when given, every `batch_period` batches."""

    def __init__(self, val_data, eval_fn, epoch_period=1, batch_period=None, priority=-1000,
                 event_handlers=None):
        self.val_data, self.eval_fn = val_data, eval_fn
        self.epoch_period, self.batch_period = epoch_period, batch_period
        self.priority = priority
        self.event_handlers = event_handlers
        self.current_batch = self.current_epoch = 0

    def train_begin(self, estimator, *args, **kwargs):
        self.current_batch = self.current_epoch = 0

    def _evaluate(self, estimator):
        self.eval_fn(val_data=self.val_data, batch_axis=estimator.batch_axis,
                     event_handlers=self.event_handlers)

    def batch_end(self, estimator, *args, **kwargs):
        self.current_batch += 1
        if self.batch_period and self.current_batch % self.batch_period == 0:
            self._evaluate(estimator)

    def epoch_end(self, estimator, *args, **kwargs):
        self.current_epoch += 1
        if self.epoch_period and self.current_epoch % self.epoch_period == 0:
            self._evaluate(estimator)


def _metric_text(metrics) -> str:
    return ', '.join('%s: %.4f' % metric.get() for metric in metrics)


class LoggingHandler(TrainBegin, TrainEnd, EpochBegin, EpochEnd, BatchBegin, BatchEnd):
    """Logs the optimizer and learning rate at the start, `metrics` at each epoch's end (and
    every `log_interval` batches when it is an int) and at the end of training, through
    ``estimator.logger``."""

    def __init__(self, log_interval='epoch', metrics=None, priority=np.inf):
        if not isinstance(log_interval, int) and log_interval != 'epoch':
            raise ValueError(f"log_interval must be an int or 'epoch', got {log_interval!r}")
        self.metrics = _check_metrics(metrics)
        self.priority = priority
        self.log_interval = log_interval
        self.batch_index = self.current_epoch = self.processed_samples = 0
        self.log_interval_time = 0.0

    def train_begin(self, estimator, *args, **kwargs):
        self.train_start = time.time()
        trainer = estimator.trainer
        estimator.logger.info('Training begin: using optimizer %s with current learning rate '
                              '%.4f ', type(trainer.optimizer).__name__, trainer.learning_rate)
        if estimator.max_epoch:
            estimator.logger.info('Train for %d epochs.', estimator.max_epoch)
        else:
            estimator.logger.info('Train for %d batches.', estimator.max_batch)
        self.batch_index = self.current_epoch = self.processed_samples = 0
        self.log_interval_time = 0.0

    def train_end(self, estimator, *args, **kwargs):
        spent = time.time() - self.train_start
        text = 'Train finished using total %ds with %d epochs. ' % (spent, self.current_epoch)
        estimator.logger.info((text + _metric_text(self.metrics)).rstrip(', '))

    def batch_begin(self, estimator, *args, **kwargs):
        if isinstance(self.log_interval, int):
            self.batch_start = time.time()

    def batch_end(self, estimator, *args, **kwargs):
        if isinstance(self.log_interval, int):
            self.processed_samples += kwargs['batch'][0].shape[0]
            self.log_interval_time += time.time() - self.batch_start
            if self.batch_index % self.log_interval == 0:
                text = '[Epoch %d][Batch %d][Samples %s] time/interval: %.3fs ' % (
                    self.current_epoch, self.batch_index, self.processed_samples,
                    self.log_interval_time)
                estimator.logger.info((text + _metric_text(self.metrics)).rstrip(', '))
                self.log_interval_time = 0.0
        self.batch_index += 1

    def epoch_begin(self, estimator, *args, **kwargs):
        self.epoch_start = time.time()
        if any('training' in metric.name for metric in self.metrics):
            estimator.logger.info('[Epoch %d] Begin, current learning rate: %.4f',
                                  self.current_epoch, estimator.trainer.learning_rate)
        else:
            estimator.logger.info('Validation Begin')

    def epoch_end(self, estimator, *args, **kwargs):
        text = '[Epoch %d] Finished in %.3fs, ' % (self.current_epoch,
                                                   time.time() - self.epoch_start)
        estimator.logger.info((text + _metric_text(self.metrics)).rstrip(', '))
        self.current_epoch += 1
        self.batch_index = 0


def _improvement_test(mode, monitor, who):
    """np.greater or np.less: 'max', 'min', or for 'auto' greater for accuracy and F1
    metrics, less for the others (the rule MXNet documents)."""
    if mode not in ('auto', 'min', 'max'):
        warnings.warn(f'{who}: mode {mode!r} is unknown (expected auto, min or max); using '
                      f'auto', RuntimeWarning)
        mode = 'auto'
    if mode == 'auto':
        name = monitor.get()[0].lower()
        mode = 'max' if ('acc' in name or 'f1' in name) else 'min'
    return np.greater if mode == 'max' else np.less


class CheckpointHandler(TrainBegin, BatchEnd, EpochEnd):
    """Saves the net's parameters and the trainer's states as
    ``<model_prefix>-epoch<E>batch<B>.params/.states`` in `model_dir` every `epoch_period`
    epochs (or `batch_period` batches), keeping the last `max_checkpoints`; with `save_best`,
    also ``<model_prefix>-best`` whenever `monitor` improves. A hybridized net's graph is saved
    once, as ``<model_prefix>-symbol.json``. With `resume_from_checkpoint`, training continues
    from the latest checkpoint in `model_dir`."""

    def __init__(self, model_dir, model_prefix='model', monitor=None, verbose=0,
                 save_best=False, mode='auto', epoch_period=1, batch_period=None,
                 max_checkpoints=5, resume_from_checkpoint=False):
        if save_best and not isinstance(monitor, EvalMetric):
            raise ValueError('CheckpointHandler: save_best needs a monitor, one of '
                             'estimator.train_metrics or estimator.val_metrics')
        os.makedirs(model_dir, exist_ok=True)
        self.model_dir, self.model_prefix = model_dir, model_prefix
        self.monitor, self.verbose, self.save_best = monitor, verbose, save_best
        self.epoch_period, self.batch_period = epoch_period, batch_period
        self.max_checkpoints = max_checkpoints
        self.resume_from_checkpoint = resume_from_checkpoint
        self.current_batch = self.current_epoch = 0
        self.trained_epoch = self.trained_batch = -1
        self.saved_checkpoints = []
        if save_best:
            self.monitor_op = _improvement_test(mode, monitor, 'CheckpointHandler')
            self.best = np.inf if self.monitor_op is np.less else -np.inf

    def train_begin(self, estimator, *args, **kwargs):
        self.current_batch = self.current_epoch = 0
        if self.save_best:
            self.best = np.inf if self.monitor_op is np.less else -np.inf
        if self.resume_from_checkpoint:
            by_batches = bool(estimator.max_batch)
            if bool(self.batch_period) != by_batches or bool(self.epoch_period) == by_batches:
                raise ValueError('CheckpointHandler: to resume, save by the same period as '
                                 'training runs (epoch_period for epochs, batch_period for '
                                 'batches, the other None)')
            self._resume(estimator)

    def batch_end(self, estimator, *args, **kwargs):
        if self.current_batch == 0:
            self._save_symbol(estimator, kwargs.get('batch'))
        if self.batch_period and (self.current_batch + 1) % self.batch_period == 0:
            self._save_checkpoint(estimator)
        self.current_batch += 1

    def epoch_end(self, estimator, *args, **kwargs):
        if self.epoch_period and (self.current_epoch + 1) % self.epoch_period == 0:
            self._save_checkpoint(estimator)
        self.current_epoch += 1

    def _numbers(self, estimator):
        """(epoch, batch) numbers of a checkpoint saved now, counting resumed training."""
        if not self.resume_from_checkpoint:
            return self.current_epoch, self.current_batch
        batch = self.current_batch + self.trained_batch + (0 if estimator.max_epoch else 1)
        return self.current_epoch + self.trained_epoch + 1, batch

    def _save_checkpoint(self, estimator):
        prefix = '%s-epoch%dbatch%d' % ((self.model_prefix,) + self._numbers(estimator))
        self._save_params_and_trainer(estimator, prefix)
        if self.verbose > 0:
            estimator.logger.info('[Epoch %d] CheckpointHandler: trained total %d batches, '
                                  'saving model at %s with prefix: %s', self.current_epoch,
                                  self.current_batch + 1, self.model_dir, prefix)
        if self.save_best:
            self._save_if_best(estimator)

    def _save_if_best(self, estimator):
        name, value = self.monitor.get()
        if np.isnan(value):
            warnings.warn(f'CheckpointHandler: {name} has no value yet; monitor one of '
                          f'estimator.train_metrics or estimator.val_metrics', RuntimeWarning)
        elif self.monitor_op(value, self.best):
            previous, self.best = self.best, value
            self._save_params_and_trainer(estimator, self.model_prefix + '-best')
            if self.verbose > 0:
                estimator.logger.info('[Epoch %d] CheckpointHandler: %s improved from %0.5f to '
                                      '%0.5f, updating best model at %s with prefix: %s',
                                      self.current_epoch, name, previous, value,
                                      self.model_dir, self.model_prefix + '-best')
        elif self.verbose > 0:
            estimator.logger.info('[Epoch %d] CheckpointHandler: %s did not improve from '
                                  '%0.5f, skipping updating best model', self.current_epoch,
                                  name, self.best)

    def _save_symbol(self, estimator, batch):
        path = os.path.join(self.model_dir, self.model_prefix + '-symbol.json')
        graph = _traced_graph(estimator.net, batch)
        if graph:
            graph[1].save(path)
        else:
            estimator.logger.info('Model architecture (symbol file) is not saved: build the '
                                  'model from HybridBlocks and call net.hybridize() before '
                                  'passing it to Estimator to save it as %s.', path)

    def _save_params_and_trainer(self, estimator, prefix):
        estimator.net.save_parameters(os.path.join(self.model_dir, prefix + '.params'))
        estimator.trainer.save_states(os.path.join(self.model_dir, prefix + '.states'))
        if prefix.endswith('-best'):
            return
        self.saved_checkpoints.append(prefix)
        if len(self.saved_checkpoints) > self.max_checkpoints:
            oldest = self.saved_checkpoints.pop(0)
            for suffix in ('.params', '.states'):
                path = os.path.join(self.model_dir, oldest + suffix)
                if os.path.exists(path):
                    os.remove(path)

    def _checkpoints(self):
        """(epoch, batch) of every checkpoint of this prefix in model_dir."""
        pattern = re.compile(re.escape(self.model_prefix) + r'-epoch(\d+)batch(\d+)\.params$')
        return sorted((int(m.group(1)), int(m.group(2))) for m in
                      map(pattern.match, os.listdir(self.model_dir)) if m)

    def _resume(self, estimator):
        found = self._checkpoints()
        if not found:
            what = ('%d batches' % estimator.max_batch if estimator.max_batch
                    else '%d epochs' % estimator.max_epoch)
            estimator.logger.info('CheckpointHandler: No checkpoint found, training from '
                                  'scratch for %s', what)
            return
        self.trained_epoch = found[-1][0]
        self.trained_batch = max(b for e, b in found if e == self.trained_epoch)
        self.saved_checkpoints = ['%s-epoch%dbatch%d' % (self.model_prefix, e, b)
                                  for e, b in found]
        self._shorten_training(estimator)
        prefix = os.path.join(self.model_dir, '%s-epoch%dbatch%d' % (
            self.model_prefix, self.trained_epoch, self.trained_batch))
        estimator.net.load_parameters(prefix + '.params', ctx=estimator.context)
        estimator.trainer.load_states(prefix + '.states')

    def _shorten_training(self, estimator):
        """Train only what the checkpoint has not: fewer epochs or batches."""
        if estimator.max_epoch:
            if self.trained_epoch >= estimator.max_epoch - 1:
                raise ValueError(f'CheckpointHandler: the checkpoint already reached epoch '
                                 f'{estimator.max_epoch}; resume_from_checkpoint=False trains '
                                 f'from scratch')
            estimator.max_epoch -= self.trained_epoch + 1
            left = '%d epochs' % estimator.max_epoch
        else:
            if self.trained_batch >= estimator.max_batch - 1:
                raise ValueError(f'CheckpointHandler: the checkpoint already reached batch '
                                 f'{estimator.max_batch}; resume_from_checkpoint=False trains '
                                 f'from scratch')
            estimator.max_batch -= self.trained_batch + 1
            left = '%d batches' % estimator.max_batch
        estimator.logger.warning('CheckpointHandler: Checkpoint resumed from epoch %d batch '
                                 '%d, continue to train for %s', self.trained_epoch,
                                 self.trained_batch, left)


def _traced_graph(net, batch):
    """The graph of a HybridBlock: the one it cached, else traced on the batch's data (as
    MXNet's shape inference traces a block that is not hybridized); None for other blocks."""
    graph = getattr(net, '_cached_graph', None)
    if graph or not isinstance(net, HybridBlock) or batch is None:
        return graph
    try:
        return net._get_graph(batch[0])
    except (EmberError, TypeError, ValueError, NotImplementedError):
        return None          # a block that cannot be traced: no symbol file, as for a Block


class EarlyStoppingHandler(TrainBegin, EpochEnd, TrainEnd):
    """Stops training when `monitor` has not improved by more than `min_delta` for
    `patience` epochs (compared with `baseline` at first, when given)."""

    def __init__(self, monitor, min_delta=0, patience=0, mode='auto', baseline=None):
        if not isinstance(monitor, EvalMetric) or isinstance(monitor, CompositeEvalMetric):
            raise ValueError('EarlyStoppingHandler: monitor must be one metric (not a '
                             'composite) of estimator.train_metrics or estimator.val_metrics')
        self.monitor, self.baseline, self.patience = monitor, baseline, patience
        self.monitor_op = _improvement_test(mode, monitor, 'EarlyStoppingHandler')
        self.min_delta = min_delta if self.monitor_op is np.greater else -min_delta
        self.wait = self.stopped_epoch = self.current_epoch = 0
        self.stop_training = False

    def train_begin(self, estimator, *args, **kwargs):
        self.wait = self.stopped_epoch = self.current_epoch = 0
        self.stop_training = False
        if self.baseline is not None:
            self.best = self.baseline
        else:
            self.best = np.inf if self.monitor_op is np.less else -np.inf

    def epoch_end(self, estimator, *args, **kwargs):
        name, value = self.monitor.get()
        if np.isnan(value):
            warnings.warn(f'EarlyStoppingHandler: {name} has no value yet; monitor one of '
                          f'estimator.train_metrics or estimator.val_metrics', RuntimeWarning)
        elif self.monitor_op(value - self.min_delta, self.best):
            self.best, self.wait = value, 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch, self.stop_training = self.current_epoch, True
        self.current_epoch += 1
        return self.stop_training

    def train_end(self, estimator, *args, **kwargs):
        if self.stopped_epoch > 0:
            estimator.logger.info('[Epoch %d] EarlyStoppingHanlder: early stopping due to %s '
                                  'not improving', self.stopped_epoch, self.monitor.get()[0])


class GradientUpdateHandler(BatchEnd):
    """Applies the gradients at each batch end: ``trainer.step(batch size)``, the batch size
    being the number of losses over every device."""

    def __init__(self, priority=-2000):
        self.priority = priority

    def batch_end(self, estimator, *args, **kwargs):
        loss = kwargs['loss']
        losses = loss if isinstance(loss, list) else [loss]
        estimator.trainer.step(sum(value.shape[0] for value in losses))
