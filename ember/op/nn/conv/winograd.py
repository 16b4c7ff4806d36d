"""Winograd convolution F(m x m, 3 x 3) for stride-1, undilated 3x3 kernels, m = 2 or 4: what it
runs, its entry point, and its NumPy implementation.

Each m x m output tile comes from an (m+2) x (m+2) input tile: ``Y = A^T [(G g G^T) . (B^T d
B)] A``. The products over input channels become (m+2)^2 GEMMs of (tiles, C) by (C, F): 36
instead of 9 * 16 multiplies per 16 outputs for m = 4 (4x fewer), 16 instead of 9 * 4 for
m = 2 (2.25x).

F(4x4, 3x3) of float32 data runs in the compiled module where it is built
(:mod:`ember.op.nn.conv.winograd_compiled`: the convolution, and the data and weight gradients
of training). Everything else (F(2x2), float64, no compiled module) runs in NumPy, where all
three transforms are GEMMs with the Kronecker product of the 1-D matrices on
tile-position-major data ``(positions, tiles * channels)``: the gather copies each tile
position straight from the unpadded input (zeros in the padding), and the last step scatters
each output position back with bias, residual and activation applied
(:func:`ember.op.nn.conv.common.finish`). Output tiles past the edge are computed and dropped.
``threads`` kernel threads share the lines of tiles, each running the whole chain on its lines
with single-threaded GEMMs, as NNPACK's threads do.

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
from dataclasses import dataclass

import numpy as np

from ember.base import prod
from ember.op.nn.conv import tuning, winograd_compiled
from ember.op.nn.conv.common import (
    copy_windows, default_alloc, finish, output_tiles, part_range, plain, run_parts, segments,
    single_threaded_blas)
from ember.op.nn.conv.compiled import MODULE as _winograd, PANEL, round_up
from ember.op.nn.conv.kept import room_for
from ember.op.nn.conv.state import STATE, TRANSFORMED

__all__ = ['TILES', 'transforms', 'supports', 'compiled', 'winograd', 'scratch_bytes',
           'kept_weight_bytes', 'can_keep', 'supports_gradient', 'supports_data_gradient',
           'supports_weight_gradient', 'gradient_scratch_bytes', 'fuses',
           'fused_scratch_bytes']

TILES = (2, 4)

# The transformed weights of the compiled F(4x4)'s inference layers, per weight token.
_transformed = STATE.kept[TRANSFORMED]


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
    return winograd_compiled.scratch_bytes(_gradient_problem(problem), batch)


def supports_data_gradient(problem) -> bool:
    """:func:`supports_gradient`, with the transformed (flipped) weights, made again on every
    call, within ``TUNING.gradient_sums_bytes``: past it they go through memory, and oneDNN
    is faster (conv_gradients.py)."""
    return (supports_gradient(problem) and 36 * round_up(problem.channels, PANEL)
            * problem.filters * 4 <= tuning.TUNING.gradient_sums_bytes)


def supports_weight_gradient(problem) -> bool:
    """:func:`supports_gradient`, with the weight gradient's sums within
    ``TUNING.gradient_sums_bytes``."""
    return (supports_gradient(problem) and 36 * problem.channels
            * round_up(problem.filters, PANEL) * 4 <= tuning.TUNING.gradient_sums_bytes)


def kept_weight_bytes(problem, m) -> int:
    """Bytes of transformed weights an inference layer keeps between calls (the compiled
    F(4x4) path; the NumPy code transforms into scratch every call)."""
    if not compiled(problem, m):
        return 0
    return prod(winograd_compiled.packed_shape(problem.channels, problem.filters)) * 4


def scratch_bytes(problem, batch, m):
    """Compiled: each kernel thread's chunk of transformed tiles and products, plus the
    transformed weights (scratch when the weights have no version). NumPy: two buffers of
    (tile positions, tiles * max(C, F)) for `batch` samples, plus the transformed weights."""
    if compiled(problem, m):
        return winograd_compiled.scratch_bytes(problem, batch)
    th, tw = output_tiles(problem.window, m)
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
    alloc = alloc or default_alloc
    if winograd_compiled.runs(x, bias, out, m, residual) and w.dtype == np.float32:
        return winograd_compiled.convolve(
            x, w if channel_last else w.transpose(0, 2, 3, 1), bias, out, window, residual,
            act_type, budget, alloc, threads, weight_version, weight_scale, channel_last,
            fused)
    if fused:
        return False
    w = plain(w, weight_scale)
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
        return output_tiles(self.window, self.spec.m)[0]

    @property
    def per_line(self):
        return output_tiles(self.window, self.spec.m)[1]


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
# Where the compiled F(4x4) transforms its weights: kept, or fused into each thread's scratch

def can_keep(problem, weight_version) -> bool:
    """Whether a compiled F(4x4) layer of `problem` with `weight_version` (not None) finds
    its transformed weights kept, or room for them within the budget
    (:func:`ember.op.nn.conv.kept.kept_budget`)."""
    u = _transformed.get(weight_version)
    if u is not None and u.shape == winograd_compiled.packed_shape(problem.channels,
                                                                   problem.filters):
        return True
    return room_for(_transformed, kept_weight_bytes(problem, 4))


def fuses(problem) -> bool:
    """Whether a compiled F(4x4) call of `problem` (its batch) can transform its weights
    fused: its kernel threads share the filters of one chunk of all its tiles, as at batch 1
    (``winograd_compiled._fused_plans``)."""
    return (compiled(problem, 4) and problem.gradient == ''
            and winograd_compiled.plan(problem, problem.batch)[-1] is not None)


def fused_scratch_bytes(problem, batch) -> int:
    return winograd_compiled.scratch_bytes(problem, batch, fused=True)
