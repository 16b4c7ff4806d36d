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
# 64 values over a 3-d array, channels on axis 2, and one large enough to split across threads;
# then channel-last: 6 channels (fewer than a group of lanes), 64 (whole groups), (N, C), 20
# channels over several chunks of rows, and two large enough to split across threads by rows,
# one with a group of lanes cut short and a last chunk of rows cut short
SHAPES = [((4, 6, 7, 7), 1), ((3, 5, 16), 1), ((2, 3, 4, 64), 1), ((2, 3, 5, 32), 2),
          ((4, 32, 32, 32), 1), ((4, 7, 7, 6), 3), ((2, 5, 5, 64), 3), ((37, 20), 1),
          ((10, 15, 15, 20), 3), ((8, 16, 16, 64), 3), ((6, 24, 24, 21), 3)]
CHANNEL_LAST = [case for case in SHAPES if case[1] == len(case[0]) - 1]


class CountingKernels:
    """ember._kernels with a count of the calls per function."""

    def __init__(self):
        self.calls = {}

    def __getattr__(self, name):
        if not callable(getattr(kernels, name)):
            return getattr(kernels, name)

        def call(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return getattr(kernels, name)(*args, **kwargs)
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


def ran_compiled_forward(calls):
    """bn_train_forward ran, or for large channel-last data its sums and normalisation by rows
    (not oneDNN's statistics then bn_normalize)."""
    if 'bn_chunk_sums' in calls:
        return 'bn_normalize' in calls and 'bn_train_forward' not in calls
    return calls.get('bn_train_forward', 0) >= 1 and 'bn_normalize' not in calls


@pytest.mark.parametrize('shape, axis', SHAPES)
@pytest.mark.parametrize('fix_gamma', [False, True])
def test_training_forward_matches_float64(shape, axis, fix_gamma, counted):
    x = data(shape, axis)
    attrs, ins, outs = forward(x, axis, fix_gamma)
    assert ran_compiled_forward(counted)
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


@pytest.mark.parametrize('by_rows', [False, True])
def test_channel_last_variance_stays_exact_when_samples_differ_widely(by_rows):
    # in channel 0 the first chunk of rows, whose mean is the centre, sits far from the others,
    # so sums of deviations from it would cancel (an error of 5e-7): the kernels take the
    # deviations from the mean instead, and channel 1 keeps its sums (by rows, split across the
    # threads as the operator does)
    rows = 1 << 18
    x = data((rows, 2), 1, offset=0)
    x[:kernels.CHUNK_ROWS, 0] += 100
    x += 1000
    gamma, beta = bn_inputs(x, 1)[1:3]
    out, layout = np.empty_like(x), (rows, 2, 1)
    if by_rows:
        mean, var, _ = normalization._train_by_rows(x, out, gamma, beta,
                                                    {'eps': 1e-3, 'fix_gamma': False}, layout)
    else:
        mean, var, invstd = (np.empty(2, np.float32) for _ in range(3))
        kernels.bn_train_forward(x, out, gamma, beta, mean, var, invstd, layout, 0, 2, 1e-3,
                                 False)
    want_mean, want_var = reference_moments(x, 1)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-7)
    np.testing.assert_allclose(var, want_var, rtol=2e-7)


@pytest.mark.parametrize('shape, axis', SHAPES[:3] + CHANNEL_LAST)
@pytest.mark.parametrize('fix_gamma', [False, True])
def test_bn_apply_in_numpy_reproduces_the_compiled_forward(shape, axis, fix_gamma):
    x = data(shape, axis, seed=3)
    attrs, ins, outs = forward(x, axis, fix_gamma)
    again = [np.empty_like(x)]
    with hidden(True):
        registry.get('_bn_apply').kernel(attrs, ins[:3] + outs[1:], again,
                                         registry.KernelContext(None, is_train=True))
    np.testing.assert_array_equal(again[0], outs[0])


@pytest.mark.parametrize('shape, axis', SHAPES[:2] + CHANNEL_LAST)
def test_inference_normalises_like_numpy_bit_for_bit(shape, axis, counted):
    x = data(shape, axis, seed=4)
    with config.override(MXNET_MKLDNN_ENABLED=False):    # oneDNN takes channel-last inference
        _, _, outs = forward(x, axis, is_train=False)
        assert counted.get('bn_normalize') >= 1
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
    assert counted.get('bn_backward', 0) >= 1 or {'bn_chunk_sums', 'bn_data_grad'} <= set(counted)
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


@pytest.mark.parametrize('shape, layout', [((4, 8, 5, 5), (4, 8, 25)),
                                           ((1100, 40), (1100, 40, 1))])
def test_results_do_not_depend_on_the_split_of_channels(shape, layout):
    channels = layout[1]
    x = data(shape, 1, seed=9)
    dy = data(shape, 1, seed=10, offset=0)
    gamma, beta = bn_inputs(x, 1)[1:3]

    def run(ranges):
        out, stats = np.empty_like(x), [np.empty(channels, np.float32) for _ in range(3)]
        grads = [np.empty_like(x)] + [np.empty(channels, np.float32) for _ in range(2)]
        for lo, hi in ranges:
            kernels.bn_train_forward(x, out, gamma, beta, *stats, layout, lo, hi, 1e-3, False)
        for lo, hi in ranges:
            kernels.bn_backward(dy, x, gamma, stats[0], stats[2], *grads, layout, lo, hi, False,
                                True)
        return [out] + stats + grads
    whole = run([(0, channels)])
    cuts = sorted({0, 3, channels // 2 + 1, channels - 3, channels})    # across groups of lanes
    for ranges in ([(c, c + 1) for c in range(channels)], [(0, 0), (0, 3), (3, 3), (3, channels)],
                   list(zip(cuts, cuts[1:]))):
        for a, b in zip(whole, run(ranges)):
            np.testing.assert_array_equal(a, b)


def uneven_parallel_for(n, fn, split=None):
    """engine.parallel_for cutting [0, n) into uneven ranges, as if there were more threads."""
    bounds = sorted({0, n, n // 3, n // 3 + 1, 3 * n // 4})
    for lo, hi in zip(bounds, bounds[1:]):
        fn(lo, hi)


@pytest.mark.parametrize('shape, axis', CHANNEL_LAST[-2:] + [((3, 40, 40, 37), 3)])
@pytest.mark.parametrize('split', ['openmp team', 'kernel pool', 'uneven'])
def test_channel_last_by_rows_gives_the_kernels_results(shape, axis, split, monkeypatch,
                                                        counted):
    # large channel-last data is split by rows: the sums by chunks, added in order, and the
    # float32 operations after them repeat the kernels' for every channel in one call
    monkeypatch.setattr(normalization, 'use_team', split == 'openmp team')
    if split == 'uneven':
        monkeypatch.setattr(normalization.engine, 'parallel_for', uneven_parallel_for)
    x, dy = data(shape, axis, seed=11), data(shape, axis, seed=12, offset=0)
    channels = shape[axis]
    layout = (x.size // channels, channels, 1)
    attrs, ins, outs = forward(x, axis)
    assert 'bn_chunk_sums' in counted and 'bn_train_forward' not in counted
    gamma, beta = ins[1:3]
    want = [np.empty_like(x)] + [np.empty(channels, np.float32) for _ in range(3)]
    kernels.bn_train_forward(x, want[0], gamma, beta, *want[1:], layout, 0, channels,
                             attrs['eps'], False)
    for got, expected in zip(outs, [want[0], want[1], want[3]]):
        np.testing.assert_array_equal(got, expected)
    for fix_gamma, batch_stats in [(False, True), (True, True), (False, False)]:
        _, grads = backward(dy, x, axis, outs[1], outs[2], fix_gamma, batch_stats)
        expected = [np.empty_like(x)] + [np.empty(channels, np.float32) for _ in range(2)]
        kernels.bn_backward(dy, x, gamma, outs[1], outs[2], *expected, layout, 0, channels,
                            fix_gamma, batch_stats)
        for got, wanted in zip(grads, expected):
            np.testing.assert_array_equal(got, wanted)


def test_safe_accumulation_keeps_the_numpy_code_in_float64(counted):
    x = data((2, 3, 4, 16), 1)
    _, _, outs = forward(x, 1, safe_accumulation=True)
    assert 'bn_train_forward' not in counted
    _, _, want = forward(x, 1, compiled=False, safe_accumulation=True)
    for got, expected in zip(outs, want):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize('case', ['float64', 'short rows', 'pairs', 'strided', 'empty'])
def test_layouts_it_does_not_take_run_elsewhere(case, counted):
    # rows of 2 to 15 values are short and strided: only rows of 1 (channel-last) or 16 on
    x, axis = data((2, 3, 4, 16), 1), 1
    if case == 'float64':
        x = x.astype(np.float64)
    elif case == 'short rows':
        x = data((4, 32, 8), 1)
    elif case == 'pairs':
        x, axis = data((2, 3, 16, 2), 2), 2
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


def test_channel_last_kernel_arguments_are_checked():
    x = np.zeros((2000, 3), np.float32)
    vector = np.zeros(3, np.float32)
    layout, chunks = (2000, 3, 1), -(-2000 // kernels.CHUNK_ROWS)
    sums = np.zeros((chunks, 2, 3))
    with pytest.raises(ValueError, match=r'bn_chunk_sums: layout \(2, 3, 1000\): expected '
                                         r'inner == 1 \(channel-last data\)'):
        kernels.bn_chunk_sums(x, None, vector, sums, (2, 3, 1000), 0, 1)
    with pytest.raises(ValueError, match=rf'chunk range \[0, {chunks + 1}\): expected 0 <= '
                                         rf'first <= last <= {chunks}'):
        kernels.bn_chunk_sums(x, None, vector, sums, layout, 0, chunks + 1)
    with pytest.raises(TypeError, match="sums: expected float64 values, got buffer format 'f'"):
        kernels.bn_chunk_sums(x, None, vector, sums.astype(np.float32), layout, 0, 1)
    with pytest.raises(ValueError, match=f'sums: expected {chunks * 6} float64 values, got 6'):
        kernels.bn_chunk_sums(x, x, vector, sums[:1], layout, 0, 1)
    with pytest.raises(ValueError, match='bn_data_grad: layout'):
        kernels.bn_data_grad(x, x, *[vector] * 4, np.empty_like(x), (2, 3, 1000), True)
    with pytest.raises(ValueError, match='read-only'):
        kernels.bn_data_grad(x, x, *[vector] * 4, _read_only(x), layout, True)


def _team_calls(threads):
    """Every function that splits its work on the OpenMP team, on data of 7 chunks of rows
    (channel-last, 37 channels), with `threads`: its outputs."""
    rng = np.random.default_rng(21)
    rows, channels = 7 * kernels.CHUNK_ROWS - 100, 37
    layout = (rows, channels, 1)
    x, dy, residual = (rng.standard_normal((rows, channels)).astype(np.float32) + 0.5
                       for _ in range(3))
    scale, shift, centre, slope = (rng.standard_normal(channels).astype(np.float32)
                                   for _ in range(4))
    team = {'threads': threads}
    outs = {}
    sums = np.zeros((7, 2, channels))
    kernels.bn_chunk_sums(x, dy, centre, sums, layout, 0, 7, scale, shift, **team)
    outs['sums'] = sums
    outs['normalize'] = np.empty_like(x)
    kernels.bn_normalize(x, outs['normalize'], scale, shift, layout, 0, channels, True,
                         residual, **team)
    channel_first = np.ascontiguousarray(x.T)        # the team splits the channels [3, 30)
    outs['normalize channels'] = np.full_like(channel_first, np.nan)
    kernels.bn_normalize(channel_first, outs['normalize channels'], scale, shift,
                         (1, channels, rows), 3, 30, False, **team)
    outs['data_grad'] = np.empty_like(x)
    kernels.bn_data_grad(dy, x, centre, shift, slope, scale, outs['data_grad'], layout, True,
                         scale, shift, **team)
    outs['add_relu'] = np.full(x.size, np.nan, np.float32)
    kernels.add_relu(x.ravel(), dy.ravel(), outs['add_relu'], 5, x.size - 3, **team)
    outs['add_relu_grad'] = np.full(x.size, np.nan, np.float32)
    kernels.add_relu_grad(x.ravel(), dy.ravel(), residual.ravel(), outs['add_relu_grad'], 5,
                          x.size - 3, **team)
    return outs


@pytest.mark.parametrize('threads', [2, 3, 5])
def test_team_splits_give_the_results_of_one_call(threads):
    # without OpenMP the parts run one after the other: the same results either way
    one, split = _team_calls(1), _team_calls(threads)
    assert one.keys() == split.keys()
    for name in one:
        np.testing.assert_array_equal(split[name].view(np.uint8), one[name].view(np.uint8),
                                      err_msg=name)
    assert np.isnan(split['add_relu'][:5]).all() and np.isnan(split['add_relu'][-3:]).all()


def test_team_arguments_are_checked():
    x = np.zeros((2000, 3), np.float32)
    vector = np.zeros(3, np.float32)
    layout, chunks = (2000, 3, 1), -(-2000 // kernels.CHUNK_ROWS)
    sums = np.zeros((chunks, 2, 3))
    with pytest.raises(ValueError, match='threads: expected 1 to 1024, got 0'):
        kernels.bn_chunk_sums(x, None, vector, sums, layout, 0, 1, threads=0)
    with pytest.raises(ValueError, match='cores: expected one core for each of the 2 threads, '
                                         'got 1'):
        kernels.bn_normalize(x, np.empty_like(x), vector, vector, layout, 0, 3, threads=2,
                             cores=[0])
    with pytest.raises(ValueError, match='cores: expected core numbers >= 0, got -2'):
        kernels.bn_data_grad(x, x, *[vector] * 4, np.empty_like(x), layout, True, threads=2,
                             cores=[0, -2])
    with pytest.raises(TypeError, match=r'add_relu\(\) takes at most 5 positional arguments'):
        kernels.add_relu(x, x, np.empty_like(x), 0, 6, 2)      # threads: keyword-only
    with pytest.raises(ValueError, match='threads: expected 1 to 1024, got 2000'):
        kernels.add_relu_grad(x, x, x, np.empty_like(x), 0, 6, threads=2000)


@config.override(OMP_NUM_THREADS=2)
@pytest.mark.parametrize('team', [True, False], ids=['openmp team', 'kernel pool'])
def test_row_splits_run_on_the_team_where_the_module_has_one(team, monkeypatch):
    if team and not kernels.openmp:
        pytest.skip('ember._kernels is built without OpenMP')
    monkeypatch.setattr(normalization, 'use_team', team)
    asked, pool_splits = [], []

    class Recording:
        def __getattr__(self, name):
            function = getattr(kernels, name)
            if not callable(function):
                return function

            def call(*args, **kwargs):
                asked.append((name, kwargs.get('threads', 1)))
                return function(*args, **kwargs)
            return call

    real = normalization.engine.parallel_for

    def spy(n, fn, split=None):
        pool_splits.append(split)
        real(n, fn, split)
    monkeypatch.setattr(normalization, '_kernels', Recording())
    monkeypatch.setattr(normalization.engine, 'parallel_for', spy)
    x = data((16, 14, 14, 64), 3)
    _bn_then_relu(x, 3, np.ones_like(x), False, True, False, fused=True)
    split = [name for name, threads in asked if threads == 2]
    if team:
        # the statistics' two sums (the first chunk alone takes one thread), the
        # normalisation, the gradient's sums and its data gradient
        assert split == ['bn_chunk_sums', 'bn_normalize', 'bn_chunk_sums', 'bn_data_grad']
        assert not any(pool_splits)
    else:
        assert split == [] and any(pool_splits)


def _read_only(x):
    view = x.view()
    view.setflags(write=False)
    return view


# ----------------------------------------------------------------------------------------------
# BatchNormWithReLU: relu(BatchNorm(x)) bit for bit, the relu inside the compiled passes of
# large channel-last data (its gradient's mask recomputed from x), one pass more elsewhere.

def _bn_then_relu(x, axis, dy, fix_gamma, is_train, use_global_stats, fused, **ctx):
    """Forward outputs, moving statistics and the three gradients of BatchNorm then relu (two
    operators) or of BatchNormWithReLU."""
    name = '_contrib_BatchNormWithReLU' if fused else 'BatchNorm'
    op, back = registry.get(name), registry.get(
        '_backward_BatchNormWithReLU' if fused else '_backward_BatchNorm')
    attrs = op.parse_attrs({'fix_gamma': fix_gamma, 'axis': axis,
                            'use_global_stats': use_global_stats})
    ins = bn_inputs(x, axis)
    ins[3], ins[4] = ins[3] + 0.25, ins[4] * 1.5      # moving statistics in use
    outs = [np.full_like(x, np.nan)] + [np.full(x.shape[axis], np.nan, x.dtype)
                                        for _ in range(2)]
    context = registry.KernelContext(None, is_train=is_train, **ctx)
    op.kernel(attrs, ins, outs, context)
    grads = [np.full_like(x, np.nan)] + [np.full(x.shape[axis], np.nan, x.dtype)
                                         for _ in range(2)]
    if fused:
        back.kernel(attrs, [dy, x, ins[1], ins[2], outs[1], outs[2], outs[0]], grads, context)
    else:
        relu = registry.get('relu')
        y = np.empty_like(outs[0])
        relu.kernel(relu.parse_attrs({}), [outs[0]], [y], context)
        dbn = np.empty_like(dy)
        act = registry.get('_backward_Activation')
        act.kernel(act.parse_attrs({'act_type': 'relu'}), [dy, y], [dbn], context)
        back.kernel(attrs, [dbn, x, ins[1], outs[1], outs[2]], grads, context)
        outs[0] = y
    return outs + ins[3:] + grads


BN_RELU_CASES = [((16, 14, 14, 64), 3), ((8, 20, 20, 24), 3), ((4, 7, 7, 6), 3),
                 ((4, 16, 8, 8), 1), ((2, 3, 5, 32), 2)]


@pytest.mark.parametrize('shape, axis', BN_RELU_CASES)
@pytest.mark.parametrize('fix_gamma', [False, True])
@pytest.mark.parametrize('mode', ['train', 'global stats', 'inference'])
def test_batch_norm_with_relu_is_batch_norm_then_relu_bit_for_bit(shape, axis, fix_gamma, mode,
                                                                  counted):
    x = data(shape, axis, offset=0.3)
    x.reshape(-1)[::97] = 0.0                 # some normalised values land near zero
    dy = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    settings = dict(is_train=mode != 'inference', use_global_stats=mode == 'global stats')
    want = _bn_then_relu(x, axis, dy, fix_gamma, fused=False, **settings)
    counted.clear()
    got = _bn_then_relu(x, axis, dy, fix_gamma, fused=True, **settings)
    for name, a, b in zip(['out', 'mean', 'invstd', 'moving_mean', 'moving_var', 'dx',
                           'dgamma', 'dbeta'], got, want):
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert np.array_equal(np.signbit(a), np.signbit(b)), name
    assert (want[0] == 0).any() and (want[0] > 0).any()
    large_last = axis == len(shape) - 1 and x.size >= 1 << 16
    if large_last and mode == 'train':
        # the relu ran inside the normalisation and its mask inside the backward kernels
        assert counted.get('bn_normalize', 0) >= 1 and 'bn_train_forward' not in counted
        assert counted.get('bn_data_grad', 0) >= 1


def test_the_relu_mask_is_taken_inside_the_backward_kernels(monkeypatch):
    seen = []

    class Recording(CountingKernels):
        def __getattr__(self, name):
            function = getattr(kernels, name)
            if name not in ('bn_chunk_sums', 'bn_data_grad'):
                return function

            def call(*args, **kwargs):
                seen.append((name, len(args)))
                return function(*args, **kwargs)
            return call
    monkeypatch.setattr(normalization, '_kernels', Recording())
    x = data((16, 14, 14, 64), 3)
    dy = np.ones_like(x)
    _bn_then_relu(x, 3, dy, False, True, False, fused=True)
    # both with (mask_scale, mask_shift): 9 + 2 and 7 + 2 arguments; the statistics' sums
    # (forward) take no mask
    assert ('bn_data_grad', 11) in seen and ('bn_chunk_sums', 9) in seen
    assert all(n in (7, 9, 11) for _, n in seen)


def test_relu_mask_arguments_are_checked():
    x = np.ones((2000, 3), np.float32)
    vector = np.ones(3, np.float32)
    layout, chunks = (2000, 3, 1), -(-2000 // kernels.CHUNK_ROWS)
    sums = np.zeros((chunks, 2, 3))
    with pytest.raises(ValueError, match='mask_scale and mask_shift: expected both or neither'):
        kernels.bn_chunk_sums(x, x, vector, sums, layout, 0, 1, vector, None)
    with pytest.raises(ValueError, match='mask_shift: expected 3 float32 values, got 2'):
        kernels.bn_data_grad(x, x, *[vector] * 4, np.empty_like(x), layout, True, vector,
                             vector[:2])
    with pytest.raises(ValueError, match='a mask takes dy through relu'):
        kernels.bn_chunk_sums(x, None, vector, sums, layout, 0, 1, vector, vector)
    # relu of the normalisation: -0.0 and negatives become +0.0
    out = np.empty((2, 4), np.float32)
    kernels.bn_normalize(np.array([[-1, 0, 1, 2], [3, -4, 0.5, -0.0]], np.float32), out,
                         np.ones(4, np.float32), np.full(4, -0.5, np.float32), (2, 4, 1), 0, 4,
                         True)
    np.testing.assert_array_equal(out, [[0, 0, 0.5, 1.5], [2.5, 0, 0, 0]])
    assert not np.signbit(out).any()


@pytest.mark.parametrize('shape, axis', BN_RELU_CASES)
@pytest.mark.parametrize('mode', ['train', 'global stats'])
def test_batch_norm_add_relu_is_the_three_operators_bit_for_bit(shape, axis, mode, monkeypatch):
    seen = []

    class Recording(CountingKernels):
        def __getattr__(self, name):
            function = getattr(kernels, name)

            def call(*args, **kwargs):
                seen.append((name, len(args)))
                return function(*args, **kwargs)
            return call if callable(function) else function
    x = data(shape, axis, offset=0.3)
    residual = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    context = registry.KernelContext(None, is_train=True)
    results = []
    for fused in (False, True):
        bn = registry.get('_sg_bn_add_relu' if fused else 'BatchNorm')
        attrs = bn.parse_attrs({'fix_gamma': False, 'axis': axis,
                                'use_global_stats': mode == 'global stats'})
        ins = bn_inputs(x, axis)
        outs = [np.full_like(x, np.nan)] + [np.full(shape[axis], np.nan, np.float32)] * 2
        outs[2] = outs[2].copy()
        if fused:
            monkeypatch.setattr(normalization, '_kernels', Recording())
            bn.kernel(attrs, ins + [residual], outs, context)
            monkeypatch.setattr(normalization, '_kernels', kernels)
        else:
            bn.kernel(attrs, ins, outs, context)
            summed = np.empty_like(x)
            add, relu = registry.get('elemwise_add'), registry.get('relu')
            add.kernel(add.parse_attrs({}), [outs[0], residual], [summed], context)
            relu.kernel(relu.parse_attrs({}), [summed], [outs[0]], context)
        results.append(outs + ins[3:])
    for name, a, b in zip(['out', 'mean', 'invstd', 'moving_mean', 'moving_var'], *results):
        np.testing.assert_array_equal(a, b, err_msg=name)
        assert np.array_equal(np.signbit(a), np.signbit(b)), name
    if axis == len(shape) - 1 and x.size >= 1 << 16 and mode == 'train':
        # the sum and the relu inside the normalisation (x, out, scale, shift, layout, lo, hi,
        # relu, residual)
        assert ('bn_normalize', 9) in seen
