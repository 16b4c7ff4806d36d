"""mx.callback: Speedometer, log_train_metric, ProgressBar, LogValidationMetricsCallback and the
checkpoint callbacks."""
import logging
import types

import numpy as np
import pytest

from ember import callback, metric
from ember.base import EmberError


class FakeClock:
    """Stands in for the `time` module inside ember.callback: each call to time() returns
    the next of the given readings."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def time(self):
        return self.readings.pop(0)


@pytest.fixture
def clock(monkeypatch):
    def install(*readings):
        monkeypatch.setattr(callback, 'time', FakeClock(*readings))
    return install


@pytest.fixture
def logged(caplog):
    """The messages logged at INFO level during the test."""
    caplog.set_level(logging.INFO)
    return lambda: [record.getMessage() for record in caplog.records]


def half_right():
    acc = metric.Accuracy()
    acc.update([np.array([1, 0])], [np.array([[0.1, 0.9], [0.2, 0.8]])])
    return acc


def param(epoch, nbatch, eval_metric=None):
    return callback.BatchEndParam(epoch=epoch, nbatch=nbatch, eval_metric=eval_metric,
                                  locals=None)


# ----------------------------------------------------------------------------------------------
# Speedometer

def test_speedometer_logs_speed_and_metric_every_frequent_batches(clock, logged):
    clock(100.0, 104.0, 104.0)
    speedometer = callback.Speedometer(batch_size=8, frequent=20)
    acc = half_right()
    for nbatch in range(0, 21):
        speedometer(param(3, nbatch, acc))
    assert logged() == ['Epoch[3] Batch [0-20]\tSpeed: 40.00 samples/sec\taccuracy=0.500000']
    assert (acc.num_inst, acc.global_num_inst) == (0, 2)   # only the local values are reset


def test_speedometer_without_auto_reset_covers_the_epoch(clock, logged):
    clock(0.0, 2.0, 2.0, 6.0, 6.0)
    speedometer = callback.Speedometer(batch_size=4, frequent=2, auto_reset=False)
    acc = half_right()
    for nbatch in range(0, 5):
        speedometer(param(0, nbatch, acc))
    assert logged() == ['Epoch[0] Batch [0-2]\tSpeed: 4.00 samples/sec\taccuracy=0.500000',
                        'Epoch[0] Batch [0-4]\tSpeed: 2.00 samples/sec\taccuracy=0.500000']
    assert acc.num_inst == 2


def test_speedometer_lists_every_value_of_a_composite_metric(clock, logged):
    clock(0.0, 1.0, 1.0)
    both = metric.CompositeEvalMetric(['mse', 'mae'])
    both.update([np.array([1.0, 2.0])], [np.array([2.0, 2.0])])
    speedometer = callback.Speedometer(batch_size=1, frequent=1)
    speedometer(param(0, 0, both))
    speedometer(param(0, 1, both))
    assert logged() == ['Epoch[0] Batch [0-1]\tSpeed: 1.00 samples/sec\tmse=0.500000\t'
                        'mae=0.500000']


def test_speedometer_restarts_its_clock_at_a_new_epoch(clock, logged):
    clock(0.0, 1.0, 1.0, 50.0, 51.0, 51.0)
    speedometer = callback.Speedometer(batch_size=10, frequent=1)
    for epoch in range(2):
        for nbatch in range(2):
            speedometer(param(epoch, nbatch))
    # without the restart the second message would count the pause between epochs
    assert logged() == ['Iter[0] Batch [1]\tSpeed: 10.00 samples/sec',
                        'Iter[1] Batch [1]\tSpeed: 10.00 samples/sec']


def test_speedometer_survives_a_stopped_clock(clock, logged):
    clock(5.0, 5.0, 5.0)
    speedometer = callback.Speedometer(batch_size=2, frequent=1)
    speedometer(param(0, 0))
    speedometer(param(0, 1))
    assert logged() == ['Iter[0] Batch [1]\tSpeed: inf samples/sec']


# ----------------------------------------------------------------------------------------------
# Other batch-end and epoch-end loggers

def test_log_train_metric_every_period_with_optional_reset(logged):
    acc = half_right()
    log = callback.log_train_metric(period=3, auto_reset=True)
    for nbatch in range(1, 7):
        log(param(2, nbatch, acc))
        acc.update([np.array([1])], [np.array([[0.0, 1.0]])])
    assert logged() == ['Iter[2] Batch[3] Train-accuracy=0.750000',
                        'Iter[2] Batch[6] Train-accuracy=1.000000']
    log(param(2, 9, None))   # no metric: nothing to log
    assert len(logged()) == 2


def test_progress_bar(logged):
    bar = callback.ProgressBar(total=3, length=6)
    bar(param(0, 1))
    bar(param(0, 3))
    assert logged() == ['[==----] 34%\r', '[======] 100%\r']


def test_log_validation_metrics(logged):
    callback.LogValidationMetricsCallback()(param(4, 0, half_right()))
    callback.LogValidationMetricsCallback()(param(5, 0, None))
    assert logged() == ['Epoch[4] Validation-accuracy=0.500000']


# ----------------------------------------------------------------------------------------------
# Checkpoints

@pytest.fixture
def saved():
    """Install a recording checkpoint saver; restore the previous one afterwards."""
    calls = []
    previous = callback.set_checkpoint_saver(lambda *args: calls.append(args))
    yield calls
    callback.set_checkpoint_saver(previous)


def test_do_checkpoint_saves_every_period_numbered_from_one(saved):
    symbol, args, aux = object(), {'w': 1}, {'m': 2}
    checkpoint = callback.do_checkpoint('run/net', period=2)
    for epoch in range(5):
        checkpoint(epoch, symbol, args, aux)
    assert saved == [('run/net', 2, symbol, args, aux), ('run/net', 4, symbol, args, aux)]


def test_do_checkpoint_period_below_one_saves_every_epoch(saved):
    checkpoint = callback.do_checkpoint('net', period=0)
    for epoch in range(3):
        checkpoint(epoch, None, {}, {})
    assert [call[1] for call in saved] == [1, 2, 3]


def test_do_checkpoint_without_a_saver_says_what_to_import():
    previous = callback.set_checkpoint_saver(None)
    try:
        with pytest.raises(EmberError, match='import ember.model'):
            callback.do_checkpoint('net')(0, None, {}, {})
    finally:
        callback.set_checkpoint_saver(previous)


def test_module_checkpoint_calls_the_module():
    calls = []
    module = types.SimpleNamespace(save_checkpoint=lambda *args: calls.append(args))
    checkpoint = callback.module_checkpoint(module, 'net', period=3, save_optimizer_states=True)
    for epoch in range(6):
        checkpoint(epoch)
    assert calls == [('net', 3, True), ('net', 6, True)]
