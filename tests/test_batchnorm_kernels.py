"""BatchNorm's compiled kernels (ember._kernels) against the NumPy code and a float64 reference."""
import warnings

import numpy as np
import pytest

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import config
from ember.op import registry
from ember.op.nn import normalization

kernels = normalization._kernels
pytestmark = pytest.mark.skipif(kernels is None, reason='ember._kernels is not built')

# (shape, axis): rows of 49 values (7x7, a tail after whole vectors), 16 (the shortest taken),
# 64 values over a 3-d array, channels on axis 2, and one large enough to split across threads
SHAPES = [((4, 6, 7, 7), 1), ((3, 5, 16), 1), ((2, 3, 4, 64), 1), ((2, 3, 5, 32), 2),
          ((4, 32, 32, 32), 1)]


class CountingKernels:
    """ember._kernels with a count of the calls per function."""

    def __init__(self):
        self.calls = {}

    def __getattr__(self, name):
        def call(*args):
            self.calls[name] = self.calls.get(name, 0) + 1
            return getattr(kernels, name)(*args)
        return call


@pytest.fixture
def counted(monkeypatch):
    proxy = CountingKernels()
    monkeypatch.setattr(normalization, '_kernels', proxy)
    return proxy.calls


def data(shape, axis, seed=0, offset=3.0):
    """float32 data whose channels have different means and spreads."""
    rng = np.random.default_rng(seed)
    channels = (1,) * axis + (shape[axis],) + (1,) * (len(shape) - axis - 1)
    spread = rng.uniform(0.5, 4, channels)
    return (rng.standard_normal(shape) * spread + offset * spread).astype(np.float32)


def bn_inputs(x, axis, seed=1):
    rng = np.random.default_rng(seed)
    channels = x.shape[axis]
    return [x, rng.uniform(0.5, 2, channels).astype(np.float32),
            rng.standard_normal(channels).astype(np.float32), np.zeros(channels, np.float32),
            np.ones(channels, np.float32)]


def forward(x, axis, fix_gamma=False, is_train=True, compiled=True, **ctx):
    """BatchNorm's kernel with or without ember._kernels: (attrs, inputs after it ran,
    outputs)."""
    op = registry.get('BatchNorm')
    attrs = op.parse_attrs({'fix_gamma': fix_gamma, 'axis': axis})
    ins = bn_inputs(x, axis)
    outs = [np.full_like(x, np.nan)] + [np.full(x.shape[axis], np.nan, np.float32)
                                        for _ in range(2)]
    with hidden(not compiled):
        op.kernel(attrs, ins, outs, registry.KernelContext(None, is_train=is_train, **ctx))
    return attrs, ins, outs


class hidden:
    """Hides ember._kernels from the BatchNorm code while active (when `hide`)."""

    def __init__(self, hide):
        self.hide = hide

    def __enter__(self):
        self.saved = normalization._kernels
        if self.hide:
            normalization._kernels = None

    def __exit__(self, *exc):
        normalization._kernels = self.saved


def reference_moments(x, axis):
    others = tuple(i for i in range(x.ndim) if i != axis)
    wide = x.astype(np.float64)
    return wide.mean(axis=others), wide.var(axis=others)


def along(vector, x, axis):
    return vector.reshape((1,) * axis + (-1,) + (1,) * (x.ndim - axis - 1))


@pytest.mark.parametrize('shape, axis', SHAPES)
@pytest.mark.parametrize('fix_gamma', [False, True])
def test_training_forward_matches_float64(shape, axis, fix_gamma, counted):
    x = data(shape, axis)
    attrs, ins, outs = forward(x, axis, fix_gamma)
    assert counted.get('bn_train_forward', 0) >= 1 and 'bn_normalize' not in counted
    mean, var = reference_moments(x, axis)
    invstd = 1 / np.sqrt(var + attrs['eps'])
    scale = invstd if fix_gamma else ins[1] * invstd
    want = (x - along(mean, x, axis)) * along(scale, x, axis) + along(ins[2], x, axis)
    np.testing.assert_allclose(outs[1], mean, rtol=1e-6)
    np.testing.assert_allclose(outs[2], invstd, rtol=1e-6)
    np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    momentum = attrs['momentum']
    np.testing.assert_allclose(ins[3], mean * (1 - momentum), rtol=1e-6)
    np.testing.assert_allclose(ins[4], momentum + var * (1 - momentum), rtol=1e-6)


@pytest.mark.parametrize('shape, axis', SHAPES)
def test_training_forward_agrees_with_numpy(shape, axis):
    x = data(shape, axis, seed=2)
    _, ins, outs = forward(x, axis)
    _, numpy_ins, numpy_outs = forward(x, axis, compiled=False)
    for got, want in zip(outs + ins[3:], numpy_outs + numpy_ins[3:]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_variance_stays_exact_when_samples_differ_widely():
    # the first sample sits far from the others, so one-pass sums of deviations from its values
    # would cancel (an error of 5e-6): the kernel takes the deviations from the mean instead
    x = data((128, 2, 16), 1, offset=0)
    x[0] += 100
    x += 1000
    gamma, beta = bn_inputs(x, 1)[1:3]
    out, mean, var, invstd = np.empty_like(x), *(np.empty(2, np.float32) for _ in range(3))
    kernels.bn_train_forward(x, out, gamma, beta, mean, var, invstd, x.shape, 0, 2, 1e-3, False)
    want_mean, want_var = reference_moments(x, 1)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-7)
    np.testing.assert_allclose(var, want_var, rtol=2e-7)


@pytest.mark.parametrize('shape, axis', SHAPES[:3])
@pytest.mark.parametrize('fix_gamma', [False, True])
def test_bn_apply_in_numpy_reproduces_the_compiled_forward(shape, axis, fix_gamma):
    x = data(shape, axis, seed=3)
    attrs, ins, outs = forward(x, axis, fix_gamma)
    again = [np.empty_like(x)]
    with hidden(True):
        registry.get('_bn_apply').kernel(attrs, ins[:3] + outs[1:], again,
                                         registry.KernelContext(None, is_train=True))
    np.testing.assert_array_equal(again[0], outs[0])


@pytest.mark.parametrize('shape, axis', SHAPES[:2])
def test_inference_normalises_like_numpy_bit_for_bit(shape, axis, counted):
    x = data(shape, axis, seed=4)
    _, _, outs = forward(x, axis, is_train=False)
    assert counted.get('bn_normalize') == 1
    _, _, numpy_outs = forward(x, axis, is_train=False, compiled=False)
    for got, want in zip(outs, numpy_outs):
        np.testing.assert_array_equal(got, want)


def backward(dy, x, axis, mean, invstd, fix_gamma, batch_stats, compiled=True, dnn=True):
    op = registry.get('_backward_BatchNorm')
    attrs = op.parse_attrs({'fix_gamma': fix_gamma, 'axis': axis,
                            'use_global_stats': not batch_stats})
    gamma = bn_inputs(x, axis)[1]
    outs = [np.full_like(x, np.nan)] + [np.full(x.shape[axis], np.nan, np.float32)
                                        for _ in range(2)]
    with hidden(not compiled), config.override(MXNET_MKLDNN_ENABLED=dnn):
        op.kernel(attrs, [dy, x, gamma, mean, invstd], outs,
                  registry.KernelContext(None, is_train=True))
    return gamma, outs


def reference_backward(dy, x, axis, gamma, mean, invstd, fix_gamma, batch_stats):
    others = tuple(i for i in range(x.ndim) if i != axis)
    dy, x = dy.astype(np.float64), x.astype(np.float64)
    scale = along(np.ones_like(gamma) if fix_gamma else gamma, x, axis).astype(np.float64)
    invstd = along(invstd, x, axis).astype(np.float64)
    xhat = (x - along(mean, x, axis)) * invstd
    dbeta, dgamma = dy.sum(axis=others), (dy * xhat).sum(axis=others)
    if not batch_stats:
        return dy * scale * invstd, dgamma, dbeta
    count = x.size / x.shape[axis]
    dx = scale * invstd * (dy - along(dbeta, x, axis) / count
                           - xhat * along(dgamma, x, axis) / count)
    return dx, dgamma, dbeta


@pytest.mark.parametrize('shape, axis', SHAPES)
@pytest.mark.parametrize('fix_gamma, batch_stats', [(False, True), (True, True), (False, False)])
def test_backward_matches_float64(shape, axis, fix_gamma, batch_stats, counted):
    x = data(shape, axis, seed=5)
    dy = data(shape, axis, seed=6, offset=0.5)
    _, _, stats = forward(x, axis)
    gamma, outs = backward(dy, x, axis, stats[1], stats[2], fix_gamma, batch_stats)
    assert counted.get('bn_backward') >= 1
    want = reference_backward(dy, x, axis, gamma, stats[1], stats[2], fix_gamma, batch_stats)
    np.testing.assert_allclose(outs[0], want[0], rtol=1e-5, atol=1e-5 * np.abs(want[0]).max())
    np.testing.assert_allclose(outs[1], 0 if fix_gamma else want[1], rtol=1e-5,
                               atol=1e-6 * np.abs(want[1]).max())
    np.testing.assert_allclose(outs[2], want[2], rtol=1e-5, atol=1e-6 * np.abs(want[2]).max())


@pytest.mark.parametrize('shape, axis', SHAPES)
def test_backward_agrees_with_numpy(shape, axis):
    x, dy = data(shape, axis, seed=7), data(shape, axis, seed=8, offset=0)
    _, _, stats = forward(x, axis)
    _, got = backward(dy, x, axis, stats[1], stats[2], False, True)
    _, want = backward(dy, x, axis, stats[1], stats[2], False, True, compiled=False, dnn=False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())


def test_results_do_not_depend_on_the_split_of_channels():
    x = data((4, 8, 5, 5), 1, seed=9)
    layout = (4, 8, 25)
    gamma, beta = bn_inputs(x, 1)[1:3]

    def run(ranges):
        out, stats = np.empty_like(x), [np.empty(8, np.float32) for _ in range(3)]
        for lo, hi in ranges:
            kernels.bn_train_forward(x, out, gamma, beta, *stats, layout, lo, hi, 1e-3, False)
        return [out] + stats
    whole, one_by_one = run([(0, 8)]), run([(c, c + 1) for c in range(8)])
    for a, b in zip(whole, one_by_one):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(whole, run([(0, 3), (3, 8)])):
        np.testing.assert_array_equal(a, b)


def test_safe_accumulation_keeps_the_numpy_code_in_float64(counted):
    x = data((2, 3, 4, 16), 1)
    _, _, outs = forward(x, 1, safe_accumulation=True)
    assert 'bn_train_forward' not in counted
    _, _, want = forward(x, 1, compiled=False, safe_accumulation=True)
    for got, expected in zip(outs, want):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize('case', ['float64', 'channels last', 'short rows', 'strided', 'empty'])
def test_layouts_it_does_not_take_run_elsewhere(case, counted):
    x, axis = data((2, 3, 4, 16), 1), 1
    if case == 'float64':
        x = x.astype(np.float64)
    elif case == 'channels last':
        x, axis = np.ascontiguousarray(np.moveaxis(x, 1, 3)), 3
    elif case == 'short rows':
        x = data((4, 32, 8), 1)
    elif case == 'strided':
        x = data((2, 3, 4, 32), 1)[..., ::2]
    else:
        x = x[:0]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)    # NumPy: mean of an empty batch
        attrs, ins, outs = forward(x, axis)
    assert not counted
    if x.size:
        _, _, want = forward(x, axis, compiled=False)
        for got, expected in zip(outs, want):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_kernel_arguments_are_checked():
    x = np.zeros((2, 3, 16), np.float32)
    vector = np.zeros(3, np.float32)
    layout = (2, 3, 16)
    args = [x, np.empty_like(x), vector, vector, vector.copy(), vector.copy(), vector.copy()]
    with pytest.raises(TypeError, match="x: expected float32 values, got buffer format 'd'"):
        kernels.bn_train_forward(x.astype(np.float64), *args[1:], layout, 0, 3, 1e-3, False)
    with pytest.raises(ValueError, match='gamma: expected 3 float32 values, got 4'):
        kernels.bn_train_forward(*args[:2], np.zeros(4, np.float32), *args[3:], layout, 0, 3,
                                 1e-3, False)
    with pytest.raises(ValueError, match=r'channel range \[2, 4\): expected 0 <= lo <= hi <= 3'):
        kernels.bn_train_forward(*args, layout, 2, 4, 1e-3, False)
    with pytest.raises(ValueError, match='read-only'):
        kernels.bn_normalize(x, _read_only(x), vector, vector, layout, 0, 3)
    with pytest.raises(ValueError, match='must be >= 1'):
        kernels.bn_normalize(x, np.empty_like(x), vector, vector, (2, 0, 16), 0, 0)


def _read_only(x):
    view = x.view()
    view.setflags(write=False)
    return view
