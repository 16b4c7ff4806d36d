"""Convolution and Deconvolution over 1-D, 2-D and 3-D data.

Convolution's forward pass (and ``_sg_conv``'s, with its residual and activation) is
:func:`forward`: on the CPU one of the algorithms of :mod:`ember.op.nn.conv_algorithms`
(oneDNN, im2col + GEMM, Winograd), picked per layer by
``MXNET_CUDNN_AUTOTUNE_DEFAULT`` or the operator's ``cudnn_tune``. Its backward pass runs
through oneDNN when enabled, else as below.

The generic kernels below work on any array module: im2col (a copy of every window into a
patch matrix) followed by one batched GEMM per group; a 1x1, stride-1 convolution is the GEMM
alone. Deconvolution is the adjoint: its forward pass is the convolution's data gradient and
vice versa.
"""
from __future__ import annotations

import dataclasses
import functools
import operator

import numpy as np

from ember import accel, config, engine
from ember.backend import onednn
from ember.base import prod
from ember.op.nn import conv_algorithms, conv_gemm, conv_winograd, onednn_provider
from ember.op.nn.activation import ACTIVATIONS
from ember.op.nn.conv_algorithms import ConvCall, ConvProblem
from ember.op.nn.conv_common import KeptByToken
from ember.op.nn._common import (
    assign_shape, channel_first, check_layout, col2im, dilated, im2col, interior,
    is_channel_last, join_layout, layout_param, make_window, outputs_of, padded_input,
    reshape_view, scratch, shape_param, spatial_defaults, split_layout, weight_channel_first)
from ember.op.registry import (
    REQUIRED, Param, ShapeError, p_bool, p_enum, p_int, p_optional, p_shape, register, same_type)

__all__ = ['forward', 'backward', 'weight_token', 'plain_weight_bytes', 'problem_of',
           'conv_forward', 'conv_backward_data', 'conv_backward_weight']

_TUNE = p_optional(p_enum('off', 'limited_workspace', 'fastest'))

CONV_PARAMS = (
    Param('kernel', p_shape, REQUIRED, 'Window size, e.g. (3, 3).'),
    shape_param('stride', doc='Step between windows; () means 1 in every dim.'),
    shape_param('dilate', doc='Spacing of kernel taps; () means 1.'),
    shape_param('pad', doc='Zero padding on both sides; () means 0.'),
    Param('num_filter', p_int, REQUIRED, 'Output channels.'),
    Param('num_group', p_int, 1, 'Groups of channels convolved independently.'),
    Param('workspace', p_int, 1024, 'MB of scratch an algorithm may need to be considered by '
          'measurement; one call uses at most 16 MB, working a few samples at a time.'),
    Param('no_bias', p_bool, False),
    Param('cudnn_tune', _TUNE, None, 'Algorithm choice for this operator: off (the rule), '
          'limited_workspace or fastest (measured within or without the workspace limit); '
          'None follows MXNET_CUDNN_AUTOTUNE_DEFAULT.'),
    Param('cudnn_off', p_bool, False, 'Accepted for compatibility.'),
    layout_param(),
)

DECONV_PARAMS = CONV_PARAMS[:4] + (
    shape_param('adj', doc='Extra output size at the end of each dim (< stride).'),
    shape_param('target_shape', doc='Output spatial size; overrides pad and adj.'),
) + CONV_PARAMS[4:6] + (
    Param('workspace', p_int, 512, 'Accepted for compatibility.'),
    Param('no_bias', p_bool, True),
    Param('cudnn_tune', _TUNE, None, 'Accepted for compatibility.'),
) + CONV_PARAMS[9:]


# ----------------------------------------------------------------------------------------------
# The three primitives, on channel-first arrays: x (N, C, *in), weight (F, C/groups, *kernel),
# y (N, F, *out).

def conv_forward(xp, x, weight, window, groups, y, ctx=None, workspace=None):
    """Write the convolution of `x` with `weight` into `y` (in batch chunks whose scratch fits
    `workspace` bytes, when given)."""
    chunks = _batch_chunks(x, weight, window, workspace)
    if len(chunks) > 1:
        for lo, hi in chunks:
            conv_forward(xp, x[lo:hi], weight, window, groups, y[lo:hi], ctx)
        return
    n, channels = x.shape[:2]
    filters, size_out = weight.shape[0], prod(window.size_out)
    w3 = weight.reshape((groups, filters // groups, -1))
    target = reshape_view(y, (n, groups, filters // groups, size_out))
    pad_buf, cols_buf, y_buf = scratch(
        ctx, xp,
        None if window.is_pointwise or not window.has_padding else (
            x.shape[:2] + window.padded, x.dtype),
        None if window.is_pointwise else ((n, channels) + window.kernel + window.size_out,
                                          x.dtype),
        None if target is not None else ((n, groups, filters // groups, size_out), y.dtype))
    if window.is_pointwise:
        cols = x.reshape((n, groups, channels // groups, size_out))
    else:
        padded = padded_input(xp, x, window, 0, pad_buf)
        cols = im2col(padded, window, cols_buf).reshape(n, groups, -1, size_out)
    xp.matmul(w3, cols, out=target if target is not None else y_buf)
    if target is None:
        y[...] = y_buf.reshape(y.shape)


def conv_backward_data(xp, dy, weight, window, groups, dx, ctx=None, workspace=None):
    """Write the gradient of the convolution with respect to its data into `dx`."""
    chunks = _batch_chunks(dx, weight, window, workspace)
    if len(chunks) > 1:
        for lo, hi in chunks:
            conv_backward_data(xp, dy[lo:hi], weight, window, groups, dx[lo:hi], ctx)
        return
    n, channels = dx.shape[:2]
    filters, size_out = weight.shape[0], prod(window.size_out)
    wt = weight.reshape((groups, filters // groups, -1)).transpose(0, 2, 1)
    dy4 = dy.reshape((n, groups, filters // groups, size_out))
    if window.is_pointwise:
        target = reshape_view(dx, (n, groups, channels // groups, size_out))
        if target is not None:
            xp.matmul(wt, dy4, out=target)
        else:
            dx[...] = xp.matmul(wt, dy4).reshape(dx.shape)
        return
    dcols, dpad = scratch(ctx, xp, ((n, groups, wt.shape[1], size_out), dx.dtype),
                          ((n, channels) + window.padded, dx.dtype) if window.has_padding
                          else None)
    xp.matmul(wt, dy4, out=dcols)
    if dpad is None:
        dx.fill(0)
        col2im(dcols.reshape((n, channels) + window.kernel + window.size_out), window, dx)
        return
    dpad.fill(0)
    col2im(dcols.reshape((n, channels) + window.kernel + window.size_out), window, dpad)
    dx[...] = dpad[interior(window)]


def conv_backward_weight(xp, dy, x, window, groups, dw, ctx=None, workspace=None):
    """Write the gradient of the convolution with respect to its weight into `dw`."""
    chunks = _batch_chunks(x, dw, window, workspace)
    if len(chunks) > 1:
        part = xp.empty_like(dw)
        dw[...] = 0
        for lo, hi in chunks:
            conv_backward_weight(xp, dy[lo:hi], x[lo:hi], window, groups, part, ctx)
            dw += part
        return
    n, channels = x.shape[:2]
    filters, size_out = dw.shape[0], prod(window.size_out)
    dy4 = dy.reshape((n, groups, filters // groups, size_out))
    pad_buf, cols_buf, acc = scratch(
        ctx, xp,
        None if window.is_pointwise or not window.has_padding else (
            x.shape[:2] + window.padded, x.dtype),
        None if window.is_pointwise else ((n, channels) + window.kernel + window.size_out,
                                          x.dtype),
        ((2, groups, filters // groups, prod(dw.shape[1:])), dw.dtype))
    if window.is_pointwise:
        cols = x.reshape((n, groups, channels // groups, size_out))
    else:
        padded = padded_input(xp, x, window, 0, pad_buf)
        cols = im2col(padded, window, cols_buf).reshape(n, groups, -1, size_out)
    # one batched GEMM (over groups) per sample: (Fg, O) x (O, Cg*K), summed over samples
    total, term = acc[0], acc[1]
    total.fill(0)
    for i in range(n):
        xp.matmul(dy4[i], cols[i].transpose(0, 2, 1), out=term)
        total += term
    dw[...] = total.reshape(dw.shape)


# The patch matrix of a whole batch can take gigabytes (VGG-16 at batch 8: 5.8 GB), and each
# temp-space copy keeps the largest buffer it served. Like MXNet's CPU kernels, Ember lowers a
# batch a few samples at a time: at most `workspace` MB of scratch, and never above this cap.
WORKSPACE_CAP_MB = 16


def workspace_bytes(attrs):
    return min(attrs['workspace'], WORKSPACE_CAP_MB) << 20


def _batch_chunks(x, weight, window, workspace):
    """[(start, stop)] sample ranges whose scratch fits `workspace` bytes (one range if None)."""
    n = x.shape[0]
    if workspace is None or n < 2 or window.is_pointwise:
        return [(0, n)]
    per_sample = x.dtype.itemsize * (prod(x.shape[1:2] + window.padded)
                                     + x.shape[1] * prod(window.kernel) * prod(window.size_out)
                                     + weight.shape[0] * prod(window.size_out))
    step = max(1, workspace // max(per_sample, 1))
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


# ----------------------------------------------------------------------------------------------
# Geometry and shape inference.

def _conv_window(op, attrs, size_in):
    kernel = attrs['kernel']
    stride, dilate, pad = spatial_defaults(op, attrs, len(kernel))
    size_out = tuple((n + 2 * p - dk) // s + 1 for n, p, dk, s in
                     zip(size_in, pad, dilated(kernel, dilate), stride))
    if any(o <= 0 for o in size_out):
        raise ShapeError(f'{op}: kernel {kernel} with dilate {dilate} does not fit data of '
                         f'spatial size {size_in} padded by {pad}')
    return make_window(kernel, stride, dilate, pad, size_in, size_out)


def _deconv_window(op, attrs, size_in):
    """The window of the convolution whose data gradient this deconvolution is."""
    kernel = attrs['kernel']
    nd = len(kernel)
    stride, dilate, pad, adj = spatial_defaults(op, attrs, nd, ('stride', 'dilate', 'pad', 'adj'))
    full = [s * (n - 1) + dk for s, n, dk in zip(stride, size_in, dilated(kernel, dilate))]
    target = attrs['target_shape']
    if target and any(target):
        if len(target) != nd:
            raise ShapeError(f'{op}: target_shape {target} has {len(target)} dims, kernel '
                             f'{kernel} has {nd}')
        excess = [f - t for f, t in zip(full, target)]
        if any(e < 0 for e in excess):
            raise ShapeError(f'{op}: target_shape {target} is larger than the largest output '
                             f'{tuple(full)} for input size {size_in}')
        adj, pad = [e % 2 for e in excess], [(e + 1) // 2 for e in excess]
    elif any(a >= s for a, s in zip(adj, stride)):
        raise ShapeError(f'{op}: adj {adj} must be smaller than stride {stride}')
    size_out = tuple(f - 2 * p + a for f, p, a in zip(full, pad, adj))
    if any(o <= 0 for o in size_out):
        raise ShapeError(f'{op}: pad {tuple(pad)} leaves no output for input size {size_in}')
    return make_window(kernel, stride, dilate, pad, size_out, size_in)


def _weight_shape(first, per_group, kernel, layout):
    if is_channel_last(layout):
        return (first,) + tuple(kernel) + (per_group,)
    return (first, per_group) + tuple(kernel)


def _check_groups(op, channels, filters, groups):
    if groups < 1 or channels % groups or filters % groups:
        raise ShapeError(f'{op}: num_group={groups} must divide both the {channels} input '
                         f'channels and num_filter={filters}')


def _split_data(op, attrs, data):
    nd = len(attrs['kernel'])
    if nd not in (1, 2, 3):
        raise ShapeError(f'{op}: kernel {attrs["kernel"]} must have 1, 2 or 3 dims')
    if len(data) != nd + 2:
        raise ShapeError(f'{op}: data has shape {tuple(data)}; a {nd}-D kernel '
                         f'{attrs["kernel"]} needs {nd + 2}-D data')
    check_layout(op, attrs['layout'], data)
    return split_layout(tuple(data), attrs['layout'])


def _conv_infer(attrs, in_shapes):
    op, in_shapes = 'Convolution', list(in_shapes)
    if in_shapes[0] is None:
        return in_shapes, [None]
    batch, channels, size_in = _split_data(op, attrs, in_shapes[0])
    filters, groups, layout = attrs['num_filter'], attrs['num_group'], attrs['layout']
    _check_groups(op, channels, filters, groups)
    weight = in_shapes[1]
    if weight is not None and len(weight) == len(size_in) + 2:
        per_group = weight[-1] if is_channel_last(layout) else weight[1]
        if per_group * groups != channels:
            raise ShapeError(f'{op}: data has {channels} channels, weight {tuple(weight)} '
                             f'expects {per_group * groups}')
    assign_shape(op, in_shapes, 1, 'weight',
                 _weight_shape(filters, channels // groups, attrs['kernel'], layout))
    if not attrs['no_bias']:
        assign_shape(op, in_shapes, 2, 'bias', (filters,))
    window = _conv_window(op, attrs, size_in)
    return in_shapes, [join_layout(batch, filters, window.size_out, layout)]


def _deconv_infer(attrs, in_shapes):
    op, in_shapes = 'Deconvolution', list(in_shapes)
    if in_shapes[0] is None:
        return in_shapes, [None]
    batch, channels, size_in = _split_data(op, attrs, in_shapes[0])
    filters, groups, layout = attrs['num_filter'], attrs['num_group'], attrs['layout']
    _check_groups(op, channels, filters, groups)
    weight = in_shapes[1]
    if weight is not None and len(weight) == len(size_in) + 2 and weight[0] != channels:
        raise ShapeError(f'{op}: data has {channels} channels, weight {tuple(weight)} '
                         f'expects {weight[0]}')
    assign_shape(op, in_shapes, 1, 'weight',
                 _weight_shape(channels, filters // groups, attrs['kernel'], layout))
    if not attrs['no_bias']:
        assign_shape(op, in_shapes, 2, 'bias', (filters,))
    window = _deconv_window(op, attrs, size_in)
    return in_shapes, [join_layout(batch, filters, window.size_in, layout)]


def _inputs(attrs):
    return ['data', 'weight'] if attrs['no_bias'] else ['data', 'weight', 'bias']


def _grad_outputs(attrs):
    names = ['data_grad', 'weight_grad']
    return names if attrs['no_bias'] else names + ['bias_grad']


def _backward_infer(attrs, in_shapes):
    """Inputs (out_grad, data, weight): gradients shaped like data, weight and the bias."""
    in_shapes = list(in_shapes)
    outs = [in_shapes[1], in_shapes[2]]
    if not attrs['no_bias']:
        outs.append((attrs['num_filter'],))
    return in_shapes, outs


def _backward_type(attrs, in_dtypes):
    ins, outs = same_type(attrs, in_dtypes)
    return ins, outs * len(_grad_outputs(attrs))


def _spatial_axes(ndim):
    return (0,) + tuple(range(2, ndim))


def _add_bias(y, bias):
    y += bias.reshape((1, -1) + (1,) * (y.ndim - 2))


# ----------------------------------------------------------------------------------------------
# Convolution.

def forward(attrs, data, weight, bias, out, ctx, residual=None, act_type=None,
            weight_scale=None, weight_version=None):
    """out = act(conv(data, weight * weight_scale) + bias + residual) for Convolution's
    `attrs`, with arrays laid out as ``attrs['layout']`` says (OHWI weights for channel-last
    data; any strides). `residual` (shaped like `out`) may be `out` itself; `bias` is None
    with no_bias; `weight_scale` (per output channel, a folded BatchNorm) None for none.
    `weight_version` (:func:`weight_token`) lets algorithms keep what they derive from the
    weight between calls: oneDNN its reordered copy (made from the scaled weight), the others
    the scaled, contiguous weight they need.

    >>> import numpy as np
    >>> from ember.op import registry
    >>> attrs = registry.get('Convolution').parse_attrs({'kernel': (1, 1), 'num_filter': 1})
    >>> x, w = np.ones((1, 2, 2, 2), np.float32), np.ones((1, 2, 1, 1), np.float32)
    >>> out = np.empty((1, 1, 2, 2), np.float32)
    >>> forward(attrs, x, w, np.array([0.5], np.float32), out, registry.KernelContext(None))
    >>> out.ravel()
    array([2.5, 2.5, 2.5, 2.5], dtype=float32)
    """
    if ctx.xp is not np:
        if weight_scale is not None:
            weight = weight * weight_scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        _generic_forward(attrs, data, weight, bias, out, ctx, residual, act_type)
        return
    arrays = (attrs, data, bias, out, residual, act_type, weight_scale)
    replay = ctx.memo.get('forward')
    if replay is not None and replay.serves(arrays, weight, ctx) \
            and replay.prepared.run(weight_version):
        return
    calls = _Calls(ConvCall(attrs, data, weight, bias, out, residual, act_type, weight_version,
                            weight_scale), ctx)
    conv_winograd.note_graph(ctx.variable_bytes)
    algorithm = conv_algorithms.choose(calls.problem, _tune_mode(attrs),
                                       attrs['workspace'] << 20, onednn_provider.enabled(),
                                       calls.trial, ctx.deterministic)
    if (algorithm.name == 'winograd4' and weight_version is not None
            and conv_winograd.compiled(calls.problem, 4)
            and not conv_winograd.can_keep(calls.problem, weight_version)):
        calls.unkept = True
        algorithm = conv_algorithms.choose_past_budget(calls.problem, onednn_provider.enabled(),
                                                       calls.trial)
    if calls.measured and ctx.temp is not None:
        # the measured candidates' scratch (140 MB over resnet50) is not needed any more: the
        # winner's, if any, is allocated again at its own size by its first call
        ctx.temp.release()
    if calls.measured:
        # what the losing candidates kept of the weight goes (the winner's stays)
        _plain_weights.discard(weight_version)
        conv_winograd.discard_kept(weight_version, keep=algorithm.name)
        if algorithm.name != 'onednn' and weight_version is not None:
            onednn.discard_kept(weight_version)
    done = calls.run(algorithm)
    if not done:
        calls.run(conv_algorithms.numpy_rule(calls.problem))
    # past the kept budget the choice follows the room left, which changes with other layers
    if isinstance(done, (onednn_provider.Prepared, conv_winograd.Prepared)) \
            and not calls.measured and not calls.unkept:
        threads = _threads(algorithm.name, ctx.deterministic) \
            if isinstance(done, conv_winograd.Prepared) else None
        ctx.memo['forward'] = _Replay(arrays, weight, done, threads)
    else:
        ctx.memo.pop('forward', None)


class _Replay:
    """A node's oneDNN or compiled Winograd convolution as its last call ran it
    (``ctx.memo``), run again while the node's arrays are the same and nothing that chose it
    has changed: the measured choices, the tuning mode, the budget of kept weights, and for
    Winograd its kernel threads. Working the call out again costs about 25 us for oneDNN (1
    of resnet50_v1's 21 ms at batch 1) and 60 us for Winograd."""

    __slots__ = ('arrays', 'weight', 'weight_at', 'chosen', 'prepared', 'threads')

    def __init__(self, arrays, weight, prepared, threads=None):
        self.arrays, self.weight, self.prepared = arrays, weight, prepared
        self.weight_at = accel.data_address(weight)
        self.chosen = self._choosing(arrays[0])
        self.threads = threads

    @staticmethod
    def _choosing(attrs):
        return (conv_algorithms.generation(), _tune_mode(attrs), conv_winograd.kept_budget())

    def serves(self, arrays, weight, ctx) -> bool:
        """Whether a call on `arrays` (forward's, the weight aside) and `weight` (the same
        array, or the same view of the same one: a kernel may pass a fresh transposed view
        each call) would choose and build the same."""
        kept = self.weight
        if self.threads is not None and _threads('winograd4', ctx.deterministic) != self.threads:
            return False
        return (all(map(operator.is_, arrays, self.arrays))
                and (weight is kept or (weight.base is not None and weight.base is kept.base
                                        and weight.shape == kept.shape
                                        and weight.strides == kept.strides
                                        and accel.data_address(weight) == self.weight_at))
                and self._choosing(arrays[0]) == self.chosen)


def weight_token(ctx, *indices):
    """``((engine variable, version), ...)`` of the inputs at `indices` (None ones skipped)
    that a convolution's weight is made from, in inference; None in training or when one of
    them is not a variable of the graph (it may then change between any two calls)."""
    if ctx.is_train:
        return None
    pairs = []
    for index in indices:
        if index is not None:
            pair = ctx.input_version(index)
            if pair is None:
                return None
            pairs.append(pair)
    return tuple(pairs) or None


# the scaled, contiguous weights the NumPy algorithms need when the graph hands a convolution
# its weight transposed or unscaled
_plain_weights = KeptByToken()


def plain_weight_bytes() -> int:
    """Bytes of scaled, contiguous weights kept for the NumPy algorithms."""
    return _plain_weights.nbytes()


class _Calls:
    """Runs algorithms on one call's arrays: the call itself, and the trials of measurement."""

    def __init__(self, call, ctx, gradient=''):
        self.call, self.ctx = call, ctx
        # a gradient's call reads the output gradient as x: the problem is of the data (the
        # data gradient's out, the weight gradient's weight)
        data = {'': call.x, 'data': call.out, 'weight': call.weight}[gradient]
        self.problem = problem_of(call.attrs, data, gradient)
        self.budget = workspace_bytes(call.attrs)
        self._trial = None
        # Winograd's transformed weights are past their budget: it transforms every call
        self.unkept = False

    def run(self, algorithm, call=None):
        threads = _threads(algorithm.name, self.ctx.deterministic)
        call = call or self.call
        if self.unkept and algorithm.name == 'winograd4':
            call = dataclasses.replace(call, weight_version=None)
        takes_any_weight = self.problem.gradient \
            or algorithm.name in ('onednn', 'pointwise', 'winograd_line') \
            or (algorithm.name in ('winograd4', 'winograd4_fused')
                and conv_winograd.compiled(self.problem, 4)) \
            or (algorithm.name == 'gemm' and conv_gemm.packs(self.problem))
        if not takes_any_weight and (call.weight_scale is not None
                                     or not call.weight.flags.c_contiguous):
            call = dataclasses.replace(call, weight=self._plain_weight(call), weight_scale=None)
        return algorithm.run(self.problem, call, self.budget, self._alloc, threads)

    def _plain_weight(self, call):
        """The weight as the NumPy algorithms need it: scaled and contiguous."""
        def make():
            weight = call.weight
            if call.weight_scale is not None:
                scale = call.weight_scale.reshape((-1,) + (1,) * (weight.ndim - 1))
                return np.ascontiguousarray(weight * scale)
            return np.ascontiguousarray(weight)
        return _plain_weights.get(call.weight_version, make)

    @property
    def measured(self) -> bool:
        """Whether this call measured the algorithms."""
        return self._trial is not None

    def trial(self, algorithm):
        """Runs the convolution alone; into the output, unless it holds the residual (then
        into a temporary). False where the algorithm declines; else a function that runs it
        again as the node's later calls would: a prepared call (oneDNN's, the compiled
        Winograd's) replayed, since that is what the layer then costs (a fused Winograd
        layer at batch 1 spent about 10% of its trials working its call out again)."""
        if self._trial is None:
            c = self.call
            aliased = c.residual is not None and np.may_share_memory(c.out, c.residual)
            out = np.empty_like(c.out) if aliased else c.out
            self._trial = ConvCall(c.attrs, c.x, c.weight, c.bias, out,
                                   weight_version=c.weight_version,
                                   weight_scale=c.weight_scale, ctx=c.ctx)
        done = self.run(algorithm, self._trial)
        if not done:
            return False
        version = self._trial.weight_version

        def again():
            # a replay that finds its weights changed runs nothing: the call again
            if not (isinstance(done, (onednn_provider.Prepared, conv_winograd.Prepared))
                    and done.run(version)):
                self.run(algorithm, self._trial)
        return again

    def _alloc(self, specs):
        return scratch(self.ctx, np, *specs)


def problem_of(attrs, data, gradient='') -> ConvProblem:
    """The :class:`~ember.op.nn.conv_algorithms.ConvProblem` of a Convolution call, or of its
    `gradient` ('data' or 'weight'), whose `data` is the array of that shape. The same object
    for the same problem: what it derives, such as its window, is worked out once."""
    return _problem(attrs['layout'], data.shape, data.dtype, attrs['num_filter'],
                    attrs['num_group'], attrs['kernel'], attrs.get('stride'),
                    attrs.get('dilate'), attrs.get('pad'), gradient)


@functools.lru_cache(maxsize=1024)
def _problem(layout, shape, dtype, filters, groups, kernel, stride, dilate, pad, gradient):
    batch, channels, size_in = split_layout(shape, layout)
    stride, dilate, pad = spatial_defaults(
        'Convolution', {'kernel': kernel, 'stride': stride, 'dilate': dilate, 'pad': pad},
        len(size_in))
    return ConvProblem(is_channel_last(layout), batch, channels, filters, groups, tuple(kernel),
                       stride, dilate, pad, tuple(size_in), dtype.name, gradient)


_TUNE_MODES = {'off': '0', 'limited_workspace': '1', 'fastest': '2'}


def _tune_mode(attrs):
    """The operator's cudnn_tune, else MXNET_CUDNN_AUTOTUNE_DEFAULT."""
    tune = attrs.get('cudnn_tune')
    return _TUNE_MODES[tune] if tune is not None else config.get('MXNET_CUDNN_AUTOTUNE_DEFAULT')


def _threads(algorithm, deterministic):
    """Kernel threads of a NumPy algorithm: the operator's, at most MXNET_CPU_NNPACK_NTHREADS
    for the fast (Winograd) kernels, and one under MXNET_ENFORCE_DETERMINISM (GEMMs over other
    row splits round differently)."""
    if deterministic:
        return 1
    threads = engine.kernel_threads()
    if algorithm.startswith('winograd'):
        threads = min(threads, config.get('MXNET_CPU_NNPACK_NTHREADS'))
    return max(1, threads)


def _generic_forward(attrs, data, weight, bias, out, ctx, residual, act_type):
    """Any array module: im2col + GEMM, then bias, residual (aside, since it may be `out`'s
    memory) and activation."""
    xp, layout = ctx.xp, attrs['layout']
    target = out if residual is None else xp.empty_like(out)
    x, y = channel_first(xp, data, layout), channel_first(xp, target, layout)
    window = _conv_window('Convolution', attrs, x.shape[2:])
    conv_forward(xp, x, weight_channel_first(xp, weight, layout), window, attrs['num_group'],
                 y, ctx, workspace_bytes(attrs))
    if bias is not None:
        _add_bias(y, bias)
    if residual is not None:
        xp.add(target, residual, out=out)
    if act_type == 'relu':
        xp.maximum(out, 0, out=out)
    elif act_type is not None:
        out[...] = ACTIVATIONS[act_type][0](xp, out)


def _conv_kernel(attrs, ins, outs, ctx):
    forward(attrs, ins[0], ins[1], None if attrs['no_bias'] else ins[2], outs[0], ctx,
            weight_version=weight_token(ctx, 1))


def _conv_backward_kernel(attrs, ins, outs, ctx):
    backward(attrs, *ins, outs, ctx)


def backward(attrs, dy, x, weight, outs, ctx):
    """Convolution's gradients from the output gradient `dy`, the data `x` and the `weight`
    into `outs` (data, weight and, without no_bias, bias gradients; any strides), laid out as
    ``attrs['layout']`` says; outputs in ``ctx.unused_outputs`` may be left unwritten."""
    dbias = None if attrs['no_bias'] else outs[2]
    onednn = ctx.xp is np and onednn_provider.enabled()
    # nobody reads the data gradient of a network's first convolution: 3% of a resnet50
    # training step went into it
    if 0 in ctx.unused_outputs:
        pass
    elif ctx.xp is not np:
        numpy_backward_data(attrs, dy, weight, outs[0], ctx)
    else:
        _backward_data(attrs, dy, weight, outs[0], ctx, onednn)
    if ctx.xp is not np:
        numpy_backward_weights(attrs, dy, x, outs[1], dbias, ctx)
    else:
        # oneDNN splits the weight gradient's sum over the batch by thread count: other
        # counts, other bits, which MXNET_ENFORCE_DETERMINISM forbids
        _backward_weights(attrs, dy, x, outs[1], dbias, ctx, onednn and not ctx.deterministic)


def _backward_data(attrs, dy, weight, dx, ctx, onednn):
    """dx from oneDNN's backward-data primitive, NumPy's GEMM and col2im, or Winograd."""
    _chosen_gradient(ConvCall(attrs, dy, weight, None, dx, ctx=ctx), 'data', onednn,
                     lambda: numpy_backward_data(attrs, dy, weight, dx, ctx))


def _backward_weights(attrs, dy, x, dweight, dbias, ctx, onednn):
    """dweight (and dbias) from oneDNN's backward-weights primitive, NumPy's im2col and GEMM,
    or Winograd."""
    _chosen_gradient(ConvCall(attrs, dy, x, dbias, dweight, ctx=ctx), 'weight', onednn,
                     lambda: numpy_backward_weights(attrs, dy, x, dweight, dbias, ctx))


def _chosen_gradient(call, gradient, onednn, fallback):
    """Runs `call`, a Convolution gradient ('data' or 'weight'; see ConvCall), with the
    algorithm ``MXNET_CUDNN_AUTOTUNE_DEFAULT`` chooses; `fallback()` where it declines."""
    ctx = call.ctx
    calls = _Calls(call, ctx, gradient=gradient)
    algorithm = conv_algorithms.choose(calls.problem, _tune_mode(call.attrs),
                                       call.attrs['workspace'] << 20, onednn, calls.trial,
                                       ctx.deterministic)
    if calls.measured and ctx.temp is not None:
        ctx.temp.release()
    if not calls.run(algorithm):
        fallback()


def _pointwise_channel_last(attrs, ctx):
    """Whether Convolution's `attrs` describe a 1x1, unpadded, ungrouped convolution of
    channel-last NumPy data: its gradients are then single GEMMs over the (N*H*W, C) rows."""
    return (ctx.xp is np and is_channel_last(attrs['layout']) and attrs['num_group'] == 1
            and all(k == 1 for k in attrs['kernel']) and not any(attrs['pad']))


def _rows(array):
    """Channel-last `array` as (rows, channels), a view where possible."""
    return array.reshape((-1, array.shape[-1]))


def _sampled(attrs, array):
    """The positions of channel-last `array` that a 1x1 convolution with `attrs` reads."""
    stride = attrs['stride'] or (1,) * (array.ndim - 2)
    if all(step == 1 for step in stride):
        return array
    return array[(slice(None),) + tuple(slice(None, None, step) for step in stride)]


def _pointwise_data_gradient(attrs, dy, weight, dx):
    """dx of a 1x1 channel-last convolution: dy rows (N*H'*W', F) times the (F, C) weight,
    scattered to the strided positions (zeros elsewhere)."""
    w = weight.reshape((weight.shape[0], weight.shape[-1]))
    target = _sampled(attrs, dx)
    rows = reshape_view(target, (-1, dx.shape[-1]))
    if target is not dx:
        dx.fill(0)
    if rows is not None:
        np.matmul(_rows(dy), w, out=rows)
    else:
        target[...] = np.matmul(_rows(dy), w).reshape(target.shape)


def _pointwise_weight_gradient(attrs, dy, x, dweight, dbias):
    """dweight (F, 1.., C) of a 1x1 channel-last convolution: dy rows transposed times the
    rows of x it read; dbias the column sums of dy."""
    dy_rows = _rows(dy)
    x_rows = _rows(np.ascontiguousarray(_sampled(attrs, x)))
    target = reshape_view(dweight, (dweight.shape[0], dweight.shape[-1]))
    if target is not None:
        np.matmul(dy_rows.T, x_rows, out=target)
    else:
        dweight[...] = np.matmul(dy_rows.T, x_rows).reshape(dweight.shape)
    if dbias is not None:
        dbias[...] = dy_rows.sum(axis=0)


def numpy_backward_data(attrs, dy, weight, dx, ctx):
    """The data gradient by GEMM and col2im, in any array module."""
    if _pointwise_channel_last(attrs, ctx):
        _pointwise_data_gradient(attrs, dy, weight, dx)
        return
    xp, layout = ctx.xp, attrs['layout']
    dxc = channel_first(xp, dx, layout)
    window = _conv_window('Convolution', attrs, dxc.shape[2:])
    conv_backward_data(xp, channel_first(xp, dy, layout), weight_channel_first(xp, weight, layout),
                       window, attrs['num_group'], dxc, ctx, workspace_bytes(attrs))


def numpy_backward_weights(attrs, dy, x, dweight, dbias, ctx):
    """The weight (and bias) gradient by im2col and GEMM, in any array module."""
    if _pointwise_channel_last(attrs, ctx):
        _pointwise_weight_gradient(attrs, dy, x, dweight, dbias)
        return
    xp, layout = ctx.xp, attrs['layout']
    dyc, xc = channel_first(xp, dy, layout), channel_first(xp, x, layout)
    window = _conv_window('Convolution', attrs, xc.shape[2:])
    conv_backward_weight(xp, dyc, xc, window, attrs['num_group'],
                         weight_channel_first(xp, dweight, layout), ctx, workspace_bytes(attrs))
    if dbias is not None:
        dbias[...] = dyc.sum(axis=_spatial_axes(dyc.ndim))


def _conv_gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_Convolution(out_grads[0], inputs[0], inputs[1], **attrs)
    return outputs_of(grads, len(_grad_outputs(attrs)))


register('Convolution', _conv_kernel, infer_shape=_conv_infer, inputs=_inputs,
         params=CONV_PARAMS, gradient=_conv_gradient, resources=('temp',),
         doc='N-D convolution of data (N, C, *spatial) with weight (F, C/num_group, *kernel).')

register('_backward_Convolution', _conv_backward_kernel, infer_shape=_backward_infer,
         infer_type=_backward_type, inputs=('out_grad', 'data', 'weight'),
         outputs=_grad_outputs, params=CONV_PARAMS, resources=('temp',))


# ----------------------------------------------------------------------------------------------
# Deconvolution (transposed convolution).

def _deconv_kernel(attrs, ins, outs, ctx):
    xp, layout = ctx.xp, attrs['layout']
    x = channel_first(xp, ins[0], layout)
    y = channel_first(xp, outs[0], layout)
    window = _deconv_window('Deconvolution', attrs, x.shape[2:])
    weight = weight_channel_first(xp, ins[1], layout)
    conv_backward_data(xp, x, weight, window, attrs['num_group'], y, ctx,
                       workspace_bytes(attrs))
    if not attrs['no_bias']:
        _add_bias(y, ins[2])


def _deconv_backward_kernel(attrs, ins, outs, ctx):
    xp, layout, groups = ctx.xp, attrs['layout'], attrs['num_group']
    dy, x = channel_first(xp, ins[0], layout), channel_first(xp, ins[1], layout)
    weight = weight_channel_first(xp, ins[2], layout)
    window = _deconv_window('Deconvolution', attrs, x.shape[2:])
    budget = workspace_bytes(attrs)
    conv_forward(xp, dy, weight, window, groups, channel_first(xp, outs[0], layout), ctx, budget)
    conv_backward_weight(xp, x, dy, window, groups, weight_channel_first(xp, outs[1], layout),
                         ctx, budget)
    if not attrs['no_bias']:
        outs[2][...] = dy.sum(axis=_spatial_axes(dy.ndim))


def _deconv_gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_Deconvolution(out_grads[0], inputs[0], inputs[1], **attrs)
    return outputs_of(grads, len(_grad_outputs(attrs)))


register('Deconvolution', _deconv_kernel, infer_shape=_deconv_infer, inputs=_inputs,
         params=DECONV_PARAMS, gradient=_deconv_gradient, resources=('temp',),
         doc='Transposed convolution: the data gradient of Convolution with the same window; '
             'weight is (C, num_filter/num_group, *kernel).')

register('_backward_Deconvolution', _deconv_backward_kernel, infer_shape=_backward_infer,
         infer_type=_backward_type, inputs=('out_grad', 'data', 'weight'),
         outputs=_grad_outputs, params=DECONV_PARAMS, resources=('temp',))
