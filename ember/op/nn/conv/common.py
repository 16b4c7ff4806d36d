"""Pieces shared by the NumPy convolution algorithms: window copies without a padded copy of
the input, the split of a convolution into independent parts run on the kernel threads, and the
epilogue that adds bias and residual and applies the activation while the output is hot.

The algorithms do their own threading: the output is cut into `parts` ranges of *items* (an
item is one sample's output line along the first spatial dim, or one line of tiles), each part
copies, multiplies and finishes its items on one kernel thread with single-threaded GEMMs. Two
BLAS threads per GEMM instead meet at a barrier after every GEMM call, and on a shared machine
each barrier waits for a descheduled thread (conv_algos.py).

>>> import numpy as np
>>> x = np.arange(4.0).reshape(1, 4)
>>> dst = np.empty((1, 3))
>>> copy_windows(x, dst, axes=(1,), offsets=(-1,), steps=(2,))   # x[-1], x[1], x[3]
>>> dst
array([[0., 1., 3.]])
>>> list(segments(3, 7, 4))          # items 3..6 of samples with 4 items each
[(0, 3, 4, 0), (1, 0, 3, 1)]
"""
from __future__ import annotations

import contextlib
import threading

import numpy as np

from ember import engine
from ember.op.nn.activation import ACTIVATIONS
from ember.op.nn.conv import tuning

__all__ = ['copy_windows', 'copy_taps', 'segments', 'run_parts', 'part_range', 'finish',
           'single_threaded_blas', 'output_tiles', 'plain', 'default_alloc']


def copy_windows(src, dst, axes, offsets, steps):
    """``dst[..., i, ...] = src[..., offset + step * i, ...]`` along each of `axes`, and zero
    where that index falls outside `src` (the padding): one strided copy, no padded copy."""
    src_index, dst_index = [slice(None)] * src.ndim, [slice(None)] * dst.ndim
    borders = []
    for axis, offset, step in zip(axes, offsets, steps):
        count, size = dst.shape[axis], src.shape[axis]
        lo = min(count, -(offset // step) if offset < 0 else 0)
        hi = max(lo, min(count, (size - 1 - offset) // step + 1))
        if hi <= lo:
            dst.fill(0)             # the whole tap lies in the padding
            return
        src_index[axis] = slice(offset + step * lo, offset + step * (hi - 1) + 1, step)
        dst_index[axis] = slice(lo, hi)
        borders += [(axis, slice(0, lo)), (axis, slice(hi, count))]
    for axis, part in borders:
        if part.stop > part.start:
            index = [slice(None)] * dst.ndim
            index[axis] = part
            dst[tuple(index)] = 0
    dst[tuple(dst_index)] = src[tuple(src_index)]


def copy_taps(src, dst, window, first, axes, tap_axes):
    """im2col of one sample: for every kernel tap, the `dst` slice at that tap (on `tap_axes`)
    gets the input each output position reads, output positions on `axes` of `src` and of the
    slice, the first spatial one starting at output index `first`."""
    for tap in np.ndindex(*window.kernel):
        index = [slice(None)] * dst.ndim
        for axis, k in zip(tap_axes, tap):
            index[axis] = k
        offsets = [k * d - p for k, d, p in zip(tap, window.dilate, window.pad_before)]
        offsets[0] += window.stride[0] * first
        copy_windows(src, dst[tuple(index)], axes, offsets, window.stride)


def segments(start, stop, per_sample):
    """(sample, first, last, offset) for the items ``[start, stop)`` of samples that have
    `per_sample` items each: the items of one sample, and their offset from `start`."""
    item = start
    while item < stop:
        sample, first = divmod(item, per_sample)
        last = min(per_sample, first + stop - item)
        yield sample, first, last, item - start
        item += last - first


def part_range(part, parts, items):
    """The items ``[start, stop)`` of part `part` of `parts`."""
    return items * part // parts, items * (part + 1) // parts


def run_parts(parts, elements, fn, blas=True):
    """``fn(part)`` for every part in ``range(parts)``, concurrently on the kernel threads when
    the `elements` of work reach ``MXNET_CPU_PARALLEL_SIZE``. With `blas` (parts that call
    NumPy's GEMMs) BLAS runs one thread meanwhile; compiled kernels that call no BLAS pass
    False and skip setting its thread count, which costs tens of microseconds."""
    if parts <= 1:
        fn(0)
        return

    def chunk(start, stop):
        first, last = -(-start // per_part), -(-stop // per_part)
        for part in range(first, last):
            fn(part)
    per_part = max(1, elements // parts)
    if not blas:
        engine.parallel_for(parts * per_part, chunk)
        return
    with single_threaded_blas():
        engine.parallel_for(parts * per_part, chunk)


_controller = None
_limit_lock = threading.Lock()
_limit_users = 0
_limiter = None


@contextlib.contextmanager
def single_threaded_blas():
    """BLAS on one thread inside the block. Nested and concurrent blocks share one limit, set
    by the first to enter and lifted by the last to leave (the thread count is global)."""
    global _limit_users, _limiter
    with _limit_lock:
        if _limit_users == 0:
            controller = _blas_controller()
            if any(lib['num_threads'] > 1 for lib in controller.info()):
                _release_control(controller)
                _limiter = controller.limit(limits=1)
        _limit_users += 1
    try:
        yield
    finally:
        with _limit_lock:
            _limit_users -= 1
            if _limit_users == 0 and _limiter is not None:
                _release_control(_controller)
                _limiter.restore_original_limits()
                _release_control(_controller)
                _limiter = None


def _blas_controller():
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController
        _controller = ThreadpoolController().select(user_api='blas')
    return _controller


def _release_control(controller):
    """threadpoolctl lets only the first thread that set a pthreads OpenBLAS's thread count
    set it again (others are silently ignored); this runs on any kernel or engine thread."""
    for lib in controller.lib_controllers:
        clear = getattr(type(lib), 'clear_controlling_thread', None)
        if clear is not None:
            clear(force=True)


def finish(out, conv, bias=None, residual=None, act_type=None):
    """``out = act((conv + bias) + residual)`` in blocks along the first axis. `conv` is `out`
    itself or scratch that this may overwrite; `residual` may share `out`'s memory element
    for element; `bias` broadcasts already."""
    if conv is out and bias is None and residual is None and act_type is None:
        return
    if residual is not None and residual.shape != out.shape:
        residual = np.broadcast_to(residual, out.shape)
    per_row = bias is not None and bias.ndim == out.ndim and bias.shape[0] == out.shape[0] > 1
    step = max(1, tuning.TUNING.epilogue_block // max(1, out[:1].size))
    for lo in range(0, out.shape[0], step):
        part = slice(lo, lo + step)
        _finish_block(out[part], conv[part], bias[part] if per_row else bias,
                      None if residual is None else residual[part], act_type)


def _finish_block(out, conv, bias, residual, act_type):
    # (conv + bias) + residual, the unfused graph's order; with a residual, the bias goes into
    # `conv` (scratch, or out itself) since `out` may be the residual's memory
    if bias is not None:
        np.add(conv, bias, out=conv if residual is not None else out)
        conv = conv if residual is not None else out
    if residual is not None:
        np.add(conv, residual, out=out)
        conv = out
    if act_type == 'relu':
        np.maximum(conv, 0, out=out)
    elif act_type is not None:
        out[...] = ACTIVATIONS[act_type][0](np, conv)
    elif conv is not out:
        out[...] = conv


def output_tiles(window, m) -> tuple:
    """Output tiles of m along each spatial axis of `window` (the last one partly past the
    edge where m does not divide the output)."""
    return tuple(-(-o // m) for o in window.size_out)


def plain(w, scale):
    """`w` scaled per output channel (when `scale` is given) and contiguous."""
    if scale is not None:
        w = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    return np.ascontiguousarray(w)


def default_alloc(specs):
    """Scratch as new NumPy arrays: ``[np.empty(shape, dtype) for shape, dtype in specs]``."""
    return [np.empty(shape, dtype) for shape, dtype in specs]
