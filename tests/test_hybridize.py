"""Hybridized Gluon blocks: traced once into mx.sym, run through a CachedOp bound per input
signature, differentiated as one autograd node, exported as MXNet 1.x's files."""
import json
import warnings

import numpy as np
import pytest

import ember as mx
from ember import autograd, gluon
from ember import ndarray as nd
from ember import symbol as sym
from ember.base import EmberError
from ember.gluon import nn
from ember.gluon.model_zoo import vision
from ember.gluon.model_zoo.vision import inception


class Projection(gluon.HybridBlock):
    """x @ weight.T with a deferred input size and no infer_shape of its own, counting how
    hybrid_forward is called: traces (F is mx.sym) and imperative runs (F is mx.nd)."""

    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.traces = self.imperative_runs = 0
        self._units = units
        self.weight = self.params.get('weight', shape=(units, 0), allow_deferred_init=True)

    def hybrid_forward(self, F, x, weight):
        if F is sym:
            self.traces += 1
        else:
            self.imperative_runs += 1
        return F.FullyConnected(x, weight, no_bias=True, num_hidden=self._units, name='fc')


def array(*shape, seed=0):
    return nd.array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def mlp():
    net = nn.HybridSequential(prefix='mlp_')
    with net.name_scope():
        net.add(nn.Dense(16, activation='relu'), nn.Dense(16, activation='tanh'), nn.Dense(4))
    return net


def small_cnn():
    net = nn.HybridSequential(prefix='cnn_')
    with net.name_scope():
        net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation('relu'),
                nn.MaxPool2D(2), nn.Conv2D(6, 3), nn.BatchNorm(), nn.Activation('relu'),
                nn.Flatten(), nn.Dense(3))
    return net


def values(net):
    return {name: p.data().asnumpy() for name, p in net.collect_params().items()}


# ----------------------------------------------------------------------------------------------
# Tracing and caching

def test_trace_once_then_bind_per_input_signature():
    block = Projection(prefix='proj_')
    block.initialize(mx.init.One())
    block.hybridize(static_alloc=True)
    for _ in range(3):
        out = block(array(2, 4))
    assert block.traces == 1 and block.imperative_runs == 0
    assert block._cached_op.num_binds == 1
    np.testing.assert_allclose(out.asnumpy(), array(2, 4).asnumpy().sum(1, keepdims=True)
                               * np.ones((1, 3)), rtol=1e-5)
    # A new shape binds a new executor for the same graph (symbols carry no shapes).
    assert block(array(5, 4)).shape == (5, 3)
    assert block.traces == 1 and block._cached_op.num_binds == 2
    signatures = block._cached_op.signatures()
    assert [s.shapes[0] for s in signatures] == [(2, 4), (5, 4)]
    assert all(s.dtypes == ('float32', 'float32') for s in signatures)


def test_graph_inputs_and_names_follow_mxnet():
    net = mlp()
    net.initialize()
    net.hybridize()
    net(array(3, 8))
    inputs, graph = net._cached_graph
    assert [v.name for v in inputs] == ['data']
    assert graph.list_inputs() == ['data', 'mlp_dense0_weight', 'mlp_dense0_bias',
                                   'mlp_dense1_weight', 'mlp_dense1_bias',
                                   'mlp_dense2_weight', 'mlp_dense2_bias']
    assert graph.list_outputs() == ['mlp_dense2_fwd_output']
    internals = graph.get_internals().list_outputs()
    assert 'mlp_dense0_relu_fwd_output' in internals


def test_symbol_inputs_give_a_symbol():
    net = mlp()
    out = net(sym.var('data'))
    assert isinstance(out, sym.Symbol)
    _, shapes, _ = out.infer_shape(data=(5, 8))
    assert shapes == [(5, 4)]


def test_hybridize_inactive_returns_to_imperative():
    block = Projection()
    block.initialize()
    block.hybridize()
    block(array(2, 4))
    block.hybridize(active=False)
    block(array(2, 4))
    block(array(2, 4))
    assert block.traces == 1 and block.imperative_runs == 2
    block.hybridize()
    block(array(2, 4))
    assert block.traces == 2, 'hybridize() again starts from a new trace'


def test_deferred_shapes_come_from_the_traced_graph():
    imperative, hybrid = Projection(), Projection()
    for block in (imperative, hybrid):
        block.initialize()
    hybrid.hybridize()
    imperative(array(2, 7))
    hybrid(array(2, 7))
    assert imperative.weight.shape == hybrid.weight.shape == (3, 7)
    # A hybridized container infers the shapes of every child from one graph.
    net = small_cnn()
    net.initialize()
    net.hybridize()
    net(array(2, 2, 8, 8))
    shapes = {name: p.shape for name, p in net.collect_params().items()}
    assert shapes['cnn_conv0_weight'] == (4, 2, 3, 3)
    assert shapes['cnn_batchnorm1_running_var'] == (6,)
    assert shapes['cnn_dense0_weight'] == (3, 6 * 2 * 2)


def test_new_input_structure_retraces():
    class Optional(gluon.HybridBlock):
        traces = 0

        def hybrid_forward(self, F, x, y=None):
            Optional.traces += F is sym
            return x if y is None else x + y

    block = Optional()
    block.hybridize()
    x = array(2, 3)
    np.testing.assert_allclose(block(x).asnumpy(), x.asnumpy())
    np.testing.assert_allclose(block(x, x).asnumpy(), 2 * x.asnumpy())
    assert Optional.traces == 2
    assert [v.name for v in block._cached_graph[0]] == ['data0', 'data1']


def test_nested_inputs_and_outputs_are_flattened_and_regrouped():
    class Nested(gluon.HybridBlock):
        def hybrid_forward(self, F, x, pair):
            a, b = pair
            return x + a, [a * b, F.relu(b)]

    block = Nested()
    block.hybridize()
    x, a, b = array(2, 2, seed=1), array(2, 2, seed=2), array(2, 2, seed=3)
    first, (product, relu) = block(x, [a, b])
    assert [v.name for v in block._cached_graph[0]] == ['data0', 'data1', 'data2']
    np.testing.assert_allclose(first.asnumpy(), x.asnumpy() + a.asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(product.asnumpy(), a.asnumpy() * b.asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(relu.asnumpy(), np.maximum(b.asnumpy(), 0))


def test_outputs_are_not_overwritten_by_later_calls():
    net = mlp()
    net.initialize()
    net.hybridize(static_alloc=True)
    first = net(array(3, 8, seed=1))
    expected = first.asnumpy().copy()
    net(array(3, 8, seed=2)).wait_to_read()
    np.testing.assert_array_equal(first.asnumpy(), expected)


def test_static_alloc_keeps_an_executor_per_signature():
    def run(static_alloc):
        net = small_cnn()
        net.initialize()
        net.hybridize(static_alloc=static_alloc)
        x = array(2, 2, 8, 8)
        for _ in range(2):
            with autograd.record():
                net(x).sum().backward()
            net(x).wait_to_read()      # inference: another signature (no gradients)
        return net._cached_op.num_binds

    assert run(True) == 2
    assert run(False) == 4, 'without static_alloc only the signature in use keeps memory'


def test_bulk_sizes_set_the_segments_of_the_graph():
    def forward_pushes(**flags):
        net = mlp()
        net.initialize()
        net.hybridize(**flags)
        with autograd.record():
            net(array(2, 8)).backward()
        (bound,) = next(iter(net._cached_op._pool.values()))
        return len(bound.executor._compiled[True].program.forward)

    assert forward_pushes(forward_bulk_size=1) == 5       # 3 FullyConnected, 2 Activation
    assert forward_pushes(forward_bulk_size=100) == 1


def test_hybridizing_a_block_with_hooks_warns():
    block = Projection()
    block.register_forward_hook(lambda *args: None)
    with pytest.warns(UserWarning, match='forward hook'):
        block.hybridize()


# ----------------------------------------------------------------------------------------------
# Gradients

def test_input_and_parameter_gradients_match_imperative():
    results = []
    for hybridize in (False, True):
        block = nn.Dense(4, in_units=4, prefix='d_')
        block.initialize(mx.init.Xavier(), force_reinit=True)
        block.weight.set_data(array(4, 4, seed=5))
        if hybridize:
            block.hybridize()
        x = array(3, 4, seed=6)
        x.attach_grad()
        with autograd.record():
            # The same block twice in one recording: two executors, one per pending backward.
            out = block(nd.tanh(block(x)))
            loss = (out * out).sum()
        loss.backward()
        results.append((x.grad.asnumpy(), block.weight.grad().asnumpy(), out.asnumpy()))
    for imperative, hybrid in zip(*results):
        np.testing.assert_allclose(hybrid, imperative, rtol=1e-5, atol=1e-6)


def test_grad_req_add_accumulates_across_backward_passes():
    block = Projection()
    block.initialize()
    block.hybridize()
    x = array(2, 4)
    block(x)
    block.weight.grad_req = 'add'
    block.weight.zero_grad()
    for _ in range(2):
        with autograd.record():
            block(x).sum().backward()
    once = np.tile(x.asnumpy().sum(0), (3, 1))
    np.testing.assert_allclose(block.weight.grad().asnumpy(), 2 * once, rtol=1e-5)


def test_higher_order_gradients_through_a_graph_are_refused():
    block = Projection()
    block.initialize()
    block.hybridize()
    x = array(2, 4)
    x.attach_grad()
    with autograd.record():
        y = (block(x) ** 2).sum()
        with pytest.raises(EmberError, match='gradients of gradients'):
            autograd.grad(y, [x], create_graph=True)


@pytest.mark.parametrize('make,shape,steps', [(mlp, (5, 8), 4), (small_cnn, (4, 2, 8, 8), 3)],
                         ids=['mlp', 'cnn_batchnorm'])
def test_training_with_trainer_matches_imperative(make, shape, steps):
    x, labels = array(*shape, seed=7), nd.array([0, 1, 2, 1, 0][:shape[0]])
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    results = []
    for hybridize in (False, True):
        mx.random.seed(3)
        net = make()
        net.initialize(mx.init.Xavier())
        if hybridize:
            net.hybridize(static_alloc=True)
        net(x)          # materializes the deferred parameters, changes nothing
        initial = values(net) if results == [] else None
        trainer = gluon.Trainer(net.collect_params(), 'sgd',
                                {'learning_rate': 0.1, 'momentum': 0.9, 'wd': 1e-3})
        for _ in range(steps):
            with autograd.record():
                loss = loss_fn(net(x), labels)
            loss.backward()
            trainer.step(shape[0])
        results.append(values(net))
        if initial is not None:
            # (A convolution's bias right before BatchNorm has no gradient.)
            unchanged = {k for k in initial if np.allclose(initial[k], results[0][k])}
            assert unchanged <= {'cnn_conv0_bias', 'cnn_conv1_bias'}, unchanged
    for name in results[0]:
        np.testing.assert_allclose(results[1][name], results[0][name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)


# ----------------------------------------------------------------------------------------------
# Every built-in layer traces: model zoo networks hybridized give the imperative output

def _inception_blocks():
    net = nn.HybridSequential(prefix='inc_')
    with net.name_scope():
        net.add(inception._make_A(8, 'A_'), inception._make_B('B_'),
                inception._make_C(16, 'C_'), inception._make_D('D_'), inception._make_E('E_'),
                nn.GlobalAvgPool2D(), nn.Dense(5))
    return net


ZOO = [
    ('resnet18_v1', lambda: vision.get_model('resnet18_v1', classes=5), (1, 3, 32, 32)),
    ('mobilenet0.25', lambda: vision.get_model('mobilenet0.25', classes=5), (1, 3, 32, 32)),
    ('densenet', lambda: vision.DenseNet(8, 4, [2, 2, 2, 2], classes=5), (1, 3, 224, 224)),
    ('inception', _inception_blocks, (1, 8, 9, 9)),
]


@pytest.mark.parametrize('make,shape', [z[1:] for z in ZOO], ids=[z[0] for z in ZOO])
def test_model_zoo_hybridized_output_equals_imperative(make, shape):
    net = make()
    net.initialize(mx.init.Xavier())
    x = array(*shape, seed=11)
    expected = net(x).asnumpy()
    net.hybridize()
    # a deep network's sums run in other orders hybridized (folded, channel-last, other
    # algorithms): the tolerance scales with the output
    np.testing.assert_allclose(net(x).asnumpy(), expected, rtol=1e-4,
                               atol=1e-5 * np.abs(expected).max())
    assert net._cached_op.num_binds == 1


# ----------------------------------------------------------------------------------------------
# Export

def test_export_writes_mxnet_symbol_and_params_files(tmp_path):
    net = small_cnn()
    net.initialize()
    with pytest.raises(RuntimeError, match='hybridize'):
        net.export(str(tmp_path / 'net'))
    net.hybridize()
    net(array(2, 2, 8, 8))
    symbol_file, params_file = net.export(str(tmp_path / 'net'), epoch=3)
    assert symbol_file == str(tmp_path / 'net-symbol.json')
    assert params_file == str(tmp_path / 'net-0003.params')
    graph = json.loads((tmp_path / 'net-symbol.json').read_text())
    names = [node['name'] for node in graph['nodes']]
    assert names[0] == 'data' and 'cnn_conv0_fwd' in names and 'cnn_batchnorm0_fwd' in names
    saved = nd.load(params_file)
    params = net.collect_params()
    expected_keys = {f'aux:{n}' if 'running' in n else f'arg:{n}' for n in params}
    assert set(saved) == expected_keys
    for key, value in saved.items():
        np.testing.assert_array_equal(value.asnumpy(),
                                      params[key.split(':', 1)[1]].data().asnumpy())
    loaded = sym.load(symbol_file)
    assert loaded.list_auxiliary_states() == ['cnn_batchnorm0_running_mean',
                                              'cnn_batchnorm0_running_var',
                                              'cnn_batchnorm1_running_mean',
                                              'cnn_batchnorm1_running_var']


def test_unused_parameters_warn_at_the_first_call():
    class Unused(gluon.HybridBlock):
        def __init__(self):
            super().__init__(prefix='u_')
            self.extra = self.params.get('extra', shape=(2,), init=mx.init.Zero())

        def hybrid_forward(self, F, x, extra):
            return x * 2

    block = Unused()
    block.initialize()
    block.hybridize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        block(array(2))
    assert any('u_extra is not used' in str(w.message) for w in caught)


def test_inference_between_training_steps_sees_the_updated_parameters():
    net = small_cnn()
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True)
    x, labels = array(4, 2, 8, 8, seed=4), nd.array([0, 1, 2, 1])
    trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.5})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(2):
        before = net(x).asnumpy()
        with autograd.record():
            loss = loss_fn(net(x), labels)
        loss.backward()
        trainer.step(4)
    after = net(x).asnumpy()
    assert not np.allclose(after, before)
    net.hybridize(active=False)
    np.testing.assert_allclose(after, net(x).asnumpy(), rtol=1e-4, atol=1e-5)


def test_backward_twice_with_retain_graph_and_after_another_call():
    block = Projection()
    block.initialize()
    block.hybridize(static_alloc=True)
    x = array(2, 4)
    with autograd.record():
        out = block(x).sum()
    out.backward(retain_graph=True)
    first = block.weight.grad().asnumpy().copy()
    out.backward(retain_graph=True)
    np.testing.assert_array_equal(block.weight.grad().asnumpy(), first)
    block(x)            # an inference signature: another executor
    out.backward(retain_graph=True)
    with autograd.record():
        block(x)        # the same signature: the executor, free since the backward, runs again
    with pytest.raises(EmberError, match='ran another forward'):
        out.backward()


@pytest.mark.parametrize('make,inputs', [
    (lambda: gluon.loss.SoftmaxCrossEntropyLoss(),
     lambda: (array(3, 4), nd.array([0, 3, 1]))),
    (lambda: gluon.loss.L2Loss(), lambda: (array(3, 4), array(3, 4, seed=1), array(3, 1, seed=2))),
    (lambda: nn.HybridLambda(lambda F, x: F.relu(x) * 2 + F.sigmoid(x)), lambda: (array(3, 4),)),
], ids=['softmax_ce', 'l2_weighted', 'lambda'])
def test_losses_and_lambdas_hybridize(make, inputs):
    block, args = make(), inputs()
    expected = block(*args).asnumpy()
    block.hybridize()
    np.testing.assert_allclose(block(*args).asnumpy(), expected, rtol=1e-5, atol=1e-6)


def test_recurrent_layer_in_a_hybridized_container_infers_its_shapes():
    from ember.gluon import rnn
    nets = []
    for _ in range(2):
        net = nn.HybridSequential()
        net.add(rnn.LSTM(6, layout='NTC'), nn.Dense(3, flatten=False))
        net.initialize()
        nets.append(net)
    x = array(2, 5, 4)
    nets[1].hybridize()
    nets[1](x)          # the fused weights' shapes cannot be read back through the graph
    nets[0](x)
    for p0, p1 in zip(nets[0].collect_params().values(), nets[1].collect_params().values()):
        assert p0.shape == p1.shape
        p1.set_data(p0.data())
    np.testing.assert_allclose(nets[1](x).asnumpy(), nets[0](x).asnumpy(), rtol=1e-5,
                               atol=1e-6)


def test_unknown_hybridize_flags_are_refused_at_once():
    with pytest.raises(TypeError, match=r"unknown flags \['static_aloc'\]"):
        Projection().hybridize(static_aloc=True)


def test_gradients_of_a_hybridized_block_are_not_overwritten_by_its_next_backward():
    import numpy as np
    import ember as mx
    from ember import autograd, gluon
    net = gluon.nn.Dense(3, in_units=4)
    net.initialize()
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.ones((2, 4))
    x.attach_grad()
    with autograd.record():
        y = net(x).sum()
    first = autograd.grad(y, [x])[0]
    kept = first.asnumpy().copy()
    with autograd.record():
        y2 = (net(x * 3) * 5).sum()
    y2.backward()                        # the same executor writes its gradients again
    np.testing.assert_array_equal(first.asnumpy(), kept)
    np.testing.assert_allclose(x.grad.asnumpy(), kept * 15, rtol=1e-5)
    weight_grad = net.weight.grad().asnumpy()
    np.testing.assert_allclose(weight_grad, np.full((3, 4), 2 * 3 * 5.0), rtol=1e-5)


def _dense_pair(hybridize, seed=5):
    net = nn.Dense(3, in_units=4, prefix='d_')
    net.initialize()
    net.weight.set_data(array(3, 4, seed=seed))
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    return net


def test_parameter_gradients_are_computed_into_their_grad_arrays():
    net = _dense_pair(True)
    x = array(2, 4, seed=1)
    grad_before = net.weight.grad()
    with autograd.record():
        loss = (net(x) ** 2).sum()
    loss.backward()
    (bound,) = [b for pool in net._cached_op._pool.values() for b in pool]
    # no second array per gradient and no copy into .grad: the executor wrote it there
    assert bound.executor.grad_dict['d_weight'] is grad_before is net.weight.grad()
    y = x.asnumpy() @ net.weight.data().asnumpy().T + net.bias.data().asnumpy()
    np.testing.assert_allclose(grad_before.asnumpy(), 2 * y.T @ x.asnumpy(), rtol=1e-5)


def test_autograd_grad_through_a_hybridized_block_leaves_grad_arrays_alone():
    net = _dense_pair(True)
    x = array(2, 4, seed=1)
    with autograd.record():
        (net(x) ** 2).sum().backward()
    stored = net.weight.grad().asnumpy().copy()
    net.weight.grad()[:] = 7
    weight = net.weight.data()
    with autograd.record():
        loss = (net(x) ** 2).sum()
    (result,) = autograd.grad(loss, [weight])
    np.testing.assert_allclose(result.asnumpy(), stored, rtol=1e-6)
    np.testing.assert_array_equal(net.weight.grad().asnumpy(), np.full((3, 4), 7.0))
    # the next backward writes .grad again
    with autograd.record():
        (net(x) ** 2).sum().backward()
    np.testing.assert_allclose(net.weight.grad().asnumpy(), stored, rtol=1e-6)


@pytest.mark.parametrize('sharing', ['two blocks', 'outside the block'])
def test_gradients_of_a_parameter_used_in_several_places_are_summed(sharing):
    results = []
    for hybridize in (False, True):
        net = _dense_pair(hybridize)
        other = nn.Dense(3, in_units=4, params=net.collect_params(), prefix='d_')
        if hybridize:
            other.hybridize(static_alloc=True)
        x = array(2, 4, seed=1)
        with autograd.record():
            loss = (net(x) ** 2).sum()
            if sharing == 'two blocks':
                loss = loss + (other(x * 2) ** 3).sum()
            else:
                loss = loss + (net.weight.data() ** 2).sum() * 3
        loss.backward()
        results.append(net.weight.grad().asnumpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5)


def test_gradients_follow_grad_arrays_made_after_the_executor():
    net = _dense_pair(True)
    x = array(2, 4, seed=1)

    def backward():
        with autograd.record():
            (net(x) ** 2).sum().backward()
    backward()
    once = net.weight.grad().asnumpy().copy()
    net.weight.grad_req = 'add'             # new .grad arrays; the executor keeps its own
    net.weight.zero_grad()
    backward()
    backward()
    np.testing.assert_allclose(net.weight.grad().asnumpy(), 2 * once, rtol=1e-5)
    net.weight.grad_req = 'write'
    backward()
    np.testing.assert_allclose(net.weight.grad().asnumpy(), once, rtol=1e-5)


@pytest.mark.parametrize('change', ['initialize again', 'reset_ctx', 'cast', 'set_data'])
def test_hybridized_calls_read_replaced_parameter_arrays(change):
    """A hybridized block keeps the parameter arrays its last call read; a parameter given new
    arrays (or new values) reaches the next call."""
    net = nn.Dense(3, in_units=4)
    net.initialize(mx.init.One())
    net.hybridize(static_alloc=True)
    x = nd.array(np.arange(8, dtype=np.float32).reshape(2, 4))
    before = net(x).asnumpy()
    if change == 'initialize again':
        net.initialize(mx.init.Constant(2), force_reinit=True)
    elif change == 'reset_ctx':
        net.collect_params().reset_ctx(mx.cpu(0))
        net.weight.set_data(net.weight.data() * 2)
        net.bias.set_data(net.bias.data() * 2)
    elif change == 'cast':
        net.cast('float64')
        x = x.astype('float64')
        net.weight.set_data(net.weight.data() * 2)
        net.bias.set_data(net.bias.data() * 2)
    else:
        net.weight.set_data(net.weight.data() * 2)
        net.bias.set_data(net.bias.data() * 2)
    after = net(x).asnumpy()
    expected = x.asnumpy() @ net.weight.data().asnumpy().T + net.bias.data().asnumpy()
    np.testing.assert_allclose(after, expected, rtol=1e-6)
    np.testing.assert_allclose(after, 2 * before, rtol=1e-6)
