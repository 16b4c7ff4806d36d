"""A small CNN trains to a stated held-out accuracy with the standard MXNet Gluon idioms.

The data are generated (scikit-learn is not a dependency): 12x12 images of six shapes (a
horizontal bar, a vertical bar, the two diagonals, a plus and a hollow square) at random places
and sizes, with random brightness and Gaussian noise. The shapes move, so a classifier needs
translation-invariant features, which is what the convolutions and pooling give.
"""
import numpy as np
import pytest

import ember as mx
from ember import autograd, gluon
from ember.gluon import nn

SIZE = 12
CLASSES = 6
NOISE = 0.2
TARGET_ACCURACY = 0.95


def _bar(image, rng, horizontal):
    length, row = rng.integers(5, 10), rng.integers(1, SIZE - 1)
    start = rng.integers(0, SIZE - length + 1)
    if horizontal:
        image[row, start:start + length] = 1
    else:
        image[start:start + length, row] = 1


def _diagonal(image, rng, flipped):
    length = rng.integers(5, 10)
    top, left = rng.integers(0, SIZE - length + 1, size=2)
    steps = np.arange(length)
    columns = left + (length - 1 - steps if flipped else steps)
    image[top + steps, columns] = 1


def _plus(image, rng):
    arm = rng.integers(2, 4)
    row, col = rng.integers(arm, SIZE - arm, size=2)
    image[row, col - arm:col + arm + 1] = 1
    image[row - arm:row + arm + 1, col] = 1


def _square(image, rng):
    side = rng.integers(4, 8)
    top, left = rng.integers(0, SIZE - side + 1, size=2)
    bottom, right = top + side - 1, left + side - 1
    image[top, left:right + 1] = image[bottom, left:right + 1] = 1
    image[top:bottom + 1, left] = image[top:bottom + 1, right] = 1


_DRAW = [lambda im, rng: _bar(im, rng, True), lambda im, rng: _bar(im, rng, False),
         lambda im, rng: _diagonal(im, rng, False), lambda im, rng: _diagonal(im, rng, True),
         _plus, _square]


def make_shapes(count, seed):
    """(images (count, 1, SIZE, SIZE) float32, labels (count,) float32), classes balanced."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % CLASSES
    rng.shuffle(labels)
    images = np.zeros((count, 1, SIZE, SIZE), np.float32)
    for image, label in zip(images, labels):
        _DRAW[label](image[0], rng)
        image *= rng.uniform(0.7, 1.3)
    images += rng.normal(0, NOISE, images.shape).astype(np.float32)
    return images, labels.astype(np.float32)


def small_cnn():
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(16, kernel_size=3, padding=1), nn.BatchNorm(), nn.Activation('relu'),
                nn.MaxPool2D(pool_size=2),
                nn.Conv2D(32, kernel_size=3, padding=1), nn.BatchNorm(), nn.Activation('relu'),
                nn.MaxPool2D(pool_size=2),
                nn.Flatten(), nn.Dense(64, activation='relu'), nn.Dense(CLASSES))
    return net


def evaluate(net, loader, ctx):
    metric = mx.metric.Accuracy()
    for data, label in loader:
        metric.update([label.as_in_context(ctx)], [net(data.as_in_context(ctx))])
    return metric.get()[1]


def train(net, loader, ctx, epochs, learning_rate=0.05):
    """SGD with momentum; the last two epochs at a tenth of the rate, which steadies the
    BatchNorm running statistics the held-out evaluation uses."""
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': learning_rate, 'momentum': 0.9, 'wd': 1e-4})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for epoch in range(epochs):
        if epoch == epochs - 2:
            trainer.set_learning_rate(learning_rate / 10)
        for data, label in loader:
            data, label = data.as_in_context(ctx), label.as_in_context(ctx)
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(data.shape[0])


@pytest.fixture
def seeded():
    """DataLoader shuffles with NumPy's global generator (as MXNet's does): seed it, restore."""
    state = np.random.get_state()
    np.random.seed(0)
    mx.random.seed(0)
    yield
    np.random.set_state(state)


@pytest.mark.parametrize('hybridize', [False, True], ids=['imperative', 'hybridized'])
def test_small_cnn_reaches_target_accuracy_on_held_out_shapes(seeded, hybridize):
    ctx = mx.cpu()
    train_data = gluon.data.ArrayDataset(*make_shapes(1200, seed=1))
    test_data = gluon.data.ArrayDataset(*make_shapes(600, seed=2))
    train_loader = gluon.data.DataLoader(train_data, batch_size=32, shuffle=True,
                                         last_batch='discard')
    test_loader = gluon.data.DataLoader(test_data, batch_size=100)

    net = small_cnn()
    net.collect_params().initialize(mx.init.Xavier(), ctx=ctx)
    if hybridize:
        net.hybridize()
    before = evaluate(net, test_loader, ctx)
    train(net, train_loader, ctx, epochs=5)
    after = evaluate(net, test_loader, ctx)
    assert before < 0.5, f'untrained accuracy {before:.3f} should be near chance (1/6)'
    assert after >= TARGET_ACCURACY, f'held-out accuracy {after:.3f} < {TARGET_ACCURACY}'


def test_shapes_are_balanced_and_reproducible():
    images, labels = make_shapes(60, seed=3)
    again, _ = make_shapes(60, seed=3)
    assert images.shape == (60, 1, SIZE, SIZE) and images.dtype == np.float32
    assert np.bincount(labels.astype(int)).tolist() == [10] * CLASSES
    np.testing.assert_array_equal(images, again)
