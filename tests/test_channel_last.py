"""The subgraph pass's channel-last step: which operators switch to NHWC, where the layout is
converted back, and that the results do not change."""
import numpy as np
import pytest

import ember as mx
from ember import config
from ember import symbol as sym
import ember.executor  # noqa: F401  (attaches Symbol.bind)
from ember.passes import infer_shape, subgraph


@pytest.fixture
def channel_last(monkeypatch):
    monkeypatch.setattr(subgraph, 'channel_last_pays', lambda device=None: True)


def _resnet_like():
    x = sym.var('data')
    c1 = sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=8, no_bias=True, name='c1')
    b1 = sym.BatchNorm(c1, fix_gamma=False, name='b1')
    r1 = sym.relu(b1, name='r1')
    p1 = sym.Pooling(r1, kernel=(2, 2), stride=(2, 2), pool_type='max', name='p1')
    c2 = sym.Convolution(p1, kernel=(3, 3), pad=(1, 1), num_filter=8, name='c2')
    r2 = sym.relu(c2 + p1, name='r2')
    gp = sym.Pooling(r2, kernel=(1, 1), global_pool=True, pool_type='avg', name='gp')
    return sym.FullyConnected(sym.flatten(gp), num_hidden=5, name='fc')


def _values(net, shape):
    rng = np.random.default_rng(0)
    shapes, _, aux = net.infer_shape(data=shape)
    names = net.list_arguments() + net.list_auxiliary_states()
    values = {n: rng.standard_normal(s).astype(np.float32) for n, s in
              zip(names, shapes + aux)}
    for name in names:
        if name.endswith('_var'):
            values[name] = np.abs(values[name]) + 0.5
    return values


def _graph(net, values):
    """`net`'s graph with its shapes inferred, as the executor's pipeline hands it over."""
    return infer_shape.run(net.to_graph(), {k: v.shape for k, v in values.items()})


def _run(net, values):
    args = {n: mx.nd.array(values[n]) for n in net.list_arguments()}
    aux = {n: mx.nd.array(values[n]) for n in net.list_auxiliary_states()}
    ex = net.bind(mx.cpu(), args, aux_states=aux, grad_req='null')
    return ex.forward(is_train=False)[0].asnumpy()


def _ops(graph):
    return [(n.op.name, n.attrs.get('layout'), n.name) for n in graph.nodes if n.op]


def test_convolutions_and_their_neighbours_run_channel_last(channel_last):
    net = _resnet_like()
    values = _values(net, (2, 3, 8, 8))
    graph, params = subgraph.run(_graph(net, values), values)
    ops = _ops(graph)
    layouts = {name: layout for op, layout, name in ops if op in ('_sg_conv', 'Pooling')}
    assert layouts == {'r1': 'NHWC', 'p1': 'NHWC', 'r2': 'NHWC', 'gp': 'NHWC'}
    names = [op for op, _, _ in ops]
    # one transpose into the region, and a reshape out of it after global pooling
    assert names.count('transpose') == 1 and names.count('Reshape') == 1
    # the weights stay the variables they were, (F, C, kh, kw): no transposed copies
    convs = {n.name: n for n in graph.nodes if n.op is not None and n.op.name == '_sg_conv'}
    assert {name: n.attrs['weight_layout'] for name, n in convs.items()} == \
        {'r1': 'OIHW', 'r2': 'OIHW'}
    assert {graph.nodes[n.inputs[1].node].name for n in convs.values()} == {'c1_weight',
                                                                           'c2_weight'}
    assert not [k for k in params if k.endswith(('_ohwi', '_folded_weight'))]


def test_results_match_the_channel_first_graph(channel_last):
    net = _resnet_like()
    values = _values(net, (2, 3, 8, 8))
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        expected = _run(net, values)
    np.testing.assert_allclose(_run(net, values), expected, rtol=1e-4, atol=1e-5)


def test_a_reader_outside_the_region_gets_channel_first_data(channel_last):
    x = sym.var('data')
    conv = sym.Convolution(x, kernel=(1, 1), num_filter=4, name='c')
    net = sym.Group([sym.relu(conv, name='r'), sym.sum(conv, axis=(2, 3), name='s')])
    values = _values(net, (1, 2, 3, 5))
    graph, _ = subgraph.run(_graph(net, values), values)
    names = [op for op, _, _ in _ops(graph)]
    assert names.count('transpose') == 3          # in; back for the sum and the output
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        expected = _run(net, values)
    np.testing.assert_allclose(_run(net, values), expected, rtol=1e-5, atol=1e-6)


def test_concat_on_channels_follows(channel_last):
    x = sym.var('data')
    a = sym.Convolution(x, kernel=(1, 1), num_filter=3, name='a')
    b = sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=2, name='b')
    net = sym.Convolution(sym.concat(a, b, dim=1), kernel=(1, 1), num_filter=4, name='c')
    values = _values(net, (2, 3, 6, 6))
    graph, _ = subgraph.run(_graph(net, values), values)
    concat = [n for n in graph.nodes if n.op is not None and n.op.name == 'Concat']
    assert concat[0].attrs['dim'] == 3
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        expected = _run(net, values)
    np.testing.assert_allclose(_run(net, values), expected, rtol=1e-4, atol=1e-5)


def test_a_shared_weight_is_not_copied(channel_last):
    x = sym.var('data')
    w = sym.var('w')
    first = sym.Convolution(x, w, kernel=(1, 1), num_filter=3, no_bias=True, name='one')
    net = sym.Convolution(first, w, kernel=(1, 1), num_filter=3, no_bias=True, name='two')
    values = {'w': np.ones((3, 3, 1, 1), np.float32), 'data': np.ones((1, 3, 4, 4), np.float32)}
    graph, params = subgraph.run(_graph(net, values), values)
    convs = [n for n in graph.nodes if n.op is not None and n.op.name == '_sg_conv']
    assert len(convs) == 2 and all(graph.nodes[n.inputs[1].node].name == 'w' for n in convs)
    assert sorted(params) == ['data', 'w']


def test_without_weight_values_convolutions_stay_channel_first(channel_last):
    net = _resnet_like()
    graph, _ = subgraph.run(_graph(net, {'data': np.ones((2, 3, 8, 8))}), {})
    assert all(layout in (None, 'NCHW') for op, layout, _ in _ops(graph) if op == 'Convolution')
    assert 'transpose' not in [op for op, _, _ in _ops(graph)]


def test_off_without_the_fast_kernels(monkeypatch):
    monkeypatch.setattr(subgraph, 'channel_last_pays', lambda device=None: False)
    net = _resnet_like()
    values = _values(net, (2, 3, 8, 8))
    graph, _ = subgraph.run(_graph(net, values), values)
    assert all(layout in (None, 'NCHW') for _, layout, _ in _ops(graph))


def test_channel_last_pays_on_the_cpu_with_either_provider():
    assert subgraph.channel_last_pays(mx.cpu())
    with config.override(MXNET_MKLDNN_ENABLED=0):
        assert subgraph.channel_last_pays(mx.cpu())
    assert not subgraph.channel_last_pays(mx.gpu(0))
