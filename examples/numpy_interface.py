"""MXNet's NumPy interface, in the style of its guide: ``mx.np`` arrays, their operators and
autograd, ``mx.npx`` operators, and a Gluon network under ``npx.set_np()``, imperative and
hybridized.

Everything is deterministic (data and weights come from formulas, not random draws) and values
are printed rounded, so the script prints the same lines under MXNet 1.9.1 and under Ember:

    python examples/numpy_interface.py
"""
import numpy as onp

try:
    import mxnet as mx
except ImportError:          # Ember implements MXNet 1.x's API
    import ember as mx

np, npx = mx.np, mx.npx
npx.set_np()


def show(label, array, digits=4):
    """One line: the label, the shape, the dtype and the values rounded."""
    values = onp.round(onp.asarray(array.asnumpy(), dtype=onp.float64), digits)
    print(f'{label}: shape={array.shape} dtype={array.dtype} values={values.tolist()}')


# ---- Arrays: created as in NumPy, float32 by default -------------------------------------
a = np.array([[1, 2, 3], [4, 5, 6]])
show('array', a)
show('zeros', np.zeros((2, 3)))
show('ones int32', np.ones((3,), dtype='int32'))
show('arange', np.arange(6).reshape(2, 3))
show('linspace', np.linspace(0, 1, 5))
show('eye', np.eye(3))
show('full', np.full((2, 2), 7.5))
show('scalar', np.array(3.5))
print('scalar ndim:', np.array(3.5).ndim, 'zero-size shape:', np.zeros((0, 3)).shape)

# ---- Operators: element-wise, broadcasting, dtype promotion ------------------------------
b = np.array([10.0, 20.0, 30.0])
show('a + b (broadcast)', a + b)
show('a * 2 - 1', a * 2 - 1)
show('a ** 2', a ** 2)
show('exp(a / 6)', np.exp(a / 6))
show('a @ a.T', a @ a.T)
show('int / int', np.array([1, 2, 3], dtype='int32') / 2)
show('int32 + float64', np.ones(2, dtype='int32') + np.ones(2, dtype='float64'))
show('maximum', np.maximum(a, 3.5))
show('comparison', a > 3)

# ---- Reductions and statistics -----------------------------------------------------------
show('sum', a.sum())
show('sum axis 0', a.sum(axis=0))
show('mean axis 1 keepdims', a.mean(axis=1, keepdims=True))
show('std', a.std())
show('max', np.max(a, axis=1))
show('argmax', np.argmax(a, axis=1))
show('cumsum', np.cumsum(a))
show('prod int32', np.prod(np.array([1, 2, 3, 4], dtype='int32')))

# ---- Indexing: basic slices, integer arrays and boolean masks ----------------------------
x = np.arange(12).reshape(3, 4)
show('x[1]', x[1])
show('x[1, 2]', x[1, 2])
show('x[:, 1:3]', x[:, 1:3])
show('x[::2, ::-1]', x[::2, ::-1])
show('x[[0, 2]]', x[np.array([0, 2], dtype='int64')])
show('x[x > 6]', x[x > 6])
y = x.copy()
y[1] = 0
y[y > 8] = -1
show('after assignment', y)
y += 1
show('after y += 1', y)

# ---- Shapes ------------------------------------------------------------------------------
show('transpose', x.T)
show('reshape -1', x.reshape(-1, 6))
show('expand_dims', np.expand_dims(b, 0))
show('concatenate', np.concatenate([a, a], axis=1))
show('stack', np.stack([b, b]))
parts = np.split(np.arange(6), 3)
print('split:', [p.asnumpy().tolist() for p in parts])
show('where', np.where(a > 3, a, -a))
show('clip', np.clip(a, 2, 5))
show('sort', np.sort(np.array([3.0, 1.0, 2.0])))
show('unique', np.unique(np.array([3.0, 1.0, 3.0, 2.0, 1.0])))

# ---- Linear algebra ------------------------------------------------------------------------
m = np.array([[4.0, 1.0], [1.0, 3.0]])
show('inv', np.linalg.inv(m))
show('det', np.linalg.det(m))
show('norm', np.linalg.norm(m))
show('solve', np.linalg.solve(m, np.array([1.0, 2.0])))
show('eigvalsh', np.linalg.eigvalsh(m))
show('cholesky', np.linalg.cholesky(m))

# ---- To and from NumPy ---------------------------------------------------------------------
host = a.asnumpy()
print('asnumpy:', type(host).__name__, host.dtype, host.tolist())
back = np.array(onp.arange(4, dtype=onp.int64))
show('from NumPy keeps its dtype', back)
print('item:', a[1, 1].item(), 'tolist:', a[0].tolist())

# ---- Autograd ------------------------------------------------------------------------------
w = np.array([[0.5, -1.0], [2.0, 0.25]])
w.attach_grad()
with mx.autograd.record():
    loss = (np.tanh(w @ w) * w).sum() + (w ** 3).mean()
loss.backward()
show('loss', loss)
show('gradient', w.grad)

# ---- mx.npx: MXNet's operators on mx.np arrays ---------------------------------------------
z = np.array([[-1.0, 2.0, 0.5], [3.0, -4.0, 1.0]])
show('npx.relu', npx.relu(z))
show('npx.sigmoid', npx.sigmoid(z))
show('npx.softmax', npx.softmax(z))
show('npx.log_softmax', npx.log_softmax(z, axis=0))
show('npx.one_hot', npx.one_hot(np.array([0, 2]), 3))
show('npx.pick', npx.pick(z, np.array([1, 0])))
show('npx.topk', npx.topk(z, k=2, ret_typ='value'))
show('npx.reshape', npx.reshape(np.zeros((2, 3, 4)), (-2, -1)))
show('npx.batch_dot', npx.batch_dot(np.ones((2, 2, 3)), np.ones((2, 3, 1))))


# ---- Gluon under npx.set_np(): mx.np parameters and outputs --------------------------------
class MLP(mx.gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.hidden = mx.gluon.nn.Dense(8, activation='tanh')
            self.output = mx.gluon.nn.Dense(1)

    def hybrid_forward(self, F, x):
        return self.output(self.hidden(x)) + F.np.ones((1, 1)) * 0.1


def deterministic_weights(net):
    """Weights from a formula: the same in every framework and every run."""
    for index, (_, param) in enumerate(sorted(net.collect_params().items())):
        size = int(onp.prod(param.shape))
        values = onp.cos(onp.arange(size) * 0.7 + index).reshape(param.shape) * 0.3
        param.set_data(np.array(values, dtype='float32'))


features = np.array(onp.stack([onp.linspace(-1, 1, 16), onp.sin(onp.linspace(0, 3, 16))],
                              axis=1), dtype='float32')
targets = (features[:, 0] * 0.8 - features[:, 1] * 0.5).reshape(-1, 1)

net = MLP()
net.initialize()
net(features)                      # the first call infers the parameters' shapes
deterministic_weights(net)
print('parameter type:', type(net.hidden.weight.data()).__name__)
show('first predictions', net(features)[:4, 0])

trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.2})
loss_fn = mx.gluon.loss.L2Loss()
for epoch in range(5):
    with mx.autograd.record():
        loss = loss_fn(net(features), targets)
    loss.backward()
    trainer.step(features.shape[0])
    print(f'epoch {epoch}: loss {float(loss.mean()):.5f}')

imperative = net(features)
net.hybridize()
hybridized = net(features)
show('hybridized predictions', hybridized[:4, 0])
print('hybridized equals imperative:',
      bool(np.abs(hybridized - imperative).max() < 1e-5))

npx.reset_np()
