"""The compiled 1-D Winograd F(m, r) of 1 x r and r x 1 kernels (line.convolve): its
Toom-Cook transforms, agreement with the float64 convolution on every build (the AVX-512 and
AVX2 ones bit for bit), its argument errors, its kept weights and when it applies."""
import dataclasses
import weakref

import numpy as np
import pytest

import ember as mx
from ember.op.nn.conv import algorithms, compiled, kept, line, tuning, winograd
from ember.op.nn.conv.state import LINE, PACKED, STATE, TRANSFORMED

_winograd = compiled.MODULE
needs_module = pytest.mark.skipif(_winograd is None, reason='ember._winograd is not built')


class Var:
    """Stands for an engine variable: weakly referenced, identified by itself."""


def correlate(x, taps, axis, pad, length):
    """The float64 correlation of NHWC `x` with `taps` (F, r, C) along `axis`: `length`
    outputs from `pad` zeros before the first input, zeros past the last."""
    r = taps.shape[1]
    moved = np.moveaxis(x.astype(np.float64), axis, 1)          # (N, along, across, C)
    padded = np.zeros((moved.shape[0], length + r - 1) + moved.shape[2:])
    kept = moved[:, :max(0, length + r - 1 - pad)]
    padded[:, pad:pad + kept.shape[1]] = kept
    y = sum(padded[:, k:k + length] @ taps[:, k].T.astype(np.float64) for k in range(r))
    return np.moveaxis(y, 1, axis)


@dataclasses.dataclass
class Layer:
    x: np.ndarray
    w: np.ndarray           # OHWI
    bias: np.ndarray
    residual: np.ndarray
    expected: np.ndarray    # conv(x, w), no bias
    axis: int
    pad: int


def layer(seed, axis, r, pad, length, across, channels, filters, batch=2, after=None):
    """A layer whose output has `length` pixels along `axis` (`after` zeros past the input,
    else as many as `pad`)."""
    rng = np.random.default_rng(seed)
    after = pad if after is None else after
    size = length + r - 1 - pad - after
    shape = [batch, across, across, channels]
    shape[axis] = size
    x = rng.standard_normal(shape).astype(np.float32)
    kernel = [filters, 1, 1, channels]
    kernel[axis] = r
    w = (rng.standard_normal(kernel) / np.sqrt(r * channels)).astype(np.float32)
    taps = w[:, :, 0] if axis == 1 else w[:, 0]
    expected = correlate(x, taps, axis, pad, length)
    bias = rng.standard_normal(filters).astype(np.float32)
    residual = rng.standard_normal(expected.shape).astype(np.float32)
    return Layer(x, w, bias, residual, expected, axis, pad)


def assert_close(out, expected):
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


# ----------------------------------------------------------------------------------------------
# The transforms

@pytest.mark.parametrize('m', [4, 6])
@pytest.mark.parametrize('r', [3, 5, 7])
def test_transforms_compute_the_correlation(r, m):
    assert line.transforms(r, m)[0] == m
    m, bt, g, at = line.transforms(r, m)
    a = m + r - 1
    assert bt.shape == (a, a) and g.shape == (a, r) and at.shape == (m, a)
    rng = np.random.default_rng(r)
    for _ in range(5):
        d, taps = rng.standard_normal(a), rng.standard_normal(r)
        expected = np.array([taps @ d[i:i + r] for i in range(m)])
        np.testing.assert_allclose(at @ ((g @ taps) * (bt @ d)), expected, rtol=0,
                                   atol=1e-12 * np.abs(expected).max())
    assert line.transforms(r, m)[1] is bt       # worked out once
    assert not bt.flags.writeable


def test_the_exact_inverse_is_exact():
    """The fraction-free elimination gives the exact inverse: M times it is the identity in
    Fractions, for the Vandermonde matrices of every F(m, r) and for matrices that need rows
    swapped; a singular matrix is refused."""
    from fractions import Fraction as F
    rng = np.random.default_rng(0)
    matrices = [[[F(p) ** k for k in range(m + r - 1)] for p in points]
                + [[F(int(k == m + r - 2)) for k in range(m + r - 1)]]
                for (m, r), points in line.POINTS.items()]
    for _ in range(40):
        n = int(rng.integers(1, 7))
        rows = [[F(int(rng.integers(-9, 10)), int(rng.integers(1, 7))) for _ in range(n)]
                for _ in range(n)]
        rows[0][0] = F(0)                       # the first pivot is found below
        matrices.append(rows)
    for rows in matrices:
        n = len(rows)
        try:
            inverse = line._exact_inverse(rows)
        except ZeroDivisionError:
            assert np.linalg.matrix_rank(np.array(rows, np.float64)) < n
            continue
        product = [[sum(rows[i][k] * inverse[k][j] for k in range(n)) for j in range(n)]
                   for i in range(n)]
        assert product == [[F(int(i == j)) for j in range(n)] for i in range(n)]
    with pytest.raises(ZeroDivisionError, match='singular'):
        line._exact_inverse([[F(1), F(2)], [F(2), F(4)]])


# ----------------------------------------------------------------------------------------------
# Against the float64 convolution

# (output pixels along the axis, across it, channels, filters, threads): lengths not multiples
# of 4 and of one pixel; channels and filters not multiples of 8 or 16; a pair of panels and
# one; 67 filters with an odd last vector
SHAPES = [(17, 3, 3, 5, 1), (8, 2, 20, 40, 3), (5, 4, 70, 67, 3), (1, 3, 16, 33, 1)]


@needs_module
@pytest.mark.parametrize('shape', SHAPES, ids=lambda s: 'x'.join(map(str, s[:4])))
@pytest.mark.parametrize('padded', [True, False])
@pytest.mark.parametrize('r', [3, 5, 7])
@pytest.mark.parametrize('axis', [1, 2])
@pytest.mark.parametrize('m', [4, 6])
def test_matches_float64(build, axis, r, padded, shape, m, conv_tuning):
    # F(6, r) wherever it needs fewer products than F(4, r) (not on lines of 1 or 8)
    conv_tuning(line_wide_min_tiles=0 if m == 6 else 1 << 30)
    length, across, channels, filters, threads = shape
    c = layer(r * length + channels, axis, r, r // 2 if padded else 0, length, across,
              channels, filters)
    out = np.full(c.expected.shape, np.nan, np.float32)
    line.convolve(c.x, c.w, c.bias, out, axis, c.pad, threads=threads)
    assert_close(out, c.expected + c.bias)
    line.convolve(c.x, c.w, None, out, axis, c.pad, c.residual, 'relu', threads=threads)
    assert_close(out, np.maximum(c.expected + c.residual, 0))
    np.copyto(out, c.residual)          # the residual may be the output itself
    line.convolve(c.x, c.w, c.bias, out, axis, c.pad, out, 'relu', threads=threads)
    assert_close(out, np.maximum(c.expected + c.bias + c.residual, 0))


@needs_module
@pytest.mark.parametrize('axis', [1, 2])
def test_padding_may_differ_before_and_after(build, axis):
    # one zero before the input, three past it (the output's length sets them)
    c = layer(3, axis, 5, 1, 11, 3, 12, 20, after=3)
    out = np.empty(c.expected.shape, np.float32)
    line.convolve(c.x, c.w, c.bias, out, axis, 1, threads=2)
    assert_close(out, c.expected + c.bias)


@needs_module
def test_a_scaled_strided_weight_and_other_activations(build):
    # a folded BatchNorm's scale, the weight an OHWI view of OIHW memory (as _sg_conv passes)
    c = layer(7, 2, 7, 3, 9, 3, 24, 40)
    oihw = np.ascontiguousarray(c.w.transpose(0, 3, 1, 2))
    scale = np.linspace(0.5, 2, 40).astype(np.float32)
    out = np.empty(c.expected.shape, np.float32)
    line.convolve(c.x, oihw.transpose(0, 2, 3, 1), c.bias, out, 2, 3, c.residual,
                  'sigmoid', threads=2, weight_scale=scale)
    expected = c.expected * scale + c.bias + c.residual
    assert_close(out, 1 / (1 + np.exp(-expected)))


@needs_module
def test_a_strided_output_and_no_tiles():
    c = layer(8, 1, 3, 1, 6, 4, 8, 16)
    wide = np.zeros(c.expected.shape[:3] + (32,), np.float32)
    line.convolve(c.x, c.w, c.bias, wide[..., :16], 1, 1)
    assert_close(wide[..., :16], c.expected + c.bias)
    assert not wide[..., 16:].any()
    line.convolve(c.x[:0], c.w, c.bias, np.empty((0,) + c.expected.shape[1:]), 1, 1)


@needs_module
def test_the_avx512_and_avx2_builds_agree_bit_for_bit(conv_tuning, wide_and_narrow):
    """The AVX-512 products take two panels by 12 tiles at a time, the AVX2 ones one panel by
    6; the transforms are the same 8-lane code: each output is the same chain of operations.
    40 filters: a pair of panels and a single one; 25 channels."""
    # F(6, 7) on 17 outputs along the rows (it has 3 x 5 x 2 = 30 tiles), F(4, 3) down 9
    cases = [layer(9, 2, 7, 3, 17, 5, 25, 40), layer(10, 1, 3, 1, 9, 6, 25, 40)]
    conv_tuning(line_wide_min_tiles=30)
    assert line._outputs_of(cases[0].expected.shape, 2, 7) == 6
    assert line._outputs_of(cases[1].expected.shape, 1, 3) == 4

    def both():
        outs = []
        for c in cases:
            out = c.residual.copy()
            line.convolve(c.x, c.w, c.bias, out, c.axis, c.pad, out, 'relu', threads=2)
            outs.append(out)
        return outs
    wide, narrow = wide_and_narrow(both)
    for a, b in zip(wide, narrow):
        assert a.tobytes() == b.tobytes()
    assert_close(wide[0], np.maximum(cases[0].expected + cases[0].bias + cases[0].residual, 0))


@needs_module
def test_results_do_not_depend_on_threads_or_chunks(monkeypatch):
    c = layer(11, 2, 7, 3, 13, 7, 32, 48, batch=3)
    outs = []
    for chunk, threads in [(1, 1), (5, 3), (12, 2), (1000, 2)]:
        monkeypatch.setattr(line, '_chunk', lambda *args, chunk=chunk: chunk)
        out = np.empty(c.expected.shape, np.float32)
        line.convolve(c.x, c.w, c.bias, out, 2, 3, threads=threads)
        outs.append(out)
    for out in outs[1:]:
        assert out.tobytes() == outs[0].tobytes()


# ----------------------------------------------------------------------------------------------
# The compiled function's arguments

@needs_module
def test_errors_name_the_argument_and_what_it_accepts():
    c = layer(12, 2, 3, 0, 8, 2, 8, 16, batch=1)            # x (1, 2, 10, 8)
    bt, at = line._matrices(3, 4)
    u = np.zeros(line._packed_shape(3, 4, 8, 16), np.float32)
    out = np.empty(c.expected.shape, np.float32)
    scratch = np.empty(6 * 4 * 16, np.float32)
    args = [c.x, u, out, None, None, False, 2, 0, bt, at, (0, 4), 4, scratch, scratch, None]
    for index, value, message in [
            (0, c.x.astype(np.float64), "x: expected float32 values"),
            (1, u[:2], "u: expected at least 768 float32 values"),
            (4, np.zeros((1, 2, 2, 16), np.float32), "residual: expected shape"),
            (6, 3, r"axis 3: expected 1 \(the rows: an r x 1 kernel\) or 2"),
            (6, 1, "expected the same batch and columns"),
            (7, -1, "pad -1: expected >= 0"),
            (8, at, r"bt \(4, 6\): expected a square matrix of 2 to 12 points"),
            (8, np.zeros(6, np.float32), "bt: expected a 2-D matrix, got 1 dimensions"),
            (9, np.zeros((7, 6), np.float32), r"at \(7, 6\): expected \(outputs, 6\)"),
            (10, (0, 5), r"tiles \[0, 5\): expected 0 <= lo <= hi <= 4"),
            (11, 0, "chunk 0: expected >= 1 tiles"),
            (12, scratch[:10], "v: expected at least 192 float32 values"),
            (14, np.zeros(1, np.int32), "claim: expected a writable, aligned int64 array")]:
        bad = list(args)
        bad[index] = value
        with pytest.raises((TypeError, ValueError), match=message):
            _winograd.line(*bad)


# ----------------------------------------------------------------------------------------------
# Kept weights

@pytest.fixture
def transforms(monkeypatch):
    """The weights line() transforms, call by call; nothing kept is left behind."""
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return transform(*args, **kwargs)
    transform = line._weights
    monkeypatch.setattr(line, '_weights', counted)
    stores = (STATE.kept[TRANSFORMED], STATE.kept[PACKED], STATE.kept[LINE])
    for store in stores:        # what earlier tests kept would go as their variables do
        store.clear()
    yield calls
    for store in stores:
        store.clear()


@needs_module
def test_weights_are_transformed_once_per_version(transforms):
    c, var = layer(13, 1, 7, 3, 9, 4, 16, 24), Var()
    before = kept.kept_bytes()

    def run(w, version):
        out = np.empty(c.expected.shape, np.float32)
        line.convolve(c.x, w, c.bias, out, 1, 3, weight_version=((var, version),))
        return out
    first = run(c.w, 0)
    assert len(transforms) == 1
    problem = algorithms.ConvProblem(True, 2, 16, 24, 1, (7, 1), (1, 1), (1, 1), (3, 0),
                                     (9, 4), 'float32')
    assert kept.kept_bytes() - before == line.kept_bytes(problem) > 0
    np.testing.assert_array_equal(run(c.w, 0), first)
    assert len(transforms) == 1
    assert_close(run(2 * c.w, 1), 2 * c.expected + c.bias)     # a new version: again
    assert len(transforms) == 2


@needs_module
def test_without_a_version_the_weights_are_transformed_every_call(transforms):
    c = layer(14, 2, 3, 1, 8, 3, 8, 16)
    before = kept.kept_bytes()
    for _ in range(2):
        line.convolve(c.x, c.w, c.bias, np.empty(c.expected.shape, np.float32), 2, 1)
    assert len(transforms) == 2 and kept.kept_bytes() == before


@needs_module
def test_kept_weights_go_with_their_variable_or_when_discarded(transforms):
    c, var, other = layer(15, 2, 5, 2, 8, 3, 8, 16), Var(), Var()
    for token in (((var, 0),), ((other, 0),)):
        line.convolve(c.x, c.w, None, np.empty(c.expected.shape, np.float32), 2, 2,
                      weight_version=token)
    before = kept.kept_bytes()
    kept.discard_others(((other, 0),), keep=LINE)     # its winner: kept
    assert kept.kept_bytes() == before
    kept.discard_others(((other, 0),))
    assert kept.kept_bytes() < before
    gone = weakref.ref(var)
    del var
    assert gone() is None
    line.convolve(c.x, c.w, None, np.empty(c.expected.shape, np.float32), 2, 2,
                  weight_version=((Var(), 0),))    # keeping another drops the dead one's
    assert kept.kept_bytes() < before


@needs_module
def test_past_the_budget_weights_are_transformed_every_call(conv_tuning, transforms):
    conv_tuning(kept_budget=0)
    c, var = layer(16, 2, 3, 1, 8, 3, 8, 16), Var()
    before = kept.kept_bytes()
    for _ in range(2):
        line.convolve(c.x, c.w, None, np.empty(c.expected.shape, np.float32), 2, 1,
                      weight_version=((var, 0),))
    assert len(transforms) == 2 and kept.kept_bytes() == before


@needs_module
def test_line_and_2d_weights_share_one_budget(conv_tuning, transforms):
    c, var = layer(18, 2, 7, 3, 8, 3, 16, 16), Var()
    line_bytes = int(np.prod(line._packed_shape(7, 4, 16, 16))) * 4
    problem = algorithms.ConvProblem(True, 1, 16, 16, 1, (3, 3), (1, 1), (1, 1), (1, 1),
                                     (8, 8), 'float32')
    square_bytes = winograd.kept_weight_bytes(problem, 4)
    conv_tuning(kept_budget=line_bytes + square_bytes - 1)
    other = ((Var(), 0),)
    assert winograd.can_keep(problem, other)             # room for the 2-D layer alone
    line.convolve(c.x, c.w, None, np.empty(c.expected.shape, np.float32), 2, 3,
                  weight_version=((var, 0),))
    assert STATE.kept[LINE].nbytes() == line_bytes
    assert not winograd.can_keep(problem, other)         # not beside the line layer's


@needs_module
def test_scratch_covers_what_a_call_takes(counted_alloc):
    c = layer(17, 1, 7, 3, 17, 17, 48, 40, batch=3)
    alloc, taken = counted_alloc, counted_alloc.taken
    out = np.empty(c.expected.shape, np.float32)
    line.convolve(c.x, c.w, c.bias, out, 1, 3, alloc=alloc,
                  threads=mx.engine.kernel_threads())
    problem = algorithms.ConvProblem(True, 3, 48, 40, 1, (7, 1), (1, 1), (1, 1), (3, 0),
                                     (17, 17), 'float32')
    assert 0 < sum(taken) <= line.scratch_bytes(problem, 3)
    assert_close(out, c.expected + c.bias)


# ----------------------------------------------------------------------------------------------
# When it applies

LINE_PROBLEM = algorithms.ConvProblem(True, 8, 192, 192, 1, (1, 7), (1, 1), (1, 1),
                                      (0, 3), (17, 17), 'float32')


@pytest.mark.parametrize('change, supported', [
    ({}, True),
    ({'kernel': (7, 1), 'pad': (3, 0)}, True),
    ({'kernel': (3, 1), 'pad': (0, 0)}, True),
    ({'kernel': (1, 5), 'pad': (0, 2)}, True),
    ({'kernel': (1, 4), 'pad': (0, 2)}, False),         # no transforms for r = 4
    ({'kernel': (1, 9), 'pad': (0, 4)}, False),
    ({'kernel': (3, 3), 'pad': (1, 1)}, False),
    ({'kernel': (1, 1), 'pad': (0, 0)}, False),
    ({'pad': (1, 3)}, False),                           # padding on the axis of extent 1
    ({'stride': (1, 2)}, False),
    ({'dilate': (1, 2)}, False),
    ({'groups': 2}, False),
    ({'channel_last': False}, False),
    ({'dtype': 'float64'}, False),
    ({'gradient': 'data'}, False),
    ({'kernel': (1, 1, 7), 'stride': (1, 1, 1), 'dilate': (1, 1, 1), 'pad': (0, 0, 3),
      'size_in': (4, 17, 17)}, False),
])
def test_supports_line(change, supported):
    problem = dataclasses.replace(LINE_PROBLEM, **change)
    assert line.supports(problem) == (supported and _winograd is not None)
    if not supported:
        assert line.kept_bytes(problem) == 0


def test_without_the_module_nothing_is_supported(compiled_module):
    compiled_module(None)
    assert not line.supports(LINE_PROBLEM)


@needs_module
@pytest.mark.parametrize('kernel', [(1, 7), (3, 1)])
def test_the_numpy_provider_runs_1xr_layers_on_it(monkeypatch, kernel):
    """Without oneDNN the rule runs channel-last 1 x r and r x 1 layers here; the result is
    the channel-first Convolution's (im2col + GEMM)."""
    from ember import config
    runs = []
    original = line.convolve
    monkeypatch.setattr(line, 'convolve',
                        lambda *args, **kwargs: runs.append(1) or original(*args, **kwargs))
    rng = np.random.default_rng(8)
    pad = (kernel[0] // 2, kernel[1] // 2)
    x = mx.nd.array(rng.standard_normal((2, 20, 9, 10)), dtype='float32')
    w = mx.nd.array(rng.standard_normal((36, 20) + kernel) * 0.2, dtype='float32')
    b = mx.nd.array(rng.standard_normal(36), dtype='float32')
    with config.override(MXNET_MKLDNN_ENABLED=0, MXNET_CUDNN_AUTOTUNE_DEFAULT=0):
        nchw = mx.nd.Convolution(x, w, b, kernel=kernel, pad=pad, num_filter=36).asnumpy()
        assert not runs
        nhwc = mx.nd.Convolution(x.transpose((0, 2, 3, 1)), w.transpose((0, 2, 3, 1)), b,
                                 kernel=kernel, pad=pad, num_filter=36,
                                 layout='NHWC').asnumpy()
    assert runs
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2), nchw, rtol=1e-4,
                               atol=1e-4 * np.abs(nchw).max())


def test_long_lines_of_many_tiles_take_six_outputs_a_tile():
    line_outputs = line.outputs
    few = -(-tuning.TUNING.line_wide_min_tiles // 3) - 1      # lines of 3 tiles of 6
    assert line_outputs(7, 17, few + 1) == 6 and line_outputs(7, 17, few) == 4
    assert line_outputs(3, 17, 1000) == 6           # 8 x 3 products per line against 6 x 5
    assert line_outputs(3, 8, 1000) == 4            # 6 x 2 against 8 x 2
    assert line_outputs(7, 4, 1000) == 4            # one tile either way: 10 against 12


@needs_module
@pytest.mark.parametrize('axis', [1, 2])
@pytest.mark.parametrize('r, m, filters, channels', [(7, 6, 40, 19), (3, 4, 16, 8),
                                                     (5, 6, 7, 33)])
def test_transformed_weights_are_the_float64_product_rounded_once(build, axis, r, m, filters,
                                                                  channels):
    # line_weights: G times the taps of each filter and channel in float64, times the
    # filter's scale, rounded once; packed in panels of 16 filters, zeros past the last;
    # the same for OIHW weights seen as OHWI and whatever the split over threads
    rng = np.random.default_rng(r * 10 + axis)
    kernel = (r, 1) if axis == 1 else (1, r)
    oihw = rng.standard_normal((filters, channels) + kernel).astype(np.float32)
    scale = rng.uniform(0.1, 3.0, filters).astype(np.float32)
    g = line.transforms(r, m)[2]
    taps = oihw[:, :, :, 0] if axis == 1 else oihw[:, :, 0, :]                # (F, C, r)
    want64 = np.einsum('pk,fck->pfc', g, taps.astype(np.float64))
    panels = -(-filters // 16)
    for factors in (None, scale):
        product = want64 if factors is None else want64 * factors.astype(np.float64)[:, None]
        want = np.zeros((g.shape[0], panels * 16, channels), np.float32)
        want[:, :filters] = product
        want = want.reshape(g.shape[0], panels, 16, channels).transpose(0, 1, 3, 2)
        for layout, w in (('OHWI', np.ascontiguousarray(oihw.transpose(0, 2, 3, 1))),
                          ('OIHW seen as OHWI', oihw.transpose(0, 2, 3, 1))):
            for threads in (1, 2, 3):
                got = line._weights(w, axis, factors, m, threads=threads)
                # the sum's order may differ from einsum's in the last bit of the float64
                np.testing.assert_array_max_ulp(got, want, maxulp=1)
                assert not got[:, -1, :, filters - (panels - 1) * 16:].any(), layout


@needs_module
def test_transformed_weights_name_their_bad_arguments():
    w = np.ones((16, 7, 1, 8), np.float32)
    u = np.empty((12, 1, 8, 16), np.float32)
    g = line.transforms(7, 6)[2]
    with pytest.raises(ValueError, match=r'g: expected float64 \(points, 7\)'):
        _winograd.line_weights(w, g.astype(np.float32), u, (0, 1))
    with pytest.raises(ValueError, match=r'g: expected float64'):
        _winograd.line_weights(w, line.transforms(3, 4)[2], u, (0, 1))
    with pytest.raises(ValueError, match=r'panels \[0, 2\)'):
        _winograd.line_weights(w, g, u, (0, 2))
    with pytest.raises(ValueError, match='u: expected at least'):
        _winograd.line_weights(w, g, u[:6], (0, 1))
    with pytest.raises(ValueError, match='scale: expected at least 16'):
        _winograd.line_weights(w, g, u, (0, 1), np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r'w \(16, 7, 2, 8\): expected \(F, r, 1, C\)'):
        _winograd.line_weights(np.ones((16, 7, 2, 8), np.float32), g, u, (0, 1))
