"""Operators MXNet 1.x programs use beyond the core families.

Sums and normalisation (``add_n``/``ElementWiseSum``, ``L2Normalization``, ``moments``,
``nansum``, ``nanprod``), losses (``softmax_cross_entropy``, ``SVMOutput``), shapes and layout
(``slice_like``, ``diag``, ``shape_array``, ``size_array``, ``scatter_nd``, ``argmax_channel``,
``depth_to_space``, ``space_to_depth``, ``khatri_rao``), ``ROIPooling``, and random draws
(``_random_exponential``, ``_random_gamma``, ``_random_poisson``,
``_random_negative_binomial``, ``_random_generalized_negative_binomial``, ``_shuffle``).

Where a gradient needs shapes that a symbol does not know until binding, it is a
``_backward_*`` operator, so the rule works with ``F = mx.sym`` as well as ``mx.nd``.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('depth_to_space')
>>> attrs = op.parse_attrs({'block_size': 2})
>>> op.infer_shape(attrs, [(1, 8, 2, 3)])[1]
[(1, 2, 4, 6)]
>>> registry.get('ElementWiseSum') is registry.get('add_n')
True
"""
from __future__ import annotations

import string

import numpy as np

from ember.base import EmberError, prod
from ember.op.init import CTX, SHAPE
from ember.op.nn._common import accumulation_dtype, assign_shape, typed_like_first
from ember.op.reduce import AXES_PARAMS, keepdims_shape, reduce_axes, reduced_shape
from ember.op.registry import (REQUIRED, Param, ShapeError, p_axes, p_bool, p_dtype, p_enum,
                               p_float, p_int, p_optional, p_shape, register, same_shape)

__all__ = ['l2_axes']


def _variadic_names(attrs):
    return [f'arg{i}' for i in range(attrs['num_args'])]


def _like_input(index):
    """An infer_shape or infer_type whose one output takes input `index`'s shape or dtype."""
    return lambda attrs, values: (list(values), [values[index]])


NUM_ARGS = Param('num_args', p_int, REQUIRED, 'number of inputs')


# ----------------------------------------------------------------------------------------------
# add_n / ElementWiseSum

def _add_n_kernel(attrs, ins, outs, ctx):
    xp, out = ctx.xp, outs[0]
    if len(ins) == 1:
        if out is not ins[0]:
            out[...] = ins[0]
        return
    xp.add(ins[0], ins[1], out=out)
    for extra in ins[2:]:
        xp.add(out, extra, out=out)


register('add_n', _add_n_kernel, inputs=_variadic_names, infer_shape=same_shape,
         variadic='num_args', params=(NUM_ARGS,), inplace=((0, 0),),
         aliases=('ElementWiseSum',),
         gradient=lambda F, attrs, ins, outs, og: [og[0]] * len(ins),
         doc='The element-wise sum of any number of arrays of one shape.')


# ----------------------------------------------------------------------------------------------
# L2Normalization

_L2_MODES = p_enum('instance', 'channel', 'spatial')


def l2_axes(mode, ndim):
    """The axes L2Normalization's norm runs over in `mode` for `ndim`-D data."""
    return {'instance': tuple(range(1, ndim)), 'channel': (1,),
            'spatial': tuple(range(2, ndim))}[mode]


def _l2_axes_kwargs(mode):
    """The same axes as reduction arguments that need no ndim (for gradients of symbols)."""
    return {'instance': {'axis': (0,), 'exclude': True}, 'channel': {'axis': (1,)},
            'spatial': {'axis': (0, 1), 'exclude': True}}[mode]


def _l2_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None, None]
    least = 3 if attrs['mode'] == 'spatial' else 2
    if len(data) < least:
        raise ShapeError(f"L2Normalization: mode={attrs['mode']!r} needs data of at least "
                         f'{least} dimensions, got shape {tuple(data)}')
    axes = l2_axes(attrs['mode'], len(data))
    return list(in_shapes), [tuple(data), reduced_shape(data, axes, False)]


def _l2_kernel(attrs, ins, outs, ctx):
    xp, x = ctx.xp, ins[0]
    axes = l2_axes(attrs['mode'], x.ndim)
    wide = x.astype(accumulation_dtype(x.dtype, ctx.safe_accumulation), copy=False)
    norm = xp.sqrt((wide * wide).sum(axis=axes, keepdims=True) + attrs['eps'])
    outs[0][...] = wide / norm
    outs[1][...] = norm.reshape(outs[1].shape)


def _l2_gradient(F, attrs, inputs, outputs, out_grads):
    # d(x/n) = (g - y * sum(g * y)) / n, with the sums over the normalised axes
    x, y, g = inputs[0], outputs[0], out_grads[0]
    axes = _l2_axes_kwargs(attrs['mode'])
    dot = F.sum(g * y, keepdims=True, **axes)
    norm = F.sqrt(F.sum(F.square(x), keepdims=True, **axes) + attrs['eps'])
    return [F.broadcast_div(g - F.broadcast_mul(y, dot), norm)]


register('L2Normalization', _l2_kernel, infer_shape=_l2_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0], dt[0]]),
         outputs=('output', 'norm'), visible_outputs=1, gradient=_l2_gradient,
         params=(Param('eps', p_float, 1e-10, 'added to the sum of squares'),
                 Param('mode', _L2_MODES, 'instance', 'instance: each sample; channel: across '
                       'channels at each position; spatial: each channel across positions')),
         doc='x / sqrt(sum(x**2) + eps) over the axes that `mode` names.')


# ----------------------------------------------------------------------------------------------
# moments, nansum, nanprod

def _moments_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None, None]
    out = reduced_shape(data, reduce_axes(attrs['axes'], len(data)), attrs['keepdims'])
    return list(in_shapes), [out, out]


def _moments_kernel(attrs, ins, outs, ctx):
    x = ins[0]
    axes = reduce_axes(attrs['axes'], x.ndim)
    wide = x.astype(accumulation_dtype(x.dtype, ctx.safe_accumulation), copy=False)
    mean = wide.mean(axis=axes, keepdims=True)
    centered = wide - mean
    outs[0][...] = mean.reshape(outs[0].shape)
    outs[1][...] = (centered * centered).mean(axis=axes, keepdims=True).reshape(outs[1].shape)


def _moments_gradient(F, attrs, inputs, outputs, out_grads):
    x, (mean_grad, var_grad) = inputs[0], out_grads
    where = {'axis': attrs['axes'], 'keepdims': attrs['keepdims']}
    mean = F._broadcast_back(outputs[0], x, **where)
    spread = F._broadcast_back(mean_grad, x, mean=True, **where)
    return [spread + 2 * (x - mean) * F._broadcast_back(var_grad, x, mean=True, **where)]


register('moments', _moments_kernel, infer_shape=_moments_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0], dt[0]]), outputs=('mean', 'var'),
         gradient=_moments_gradient,
         params=(Param('axes', p_axes, None, 'axes to reduce; None for all'),
                 Param('keepdims', p_bool, False, 'keep reduced axes with length 1')),
         doc='Mean and (biased) variance over the given axes.')


def _nan_reduce_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    axes = reduce_axes(attrs['axis'], len(data), attrs['exclude'])
    return list(in_shapes), [reduced_shape(data, axes, attrs['keepdims'])]


def _nan_reduce_kernel(name):
    def kernel(attrs, ins, outs, ctx):
        x = ins[0]
        axes = reduce_axes(attrs['axis'], x.ndim, attrs['exclude'])
        target = outs[0].reshape(keepdims_shape(x.shape, axes))
        floating = x.dtype.kind == 'f'
        dtype = accumulation_dtype(x.dtype, ctx.safe_accumulation) if floating else None
        target[...] = getattr(ctx.xp, name)(x, axis=axes, keepdims=True, dtype=dtype)
    return kernel


def _back(F, grad, like, attrs):
    return F._broadcast_back(grad, like, axis=attrs['axis'], keepdims=attrs['keepdims'],
                             exclude=attrs['exclude'])


def _nansum_gradient(F, attrs, inputs, outputs, out_grads):
    x = inputs[0]
    return [_back(F, out_grads[0], x, attrs) * F.broadcast_equal(x, x)]   # 0 where x is NaN


def _nanprod_gradient(F, attrs, inputs, outputs, out_grads):
    x = inputs[0]
    through = _back(F, out_grads[0] * outputs[0], x, attrs) / x
    return [F.where(F.broadcast_equal(x, x), through, F.zeros_like(x))]


for _name, _gradient in (('nansum', _nansum_gradient), ('nanprod', _nanprod_gradient)):
    register(_name, _nan_reduce_kernel(_name), infer_shape=_nan_reduce_infer,
             params=AXES_PARAMS, gradient=_gradient,
             doc=f'{_name[3:].capitalize()} over the given axes, treating NaN as '
                 f'{0 if _name == "nansum" else 1}.')


# ----------------------------------------------------------------------------------------------
# softmax_cross_entropy

def _sce_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [(1,)]
    if len(data) != 2:
        raise ShapeError(f'softmax_cross_entropy: data must be (batch, classes), got shape '
                         f'{tuple(data)}')
    assign_shape('softmax_cross_entropy', in_shapes, 1, 'label', (data[0],))
    return in_shapes, [(1,)]


def _log_probabilities(xp, x, safe):
    wide = x.astype(accumulation_dtype(x.dtype, safe), copy=False)
    shifted = wide - wide.max(axis=1, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))


def _class_index(xp, label, classes):
    index = label.astype(np.int64)
    return xp.clip(index, 0, classes - 1)


def _sce_kernel(attrs, ins, outs, ctx):
    xp, (data, label) = ctx.xp, ins
    log_prob = _log_probabilities(xp, data, ctx.safe_accumulation)
    index = _class_index(xp, label, data.shape[1])
    outs[0][...] = -log_prob[xp.arange(data.shape[0]), index].sum()


def _sce_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, label): (softmax(data) - onehot(label)) * out_grad."""
    xp, (grad, data, label) = ctx.xp, ins
    prob = xp.exp(_log_probabilities(xp, data, ctx.safe_accumulation))
    prob[xp.arange(data.shape[0]), _class_index(xp, label, data.shape[1])] -= 1
    outs[0][...] = prob * grad.reshape(())


register('softmax_cross_entropy', _sce_kernel, inputs=('data', 'label'), infer_shape=_sce_infer,
         infer_type=typed_like_first(free=(1,)),
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_softmax_cross_entropy(og[0], ins[0], ins[1]), None],
         doc='Sum over the batch of -log(softmax(data)[label]); shape (1,).')
register('_backward_softmax_cross_entropy', _sce_backward_kernel,
         inputs=('out_grad', 'data', 'label'), outputs=('data_grad',),
         infer_shape=_like_input(1), infer_type=_like_input(1))


# ----------------------------------------------------------------------------------------------
# SVMOutput

SVM_PARAMS = (
    Param('margin', p_float, 1.0, 'the margin of the hinge loss'),
    Param('regularization_coefficient', p_float, 1.0, 'scales the gradient'),
    Param('use_linear', p_bool, False, 'L1-SVM (hinge) instead of L2-SVM (squared hinge)'),
)


def _svm_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None]
    assign_shape('SVMOutput', in_shapes, 1, 'label', (data[0],))
    return in_shapes, [tuple(data)]


def _svm_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, output, label); MXNet's L1/L2-SVM gradient, ignoring out_grad."""
    xp, score, label = ctx.xp, ins[1], ins[2]
    rows = score.reshape(score.shape[0], -1)
    margin, scale = attrs['margin'], attrs['regularization_coefficient']
    truth = xp.arange(rows.shape[1])[None, :] == label.astype(np.int64).reshape(-1, 1)
    signed = xp.where(truth, -rows, rows)       # the true class must score above the margin
    active = (margin + signed) > 0
    if attrs['use_linear']:
        grad = active * scale
    else:
        grad = active * 2 * (margin + signed) * scale
    outs[0][...] = xp.where(truth, -grad, grad).reshape(outs[0].shape)


def _identity_kernel(attrs, ins, outs, ctx):
    if outs[0] is not ins[0]:
        outs[0][...] = ins[0]


register('SVMOutput', _identity_kernel,
         inputs=('data', 'label'), infer_shape=_svm_infer,
         infer_type=typed_like_first(free=(1,)), params=SVM_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_SVMOutput(og[0], outs[0], ins[1], **attrs), None],
         doc='Identity forward; backward is the gradient of the (squared) hinge loss of the '
             'scores against the labels, ignoring the incoming gradient.')
register('_backward_SVMOutput', _svm_backward_kernel, inputs=('out_grad', 'output', 'label'),
         outputs=('data_grad',), params=SVM_PARAMS, infer_shape=_like_input(1),
         infer_type=_like_input(1))


# ----------------------------------------------------------------------------------------------
# slice_like

def _slice_like_axes(attrs, data, like):
    if not attrs['axes']:
        if len(data) != len(like):
            raise ShapeError(f'slice_like: without axes the inputs need the same number of '
                             f'dimensions, got {tuple(data)} and {tuple(like)}')
        return tuple(range(len(data)))
    axes = []
    for axis in attrs['axes']:
        if not -len(data) <= axis < len(data) or axis % len(data) >= len(like):
            raise ShapeError(f'slice_like: axis {axis} does not exist in both {tuple(data)} '
                             f'and {tuple(like)}')
        axes.append(axis % len(data))
    return tuple(axes)


def _slice_like_infer(attrs, in_shapes):
    data, like = in_shapes
    if data is None or like is None:
        return list(in_shapes), [None]
    out = list(data)
    for axis in _slice_like_axes(attrs, data, like):
        if like[axis] > data[axis]:
            raise ShapeError(f'slice_like: axis {axis} of {tuple(data)} is shorter than that '
                             f'of {tuple(like)}')
        out[axis] = like[axis]
    return list(in_shapes), [tuple(out)]


def _corner(shape):
    return tuple(slice(0, d) for d in shape)


def _slice_like_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0][_corner(outs[0].shape)]


def _slice_like_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data): out_grad in the leading corner, zeros elsewhere."""
    outs[0][...] = 0
    outs[0][_corner(ins[0].shape)] = ins[0]


register('slice_like', _slice_like_kernel, inputs=('data', 'shape_like'),
         infer_shape=_slice_like_infer, infer_type=lambda attrs, dt: (list(dt), [dt[0]]),
         params=(Param('axes', p_shape, (), 'axes to slice; () for all'),),
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_slice_like(og[0], ins[0]), None],
         doc='`data` sliced from the start to the shape of `shape_like` along `axes`.')
register('_backward_slice_like', _slice_like_backward_kernel, inputs=('out_grad', 'data'),
         outputs=('data_grad',), infer_shape=_like_input(1),
         infer_type=_like_input(0))


# ----------------------------------------------------------------------------------------------
# diag

DIAG_PARAMS = (Param('k', p_int, 0, 'the diagonal: 0 main, > 0 above, < 0 below'),
               Param('axis1', p_int, 0, 'first axis of the 2-D planes (N-D input)'),
               Param('axis2', p_int, 1, 'second axis of the 2-D planes (N-D input)'))


def _diag_length(rows, cols, k):
    return max(0, min(rows, cols - k) if k >= 0 else min(rows + k, cols))


def _diag_axes(attrs, shape):
    ndim = len(shape)
    axes = []
    for name in ('axis1', 'axis2'):
        if not -ndim <= attrs[name] < ndim:
            raise ShapeError(f'diag: {name}={attrs[name]} is out of range for shape {shape}')
        axes.append(attrs[name] % ndim)
    if axes[0] == axes[1]:
        raise ShapeError(f'diag: axis1 and axis2 name the same axis {axes[0]}')
    return axes


def _diag_shape(attrs, shape):
    k = attrs['k']
    if len(shape) == 1:
        return (shape[0] + abs(k),) * 2
    axis1, axis2 = _diag_axes(attrs, shape)
    length = _diag_length(shape[axis1], shape[axis2], k)
    if length == 0:
        raise ShapeError(f'diag: k={k} selects no diagonal of planes of shape '
                         f'({shape[axis1]}, {shape[axis2]})')
    return tuple(d for i, d in enumerate(shape) if i not in (axis1, axis2)) + (length,)


def _diag_infer(attrs, in_shapes):
    if in_shapes[0] is None:
        return list(in_shapes), [None]
    return list(in_shapes), [_diag_shape(attrs, tuple(in_shapes[0]))]


def _diag_positions(xp, length, k):
    steps = xp.arange(length)
    return (steps, steps + k) if k >= 0 else (steps - k, steps)


def _planes_last(xp, array, attrs):
    """A view of `array` with the diag planes as its last two axes."""
    axis1, axis2 = _diag_axes(attrs, array.shape)
    return xp.moveaxis(array, (axis1, axis2), (-2, -1))


def _diag_kernel(attrs, ins, outs, ctx):
    xp, x, out, k = ctx.xp, ins[0], outs[0], attrs['k']
    if x.ndim == 1:
        out[...] = 0
        rows, cols = _diag_positions(xp, x.shape[0], k)
        out[rows, cols] = x
        return
    rows, cols = _diag_positions(xp, out.shape[-1], k)
    out[...] = _planes_last(xp, x, attrs)[..., rows, cols]


def _diag_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data): the gradient of diag with respect to data."""
    xp, grad, out, k = ctx.xp, ins[0], outs[0], attrs['k']
    if out.ndim == 1:
        rows, cols = _diag_positions(xp, out.shape[0], k)
        out[...] = grad[rows, cols]
        return
    out[...] = 0
    rows, cols = _diag_positions(xp, grad.shape[-1], k)
    _planes_last(xp, out, attrs)[..., rows, cols] = grad


register('diag', _diag_kernel, infer_shape=_diag_infer, params=DIAG_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [F._backward_diag(og[0], ins[0], **attrs)],
         doc='A 1-D input becomes a matrix with it on diagonal k; an N-D input gives its '
             'diagonal k of the planes (axis1, axis2), as a new last axis.')
register('_backward_diag', _diag_backward_kernel, inputs=('out_grad', 'data'),
         outputs=('data_grad',), params=DIAG_PARAMS, infer_shape=_like_input(1),
         infer_type=_like_input(0))


# ----------------------------------------------------------------------------------------------
# shape_array, size_array

_INT64 = np.dtype(np.int64)


def _zero_gradient(F, attrs, inputs, outputs, out_grads):
    return [F.zeros_like(x) for x in inputs]


def _shape_array_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.asarray(ins[0].shape, dtype=np.int64)


register('shape_array', _shape_array_kernel,
         infer_shape=lambda attrs, s: (list(s), [None if s[0] is None else (len(s[0]),)]),
         infer_type=lambda attrs, dt: (list(dt), [_INT64]), gradient=_zero_gradient,
         doc='The shape of the input as a 1-D int64 array.')
register('size_array', lambda attrs, ins, outs, ctx: outs[0].fill(ins[0].size),
         infer_shape=lambda attrs, s: (list(s), [(1,)]),
         infer_type=lambda attrs, dt: (list(dt), [_INT64]), gradient=_zero_gradient,
         doc='The number of elements of the input as an int64 array of shape (1,).')


# ----------------------------------------------------------------------------------------------
# scatter_nd

def _scatter_infer(attrs, in_shapes):
    data, index = in_shapes
    shape = attrs['shape']
    if index is not None and (not index or index[0] > len(shape)):
        raise ShapeError(f'scatter_nd: indices of shape {tuple(index)} cannot index an '
                         f'output of shape {shape}: the first dimension must be at most '
                         f'{len(shape)}')
    if data is not None and index is not None:
        expected = tuple(index[1:]) + tuple(shape[index[0]:])
        if tuple(data) != expected:
            raise ShapeError(f'scatter_nd: data has shape {tuple(data)}; indices '
                             f'{tuple(index)} into {shape} need {expected}')
    return list(in_shapes), [shape]


def _scatter_kernel(attrs, ins, outs, ctx):
    data, index = ins
    outs[0][...] = 0
    outs[0][tuple(index.astype(np.int64))] = data


register('scatter_nd', _scatter_kernel, inputs=('data', 'indices'), infer_shape=_scatter_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]),
         params=(Param('shape', p_shape, REQUIRED, 'shape of the output'),),
         gradient=lambda F, attrs, ins, outs, og: [F.gather_nd(og[0], ins[1]), None],
         doc='Zeros of `shape` with `data` written at the index tuples that are the columns '
             'of `indices` (the inverse of gather_nd; with repeated tuples one write wins).')


# ----------------------------------------------------------------------------------------------
# argmax_channel

def _argmax_channel_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    return list(in_shapes), [tuple(data[:-1]) or (1,)]


def _argmax_channel_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.argmax(ins[0], axis=-1).reshape(outs[0].shape)


register('argmax_channel', _argmax_channel_kernel,
         infer_shape=_argmax_channel_infer, gradient=_zero_gradient,
         doc='Index of the maximum of each row (along the last axis), in the input\'s '
             'dtype, as MXNet\'s argmax with axis=-1.')


# ----------------------------------------------------------------------------------------------
# depth_to_space, space_to_depth (NCHW, MXNet's DCR order)

BLOCK = (Param('block_size', p_int, REQUIRED, 'edge of the blocks moved between depth and '
               'space'),)


def _block_check(name, attrs, data):
    size = attrs['block_size']
    if len(data) != 4 or size < 1:
        raise ShapeError(f'{name}: needs 4-D (N, C, H, W) data and block_size >= 1, got shape '
                         f'{tuple(data)} and block_size={size}')
    return size


def _depth_to_space_shape(attrs, data):
    size = _block_check('depth_to_space', attrs, data)
    n, c, h, w = data
    if c % (size * size):
        raise ShapeError(f'depth_to_space: channels {c} are not a multiple of '
                         f'block_size**2 = {size * size}')
    return (n, c // (size * size), h * size, w * size)


def _space_to_depth_shape(attrs, data):
    size = _block_check('space_to_depth', attrs, data)
    n, c, h, w = data
    if h % size or w % size:
        raise ShapeError(f'space_to_depth: height {h} and width {w} must be multiples of '
                         f'block_size={size}')
    return (n, c * size * size, h // size, w // size)


def _shape_infer(shape_fn):
    def infer(attrs, in_shapes):
        if in_shapes[0] is None:
            return list(in_shapes), [None]
        return list(in_shapes), [shape_fn(attrs, tuple(in_shapes[0]))]
    return infer


def _depth_to_space_kernel(attrs, ins, outs, ctx):
    x, size = ins[0], attrs['block_size']
    n, c, h, w = x.shape
    blocks = x.reshape(n, size, size, c // (size * size), h, w)
    outs[0][...] = blocks.transpose(0, 3, 4, 1, 5, 2).reshape(outs[0].shape)


def _space_to_depth_kernel(attrs, ins, outs, ctx):
    x, size = ins[0], attrs['block_size']
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // size, size, w // size, size)
    outs[0][...] = blocks.transpose(0, 3, 5, 1, 2, 4).reshape(outs[0].shape)


register('depth_to_space', _depth_to_space_kernel,
         infer_shape=_shape_infer(_depth_to_space_shape), params=BLOCK,
         gradient=lambda F, attrs, ins, outs, og: [F.space_to_depth(og[0], **attrs)],
         doc='Move blocks of channels into space: (N, C, H, W) -> (N, C/b**2, H*b, W*b).')
register('space_to_depth', _space_to_depth_kernel,
         infer_shape=_shape_infer(_space_to_depth_shape), params=BLOCK,
         gradient=lambda F, attrs, ins, outs, og: [F.depth_to_space(og[0], **attrs)],
         doc='Move blocks of space into channels: (N, C, H, W) -> (N, C*b**2, H/b, W/b).')


# ----------------------------------------------------------------------------------------------
# khatri_rao

def _khatri_rao_infer(attrs, in_shapes):
    if any(s is None for s in in_shapes):
        return list(in_shapes), [None]
    columns = {s[1] if len(s) == 2 else None for s in in_shapes}
    if len(columns) != 1 or None in columns:
        raise ShapeError(f'khatri_rao: inputs must be matrices with one column count, got '
                         f'{[tuple(s) for s in in_shapes]}')
    return list(in_shapes), [(prod(s[0] for s in in_shapes), columns.pop())]


def _letters(count):
    return string.ascii_letters[:count]


def _khatri_rao_kernel(attrs, ins, outs, ctx):
    rows = _letters(len(ins))
    spec = ','.join(f'{r}z' for r in rows) + f'->{rows}z'
    outs[0][...] = ctx.xp.einsum(spec, *ins).reshape(outs[0].shape)


def _khatri_rao_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, *matrices) -> one gradient per matrix."""
    grad, mats = ins[0], ins[1:]
    rows = _letters(len(mats))
    grad = grad.reshape(tuple(m.shape[0] for m in mats) + (grad.shape[-1],))
    for index, out in enumerate(outs):
        others = [f'{r}z' for i, r in enumerate(rows) if i != index]
        spec = ','.join([f'{rows}z'] + others) + f'->{rows[index]}z'
        out[...] = ctx.xp.einsum(spec, grad, *(m for i, m in enumerate(mats) if i != index))


register('khatri_rao', _khatri_rao_kernel, inputs=_variadic_names, variadic='num_args',
         infer_shape=_khatri_rao_infer, params=(NUM_ARGS,),
         gradient=lambda F, attrs, ins, outs, og: _listed(
             F._backward_khatri_rao(og[0], *ins, num_args=len(ins)), len(ins)),
         doc='The column-wise Kronecker product of matrices (I_k, R): (prod I_k, R).')
register('_backward_khatri_rao', _khatri_rao_backward_kernel,
         inputs=lambda attrs: ['out_grad'] + _variadic_names(attrs),
         outputs=lambda attrs: [f'grad{i}' for i in range(attrs['num_args'])],
         variadic='num_args', params=(NUM_ARGS,),
         infer_shape=lambda attrs, s: (list(s), list(s[1:])),
         infer_type=lambda attrs, dt: (list(dt), list(dt[1:])))


def _listed(result, count):
    return [result] if count == 1 else list(result)


# ----------------------------------------------------------------------------------------------
# ROIPooling

ROI_PARAMS = (Param('pooled_size', p_shape, REQUIRED, '(height, width) of each pooled region'),
              Param('spatial_scale', p_float, REQUIRED, 'ratio of feature-map to input-image '
                    'size: multiplies the ROI coordinates'))


def _roi_infer(attrs, in_shapes):
    data, rois = in_shapes
    if data is None or rois is None:
        return list(in_shapes), [None, None]
    if len(data) != 4 or len(rois) != 2 or rois[1] != 5 or len(attrs['pooled_size']) != 2:
        raise ShapeError(f'ROIPooling: needs data (N, C, H, W), rois (R, 5) and a 2-D '
                         f'pooled_size, got {tuple(data)}, {tuple(rois)} and '
                         f'{attrs["pooled_size"]}')
    out = (rois[0], data[1]) + tuple(attrs['pooled_size'])
    return list(in_shapes), [out, out]


def _c_round(value):
    return int(np.floor(abs(value) + 0.5) * np.sign(value))


def _roi_bins(roi, scale, pooled, height, width):
    """The (h0, h1, w0, w1) window of every bin of one ROI, clipped to the feature map."""
    x0, y0, x1, y1 = (_c_round(float(v) * scale) for v in roi[1:])
    bin_h = max(y1 - y0 + 1, 1) / pooled[0]
    bin_w = max(x1 - x0 + 1, 1) / pooled[1]
    for ph in range(pooled[0]):
        h0 = min(max(int(np.floor(ph * bin_h)) + y0, 0), height)
        h1 = min(max(int(np.ceil((ph + 1) * bin_h)) + y0, 0), height)
        for pw in range(pooled[1]):
            w0 = min(max(int(np.floor(pw * bin_w)) + x0, 0), width)
            w1 = min(max(int(np.ceil((pw + 1) * bin_w)) + x0, 0), width)
            yield ph, pw, h0, h1, w0, w1


def _roi_kernel(attrs, ins, outs, ctx):
    xp, (data, rois), (out, where) = ctx.xp, ins, outs
    _, channels, height, width = data.shape
    for r, roi in enumerate(rois.tolist() if xp is np else rois.get().tolist()):
        image = data[int(roi[0])]
        for ph, pw, h0, h1, w0, w1 in _roi_bins(roi, attrs['spatial_scale'],
                                                attrs['pooled_size'], height, width):
            if h1 <= h0 or w1 <= w0:
                out[r, :, ph, pw], where[r, :, ph, pw] = 0, -1
                continue
            window = image[:, h0:h1, w0:w1].reshape(channels, -1)
            local = window.argmax(axis=1)
            out[r, :, ph, pw] = window[xp.arange(channels), local]
            where[r, :, ph, pw] = (h0 + local // (w1 - w0)) * width + w0 + local % (w1 - w0)


def _roi_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, max positions, data, rois): out_grad added at each maximum."""
    xp, (grad, where, _, rois), out = ctx.xp, ins, outs[0]
    out[...] = 0
    index = where.astype(np.int64)
    valid = index >= 0
    batch = xp.broadcast_to(rois[:, 0].astype(np.int64)[:, None, None, None], index.shape)
    channel = xp.broadcast_to(xp.arange(index.shape[1])[None, :, None, None], index.shape)
    flat = out.reshape(out.shape[0], out.shape[1], -1)
    xp.add.at(flat, (batch[valid], channel[valid], index[valid]), grad[valid])


register('ROIPooling', _roi_kernel, inputs=('data', 'rois'), infer_shape=_roi_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0], dt[0]]),
         outputs=('output', 'maxidx'), visible_outputs=1, params=ROI_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_ROIPooling(og[0], outs[1], ins[0], ins[1], **attrs), None],
         doc='Max-pool each region of interest [batch, x1, y1, x2, y2] (image coordinates, '
             'scaled by spatial_scale) into pooled_size bins.')
register('_backward_ROIPooling', _roi_backward_kernel,
         inputs=('out_grad', 'maxidx', 'data', 'rois'), outputs=('data_grad',),
         params=ROI_PARAMS, infer_shape=_like_input(2), infer_type=_like_input(2))


# ----------------------------------------------------------------------------------------------
# Random draws: parameters are checked when the operator runs, so errors surface at the wait.

def _require(condition, message):
    if not condition:
        raise EmberError(message)


def _random_op(name, draw, check, params, doc):
    def kernel(attrs, ins, outs, ctx):
        check(attrs)
        out = outs[0]
        out[...] = ctx.xp.asarray(draw(ctx.random.generator, attrs, out.shape))
    register(f'_random_{name}', kernel, inputs=(), resources=('random',), random=True,
             infer_shape=lambda attrs, s: ([], [attrs['shape'] or (1,)]),
             infer_type=lambda attrs, dt: ([], [attrs['dtype'] or np.dtype(np.float32)]),
             params=params + (SHAPE, CTX, Param('dtype', p_optional(p_dtype), None,
                                                'dtype of the output (None: float32)')),
             aliases=(f'random_{name}',), doc=doc)


def _generalized_negative_binomial(gen, attrs, shape):
    mu, alpha = attrs['mu'], attrs['alpha']
    if alpha == 0:
        return gen.poisson(mu, shape)
    return gen.poisson(gen.gamma(1 / alpha, mu * alpha, shape))


_random_op('exponential', lambda gen, a, shape: gen.exponential(1 / a['lam'], shape),
           lambda a: _require(a['lam'] > 0, f'_random_exponential: lam={a["lam"]} must be '
                              'positive'),
           (Param('lam', p_float, 1.0, 'rate (inverse scale)'),),
           'Exponential draws with rate lam.')
_random_op('gamma', lambda gen, a, shape: gen.gamma(a['alpha'], a['beta'], shape),
           lambda a: _require(a['alpha'] > 0 and a['beta'] > 0,
                              f'_random_gamma: alpha={a["alpha"]} and beta={a["beta"]} must be '
                              'positive'),
           (Param('alpha', p_float, 1.0, 'shape'), Param('beta', p_float, 1.0, 'scale')),
           'Gamma draws with shape alpha and scale beta.')
_random_op('poisson', lambda gen, a, shape: gen.poisson(a['lam'], shape),
           lambda a: _require(a['lam'] >= 0, f'_random_poisson: lam={a["lam"]} must be '
                              'non-negative'),
           (Param('lam', p_float, 1.0, 'the mean'),), 'Poisson draws with mean lam.')
_random_op('negative_binomial',
           lambda gen, a, shape: gen.negative_binomial(a['k'], a['p'], shape),
           lambda a: _require(a['k'] > 0 and 0 < a['p'] <= 1,
                              f'_random_negative_binomial: k={a["k"]} must be positive and '
                              f'p={a["p"]} in (0, 1]'),
           (Param('k', p_int, 1, 'successes to wait for'),
            Param('p', p_float, 1.0, 'success probability of each trial')),
           'Failures before the k-th success, with success probability p.')
_random_op('generalized_negative_binomial', _generalized_negative_binomial,
           lambda a: _require(a['mu'] > 0 and a['alpha'] >= 0,
                              f'_random_generalized_negative_binomial: mu={a["mu"]} must be '
                              f'positive and alpha={a["alpha"]} non-negative'),
           (Param('mu', p_float, 1.0, 'the mean'),
            Param('alpha', p_float, 1.0, 'dispersion (0: Poisson)')),
           'Negative binomial draws with mean mu and dispersion alpha.')


def _shuffle_kernel(attrs, ins, outs, ctx):
    order = ctx.xp.asarray(ctx.random.generator.permutation(ins[0].shape[0]))
    outs[0][...] = ins[0][order]


register('_shuffle', _shuffle_kernel, resources=('random',), random=True,
         aliases=('shuffle',), doc='The input with its first axis randomly permuted.')
