"""Winograd convolution F(m x m, 3 x 3) for stride-1, undilated 3x3 kernels, m = 2 or 4.

Each m x m output tile comes from an (m+2) x (m+2) input tile: ``Y = A^T [(G g G^T) . (B^T d
B)] A``. The products over input channels become (m+2)^2 GEMMs of (tiles, C) by (C, F): 36
instead of 9 * 16 multiplies per 16 outputs for m = 4 (4x fewer), 16 instead of 9 * 4 for
m = 2 (2.25x).

F(4x4, 3x3) of float32 data runs in the compiled ``ember._winograd`` where it is built
(setup.py): the separable 1-D transforms, vectorised over channels, and its own GEMM kernel,
chunk by chunk so that a chunk's transformed tiles stay in the core's cache
(:func:`ember._winograd.convolve`). The module reads and writes channel-last data;
channel-first data is copied to channel-last scratch and the result back, the copies split
over the kernel threads (a few per cent of the convolution: 1 ms each way for 64 channels of
56x56 at batch 16, against 7 ms of Winograd and 22 of oneDNN). Its transformed weights are
packed once per weight version when the caller passes one (inference), as oneDNN keeps its
reordered weights (:func:`kept_bytes`, :func:`discard_kept`). ``threads`` kernel threads share
a call through a counter: each takes the next chunk of tiles, or when the tiles are few the
next group of filters, until none is left, so that one woken late does less.

The data gradient of a 3x3, stride-1 convolution is itself one (:func:`data_gradient`): of
the output gradient, with the weights flipped and their two channel axes swapped, and the
padding 2 - pad. Training runs it here where measurement finds it faster than oneDNN's
(:mod:`ember.op.nn.conv_algorithms`).

Convolutions whose kernel is 1 x r or r x 1 (inceptionv3's 1x7, 7x1, 1x3 and 3x1 layers) run
the 1-D F(m, r) along their axis (:func:`line`) on the same compiled products: m + r - 1
GEMMs per m outputs instead of m r multiplies (m 4, or 6 on long lines), the transforms from
Toom-Cook on small points (:func:`line_transforms`).

Everything else (F(2x2), float64, no compiled module) runs in NumPy, where all three
transforms are GEMMs with the Kronecker product of the 1-D matrices on tile-position-major
data ``(positions, tiles * channels)``: the gather copies each tile position straight from
the unpadded input (zeros in the padding), and the last step scatters each output position
back with bias, residual and activation applied (:func:`ember.op.nn.conv_common.finish`).
Output tiles past the edge are computed and dropped. ``threads`` kernel threads share the
lines of tiles, each running the whole chain on its lines with single-threaded GEMMs, as
NNPACK's threads do.

>>> import numpy as np
>>> from ember.op.nn._common import make_window
>>> window = make_window((3, 3), (1, 1), (1, 1), (1, 1), (4, 4), (4, 4))
>>> x, w = np.ones((1, 4, 4, 1), np.float32), np.ones((1, 3, 3, 1), np.float32)  # NHWC, OHWI
>>> out = np.empty((1, 4, 4, 1), np.float32)
>>> winograd(x, w, None, out, window, True, m=2)
>>> out[0, :, :, 0]
array([[4., 6., 6., 4.],
       [6., 9., 9., 6.],
       [6., 9., 9., 6.],
       [4., 6., 6., 4.]], dtype=float32)
>>> exact = out.copy()
>>> winograd(x, w, None, out, window, True, m=4)      # compiled where it is built
>>> bool(np.allclose(out, exact, rtol=1e-5))
True
"""
from __future__ import annotations

import dataclasses
import functools
import types
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ember import accel, config
from ember.backend import native
from ember.base import prod
from ember.engine.threads import in_parallel_region, kernel_threads, team_cores
from ember.op.nn._common import make_window
from ember.op.nn.conv_common import (
    KeptByToken, copy_windows, finish, part_range, run_parts, segments, single_threaded_blas)

# compiled F(4x4, 3x3) (setup.py; optional): without it (no C compiler) the NumPy code runs
_winograd = native.compiled_module('_winograd')

__all__ = ['TILES', 'transforms', 'supports', 'compiled', 'winograd', 'scratch_bytes',
           'kept_weight_bytes', 'kept_bytes', 'discard_kept', 'supports_gradient',
           'supports_data_gradient',
           'data_gradient', 'weight_gradient', 'gradient_scratch_bytes',
           'weight_gradient_scratch_bytes', 'supports_weight_gradient', 'can_keep',
           'supports_pointwise', 'pointwise', 'pointwise_forward_scratch_bytes',
           'packed_weights', 'multiply_packed', 'compiled_products',
           'same_view', 'note_graph', 'kept_budget', 'LINE_POINTS', 'line_transforms',
           'line_outputs', 'supports_line', 'line', 'line_scratch_bytes', 'line_kept_bytes',
           'fuses', 'fused_scratch_bytes']

TILES = (2, 4)


@dataclass(frozen=True)
class Transforms:
    """The Kronecker-product transforms of F(m x m, 3 x 3), in float64."""
    m: int
    input: np.ndarray          # (a*a, a*a): B^T x B^T
    weight: np.ndarray         # (a*a, 9):   G x G
    output: np.ndarray         # (m*m, a*a): A^T x A^T

    @property
    def tile(self):
        return self.m + 2


# Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2015).
_ONE_D = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}


@functools.lru_cache(maxsize=None)
def transforms(m: int, dtype=np.float32) -> Transforms:
    bt, g, at = (np.array(a, np.float64) for a in _ONE_D[m])
    return Transforms(m, np.kron(bt, bt).astype(dtype), np.kron(g, g).astype(dtype),
                      np.kron(at, at).astype(dtype))


def supports(problem) -> bool:
    return (problem.kernel == (3, 3) and problem.stride == (1, 1) and problem.dilate == (1, 1)
            and problem.groups == 1 and problem.dtype in ('float32', 'float64'))


def _tiles(window, m):
    return tuple(-(-o // m) for o in window.size_out)


def compiled(problem, m) -> bool:
    """Whether F(m x m, 3 x 3) of `problem` runs in the compiled ``ember._winograd``."""
    return _winograd is not None and m == 4 and problem.dtype == 'float32' and supports(problem)


def supports_gradient(problem) -> bool:
    """Whether the compiled F(4x4, 3x3) can compute the data gradient of `problem` (a
    forward convolution): 3x3, stride 1, undilated, one group, padding at most 2, float32."""
    return (_winograd is not None and problem.dtype == 'float32' and supports(problem)
            and all(p <= 2 for p in problem.pad))


def _gradient_problem(problem):
    """The forward convolution that computes `problem`'s data gradient."""
    return dataclasses.replace(problem, channels=problem.filters, filters=problem.channels,
                               pad=tuple(2 - p for p in problem.pad),
                               size_in=problem.size_out, gradient='')


def gradient_scratch_bytes(problem, batch) -> int:
    return _compiled_scratch(_gradient_problem(problem), batch)


def supports_data_gradient(problem) -> bool:
    """:func:`supports_gradient`, with the transformed (flipped) weights, made again on every
    call, within ``_GRADIENT_SUMS_BYTES``: past it they go through memory, and oneDNN is
    faster (resnet50_v1's 512-channel 7x7 layers at batch 16: 10.0-10.7 ms a call in a
    training step against 6.9-8.5, with 38 MB of transformed weights)."""
    return (supports_gradient(problem) and 36 * _round_up(problem.channels, _PANEL)
            * problem.filters * 4 <= _GRADIENT_SUMS_BYTES)


def supports_weight_gradient(problem) -> bool:
    """:func:`supports_gradient`, with the weight gradient's sums within
    ``_GRADIENT_SUMS_BYTES``."""
    return (supports_gradient(problem) and 36 * problem.channels
            * _round_up(problem.filters, _PANEL) * 4 <= _GRADIENT_SUMS_BYTES)


def weight_gradient_scratch_bytes(problem, batch) -> int:
    """What :func:`weight_gradient` takes for `batch` samples on the kernel threads."""
    per_sample = 4 * (problem.channels * prod(problem.size_in)
                      + problem.filters * prod(problem.size_out))
    samples = batch if problem.channel_last else _copied_samples(batch, per_sample, None)
    count, _, width, chunk = _gradient_plan(samples * prod(_tiles(problem.window, 4)),
                                            problem.channels, problem.filters,
                                            kernel_threads())
    floats = (_winograd.tile_floats(problem.channels, _round_up(problem.filters, _PANEL))
              + count * _chunk_floats(chunk, problem.channels, width)
              + 9 * problem.channels * problem.filters)
    return floats * 4 + (0 if problem.channel_last else samples * per_sample)


def kept_weight_bytes(problem, m) -> int:
    """Bytes of transformed weights an inference layer keeps between calls (the compiled
    F(4x4) path; the NumPy code transforms into scratch every call)."""
    if not compiled(problem, m):
        return 0
    return prod(_packed_shape(problem.channels, problem.filters)) * 4


def scratch_bytes(problem, batch, m):
    """Compiled: each kernel thread's chunk of transformed tiles and products, plus the
    transformed weights (scratch when the weights have no version). NumPy: two buffers of
    (tile positions, tiles * max(C, F)) for `batch` samples, plus the transformed weights."""
    if compiled(problem, m):
        return _compiled_scratch(problem, batch)
    th, tw = _tiles(problem.window, m)
    a2, width = (m + 2) ** 2, max(problem.channels, problem.filters)
    return (2 * a2 * batch * th * tw * width + a2 * problem.channels * problem.filters) \
        * problem.dtype_size


def winograd(x, w, bias, out, window, channel_last, m=4, residual=None, act_type=None,
             budget=None, alloc=None, threads=1, weight_version=None, weight_scale=None,
             fused=False):
    """out = act(conv(x, w * weight_scale) + bias + residual); x, w, out NCHW/OIHW or
    (channel_last) NHWC/OHWI, `w` any strides; `weight_scale` per output channel or None;
    `threads` kernel threads share the tiles. `weight_version`,
    ``((engine variable, version), ...)`` of the arrays `w` is made from (inference), keeps
    the compiled path's transformed weights between calls: the scaled, contiguous weight is
    then made only when they are transformed. `fused` (the compiled path, where
    :func:`fuses` the call) keeps nothing: each kernel thread transforms the weights of the
    filters it takes into its own cache-sized scratch as it goes (a call of many tiles, or
    one whose budget splits them into chunks, transforms them again for each chunk); it
    declines (False, nothing written) where the compiled path does not run."""
    alloc = alloc or (lambda specs: [np.empty(s, d) for s, d in specs])
    if _compiled_runs(x, bias, out, m, residual) and w.dtype == np.float32:
        return _compiled_winograd(x, w if channel_last else w.transpose(0, 2, 3, 1), bias,
                                  out, window, residual, act_type, budget, alloc, threads,
                                  weight_version, weight_scale, channel_last, fused)
    if fused:
        return False
    w = _plain(w, weight_scale)
    plan = _Plan(transforms(m, x.dtype.type), window, channel_last, x.shape[0],
                 x.shape[-1] if channel_last else x.shape[1], w.shape[0])
    items = x.shape[0] * plan.lines
    parts = max(1, min(threads or 1, items))
    width = max(plan.channels, plan.filters)
    weights = plan.a2 * plan.channels * plan.filters * x.dtype.itemsize
    line_bytes = 2 * plan.a2 * plan.per_line * width * x.dtype.itemsize
    step = items if budget is None else max(1, (budget - weights) // parts // line_bytes)
    step = min(step, -(-items // parts))
    u, first, second = alloc([((plan.a2, plan.channels * plan.filters), x.dtype)]
                             + [((parts, plan.a2, step * plan.per_line * width), x.dtype)] * 2)
    with single_threaded_blas():        # a small GEMM: two BLAS threads would only wait
        _weights(w, plan.spec, channel_last, u)
    b = None if bias is None else (bias if channel_last else bias[:, None, None])

    def part(index):
        start, stop = part_range(index, parts, items)
        for lo in range(start, stop, step):
            hi = min(stop, lo + step)
            tiles = _multiply(x, u, plan, lo, hi, first[index], second[index])
            _scatter(tiles, out, b, residual, act_type, plan, lo, hi)
    run_parts(parts, out.size, part)


@dataclass(frozen=True)
class _Plan:
    """Geometry of one call: tiles of m x m outputs, `lines` lines of `per_line` tiles per
    sample (a line: the tiles of one row of tiles)."""
    spec: Transforms
    window: object
    channel_last: bool
    batch: int
    channels: int
    filters: int

    @property
    def a2(self):
        return self.spec.tile ** 2

    @property
    def lines(self):
        return _tiles(self.window, self.spec.m)[0]

    @property
    def per_line(self):
        return _tiles(self.window, self.spec.m)[1]


def _weights(w, spec, channel_last, u):
    """U (a*a, C, F) for channel-last GEMMs, (a*a, F, C) for channel-first ones."""
    if channel_last:                                  # (F, 3, 3, C) -> (9, C, F)
        taps = w.reshape(w.shape[0], 9, -1).transpose(1, 2, 0)
    else:                                             # (F, C, 3, 3) -> (9, F, C)
        taps = w.reshape(w.shape[0], -1, 9).transpose(2, 0, 1)
    np.matmul(spec.weight, np.ascontiguousarray(taps).reshape(9, -1), out=u)


def _multiply(x, u, plan, start, stop, first, second):
    """The (m*m, tiles * F) output tiles of the lines ``[start, stop)``, before the inverse
    transform's scatter."""
    count, a2 = (stop - start) * plan.per_line, plan.a2
    channels, filters = plan.channels, plan.filters
    d = first[:, :count * channels]
    _gather(x, d, plan, start, stop)
    v = second[:, :count * channels]
    np.matmul(plan.spec.input, d, out=v)
    product = first[:, :count * filters]
    if plan.channel_last:       # (a2, tiles, C) @ (a2, C, F)
        np.matmul(v.reshape(a2, count, channels), u.reshape(a2, channels, filters),
                  out=product.reshape(a2, count, filters))
    else:                       # (a2, F, C) @ (a2, C, tiles)
        np.matmul(u.reshape(a2, filters, channels), v.reshape(a2, channels, count),
                  out=product.reshape(a2, filters, count))
    tiles = second[:plan.spec.m ** 2, :count * filters]
    np.matmul(plan.spec.output, product, out=tiles)
    return tiles


def _gather(x, d, plan, start, stop):
    """d[p] = every input tile's value at tile position p: (tiles, C) or (C, tiles)."""
    a, m, tw, per_line = plan.spec.tile, plan.spec.m, plan.per_line, plan.per_line
    ph, pw = plan.window.pad_before
    count = (stop - start) * per_line
    for sample, first, last, offset in segments(start, stop, plan.lines):
        block = slice(offset * per_line, (offset + last - first) * per_line)
        src = x[sample]
        axes = (0, 1) if plan.channel_last else (1, 2)
        for p in range(a * a):
            if plan.channel_last:
                dst = d[p].reshape(count, plan.channels)[block].reshape(last - first, tw, -1)
            else:
                dst = d[p].reshape(plan.channels, count)[:, block].reshape(-1, last - first, tw)
            copy_windows(src, dst, axes, (p // a - ph + m * first, p % a - pw), (m, m))


def _scatter(tiles, out, bias, residual, act_type, plan, start, stop):
    """Each output position (i, j) of the tiles of lines ``[start, stop)`` into
    out[.., i::m, j::m, ..], finished."""
    m, tw, per_line = plan.spec.m, plan.per_line, plan.per_line
    oh, ow = plan.window.size_out
    count = (stop - start) * per_line
    for sample, first, last, offset in segments(start, stop, plan.lines):
        block = slice(offset * per_line, (offset + last - first) * per_line)
        for q in range(m * m):
            i, j = divmod(q, m)
            rows = range(m * first + i, min(oh, m * last), m)
            cols = -(-(ow - j) // m)
            if not rows or cols <= 0:
                continue
            index = (slice(rows.start, rows.stop, m), slice(j, None, m))
            if plan.channel_last:
                src = tiles[q].reshape(count, -1)[block].reshape(last - first, tw, -1)
                src = src[:len(rows), :cols]
            else:
                src = tiles[q].reshape(-1, count)[:, block].reshape(-1, last - first, tw)
                src = src[:, :len(rows), :cols]
                index = (slice(None),) + index
            res = None if residual is None else residual[sample][index]
            finish(out[sample][index], src, bias, res, act_type)


# ----------------------------------------------------------------------------------------------
# F(4x4, 3x3) of channel-last float32 data through ember._winograd

def _plain(w, scale):
    """`w` scaled per output channel (when `scale` is given) and contiguous."""
    if scale is not None:
        w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    return np.ascontiguousarray(w)


def _compiled_runs(x, bias, out, m, residual):
    arrays = [x, out] + [a for a in (bias, residual) if a is not None]
    return (_winograd is not None and m == 4
            and all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)
            and (residual is None or residual.shape == out.shape))


def data_gradient(dy, w, dx, window, channel_last, budget=None, alloc=None, threads=1):
    """dx = the data gradient of the 3x3, stride-1 convolution with weights `w` (OIHW, or
    OHWI for channel-last data) and `window`, from the output gradient `dy`: the convolution
    of `dy` with the weights flipped and their channel axes swapped, padded by 2 - pad, in
    the compiled F(4x4, 3x3) (:func:`supports_gradient` must hold)."""
    alloc = alloc or (lambda specs: [np.empty(s, d) for s, d in specs])
    flipped = (w.transpose(3, 1, 2, 0) if channel_last else w.transpose(1, 2, 3, 0))[:, ::-1, ::-1]
    pad = tuple(2 - p for p in window.pad_before)
    reverse = make_window((3, 3), (1, 1), (1, 1), pad, window.size_out, window.size_in)
    dy, dx_target = np.ascontiguousarray(dy), dx
    if not dx.flags.c_contiguous:
        dx_target = np.empty(dx.shape, np.float32)
    _compiled_winograd(dy, flipped, None, dx_target, reverse, None, None, budget, alloc,
                       threads, None, None, channel_last)
    if dx_target is not dx:
        dx[...] = dx_target


# Filters per panel of the packed weights (PANEL in ember/_winograd.c).
_PANEL = 16


def weight_gradient(dy, x, dw, window, channel_last, budget=None, alloc=None, threads=1):
    """dw = the weight gradient of the 3x3, stride-1 convolution of `x` with `window`, from
    its output gradient `dy`, in the Winograd domain of F(4x4, 3x3): for each of the 36 tile
    positions the sum over all tiles of the input tile's transform times the output
    gradient's (``A dY A^T``), then ``G^T . G`` back to 3x3 (:func:`supports_gradient` must
    hold). `dw` is OIHW, or OHWI for channel-last data; channel-first data is copied some
    samples at a time. The kernel threads share the filters, each transforming every input
    tile; its sums stay in one (36, C, F) array."""
    alloc = alloc or (lambda specs: [np.empty(s, d) for s, d in specs])
    channels, filters = dw.shape[-1] if channel_last else dw.shape[1], dw.shape[0]
    batch = samples = x.shape[0]
    if batch == 0:
        dw[...] = 0
        return
    if not channel_last:
        samples = _copied_samples(batch, 4 * (x[0].size + dy[0].size), budget)
    count, ranges, width, chunk = _gradient_plan(samples * prod(_tiles(window, 4)), channels,
                                                 filters, threads)
    writes_dw = channel_last and dw.flags.c_contiguous
    # du, the sums: 36 positions of (C, F in whole panels), zeroed by the first call
    specs = [((_winograd.tile_floats(channels, _round_up(filters, _PANEL)),), np.float32),
             ((count, _winograd.tile_floats(chunk, channels)), np.float32),
             ((count, _winograd.tile_floats(chunk, width)), np.float32)]
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
        tiles = (hi - lo) * prod(_tiles(window, 4))

        run_compiled(_winograd.weight_gradient, dys.size * channels, [
            (xs, dys, du, window.pad_before, (0, tiles), ranges[index], min(chunk, tiles),
             v[index], m[index], lo == 0) for index in range(count)])
    finish_parts = max(1, min(max(1, threads or 1), channels))
    run_compiled(_winograd.finish_gradient, du.size, [
        (du, target, part_range(i, finish_parts, channels)) for i in range(finish_parts)])
    if target is not dw:
        np.copyto(dw, target if channel_last else target.transpose(0, 3, 1, 2))


def supports_pointwise_gradient(problem) -> bool:
    """Whether the compiled sums compute `problem`'s weight gradient as
    :func:`pointwise_weight_gradient`: a 1x1, stride-1, unpadded, ungrouped 2-D convolution
    of channel-last float32 data with channels in whole panels of 16, whose (F, C) sums fit
    ``_POINTWISE_SUMS_BYTES``."""
    return (_winograd is not None and problem.dtype == 'float32' and problem.channel_last
            and problem.gradient == 'weight' and problem.groups == 1
            and len(problem.kernel) == 2 and all(k == 1 for k in problem.kernel)
            and all(s == 1 for s in problem.stride) and not any(problem.pad)
            and problem.channels % _PANEL == 0
            and 4 * problem.filters * problem.channels <= _POINTWISE_SUMS_BYTES)


# Each kernel thread adds every chunk of rows into its own (F, C) sums: past about twice a
# core's L2 (1 MB here) they go through the shared cache and memory on every chunk, and oneDNN
# is faster. resnet50_v1 at batch 16, in the training step: the 1 MB sums of 256 <-> 1024 at
# 14x14 ran 3.95-4.40 ms a call against oneDNN's 4.42-4.59, the 4 MB ones of 512 <-> 2048 at
# 7x7 5.6-5.7 against 4.3-5.1; measurement, which runs them alone, chose the sums there in 3
# processes of 4.
_POINTWISE_SUMS_BYTES = 2 << 20


def pointwise_scratch_bytes(problem, batch) -> int:
    """A (F, C) weight gradient and F bias sums for each kernel thread but the first."""
    return (max(1, kernel_threads()) - 1) * 4 * problem.filters * (problem.channels + 1)


def pointwise_weight_gradient(dy, x, dw, db=None, alloc=None, threads=1):
    """dw (F, 1, 1, C) = dy^T x over the (N*H*W) rows of the NHWC arrays, the weight gradient
    of a 1x1 stride-1 convolution (:func:`supports_pointwise_gradient`), and db (F,), None or
    the bias gradient, the column sums of dy: the Winograd weight gradient's sums run on the
    rows themselves, a few dozen rows at a time so that they stay in cache, the bias sums
    taken while dy's rows are there. The kernel threads share the rows, each but the first
    summing into its own copy in scratch; the copies are added at the end."""
    alloc = alloc or (lambda specs: [np.empty(s, d) for s, d in specs])
    filters, channels = dw.shape[0], dw.shape[-1]
    rows = prod(dy.shape[:-1])
    dy, x = np.ascontiguousarray(dy), np.ascontiguousarray(x)
    parts = max(1, min(threads or 1, rows // _POINTWISE_MIN_ROWS))
    target = dw if dw.flags.c_contiguous else np.empty(dw.shape, np.float32)
    sums = db if db is None or db.flags.c_contiguous else np.empty(db.shape, np.float32)
    outputs = [(target, sums)]
    if parts > 1:
        copies = alloc([((parts - 1, filters * (channels + 1)), np.float32)])[0]
        outputs += [(copy[:filters * channels], copy[filters * channels:]) for copy in copies]
    chunk = _POINTWISE_CHUNK_ROWS if filters > 128 else 2 * _POINTWISE_CHUNK_ROWS

    # each part zeroes its own sums on its own thread
    run_compiled(_winograd.pointwise_gradient, rows * (filters + channels), [
        (dy, x, out, None if db is None else bias, part_range(index, parts, rows), chunk, True)
        for index, (out, bias) in enumerate(outputs)])
    for out, bias in outputs[1:]:
        np.add(target, out.reshape(target.shape), out=target)
        if db is not None:
            np.add(sums, bias, out=sums)
    if target is not dw:
        np.copyto(dw, target)
    if db is not None and sums is not db:
        np.copyto(db, sums)


def supports_pointwise(problem) -> bool:
    """Whether :func:`pointwise` runs `problem`: a 1x1, unpadded, undilated, ungrouped 2-D
    convolution (any stride) of channel-last float32 data."""
    return (_winograd is not None and problem.dtype == 'float32' and problem.channel_last
            and not problem.gradient and problem.groups == 1 and len(problem.kernel) == 2
            and all(k == 1 for k in problem.kernel) and all(d == 1 for d in problem.dilate)
            and not any(problem.pad))


def pointwise_forward_scratch_bytes(problem, batch) -> int:
    """A strided call's rows of x, gathered; the packed weights, which a call without a
    weight token packs into scratch."""
    strided = any(s != 1 for s in problem.stride)
    rows = batch * prod(problem.size_out)
    return 4 * (strided * rows * problem.channels
                + _round_up(problem.filters, _PANEL) * problem.channels)


def pointwise(x, w, bias, out, stride, residual=None, act_type=None, alloc=None, threads=1,
              weight_version=None, weight_scale=None):
    """out = act(x @ (w * weight_scale)^T + bias + residual) for NHWC `x` (read every
    `stride` rows and columns) and `out`, OHWI 1x1 weights `w` of any strides: a 1x1
    convolution (:func:`supports_pointwise`) on the compiled register blocks of the Winograd
    products, the weights packed in panels of 16 filters (kept per `weight_version`, as the
    transformed weights are) and the bias, residual and relu applied as each block of outputs
    is stored. The kernel threads take chunks of rows from a shared counter."""
    alloc = alloc or (lambda specs: [np.empty(s, d) for s, d in specs])
    filters, channels = w.shape[0], w.shape[-1]
    rows = prod(out.shape[:-1])
    if rows == 0:
        return
    u = _kept_pointwise.get(weight_version)
    strided = any(s != 1 for s in stride)
    specs = ([((out.shape[:-1] + (channels,)), np.float32)] if strided else []) \
        + ([(_packed_panels(filters, channels), np.float32)]
           if u is None and weight_version is None else [])
    scratch = alloc(specs) if specs else []
    if strided:
        np.copyto(scratch[0], x[:, ::stride[0], ::stride[1]])
        x = scratch[0]
    else:
        x = np.ascontiguousarray(x, np.float32)
    if u is None:
        u = packed_weights(w, weight_scale, weight_version,
                           scratch[-1] if weight_version is None else None)
    target = out if out.flags.c_contiguous else np.empty(out.shape, np.float32)
    if residual is not None:
        if same_view(residual, target):
            residual = target           # summed in place (another array object, or out)
        elif np.may_share_memory(residual, target):
            residual = residual.copy()  # overlaps out in some other arrangement
        else:
            residual = np.ascontiguousarray(residual, np.float32)
    relu = act_type == 'relu'
    parts = max(1, min(threads or 1, -(-rows // _POINTWISE_FORWARD_CHUNK)))
    chunk = _POINTWISE_FORWARD_CHUNK
    claim = np.zeros(1, np.int64)
    run_compiled(_winograd.pointwise, rows * channels * filters,
                 [(x, u, target, bias, residual, relu, (0, rows), chunk, _POINTWISE_DEPTH,
                   claim)] * parts)
    if target is not out:
        np.copyto(out, target)
    if act_type is not None and not relu:
        finish(out, out, act_type=act_type)


def multiply_packed(x, u, out, bias, residual, act_type):
    """out = act(x @ W^T + residual + bias) on the compiled products, one thread: x (1, 1,
    rows, K) and out (1, 1, rows, F) contiguous float32, `u` W (F, K) packed
    (:func:`packed_weights`), `residual` None, `out` or contiguous apart from it; the
    patch-row products of :func:`ember.op.nn.conv_gemm.gemm`."""
    relu = act_type == 'relu'
    _winograd.pointwise(x, u, out, bias, residual, relu, (0, x.shape[2]),
                        _POINTWISE_FORWARD_CHUNK, _POINTWISE_DEPTH)
    if act_type is not None and not relu:
        finish(out, out, act_type=act_type)


def patches(x, rows, window, lo, hi):
    """rows = the im2col rows of NHWC float32 `x` (C-contiguous) under the 2-D `window`, one
    per output pixel of the output lines [lo, hi) (line = sample * out_h + output row), each
    the kernel's taps in (y, x) order, C values a tap (``ember._winograd.patches``)."""
    _winograd.patches(x, rows, window.size_out, window.pad_before, window.stride,
                      window.kernel, window.dilate, (lo, hi))


def compiled_products() -> bool:
    """Whether the compiled module (and so :func:`pointwise`, :func:`multiply_packed`) is
    built."""
    return _winograd is not None


def run_compiled(kernel, elements, calls) -> None:
    """``kernel(*args)`` for each tuple in `calls`, `kernel` one of the compiled module's:
    at once where the `elements` of work reach ``MXNET_CPU_PARALLEL_SIZE``, on the calling
    thread's OpenMP team where the module has one (``_winograd.team``: oneDNN's threads, still
    spinning from the last kernel), else on the kernel threads; one after the other inside a
    split (:func:`ember.engine.in_parallel_region`) or below the size."""
    if len(calls) > 1 and elements >= config.get('MXNET_CPU_PARALLEL_SIZE') \
            and not in_parallel_region():
        if _winograd.openmp and use_team and isinstance(kernel, types.BuiltinFunctionType):
            _winograd.team(kernel, calls, team_cores(len(calls)))
            return
        run_parts(len(calls), elements, lambda index: kernel(*calls[index]), blas=False)
        return
    for args in calls:
        kernel(*args)


# Whether run_compiled() uses the OpenMP team where the module has one (tests turn it off to
# run the kernel-pool path).
use_team = True


def _packed_panels(filters, width):
    return (-(-filters // _PANEL), width, _PANEL)


def packed_weights(w, weight_scale, weight_version, target=None):
    """The OHWI weights `w` (any strides) scaled per filter by `weight_scale` (None: not)
    as (F, K) = (F, kernel taps * C) packed in panels of 16 filters for the compiled products:
    the copy kept for `weight_version` (an inference layer's weight token), else packed now
    (into `target` where given) and kept for it."""
    u = _kept_pointwise.get(weight_version)
    if u is None:
        u = _pack_pointwise(w, weight_scale, target)
        if weight_version is not None:
            _kept_pointwise.keep(weight_version, u)
    return u


def same_view(a, b) -> bool:
    """Whether `a` and `b` are the same elements of the same memory, as their own objects."""
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__['data'][0] == b.__array_interface__['data'][0])


def _pack_pointwise(w, weight_scale, target=None):
    """(ceil(F / 16), K, 16): the panels of W^T (zeros past the last filter) of OHWI weights
    seen as (F, K), scaled per filter by `weight_scale` (or not, None)."""
    filters = w.shape[0]
    channels = prod(w.shape[1:])
    w = w.reshape(filters, channels)
    if weight_scale is not None:
        w = w * weight_scale.reshape(-1, 1)
    panels = -(-filters // _PANEL)
    u = np.empty((panels, channels, _PANEL), np.float32) if target is None else target
    whole = filters // _PANEL
    by_filter = u.transpose(0, 2, 1)            # (panels, 16, C) view
    np.copyto(by_filter[:whole], w[:whole * _PANEL].reshape(whole, _PANEL, channels))
    if whole < panels:
        by_filter[whole].fill(0)
        np.copyto(by_filter[whole, :filters - whole * _PANEL], w[whole * _PANEL:])
    return u


# The packed weights of inference layers that run pointwise(), per weight version.
_kept_pointwise = KeptByToken()

# pointwise(): rows per chunk that a kernel thread takes (those of x stay in L2 while each
# pair of filter panels passes over them), and channels per block (a pair of panels of 256
# channels is 32 KB, in L1). Measured on a Zen 5 over resnet50_v1's 1x1 layers at batch 8:
# 430-475 GFLOP/s with two threads, against 180-250 for NumPy's OpenBLAS (AVX2 kernels).
_POINTWISE_FORWARD_CHUNK = 96
_POINTWISE_DEPTH = 256


# Rows per chunk of the pointwise sums: dy's rows of a chunk stay in the L2 cache while every
# block of filters reads them (F = 256: 64 KB), x's in L1; filters <= 128 take twice as many.
# Measured on a Zen 5 (resnet50_v1's 1x1 shapes at batch 16): 32 rows lost up to 25%, 256
# up to 20%.
_POINTWISE_CHUNK_ROWS = 64
# Rows below which a second kernel thread does not pay for its copy of the sums.
_POINTWISE_MIN_ROWS = 256


def _gradient_plan(tiles, channels, filters, threads):
    """(parts, their filter ranges, the widest range in whole panels, tiles per chunk) of the
    weight gradient: the kernel threads share whole panels of filters."""
    panels = -(-filters // _PANEL)
    count = max(1, min(max(1, threads or 1), panels))
    ranges = [tuple(min(filters, _PANEL * b) for b in part_range(i, count, panels))
              for i in range(count)]
    width = max(_round_up(hi - lo, _PANEL) for lo, hi in ranges)
    chunk = min(tiles, _fitting(channels, width, _GRADIENT_CHUNK_BYTES))
    return count, ranges, width, chunk


# Tiles per chunk of the weight gradient: their transformed inputs and output gradients take
# at most this many bytes per kernel thread, so that they stay in the L3 cache while the sums
# run over them, and the sums (36 C F values) go through memory once per chunk.
_GRADIENT_CHUNK_BYTES = 4 << 20

# The weight gradient's sums must fit the L3 cache with its chunks: past this many bytes they
# go through memory on every chunk, and oneDNN is faster (512 channels: 33 against 29 ms at
# batch 16, with 38 MB of sums in every temp space).
_GRADIENT_SUMS_BYTES = 16 << 20


def _compiled_winograd(x, w, bias, out, window, residual, act_type, budget, alloc, threads,
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
    u_shape = _packed_shape(channels, filters)
    if fused:
        weight_version = None
    u = _kept.get(weight_version)
    if u is not None and u.shape != u_shape:
        u = None
    if u is None and weight_version is not None and \
            not _room_for(_kept, prod(u_shape) * 4):
        weight_version = None       # past the budget: transformed into scratch every call
    in_scratch = u is None and weight_version is None
    given = [] if channel_last else [a for a in (x, out, residual) if a is not None]
    batch = samples = x.shape[0]
    if given:
        per_sample = 4 * sum(a[0].size for a in given)
        samples = _copied_samples(batch, per_sample, budget)
        if budget is not None:
            budget = max(0, budget - samples * per_sample - in_scratch * prod(u_shape) * 4)
    per_sample_tiles = prod(_tiles(window, 4))
    plans = {n: _split(n * per_sample_tiles, channels, filters, threads)
             for n in {samples, batch % samples or samples}}
    count = max(split.count for split in plans.values())
    width = max(split.width for split in plans.values())
    chunk = _chunk(channels, filters, width, count, budget,
                   _shared_tiles(plans, per_sample_tiles))
    fusing = _fused_plans(plans, per_sample_tiles, chunk, channels, fused) \
        if in_scratch else None
    if fusing is not None:
        plans = fusing
        width = max(split.width for split in plans.values())
        own = max(split.claim_panels for split in plans.values())
    specs = [((count, _winograd.tile_floats(chunk, channels)), np.float32),
             ((count, _winograd.tile_floats(chunk, width)), np.float32)]
    if fusing is not None:
        specs.append(((count, _winograd.own_u_floats(own, channels)), np.float32))
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
        # transform_weights reads OHWI views of any strides (OIHW weights, flipped ones)
        u = _packed_weights(w if weight_scale is None else _plain(w, weight_scale),
                            weight_version, threads,
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
        run_compiled(_winograd.convolve, out.size * channels,
                     calls(x, out, residual, v, products, owns))

    if not given:
        convolve(x, out, residual, v, products, owns)
        if (fusing is not None or (not in_scratch and weight_version is not None)) \
                and (act_type is None or relu):
            return Prepared(u, specs, alloc, _Again(
                lambda *scratch: calls(x, out, residual, *scratch), out.size * channels))
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
    back to 0 each run: about 4 us of a batch-1 layer's Python."""

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
        run_compiled(_winograd.convolve, self.elements, self.calls)


class Prepared:
    """A compiled F(4x4) or line call worked out once (its split, chunks and arguments), to
    run again on the same arrays while the transformed weights kept for its weight version
    are the ones it was worked out with (`u`; None where the call transforms them itself,
    fused: it then reads the weights as they are): about 30 us of a batch-1 layer's Python.
    Each run takes its scratch afresh (a later request may move the temp space)."""

    __slots__ = ('u', 'specs', 'alloc', 'convolve', 'store')

    def __init__(self, u, specs, alloc, convolve, store=None):
        self.u, self.specs, self.alloc, self.convolve = u, specs, alloc, convolve
        self.store = _kept if store is None else store     # where `u` is kept (line's own)

    def run(self, weight_version) -> bool:
        """Runs the call again; False (nothing written) when the weights kept for
        `weight_version` are not the ones it was worked out with."""
        if self.u is not None and self.store.get(weight_version) is not self.u:
            return False
        self.convolve(*self.alloc(self.specs))
        return True


# Channel-first data goes through channel-last copies of at most this many bytes (or half the
# workspace, when smaller): larger copies gain little and grow every temp space (MXNet's
# MXNET_CPU_TEMP_COPY of them) by as much; smaller ones cost more calls (4 MB: the weight
# gradient of 64 channels at 56x56, batch 16, took 19.4 ms against 13.3 with 16 MB).
_COPY_BYTES = 16 << 20


def _copied_samples(batch, per_sample, budget) -> int:
    """Samples per channel-last copy, `per_sample` bytes each."""
    limit = _COPY_BYTES if budget is None else min(_COPY_BYTES, budget // 2)
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


def _compiled_plan(problem, batch, force=False):
    """(samples per call, bytes per sample of their channel-last copies, the split, tiles
    per chunk, the fused split: None where a call does not fuse, unless `force`) of a
    compiled call of `problem` on `batch` samples, as :func:`_compiled_winograd` works them
    out without a budget."""
    per_sample = 4 * (problem.channels * prod(problem.size_in)
                      + problem.filters * prod(problem.size_out))
    samples = batch if problem.channel_last else _copied_samples(batch, per_sample, None)
    per_sample_tiles = prod(_tiles(problem.window, 4))
    tiles = samples * per_sample_tiles
    split = _split(tiles, problem.channels, problem.filters, kernel_threads())
    chunk = min(tiles, _chunk(problem.channels, problem.filters, split.width, split.count,
                              None, _shared_tiles({samples: split}, per_sample_tiles)))
    fusing = _fused_plans({samples: split}, per_sample_tiles, chunk, problem.channels, force)
    return samples, per_sample, split, chunk, fusing and fusing[samples]


def _compiled_scratch(problem, batch, fused=False):
    """Without a residual (a channel-first residual takes one copy more). With all the
    transformed weights, or each thread's own where the call fuses them (`fused`; or
    whichever is more where a call transforming them every call fuses)."""
    samples, per_sample, split, chunk, fusing = _compiled_plan(problem, batch, fused)
    copies = 0 if problem.channel_last else samples * per_sample
    own = 0 if fusing is None else \
        fusing.count * (_chunk_floats(chunk, problem.channels, fusing.width)
                        + _winograd.own_u_floats(fusing.claim_panels, problem.channels)) * 4
    if fused:
        return own + copies
    weights = prod(_packed_shape(problem.channels, problem.filters))
    return max(own, (split.count * _chunk_floats(chunk, problem.channels, split.width)
                     + weights) * 4) + copies


def fuses(problem) -> bool:
    """Whether a compiled F(4x4) call of `problem` (its batch) can transform its weights
    fused: its kernel threads share the filters of one chunk of all its tiles, as at batch 1
    (:func:`_fused_plans`)."""
    return (compiled(problem, 4) and problem.gradient == ''
            and _compiled_plan(problem, problem.batch)[-1] is not None)


def fused_scratch_bytes(problem, batch) -> int:
    return _compiled_scratch(problem, batch, fused=True)


def _fused_plans(plans, per_sample_tiles, chunk, channels, force=False):
    """`plans` (samples -> _Split) with the threads sharing groups of filters, each narrowed
    so that its transformed weights take at most ``_OWN_U_BYTES``, where every plan's
    threads share the filters of one chunk that holds all its tiles (or `force`); else None.
    Each thread then transforms the weights of the groups it takes into its own scratch,
    which stays in its L2 cache for the products: each group's weights once, or where there
    are several chunks once for each chunk its threads take it in."""
    if not force and not all(split.claim_panels and samples * per_sample_tiles <= chunk
                             for samples, split in plans.items()):
        return None
    most = max(1, _OWN_U_BYTES // (36 * channels * _PANEL * 4))

    def group(split):
        return min(split.claim_panels or most, most)
    return {samples: dataclasses.replace(split, claim_panels=group(split),
                                         width=group(split) * _PANEL)
            for samples, split in plans.items()}


# A thread's own transformed weights (fused): two panels of 256 channels. Measured on a
# 2-core Zen 5, 256 channels at 14x14, batch 1, 12 layers with their own weights in turn:
# groups of 1 panel 0.44 ms a layer, 2 panels 0.39, 4 panels (2.4 MB) 0.39; oneDNN 0.46.
_OWN_U_BYTES = 5 << 18


def _chunk_floats(chunk, channels, width):
    """The floats of one thread's transformed tiles and products (v and m) for chunks of
    `chunk` tiles, `width` filters wide: each of the 36 positions rounded up to an odd number
    of cache lines (``ember._winograd.tile_floats``)."""
    return _winograd.tile_floats(chunk, channels) + _winograd.tile_floats(chunk, width)


def _round_up(n, step):
    return -(-n // step) * step


# Transformed weights up to this size stay in the shared L3 cache between chunks: chunks
# can then be short, so that their transformed tiles and products stay in L2. Larger ones
# come from memory for every chunk, which must then be long enough to pay for them (the
# long chunk measured on a 2-core Zen 3 with 1 MB of L2 per core and 32 MB of L3). Short
# chunks of 12 tiles fill the AVX-512 register block (12 rows); on a 2-core Zen 5 at batch
# 16, 2 threads, against chunks of 6: 128 channels at 28x28 3.97 -> 3.01 ms a forward call,
# 256 at 14x14 4.43 -> 3.62, 64 at 56x56 even, and as fast as 18 or 24 (with the positions
# of V and M an odd number of cache lines apart: ember._winograd.tile_floats).
_CACHED_WEIGHT_BYTES = 16 << 20
_SHORT_CHUNK, _LONG_CHUNK = 12, 48


def _weights_cached(channels, filters):
    return 36 * channels * _round_up(filters, _PANEL) * 4 <= _CACHED_WEIGHT_BYTES


def _chunk(channels, filters, width, parts, budget, shared_tiles=0):
    """Tiles per chunk, with the chunks of all `parts` (products `width` filters wide) within
    `budget` bytes (the transformed weights, scratch or not, are the weights' and not
    counted: shorter chunks would only read them more often). The threads together read
    all the weights for every chunk, whether they share its tiles or its filters. Where they
    share the filters of calls of `shared_tiles` tiles (0: they share the tiles), a chunk
    holds all of them, up to ``_SHARED_CHUNK_BYTES`` a thread."""
    if shared_tiles:
        chunk = max(_SHORT_CHUNK, min(shared_tiles,
                                      _fitting(channels, width, _SHARED_CHUNK_BYTES)))
    else:
        chunk = _SHORT_CHUNK if _weights_cached(channels, filters) else _LONG_CHUNK
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


# When the threads share the filters of a chunk, each transforms the chunk's inputs itself
# and reads its part of the weights once per chunk: the weights come from memory, not L3,
# when other layers ran in between (a network at batch 1), so one chunk of all the call's
# tiles reads them once. Its transformed tiles and products may spill from L2 into L3.
# Measured on a 2-core Zen 5 at batch 1, 8 layers with their own weights in turn: 256
# channels at 14x14 0.62 -> 0.43 ms a layer (chunks of 6 tiles before), and 128 channels at
# 28x28 0.24 -> 0.21 ms with the threads sharing its filters rather than its tiles.
_SHARED_CHUNK_BYTES = 3 << 19

# Tiles from which the kernel threads share the tiles. With fewer, or fewer than a long chunk
# while the weights come from memory, they share the filters of each chunk instead: a thread
# transforms the chunk's inputs (a small cost then) and reads only part of the weights.
_MIN_TILES_PER_PART = 32

# Groups of filters per chunk and thread when the threads share the filters: with more, a
# thread that starts late leaves less for the others to wait on, but each takes narrower
# products and transforms a chunk's inputs again where it takes a group of another chunk
# (256 channels at 14x14, one thread: 2 groups 0.92 ms, 4 groups 0.96, 16 groups 1.14).
_GROUPS_PER_THREAD = 2


@dataclass(frozen=True)
class _Split:
    """How `count` kernel threads share a call's tiles and filters through a counter: they
    take chunks of tiles (`claim_panels` 0), or groups of `claim_panels` panels of filters of
    a chunk; `width` is the filters (whole panels) of one item's products."""
    count: int
    claim_panels: int
    width: int


@functools.lru_cache(maxsize=256)
def _split(tiles, channels, filters, threads) -> _Split:
    threads = max(1, threads or 1)
    panels = -(-filters // _PANEL)
    enough = _MIN_TILES_PER_PART if _weights_cached(channels, filters) else _LONG_CHUNK
    if tiles // threads >= enough or panels < 2:
        return _Split(max(1, min(threads, tiles)), 0, panels * _PANEL)
    count = min(threads, panels)
    group = -(-panels // (count * _GROUPS_PER_THREAD))
    return _Split(count, group, group * _PANEL)


def _packed_shape(channels, filters):
    """U's shape: the 36 tile positions' panels of 16 filters for each channel."""
    return (36, -(-filters // _PANEL), channels, _PANEL)


def _packed_weights(w, weight_version, threads, scratch=None):
    """U = G g G^T of OHWI weights `w`, packed (zeros past the last filter), in `scratch`,
    else in a new array kept for `weight_version`."""
    shape = _packed_shape(w.shape[-1], w.shape[0])
    u = np.empty(shape, np.float32) if scratch is None else scratch
    parts = min(max(1, threads or 1), shape[1])
    run_compiled(_winograd.transform_weights, u.size,
                 [(w, u, part_range(i, parts, shape[1])) for i in range(parts)])
    if weight_version is not None:
        _kept.keep(weight_version, u)
    return u


def kept_bytes() -> int:
    """Bytes of transformed and packed weights kept between calls."""
    return _kept.nbytes() + _kept_pointwise.nbytes() + _kept_line.nbytes()


def can_keep(problem, weight_version) -> bool:
    """Whether a compiled F(4x4) layer of `problem` with `weight_version` (not None) finds
    its transformed weights kept, or room for them within :func:`kept_budget`."""
    u = _kept.get(weight_version)
    if u is not None and u.shape == _packed_shape(problem.channels, problem.filters):
        return True
    return _room_for(_kept, kept_weight_bytes(problem, 4))


def discard_kept(weight_version, keep='') -> None:
    """Forgets the transformed or packed weights kept for `weight_version` (a weight token),
    but those of the algorithm named `keep`, as when its layer runs that algorithm after
    measuring the others."""
    if keep != 'winograd4':
        _kept.discard(weight_version)
    if keep not in ('pointwise', 'gemm'):     # both multiply by the packed weights
        _kept_pointwise.discard(weight_version)
    if keep != 'winograd_line':
        _kept_line.discard(weight_version)


# Bytes of transformed weights kept across all layers; layers past it transform theirs into
# scratch on every call, where that measures faster than the rule's algorithm
# (conv_algorithms.choose_past_budget). F(4x4) keeps 4x a layer's weights: resnet152_v1's 36 layers of
# 256 channels would keep 340 MB (RSS 912 MB against MXNet's 776); resnet50_v1 keeps 68 MB. On
# a Zen 5 resnet152_v1 at batch 8 peaked at 742 MB with 128 MB of them (MXNet 764), 713 with
# 96 and 672 with 64, at the same speed; 64 cost vgg16 and resnet50_v1 at batch 8 2-3%.
KEPT_BUDGET = 96 << 20

# ... or, where more, this share of the variables (parameters, auxiliary states, inputs) of the
# largest graph a convolution has run in: a model whose dense layers hold most of its weights
# has room for them. vgg16 at batch 1 (553 MB of parameters) keeps 116 MB on its 3x3 layers
# of 256 and 512 channels and runs 21.2 img/s, against 18.3 with 96 MB, at a peak RSS of 890-930
# MB against 784 (MXNet: 1608); resnet152_v1's 241 MB give it the budget it had.
KEPT_SHARE = 0.4
_largest_graph = 0


def note_graph(variable_bytes: int) -> None:
    """Counts a graph of `variable_bytes` (``KernelContext.variable_bytes``) that a
    convolution runs in towards :func:`kept_budget`."""
    global _largest_graph
    if variable_bytes > _largest_graph:
        _largest_graph = variable_bytes


def _room_for(store, nbytes) -> bool:
    """Whether `store` (``_kept`` or ``_kept_line``) may keep `nbytes` more: the two share
    :func:`kept_budget`."""
    other = _kept_line if store is _kept else _kept
    return store.has_room(nbytes, kept_budget() - other.nbytes())


def kept_budget() -> int:
    """Bytes of transformed and packed weights all layers may keep: ``KEPT_BUDGET``, or
    ``KEPT_SHARE`` of the largest graph's variables (:func:`note_graph`) where that is more.

    >>> kept_budget() >= KEPT_BUDGET
    True
    """
    return max(KEPT_BUDGET, int(KEPT_SHARE * _largest_graph))

_kept = KeptByToken()


# ----------------------------------------------------------------------------------------------
# 1-D Winograd F(m, r) of 1 x r and r x 1 kernels through ember._winograd.line

# The interpolation points (besides the point at infinity) of F(m, r) per (m, r): the
# smallest in magnitude, then halves and their inverses, which keep the float32 error near
# direct convolution's. Relative errors of one output over 192 channels, against 3-7e-7 for
# the direct sum: F(4, 3) 1.4e-6, F(4, 7) 9e-6, F(6, 3) 2.2e-6, F(6, 5) 1.1e-5, F(6, 7)
# 1.5e-5 (with +-3 in place of +-2/3: 1.3e-4).
_HALF, _THREE_HALVES, _TWO_THIRDS = Fraction(1, 2), Fraction(3, 2), Fraction(2, 3)
LINE_POINTS = {
    (4, 3): (0, 1, -1, 2, -2),
    (4, 5): (0, 1, -1, 2, -2, _HALF, -_HALF),
    (4, 7): (0, 1, -1, 2, -2, _HALF, -_HALF, _THREE_HALVES, -_THREE_HALVES),
    (6, 3): (0, 1, -1, 2, -2, _HALF, -_HALF),
    (6, 5): (0, 1, -1, 2, -2, _HALF, -_HALF, _THREE_HALVES, -_THREE_HALVES),
    (6, 7): (0, 1, -1, 2, -2, _HALF, -_HALF, _THREE_HALVES, -_THREE_HALVES, _TWO_THIRDS,
             -_TWO_THIRDS),
}
_LINE_TAPS = (3, 5, 7)

# F(6, r) runs a call where it needs fewer products along a line than F(4, r) (inceptionv3's
# 17-pixel lines of 1x7 layers: 3 tiles of 12 points against 5 of 10) and the call has at
# least this many of its tiles. On a 2-core Zen 5, 192 -> 192 (1, 7) at 17x17 took 1.00 ms
# against 1.26 with F(4, 7) at batch 8 (408 tiles), 3.06 against 3.80 at batch 32 for 160
# channels, but 0.27 against 0.20 at batch 1 (51 tiles), where the weights (12 against 10
# positions) outweigh the products and 2 threads share a few chunks.
_LINE_WIDE_MIN_TILES = 128


def line_outputs(r, length, lines) -> int:
    """m of the F(m, r) that :func:`line` runs for `lines` lines of `length` outputs: 6
    where that needs fewer products and has ``_LINE_WIDE_MIN_TILES`` tiles, else 4.

    >>> line_outputs(7, 17, 8 * 17), line_outputs(7, 17, 17), line_outputs(3, 8, 8 * 8)
    (6, 4, 4)
    """
    def products(m):
        return (m + r - 1) * -(-length // m)
    if products(6) < products(4) and lines * -(-length // 6) >= _LINE_WIDE_MIN_TILES:
        return 6
    return 4


@functools.lru_cache(maxsize=None)
def line_transforms(r, m=4):
    """(m, BT, G, AT) of Winograd F(m, r) by Toom-Cook on ``LINE_POINTS[m, r]``, in float64
    (read-only): the correlation of r taps g with m + r - 1 inputs d is
    ``AT @ ((G @ g) * (BT @ d))``. With V the Vandermonde matrix of the points and infinity,
    the transposed linear convolution: AT = Vm^T, G = Vr, BT = inv(V)^T, worked out exactly.

    >>> m, bt, g, at = line_transforms(3)
    >>> d, taps = np.arange(6.0), np.array([1.0, 2.0, 3.0])
    >>> at @ ((g @ taps) * (bt @ d))
    array([ 8., 14., 20., 26.])
    """
    points = LINE_POINTS[m, r]
    a = m + r - 1

    def vandermonde(columns):
        rows = [[Fraction(p) ** k for k in range(columns)] for p in points]
        return rows + [[Fraction(int(k == columns - 1)) for k in range(columns)]]
    inverse = _exact_inverse(vandermonde(a))
    matrices = (np.array(inverse, np.float64).T, np.array(vandermonde(r), np.float64),
                np.array(vandermonde(m), np.float64).T)
    for matrix in matrices:
        matrix.flags.writeable = False
    return (m,) + matrices


def _exact_inverse(rows):
    """The inverse of the square matrix `rows` (Fractions), by Gauss-Jordan elimination."""
    n = len(rows)
    work = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(rows)]
    for col in range(n):
        pivot = next(i for i in range(col, n) if work[i][col] != 0)
        work[col], work[pivot] = work[pivot], work[col]
        scale = work[col][col]
        work[col] = [value / scale for value in work[col]]
        for i in range(n):
            if i != col and work[i][col] != 0:
                factor = work[i][col]
                work[i] = [value - factor * lead for value, lead in zip(work[i], work[col])]
    return [row[n:] for row in work]


def _line_axis(problem):
    """(axis, taps) of a 1 x r (axis 2) or r x 1 (axis 1) kernel, else (None, None)."""
    kernel = tuple(problem.kernel)
    if len(kernel) != 2 or 1 not in kernel or kernel == (1, 1):
        return None, None
    axis = 1 if kernel[1] == 1 else 2
    return axis, kernel[axis - 1]


def supports_line(problem) -> bool:
    """Whether :func:`line` runs `problem`: a forward 2-D convolution of channel-last
    float32 data, one group, stride 1, undilated, with a 1 x r or r x 1 kernel (r 3, 5 or 7)
    and no padding on the axis of extent 1, the compiled module built."""
    axis, taps = _line_axis(problem)
    return (_winograd is not None and axis is not None and taps in _LINE_TAPS
            and not problem.gradient and problem.channel_last and problem.dtype == 'float32'
            and problem.groups == 1 and tuple(problem.stride) == (1, 1)
            and tuple(problem.dilate) == (1, 1) and problem.pad[2 - axis] == 0)


def _line_packed_shape(r, m, channels, filters):
    """U's shape: the a = m + r - 1 positions' panels of 16 filters for each channel."""
    return (m + r - 1, -(-filters // _PANEL), channels, _PANEL)


def _line_outputs_of(shape, axis, r):
    """m of a call with an NHWC output of `shape` (or a problem's batch and output size)."""
    batch, size = shape[0], shape[1:3]
    return line_outputs(r, size[axis - 1], batch * size[2 - axis])


def line_kept_bytes(problem) -> int:
    """Bytes of transformed, packed weights an inference layer keeps (:func:`line`)."""
    if not supports_line(problem):
        return 0
    axis, r = _line_axis(problem)
    m = _line_outputs_of((problem.batch,) + tuple(problem.size_out), axis, r)
    return prod(_line_packed_shape(r, m, problem.channels, problem.filters)) * 4


def line_scratch_bytes(problem, batch) -> int:
    """Each kernel thread's chunk of transformed tiles and products, plus the transformed
    weights (scratch when the weights have no version)."""
    axis, r = _line_axis(problem)
    m = _line_outputs_of((batch,) + tuple(problem.size_out), axis, r)
    points, width = m + r - 1, _round_up(problem.filters, _PANEL)
    tiles = batch * _line_tiles(problem.size_out, axis, m)
    chunk = max(1, min(tiles, _line_chunk(points, problem.channels, width)))
    parts = max(1, min(kernel_threads() or 1, -(-tiles // chunk)))
    return 4 * (parts * points * chunk * (problem.channels + width)
                + prod(_line_packed_shape(r, m, problem.channels, problem.filters)))


def _line_tiles(size_out, axis, m):
    """Tiles per sample: lines across times tiles of m along each."""
    along, across = size_out[axis - 1], size_out[2 - axis]
    return across * -(-along // m)


# Bytes of a chunk's transformed tiles and products (V and M) per kernel thread: they stay in
# the core's L2 cache (1 MB on a Zen 5) beside the weight panels that pass over them. Measured
# on a 2-core Zen 5 at batch 8, two threads (ms for chunks of 6, 12, 24, 48, 96 tiles):
# 192 -> 192 (1, 7) at 17x17 1.33, 1.23, 1.24, 1.24, 1.36; 160 -> 160 (7, 1) 0.92, 0.88,
# 0.87, 0.88, 0.95; 384 -> 384 (1, 3) at 8x8 0.56, 0.53, 0.56, 0.61, 0.72.
_LINE_CHUNK_BYTES = 384 << 10


def _line_chunk(points, channels, width):
    """Tiles per chunk: V and M of a chunk within ``_LINE_CHUNK_BYTES``, in whole register
    blocks of 12 tiles where it holds that many."""
    chunk = max(1, _LINE_CHUNK_BYTES // (4 * points * (channels + width)))
    return chunk // 12 * 12 or chunk


def _line_weights(w, axis, weight_scale, m, target=None):
    """U = G g of F(m, r) of OHWI weights `w` (any strides; scaled per filter by `weight_scale`, or not
    where None), packed as (a, ceil(F / 16), C, 16) with zeros past the last filter, in
    `target` where given. Transformed in float64, rounded once."""
    filters, channels = w.shape[0], w.shape[-1]
    taps = w[:, :, 0, :] if axis == 1 else w[:, 0, :, :]              # (F, r, C)
    r = taps.shape[1]
    g = line_transforms(r, m)[2]
    transformed = np.einsum('pk,fkc->pfc', g, taps.astype(np.float64))
    if weight_scale is not None:
        transformed *= np.asarray(weight_scale, np.float64).reshape(1, -1, 1)
    shape = _line_packed_shape(r, m, channels, filters)
    u = np.empty(shape, np.float32) if target is None else target
    by_filter = u.transpose(0, 1, 3, 2)                                # (a, panels, 16, C)
    whole = filters // _PANEL
    np.copyto(by_filter[:, :whole], transformed[:, :whole * _PANEL].reshape(
        shape[0], whole, _PANEL, channels))
    if whole < shape[1]:
        by_filter[:, whole].fill(0)
        np.copyto(by_filter[:, whole, :filters - whole * _PANEL],
                  transformed[:, whole * _PANEL:])
    return u


def line(x, w, bias, out, axis, pad, residual=None, act_type=None, alloc=None, threads=1,
         weight_version=None, weight_scale=None):
    """out = act(conv(x, w * weight_scale) + bias + residual) for NHWC `x` and `out` and OHWI
    weights `w` (any strides) of a 1 x r (`axis` 2) or r x 1 (`axis` 1) kernel, stride 1, by
    Winograd F(m, r) (:func:`supports_line`; m 4 or 6, :func:`line_outputs`): each tile of m
    outputs along the axis reads m + r - 1 inputs from `pad` zeros before the first (out's
    length along the axis sets the padding after). m + r - 1 GEMMs of (tiles, C) by (C, F) on
    the compiled register blocks, 2 (F(4, 3)) to 3.5 (F(6, 7)) times fewer multiplies than
    the direct convolution where the lines are whole tiles. The transformed
    weights are kept per `weight_version` (a weight token) as F(4x4)'s are; the kernel
    threads take chunks of tiles from a shared counter. Returns a :class:`Prepared` of the
    call where it can run again as it is (its transformed weights kept), else None.

    >>> x, w = np.ones((1, 1, 6, 1), np.float32), np.ones((1, 1, 3, 1), np.float32)
    >>> out = np.empty((1, 1, 6, 1), np.float32)
    >>> import pytest
    >>> if not compiled_products():
    ...     pytest.skip('line() runs on the compiled ember._winograd, not built here')
    >>> line(x, w, None, out, axis=2, pad=1)
    >>> print(out.ravel().round(4))      # float32 rounding in the transforms
    [2. 3. 3. 3. 3. 2.]
    """
    alloc = alloc or (lambda specs: [np.empty(s, d) for s, d in specs])
    if out.size == 0:
        return
    filters, channels = w.shape[0], w.shape[-1]
    r = w.shape[axis]
    m = _line_outputs_of(out.shape, axis, r)
    shape = _line_packed_shape(r, m, channels, filters)
    u = _kept_line.get(weight_version)
    if u is not None and u.shape != shape:
        u = None
    if u is None and weight_version is not None and not _room_for(_kept_line,
                                                                  prod(shape) * 4):
        weight_version = None       # past the budget: transformed into scratch every call
    tiles = out.shape[0] * _line_tiles(out.shape[1:3], axis, m)
    width = _round_up(filters, _PANEL)
    chunk = min(tiles, _line_chunk(shape[0], channels, width))
    parts = max(1, min(threads or 1, -(-tiles // chunk)))
    in_scratch = u is None and weight_version is None
    specs = [((parts, shape[0] * chunk * channels), np.float32),
             ((parts, shape[0] * chunk * width), np.float32)]
    v, products, *scratch = alloc(specs + [(shape, np.float32)] * in_scratch)
    if u is None:
        u = _line_weights(w, axis, weight_scale, m, scratch[0] if scratch else None)
        if weight_version is not None:
            _kept_line.keep(weight_version, u)
    given = (x, residual)
    x = np.ascontiguousarray(x, np.float32)
    target = out if out.flags.c_contiguous else np.empty(out.shape, np.float32)
    residual = _line_residual(residual, target)
    relu = act_type == 'relu'
    bt32, at32 = _line_matrices(r, m)

    def convolve(v, products):
        claim = np.zeros(1, np.int64)       # the next tile any of the threads takes
        run_compiled(_winograd.line, out.size * channels * r, [
            (x, u, target, bias, residual, relu, axis, pad, bt32, at32, (0, tiles), chunk,
             v[index], products[index], claim) for index in range(parts)])

    convolve(v, products)
    if target is not out:
        np.copyto(out, target)
    if act_type is not None and not relu:
        finish(out, out, act_type=act_type)
    # again as it is while the call's own arrays are the ones it reads and writes (no copy
    # of the input, the residual or the output) and its transformed weights stay kept
    if (not in_scratch and weight_version is not None and target is out and x is given[0]
            and (residual is None or residual is target or residual is given[1])
            and (act_type is None or relu)):
        return Prepared(u, specs, alloc, convolve, _kept_line)
    return None


@functools.lru_cache(maxsize=None)
def _line_matrices(r, m):
    """BT and AT of F(m, r) as the compiled module takes them: float32, contiguous."""
    _, bt, _, at = line_transforms(r, m)
    matrices = tuple(np.ascontiguousarray(a, np.float32) for a in (bt, at))
    for matrix in matrices:
        matrix.flags.writeable = False
    return matrices


def _line_residual(residual, target):
    """The residual as line() reads it: `target` itself where it is the same memory (summed
    in place), a copy where it overlaps otherwise, else contiguous."""
    if residual is None:
        return None
    if same_view(residual, target):
        return target
    if np.may_share_memory(residual, target):
        return residual.copy()
    return np.ascontiguousarray(residual, np.float32)


# The transformed, packed weights of inference layers that run line(), per weight version.
_kept_line = KeptByToken()
