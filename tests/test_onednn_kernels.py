"""The operators' kernels with oneDNN on against the same kernels with it off
(``MXNET_MKLDNN_ENABLED=0``, the NumPy code), forward and backward, channel-first and
channel-last; the convolution gradients the provider offers; and the switches that decide
whether oneDNN runs at all."""
import dataclasses

import numpy as np
import pytest

import ember as mx
import ember.op.nn  # noqa: F401  (registers the operators)
from ember import autograd, config
from ember.backend import native, onednn
from ember.op import registry
from ember.op.nn import normalization, onednn_provider as provider
from ember.op.registry import KernelContext
from tolerance import assert_sums_close

pytestmark = pytest.mark.skipif(native.find_wheel_library() is None,
                                reason='oneDNN (onednn-cpu-gomp) is not installed')
RTOL, ATOL = 1e-4, 1e-5


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture
def primitive_runs(monkeypatch):
    """Counts every oneDNN primitive execution."""
    runs = []
    original = onednn.Primitive.run

    def counting_run(self, *args, **kwargs):
        runs.append(self)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(onednn.Primitive, 'run', counting_run)
    return runs


@pytest.fixture
def every_size():
    """Element-wise kernels take oneDNN from the first element (not only past
    MXNET_CPU_PARALLEL_SIZE), so that small test arrays exercise it."""
    with config.override(MXNET_CPU_PARALLEL_SIZE=1):
        yield


def call_kernel(name, inputs, is_train=False, out_shapes=None, **kwargs):
    """The outputs of operator `name`'s kernel (NaN-filled first) and the inputs after it ran
    (kernels update auxiliary states in place)."""
    op = registry.get(name)
    attrs = op.parse_attrs(kwargs)
    if out_shapes is None:
        _, out_shapes = op.infer_shape(attrs, [a.shape for a in inputs])
    _, dtypes = op.infer_type(attrs, [a.dtype for a in inputs])
    outs = [np.full(s, np.nan, d) for s, d in zip(out_shapes, dtypes)]
    ins = [a.copy() for a in inputs]
    op.kernel(attrs, ins, outs, KernelContext(None, is_train=is_train, xp=np))
    return outs, ins


def run_kernel(name, inputs, enabled, is_train=False, out_shapes=None, **kwargs):
    """call_kernel with oneDNN `enabled` or not."""
    with config.override(MXNET_MKLDNN_ENABLED=enabled):
        return call_kernel(name, inputs, is_train, out_shapes, **kwargs)


def assert_products_close(got, want, name, inputs, **kwargs):
    """Outputs `got` of operator `name`, a sum of products of `inputs` (a convolution, an inner
    product or their gradients), match the NumPy kernel's `want` within the rounding of any
    summation order: the tolerance scales with each output's sum of absolute terms, the NumPy
    kernel's result on the absolute inputs."""
    magnitudes, _ = run_kernel(name, [abs(a) for a in inputs], False, **kwargs)
    terms = max(a.size for a in inputs)     # no output sums more terms than an input holds
    for g, w, m in zip(got, want, magnitudes):
        if g is not None:
            assert_sums_close(g, w, m, terms)


def assert_same_both_ways(name, inputs, is_train=False, runs=None, out_shapes=None,
                          products=False, **kwargs):
    """The kernel gives the NumPy kernel's outputs (and updated inputs) with oneDNN on, and
    oneDNN ran (when `runs`, the primitive_runs fixture, is given). `products`: the outputs are
    sums of products of the inputs, compared as assert_products_close does."""
    before = len(runs) if runs is not None else 0
    got, got_ins = run_kernel(name, inputs, True, is_train, out_shapes, **kwargs)
    if runs is not None:
        assert len(runs) > before, f'{name}: oneDNN did not run'
        before = len(runs)
    want, want_ins = run_kernel(name, inputs, False, is_train, out_shapes, **kwargs)
    if runs is not None:
        assert len(runs) == before, f'{name}: oneDNN ran although MXNET_MKLDNN_ENABLED=0'
    if products:
        assert_products_close(got, want, name, inputs, **kwargs)
    compared = (got_ins, want_ins) if products else (got + got_ins, want + want_ins)
    for index, (g, w) in enumerate(zip(*compared)):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=f'{name} array {index}')
    return got


# ----------------------------------------------------------------------------------------------
# FullyConnected (the _sg_fc fused operator runs this kernel too)

FC_CASES = [((8, 64), dict(num_hidden=16)),
            ((4, 2, 3, 3), dict(num_hidden=6)),
            ((2, 3, 7), dict(num_hidden=4, flatten=False)),
            ((6, 8), dict(num_hidden=5, no_bias=True))]


def fc_inputs(shape, kwargs):
    op = registry.get('FullyConnected')
    attrs = op.parse_attrs(kwargs)
    shapes, outs = op.infer_shape(attrs, [shape, None, None])
    count = 2 if attrs['no_bias'] else 3
    return [rand(*s, seed=i) for i, s in enumerate(shapes[:count])], outs[0]


@pytest.fixture
def no_dense(monkeypatch):
    """FullyConnected of any rows on oneDNN's inner product, not the dense kernel that takes
    up to 4 rows (tests/test_dense.py)."""
    from ember.op.nn import fully_connected
    monkeypatch.setattr(fully_connected, 'DENSE_MAX_ROWS', 0)


@pytest.mark.parametrize('shape, kwargs', FC_CASES)
def test_fully_connected_forward_and_backward(shape, kwargs, primitive_runs, no_dense):
    inputs, out_shape = fc_inputs(shape, kwargs)
    assert_same_both_ways('FullyConnected', inputs, runs=primitive_runs, products=True,
                          **kwargs)
    dy = rand(*out_shape, seed=7)
    assert_same_both_ways('_backward_FullyConnected', [dy, inputs[0], inputs[1]],
                          runs=primitive_runs, products=True, **kwargs)


def test_fused_fully_connected_takes_onednn(primitive_runs, no_dense):
    x, w, b = rand(4, 10), rand(3, 10, seed=1), rand(3, seed=2)
    op = registry.get('_sg_fc')
    attrs = op.parse_attrs({'num_hidden': 3, 'act_type': 'relu'})
    out = np.full((4, 3), np.nan, np.float32)
    op.kernel(attrs, [x, w, b], [out], KernelContext(None))
    assert primitive_runs
    np.testing.assert_allclose(out, np.maximum(x @ w.T + b, 0), rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------------------
# Pooling

POOL_CASES = [
    ((2, 3, 9, 9), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    ((2, 9, 9, 3), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), layout='NHWC')),
    ((2, 3, 8, 8), dict(kernel=(2, 2), stride=(1, 1))),
    ((2, 3, 9, 9), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='avg')),
    ((2, 9, 9, 3), dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='avg',
                        count_include_pad=False, layout='NHWC')),
    ((2, 5, 7, 7), dict(global_pool=True, pool_type='avg')),
    ((2, 7, 7, 5), dict(global_pool=True, pool_type='avg', layout='NHWC')),
    ((2, 3, 12), dict(kernel=(3,), stride=(3,), pool_type='max')),
    ((1, 2, 4, 6, 6), dict(kernel=(2, 2, 2), stride=(2, 2, 2), pool_type='avg')),
]


@pytest.mark.parametrize('shape, kwargs', POOL_CASES)
def test_pooling_forward_and_backward(shape, kwargs, primitive_runs):
    # after a relu most windows hold ties at zero: both route the gradient to the first maximum
    x = np.maximum(rand(*shape), 0)
    (y,) = assert_same_both_ways('Pooling', [x], runs=primitive_runs, **kwargs)
    dy = rand(*y.shape, seed=3)
    assert_same_both_ways('_backward_Pooling', [dy, x, y], runs=primitive_runs, **kwargs)


@pytest.mark.parametrize('pool_type', ['max', 'avg'])
def test_nchw_pooling_runs_a_few_samples_at_a_time(pool_type, monkeypatch, primitive_runs):
    # NCHW data is pooled in channel-last copies, bounded by pool_copy_bytes: the forward pass
    # copies two samples (of three) at a time, the backward pass (data, its gradient, the
    # output gradient twice) one
    x = np.maximum(rand(3, 4, 9, 9), 0)
    kwargs = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type=pool_type)
    monkeypatch.setattr(provider, 'TUNING', dataclasses.replace(
        provider.TUNING, pool_copy_bytes=2 * (4 * 9 * 9 + 4 * 5 * 5) * 4))
    (y,) = assert_same_both_ways('Pooling', [x], runs=primitive_runs, **kwargs)
    assert len(primitive_runs) == 2
    dy = rand(*y.shape, seed=3)
    assert_same_both_ways('_backward_Pooling', [dy, x, y], runs=primitive_runs, **kwargs)


class RecordingTemp:
    """A 'temp' resource that hands out NaN-filled bytes and records the sizes asked for."""

    def __init__(self):
        self.sizes = []

    def get(self, shape, dtype='float32'):
        self.sizes.append(int(np.prod(shape)) * np.dtype(dtype).itemsize)
        return np.full(shape, 0xFF, np.uint8).view(dtype)


@pytest.mark.parametrize('layout, contiguous', [('NHWC', True), ('NCHW', True),
                                                ('NCHW', False)])
def test_max_pooling_gradient_recomputes_on_the_scratch(layout, contiguous, primitive_runs):
    # the recomputed output and oneDNN's workspace come from the kernel's 'temp' resource (a
    # fresh 13 MB array faulted its pages in on every call of resnet50_v1's first pooling);
    # an output gradient that is not C-contiguous (NCHW views of channel-last memory) gets a
    # fresh output laid out like it
    shape = (2, 9, 9, 6) if layout == 'NHWC' else (2, 6, 9, 9)
    kwargs = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='max', layout=layout)
    x = np.maximum(rand(*shape), 0)
    (y,), _ = call_kernel('Pooling', [x], **kwargs)
    dy = rand(*y.shape, seed=3) if contiguous \
        else np.ascontiguousarray(rand(*y.shape, seed=3).transpose(0, 2, 3, 1)).transpose(
            0, 3, 1, 2)
    op = registry.get('_backward_Pooling')
    attrs = op.parse_attrs(kwargs)
    (want,), _ = run_kernel('_backward_Pooling', [dy, x, y], False, **kwargs)
    got, temp = np.full(x.shape, np.nan, np.float32), RecordingTemp()
    before = len(primitive_runs)
    op.kernel(attrs, [dy, x, y], [got], KernelContext(None, xp=np, temp=temp))
    assert len(primitive_runs) == before + 2    # the forward pass again, then the backward
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    assert len(temp.sizes) == 1
    assert (temp.sizes[0] > dy.nbytes) == contiguous, (temp.sizes, dy.nbytes)


@pytest.mark.parametrize('pool_type', ['max', 'avg'])
def test_channel_last_global_pooling_runs_the_channel_last_kernels(pool_type, primitive_runs):
    # the output (N, 1, 1, C) is as much plain as channel-last: described as plain, it sent
    # oneDNN to its reference kernel (65 ms instead of 1 for resnet50_v1's at batch 32)
    x = rand(2, 7, 7, 16)
    kwargs = dict(global_pool=True, pool_type=pool_type, layout='NHWC')
    (y,) = assert_same_both_ways('Pooling', [x], runs=primitive_runs, **kwargs)
    assert_same_both_ways('_backward_Pooling', [rand(*y.shape, seed=3), x, y],
                          runs=primitive_runs, **kwargs)
    assert primitive_runs
    assert all(not run.implementation.startswith('ref') for run in primitive_runs), \
        [run.implementation for run in primitive_runs]


def test_pooling_under_safe_accumulation_sums_in_numpy(primitive_runs):
    x = rand(2, 3, 8, 8)
    op = registry.get('Pooling')
    attrs = op.parse_attrs({'kernel': (2, 2), 'pool_type': 'avg'})
    out = np.empty((2, 3, 7, 7), np.float32)
    op.kernel(attrs, [x], [out], KernelContext(None, safe_accumulation=True))
    assert not primitive_runs
    op.kernel(attrs, [x], [out], KernelContext(None, safe_accumulation=False))
    assert primitive_runs


# ----------------------------------------------------------------------------------------------
# BatchNorm

def bn_inputs(shape, axis):
    channels = shape[axis]
    return [rand(*shape) * 2 + 1, rand(channels, seed=1), rand(channels, seed=2),
            rand(channels, seed=3), np.abs(rand(channels, seed=4)) + 0.5]


BN_CASES = [((4, 3, 5, 5), dict(fix_gamma=False)),
            ((4, 3, 5, 5), dict(fix_gamma=True, eps=1e-5)),
            ((4, 5, 5, 3), dict(fix_gamma=False, axis=3)),
            ((6, 4), dict(fix_gamma=False, momentum=0.5))]


@pytest.mark.parametrize('is_train', [False, True])
@pytest.mark.parametrize('shape, kwargs', BN_CASES)
def test_batch_norm_forward_and_backward(shape, kwargs, is_train, primitive_runs):
    inputs = bn_inputs(shape, kwargs.get('axis', 1))
    # NCHW passes stay off oneDNN (faster there): forward in NumPy or ember._kernels, the
    # backward in ember._kernels where it is built; so do channel-last ones but inference
    nchw = len(shape) == 4 and kwargs.get('axis', 1) == 1
    compiled = normalization._kernels is not None and (
        nchw or kwargs.get('axis', 1) == len(shape) - 1)
    # the moving statistics (inputs 3 and 4) are compared too: training updates them
    out, mean, invstd = assert_same_both_ways('BatchNorm', inputs, is_train,
                                              None if nchw or compiled and is_train
                                              else primitive_runs, **kwargs)
    dy = rand(*shape, seed=5)
    assert_same_both_ways('_backward_BatchNorm', [dy, inputs[0], inputs[1], mean, invstd],
                          is_train, None if compiled else primitive_runs, **kwargs)


def test_batch_norm_training_under_safe_accumulation_stays_in_numpy(primitive_runs,
                                                                   monkeypatch):
    # without ember._kernels (which takes channel-last training too), oneDNN would run
    monkeypatch.setattr(normalization, '_kernels', None)
    inputs = bn_inputs((4, 5, 5, 3), 3)
    op = registry.get('BatchNorm')
    attrs = op.parse_attrs({'axis': 3})
    outs = [np.empty((4, 5, 5, 3), np.float32), np.empty(3, np.float32),
            np.empty(3, np.float32)]
    op.kernel(attrs, inputs, outs, KernelContext(None, is_train=True, safe_accumulation=True))
    assert not primitive_runs
    op.kernel(attrs, inputs, outs, KernelContext(None, is_train=True, safe_accumulation=False))
    assert primitive_runs


# ----------------------------------------------------------------------------------------------
# Activations, softmax, LRN

@pytest.mark.parametrize('act_type', ['relu', 'sigmoid', 'tanh'])
@pytest.mark.parametrize('shape', [(3, 4, 5), (2, 5, 5, 4)])
def test_activation_forward_and_backward(act_type, shape, every_size, primitive_runs):
    x = rand(*shape) * 3
    (y,) = assert_same_both_ways('Activation', [x], runs=primitive_runs, act_type=act_type)
    dy = rand(*shape, seed=4)
    assert_same_both_ways('_backward_Activation', [dy, y], runs=primitive_runs,
                          act_type=act_type)


def test_activation_backward_in_place(every_size):
    y, dy = np.maximum(rand(4, 6), 0), rand(4, 6, seed=1)
    attrs = registry.get('Activation').parse_attrs({'act_type': 'relu'})
    grad = dy.copy()
    assert provider.activation_backward(attrs, grad, y, grad)
    np.testing.assert_array_equal(grad, dy * (y > 0))


def test_small_activations_stay_in_numpy(primitive_runs):
    x = rand(4, 6)
    with config.override(MXNET_CPU_PARALLEL_SIZE=x.size + 1):
        run_kernel('Activation', [x], True, act_type='relu')
        run_kernel('_backward_Activation', [x, x], True, act_type='relu')
    assert not primitive_runs


@pytest.mark.parametrize('kwargs', [dict(act_type='leaky', slope=0.1),
                                    dict(act_type='elu', slope=0.7), dict(act_type='gelu')])
def test_leaky_relu_forward_and_backward(kwargs, every_size, primitive_runs):
    x = rand(3, 4, 5) * 3
    assert_same_both_ways('LeakyReLU', [x], runs=primitive_runs, **kwargs)
    dy = rand(3, 4, 5, seed=2)
    assert_same_both_ways('_backward_LeakyReLU', [dy, x], runs=primitive_runs, **kwargs)


@pytest.mark.parametrize('name', ['softmax', 'log_softmax'])
@pytest.mark.parametrize('axis', [-1, 1])
def test_softmax_forward_and_backward(name, axis, primitive_runs):
    x = rand(4, 5, 6) * 4
    (y,) = assert_same_both_ways(name, [x], runs=primitive_runs, axis=axis)
    dy = rand(4, 5, 6, seed=6)
    assert_same_both_ways(f'_backward_{name}', [dy, y], runs=primitive_runs, axis=axis)


def test_softmin_stays_in_numpy(primitive_runs):
    x = rand(3, 4)
    (y,), _ = run_kernel('softmin', [x], True)
    assert not primitive_runs
    np.testing.assert_allclose(y, np.exp(-x) / np.exp(-x).sum(-1, keepdims=True), rtol=RTOL)


def test_lrn_forward_and_backward_recomputes_the_normaliser(primitive_runs):
    x = rand(2, 7, 4, 4) * 3
    kwargs = dict(nsize=5, alpha=1e-2, beta=0.5, knorm=1.0)
    on, _ = run_kernel('LRN', [x], True, **kwargs)
    assert primitive_runs
    off, _ = run_kernel('LRN', [x], False, **kwargs)
    np.testing.assert_allclose(on[0], off[0], rtol=RTOL, atol=ATOL)
    dy = rand(*x.shape, seed=1)
    unwritten = np.full(x.shape, np.nan, np.float32)      # oneDNN leaves tmp_norm unwritten
    (from_data,), _ = run_kernel('_backward_LRN', [dy, x, unwritten], False, **kwargs)
    (from_norm,), _ = run_kernel('_backward_LRN', [dy, x, off[1]], False, **kwargs)
    assert np.isfinite(from_data).all()
    np.testing.assert_allclose(from_data, from_norm, rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------------------
# Convolution gradients for the convolution kernel

CONV_CASES = [
    ((2, 3, 9, 9), dict(kernel=(3, 3), num_filter=4)),
    ((2, 3, 9, 9), dict(kernel=(3, 3), num_filter=4, stride=(2, 2), pad=(1, 1))),
    ((2, 4, 10, 8), dict(kernel=(3, 2), num_filter=6, dilate=(2, 1), pad=(2, 0))),
    ((2, 6, 7, 7), dict(kernel=(3, 3), num_filter=4, num_group=2, pad=(1, 1))),
    ((2, 4, 7, 7), dict(kernel=(3, 3), num_filter=4, num_group=4, pad=(1, 1), no_bias=True)),
    ((2, 8, 5, 5), dict(kernel=(1, 1), num_filter=16, no_bias=True)),
    ((2, 9, 9, 3), dict(kernel=(3, 3), num_filter=5, pad=(1, 1), layout='NHWC')),
    ((2, 9, 9, 6), dict(kernel=(3, 3), num_filter=4, num_group=2, pad=(1, 1), layout='NHWC')),
    ((2, 6, 6, 4), dict(kernel=(1, 1), num_filter=8, stride=(2, 2), layout='NHWC')),
    ((2, 3, 11), dict(kernel=(3,), num_filter=4, stride=(2,), pad=(1,))),
    ((1, 2, 5, 6, 6), dict(kernel=(3, 3, 3), num_filter=3, pad=(1, 1, 1))),
]


@pytest.mark.parametrize('shape, kwargs', CONV_CASES)
def test_convolution_gradients_match_numpy(shape, kwargs):
    op = registry.get('Convolution')
    attrs = op.parse_attrs(kwargs)
    shapes, (out_shape,) = op.infer_shape(attrs, [shape, None, None])
    x, w, dy = rand(*shape), rand(*shapes[1], seed=1), rand(*out_shape, seed=2)
    want, _ = run_kernel('_backward_Convolution', [dy, x, w], False, **kwargs)
    dx, dw = np.full(x.shape, np.nan, np.float32), np.full(w.shape, np.nan, np.float32)
    db = None if attrs['no_bias'] else np.full(shapes[2], np.nan, np.float32)
    assert provider.convolution_backward_data(attrs, dy, w, dx)
    assert provider.convolution_backward_weights(attrs, dy, x, dw, db)
    assert_products_close([dx, dw, db], want, '_backward_Convolution', [dy, x, w], **kwargs)


def test_channel_last_convolution_to_one_pixel_runs_the_channel_last_kernels(primitive_runs):
    # a kernel covering its input leaves a (N, F, 1, 1) output, as much plain as channel-last;
    # described as plain it sent oneDNN to its reference kernels, forward and backward
    kwargs = dict(kernel=(5, 5), num_filter=8, layout='NHWC')
    op = registry.get('Convolution')
    attrs = op.parse_attrs(kwargs)
    shapes, (out_shape,) = op.infer_shape(attrs, [(3, 5, 5, 16), None, None])
    x, w, b = rand(3, 5, 5, 16), rand(*shapes[1], seed=1), rand(*shapes[2], seed=2)
    assert_same_both_ways('Convolution', [x, w, b], runs=primitive_runs, products=True,
                          **kwargs)
    dy = rand(*out_shape, seed=3)
    want, _ = run_kernel('_backward_Convolution', [dy, x, w], False, **kwargs)
    got = [np.full(a.shape, np.nan, np.float32) for a in (x, w, b)]
    assert provider.convolution_backward_data(attrs, dy, w, got[0])
    assert provider.convolution_backward_weights(attrs, dy, x, got[1], got[2])
    assert_products_close(got, want, '_backward_Convolution', [dy, x, w], **kwargs)
    assert all(not run.implementation.startswith('ref') for run in primitive_runs), \
        [run.implementation for run in primitive_runs]


@pytest.mark.parametrize('kwargs', [dict(kernel=(1, 1), num_filter=32),
                                    dict(kernel=(3, 3), num_filter=16, pad=(1, 1)),
                                    dict(kernel=(1, 1), num_filter=32, stride=(2, 2))])
def test_channel_last_gradients_run_on_the_activations_as_given(kwargs, primitive_runs):
    # Chosen freely, oneDNN's AVX-512 gradients take blocked activations (nChw16c): every call
    # then reordered dy, x and dx in and out, 150 ms of resnet50_v1's 1.2 s training step
    attrs = registry.get('Convolution').parse_attrs(dict(kwargs, layout='NHWC', no_bias=True))
    shapes, (out_shape,) = registry.get('Convolution').infer_shape(
        attrs, [(4, 8, 8, 16), None])
    x, w, dy = rand(4, 8, 8, 16), rand(*shapes[1], seed=1), rand(*out_shape, seed=2)
    nhwc = dict(kwargs, layout='NHWC', no_bias=True)
    want, _ = run_kernel('_backward_Convolution', [dy, x, w], False, **nhwc)
    dx, dw = np.full(x.shape, np.nan, np.float32), np.full(w.shape, np.nan, np.float32)
    assert provider.convolution_backward_data(attrs, dy, w, dx)
    assert provider.convolution_backward_weights(attrs, dy, x, dw)
    assert_products_close([dx, dw], want, '_backward_Convolution', [dy, x, w], **nhwc)
    data, weights = primitive_runs
    assert not data.implementation.startswith('ref')
    assert not weights.implementation.startswith('ref')
    assert not data.reorders[onednn.ARG_DIFF_SRC] and not data.reorders[onednn.ARG_DIFF_DST]
    assert not weights.reorders[onednn.ARG_SRC] and not weights.reorders[onednn.ARG_DIFF_DST]


def test_convolution_gradients_decline_when_disabled():
    attrs = registry.get('Convolution').parse_attrs(dict(kernel=(3, 3), num_filter=2))
    x, w, dy = rand(1, 2, 5, 5), rand(2, 2, 3, 3), rand(1, 2, 3, 3)
    dx, dw = np.full(x.shape, np.nan, np.float32), np.full(w.shape, np.nan, np.float32)
    with config.override(MXNET_MKLDNN_ENABLED=0):
        assert not provider.convolution_backward_data(attrs, dy, w, dx)
        assert not provider.convolution_backward_weights(attrs, dy, x, dw)
    assert np.isnan(dx).all() and np.isnan(dw).all()


# ----------------------------------------------------------------------------------------------
# The switches, through the operators' kernels and through mx.nd with autograd

def test_disabled_means_the_numpy_kernels(primitive_runs, no_dense):
    x = rand(2, 3, 8, 8)

    def every_kernel():
        (y,), _ = call_kernel('Pooling', [x], kernel=(2, 2))
        call_kernel('_backward_Pooling', [y, x, y], kernel=(2, 2))
        call_kernel('softmax', [x])
        call_kernel('Activation', [x], act_type='relu')
        call_kernel('BatchNorm', bn_inputs((2, 8, 8, 3), 3), is_train=True, axis=3)
        inputs, _ = fc_inputs((2, 6), dict(num_hidden=3))
        call_kernel('FullyConnected', inputs, num_hidden=3)
    with config.override(MXNET_MKLDNN_ENABLED=0, MXNET_CPU_PARALLEL_SIZE=1):
        every_kernel()
    assert not primitive_runs
    with config.override(MXNET_CPU_PARALLEL_SIZE=1):
        every_kernel()
    assert len(primitive_runs) >= 6


def test_cache_num_bounds_the_primitives_the_kernels_build(no_dense):
    onednn.clear_cache()
    try:
        with config.override(MXNET_MKLDNN_CACHE_NUM=2):
            for rows in (2, 3, 4, 5):
                inputs, _ = fc_inputs((rows, 6), dict(num_hidden=3))
                run_kernel('FullyConnected', inputs, True, num_hidden=3)
            assert onednn.cache_size() == 2
        with config.override(MXNET_MKLDNN_CACHE_NUM=-1):
            for rows in (6, 7, 8):
                inputs, _ = fc_inputs((rows, 6), dict(num_hidden=3))
                run_kernel('FullyConnected', inputs, True, num_hidden=3)
            assert onednn.cache_size() == 5
    finally:
        onednn.clear_cache()


def small_network_gradients(enabled):
    """Output and input gradients of FC -> BatchNorm -> relu -> Pooling -> log_softmax in
    training, through mx.nd and autograd."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in
              [(4, 12), (32, 12), (32,), (2,), (2,)]]
    with config.override(MXNET_MKLDNN_ENABLED=enabled, MXNET_CPU_PARALLEL_SIZE=1):
        x, w, b, gamma, beta = [mx.nd.array(a) for a in arrays]
        for a in (x, w, gamma):
            a.attach_grad()
        mean, var = mx.nd.zeros((2,)), mx.nd.ones((2,))
        with autograd.record():
            h = mx.nd.FullyConnected(x, w, b, num_hidden=32).reshape((4, 2, 4, 4))
            h = mx.nd.BatchNorm(h, gamma, beta, mean, var, fix_gamma=False)
            h = mx.nd.Pooling(mx.nd.Activation(h, act_type='relu'), kernel=(2, 2),
                              stride=(2, 2), layout='NCHW')
            loss = mx.nd.log_softmax(h.reshape((4, -1)), axis=-1).sum()
        loss.backward()
        return [a.asnumpy() for a in (loss, x.grad, w.grad, gamma.grad, mean, var)]


def test_autograd_through_onednn_matches_numpy():
    for on, off in zip(small_network_gradients(True), small_network_gradients(False)):
        np.testing.assert_allclose(on, off, rtol=RTOL, atol=ATOL)


# ----------------------------------------------------------------------------------------------
# RNN (the provider's forward pass against the NumPy kernel)

def rnn_case(mode, layers, bidirectional, seed=0, **extra):
    op = registry.get('RNN')
    attrs = op.parse_attrs(dict(mode=mode, state_size=5, num_layers=layers,
                                bidirectional=bidirectional, state_outputs=True, **extra))
    names = op.input_names(attrs)
    shapes, out_shapes = op.infer_shape(attrs, [(4, 3, 6)] + [None] * (len(names) - 1))
    inputs = [rand(*s, seed=seed + i) * 0.5 for i, s in enumerate(shapes)]
    return op, attrs, inputs, out_shapes


def rnn_provider_outputs(attrs, inputs, out_shapes):
    outs = [np.full(s, np.nan, np.float32) for s in out_shapes]
    lstm = attrs['mode'] == 'lstm'
    ran = provider.rnn_forward(attrs, inputs[0], inputs[1], inputs[2],
                               inputs[3] if lstm else None, *outs[:3 if lstm else 2])
    return ran, outs


@pytest.mark.parametrize('mode', ['lstm', 'gru', 'rnn_tanh', 'rnn_relu'])
@pytest.mark.parametrize('layers, bidirectional', [(1, False), (2, True), (3, False)])
def test_rnn_forward_matches_numpy(mode, layers, bidirectional):
    op, attrs, inputs, out_shapes = rnn_case(mode, layers, bidirectional)
    want = [np.empty(s, np.float32) for s in out_shapes]
    op.kernel(attrs, inputs, want, KernelContext(None))
    ran, got = rnn_provider_outputs(attrs, inputs, out_shapes)
    assert ran
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_rnn_declines_what_it_does_not_compute():
    _, attrs, inputs, shapes = rnn_case('lstm', 1, False)
    with config.override(MXNET_USE_MKLDNN_RNN=0):
        assert not rnn_provider_outputs(attrs, inputs, shapes)[0]
    with config.override(MXNET_MKLDNN_ENABLED=0):
        assert not rnn_provider_outputs(attrs, inputs, shapes)[0]
    _, attrs, inputs, shapes = rnn_case('lstm', 1, False, lstm_state_clip_min=-1.0,
                                        lstm_state_clip_max=1.0)
    ran, outs = rnn_provider_outputs(attrs, inputs, shapes)
    assert not ran and np.isnan(outs[0]).all()
