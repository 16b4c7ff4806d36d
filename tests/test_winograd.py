"""The compiled Winograd F(4x4, 3x3) (ember._winograd) through winograd.winograd.

Checked against a float64 direct convolution on shapes that end in partial vectors, panels
and tiles, with every padding, with bias, residual (in place) and activations, on each of the
module's builds (the AVX-512 and AVX2 ones agree bit for bit); the results do not depend on
how the work is split; the transformed weights are kept per weight version; the NumPy code
runs where the module cannot.
"""
import threading
import types
import weakref

import numpy as np
import pytest

import ember as mx
from ember.op.nn.conv import (
    algorithms, common, compiled, convolution, kept, pointwise, tuning, winograd,
    winograd_compiled)
from ember.op.nn.conv.state import LINE, PACKED, STATE, TRANSFORMED
from ember.op.nn._common import make_window
from ember.op.nn.activation import ACTIVATIONS

_winograd = compiled.MODULE
needs_module = pytest.mark.skipif(_winograd is None, reason='ember._winograd is not built')


def direct(x, w, pad):
    """float64 NHWC reference of a 3x3 stride-1 convolution: one einsum per tap."""
    n, h, width, _ = x.shape
    oh, ow = h + 2 * pad - 2, width + 2 * pad - 2
    padded = np.pad(x.astype(np.float64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    return sum(np.einsum('nhwc,fc->nhwf', padded[:, i:i + oh, j:j + ow],
                         w[:, i, j].astype(np.float64)) for i in range(3) for j in range(3))


class Case:
    """NHWC data, OHWI weights, bias, residual and the float64 conv + bias."""

    def __init__(self, batch, size, channels, filters, pad, seed=0):
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal((batch,) + size + (channels,)).astype(np.float32)
        self.w = rng.standard_normal((filters, 3, 3, channels)).astype(np.float32)
        self.bias = rng.standard_normal(filters).astype(np.float32)
        self.expected = direct(self.x, self.w, pad) + self.bias
        self.residual = rng.standard_normal(self.expected.shape).astype(np.float32)
        self.window = make_window((3, 3), (1, 1), (1, 1), (pad, pad), size,
                                  self.expected.shape[1:3])

    def run(self, residual=None, act_type=None, threads=2, budget=None, weight_version=None,
            w=None):
        out = np.empty(self.expected.shape, np.float32)
        if residual is not None:
            out[...] = residual
            residual = out                          # in place, as _sg_conv runs it
        winograd.winograd(self.x, self.w if w is None else w, self.bias, out,
                          self.window, True, 4, residual, act_type, budget,
                          threads=threads, weight_version=weight_version)
        return out


CASES = {
    'odd channels and filters': Case(2, (9, 11), 5, 21, 1),
    'one tile': Case(1, (4, 4), 8, 16, 1),
    'no padding': Case(3, (7, 6), 13, 3, 0),
    'padding 2': Case(1, (5, 5), 16, 40, 2),
    'many tiles': Case(2, (18, 14), 24, 32, 1),
}


def assert_close(out, expected):
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize('threads', [1, 3])
@pytest.mark.parametrize('case', CASES)
def test_matches_the_direct_convolution(build, case, threads):
    c = CASES[case]
    assert_close(c.run(threads=threads), c.expected)
    assert_close(c.run(c.residual, 'relu', threads), np.maximum(c.expected + c.residual, 0))


@needs_module
def test_an_empty_batch_writes_nothing():
    c = CASES['one tile']
    out = np.empty((0,) + c.expected.shape[1:], np.float32)
    winograd.winograd(c.x[:0], c.w, c.bias, out, c.window, True, 4, threads=2)
    assert out.shape[0] == 0


@needs_module
@pytest.mark.parametrize('act_type', ['sigmoid', 'tanh'])
def test_other_activations_follow_the_compiled_part(act_type):
    c = CASES['odd channels and filters']
    expected = ACTIVATIONS[act_type][0](np, c.expected + c.residual)
    assert_close(c.run(c.residual, act_type), expected)


@needs_module
@pytest.mark.parametrize('case', CASES)
def test_results_do_not_depend_on_threads_or_chunks(case):
    c = CASES[case]
    alone = c.run(threads=1)
    np.testing.assert_array_equal(c.run(threads=4), alone)
    np.testing.assert_array_equal(c.run(threads=2, budget=1), alone)    # one tile a chunk


def split_of(tiles, channels, filters, threads):
    return winograd_compiled._split(tiles, channels, filters, threads, tuning.TUNING)


def test_few_tiles_split_the_filters_and_many_split_the_tiles():
    split = winograd_compiled._Split
    # (threads taking items, filter panels per item (0: chunks of tiles), products' width)
    assert split_of(1, 8, 64, 2) == split(2, 1, 16)
    assert split_of(1, 8, 21, 4) == split(2, 1, 16)
    assert split_of(64, 8, 64, 2) == split(2, 0, 64)
    assert split_of(16, 256, 256, 2) == split(2, 4, 64)
    # weights too large for the cache: each item reads only its filters' part
    assert split_of(64, 512, 512, 2) == split(2, 8, 128)
    # a batch-1 layer at 28x28 (7x7 tiles): under 32 tiles a thread, they share the filters
    assert split_of(49, 128, 128, 2) == split(2, 2, 32)


def test_threads_sharing_the_filters_take_all_the_tiles_in_one_chunk():
    """Each such thread reads its part of the weights once per chunk, so a chunk holds all
    of a call's tiles, as many as fit TUNING.shared_chunk_bytes a thread and the budget."""
    def chunk(channels, filters, width, parts, budget, shared_tiles=0):
        return winograd_compiled._chunk(channels, filters, width, parts, budget, shared_tiles,
                                        tuning.TUNING)
    assert chunk(256, 256, 64, 2, None, shared_tiles=16) == 16
    assert chunk(128, 128, 32, 2, None, shared_tiles=49) == 49
    # as many as fit the bytes, each tile position rounded up to an odd number of lines
    many = chunk(512, 512, 128, 2, None, shared_tiles=1000)
    floats = winograd_compiled._chunk_floats
    assert 4 * floats(many, 512, 128) <= tuning.TUNING.shared_chunk_bytes \
        < 4 * floats(many + 1, 512, 128)
    five = 4 * winograd_compiled._chunk_floats(5, 256, 64)
    assert chunk(256, 256, 64, 2, 2 * five, shared_tiles=16) == 5
    assert chunk(256, 256, 64, 2, 2 * five - 8, shared_tiles=16) == 4
    # threads that share the tiles keep the short chunks that stay in L2
    assert chunk(256, 256, 64, 2, None) == tuning.TUNING.short_chunk


def _convolve_args(c, chunk, width):
    """convolve()'s arguments for a whole case with fresh scratch, as lists to edit."""
    u = winograd_compiled._packed_weights(c.w, None, None, 1)
    out = np.zeros(c.expected.shape, np.float32)
    tiles = c.x.shape[0] * int(np.prod(common.output_tiles(c.window, 4)))
    channels, filters = c.w.shape[-1], c.w.shape[0]
    return [c.x, u, out, c.bias, None, False, c.window.pad_before, (0, tiles), (0, filters),
            chunk, np.empty(_winograd.tile_floats(chunk, channels), np.float32),
            np.empty(_winograd.tile_floats(chunk, width), np.float32)]


@needs_module
def test_weights_of_any_strides_transform_as_their_copies():
    rng = np.random.default_rng(5)
    oihw = rng.standard_normal((40, 24, 3, 3)).astype(np.float32)
    ohwi = rng.standard_normal((40, 3, 3, 24)).astype(np.float32)
    views = {'OIHW seen as OHWI': oihw.transpose(0, 2, 3, 1),
             'flipped and swapped (the data gradient)': ohwi.transpose(3, 1, 2, 0)[:, ::-1, ::-1],
             'every other filter': np.concatenate([ohwi, ohwi])[::2]}
    for name, view in views.items():
        shape = winograd_compiled.packed_shape(view.shape[-1], view.shape[0])
        strided, copied = np.empty(shape, np.float32), np.empty(shape, np.float32)
        _winograd.transform_weights(view, strided, (0, shape[1]))
        _winograd.transform_weights(np.ascontiguousarray(view), copied, (0, shape[1]))
        assert strided.tobytes() == copied.tobytes(), name
    with pytest.raises(ValueError, match='w: expected a 4-D'):
        _winograd.transform_weights(ohwi[0], strided, (0, 1))


@needs_module
@pytest.mark.parametrize('filters, channels', [(16, 64), (40, 19), (7, 8)])
def test_scaled_weights_transform_as_their_scaled_copies(build, filters, channels):
    # a folded BatchNorm's scale is applied as the weights are read: the bits of NumPy's
    # w * scale transformed, for every layout the fast paths take and every build
    rng = np.random.default_rng(8)
    ohwi = rng.standard_normal((filters, 3, 3, channels)).astype(np.float32)
    scale = rng.uniform(0.1, 3.0, filters).astype(np.float32)
    views = {'OHWI': ohwi,
             'OIHW seen as OHWI': np.ascontiguousarray(ohwi.transpose(0, 3, 1, 2)).transpose(
                 0, 2, 3, 1),
             'every other filter': np.concatenate([ohwi, ohwi])[::2]}
    shape = winograd_compiled.packed_shape(channels, filters)
    for name, view in views.items():
        scaled, want = np.full(shape, np.nan, np.float32), np.full(shape, np.nan, np.float32)
        _winograd.transform_weights(view, scaled, (0, shape[1]), scale)
        _winograd.transform_weights(view * scale[:, None, None, None], want, (0, shape[1]))
        assert scaled.tobytes() == want.tobytes(), name
    # the kernel's own caller: any float scale, the weights' filters split over two parts
    kept = winograd_compiled._packed_weights(ohwi, scale.astype(np.float64), None, 2)
    _winograd.transform_weights(ohwi * scale[:, None, None, None], want, (0, shape[1]))
    assert kept.tobytes() == want.tobytes()
    with pytest.raises(ValueError, match='scale: expected at least'):
        _winograd.transform_weights(ohwi, scaled, (0, shape[1]), scale[:-1])


@needs_module
@pytest.mark.parametrize('filters, channels', [(16, 256), (40, 19), (7, 8), (33, 130)])
def test_adjacent_channels_transform_as_gathered_ones(build, filters, channels):
    # OHWI weights with adjacent channels take whole vectors of 8 channels, transposed into
    # vectors across the filters; the filters and channels past whole vectors of them are
    # gathered: every build gives the bits of the gather for any layout
    # (the AVX-512 build also loads the 72 taps of 8 channels of each filter of OIHW weights
    # seen as OHWI as vectors)
    ohwi = np.random.default_rng(6).standard_normal((filters, 3, 3, channels)).astype(
        np.float32)
    runs = np.ascontiguousarray(ohwi.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    wider = np.zeros((filters, channels, 3, 4), np.float32)    # a row of 4: no fast path
    wider[..., :3] = runs.transpose(0, 3, 1, 2)
    gathered = wider[..., :3].transpose(0, 2, 3, 1)
    shape = winograd_compiled.packed_shape(channels, filters)
    fast, slow = np.full(shape, np.nan, np.float32), np.full(shape, np.nan, np.float32)
    _winograd.transform_weights(gathered, slow, (0, shape[1]))
    for layout in (ohwi, runs):
        _winograd.transform_weights(layout, fast, (0, shape[1]))
        assert fast.tobytes() == slow.tobytes()
    g = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
    want = np.einsum('ia,jb,fabc->ijcf', g, g, ohwi.astype(np.float64)).reshape(36, channels,
                                                                                filters)
    got = fast.transpose(0, 2, 1, 3).reshape(36, channels, -1)[..., :filters]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@needs_module
def test_tile_positions_lie_an_odd_number_of_cache_lines_apart():
    # a whole number of 4 KB between the 36 positions put them all in one L1 set
    for count, row in [(16, 128), (24, 128), (12, 256), (6, 256), (5, 40), (1, 3), (0, 16)]:
        floats = _winograd.tile_floats(count, row)
        step = floats // 36
        assert floats == 36 * step and step >= count * row
        assert step % 16 == 0 and (step // 16) % 2 == 1
        assert step - count * row < 32          # at most a line and a part of one more
    with pytest.raises(ValueError, match=r'tile_floats: count -1 and row 8 must be >= 0'):
        _winograd.tile_floats(-1, 8)


@needs_module
def test_convolve_takes_scratch_of_tile_floats():
    c = CASES['many tiles']         # 24 channels, 32 filters
    args = _convolve_args(c, 8, 32)
    _winograd.convolve(*args)
    assert_close(args[2], c.expected)
    for index, name, row in ((10, 'v', 24), (11, 'm', 32)):
        short = list(args)
        short[index] = np.empty(_winograd.tile_floats(8, row) - 1, np.float32)
        with pytest.raises(ValueError, match=f'{name}: expected at least'):
            _winograd.convolve(*short)


@needs_module
@pytest.mark.parametrize('panels', [0, 1, 2])
def test_threads_sharing_a_counter_compute_every_tile_once(panels):
    """Callers sharing a claim counter take chunks of tiles (or filter groups of a chunk)
    until none is left: a late caller finds the work done, concurrent ones split it, and
    every output is as one caller computes it alone."""
    c = CASES['many tiles']
    width = 32 if panels == 0 else 16 * panels
    alone = _convolve_args(c, 3, 32)
    _winograd.convolve(*alone)
    assert_close(alone[2], c.expected)
    for concurrent in (False, True):
        args = _convolve_args(c, 3, width)
        claim = np.zeros(1, np.int64)
        calls = [args + [claim, panels], args[:10] + [
            np.empty_like(args[10]), np.empty_like(args[11]), claim, panels]]
        if concurrent:
            threads = [threading.Thread(target=_winograd.convolve, args=call) for call in calls]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        else:
            for call in calls:
                _winograd.convolve(*call)
        np.testing.assert_array_equal(args[2], alone[2])
        chunks = -(-args[7][1] // 3)
        items = chunks if panels == 0 else chunks * -(-32 // (16 * panels))
        # every caller takes one item past the last to see that none is left
        assert claim[0] == (items + 2 if panels else 3 * (items + 2))


def _fused_case(seed, batch, size, channels, filters, layout):
    """A Case whose weights are laid out as `layout` says (OHWI, OIHW seen as OHWI, or a view
    the transform gathers), and a per-filter scale."""
    c = Case(batch, size, channels, filters, 1, seed=seed)
    if layout == 'OIHW':
        c.w = np.ascontiguousarray(c.w.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    elif layout == 'strided':
        c.w = np.concatenate([c.w, c.w])[::2]
    c.scale = np.random.default_rng(seed).uniform(0.5, 1.5, filters).astype(np.float32)
    return c


@needs_module
@pytest.mark.parametrize('layout', ['OHWI', 'OIHW', 'strided'])
@pytest.mark.parametrize('shape', [(1, (14, 14), 64, 48), (2, (9, 11), 5, 21),
                                   (1, (7, 7), 24, 37)], ids=['whole', 'odd', 'tails'])
def test_fused_weights_give_the_bits_of_transformed_ones(build, shape, layout):
    """convolve() given the weights (and their scale) transforms each group's into the
    thread's own U as it takes it: the outputs are those of U transformed first from the
    scaled weights, whatever the group, chunk, number of callers and the fetch ahead."""
    c = _fused_case(7, *shape, layout)
    channels, filters = c.w.shape[-1], c.w.shape[0]
    panels = -(-filters // 16)
    u = winograd_compiled._packed_weights(c.w * c.scale[:, None, None, None], None, None, 1)
    tiles = c.x.shape[0] * int(np.prod(common.output_tiles(c.window, 4)))
    for group, chunk, callers, ahead in [(1, tiles, 2, 2), (2, tiles, 1, 0),
                                         (panels, 5, 2, 1), (1, 3, 3, 0)]:
        outs = []
        for fused in (False, True):
            out = np.full(c.expected.shape, np.nan, np.float32)
            claim = np.zeros(1, np.int64)
            for _ in range(callers):           # one after another: the first takes all
                own = np.full(_winograd.own_u_floats(group, channels), np.nan, np.float32)
                args = [c.x, own if fused else u, out, c.bias, None, True,
                        c.window.pad_before, (0, tiles), (0, filters), chunk,
                        np.empty(_winograd.tile_floats(chunk, channels), np.float32),
                        np.empty(_winograd.tile_floats(chunk, 16 * group), np.float32), claim,
                        group] + ([c.w, c.scale, ahead] if fused else [])
                _winograd.convolve(*args)
            outs.append(out)
        assert outs[0].tobytes() == outs[1].tobytes(), (group, chunk)
    expected = direct(c.x, c.w * c.scale[:, None, None, None], 1) + c.bias
    assert_close(outs[1], np.maximum(expected, 0))


@needs_module
@pytest.mark.parametrize('fused', [False, True])
def test_a_prepared_call_runs_again_on_its_scratch_or_moved_scratch(fused):
    """A Prepared call builds its kernel arguments once per place of its scratch, setting
    the shared counter back to 0 for each run; scratch that moved gets arguments anew."""
    c = CASES['one tile'] if fused else CASES['many tiles']
    held = {}

    def alloc(specs):                   # the same arrays until `held` is cleared
        if not held:
            held['arrays'] = [np.empty(shape, dtype) for shape, dtype in specs]
        return held['arrays']
    out = np.empty(c.expected.shape, np.float32)
    version = ((Var(), 0),)
    prepared = winograd.winograd(c.x, c.w, c.bias, out, c.window, True, 4, alloc=alloc,
                                 threads=2, weight_version=version, fused=fused)
    assert isinstance(prepared, compiled.Prepared)
    for moved in (False, False, True, False):
        if moved:
            held.clear()
        out[...] = np.nan
        assert prepared.run(version)
        assert_close(out, c.expected)
    kept.discard_others(version)


@needs_module
def test_a_thread_s_own_weights_lie_an_odd_number_of_lines_apart():
    # so that the transform writes each channel's 36 values straight into them
    for panels, channels in [(1, 256), (2, 256), (1, 5), (3, 17)]:
        floats = _winograd.own_u_floats(panels, channels)
        step = (floats - 16) // 36                  # one line more, to align them
        assert floats == 36 * step + 16 and step >= panels * channels * 16
        assert step % 16 == 0 and (step // 16) % 2 == 1
    with pytest.raises(ValueError, match='panels 0 and channels 8 must be >= 1'):
        _winograd.own_u_floats(0, 8)


@needs_module
def test_fused_convolve_errors_name_the_argument():
    c = _fused_case(8, 1, (14, 14), 24, 32, 'OHWI')
    own = np.empty(_winograd.own_u_floats(1, 24), np.float32)
    args = [c.x, own, np.empty(c.expected.shape, np.float32), None, None, False, (1, 1),
            (0, 16), (0, 32), 16, np.empty(_winograd.tile_floats(16, 24), np.float32),
            np.empty(_winograd.tile_floats(16, 16), np.float32), np.zeros(1, np.int64), 1,
            c.w, c.scale, 2]
    _winograd.convolve(*args)
    for index, value, message in [
            (13, 0, 'expected a claim and claim_panels >= 1'),
            (12, None, 'expected a claim and claim_panels >= 1'),
            (14, c.w[:16], r'w \(16, 3, 3, 24\): expected 32 filters of 24 channels'),
            (14, np.zeros((32, 5, 5, 24), np.float32), 'expected OHWI 3x3 weights'),
            (15, c.scale[:8], 'scale: expected at least 32'),
            (1, own[:-20], 'u: expected at least'),
            (16, -1, 'ahead_items -1: expected >= 0')]:
        bad = list(args)
        bad[index] = value
        with pytest.raises(ValueError, match=message):
            _winograd.convolve(*bad)
    with pytest.raises(ValueError, match='scale: given without w'):
        _winograd.convolve(*args[:14], None, c.scale)


@needs_module
def test_a_claim_counter_must_be_one_writable_int64():
    c = CASES['many tiles']
    args = _convolve_args(c, 3, 32)
    with pytest.raises(TypeError, match="claim: expected a writable, aligned int64 array, "
                                        "got buffer format 'i'"):
        _winograd.convolve(*args, np.zeros(2, np.int32), 0)
    with pytest.raises(TypeError, match='claim'):
        _winograd.convolve(*args, np.zeros(1, np.int64)[:0], 0)
    with pytest.raises(ValueError, match=r'claim_panels -1: expected >= 0'):
        _winograd.convolve(*args, np.zeros(1, np.int64), -1)


@needs_module
def test_relative_error_on_resnet_like_data():
    """He-initialised weights on relu'd inputs: F(4x4)'s float32 transforms lose ~1e-5."""
    rng = np.random.default_rng(3)
    x = np.maximum(rng.standard_normal((2, 14, 14, 128)), 0).astype(np.float32)
    w = (rng.standard_normal((128, 3, 3, 128)) * np.sqrt(2 / (9 * 128))).astype(np.float32)
    out = np.empty((2, 14, 14, 128), np.float32)
    winograd.winograd(x, w, None, out, make_window((3, 3), (1, 1), (1, 1), (1, 1),
                                                   (14, 14), (14, 14)), True, 4)
    expected = direct(x, w, 1)
    error = np.abs(out - expected)
    assert error.max() / np.abs(expected).max() < 1e-4
    assert np.sqrt((error ** 2).mean() / (expected ** 2).mean()) < 1e-5


# ----------------------------------------------------------------------------------------------
# Transformed weights kept per weight version

class Var:
    """Stands for an engine variable: weakly referenced, identified by itself."""


@pytest.fixture
def transforms(compiled_module):
    """The weight transforms that the compiled module runs (one entry per thread's part):
    transform_weights(), and convolve() given the weights to transform itself (fused)."""
    if _winograd is None:
        pytest.skip('ember._winograd is not built')
    calls = []

    def transform_weights(w, u, panels, scale=None):
        calls.append(w.shape)
        _winograd.transform_weights(w, u, panels, scale)

    def convolve(*args):
        if len(args) > 14 and args[14] is not None:
            calls.append(args[14].shape)
        _winograd.convolve(*args)
    # openmp off: the spy's kernels run as the kernel threads' parts
    spy = types.SimpleNamespace(convolve=convolve, pointwise=_winograd.pointwise,
                                patches=_winograd.patches, tile_floats=_winograd.tile_floats,
                                own_u_floats=_winograd.own_u_floats,
                                transform_weights=transform_weights, openmp=0)
    compiled_module(spy)
    yield calls
    STATE.kept[TRANSFORMED].clear()


def test_weights_are_transformed_once_per_version(transforms):
    c, var = CASES['many tiles'], Var()
    before = kept.kept_bytes()
    first = c.run(threads=1, weight_version=((var, 0),))
    assert len(transforms) == 1 and kept.kept_bytes() > before
    np.testing.assert_array_equal(c.run(threads=1, weight_version=((var, 0),)), first)
    assert len(transforms) == 1
    changed = c.w * 2           # a new version of the same variable: transformed again
    out = c.run(threads=1, weight_version=((var, 1),), w=changed)
    assert len(transforms) == 2
    assert_close(out, 2 * (c.expected - c.bias) + c.bias)


def test_without_a_version_the_weights_are_transformed_every_call(transforms):
    c = CASES['one tile']
    before = kept.kept_bytes()
    c.run(threads=1)
    c.run(threads=1)
    assert len(transforms) == 2 and kept.kept_bytes() == before


def test_kept_weights_go_with_their_variable_or_when_discarded(transforms):
    c, var, other = CASES['one tile'], Var(), Var()
    c.run(weight_version=((var, 0),))
    c.run(weight_version=((other, 0),))
    before = kept.kept_bytes()
    kept.discard_others(((other, 0),))
    assert kept.kept_bytes() < before
    gone = weakref.ref(var)
    del var
    assert gone() is None
    c.run(weight_version=((Var(), 0),))         # keeping another drops the dead one's copy
    assert kept.kept_bytes() < before


# ----------------------------------------------------------------------------------------------
# Where the compiled module does not run

def test_without_the_module_the_numpy_code_runs(compiled_module):
    compiled_module(None)
    c = CASES['odd channels and filters']
    assert_close(c.run(c.residual, 'relu'), np.maximum(c.expected + c.residual, 0))


@needs_module
def test_float64_data_takes_the_numpy_code(compiled_module):
    compiled_module(None)      # would fail if called
    c = CASES['no padding']
    out = np.empty(c.expected.shape)
    winograd.winograd(c.x.astype(np.float64), c.w.astype(np.float64), c.bias, out,
                      c.window, True, 4)
    assert_close(out, c.expected)


# ----------------------------------------------------------------------------------------------
# Channel-first data, through channel-last copies; data gradients

def _nchw(a):
    return np.ascontiguousarray(a.transpose(0, 3, 1, 2))


@needs_module
@pytest.mark.parametrize('budget', [None, 1], ids=['whole batch', 'a sample at a time'])
@pytest.mark.parametrize('case', ['odd channels and filters', 'no padding'])
def test_channel_first_data_runs_compiled(monkeypatch, transforms, case, budget):
    c = CASES[case]
    convolved = []
    spy = winograd_compiled.MODULE                # the transforms fixture's
    real = spy.convolve
    monkeypatch.setattr(spy, 'convolve', lambda *a: convolved.append(a[0].shape) or real(*a))
    out = _nchw(c.residual)
    winograd.winograd(_nchw(c.x), _nchw(c.w), c.bias, out, c.window, False, 4,
                      residual=out, act_type='relu', budget=budget, threads=2)
    assert_close(out, _nchw(np.maximum(c.expected + c.residual, 0)))
    panels = -(-c.w.shape[0] // 16)              # the weights once, however many chunks:
    assert len(transforms) == min(2, panels)     # one entry per thread's panels
    batches = {shape[0] for shape in convolved}
    assert batches == ({c.x.shape[0]} if budget is None else {1})


def direct_data_gradient(dy, w, pad):
    """float64 NHWC reference: each tap scatters dy back through the weights."""
    n, oh, ow, _ = dy.shape
    h, width = oh - 2 * pad + 2, ow - 2 * pad + 2
    padded = np.zeros((n, h + 2 * pad, width + 2 * pad, w.shape[-1]))
    for i in range(3):
        for j in range(3):
            padded[:, i:i + oh, j:j + ow] += np.einsum('nhwf,fc->nhwc', dy, w[:, i, j])
    return padded[:, pad:pad + h, pad:pad + width]


@needs_module
@pytest.mark.parametrize('channel_last', [True, False], ids=['NHWC', 'NCHW'])
@pytest.mark.parametrize('pad', [0, 1, 2])
def test_data_gradient_is_the_flipped_convolution(channel_last, pad):
    rng = np.random.default_rng(pad)
    x_shape, filters = (2, 9, 7, 12), 19
    w = rng.standard_normal((filters, 3, 3, x_shape[-1])).astype(np.float32)
    out_size = (x_shape[1] + 2 * pad - 2, x_shape[2] + 2 * pad - 2)
    dy = rng.standard_normal((2,) + out_size + (filters,)).astype(np.float32)
    window = make_window((3, 3), (1, 1), (1, 1), (pad, pad), x_shape[1:3], out_size)
    expected = direct_data_gradient(dy.astype(np.float64), w.astype(np.float64), pad)
    if channel_last:
        dx = np.empty(x_shape, np.float32)
        winograd_compiled.data_gradient(dy, w, dx, window, True, threads=2)
    else:
        dx = np.empty(_nchw(np.empty(x_shape)).shape, np.float32)
        winograd_compiled.data_gradient(_nchw(dy), _nchw(w), dx, window, False, threads=2)
        expected = _nchw(expected)
    assert_close(dx, expected)


def direct_weight_gradient(dy, x, pad):
    """float64 OHWI reference: each tap sums dy against the shifted input."""
    oh, ow = dy.shape[1:3]
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    return np.stack([np.stack([np.einsum('nhwf,nhwc->fc', dy, padded[:, i:i + oh, j:j + ow])
                               for j in range(3)], 1) for i in range(3)], 1)


@needs_module
@pytest.mark.parametrize('channel_last', [True, False], ids=['NHWC', 'NCHW'])
@pytest.mark.parametrize('pad', [0, 1, 2])
def test_weight_gradient_sums_in_the_winograd_domain(build, channel_last, pad):
    rng = np.random.default_rng(10 + pad)
    x = rng.standard_normal((3, 10, 7, 13)).astype(np.float32)
    filters = 21                                     # a partial panel and a partial vector
    out_size = (10 + 2 * pad - 2, 7 + 2 * pad - 2)
    dy = rng.standard_normal((3,) + out_size + (filters,)).astype(np.float32)
    window = make_window((3, 3), (1, 1), (1, 1), (pad, pad), x.shape[1:3], out_size)
    expected = direct_weight_gradient(dy.astype(np.float64), x.astype(np.float64), pad)
    dw = np.empty((filters, 3, 3, 13), np.float32)
    if channel_last:
        winograd_compiled.weight_gradient(dy, x, dw, window, True, threads=2)
    else:
        dw = np.empty((filters, 13, 3, 3), np.float32)
        winograd_compiled.weight_gradient(_nchw(dy), _nchw(x), dw, window, False, threads=2)
        expected = expected.transpose(0, 3, 1, 2)
    assert_close(dw, expected)


@needs_module
def test_the_avx512_and_avx2_builds_agree_bit_for_bit(conv_tuning, wide_and_narrow):
    """The AVX-512 products take two panels by 12 rows at a time, the AVX2 ones one panel by
    6: each output is still the same chain of multiply-adds. 40 filters: a pair of panels
    and a single one; 25 channels and 5 x 9 tiles: blocks of 12 with a remainder. The same
    for the 1x1 weight gradient's sums (48 channels: a pair and a single panel), and for the
    1x1 forward products over two blocks of channels, with their epilogue."""
    conv_tuning(pointwise_depth=32)
    c = Case(1, (18, 34), 25, 40, 1, seed=4)
    x, dy, window = same_size_layer(5, (2, 20, 18, 25), 40)

    px, pdy = same_size_layer(6, (2, 7, 9, 48), 40)[:2]

    def both():
        dw = np.empty((40, 3, 3, 25), np.float32)
        winograd_compiled.weight_gradient(dy, x, dw, window, True, threads=2)
        pw, pb = np.empty((40, 1, 1, 48), np.float32), np.empty(40, np.float32)
        pointwise.weight_gradient(pdy, px, pw, pb, threads=1)
        forward = pdy.copy()
        pointwise.convolve(px, pw, pb, forward, (1, 1), forward, 'relu', threads=2)
        return c.run(c.residual, 'relu'), dw, pw, pb, forward
    wide, narrow = wide_and_narrow(both)
    for a, b in zip(wide, narrow):
        assert a.tobytes() == b.tobytes()
    assert_close(wide[0], np.maximum(c.expected + c.residual, 0))


# ----------------------------------------------------------------------------------------------
# The 1x1 weight gradient: the same compiled sums on the rows of dy and x

def pointwise_case(seed, shape, filters):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(shape[:-1] + (filters,)).astype(np.float32)
    rows_x, rows_dy = x.reshape(-1, shape[-1]), dy.reshape(-1, filters)
    expected = (rows_dy.T.astype(np.float64) @ rows_x.astype(np.float64)).reshape(
        filters, 1, 1, shape[-1])
    return x, dy, expected, rows_dy.astype(np.float64).sum(axis=0)


@pytest.mark.parametrize('filters', [12, 40, 67])         # whole, partial and odd row blocks
@pytest.mark.parametrize('threads', [1, 2, 3])
@pytest.mark.parametrize('bias', [True, False])
def test_pointwise_weight_gradient_matches_float64(build, filters, threads, bias):
    x, dy, expected, sums = pointwise_case(filters, (3, 17, 13, 32), filters)
    dw = np.full(expected.shape, np.nan, np.float32)
    db = np.full(filters, np.nan, np.float32) if bias else None
    pointwise.weight_gradient(dy, x, dw, db, threads=threads)
    assert_close(dw, expected)
    if bias:
        assert_close(db, sums)


@needs_module
def test_pointwise_weight_gradient_writes_strided_outputs_and_any_chunk(conv_tuning):
    x, dy, expected, sums = pointwise_case(1, (2, 5, 6, 16), 20)
    holder = np.full((20, 1, 1, 32), np.nan, np.float32)
    bias_holder = np.full(40, np.nan, np.float32)
    dw, db = holder[..., ::2], bias_holder[::2]           # not contiguous
    conv_tuning(pointwise_chunk_rows=7)
    pointwise.weight_gradient(dy, x, dw, db, threads=2)
    assert_close(dw, expected)
    assert_close(db, sums)
    assert np.isnan(holder[..., 1::2]).all() and np.isnan(bias_holder[1::2]).all()


@needs_module
def test_pointwise_gradient_zeroes_its_sums_when_asked():
    x, dy, expected, sums = pointwise_case(2, (2, 5, 6, 16), 20)
    rows = 2 * 5 * 6
    dw, db = np.full((20, 1, 1, 16), np.nan, np.float32), np.full(20, np.nan, np.float32)
    _winograd.pointwise_gradient(dy, x, dw, db, (0, rows), 7, True)
    assert_close(dw, expected)
    assert_close(db, sums)
    _winograd.pointwise_gradient(dy, x, dw, db, (0, rows), 7)      # adds
    assert_close(dw, 2 * expected)
    assert_close(db, 2 * sums)


@needs_module
def test_pointwise_gradient_errors_name_the_argument():
    x, dy = np.zeros((1, 4, 4, 16), np.float32), np.zeros((1, 4, 4, 8), np.float32)
    dw, db = np.zeros((8, 1, 1, 16), np.float32), np.zeros(8, np.float32)
    for index, value, message in [
            (1, np.zeros((1, 4, 5, 16), np.float32), r"x: expected the samples, rows and "
                                                     r"columns of dy \(1, 4, 4\)"),
            (1, np.zeros((1, 4, 4, 24), np.float32), "whole panels of 16, got 24"),
            (2, np.zeros(100, np.float32), "dw: expected at least 128"),
            (3, np.zeros(7, np.float32), "db: expected at least 8"),
            (4, (3, 17), r"rows \[3, 17\): expected 0 <= lo <= hi <= 16"),
            (5, 0, "chunk: expected at least 1 row, got 0"),
            (0, np.zeros((4, 4, 8), np.float32), "dy: expected a 4-D")]:
        args = [dy, x, dw, db, (0, 16), 4]
        args[index] = value
        with pytest.raises(ValueError, match=message):
            _winograd.pointwise_gradient(*args)


@pytest.mark.parametrize('change, supported', [
    ({}, True), (dict(channels=24), False), (dict(stride=(2, 2)), False),
    (dict(pad=(1, 1)), False), (dict(kernel=(3, 3)), False), (dict(channel_last=False), False),
    (dict(groups=2), False), (dict(dtype='float64'), False), (dict(gradient='data'), False),
    # its (F, C) sums within 2 MB: resnet50_v1's 1024 -> 256 (1 MB), not 2048 -> 512 (4 MB)
    (dict(channels=1024, filters=256), True), (dict(channels=2048, filters=512), False),
    (dict(channels=512, filters=2048, batch=64), False)])
def test_pointwise_gradient_support(change, supported):
    problem = algorithms.ConvProblem(**dict(dict(
        channel_last=True, batch=2, channels=32, filters=8, groups=1, kernel=(1, 1),
        stride=(1, 1), dilate=(1, 1), pad=(0, 0), size_in=(5, 5), dtype='float32',
        gradient='weight'), **change))
    expected = supported and _winograd is not None
    assert pointwise.supports_weight_gradient(problem) == expected
    names = [a.name for a in algorithms.candidates(problem, onednn=False)]
    assert ('pointwise' in names) == expected


def same_size_layer(seed, x_shape, filters):
    """NHWC data of `x_shape`, an output gradient of `filters` channels and the window of a
    3x3 layer padded by 1."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    dy = rng.standard_normal(x_shape[:-1] + (filters,)).astype(np.float32)
    return x, dy, make_window((3, 3), (1, 1), (1, 1), (1, 1), x_shape[1:3], x_shape[1:3])


def weight_gradient_layer(seed, x_shape, filters):
    """run(threads), the NHWC weight gradient of a same_size_layer on `threads` kernel
    threads, and its float64 reference."""
    x, dy, window = same_size_layer(seed, x_shape, filters)

    def run(threads):
        dw = np.empty((filters, 3, 3, x_shape[-1]), np.float32)
        winograd_compiled.weight_gradient(dy, x, dw, window, True, threads=threads)
        return dw
    return run, direct_weight_gradient(dy.astype(np.float64), x.astype(np.float64), 1)


@needs_module
def test_weight_gradient_bits_do_not_depend_on_threads(conv_tuning):
    run, expected = weight_gradient_layer(3, (2, 12, 12, 40), 50)
    one = run(1)
    assert all(run(t).tobytes() == one.tobytes() for t in (2, 3, 4))
    # chunks of a few tiles round otherwise, but sum the same
    conv_tuning(gradient_chunk_bytes=36 * 90 * 4 * 5)
    assert_close(run(2), expected)


def test_weight_gradient_sums_fetched_ahead_are_the_same_sums(build):
    """The sums fetch each register block's sums while the block before runs (ember/
    _winograd.c, fetch_next_sums). 110 channels by 136 filters: blocks of 12 (AVX-512) or 6
    channels with a remainder, and four pairs of panels then a single one, so that the fetch
    wraps to the next filters and stops at the last block; one thread takes all the filters,
    two take half each. The bits are the same, and the sums right."""
    run, expected = weight_gradient_layer(8, (2, 6, 6, 110), 136)
    fetched = run(1)
    assert fetched.tobytes() == run(2).tobytes()
    assert_close(fetched, expected)


@needs_module
@pytest.mark.parametrize('channel_last', [True, False])
def test_weight_gradient_scratch_covers_what_it_takes(channel_last, counted_alloc):
    alloc, taken = counted_alloc, counted_alloc.taken
    x = np.zeros((2, 9, 9, 24) if channel_last else (2, 24, 9, 9), np.float32)
    dy = np.zeros((2, 9, 9, 40) if channel_last else (2, 40, 9, 9), np.float32)
    dw = np.empty((40, 3, 3, 24) if channel_last else (40, 24, 3, 3), np.float32)
    window = make_window((3, 3), (1, 1), (1, 1), (1, 1), (9, 9), (9, 9))
    winograd_compiled.weight_gradient(dy, x, dw, window, channel_last, alloc=alloc,
                                      threads=mx.engine.kernel_threads())
    problem = algorithms.ConvProblem(channel_last, 2, 24, 40, 1, (3, 3), (1, 1), (1, 1),
                                     (1, 1), (9, 9), 'float32', 'weight')
    assert 0 < sum(taken) <= winograd_compiled.weight_gradient_scratch_bytes(problem, 2)


@needs_module
def test_channel_first_gradients_copy_a_few_samples_at_a_time(monkeypatch, conv_tuning):
    x, dy, window = same_size_layer(5, (4, 9, 9, 6), 10)
    expected = direct_weight_gradient(dy.astype(np.float64), x.astype(np.float64),
                                      1).transpose(0, 3, 1, 2)
    x, dy = _nchw(x), _nchw(dy)
    seen = []
    real = _winograd.weight_gradient
    monkeypatch.setattr(_winograd, 'weight_gradient',
                        lambda *a: seen.append(a[0].shape[0]) or real(*a))
    # room for two samples of x and dy: the sums run over the batch in two copies
    conv_tuning(copy_bytes=2 * 4 * (x[0].size + dy[0].size))
    dw = np.empty((10, 6, 3, 3), np.float32)
    winograd_compiled.weight_gradient(dy, x, dw, window, False, threads=1)
    assert seen == [2, 2]
    assert_close(dw, expected)


def test_weight_gradient_sums_must_fit_the_cache():
    def problem(channels):
        return algorithms.ConvProblem(False, 16, channels, channels, 1, (3, 3), (1, 1),
                                      (1, 1), (1, 1), (14, 14), 'float32', 'weight')
    if _winograd is not None:
        assert winograd.supports_weight_gradient(problem(256))
    assert not winograd.supports_weight_gradient(problem(512))     # 38 MB of sums


@needs_module
def test_weight_gradient_zeroes_its_sums_when_asked():
    x, dy, window = same_size_layer(3, (2, 10, 10, 24), 40)
    tiles = 2 * int(np.prod(common.output_tiles(window, 4)))
    row = compiled.round_up(40, compiled.PANEL)

    def sums(du, zero, ranges=((0, 32), (32, 40))):
        for f_lo, f_hi in ranges:
            width = compiled.round_up(f_hi - f_lo, compiled.PANEL)
            v = np.empty(_winograd.tile_floats(5, 24), np.float32)
            m = np.empty(_winograd.tile_floats(5, width), np.float32)
            _winograd.weight_gradient(x, dy, du, window.pad_before, (0, tiles), (f_lo, f_hi),
                                      5, v, m, zero)
        return du
    def positions(du):          # (36, C, F in whole panels), past each position's rounding
        return du.reshape(36, -1)[:, :24 * row].reshape(36, 24, row)
    clean = sums(np.zeros(_winograd.tile_floats(24, row), np.float32), False)
    dirty = np.full_like(clean, np.nan)
    # every range, the panel's padding past filter 40 too
    np.testing.assert_array_equal(positions(sums(dirty, True)), positions(clean))
    # without zero the sums add to what du holds
    assert_close(positions(sums(clean.copy(), False)), 2 * positions(clean))
    dw = np.empty((40, 3, 3, 24), np.float32)
    _winograd.finish_gradient(clean, dw, (0, 24))
    assert_close(dw, direct_weight_gradient(dy.astype(np.float64), x.astype(np.float64), 1))


@needs_module
def test_weight_gradient_errors_name_the_argument():
    x, dy = np.zeros((1, 6, 6, 8), np.float32), np.zeros((1, 6, 6, 16), np.float32)
    du = np.zeros(_winograd.tile_floats(8, 16), np.float32)
    v, m = (np.zeros(_winograd.tile_floats(1, 16), np.float32) for _ in range(2))
    _winograd.weight_gradient(x, dy, du, (1, 1), (0, 4), (0, 16), 1, v, m)
    with pytest.raises(ValueError, match=r'du: expected at least'):
        _winograd.weight_gradient(x, dy, du[:-1], (1, 1), (0, 4), (0, 16), 1, v, m)
    with pytest.raises(ValueError, match=r'du: expected at least'):
        _winograd.finish_gradient(du[:-1], np.zeros((16, 3, 3, 8), np.float32), (0, 8))
    with pytest.raises(ValueError, match=r'filters \[3, 16\)'):
        _winograd.weight_gradient(x, dy, du, (1, 1), (0, 4), (3, 16), 1, v, m)
    with pytest.raises(ValueError, match=r'dw \(16, 2, 2, 8\): expected OHWI 3x3'):
        _winograd.finish_gradient(du, np.zeros((16, 2, 2, 8), np.float32), (0, 8))
    with pytest.raises(ValueError, match=r'channels \[0, 9\)'):
        _winograd.finish_gradient(du, np.zeros((16, 3, 3, 8), np.float32), (0, 9))


@needs_module
def test_gradient_support_follows_the_flipped_convolution():
    def problem(**changes):
        base = dict(channel_last=False, batch=2, channels=8, filters=8, groups=1,
                    kernel=(3, 3), stride=(1, 1), dilate=(1, 1), pad=(1, 1), size_in=(9, 9),
                    dtype='float32', gradient='data')
        return algorithms.ConvProblem(**{**base, **changes})
    assert winograd.supports_gradient(problem())
    assert winograd.supports_gradient(problem(pad=(2, 0)))
    for unsupported in (dict(pad=(3, 1)), dict(stride=(2, 2)), dict(dtype='float64'),
                        dict(groups=2), dict(kernel=(5, 5))):
        assert not winograd.supports_gradient(problem(**unsupported)), unsupported
    # its transformed weights, made on every call, stay within the weight gradient's bound on
    # its sums: resnet50_v1's 256-channel layers (9.4 MB) take it, the 512-channel ones
    # (38 MB) do not, whatever the data
    assert winograd.supports_data_gradient(problem(channels=256, filters=256))
    assert not winograd.supports_data_gradient(problem(channels=512, filters=512))
    assert not winograd.supports_data_gradient(problem(channels=512, filters=512,
                                                       batch=64, size_in=(56, 56)))
    assert not winograd.supports_data_gradient(problem(stride=(2, 2)))
    assert algorithms.DATA_GRADIENT_ALGORITHMS['winograd4'].supports is \
        winograd.supports_data_gradient
    # its scratch is that of the forward convolution with channels and filters swapped
    wide = problem(channels=16, filters=64)
    assert winograd.gradient_scratch_bytes(wide, 1) == winograd.scratch_bytes(
        problem(channels=64, filters=16, gradient=''), 1, 4)


@needs_module
def test_scratch_covers_what_a_call_takes(counted_alloc):
    c = CASES['many tiles']
    alloc, taken = counted_alloc, counted_alloc.taken
    out = np.empty(c.expected.shape, np.float32)
    winograd.winograd(c.x, c.w, c.bias, out, c.window, True, 4, alloc=alloc,
                      threads=mx.engine.kernel_threads())
    problem = algorithms.ConvProblem(True, 2, 24, 32, 1, (3, 3), (1, 1), (1, 1), (1, 1),
                                     (18, 14), 'float32')
    assert 0 < sum(taken) <= winograd.scratch_bytes(problem, 2, 4)


@needs_module
def test_errors_name_the_argument_and_what_it_accepts():
    c = CASES['one tile']
    u = np.zeros(winograd_compiled.packed_shape(8, 16), np.float32)
    out = np.empty(c.expected.shape, np.float32)
    scratch = np.empty(36 * 6 * 16, np.float32)
    args = [c.x, u, out, None, None, False, (1, 1), (0, 1), (0, 16), 6, scratch, scratch]
    for index, value, message in [
            (0, c.x.astype(np.float64), "x: expected float32 values"),
            (7, (0, 2), r"tiles \[0, 2\): expected 0 <= lo <= hi <= 1"),
            (8, (8, 16), "a multiple of 16"),
            (4, np.zeros((1, 2, 2, 16), np.float32), "residual: expected shape"),
            (10, scratch[:10], "v: expected at least")]:
        bad = list(args)
        bad[index] = value
        with pytest.raises((TypeError, ValueError), match=message):
            _winograd.convolve(*bad)
    with pytest.raises(ValueError, match='expected OHWI 3x3 weights'):
        _winograd.transform_weights(np.zeros((16, 5, 5, 8), np.float32), u, (0, 1))
    with pytest.raises(ValueError, match="expected 'avx512', 'avx2' or 'baseline'"):
        _winograd.use_instruction_set('sse9')


# ----------------------------------------------------------------------------------------------
# Through a hybridized network in inference

@needs_module
def test_inference_keeps_the_transformed_weights_of_its_layers(monkeypatch, transforms):
    monkeypatch.setattr(algorithms, 'choose',
                        lambda *args, **kwargs: algorithms.ALGORITHMS['winograd4'])
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(16, 3, padding=1, in_channels=8, layout='NHWC'),
            mx.gluon.nn.Conv2D(16, 3, padding=1, in_channels=16, layout='NHWC'))
    net.initialize(mx.init.Xavier())
    x = mx.nd.array(np.random.default_rng(0).standard_normal((2, 8, 8, 8)), dtype='float32')
    expected = net(x).asnumpy()             # imperative: no versions, transformed each call
    calls = len(transforms)
    net.hybridize(static_alloc=True)
    for _ in range(3):
        assert_close(net(x).asnumpy(), expected)
    assert len(transforms) - calls == 2     # each layer's weights once


@needs_module
def test_a_scaled_strided_weight_is_made_plain_only_to_transform_it(transforms):
    # a folded BatchNorm's scale, the weight an OHWI view of OIHW memory (as _sg_conv passes)
    c, var = CASES['odd channels and filters'], Var()
    oihw = np.ascontiguousarray(c.w.transpose(0, 3, 1, 2))
    scale = np.linspace(0.5, 2, c.w.shape[0]).astype(np.float32)
    expected = (c.expected - c.bias) * scale + c.bias
    for _ in range(2):
        out = np.empty(c.expected.shape, np.float32)
        winograd.winograd(c.x, oihw.transpose(0, 2, 3, 1), c.bias, out, c.window, True, 4,
                          threads=1, weight_version=((var, 0),), weight_scale=scale)
        assert_close(out, expected)
    assert len(transforms) == 1


def test_a_measured_layer_keeps_only_what_its_winner_uses():
    from ember import config, engine
    from ember.backend import onednn
    from ember.op.registry import KernelContext
    c = CASES['many tiles']
    attrs = mx.op.registry.get('Convolution').parse_attrs(
        dict(kernel=(3, 3), pad=(1, 1), num_filter=c.w.shape[0], layout='NHWC'))
    token = ((engine.get().new_var(), 0),)
    before = (onednn.kept_bytes(), kept.kept_bytes(), kept.plain_weight_bytes())
    out = np.empty(c.expected.shape, np.float32)
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT=2):
        convolution.forward(dict(attrs, cudnn_tune=None), c.x, c.w, c.bias, out,
                            KernelContext(None), weight_version=token)
    assert_close(out, c.expected)
    grown = [after > b for after, b in zip(
        (onednn.kept_bytes(), kept.kept_bytes(), kept.plain_weight_bytes()),
        before)]
    assert sum(grown) <= 1      # the winner's copy at most: the losers' went


def test_past_the_budget_weights_are_transformed_every_call(conv_tuning, transforms):
    c, first, second = CASES['one tile'], Var(), Var()
    STATE.kept[TRANSFORMED].clear()
    STATE.kept[PACKED].clear()          # kept_bytes() counts 1x1 layers' too
    STATE.kept[LINE].clear()            # and 1-D layers'
    size = np.prod(winograd_compiled.packed_shape(c.w.shape[-1], c.w.shape[0])) * 4
    conv_tuning(kept_budget=int(size * 1.5))   # room for one
    for _ in range(2):
        assert_close(c.run(threads=1, weight_version=((first, 0),)), c.expected)
        assert_close(c.run(threads=1, weight_version=((second, 0),)), c.expected)
    assert kept.kept_bytes() == size
    assert len(transforms) == 3          # the first kept once, the second every call


def test_a_wide_layer_keeps_its_transformed_weights_only_for_a_large_enough_output():
    """256 channels at 14x14: U is 9.4 MB. At batch 1 (a 0.2 MB output) measurement leaves
    the layer to algorithms that keep nothing; at batch 8 it may keep U."""
    u_bytes = int(np.prod(winograd_compiled.packed_shape(256, 256))) * 4

    def problem(batch):
        return types.SimpleNamespace(batch=batch, filters=256, size_out=(14, 14), dtype_size=4)
    assert algorithms._kept_limit(problem(1)) < u_bytes <= \
        algorithms._kept_limit(problem(8))
    # a 128-channel layer's 2.4 MB are kept at any batch
    assert int(np.prod(winograd_compiled.packed_shape(128, 128))) * 4 <= \
        algorithms._kept_limit(problem(1))


def test_a_large_graph_raises_the_budget_by_its_share(conv_tuning, transforms):
    c, first, second = CASES['one tile'], Var(), Var()
    STATE.kept[TRANSFORMED].clear()
    STATE.kept[PACKED].clear()
    STATE.kept[LINE].clear()
    size = np.prod(winograd_compiled.packed_shape(c.w.shape[-1], c.w.shape[0])) * 4
    conv_tuning(kept_budget=int(size * 1.5))   # room for one
    problem = types.SimpleNamespace(batch=1, filters=1, size_out=(1, 1), dtype_size=4)
    assert kept.kept_budget() == int(size * 1.5)
    assert algorithms._kept_limit(problem) == tuning.TUNING.kept_always
    kept.note_graph(int(size * 2.5 / tuning.TUNING.kept_share))    # room for two
    kept.note_graph(10)                   # a smaller graph lowers nothing
    assert kept.kept_budget() == int(size * 2.5)
    # mode 1 measures a layer keeping up to the whole budget
    assert algorithms._kept_limit(problem) == \
        max(tuning.TUNING.kept_always, int(size * 2.5))
    for _ in range(2):
        assert_close(c.run(threads=1, weight_version=((first, 0),)), c.expected)
        assert_close(c.run(threads=1, weight_version=((second, 0),)), c.expected)
    assert kept.kept_bytes() == 2 * size
    assert len(transforms) == 2          # each kept once


def test_the_executor_tells_kernels_the_bytes_of_its_variables(monkeypatch):
    seen = []
    monkeypatch.setattr(kept, 'note_graph', seen.append)
    out = mx.sym.Activation(mx.sym.Convolution(mx.sym.var('data'), kernel=(3, 3), num_filter=8,
                                               name='c'), act_type='relu')
    args = {'data': mx.nd.ones((2, 4, 6, 6)), 'c_weight': mx.nd.ones((8, 4, 3, 3)),
            'c_bias': mx.nd.ones((8,))}
    executor = out.bind(mx.cpu(), args)
    executor.forward(is_train=False)
    executor.outputs[0].wait_to_read()
    assert seen == [(2 * 4 * 36 + 8 * 4 * 9 + 8) * 4]


@pytest.mark.parametrize('faster', ['winograd4', 'other'])
def test_past_the_budget_a_layer_measures_winograd_again_against_the_rule(
        monkeypatch, conv_tuning, transforms, faster):
    from ember import config, engine
    from ember.op.registry import KernelContext
    c = CASES['many tiles']
    attrs = mx.op.registry.get('Convolution').parse_attrs(
        dict(kernel=(3, 3), pad=(1, 1), num_filter=c.w.shape[0], layout='NHWC'))
    size = np.prod(winograd_compiled.packed_shape(c.w.shape[-1], c.w.shape[0])) * 4
    STATE.kept[PACKED].clear()          # kept_bytes() counts 1x1 layers' too
    STATE.kept[LINE].clear()            # and 1-D layers'
    conv_tuning(kept_budget=int(size * 1.5))   # room for one
    monkeypatch.setattr(algorithms, 'choose',
                        lambda *args, **kwargs: algorithms.ALGORITHMS['winograd4'])
    measured = []

    def measure(problem, candidates, trial):
        measured.append([a.name for a in candidates])
        for algorithm in candidates:
            assert trial(algorithm)
        return {a.name: 1.0 if (a.name == 'winograd4') == (faster == 'winograd4') else 2.0
                for a in candidates}
    monkeypatch.setattr(algorithms, 'measure', measure)
    STATE.choices.clear()
    layers = [((engine.get().new_var(), 0),) for _ in range(3)]
    with config.override(MXNET_MKLDNN_ENABLED=False):
        rule = algorithms.numpy_rule(convolution.problem_of(attrs, c.x)).name
        for _ in range(2):
            for token in layers:
                out = np.empty(c.expected.shape, np.float32)
                convolution.forward(attrs, c.x, c.w, c.bias, out, KernelContext(None),
                                    weight_version=token)
                assert_close(out, c.expected)
    STATE.choices.clear()
    assert measured == [['winograd4', rule]]          # once, for the second layer's problem
    assert STATE.kept[TRANSFORMED].nbytes() == size       # the first layer's weights alone
    # (a GEMM that wins keeps its packed weights, in place of a plain copy)
    # the first layer keeps its weights; the others transform theirs every call or not at all
    kept_once, per_call = 1, 2 * 2 if faster == 'winograd4' else 0
    trials = 1                                        # the measured Winograd's trial
    assert len(transforms) // max(1, min(2, -(-c.w.shape[0] // 16))) == \
        kept_once + per_call + trials
