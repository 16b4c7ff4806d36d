"""Winograd convolution F(m x m, 3 x 3) for stride-1, undilated 3x3 kernels, m = 2 or 4.

Each m x m output tile comes from an (m+2) x (m+2) input tile: ``Y = A^T [(G g G^T) . (B^T d
B)] A``. The products over input channels become (m+2)^2 GEMMs of (tiles, C) by (C, F): 36
instead of 9 * 16 multiplies per 16 outputs for m = 4 (4x fewer), 16 instead of 9 * 4 for
m = 2 (2.25x). All three transforms are GEMMs too, with the Kronecker product of the 1-D
matrices on tile-position-major data ``(positions, tiles * channels)``: the gather copies
each tile position straight from the unpadded input (zeros in the padding), and the last step
scatters each output position back with bias, residual and activation applied
(:func:`ember.op.nn.conv_common.finish`). Output tiles past the edge are computed and dropped.

``threads`` (``MXNET_CPU_NNPACK_NTHREADS``) kernel threads share the lines of tiles, each
running the whole chain (gather, transforms, products, scatter) on its lines with
single-threaded GEMMs, as NNPACK's threads do.

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
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ember.op.nn.conv_common import (
    copy_windows, finish, part_range, run_parts, segments, single_threaded_blas)

__all__ = ['TILES', 'transforms', 'supports', 'winograd', 'scratch_bytes']

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


def scratch_bytes(problem, batch, m):
    """Two buffers of (tile positions, tiles * max(C, F)) for `batch` samples, plus the
    transformed weights."""
    th, tw = _tiles(problem.window, m)
    a2, width = (m + 2) ** 2, max(problem.channels, problem.filters)
    return (2 * a2 * batch * th * tw * width + a2 * problem.channels * problem.filters) \
        * problem.dtype_size


def winograd(x, w, bias, out, window, channel_last, m=4, residual=None, act_type=None,
             budget=None, alloc=None, threads=1):
    """out = act(conv(x, w) + bias + residual); x, w, out NCHW/OIHW or (channel_last)
    NHWC/OHWI; `threads` kernel threads share the lines of tiles."""
    alloc = alloc or (lambda specs: [np.empty(s, d) for s, d in specs])
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
