"""mx.mod.SequentialModule, PythonModule, PythonLossModule and mx.model.FeedForward."""
import numpy as np
import pytest

import ember as mx


def _data(n=16):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.float32)


def _classifier(name='fc'):
    return mx.sym.SoftmaxOutput(mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2,
                                                      name=name), name='softmax')


def test_sequential_module_trains_a_chain_and_passes_gradients_back():
    x, y = _data()
    it = mx.io.NDArrayIter(x, y, batch_size=8)
    hidden = mx.mod.Module(mx.sym.relu(mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=8,
                                                            name='hidden')), label_names=None)
    chain = mx.mod.SequentialModule()
    chain.add(hidden).add(mx.mod.Module(_classifier()), take_labels=True, auto_wiring=True)
    chain.fit(it, num_epoch=30, optimizer_params={'learning_rate': 0.5},
              initializer=mx.init.Xavier())
    assert chain.score(it, 'acc')[0][1] > 0.9
    args, _ = chain.get_params()
    assert {'hidden_weight', 'fc_weight'} <= set(args)
    assert chain.output_shapes[0][1] == (8, 2) and chain.label_shapes[0].name == 'softmax_label'
    with pytest.raises(ValueError, match='unknown options'):
        chain.add(hidden, take_label=True)


def test_sequential_module_rejects_duplicate_parameter_names():
    chain = mx.mod.SequentialModule()
    chain.add(mx.mod.Module(mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=4, name='fc'),
                            label_names=None))
    chain.add(mx.mod.Module(_classifier('fc')), take_labels=True, auto_wiring=True)
    chain.bind([('data', (2, 3))], [('softmax_label', (2,))])
    with pytest.raises(ValueError, match="'fc_weight' of module 1"):
        chain.init_params()


def test_python_loss_module_finishes_a_chain():
    x, y = _data()
    it = mx.io.NDArrayIter(x, y, batch_size=8)
    scores = mx.mod.Module(mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=1, name='lin'),
                           label_names=None)

    def squared_error_grad(pred, label):     # d/dpred of (pred - label)^2 / 2
        return pred - label.reshape(pred.shape)
    loss = mx.mod.PythonLossModule(grad_func=squared_error_grad)
    chain = mx.mod.SequentialModule().add(scores).add(loss, take_labels=True, auto_wiring=True)
    chain.fit(it, num_epoch=20, eval_metric='mse', optimizer_params={'learning_rate': 0.1})
    assert chain.score(it, 'mse')[0][1] < 0.15
    assert loss.output_names == ['pyloss_output'] and loss.get_params() == ({}, {})
    with pytest.raises(ValueError, match='no head gradients'):
        loss.backward(out_grads=[mx.nd.ones((1,))])


def test_python_module_computes_what_its_subclass_says():
    class Doubler(mx.mod.PythonModule):
        def _compute_output_shapes(self):
            return [('double_output', self._data_shapes[0][1])]

        def forward(self, data_batch, is_train=None):
            self._out = data_batch.data[0] * 2

        def get_outputs(self, merge_multi_context=True):
            return [self._out]
    module = Doubler(['data'], None, ['double_output'])
    module.bind([('data', (2, 2))], for_training=False)
    module.init_params()
    module.forward(mx.io.DataBatch([mx.nd.ones((2, 2))]))
    assert module.get_outputs()[0].asnumpy().tolist() == [[2.0, 2.0]] * 2
    assert module.output_shapes == [('double_output', (2, 2))]
    with pytest.raises(ValueError, match="shapes name \\['x'\\]"):
        Doubler(['data'], None, ['o']).bind([('x', (1,))])


def test_feed_forward_fits_predicts_scores_saves_and_loads(tmp_path):
    x, y = _data(32)
    with pytest.warns(DeprecationWarning, match='mx.mod.Module'):
        model = mx.model.FeedForward(_classifier(), num_epoch=20, numpy_batch_size=8,
                                     learning_rate=0.5, initializer=mx.init.Xavier())
    model.fit(x, y, eval_data=(x, y))
    assert model.score(mx.io.NDArrayIter(x, y, 8)) > 0.9
    probabilities, data, labels = model.predict(x[:5], return_data=True)
    assert probabilities.shape == (5, 2) and data.shape == (5, 4) and labels.shape == (5,)
    np.testing.assert_allclose(probabilities.sum(axis=1), np.ones(5), rtol=1e-5)
    prefix = str(tmp_path / 'ff')
    model.save(prefix)
    with pytest.warns(DeprecationWarning):
        again = mx.model.FeedForward.load(prefix, 20)
    np.testing.assert_allclose(again.predict(x[:5]), probabilities, rtol=1e-6)
    assert isinstance(model, mx.model.BASE_ESTIMATOR) and mx.model.SKLEARN_INSTALLED in (True,
                                                                                        False)


def test_feed_forward_create_trains_with_an_epoch_size():
    x, y = _data(32)
    with pytest.warns(DeprecationWarning):
        model = mx.model.FeedForward.create(_classifier(), x, y, num_epoch=2, epoch_size=2,
                                            numpy_batch_size=4, learning_rate=0.1)
    assert set(model.arg_params) == {'fc_weight', 'fc_bias'}
    with pytest.raises(ValueError, match='y is needed'), pytest.warns(DeprecationWarning):
        mx.model.FeedForward(_classifier(), num_epoch=1).fit(x)
