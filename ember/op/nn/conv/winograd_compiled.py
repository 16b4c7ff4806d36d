"""Winograd F(4x4, 3x3) of float32 data in the compiled ``ember._winograd``: the convolution,
its data gradient and its weight gradient, and how a call is split over the kernel threads.

The module runs the separable 1-D transforms, vectorised over channels, and its own GEMM
kernel, chunk by chunk so that a chunk's transformed tiles stay in the core's cache. It reads
and writes channel-last data; channel-first data is copied to channel-last scratch and the
result back, some samples at a time (:func:`_copied_samples`), the copies split over the kernel
threads. Its transformed weights are packed once per weight token when the caller passes one
(inference) and kept within the shared budget (:mod:`ember.op.nn.conv.kept`). The kernel
threads share a call through a counter: each takes the next chunk of tiles, or when the tiles
are few the next group of filters (:func:`_split`), until none is left, so that one woken late
does less; where they share the filters of one chunk they may transform the weights
themselves as they go, fused (:func:`_fused_plans`).

The data gradient of a 3x3, stride-1 convolution is itself one (:func:`data_gradient`): of
the output gradient, with the weights flipped and their two channel axes swapped, and the
padding 2 - pad. The weight gradient sums, for each of the 36 tile positions, the input
tiles' transforms times the output gradient's (:func:`weight_gradient`).

Which problems run here is :mod:`ember.op.nn.conv.winograd`'s to say.

>>> import numpy as np, pytest
>>> from ember.op.nn._common import make_window
>>> if MODULE is None:
...     pytest.skip('ember._winograd is not built here')
>>> window = make_window((3, 3), (1, 1), (1, 1), (1, 1), (4, 4), (4, 4))
>>> x, w = np.ones((1, 4, 4, 1), np.float32), np.ones((1, 3, 3, 1), np.float32)  # NHWC, OHWI
>>> out = np.empty((1, 4, 4, 1), np.float32)
>>> convolve(x, w, None, out, window, None, None, None, default_alloc, 1, None)
>>> out[0, 1:3, 1:3, 0]
array([[9., 9.],
       [9., 9.]], dtype=float32)
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from ember import accel
from ember.base import prod
from ember.engine.threads import kernel_threads
from ember.op.nn._common import make_window
from ember.op.nn.conv import tuning
from ember.op.nn.conv.common import (
    default_alloc, finish, output_tiles, part_range, run_parts)
from ember.op.nn.conv.compiled import MODULE, PANEL, Prepared, round_up, run_compiled
from ember.op.nn.conv.kept import room_for
from ember.op.nn.conv.state import STATE, TRANSFORMED

__all__ = ['runs', 'convolve', 'data_gradient', 'weight_gradient', 'scratch_bytes',
           'weight_gradient_scratch_bytes', 'plan', 'packed_shape']

# The transformed weights of inference layers, per weight token.
_transformed = STATE.kept[TRANSFORMED]


def runs(x, bias, out, m, residual):
    arrays = [x, out] + [a for a in (bias, residual) if a is not None]
    return (MODULE is not None and m == 4
            and all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)
            and (residual is None or residual.shape == out.shape))


def data_gradient(dy, w, dx, window, channel_last, budget=None, alloc=None, threads=1):
    """dx = the data gradient of the 3x3, stride-1 convolution with weights `w` (OIHW, or
    OHWI for channel-last data) and `window`, from the output gradient `dy`: the convolution
    of `dy` with the weights flipped and their channel axes swapped, padded by 2 - pad, in
    the compiled F(4x4, 3x3) (:func:`ember.op.nn.conv.winograd.supports_gradient` must
    hold)."""
    alloc = alloc or default_alloc
    flipped = (w.transpose(3, 1, 2, 0) if channel_last else w.transpose(1, 2, 3, 0))[:, ::-1, ::-1]
    pad = tuple(2 - p for p in window.pad_before)
    reverse = make_window((3, 3), (1, 1), (1, 1), pad, window.size_out, window.size_in)
    dy, dx_target = np.ascontiguousarray(dy), dx
    if not dx.flags.c_contiguous:
        dx_target = np.empty(dx.shape, np.float32)
    convolve(dy, flipped, None, dx_target, reverse, None, None, budget, alloc, threads, None,
             None, channel_last)
    if dx_target is not dx:
        dx[...] = dx_target


def weight_gradient(dy, x, dw, window, channel_last, budget=None, alloc=None, threads=1):
    """dw = the weight gradient of the 3x3, stride-1 convolution of `x` with `window`, from
    its output gradient `dy`, in the Winograd domain of F(4x4, 3x3): for each of the 36 tile
    positions the sum over all tiles of the input tile's transform times the output
    gradient's (``A dY A^T``), then ``G^T . G`` back to 3x3 (``supports_gradient`` must
    hold). `dw` is OIHW, or OHWI for channel-last data; channel-first data is copied some
    samples at a time. The kernel threads share the filters, each transforming every input
    tile; its sums stay in one (36, C, F) array."""
    alloc = alloc or default_alloc
    channels, filters = dw.shape[-1] if channel_last else dw.shape[1], dw.shape[0]
    batch = samples = x.shape[0]
    if batch == 0:
        dw[...] = 0
        return
    if not channel_last:
        samples = _copied_samples(batch, 4 * (x[0].size + dy[0].size), budget)
    count, ranges, width, chunk = _gradient_plan(samples * prod(output_tiles(window, 4)), channels,
                                                 filters, threads)
    writes_dw = channel_last and dw.flags.c_contiguous
    # du, the sums: 36 positions of (C, F in whole panels), zeroed by the first call
    specs = [((MODULE.tile_floats(channels, round_up(filters, PANEL)),), np.float32),
             ((count, MODULE.tile_floats(chunk, channels)), np.float32),
             ((count, MODULE.tile_floats(chunk, width)), np.float32)]
    specs += [] if writes_dw else [((filters, 3, 3, channels), np.float32)]
    specs += [] if channel_last else [
        (_channel_last_shape((samples,) + a.shape[1:]), np.float32) for a in (x, dy)]
    du, v, m, *rest = alloc(specs)
    target = dw if writes_dw else rest.pop(0)
    for lo in range(0, batch, samples):
        hi = min(batch, lo + samples)
        if channel_last:
            xs, dys = np.ascontiguousarray(x[lo:hi]), np.ascontiguousarray(dy[lo:hi])
        else:
            xs = _relayout(x[lo:hi], rest[0][:hi - lo], (0, 2, 3, 1), threads)
            dys = _relayout(dy[lo:hi], rest[1][:hi - lo], (0, 2, 3, 1), threads)
        tiles = (hi - lo) * prod(output_tiles(window, 4))

        run_compiled(MODULE.weight_gradient, dys.size * channels, [
            (xs, dys, du, window.pad_before, (0, tiles), ranges[index], min(chunk, tiles),
             v[index], m[index], lo == 0) for index in range(count)])
    finish_parts = max(1, min(max(1, threads or 1), channels))
    run_compiled(MODULE.finish_gradient, du.size, [
        (du, target, part_range(i, finish_parts, channels)) for i in range(finish_parts)])
    if target is not dw:
        np.copyto(dw, target if channel_last else target.transpose(0, 3, 1, 2))


def weight_gradient_scratch_bytes(problem, batch) -> int:
    """What :func:`weight_gradient` takes for `batch` samples on the kernel threads."""
    per_sample = 4 * (problem.channels * prod(problem.size_in)
                      + problem.filters * prod(problem.size_out))
    samples = batch if problem.channel_last else _copied_samples(batch, per_sample, None)
    count, _, width, chunk = _gradient_plan(samples * prod(output_tiles(problem.window, 4)),
                                            problem.channels, problem.filters,
                                            kernel_threads())
    floats = (MODULE.tile_floats(problem.channels, round_up(problem.filters, PANEL))
              + count * _chunk_floats(chunk, problem.channels, width)
              + 9 * problem.channels * problem.filters)
    return floats * 4 + (0 if problem.channel_last else samples * per_sample)


def _gradient_plan(tiles, channels, filters, threads):
    """(parts, their filter ranges, the widest range in whole panels, tiles per chunk) of the
    weight gradient: the kernel threads share whole panels of filters."""
    panels = -(-filters // PANEL)
    count = max(1, min(max(1, threads or 1), panels))
    ranges = [tuple(min(filters, PANEL * b) for b in part_range(i, count, panels))
              for i in range(count)]
    width = max(round_up(hi - lo, PANEL) for lo, hi in ranges)
    chunk = min(tiles, _fitting(channels, width, tuning.TUNING.gradient_chunk_bytes))
    return count, ranges, width, chunk


def convolve(x, w, bias, out, window, residual, act_type, budget, alloc, threads,
             weight_version, weight_scale=None, channel_last=True, fused=False):
    """The compiled F(4x4, 3x3); `w` OHWI (any strides), `x`, `out` and `residual` NHWC or
    (not `channel_last`) NCHW, copied through channel-last scratch some samples at a time
    (:func:`_copied_samples`). Weights transformed on every call (`fused`, or no version,
    or past the kept budget) are transformed by the kernel threads into their own scratch as
    they take the filters, where the call's threads share the filters of one chunk
    (:func:`_fused_plans`); else into scratch first. Returns a :class:`Prepared` of the call
    where it can run again as it is (channel-last, its transformed weights kept or fused),
    else None."""
    if out.size == 0:
        return None
    channels, filters = w.shape[-1], w.shape[0]
    u_shape = packed_shape(channels, filters)
    if fused:
        weight_version = None
    u = _transformed.get(weight_version)
    if u is not None and u.shape != u_shape:
        u = None
    if u is None and weight_version is not None and \
            not room_for(_transformed, prod(u_shape) * 4):
        weight_version = None       # past the budget: transformed into scratch every call
    in_scratch = u is None and weight_version is None
    given = [] if channel_last else [a for a in (x, out, residual) if a is not None]
    batch = samples = x.shape[0]
    if given:
        per_sample = 4 * sum(a[0].size for a in given)
        samples = _copied_samples(batch, per_sample, budget)
        if budget is not None:
            budget = max(0, budget - samples * per_sample - in_scratch * prod(u_shape) * 4)
    per_sample_tiles = prod(output_tiles(window, 4))
    t = tuning.TUNING
    plans = {n: _split(n * per_sample_tiles, channels, filters, threads, t)
             for n in {samples, batch % samples or samples}}
    count = max(split.count for split in plans.values())
    width = max(split.width for split in plans.values())
    chunk = _chunk(channels, filters, width, count, budget,
                   _shared_tiles(plans, per_sample_tiles), t)
    fusing = _fused_plans(plans, per_sample_tiles, chunk, channels, fused) \
        if in_scratch else None
    if fusing is not None:
        plans = fusing
        width = max(split.width for split in plans.values())
        own = max(split.claim_panels for split in plans.values())
    specs = [((count, MODULE.tile_floats(chunk, channels)), np.float32),
             ((count, MODULE.tile_floats(chunk, width)), np.float32)]
    if fusing is not None:
        specs.append(((count, MODULE.own_u_floats(own, channels)), np.float32))
    u_scratch = in_scratch and fusing is None       # U of all the filters, transformed first
    v, products, *scratch = alloc(specs + [(u_shape, np.float32)] * u_scratch
                                  + [(_channel_last_shape((samples,) + a.shape[1:]), np.float32)
                                     for a in given])
    owns = scratch.pop(0) if fusing is not None else None
    scratch, copies = scratch[:u_scratch], scratch[u_scratch:]
    extra = ()
    if fusing is not None:
        # the kernel reads the weights (any strides) and the scale as they are on each call;
        # each thread fetches the weights of the item it likely takes next (its threads on)
        extra = (w, None if weight_scale is None else
                 np.ascontiguousarray(weight_scale, np.float32).reshape(-1), count)
    elif u is None:
        # transform_weights reads OHWI views of any strides (OIHW weights, flipped ones),
        # scaling each filter as it reads it (no scaled copy of the weights first)
        u = _packed_weights(w, weight_scale, weight_version, threads,
                            scratch[0] if scratch else None)
    relu = act_type == 'relu'

    def calls(x, out, residual, v, products, owns=None):
        split, tiles = plans[x.shape[0]], x.shape[0] * per_sample_tiles
        claim = np.zeros(1, np.int64)       # the next item any of the threads takes
        return [(x, u if owns is None else owns[index], out, bias, residual, relu,
                 window.pad_before, (0, tiles), (0, filters), chunk, v[index], products[index],
                 claim, split.claim_panels) + extra
                for index in range(split.count)]

    def convolve(x, out, residual, v, products, owns=None):
        # each output takes C multiply-adds per tap: splitting pays from far fewer outputs
        # than the elements from which an element-wise operator splits
        # (MXNET_CPU_PARALLEL_SIZE)
        run_compiled(MODULE.convolve, out.size * channels,
                     calls(x, out, residual, v, products, owns))

    if not given:
        convolve(x, out, residual, v, products, owns)
        if (fusing is not None or (not in_scratch and weight_version is not None)) \
                and (act_type is None or relu):
            again = _Again(lambda *scratch: calls(x, out, residual, *scratch),
                           out.size * channels)
            return Prepared(u, specs, alloc, again, _transformed)
    for lo in range(0, batch if given else 0, samples):
        hi = min(batch, lo + samples)
        ins = [_relayout(a[lo:hi], c[:hi - lo], (0, 2, 3, 1), threads)
               for a, c in zip((x, residual), copies[::2]) if a is not None]
        # the residual is copied before `out`, whose memory it may share, is written
        convolve(ins[0], copies[1][:hi - lo], ins[1] if len(ins) > 1 else None, v, products,
                 owns)
        _relayout(copies[1][:hi - lo], out[lo:hi], (0, 3, 1, 2), threads)
    if act_type is not None and not relu:
        finish(out, out, act_type=act_type)
    return None


class _Again:
    """A Prepared call's run on its scratch: the kernel calls' arguments built once per place
    of the scratch (the temp space stays put between a node's calls), the shared counter set
    back to 0 each run (call_overhead.py)."""

    __slots__ = ('build', 'elements', 'at', 'calls')

    def __init__(self, build, elements):
        self.build, self.elements = build, elements
        self.at, self.calls = None, None

    def __call__(self, *scratch):
        # the scratch is carved from one buffer at places fixed by the specs: where its first
        # array lies, the others lie where they did
        at = accel.data_address(scratch[0])
        if at != self.at:
            self.at, self.calls = at, self.build(*scratch)
        else:
            self.calls[0][12][0] = 0        # the claim counter (shared by the calls)
        run_compiled(MODULE.convolve, self.elements, self.calls)


def _copied_samples(batch, per_sample, budget) -> int:
    """Samples per channel-last copy, `per_sample` bytes each."""
    copy_bytes = tuning.TUNING.copy_bytes
    limit = copy_bytes if budget is None else min(copy_bytes, budget // 2)
    return max(1, min(batch, limit // per_sample))


def _channel_last_shape(shape):
    return (shape[0],) + tuple(shape[2:]) + (shape[1],)


def _relayout(source, target, axes, threads):
    """target = source.transpose(axes), the samples split over the kernel threads; returns
    `target`."""
    parts = min(max(1, threads or 1), source.shape[0])

    def part(index):
        lo, hi = part_range(index, parts, source.shape[0])
        np.copyto(target[lo:hi], source[lo:hi].transpose(axes))
    run_parts(parts, source.size, part, blas=False)
    return target


def plan(problem, batch, force=False):
    """(samples per call, bytes per sample of their channel-last copies, the split, tiles
    per chunk, the fused split: None where a call does not fuse, unless `force`) of a
    compiled call of `problem` on `batch` samples, as :func:`convolve` works them
    out without a budget."""
    per_sample = 4 * (problem.channels * prod(problem.size_in)
                      + problem.filters * prod(problem.size_out))
    samples = batch if problem.channel_last else _copied_samples(batch, per_sample, None)
    per_sample_tiles = prod(output_tiles(problem.window, 4))
    tiles = samples * per_sample_tiles
    t = tuning.TUNING
    split = _split(tiles, problem.channels, problem.filters, kernel_threads(), t)
    chunk = min(tiles, _chunk(problem.channels, problem.filters, split.width, split.count,
                              None, _shared_tiles({samples: split}, per_sample_tiles), t))
    fusing = _fused_plans({samples: split}, per_sample_tiles, chunk, problem.channels, force)
    return samples, per_sample, split, chunk, fusing and fusing[samples]


def scratch_bytes(problem, batch, fused=False):
    """Without a residual (a channel-first residual takes one copy more). With all the
    transformed weights, or each thread's own where the call fuses them (`fused`; or
    whichever is more where a call transforming them every call fuses)."""
    samples, per_sample, split, chunk, fusing = plan(problem, batch, fused)
    copies = 0 if problem.channel_last else samples * per_sample
    own = 0 if fusing is None else \
        fusing.count * (_chunk_floats(chunk, problem.channels, fusing.width)
                        + MODULE.own_u_floats(fusing.claim_panels, problem.channels)) * 4
    if fused:
        return own + copies
    weights = prod(packed_shape(problem.channels, problem.filters))
    return max(own, (split.count * _chunk_floats(chunk, problem.channels, split.width)
                     + weights) * 4) + copies


def _fused_plans(plans, per_sample_tiles, chunk, channels, force=False):
    """`plans` (samples -> _Split) with the threads sharing groups of filters, each narrowed
    so that its transformed weights take at most ``TUNING.own_u_bytes``, where every plan's
    threads share the filters of one chunk that holds all its tiles (or `force`); else None.
    Each thread then transforms the weights of the groups it takes into its own scratch,
    which stays in its L2 cache for the products: each group's weights once, or where there
    are several chunks once for each chunk its threads take it in."""
    if not force and not all(split.claim_panels and samples * per_sample_tiles <= chunk
                             for samples, split in plans.items()):
        return None
    most = max(1, tuning.TUNING.own_u_bytes // (36 * channels * PANEL * 4))

    def group(split):
        return min(split.claim_panels or most, most)
    return {samples: dataclasses.replace(split, claim_panels=group(split),
                                         width=group(split) * PANEL)
            for samples, split in plans.items()}


def _chunk_floats(chunk, channels, width):
    """The floats of one thread's transformed tiles and products (v and m) for chunks of
    `chunk` tiles, `width` filters wide: each of the 36 positions rounded up to an odd number
    of cache lines (``ember._winograd.tile_floats``)."""
    return MODULE.tile_floats(chunk, channels) + MODULE.tile_floats(chunk, width)


def _weights_cached(channels, filters, t):
    """Whether the transformed weights stay in L3 between chunks (``TUNING``'s
    `cached_weight_bytes`)."""
    return 36 * channels * round_up(filters, PANEL) * 4 <= t.cached_weight_bytes


def _chunk(channels, filters, width, parts, budget, shared_tiles, t):
    """Tiles per chunk, with the chunks of all `parts` (products `width` filters wide) within
    `budget` bytes (the transformed weights, scratch or not, are the weights' and not
    counted: shorter chunks would only read them more often). The threads together read
    all the weights for every chunk, whether they share its tiles or its filters. Where they
    share the filters of calls of `shared_tiles` tiles (0: they share the tiles), a chunk
    holds all of them, up to ``TUNING.shared_chunk_bytes`` a thread."""
    if shared_tiles:
        chunk = max(t.short_chunk, min(shared_tiles,
                                       _fitting(channels, width, t.shared_chunk_bytes)))
    else:
        chunk = t.short_chunk if _weights_cached(channels, filters, t) else t.long_chunk
    if budget is not None:
        chunk = min(chunk, _fitting(channels, width, budget // parts))
    return chunk


def _fitting(channels, width, limit):
    """The most tiles (at least 1) whose transformed tiles and products
    (:func:`_chunk_floats`) take at most `limit` bytes: the unrounded estimate, less the
    tiles that the rounding of each position pushes past it."""
    chunk = max(1, limit // (36 * (channels + width) * 4))
    while chunk > 1 and 4 * _chunk_floats(chunk, channels, width) > limit:
        chunk -= 1
    return chunk


def _shared_tiles(plans, per_sample_tiles):
    """The most tiles of a call (`plans`: samples -> _Split) whose threads share the
    filters, 0 where none do."""
    return max((samples * per_sample_tiles for samples, split in plans.items()
                if split.claim_panels), default=0)


@dataclass(frozen=True)
class _Split:
    """How `count` kernel threads share a call's tiles and filters through a counter: they
    take chunks of tiles (`claim_panels` 0), or groups of `claim_panels` panels of filters of
    a chunk; `width` is the filters (whole panels) of one item's products."""
    count: int
    claim_panels: int
    width: int


@functools.lru_cache(maxsize=256)
def _split(tiles, channels, filters, threads, t) -> _Split:
    """The split of a call of `tiles` tiles on `threads` threads under the tuning `t` (part
    of the cache's key: a replaced record is another key)."""
    threads = max(1, threads or 1)
    panels = -(-filters // PANEL)
    enough = t.min_tiles_per_part if _weights_cached(channels, filters, t) else t.long_chunk
    if tiles // threads >= enough or panels < 2:
        return _Split(max(1, min(threads, tiles)), 0, panels * PANEL)
    count = min(threads, panels)
    group = -(-panels // (count * t.groups_per_thread))
    return _Split(count, group, group * PANEL)


def packed_shape(channels, filters):
    """U's shape: the 36 tile positions' panels of 16 filters for each channel."""
    return (36, -(-filters // PANEL), channels, PANEL)


def _packed_weights(w, scale, weight_version, threads, scratch=None):
    """U = G g G^T of OHWI weights `w`, each filter times its `scale` (None: 1), packed
    (zeros past the last filter), in `scratch`, else in a new array kept for
    `weight_version`."""
    shape = packed_shape(w.shape[-1], w.shape[0])
    u = np.empty(shape, np.float32) if scratch is None else scratch
    parts = min(max(1, threads or 1), shape[1])
    if scale is not None:
        scale = np.ascontiguousarray(scale, np.float32).reshape(-1)
    run_compiled(MODULE.transform_weights, u.size,
                 [(w, u, part_range(i, parts, shape[1]), scale) for i in range(parts)])
    if weight_version is not None:
        _transformed.keep(weight_version, u)
    return u
