"""What the graph executor tells kernels beyond their arrays: which outputs nobody reads, and the
engine variables of inputs that keep their contents (so work derived from them can be kept)."""
import numpy as np
import ember as mx
import ember.executor  # noqa: F401  (attaches Symbol.bind)
from ember import engine, symbol as sym
from ember.op.nn import onednn_provider
from ember.op.nn.conv import convolution, generic
from ember.op.registry import KernelContext


def _conv_net():
    conv = sym.Convolution(sym.var('data'), kernel=(3, 3), num_filter=4, pad=(1, 1),
                           no_bias=True, name='conv')
    return sym.sum(conv, name='loss')


def _data_grads_computed(monkeypatch, data_req):
    calls = []
    real_chosen, real_numpy = convolution._backward_data, generic.backward_data
    real_onednn = onednn_provider.convolution_backward_data
    monkeypatch.setattr(convolution, '_backward_data',
                        lambda *a: (calls.append('chosen'), real_chosen(*a)))
    monkeypatch.setattr(generic, 'backward_data',
                        lambda *a: (calls.append('numpy'), real_numpy(*a)))
    monkeypatch.setattr(onednn_provider, 'convolution_backward_data',
                        lambda *a: calls.append('onednn') or real_onednn(*a))
    rng = np.random.default_rng(0)
    x = mx.nd.array(rng.standard_normal((2, 3, 5, 5)))
    w = mx.nd.array(rng.standard_normal((4, 3, 3, 3)))
    grads = {'data': mx.nd.zeros(x.shape), 'conv_weight': mx.nd.zeros(w.shape)}
    exe = _conv_net().bind(mx.cpu(), {'data': x, 'conv_weight': w}, args_grad=grads,
                           grad_req={'data': data_req, 'conv_weight': 'write'})
    exe.forward(is_train=True)
    exe.backward()
    # the weight gradient is right either way: sum over the output of each filter
    xs = x.asnumpy()
    padded = np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.stack([padded[:, :, i:i + 5, j:j + 5].sum(axis=(0, 2, 3))
                         for i in range(3) for j in range(3)], -1).reshape(3, 3, 3)
    np.testing.assert_allclose(grads['conv_weight'].asnumpy(),
                               np.broadcast_to(expected, (4, 3, 3, 3)), rtol=1e-4, atol=1e-4)
    return calls, grads['data'].asnumpy()


def test_a_gradient_nobody_reads_is_not_computed(monkeypatch):
    calls, _ = _data_grads_computed(monkeypatch, 'null')
    assert calls == []


def test_a_gradient_that_is_read_is_computed(monkeypatch):
    calls, data_grad = _data_grads_computed(monkeypatch, 'write')
    assert calls and np.abs(data_grad).sum() > 0


def test_input_version_changes_with_each_write():
    var = engine.get().new_var()
    ctx = KernelContext(None, input_vars=(var,))
    before = ctx.input_version(0)
    engine.get().push(lambda: None, writes=[var])
    engine.get().wait_for_var(var)
    assert ctx.input_version(0) != before and ctx.input_version(0)[0] is var


def _folded_net():
    conv = sym.Convolution(sym.var('data'), kernel=(1, 1), num_filter=2, no_bias=True,
                           name='c')
    return sym.BatchNorm(conv, fix_gamma=False, name='bn')


def test_inference_keeps_folded_weights_until_their_sources_change():
    rng = np.random.default_rng(1)
    args = {'data': mx.nd.array(rng.standard_normal((1, 3, 4, 4))),
            'c_weight': mx.nd.array(rng.standard_normal((2, 3, 1, 1))),
            'bn_gamma': mx.nd.ones(2), 'bn_beta': mx.nd.zeros(2)}
    aux = {'bn_moving_mean': mx.nd.zeros(2), 'bn_moving_var': mx.nd.ones(2)}
    exe = _folded_net().bind(mx.cpu(), args, aux_states=aux)
    first = exe.forward()[0].asnumpy()
    folded = exe._last.folded_arrays
    assert folded, 'the BatchNorm folded into the convolution'
    versions = [a._var.version for a in folded.values()]
    exe.forward()[0].wait_to_read()
    exe.forward()[0].wait_to_read()
    assert [a._var.version for a in folded.values()] == versions   # nothing refolded
    # the weight is the convolution's own input (it scales it itself): no refold, but the
    # convolution sees the new values
    args['c_weight'][:] = args['c_weight'] * 2
    second = exe.forward()[0].asnumpy()
    assert [a._var.version for a in folded.values()] == versions
    np.testing.assert_allclose(second, 2 * first, rtol=1e-4, atol=1e-5)
    aux['bn_moving_mean'][:] = 1                                      # a source changes
    third = exe.forward()[0].asnumpy()
    assert [a._var.version for a in folded.values()] != versions
    np.testing.assert_allclose(third, 2 * first - 1 / np.sqrt(1 + 1e-3), rtol=1e-4, atol=1e-4)


def test_hybridized_inference_follows_new_parameter_values():
    # oneDNN keeps each convolution's reordered weights between calls; new values must reach it
    from ember.gluon import nn
    net = nn.HybridSequential()
    net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation('relu'),
            nn.Conv2D(8, 3, padding=1), nn.BatchNorm())
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.default_rng(2).standard_normal((1, 3, 8, 8)))
    eager = net(x).asnumpy()
    net.hybridize(static_alloc=True, static_shape=True)
    np.testing.assert_allclose(net(x).asnumpy(), eager, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(net(x).asnumpy(), eager, rtol=1e-4, atol=1e-4)
    weight = net[3].weight
    weight.set_data(weight.data() * -1)
    expected = net[4](net[3](net[2](net[1](net[0](x))))).asnumpy()
    np.testing.assert_allclose(net(x).asnumpy(), expected, rtol=1e-4, atol=1e-4)
    assert not np.allclose(expected, eager, atol=1e-3)
