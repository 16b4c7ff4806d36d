"""The Gluon crash course of MXNet 1.x, in one program: NDArrays, automatic differentiation,
a network, and training it on synthetic data.

Runs unchanged on MXNet 1.9.1 and on Ember (``python -m ember run examples/gluon_crash_course.py``);
``examples/compare.py`` runs both and compares what they print. Random numbers come from
NumPy's seeded generator, and printed values are rounded, so both print the same.
"""
import numpy as np

import mxnet as mx
from mxnet import autograd, gluon, nd
from mxnet.gluon import nn

rng = np.random.RandomState(42)


def show(title, value, digits=4):
    """Print a value rounded, as a plain list: the same text on every framework."""
    values = value.asnumpy() if hasattr(value, 'asnumpy') else value
    print(title, np.round(np.asarray(values, dtype='float64'), digits).tolist())


print('== 1. NDArray: n-dimensional arrays')
x = nd.array([[1, 2, 3], [5, 6, 7]])
print('shape', x.shape, 'size', x.size, 'dtype', x.dtype.__name__, 'context', x.context)
show('ones', nd.ones((2, 3)))
y = nd.array(rng.uniform(-1, 1, (2, 3)))
show('y', y)
show('x * y', x * y)
show('exp(y)', y.exp())
show('x . y^T', nd.dot(x, y.T))
print('x[1, 2] =', x[1, 2].asscalar())
show('x[:, 1:3]', x[:, 1:3])
x[:, 1:3] = 2
show('x after x[:, 1:3] = 2', x)
x[1:2, 0:2] = 4
show('x after x[1:2, 0:2] = 4', x)
a = x.asnumpy()
print('asnumpy gives', type(a).__name__, 'of', a.dtype)
show('nd.array from NumPy', nd.array(a) + 1)

print('== 2. Automatic differentiation')
x = nd.array([[1, 2], [3, 4]])
x.attach_grad()
with autograd.record():
    y = 2 * x * x
y.backward()
show('gradient of 2x^2', x.grad)


def f(a):
    b = a * 2
    while b.norm().asscalar() < 1000:
        b = b * 2
    if b.sum().asscalar() >= 0:
        c = b[0]
    else:
        c = b[1]
    return c


a = nd.array(rng.uniform(size=2))
a.attach_grad()
with autograd.record():
    c = f(a)
c.backward()
print('control flow: the gradient is c / a:', bool(np.allclose(a.grad.asnumpy(),
                                                                  (c / a).asnumpy())))

print('== 3. A network')
net = nn.Sequential()
net.add(nn.Dense(16, activation='relu'), nn.Dense(8, activation='relu'), nn.Dense(2))
net.initialize()
features = rng.normal(size=(4, 5)).astype('float32')
net(nd.array(features))                      # the first call fixes the parameter shapes
# Parameters from NumPy, so that every framework starts from the same weights.
for name, param in sorted(net.collect_params().items()):
    param.set_data(nd.array(rng.uniform(-0.5, 0.5, param.shape)))
    print('parameter', name, param.shape)
show('output', net(nd.array(features)))

print('== 4. Training on synthetic data')
centres = np.array([[1.0, 1.0, 0, 0, 0], [-1.0, -1.0, 0, 0, 0]])
labels = rng.randint(0, 2, 200)
data = centres[labels] + rng.normal(scale=0.8, size=(200, 5))
dataset = gluon.data.ArrayDataset(data.astype('float32'), labels.astype('float32'))
loader = gluon.data.DataLoader(dataset, batch_size=20, shuffle=False)
loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
for epoch in range(5):
    total, correct = 0.0, 0
    for batch, target in loader:
        with autograd.record():
            output = net(batch)
            loss = loss_fn(output, target)
        loss.backward()
        trainer.step(batch.shape[0])
        total += loss.sum().asscalar()
        correct += int((output.argmax(axis=1) == target).sum().asscalar())
    print('epoch %d: loss %.3f, accuracy %.2f' % (epoch, total / 200, correct / 200.0))
show('predicted classes of 5 samples', net(nd.array(data[:5])).argmax(axis=1), 0)
show('their labels                  ', labels[:5], 0)
