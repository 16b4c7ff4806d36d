"""The compiled 1x1 convolution (pointwise.convolve): the Winograd products' register
blocks on the rows of x, with the weights packed in panels and the epilogue at the store."""
import numpy as np
import pytest

import ember as mx
from ember import config, engine
from ember.op.nn.conv import algorithms, compiled, convolution, gemm, kept, pointwise
from ember.op.nn.conv.state import ONEDNN, PACKED, STATE
from ember.op.registry import KernelContext

_winograd = compiled.MODULE
needs_module = pytest.mark.skipif(_winograd is None, reason='ember._winograd is not built')


def layer(seed, shape, filters, stride=(1, 1)):
    """NHWC x, OHWI 1x1 weights, bias, a residual and the float64 convolution + bias."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal((filters, 1, 1, shape[-1])) / np.sqrt(shape[-1])).astype(np.float32)
    bias = rng.standard_normal(filters).astype(np.float32)
    picked = x[:, ::stride[0], ::stride[1]].astype(np.float64)
    expected = picked @ w.reshape(filters, -1).T.astype(np.float64) + bias
    residual = rng.standard_normal(expected.shape).astype(np.float32)
    return x, w, bias, residual, expected


def assert_close(out, expected):
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize('filters', [5, 40, 67])     # one partial panel; a pair and one; odd
@pytest.mark.parametrize('channels', [3, 70])
@pytest.mark.parametrize('threads', [1, 3])
@pytest.mark.parametrize('stride', [(1, 1), (2, 3)])
def test_matches_float64(build, conv_tuning, filters, channels, threads, stride):
    # blocks of 16 channels: 70 takes five, the last partial, each added to out
    conv_tuning(pointwise_depth=16, pointwise_forward_chunk=13)
    x, w, bias, residual, expected = layer(filters + channels, (2, 9, 11, channels), filters,
                                           stride)
    out = np.full(expected.shape, np.nan, np.float32)
    pointwise.convolve(x, w, bias, out, stride, threads=threads)
    assert_close(out, expected)
    pointwise.convolve(x, w, None, out, stride, residual, 'relu', threads=threads)
    assert_close(out, np.maximum(expected - bias + residual, 0))


def test_relu_keeps_nan_as_numpy_does(build):
    x, w, bias, _, _ = layer(0, (1, 2, 3, 8), 32)
    x[0, 0, 0, 0] = np.nan
    out = np.empty((1, 2, 3, 32), np.float32)
    pointwise.convolve(x, w, bias, out, (1, 1), act_type='relu')
    assert np.isnan(out[0, 0, 0]).all() and not np.isnan(out[0, 1]).any()
    assert (out[0, 1] >= 0).all()


@pytest.mark.parametrize('depth', [16, 256])
def test_the_residual_may_be_the_output_itself(build, conv_tuning, depth):
    conv_tuning(pointwise_depth=depth)
    x, w, bias, residual, expected = layer(1, (2, 5, 7, 48), 24)
    out = residual.copy()
    pointwise.convolve(x, w, bias, out, (1, 1), out, 'relu', threads=2)
    assert_close(out, np.maximum(expected + residual, 0))


@needs_module
def test_a_residual_viewing_the_output_is_summed_in_place():
    """The executor hands the residual and the output as two array objects over the same
    memory: no copy of it (at batch 32, a 100 MB copy tripled the layer's time)."""
    import tracemalloc
    x, w, bias, residual, expected = layer(8, (2, 32, 32, 16), 256)   # out: 2 MB
    out = residual.copy()
    view = out[...]
    tracemalloc.start()
    try:
        pointwise.convolve(x, w, bias, out, (1, 1), view, 'relu', threads=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert_close(out, np.maximum(expected + residual, 0))
    assert peak < out.nbytes // 4
    overlapping = residual.copy()
    pointwise.convolve(x[:, :, 1:], w, bias, overlapping[:, :, 1:], (1, 1),
                       overlapping[:, :, :-1], None)
    assert_close(overlapping[:, :, 1:], expected[:, :, 1:] + residual[:, :, :-1])


@needs_module
def test_strided_outputs_and_other_activations_go_through_a_copy():
    x, w, bias, residual, expected = layer(2, (2, 4, 6, 16), 20)
    holder = np.full(expected.shape[:-1] + (40,), np.nan, np.float32)
    out = holder[..., ::2]
    pointwise.convolve(x, w, bias, out, (1, 1), residual, 'sigmoid', threads=2)
    assert_close(out, 1 / (1 + np.exp(-(expected + residual))))
    assert np.isnan(holder[..., 1::2]).all()


@needs_module
def test_weights_are_packed_once_per_version_and_scaled(monkeypatch):
    packs = []
    original = pointwise._pack
    monkeypatch.setattr(pointwise, '_pack',
                        lambda *args: packs.append(1) or original(*args))
    x, w, bias, _, expected = layer(4, (1, 3, 3, 32), 18)
    oihw = np.ascontiguousarray(w.transpose(0, 3, 1, 2))
    scale = np.linspace(0.5, 2, 18).astype(np.float32)
    var = engine.get().new_var()
    out = np.empty(expected.shape, np.float32)
    for version in (0, 0, 0, 1):
        pointwise.convolve(x, oihw.transpose(0, 2, 3, 1), bias, out, (1, 1),
                           weight_version=((var, version),), weight_scale=scale)
        assert_close(out, (expected - bias) * scale + bias)
    assert len(packs) == 2                 # version 0 once, version 1 once
    assert kept.kept_bytes() >= 32 * 32 * 4     # two panels of 32 channels
    kept.discard_others(((var, 1),), keep=PACKED)
    pointwise.convolve(x, w, bias, out, (1, 1), weight_version=((var, 1),))
    assert len(packs) == 2                 # kept: the winner's weights stay
    kept.discard_others(((var, 1),), keep=ONEDNN)
    pointwise.convolve(x, w, bias, out, (1, 1), weight_version=((var, 1),))
    assert len(packs) == 3


@needs_module
@pytest.mark.parametrize('filters, channels', [(32, 24), (40, 19), (7, 8)])
def test_packed_weights_are_scaled_as_they_are_copied(filters, channels):
    # panels of 16 filters, zeros past the last one, each row NumPy's w * scale bit for bit
    rng = np.random.default_rng(4)
    w = rng.standard_normal((filters, 1, 1, channels)).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, filters).astype(np.float32)
    rows = w.reshape(filters, channels) * scale.reshape(-1, 1)
    want = np.zeros((-(-filters // 16), channels, 16), np.float32)
    for f in range(filters):
        want[f // 16, :, f % 16] = rows[f]
    assert pointwise._pack(w, scale).tobytes() == want.tobytes()
    assert pointwise._pack(w, None)[0, :, 0].tobytes() == w[0].reshape(-1).tobytes()


def test_errors_name_the_argument():
    x, out = np.zeros((1, 4, 4, 16), np.float32), np.zeros((1, 4, 4, 8), np.float32)
    u = np.zeros((1, 16, 16), np.float32)
    for index, value, message in [
            (2, np.zeros((1, 4, 5, 8), np.float32), r"expected the same samples, rows and "
                                                    r"columns"),
            (1, np.zeros(100, np.float32), "u: expected at least 256"),
            (3, np.zeros(7, np.float32), "bias: expected at least 8"),
            (4, np.zeros((1, 4, 4, 9), np.float32), r"residual: expected shape \(1, 4, 4, 8\)"),
            (6, (3, 17), r"rows \[3, 17\): expected 0 <= lo <= hi <= 16"),
            (7, 0, "chunk 0, depth 256: expected at least 1 row and 1 channel"),
            (0, np.zeros((4, 4, 16), np.float32), "x: expected a 4-D")]:
        args = [x, u, out, None, None, False, (0, 16), 12, 256]
        args[index] = value
        with pytest.raises(ValueError, match=message):
            _winograd.pointwise(*args)
    with pytest.raises(TypeError, match='claim: expected a writable, aligned int64'):
        _winograd.pointwise(x, u, out, None, None, False, (0, 16), 12, 256,
                            np.zeros(1, np.int32))


def problem(**change):
    return algorithms.ConvProblem(**dict(dict(
        channel_last=True, batch=2, channels=24, filters=8, groups=1, kernel=(1, 1),
        stride=(1, 1), dilate=(1, 1), pad=(0, 0), size_in=(5, 5), dtype='float32'), **change))


@pytest.mark.parametrize('change, supported', [
    ({}, True), (dict(stride=(2, 2)), True), (dict(pad=(1, 1)), False),
    (dict(kernel=(3, 3)), False), (dict(dilate=(2, 2)), False), (dict(channel_last=False), False),
    (dict(groups=2), False), (dict(dtype='float64'), False), (dict(gradient='data'), False),
    (dict(kernel=(1,), stride=(1,), dilate=(1,), pad=(0,), size_in=(5,)), False)])
def test_support_and_the_numpy_rule(change, supported):
    p = problem(**change)
    expected = supported and _winograd is not None
    assert pointwise.supports(p) == expected
    names = [a.name for a in algorithms.candidates(p, onednn=False)]
    assert ('pointwise' in names) == expected
    if expected:
        assert algorithms.numpy_rule(p).name == 'pointwise'
        assert algorithms.rule(p, onednn=True).name == 'onednn'


@needs_module
def test_scratch_covers_a_strided_call(counted_alloc):
    strided = problem(stride=(2, 2), batch=3)
    plain = problem(batch=3)
    weights = 4 * 16 * 24
    assert pointwise.scratch_bytes(plain, 3) == weights
    assert pointwise.scratch_bytes(strided, 3) == \
        weights + 4 * 3 * 3 * 3 * 24
    alloc, taken = counted_alloc, counted_alloc.taken
    x, w, bias, _, expected = layer(5, (3, 5, 5, 24), 8, (2, 2))
    out = np.empty(expected.shape, np.float32)
    pointwise.convolve(x, w, bias, out, (2, 2), alloc=alloc)
    assert_close(out, expected)
    assert sum(taken) == pointwise.scratch_bytes(strided, 3)


@needs_module
@pytest.mark.parametrize('stride', [1, 2])
def test_the_numpy_provider_runs_1x1_layers_on_it(monkeypatch, stride):
    """Without oneDNN the rule runs channel-last 1x1 layers here; the result is the
    channel-first Convolution's."""
    runs = []
    original = pointwise.convolve
    monkeypatch.setattr(pointwise, 'convolve',
                        lambda *args, **kwargs: runs.append(1) or original(*args, **kwargs))
    rng = np.random.default_rng(6)
    x = mx.nd.array(rng.standard_normal((2, 20, 7, 7)), dtype='float32')
    w = mx.nd.array(rng.standard_normal((36, 20, 1, 1)) * 0.2, dtype='float32')
    b = mx.nd.array(rng.standard_normal(36), dtype='float32')
    with config.override(MXNET_MKLDNN_ENABLED=0, MXNET_CUDNN_AUTOTUNE_DEFAULT=0):
        nchw = mx.nd.Convolution(x, w, b, kernel=(1, 1), stride=(stride, stride),
                                 num_filter=36).asnumpy()
        assert not runs
        nhwc = mx.nd.Convolution(x.transpose((0, 2, 3, 1)), w.transpose((0, 2, 3, 1)), b,
                                 kernel=(1, 1), stride=(stride, stride), num_filter=36,
                                 layout='NHWC').asnumpy()
    assert runs
    assert_close(nhwc.transpose(0, 3, 1, 2), nchw)


@needs_module
def test_a_measured_1x1_layer_keeps_only_its_winners_weights():
    from ember.backend import onednn
    x, w, bias, _, expected = layer(7, (4, 14, 14, 64), 64)
    attrs = mx.op.registry.get('Convolution').parse_attrs(
        dict(kernel=(1, 1), num_filter=64, layout='NHWC'))
    token = ((engine.get().new_var(), 0),)
    before = (onednn.kept_bytes(), kept.kept_bytes(), kept.plain_weight_bytes())
    out = np.empty(expected.shape, np.float32)
    STATE.choices.clear()
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT=2):
        convolution.forward(dict(attrs, cudnn_tune=None), x, w, bias, out,
                            KernelContext(None), weight_version=token)
    assert_close(out, expected)
    grown = [after > b for after, b in zip(
        (onednn.kept_bytes(), kept.kept_bytes(), kept.plain_weight_bytes()),
        before)]
    assert sum(grown) <= 1


# ----------------------------------------------------------------------------------------------
# im2col + the same products: gemm.gemm with packed weights

def gemm_layer(seed, batch=2, size=(9, 7), channels=20, filters=36, kernel=3, stride=2):
    from ember.op.nn._common import make_window
    rng = np.random.default_rng(seed)
    pad = kernel // 2
    out_size = tuple((n + 2 * pad - kernel) // stride + 1 for n in size)
    window = make_window((kernel,) * 2, (stride,) * 2, (1, 1), (pad,) * 2, size, out_size)
    x = rng.standard_normal((batch,) + size + (channels,)).astype(np.float32)
    w = (rng.standard_normal((filters, kernel, kernel, channels)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(filters).astype(np.float32)
    residual = rng.standard_normal((batch,) + out_size + (filters,)).astype(np.float32)
    return x, w, bias, residual, window


@needs_module
@pytest.mark.parametrize('threads', [1, 3])
@pytest.mark.parametrize('act_type', [None, 'relu', 'tanh'])
def test_gemm_on_packed_weights_matches_numpys(threads, act_type):
    x, w, bias, residual, window = gemm_layer(9)
    expected = np.empty(residual.shape, np.float32)
    gemm.gemm(x, w, bias, expected, window, 1, True, residual, act_type)
    packed = pointwise.packed_weights(w, None, None)
    for given in ('apart', 'in place', 'overlapping'):
        out = residual.copy() if given == 'in place' else np.full(residual.shape, np.nan,
                                                                  np.float32)
        res = {'apart': residual, 'in place': out[...], 'overlapping': None}[given]
        if given == 'overlapping':              # shares out's memory in another arrangement
            holder = np.concatenate([residual.ravel(), np.zeros(1, np.float32)])
            out, res = holder[1:].reshape(residual.shape), holder[:-1].reshape(residual.shape)
        gemm.gemm(x, w, bias, out, window, 1, True, res, act_type,
                  threads=threads, packed=packed)
        assert_close(out, expected)


def test_gemm_packs_channel_last_float32_patches():
    base = dict(kernel=(3, 3), pad=(1, 1), channels=32)
    expected = _winograd is not None
    assert gemm.packs(problem(**base)) == expected
    one_d = dict(kernel=(3,), stride=(1,), dilate=(1,), pad=(1,), size_in=(5,))
    for change in [dict(kernel=(1, 1), pad=(0, 0)), dict(one_d, channels=8), dict(groups=2),
                   dict(channel_last=False), dict(dtype='float64'), dict(gradient='data')]:
        assert not gemm.packs(problem(**dict(base, **change)))
    assert gemm.packs(problem(**dict(base, kernel=(1, 1), pad=(0, 0),
                                     stride=(2, 2)))) == expected
    # in 2-D the module gathers the patches, so narrow channels (an RGB image) pack too
    assert gemm.packs(problem(**dict(base, channels=3))) == expected
    assert gemm.packs(problem(**dict(base, **one_d))) == expected


def reference_patches(x, window, lo, hi):
    """NumPy im2col rows of NHWC `x`: per output pixel of the output lines [lo, hi), the
    kernel's taps in (y, x) order, C values each."""
    (ph, pw), (sh, sw), (kh, kw), (dh, dw) = (window.pad_before, window.stride, window.kernel,
                                              window.dilate)
    oh, ow = window.size_out
    padded = np.pad(x, ((0, 0), (ph, ph + kh * dh), (pw, pw + kw * dw), (0, 0)))
    taps = [padded[:, i * dh:i * dh + sh * oh:sh, j * dw:j * dw + sw * ow:sw]
            for i in range(kh) for j in range(kw)]
    rows = np.stack(taps, axis=3).reshape(x.shape[0] * oh, ow, -1)
    return rows[lo:hi].reshape(-1, rows.shape[-1])


@needs_module
@pytest.mark.parametrize('channels, kernel, stride, pad, dilate, lines', [
    (3, 7, 2, 3, 1, (0, 16)),            # resnet's first layer, small: every sample's lines
    (3, 7, 2, 3, 1, (5, 11)),            # lines from inside one sample into the next
    (5, 3, 1, 1, 2, (2, 9)),             # dilated: a tap at a time
    (2, 5, 3, 0, 1, (0, 3)),             # no padding, a stride past the kernel's overlap
    (4, 3, 1, 4, 1, (0, 20))])           # padding wider than the kernel: whole rows of zeros
def test_compiled_patches_are_numpys_im2col(channels, kernel, stride, pad, dilate, lines):
    from ember.op.nn._common import make_window
    rng = np.random.default_rng(channels + kernel)
    size = (13, 11)
    out = tuple((n + 2 * pad - dilate * (kernel - 1) - 1) // stride + 1 for n in size)
    window = make_window((kernel,) * 2, (stride,) * 2, (dilate,) * 2, (pad,) * 2, size, out)
    x = rng.standard_normal((2,) + size + (channels,)).astype(np.float32)
    lo, hi = min(lines[0], 2 * out[0]), min(lines[1], 2 * out[0])
    rows = np.full(((hi - lo) * out[1], kernel * kernel * channels), np.nan, np.float32)
    gemm.patches_of(x, rows, window, lo, hi)
    np.testing.assert_array_equal(rows, reference_patches(x, window, lo, hi))


@needs_module
def test_compiled_patches_check_their_arguments():
    x, rows = np.zeros((2, 5, 5, 3), np.float32), np.zeros((10, 27), np.float32)
    args = ((2, 5), (1, 1), (2, 2), (3, 3), (1, 1))
    with pytest.raises(ValueError, match=r'output lines \[0, 5\) of 2 samples of \(2, 5\): '
                                         r'expected 0 <= lo <= hi <= 4'):
        _winograd.patches(x, rows, *args, (0, 5))
    with pytest.raises(ValueError, match='rows: expected at least 405 float32 values, got 270'):
        _winograd.patches(x, rows, *args, (0, 3))
    with pytest.raises(ValueError, match=r'patches: stride \(0, 2\)'):
        _winograd.patches(x, rows, (2, 5), (1, 1), (0, 2), (3, 3), (1, 1), (0, 1))


@needs_module
@pytest.mark.parametrize('threads', [1, 2])
def test_gemm_of_an_rgb_image_gathers_its_patches_compiled(monkeypatch, conv_tuning, threads):
    """A 3-channel 7x7 stride-2 layer packs its weights and gathers its patches in the
    module, a chunk of TUNING.packed_patch_bytes or less a part; the result is NumPy's."""
    x, w, bias, residual, window = gemm_layer(11, size=(23, 19), channels=3, kernel=7)
    expected = np.empty(residual.shape, np.float32)
    gemm.gemm(x, w, bias, expected, window, 1, True, None, 'relu')
    gathered = []
    monkeypatch.setattr(gemm, 'patches_of',
                        lambda *args: gathered.append(args[-1] - args[-2])
                        or _winograd.patches(args[0], args[1], args[2].size_out,
                                             args[2].pad_before, args[2].stride,
                                             args[2].kernel, args[2].dilate, args[3:]))
    conv_tuning(packed_patch_bytes=3 * 147 * 4 * window.size_out[1])
    out = np.full(expected.shape, np.nan, np.float32)
    gemm.gemm(x, w, bias, out, window, 1, True, None, 'relu', threads=threads,
              packed=pointwise.packed_weights(w, None, None))
    assert_close(out, expected)
    assert max(gathered) <= 3 and sum(gathered) == 2 * window.size_out[0]


@needs_module
def test_a_gemm_layer_keeps_its_packed_weights_and_no_plain_copy(monkeypatch):
    """A scaled, transposed weight (a folded BatchNorm under the channel-last rewrite) is
    packed once per version, scaled as it is packed: no plain scaled copy is kept."""
    packs = []
    original = pointwise._pack
    monkeypatch.setattr(pointwise, '_pack',
                        lambda *args: packs.append(1) or original(*args))
    monkeypatch.setattr(algorithms, 'choose',
                        lambda *args, **kwargs: algorithms.ALGORITHMS['gemm'])
    x, w, bias, _, window = gemm_layer(10, stride=1)
    scale = np.linspace(0.5, 2, w.shape[0]).astype(np.float32)
    attrs = mx.op.registry.get('Convolution').parse_attrs(
        dict(kernel=(3, 3), pad=(1, 1), num_filter=w.shape[0], layout='NHWC'))
    expected = np.empty(x.shape[:-1] + (w.shape[0],), np.float32)
    gemm.gemm(x, w * scale.reshape(-1, 1, 1, 1), bias, expected, window, 1, True)
    oihw = np.ascontiguousarray(w.transpose(0, 3, 1, 2))
    var = engine.get().new_var()
    plain = kept.plain_weight_bytes()
    for version in (0, 0, 1):
        out = np.empty(expected.shape, np.float32)
        convolution.forward(attrs, x, oihw.transpose(0, 2, 3, 1), bias, out,
                            KernelContext(None), weight_scale=scale,
                            weight_version=((var, version),))
        assert_close(out, expected)
    assert len(packs) == 2
    assert kept.plain_weight_bytes() == plain
