import ember as mx, numpy as np
data = mx.sym.var('data', stype='csr'); w = mx.sym.var('w', stype='row_sparse')
y = mx.sym.LogisticRegressionOutput(mx.sym.dot(data, w), mx.sym.var('label'), name='out')
exe = y.simple_bind(mx.cpu(), data=(4, 10), w=(10, 1), label=(4, 1), grad_req={'w': 'write'})
print({k: v.stype for k, v in exe.arg_dict.items()}, {k: (v.stype if v is not None else None) for k, v in exe.grad_dict.items()})
x = mx.test_utils.rand_ndarray((4, 10), 'csr', density=0.3)
exe.arg_dict['w'][:] = mx.nd.ones((10, 1))
exe.forward(is_train=True, data=x, label=mx.nd.ones((4, 1)))
print(exe.outputs[0].asnumpy().ravel())
exe.backward()
g = exe.grad_dict['w']
print(g.stype, g.indices.asnumpy(), g.asnumpy().ravel())
xd = x.asnumpy(); p = 1/(1+np.exp(-xd.sum(1, keepdims=True))); print((xd.T @ (p - 1)).ravel())
print(np.unique(x.indices.asnumpy()))
