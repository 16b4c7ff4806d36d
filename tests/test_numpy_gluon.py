"""Gluon under NumPy semantics (``npx.set_np()`` / ``use_np``): parameters, layer outputs and
data batches are mx.np arrays; hybridized blocks trace mx.np code into a graph and give what
the imperative run gives, forward and backward."""
from __future__ import annotations

import numpy as onp
import pytest

import ember as mx
from ember import gluon, util
from ember import numpy as np
from ember import numpy_extension as npx


@pytest.fixture
def np_semantics():
    npx.set_np()
    yield
    npx.reset_np()


def _forward_backward(net, x):
    with mx.autograd.record():
        out = net(x)
        loss = (out * out).sum()
    loss.backward()
    grads = {name: p.grad().asnumpy() for name, p in net.collect_params().items()
             if p.grad_req != 'null'}
    return out, grads


def _compare_imperative_and_hybridized(net, x):
    first, first_grads = _forward_backward(net, x)
    net.hybridize()
    second, second_grads = _forward_backward(net, x)
    assert type(first) is np.ndarray and type(second) is np.ndarray
    onp.testing.assert_allclose(first.asnumpy(), second.asnumpy(), rtol=1e-5, atol=1e-6)
    for name in first_grads:
        onp.testing.assert_allclose(first_grads[name], second_grads[name], rtol=1e-4,
                                    atol=1e-6, err_msg=name)
    return second


def test_layers_give_np_arrays_and_hybridize(np_semantics):
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(gluon.nn.Conv2D(4, 3, padding=1, activation='relu'),
                gluon.nn.BatchNorm(),
                gluon.nn.MaxPool2D(),
                gluon.nn.Dense(8, activation='tanh'),
                gluon.nn.Dropout(0.0),
                gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    x = np.random.uniform(size=(2, 3, 6, 6))
    out = _compare_imperative_and_hybridized(net, x)
    assert out.shape == (2, 3)
    for param in net.collect_params().values():
        assert type(param.data()) is np.ndarray
        if param.grad_req != 'null':
            assert type(param.grad()) is np.ndarray


@util.use_np
class Attention(gluon.HybridBlock):
    """mx.np and mx.npx code in hybrid_forward, with creation functions and indexing."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.query = gluon.nn.Dense(units, flatten=False)
            self.scale = self.params.get('scale', shape=(units,), init=mx.init.One())

    def hybrid_forward(self, F, x, scale):
        q = self.query(x) * scale
        scores = F.np.einsum('bik,bjk->bij', q, q) / F.np.sqrt(F.np.array(q.shape[-1])) \
            if F is mx.nd else F.np.einsum('bik,bjk->bij', q, q) * 0.5
        weights = F.npx.softmax(scores, axis=-1)
        mixed = F.np.matmul(weights, x)
        shifted = mixed + F.np.ones((1, 1, 4)) - F.np.zeros((4,))
        return F.np.tanh(shifted[:, :, ::2]).sum(axis=-1) + F.np.abs(x).mean(axis=(1, 2),
                                                                             keepdims=True)[:, 0]


def test_use_np_block_hybridizes():
    block = Attention(4)
    block.initialize(mx.init.Uniform(0.3))
    x = np.random.uniform(-1, 1, size=(2, 3, 4))
    with util.np_shape(), util.np_array():
        first, _ = _forward_backward(block, x)
        block.hybridize()
        second, _ = _forward_backward(block, x)
    assert type(second) is np.ndarray and second.shape == (2, 3)
    onp.testing.assert_allclose(first.asnumpy(), second.asnumpy(), rtol=1e-5, atol=1e-6)
    assert not util.is_np_array()


def test_training_with_trainer_and_losses(np_semantics):
    mx.random.seed(1)
    net = gluon.nn.HybridSequential()
    with net.name_scope():
        net.add(gluon.nn.Dense(16, activation='relu'), gluon.nn.Dense(2))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    x = np.random.normal(size=(64, 2))
    label = (x[:, 0] * x[:, 1] > 0).astype('float32')
    losses = []
    for _ in range(40):
        with mx.autograd.record():
            loss = loss_fn(net(x), label)
        loss.backward()
        trainer.step(64)
        losses.append(float(loss.mean()))
    assert type(loss) is np.ndarray
    assert losses[-1] < 0.7 * losses[0]


def test_data_loader_and_deferred_init(np_semantics):
    dataset = gluon.data.ArrayDataset(onp.arange(12, dtype=onp.float32).reshape(6, 2),
                                      onp.arange(6))
    batches = list(gluon.data.DataLoader(dataset, batch_size=3))
    assert all(type(x) is np.ndarray and type(y) is np.ndarray for x, y in batches)
    for pool in (True, False):                  # worker threads, then worker processes
        with gluon.data.DataLoader(dataset, batch_size=3, num_workers=2,
                                   thread_pool=pool) as loader:
            workers = list(loader)
        assert all(type(x) is np.ndarray and type(y) is np.ndarray for x, y in workers)
        assert all(onp.array_equal(x.asnumpy(), b[0].asnumpy())
                   for (x, _), b in zip(workers, batches))
    dense = gluon.nn.Dense(5)
    dense.initialize()
    out = dense(batches[0][0])
    assert out.shape == (3, 5) and dense.weight.shape == (5, 2)
    assert type(dense.weight.data()) is np.ndarray


def test_outside_np_semantics_gluon_stays_legacy():
    dense = gluon.nn.Dense(2, in_units=3)
    dense.initialize()
    out = dense(mx.nd.ones((1, 3)))
    assert type(out) is mx.nd.NDArray and type(dense.weight.data()) is mx.nd.NDArray
