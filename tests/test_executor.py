"""The graph executor: Symbol.bind / simple_bind and MXNet 1.x's Executor API, checked against
the imperative path (mx.nd + autograd) and against files written by MXNet 1.9.1."""
import json

import numpy as np
import pytest

import ember as mx
import ember.executor  # noqa: F401  (attaches Symbol.bind)
from ember import autograd, config, engine, profiler
from ember.base import EmberError
from data_files import MXNET_FIXTURES as FIXTURES

# The optimisation passes off: operators run as written (for counting pushes and events).
PLAIN = {'MXNET_SUBGRAPH_BACKEND': 'NONE', 'MXNET_USE_FUSION': False,
         'MXNET_ELIMINATE_COMMON_EXPR': False}


def mlp():
    data = mx.sym.var('data')
    net = mx.sym.FullyConnected(data, num_hidden=8, name='fc1')
    net = mx.sym.Activation(net, act_type='relu', name='relu1')
    net = mx.sym.FullyConnected(net, num_hidden=3, name='fc2')
    return mx.sym.SoftmaxOutput(net, name='sm')


def conv_net():
    data = mx.sym.var('data')
    net = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1), name='conv')
    net = mx.sym.BatchNorm(net, fix_gamma=False, name='bn')
    net = mx.sym.Activation(net, act_type='relu', name='relu')
    net = mx.sym.Pooling(net, kernel=(2, 2), stride=(2, 2), pool_type='max', name='pool')
    net = mx.sym.Flatten(net, name='flat')
    return mx.sym.FullyConnected(net, num_hidden=5, name='fc')


def random_values(exe, seed=0):
    rng = np.random.RandomState(seed)
    return {name: rng.uniform(-1, 1, array.shape).astype(np.float32)
            for name, array in exe.arg_dict.items()}


def imperative_mlp(values):
    arrays = {k: mx.nd.array(v) for k, v in values.items()}
    for array in arrays.values():
        array.attach_grad()
    with autograd.record():
        h = mx.nd.FullyConnected(arrays['data'], arrays['fc1_weight'], arrays['fc1_bias'],
                                 num_hidden=8)
        h = mx.nd.Activation(h, act_type='relu')
        h = mx.nd.FullyConnected(h, arrays['fc2_weight'], arrays['fc2_bias'], num_hidden=3)
        out = mx.nd.SoftmaxOutput(h, arrays['sm_label'])
    out.backward()
    return out.asnumpy(), {k: a.grad.asnumpy() for k, a in arrays.items()}


def test_mlp_forward_and_backward_match_autograd():
    exe = mlp().simple_bind(mx.cpu(), data=(4, 6))
    values = random_values(exe)
    values['sm_label'] = np.array([0, 2, 1, 2], np.float32)
    out = exe.forward(is_train=True, **{k: mx.nd.array(v) for k, v in values.items()})
    exe.backward()
    expected_out, expected_grads = imperative_mlp(values)
    np.testing.assert_allclose(out[0].asnumpy(), expected_out, rtol=1e-5, atol=1e-6)
    for name, grad in expected_grads.items():
        np.testing.assert_allclose(exe.grad_dict[name].asnumpy(), grad, rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def elementwise_net():
    net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=8, name='fc1')
    net = mx.sym.relu(mx.sym.tanh(net, name='tanh') * 2 + 1, name='relu')
    net = mx.sym.FullyConnected(net, num_hidden=3, name='fc2')
    return mx.sym.SoftmaxOutput(net, name='sm')


@pytest.mark.parametrize('overrides', [
    {}, PLAIN, {'MXNET_BACKWARD_DO_MIRROR': True}, {'MXNET_EXEC_ENABLE_INPLACE': False},
    {'NNVM_EXEC_MATCH_RANGE': 0}, {'MXNET_EXEC_NUM_TEMP': 4},
    {'MXNET_EXEC_BULK_EXEC_TRAIN': False}, {'MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN': 2}])
def test_every_pipeline_setting_computes_the_same_gradients(overrides):
    with config.override(**overrides):
        exe = elementwise_net().simple_bind(mx.cpu(), data=(4, 6))
    values = random_values(exe, seed=4)
    values['sm_label'] = np.array([2, 0, 1, 1], np.float32)
    out = exe.forward(is_train=True, **{k: mx.nd.array(v) for k, v in values.items()})
    exe.backward()
    arrays = {k: mx.nd.array(v) for k, v in values.items()}
    for array in arrays.values():
        array.attach_grad()
    with autograd.record():
        h = mx.nd.FullyConnected(arrays['data'], arrays['fc1_weight'], arrays['fc1_bias'],
                                 num_hidden=8)
        h = mx.nd.relu(mx.nd.tanh(h) * 2 + 1)
        h = mx.nd.FullyConnected(h, arrays['fc2_weight'], arrays['fc2_bias'], num_hidden=3)
        expected = mx.nd.SoftmaxOutput(h, arrays['sm_label'])
    expected.backward()
    np.testing.assert_allclose(out[0].asnumpy(), expected.asnumpy(), rtol=1e-5, atol=1e-6)
    for name, array in arrays.items():
        np.testing.assert_allclose(exe.grad_dict[name].asnumpy(), array.grad.asnumpy(),
                                   rtol=1e-5, atol=1e-6, err_msg=name)


def test_conv_net_with_batch_norm_matches_autograd():
    net = conv_net()
    exe = net.simple_bind(mx.cpu(), data=(2, 3, 6, 6))
    values = random_values(exe, seed=1)
    for name, value in values.items():
        exe.arg_dict[name][:] = value
    exe.aux_dict['bn_moving_var'][:] = 1
    head = np.random.RandomState(2).randn(2, 5).astype(np.float32)
    out = exe.forward(is_train=True)[0].asnumpy()
    exe.backward(mx.nd.array(head))

    arrays = {k: mx.nd.array(v) for k, v in values.items()}
    for array in arrays.values():
        array.attach_grad()
    mean, var = mx.nd.zeros((4,)), mx.nd.ones((4,))
    with autograd.record():
        h = mx.nd.Convolution(arrays['data'], arrays['conv_weight'], arrays['conv_bias'],
                              kernel=(3, 3), num_filter=4, pad=(1, 1))
        h = mx.nd.BatchNorm(h, arrays['bn_gamma'], arrays['bn_beta'], mean, var,
                            fix_gamma=False)
        h = mx.nd.Pooling(mx.nd.relu(h), kernel=(2, 2), stride=(2, 2), pool_type='max')
        y = mx.nd.FullyConnected(mx.nd.Flatten(h), arrays['fc_weight'], arrays['fc_bias'],
                                 num_hidden=5)
    y.backward(mx.nd.array(head))
    np.testing.assert_allclose(out, y.asnumpy(), rtol=1e-4, atol=1e-5)
    for name, array in arrays.items():
        np.testing.assert_allclose(exe.grad_dict[name].asnumpy(), array.grad.asnumpy(),
                                   rtol=1e-4, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(exe.aux_dict['bn_moving_mean'].asnumpy(), mean.asnumpy(),
                               rtol=1e-5, atol=1e-6)


def test_folded_batch_norm_follows_later_parameter_changes():
    exe = conv_net().simple_bind(mx.cpu(), data=(2, 3, 6, 6), grad_req='null')
    assert 'folded' in exe._last.graph.attrs      # the subgraph pass folded BatchNorm
    data = mx.nd.array(np.random.RandomState(5).randn(2, 3, 6, 6))

    def imperative(values, mean, var):
        h = mx.nd.Convolution(data, values['conv_weight'], values['conv_bias'], kernel=(3, 3),
                              num_filter=4, pad=(1, 1))
        h = mx.nd.BatchNorm(h, values['bn_gamma'], values['bn_beta'], mean, var,
                            fix_gamma=False)
        h = mx.nd.Pooling(mx.nd.relu(h), kernel=(2, 2), stride=(2, 2), pool_type='max')
        return mx.nd.FullyConnected(mx.nd.Flatten(h), values['fc_weight'], values['fc_bias'],
                                    num_hidden=5).asnumpy()
    for seed in (6, 7):            # new values after the first forward are folded again
        values = {k: mx.nd.array(v) for k, v in random_values(exe, seed).items()
                  if k != 'data'}
        mean = mx.nd.array(np.random.RandomState(seed).rand(4))
        var = mx.nd.array(np.random.RandomState(seed).rand(4) + 0.5)
        exe.copy_params_from(values, {'bn_moving_mean': mean, 'bn_moving_var': var})
        out = exe.forward(data=data)[0].asnumpy()
        np.testing.assert_allclose(out, imperative(values, mean, var), rtol=1e-4, atol=1e-5)


def test_inference_and_training_modes_differ_for_dropout():
    net = mx.sym.Dropout(mx.sym.var('x'), p=0.5, name='drop')
    exe = net.simple_bind(mx.cpu(), x=(1000,), grad_req='null')
    x = mx.nd.ones((1000,))
    inference = exe.forward(is_train=False, x=x)[0].asnumpy()
    training = exe.forward(is_train=True)[0].asnumpy()
    assert (inference == 1).all()
    assert set(np.unique(training)) == {0.0, 2.0}


def test_grad_req_add_accumulates_and_null_leaves_no_gradient():
    x, w = mx.sym.var('x'), mx.sym.var('w')
    net = mx.sym.FullyConnected(x, w, num_hidden=2, no_bias=True, name='fc')
    args = {'x': mx.nd.array([[1, 2, 3]]), 'w': mx.nd.ones((2, 3))}
    grads = {'x': mx.nd.zeros((1, 3)), 'w': mx.nd.ones((2, 3))}
    exe = net.bind(mx.cpu(), args, args_grad=grads, grad_req={'w': 'add'})
    assert exe.grad_dict['x'] is grads['x'] and exe.grad_dict['w'] is grads['w']
    for _ in range(2):
        exe.forward(is_train=True)
        exe.backward(mx.nd.ones((1, 2)))
    np.testing.assert_allclose(grads['w'].asnumpy(), 1 + 2 * np.array([[1, 2, 3]] * 2))
    assert (grads['x'].asnumpy() == 0).all()      # 'null': never written


def test_gradient_that_is_a_head_gradient_is_copied():
    x = mx.sym.var('x')
    exe = mx.sym.identity(x, name='id').simple_bind(mx.cpu(), x=(3,))
    exe.forward(is_train=True, x=mx.nd.array([1, 2, 3]))
    exe.backward(mx.nd.array([4, 5, 6]))
    np.testing.assert_allclose(exe.grad_dict['x'].asnumpy(), [4, 5, 6])


def test_backward_twice_gives_the_same_gradients():
    exe = mlp().simple_bind(mx.cpu(), data=(4, 6))
    values = random_values(exe, seed=3)
    values['sm_label'] = np.array([1, 0, 2, 2], np.float32)
    exe.forward(is_train=True, **{k: mx.nd.array(v) for k, v in values.items()})
    exe.backward()
    first = {k: g.asnumpy() for k, g in exe.grad_dict.items()}
    exe.backward()
    for name, grad in exe.grad_dict.items():
        np.testing.assert_allclose(grad.asnumpy(), first[name], err_msg=name)


def test_outputs_are_the_same_arrays_updated_by_each_forward():
    net = mx.sym.square(mx.sym.var('x'), name='sq')
    exe = net.simple_bind(mx.cpu(), x=(2,), grad_req='null')
    first = exe.forward(x=mx.nd.array([1, 2]))[0]
    exe.forward(x=mx.nd.array([3, 4]))
    assert exe.outputs[0] is first
    np.testing.assert_allclose(first.asnumpy(), [9, 16])
    assert list(exe.output_dict) == ['sq_output']


def test_mxnet_fixture_reproduces_mxnet_output():
    net = mx.sym.load(str(FIXTURES / 'mlp-symbol.json'))
    params = mx.nd.load(str(FIXTURES / 'mlp-0001.params'))
    data = np.load(FIXTURES / 'mlp-input.npy')
    args = {k[4:]: v for k, v in params.items() if k.startswith('arg:')}
    aux = {k[4:]: v for k, v in params.items() if k.startswith('aux:')}
    args['data'] = mx.nd.array(data)
    exe = net.bind(mx.cpu(), args, aux_states=aux, grad_req='null')
    out = exe.forward()[0].asnumpy()
    np.testing.assert_allclose(out, np.load(FIXTURES / 'mlp-output.npy'), rtol=1e-5,
                               atol=1e-6)


def test_debug_str_lists_nodes_and_ends_with_allocated_megabytes():
    net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=1024, name='fc1')
    exe = mx.sym.relu(net, name='act').simple_bind(mx.cpu(), data=(512, 16))
    text = exe.debug_str()
    assert 'Op:FullyConnected, Name=fc1' in text and '\targ[0]=data(0) version=0' in text
    planned = exe._compiled[True].graph.attrs['memory_plan'].planned_bytes
    assert planned >> 20 >= 1
    assert text.endswith(f'Total {planned >> 20} MB allocated\n')


def test_bind_checks_its_arguments():
    net = mlp()
    with pytest.raises(ValueError, match='key `fc1_weight` is missing in `args`'):
        net.bind(mx.cpu(), {'data': mx.nd.ones((2, 6))})
    with pytest.raises(ValueError, match='Length of args'):
        net.bind(mx.cpu(), [mx.nd.ones((2, 6))])
    with pytest.raises(ValueError, match="grad_req 'sum'"):
        net.simple_bind(mx.cpu(), grad_req='sum', data=(2, 6))
    with pytest.raises(EmberError, match='sm_label'):
        net.simple_bind(mx.cpu(), data=(0, 6))


def test_forward_keyword_arrays_are_checked():
    exe = mlp().simple_bind(mx.cpu(), data=(2, 6))
    with pytest.raises(ValueError, match='Shape not match! Argument data'):
        exe.forward(data=mx.nd.ones((3, 6)))
    with pytest.raises(TypeError, match='Unknown argument nope'):
        exe.forward(nope=mx.nd.ones((3, 6)))


def test_copy_params_from():
    exe = mlp().simple_bind(mx.cpu(), data=(2, 6))
    exe.copy_params_from({'fc2_bias': mx.nd.array([1, 2, 3], dtype='float64')})
    np.testing.assert_allclose(exe.arg_dict['fc2_bias'].asnumpy(), [1, 2, 3])
    with pytest.raises(ValueError, match='"extra" that is not in the arguments'):
        exe.copy_params_from({'extra': mx.nd.ones((1,))})
    exe.copy_params_from({'extra': mx.nd.ones((1,))}, allow_extra_params=True)


def test_reshape_shares_parameters_and_guards_changes():
    exe = mlp().simple_bind(mx.cpu(), data=(4, 6))
    smaller = exe.reshape(data=(2, 6), sm_label=(2,))
    assert smaller.arg_dict['fc1_weight'] is exe.arg_dict['fc1_weight']
    assert smaller.arg_dict['data'].shape == (2, 6)
    with pytest.raises(AssertionError, match='larger than original'):
        exe.reshape(data=(8, 6), sm_label=(8,))
    with pytest.raises(AssertionError, match='arg:sm_label changed'):
        exe.reshape(data=(2, 6))
    bigger = exe.reshape(allow_up_sizing=True, data=(8, 6), sm_label=(8,))
    assert bigger.forward()[0].shape == (8, 3)


def test_eval_and_bind_by_list():
    a, b = mx.sym.var('a'), mx.sym.var('b')
    out = (a + b * 2).eval(mx.cpu(), a=mx.nd.array([1, 2]), b=mx.nd.array([3, 4]))
    np.testing.assert_allclose(out[0].asnumpy(), [7, 10])
    exe = (a - b).bind(mx.cpu(), [mx.nd.array([5]), mx.nd.array([2])])
    np.testing.assert_allclose(exe.forward()[0].asnumpy(), [3])


def test_simple_bind_shares_arrays_with_shared_exec_and_buffer():
    net = mlp()
    first = net.simple_bind(mx.cpu(), data=(4, 6))
    buffer = {}
    second = net.simple_bind(mx.cpu(), data=(2, 6), shared_exec=first,
                             shared_arg_names=['fc1_weight', 'fc1_bias'], shared_buffer=buffer)
    assert second.arg_dict['fc1_weight'] is first.arg_dict['fc1_weight']
    assert second.grad_dict['fc1_weight'] is first.grad_dict['fc1_weight']
    assert 'data' in buffer and 'grad of fc2_weight' in buffer
    third = net.simple_bind(mx.cpu(), data=(1, 6), shared_buffer=buffer)
    assert third.arg_dict['data'].handle is buffer['data'].handle


def test_monitor_callback_sees_every_operator_output():
    seen = []
    with config.override(**PLAIN):
        exe = mlp().simple_bind(mx.cpu(), data=(2, 6), grad_req='null')
    exe.set_monitor_callback(lambda name, array: seen.append((name, array.shape)))
    exe.forward()
    assert seen == [('fc1_output', (2, 8)), ('relu1_output', (2, 8)), ('fc2_output', (2, 3)),
                    ('sm_output', (2, 3))]


def test_failing_kernel_names_the_operator():
    net = mx.sym.take(mx.sym.var('a'), mx.sym.var('i'), mode='raise', name='pick_rows')
    exe = net.bind(mx.cpu(), {'a': mx.nd.ones((2, 3)), 'i': mx.nd.array([5])}, grad_req='null')
    exe.forward()
    with pytest.raises(engine.OperatorError, match=r'pick_rows\(take\): IndexError'):
        exe.outputs[0].wait_to_read()


# ----------------------------------------------------------------------------------------------
# Bulk execution through the executor: engine pushes and profiler events.

def _forward_pushes(exe, is_train=False):
    eng = engine.get()
    eng.wait_all()
    before = eng.stats()['pushes']
    exe.forward(is_train=is_train)
    eng.wait_all()
    return eng.stats()['pushes'] - before


def test_bulk_changes_the_number_of_engine_pushes():
    with config.override(**PLAIN):
        bulked = mlp().simple_bind(mx.cpu(), data=(2, 6), grad_req='null')
    with config.override(MXNET_EXEC_BULK_EXEC_INFERENCE=False, **PLAIN):
        single = mlp().simple_bind(mx.cpu(), data=(2, 6), grad_req='null')
    assert _forward_pushes(bulked) == 1
    assert _forward_pushes(single) == 4


def test_training_segments_are_pushed_forward_and_backward():
    with config.override(MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD=2,
                         MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD=3):
        exe = mlp().simple_bind(mx.cpu(), data=(2, 6))
    assert _forward_pushes(exe, is_train=True) == 2     # 4 forward operators, 2 per push
    segments = exe._compiled[True].graph.attrs['segments']
    backward = [s for s in segments if s.backward]
    assert [len(s.nodes) for s in backward] == [3, 2]


def test_bulk_off_gives_one_profiler_event_per_operator(tmp_path):
    path = tmp_path / 'trace.json'
    with config.override(MXNET_EXEC_BULK_EXEC_INFERENCE=False, **PLAIN):
        exe = mlp().simple_bind(mx.cpu(), data=(2, 6), grad_req='null')
    with config.override(**PLAIN):
        bulked = mlp().simple_bind(mx.cpu(), data=(2, 6), grad_req='null')
    profiler.set_config(profile_symbolic=True, profile_imperative=False, filename=str(path))
    try:
        profiler.set_state('run')
        exe.forward()
        engine.get().wait_all()
        bulked.forward()
        engine.get().wait_all()
        profiler.set_state('stop')
        profiler.dump()
    finally:
        profiler.reset()
    with open(path, encoding='utf-8') as stream:
        names = [e['name'] for e in json.load(stream)['traceEvents'] if e['ph'] == 'X']
    assert names == ['FullyConnected', 'Activation', 'FullyConnected', 'SoftmaxOutput',
                     'bulk[FullyConnected,Activation,FullyConnected,SoftmaxOutput]']
