"""oneDNN kernels, forward and backward, for the hot neural-network operators on float32 CPU
arrays: convolution (and its data and weight gradients), FullyConnected, pooling, BatchNorm,
activations, softmax, LRN, RNN and transposing copies.

Each function takes the operator's parsed attributes and its NumPy arrays (plain NCHW or NHWC
buffers, any positive strides), runs the computation through oneDNN and returns True (or a
prepared call to run again), or returns False without touching the outputs when it cannot
handle the case, so that the caller falls back to its own kernel. The provider knows nothing
of the operators that call it: what it shares with them (a pooling window, an RNN's packed
parameters) comes from :mod:`ember.op.nn._common` and :mod:`ember.op.nn.rnn_layout`. oneDNN
runs when ``MXNET_MKLDNN_ENABLED`` is on and the library is installed; it picks its own layouts
for convolutions, and the built primitives with their reorders are cached
(``MXNET_MKLDNN_CACHE_NUM``). Its OpenMP threads follow the engine's kernel thread count
(``OMP_NUM_THREADS``, else every core).

>>> import numpy as np
>>> from ember.op.nn import onednn_provider
>>> x = np.array([[-1.0, 3.0]], np.float32)
>>> y = np.zeros_like(x)
>>> ran = onednn_provider.softmax_forward({'axis': -1, 'temperature': None, 'dtype': None,
...                                         'use_length': False}, x, y)
>>> ran == onednn_provider.enabled()
True
>>> bool(np.allclose(y, [[0.0179862, 0.9820138]])) if ran else True
True
"""
from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass

import numpy as np

from ember import config, engine
from ember.backend import onednn
from ember.backend.onednn import (
    ARG_BIAS, ARG_DIFF_BIAS, ARG_DIFF_DST, ARG_DIFF_SCALE, ARG_DIFF_SHIFT, ARG_DIFF_SRC,
    ARG_DIFF_WEIGHTS, ARG_DST, ARG_MEAN, ARG_SCALE, ARG_SHIFT, ARG_SRC, ARG_VARIANCE,
    ARG_DST_ITER, ARG_DST_ITER_C, ARG_SRC_ITER, ARG_SRC_ITER_C, ARG_WEIGHTS, ARG_WEIGHTS_ITER,
    ARG_WORKSPACE, MemoryDesc, PostOp, has_plain_strides)
from ember.op.nn._common import (channel_first, is_channel_last, pool_window, reshape_view,
                                 scratch, spatial_defaults)
from ember.op.nn.rnn_layout import dims_of, unpack

__all__ = ['enabled', 'convolution_forward', 'convolution_backward_data',
           'convolution_backward_weights', 'fully_connected_forward', 'fully_connected_backward',
           'pooling_forward', 'pooling_backward', 'batch_norm_forward',
           'batch_norm_training_forward', 'batch_norm_backward', 'activation_forward',
           'activation_backward', 'leaky_relu_forward', 'leaky_relu_backward', 'softmax_forward',
           'softmax_backward', 'lrn_forward', 'rnn_forward', 'transpose']



@dataclass(frozen=True)
class OneDNNTuning:
    """The provider's measured trade-offs (figures in benchmarks/README.md)."""
    # An inference inner product of at least this many rows whose weight is a graph variable
    # runs on a kept copy of the weight in oneDNN's blocked layout (its brgemm kernel; on plain
    # weights oneDNN falls back to a slow GEMM), for weights of at most fc_blocked_max_bytes:
    # the copy doubles the layer's memory. One row runs on FullyConnected's dense kernel,
    # as fast and without a copy (benchmark_score.py alexnet, vgg16).
    fc_blocked_min_rows: int = 2
    fc_blocked_max_bytes: int = 256 << 20
    # NCHW data is pooled in channel-last copies that sit in the calling thread's oneDNN
    # workspace, which keeps its largest size: a batch is pooled this many bytes at a time.
    pool_copy_bytes: int = 16 << 20
    # From about this many elements a oneDNN reorder copies a permuted view several times
    # faster than NumPy's strided copy; below it the call costs what it saves
    # (call_overhead.py).
    transpose_min_elements: int = 16384


TUNING = OneDNNTuning()

# MXNet's activation names -> (oneDNN eltwise algorithm, alpha)
_ACTIVATIONS = {'relu': ('relu', 0.0), 'sigmoid': ('logistic', 0.0), 'tanh': ('tanh', 0.0),
                'softrelu': ('soft_relu', 1.0)}


def enabled() -> bool:
    """Whether oneDNN runs the kernels: ``MXNET_MKLDNN_ENABLED`` and the library loads.

    Raises EmberError when ``MXNET_LIBRARY_PATH`` names a missing or foreign file.

    >>> from ember import config
    >>> with config.override(MXNET_MKLDNN_ENABLED=0):
    ...     enabled()
    False
    """
    return bool(config.get('MXNET_MKLDNN_ENABLED')) and onednn.available()


def _ready(*arrays) -> bool:
    """oneDNN is on and can describe every array; its threads are set for this caller."""
    if not enabled() or not all(has_plain_strides(a) for a in arrays if a is not None):
        return False
    onednn.set_num_threads(engine.kernel_threads())
    return True


def _layout(array) -> tuple | None:
    return None if array is None else (array.shape, array.strides)


def _alike(*arrays) -> list:
    """Descriptors of channel-first views (N, C, *spatial) of activations that must agree on
    their layout. A view whose spatial dims are all 1 (global pooling's output, a convolution
    whose kernel covers its input) is as much channel-last as it is plain, and oneDNN takes
    it as plain: next to channel-last data that mismatch sends it to its reference kernel,
    hundreds of times slower (resnet50_v1's last pooling). So when every array is a dense
    channel-last view, all are described as channel-last."""
    if all(_dense_channel_last(a) for a in arrays):
        return [MemoryDesc.channel_last(a.shape) for a in arrays]
    return [MemoryDesc.of(a) for a in arrays]


def _dense_channel_last(array) -> bool:
    dense = onednn.channel_last_strides(array.shape)
    return all(n == 1 or s == d * array.itemsize
               for n, s, d in zip(array.shape, array.strides, dense))


def _run(key, build, arrays, accumulate=None, versions=None) -> bool:
    primitive = onednn.cached(key, build)
    if primitive is None:
        return False
    _execute(primitive, arrays, accumulate, versions)
    return True


def _execute(primitive, arrays, accumulate, versions, plan=None):
    """Runs `primitive` (and its `then`); returns the plan of its run (Primitive.run)."""
    plan = primitive.run(arrays, accumulate, versions, plan)
    if primitive.then is not None:
        out = arrays[ARG_DST]
        primitive.then.run({ARG_SRC: out, ARG_DST: out})
    return plan


class Prepared:
    """A oneDNN call worked out once, to run again on the same arrays: the primitive (while
    the primitive cache holds it), the arguments as oneDNN sees them and how the weight's
    kept copy is prepared. :meth:`run` takes the weight's current version, so a weight that
    changed is reordered again as in any call."""

    __slots__ = ('_primitive', '_arrays', '_accumulate', '_scale', '_plan')

    def __init__(self, primitive, arrays, accumulate, scale):
        self._primitive = weakref.ref(primitive)
        self._arrays, self._accumulate, self._scale = arrays, accumulate, scale
        self._plan = None           # the data handles of its last run (onednn.Plan)

    def run(self, weight_version) -> bool:
        """Runs the call; False, running nothing, where the primitive left the cache, oneDNN
        was switched off, or a scaled weight comes without a version (its scaled copy would
        be the first call's)."""
        primitive = self._primitive()
        if primitive is None or (self._scale is not None and weight_version is None) \
                or not enabled():
            return False
        onednn.set_num_threads(engine.kernel_threads())
        versions = None if weight_version is None \
            else {ARG_WEIGHTS: (weight_version, self._scale)}
        self._plan = _execute(primitive, self._arrays, self._accumulate, versions, self._plan)
        return True


# ----------------------------------------------------------------------------------------------
# Convolution

def convolution_forward(attrs, data, weight, bias, out, residual=None, act_type=None,
                        weight_version=None, weight_scale=None) -> bool | Prepared:
    """out = act(conv(data, weight * weight_scale) + bias + residual) for the Convolution
    operator's `attrs`.

    `bias` is None with ``no_bias``; `residual` (shaped like `out`, may be `out` itself) is
    added through oneDNN's sum post-op and `act_type` (an Activation name) applied after it.
    `weight_scale` (per output channel; None for none) is a folded BatchNorm. `weight_version`,
    ``((engine variable, version), ...)`` of the arrays the weight is made from
    (:func:`ember.op.nn._common.weight_token`), lets the weight's reorder into oneDNN's
    blocked layout, scaled, be kept between calls while it stays the same.

    False where oneDNN does not run it; else, where the call can be run again as it is, its
    :class:`Prepared` (else True).
    """
    act = _ACTIVATIONS.get(act_type) if act_type is not None else None
    if (act_type is not None and act is None) or data.ndim not in (3, 4, 5):
        return False
    if not _ready(data, weight, bias, out, residual, weight_scale):
        return False
    layout, groups = attrs['layout'], attrs['num_group']
    scale = None
    if weight_scale is not None:
        if weight_version is None:
            weight = np.multiply(weight, weight_scale.reshape((-1,) + (1,) * (weight.ndim - 1)))
        else:
            # the weight's reorder into its kept copy scales it as it reads it, over the
            # output channels ((groups, filters per group) for a grouped weight); a view,
            # read when the copy is made
            scale = weight_scale.reshape((groups, -1) if groups > 1 else (-1,))
    x, y = channel_first(np, data, layout), channel_first(np, out, layout)
    w = _conv_weight(weight, layout, groups)
    r = channel_first(np, residual, layout) if residual is not None else None
    stride, dilate, pad = _conv_geometry(attrs, data.ndim - 2)
    post_ops = _conv_post_ops(r is not None, act)
    key = ('conv', _layout(x), _layout(w), _layout(bias), _layout(y), _layout(r), stride,
           dilate, pad, post_ops)

    def build():
        x_md, y_md, *r_md = _alike(x, y, *([] if r is None else [r]))

        def convolution(ops):
            return onednn.convolution(
                x_md, MemoryDesc.of(w), None if bias is None else MemoryDesc.of(bias),
                y_md, stride, dilate, pad, pad, ops, accumulate=r_md[0] if r_md else None,
                activations_as_given=is_channel_last(layout))
        primitive = convolution(post_ops)
        if act is not None and 'gemm' in primitive.implementation:
            # oneDNN's GEMM-based convolution (alexnet's 11x11 first layer) applies an
            # activation post-op one value at a time; an eltwise primitive in place after it
            # is far cheaper (call_overhead.py)
            primitive = convolution(post_ops[:-1])
            primitive.then = onednn.eltwise(y_md, y_md, *act)
        return primitive
    arrays = {ARG_SRC: x, ARG_WEIGHTS: w, ARG_DST: y}
    if bias is not None:
        arrays[ARG_BIAS] = bias
    versions = None if weight_version is None else {ARG_WEIGHTS: (weight_version, scale)}
    primitive = onednn.cached(key, build)
    if primitive is None:
        return False
    _execute(primitive, arrays, r, versions)
    if weight_scale is not None and weight_version is None:
        return True         # `arrays` holds this call's scaled weight
    return Prepared(primitive, arrays, r, scale)


def _conv_geometry(attrs, nd):
    """Convolution's (stride, dilate, pad) with MXNet's defaults filled in."""
    return _geometry(*(tuple(attrs.get(name) or ()) for name in ('stride', 'dilate', 'pad',
                                                                 'kernel')), nd)


@functools.lru_cache(maxsize=256)
def _geometry(stride, dilate, pad, kernel, nd):
    return spatial_defaults('Convolution', {'stride': stride, 'dilate': dilate, 'pad': pad,
                                            'kernel': kernel}, nd)


def _conv_weight(weight, layout, groups):
    """The weight as oneDNN describes it: (F, C, *k), or (G, F/G, C/G, *k) grouped."""
    w = channel_first(np, weight, layout)
    if groups > 1:
        w = w.reshape((groups, w.shape[0] // groups) + w.shape[1:])
    return w


def _conv_views(attrs, data, weight):
    """Channel-first views of data and weight (grouped as (G, F/G, C/G, *k)); weight None
    when the grouped view needs a copy."""
    layout, groups = attrs['layout'], attrs['num_group']
    x, w = channel_first(np, data, layout), channel_first(np, weight, layout)
    if groups > 1:
        w = reshape_view(w, (groups, w.shape[0] // groups) + w.shape[1:])
    return x, w


def convolution_backward_data(attrs, dy, weight, dx) -> bool:
    """dx = the gradient of Convolution (its parsed `attrs`) with respect to its data, from the
    output gradient `dy` and the `weight`; arrays laid out as ``attrs['layout']`` says (weights
    OHWI for channel-last layouts), any number of groups. False: not handled, dx untouched.

    >>> from ember.op import registry
    >>> attrs = registry.get('Convolution').parse_attrs(
    ...     {'kernel': (1, 1), 'num_filter': 1, 'no_bias': True})
    >>> dy, w = np.ones((1, 1, 2, 2), np.float32), np.full((1, 1, 1, 1), 2, np.float32)
    >>> dx = np.zeros((1, 1, 2, 2), np.float32)
    >>> if not convolution_backward_data(attrs, dy, w, dx):
    ...     dx[...] = 2                  # oneDNN off or missing: what it would have written
    >>> dx.ravel().tolist()
    [2.0, 2.0, 2.0, 2.0]
    """
    if dy.ndim not in (3, 4, 5) or not _ready(dy, weight, dx):
        return False
    dxc, w = _conv_views(attrs, dx, weight)
    if w is None:
        return False
    dyc = channel_first(np, dy, attrs['layout'])
    stride, dilate, pad = _conv_geometry(attrs, dy.ndim - 2)
    key = ('conv_bwd_data', _layout(dxc), _layout(w), _layout(dyc), stride, dilate, pad)

    def build():
        dx_md, dy_md = _alike(dxc, dyc)
        return onednn.convolution_backward_data(
            dx_md, MemoryDesc.of(w), dy_md, stride, dilate, pad, pad,
            activations_as_given=is_channel_last(attrs['layout']))
    return _run(key, build, {ARG_DIFF_SRC: dxc, ARG_WEIGHTS: w, ARG_DIFF_DST: dyc})


def convolution_backward_weights(attrs, dy, data, dweight, dbias=None) -> bool:
    """dweight (and dbias, when given) = the gradients of Convolution (its parsed `attrs`)
    with respect to its weight and bias, from the output gradient `dy` and the `data`; layouts
    and groups as in :func:`convolution_backward_data`. False: not handled, outputs untouched.
    """
    if dy.ndim not in (3, 4, 5) or not _ready(dy, data, dweight, dbias):
        return False
    x, dw = _conv_views(attrs, data, dweight)
    if dw is None:
        return False
    rows = (reshape_view(dy, (-1, dy.shape[-1]))
            if dbias is not None and is_channel_last(attrs['layout']) else None)
    if rows is not None:
        # oneDNN's channel-last kernels sum the bias gradient slowly; NumPy's column sums
        # take half the time (conv_gradients.py, 1x1 table)
        if not convolution_backward_weights(attrs, dy, data, dweight):
            return False
        np.add.reduce(rows, axis=0, out=dbias)
        return True
    dyc = channel_first(np, dy, attrs['layout'])
    stride, dilate, pad = _conv_geometry(attrs, dy.ndim - 2)
    key = ('conv_bwd_weights', _layout(x), _layout(dw), _layout(dbias), _layout(dyc), stride,
           dilate, pad)

    def build():
        x_md, dy_md = _alike(x, dyc)
        return onednn.convolution_backward_weights(
            x_md, MemoryDesc.of(dw), None if dbias is None else MemoryDesc.of(dbias), dy_md,
            stride, dilate, pad, pad,
            activations_as_given=is_channel_last(attrs['layout']))
    arrays = {ARG_SRC: x, ARG_DIFF_WEIGHTS: dw, ARG_DIFF_DST: dyc}
    if dbias is not None:
        arrays[ARG_DIFF_BIAS] = dbias
    return _run(key, build, arrays)


@functools.lru_cache(maxsize=None)
def _conv_post_ops(has_residual, act) -> tuple:
    ops = (PostOp.sum(),) if has_residual else ()
    return ops + ((PostOp.activation(act[0], act[1]),) if act is not None else ())


# ----------------------------------------------------------------------------------------------
# FullyConnected

def fc_rows(attrs, data, weight, out):
    """(data rows, out rows) as 2-D views, None where a view needs a copy."""
    units = weight.shape[1] if weight.ndim == 2 else None
    rows = reshape_view(data, (-1, units)) if units else None
    return rows, reshape_view(out, (-1, attrs['num_hidden']))


def fc_keeps_blocked(rows, weight, weight_version) -> bool:
    """Whether an inner product of `rows` rows runs on a kept blocked copy of `weight`
    (``TUNING.fc_blocked_min_rows``, ``fc_blocked_max_bytes``)."""
    t = TUNING
    return (weight_version is not None and rows >= t.fc_blocked_min_rows
            and weight.nbytes <= t.fc_blocked_max_bytes and enabled())


def fully_connected_forward(attrs, data, weight, bias, out, weight_version=None) -> bool:
    """out = data (flattened to rows) weight^T + bias, for FullyConnected's `attrs`.
    `weight_version`, ``((engine variable, version), ...)`` of the weight in inference, lets
    a blocked copy of the weight be kept while it stays the same (see
    ``TUNING.fc_blocked_min_rows``)."""
    rows, out_rows = fc_rows(attrs, data, weight, out)
    if rows is None or out_rows is None or not _ready(rows, weight, bias, out_rows):
        return False
    blocked = fc_keeps_blocked(rows.shape[0], weight, weight_version)
    key = ('fc', _layout(rows), _layout(weight), _layout(bias), _layout(out_rows), blocked)

    def build():
        return onednn.inner_product(
            MemoryDesc.of(rows), MemoryDesc.of(weight),
            None if bias is None else MemoryDesc.of(bias), MemoryDesc.of(out_rows),
            choose_weights=blocked)
    arrays = {ARG_SRC: rows, ARG_WEIGHTS: weight, ARG_DST: out_rows}
    if bias is not None:
        arrays[ARG_BIAS] = bias
    versions = {ARG_WEIGHTS: (weight_version, None)} if blocked else None
    return _run(key, build, arrays, versions=versions)


def fully_connected_backward(attrs, dy, data, weight, dx, dweight, dbias=None) -> bool:
    """dx = dy weight, dweight = dy^T data (rows) and dbias = dy summed over rows (when
    given), for FullyConnected's `attrs`. False: not handled, outputs untouched."""
    rows, dy_rows = fc_rows(attrs, data, weight, dy)
    dx_rows = fc_rows(attrs, dx, weight, dy)[0]
    if rows is None or dy_rows is None or dx_rows is None:
        return False
    if not _ready(rows, dy_rows, dx_rows, weight, dweight, dbias):
        return False
    md = MemoryDesc.of
    data_grad = onednn.cached(
        ('fc_bwd_data', _layout(dx_rows), _layout(weight), _layout(dy_rows)),
        lambda: onednn.inner_product_backward_data(md(dx_rows), md(weight), md(dy_rows)))
    weight_grad = onednn.cached(
        ('fc_bwd_weights', _layout(rows), _layout(dweight), _layout(dbias), _layout(dy_rows)),
        lambda: onednn.inner_product_backward_weights(
            md(rows), md(dweight), None if dbias is None else md(dbias), md(dy_rows)))
    if data_grad is None or weight_grad is None:
        return False
    data_grad.run({ARG_DIFF_SRC: dx_rows, ARG_WEIGHTS: weight, ARG_DIFF_DST: dy_rows})
    arrays = {ARG_SRC: rows, ARG_DIFF_WEIGHTS: dweight, ARG_DIFF_DST: dy_rows}
    if dbias is not None:
        arrays[ARG_DIFF_BIAS] = dbias
    weight_grad.run(arrays)
    return True


# ----------------------------------------------------------------------------------------------
# Pooling

def pooling_forward(attrs, data, out, safe=False) -> bool:
    """Max and average pooling for Pooling's `attrs` (sum and lp pooling decline, and average
    pooling when `safe`, ``MXNET_SAFE_ACCUMULATION`` of the call, asks for float64 sums)."""
    geometry = _pool_geometry(attrs, data, out, safe)
    if geometry is None or not _ready(data, out):
        return False
    x, y, window, algorithm = geometry
    apart = _channels_apart(x)
    steps = [_pool_step(x[lo:hi], y[lo:hi], window, algorithm, apart)
             for lo, hi in _sample_chunks(x, y, apart)]
    return _run_all(steps)


def _pool_step(x, y, window, algorithm, apart):
    """Pooling of one chunk of samples as a function to call, None when oneDNN cannot."""
    key = ('pool', _layout(x), _layout(y), algorithm, window)
    primitive = onednn.cached(key, lambda: onednn.pooling(
        *_alike(x, y), algorithm, window.kernel, window.stride, window.pad_before,
        window.pad_after, apart))
    if primitive is None:
        return None
    return lambda: primitive.run({ARG_SRC: x, ARG_DST: y})


def _run_all(steps) -> bool:
    """Run every step, or none when one of them cannot run (outputs stay untouched)."""
    if any(step is None for step in steps):
        return False
    for step in steps:
        step()
    return True


def _channels_apart(x) -> bool:
    """Whether channel-first data keeps each channel's values apart (NCHW rather than NHWC):
    oneDNN then pools channel-last copies, several times faster than its NCHW kernels."""
    return x.shape[1] > 1 and x.strides[1] != x.itemsize


def _sample_chunks(*arrays_and_apart):
    """[(start, stop)] sample ranges of the arrays (all of one batch) whose copies fit
    ``TUNING.pool_copy_bytes``; one range when nothing is copied (the last argument is
    False)."""
    *arrays, apart = arrays_and_apart
    n = len(arrays[0])
    per_sample = sum(a[:1].nbytes for a in arrays)
    step = max(1, TUNING.pool_copy_bytes // max(per_sample, 1)) if apart else max(n, 1)
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def pooling_backward(attrs, dy, data, dx, ctx=None) -> bool:
    """dx = the gradient of max or average Pooling (its `attrs`) from the output gradient
    `dy`. Max pooling runs the forward pass again to find where each maximum came from (the
    operator keeps no oneDNN workspace); ties go to the first maximum, as in the NumPy kernel.
    The recomputed output and oneDNN's workspace come from `ctx`'s 'temp' resource when it
    has one: fresh arrays of that size fault their pages in on every call (compare.py
    --train)."""
    geometry = _pool_geometry(attrs, dx, dy, safe=False)
    if geometry is None or not _ready(dy, data, dx):
        return False
    dxc, dyc, window, algorithm = geometry
    layout = attrs['layout']
    x = channel_first(np, data, layout)
    # max pooling's recomputed output is laid out like dy (so its workspace is dy's layout
    # too): on the scratch where dy is C-contiguous, else a fresh array of dy's order
    fresh = None if algorithm != 'max' or dy.flags.c_contiguous else np.empty_like(dy)
    like = channel_first(np, dy if fresh is None else fresh, layout)
    apart = _channels_apart(dxc)
    chunks = _sample_chunks(x, dxc, dyc, dyc, apart)
    steps = [_pool_backward_step(x[lo:hi], like[lo:hi], dxc[lo:hi], dyc[lo:hi], window,
                                 algorithm, apart) for lo, hi in chunks]
    if any(step is None for step in steps):
        return False
    y = workspace = None
    if algorithm == 'max':
        most = max(nbytes for _, nbytes in steps)
        y, workspace = scratch(ctx, np, (dy.shape, dy.dtype) if fresh is None else None,
                               ((most,), np.uint8))
        y = channel_first(np, fresh if y is None else y, layout)
    for (run, _), (lo, hi) in zip(steps, chunks):
        run(None if y is None else y[lo:hi], workspace)
    return True


def _pool_backward_step(x, y_like, dx, dy, window, algorithm, apart):
    """(run, bytes) for one chunk of samples, or None where oneDNN declines: run(y, workspace)
    computes the chunk's dx; max pooling recomputes its output into `y` (laid out like
    `y_like`) and where each maximum came from into `workspace` (at least `bytes` long)."""
    args = (algorithm, window.kernel, window.stride, window.pad_before, window.pad_after, apart)
    backward = onednn.cached(('pool_bwd', _layout(dx), _layout(dy), algorithm, window, apart),
                             lambda: onednn.pooling_backward(*_alike(dx, dy), *args))
    if backward is None:
        return None
    arrays = {ARG_DIFF_DST: dy, ARG_DIFF_SRC: dx}
    if algorithm != 'max':
        return (lambda y, workspace: backward.run(arrays)), 0
    forward = onednn.cached(
        ('pool_train', _layout(x), _layout(y_like), window) + args[:1] + args[5:],
        lambda: onednn.pooling_training(*_alike(x, y_like), *args))
    if forward is None:
        return None
    layout = forward.inner_md(ARG_WORKSPACE)
    if layout != backward.inner_md(ARG_WORKSPACE):
        return None

    def run(y, workspace):
        workspace = workspace[:layout.nbytes]
        forward.run({ARG_SRC: x, ARG_DST: y, ARG_WORKSPACE: workspace})
        backward.run({**arrays, ARG_WORKSPACE: workspace})
    return run, layout.nbytes


def _pool_geometry(attrs, data, out, safe):
    """(channel-first data, out, window, oneDNN algorithm) of a pooling oneDNN computes as
    the NumPy kernel does, else None."""
    if attrs['pool_type'] not in ('max', 'avg') or data.ndim not in (3, 4, 5):
        return None
    layout = attrs['layout']
    x, y = channel_first(np, data, layout), channel_first(np, out, layout)
    window = pool_window(attrs, x.shape[2:])
    algorithm = _pool_algorithm(attrs, window, safe)
    if algorithm is None or _has_empty_window(window):
        return None
    return x, y, window, algorithm


def _pool_algorithm(attrs, window, safe):
    if attrs['pool_type'] == 'max':
        return 'max'
    if safe:
        return None         # the NumPy kernel sums float32 windows in float64 then
    if attrs['count_include_pad'] is False:
        return 'avg_exclude_padding'
    # MXNet's divisor counts the declared padding but not the extra tail of 'full' windows
    if attrs['pooling_convention'] == 'full' and window.pad_after != window.pad_before:
        return None
    return 'avg_include_padding'


def _has_empty_window(window) -> bool:
    """A window lying wholly in the padding: MXNet and oneDNN disagree on its value."""
    for k, s, before, n, o in zip(window.kernel, window.stride, window.pad_before,
                                  window.size_in, window.size_out):
        if before >= k or (o - 1) * s - before >= n:
            return True
    return False


# ----------------------------------------------------------------------------------------------
# BatchNorm

def _bn_views(attrs, data, arrays, vectors, forward=False):
    """Channel-second views of `arrays` (shaped like data), or None when oneDNN cannot take
    the per-channel `vectors` (it wants them dense float32) or, in a `forward` pass, the data
    keeps its channels apart (NCHW): oneDNN's kernel for that is slower than NumPy's pass."""
    if data.ndim < 2 or data.ndim > 5:
        return None
    if forward and _channels_apart(np.moveaxis(data, attrs['axis'] % data.ndim, 1)):
        return None
    axis = attrs['axis'] % data.ndim
    channels = data.shape[axis]
    if any(v.shape != (channels,) or v.strides != (4,) for v in vectors if v is not None):
        return None
    return [np.moveaxis(a, axis, 1) for a in arrays]


def batch_norm_forward(attrs, data, gamma, beta, moving_mean, moving_var, out, mean_out=None,
                       invstd_out=None, fuse_relu=False) -> bool:
    """out = (data - moving_mean) / sqrt(moving_var + eps) * gamma + beta along `axis`, with
    the global statistics (call it only when the batch statistics are not used). `mean_out`
    and `invstd_out`, when given, receive the statistics used; `fuse_relu` applies relu.
    Declines channel-first data with spatial dims (NCHW): NumPy is faster there."""
    params = (gamma, beta, moving_mean, moving_var)
    views = _bn_views(attrs, data, (data, out), params, forward=True)
    if views is None or not _ready(data, out, *params):
        return False
    x, y = views
    use_scale, eps = not attrs['fix_gamma'], attrs['eps']
    key = ('bn', _layout(x), _layout(y), eps, use_scale, fuse_relu)

    def build():
        return onednn.batch_norm(MemoryDesc.of(x), MemoryDesc.of(y), eps, use_scale, fuse_relu)
    arrays = {ARG_SRC: x, ARG_DST: y, ARG_MEAN: moving_mean, ARG_VARIANCE: moving_var,
              ARG_SHIFT: beta}
    if use_scale:
        arrays[ARG_SCALE] = gamma
    if not _run(key, build, arrays):
        return False
    if mean_out is not None:
        mean_out[...] = moving_mean
    if invstd_out is not None:
        invstd_out[...] = 1 / np.sqrt(moving_var + np.float32(eps))
    return True


def batch_norm_training_forward(attrs, data, gamma, beta, out, mean_out, var_out,
                                safe=False) -> bool:
    """out = BatchNorm of `data` with the batch's own statistics; `mean_out` and `var_out`
    receive them per channel (the variance biased, as np.var). The caller updates the moving
    statistics. Declines when `safe` (``MXNET_SAFE_ACCUMULATION``) asks for float64 sums, and
    NCHW data as :func:`batch_norm_forward` does."""
    vectors = (gamma, beta, mean_out, var_out)
    views = _bn_views(attrs, data, (data, out), vectors, forward=True)
    if safe or views is None or not _ready(data, out, *vectors):
        return False
    x, y = views
    use_scale, eps = not attrs['fix_gamma'], attrs['eps']
    key = ('bn_train', _layout(x), _layout(y), eps, use_scale)

    def build():
        return onednn.batch_norm_training(MemoryDesc.of(x), MemoryDesc.of(y), eps, use_scale)
    arrays = {ARG_SRC: x, ARG_DST: y, ARG_SHIFT: beta, ARG_MEAN: mean_out,
              ARG_VARIANCE: var_out}
    if use_scale:
        arrays[ARG_SCALE] = gamma
    return _run(key, build, arrays)


def batch_norm_backward(attrs, dy, data, gamma, mean, invstd, dx, dgamma, dbeta,
                        batch_stats) -> bool:
    """The data, gamma and beta gradients of BatchNorm from the `mean` and `invstd` its
    forward pass output; `batch_stats` says whether those were the batch's own (so the
    gradient flows through them) or the moving statistics (constants)."""
    vectors = (gamma, mean, invstd, dgamma, dbeta)
    views = _bn_views(attrs, data, (dy, data, dx), vectors)
    if views is None or not _ready(dy, data, dx, *vectors):
        return False
    dyc, x, dxc = views
    use_scale, eps = not attrs['fix_gamma'], attrs['eps']
    key = ('bn_bwd', _layout(dxc), _layout(dyc), _layout(x), eps, use_scale, batch_stats)

    def build():
        md = MemoryDesc.of
        return onednn.batch_norm_backward(md(dxc), md(dyc), md(x), eps, use_scale,
                                          not batch_stats)
    # oneDNN takes the variance: recovered from invstd = 1 / sqrt(var + eps)
    variance = (1 / (invstd * invstd) - np.float32(eps)).astype(np.float32, copy=False)
    arrays = {ARG_SRC: x, ARG_MEAN: mean, ARG_VARIANCE: variance, ARG_DIFF_DST: dyc,
              ARG_DIFF_SRC: dxc, ARG_DIFF_SHIFT: dbeta}
    if use_scale:
        arrays[ARG_SCALE], arrays[ARG_DIFF_SCALE] = gamma, dgamma
    if not _run(key, build, arrays):
        return False
    if not use_scale:
        dgamma.fill(0)
    return True


# ----------------------------------------------------------------------------------------------
# Element-wise activations, softmax and LRN

def activation_forward(attrs, data, out) -> bool:
    """Activation: relu, sigmoid, tanh and softrelu (softsign declines). Arrays smaller than
    ``MXNET_CPU_PARALLEL_SIZE`` decline: NumPy is faster than a call into oneDNN there."""
    algorithm = _ACTIVATIONS.get(attrs['act_type'])
    if algorithm is None:
        return False
    return _eltwise(data, out, algorithm[0], algorithm[1])


# The derivatives that oneDNN computes from the activation's output, as the operator keeps it.
_ACTIVATION_GRADIENTS = {'relu': 'relu_use_dst_for_bwd', 'sigmoid': 'logistic_use_dst_for_bwd',
                         'tanh': 'tanh_use_dst_for_bwd'}


def activation_backward(attrs, dy, out, dx) -> bool:
    """dx = dy * act'(x) from Activation's output `out`: relu, sigmoid and tanh (softrelu and
    softsign decline). `dx` may be `dy`. Small arrays decline as in the forward pass."""
    algorithm = _ACTIVATION_GRADIENTS.get(attrs['act_type'])
    if algorithm is None:
        return False
    return _eltwise_backward(dy, out, dx, algorithm, 0.0)


def leaky_relu_forward(attrs, data, out) -> bool:
    """LeakyReLU's leaky, elu and gelu (prelu, selu and rrelu decline)."""
    algorithm = _leaky_algorithm(attrs)
    if algorithm is None:
        return False
    return _eltwise(data, out, algorithm[0], algorithm[1])


def leaky_relu_backward(attrs, dy, data, dx) -> bool:
    """dx = dy * f'(data) for LeakyReLU's leaky, elu and gelu."""
    algorithm = _leaky_algorithm(attrs)
    if algorithm is None:
        return False
    return _eltwise_backward(dy, data, dx, algorithm[0], algorithm[1])


def _leaky_algorithm(attrs):
    algorithms = {'leaky': ('relu', attrs['slope']), 'elu': ('elu', attrs['slope']),
                  'gelu': ('gelu_erf', 0.0)}
    return algorithms.get(attrs['act_type'])


def _eltwise(data, out, algorithm, alpha) -> bool:
    if data.size < config.get('MXNET_CPU_PARALLEL_SIZE') or not _ready(data, out):
        return False
    key = ('eltwise', _layout(data), _layout(out), algorithm, alpha)

    def build():
        return onednn.eltwise(MemoryDesc.of(data), MemoryDesc.of(out), algorithm, alpha)
    return _run(key, build, {ARG_SRC: data, ARG_DST: out})


def _eltwise_backward(dy, data, dx, algorithm, alpha) -> bool:
    if dy.size < config.get('MXNET_CPU_PARALLEL_SIZE') or not _ready(dy, data, dx):
        return False
    key = ('eltwise_bwd', _layout(dy), _layout(data), _layout(dx), algorithm, alpha)

    def build():
        md = MemoryDesc.of
        return onednn.eltwise_backward(md(dx), md(dy), md(data), algorithm, alpha)
    data_arg = ARG_DST if algorithm.endswith('_use_dst_for_bwd') else ARG_SRC
    return _run(key, build, {ARG_DIFF_DST: dy, data_arg: data, ARG_DIFF_SRC: dx})


def _plain_softmax(attrs, out) -> bool:
    """softmax attributes oneDNN computes as the NumPy kernel does."""
    return (not attrs['use_length'] and attrs['temperature'] in (None, 1)
            and out.dtype == np.float32)


def softmax_forward(attrs, data, out, log=False, safe=False) -> bool:
    """softmax (log_softmax with `log`) along `axis`; declines a temperature other than 1,
    use_length, an output dtype other than float32 and `safe` (``MXNET_SAFE_ACCUMULATION`` of
    the call, which asks for float64 sums)."""
    if safe or not _plain_softmax(attrs, out) or data.ndim == 0 or not _ready(data, out):
        return False
    axis = attrs['axis'] % data.ndim
    key = ('softmax', _layout(data), _layout(out), axis, log)

    def build():
        return onednn.softmax(MemoryDesc.of(data), MemoryDesc.of(out), axis, log)
    return _run(key, build, {ARG_SRC: data, ARG_DST: out})


def softmax_backward(attrs, dy, out, dx, log=False) -> bool:
    """The data gradient of softmax (log_softmax with `log`) from its output `out`; declines
    what :func:`softmax_forward` declines, and an output dtype set apart from the data's."""
    if attrs['dtype'] is not None or not _plain_softmax(attrs, out) or out.ndim == 0:
        return False
    if not _ready(dy, out, dx):
        return False
    axis = attrs['axis'] % out.ndim
    key = ('softmax_bwd', _layout(dy), _layout(out), _layout(dx), axis, log)

    def build():
        md = MemoryDesc.of
        return onednn.softmax_backward(md(dx), md(dy), md(out), axis, log)
    return _run(key, build, {ARG_DIFF_DST: dy, ARG_DST: out, ARG_DIFF_SRC: dx})


def lrn_forward(attrs, data, out) -> bool:
    """LRN across channels: out = data * (knorm + alpha / nsize * window sum of data^2)^-beta.
    Writes only the output, not the normaliser (the backward pass recomputes it)."""
    if data.ndim < 3 or data.ndim > 5 or not _ready(data, out):
        return False
    size, alpha, beta, k = attrs['nsize'], attrs['alpha'], attrs['beta'], attrs['knorm']
    key = ('lrn', _layout(data), _layout(out), size, alpha, beta, k)

    def build():
        return onednn.lrn(MemoryDesc.of(data), MemoryDesc.of(out), size, alpha, beta, k)
    return _run(key, build, {ARG_SRC: data, ARG_DST: out})


# ----------------------------------------------------------------------------------------------
# RNN (forward, the whole sequence in one call per layer)

# MXNet's cells -> oneDNN's, and the order of MXNet's gates in oneDNN's gate order
_RNN_CELLS = {'rnn_relu': 'rnn_relu', 'rnn_tanh': 'rnn_tanh', 'lstm': 'lstm', 'gru': 'lbr_gru'}
_GATE_ORDER = {'gru': (1, 0, 2)}            # oneDNN's u, r, o are MXNet's z, r, n


def rnn_forward(attrs, data, params, state, state_cell, out, hy, cy=None) -> bool:
    """The RNN operator's forward pass (its parsed `attrs`, MXNet's packed `params`), writing
    the output sequence `out` and the final states `hy` (and `cy` for LSTM). Runs when
    ``MXNET_USE_MKLDNN_RNN`` is on; declines sequence lengths, LSTM state clipping and
    projections. The caller declines dropout between layers itself (it draws the masks)."""
    if not config.get('MXNET_USE_MKLDNN_RNN') or attrs['use_sequence_length']:
        return False
    if attrs['projection_size'] is not None or attrs['lstm_state_clip_min'] is not None \
            or attrs['lstm_state_clip_max'] is not None:
        return False
    if data.ndim != 3 or not _ready(data, params, state, state_cell, out, hy, cy):
        return False
    dims = dims_of(attrs, data.shape[2])
    weights = unpack(params, dims)
    layer_in = data
    for layer in range(dims.layers):
        last = layer == dims.layers - 1
        layer_out = out if last else np.empty(out.shape, np.float32)
        if not _rnn_layer(attrs, dims, layer, weights, layer_in, layer_out, state, state_cell,
                          hy, cy):
            return False
        layer_in = layer_out
    return True


def _rnn_layer(attrs, dims, layer, weights, layer_in, layer_out, state, state_cell, hy, cy):
    span = slice(layer * dims.directions, (layer + 1) * dims.directions)
    states = [None if a is None else reshape_view(a[span], (1,) + a[span].shape)
              for a in (state, state_cell, hy, cy)]
    packed = _rnn_pack(attrs['mode'], dims, weights[span])
    cell, lstm = _RNN_CELLS[attrs['mode']], attrs['mode'] == 'lstm'
    arrays = [layer_in, states[0], states[1], *packed, layer_out, states[2], states[3]]
    if any(a is None for i, a in enumerate(arrays) if lstm or i not in (2, 8)):
        return False
    key = ('rnn', cell) + tuple(_layout(a) for a in arrays)

    def build():
        mds = [None if a is None else MemoryDesc.of(a) for a in arrays]
        return onednn.rnn_forward(cell, *mds)
    args = dict(zip((ARG_SRC, ARG_SRC_ITER, ARG_SRC_ITER_C, ARG_WEIGHTS, ARG_WEIGHTS_ITER,
                     ARG_BIAS, ARG_DST, ARG_DST_ITER, ARG_DST_ITER_C), arrays))
    return _run(key, build, {arg: a for arg, a in args.items() if a is not None})


def _rnn_pack(mode, dims, layer_weights):
    """MXNet's (G*H, in) weights and two biases of one layer's directions as oneDNN's
    weights_layer (1, D, in, G, H), weights_iter (1, D, H, G, H) and bias (1, D, G', H)."""
    gates, hidden = dims.gates, dims.hidden
    order = list(_GATE_ORDER.get(mode, range(gates)))

    def ldigo(matrix):
        return matrix.reshape(gates, hidden, -1)[order].transpose(2, 0, 1)
    # dense copies: oneDNN takes exactly 'ldigo' (np.stack keeps the transposed order)
    w_layer = np.ascontiguousarray(np.stack([ldigo(w[0]) for w in layer_weights])[None])
    w_iter = np.ascontiguousarray(np.stack([ldigo(w[1]) for w in layer_weights])[None])
    biases = []
    for _, _, bx, bh in layer_weights:
        bx, bh = bx.reshape(gates, hidden)[order], bh.reshape(gates, hidden)[order]
        if mode == 'gru':       # the new gate's hidden bias stays inside the reset product
            biases.append(np.concatenate([bx[:2] + bh[:2], bx[2:], bh[2:]]))
        else:
            biases.append(bx + bh)
    return w_layer, w_iter, np.ascontiguousarray(np.stack(biases)[None])


# ----------------------------------------------------------------------------------------------
# Transpose

def transpose(view, out) -> bool:
    """out = `view` (a permuted view of another array) through a oneDNN reorder; False (out
    untouched) where NumPy should copy: small (``TUNING.transpose_min_elements``), not
    float32, or overlapping memory."""
    if (view.size < TUNING.transpose_min_elements or view.shape != out.shape or view.ndim > 12
            or not _ready(view, out) or np.may_share_memory(view, out)):
        return False
    key = ('reorder', _layout(view), _layout(out))
    return _run(key, lambda: onednn.reorder(MemoryDesc.of(view), MemoryDesc.of(out)),
                {ARG_SRC: view, ARG_DST: out})
