"""oneDNN forward kernels for the hot neural-network operators on float32 CPU arrays.

Each function takes the operator's parsed attributes and its NumPy arrays (plain NCHW or NHWC
buffers, any positive strides), runs the forward computation through oneDNN and returns True,
or returns False without touching the outputs when it cannot handle the case, so that the
caller falls back to its NumPy kernel. oneDNN runs when ``MXNET_MKLDNN_ENABLED`` is on and the
library is installed; it picks its own layouts for convolutions, and the built primitives with
their reorders are cached (``MXNET_MKLDNN_CACHE_NUM``). Its OpenMP threads follow the engine's
kernel thread count (``OMP_NUM_THREADS``, else every core).

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

import numpy as np

from ember import config, engine
from ember.backend import onednn
from ember.backend.onednn import (
    ARG_BIAS, ARG_DST, ARG_MEAN, ARG_SCALE, ARG_SHIFT, ARG_SRC, ARG_VARIANCE, ARG_WEIGHTS,
    MemoryDesc, PostOp, has_plain_strides)
from ember.op.nn._common import channel_first, reshape_view, spatial_defaults

__all__ = ['enabled', 'convolution_forward', 'fully_connected_forward', 'pooling_forward',
           'batch_norm_forward', 'activation_forward', 'leaky_relu_forward', 'softmax_forward',
           'lrn_forward']

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


def _run(key, build, arrays, accumulate=None, versions=None) -> bool:
    primitive = onednn.cached(key, build)
    if primitive is None:
        return False
    primitive.run(arrays, accumulate, versions)
    return True


# ----------------------------------------------------------------------------------------------
# Convolution

def convolution_forward(attrs, data, weight, bias, out, residual=None, act_type=None,
                        weight_version=None) -> bool:
    """out = act(conv(data, weight) + bias + residual) for the Convolution operator's `attrs`.

    `bias` is None with ``no_bias``; `residual` (shaped like `out`, may be `out` itself) is
    added through oneDNN's sum post-op and `act_type` (an Activation name) applied after it.
    `weight_version`, a token the caller changes whenever the weight's contents change, lets
    the weight's reorder into oneDNN's blocked layout be kept between calls.
    """
    act = _ACTIVATIONS.get(act_type) if act_type is not None else None
    if (act_type is not None and act is None) or data.ndim not in (3, 4, 5):
        return False
    if not _ready(data, weight, bias, out, residual):
        return False
    layout, groups = attrs['layout'], attrs['num_group']
    x, y = channel_first(np, data, layout), channel_first(np, out, layout)
    w = channel_first(np, weight, layout)
    if groups > 1:
        w = w.reshape((groups, w.shape[0] // groups) + w.shape[1:])
    r = channel_first(np, residual, layout) if residual is not None else None
    stride, dilate, pad = spatial_defaults('Convolution', attrs, data.ndim - 2)
    post_ops = _conv_post_ops(r is not None, act)
    key = ('conv', _layout(x), _layout(w), _layout(bias), _layout(y), _layout(r), stride,
           dilate, pad, post_ops)

    def build():
        return onednn.convolution(
            MemoryDesc.of(x), MemoryDesc.of(w), None if bias is None else MemoryDesc.of(bias),
            MemoryDesc.of(y), stride, dilate, pad, pad, post_ops,
            accumulate=None if r is None else MemoryDesc.of(r))
    arrays = {ARG_SRC: x, ARG_WEIGHTS: w, ARG_DST: y}
    if bias is not None:
        arrays[ARG_BIAS] = bias
    versions = None if weight_version is None else {ARG_WEIGHTS: weight_version}
    return _run(key, build, arrays, r, versions)


def _conv_post_ops(has_residual, act) -> tuple:
    ops = (PostOp.sum(),) if has_residual else ()
    return ops + ((PostOp.activation(act[0], act[1]),) if act is not None else ())


# ----------------------------------------------------------------------------------------------
# FullyConnected

def fully_connected_forward(attrs, data, weight, bias, out) -> bool:
    """out = data (flattened to rows) weight^T + bias, for FullyConnected's `attrs`."""
    hidden = attrs['num_hidden']
    units = weight.shape[1] if weight.ndim == 2 else None
    rows = reshape_view(data, (-1, units)) if units else None
    out_rows = reshape_view(out, (-1, hidden))
    if rows is None or out_rows is None or not _ready(rows, weight, bias, out_rows):
        return False
    key = ('fc', _layout(rows), _layout(weight), _layout(bias), _layout(out_rows))

    def build():
        return onednn.inner_product(
            MemoryDesc.of(rows), MemoryDesc.of(weight),
            None if bias is None else MemoryDesc.of(bias), MemoryDesc.of(out_rows))
    arrays = {ARG_SRC: rows, ARG_WEIGHTS: weight, ARG_DST: out_rows}
    if bias is not None:
        arrays[ARG_BIAS] = bias
    return _run(key, build, arrays)


# ----------------------------------------------------------------------------------------------
# Pooling

def pooling_forward(attrs, data, out) -> bool:
    """Max and average pooling for Pooling's `attrs` (sum and lp pooling decline, and average
    pooling under ``MXNET_SAFE_ACCUMULATION``, which asks for float64 sums)."""
    kind = attrs['pool_type']
    if kind not in ('max', 'avg') or data.ndim not in (3, 4, 5) or not _ready(data, out):
        return False
    layout = attrs['layout']
    x, y = channel_first(np, data, layout), channel_first(np, out, layout)
    window = _pool_window(attrs, x.shape[2:])
    algorithm = _pool_algorithm(attrs, window)
    if algorithm is None or _has_empty_window(window):
        return False
    key = ('pool', _layout(x), _layout(y), algorithm, window)

    def build():
        return onednn.pooling(MemoryDesc.of(x), MemoryDesc.of(y), algorithm, window.kernel,
                              window.stride, window.pad_before, window.pad_after)
    return _run(key, build, {ARG_SRC: x, ARG_DST: y})


def _pool_window(attrs, size_in):
    # imported here: pooling.py imports this module to call it first
    from ember.op.nn.pooling import pool_window
    return pool_window(attrs, size_in)


def _pool_algorithm(attrs, window):
    if attrs['pool_type'] == 'max':
        return 'max'
    if config.get('MXNET_SAFE_ACCUMULATION'):
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
# BatchNorm (inference: the moving statistics)

def batch_norm_forward(attrs, data, gamma, beta, moving_mean, moving_var, out, mean_out=None,
                       invstd_out=None, fuse_relu=False) -> bool:
    """out = (data - moving_mean) / sqrt(moving_var + eps) * gamma + beta along `axis`, with
    the global statistics (call it only when the batch statistics are not used). `mean_out`
    and `invstd_out`, when given, receive the statistics used; `fuse_relu` applies relu."""
    params = (gamma, beta, moving_mean, moving_var)
    if data.ndim < 2 or data.ndim > 5 or not _ready(data, out, *params):
        return False
    if any(p.shape != (data.shape[attrs['axis']],) or p.strides != (4,) for p in params):
        return False        # oneDNN takes the per-channel vectors dense
    axis = attrs['axis'] % data.ndim
    x, y = np.moveaxis(data, axis, 1), np.moveaxis(out, axis, 1)
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


# ----------------------------------------------------------------------------------------------
# Element-wise activations, softmax and LRN

def activation_forward(attrs, data, out) -> bool:
    """Activation: relu, sigmoid, tanh and softrelu (softsign declines). Arrays smaller than
    ``MXNET_CPU_PARALLEL_SIZE`` decline: NumPy is faster than a call into oneDNN there."""
    algorithm = _ACTIVATIONS.get(attrs['act_type'])
    if algorithm is None:
        return False
    return _eltwise(data, out, algorithm[0], algorithm[1])


def leaky_relu_forward(attrs, data, out) -> bool:
    """LeakyReLU's leaky, elu and gelu (prelu, selu and rrelu decline)."""
    algorithms = {'leaky': ('relu', attrs['slope']), 'elu': ('elu', attrs['slope']),
                  'gelu': ('gelu_erf', 0.0)}
    algorithm = algorithms.get(attrs['act_type'])
    if algorithm is None:
        return False
    return _eltwise(data, out, algorithm[0], algorithm[1])


def _eltwise(data, out, algorithm, alpha) -> bool:
    if data.size < config.get('MXNET_CPU_PARALLEL_SIZE') or not _ready(data, out):
        return False
    key = ('eltwise', _layout(data), _layout(out), algorithm, alpha)

    def build():
        return onednn.eltwise(MemoryDesc.of(data), MemoryDesc.of(out), algorithm, alpha)
    return _run(key, build, {ARG_SRC: data, ARG_DST: out})


def softmax_forward(attrs, data, out, log=False) -> bool:
    """softmax (log_softmax with `log`) along `axis`; declines a temperature other than 1,
    use_length, an output dtype other than float32 and ``MXNET_SAFE_ACCUMULATION`` (which
    asks for float64 sums)."""
    if attrs['use_length'] or attrs['temperature'] not in (None, 1):
        return False
    if config.get('MXNET_SAFE_ACCUMULATION'):
        return False
    if out.dtype != np.float32 or data.ndim == 0 or not _ready(data, out):
        return False
    axis = attrs['axis'] % data.ndim
    key = ('softmax', _layout(data), _layout(out), axis, log)

    def build():
        return onednn.softmax(MemoryDesc.of(data), MemoryDesc.of(out), axis, log)
    return _run(key, build, {ARG_SRC: data, ARG_DST: out})


def lrn_forward(attrs, data, out) -> bool:
    """LRN across channels: out = data * (knorm + alpha / nsize * window sum of data^2)^-beta.
    Writes only the output, not the normaliser that the backward pass reads."""
    if data.ndim < 3 or data.ndim > 5 or not _ready(data, out):
        return False
    size, alpha, beta, k = attrs['nsize'], attrs['alpha'], attrs['beta'], attrs['knorm']
    key = ('lrn', _layout(data), _layout(out), size, alpha, beta, k)

    def build():
        return onednn.lrn(MemoryDesc.of(data), MemoryDesc.of(out), size, alpha, beta, k)
    return _run(key, build, {ARG_SRC: data, ARG_DST: out})
