"""Gluon layers (mx.gluon.nn): outputs against NumPy references, deferred shapes, naming,
parameter files and gradients."""
import itertools
import math

import numpy as np
import pytest

import ember as mx
from ember.gluon import loss as gloss
from ember.gluon import nn

RNG = np.random.default_rng(7)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(actual, expected, tol=1e-5):
    actual = actual.asnumpy() if isinstance(actual, mx.nd.NDArray) else actual
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def set_params(block, **values):
    """Initialize `block` and give the named parameters these NumPy values."""
    block.initialize()
    for name, value in values.items():
        getattr(block, name).set_data(mx.nd.array(value))


# ---------------------------------------------------------------------------------------------
# NumPy references

def conv_ref(x, w, b, stride, pad, dilate, groups=1):
    """N-d convolution of channel-first x (N, C, *S) with w (F, C/groups, *K)."""
    nd_ = x.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    kernel = w.shape[2:]
    out_size = [(xp.shape[2 + i] - dilate[i] * (kernel[i] - 1) - 1) // stride[i] + 1
                for i in range(nd_)]
    out = np.zeros((x.shape[0], w.shape[0], *out_size))
    f_per, c_per = w.shape[0] // groups, w.shape[1]
    for g in range(groups):
        fs, cs = slice(g * f_per, (g + 1) * f_per), slice(g * c_per, (g + 1) * c_per)
        for offset in itertools.product(*[range(k) for k in kernel]):
            window = tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                           for o, d, s, n in zip(offset, dilate, stride, out_size))
            patch = xp[(slice(None), cs) + window]
            out[:, fs] += np.einsum('nc...,fc->nf...', patch, w[(fs, slice(None)) + offset])
    if b is not None:
        out += b.reshape((1, -1) + (1,) * nd_)
    return out


def deconv_ref(x, w, b, stride, pad, adj):
    """Transposed convolution of x (N, C, *S) with w (C, F, *K), groups=1, dilation 1."""
    nd_ = x.ndim - 2
    kernel, size = w.shape[2:], x.shape[2:]
    full = [(n - 1) * s + k + a for n, s, k, a in zip(size, stride, kernel, adj)]
    out = np.zeros((x.shape[0], w.shape[1], *full))
    for offset in itertools.product(*[range(k) for k in kernel]):
        target = tuple(slice(o, o + s * (n - 1) + 1, s) for o, s, n in zip(offset, stride, size))
        out[(slice(None), slice(None)) + target] += np.einsum(
            'nc...,cf->nf...', x, w[(slice(None), slice(None)) + offset])
    crop = tuple(slice(p, f - p) for p, f in zip(pad, full))
    out = out[(slice(None), slice(None)) + crop]
    if b is not None:
        out += b.reshape((1, -1) + (1,) * nd_)
    return out


def pool_ref(x, kernel, stride, pad, kind, count_include_pad=True):
    nd_ = x.ndim - 2
    fill = -np.inf if kind == 'max' else 0.0
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad], constant_values=fill)
    ones = np.pad(np.ones(x.shape[2:]), [(p, p) for p in pad])
    out_size = [(xp.shape[2 + i] - kernel[i]) // stride[i] + 1 for i in range(nd_)]
    out = np.zeros(x.shape[:2] + tuple(out_size))
    for pos in itertools.product(*[range(n) for n in out_size]):
        window = tuple(slice(p * s, p * s + k) for p, s, k in zip(pos, stride, kernel))
        patch = xp[(slice(None), slice(None)) + window].reshape(x.shape[:2] + (-1,))
        index = (slice(None), slice(None)) + pos
        if kind == 'max':
            out[index] = patch.max(-1)
        else:
            count = np.prod(kernel) if count_include_pad else ones[window].sum()
            out[index] = patch.sum(-1) / count
    return out


# ---------------------------------------------------------------------------------------------
# Dense

def test_dense_matches_numpy():
    x, w, b = rand(4, 3), rand(5, 3), rand(5)
    layer = nn.Dense(5, in_units=3)
    set_params(layer, weight=w, bias=b)
    close(layer(mx.nd.array(x)), x @ w.T + b)


def test_dense_activation_and_no_bias():
    x, w = rand(4, 3), rand(5, 3)
    layer = nn.Dense(5, activation='relu', use_bias=False, in_units=3)
    set_params(layer, weight=w)
    assert layer.bias is None
    assert list(layer.collect_params()) == [layer.prefix + 'weight']
    close(layer(mx.nd.array(x)), np.maximum(x @ w.T, 0))


def test_dense_deferred_shape_inference():
    layer = nn.Dense(10)
    layer.initialize()
    assert layer.weight.shape == (10, 0)
    out = layer(mx.nd.ones((4, 7)))
    assert layer.weight.shape == (10, 7) and layer.bias.shape == (10,)
    assert out.shape == (4, 10)


def test_dense_flatten_false_uses_last_axis():
    x, w, b = rand(2, 3, 4), rand(6, 4), rand(6)
    layer = nn.Dense(6, flatten=False)
    layer.initialize()
    layer(mx.nd.array(x))
    assert layer.weight.shape == (6, 4)
    layer.weight.set_data(mx.nd.array(w))
    layer.bias.set_data(mx.nd.array(b))
    close(layer(mx.nd.array(x)), x @ w.T + b)


def test_dense_flatten_true_flattens_trailing_axes():
    x = rand(2, 3, 4)
    layer = nn.Dense(6, weight_initializer=mx.init.One())
    layer.initialize()
    out = layer(mx.nd.array(x))
    assert layer.weight.shape == (6, 12)
    close(out, np.repeat(x.reshape(2, -1).sum(1, keepdims=True), 6, axis=1), 1e-4)


def test_dense_initializers_and_dtype():
    layer = nn.Dense(3, in_units=2, dtype='float64', weight_initializer=mx.init.Constant(2.0),
                     bias_initializer=mx.init.Constant(0.5))
    layer.initialize()
    assert layer.weight.data().dtype == np.float64
    close(layer(mx.nd.ones((1, 2), dtype='float64')), np.full((1, 3), 4.5))


def test_dense_repr():
    assert repr(nn.Dense(10, activation='relu', in_units=2)) == 'Dense(2 -> 10, Activation(relu))'
    assert repr(nn.Dense(4)) == 'Dense(None -> 4, linear)'


def test_dense_gradients():
    x, w, b = rand(4, 3), rand(2, 3), rand(2)
    layer = nn.Dense(2, in_units=3)
    set_params(layer, weight=w, bias=b)
    data = mx.nd.array(x)
    data.attach_grad()
    with mx.autograd.record():
        loss = (layer(data) * layer(data)).sum()
    loss.backward()
    out = x @ w.T + b
    close(layer.weight.grad(), 2 * out.T @ x, 1e-4)
    close(layer.bias.grad(), 2 * out.sum(0), 1e-4)
    close(data.grad, 2 * out @ w, 1e-4)


# ---------------------------------------------------------------------------------------------
# Containers, naming, parameter files

def make_net(prefix='net_'):
    net = nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(nn.Conv2D(4, 3, padding=1), nn.BatchNorm(), nn.Activation('relu'),
                nn.MaxPool2D(), nn.Flatten(), nn.Dense(8), nn.Dense(3))
    return net


def test_prefixes_and_collect_params_names():
    net = make_net()
    names = list(net.collect_params())
    assert names == ['net_conv0_weight', 'net_conv0_bias', 'net_batchnorm0_gamma',
                     'net_batchnorm0_beta', 'net_batchnorm0_running_mean',
                     'net_batchnorm0_running_var', 'net_dense0_weight', 'net_dense0_bias',
                     'net_dense1_weight', 'net_dense1_bias']
    assert net[0].prefix == 'net_conv0_' and net[3].prefix == 'net_pool0_'
    assert net[2].prefix == 'net_relu0_' and net[2].name == 'net_relu0'
    assert list(net.collect_params('.*dense1.*')) == ['net_dense1_weight', 'net_dense1_bias']


def test_activation_child_prefix_inside_dense():
    net = nn.HybridSequential(prefix='m_')
    with net.name_scope():
        net.add(nn.Dense(2, activation='tanh'))
    assert net[0].act.prefix == 'm_dense0_tanh_'


def test_running_stats_have_no_gradient():
    bn = nn.BatchNorm(in_channels=2)
    assert bn.running_mean.grad_req == 'null' and bn.running_var.grad_req == 'null'
    assert bn.gamma.grad_req == 'write'
    assert nn.BatchNorm(scale=False, center=False).gamma.grad_req == 'null'


def test_sequential_indexing_len_and_repr():
    net = nn.Sequential(prefix='s_')
    with net.name_scope():
        net.add(nn.Dense(3, in_units=2), nn.Dense(4, in_units=3), nn.Dense(5, in_units=4))
    assert len(net) == 3
    assert isinstance(net[1], nn.Dense) and net[-1].prefix == 's_dense2_'
    head = net[:2]
    assert type(head) is nn.Sequential and len(head) == 2 and head[1] is net[1]
    assert repr(net[:1]) == 'Sequential(\n  (0): Dense(2 -> 3, linear)\n)'
    net.initialize(mx.init.One())
    close(net(mx.nd.ones((1, 2))), np.full((1, 5), 24.0))


def test_hybrid_sequential_passes_tuple_outputs_on():
    net = nn.HybridSequential()
    net.add(nn.HybridLambda(lambda F, x: (x * 2, x + 1)),
            nn.HybridLambda(lambda F, x, y: x * y))
    close(net(mx.nd.array([1.0, 2.0])), [4.0, 12.0])


def test_sequential_hybridize_warns_when_all_children_hybrid():
    net = nn.Sequential()
    net.add(nn.Dense(2, in_units=2))
    with pytest.warns(UserWarning, match='HybridSequential'):
        net.hybridize()


def test_save_and_load_parameters_round_trip(tmp_path):
    x = mx.nd.array(rand(2, 3, 6, 6))
    net = make_net('a_')
    net.initialize(mx.init.Normal(0.5))
    expected = net(x).asnumpy()
    path = str(tmp_path / 'net.params')
    net.save_parameters(path)
    other = make_net('b_')
    other.load_parameters(path)
    assert other[5].weight.shape == (8, 36)
    close(other(x), expected)


def test_loading_parameters_into_a_new_block_reads_each_value_once(tmp_path):
    # the file's values are read into the arrays the parameters keep: no placeholder filled
    # and overwritten, no copy of what was read (the storage pool counts what was allocated)
    path = str(tmp_path / 'net.params')
    net = make_net('a_')
    net.initialize(mx.init.Normal(0.5))
    net(mx.nd.array(rand(2, 3, 6, 6)))
    net.save_parameters(path)
    other = make_net('b_')
    params = other.collect_params().values()
    pool = mx.storage.manager(mx.cpu())
    before = pool.stats()['allocations']
    other.load_parameters(path)
    # each parameter: its value, and its gradient where it has one
    grads = [p for p in params if p.grad_req != 'null']
    assert 0 < len(grads) < len(params)
    assert pool.stats()['allocations'] - before == len(params) + len(grads)
    for mine, theirs in zip(params, net.collect_params().values()):
        assert np.array_equal(mine.data().asnumpy(), theirs.data().asnumpy())
    assert all(p.grad().asnumpy().sum() == 0 for p in grads)
    # and loading again writes into those arrays
    kept = [p.data() for p in params]
    other.load_parameters(path)
    assert all(p.data() is k for p, k in zip(params, kept))


def test_load_parameters_rejects_missing_names(tmp_path):
    path = str(tmp_path / 'dense.params')
    layer = nn.Dense(2, in_units=2)
    layer.initialize()
    layer.save_parameters(path)
    with pytest.raises(mx.base.MXNetError, match='bias'):
        nn.Dense(2, in_units=2, use_bias=False).load_parameters(path)


# ---------------------------------------------------------------------------------------------
# Convolutions

@pytest.mark.parametrize('cls,shape,kwargs', [
    (nn.Conv1D, (2, 3, 9), dict(kernel_size=3, strides=2, padding=1)),
    (nn.Conv2D, (2, 4, 7, 6), dict(kernel_size=(3, 2), padding=(1, 0), dilation=(2, 1))),
    (nn.Conv2D, (1, 4, 5, 5), dict(kernel_size=3, groups=2)),
    (nn.Conv3D, (1, 2, 4, 5, 3), dict(kernel_size=2, strides=(1, 2, 1))),
])
def test_convolution_matches_numpy(cls, shape, kwargs):
    x = rand(*shape)
    layer = cls(6, **kwargs)
    layer.initialize()
    layer(mx.nd.array(x))
    w, b = rand(*layer.weight.shape), rand(6)
    layer.weight.set_data(mx.nd.array(w))
    layer.bias.set_data(mx.nd.array(b))
    kw = layer._kwargs
    expected = conv_ref(x, w, b, kw['stride'], kw['pad'], kw['dilate'], kw['num_group'])
    close(layer(mx.nd.array(x)), expected, 1e-4)


def test_conv2d_weight_shape_repr_and_prefix():
    conv = nn.Conv2D(16, kernel_size=3, in_channels=3)
    assert conv.weight.shape == (16, 3, 3, 3) and conv.bias.shape == (16,)
    assert repr(conv) == 'Conv2D(3 -> 16, kernel_size=(3, 3), stride=(1, 1))'
    conv = nn.Conv2D(8, 3, strides=2, padding=1, dilation=2, groups=2, use_bias=False,
                     activation='relu', in_channels=4)
    # As in MXNet the mapping reads the weight shape: input channels per group.
    assert repr(conv) == ('Conv2D(2 -> 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), '
                          'dilation=(2, 2), groups=2, bias=False, Activation(relu))')
    assert conv.weight.shape == (8, 2, 3, 3)
    assert nn.Conv2D(4, 1)._alias() == 'conv' and nn.Conv2DTranspose(4, 1)._alias() == 'conv'


def test_conv2d_channel_last_layout():
    x = rand(1, 5, 5, 3)
    layer = nn.Conv2D(4, 3, layout='NHWC', in_channels=3)
    assert layer.weight.shape == (4, 3, 3, 3)
    layer.initialize()
    w, b = rand(4, 3, 3, 3), rand(4)
    layer.weight.set_data(mx.nd.array(w))
    layer.bias.set_data(mx.nd.array(b))
    expected = conv_ref(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), b, (1, 1), (0, 0),
                        (1, 1))
    close(layer(mx.nd.array(x)), expected.transpose(0, 2, 3, 1), 1e-4)


def test_conv_rejects_bad_layout_and_kernel():
    with pytest.raises(ValueError, match='layout'):
        nn.Conv2D(4, 3, layout='NCW')
    with pytest.raises(ValueError, match='kernel_size'):
        nn.Conv2D(4, (3, 3, 3))


@pytest.mark.parametrize('cls,shape,kwargs', [
    (nn.Conv1DTranspose, (2, 3, 5), dict(kernel_size=3, strides=2, padding=1,
                                          output_padding=1)),
    (nn.Conv2DTranspose, (1, 3, 4, 3), dict(kernel_size=(2, 3), strides=(2, 1))),
    (nn.Conv3DTranspose, (1, 2, 2, 3, 2), dict(kernel_size=2, strides=2, padding=(0, 1, 0))),
])
def test_transposed_convolution_matches_numpy(cls, shape, kwargs):
    x = rand(*shape)
    layer = cls(4, **kwargs)
    layer.initialize()
    layer(mx.nd.array(x))
    assert layer.weight.shape[:2] == (shape[1], 4)
    w, b = rand(*layer.weight.shape), rand(4)
    layer.weight.set_data(mx.nd.array(w))
    layer.bias.set_data(mx.nd.array(b))
    kw = layer._kwargs
    close(layer(mx.nd.array(x)), deconv_ref(x, w, b, kw['stride'], kw['pad'], kw['adj']), 1e-4)


def test_conv_transpose_repr_shows_output_padding():
    layer = nn.Conv2DTranspose(16, 3, strides=2, output_padding=1, in_channels=8)
    assert repr(layer) == ('Conv2DTranspose(16 -> 8, kernel_size=(3, 3), stride=(2, 2), '
                           'output_padding=(1, 1))')


# ---------------------------------------------------------------------------------------------
# Pooling and padding

@pytest.mark.parametrize('cls,shape,kwargs,kind', [
    (nn.MaxPool1D, (2, 3, 9), dict(pool_size=3, strides=2, padding=1), 'max'),
    (nn.MaxPool2D, (2, 3, 6, 7), dict(), 'max'),
    (nn.MaxPool3D, (1, 2, 4, 4, 6), dict(pool_size=(2, 2, 3)), 'max'),
    (nn.AvgPool1D, (2, 3, 8), dict(pool_size=2), 'avg'),
    (nn.AvgPool2D, (2, 3, 6, 6), dict(pool_size=3, strides=2, padding=1), 'avg'),
    (nn.AvgPool3D, (1, 2, 4, 4, 4), dict(), 'avg'),
])
def test_pooling_matches_numpy(cls, shape, kwargs, kind):
    x = rand(*shape)
    layer = cls(**kwargs)
    kw = layer._kwargs
    close(layer(mx.nd.array(x)), pool_ref(x, kw['kernel'], kw['stride'], kw['pad'], kind))


def test_avg_pool_count_include_pad_false():
    x = rand(1, 2, 5, 5)
    out = nn.AvgPool2D(3, strides=2, padding=1, count_include_pad=False)(mx.nd.array(x))
    close(out, pool_ref(x, (3, 3), (2, 2), (1, 1), 'avg', count_include_pad=False))


def test_pool_strides_default_to_pool_size_and_ceil_mode():
    pool = nn.MaxPool2D(pool_size=3)
    assert pool._kwargs['stride'] == (3, 3)
    x = mx.nd.array(rand(1, 1, 7, 7))
    assert pool(x).shape == (1, 1, 2, 2)
    assert nn.MaxPool2D(pool_size=3, ceil_mode=True)(x).shape == (1, 1, 3, 3)
    assert repr(pool) == ('MaxPool2D(size=(3, 3), stride=(3, 3), padding=(0, 0), '
                          'ceil_mode=False, global_pool=False, pool_type=max, layout=NCHW)')


@pytest.mark.parametrize('cls,ndim,kind', [
    (nn.GlobalMaxPool1D, 1, 'max'), (nn.GlobalMaxPool2D, 2, 'max'),
    (nn.GlobalMaxPool3D, 3, 'max'), (nn.GlobalAvgPool1D, 1, 'avg'),
    (nn.GlobalAvgPool2D, 2, 'avg'), (nn.GlobalAvgPool3D, 3, 'avg'),
])
def test_global_pooling(cls, ndim, kind):
    x = rand(2, 3, *([4] * ndim))
    axes = tuple(range(2, 2 + ndim))
    expected = x.max(axes, keepdims=True) if kind == 'max' else x.mean(axes, keepdims=True)
    close(cls()(mx.nd.array(x)), expected)


def test_pool_channel_last():
    x = rand(1, 4, 4, 3)
    out = nn.MaxPool2D(layout='NHWC')(mx.nd.array(x))
    expected = pool_ref(x.transpose(0, 3, 1, 2), (2, 2), (2, 2), (0, 0), 'max')
    close(out, expected.transpose(0, 2, 3, 1))


def test_reflection_pad2d():
    x = rand(1, 2, 3, 4)
    close(nn.ReflectionPad2D(2)(mx.nd.array(x)),
          np.pad(x, ((0, 0), (0, 0), (2, 2), (2, 2)), mode='reflect'))


# ---------------------------------------------------------------------------------------------
# Normalization

def test_batchnorm_training_updates_running_stats():
    x = rand(4, 3, 2, 2) * 2 + 1
    bn = nn.BatchNorm(momentum=0.9)
    bn.initialize()
    with mx.autograd.record():
        out = bn(mx.nd.array(x))
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
    expected = (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5)
    close(out, expected, 1e-4)
    assert bn.gamma.shape == (3,)
    close(bn.running_mean.data(), 0.1 * mean, 1e-5)
    close(bn.running_var.data(), 0.9 + 0.1 * var, 1e-4)


def test_batchnorm_prediction_uses_running_stats():
    x = rand(2, 3, 4)
    bn = nn.BatchNorm(epsilon=1e-3, in_channels=3)
    gamma, beta, mean, var = rand(3), rand(3), rand(3), np.abs(rand(3)) + 0.5
    set_params(bn, gamma=gamma, beta=beta, running_mean=mean, running_var=var)
    out = bn(mx.nd.array(x))
    col = lambda v: v.reshape(1, 3, 1)  # noqa: E731
    close(out, (x - col(mean)) / np.sqrt(col(var) + 1e-3) * col(gamma) + col(beta), 1e-4)
    close(bn.running_mean.data(), mean)


def test_batchnorm_other_axis_and_repr():
    bn = nn.BatchNorm(axis=-1)
    bn.initialize()
    x = rand(5, 2)
    with mx.autograd.record():
        out = bn(mx.nd.array(x))
    close(out, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), 1e-4)
    assert repr(nn.BatchNorm(in_channels=3)) == (
        'BatchNorm(axis=1, eps=1e-05, momentum=0.9, fix_gamma=False, use_global_stats=False, '
        'in_channels=3)')


def test_layernorm_matches_numpy():
    x, gamma, beta = rand(3, 5), rand(5), rand(5)
    ln = nn.LayerNorm()
    ln.initialize()
    ln(mx.nd.array(x))
    ln.gamma.set_data(mx.nd.array(gamma))
    ln.beta.set_data(mx.nd.array(beta))
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    close(ln(mx.nd.array(x)), (x - mean) / np.sqrt(var + 1e-5) * gamma + beta, 1e-4)


def test_instancenorm_matches_numpy_on_axis_1_and_other_axis():
    x = rand(2, 3, 6)
    norm = nn.InstanceNorm(epsilon=1e-5)
    norm.initialize()
    mean, var = x.mean(2, keepdims=True), x.var(2, keepdims=True)
    close(norm(mx.nd.array(x)), (x - mean) / np.sqrt(var + 1e-5), 1e-4)
    assert norm.gamma.shape == (3,) and norm.gamma.grad_req == 'null'
    last = nn.InstanceNorm(axis=2, epsilon=1e-5)
    last.initialize()
    xt = x.transpose(0, 2, 1)
    close(last(mx.nd.array(xt)), ((x - mean) / np.sqrt(var + 1e-5)).transpose(0, 2, 1), 1e-4)


def test_batchnorm_cast_keeps_float32_for_float16():
    bn = nn.BatchNorm(in_channels=2)
    bn.initialize()
    bn.cast('float16')
    assert bn.gamma.data().dtype == np.float32
    bn.cast('float64')
    assert bn.gamma.data().dtype == np.float64


# ---------------------------------------------------------------------------------------------
# Embedding, Dropout, Flatten, lambdas

def test_embedding_picks_rows():
    emb = nn.Embedding(6, 3)
    weight = rand(6, 3)
    set_params(emb, weight=weight)
    index = np.array([[0, 5], [2, 2]])
    close(emb(mx.nd.array(index)), weight[index])
    assert repr(emb) == 'Embedding(6 -> 3, float32)'
    assert list(emb.collect_params()) == [emb.prefix + 'weight']


def test_embedding_gradient_accumulates_rows():
    emb = nn.Embedding(4, 2)
    emb.initialize()
    with mx.autograd.record():
        out = emb(mx.nd.array([1, 3, 1]))
    out.backward()
    close(emb.weight.grad(), [[0, 0], [2, 2], [0, 0], [1, 1]])


def test_dropout_predict_is_identity_and_train_scales():
    x = mx.nd.ones((200, 50))
    drop = nn.Dropout(0.5)
    close(drop(x), np.ones((200, 50)))
    with mx.autograd.record():
        out = drop(x).asnumpy()
    assert set(np.unique(out)) <= {0.0, 2.0}
    assert 0.4 < (out == 0).mean() < 0.6
    assert repr(drop) == 'Dropout(p = 0.5, axes=())'


def test_dropout_axes_share_mask():
    with mx.autograd.record():
        out = nn.Dropout(0.5, axes=(1,))(mx.nd.ones((20, 30))).asnumpy()
    assert (out == out[:, :1]).all()


def test_flatten_and_lambdas():
    x = rand(2, 3, 4)
    close(nn.Flatten()(mx.nd.array(x)), x.reshape(2, 12))
    assert repr(nn.Flatten()) == 'Flatten'
    close(nn.Lambda('tanh')(mx.nd.array(x)), np.tanh(x))
    close(nn.Lambda(lambda a: a * 3)(mx.nd.array(x)), x * 3)
    close(nn.HybridLambda('exp')(mx.nd.array(x)), np.exp(x), 1e-5)
    block = nn.HybridLambda(lambda F, a, b: F.broadcast_add(a, b))
    close(block(mx.nd.array(x), mx.nd.array(x[:1])), x + x[:1])
    assert repr(nn.Lambda('tanh')) == 'Lambda(tanh)'
    with pytest.raises(ValueError, match='not_an_op'):
        nn.Lambda('not_an_op')
    with pytest.raises(ValueError, match='callable'):
        nn.HybridLambda(3)


# ---------------------------------------------------------------------------------------------
# Activations

def sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize('block,reference', [
    (lambda: nn.Activation('relu'), lambda x: np.maximum(x, 0)),
    (lambda: nn.Activation('sigmoid'), sigmoid),
    (lambda: nn.Activation('tanh'), np.tanh),
    (lambda: nn.Activation('softrelu'), lambda x: np.log1p(np.exp(x))),
    (lambda: nn.Activation('softsign'), lambda x: x / (1 + np.abs(x))),
    (lambda: nn.LeakyReLU(0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    (lambda: nn.ELU(0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    (lambda: nn.SELU(), lambda x: 1.0507009873554805 * np.where(
        x > 0, x, 1.6732632423543772 * np.expm1(x))),
    (lambda: nn.GELU(), lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    (lambda: nn.Swish(1.5), lambda x: x * sigmoid(1.5 * x)),
])
def test_activation_layers(block, reference):
    x = rand(3, 7) * 3
    close(block()(mx.nd.array(x)), reference(x.astype(np.float64)), 1e-4)


def test_activation_prefix_and_repr():
    act = nn.Activation('tanh', prefix='t_')
    assert act.prefix == 't_' and repr(act) == 'Activation(tanh)'
    assert repr(nn.LeakyReLU(0.2)) == 'LeakyReLU(0.2)'
    with pytest.raises(ValueError, match='alpha'):
        nn.LeakyReLU(-1)


def test_prelu_learns_its_slope():
    x = rand(4, 6)
    prelu = nn.PReLU()
    prelu.initialize()
    assert list(prelu.collect_params()) == [prelu.prefix + 'alpha']
    close(prelu.alpha.data(), [0.25])
    data = mx.nd.array(x)
    with mx.autograd.record():
        out = prelu(data)
    out.backward()
    close(out, np.where(x > 0, x, 0.25 * x))
    close(prelu.alpha.grad(), [np.minimum(x, 0).sum()], 1e-4)


def test_prelu_per_channel():
    x = rand(2, 3, 4)
    prelu = nn.PReLU(alpha_initializer=mx.init.Constant(0.5), in_channels=3)
    prelu.initialize()
    alpha = np.array([0.1, 0.2, 0.3], np.float32)
    prelu.alpha.set_data(mx.nd.array(alpha))
    close(prelu(mx.nd.array(x)), np.where(x > 0, x, alpha.reshape(1, 3, 1) * x))


def test_whole_network_gradient_reaches_every_parameter():
    net = make_net('g_')
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(rand(2, 3, 6, 6))
    with mx.autograd.record():
        loss = net(x).sum()
    loss.backward()
    for name, param in net.collect_params().items():
        if param.grad_req != 'null':
            assert np.abs(param.grad().asnumpy()).sum() > 0, name


# ---------------------------------------------------------------------------------------------
# hybrid_forward must trace: only operators of F (declared in the registry, with accepted
# arguments) and arithmetic, never NDArray-only methods, so that F can be mx.sym.

class Placeholder:
    """A stand-in for a Symbol: arithmetic gives placeholders, anything else fails."""

    def _op(self, *args):
        return Placeholder()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _op
    __truediv__ = __rtruediv__ = __neg__ = __pow__ = _op
    __eq__ = __ne__ = __gt__ = __ge__ = __lt__ = __le__ = _op
    __hash__ = object.__hash__

    def __bool__(self):
        raise AssertionError('hybrid_forward branched on the value of a symbol')


class TracingF:
    """An F whose operators check their name and arguments against the registry."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        from ember.op import registry
        op = registry.get(name)

        def call(*inputs, name=None, **kwargs):
            assert all(isinstance(x, Placeholder) for x in inputs), (op.name, inputs)
            op.parse_attrs(kwargs)
            self.calls.append(op.name)
            return Placeholder()
        return call


def trace(block, num_inputs, extra=()):
    F = TracingF()
    params = {key: Placeholder() for key in block._reg_params}
    inputs = [Placeholder() for _ in range(num_inputs)] + list(extra)
    assert isinstance(block.hybrid_forward(F, *inputs, **params), Placeholder)
    return F.calls


@pytest.mark.parametrize('make,expected_op', [
    (lambda: nn.Dense(3), 'FullyConnected'),
    (lambda: nn.Dense(3, use_bias=False, flatten=False), 'FullyConnected'),
    (lambda: nn.Conv2D(3, 3, use_bias=False), 'Convolution'),
    (lambda: nn.Conv3DTranspose(3, 2, output_padding=1), 'Deconvolution'),
    (lambda: nn.AvgPool2D(count_include_pad=False), 'Pooling'),
    (lambda: nn.GlobalMaxPool1D(), 'Pooling'),
    (lambda: nn.BatchNorm(use_global_stats=True), 'BatchNorm'),
    (lambda: nn.LayerNorm(axis=1), 'LayerNorm'),
    (lambda: nn.InstanceNorm(axis=2), 'InstanceNorm'),
    (lambda: nn.Embedding(4, 2), 'Embedding'),
    (lambda: nn.Dropout(0.3, axes=(1,)), 'Dropout'),
    (lambda: nn.Dropout(0.0), '_copy'),
    (lambda: nn.Flatten(), 'Flatten'),
    (lambda: nn.ReflectionPad2D(1), 'Pad'),
    (lambda: nn.HybridLambda('tanh'), 'tanh'),
    (lambda: nn.Activation('softsign'), 'Activation'),
    (lambda: nn.LeakyReLU(0.1), 'LeakyReLU'),
    (lambda: nn.PReLU(), 'LeakyReLU'),
    (lambda: nn.ELU(), 'LeakyReLU'),
    (lambda: nn.SELU(), 'LeakyReLU'),
    (lambda: nn.GELU(), 'LeakyReLU'),
    (lambda: nn.Swish(), 'sigmoid'),
])
def test_layer_hybrid_forward_traces_with_registered_ops(make, expected_op):
    assert expected_op in trace(make(), 1)


@pytest.mark.parametrize('make,num_inputs,extra', [
    (lambda: gloss.L2Loss(), 3, ()),
    (lambda: gloss.L1Loss(), 2, ()),
    (lambda: gloss.SigmoidBCELoss(), 2, ()),
    (lambda: gloss.SigmoidBCELoss(), 2, (None, Placeholder())),
    (lambda: gloss.SigmoidBCELoss(from_sigmoid=True), 2, (None, Placeholder())),
    (lambda: gloss.SoftmaxCELoss(), 3, ()),
    (lambda: gloss.SoftmaxCELoss(sparse_label=False, from_logits=True), 2, ()),
    (lambda: gloss.KLDivLoss(from_logits=False), 2, ()),
    (lambda: gloss.HuberLoss(), 2, ()),
    (lambda: gloss.HingeLoss(), 2, ()),
    (lambda: gloss.SquaredHingeLoss(), 2, ()),
    (lambda: gloss.LogisticLoss(), 2, ()),
    (lambda: gloss.TripletLoss(), 3, ()),
    (lambda: gloss.PoissonNLLLoss(compute_full=True), 2, ()),
    (lambda: gloss.CosineEmbeddingLoss(), 3, ()),
])
def test_loss_hybrid_forward_traces_with_registered_ops(make, num_inputs, extra):
    assert trace(make(), num_inputs, extra)
