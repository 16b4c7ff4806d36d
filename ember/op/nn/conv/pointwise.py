"""1x1 convolutions of channel-last float32 data on the compiled products, and the packed
weights those products multiply by.

A 1x1 convolution is a GEMM of the (N*H*W, C) rows by the (C, F) weights. :func:`convolve`
runs it on the compiled register blocks of the Winograd products, the weights packed in panels
of 16 filters (:func:`packed_weights`, kept per weight token in inference) and the bias,
residual and relu applied as each block of outputs is stored. :func:`weight_gradient` runs
the weight gradient's sums (dy^T x) on the rows themselves, the bias gradient summed on the
way. :func:`multiply_packed` is the same product for the patch rows of the packed GEMM
(:mod:`ember.op.nn.conv.gemm`).

>>> import numpy as np, pytest
>>> if _winograd is None:
...     pytest.skip('the 1x1 kernels run on the compiled ember._winograd, not built here')
>>> x, w = np.ones((1, 2, 2, 3), np.float32), np.ones((2, 1, 1, 3), np.float32)  # NHWC, OHWI
>>> out = np.empty((1, 2, 2, 2), np.float32)
>>> convolve(x, w, None, out, (1, 1))
>>> out[0, 0, 0]
array([3., 3.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from ember.base import prod
from ember.engine.threads import kernel_threads
from ember.op.nn.conv import tuning
from ember.op.nn.conv.common import default_alloc, finish, part_range
from ember.op.nn.conv.compiled import (
    MODULE as _winograd, PANEL, round_up, run_compiled, same_view)
from ember.op.nn.conv.state import PACKED, STATE

__all__ = ['supports', 'convolve', 'scratch_bytes', 'supports_weight_gradient',
           'weight_gradient', 'weight_gradient_scratch_bytes', 'packed_weights',
           'multiply_packed']

# The packed weights of inference layers that run convolve() (or the packed GEMM), per token.
_packed = STATE.kept[PACKED]


def supports(problem) -> bool:
    """Whether :func:`convolve` runs `problem`: a 1x1, unpadded, undilated, ungrouped 2-D
    convolution (any stride) of channel-last float32 data."""
    return (_winograd is not None and problem.dtype == 'float32' and problem.channel_last
            and not problem.gradient and problem.groups == 1 and len(problem.kernel) == 2
            and all(k == 1 for k in problem.kernel) and all(d == 1 for d in problem.dilate)
            and not any(problem.pad))


def scratch_bytes(problem, batch) -> int:
    """A strided call's rows of x, gathered; the packed weights, which a call without a
    weight token packs into scratch."""
    strided = any(s != 1 for s in problem.stride)
    rows = batch * prod(problem.size_out)
    return 4 * (strided * rows * problem.channels
                + round_up(problem.filters, PANEL) * problem.channels)


def convolve(x, w, bias, out, stride, residual=None, act_type=None, alloc=None, threads=1,
             weight_version=None, weight_scale=None):
    """out = act(x @ (w * weight_scale)^T + bias + residual) for NHWC `x` (read every
    `stride` rows and columns) and `out`, OHWI 1x1 weights `w` of any strides
    (:func:`supports`), the weights packed (kept per `weight_version`) and the bias, residual
    and relu applied as each block of outputs is stored. The kernel threads take chunks of
    rows from a shared counter."""
    alloc = alloc or default_alloc
    filters, channels = w.shape[0], w.shape[-1]
    rows = prod(out.shape[:-1])
    if rows == 0:
        return
    u = _packed.get(weight_version)
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
    t = tuning.TUNING
    chunk = t.pointwise_forward_chunk
    parts = max(1, min(threads or 1, -(-rows // chunk)))
    claim = np.zeros(1, np.int64)
    run_compiled(_winograd.pointwise, rows * channels * filters,
                 [(x, u, target, bias, residual, relu, (0, rows), chunk, t.pointwise_depth,
                   claim)] * parts)
    if target is not out:
        np.copyto(out, target)
    if act_type is not None and not relu:
        finish(out, out, act_type=act_type)


def multiply_packed(x, u, out, bias, residual, act_type):
    """out = act(x @ W^T + residual + bias) on the compiled products, one thread: x (1, 1,
    rows, K) and out (1, 1, rows, F) contiguous float32, `u` W (F, K) packed
    (:func:`packed_weights`), `residual` None, `out` or contiguous apart from it; the
    patch-row products of :func:`ember.op.nn.conv.gemm.gemm`."""
    relu = act_type == 'relu'
    t = tuning.TUNING
    _winograd.pointwise(x, u, out, bias, residual, relu, (0, x.shape[2]),
                        t.pointwise_forward_chunk, t.pointwise_depth)
    if act_type is not None and not relu:
        finish(out, out, act_type=act_type)


def _packed_panels(filters, width):
    return (-(-filters // PANEL), width, PANEL)


def packed_weights(w, weight_scale, weight_version, target=None):
    """The OHWI weights `w` (any strides) scaled per filter by `weight_scale` (None: not)
    as (F, K) = (F, kernel taps * C) packed in panels of 16 filters for the compiled products:
    the copy kept for `weight_version` (an inference layer's weight token), else packed now
    (into `target` where given) and kept for it."""
    u = _packed.get(weight_version)
    if u is None:
        u = _pack(w, weight_scale, target)
        if weight_version is not None:
            _packed.keep(weight_version, u)
    return u


def _pack(w, weight_scale, target=None):
    """(ceil(F / 16), K, 16): the panels of W^T (zeros past the last filter) of OHWI weights
    seen as (F, K), scaled per filter by `weight_scale` (or not, None)."""
    filters = w.shape[0]
    channels = prod(w.shape[1:])
    w = w.reshape(filters, channels)
    panels = -(-filters // PANEL)
    u = np.empty((panels, channels, PANEL), np.float32) if target is None else target
    whole = filters // PANEL
    by_filter = u.transpose(0, 2, 1)            # (panels, 16, C) view
    scale = None if weight_scale is None else \
        np.asarray(weight_scale, np.float32).reshape(-1, 1)

    def put(target, rows, factors):
        # scaled as it is copied: no scaled temporary of the whole weight first
        if factors is None:
            np.copyto(target, rows)
        else:
            np.multiply(rows, factors, out=target)
    put(by_filter[:whole], w[:whole * PANEL].reshape(whole, PANEL, channels),
        None if scale is None else scale[:whole * PANEL].reshape(whole, PANEL, 1))
    if whole < panels:
        by_filter[whole].fill(0)
        put(by_filter[whole, :filters - whole * PANEL], w[whole * PANEL:],
            None if scale is None else scale[whole * PANEL:])
    return u


# ----------------------------------------------------------------------------------------------
# The weight gradient

def supports_weight_gradient(problem) -> bool:
    """Whether the compiled sums compute `problem`'s weight gradient (:func:`weight_gradient`):
    a 1x1, stride-1, unpadded, ungrouped 2-D convolution of channel-last float32 data with
    channels in whole panels of 16, whose (F, C) sums fit ``TUNING.pointwise_sums_bytes``."""
    return (_winograd is not None and problem.dtype == 'float32' and problem.channel_last
            and problem.gradient == 'weight' and problem.groups == 1
            and len(problem.kernel) == 2 and all(k == 1 for k in problem.kernel)
            and all(s == 1 for s in problem.stride) and not any(problem.pad)
            and problem.channels % PANEL == 0
            and 4 * problem.filters * problem.channels <= tuning.TUNING.pointwise_sums_bytes)


def weight_gradient_scratch_bytes(problem, batch) -> int:
    """A (F, C) weight gradient and F bias sums for each kernel thread but the first."""
    return (max(1, kernel_threads()) - 1) * 4 * problem.filters * (problem.channels + 1)


def weight_gradient(dy, x, dw, db=None, alloc=None, threads=1):
    """dw (F, 1, 1, C) = dy^T x over the (N*H*W) rows of the NHWC arrays, the weight gradient
    of a 1x1 stride-1 convolution (:func:`supports_weight_gradient`), and db (F,), None or
    the bias gradient, the column sums of dy: the Winograd weight gradient's sums run on the
    rows themselves, a few dozen rows at a time so that they stay in cache, the bias sums
    taken while dy's rows are there. The kernel threads share the rows, each but the first
    summing into its own copy in scratch; the copies are added at the end."""
    alloc = alloc or default_alloc
    t = tuning.TUNING
    filters, channels = dw.shape[0], dw.shape[-1]
    rows = prod(dy.shape[:-1])
    dy, x = np.ascontiguousarray(dy), np.ascontiguousarray(x)
    parts = max(1, min(threads or 1, rows // t.pointwise_min_rows))
    target = dw if dw.flags.c_contiguous else np.empty(dw.shape, np.float32)
    sums = db if db is None or db.flags.c_contiguous else np.empty(db.shape, np.float32)
    outputs = [(target, sums)]
    if parts > 1:
        copies = alloc([((parts - 1, filters * (channels + 1)), np.float32)])[0]
        outputs += [(copy[:filters * channels], copy[filters * channels:]) for copy in copies]
    chunk = t.pointwise_chunk_rows if filters > 128 else 2 * t.pointwise_chunk_rows

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
