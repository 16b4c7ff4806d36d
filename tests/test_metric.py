"""Evaluation metrics: values, local/global sums, the registry, and array inputs of any kind."""
import math

import numpy as np
import pytest

import ember.ndarray as nd
from ember import metric

RNG = np.random.default_rng(3)


class FakeNDArray:
    """Stands for an NDArray: metrics must read values through asnumpy()."""

    def __init__(self, values):
        self._values = np.asarray(values)
        self.shape = self._values.shape

    def asnumpy(self):
        return self._values.copy()

    def __array__(self, *args, **kwargs):
        raise AssertionError('metrics must call asnumpy(), not convert implicitly')


def test_accuracy_counts_argmax_matches_over_batches():
    acc = metric.Accuracy()
    scores = RNG.normal(size=(20, 4))
    labels = RNG.integers(0, 4, size=20)
    acc.update([FakeNDArray(labels[:12])], [FakeNDArray(scores[:12])])
    acc.update(FakeNDArray(labels[12:]), FakeNDArray(scores[12:]))
    expected = (scores.argmax(axis=1) == labels).mean()
    assert acc.num_inst == 20
    assert acc.get() == ('accuracy', pytest.approx(expected))


def test_accuracy_axis_and_label_predictions():
    acc = metric.Accuracy(axis=0)
    acc.update([np.array([1, 0, 2])], [np.array([[0, 1, 0], [1, 0, 0], [0, 0, 1]])])
    assert acc.get()[1] == 1.0
    same_shape = metric.Accuracy()
    same_shape.update([np.array([1, 2, 3])], [np.array([1.0, 2.0, 0.0])])
    assert same_shape.get()[1] == pytest.approx(2 / 3)


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match='does not match'):
        metric.Accuracy().update([np.zeros(2), np.zeros(2)], [np.zeros((2, 2))])


def test_top_k_accuracy():
    scores = RNG.normal(size=(30, 6))
    labels = RNG.integers(0, 6, size=30)
    top3 = metric.create('top_k_accuracy', top_k=3)
    top3.update([labels], [scores])
    ranks = (scores > scores[np.arange(30), labels][:, None]).sum(axis=1)
    assert top3.get() == ('top_k_accuracy_3', pytest.approx((ranks < 3).mean()))
    with pytest.raises(ValueError, match='top_k=1'):
        metric.TopKAccuracy()


def test_cross_entropy_and_perplexity():
    probs = RNG.dirichlet(np.ones(5), size=8)
    labels = RNG.integers(0, 5, size=8)
    nll = -np.log(probs[np.arange(8), labels])
    ce = metric.create('ce')
    ce.update([labels], [probs])
    assert ce.get() == ('cross-entropy', pytest.approx(nll.mean()))
    perplexity = metric.Perplexity(ignore_label=None)
    perplexity.update([labels], [probs])
    assert perplexity.get()[1] == pytest.approx(math.exp(nll.mean()))


def test_perplexity_ignores_the_ignore_label():
    probs = RNG.dirichlet(np.ones(3), size=6)
    labels = np.array([0, 1, 2, 2, 1, 0])
    perplexity = metric.Perplexity(ignore_label=2)
    perplexity.update([labels], [probs])
    kept = labels != 2
    nll = -np.log(probs[np.arange(6), labels])[kept]
    assert perplexity.num_inst == kept.sum()
    assert perplexity.get()[1] == pytest.approx(math.exp(nll.mean()))


def test_regression_metrics_average_per_batch():
    batches = [(RNG.normal(size=5), RNG.normal(size=(5, 1))) for _ in range(3)]
    results = {}
    for name in ('mse', 'mae', 'rmse'):
        m = metric.create(name)
        for label, pred in batches:
            m.update([label], [pred])
        assert m.num_inst == 3
        results[name] = m.get()[1]
    errors = [label.reshape(5, 1) - pred for label, pred in batches]
    assert results['mse'] == pytest.approx(np.mean([(e ** 2).mean() for e in errors]))
    assert results['mae'] == pytest.approx(np.mean([np.abs(e).mean() for e in errors]))
    assert results['rmse'] == pytest.approx(np.mean([np.sqrt((e ** 2).mean()) for e in errors]))


def test_local_and_global_sums():
    acc = metric.Accuracy()
    acc.update([np.array([0, 1])], [np.array([[1.0, 0.0], [1.0, 0.0]])])
    acc.reset_local()
    assert math.isnan(acc.get()[1])
    acc.update([np.array([0, 1])], [np.array([[1.0, 0.0], [0.0, 1.0]])])
    assert acc.get()[1] == 1.0
    assert acc.get_global()[1] == 0.75
    assert acc.get_global_name_value() == [('accuracy', 0.75)]
    acc.reset()
    assert acc.global_num_inst == 0 and math.isnan(acc.get_global()[1])


def test_composite_metric():
    composite = metric.create(['acc', metric.MSE()])
    composite.add('mae')
    label, pred = np.array([1.0, 0.0]), np.array([1.0, 1.0])
    composite.update([label], [pred])
    names, values = composite.get()
    assert names == ['accuracy', 'mse', 'mae']
    assert values == pytest.approx([0.5, 0.5, 0.5])
    assert composite.get_name_value() == list(zip(names, values))
    assert isinstance(composite.get_metric(1), metric.MSE)
    with pytest.raises(ValueError, match='out of range'):
        composite.get_metric(3)
    composite.reset_local()
    assert all(math.isnan(v) for v in composite.get()[1])
    assert composite.get_global()[1] == pytest.approx([0.5, 0.5, 0.5])


def test_update_dict_selects_named_outputs():
    acc = metric.Accuracy(output_names=['out'], label_names=['label'])
    acc.update_dict({'label': np.array([1]), 'other': np.array([0])},
                    {'out': np.array([[0.0, 1.0]]), 'aux': np.array([[1.0, 0.0]])})
    assert acc.get()[1] == 1.0


def test_loss_and_custom_metrics():
    loss = metric.create('loss')
    loss.update(None, [np.array([1.0, 2.0]), np.array([[3.0]])])
    assert loss.get() == ('loss', 2.0)
    custom = metric.np(lambda label, pred: float(np.abs(label - pred).sum()))
    assert custom.name == 'custom(<lambda>)'
    custom.update([np.array([1.0, 2.0])], [np.array([1.0, 4.0])])
    assert custom.get()[1] == 2.0


def test_registry_names_and_errors():
    expected = {'acc': metric.Accuracy, 'accuracy': metric.Accuracy,
                'top_k_accuracy': metric.TopKAccuracy, 'ce': metric.CrossEntropy,
                'mse': metric.MSE, 'mae': metric.MAE, 'rmse': metric.RMSE,
                'perplexity': metric.Perplexity, 'composite': metric.CompositeEvalMetric}
    for name, klass in expected.items():
        assert metric._lookup(name) is klass
    acc = metric.Accuracy()
    assert metric.create(acc) is acc
    assert isinstance(metric.create('Accuracy'), metric.Accuracy)
    with pytest.raises(ValueError, match="did you mean 'accuracy'"):
        metric.create('acuracy')


def test_config_round_trip():
    original = metric.create('ce', eps=1e-6, name='my-ce')
    copy = metric.create(original.get_config())
    assert isinstance(copy, metric.CrossEntropy)
    assert copy.eps == 1e-6 and copy.name == 'my-ce'


def test_metrics_read_ndarrays():
    acc = metric.create(['acc', 'ce', 'mse'])
    acc.update(nd.array([0, 1, 1]), nd.array([[0.6, 0.4], [0.3, 0.7], [0.8, 0.2]]))
    names, values = acc.get()
    assert names == ['accuracy', 'cross-entropy', 'mse']
    assert values[0] == pytest.approx(2 / 3)
    assert values[1] == pytest.approx(-np.log([0.6, 0.7, 0.2]).mean(), rel=1e-6)
    loss = metric.Loss()
    loss.update(None, nd.array([[1.0, 3.0]]))
    assert loss.get()[1] == 2.0
