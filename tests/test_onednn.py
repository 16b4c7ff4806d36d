"""The oneDNN binding and kernel provider: every provider function against the NumPy kernel of
its operator on random inputs, post-ops, the primitive cache bound, the on/off switch, thread
control and the errors of a wrong library path."""
import dataclasses
import gc
import threading
import weakref

import numpy as np
import pytest

import ember as mx
import ember.op.nn  # noqa: F401  (registers the operators)
from ember import config, engine
from ember.backend import native, onednn
from ember.base import EmberError
from ember.op import registry
from ember.op.nn import onednn_provider as provider
from ember.op.registry import KernelContext
from tolerance import assert_sums_close

HAS_ONEDNN = native.find_wheel_library() is not None
needs_onednn = pytest.mark.skipif(not HAS_ONEDNN, reason='oneDNN (onednn-cpu-gomp) is not '
                                  'installed')
RTOL, ATOL = 1e-4, 1e-5


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def numpy_outputs(name, inputs, is_train=False, **kwargs):
    """Every output of operator `name` from its NumPy kernel (oneDNN switched off)."""
    op = registry.get(name)
    attrs = op.parse_attrs(kwargs)
    _, shapes = op.infer_shape(attrs, [a.shape for a in inputs])
    _, dtypes = op.infer_type(attrs, [a.dtype for a in inputs])
    outs = [np.full(s, np.nan, d) for s, d in zip(shapes, dtypes)]
    ctx = KernelContext(device=None, is_train=is_train, xp=np)
    with config.override(MXNET_MKLDNN_ENABLED=False):
        op.kernel(attrs, [a.copy() for a in inputs], outs, ctx)
    return attrs, outs


def empty_like(array):
    return np.full(array.shape, np.nan, np.float32)


def assert_products_close(out, expected, name, inputs, **kwargs):
    """`out` is operator `name`'s result on `inputs` (a sum of products of them, such as a
    convolution), within the rounding of any summation order: the tolerance scales with the
    sum of the absolute terms, the operator's NumPy kernel run on the absolute inputs."""
    _, (magnitude,) = numpy_outputs(name, [abs(a) for a in inputs], **kwargs)
    if magnitude.shape != np.shape(expected):          # the channel-last view of the result
        magnitude = np.moveaxis(magnitude, 1, -1)
    terms = max(a.size for a in inputs)     # no output sums more terms than an input holds
    assert_sums_close(out, expected, magnitude, terms)


# ----------------------------------------------------------------------------------------------
# Convolution

CONV_CASES = [
    # data shape, kwargs
    ((2, 3, 9, 9), dict(kernel=(3, 3), num_filter=4)),
    ((2, 3, 9, 9), dict(kernel=(3, 3), num_filter=4, stride=(2, 2), pad=(1, 1))),
    ((2, 4, 10, 8), dict(kernel=(3, 2), num_filter=6, dilate=(2, 1), pad=(2, 0))),
    ((2, 6, 7, 7), dict(kernel=(3, 3), num_filter=4, num_group=2, pad=(1, 1))),
    ((2, 4, 7, 7), dict(kernel=(3, 3), num_filter=4, num_group=4, pad=(1, 1), no_bias=True)),
    ((2, 8, 5, 5), dict(kernel=(1, 1), num_filter=16, no_bias=True)),
    ((1, 3, 16, 16), dict(kernel=(7, 7), num_filter=8, stride=(2, 2), pad=(3, 3))),
    ((2, 9, 9, 3), dict(kernel=(3, 3), num_filter=5, pad=(1, 1), layout='NHWC')),
    ((2, 6, 6, 4), dict(kernel=(1, 1), num_filter=8, stride=(2, 2), layout='NHWC')),
    ((2, 3, 11), dict(kernel=(3,), num_filter=4, stride=(2,), pad=(1,))),
    ((1, 2, 5, 6, 6), dict(kernel=(3, 3, 3), num_filter=3, pad=(1, 1, 1))),
]


def conv_inputs(shape, kwargs, seed=0):
    attrs = registry.get('Convolution').parse_attrs(kwargs)
    shapes, _ = registry.get('Convolution').infer_shape(attrs, [shape, None, None])
    return [rand(*s, seed=seed + i) for i, s in enumerate(shapes[:2 if attrs['no_bias'] else 3])]


@needs_onednn
@pytest.mark.parametrize('shape, kwargs', CONV_CASES)
def test_convolution_matches_numpy(shape, kwargs):
    inputs = conv_inputs(shape, kwargs)
    attrs, (expected,) = numpy_outputs('Convolution', inputs, **kwargs)
    out = empty_like(expected)
    bias = None if attrs['no_bias'] else inputs[2]
    assert provider.convolution_forward(attrs, inputs[0], inputs[1], bias, out)
    assert_products_close(out, expected, 'Convolution', inputs, **kwargs)


@needs_onednn
@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
@pytest.mark.parametrize('in_place', [False, True])
def test_convolution_sum_then_relu_post_ops(layout, in_place):
    # 8 NHWC channels: oneDNN writes the caller's buffer directly; 4 NCHW channels: it writes
    # nChw8c and the addend is reordered into that layout first
    shape = (2, 8, 8, 8) if layout == 'NHWC' else (2, 4, 8, 8)
    kwargs = dict(kernel=(3, 3), num_filter=shape[-1] if layout == 'NHWC' else 4, pad=(1, 1),
                  layout=layout)
    inputs = conv_inputs(shape, kwargs)
    attrs, (conv,) = numpy_outputs('Convolution', inputs, **kwargs)
    residual = rand(*conv.shape, seed=9)
    expected = np.maximum(conv + residual, 0)
    out = residual.copy() if in_place else empty_like(conv)
    addend = out if in_place else residual
    assert provider.convolution_forward(attrs, *inputs, out, residual=addend, act_type='relu')
    _, (magnitude,) = numpy_outputs('Convolution', [abs(a) for a in inputs], **kwargs)
    assert_sums_close(out, expected, magnitude + abs(residual), max(a.size for a in inputs))
    if not in_place:
        np.testing.assert_array_equal(residual, rand(*conv.shape, seed=9))  # addend untouched
    assert destination_is_reordered(inputs[0], inputs[1], out, layout) == (layout == 'NCHW')


def destination_is_reordered(data, weight, out, layout):
    def first(array):
        return np.moveaxis(array, -1, 1) if layout == 'NHWC' else array
    md = onednn.MemoryDesc.of
    conv = onednn.convolution(md(first(data)), md(first(weight)), None, md(first(out)), (1, 1),
                              (1, 1), (1, 1), (1, 1), (onednn.PostOp.sum(),),
                              accumulate=md(first(out)))
    return conv.reorders[onednn.ARG_DST]


@needs_onednn
def test_convolution_activation_post_op_alone():
    kwargs = dict(kernel=(3, 3), num_filter=4, pad=(1, 1))
    inputs = conv_inputs((1, 3, 6, 6), kwargs)
    attrs, (conv,) = numpy_outputs('Convolution', inputs, **kwargs)
    out = empty_like(conv)
    assert provider.convolution_forward(attrs, *inputs, out, act_type='tanh')
    assert_products_close(out, np.tanh(conv), 'Convolution', inputs, **kwargs)
    assert not provider.convolution_forward(attrs, *inputs, out, act_type='softsign')


def _nhwc(kwargs, data, weight, expected):
    """The channel-last form of a convolution case: attrs, data, OHWI weight, expected."""
    attrs = registry.get('Convolution').parse_attrs(dict(kwargs, layout='NHWC'))
    return (attrs, data.transpose(0, 2, 3, 1).copy(), weight.transpose(0, 2, 3, 1).copy(),
            expected.transpose(0, 2, 3, 1).copy())


@needs_onednn
@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
@pytest.mark.parametrize('act_type', ['relu', 'tanh'])
def test_gemm_convolutions_run_their_activation_after_the_primitive(layout, act_type):
    # oneDNN's GEMM convolution (here, as for alexnet's first layer: 11x11, stride 4, three
    # channels) applies an activation post-op one value at a time, a third of its time: the
    # activation runs as an eltwise primitive in place after it
    kwargs = dict(kernel=(11, 11), num_filter=8, stride=(4, 4), pad=(2, 2))
    data, weight, bias = conv_inputs((1, 3, 40, 40), kwargs)
    attrs, (conv,) = numpy_outputs('Convolution', [data, weight, bias], **kwargs)
    expected = np.maximum(conv, 0) if act_type == 'relu' else np.tanh(conv)
    inputs = [data, weight, bias]
    if layout == 'NHWC':
        attrs, data, weight, expected = _nhwc(kwargs, data, weight, expected)
    out = empty_like(expected)
    onednn.clear_cache()
    assert provider.convolution_forward(attrs, data, weight, bias, out, act_type=act_type)
    # both activations move a value by no more than its input moved: the sum's tolerance holds
    assert_products_close(out, expected, 'Convolution', inputs, **kwargs)
    (primitive,) = [p for p in onednn._cache.entries.values() if p is not None]
    assert ('gemm' in primitive.implementation) == (primitive.then is not None)


@needs_onednn
def test_channel_first_data_of_a_channel_last_convolution_is_reordered_not_referenced():
    # NHWC attrs on a channel-first view: oneDNN has only its reference kernel for these
    # layouts as given (seconds for alexnet's first layer); reordering them is fast
    kwargs = dict(kernel=(5, 5), num_filter=8, stride=(2, 2), pad=(2, 2))
    data, weight_nchw, bias = conv_inputs((1, 3, 24, 24), kwargs)
    _, (conv,) = numpy_outputs('Convolution', [data, weight_nchw, bias], **kwargs)
    attrs, _, weight, expected = _nhwc(kwargs, data, weight_nchw, conv)
    out = empty_like(expected)
    onednn.clear_cache()
    assert provider.convolution_forward(attrs, data.transpose(0, 2, 3, 1), weight, bias, out)
    assert_products_close(out, expected, 'Convolution', [data, weight_nchw, bias], **kwargs)
    (primitive,) = [p for p in onednn._cache.entries.values() if p is not None]
    assert not primitive.implementation.startswith('ref'), primitive.implementation


@needs_onednn
def test_convolution_reuses_the_cached_primitive_on_new_buffers():
    kwargs = dict(kernel=(3, 3), num_filter=4, pad=(1, 1))
    onednn.clear_cache()
    for seed in (1, 2):
        inputs = conv_inputs((2, 3, 6, 6), kwargs, seed=seed)
        attrs, (expected,) = numpy_outputs('Convolution', inputs, **kwargs)
        out = empty_like(expected)
        assert provider.convolution_forward(attrs, *inputs, out)
        assert_products_close(out, expected, 'Convolution', inputs, **kwargs)
    assert onednn.cache_size() == 1


# ----------------------------------------------------------------------------------------------
# FullyConnected

@needs_onednn
@pytest.mark.parametrize('shape, kwargs', [
    ((5, 7), dict(num_hidden=3)),
    ((4, 2, 3, 3), dict(num_hidden=6)),
    ((2, 3, 7), dict(num_hidden=4, flatten=False)),
    ((6, 8), dict(num_hidden=5, no_bias=True)),
])
def test_fully_connected_matches_numpy(shape, kwargs):
    op = registry.get('FullyConnected')
    attrs = op.parse_attrs(kwargs)
    shapes, _ = op.infer_shape(attrs, [shape, None, None])
    inputs = [rand(*s, seed=i) for i, s in enumerate(shapes[:2 if attrs['no_bias'] else 3])]
    _, (expected,) = numpy_outputs('FullyConnected', inputs, **kwargs)
    out = empty_like(expected)
    bias = None if attrs['no_bias'] else inputs[2]
    assert provider.fully_connected_forward(attrs, inputs[0], inputs[1], bias, out)
    assert_products_close(out, expected, 'FullyConnected', inputs, **kwargs)


@needs_onednn
def test_inference_fully_connected_keeps_a_blocked_weight_per_version(monkeypatch):
    op = registry.get('FullyConnected')
    attrs = op.parse_attrs(dict(num_hidden=48))
    data, weight, bias = rand(8, 64), rand(48, 64, seed=1), rand(48, seed=2)
    _, (expected,) = numpy_outputs('FullyConnected', [data, weight, bias], num_hidden=48)
    var = engine.get().new_var()
    runs = []
    original = onednn.Primitive.run
    monkeypatch.setattr(onednn.Primitive, 'run',
                        lambda self, *a, **k: (runs.append(self), original(self, *a, **k))[1])
    onednn.clear_cache()
    out = empty_like(expected)
    assert provider.fully_connected_forward(attrs, data, weight, bias, out, ((var, 1),))
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    assert runs[-1].reorders[onednn.ARG_WEIGHTS] and onednn.kept_bytes() >= weight.nbytes
    weight *= 2                      # the same version: the kept copy, as in inference
    assert provider.fully_connected_forward(attrs, data, weight, bias, out, ((var, 1),))
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    assert provider.fully_connected_forward(attrs, data, weight, bias, out, ((var, 2),))
    np.testing.assert_allclose(out, 2 * expected - bias, rtol=RTOL, atol=ATOL)
    # no version (training), too few rows, or a weight past the cap: the weight as it is
    onednn.clear_cache()
    assert provider.fully_connected_forward(attrs, data, weight, bias, out)
    assert provider.fully_connected_forward(attrs, data[:1], weight, bias, out[:1], ((var, 3),))
    monkeypatch.setattr(provider, 'TUNING', dataclasses.replace(
        provider.TUNING, fc_blocked_max_bytes=weight.nbytes - 1))
    assert provider.fully_connected_forward(attrs, data, weight, bias, out, ((var, 3),))
    np.testing.assert_allclose(out, 2 * expected - bias, rtol=RTOL, atol=ATOL)
    assert not any(run.reorders[onednn.ARG_WEIGHTS] for run in runs[-3:])
    assert onednn.kept_bytes() == 0


@needs_onednn
def test_a_hybridized_dense_layer_follows_its_updated_weight():
    net = mx.gluon.nn.Dense(40, in_units=32)
    net.initialize()
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.random.uniform(shape=(8, 32))
    first = net(x).asnumpy()
    w, b = net.weight.data().asnumpy(), net.bias.data().asnumpy()
    np.testing.assert_allclose(first, x.asnumpy() @ w.T + b, rtol=1e-4, atol=1e-5)
    net.weight.set_data(net.weight.data() * 3)
    np.testing.assert_allclose(net(x).asnumpy(), x.asnumpy() @ (3 * w).T + b, rtol=1e-4,
                               atol=1e-5)


# ----------------------------------------------------------------------------------------------
# Pooling

POOL_CASES = [
    ((2, 3, 8, 8), dict(kernel=(2, 2), stride=(2, 2))),
    ((2, 3, 9, 9), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    ((2, 3, 9, 9), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='avg')),
    ((2, 3, 9, 9), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='avg',
                        count_include_pad=False)),
    ((2, 3, 10, 10), dict(kernel=(3, 3), stride=(2, 2), pooling_convention='full')),
    ((2, 3, 10, 10), dict(kernel=(3, 3), stride=(2, 2), pooling_convention='full',
                          pool_type='avg', count_include_pad=False)),
    ((2, 3, 10, 10), dict(kernel=(3, 3), stride=(2, 2), pooling_convention='same',
                          pool_type='avg')),
    ((2, 5, 7, 7), dict(global_pool=True, pool_type='avg')),
    ((2, 7, 7, 5), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), layout='NHWC')),
    ((2, 3, 12), dict(kernel=(3,), stride=(3,), pool_type='avg')),
    ((1, 2, 4, 6, 6), dict(kernel=(2, 2, 2), stride=(2, 2, 2))),
]


@needs_onednn
@pytest.mark.parametrize('shape, kwargs', POOL_CASES)
def test_pooling_matches_numpy(shape, kwargs):
    x = rand(*shape)
    attrs, (expected,) = numpy_outputs('Pooling', [x], **kwargs)
    out = empty_like(expected)
    assert provider.pooling_forward(attrs, x, out)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@needs_onednn
@pytest.mark.parametrize('kwargs', [
    dict(kernel=(2, 2), pool_type='sum'),
    dict(kernel=(2, 2), pool_type='lp', p_value=2),
    # 'full' with the divisor counting declared padding only: MXNet's rule, not oneDNN's
    dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pooling_convention='full', pool_type='avg'),
])
def test_pooling_declines_what_onednn_computes_differently(kwargs):
    x = rand(2, 3, 8, 8)
    attrs, (expected,) = numpy_outputs('Pooling', [x], **kwargs)
    out = empty_like(expected)
    assert not provider.pooling_forward(attrs, x, out)
    assert np.isnan(out).all()


# ----------------------------------------------------------------------------------------------
# BatchNorm

@needs_onednn
@pytest.mark.parametrize('shape, kwargs', [
    ((2, 5, 5, 4), dict(fix_gamma=True, eps=1e-5, axis=-1)),
    ((2, 5, 5, 4), dict(fix_gamma=False, axis=-1)),
    ((3, 6), dict(fix_gamma=False)),
    ((2, 4, 1, 1), dict(fix_gamma=False)),
])
def test_batch_norm_inference_matches_numpy(shape, kwargs):
    axis = kwargs.get('axis', 1) % len(shape)
    channels = shape[axis]
    x = rand(*shape)
    gamma, beta, mean = rand(channels, seed=1), rand(channels, seed=2), rand(channels, seed=3)
    var = np.abs(rand(channels, seed=4)) + 0.5
    attrs, expected = numpy_outputs('BatchNorm', [x, gamma, beta, mean, var], **kwargs)
    outs = [empty_like(e) for e in expected]
    assert provider.batch_norm_forward(attrs, x, gamma, beta, mean, var, *outs)
    for out, want in zip(outs, expected):
        np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)


@needs_onednn
def test_batch_norm_fused_relu():
    x, channels = rand(2, 4, 4, 3), 3
    params = [rand(channels, seed=1), rand(channels, seed=2), rand(channels, seed=3),
              np.abs(rand(channels, seed=4)) + 0.5]
    attrs, expected = numpy_outputs('BatchNorm', [x] + params, fix_gamma=False, axis=3)
    out = empty_like(expected[0])
    assert provider.batch_norm_forward(attrs, x, *params, out, fuse_relu=True)
    np.testing.assert_allclose(out, np.maximum(expected[0], 0), rtol=RTOL, atol=ATOL)


@needs_onednn
def test_batch_norm_forward_declines_nchw():
    x, channels = rand(2, 3, 4, 4), 3
    params = [rand(channels, seed=s) for s in (1, 2, 3)] + [np.ones(channels, np.float32)]
    attrs = registry.get('BatchNorm').parse_attrs({'fix_gamma': False})
    out = empty_like(x)
    assert not provider.batch_norm_forward(attrs, x, *params, out)
    assert not provider.batch_norm_training_forward(attrs, x, params[0], params[1], out,
                                                    empty_like(params[0]),
                                                    empty_like(params[0]))
    assert np.isnan(out).all()


# ----------------------------------------------------------------------------------------------
# Activations, softmax, LRN

@pytest.fixture
def every_size():
    with config.override(MXNET_CPU_PARALLEL_SIZE=1):
        yield


@needs_onednn
@pytest.mark.parametrize('act_type', ['relu', 'sigmoid', 'tanh', 'softrelu'])
def test_activation_matches_numpy(act_type, every_size):
    x = rand(3, 4, 5) * 4
    attrs, (expected,) = numpy_outputs('Activation', [x], act_type=act_type)
    out = empty_like(x)
    assert provider.activation_forward(attrs, x, out)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@needs_onednn
def test_activation_in_place(every_size):
    x = rand(4, 6)
    expected = np.maximum(x, 0)
    attrs = registry.get('Activation').parse_attrs({'act_type': 'relu'})
    assert provider.activation_forward(attrs, x, x)
    np.testing.assert_array_equal(x, expected)


@needs_onednn
def test_activation_declines_softsign_and_small_arrays():
    attrs = registry.get('Activation').parse_attrs({'act_type': 'relu'})
    x = rand(4, 6)
    with config.override(MXNET_CPU_PARALLEL_SIZE=x.size + 1):
        assert not provider.activation_forward(attrs, x, empty_like(x))
    with config.override(MXNET_CPU_PARALLEL_SIZE=x.size):
        assert provider.activation_forward(attrs, x, empty_like(x))
        softsign = registry.get('Activation').parse_attrs({'act_type': 'softsign'})
        assert not provider.activation_forward(softsign, x, empty_like(x))


@needs_onednn
@pytest.mark.parametrize('kwargs', [dict(act_type='leaky', slope=0.1),
                                    dict(act_type='elu', slope=0.7), dict(act_type='gelu')])
def test_leaky_relu_matches_numpy(kwargs, every_size):
    x = rand(3, 4, 5) * 3
    attrs, (expected,) = numpy_outputs('LeakyReLU', [x], **kwargs)
    out = empty_like(x)
    assert provider.leaky_relu_forward(attrs, x, out)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@needs_onednn
@pytest.mark.parametrize('name, axis', [('softmax', -1), ('softmax', 1), ('log_softmax', -1),
                                        ('log_softmax', 0)])
def test_softmax_matches_numpy(name, axis):
    x = rand(4, 5, 6) * 5
    attrs, (expected,) = numpy_outputs(name, [x], axis=axis)
    out = empty_like(x)
    assert provider.softmax_forward(attrs, x, out, log=name == 'log_softmax')
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@needs_onednn
def test_softmax_declines_temperature_and_lengths():
    x = rand(2, 5)
    attrs = registry.get('softmax').parse_attrs({'temperature': 2.0})
    assert not provider.softmax_forward(attrs, x, empty_like(x))
    attrs = registry.get('softmax').parse_attrs({'use_length': True})
    assert not provider.softmax_forward(attrs, x, empty_like(x))


@needs_onednn
@pytest.mark.parametrize('kwargs', [dict(nsize=3), dict(nsize=5, alpha=1e-2, beta=0.5,
                                                        knorm=1.0)])
def test_lrn_matches_numpy(kwargs):
    x = rand(2, 7, 4, 4) * 3
    attrs, (expected, _) = numpy_outputs('LRN', [x], **kwargs)
    out = empty_like(x)
    assert provider.lrn_forward(attrs, x, out)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------------------
# What the provider declines

@needs_onednn
@pytest.mark.parametrize('shape, axes', [((2, 3, 64, 48), (0, 2, 3, 1)),
                                         ((300, 70), (1, 0)),
                                         ((2, 5, 40, 3, 30), (4, 2, 0, 3, 1))])
def test_large_transposes_are_onednn_reorders(shape, axes):
    x = rand(*shape)
    onednn.clear_cache()
    out = mx.nd.transpose(mx.nd.array(x), axes=axes).asnumpy()
    np.testing.assert_array_equal(out, x.transpose(axes))
    assert [key[0] for key in onednn._cache.entries] == ['reorder']


@needs_onednn
def test_small_other_dtype_or_overlapping_transposes_stay_in_numpy():
    x = rand(64, 64)
    out = np.empty((64, 64), np.float32)
    assert not provider.transpose(x.T, out)                                  # small
    big = rand(256, 256)
    assert not provider.transpose(big.astype(np.float64).T, np.empty((256, 256)))
    assert not provider.transpose(big.T, big)                               # in place
    assert provider.transpose(big.T, out := np.empty_like(big))
    np.testing.assert_array_equal(out, big.T)


@needs_onednn
def test_declines_other_dtypes_and_strides():
    attrs = registry.get('softmax').parse_attrs({})
    x64 = rand(3, 4).astype(np.float64)
    assert not provider.softmax_forward(attrs, x64, np.empty_like(x64))
    flipped = rand(3, 4)[:, ::-1]
    assert not provider.softmax_forward(attrs, flipped, empty_like(flipped))


@needs_onednn
def test_strided_views_are_described_by_their_strides():
    x = rand(4, 10)[:, ::2]          # every other column: strides (40, 8)
    attrs = registry.get('softmax').parse_attrs({})
    out = empty_like(x)
    assert provider.softmax_forward(attrs, x, out)
    _, (expected,) = numpy_outputs('softmax', [np.ascontiguousarray(x)])
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


def test_disabled_provider_declines_and_leaves_outputs():
    kwargs = dict(kernel=(3, 3), num_filter=2)
    inputs = conv_inputs((1, 2, 5, 5), kwargs)
    attrs = registry.get('Convolution').parse_attrs(kwargs)
    out = np.full((1, 2, 3, 3), np.nan, np.float32)
    with config.override(MXNET_MKLDNN_ENABLED=0):
        assert not provider.enabled()
        assert not provider.convolution_forward(attrs, *inputs, out)
        assert not provider.softmax_forward(registry.get('softmax').parse_attrs({}), out, out)
    assert np.isnan(out).all()


def test_missing_library_means_unavailable_and_declines(monkeypatch):
    monkeypatch.setattr(native, 'onednn', lambda: None)
    assert onednn.available() is False
    attrs = registry.get('softmax').parse_attrs({})
    x = rand(2, 3)
    assert not provider.softmax_forward(attrs, x, empty_like(x))
    with pytest.raises(EmberError, match='oneDNN is not available'):
        onednn.MemoryDesc.plain((2, 3), (3, 1))


def test_library_path_to_a_missing_file_is_a_clear_error(tmp_path):
    missing = tmp_path / 'no_such_libdnnl.so'
    x = rand(2, 3)
    attrs = registry.get('softmax').parse_attrs({})
    with config.override(MXNET_LIBRARY_PATH=str(missing)):
        with pytest.raises(EmberError, match=r"MXNET_LIBRARY_PATH=.*no_such_libdnnl\.so.*no "
                                             r"such file"):
            provider.softmax_forward(attrs, x, empty_like(x))
        with pytest.raises(EmberError, match='no such file'):
            onednn.available()
    if HAS_ONEDNN:
        assert onednn.available()       # the wheel's library again after the override


# ----------------------------------------------------------------------------------------------
# The binding: errors, float arguments, the cache, threads

@needs_onednn
def test_failing_call_names_the_function_and_status():
    md = onednn.MemoryDesc.plain
    src, weights = md((1, 3, 5, 5), (75, 25, 5, 1)), md((4, 2, 3, 3), (18, 9, 3, 1))
    dst = md((1, 4, 3, 3), (36, 9, 3, 1))
    with pytest.raises(onednn.OneDNNError, match='dnnl_convolution_forward_primitive_desc_create '
                                                 'failed: invalid_arguments') as info:
        onednn.convolution(src, weights, None, dst, (1, 1), (1, 1), (0, 0), (0, 0))
    assert info.value.status == 2 and isinstance(info.value, EmberError)


@needs_onednn
def test_every_c_function_has_argument_types():
    library = onednn._lib()
    for name in list(onednn._STATUS_FUNCTIONS) + list(onednn._OTHER_FUNCTIONS):
        assert getattr(library, name[5:]).argtypes is not None, name


@needs_onednn
def test_float_arguments_reach_onednn_as_floats():
    # eltwise 'linear' is alpha * x + beta: doubles passed as floats would garble both
    x = rand(3, 4)
    out = empty_like(x)
    linear = onednn.eltwise(onednn.MemoryDesc.of(x), onednn.MemoryDesc.of(out), 'linear',
                            alpha=0.5, beta=0.25)
    linear.run({onednn.ARG_SRC: x, onednn.ARG_DST: out})
    np.testing.assert_allclose(out, 0.5 * x + 0.25, rtol=1e-6)


@needs_onednn
def test_convolution_chooses_blocked_weights_and_reorders_them():
    x = np.zeros((2, 16, 8, 8), np.float32).transpose(0, 2, 3, 1).transpose(0, 3, 1, 2)  # NHWC
    w, y = np.zeros((16, 16, 3, 3), np.float32), np.zeros((2, 8, 8, 16), np.float32)
    y = y.transpose(0, 3, 1, 2)
    md = onednn.MemoryDesc.of
    conv = onednn.convolution(md(x), md(w), None, md(y), (1, 1), (1, 1), (1, 1), (1, 1))
    assert conv.reorders[onednn.ARG_WEIGHTS]
    assert conv.implementation and 'ref' not in conv.implementation


@needs_onednn
def test_cache_evicts_least_recently_used_beyond_the_bound():
    builds = []

    def builder(tag):
        def build():
            builds.append(tag)
            return onednn.eltwise(onednn.MemoryDesc.plain((2,), (1,)),
                                  onednn.MemoryDesc.plain((2,), (1,)), 'relu')
        return build
    onednn.clear_cache()
    with config.override(MXNET_MKLDNN_CACHE_NUM=2):
        for tag in ('a', 'b', 'a', 'c'):      # 'a' used again, so 'b' is the oldest at 'c'
            onednn.cached(('test', tag), builder(tag))
        assert onednn.cache_size() == 2
        onednn.cached(('test', 'a'), builder('a'))
        onednn.cached(('test', 'b'), builder('b'))
    assert builds == ['a', 'b', 'c', 'b']
    with config.override(MXNET_MKLDNN_CACHE_NUM=0):
        onednn.cached(('test', 'd'), builder('d'))
        assert onednn.cache_size() == 0
    with config.override(MXNET_MKLDNN_CACHE_NUM=-1):
        for tag in 'efgh':
            onednn.cached(('test', tag), builder(tag))
        assert onednn.cache_size() == 4
    onednn.clear_cache()


@needs_onednn
def test_provider_cache_is_bounded_by_cache_num():
    onednn.clear_cache()
    attrs = registry.get('softmax').parse_attrs({})
    with config.override(MXNET_MKLDNN_CACHE_NUM=2):
        for n in (3, 4, 5):
            x = rand(2, n)
            out = empty_like(x)
            assert provider.softmax_forward(attrs, x, out)
            np.testing.assert_allclose(out.sum(axis=1), 1, rtol=1e-5)
        assert onednn.cache_size() == 2
    onednn.clear_cache()


@needs_onednn
def test_unimplemented_case_is_remembered_as_declined():
    calls = []

    def build():
        calls.append(1)
        raise onednn.OneDNNError('dnnl_fake_primitive_desc_create', onednn.UNIMPLEMENTED)
    assert onednn.cached(('test', 'unimplemented'), build) is None
    assert onednn.cached(('test', 'unimplemented'), build) is None
    assert calls == [1]
    onednn.clear_cache()


@needs_onednn
def test_kernel_threads_follow_the_engine_per_calling_thread():
    attrs = registry.get('softmax').parse_attrs({})
    x = rand(2, 3)
    seen = {}

    def call(name):
        assert provider.softmax_forward(attrs, x, empty_like(x))
        seen[name] = onednn.num_threads()
    call('main')
    worker = threading.Thread(target=call, args=('worker',))
    worker.start()
    worker.join()
    assert seen == {'main': engine.kernel_threads(), 'worker': engine.kernel_threads()}
    with config.override(OMP_NUM_THREADS=1):
        call('limited')
    assert seen['limited'] == 1


@needs_onednn
def test_one_primitive_shared_by_concurrent_threads():
    kwargs = dict(kernel=(3, 3), num_filter=8, pad=(1, 1))
    inputs = conv_inputs((2, 4, 12, 12), kwargs)
    attrs, (expected,) = numpy_outputs('Convolution', inputs, **kwargs)
    outs = [empty_like(expected) for _ in range(4)]
    errors = []

    def work(out):
        try:
            for _ in range(5):
                assert provider.convolution_forward(attrs, *inputs, out)
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for out in outs:
        np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@needs_onednn
def test_weight_version_keeps_the_reordered_weights_until_it_changes():
    kwargs = dict(kernel=(3, 3), num_filter=8, pad=(1, 1), no_bias=True)
    data, weight = conv_inputs((1, 8, 6, 6), kwargs)
    attrs, (before,) = numpy_outputs('Convolution', [data, weight], **kwargs)
    out = empty_like(before)
    var, other = engine.get().new_var(), engine.get().new_var()
    assert provider.convolution_forward(attrs, data, weight, None, out,
                                        weight_version=((var, 1),))
    np.testing.assert_allclose(out, before, rtol=RTOL, atol=ATOL)
    weight *= 2                      # changed in place: the same version still means the old
    assert provider.convolution_forward(attrs, data, weight, None, out,
                                        weight_version=((var, 1),))
    np.testing.assert_allclose(out, before, rtol=RTOL, atol=ATOL)
    assert provider.convolution_forward(attrs, data, weight, None, out,
                                        weight_version=((var, 2),))
    np.testing.assert_allclose(out, 2 * before, rtol=RTOL, atol=ATOL)
    weight *= 2                      # another array's variable at the same address: fresh
    assert provider.convolution_forward(attrs, data, weight, None, out,
                                        weight_version=((other, 2),))
    np.testing.assert_allclose(out, 4 * before, rtol=RTOL, atol=ATOL)
    weight /= 4
    assert provider.convolution_forward(attrs, data, weight, None, out)   # no version: fresh
    np.testing.assert_allclose(out, before, rtol=RTOL, atol=ATOL)


@needs_onednn
@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
@pytest.mark.parametrize('geometry', [
    ((2, 3, 5, 5), dict(pad=(1, 1))),
    # a 1x1 output: oneDNN reads this weight as it is laid out, with no reorder to keep
    ((1, 8, 4, 4), dict(stride=(2, 2)))], ids=['reordered', 'read-as-is'])
def test_a_scaled_weight_is_kept_scaled_and_follows_the_scale(layout, geometry):
    # a BatchNorm folded in: weight * scale per output channel, the weight an OHWI view of
    # OIHW memory for channel-last data (as the subgraph pass hands it over)
    shape, extra = geometry
    kwargs = dict(kernel=(3, 3), num_filter=4, no_bias=True, **extra)
    data, weight = conv_inputs(shape, kwargs)
    scale = np.array([1, -2, 0.5, 3], np.float32)
    attrs, (expected,) = numpy_outputs('Convolution', [data, weight * scale[:, None, None, None]],
                                       **kwargs)
    if layout == 'NHWC':
        attrs = dict(attrs, layout='NHWC')
        data, weight = data.transpose(0, 2, 3, 1).copy(), weight.transpose(0, 2, 3, 1)
        expected = expected.transpose(0, 2, 3, 1)
    out = empty_like(expected)
    w_var, s_var = engine.get().new_var(), engine.get().new_var()

    def run(scale_version=None):
        token = None if scale_version is None else ((w_var, 0), (s_var, scale_version))
        assert provider.convolution_forward(attrs, data, weight, None, out,
                                            weight_version=token, weight_scale=scale)
        return out.copy()
    onednn.clear_cache()
    np.testing.assert_allclose(run(0), expected, rtol=RTOL, atol=ATOL)
    kept = onednn.kept_bytes() > 0    # whether oneDNN reorders (and so keeps) this weight
    scale *= 2                        # changed without a new version: a kept copy stays
    np.testing.assert_allclose(run(0), expected if kept else 2 * expected, rtol=RTOL,
                               atol=ATOL)
    np.testing.assert_allclose(run(1), 2 * expected, rtol=RTOL, atol=ATOL)
    scale *= 2                        # no token: the scale as given
    np.testing.assert_allclose(run(), 4 * expected, rtol=RTOL, atol=ATOL)


@needs_onednn
@pytest.mark.parametrize('groups', [1, 2])
def test_a_scaled_weight_is_scaled_by_its_reorder_with_the_bits_of_the_product(groups):
    # the reorder into the kept copy multiplies as it reads (oneDNN's source scales), with
    # no scaled temporary first: the output has the bits of the weight scaled beforehand
    kwargs = dict(kernel=(3, 3), num_filter=8, num_group=groups, no_bias=True, pad=(1, 1))
    data, weight = conv_inputs((2, 8, 9, 9), kwargs)
    scale = np.random.default_rng(3).uniform(0.1, 3.0, 8).astype(np.float32)
    attrs, (expected,) = numpy_outputs('Convolution', [data, weight * scale[:, None, None, None]],
                                       **kwargs)
    onednn.clear_cache()
    outs, prepared = [], []
    for w, s in ((weight, scale), (weight * scale[:, None, None, None], None)):
        out = empty_like(expected)
        prepared.append(provider.convolution_forward(attrs, data, w, None, out,
                                                     weight_version=((engine.get().new_var(),
                                                                      0),), weight_scale=s))
        outs.append(out)
    assert outs[0].tobytes() == outs[1].tobytes()
    np.testing.assert_allclose(outs[0], expected, rtol=RTOL, atol=ATOL)
    bindings = prepared[0]._primitive().bindings
    weights = next(b for b in bindings if b.arg == onednn.ARG_WEIGHTS)
    if weights.reorder is None:
        # under AVX2 oneDNN reads the grouped weight as it is laid out: scaled first then
        assert groups > 1 and not weights.scaled
    else:
        assert weights.scaled[1 + (groups > 1)] is not None


@needs_onednn
def test_kept_weights_are_per_array_and_go_with_their_variable():
    # layers of one shape share a primitive; each weight keeps its own reordered copy
    onednn.clear_cache()
    kwargs = dict(kernel=(1, 1), num_filter=4, no_bias=True)
    data, first = conv_inputs((1, 4, 3, 3), kwargs)
    second = first * 3
    attrs, (expected,) = numpy_outputs('Convolution', [data, first], **kwargs)
    out = empty_like(expected)
    vars_ = [engine.get().new_var(), engine.get().new_var()]
    for _ in range(2):
        for weight, var, scale in ((first, vars_[0], 1), (second, vars_[1], 3)):
            assert provider.convolution_forward(attrs, data, weight, None, out,
                                                weight_version=((var, 0),))
            np.testing.assert_allclose(out, scale * expected, rtol=RTOL, atol=ATOL)
    size = onednn.kept_bytes()
    assert size >= first.nbytes + second.nbytes
    residual = np.ones_like(out)     # another primitive (a sum post-op), the same copy
    assert provider.convolution_forward(attrs, data, first, None, out, residual=residual,
                                        weight_version=((vars_[0], 0),))
    np.testing.assert_allclose(out, expected + 1, rtol=RTOL, atol=ATOL)
    assert onednn.kept_bytes() == size
    del vars_[1], var                # that array's variable is gone: its copy goes next time
    third = first * 5
    assert provider.convolution_forward(attrs, data, third, None, out,
                                        weight_version=((engine.get().new_var(), 0),))
    assert onednn.kept_bytes() == size
    onednn.clear_cache()
    assert onednn.kept_bytes() == 0


@needs_onednn
def test_replays_of_layers_sharing_a_primitive_run_on_their_own_arrays():
    """Two layers of one shape share a primitive: each replay (Prepared.run) sets its own data
    handles again after the other ran, reads its inputs' current values, and works its kept
    weight copy out again once that copy is discarded or the weight's version changes."""
    onednn.clear_cache()
    kwargs = dict(kernel=(3, 3), num_filter=8, pad=(1, 1), no_bias=True)
    data, first = conv_inputs((1, 8, 6, 6), kwargs)
    attrs, (expected,) = numpy_outputs('Convolution', [data, first], **kwargs)
    # channel-last activations, as a network's: oneDNN reads and writes them as they are, so
    # a run sets data handles only (and reorders the weight into its kept copy)
    attrs, expected = dict(attrs, layout='NHWC'), expected.transpose(0, 2, 3, 1)
    layers = []
    for scale in (1, 3):
        x, w = data.transpose(0, 2, 3, 1).copy(), (first * scale).transpose(0, 2, 3, 1)
        out = empty_like(expected)
        token = ((engine.get().new_var(), 0),)
        prepared = provider.convolution_forward(attrs, x, w, None, out, weight_version=token)
        assert isinstance(prepared, provider.Prepared)
        layers.append((prepared, x, w, out, token, scale))
    assert layers[0][0]._primitive() is layers[1][0]._primitive()

    def check(factor=1):
        for prepared, x, w, out, token, scale in layers:
            out.fill(np.nan)
            assert prepared.run(token) and prepared._plan is not None
            np.testing.assert_allclose(out, factor * scale * expected, rtol=RTOL, atol=ATOL)
    check()
    check()
    for _, x, *_ in layers:
        x *= 2                       # new inputs in the same arrays
    check(2)
    onednn.discard_kept(layers[0][4])      # its copy is gone: reordered again
    check(2)
    prepared, x, w, out, token, scale = layers[1]
    w *= 2                           # a new version of the second weight
    layers[1] = (prepared, x, w, out, ((token[0][0], 1),), 2 * scale)
    check(2)


@needs_onednn
def test_a_run_that_reorders_an_input_each_time_has_no_plan():
    x = rand(1, 8, 5, 5)
    y = np.empty_like(x)
    channel_last = x.transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2)
    relu = onednn.eltwise(onednn.MemoryDesc.of(x), onednn.MemoryDesc.of(y), 'relu')
    assert relu.run({onednn.ARG_SRC: x, onednn.ARG_DST: y}) is not None
    conv = onednn.convolution(onednn.MemoryDesc.of(channel_last),
                              onednn.MemoryDesc.of(rand(4, 8, 3, 3)), None,
                              onednn.MemoryDesc.of(np.empty((1, 4, 3, 3), np.float32)),
                              (1, 1), (1, 1), (0, 0), (0, 0))
    assert conv.reorders[onednn.ARG_SRC] or conv.reorders[onednn.ARG_WEIGHTS]
    arrays = {onednn.ARG_SRC: channel_last, onednn.ARG_WEIGHTS: rand(4, 8, 3, 3),
              onednn.ARG_DST: np.empty((1, 4, 3, 3), np.float32)}
    assert conv.run(arrays) is None


@needs_onednn
def test_a_discarded_copy_is_freed_though_a_primitive_found_it_by_shortcut():
    onednn.clear_cache()
    kwargs = dict(kernel=(3, 3), num_filter=8, pad=(1, 1), no_bias=True)
    data, weight = conv_inputs((1, 8, 6, 6), kwargs)
    attrs, (expected,) = numpy_outputs('Convolution', [data, weight], **kwargs)
    out = empty_like(expected)
    var = engine.get().new_var()
    for _ in range(2):      # the second call finds the copy through the primitive's shortcut
        assert provider.convolution_forward(attrs, data, weight, None, out,
                                            weight_version=((var, 0),))
    (copy,) = [c for copies in onednn._kept.copies.values() for c in copies]
    buffer = weakref.ref(copy.buffer)
    del copy
    onednn.discard_kept(((var, 0),))
    gc.collect()
    assert onednn.kept_bytes() == 0 and buffer() is None
    assert provider.convolution_forward(attrs, data, weight, None, out,
                                        weight_version=((var, 0),))
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)
    assert onednn.kept_bytes() > 0


@needs_onednn
def test_batch_norm_declines_strided_channel_vectors():
    x, channels = rand(2, 4, 4, 3), 3
    gamma = rand(2 * channels)[::2]
    others = [rand(channels, seed=s) for s in (2, 3)] + [np.ones(channels, np.float32)]
    attrs = registry.get('BatchNorm').parse_attrs({'fix_gamma': False, 'axis': 3})
    assert not provider.batch_norm_forward(attrs, x, gamma, *others, empty_like(x))
    assert provider.batch_norm_forward(attrs, x, gamma.copy(), *others, empty_like(x))


@needs_onednn
def test_safe_accumulation_keeps_sums_in_numpy():
    # the flag of the call comes as an argument: the configuration at run time does not count
    x = rand(2, 3, 8, 8)
    out = empty_like(x)
    softmax = registry.get('softmax').parse_attrs({})
    avg = registry.get('Pooling').parse_attrs({'kernel': (2, 2), 'pool_type': 'avg'})
    big = registry.get('Pooling').parse_attrs({'kernel': (2, 2), 'pool_type': 'max'})
    pooled = np.empty((2, 3, 7, 7), np.float32)
    assert not provider.softmax_forward(softmax, x, out, safe=True)
    assert not provider.pooling_forward(avg, x, pooled, safe=True)
    assert provider.pooling_forward(big, x, pooled, safe=True)       # a maximum sums nothing
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        assert provider.softmax_forward(softmax, x, out, safe=False)
        assert provider.pooling_forward(avg, x, pooled, safe=False)


@needs_onednn
def test_evicted_primitive_is_freed_at_once():
    import gc
    import weakref
    md = onednn.MemoryDesc.plain((3,), (1,))
    onednn.clear_cache()
    gc.disable()        # freed by reference counting, not by the cycle collector
    try:
        with config.override(MXNET_MKLDNN_CACHE_NUM=1):
            first = weakref.ref(onednn.cached(('test', 1), lambda: onednn.eltwise(md, md, 'relu')))
            onednn.cached(('test', 2), lambda: onednn.eltwise(md, md, 'tanh'))
            assert first() is None
    finally:
        gc.enable()
        onednn.clear_cache()


def test_a_library_without_the_v3_api_is_a_clear_error():
    class OldLibrary:            # a shared library without oneDNN 3.x's C functions
        def __getattr__(self, name):
            raise AttributeError(name)
    with pytest.raises(EmberError, match='no dnnl_engine_create; Ember needs the oneDNN 3.x'):
        onednn._Library(OldLibrary())


_EXIT_SCRIPT = '''
import numpy as np
import ember as mx
from ember import autograd, gluon
net = gluon.nn.Dense(512, in_units=1024)
net.initialize()
trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1})
x = mx.nd.array(np.random.default_rng(0).standard_normal((256, 1024)))
for _ in range(8):
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    trainer.step(256)
print('queued')          # and no wait: the engine's exit handler runs what is queued
'''


@needs_onednn
def test_a_script_may_end_with_onednn_work_still_queued():
    """The primitives outlive the engine's exit handler: weakref.finalize's own exit handler,
    registered later, ran first and destroyed them under the queued operators (a
    segmentation fault at exit)."""
    import subprocess
    import sys
    for _ in range(3):
        done = subprocess.run([sys.executable, '-c', _EXIT_SCRIPT], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == 'queued', done.stderr[-2000:]
