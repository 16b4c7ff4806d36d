"""Small contrib operators on whole tensors: ranges and indices shaped like an input, copies
into rows, a quadratic, scaling for attention, straight-through estimators, allclose.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_contrib_arange_like')
>>> out = np.empty((2, 3), np.float32)
>>> op.kernel(op.parse_attrs({'start': 1, 'repeat': 2}), [out], [out], registry.KernelContext(None))
>>> out.tolist()
[[1.0, 1.0, 2.0], [2.0, 3.0, 3.0]]
"""
from __future__ import annotations

import math

import numpy as np

from ember.op.elemwise import apply_ufunc
from ember.op.init import CTX
from ember.op.host import register
from ember.op.registry import (Param, ShapeError, p_axes, p_bool, p_float, p_int, p_optional,
                               same_shape)

__all__ = []


def _zero_grads(F, attrs, ins, outs, og):
    return [F.zeros_like(x) for x in ins]


def _out_type(dtype):
    def infer(attrs, in_dtypes):
        return list(in_dtypes), [np.dtype(dtype)]
    return infer


# ----------------------------------------------------------------------------------------------
# arange_like and index_array: values that depend only on the input's shape.

def _arange_like_shape(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None or attrs['axis'] is None:
        return list(in_shapes), [shape]
    axis = attrs['axis']
    if not -len(shape) <= axis < len(shape):
        raise ShapeError(f'axis={axis} is out of range for an input of shape {shape}')
    return list(in_shapes), [(shape[axis],)]


def _arange_like_kernel(attrs, ins, outs, ctx):
    out = outs[0]
    steps = ctx.xp.arange(out.size, dtype=np.float64) // attrs['repeat']
    out[...] = (attrs['start'] + attrs['step'] * steps).reshape(out.shape)


register('_contrib_arange_like', _arange_like_kernel, infer_shape=_arange_like_shape,
         params=(Param('start', p_float, 0.0, 'The first value.'),
                 Param('step', p_float, 1.0, 'The spacing of the values.'),
                 Param('repeat', p_int, 1, 'How many times each value repeats.'), CTX,
                 Param('axis', p_optional(p_int), None,
                       'Count along this axis only (None: the whole shape).')),
         gradient=_zero_grads,
         doc='start, start+step, ... (each `repeat` times) in the shape and dtype of the input, '
             'or along one of its axes.')


def _index_array_axes(attrs, ndim):
    axes = attrs['axes']
    if axes is None:
        return tuple(range(ndim))
    for axis in axes:
        if not -ndim <= axis < ndim:
            raise ShapeError(f'axes={axes}: {axis} is out of range for {ndim} dimensions')
    return tuple(a % ndim for a in axes)


def _index_array_shape(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    return list(in_shapes), [tuple(shape) + (len(_index_array_axes(attrs, len(shape))),)]


def _index_array_kernel(attrs, ins, outs, ctx):
    shape = ins[0].shape
    grids = ctx.xp.indices(shape, dtype=np.int64)
    for k, axis in enumerate(_index_array_axes(attrs, len(shape))):
        outs[0][..., k] = grids[axis]


register('_contrib_index_array', _index_array_kernel, infer_shape=_index_array_shape,
         infer_type=_out_type('int64'), gradient=_zero_grads,
         params=(Param('axes', p_axes, None, 'The axes to index (None: every axis).'),),
         doc='The index of every element along `axes`, in a new last axis (int64).')


# ----------------------------------------------------------------------------------------------
# index_copy: rows of new_tensor written into a copy of old_tensor.

def _index_copy_shape(attrs, in_shapes):
    old, index, new = in_shapes
    if old is not None and new is not None:
        if index is not None and (len(index) != 1 or new[0] != index[0]):
            raise ShapeError(f'index_vector must be 1-D with one entry per row of new_tensor, '
                             f'got shapes {index} and {new}')
        if tuple(new[1:]) != tuple(old[1:]):
            raise ShapeError(f'new_tensor rows {new[1:]} must match old_tensor rows {old[1:]}')
    return list(in_shapes), [old]


def _index_copy_type(attrs, in_dtypes):
    old, index, new = in_dtypes
    return [old, index, new or old], [old]


def _rows(index, count):
    rows = index.astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= count):
        raise IndexError(f'index_copy: index_vector holds {rows.min()}..{rows.max()}, outside '
                         f'the {count} rows of old_tensor')
    return rows


def _index_copy_kernel(attrs, ins, outs, ctx):
    old, index, new = ins
    if outs[0] is not old:
        outs[0][...] = old
    outs[0][_rows(index, old.shape[0])] = new


def _index_copy_backward(attrs, ins, outs, ctx):
    grad, index = ins
    rows = _rows(index, grad.shape[0])
    outs[0][...] = grad
    outs[0][rows] = 0
    outs[1][...] = grad[rows]


def _index_copy_backward_shape(attrs, in_shapes):
    grad, index = in_shapes
    if grad is None or index is None:
        return list(in_shapes), [grad, None]
    return list(in_shapes), [grad, (index[0],) + tuple(grad[1:])]


register('_contrib_index_copy', _index_copy_kernel,
         inputs=('old_tensor', 'index_vector', 'new_tensor'), infer_shape=_index_copy_shape,
         infer_type=_index_copy_type, inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: _index_copy_grads(F, ins, og[0]),
         doc='A copy of old_tensor whose rows index_vector[i] are new_tensor[i].')
register('_contrib_backward_index_copy', _index_copy_backward, inputs=('out_grad', 'index'),
         outputs=('old_grad', 'new_grad'), infer_shape=_index_copy_backward_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]] * 2),
         doc='The gradients of index_copy: out_grad with the copied rows zeroed, and the '
             'copied rows.')


def _index_copy_grads(F, ins, grad):
    old_grad, new_grad = F._contrib_backward_index_copy(grad, ins[1])
    return [old_grad, F.zeros_like(ins[1]), new_grad]


# ----------------------------------------------------------------------------------------------
# quadratic, div_sqrt_dim, gradientmultiplier, straight-through estimators.

def _quadratic_kernel(attrs, ins, outs, ctx):
    x = ins[0]
    outs[0][...] = (attrs['a'] * x + attrs['b']) * x + attrs['c']


def _quadratic_backward(attrs, ins, outs, ctx):
    grad, x = ins
    outs[0][...] = grad * (2 * attrs['a'] * x + attrs['b'])


_ABC = tuple(Param(name, p_float, 0.0, f'The coefficient {name} of a*x^2 + b*x + c.')
             for name in 'abc')
register('_contrib_quadratic', _quadratic_kernel, params=_ABC, elemwise=True,
         inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: [F._contrib_backward_quadratic(
             og[0], ins[0], **attrs)],
         doc='a*x^2 + b*x + c, element-wise.')
register('_contrib_backward_quadratic', _quadratic_backward, inputs=('out_grad', 'data'),
         params=_ABC, infer_shape=same_shape, doc='The gradient of quadratic.')


def _div_sqrt_dim_kernel(attrs, ins, outs, ctx):
    apply_ufunc(np.true_divide, (ins[0], math.sqrt(ins[0].shape[-1])), outs[0])


register('_contrib_div_sqrt_dim', _div_sqrt_dim_kernel, inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: [F._contrib_div_sqrt_dim(og[0])],
         doc='The input divided by the square root of its last dimension.')

_MULTIPLIER = (Param('scalar', p_float, 1.0, 'Multiplies the gradient.'),
               Param('is_int', p_bool, True, 'Whether scalar was given as an integer.'))


def _copy_kernel(attrs, ins, outs, ctx):
    if outs[0] is not ins[0]:
        ctx.xp.copyto(outs[0], ins[0])


def _scale_kernel(attrs, ins, outs, ctx):
    apply_ufunc(np.multiply, (ins[0], attrs['scalar']), outs[0])


register('_contrib_gradientmultiplier', _copy_kernel, params=_MULTIPLIER, inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: [F._contrib_backward_gradientmultiplier(
             og[0], **attrs)],
         doc='The identity, whose gradient is multiplied by `scalar` (a gradient reversal '
             'layer with a negative scalar).')
register('_contrib_backward_gradientmultiplier', _scale_kernel, params=_MULTIPLIER,
         inplace=((0, 0),), doc='The gradient of gradientmultiplier: the input times scalar.')


def _round_half_away(attrs, ins, outs, ctx):
    x = ins[0]
    outs[0][...] = np.copysign(np.floor(np.abs(x) + 0.5), x)


def _sign_kernel(attrs, ins, outs, ctx):
    apply_ufunc(np.sign, ins, outs[0])


def _straight_through(F, attrs, ins, outs, og):
    return [og[0]]


register('_contrib_round_ste', _round_half_away, inplace=((0, 0),), gradient=_straight_through,
         doc='Round half away from zero, with the straight-through gradient (the identity).')
register('_contrib_sign_ste', _sign_kernel, inplace=((0, 0),), gradient=_straight_through,
         doc='The sign, with the straight-through gradient (the identity).')


# ----------------------------------------------------------------------------------------------
# allclose.

def _allclose_kernel(attrs, ins, outs, ctx):
    a, b = ins
    close = ctx.xp.allclose(a, b, rtol=attrs['rtol'], atol=attrs['atol'],
                            equal_nan=attrs['equal_nan'])
    outs[0][...] = 1 if close else 0


def _allclose_shape(attrs, in_shapes):
    a, b = in_shapes
    if a is not None and b is not None:
        np.broadcast_shapes(a, b)
    return list(in_shapes), [()]


register('_contrib_allclose', _allclose_kernel, inputs=('a', 'b'), infer_shape=_allclose_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [np.dtype(np.uint8)]),
         params=(Param('rtol', p_float, 1e-5, 'Relative tolerance.'),
                 Param('atol', p_float, 1e-8, 'Absolute tolerance.'),
                 Param('equal_nan', p_bool, True, 'NaNs in the same places are equal.')),
         doc='1 (uint8, shape ()) when |a - b| <= atol + rtol*|b| everywhere, else 0.')


# ----------------------------------------------------------------------------------------------
# count_sketch: project rows of d values onto out_dim buckets with hashed signs.

def _sketch_shape(attrs, in_shapes):
    data, h, s = in_shapes
    if data is None:
        return list(in_shapes), [None]
    width = data[-1]
    for name, shape in (('h', h), ('s', s)):
        if shape is not None and shape[-1] != width:
            raise ShapeError(f'{name} must hold one entry per input column ({width}), got '
                             f'{shape}')
    return list(in_shapes), [tuple(data[:-1]) + (attrs['out_dim'],)]


def _buckets(h, out_dim):
    buckets = h.reshape(-1).astype(np.int64)
    if buckets.size and (buckets.min() < 0 or buckets.max() >= out_dim):
        raise IndexError(f'count_sketch: h holds {buckets.min()}..{buckets.max()}, outside '
                         f'0..{out_dim - 1}')
    return buckets


def _sketch_kernel(attrs, ins, outs, ctx):
    data, h, s = ins
    rows = data.reshape(-1, data.shape[-1])
    out = np.zeros((len(rows), attrs['out_dim']), np.float64)
    np.add.at(out, (slice(None), _buckets(h, attrs['out_dim'])), rows * s.reshape(-1))
    outs[0][...] = out.reshape(outs[0].shape)


def _sketch_backward(attrs, ins, outs, ctx):
    grad, h, s = ins
    rows = grad.reshape(-1, attrs['out_dim'])
    picked = rows[:, _buckets(h, attrs['out_dim'])] * s.reshape(-1)
    outs[0][...] = picked.reshape(outs[0].shape)


_SKETCH = (Param('out_dim', p_int, doc='Buckets of the output.'),
           Param('processing_batch_size', p_int, 32, 'Accepted for MXNet\'s sake.'))
register('_contrib_count_sketch', _sketch_kernel, inputs=('data', 'h', 's'),
         infer_shape=_sketch_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]), params=_SKETCH,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward__contrib_count_sketch(og[0], ins[1], ins[2], **attrs),
             F.zeros_like(ins[1]), F.zeros_like(ins[2])],
         doc='Count sketch of the rows of data: out[..., h[i]] += data[..., i] * s[i].')
register('_backward__contrib_count_sketch', _sketch_backward, inputs=('out_grad', 'h', 's'),
         params=_SKETCH,
         infer_shape=lambda attrs, shapes: (list(shapes), [None if shapes[0] is None else
                                                           tuple(shapes[0][:-1])
                                                           + (shapes[1][-1],)]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
         doc='The gradient of count_sketch: each column reads its bucket, signed.')
