"""gluon.contrib.estimator beyond the runs checked against MXNet 1.9.1 in test_api_values
('estimator fit', 'estimator handlers', 'estimator batches'): the order of events, stopping,
resuming from checkpoints, and errors."""
import os

import numpy as np
import pytest

import ember as mx
from ember.gluon.contrib import estimator as est_module
from ember.gluon.contrib.estimator import (BatchBegin, BatchEnd, CheckpointHandler,
                                           EarlyStoppingHandler, EpochBegin, EpochEnd,
                                           Estimator, LoggingHandler, TrainBegin, TrainEnd)
from ember.gluon.contrib.estimator import event_handler, utils


def _setup(lr=0.5):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(12, 3)).astype('float32')
    y = (x[:, 1] > 0).astype('float32')
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(x, y), batch_size=4)
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Dense(2))
    net.initialize(mx.init.Constant(0.05))
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': lr})
    estimator = Estimator(net, mx.gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer)
    estimator.logger.setLevel('ERROR')
    return estimator, loader


class Recorder(TrainBegin, TrainEnd, EpochBegin, EpochEnd, BatchBegin, BatchEnd):
    def __init__(self, stop_after=None):
        self.events, self.stop_after, self.batches = [], stop_after, 0

    def train_begin(self, estimator, *args, **kwargs):
        self.events.append('train_begin')

    def epoch_begin(self, estimator, *args, **kwargs):
        self.events.append('epoch_begin')

    def batch_begin(self, estimator, *args, **kwargs):
        self.events.append('batch_begin')

    def batch_end(self, estimator, *args, **kwargs):
        self.events.append('batch_end')
        self.batches += 1
        assert set(kwargs) == {'batch', 'pred', 'label', 'loss'}
        return self.batches == self.stop_after

    def epoch_end(self, estimator, *args, **kwargs):
        self.events.append('epoch_end')

    def train_end(self, estimator, *args, **kwargs):
        self.events.append('train_end')


def test_events_come_in_order_and_a_handler_can_stop_training():
    estimator, loader = _setup()
    recorder = Recorder()
    estimator.fit(loader, epochs=2, event_handlers=recorder)
    epoch = ['epoch_begin'] + ['batch_begin', 'batch_end'] * 3 + ['epoch_end']
    assert recorder.events == ['train_begin'] + epoch * 2 + ['train_end']
    # True from batch_end ends the epoch (as in MXNet); the StoppingHandler ends training
    stopper = Recorder(stop_after=2)
    estimator.fit(loader, epochs=2, event_handlers=[stopper])
    assert stopper.batches == 2 + 3
    assert stopper.events[:7] == ['train_begin', 'epoch_begin'] + ['batch_begin',
                                                                   'batch_end'] * 2 + ['epoch_end']


def test_resume_from_checkpoint_trains_the_remaining_epochs(tmp_path):
    estimator, loader = _setup()
    estimator.fit(loader, epochs=2, event_handlers=[CheckpointHandler(str(tmp_path), 'm')])
    assert sorted(os.listdir(tmp_path)) == ['m-epoch0batch3.params', 'm-epoch0batch3.states',
                                            'm-epoch1batch6.params', 'm-epoch1batch6.states',
                                            'm-symbol.json']
    saved = estimator.net[0].weight.data().asnumpy()
    resumed, _ = _setup()
    recorder = Recorder()
    handler = CheckpointHandler(str(tmp_path), 'm', resume_from_checkpoint=True)
    resumed.fit(loader, epochs=3, event_handlers=[handler, recorder])
    assert resumed.max_epoch == 1 and recorder.events.count('epoch_begin') == 1
    assert (handler.trained_epoch, handler.trained_batch) == (1, 6)
    assert 'm-epoch2batch9.params' in os.listdir(tmp_path)
    # the resumed net started from the saved weights: one more epoch from them
    estimator.fit(loader, epochs=1)
    np.testing.assert_allclose(resumed.net[0].weight.data().asnumpy(),
                               estimator.net[0].weight.data().asnumpy(), rtol=1e-6)
    assert not np.allclose(saved, estimator.net[0].weight.data().asnumpy())
    with pytest.raises(ValueError, match='already reached epoch 2'):
        _setup()[0].fit(loader, epochs=2, event_handlers=[
            CheckpointHandler(str(tmp_path), 'm', resume_from_checkpoint=True)])


def test_early_stopping_against_a_baseline():
    estimator, loader = _setup()
    accuracy = estimator.train_metrics[0]
    stopping = EarlyStoppingHandler(accuracy, patience=2, mode='max', baseline=1.1)
    estimator.fit(loader, epochs=10, event_handlers=[stopping])
    assert stopping.stop_training and stopping.current_epoch == 2 and stopping.best == 1.1
    loss = estimator.train_metrics[1]
    # 'auto' compares with less for a loss, as documented (MXNet 1.9.1's test of the name
    # always picks greater)
    by_name = EarlyStoppingHandler(loss, min_delta=0.5)
    assert by_name.monitor_op is np.less and by_name.min_delta == -0.5


def test_bad_arguments_are_named():
    estimator, loader = _setup()
    with pytest.raises(ValueError, match='exactly one of epochs and batches'):
        estimator.fit(loader, epochs=1, batches=2)
    with pytest.raises(ValueError, match='DataLoader'):
        estimator.fit([(1, 2)], epochs=1)
    with pytest.raises(ValueError, match='loss must be'):
        Estimator(estimator.net, 'l2')
    with pytest.raises(ValueError, match='metrics must be'):
        Estimator(estimator.net, mx.gluon.loss.L2Loss(), train_metrics=['acc'],
                  trainer=estimator.trainer)
    with pytest.raises(ValueError, match="log_interval must be an int or 'epoch'"):
        LoggingHandler(log_interval='batch')
    with pytest.raises(ValueError, match='neither among'):
        estimator.fit(loader, epochs=1, event_handlers=[
            LoggingHandler(metrics=[mx.metric.Accuracy()])])
    with pytest.raises(ValueError, match='save_best needs a monitor'):
        CheckpointHandler('unused', save_best=True)
    with pytest.raises(ValueError, match='fit_batch'):
        Estimator(estimator.net, mx.gluon.loss.L2Loss(), trainer=estimator.trainer,
                  batch_processor=object())


def test_defaults_and_the_utils_module():
    net = mx.gluon.nn.Dense(1)
    with pytest.warns(UserWarning, match='no trainer given'):
        estimator = Estimator(net, mx.gluon.loss.L2Loss(), context=mx.cpu())
    assert estimator.trainer.learning_rate == 0.001 and estimator.context == [mx.cpu()]
    assert [m.name for m in estimator.train_metrics] == ['training l2loss']
    assert utils.Accuracy is mx.metric.Accuracy and utils.EvalMetric is mx.metric.EvalMetric
    assert utils.CompositeEvalMetric is mx.metric.CompositeEvalMetric
    assert utils.SoftmaxCrossEntropyLoss is mx.gluon.loss.SoftmaxCrossEntropyLoss
    assert issubclass(event_handler.GradientUpdateHandler, event_handler.EventHandler)
    stopping = est_module.StoppingHandler(max_epoch=3)
    estimator.max_epoch, estimator.max_batch = None, 2      # train_begin takes the estimator's
    stopping.train_begin(estimator)
    assert [stopping.batch_end(estimator), stopping.batch_end(estimator)] == [False, True]
    assert est_module.estimator.Estimator is Estimator
    assert est_module.batch_processor.BatchProcessor is est_module.BatchProcessor
