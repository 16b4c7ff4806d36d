"""Callbacks of MXNet 1.x's ``mx.callback`` for ``Module.fit``.

Batch-end callbacks take a :data:`BatchEndParam` (epoch, nbatch, eval_metric, locals);
epoch-end callbacks take ``(epoch, symbol, arg_params, aux_params)``. Messages go to Python's
``logging`` at INFO level, as in MXNet.

>>> from ember import metric
>>> speedometer = Speedometer(batch_size=32, frequent=50)
>>> param = BatchEndParam(epoch=0, nbatch=0, eval_metric=metric.Accuracy(), locals=None)
>>> speedometer(param)   # the first batch of an epoch starts the clock; nothing is logged
>>> param.nbatch, speedometer.init
(0, True)
"""
from __future__ import annotations

import logging
import math
import time
from collections import namedtuple

from ember.base import EmberError

__all__ = ['BatchEndParam', 'Speedometer', 'ProgressBar', 'LogValidationMetricsCallback',
           'do_checkpoint', 'module_checkpoint', 'log_train_metric', 'set_checkpoint_saver',
           'save_checkpoint']

BatchEndParam = namedtuple('BatchEndParams', ['epoch', 'nbatch', 'eval_metric', 'locals'])
BatchEndParam.__doc__ = """What a batch-end callback sees: the epoch, the number of batches done
in it, the training metric (or None) and the caller's local variables."""

# save_checkpoint(prefix, epoch, symbol, arg_params, aux_params) of ``ember.model``, which
# installs it when it loads: the model layer sits above this one, so we cannot import it.
_checkpoint_saver = None


def set_checkpoint_saver(save):
    """Install the function that :func:`do_checkpoint` calls,
    ``save(prefix, epoch, symbol, arg_params, aux_params)`` (``ember.model`` installs
    ``save_checkpoint``); returns the one installed before, so a caller can restore it.

    >>> saved = []
    >>> before = set_checkpoint_saver(lambda *args: saved.append(args[:2]))
    >>> do_checkpoint('net', period=2)(1, None, {}, {})
    >>> saved
    [('net', 2)]
    >>> _ = set_checkpoint_saver(before)
    """
    global _checkpoint_saver
    previous, _checkpoint_saver = _checkpoint_saver, save
    return previous


def _save(prefix, epoch, symbol, arg_params, aux_params):
    if _checkpoint_saver is None:
        raise EmberError('do_checkpoint: no checkpoint saver is installed; import ember.model '
                         '(mx.model), which installs save_checkpoint')
    _checkpoint_saver(prefix, epoch, symbol, arg_params, aux_params)


def save_checkpoint(prefix, epoch, symbol, arg_params, aux_params, remove_amp_cast=True):
    """Save a checkpoint as ``mx.model.save_checkpoint`` does (``prefix-symbol.json`` and
    ``prefix-%04d.params``), through the installed saver."""
    if _checkpoint_saver is None:
        raise EmberError('save_checkpoint: no checkpoint saver is installed; import ember.model '
                         '(mx.model), which installs it')
    _checkpoint_saver(prefix, epoch, symbol, arg_params, aux_params, remove_amp_cast)


def _checked_period(period):
    return int(max(1, period))


def do_checkpoint(prefix, period=1):
    """An epoch-end callback that saves the symbol and parameters every `period` epochs as
    ``prefix-symbol.json`` and ``prefix-%04d.params`` (numbered from 1, like MXNet).

    >>> callback = do_checkpoint('/tmp/net', period=3)
    >>> callable(callback)
    True
    """
    period = _checked_period(period)

    def _callback(iter_no, sym, arg, aux):
        if (iter_no + 1) % period == 0:
            _save(prefix, iter_no + 1, sym, arg, aux)
    return _callback


def module_checkpoint(mod, prefix, period=1, save_optimizer_states=False):
    """An epoch-end callback that calls ``mod.save_checkpoint`` every `period` epochs.

    >>> class Mod:
    ...     def save_checkpoint(self, prefix, epoch, states):
    ...         print(prefix, epoch, states)
    >>> module_checkpoint(Mod(), 'net', period=2)(3)
    net 4 False
    """
    period = _checked_period(period)

    def _callback(iter_no, sym=None, arg=None, aux=None):
        if (iter_no + 1) % period == 0:
            mod.save_checkpoint(prefix, iter_no + 1, save_optimizer_states)
    return _callback


def log_train_metric(period, auto_reset=False):
    """A batch-end callback that logs the training metric every `period` batches (and
    resets its local values when `auto_reset`); see the module example."""
    def _callback(param):
        if param.nbatch % period != 0 or param.eval_metric is None:
            return
        for name, value in param.eval_metric.get_name_value():
            logging.info('Iter[%d] Batch[%d] Train-%s=%f', param.epoch, param.nbatch, name, value)
        if auto_reset:
            param.eval_metric.reset_local()
    return _callback


class Speedometer:
    """A batch-end callback that logs the training speed, and the metric, every `frequent`
    batches: ``Epoch[0] Batch [50-100]\\tSpeed: 1234.56 samples/sec\\taccuracy=0.500000``.

    With `auto_reset` the metric's local values are reset after each message, so each one
    covers the last `frequent` batches (``[50-100]``); without it they cover the epoch
    (``[0-100]``). The first call of an epoch starts the clock.

    >>> speedometer = Speedometer(batch_size=32, frequent=50, auto_reset=False)
    >>> speedometer.frequent, speedometer.auto_reset
    (50, False)
    """

    def __init__(self, batch_size, frequent=50, auto_reset=True):
        self.batch_size = batch_size
        self.frequent = frequent
        self.auto_reset = auto_reset
        self.init = False
        self.tic = 0.0
        self.last_count = 0

    def __call__(self, param):
        count = param.nbatch
        if self.last_count > count:   # a new epoch began
            self.init = False
        self.last_count = count
        if not self.init:
            self.init = True
            self.tic = time.time()
            return
        if count % self.frequent == 0:
            self._log(param, count, self._speed())
            self.tic = time.time()

    def _speed(self):
        elapsed = time.time() - self.tic
        return self.frequent * self.batch_size / elapsed if elapsed > 0 else float('inf')

    def _log(self, param, count, speed):
        if param.eval_metric is None:
            logging.info('Iter[%d] Batch [%d]\tSpeed: %.2f samples/sec', param.epoch, count, speed)
            return
        name_value = param.eval_metric.get_name_value()
        first = count - self.frequent if self.auto_reset else 0
        if self.auto_reset:
            param.eval_metric.reset_local()
        msg = 'Epoch[%d] Batch [%d-%d]\tSpeed: %.2f samples/sec' + '\t%s=%f' * len(name_value)
        logging.info(msg, param.epoch, first, count, speed, *sum(name_value, ()))


class ProgressBar:
    """A batch-end callback that logs a text progress bar of `length` characters for an epoch
    of `total` batches: ``[==------] 25%`` after 1 batch of 4 with ``length=8``.

    >>> bar = ProgressBar(total=4, length=8)
    >>> bar(BatchEndParam(epoch=0, nbatch=1, eval_metric=None, locals=None))
    """

    def __init__(self, total, length=80):
        self.bar_len = length
        self.total = total

    def __call__(self, param):
        count = param.nbatch
        filled_len = int(round(self.bar_len * count / float(self.total)))
        percents = math.ceil(100.0 * count / float(self.total))
        prog_bar = '=' * filled_len + '-' * (self.bar_len - filled_len)
        logging.info('[%s] %s%s\r', prog_bar, percents, '%')


class LogValidationMetricsCallback:
    """An epoch-end callback for validation: logs ``Epoch[%d] Validation-<name>=<value>``
    for each value of ``param.eval_metric``."""

    def __call__(self, param):
        if not param.eval_metric:
            return
        for name, value in param.eval_metric.get_name_value():
            logging.info('Epoch[%d] Validation-%s=%f', param.epoch, name, value)
