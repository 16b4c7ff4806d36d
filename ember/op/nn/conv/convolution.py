"""The Convolution and Deconvolution operators over 1-D, 2-D and 3-D data.

Convolution's forward pass (and ``_sg_conv``'s, with its residual and activation) is
:func:`forward`: on the CPU one of the algorithms of :mod:`ember.op.nn.conv.algorithms`,
chosen per layer by ``MXNET_CUDNN_AUTOTUNE_DEFAULT`` or the operator's ``cudnn_tune``, and a
node's prepared call replayed while nothing that chose it has changed (:class:`_Replay`); its
backward pass (:func:`backward`) chooses the same way among the gradients' algorithms. On a
GPU :mod:`ember.op.nn.conv.cuda` chooses among cuDNN's algorithms the same way. Deconvolution
(the adjoint: its forward pass is the convolution's data gradient and vice versa) runs the
generic kernels of :mod:`ember.op.nn.conv.generic`.
"""
from __future__ import annotations

import dataclasses
import functools
import operator

import numpy as np

from ember import accel, config, engine
from ember.op.nn import onednn_provider
from ember.op.nn._common import (
    assign_shape, channel_first, check_layout, dilated, is_channel_last, join_layout,
    layout_param, make_window, outputs_of, scratch, shape_param, spatial_defaults,
    split_layout, weight_channel_first, weight_token)
from ember.op.nn.conv import algorithms, cuda, generic, kept
from ember.op.nn.conv.algorithms import ConvCall, ConvProblem, TuneMode
from ember.op.nn.conv.common import plain
from ember.op.nn.conv.generic import (
    add_bias, conv_backward_data, conv_backward_weight, conv_forward, conv_window,
    spatial_axes, workspace_bytes)
from ember.op.nn.conv.state import PLAIN, STATE
from ember.op.registry import (
    REQUIRED, Param, ShapeError, p_bool, p_enum, p_int, p_optional, p_shape, register, same_type)

__all__ = ['CONV_PARAMS', 'DECONV_PARAMS', 'forward', 'backward', 'problem_of']

_TUNE = p_optional(p_enum(*(mode.name.lower() for mode in TuneMode)))

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


def _params(*entries):
    """Parameters in order: Convolution's by name, the others given."""
    by_name = {param.name: param for param in CONV_PARAMS}
    return tuple(by_name[entry] if isinstance(entry, str) else entry for entry in entries)


DECONV_PARAMS = _params(
    'kernel', 'stride', 'dilate', 'pad',
    shape_param('adj', doc='Extra output size at the end of each dim (< stride).'),
    shape_param('target_shape', doc='Output spatial size; overrides pad and adj.'),
    'num_filter', 'num_group',
    Param('workspace', p_int, 512, 'Accepted for compatibility.'),
    Param('no_bias', p_bool, True),
    Param('cudnn_tune', _TUNE, None, 'Accepted for compatibility.'),
    'cudnn_off', 'layout')


# ----------------------------------------------------------------------------------------------
# Geometry and shape inference.

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
    window = conv_window(op, attrs, size_in)
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


# ----------------------------------------------------------------------------------------------
# Convolution.

def forward(attrs, data, weight, bias, out, ctx, residual=None, act_type=None,
            weight_scale=None, weight_version=None):
    """out = act(conv(data, weight * weight_scale) + bias + residual) for Convolution's
    `attrs`, with arrays laid out as ``attrs['layout']`` says (OHWI weights for channel-last
    data; any strides). `residual` (shaped like `out`) may be `out` itself; `bias` is None
    with no_bias; `weight_scale` (per output channel, a folded BatchNorm) None for none.
    `weight_version` (:func:`~ember.op.nn._common.weight_token`) lets algorithms keep what
    they derive from the weight between calls: oneDNN its reordered copy (made from the scaled
    weight), the others the scaled, contiguous weight they need.

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
        cuda.forward(ConvCall(attrs, data, weight, bias, out, residual, act_type,
                              weight_scale=weight_scale, ctx=ctx),
                     problem_of(attrs, data), _tune_mode(attrs))
        return
    arrays = (attrs, data, bias, out, residual, act_type, weight_scale)
    replay = ctx.memo.get('forward')
    if replay is not None and replay.serves(arrays, weight, ctx) \
            and replay.prepared.run(weight_version):
        return
    calls = _Calls(ConvCall(attrs, data, weight, bias, out, residual, act_type, weight_version,
                            weight_scale), ctx)
    kept.note_graph(ctx.variable_bytes)
    onednn_on = onednn_provider.enabled()
    algorithm = algorithms.choose(calls.problem, _tune_mode(attrs), attrs['workspace'] << 20,
                                  onednn_on, calls.trial, ctx.deterministic)
    if (weight_version is not None and algorithm.has_room is not None
            and not algorithm.has_room(calls.problem, weight_version)):
        calls.unkept = True
        algorithm = algorithms.choose_past_budget(calls.problem, algorithm, onednn_on,
                                                  calls.trial)
    if calls.measured and ctx.temp is not None:
        # the measured candidates' scratch is not needed any more: the winner's, if any, is
        # allocated again at its own size by its first call
        ctx.temp.release()
    if calls.measured:
        # what the losing candidates kept of the weight goes (the winner's stays)
        kept.discard_others(weight_version, keep=algorithm.kept_store)
    done = calls.run(algorithm)
    if not done:
        calls.run(algorithms.numpy_rule(calls.problem))
    # past the kept budget the choice follows the room left, which changes with other layers
    if _is_prepared(algorithm, done) and not calls.measured and not calls.unkept:
        ctx.memo['forward'] = _Replay(arrays, weight, done, algorithm, ctx.deterministic)
    else:
        ctx.memo.pop('forward', None)


def _is_prepared(algorithm, done) -> bool:
    """Whether an algorithm's run handed back a prepared call (rather than True or False)."""
    return algorithm.prepared and not isinstance(done, bool)


class _Replay:
    """A node's prepared convolution (oneDNN's or a compiled one) as its last call ran it
    (``ctx.memo``), run again while the node's arrays are the same and nothing that chose it
    has changed: the measured choices, the tuning mode, the budget of kept weights, and for
    Ember's own kernels their thread count. Working the call out again costs tens of
    microseconds (call_overhead.py)."""

    __slots__ = ('arrays', 'weight', 'weight_at', 'chosen', 'prepared', 'algorithm', 'threads')

    def __init__(self, arrays, weight, prepared, algorithm, deterministic):
        self.arrays, self.weight, self.prepared = arrays, weight, prepared
        self.weight_at = accel.data_address(weight)
        self.chosen = self._choosing(arrays[0])
        self.algorithm = algorithm
        # oneDNN's OpenMP threads follow the kernel threads on each call by themselves
        self.threads = None if algorithm.uses_onednn else _threads(algorithm, deterministic)

    @staticmethod
    def _choosing(attrs):
        return (STATE.choices.generation, _tune_mode(attrs), kept.kept_budget())

    def serves(self, arrays, weight, ctx) -> bool:
        """Whether a call on `arrays` (forward's, the weight aside) and `weight` (the same
        array, or the same view of the same one: a kernel may pass a fresh transposed view
        each call) would choose and build the same."""
        kept_weight = self.weight
        if self.threads is not None \
                and _threads(self.algorithm, ctx.deterministic) != self.threads:
            return False
        return (all(map(operator.is_, arrays, self.arrays))
                and (weight is kept_weight
                     or (weight.base is not None and weight.base is kept_weight.base
                         and weight.shape == kept_weight.shape
                         and weight.strides == kept_weight.strides
                         and accel.data_address(weight) == self.weight_at))
                and self._choosing(arrays[0]) == self.chosen)


# the scaled, contiguous weights the NumPy algorithms need when the graph hands a convolution
# its weight transposed or unscaled
_plain_weights = STATE.kept[PLAIN]


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
        # the chosen algorithm's kept weights are past their budget: it transforms every call
        self.unkept = False

    def run(self, algorithm, call=None):
        threads = _threads(algorithm, self.ctx.deterministic)
        call = call or self.call
        if self.unkept and algorithm.has_room is not None:
            call = dataclasses.replace(call, weight_version=None)
        if not algorithm.takes_raw_weight(self.problem) \
                and (call.weight_scale is not None or not call.weight.flags.c_contiguous):
            call = dataclasses.replace(call, weight=self._plain_weight(call), weight_scale=None)
        return algorithm.run(self.problem, call, self.budget, self._alloc, threads)

    def _plain_weight(self, call):
        """The weight as the NumPy algorithms need it: scaled and contiguous."""
        return _plain_weights.get(call.weight_version,
                                  lambda: plain(call.weight, call.weight_scale))

    @property
    def measured(self) -> bool:
        """Whether this call measured the algorithms."""
        return self._trial is not None

    def trial(self, algorithm):
        """Runs the convolution alone; into the output, unless it holds the residual (then
        into a temporary). False where the algorithm declines; else a function that runs it
        again as the node's later calls would: a prepared call replayed, since that is what
        the layer then costs (working the call out again would weigh on a fused layer's
        trials at batch 1)."""
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
            if not (_is_prepared(algorithm, done) and done.run(version)):
                self.run(algorithm, self._trial)
        return again

    def _alloc(self, specs):
        return scratch(self.ctx, np, *specs)


def problem_of(attrs, data, gradient='') -> ConvProblem:
    """The :class:`~ember.op.nn.conv.algorithms.ConvProblem` of a Convolution call, or of its
    `gradient` ('data' or 'weight'), whose `data` is the array of that shape. The same object
    for the same problem: what it derives, such as its window, is worked out once."""
    return _problem(attrs['layout'], data.shape, data.dtype, attrs['num_filter'],
                    attrs['num_group'], attrs['kernel'], attrs.get('stride'),
                    attrs.get('dilate'), attrs.get('pad'), gradient,
                    'cpu' if isinstance(data, np.ndarray) else 'gpu')


@functools.lru_cache(maxsize=1024)
def _problem(layout, shape, dtype, filters, groups, kernel, stride, dilate, pad, gradient,
             device='cpu'):
    batch, channels, size_in = split_layout(shape, layout)
    stride, dilate, pad = spatial_defaults(
        'Convolution', {'kernel': kernel, 'stride': stride, 'dilate': dilate, 'pad': pad},
        len(size_in))
    return ConvProblem(is_channel_last(layout), batch, channels, filters, groups, tuple(kernel),
                       stride, dilate, pad, tuple(size_in), dtype.name, gradient, device)


# cudnn_tune's names -> the tuning modes
_TUNE_MODES = {mode.name.lower(): mode for mode in TuneMode}


def _tune_mode(attrs):
    """The operator's cudnn_tune, else MXNET_CUDNN_AUTOTUNE_DEFAULT (its text, equal to the
    TuneMode)."""
    tune = attrs.get('cudnn_tune')
    return _TUNE_MODES[tune] if tune is not None else config.get('MXNET_CUDNN_AUTOTUNE_DEFAULT')


def _threads(algorithm, deterministic):
    """Kernel threads of an algorithm of Ember's own: the operator's, at most
    MXNET_CPU_NNPACK_NTHREADS for the Winograd kernels (`nnpack_threads`), and one under
    MXNET_ENFORCE_DETERMINISM (GEMMs over other row splits round differently)."""
    if deterministic:
        return 1
    threads = engine.kernel_threads()
    if algorithm.nnpack_threads:
        threads = min(threads, config.get('MXNET_CPU_NNPACK_NTHREADS'))
    return max(1, threads)


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
    onednn_on = ctx.xp is np and onednn_provider.enabled()
    # nobody reads the data gradient of a network's first convolution (compare.py --train)
    if 0 in ctx.unused_outputs:
        pass
    elif ctx.xp is not np:
        cuda.backward_data(ConvCall(attrs, dy, weight, None, outs[0], ctx=ctx),
                           problem_of(attrs, outs[0], 'data'), _tune_mode(attrs))
    else:
        _backward_data(attrs, dy, weight, outs[0], ctx, onednn_on)
    if ctx.xp is not np:
        cuda.backward_weights(ConvCall(attrs, dy, x, dbias, outs[1], ctx=ctx),
                              problem_of(attrs, x, 'weight'), _tune_mode(attrs))
    else:
        # oneDNN splits the weight gradient's sum over the batch by thread count: other
        # counts, other bits, which MXNET_ENFORCE_DETERMINISM forbids
        _backward_weights(attrs, dy, x, outs[1], dbias, ctx, onednn_on and not ctx.deterministic)


def _backward_data(attrs, dy, weight, dx, ctx, onednn_on):
    """dx by the algorithm chosen for the data gradient."""
    _chosen_gradient(ConvCall(attrs, dy, weight, None, dx, ctx=ctx), 'data', onednn_on,
                     lambda: generic.backward_data(attrs, dy, weight, dx, ctx))


def _backward_weights(attrs, dy, x, dweight, dbias, ctx, onednn_on):
    """dweight (and dbias) by the algorithm chosen for the weight gradient."""
    _chosen_gradient(ConvCall(attrs, dy, x, dbias, dweight, ctx=ctx), 'weight', onednn_on,
                     lambda: generic.backward_weights(attrs, dy, x, dweight, dbias, ctx))


def _chosen_gradient(call, gradient, onednn_on, fallback):
    """Runs `call`, a Convolution gradient ('data' or 'weight'; see ConvCall), with the
    algorithm the tuning mode chooses; `fallback()` where it declines."""
    ctx = call.ctx
    calls = _Calls(call, ctx, gradient=gradient)
    algorithm = algorithms.choose(calls.problem, _tune_mode(call.attrs),
                                  call.attrs['workspace'] << 20, onednn_on, calls.trial,
                                  ctx.deterministic)
    if calls.measured and ctx.temp is not None:
        ctx.temp.release()
    if not calls.run(algorithm):
        fallback()


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
        add_bias(y, ins[2])


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
        outs[2][...] = dy.sum(axis=spatial_axes(dy.ndim))


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
