"""Convolution as im2col + GEMM on NumPy arrays, channel-first (NCHW) or channel-last (NHWC).

im2col copies every window into a patch matrix straight from the unpadded input (zeros for the
padding); one GEMM per group follows. A 1x1 stride-1 convolution is the GEMM alone. The output
is cut into items (one sample's output line along the first spatial dim) shared out to the
kernel threads (:func:`ember.op.nn.conv.common.run_parts`); each part lowers a few items at a
time, as many as its share of the scratch budget holds, and finishes them (bias, residual,
activation) while they are in cache.

Layouts: channel-last data gives patch rows (rows, K * C) and one GEMM by the (K * C, F)
weights straight into the output's rows. Channel-first data gives patch columns (C * K,
columns) and one GEMM per sample, (F, C * K) by the columns, into the sample's (F, columns).
Channel-last float32 patch rows of one group are multiplied on the compiled products instead
of NumPy's GEMM where the module is built (:func:`packs`), by weights packed once per weight
token, the residual, bias and relu added as the products are stored (faster than OpenBLAS's
AVX2 kernels: conv_algos.py). In 2-D the module also gathers the patch rows
(:func:`patches_of`), ``TUNING.packed_patch_bytes`` of them a part at a time so that they are
still in cache for the products. Otherwise (no module, or
not 2-D) channel-last data with very few channels (an RGB image) is copied channel-first (runs
along the image's rows, not runs of 3 channels) and multiplied transposed.

Sums of shifted GEMMs (one GEMM per tap over the flattened padded input, no patch matrix) were
measured too (benchmarks/conv_algos.py) and never won on ResNet-50's layers: NumPy's matmul
cannot accumulate, and the extra pass per tap costs what the im2col copy saves.

>>> import numpy as np
>>> from ember.op.nn._common import make_window
>>> window = make_window((3,), (1,), (1,), (1,), (5,), (5,))
>>> x, w = np.ones((1, 5, 2), np.float32), np.ones((1, 3, 2), np.float32)   # NWC, OWI
>>> out = np.empty((1, 5, 1), np.float32)
>>> gemm(x, w, None, out, window, 1, True)
>>> out[0, :, 0]
array([4., 6., 6., 6., 4.], dtype=float32)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.base import prod
from ember.op.nn.conv import pointwise, tuning
from ember.op.nn.conv.common import (
    copy_taps, default_alloc, finish, part_range, run_parts, segments)
from ember.op.nn.conv.compiled import MODULE as _winograd, compiled_products, same_view

__all__ = ['gemm', 'gemm_scratch', 'packs', 'patches_of']


def patches_of(x, rows, window, lo, hi):
    """rows = the im2col rows of NHWC float32 `x` (C-contiguous) under the 2-D `window`, one
    per output pixel of the output lines [lo, hi) (line = sample * out_h + output row), each
    the kernel's taps in (y, x) order, C values a tap (the compiled ``patches``)."""
    _winograd.patches(x, rows, window.size_out, window.pad_before, window.stride,
                      window.kernel, window.dilate, (lo, hi))


def gemm_scratch(problem, batch, aliased=True):
    """Scratch bytes of `gemm` for `batch` samples: the patches (none for 1x1 stride 1) and
    the output aside when it may overlap the residual, or with packed weights those."""
    window = problem.window
    cols = 0 if window.is_pointwise else problem.channels * prod(window.kernel)
    if packs(problem):
        return batch * prod(window.size_out) * cols * problem.dtype_size
    aside = problem.filters if aliased else 0
    return batch * prod(window.size_out) * (cols + aside) * problem.dtype_size


def packs(problem) -> bool:
    """Whether `gemm` multiplies `problem`'s patch rows by weights packed for the compiled
    products (:func:`ember.op.nn.conv.pointwise.packed_weights`) rather than with NumPy's
    GEMM: channel-last float32 data of one group with patches (not 1x1 stride 1), where the
    compiled module is built; with fewer than ``TUNING.narrow_channels`` channels only in 2-D,
    where the module also gathers the patches (:func:`patches_of`). Such a call then takes the
    weight as it comes (any strides, scale apart) and the packed copy replaces the plain
    one."""
    return (compiled_products() and problem.channel_last
            and problem.dtype == 'float32' and problem.groups == 1 and not problem.gradient
            and (problem.channels >= tuning.TUNING.narrow_channels or len(problem.kernel) == 2)
            and not problem.window.is_pointwise)


def gemm(x, w, bias, out, window, groups, channel_last, residual=None, act_type=None,
         budget=None, alloc=default_alloc, threads=1, packed=None):
    """out = act(conv(x, w) + bias + residual) by im2col and GEMM; x, w, out NCHW/OIHW or
    (channel_last) NHWC/OHWI, any number of spatial dims, on `threads` kernel threads.
    `packed`, for a problem that :func:`packs`, is the weight as packed for the compiled
    products, which then multiply the patch rows (`w` is not read)."""
    if not out.flags.c_contiguous:
        whole = np.empty(out.shape, out.dtype)
        gemm(x, w, bias, whole, window, groups, channel_last, None, None, budget, alloc,
             threads, packed)
        finish(out, whole, None, residual, act_type)
        return
    if packed is not None and residual is not None:
        # the compiled products add the residual as they store: in place, or from elsewhere
        if same_view(residual, out):
            residual = out
        elif np.may_share_memory(out, residual) or not residual.flags.c_contiguous:
            residual = np.array(residual, np.float32)
    lowering = _lowering(x, w, out, window, groups, channel_last, packed)
    call = _Call(lowering, bias, residual, act_type, packed is None and residual is not None
                 and np.may_share_memory(out, residual))
    items = x.shape[0] * window.size_out[0]
    parts = max(1, min(threads or 1, items))
    if parts > 1 and packed is None and _split_filters(lowering, items, parts):
        _by_filters(call, items, parts, budget, alloc)
    else:
        _by_items(call, items, parts, budget, alloc)


@dataclass(frozen=True)
class _Call:
    lowering: object
    bias: object
    residual: object
    act_type: object
    aside: bool          # the residual is the output's memory: multiply into scratch first

    def specs(self, parts, rows):
        """Scratch of `parts` parts of `rows` output rows each (one shared part: parts=1)."""
        low = self.lowering
        specs = [((parts,) + low.patch_shape(rows), low.x.dtype)] if low.patch_width else []
        return specs + ([((parts,) + low.result_shape(rows), low.out.dtype)] if self.aside
                        else [])

    def step(self, parts, items, budget):
        """Items per chunk: what a part's share of `budget` holds; with packed weights at
        most ``TUNING.packed_patch_bytes`` of patch rows a part."""
        low = self.lowering
        row_bytes = (low.patch_width + (low.filters if self.aside else 0)) * low.x.dtype.itemsize
        if low.packed is not None:
            most = tuning.TUNING.packed_patch_bytes * parts
            budget = min(budget or most, most)
        if budget is None:
            return items
        return max(1, budget // parts // max(1, row_bytes * low.per_item))


def _split_filters(lowering, items, parts):
    """Few output rows and many filters (late layers at small batch): the parts share the
    filters of one GEMM rather than its rows, each of which would be a sliver."""
    rows = items * lowering.per_item
    return (lowering.groups == 1 and rows < tuning.TUNING.few_rows * parts
            and lowering.filters >= 64 * parts)


def _by_items(call, items, parts, budget, alloc):
    """Each part lowers and multiplies its own items, a chunk at a time."""
    low = call.lowering
    step = min(call.step(parts, items, budget), -(-items // parts))
    buffers = alloc(call.specs(parts, step * low.per_item))

    def part(index):
        patches = buffers[0][index] if low.patch_width else None
        aside = buffers[-1][index] if call.aside else None
        start, stop = part_range(index, parts, items)
        for lo in range(start, stop, step):
            hi = min(stop, lo + step)
            if patches is not None:
                low.patch(lo, lo, hi, patches)
            low.multiply(lo, hi, patches, aside, call, slice(None))
    run_parts(parts, low.out.size, part)


def _by_filters(call, items, parts, budget, alloc):
    """Per chunk of items, the parts share the im2col copy by items, then the GEMM and its
    epilogue by filters."""
    low = call.lowering
    step = call.step(1, items, budget)
    buffers = alloc(call.specs(1, min(step, items) * low.per_item))
    patches = buffers[0][0] if low.patch_width else None
    aside = buffers[-1][0] if call.aside else None
    for lo in range(0, items, step):
        hi = min(items, lo + step)
        if patches is not None:
            run_parts(parts, (hi - lo) * low.per_item * low.patch_width,
                      lambda i, lo=lo, hi=hi: low.patch(lo, *_share(i, parts, lo, hi), patches))
        run_parts(parts, low.out.size, lambda i, lo=lo, hi=hi: low.multiply(
            lo, hi, patches, aside, call, slice(*part_range(i, parts, low.filters))))


def _share(index, parts, lo, hi):
    start, stop = part_range(index, parts, hi - lo)
    return lo + start, lo + stop


def _lowering(x, w, out, window, groups, channel_last, packed=None):
    if packed is not None:
        return _ChannelLast(x, w, out, window, groups, packed)
    if not channel_last:
        return _ChannelFirst(x, w, out, window, groups)
    if groups == 1 and x.shape[-1] < tuning.TUNING.narrow_channels and not window.is_pointwise:
        return _NarrowChannelLast(x, w, out, window, groups)
    return _ChannelLast(x, w, out, window, groups)


class _Lowering:
    """Patches and GEMMs of one layout. Items ``[start, stop)`` of a chunk that begins at item
    `first` sit at rows (columns) ``(start - first) * per_item`` on in its patches."""

    def __init__(self, x, w, out, window, groups, packed=None):
        self.x, self.out, self.window, self.groups = x, out, window, groups
        self.nd = len(window.kernel)
        self.per_item = prod(window.size_out[1:])
        self.lines = window.size_out[0]
        self.channels = x.shape[self.channel_axis]
        self.filters = w.shape[0]
        self.taps = prod(window.kernel)
        self.patch_width = 0 if window.is_pointwise else self.channels * self.taps
        self.packed = packed
        self.weight = self.prepare(w) if packed is None else None


class _ChannelLast(_Lowering):
    channel_axis = -1

    def prepare(self, w):            # (F, *k, Cg) -> (G, K * Cg, Fg)
        fg = self.filters // self.groups
        return w.reshape(self.groups, fg, -1).transpose(0, 2, 1)

    def patch_shape(self, rows):
        return (self.groups, rows, self.patch_width // self.groups)

    def result_shape(self, rows):
        return (rows, self.filters)

    def patch(self, first, start, stop, patches):
        if self.packed is not None and self.nd == 2 and self.x.flags.c_contiguous:
            # the compiled gather: runs of a kernel row's pixels, not NumPy's copy per tap
            # (conv_algos.py, resnet50_v1's first layer)
            row = (start - first) * self.per_item
            patches_of(self.x, patches[0, row:row + (stop - start) * self.per_item],
                       self.window, start, stop)
            return
        cg, window = self.channels // self.groups, self.window
        shape = window.size_out[1:] + window.kernel + (cg,)
        axes, taps = tuple(range(self.nd)), tuple(range(self.nd, 2 * self.nd))
        for sample, lo, hi, offset in segments(start, stop, self.lines):
            row = (start - first + offset) * self.per_item
            block = slice(row, row + (hi - lo) * self.per_item)
            for g in range(self.groups):
                dst = patches[g, block].reshape((hi - lo,) + shape)
                copy_taps(self.x[sample][..., g * cg:(g + 1) * cg], dst, window, lo, axes, taps)

    def multiply(self, start, stop, patches, aside, call, filters):
        rows = slice(start * self.per_item, stop * self.per_item)
        count = rows.stop - rows.start
        if self.packed is not None:
            self._multiply_packed(rows, patches[0, :count], call)
            return
        if patches is None:
            cols = self.x.reshape(-1, self.groups, self.channels // self.groups)[rows]
            cols = cols.transpose(1, 0, 2)
        else:
            cols = patches[:, :count]
        out_rows = self.out.reshape(-1, self.filters)[rows, filters]
        target = out_rows if aside is None else aside[:count, filters]
        grouped = target.reshape(count, self.groups, -1).transpose(1, 0, 2)
        np.matmul(cols, self.weight[:, :, filters], out=grouped)
        _finish_rows(out_rows, target, call, rows, filters)

    def _multiply_packed(self, rows, cols, call):
        """The patch rows by the packed weights on the compiled products, with the residual
        (the output itself, or apart from it), bias and relu added as they store."""
        count, width = cols.shape
        out_rows = self.out.reshape(-1, self.filters)[rows]
        res = call.residual
        if res is not None:
            res = res.reshape(-1, self.filters)[rows].reshape(1, 1, count, self.filters)
        pointwise.multiply_packed(cols.reshape(1, 1, count, width), self.packed,
                                  out_rows.reshape(1, 1, count, self.filters), call.bias,
                                  res, call.act_type)


def _finish_rows(out_rows, target, call, rows, filters):
    """The epilogue of channel-last output rows (and a range of their filters)."""
    res = call.residual
    if res is not None:
        res = res.reshape(-1, res.shape[-1])[rows, filters]
    bias = None if call.bias is None else call.bias[filters]
    finish(out_rows, target, bias, res, call.act_type)


class _NarrowChannelLast(_Lowering):
    """Channel-last data with few channels, one group: channel-first patch columns."""
    channel_axis = -1

    def prepare(self, w):            # (F, *k, C) -> (C * K, F)
        return np.ascontiguousarray(np.moveaxis(w, -1, 1)).reshape(self.filters, -1).T

    def patch_shape(self, rows):
        return (self.patch_width, rows)

    def result_shape(self, rows):
        return (rows, self.filters)

    def patch(self, first, start, stop, patches):
        shape = (self.channels,) + self.window.kernel
        axes = tuple(range(1, self.nd + 1))
        for sample, lo, hi, offset in segments(start, stop, self.lines):
            column = (start - first + offset) * self.per_item
            block = patches[:, column:column + (hi - lo) * self.per_item]
            dst = block.reshape(shape + (hi - lo,) + self.window.size_out[1:])
            copy_taps(np.moveaxis(self.x[sample], -1, 0), dst, self.window, lo, axes, axes)

    def multiply(self, start, stop, patches, aside, call, filters):
        rows = slice(start * self.per_item, stop * self.per_item)
        count = rows.stop - rows.start
        out_rows = self.out.reshape(-1, self.filters)[rows, filters]
        target = out_rows if aside is None else aside[:count, filters]
        np.matmul(patches[:, :count].T, self.weight[:, filters], out=target)
        _finish_rows(out_rows, target, call, rows, filters)


class _ChannelFirst(_Lowering):
    channel_axis = 1

    def prepare(self, w):            # (F, Cg, *k) -> (G, Fg, Cg * K)
        return w.reshape(self.groups, self.filters // self.groups, -1)

    def patch_shape(self, rows):
        return (self.patch_width, rows)

    def result_shape(self, rows):
        return (self.filters, rows)

    def patch(self, first, start, stop, patches):
        axes = tuple(range(1, self.nd + 1))
        for sample, lo, hi, offset in segments(start, stop, self.lines):
            column = (start - first + offset) * self.per_item
            block = patches[:, column:column + (hi - lo) * self.per_item]
            dst = block.reshape((self.channels,) + self.window.kernel + (hi - lo,)
                                + self.window.size_out[1:])
            copy_taps(self.x[sample], dst, self.window, lo, axes, axes)

    def multiply(self, start, stop, patches, aside, call, filters):
        bias = None if call.bias is None else call.bias[filters, None]
        weight = self.weight[:, filters] if self.groups == 1 else self.weight
        for sample, lo, hi, offset in segments(start, stop, self.lines):
            columns = slice(lo * self.per_item, hi * self.per_item)
            count = columns.stop - columns.start
            block = slice(offset * self.per_item, offset * self.per_item + count)
            if patches is None:
                cols = self.x[sample].reshape(self.channels, -1)[:, columns]
            else:
                cols = patches[:, block]
            out_cols = self.out[sample].reshape(self.filters, -1)[filters, columns]
            target = out_cols if aside is None else aside[filters, block]
            np.matmul(weight, cols.reshape(self.groups, -1, count),
                      out=target.reshape(self.groups, -1, count))
            res = call.residual
            if res is not None:
                res = res[sample].reshape(self.filters, -1)[filters, columns]
            finish(out_cols, target, bias, res, call.act_type)
