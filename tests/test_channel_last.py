"""The subgraph pass's channel-last step: which operators switch to NHWC, where the layout is
converted back, and that the results do not change, for inference and training graphs."""
import dataclasses

import numpy as np
import pytest

import ember as mx
from ember import config
from ember import symbol as sym
import ember.executor  # noqa: F401  (attaches Symbol.bind)
from ember.base import EmberError
from ember.op.nn import onednn_provider
from ember.op.nn.conv import algorithms, compiled
from ember.passes import infer_shape, infer_type, subgraph
from ember.passes.options import Options
from subgraph_passes import rewritten


@pytest.fixture
def channel_last(monkeypatch):
    monkeypatch.setattr(subgraph, 'channel_last_pays', lambda device=None: True)


def _resnet_like(projection=False, normalized=False):
    """Stem, pooling, a residual block (with `projection`, a strided one whose shortcut is a
    strided 1x1 convolution, 'c3'; with `normalized`, a BatchNorm 'b2' before its add),
    global pooling and a classifier."""
    x = sym.var('data')
    c1 = sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=8, no_bias=True, name='c1')
    b1 = sym.BatchNorm(c1, fix_gamma=False, name='b1')
    r1 = sym.relu(b1, name='r1')
    p1 = sym.Pooling(r1, kernel=(2, 2), stride=(2, 2), pool_type='max', name='p1')
    stride = (2, 2) if projection else (1, 1)
    c2 = sym.Convolution(p1, kernel=(3, 3), stride=stride, pad=(1, 1), num_filter=8, name='c2')
    shortcut = sym.Convolution(p1, kernel=(1, 1), stride=stride, num_filter=8,
                               name='c3') if projection else p1
    if normalized:
        c2 = sym.BatchNorm(c2, fix_gamma=False, name='b2')
    r2 = sym.relu(c2 + shortcut, name='r2')
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
    return infer_shape.run(net.to_graph(),
                           Options(shapes={k: v.shape for k, v in values.items()}))


def _run(net, values):
    args = {n: mx.nd.array(values[n]) for n in net.list_arguments()}
    aux = {n: mx.nd.array(values[n]) for n in net.list_auxiliary_states()}
    ex = net.bind(mx.cpu(), args, aux_states=aux, grad_req='null')
    return ex.forward(is_train=False)[0].asnumpy()


def assert_network_close(got, expected):
    """Two kernel layouts of the same small network agree up to the rounding of their sums,
    which differ in order: the tolerance scales with the output's size."""
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def _ops(graph):
    return [(n.op.name, n.attrs.get('layout'), n.name) for n in graph.nodes if n.op]


def test_convolutions_and_their_neighbours_run_channel_last(channel_last):
    net = _resnet_like()
    values = _values(net, (2, 3, 8, 8))
    graph, params = rewritten(_graph(net, values), values)
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
    assert_network_close(_run(net, values), expected)


def test_a_reader_outside_the_region_gets_channel_first_data(channel_last):
    x = sym.var('data')
    conv = sym.Convolution(x, kernel=(1, 1), num_filter=4, name='c')
    net = sym.Group([sym.relu(conv, name='r'), sym.sum(conv, axis=(2, 3), name='s')])
    values = _values(net, (1, 2, 3, 5))
    graph, _ = rewritten(_graph(net, values), values)
    names = [op for op, _, _ in _ops(graph)]
    assert names.count('transpose') == 3          # in; back for the sum and the output
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        expected = _run(net, values)
    assert_network_close(_run(net, values), expected)


def test_concat_on_channels_follows(channel_last):
    x = sym.var('data')
    a = sym.Convolution(x, kernel=(1, 1), num_filter=3, name='a')
    b = sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=2, name='b')
    net = sym.Convolution(sym.concat(a, b, dim=1), kernel=(1, 1), num_filter=4, name='c')
    values = _values(net, (2, 3, 6, 6))
    graph, _ = rewritten(_graph(net, values), values)
    concat = [n for n in graph.nodes if n.op is not None and n.op.name == 'Concat']
    assert concat[0].attrs['dim'] == 3
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        expected = _run(net, values)
    assert_network_close(_run(net, values), expected)


def test_a_shared_weight_is_not_copied(channel_last):
    x = sym.var('data')
    w = sym.var('w')
    first = sym.Convolution(x, w, kernel=(1, 1), num_filter=3, no_bias=True, name='one')
    net = sym.Convolution(first, w, kernel=(1, 1), num_filter=3, no_bias=True, name='two')
    values = {'w': np.ones((3, 3, 1, 1), np.float32), 'data': np.ones((1, 3, 4, 4), np.float32)}
    graph, params = rewritten(_graph(net, values), values)
    convs = [n for n in graph.nodes if n.op is not None and n.op.name == '_sg_conv']
    assert len(convs) == 2 and all(graph.nodes[n.inputs[1].node].name == 'w' for n in convs)
    assert sorted(params) == ['data', 'w']


def test_without_weight_values_convolutions_stay_channel_first(channel_last):
    net = _resnet_like()
    graph, _ = rewritten(_graph(net, {'data': np.ones((2, 3, 8, 8))}), {})
    assert all(layout in (None, 'NCHW') for op, layout, _ in _ops(graph) if op == 'Convolution')
    assert 'transpose' not in [op for op, _, _ in _ops(graph)]


def test_off_without_the_fast_kernels(monkeypatch):
    monkeypatch.setattr(subgraph, 'channel_last_pays', lambda device=None: False)
    net = _resnet_like()
    values = _values(net, (2, 3, 8, 8))
    graph, _ = rewritten(_graph(net, values), values)
    assert all(layout in (None, 'NCHW') for _, layout, _ in _ops(graph))


def test_channel_last_pays_on_the_cpu_with_either_provider():
    assert subgraph.channel_last_pays(mx.cpu())
    with config.override(MXNET_MKLDNN_ENABLED=0):
        assert subgraph.channel_last_pays(mx.cpu())
    assert not subgraph.channel_last_pays(mx.gpu(0))


# ----------------------------------------------------------------------------------------------
# Training graphs go channel-last too: their convolutions become plain ``_sg_conv`` nodes
# (weight left (F, C, kh, kw)), whose gradient is ``_backward_sg_conv``, and nothing fuses with
# them; a BatchNorm joins the relu after it. Gradients, outputs and updated statistics match the
# channel-first graph.

def _train_graph(net, values):
    options = Options(shapes={k: v.shape for k, v in values.items()},
                      dtypes={k: v.dtype for k, v in values.items()})
    return infer_type.run(infer_shape.run(net.to_graph(), options), options)


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


def test_training_graphs_run_channel_last_with_batch_norm_and_relu_joined():
    net = _resnet_like(projection=True)
    values = _values(net, (2, 3, 8, 8))
    graph, params = rewritten(_train_graph(net, values), values, is_train=True)
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
    # BatchNorm (no folding) on axis 3, taking in the relu that alone reads it: one
    # operator named after the relu
    assert 'b1' not in ops
    assert ops['r1'].op.name == '_contrib_BatchNormWithReLU' and ops['r1'].attrs['axis'] == 3
    assert not ops['r1'].attrs['fix_gamma']
    assert [graph.nodes[e.node].name for e in ops['r1'].inputs] == \
        ['c1', 'b1_gamma', 'b1_beta', 'b1_moving_mean', 'b1_moving_var']
    assert ops['r2'].op.name == 'relu'          # of a sum: no BatchNorm to join
    assert ops['p1'].attrs['layout'] == ops['gp'].attrs['layout'] == 'NHWC'


def test_a_residual_blocks_batch_norm_add_and_relu_become_one_operator():
    net = _resnet_like(projection=True, normalized=True)
    values = _values(net, (2, 3, 8, 8))
    graph, _ = rewritten(_train_graph(net, values), values, is_train=True)
    ops = {n.name: n for n in graph.nodes if n.op is not None}
    assert 'b2' not in ops and ops['r2'].op.name == '_sg_bn_add_relu'
    assert ops['r2'].attrs['axis'] == 3 and not ops['r2'].attrs['fix_gamma']
    assert [graph.nodes[e.node].name for e in ops['r2'].inputs] == \
        ['c2', 'b2_gamma', 'b2_beta', 'b2_moving_mean', 'b2_moving_var', 'c3']
    with config.override(MXNET_BACKWARD_DO_MIRROR=True):
        graph, _ = rewritten(_train_graph(net, values), values, is_train=True)
    assert {n.name: n.op.name for n in graph.nodes if n.op is not None}['b2'] == 'BatchNorm'


def test_batch_norm_keeps_its_relu_apart_when_mirrored_or_read_by_others():
    net = _resnet_like(projection=True)
    values = _values(net, (2, 3, 8, 8))
    with config.override(MXNET_BACKWARD_DO_MIRROR=True):
        graph, _ = rewritten(_train_graph(net, values), values, is_train=True)
    ops = {n.name: n.op.name for n in graph.nodes if n.op is not None}
    assert ops['b1'] == 'BatchNorm' and ops['r1'] == 'relu'
    # another reader of the BatchNorm's output
    x = sym.var('data')
    b = sym.BatchNorm(sym.Convolution(x, kernel=(1, 1), num_filter=4, no_bias=True, name='c'),
                      name='b')
    net = sym.Group([sym.relu(b, name='r'), b * 2])
    values = _values(net, (2, 3, 4, 4))
    graph, _ = rewritten(_train_graph(net, values), values, is_train=True)
    ops = {n.name: n.op.name for n in graph.nodes if n.op is not None}
    assert ops['b'] == 'BatchNorm' and ops['r'] == 'relu'


def test_without_the_subgraph_backend_training_graphs_stay_channel_first():
    net = _resnet_like(projection=True)
    values = _values(net, (2, 3, 8, 8))
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        graph, _ = rewritten(_train_graph(net, values), values, is_train=True)
    assert '_sg_conv' not in [n.op.name for n in graph.nodes if n.op is not None]


def test_float64_training_graphs_stay_channel_first():
    net = _resnet_like(projection=True)
    values = {k: v.astype(np.float64) for k, v in _values(net, (2, 3, 8, 8)).items()}
    graph, _ = rewritten(_train_graph(net, values), values, is_train=True)
    assert '_sg_conv' not in [n.op.name for n in graph.nodes if n.op is not None]


@pytest.mark.parametrize('normalized, shape', [(False, (4, 3, 8, 8)), (True, (4, 3, 8, 8)),
                                               (True, (16, 3, 64, 64))],
                         ids=['block', 'normalized-block', 'normalized-large'])
def test_gradients_and_statistics_match_the_channel_first_graph(normalized, shape):
    # large: the BatchNorms take the compiled kernels' by-rows path, the relu (and the add)
    # inside them
    net = _resnet_like(projection=True, normalized=normalized)
    values = _values(net, shape)
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
    if compiled.MODULE is not None:
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
    for table in (algorithms.DATA_GRADIENT_ALGORITHMS,
                  algorithms.WEIGHT_GRADIENT_ALGORITHMS):
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


@pytest.mark.skipif(compiled.MODULE is None, reason='ember._winograd is not built')
def test_a_1x1_weight_gradient_by_the_compiled_sums(monkeypatch):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 16, 10, 10)).astype(np.float32)
    w = rng.standard_normal((20, 16, 1, 1)).astype(np.float32)
    b = rng.standard_normal(20).astype(np.float32)
    head = rng.standard_normal((3, 20, 10, 10)).astype(np.float32)
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        want = _conv_grads('Convolution', x, w, b, head, num_filter=20, kernel=(1, 1))
    ran, rule = [], algorithms.rule

    def choose(problem, *args, **kwargs):
        if problem.gradient == 'weight':
            ran.append(problem.channel_last)
            return algorithms.WEIGHT_GRADIENT_ALGORITHMS['pointwise']
        return rule(problem, onednn_provider.enabled())
    monkeypatch.setattr(algorithms, 'choose', choose)
    got = _conv_grads('_sg_conv', x.transpose(0, 2, 3, 1), w, b, head.transpose(0, 2, 3, 1),
                      layout='NHWC', weight_layout='OIHW', num_filter=20, kernel=(1, 1))
    assert ran == [True]
    for got_part, expected in zip((got[0].transpose(0, 3, 1, 2), got[1].transpose(0, 3, 1, 2),
                                   got[2], got[3]), want):
        np.testing.assert_allclose(got_part, expected, rtol=2e-4, atol=2e-4)


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


@pytest.mark.parametrize('grad_req', ['write', 'add'])
def test_grouped_and_dilated_training_matches_the_channel_first_graph(grad_req):
    x = sym.var('data')
    c1 = sym.Convolution(x, kernel=(3, 3), pad=(2, 2), dilate=(2, 2), num_filter=8, name='c1')
    c2 = sym.Convolution(c1, kernel=(3, 3), pad=(1, 1), num_filter=8, num_group=4, name='c2')
    c3 = sym.Convolution(c2, kernel=(3, 3), pad=(1, 1), stride=(2, 2), num_filter=8,
                         num_group=8, name='c3')
    net = sym.sum(sym.relu(c3) * c3)
    values = _values(net, (2, 4, 9, 9))

    def gradients():
        args = {k: mx.nd.array(v) for k, v in values.items()}
        grads = {k: mx.nd.ones(v.shape) for k, v in values.items()}
        ex = net.bind(mx.cpu(), args, args_grad=grads, grad_req=grad_req)
        for _ in range(2):                       # 'add' accumulates over both passes
            ex.forward(is_train=True)
            ex.backward()
        return {k: g.asnumpy() for k, g in grads.items()}

    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        expected = gradients()
    got = gradients()
    for name in expected:
        # sums of thousands of products in another order: within float32 rounding of the
        # largest gradient
        scale = np.abs(expected[name]).max()
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=name)
