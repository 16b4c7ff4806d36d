"""The CPU convolution algorithms and how MXNET_CUDNN_AUTOTUNE_DEFAULT, the workspace limit,
MXNET_CPU_NNPACK_NTHREADS and MXNET_ENFORCE_DETERMINISM choose between them.

Every algorithm is checked against a float64 direct convolution (NCHW and NHWC, groups,
stride, dilation, padding, bias, and the residual + ReLU of ``_sg_conv``, in place too); the
choice is checked by spying on the measuring function and on the Winograd kernel. The data
and weight gradients are chosen the same way among their own algorithms.
"""
import dataclasses

import numpy as np
import pytest

import ember as mx
from ember import config, engine
from ember.op import registry
from ember.op.nn import onednn_provider
from ember.op.nn.conv import (
    algorithms, common, compiled, convolution, kept, line, tuning, winograd,
    winograd_compiled)
from ember.op.nn.conv.state import LINE, STATE, TRANSFORMED
from ember.op.nn.conv.convolution import problem_of

CONV = registry.get('Convolution')
SG_CONV = registry.get('_sg_conv')


def direct(x, w, stride, pad, dilate, groups):
    """float64 NCHW reference: one einsum per kernel tap over the zero-padded input."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, width = x.shape
    f, cg, kh, kw = w.shape
    padded = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - dilate[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (width + 2 * pad[1] - dilate[1] * (kw - 1) - 1) // stride[1] + 1
    out, fg = np.zeros((n, f, oh, ow)), f // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                top, left = i * dilate[0], j * dilate[1]
                patch = padded[:, g * cg:(g + 1) * cg,
                               top:top + stride[0] * (oh - 1) + 1:stride[0],
                               left:left + stride[1] * (ow - 1) + 1:stride[1]]
                out[:, g * fg:(g + 1) * fg] += np.einsum(
                    'nchw,fc->nfhw', patch, w[g * fg:(g + 1) * fg, :, i, j])
    return out


class Case:
    """A convolution in both layouts with its float64 expectation (NCHW)."""

    def __init__(self, batch, channels, filters, size, kernel, stride=1, pad=0, dilate=1,
                 groups=1, seed=0):
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
        self.w = rng.standard_normal((filters, channels // groups, kernel, kernel)).astype(
            np.float32)
        self.bias = rng.standard_normal(filters).astype(np.float32)
        self.kwargs = dict(kernel=(kernel, kernel), stride=(stride, stride), pad=(pad, pad),
                           dilate=(dilate, dilate), num_filter=filters, num_group=groups)
        self.expected = direct(self.x, self.w, (stride,) * 2, (pad,) * 2, (dilate,) * 2,
                               groups) + self.bias[None, :, None, None]
        self.residual = rng.standard_normal(self.expected.shape).astype(np.float32)

    def arrays(self, layout):
        """x, w, expected conv + bias and residual in `layout` (OHWI weights for NHWC)."""
        if layout == 'NCHW':
            return self.x, self.w, self.expected, self.residual
        last = (0, 2, 3, 1)
        return (np.ascontiguousarray(self.x.transpose(last)),
                np.ascontiguousarray(self.w.transpose(last)), self.expected.transpose(last),
                np.ascontiguousarray(self.residual.transpose(last)))

    def attrs(self, op, layout, **extra):
        return op.parse_attrs(dict(self.kwargs, layout=layout, **extra))


CASES = {
    '3x3 pad': Case(2, 8, 8, 9, 3, pad=1),
    '3x3 odd': Case(1, 16, 8, 7, 3, pad=1),
    '3x3 stride 2': Case(2, 8, 8, 10, 3, stride=2, pad=1),
    '3x3 dilate 2': Case(2, 8, 12, 9, 3, pad=2, dilate=2),
    '3x3 groups': Case(2, 8, 8, 9, 3, groups=2),
    '3x3 depthwise': Case(2, 6, 6, 5, 3, pad=1, groups=6),
    '1x1': Case(2, 8, 8, 9, 1),
    '1x1 stride 2': Case(2, 8, 8, 9, 1, stride=2),
    '5x5': Case(3, 4, 6, 11, 5, pad=2),
    '7x7 stride 2 rgb': Case(2, 3, 8, 17, 7, stride=2, pad=3),
    '3x3 wide': Case(1, 64, 32, 14, 3, pad=1),
    '3x3 large': Case(1, 8, 8, 100, 3, pad=1),    # the epilogue works in several blocks
    '3x3 many filters': Case(2, 16, 200, 6, 3, pad=1),    # few rows: parts share filters
    '1x1 many filters stride 2': Case(1, 32, 192, 9, 1, stride=2),
}
NAMES = ('gemm', 'winograd2', 'winograd4', 'winograd4_fused', 'onednn')


def scratch(specs):
    return [np.empty(shape, dtype) for shape, dtype in specs]


def assert_close(out, expected):
    """float32 tolerance: Winograd F(4x4)'s transforms round to ~1e-5 of the largest output."""
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def run_algorithm(name, case, layout, residual=False, act_type=None, budget=None, threads=2):
    """(result, expectation) of algorithm `name` on `threads` kernel threads, or None when it
    does not support the case."""
    x, w, expected, res = case.arrays(layout)
    attrs = case.attrs(CONV, layout)
    problem = problem_of(attrs, x)
    algorithm = algorithms.ALGORITHMS[name]
    if not algorithm.supports(problem) or (name == 'onednn' and not onednn_provider.enabled()):
        return None
    out = np.empty(expected.shape, np.float32)
    call = algorithms.ConvCall(attrs, x, w, case.bias, out)
    if residual:
        out[...] = res
        call.residual, call.act_type = out, act_type   # in place, as _sg_conv may run
        expected = np.maximum(expected + res, 0)
    with config.override(MXNET_CPU_PARALLEL_SIZE=1):       # split even small cases
        assert algorithm.run(problem, call, budget, scratch, threads)
    return out, expected


def test_a_problem_is_worked_out_once_per_shape():
    # every call of a layer asks for its problem: the same object comes back, with its window
    # and FLOPs already known; a gradient, a new batch size or a new stride is another problem
    attrs = CASES['3x3 pad'].attrs(CONV, 'NHWC')
    x = CASES['3x3 pad'].arrays('NHWC')[0]
    problem = problem_of(attrs, x)
    assert problem_of(attrs, x.copy()) is problem
    assert (problem.channel_last, problem.batch, problem.gradient) == (True, x.shape[0], '')
    weight = problem_of(attrs, x, 'weight')
    assert weight.gradient == 'weight' and weight == dataclasses.replace(problem,
                                                                         gradient='weight')
    assert problem_of(attrs, x[:1]).batch == 1
    strided = problem_of({**attrs, 'stride': (2, 2)}, x)
    assert strided.stride == (2, 2) and strided.size_out != problem.size_out


def _supported(name, case, layout):
    x = CASES[case].arrays(layout)[0]
    return algorithms.ALGORITHMS[name].supports(problem_of(CASES[case].attrs(CONV, layout),
                                                           x))


# every algorithm on every case it supports (Winograd runs only 3x3 stride 1, ...)
SUPPORTED = [(name, case, layout) for name in NAMES for case in CASES
             for layout in ('NCHW', 'NHWC') if _supported(name, case, layout)]


@pytest.mark.parametrize('threads', [1, 3])
@pytest.mark.parametrize('name, case, layout', SUPPORTED)
def test_every_algorithm_matches_the_direct_convolution(name, case, layout, threads):
    result = run_algorithm(name, CASES[case], layout, budget=1 << 14, threads=threads)
    if result is None:
        pytest.skip('oneDNN is not available')
    assert_close(*result)


def test_each_algorithm_supports_some_case():
    assert {name for name, _, _ in SUPPORTED} == set(NAMES)


@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
@pytest.mark.parametrize('name', NAMES)
def test_a_whole_batch_at_once_matches_too(name, layout):
    result = run_algorithm(name, CASES['3x3 large'], layout, residual=True, act_type='relu',
                           threads=1)
    if result is not None:
        assert_close(*result)


@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
@pytest.mark.parametrize('name', NAMES)
def test_residual_and_relu_are_applied_in_place(name, layout):
    for case in ('3x3 pad', '1x1', '3x3 odd'):
        result = run_algorithm(name, CASES[case], layout, residual=True, act_type='relu')
        if result is not None:
            assert_close(*result)


def test_winograd_supports_only_unit_stride_undilated_3x3():
    problems = {case: problem_of(CASES[case].attrs(CONV, 'NCHW'), CASES[case].x)
                for case in CASES}
    supported = {case for case, p in problems.items() if winograd.supports(p)}
    assert supported == {'3x3 pad', '3x3 odd', '3x3 wide', '3x3 large', '3x3 many filters'}


def test_copy_windows_zero_fills_a_tap_that_lies_in_the_padding():
    src = np.arange(6.0).reshape(1, 6)
    dst = np.full((1, 2), 7.0)
    common.copy_windows(src, dst, (1,), (6,), (1,))
    assert dst.tolist() == [[0.0, 0.0]]
    common.copy_windows(src, dst, (1,), (-3,), (3,))      # src[-3], src[0]
    assert dst.tolist() == [[0.0, 0.0]]
    common.copy_windows(src, dst, (1,), (-1,), (3,))      # src[-1], src[2]
    assert dst.tolist() == [[0.0, 2.0]]


# ----------------------------------------------------------------------------------------------
# Through the operators: _sg_conv's residual in place, every algorithm forced.

@pytest.fixture
def forced(force_conv):
    """force(name): every convolution call runs algorithm `name`."""
    return force_conv


@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
@pytest.mark.parametrize('name', NAMES)
def test_sg_conv_adds_its_residual_over_itself(forced, name, layout):
    if name == 'onednn' and not onednn_provider.enabled():
        pytest.skip('oneDNN is not available')
    forced(name)
    case = CASES['3x3 wide']
    x, w, expected, res = case.arrays(layout)
    attrs = case.attrs(SG_CONV, layout, with_sum=True, act_type='relu')
    out = res.copy()
    ctx = registry.KernelContext(None)
    SG_CONV.kernel(attrs, [x, w, case.bias, out], [out], ctx)
    assert_close(out, np.maximum(expected + res, 0))


# ----------------------------------------------------------------------------------------------
# MXNET_CUDNN_AUTOTUNE_DEFAULT

@pytest.fixture
def measured(monkeypatch):
    """The candidates of every measurement, in order; the choice cache starts empty."""
    calls = []
    real = algorithms.measure

    def spy(problem, candidates, trial):
        calls.append([a.name for a in candidates])
        return real(problem, candidates, trial)
    monkeypatch.setattr(algorithms, 'measure', spy)
    STATE.choices.clear()
    yield calls
    STATE.choices.clear()


def nd_conv(case, layout='NCHW', **extra):
    x, w, expected, _ = case.arrays(layout)
    y = mx.nd.Convolution(mx.nd.array(x), mx.nd.array(w), mx.nd.array(case.bias),
                          layout=layout, **case.kwargs, **extra)
    assert_close(y.asnumpy(), expected)


BIG = Case(1, 128, 128, 8, 3, pad=1)    # 19 MFLOP: measured; Winograd's weights exceed 1 MB


def test_value_0_picks_by_rule_and_never_measures(measured):
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        nd_conv(BIG)
        nd_conv(BIG, 'NHWC')
    assert measured == []


def test_value_1_measures_once_per_problem_then_reuses_the_choice(measured):
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='1'):
        for _ in range(3):
            nd_conv(BIG)
        nd_conv(BIG, 'NHWC')                # another layout: another problem
    assert len(measured) == 2
    assert 'gemm' in measured[0] and 'winograd4' in measured[0]
    chosen = {key[0].channel_last: name for key, name in STATE.choices.snapshot().items()}
    assert set(chosen) == {False, True} and set(chosen.values()) <= set(NAMES)


def test_value_2_measures_what_value_1_leaves_out_for_its_workspace(measured):
    problem = problem_of(BIG.attrs(CONV, 'NCHW'), BIG.x)
    winograd = algorithms.ALGORITHMS['winograd4']
    gemm = algorithms.ALGORITHMS['gemm']
    assert gemm.scratch(problem, 1) < 1 << 20 < winograd.scratch(problem, 1)
    for mode in ('1', '2'):
        with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT=mode):
            nd_conv(BIG, workspace=1)
    limited, unlimited = measured
    assert 'gemm' in limited and 'winograd4' not in limited and 'winograd2' not in limited
    assert 'winograd4' in unlimited
    # NumPy's F(2x2) is measured only where oneDNN does not run the layer
    assert ('winograd2' in unlimited) == (not onednn_provider.enabled())


def test_numpy_winograd_is_left_out_where_onednn_runs():
    problem = problem_of(BIG.attrs(CONV, 'NHWC'), BIG.arrays('NHWC')[0])
    names = [a.name for a in algorithms.candidates(problem, onednn=True)]
    assert 'onednn' in names and 'winograd2' not in names
    assert 'winograd2' in [a.name for a in algorithms.candidates(problem, onednn=False)]
    wide = dataclasses.replace(problem, dtype='float64')        # oneDNN runs float32 only
    assert 'winograd2' in [a.name for a in algorithms.candidates(wide, onednn=True)]


@pytest.mark.parametrize('gemm_seconds, chosen', [(0.95, 'onednn'), (0.5, 'gemm')])
def test_measurement_keeps_onednn_unless_clearly_beaten(monkeypatch, gemm_seconds, chosen):
    monkeypatch.setattr(algorithms, 'measure',
                        lambda problem, candidates, trial: {'onednn': 1.0, 'gemm': gemm_seconds})
    STATE.choices.clear()
    problem = problem_of(BIG.attrs(CONV, 'NHWC'), BIG.arrays('NHWC')[0])
    try:
        picked = algorithms.choose(problem, '1', 1 << 30, True, lambda algorithm: True)
    finally:
        STATE.choices.clear()
    assert picked.name == chosen


@pytest.mark.parametrize('gradient, chosen', [('', 'onednn'), ('data', 'gemm'),
                                               ('weight', 'gemm')])
def test_a_gradient_takes_the_measured_fastest(monkeypatch, gradient, chosen):
    # the margin keeps oneDNN for a forward convolution 5% slower; a gradient takes the other
    monkeypatch.setattr(algorithms, 'measure',
                        lambda problem, candidates, trial: {'onednn': 1.0, 'gemm': 0.95})
    STATE.choices.clear()
    x = BIG.arrays('NHWC')[0]
    problem = problem_of(BIG.attrs(CONV, 'NHWC'), x, gradient)
    try:
        picked = algorithms.choose(problem, '1', 1 << 30, True, lambda algorithm: True)
    finally:
        STATE.choices.clear()
    assert picked.name == chosen


def _timed_trials(durations):
    """A trial for algorithms.measure: the calls in order, each algorithm's calls sleeping
    the next of its `durations` (the last one repeating); 'declines' declines."""
    import time
    calls = []

    def trial(algorithm):
        if algorithm.name == 'declines':
            return False
        mine = durations[algorithm.name]
        time.sleep(mine[min(sum(c == algorithm.name for c in calls), len(mine) - 1)])
        calls.append(algorithm.name)
        return True
    return trial, calls


def test_measurement_takes_turns_and_keeps_each_best(monkeypatch):
    # a's first timed call is slow (another process, say): measured in turns, the slow call
    # is one of several and the best of a's rounds wins; what declines is left out
    fast, slow = 0.001, 0.03
    trial, calls = _timed_trials({'a': [fast, slow, fast], 'b': [0.004]})
    names = [algorithms.Algorithm(name, None, None, None)
             for name in ('a', 'declines', 'b')]
    seconds = algorithms.measure(None, names, trial)
    assert set(seconds) == {'a', 'b'}
    assert seconds['a'] < 0.003 < seconds['b']
    assert calls[:2] == ['a', 'b']                  # the warm-ups, then rounds in turns
    rounds = calls[2:]
    assert rounds[0::2] == ['a'] * (len(rounds) // 2) and rounds[1::2] == ['b'] * (len(rounds) // 2)
    assert tuning.TUNING.measure_rounds <= len(rounds) // 2 <= tuning.TUNING.measure_max_rounds


def test_measurement_of_slow_layers_stops_after_the_minimum_rounds(conv_tuning):
    conv_tuning(measure_seconds=0.0)
    trial, calls = _timed_trials({'a': [0.0], 'b': [0.0]})
    names = [algorithms.Algorithm(name, None, None, None) for name in 'ab']
    algorithms.measure(None, names, trial)
    assert len(calls) == 2 + 2 * tuning.TUNING.measure_rounds
    conv_tuning(measure_seconds=60.0)
    calls.clear()
    algorithms.measure(None, names, trial)
    assert len(calls) == 2 + 2 * tuning.TUNING.measure_max_rounds


def test_cudnn_tune_of_the_operator_overrides_the_variable(measured):
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='1'):
        nd_conv(BIG, cudnn_tune='off')
    assert measured == []
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        nd_conv(BIG, cudnn_tune='fastest')
    assert len(measured) == 1


def test_small_problems_take_the_rule(measured):
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='2'):
        nd_conv(CASES['3x3 pad'])
    assert measured == []


def test_the_rule_is_winograd_for_wide_3x3_pointwise_for_1x1_and_gemm_elsewhere():
    def rule(batch, channels, size, kernel=3, stride=1):
        problem = algorithms.ConvProblem(True, batch, channels, channels, 1,
                                         (kernel, kernel), (stride, stride), (1, 1),
                                         (kernel // 2,) * 2, (size, size), 'float32')
        return algorithms.numpy_rule(problem).name
    assert rule(8, 64, 56) == rule(8, 128, 28) == rule(8, 256, 14) == rule(1, 128, 28)
    assert rule(8, 128, 28) == 'winograd2'
    assert rule(8, 128, 28, stride=2) == 'gemm'
    built = compiled.MODULE is not None
    assert rule(8, 128, 28, kernel=1) == ('pointwise' if built else 'gemm')
    assert rule(8, 128, 28, kernel=1, stride=2) == ('pointwise' if built else 'gemm')
    assert rule(8, 16, 56) == 'gemm'           # few channels
    assert rule(1, 256, 14) == 'gemm'          # 49 tiles
    assert rule(8, 512, 7) == 'gemm'           # 16 MB of transformed weights
    line = algorithms.ConvProblem(True, 8, 192, 192, 1, (1, 7), (1, 1), (1, 1), (0, 3),
                                  (17, 17), 'float32')
    assert algorithms.numpy_rule(line).name == ('winograd_line' if built else 'gemm')
    channel_first = dataclasses.replace(line, channel_last=False)
    assert algorithms.numpy_rule(channel_first).name == 'gemm'


def test_determinism_takes_the_rule_and_repeats_bit_for_bit(measured):
    results = []
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='1', MXNET_ENFORCE_DETERMINISM=True):
        for _ in range(2):
            x, w, _, _ = BIG.arrays('NHWC')
            y = mx.nd.Convolution(mx.nd.array(x), mx.nd.array(w), mx.nd.array(BIG.bias),
                                  layout='NHWC', **BIG.kwargs)
            results.append(y.asnumpy().tobytes())
    assert measured == [] and results[0] == results[1]


# ----------------------------------------------------------------------------------------------
# The data and weight gradients, chosen like the convolution

def gradients(case, layout, **extra):
    """Convolution's data and weight gradients of `case` for an output gradient of ones."""
    x, w, _, _ = case.arrays(layout)
    data, weight = mx.nd.array(x), mx.nd.array(w)
    data.attach_grad()
    weight.attach_grad()
    with mx.autograd.record():
        y = mx.nd.Convolution(data, weight, mx.nd.array(case.bias), layout=layout,
                              **case.kwargs, **extra)
    y.backward(mx.nd.ones(y.shape))
    return data.grad.asnumpy(), weight.grad.asnumpy()


def gradient_choices(kind):
    return {key[0].channel_last: name for key, name in STATE.choices.snapshot().items()
            if key[0].gradient == kind}


def test_the_gradients_are_measured_among_their_own_algorithms(measured, monkeypatch):
    measured_gradients = []
    spy = algorithms.measure

    def gradient_spy(problem, candidates, trial):
        measured_gradients.append((problem.gradient, [a.name for a in candidates]))
        return spy(problem, candidates, trial)
    monkeypatch.setattr(algorithms, 'measure', gradient_spy)
    expected = {}
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        for layout in ('NCHW', 'NHWC'):
            expected[layout] = gradients(BIG, layout)
    assert measured == [] and gradient_choices('data') == gradient_choices('weight') == {}
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='2'):
        for layout in ('NCHW', 'NHWC'):
            for got, want in zip(gradients(BIG, layout), expected[layout]):
                assert_close(got, want)
    backward = [names for gradient, names in measured_gradients if gradient]
    assert len(backward) == 4                       # data and weight, in each layout
    wanted = {'gemm', 'winograd4'} if compiled.MODULE is not None else {'gemm'}
    if onednn_provider.enabled():
        wanted.add('onednn')
    assert all(set(names) == wanted for names in backward)
    assert set(gradient_choices('data')) == set(gradient_choices('weight')) == {False, True}


@pytest.mark.parametrize('kind', ['data', 'weight'])
def test_the_rule_and_determinism_keep_the_gradients_off_winograd(measured, kind):
    problem = dataclasses.replace(problem_of(BIG.attrs(CONV, 'NCHW'), BIG.x), gradient=kind)
    assert rule_of(problem, onednn=True) == 'onednn'
    assert rule_of(problem, onednn=False) == 'gemm'
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='1', MXNET_ENFORCE_DETERMINISM=True):
        first = gradients(BIG, 'NCHW')
        again = gradients(BIG, 'NCHW')
    assert measured == []
    assert all(a.tobytes() == b.tobytes() for a, b in zip(first, again))


def rule_of(problem, onednn):
    return algorithms.rule(problem, onednn).name


@pytest.mark.skipif(compiled.MODULE is None, reason='ember._winograd is not built')
@pytest.mark.parametrize('layout', ['NCHW', 'NHWC'])
@pytest.mark.parametrize('case', ['3x3 pad', '3x3 odd', '3x3 many filters'])
def test_gradients_by_winograd_match_the_rule(force_conv, case, layout):
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        expected = gradients(CASES[case], layout)
    force_conv('gemm', gradient='winograd4')
    for got, want in zip(gradients(CASES[case], layout), expected):
        assert_close(got, want)


# ----------------------------------------------------------------------------------------------
# The data gradient of strided 1x1 layers: oneDNN's stride-1 one over the output pixels, then
# spread out with zeros between (onednn_spread)

spread_kernel = algorithms._kernels
needs_spread = pytest.mark.skipif(spread_kernel is None or not onednn_provider.enabled(),
                                  reason='needs ember._kernels and oneDNN')


@pytest.mark.skipif(spread_kernel is None, reason='ember._kernels is not built')
@pytest.mark.parametrize('shape, strides', [((2, 9, 9, 5), (2, 2)), ((1, 10, 7, 3), (3, 2)),
                                            ((3, 4, 6, 17), (1, 4)), ((1, 1, 1, 2), (2, 2))])
@pytest.mark.parametrize('threads', [1, 2])
def test_spread_writes_every_value_of_its_output(shape, strides, threads):
    src_shape = (shape[0], -(-shape[1] // strides[0]), -(-shape[2] // strides[1]), shape[3])
    src = np.random.default_rng(0).standard_normal(src_shape).astype(np.float32)
    dst = np.full(shape, np.nan, np.float32)
    spread_kernel.spread(src, dst, *strides, threads=threads)
    expected = np.zeros(shape, np.float32)
    expected[:, ::strides[0], ::strides[1]] = src
    assert dst.tobytes() == expected.tobytes()


@pytest.mark.skipif(spread_kernel is None, reason='ember._kernels is not built')
def test_spread_names_what_is_wrong_with_its_arguments():
    src, dst = np.zeros((2, 5, 5, 3), np.float32), np.zeros((2, 9, 9, 3), np.float32)
    with pytest.raises(ValueError, match=r'strides must be at least 1, got \(0, 2\)'):
        spread_kernel.spread(src, dst, 0, 2)
    with pytest.raises(ValueError, match=r'expected \(2, 3, 3, 3\)'):
        spread_kernel.spread(src, dst, 3, 3)
    with pytest.raises(ValueError, match='must be 4-D'):
        spread_kernel.spread(src[0], dst, 2, 2)
    with pytest.raises(TypeError, match='src: expected float32'):
        spread_kernel.spread(src.astype(np.float64), dst, 2, 2)
    with pytest.raises(ValueError, match='not C-contiguous'):
        spread_kernel.spread(src, dst[:, ::2], 2, 2)


def strided_pointwise(stride, size=(9, 7), channels=24, filters=40, seed=0):
    """attrs, x, w (OHWI) and a random output gradient of a channel-last 1x1 layer."""
    rng = np.random.default_rng(seed)
    attrs = CONV.parse_attrs(dict(kernel=(1, 1), stride=stride, num_filter=filters,
                                  layout='NHWC', no_bias=True))
    x = rng.standard_normal((2,) + size + (channels,)).astype(np.float32)
    w = rng.standard_normal((filters, 1, 1, channels)).astype(np.float32)
    out = tuple(-(-n // s) for n, s in zip(size, stride))
    dy = rng.standard_normal((2,) + out + (filters,)).astype(np.float32)
    return attrs, x, w, dy


@needs_spread
@pytest.mark.parametrize('stride', [(2, 2), (3, 2), (1, 2)])
def test_strided_pointwise_data_gradient_spreads_the_unstrided_one(stride):
    attrs, x, w, dy = strided_pointwise(stride)
    problem = problem_of(attrs, x, 'data')
    algorithm = algorithms.DATA_GRADIENT_ALGORITHMS['onednn_spread']
    assert algorithm in algorithms.candidates(problem, onednn=True)
    assert algorithm not in algorithms.candidates(problem, onednn=False)
    dx = np.full(x.shape, np.nan, np.float32)
    call = algorithms.ConvCall(attrs, dy, w, None, dx)
    assert algorithm.run(problem, call, None, scratch, 2)
    expected = np.zeros(x.shape)
    expected[:, ::stride[0], ::stride[1]] = dy.astype(np.float64) @ w[:, 0, 0].astype(np.float64)
    np.testing.assert_allclose(dx, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@needs_spread
def test_spread_is_only_for_strided_channel_last_1x1_data_gradients():
    supports = algorithms.DATA_GRADIENT_ALGORITHMS['onednn_spread'].supports
    attrs, x, _, _ = strided_pointwise((2, 2))
    assert supports(problem_of(attrs, x, 'data'))
    assert not supports(problem_of(attrs, x, 'weight'))
    assert not supports(problem_of(dict(attrs, stride=(1, 1)), x, 'data'))
    assert not supports(problem_of(dict(attrs, pad=(1, 1)), x, 'data'))
    assert not supports(problem_of(dict(attrs, kernel=(3, 3)), x, 'data'))
    nchw = dict(attrs, layout='NCHW')
    assert not supports(problem_of(nchw, np.ascontiguousarray(x.transpose(0, 3, 1, 2)), 'data'))


@needs_spread
def test_a_strided_pointwise_layer_trains_through_the_spread(monkeypatch):
    attrs, x, w, dy = strided_pointwise((2, 2), size=(8, 8))
    kwargs = {k: attrs[k] for k in ('kernel', 'stride', 'num_filter', 'layout', 'no_bias')}

    def data_gradient():
        data = mx.nd.array(x)
        data.attach_grad()
        with mx.autograd.record():
            y = mx.nd.Convolution(data, mx.nd.array(w), **kwargs)
        y.backward(mx.nd.array(dy))
        return data.grad.asnumpy()
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        expected = data_gradient()
    calls, real = [], algorithms.DATA_GRADIENT_ALGORITHMS['onednn_spread']

    def spy(*args):
        calls.append(args[0])
        return real.run(*args)
    spread = dataclasses.replace(real, run=spy)
    rule = algorithms.rule
    monkeypatch.setattr(algorithms, 'choose', lambda problem, *args, **kwargs: (
        spread if problem.gradient == 'data' else rule(problem, True)))
    got = data_gradient()
    assert len(calls) == 1 and calls[0].gradient == 'data'
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


# ----------------------------------------------------------------------------------------------
# MXNET_CPU_NNPACK_NTHREADS

def test_nnpack_threads_reach_the_winograd_kernel(monkeypatch):
    seen = []
    real = winograd.winograd

    def spy(*args, **kwargs):
        seen.append(args[11] if len(args) > 11 else kwargs.get('threads'))
        return real(*args, **kwargs)
    monkeypatch.setattr(winograd, 'winograd', spy)
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0', MXNET_MKLDNN_ENABLED=False):
        for threads in (1, 64):
            with config.override(MXNET_CPU_NNPACK_NTHREADS=threads):
                nd_conv(Case(4, 64, 64, 16, 3, pad=1), 'NHWC')
    assert seen == [1, engine.kernel_threads()]       # capped at the operator's threads


def blas_threads():
    """Thread counts of the BLAS that NumPy's GEMMs run on (another library's, SciPy's when a
    test imported it, is none of the kernels' business)."""
    from threadpoolctl import threadpool_info
    return {pool['num_threads'] for pool in threadpool_info()
            if pool['user_api'] == 'blas' and 'numpy' in pool['filepath']}


@pytest.mark.skipif(config.cpu_count() < 2, reason='BLAS runs one thread on one core')
def test_parts_run_their_gemms_on_one_blas_thread_each():
    before, seen = blas_threads(), []
    with config.override(MXNET_CPU_PARALLEL_SIZE=1):
        common.run_parts(2, 1000, lambda part: seen.append((part, blas_threads())))
    assert sorted(seen) == [(0, {1}), (1, {1})] and blas_threads() == before


@pytest.mark.skipif(config.cpu_count() < 2, reason='BLAS runs one thread on one core')
def test_parts_of_compiled_kernels_leave_blas_alone(monkeypatch):
    # kernels that call no BLAS (the compiled Winograd) skip setting its threads, ~50 us
    def limit():
        raise AssertionError('BLAS limited for parts that do not use it')
    monkeypatch.setattr(common, 'single_threaded_blas', limit)
    before, seen = blas_threads(), []
    with config.override(MXNET_CPU_PARALLEL_SIZE=1):
        common.run_parts(2, 1000, lambda part: seen.append(part), blas=False)
    assert sorted(seen) == [0, 1] and blas_threads() == before


@pytest.mark.skipif(config.cpu_count() < 2, reason='BLAS runs one thread on one core')
def test_any_thread_limits_blas_whoever_set_it_before():
    import threading
    from threadpoolctl import threadpool_limits
    with threadpool_limits(2, user_api='blas'):     # this thread now controls OpenBLAS
        seen = []

        def limited():
            with common.single_threaded_blas():
                seen.append(blas_threads())
        worker = threading.Thread(target=limited)
        worker.start()
        worker.join()
        assert seen == [{1}] and blas_threads() == {2}


# ----------------------------------------------------------------------------------------------
# oneDNN: forward and backward go through the provider when it is enabled

@pytest.mark.skipif(not onednn_provider.enabled(), reason='oneDNN is not available')
@pytest.mark.parametrize('enabled', [True, False])
def test_onednn_runs_forward_and_backward_when_enabled(monkeypatch, enabled):
    calls = []
    for name in ('convolution_forward', 'convolution_backward_data',
                 'convolution_backward_weights'):
        real = getattr(onednn_provider, name)
        monkeypatch.setattr(onednn_provider, name,
                            lambda *a, _real=real, _name=name, **k: calls.append(_name)
                            or _real(*a, **k))
    case = CASES['3x3 wide']
    x, w = mx.nd.array(case.x), mx.nd.array(case.w)
    x.attach_grad(), w.attach_grad()
    with config.override(MXNET_MKLDNN_ENABLED=enabled, MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        with mx.autograd.record():
            y = mx.nd.Convolution(x, w, kernel=(3, 3), pad=(1, 1), num_filter=32, no_bias=True)
        y.backward(mx.nd.ones(y.shape))
        mx.nd.waitall()
    expected = {'convolution_forward', 'convolution_backward_data',
                'convolution_backward_weights'} if enabled else set()
    assert set(calls) == expected
    np.testing.assert_allclose(y.asnumpy(), case.expected - case.bias[None, :, None, None],
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.asnumpy()[0, 0, 1, 1], case.x[:, 0].sum(), rtol=1e-4)


@pytest.mark.skipif(not onednn_provider.enabled(), reason='oneDNN is not available')
def test_measured_scratch_is_freed_when_onednn_wins(monkeypatch):
    from ember import resource
    monkeypatch.setattr(algorithms, 'fastest', lambda seconds, margin, incumbent=None: 'onednn')
    STATE.choices.clear()
    x = mx.nd.array(np.random.default_rng(0).standard_normal((2, 32, 16, 16)), dtype='float32')
    w = mx.nd.array(np.random.default_rng(1).standard_normal((32, 32, 3, 3)), dtype='float32')
    temps, _ = resource.copies(mx.cpu())
    mx.nd.waitall()
    for temp in temps:                   # earlier operators' scratch
        temp.release()
    try:
        with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='2'):
            mx.nd.Convolution(x, w, kernel=(3, 3), pad=(1, 1), num_filter=32,
                              no_bias=True).wait_to_read()
        # Winograd and GEMM ran as candidates and took scratch; oneDNN needs none
        assert all(t.capacity == 0 for t in temps)
    finally:
        STATE.choices.clear()


@pytest.mark.skipif(compiled.MODULE is None, reason='ember._winograd is not built')
@pytest.mark.parametrize('size, mode, measured', [
    (7, '1', False),     # 512 channels at 7x7: 38 MB of transformed weights, 0.1 MB of output
    (7, '2', True),      # mode 2 lifts the limits
    (56, '1', True)])    # the same weights beside a 6 MB output
def test_measurement_leaves_out_algorithms_keeping_much_memory_for_little_output(
        size, mode, measured):
    problem = algorithms.ConvProblem(
        channel_last=True, batch=1, channels=512, filters=512, groups=1, kernel=(3, 3),
        stride=(1, 1), dilate=(1, 1), pad=(1, 1), size_in=(size, size), dtype='float32')
    tried = []
    STATE.choices.clear()
    try:
        algorithms.choose(problem, mode, 1 << 40, True,
                          lambda algorithm: tried.append(algorithm.name) or True)
    finally:
        STATE.choices.clear()
    assert ('winograd4' in tried) == measured


# ----------------------------------------------------------------------------------------------
# A graph node's oneDNN convolution run again as its last call ran it (ctx.memo)

@pytest.fixture
def node_call(monkeypatch):
    """(run(**changes) -> output, choices): forward() of one NHWC 3x3 layer with its weight
    folded from a scale, on one kernel context as the executor calls a node, oneDNN chosen,
    `choices` counting the calls of algorithms.choose."""
    choices = []
    real = algorithms.choose

    def choose(problem, *args, **kwargs):
        choices.append(problem)
        return real(problem, *args, **kwargs)
    monkeypatch.setattr(algorithms, 'choose', choose)
    case = CASES['3x3 wide']
    x, w, expected, _ = case.arrays('NHWC')
    scale = np.linspace(0.5, 1.5, w.shape[0]).astype(np.float32)
    arrays = dict(data=x, weight=w, out=np.empty(expected.shape, np.float32),
                  weight_version=((engine.get().new_var(), 0),))
    attrs = case.attrs(CONV, 'NHWC')
    ctx = registry.KernelContext(None)

    def run(**changes):
        arrays.update(changes)
        a = arrays
        convolution.forward(attrs, a['data'], a['weight'], case.bias, a['out'], ctx, None,
                            'relu', scale, a['weight_version'])
        reference = direct(a['data'].transpose(0, 3, 1, 2), a['weight'].transpose(0, 3, 1, 2)
                           * scale[:, None, None, None], (1, 1), (1, 1), (1, 1), 1)
        assert_close(a['out'], np.maximum(reference.transpose(0, 2, 3, 1) + case.bias, 0))
        return a['out']
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):     # the rule: oneDNN
        yield run, choices
    STATE.choices.clear()


@pytest.mark.skipif(not onednn_provider.enabled(), reason='oneDNN is not available')
def test_a_node_runs_its_onednn_convolution_again_without_choosing(node_call):
    run, choices = node_call
    for _ in range(3):
        run()
    assert len(choices) == 1
    # a scaled weight without a version is scaled by each call: nothing to run again
    run(weight_version=None)
    run(weight_version=None)
    assert len(choices) == 3


def _outputs_around_a_doubled_weight(run):
    """A node_call's outputs before and after its weight is doubled in place (as a trainer
    writes it) under a new version; run() checks each against the weight it then holds."""
    weight = CASES['3x3 wide'].arrays('NHWC')[1]
    var = engine.get().new_var()
    first = run(weight=weight, weight_version=((var, 0),)).copy()
    run()
    weight *= 2
    return first, run(weight_version=((var, 1),))


@pytest.mark.skipif(not onednn_provider.enabled(), reason='oneDNN is not available')
def test_a_new_weight_version_reaches_the_replayed_convolution(node_call):
    run, choices = node_call
    first, second = _outputs_around_a_doubled_weight(run)
    assert not np.allclose(first, second)
    assert len(choices) == 1


@pytest.mark.skipif(not onednn_provider.enabled(), reason='oneDNN is not available')
@pytest.mark.parametrize('change', ['choices cleared', 'oneDNN off', 'primitive evicted',
                                    'tuning mode', 'new output'])
def test_a_replayed_convolution_is_worked_out_again_after(node_call, change):
    from ember.backend import onednn
    run, choices = node_call
    run()
    run()
    assert len(choices) == 1
    if change == 'choices cleared':
        STATE.choices.clear()
        run()
    elif change == 'oneDNN off':
        with config.override(MXNET_MKLDNN_ENABLED=0):
            run()
    elif change == 'primitive evicted':
        onednn.clear_cache()
        run()
    elif change == 'tuning mode':
        with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='2'):
            run()
    else:
        run(out=np.empty_like(run()))
    assert len(choices) == 2


@pytest.mark.skipif(not onednn_provider.enabled() or compiled.MODULE is None,
                    reason='needs oneDNN and ember._winograd')
def test_a_layer_past_the_kept_budget_chooses_again_on_every_call(node_call, monkeypatch):
    """Its choice follows the room other layers leave in the budget."""
    run, choices = node_call
    monkeypatch.setattr(algorithms, 'choose', lambda problem, *args, **kwargs: (
        choices.append(problem) or algorithms.ALGORITHMS['winograd4']))
    monkeypatch.setattr(winograd, 'can_keep', lambda problem, version: False)
    monkeypatch.setattr(algorithms, 'choose_past_budget',
                        lambda problem, algorithm, onednn, trial: algorithms.ALGORITHMS['onednn'])
    run()
    run()
    assert len(choices) == 2


@pytest.fixture
def winograd_node_call(node_call, monkeypatch):
    """node_call with the compiled Winograd chosen (its transformed weights kept)."""
    if compiled.MODULE is None:
        pytest.skip('ember._winograd is not built')
    run, choices = node_call
    monkeypatch.setattr(algorithms, 'choose', lambda problem, *args, **kwargs: (
        choices.append(problem) or algorithms.ALGORITHMS['winograd4']))
    STATE.kept[TRANSFORMED].clear()
    yield run, choices
    STATE.kept[TRANSFORMED].clear()


def test_a_node_runs_its_winograd_convolution_again_without_choosing(winograd_node_call,
                                                                    monkeypatch):
    run, choices = winograd_node_call
    worked_out = []
    real = winograd_compiled.convolve
    monkeypatch.setattr(winograd_compiled, 'convolve',
                        lambda *args: worked_out.append(1) or real(*args))
    for _ in range(3):
        run()
    assert len(choices) == 1 and len(worked_out) == 1
    # a scaled weight without a version is transformed by each call: nothing to run again,
    # unless the call's threads transform the weights of their filters themselves (fused),
    # reading the weight as it is on each call
    run(weight_version=None)
    run(weight_version=None)
    assert len(choices) == (2 if winograd.fuses(choices[-1]) else 3)


def test_a_replayed_winograd_convolution_is_worked_out_again_for_new_weights(
        winograd_node_call):
    run, choices = winograd_node_call
    first, second = _outputs_around_a_doubled_weight(run)
    assert not np.allclose(first, second)
    assert len(choices) == 2


def test_a_fused_winograd_node_keeps_nothing_and_runs_again_on_the_weight_it_reads(
        node_call, monkeypatch):
    """winograd4_fused transforms the weights in every call: its layer keeps nothing, and is
    worked out once, then run again reading the (scaled) weight as it is, even changed in
    place under the same version."""
    if compiled.MODULE is None:
        pytest.skip('ember._winograd is not built')
    run, choices = node_call
    monkeypatch.setattr(algorithms, 'choose', lambda problem, *args, **kwargs: (
        choices.append(problem) or algorithms.ALGORITHMS['winograd4_fused']))
    fused = []                                  # per convolve() run: given the weights
    real = compiled.run_compiled
    monkeypatch.setattr(winograd_compiled, 'run_compiled', lambda kernel, elements, calls: (
        fused.append(all(len(args) > 14 for args in calls)), real(kernel, elements, calls)))
    before = kept.kept_bytes(), onednn_kept_bytes()
    weight = CASES['3x3 wide'].arrays('NHWC')[1]
    run(weight=weight)
    run()
    weight *= 2                                 # the same version: run() checks the output
    run()
    assert len(choices) == 1 and len(fused) == 3 and all(fused)
    assert (kept.kept_bytes(), onednn_kept_bytes()) == before


def onednn_kept_bytes():
    from ember.backend import onednn
    return onednn.kept_bytes()


def test_measurement_times_a_prepared_call_as_the_node_replays_it(monkeypatch):
    """Each measured round runs a prepared call (the compiled Winograd's) again as the node's
    later calls would, not worked out again from the start: what the layer then costs."""
    if compiled.MODULE is None:
        pytest.skip('ember._winograd is not built')
    worked_out, measured = [], []
    real = winograd_compiled.convolve
    monkeypatch.setattr(winograd_compiled, 'convolve',
                        lambda *args, **kwargs: worked_out.append(1) or real(*args, **kwargs))
    real_measure = algorithms.measure

    def spy(problem, candidates, trial):
        before = len(worked_out)
        seconds = real_measure(problem, candidates, trial)
        measured.append((len(worked_out) - before,
                         [a.name for a in candidates if a.name.startswith('winograd4')]))
        return seconds
    monkeypatch.setattr(algorithms, 'measure', spy)
    STATE.choices.clear()
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='1'):
        nd_conv(Case(1, 64, 64, 14, 3, pad=1), 'NHWC')
    STATE.choices.clear()
    (calls, winograds), = measured
    assert winograds and calls == len(winograds)    # each worked out once, for its warm-up


def test_measure_runs_again_what_a_trial_returns():
    ran = []

    def trial(algorithm):
        ran.append(('trial', algorithm.name))
        if algorithm.name == 'gemm':
            return True                     # no prepared call: the trial again
        return lambda: ran.append(('again', algorithm.name))
    seconds = algorithms.measure(None, [algorithms.ALGORITHMS[name]
                                        for name in ('gemm', 'onednn')], trial)
    assert set(seconds) == {'gemm', 'onednn'}
    rounds = tuning.TUNING.measure_rounds
    assert ran.count(('trial', 'onednn')) == 1 and ran.count(('again', 'onednn')) >= rounds
    assert ran.count(('trial', 'gemm')) >= rounds + 1 and ('again', 'gemm') not in ran


def test_batch_1_layers_fuse_and_many_tiles_do_not(monkeypatch):
    monkeypatch.setattr(winograd_compiled, 'kernel_threads', lambda: 2)     # as on 2 cores
    base = algorithms.ConvProblem(
        channel_last=True, batch=1, channels=256, filters=256, groups=1, kernel=(3, 3),
        stride=(1, 1), dilate=(1, 1), pad=(1, 1), size_in=(14, 14), dtype='float32')
    if compiled.MODULE is None:
        assert not winograd.fuses(base)
        return
    assert winograd.fuses(base)
    assert winograd.fuses(dataclasses.replace(base, channel_last=False))
    for change in [dict(batch=8), dict(gradient='data'), dict(dtype='float64'),
                   dict(kernel=(1, 1), pad=(0, 0))]:
        assert not winograd.fuses(dataclasses.replace(base, **change)), change
    fused = algorithms.ALGORITHMS['winograd4_fused']
    assert fused.kept(base) == 0 < algorithms.ALGORITHMS['winograd4'].kept(base)
    # each thread's own transformed weights (2 of the 16 panels of 256 channels), not all
    assert fused.scratch(base, 1) < algorithms.ALGORITHMS['winograd4'].scratch(base, 1) / 2


def test_measurement_at_batch_1_weighs_the_fused_winograd_where_kept_weights_are_too_big(
        measured):
    """A 256-channel layer at 14x14 would keep 9.4 MB of transformed weights, too much for
    its output at batch 1 (TUNING.kept_per_output); the fused one keeps none and is
    measured."""
    if compiled.MODULE is None:
        pytest.skip('ember._winograd is not built')
    case = Case(1, 256, 256, 14, 3, pad=1)
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='1'):
        nd_conv(case, 'NHWC')
    assert 'winograd4_fused' in measured[0] and 'winograd4' not in measured[0]


@pytest.mark.parametrize('change', ['threads', 'new output'])
def test_a_replayed_winograd_convolution_is_worked_out_again_after(winograd_node_call, change):
    run, choices = winograd_node_call
    run()
    run()
    assert len(choices) == 1
    if change == 'threads':
        if engine.kernel_threads() < 2:
            pytest.skip('one kernel thread: fewer Winograd threads cannot be asked for')
        with config.override(MXNET_CPU_NNPACK_NTHREADS=1):
            run()
    else:
        run(out=np.empty_like(run()))
    assert len(choices) == 2


def test_a_node_runs_its_line_convolution_again_without_choosing(monkeypatch):
    """A 1x3 layer on the compiled line kernel (winograd_line) is worked out once and run
    again while its transformed weights stay kept; a new weight version works it out again."""
    if compiled.MODULE is None:
        pytest.skip('ember._winograd is not built')
    choices, worked_out = [], []
    monkeypatch.setattr(algorithms, 'choose', lambda problem, *args, **kwargs: (
        choices.append(problem) or algorithms.ALGORITHMS['winograd_line']))
    real = line.convolve
    monkeypatch.setattr(line, 'convolve',
                        lambda *args, **kwargs: worked_out.append(1) or real(*args, **kwargs))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 6, 8, 16)).astype(np.float32)
    w = rng.standard_normal((8, 1, 3, 16)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    out = np.empty((1, 6, 8, 8), np.float32)
    attrs = CONV.parse_attrs({'kernel': (1, 3), 'pad': (0, 1), 'num_filter': 8,
                              'layout': 'NHWC'})
    var, ctx = engine.get().new_var(), registry.KernelContext(None)

    def run(version):
        out.fill(np.nan)
        convolution.forward(attrs, x, w, bias, out, ctx, None, 'relu', None, ((var, version),))
        reference = direct(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), (1, 1), (0, 1),
                           (1, 1), 1) + bias[None, :, None, None]
        assert_close(out, np.maximum(reference.transpose(0, 2, 3, 1), 0))
    try:
        for _ in range(3):
            run(0)
        assert len(choices) == 1 and len(worked_out) == 1
        x *= 2                      # new input values in the same array
        run(0)
        w *= 2                      # a new version of the weight
        run(1)
        assert len(choices) == 2 and len(worked_out) == 2
    finally:
        STATE.kept[LINE].clear()


def test_the_subsystem_forgets_everything_when_the_operators_reset():
    """Its memory is one object: the choices, the kept weights and the largest graph go with
    STATE.reset(), which overriding a start-up variable of the operators runs."""
    token = ((engine.get().new_var(), 0),)
    STATE.choices.remember(('a problem', 'a mode'), 'gemm')
    for store in STATE.kept.values():
        store.keep(token, np.ones(4, np.float32))
    STATE.largest_graph, generation = 1 << 30, STATE.choices.generation
    with config.override(MXNET_USE_NUM_CORES_OPERATOR_TUNING=1):
        assert STATE.choices.get(('a problem', 'a mode')) is None
        assert STATE.choices.generation > generation
        assert all(store.nbytes() == 0 for store in STATE.kept.values())
        assert STATE.largest_graph == 0 and kept.kept_budget() == tuning.TUNING.kept_budget
