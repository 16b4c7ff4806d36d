"""The 1-D Winograd F(m, r) of convolutions whose kernel is 1 x r or r x 1 (inceptionv3's 1x7,
7x1, 1x3 and 3x1 layers), on the compiled products.

Along the kernel's axis each tile of m outputs reads m + r - 1 inputs: m + r - 1 GEMMs of
(tiles, C) by (C, F) per m outputs instead of m r multiplies (m 4, or 6 on long lines:
:func:`outputs`), the transforms from Toom-Cook on small points (:func:`transforms`). Its
transformed weights are kept per weight token within the shared budget
(:mod:`ember.op.nn.conv.kept`), and a call that can run again as it is returns a
:class:`~ember.op.nn.conv.compiled.Prepared`.

>>> import numpy as np, pytest
>>> if _winograd is None:
...     pytest.skip('the 1-D Winograd runs on the compiled ember._winograd, not built here')
>>> x, w = np.ones((1, 1, 6, 1), np.float32), np.ones((1, 1, 3, 1), np.float32)
>>> out = np.empty((1, 1, 6, 1), np.float32)
>>> convolve(x, w, None, out, axis=2, pad=1)
>>> print(out.ravel().round(4))      # float32 rounding in the transforms
[2. 3. 3. 3. 3. 2.]
"""
from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np

from ember.base import prod
from ember.engine.threads import kernel_threads
from ember.op.nn.conv import tuning
from ember.op.nn.conv.common import default_alloc, finish, part_range
from ember.op.nn.conv.compiled import (
    MODULE as _winograd, PANEL, Prepared, round_up, run_compiled, same_view)
from ember.op.nn.conv.kept import room_for
from ember.op.nn.conv.state import LINE, STATE

__all__ = ['POINTS', 'TAPS', 'transforms', 'outputs', 'supports', 'convolve', 'scratch_bytes',
           'kept_bytes']

# The transformed, packed weights of inference layers that run convolve(), per weight token.
_store = STATE.kept[LINE]

# The interpolation points (besides the point at infinity) of F(m, r) per (m, r): the
# smallest in magnitude, then halves and their inverses, which keep the float32 error near
# direct convolution's (tests/test_winograd_line.py checks it; figures in
# benchmarks/README.md).
_HALF, _THREE_HALVES, _TWO_THIRDS = Fraction(1, 2), Fraction(3, 2), Fraction(2, 3)
POINTS = {
    (4, 3): (0, 1, -1, 2, -2),
    (4, 5): (0, 1, -1, 2, -2, _HALF, -_HALF),
    (4, 7): (0, 1, -1, 2, -2, _HALF, -_HALF, _THREE_HALVES, -_THREE_HALVES),
    (6, 3): (0, 1, -1, 2, -2, _HALF, -_HALF),
    (6, 5): (0, 1, -1, 2, -2, _HALF, -_HALF, _THREE_HALVES, -_THREE_HALVES),
    (6, 7): (0, 1, -1, 2, -2, _HALF, -_HALF, _THREE_HALVES, -_THREE_HALVES, _TWO_THIRDS,
             -_TWO_THIRDS),
}
TAPS = (3, 5, 7)


def outputs(r, length, lines) -> int:
    """m of the F(m, r) that :func:`convolve` runs for `lines` lines of `length` outputs: 6
    where that needs fewer products and has ``TUNING.line_wide_min_tiles`` tiles, else 4.

    >>> outputs(7, 17, 8 * 17), outputs(7, 17, 17), outputs(3, 8, 8 * 8)
    (6, 4, 4)
    """
    def products(m):
        return (m + r - 1) * -(-length // m)
    if products(6) < products(4) \
            and lines * -(-length // 6) >= tuning.TUNING.line_wide_min_tiles:
        return 6
    return 4


@functools.lru_cache(maxsize=None)
def transforms(r, m=4):
    """(m, BT, G, AT) of Winograd F(m, r) by Toom-Cook on ``POINTS[m, r]``, in float64
    (read-only): the correlation of r taps g with m + r - 1 inputs d is
    ``AT @ ((G @ g) * (BT @ d))``. With V the Vandermonde matrix of the points and infinity,
    the transposed linear convolution: AT = Vm^T, G = Vr, BT = inv(V)^T, worked out exactly.

    >>> m, bt, g, at = transforms(3)
    >>> d, taps = np.arange(6.0), np.array([1.0, 2.0, 3.0])
    >>> at @ ((g @ taps) * (bt @ d))
    array([ 8., 14., 20., 26.])
    """
    points = POINTS[m, r]
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
    """The inverse of the square matrix `rows` (Fractions), exactly: each row is scaled to
    integers, then fraction-free Gauss-Jordan elimination (Bareiss) works on Python integers,
    every division exact, and only the result becomes Fractions: 1.0 ms for F(6, 7)'s 12 x 12
    against 6.6 ms eliminating in Fractions (on the first call of a process that runs it).

    >>> _exact_inverse([[Fraction(2), Fraction(1)], [Fraction(1, 2), Fraction(1)]])
    [[Fraction(2, 3), Fraction(-2, 3)], [Fraction(-1, 3), Fraction(4, 3)]]
    """
    n = len(rows)
    # row i times scale[i] is integral: solve (scale * M) X = diag(scale), so X = inverse(M)
    scales = [math.lcm(*(Fraction(value).denominator for value in row)) for row in rows]
    work = [[int(value * scale) for value in row] + [scale if i == j else 0 for j in range(n)]
            for i, (row, scale) in enumerate(zip(rows, scales))]
    previous = 1
    for col in range(n):
        pivot_row = next((i for i in range(col, n) if work[i][col] != 0), None)
        if pivot_row is None:
            raise ZeroDivisionError('the matrix is singular')
        work[col], work[pivot_row] = work[pivot_row], work[col]
        lead = work[col]
        pivot = lead[col]
        for i in range(n):
            factor = work[i][col]
            if i != col:
                # every entry is a minor of the scaled matrix: the division leaves no remainder
                work[i] = [(pivot * value - factor * top) // previous
                           for value, top in zip(work[i], lead)]
        previous = pivot
    # the left block is now previous * I: the right one is previous * inverse(M)
    return [[Fraction(value, previous) for value in row[n:]] for row in work]


def _axis(problem):
    """(axis, taps) of a 1 x r (axis 2) or r x 1 (axis 1) kernel, else (None, None)."""
    kernel = tuple(problem.kernel)
    if len(kernel) != 2 or 1 not in kernel or kernel == (1, 1):
        return None, None
    axis = 1 if kernel[1] == 1 else 2
    return axis, kernel[axis - 1]


def supports(problem) -> bool:
    """Whether :func:`convolve` runs `problem`: a forward 2-D convolution of channel-last
    float32 data, one group, stride 1, undilated, with a 1 x r or r x 1 kernel (r 3, 5 or 7)
    and no padding on the axis of extent 1, the compiled module built."""
    axis, taps = _axis(problem)
    return (_winograd is not None and axis is not None and taps in TAPS
            and not problem.gradient and problem.channel_last and problem.dtype == 'float32'
            and problem.groups == 1 and tuple(problem.stride) == (1, 1)
            and tuple(problem.dilate) == (1, 1) and problem.pad[2 - axis] == 0)


def _packed_shape(r, m, channels, filters):
    """U's shape: the a = m + r - 1 positions' panels of 16 filters for each channel."""
    return (m + r - 1, -(-filters // PANEL), channels, PANEL)


def _outputs_of(shape, axis, r):
    """m of a call with an NHWC output of `shape` (or a problem's batch and output size)."""
    batch, size = shape[0], shape[1:3]
    return outputs(r, size[axis - 1], batch * size[2 - axis])


def kept_bytes(problem) -> int:
    """Bytes of transformed, packed weights an inference layer keeps (:func:`convolve`)."""
    if not supports(problem):
        return 0
    axis, r = _axis(problem)
    m = _outputs_of((problem.batch,) + tuple(problem.size_out), axis, r)
    return prod(_packed_shape(r, m, problem.channels, problem.filters)) * 4


def scratch_bytes(problem, batch) -> int:
    """Each kernel thread's chunk of transformed tiles and products, plus the transformed
    weights (scratch when the weights have no version)."""
    axis, r = _axis(problem)
    m = _outputs_of((batch,) + tuple(problem.size_out), axis, r)
    points, width = m + r - 1, round_up(problem.filters, PANEL)
    tiles = batch * _tiles(problem.size_out, axis, m)
    chunk = max(1, min(tiles, _chunk(points, problem.channels, width)))
    parts = max(1, min(kernel_threads() or 1, -(-tiles // chunk)))
    return 4 * (parts * points * chunk * (problem.channels + width)
                + prod(_packed_shape(r, m, problem.channels, problem.filters)))


def _tiles(size_out, axis, m):
    """Tiles per sample: lines across times tiles of m along each."""
    along, across = size_out[axis - 1], size_out[2 - axis]
    return across * -(-along // m)


def _chunk(points, channels, width):
    """Tiles per chunk: V and M of a chunk within ``TUNING.line_chunk_bytes``, in whole
    register blocks of 12 tiles where it holds that many."""
    chunk = max(1, tuning.TUNING.line_chunk_bytes // (4 * points * (channels + width)))
    return chunk // 12 * 12 or chunk


def _weights(w, axis, weight_scale, m, target=None, threads=1):
    """U = G g of F(m, r) of OHWI weights `w` (any strides; scaled per filter by
    `weight_scale`, or not where None), packed as (a, ceil(F / 16), C, 16) with zeros past
    the last filter, in `target` where given. Summed in float64, rounded once; the panels
    split over `threads` (compiled ``line_weights``: NumPy's float64 GEMM, scaling and
    packing of it made inceptionv3's 22 line layers cost 45 ms on a warm start's first
    call)."""
    filters, channels = w.shape[0], w.shape[-1]
    taps = w if axis == 1 else w.transpose(0, 2, 1, 3)                # (F, r, 1, C)
    r = taps.shape[1]
    g = transforms(r, m)[2]
    shape = _packed_shape(r, m, channels, filters)
    u = np.empty(shape, np.float32) if target is None else target
    scale = None if weight_scale is None else \
        np.ascontiguousarray(weight_scale, np.float32).reshape(-1)
    parts = min(max(1, threads or 1), shape[1])
    run_compiled(_winograd.line_weights, u.size * r, [
        (taps, g, u, part_range(i, parts, shape[1]), scale) for i in range(parts)])
    return u


def convolve(x, w, bias, out, axis, pad, residual=None, act_type=None, alloc=None, threads=1,
             weight_version=None, weight_scale=None):
    """out = act(conv(x, w * weight_scale) + bias + residual) for NHWC `x` and `out` and OHWI
    weights `w` (any strides) of a 1 x r (`axis` 2) or r x 1 (`axis` 1) kernel, stride 1, by
    Winograd F(m, r) (:func:`supports`; m 4 or 6, :func:`outputs`): each tile of m
    outputs along the axis reads m + r - 1 inputs from `pad` zeros before the first (out's
    length along the axis sets the padding after). m + r - 1 GEMMs of (tiles, C) by (C, F) on
    the compiled register blocks, 2 (F(4, 3)) to 3.5 (F(6, 7)) times fewer multiplies than
    the direct convolution where the lines are whole tiles. The transformed
    weights are kept per `weight_version` (a weight token) as F(4x4)'s are; the kernel
    threads take chunks of tiles from a shared counter. Returns a :class:`Prepared` of the
    call where it can run again as it is (its transformed weights kept), else None."""
    alloc = alloc or default_alloc
    if out.size == 0:
        return
    filters, channels = w.shape[0], w.shape[-1]
    r = w.shape[axis]
    m = _outputs_of(out.shape, axis, r)
    shape = _packed_shape(r, m, channels, filters)
    u = _store.get(weight_version)
    if u is not None and u.shape != shape:
        u = None
    if u is None and weight_version is not None and not room_for(_store, prod(shape) * 4):
        weight_version = None       # past the budget: transformed into scratch every call
    tiles = out.shape[0] * _tiles(out.shape[1:3], axis, m)
    width = round_up(filters, PANEL)
    chunk = min(tiles, _chunk(shape[0], channels, width))
    parts = max(1, min(threads or 1, -(-tiles // chunk)))
    in_scratch = u is None and weight_version is None
    specs = [((parts, shape[0] * chunk * channels), np.float32),
             ((parts, shape[0] * chunk * width), np.float32)]
    v, products, *scratch = alloc(specs + [(shape, np.float32)] * in_scratch)
    if u is None:
        u = _weights(w, axis, weight_scale, m, scratch[0] if scratch else None, threads)
        if weight_version is not None:
            _store.keep(weight_version, u)
    given = (x, residual)
    x = np.ascontiguousarray(x, np.float32)
    target = out if out.flags.c_contiguous else np.empty(out.shape, np.float32)
    residual = _residual(residual, target)
    relu = act_type == 'relu'
    bt32, at32 = _matrices(r, m)

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
        return Prepared(u, specs, alloc, convolve, _store)
    return None


@functools.lru_cache(maxsize=None)
def _matrices(r, m):
    """BT and AT of F(m, r) as the compiled module takes them: float32, contiguous."""
    _, bt, _, at = transforms(r, m)
    matrices = tuple(np.ascontiguousarray(a, np.float32) for a in (bt, at))
    for matrix in matrices:
        matrix.flags.writeable = False
    return matrices


def _residual(residual, target):
    """The residual as convolve() reads it: `target` itself where it is the same memory (summed
    in place), a copy where it overlaps otherwise, else contiguous."""
    if residual is None:
        return None
    if same_view(residual, target):
        return target
    if np.may_share_memory(residual, target):
        return residual.copy()
    return np.ascontiguousarray(residual, np.float32)
