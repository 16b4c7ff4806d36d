"""Training graphs go channel-last too: the subgraph pass puts their convolutions in NHWC as
plain ``_sg_conv`` nodes (weight left (F, C, kh, kw)), whose gradient is ``_backward_sg_conv``,
and fuses nothing. Gradients, outputs and updated statistics match the channel-first graph."""
import dataclasses

import numpy as np
import pytest

import ember as mx
from ember import config
from ember import symbol as sym
from ember.base import EmberError
import ember.executor  # noqa: F401  (attaches Symbol.bind)
from ember.op.nn import conv_algorithms, conv_winograd, onednn_provider
from ember.passes import infer_shape, infer_type, subgraph


def _net():
    x = sym.var('data')
    c1 = sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=8, no_bias=True, name='c1')
    b1 = sym.BatchNorm(c1, fix_gamma=False, name='b1')
    r1 = sym.relu(b1, name='r1')
    p1 = sym.Pooling(r1, kernel=(2, 2), stride=(2, 2), pool_type='max', name='p1')
    c2 = sym.Convolution(p1, kernel=(1, 1), stride=(2, 2), num_filter=8, name='c2')
    c3 = sym.Convolution(p1, kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=8, name='c3')
    r2 = sym.relu(c2 + c3, name='r2')
    gp = sym.Pooling(r2, kernel=(1, 1), global_pool=True, pool_type='avg', name='gp')
    return sym.FullyConnected(sym.flatten(gp), num_hidden=5, name='fc')


def _values(net, shape, seed=0):
    rng = np.random.default_rng(seed)
    shapes, _, aux = net.infer_shape(data=shape)
    names = net.list_arguments() + net.list_auxiliary_states()
    values = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes + aux)}
    for name in names:
        if name.endswith('_var'):
            values[name] = np.abs(values[name]) + 0.5
    return values


def _train_graph(net, values):
    graph = infer_shape.run(net.to_graph(), {k: v.shape for k, v in values.items()})
    return infer_type.run(graph, {k: v.dtype for k, v in values.items()})


def _step(net, values):
    """Outputs, every argument's gradient and the statistics after one training pass."""
    args = {n: mx.nd.array(values[n]) for n in net.list_arguments()}
    aux = {n: mx.nd.array(values[n]) for n in net.list_auxiliary_states()}
    grads = {n: mx.nd.zeros(values[n].shape) for n in net.list_arguments()}
    ex = net.bind(mx.cpu(), args, args_grad=grads, aux_states=aux, grad_req='write')
    out = ex.forward(is_train=True)[0]
    head = np.random.default_rng(7).standard_normal(out.shape).astype(np.float32)
    ex.backward(mx.nd.array(head))
    return ({'out': out.asnumpy()}, {n: g.asnumpy() for n, g in grads.items()},
            {n: a.asnumpy() for n, a in aux.items()})


def test_training_graphs_run_channel_last_without_fusing():
    net = _net()
    values = _values(net, (2, 3, 8, 8))
    graph, params = subgraph.run(_train_graph(net, values), values, is_train=True)
    assert params is values
    ops = {n.name: n for n in graph.nodes if n.op is not None}
    convs = {name: n.attrs for name, n in ops.items() if n.op.name == '_sg_conv'}
    assert set(convs) == {'c1', 'c2', 'c3'}
    for attrs in convs.values():
        assert (attrs['layout'], attrs['weight_layout']) == ('NHWC', 'OIHW')
        assert not attrs['with_sum'] and attrs['act_type'] is None and not attrs['weight_scale']
    # the weights are the variables themselves; BatchNorm stays (no folding) on axis 3
    assert {graph.nodes[ops[c].inputs[1].node].name for c in convs} == \
        {'c1_weight', 'c2_weight', 'c3_weight'}
    assert ops['b1'].op.name == 'BatchNorm' and ops['b1'].attrs['axis'] == 3
    assert ops['r1'].op.name == 'relu' and ops['r2'].op.name == 'relu'
    assert ops['p1'].attrs['layout'] == ops['gp'].attrs['layout'] == 'NHWC'


def test_without_the_subgraph_backend_training_graphs_stay_channel_first():
    net = _net()
    values = _values(net, (2, 3, 8, 8))
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        graph, _ = subgraph.run(_train_graph(net, values), values, is_train=True)
    assert '_sg_conv' not in [n.op.name for n in graph.nodes if n.op is not None]


def test_float64_training_graphs_stay_channel_first():
    net = _net()
    values = {k: v.astype(np.float64) for k, v in _values(net, (2, 3, 8, 8)).items()}
    graph, _ = subgraph.run(_train_graph(net, values), values, is_train=True)
    assert '_sg_conv' not in [n.op.name for n in graph.nodes if n.op is not None]


def test_gradients_and_statistics_match_the_channel_first_graph():
    net = _net()
    values = _values(net, (4, 3, 8, 8))
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        expected = _step(net, values)
    got = _step(net, values)
    for want_part, got_part in zip(expected, got):
        assert set(want_part) == set(got_part)
        for name in want_part:
            np.testing.assert_allclose(got_part[name], want_part[name], rtol=1e-4, atol=1e-4,
                                       err_msg=name)


def _gradient_algorithms():
    names = ['gemm']
    if onednn_provider.enabled():
        names.append('onednn')
    if conv_winograd._winograd is not None:
        names.append('winograd4')
    return names


def _conv_grads(op, x, w, b, head, **attrs):
    data, weight, bias = mx.nd.array(x), mx.nd.array(w), mx.nd.array(b)
    for array in (data, weight, bias):
        array.attach_grad()
    with mx.autograd.record():
        y = getattr(mx.nd, op)(data, weight, bias, **attrs)
    y.backward(mx.nd.array(head))
    return y.asnumpy(), data.grad.asnumpy(), weight.grad.asnumpy(), bias.grad.asnumpy()


# (Winograd takes 3x3 stride-1 convolutions only)
@pytest.mark.parametrize('algorithm, geometry', [
    (name, geometry) for name in _gradient_algorithms()
    for geometry in [dict(kernel=(3, 3), pad=(1, 1)), dict(kernel=(1, 1)),
                     dict(kernel=(1, 1), stride=(2, 2))]
    if name != 'winograd4' or geometry['kernel'] == (3, 3)])
def test_sg_conv_gradients_keep_the_weight_oihw(force_conv, monkeypatch, algorithm, geometry):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
    w = rng.standard_normal((12, 16) + geometry['kernel']).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    attrs = dict(num_filter=12, **geometry)
    pad, stride = geometry.get('pad', (0, 0))[0], geometry.get('stride', (1, 1))[0]
    size = (9 + 2 * pad - geometry['kernel'][0]) // stride + 1
    head = rng.standard_normal((2, 12, size, size)).astype(np.float32)
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        want = _conv_grads('Convolution', x, w, b, head, **attrs)
    ran = []
    for table in (conv_algorithms.DATA_GRADIENT_ALGORITHMS,
                  conv_algorithms.WEIGHT_GRADIENT_ALGORITHMS):
        chosen = table[algorithm]

        def run(problem, call, *args, _run=chosen.run):
            ran.append((problem.gradient, problem.channel_last, call.weight.shape
                        if problem.gradient == 'data' else call.out.shape))
            return _run(problem, call, *args)
        monkeypatch.setitem(table, algorithm, dataclasses.replace(chosen, run=run))
    force_conv('gemm', gradient=algorithm)
    out, dx, dw, db = _conv_grads('_sg_conv', x.transpose(0, 2, 3, 1), w, b,
                                  head.transpose(0, 2, 3, 1), layout='NHWC',
                                  weight_layout='OIHW', **attrs)
    # both gradients ran the algorithm on channel-last data, seeing the weight (F, kh, kw, C)
    ohwi = (12,) + geometry['kernel'] + (16,)
    assert sorted(ran) == [('data', True, ohwi), ('weight', True, ohwi)]
    assert dw.shape == w.shape                      # the gradient stays (F, C, kh, kw)
    for got, expected in zip((out.transpose(0, 3, 1, 2), dx.transpose(0, 3, 1, 2), dw, db),
                             want):
        np.testing.assert_allclose(got, expected, rtol=2e-4, atol=2e-4)


def test_a_fused_sg_conv_has_no_gradient():
    data, weight = mx.nd.ones((1, 2, 3, 3)), mx.nd.ones((2, 2, 1, 1))
    data.attach_grad()
    with mx.autograd.record():
        y = mx.nd._sg_conv(data, weight, kernel=(1, 1), num_filter=2, no_bias=True,
                           act_type='relu')
    with pytest.raises(EmberError, match=r"_sg_conv: no gradient with \{'act_type': 'relu'\}"):
        y.backward()


def test_gluon_training_matches_the_channel_first_run():
    def train():
        mx.random.seed(0)
        net = mx.gluon.nn.HybridSequential()
        with net.name_scope():
            net.add(mx.gluon.nn.Conv2D(8, 3, padding=1, use_bias=False),
                    mx.gluon.nn.BatchNorm(), mx.gluon.nn.Activation('relu'),
                    mx.gluon.nn.MaxPool2D(2), mx.gluon.nn.Conv2D(8, 3, padding=1),
                    mx.gluon.nn.GlobalAvgPool2D(), mx.gluon.nn.Dense(4))
        net.initialize(mx.init.Xavier())
        net.hybridize(static_alloc=True)
        trainer = mx.gluon.Trainer(net.collect_params(), 'sgd',
                                   {'learning_rate': 0.1, 'momentum': 0.9})
        rng = np.random.default_rng(0)
        x = mx.nd.array(rng.standard_normal((4, 3, 8, 8)).astype(np.float32))
        label = mx.nd.array(np.array([0, 1, 2, 3], np.float32))
        loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        for _ in range(3):
            with mx.autograd.record():
                loss = loss_fn(net(x), label)
            loss.backward()
            trainer.step(4)
        return [p.data().asnumpy() for p in net.collect_params().values()]

    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        expected = train()
    for got, want in zip(train(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
