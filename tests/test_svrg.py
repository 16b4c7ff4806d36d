"""mx.contrib.svrg_optimization.SVRGModule: the variance-reduced step, checked by hand on a
linear regression, and training through fit."""
import numpy as np
import pytest

import ember as mx
from ember.contrib.svrg_optimization import svrg_module
from ember.contrib.svrg_optimization.svrg_module import SVRGModule


def regression():
    fc = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=1, no_bias=True, name='fc')
    return mx.sym.LinearRegressionOutput(fc, name='lin')


def data(rows=8):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(rows, 2))
    y = x @ np.array([[2.0], [-1.0]])
    return x, y, mx.io.NDArrayIter(mx.nd.array(x), mx.nd.array(y), batch_size=4,
                                   label_name='lin_label')


def gradient(w, x, y):
    """LinearRegressionOutput's gradient of the weight, summed over the rows."""
    return ((x @ w.T - y).T @ x)


def test_each_step_is_the_batch_gradient_corrected_by_the_snapshot():
    x, y, it = data()
    mod = SVRGModule(regression(), label_names=['lin_label'], update_freq=1)
    mod.bind(it.provide_data, it.provide_label)
    w0 = np.array([[0.5, 0.5]])
    mod.init_params(arg_params={'fc_weight': mx.nd.array(w0)})
    mod.init_optimizer(optimizer='sgd', optimizer_params=(('learning_rate', 0.1),))
    with pytest.raises(RuntimeError, match='update_full_grads'):
        mod.update()
    mod.update_full_grads(it)
    mean = (gradient(w0, x[:4], y[:4]) + gradient(w0, x[4:], y[4:])) / 2
    np.testing.assert_allclose(mod._full_grads[0]['fc_weight'].asnumpy(), mean, rtol=1e-5)
    it.reset()
    batches = list(it)
    mod.forward_backward(batches[0])
    mod.update()                 # at the snapshot: exactly the mean gradient
    w1 = w0 - 0.1 * mean / 4
    np.testing.assert_allclose(mod.get_params()[0]['fc_weight'].asnumpy(), w1, rtol=1e-5)
    mod.forward_backward(batches[1])
    mod.update()
    step = gradient(w1, x[4:], y[4:]) - gradient(w0, x[4:], y[4:]) + mean
    np.testing.assert_allclose(mod.get_params()[0]['fc_weight'].asnumpy(),
                               w1 - 0.1 * step / 4, rtol=1e-5)


def test_fit_converges_and_bad_update_frequencies_are_refused():
    _, _, it = data(16)
    mod = SVRGModule(regression(), label_names=['lin_label'], update_freq=2)
    mod.fit(it, num_epoch=30, optimizer_params=(('learning_rate', 0.2),),
            initializer=mx.init.Zero(), eval_metric='mse')
    np.testing.assert_allclose(mod.get_params()[0]['fc_weight'].asnumpy(), [[2, -1]],
                               atol=0.05)
    assert svrg_module.Module is mx.mod.Module
    with pytest.raises(TypeError, match='update_freq'):
        SVRGModule(regression(), label_names=['lin_label'])
    with pytest.raises(ValueError, match='positive'):
        SVRGModule(regression(), label_names=['lin_label'], update_freq=0)
