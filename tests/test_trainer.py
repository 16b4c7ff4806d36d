"""gluon.Trainer: steps, learning rate, stale gradients, saved states, several devices."""
import numpy as np
import pytest

import ember as mx
from ember.base import EmberError

RNG = np.random.default_rng(11)
X = RNG.uniform(-1, 1, (8, 3)).astype('float32')
Y = (X @ np.array([[1.0], [-2.0], [0.5]]) + 0.25).astype('float32')


def dense(ctx=None, prefix='net_'):
    net = mx.gluon.nn.Dense(1, in_units=3, prefix=prefix)
    net.initialize(mx.init.Constant(0.1), ctx=ctx)
    return net



def train_step(net, trainer, x=X, y=Y, ctx=None):
    x, y = mx.nd.array(x, ctx=ctx), mx.nd.array(y, ctx=ctx)
    with mx.autograd.record():
        loss = ((net(x) - y) ** 2).sum()
    loss.backward()
    trainer.step(x.shape[0])
    return loss.asscalar() / x.shape[0]


def test_step_reduces_the_loss():
    net = dense()
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd',
                               {'learning_rate': 0.2, 'momentum': 0.5})
    losses = [train_step(net, trainer) for _ in range(15)]
    assert losses[-1] < 0.2 * losses[0]
    assert all(b < a for a, b in zip(losses[:5], losses[1:6]))


def test_step_matches_sgd_by_hand():
    net = dense()
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
    weight = net.weight.data().asnumpy().astype(np.float64)
    bias = net.bias.data().asnumpy().astype(np.float64)
    train_step(net, trainer)
    error = X @ weight.T + bias - Y                  # d(sum of squares)/d(output) = 2 * error
    grad_w = 2 * error.T @ X / len(X)
    grad_b = 2 * error.sum(axis=0) / len(X)
    np.testing.assert_allclose(net.weight.data().asnumpy(), weight - 0.1 * grad_w, rtol=1e-5)
    np.testing.assert_allclose(net.bias.data().asnumpy(), bias - 0.1 * grad_b, rtol=1e-5)


def test_learning_rate_and_set_learning_rate():
    net = dense()
    trainer = mx.gluon.Trainer(net.collect_params(), 'adam', {'learning_rate': 0.05})
    assert trainer.learning_rate == 0.05
    assert isinstance(trainer.optimizer, mx.optimizer.Adam)
    trainer.set_learning_rate(0.01)
    assert trainer.learning_rate == 0.01 and trainer.optimizer.lr == 0.01


def test_learning_rate_follows_the_scheduler():
    net = dense()
    schedule = mx.lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=0.4)
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'lr_scheduler': schedule})
    rates = []
    for _ in range(5):
        train_step(net, trainer)
        rates.append(trainer.learning_rate)
    assert rates == pytest.approx([0.4, 0.4, 0.2, 0.2, 0.1])


def test_optimizer_instance_and_its_params_are_exclusive():
    net = dense()
    sgd = mx.optimizer.SGD(learning_rate=0.3)
    trainer = mx.gluon.Trainer(net.collect_params(), sgd)
    assert trainer.optimizer is sgd and trainer.learning_rate == 0.3
    with pytest.raises(ValueError, match='optimizer_params must be None'):
        mx.gluon.Trainer(net.collect_params(), sgd, {'learning_rate': 0.1})


def test_lr_mult_and_wd_mult_of_parameters_apply():
    net = dense()
    net.bias.lr_mult = 0.0
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
    bias = net.bias.data().asnumpy()
    train_step(net, trainer)
    np.testing.assert_array_equal(net.bias.data().asnumpy(), bias)


def test_stale_gradient_raises_unless_ignored():
    net = dense()
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
    train_step(net, trainer)
    weight = net.weight.data().asnumpy()
    with pytest.raises(EmberError, match='net_weight.*ignore_stale_grad'):
        trainer.step(1)
    np.testing.assert_array_equal(net.weight.data().asnumpy(), weight)
    trainer.step(1, ignore_stale_grad=True)
    np.testing.assert_array_equal(net.weight.data().asnumpy(), weight)


def test_save_and_load_states_resume_training(tmp_path):
    def make():
        net = dense()
        return net, mx.gluon.Trainer(net.collect_params(), 'adam', {'learning_rate': 0.05})

    net, trainer = make()
    for _ in range(3):
        train_step(net, trainer)
    fname = str(tmp_path / 'trainer.states')
    trainer.save_states(fname)
    params = {name: p.data().copy() for name, p in net.collect_params().items()}
    for _ in range(2):
        train_step(net, trainer)

    other, resumed = make()
    for name, p in other.collect_params().items():
        p.set_data(params[name])
    train_step(other, resumed)       # creates the updaters; its result is overwritten below
    for name, p in other.collect_params().items():
        p.set_data(params[name])
    resumed.load_states(fname)
    assert isinstance(resumed.optimizer, mx.optimizer.Adam)
    for _ in range(2):
        train_step(other, resumed)
    np.testing.assert_allclose(other.weight.data().asnumpy(), net.weight.data().asnumpy(),
                               rtol=1e-5)


def test_two_devices_sum_gradients_and_keep_copies_equal():
    devices = [mx.cpu(0), mx.cpu(1)]
    net = dense(ctx=devices)
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
    single = dense(ctx=mx.cpu(0), prefix='single_')
    single_trainer = mx.gluon.Trainer(single.collect_params(), 'sgd', {'learning_rate': 0.1})
    for _ in range(3):
        halves = [(X[:4], Y[:4]), (X[4:], Y[4:])]
        with mx.autograd.record():
            losses = [((net(mx.nd.array(x, ctx=d)) - mx.nd.array(y, ctx=d)) ** 2).sum()
                      for (x, y), d in zip(halves, devices)]
        for loss in losses:
            loss.backward()
        trainer.step(len(X))
        train_step(single, single_trainer)
    for param in (net.weight, net.bias):
        copies = [c.asnumpy() for c in param.list_data()]
        np.testing.assert_array_equal(copies[0], copies[1])
    np.testing.assert_allclose(net.weight.data(mx.cpu(1)).asnumpy(),
                               single.weight.data().asnumpy(), rtol=1e-5)
    np.testing.assert_allclose(net.bias.data(mx.cpu(0)).asnumpy(),
                               single.bias.data().asnumpy(), rtol=1e-5)
