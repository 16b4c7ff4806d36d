"""The optimisation passes (cse, subgraph, fusion, mirror) on small graphs, checked against the
reference interpreter: each changes the graph as it should, keeps the results, and does nothing
with its variable off."""
import numpy as np
import pytest

import ember as mx
import ember.executor  # noqa: F401  (attaches Symbol.simple_bind)
from ember import config, sym
from ember.base import EmberError
from ember.op import registry
from ember.op.fused import BLOCK, chain_text
from ember.passes import cse, fusion, gradient, infer_shape, interpret, mirror
from ember.passes.options import Options
from subgraph_passes import rewritten


@pytest.fixture(autouse=True)
def passes_at_their_defaults():
    """The tests below expect each pass on (mirroring off) whatever the environment says."""
    with config.override(MXNET_ELIMINATE_COMMON_EXPR=True, MXNET_SUBGRAPH_BACKEND='MKLDNN',
                         MXNET_USE_FUSION=True, MXNET_BACKWARD_DO_MIRROR=False,
                         MXNET_FUSION_VERBOSE=False):
        yield


def op_names(graph):
    return [node.op.name for node in graph.nodes if node.op is not None]


def random_inputs(graph, shapes, seed=0):
    """A value per variable of `graph`; variances positive so BatchNorm stays finite."""
    inferred = infer_shape.run(graph, Options(shapes=shapes)).attrs['shape']
    rng = np.random.default_rng(seed)
    values = {}
    for position in graph.input_nodes:
        name, shape = graph.nodes[position].name, inferred[graph.node_row_ptr[position]]
        value = np.asarray(rng.standard_normal(shape), np.float32)
        values[name] = np.abs(value) + 0.5 if name.endswith('_var') else value
    return values


def assert_same_results(before, after, values, exact=True, is_train=False):
    expected = interpret.run(before, values, is_train)
    got = interpret.run(after, values, is_train)
    assert len(expected) == len(got)
    for want, have in zip(expected, got):
        if exact:
            np.testing.assert_array_equal(have, want)
        else:
            np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


# ----------------------------------------------------------------------------------------------
# Interpreter

def test_interpret_names_a_missing_variable():
    graph = sym.exp(sym.var('data'), name='e').to_graph()
    with pytest.raises(EmberError, match="'data'.*did you mean 'date'"):
        interpret.run(graph, {'date': np.zeros(2, np.float32)})


def test_interpret_keeps_input_dtypes():
    graph = (sym.var('x') * 2).to_graph()
    out, = interpret.run(graph, {'x': np.arange(3, dtype=np.float64)})
    assert out.dtype == np.float64 and out.tolist() == [0.0, 2.0, 4.0]


# ----------------------------------------------------------------------------------------------
# Common-subexpression elimination

def test_cse_merges_duplicates_transitively_and_keeps_results():
    x, y = sym.var('x'), sym.var('y')
    left = sym.tanh(sym.exp(x, name='e1') * y, name='t1')
    right = sym.tanh(sym.exp(x, name='e2') * y, name='t2')
    graph = (left + right).to_graph()
    merged = cse.run(graph)
    assert len(merged.nodes) == len(graph.nodes) - 3
    assert op_names(merged).count('exp') == 1 and op_names(merged).count('tanh') == 1
    assert_same_results(graph, merged, random_inputs(graph, {'x': (3, 4), 'y': (3, 4)}))


def test_cse_keeps_nodes_with_different_attributes_or_inputs():
    x, y = sym.var('x'), sym.var('y')
    graph = sym.Group([x * 2 + x * 3, sym.exp(x) + sym.exp(y)]).to_graph()
    assert cse.run(graph) is graph


def test_cse_never_merges_random_or_mutating_operators():
    x = sym.var('x')
    drops = sym.Dropout(x, p=0.5) + sym.Dropout(x, p=0.5)
    draws = sym._random_uniform(shape=(3,)) + sym._random_uniform(shape=(3,))
    norms = sym.BatchNorm(x, name='bn') + sym.BatchNorm(x, name='bn')
    for out in (drops, draws, norms):
        graph = out.to_graph()
        assert cse.run(graph) is graph


def test_cse_keeps_graph_outputs_apart():
    x = sym.var('x')
    graph = sym.Group([sym.exp(x), sym.exp(x)]).to_graph()
    assert cse.run(graph) is graph


def test_cse_is_a_no_op_when_off():
    x = sym.var('x')
    graph = (sym.exp(x) + sym.exp(x)).to_graph()
    with config.override(MXNET_ELIMINATE_COMMON_EXPR=False):
        assert cse.run(graph) is graph
    assert len(cse.run(graph).nodes) < len(graph.nodes)


# ----------------------------------------------------------------------------------------------
# Subgraph: BatchNorm folding, convolution and dense fusion, identities

def conv_bn_net(no_bias, fix_gamma, layout=None):
    data = sym.var('data')
    kwargs = {} if layout is None else {'layout': layout}
    conv = sym.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=4, no_bias=no_bias,
                           name='conv', **kwargs)
    axis = -1 if layout == 'NHWC' else 1
    bn = sym.BatchNorm(conv, fix_gamma=fix_gamma, axis=axis, eps=1e-3, name='bn')
    return sym.Activation(bn, act_type='relu', name='relu')


def parameters(values):
    return {k: v for k, v in values.items() if k != 'data'}


def run_folded(graph, values):
    """The subgraph pass with parameter values; the inputs the new graph needs."""
    new_graph, params = rewritten(graph, parameters(values))
    return new_graph, {**params, 'data': values['data']}


@pytest.mark.parametrize('no_bias,fix_gamma,layout', [
    (True, False, None), (False, True, None), (False, False, 'NHWC')])
def test_batchnorm_folds_into_convolution(no_bias, fix_gamma, layout):
    graph = conv_bn_net(no_bias, fix_gamma, layout).to_graph()
    shape = (2, 6, 6, 3) if layout == 'NHWC' else (2, 3, 6, 6)
    values = random_inputs(graph, {'data': shape})
    folded, inputs = run_folded(graph, values)
    assert op_names(folded) == ['_sg_conv'] and len(folded.nodes) < len(graph.nodes)
    assert folded.output_names() == graph.output_names()
    # the convolution keeps its weight and scales it itself: no folded copy of the weight
    assert sorted(set(inputs) - {'data'}) == ['conv_folded_bias', 'conv_folded_scale',
                                              'conv_weight']
    expected, = interpret.run(graph, values)
    got, = interpret.run(folded, inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_batchnorm_folds_into_fully_connected():
    fc = sym.FullyConnected(sym.var('data'), num_hidden=5, name='fc')
    graph = sym.BatchNorm(fc, fix_gamma=False, name='bn').to_graph()
    values = random_inputs(graph, {'data': (4, 3)})
    folded, inputs = run_folded(graph, values)
    assert op_names(folded) == ['FullyConnected'] and len(folded.nodes) < len(graph.nodes)
    expected, = interpret.run(graph, values)
    got, = interpret.run(folded, inputs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_batchnorm_stays_without_values_or_when_the_layer_has_other_readers():
    graph = conv_bn_net(True, False).to_graph()
    unfolded, params = rewritten(graph, None)
    assert 'BatchNorm' in op_names(unfolded) and params is None
    conv = sym.Convolution(sym.var('data'), kernel=(1, 1), num_filter=2, name='conv')
    shared = sym.Group([sym.BatchNorm(conv, name='bn'), sym.exp(conv)]).to_graph()
    values = random_inputs(shared, {'data': (1, 2, 3, 3)})
    assert 'BatchNorm' in op_names(rewritten(shared, parameters(values))[0])


def test_shared_weights_keep_their_values():
    # the folded weight is a new variable: the other convolution still reads the original
    data, weight = sym.var('data'), sym.var('w')
    first = sym.Convolution(data, weight, kernel=(1, 1), num_filter=3, no_bias=True, name='c1')
    second = sym.Convolution(data, weight, kernel=(1, 1), num_filter=3, no_bias=True,
                             name='c2')
    graph = sym.Group([sym.BatchNorm(first, name='bn'), second]).to_graph()
    values = random_inputs(graph, {'data': (1, 3, 2, 2)})
    folded, inputs = run_folded(graph, values)
    assert 'w' in inputs and np.array_equal(inputs['w'], values['w'])
    for want, have in zip(interpret.run(graph, values), interpret.run(folded, inputs)):
        np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


def residual_net():
    data = sym.var('data')
    conv1 = sym.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=3, name='conv1')
    conv2 = sym.Convolution(conv1, kernel=(3, 3), pad=(1, 1), num_filter=3, name='conv2')
    return sym.Activation(sym.elemwise_add(conv2, data), act_type='relu', name='out')


def test_convolution_add_relu_fuse_into_one_node():
    graph = residual_net().to_graph()
    fused, _ = rewritten(graph, {})
    assert op_names(fused) == ['Convolution', '_sg_conv']
    node = fused.nodes[-1]
    assert node.attrs['with_sum'] and node.attrs['act_type'] == 'relu' and node.name == 'out'
    assert registry.get('_sg_conv').inplace_pairs(node.attrs) == ((3, 0),)
    # oneDNN adds the residual inside the convolution's accumulation: rounding may differ
    assert_same_results(graph, fused, random_inputs(graph, {'data': (2, 3, 5, 5)}), exact=False)


def test_broadcast_add_fuses_only_with_equal_known_shapes():
    data = sym.var('data')
    conv = sym.Convolution(data, kernel=(1, 1), num_filter=3, name='conv')
    graph = sym.relu(conv + data, name='out').to_graph()
    # unknown shapes: the add might broadcast a bias, which is no residual
    assert op_names(rewritten(graph, {})[0]) == ['Convolution', 'broadcast_add', 'relu']
    shaped = infer_shape.run(graph, Options(shapes={'data': (1, 3, 4, 4)}))
    fused, _ = rewritten(shaped, {})
    assert op_names(fused) == ['_sg_conv'] and fused.nodes[-1].attrs['with_sum']
    # the fused kernel adds the residual inside its sum: rounding may differ by CPU
    assert_same_results(graph, fused, random_inputs(graph, {'data': (1, 3, 4, 4)}),
                        exact=False)


def test_fully_connected_activation_fuse():
    fc = sym.FullyConnected(sym.var('data'), num_hidden=4, name='fc')
    graph = sym.Activation(fc, act_type='sigmoid', name='act').to_graph()
    fused, _ = rewritten(graph, {})
    assert op_names(fused) == ['_sg_fc'] and fused.output_names() == ['act_output']
    assert_same_results(graph, fused, random_inputs(graph, {'data': (3, 5)}))


def test_identities_and_inference_dropout_are_removed():
    data = sym.var('data')
    net = sym.exp(sym.identity(sym.Dropout(sym._copy(data), p=0.3)), name='e')
    kept = sym.exp(sym.Dropout(data, p=0.3, mode='always'), name='e')
    graph = net.to_graph()
    removed, _ = rewritten(graph, {})
    assert op_names(removed) == ['exp']
    assert_same_results(graph, removed, {'data': np.arange(4, dtype=np.float32)})
    assert 'Dropout' in op_names(rewritten(kept.to_graph(), {})[0])


def test_sg_conv_kernel_writes_over_its_residual():
    op = registry.get('_sg_conv')
    attrs = op.parse_attrs({'kernel': (1, 1), 'num_filter': 2, 'no_bias': True,
                            'with_sum': True, 'act_type': 'relu'})
    rng = np.random.default_rng(1)
    data = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    weight = rng.standard_normal((2, 2, 1, 1)).astype(np.float32)
    residual = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    expected = np.maximum(np.einsum('fc,nchw->nfhw', weight[:, :, 0, 0], data) + residual, 0)
    shared = residual.copy()
    op.kernel(attrs, [data, weight, shared], [shared], registry.KernelContext(None))
    np.testing.assert_allclose(shared, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
def test_sg_conv_node_follows_a_new_weight_array(layout):
    """A node keeps its view of the weight in its memo (one kernel context for every call, as
    the executor calls it); handed another weight array, it convolves with that one."""
    op = registry.get('_sg_conv')
    params = {'kernel': (1, 1), 'num_filter': 2, 'no_bias': True, 'layout': layout}
    if layout == 'NHWC':
        params['weight_layout'] = 'OIHW'       # the subgraph pass's channel-last convolution
    attrs = op.parse_attrs(params)
    rng = np.random.default_rng(2)
    data = rng.standard_normal((1, 3, 3, 2) if layout == 'NHWC' else (1, 2, 3, 3))
    data = data.astype(np.float32)
    ctx = registry.KernelContext(None)
    for scale in (1, 3):
        weight = np.arange(4, dtype=np.float32).reshape(2, 2, 1, 1) * scale
        out = np.empty_like(data)
        op.kernel(attrs, [data, weight], [out], ctx)
        spec = 'nhwc' if layout == 'NHWC' else 'nchw'
        expected = np.einsum(f'fc,{spec}->{spec.replace("c", "f")}', weight[:, :, 0, 0], data)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_subgraph_is_a_no_op_when_off_and_folds_nothing_in_training():
    graph = conv_bn_net(False, False).to_graph()
    params = parameters(random_inputs(graph, {'data': (1, 3, 4, 4)}))
    with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
        off_graph, off_params = rewritten(graph, params)
        assert rewritten(graph, params, is_train=True) == (graph, params)
    assert off_graph is graph and off_params is params
    # training (without shapes: nothing goes channel-last): the BatchNorm only joins its relu
    train_graph, train_params = rewritten(graph, params, is_train=True)
    assert train_params is params
    assert [n.op.name for n in train_graph.nodes if n.op] == \
        ['Convolution', '_contrib_BatchNormWithReLU']
    assert rewritten(graph, params)[0] is not graph


# ----------------------------------------------------------------------------------------------
# Element-wise fusion

def test_chain_fuses_into_one_node_with_equal_results():
    x, y = sym.var('x'), sym.var('y')
    out = sym.relu(sym.tanh(sym.elemwise_add(x * 2, y)) + 1, name='act')
    graph = out.to_graph()
    fused = fusion.run(graph)
    assert op_names(fused) == ['_FusedElemwise']
    assert fused.output_names() == ['act_output']
    # larger than a block, so the kernel runs several blocks
    shapes = {'x': (3, BLOCK // 2 + 7), 'y': (3, BLOCK // 2 + 7)}
    assert_same_results(graph, fused, random_inputs(graph, shapes))


def test_dag_with_values_read_outside_becomes_one_node_with_several_outputs():
    x = sym.var('x')
    shared = sym.exp(x * 0.5, name='shared')
    out = sym.Group([sym.elemwise_mul(sym.tanh(shared), sym.sigmoid(shared)), sym.sum(shared)])
    graph = out.to_graph()
    fused = fusion.run(graph)
    assert op_names(fused) == ['_FusedElemwise', 'sum']
    assert fused.nodes[-2].num_outputs == 2        # the product, and `shared` for sum
    assert_same_results(graph, fused, random_inputs(graph, {'x': (5, 7)}))


def test_broadcasting_operators_fuse_when_shapes_are_known():
    x, bias = sym.var('x'), sym.var('bias')
    out = sym.tanh(sym.broadcast_add(x * 3, bias), name='t')
    graph = out.to_graph()
    assert fusion.run(graph) is graph       # shapes unknown: broadcast_add may change them
    shapes = {'x': (300, 500), 'bias': (1, 500)}                # rows of blocks, broadcast
    fused = fusion.run(infer_shape.run(graph, Options(shapes=shapes)))
    assert op_names(fused) == ['_FusedElemwise']
    assert_same_results(graph, fused, random_inputs(graph, shapes))


def test_fusion_respects_readers_between_members():
    # transpose reads `a` before the add: the add cannot join a's group (it would come first)
    x = sym.var('x')
    a = sym.exp(x, name='a')
    out = sym.elemwise_add(sym.tanh(a), sym.transpose(a), name='sum')
    graph = out.to_graph()
    fused = fusion.run(graph)
    assert op_names(fused).count('_FusedElemwise') == 1 and 'elemwise_add' in op_names(fused)
    assert_same_results(graph, fused, random_inputs(graph, {'x': (4, 4)}))


def test_fused_node_offers_in_place_only_when_safe():
    op = registry.get('_FusedElemwise')
    last_reads_no_input = chain_text(1, [('exp', {}, ['i0']), ('tanh', {}, ['s0'])], [1])
    read_later = chain_text(2, [('exp', {}, ['i0']), ('elemwise_add', {}, ['s0', 'i0'])], [0, 1])
    assert op.inplace_pairs(op.parse_attrs({'chain': last_reads_no_input})) == ()
    assert op.inplace_pairs(op.parse_attrs({'chain': read_later})) == ((0, 1),)
    chain = chain_text(2, [('elemwise_mul', {}, ['i0', 'i1']), ('exp', {}, ['s0'])], [0, 1])
    attrs = op.parse_attrs({'chain': chain})
    assert op.inplace_pairs(attrs) == ((0, 0),)
    x, y = np.linspace(-1, 1, 8, dtype=np.float32), np.full(8, 2, np.float32)
    expected = [x * y, np.exp(x * y)]
    out1 = np.empty(8, np.float32)
    op.kernel(attrs, [x, y], [x, out1], registry.KernelContext(None))   # output 0 over input 0
    np.testing.assert_array_equal(x, expected[0])
    np.testing.assert_array_equal(out1, expected[1])


def test_fused_shape_and_type_replay_the_steps():
    op = registry.get('_FusedElemwise')
    attrs = op.parse_attrs({'chain': chain_text(
        2, [('broadcast_mul', {}, ['i0', 'i1']), ('_greater_scalar', {'scalar': '0'}, ['s0'])],
        [1, 0])})
    assert op.infer_shape(attrs, [(4, 1), (1, 3)])[1] == [(4, 3), (4, 3)]
    assert op.infer_type(attrs, [np.dtype('float64'), None])[0] == [np.dtype('float64')] * 2


def test_bad_chain_is_named_when_the_node_is_made():
    op = registry.get('_FusedElemwise')
    with pytest.raises(ValueError, match="_FusedElemwise: chain=.*'s3' of step 0"):
        op.parse_attrs({'chain': chain_text(1, [('exp', {}, ['s3'])], [0])})
    with pytest.raises(ValueError, match='no operator named'):
        op.parse_attrs({'chain': chain_text(1, [('exq', {}, ['i0'])], [0])})


def test_fusion_verbose_prints_the_generated_code(capsys):
    x = sym.var('x')
    graph = sym.tanh(x * 0.123456).to_graph()
    with config.override(MXNET_FUSION_VERBOSE=True):
        fused = fusion.run(graph)
        interpret.run(fused, {'x': np.ones(3, np.float32)})
    err = capsys.readouterr().err
    assert 'def fused_block' in err and '_mul_scalar' in err and 'tanh' in err


def test_fusion_is_a_no_op_when_off():
    graph = sym.relu(sym.var('x') * 2 + 1).to_graph()
    with config.override(MXNET_USE_FUSION=False):
        assert fusion.run(graph) is graph


def training_graph(forward):
    graph = forward.to_graph()
    wrt = [graph.nodes[i].name for i in graph.arg_nodes]
    return gradient.with_gradients(graph, wrt, 'write')


def training_inputs(graph, shapes, seed=0):
    """Random inputs, and ones for the head gradients (shaped like their outputs)."""
    inferred = infer_shape.run(graph, Options(shapes=shapes)).attrs['shape']
    heads = {name: inferred[graph.entry_id(graph.outputs[index])]
             for index, name in graph.attrs['gradient'].head_grads}
    values = random_inputs(graph, {**shapes, **heads}, seed)
    return {**values, **{name: np.ones(shape, np.float32) for name, shape in heads.items()}}


def test_fusion_keeps_forward_and_backward_apart():
    x = sym.var('x')
    forward = sym.tanh(sym.exp(x * 0.5) + 1, name='t')
    graph = training_graph(forward)
    fused = fusion.run(graph)
    info = fused.attrs['gradient']
    assert info.num_forward_nodes < graph.attrs['gradient'].num_forward_nodes
    forward_ops = [n.op.name for n in fused.nodes[:info.num_forward_nodes] if n.op]
    assert forward_ops == ['_FusedElemwise']
    assert_same_results(graph, fused, training_inputs(graph, {'x': (3, 4)}))


# ----------------------------------------------------------------------------------------------
# Mirroring

def mlp_forward():
    x = sym.var('x')
    hidden = sym.FullyConnected(x, num_hidden=6, name='fc1')
    hidden = sym.sigmoid(sym.tanh(hidden, name='t') * 2, name='s')
    out = sym.FullyConnected(hidden, num_hidden=3, name='fc2')
    return sym.sum(sym.square(out, name='sq'), name='loss')


def test_mirror_recomputes_cheap_nodes_and_keeps_gradients_identical():
    graph = training_graph(mlp_forward())
    with config.override(MXNET_BACKWARD_DO_MIRROR=True):
        mirrored = mirror.run(graph)
    names = [n.name for n in mirrored.nodes]
    assert {'t_mirror', 's_mirror', 'sq_mirror'} <= set(names)
    assert not any(n.op.name in mirror.EXPENSIVE for n in mirrored.nodes
                   if n.name.endswith('_mirror'))
    info = mirrored.attrs['gradient']
    assert info.num_forward_nodes == graph.attrs['gradient'].num_forward_nodes
    assert all(not n.name.endswith('_mirror') for n in mirrored.nodes[:info.num_forward_nodes])
    # backward nodes read the mirrors, so the forward values die with the forward part
    recomputed = {n.attr_text['__mirror_of__'] for n in mirrored.nodes
                  if '__mirror_of__' in n.attr_text}
    for node in mirrored.nodes[info.num_forward_nodes:]:
        if '__mirror_of__' not in node.attr_text:
            assert not {mirrored.nodes[e.node].name for e in node.inputs} & recomputed
    values = training_inputs(graph, {'x': (4, 5)})
    assert_same_results(graph, mirrored, values, is_train=True)
    assert len(cse.run(mirrored).nodes) == len(mirrored.nodes)      # cse leaves mirrors alone


def test_mirror_chains_are_bounded():
    x = sym.var('x')
    hidden = x
    for i in range(mirror.MAX_DEPTH + 6):
        hidden = sym.tanh(hidden, name=f't{i}')
    graph = training_graph(sym.sum(hidden, name='loss'))
    with config.override(MXNET_BACKWARD_DO_MIRROR=True):
        mirrored = mirror.run(graph)
    depth = {}
    for position, node in enumerate(mirrored.nodes):
        if node.name.endswith('_mirror'):
            depth[position] = 1 + max((depth.get(e.node, 0) for e in node.inputs), default=0)
    assert depth and max(depth.values()) <= mirror.MAX_DEPTH
    assert_same_results(graph, mirrored, training_inputs(graph, {'x': (2, 3)}), is_train=True)


def test_force_mirroring_works_with_the_variable_off_but_never_for_random_nodes():
    x = sym.var('x')
    hidden = sym.tanh(x, name='t', attr={'force_mirroring': 'True'})
    hidden = sym.FullyConnected(sym.sigmoid(hidden, name='s'), num_hidden=3, name='fc',
                                attr={'force_mirroring': 'True'})
    hidden = sym.Dropout(sym.square(hidden), p=0.5, name='drop',
                         attr={'force_mirroring': 'True'})
    graph = training_graph(sym.sum(hidden, name='loss'))
    mirrored = mirror.run(graph)
    recomputed = [n.name for n in mirrored.nodes if n.name.endswith('_mirror')]
    assert sorted(recomputed) == ['fc_mirror', 't_mirror']


def batchnorm_outputs(x, fix_gamma, axis, seed=0):
    """BatchNorm's three outputs in training mode, and its five inputs, for data `x`."""
    op = registry.get('BatchNorm')
    attrs = op.parse_attrs({'fix_gamma': fix_gamma, 'axis': axis})
    channels = x.shape[axis]
    rng = np.random.default_rng(seed)
    param = np.float32 if x.dtype == np.float16 else x.dtype
    gamma, beta = (rng.standard_normal(channels).astype(param) for _ in range(2))
    ins = [x, gamma, beta, np.zeros(channels, param), np.ones(channels, param)]
    outs = [np.empty_like(x), np.empty(channels, param), np.empty(channels, param)]
    op.kernel(attrs, ins, outs, registry.KernelContext(None, is_train=True))
    return attrs, ins, outs


@pytest.mark.parametrize('dtype', [np.float16, np.float32, np.float64])
@pytest.mark.parametrize('fix_gamma, axis', [(True, 1), (False, 1), (False, -1)])
def test_bn_apply_reproduces_batchnorm_bit_for_bit(dtype, fix_gamma, axis):
    x = (np.random.default_rng(1).standard_normal((4, 3, 5, 2)) * 3 + 1).astype(dtype)
    attrs, ins, outs = batchnorm_outputs(x, fix_gamma, axis)
    again = [np.empty_like(x)]
    registry.get('_bn_apply').kernel(attrs, ins[:3] + outs[1:], again,
                                     registry.KernelContext(None, is_train=True))
    np.testing.assert_array_equal(again[0], outs[0])


@pytest.mark.parametrize('fix_gamma', [False, True])
def test_bn_apply_gradient_matches_finite_differences(fix_gamma):
    graph = training_graph(sym.sum(sym._bn_apply(
        sym.var('x'), sym.var('g'), sym.var('b'), sym.var('m'), sym.var('s'),
        fix_gamma=fix_gamma, axis=1) * sym.var('w'), name='loss'))
    shapes = {'x': (3, 2, 4), 'g': (2,), 'b': (2,), 'm': (2,), 's': (2,), 'w': (3, 2, 4)}
    values = {k: v.astype(np.float64) for k, v in training_inputs(graph, shapes).items()}
    outputs = interpret.run(graph, values, is_train=True)
    names = [graph.nodes[i].name for i in graph.arg_nodes]
    grads = dict(zip(names, outputs[1:]))
    for name in ('x', 'g', 'b', 'm', 's'):
        numeric = np.zeros_like(values[name])
        for index in np.ndindex(numeric.shape):
            step = np.zeros_like(numeric)
            step[index] = 1e-6
            up = interpret.run(graph, {**values, name: values[name] + step}, True)[0]
            down = interpret.run(graph, {**values, name: values[name] - step}, True)[0]
            numeric[index] = (up - down).sum() / 2e-6
        np.testing.assert_allclose(grads[name], numeric, rtol=1e-5, atol=1e-6, err_msg=name)


def batchnorm_net():
    net = sym.Convolution(sym.var('data'), kernel=(3, 3), num_filter=4, pad=(1, 1),
                          name='conv')
    net = sym.relu(sym.BatchNorm(net, fix_gamma=False, name='bn'), name='r')
    net = sym.tanh(sym.BatchNorm(net, name='bn2', axis=1), name='t')
    return sym.FullyConnected(sym.Flatten(net), num_hidden=3, name='fc')


def test_mirror_applies_batchnorm_statistics_instead_of_rerunning_it():
    graph = training_graph(sym.sum(sym.square(batchnorm_net()), name='loss'))
    with config.override(MXNET_BACKWARD_DO_MIRROR=True):
        mirrored = mirror.run(graph)
    by_name = {n.name: n for n in mirrored.nodes}
    forward = mirrored.attrs['gradient'].num_forward_nodes
    assert op_names(mirrored)[:forward].count('BatchNorm') == 2
    assert 'BatchNorm' not in [n.op.name for n in mirrored.nodes[forward:] if n.op]
    for name in ('bn', 'bn2'):
        applied = by_name[f'{name}_mirror']
        assert applied.op.name == '_bn_apply'
        stats = [(mirrored.nodes[e.node].name, e.index) for e in applied.inputs[3:]]
        assert stats == [(name, 1), (name, 2)]
    # the backward nodes read the statistics from the forward node, not from a mirror
    for node in mirrored.nodes[forward:]:
        for e in node.inputs:
            if mirrored.nodes[e.node].op is not None and e.index > 0:
                assert '__mirror_of__' not in mirrored.nodes[e.node].attr_text
    assert_same_results(graph, mirrored, training_inputs(graph, {'data': (2, 1, 4, 4)}),
                        is_train=True)


def test_mirror_keeps_batchnorm_under_safe_accumulation():
    graph = training_graph(sym.sum(sym.square(batchnorm_net()), name='loss'))
    with config.override(MXNET_BACKWARD_DO_MIRROR=True, MXNET_SAFE_ACCUMULATION=True):
        mirrored = mirror.run(graph)
    assert '_bn_apply' not in op_names(mirrored)
    assert {'r_mirror', 't_mirror'} <= {n.name for n in mirrored.nodes}


def executor_step(net, mirroring, values):
    """Gradients, moving statistics and the compiled graph of one training step."""
    with config.override(MXNET_BACKWARD_DO_MIRROR=mirroring):
        exe = net.simple_bind(mx.cpu(), grad_req='write', data=values['data'].shape)
        for name, array in exe.arg_dict.items():
            array[:] = values[name]
        exe.forward(is_train=True)
        exe.backward()
    grads = {k: v.asnumpy() for k, v in exe.grad_dict.items()}
    return grads, {k: v.asnumpy() for k, v in exe.aux_dict.items()}, exe._last.graph


def test_mirroring_batchnorm_through_the_executor_keeps_gradients_and_statistics():
    net = sym.SoftmaxOutput(batchnorm_net(), name='sm')
    arg_shapes, _, _ = net.infer_shape(data=(2, 1, 4, 4))
    rng = np.random.default_rng(2)
    values = {name: rng.uniform(-1, 1, shape).astype(np.float32)
              for name, shape in zip(net.list_arguments(), arg_shapes)}
    values['sm_label'] = np.array([0, 2], np.float32)
    grads, stats, plain = executor_step(net, False, values)
    mirrored_grads, mirrored_stats, mirrored = executor_step(net, True, values)
    assert '_bn_apply' not in op_names(plain)
    assert op_names(mirrored).count('_bn_apply') == 2
    assert grads.keys() == mirrored_grads.keys()
    for name in grads:
        np.testing.assert_array_equal(mirrored_grads[name], grads[name], err_msg=name)
    for name in stats:      # the moving statistics moved once
        np.testing.assert_array_equal(mirrored_stats[name], stats[name], err_msg=name)


def test_mirror_is_a_no_op_when_off_or_without_backward():
    graph = training_graph(mlp_forward())
    assert mirror.run(graph) is graph
    forward_only = mlp_forward().to_graph()
    with config.override(MXNET_BACKWARD_DO_MIRROR=True):
        assert mirror.run(forward_only) is forward_only
        declared = forward_only.replace(attrs={'num_forward_outputs': 1})
        assert mirror.run(declared) is declared
