"""mx.mod.Module and mx.model: fit/score/predict, checkpoints in MXNet's files, data
parallelism over several contexts, and benchmarks/benchmark_score.py."""
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.module.executor_group import split_input_slice
from data_files import MXNET_FIXTURES as FIXTURES

ROOT = Path(__file__).resolve().parents[1]


def mlp(hidden=16, classes=2):
    data = mx.sym.var('data')
    net = mx.sym.FullyConnected(data, num_hidden=hidden, name='fc1')
    net = mx.sym.Activation(net, act_type='relu', name='relu1')
    net = mx.sym.FullyConnected(net, num_hidden=classes, name='fc2')
    return mx.sym.SoftmaxOutput(net, name='softmax')


def separable(n=200, dim=5, seed=0):
    """Two classes split by the plane x0 + x1 = 0."""
    rng = np.random.RandomState(seed)
    x = rng.randn(n, dim).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.float32)


def numpy_mlp(arg_params, x):
    p = {k: v.asnumpy() for k, v in arg_params.items()}
    hidden = np.maximum(x @ p['fc1_weight'].T + p['fc1_bias'], 0)
    logits = hidden @ p['fc2_weight'].T + p['fc2_bias']
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def bound(symbol=None, batch=10, dim=5, context=None, **kwargs):
    mod = mx.mod.Module(symbol or mlp(), context=context or mx.cpu(), **kwargs)
    mod.bind(data_shapes=[('data', (batch, dim))], label_shapes=[('softmax_label', (batch,))])
    mod.init_params(mx.init.Xavier())
    return mod


def batch_of(x, y=None):
    return mx.io.DataBatch([mx.nd.array(x)], None if y is None else [mx.nd.array(y)])


# ----------------------------------------------------------------------------------------------
# Training and evaluation

def test_fit_learns_a_separable_problem_and_logs_speed(caplog):
    caplog.set_level(logging.INFO)
    np.random.seed(1)
    mx.random.seed(1)       # Xavier draws from Ember's streams: independent of earlier tests
    x, y = separable()
    train = mx.io.NDArrayIter(x, y, batch_size=20, shuffle=True)
    mod = mx.mod.Module(mlp(), context=mx.cpu())
    mod.fit(train, num_epoch=8, optimizer='sgd',
            optimizer_params={'learning_rate': 0.5, 'momentum': 0.9},
            initializer=mx.init.Xavier(),
            batch_end_callback=mx.callback.Speedometer(20, frequent=5))
    ((name, accuracy),) = mod.score(mx.io.NDArrayIter(x, y, batch_size=20), 'acc')
    assert name == 'accuracy' and accuracy > 0.95
    messages = [r.getMessage() for r in caplog.records]
    assert any('Speed:' in m and 'samples/sec' in m for m in messages)
    assert any(m.startswith('Epoch[7] Train-accuracy=') for m in messages)


def test_predict_removes_padding_and_matches_numpy():
    x, y = separable(n=23)
    mod = bound(batch=10)
    out = mod.predict(mx.io.NDArrayIter(x, y, batch_size=10))
    assert out.shape == (23, 2)
    arg_params, _ = mod.get_params()
    np.testing.assert_allclose(out.asnumpy(), numpy_mlp(arg_params, x), rtol=1e-5, atol=1e-6)


def test_predict_without_merging_and_iter_predict():
    x, y = separable(n=23)
    mod = bound(batch=10)
    it = mx.io.NDArrayIter(x, y, batch_size=10)
    per_batch = mod.predict(it, merge_batches=False)
    assert [[o.shape for o in outputs] for outputs in per_batch] == [[(10, 2)], [(10, 2)],
                                                                     [(3, 2)]]
    assert [(n, outs[0].shape[0]) for outs, n, _ in mod.iter_predict(it, num_batch=2)] == [
        (0, 10), (1, 10)]
    assert isinstance(mod.predict(it, always_output_list=True), list)


def test_score_counts_what_it_sees_and_calls_callbacks():
    x, y = separable(n=40)
    mod = bound(batch=10)
    seen = []
    result = mod.score(mx.io.NDArrayIter(x, y, batch_size=10), ['acc', 'ce'], num_batch=3,
                       batch_end_callback=lambda p: seen.append(p.nbatch))
    probabilities = numpy_mlp(mod.get_params()[0], x[:30])
    expected_acc = np.mean(probabilities.argmax(axis=1) == y[:30])
    assert seen == [0, 1, 2]
    assert dict(result)['accuracy'] == pytest.approx(expected_acc)
    assert dict(result)['cross-entropy'] == pytest.approx(
        -np.mean(np.log(probabilities[np.arange(30), y[:30].astype(int)])), rel=1e-5)


def test_forward_with_a_new_batch_size_reshapes():
    mod = bound(batch=10)
    x, y = separable(n=4)
    mod.forward(batch_of(x, y), is_train=False)
    assert mod.get_outputs()[0].shape == (4, 2)
    assert (mod.data_shapes[0].shape, mod.label_shapes[0].shape) == ((4, 5), (4,))
    np.testing.assert_allclose(mod.get_outputs()[0].asnumpy(),
                               numpy_mlp(mod.get_params()[0], x), rtol=1e-5, atol=1e-6)


def test_one_sgd_step_follows_the_softmax_gradient():
    x, y = separable(n=10)
    mod = bound(batch=10)
    mod.init_optimizer(optimizer='sgd', optimizer_params={'learning_rate': 0.1})
    before = {k: v.asnumpy().copy() for k, v in mod.get_params()[0].items()}
    mod.forward_backward(batch_of(x, y))
    mod.update()
    # the gradient of softmax cross-entropy wrt fc2_bias is p - onehot(y); rescaled by 1/batch
    p = numpy_mlp({k: mx.nd.array(v) for k, v in before.items()}, x)
    grad = (p - np.eye(2)[y.astype(int)]).mean(axis=0)
    after = mod.get_params()[0]['fc2_bias'].asnumpy()
    np.testing.assert_allclose(after, before['fc2_bias'] - 0.1 * grad, rtol=1e-5, atol=1e-6)


def test_fixed_params_do_not_change():
    x, y = separable(n=10)
    mod = bound(batch=10, fixed_param_names=['fc1_weight'])
    mod.init_optimizer(optimizer_params={'learning_rate': 1.0})
    fixed = mod.get_params()[0]['fc1_weight'].asnumpy().copy()
    trained = mod.get_params()[0]['fc2_weight'].asnumpy().copy()
    mod.forward_backward(batch_of(x, y))
    mod.update()
    np.testing.assert_array_equal(mod.get_params()[0]['fc1_weight'].asnumpy(), fixed)
    assert not np.allclose(mod.get_params()[0]['fc2_weight'].asnumpy(), trained)


def test_input_gradients_with_out_grads_on_two_devices():
    weight = np.arange(6, dtype=np.float32).reshape(2, 3)
    net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2, no_bias=True, name='fc')
    mod = mx.mod.Module(net, label_names=None, context=[mx.cpu(0), mx.cpu(1)])
    mod.bind(data_shapes=[('data', (4, 3))], inputs_need_grad=True)
    mod.init_params(arg_params={'fc_weight': mx.nd.array(weight)})
    mod.forward(batch_of(np.ones((4, 3))), is_train=True)
    head = np.arange(8, dtype=np.float32).reshape(4, 2)
    mod.backward([mx.nd.array(head)])
    np.testing.assert_allclose(mod.get_input_grads()[0].asnumpy(), head @ weight)


def test_state_inputs_are_set_by_value_and_by_array():
    net = mx.sym.elemwise_add(mx.sym.var('data'), mx.sym.var('state'))
    mod = mx.mod.Module(net, label_names=None, state_names=['state'])
    mod.bind(data_shapes=[('data', (2, 3))], for_training=False)
    mod.init_params()
    mod.set_states(value=2.0)
    mod.forward(batch_of(np.ones((2, 3))))
    np.testing.assert_array_equal(mod.get_outputs()[0].asnumpy(), np.full((2, 3), 3.0))
    mod.set_states(states=[[mx.nd.full((2, 3), 5.0)]])
    mod.forward(batch_of(np.ones((2, 3))))
    np.testing.assert_array_equal(mod.get_outputs()[0].asnumpy(), np.full((2, 3), 6.0))


# ----------------------------------------------------------------------------------------------
# Data parallelism

def train_steps(context, steps=3, kvstore='local'):
    x, y = separable(n=12 * steps)
    mod = mx.mod.Module(mlp(), context=context)
    mod.bind(data_shapes=[('data', (12, 5))], label_shapes=[('softmax_label', (12,))])
    mx.random.seed(7)
    mod.init_params(mx.init.Xavier())
    mod.init_optimizer(kvstore=kvstore, optimizer='sgd',
                       optimizer_params={'learning_rate': 0.3, 'momentum': 0.9})
    for step in range(steps):
        part = slice(12 * step, 12 * (step + 1))
        mod.forward_backward(batch_of(x[part], y[part]))
        mod.update()
    return mod


def test_two_contexts_train_like_one():
    one = train_steps(mx.cpu(0))
    two = train_steps([mx.cpu(0), mx.cpu(1)])
    for name, value in one.get_params()[0].items():
        np.testing.assert_allclose(two.get_params()[0][name].asnumpy(), value.asnumpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=name)
    devices = {arr.context for arr in two._exec_group.param_arrays[0]}
    assert devices == {mx.cpu(0), mx.cpu(1)}


def test_outputs_merge_across_devices_in_batch_order():
    x, _ = separable(n=10)
    mod = bound(batch=10, context=[mx.cpu(0), mx.cpu(1)], work_load_list=[2, 3])
    mod.forward(batch_of(x), is_train=False)
    parts = mod.get_outputs(merge_multi_context=False)[0]
    assert [p.shape[0] for p in parts] == [4, 6]
    np.testing.assert_allclose(mod.get_outputs()[0].asnumpy(),
                               numpy_mlp(mod.get_params()[0], x), rtol=1e-5, atol=1e-6)


def test_split_input_slice_rejects_empty_parts():
    assert split_input_slice(5, [1, 1]) == [slice(0, 2), slice(2, 5)]
    with pytest.raises(ValueError, match='without examples'):
        split_input_slice(1, [1, 1])


class DictStore(mx.kv.KVStoreBase):
    """A custom KVStore with MXNet's protocol: the optimizer runs on the store's copy."""

    def __init__(self):
        self.values, self.updater = {}, None

    @property
    def type(self):
        return 'dictstore'

    def is_capable(self, capability):
        return True

    def init(self, key, value):
        self.values[key] = value.copy()

    def broadcast(self, key, value, out, priority=0):
        self.init(key, value)
        self.pull(key, out)

    def set_optimizer(self, optimizer):
        self.updater = mx.optimizer.get_updater(optimizer)
        self.keys = {}

    def push(self, key, grads, priority=0):
        total = mx.nd.add_n(*[g.as_in_context(mx.cpu()) for g in grads])
        index = self.keys.setdefault(key, len(self.keys))
        self.updater(index, total, self.values[key])

    def pull(self, key, out, priority=0):
        for array in out:
            self.values[key].copyto(array)

    def pushpull(self, key, value, out=None, priority=0):
        self.push(key, value)
        self.pull(key, out)


def test_a_kvstore_object_updates_on_the_store():
    local = train_steps([mx.cpu(0), mx.cpu(1)])
    on_store = train_steps([mx.cpu(0), mx.cpu(1)], kvstore=DictStore())
    assert on_store._update_on_kvstore
    for name, value in local.get_params()[0].items():
        np.testing.assert_allclose(on_store.get_params()[0][name].asnumpy(), value.asnumpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=name)


# ----------------------------------------------------------------------------------------------
# Checkpoints

def test_checkpoint_round_trip_in_mxnet_files(tmp_path):
    x, y = separable(n=20)
    mod = bound(batch=10)
    prefix = str(tmp_path / 'net')
    mod.save_checkpoint(prefix, 3)
    saved = mx.nd.load(f'{prefix}-0003.params')
    assert sorted(saved) == ['arg:fc1_bias', 'arg:fc1_weight', 'arg:fc2_bias', 'arg:fc2_weight']
    symbol, arg_params, aux_params = mx.model.load_checkpoint(prefix, 3)
    assert symbol.tojson() == mod.symbol.tojson() and aux_params == {}
    loaded = mx.mod.Module.load(prefix, 3)
    loaded.bind(data_shapes=[('data', (10, 5))], label_shapes=[('softmax_label', (10,))],
                for_training=False)
    it = mx.io.NDArrayIter(x, y, batch_size=10)
    np.testing.assert_array_equal(loaded.predict(it).asnumpy(), mod.predict(it).asnumpy())


def test_save_params_and_load_params(tmp_path):
    mod = bound(batch=10)
    mod.save_params(str(tmp_path / 'net.params'))
    other = bound(batch=10)
    other.load_params(str(tmp_path / 'net.params'))
    for name, value in mod.get_params()[0].items():
        np.testing.assert_array_equal(other.get_params()[0][name].asnumpy(), value.asnumpy())


def test_optimizer_states_resume_training_exactly(tmp_path):
    x, y = separable(n=40)
    prefix = str(tmp_path / 'net')

    def step(mod, part):
        mod.forward_backward(batch_of(x[part], y[part]))
        mod.update()

    straight = bound(batch=10)
    straight.init_optimizer(optimizer_params={'learning_rate': 0.2, 'momentum': 0.9})
    step(straight, slice(0, 10))
    straight.save_checkpoint(prefix, 1, save_optimizer_states=True)
    step(straight, slice(10, 20))
    resumed = mx.mod.Module.load(prefix, 1, load_optimizer_states=True)
    resumed.bind(data_shapes=[('data', (10, 5))], label_shapes=[('softmax_label', (10,))])
    resumed.init_optimizer(optimizer_params={'learning_rate': 0.2, 'momentum': 0.9})
    step(resumed, slice(10, 20))
    for name, value in straight.get_params()[0].items():
        np.testing.assert_allclose(resumed.get_params()[0][name].asnumpy(), value.asnumpy(),
                                   rtol=1e-6, err_msg=name)


def test_do_checkpoint_callback_saves_every_period(tmp_path):
    x, y = separable(n=20)
    prefix = str(tmp_path / 'cb')
    mod = mx.mod.Module(mlp())
    mod.fit(mx.io.NDArrayIter(x, y, batch_size=10), num_epoch=4,
            epoch_end_callback=mx.callback.do_checkpoint(prefix, period=2))
    assert sorted(os.listdir(tmp_path)) == ['cb-0002.params', 'cb-0004.params',
                                            'cb-symbol.json']
    _, arg_params, _ = mx.model.load_checkpoint(prefix, 4)
    for name, value in mod.get_params()[0].items():
        np.testing.assert_array_equal(arg_params[name].asnumpy(), value.asnumpy())


def test_mxnet_checkpoint_reproduces_mxnet_output():
    symbol, arg_params, aux_params = mx.model.load_checkpoint(str(FIXTURES / 'mlp'), 1)
    mod = mx.mod.Module(symbol, data_names=['data'], label_names=None)
    mod.bind(data_shapes=[('data', (3, 8))], for_training=False)
    mod.set_params(arg_params, aux_params)
    mod.forward(batch_of(np.load(FIXTURES / 'mlp-input.npy')))
    np.testing.assert_allclose(mod.get_outputs()[0].asnumpy(),
                               np.load(FIXTURES / 'mlp-output.npy'), rtol=1e-5, atol=1e-6)


def test_load_params_splits_arg_and_aux_and_rejects_other_keys(tmp_path):
    mx.nd.save(str(tmp_path / 'm-0002.params'), {'arg:w': mx.nd.ones((2,)),
                                                 'aux:s': mx.nd.zeros((1,))})
    arg_params, aux_params = mx.model.load_params(str(tmp_path / 'm'), 2)
    assert sorted(arg_params) == ['w'] and sorted(aux_params) == ['s']
    mx.nd.save(str(tmp_path / 'bad-0001.params'), {'w': mx.nd.ones((2,))})
    with pytest.raises(ValueError, match="'w' is neither"):
        mx.model.load_params(str(tmp_path / 'bad'), 1)


# ----------------------------------------------------------------------------------------------
# Errors

def test_bind_checks_input_names():
    with pytest.raises(ValueError, match="input with name 'image' is not found"):
        mx.mod.Module(mlp(), data_names=['image'])
    mod = mx.mod.Module(mlp())
    with pytest.raises(ValueError, match="don't match names"):
        mod.bind(data_shapes=[('x', (2, 5))])


def test_calls_out_of_order_say_what_is_missing():
    mod = mx.mod.Module(mlp())
    with pytest.raises(RuntimeError, match='bind'):
        mod.forward(batch_of(np.ones((2, 5))))
    mod.bind(data_shapes=[('data', (2, 5))], label_shapes=[('softmax_label', (2,))])
    mod.init_params()
    with pytest.raises(RuntimeError, match='init_optimizer'):
        mod.update()
    with pytest.raises(RuntimeError, match='is not presented'):
        mod.init_params(arg_params={'fc1_weight': mx.nd.zeros((16, 5))}, force_init=True)


# ----------------------------------------------------------------------------------------------
# benchmarks/benchmark_score.py

def test_benchmark_score_runs_a_tiny_network():
    env = config.child_environ(PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, str(ROOT / 'benchmarks' / 'benchmark_score.py'), '--network', 'lenet',
         '--batch-size', '2', '--num-batches', '1', '--dry-run', '1', '--device', 'cpu'],
        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert 'network: lenet' in result.stderr
    assert 'batch size  2, dtype float32, images/sec:' in result.stderr


# ----------------------------------------------------------------------------------------------
# BucketingModule

def mean_classifier(length):
    """A classifier of sequences of any length: the mean over time, then a dense layer."""
    data = mx.sym.mean(mx.sym.var('data'), axis=1)
    net = mx.sym.FullyConnected(data, num_hidden=2, name='fc')
    return mx.sym.SoftmaxOutput(net, name='softmax'), ('data',), ('softmax_label',)


def bucket_batch(length, seed):
    rng = np.random.RandomState(seed)
    x = rng.randn(6, length, 3).astype(np.float32)
    y = (x.mean(axis=1)[:, 0] > 0).astype(np.float32)
    return mx.io.DataBatch([mx.nd.array(x)], [mx.nd.array(y)], bucket_key=length,
                           provide_data=[mx.io.DataDesc('data', x.shape)],
                           provide_label=[mx.io.DataDesc('softmax_label', y.shape)]), x


def test_bucketing_module_shares_parameters_across_buckets():
    mod = mx.mod.BucketingModule(mean_classifier, default_bucket_key=5)
    mod.bind(data_shapes=[('data', (6, 5, 3))], label_shapes=[('softmax_label', (6,))])
    mod.init_params(mx.init.Xavier())
    mod.init_optimizer(optimizer_params={'learning_rate': 1.0})
    for length, seed in ((2, 0), (5, 1), (7, 2)):
        batch, _ = bucket_batch(length, seed)
        mod.forward_backward(batch)
        mod.update()
    assert sorted(mod._buckets) == [2, 5, 7]
    weights = {id(m._exec_group.param_arrays[0][0]) for m in mod._buckets.values()}
    assert len(weights) == 1
    batch, x = bucket_batch(3, seed=4)
    mod.forward(batch, is_train=False)
    p = {k: v.asnumpy() for k, v in mod.get_params()[0].items()}
    logits = x.mean(axis=1) @ p['fc_weight'].T + p['fc_bias']
    expected = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(mod.get_outputs()[0].asnumpy(), expected, rtol=1e-5, atol=1e-6)
