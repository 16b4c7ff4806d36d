"""Slicing and indexing operators: ``slice``, ``slice_axis``, ``slice_like`` and the assignments
that are their gradients, ``take``, ``pick``, ``one_hot``, ``gather_nd``, ``scatter_nd``, and the
NumPy-style advanced indexing behind ``NDArray.__getitem__``/``__setitem__``. ``slice`` takes
begin, end and step tuples with None for "from the edge".

>>> from ember.op import registry
>>> op = registry.get('slice')
>>> op.infer_shape(op.parse_attrs({'begin': (None, 1), 'end': (None, None)}), [(2, 3)])[1]
[(2, 2)]
"""
from __future__ import annotations

import numpy as np

from ember.base import prod
from ember.op.elemwise import broadcast_shapes
from ember.op.matrix import copy_into, first_type, normalize_axis
from ember.op.registry import (REQUIRED, Param, ShapeError, like_input, p_bool, p_dtype, p_enum,
                               p_float, p_int, p_optional, p_shape, register)

__all__ = ['p_slice', 'slice_bounds', 'p_index_key', 'indexed_shape']


# ----------------------------------------------------------------------------------------------
# slice, slice_axis and the assignments that are their gradients

def p_slice(value):
    """A tuple of ints and Nones (slice begin, end or step) from a value or MXNet's text."""
    from ember.op.registry import _literal
    value = _literal(value)
    if value is None or isinstance(value, (int, np.integer)):
        return (None if value is None else int(value),)
    if isinstance(value, (tuple, list)):
        return tuple(None if v is None or v == 'None' else p_int(v) for v in value)
    raise ValueError('a tuple of integers and None such as (0, None)')


def slice_bounds(length, begin, end, step):
    """(start, stop, step, count) of a slice on an axis of `length`, as a Python slice."""
    step = 1 if step is None else step
    if step == 0:
        raise ShapeError('slice step cannot be 0')
    start, stop, step = slice(begin, end, step).indices(length)
    return start, stop, step, len(range(start, stop, step))


def _slice_key(attrs, shape):
    """The tuple of Python slices that `slice` takes out of an array of `shape`."""
    begin, end, step = attrs['begin'], attrs['end'], attrs['step'] or ()
    if len(begin) != len(end) or len(begin) > len(shape) or len(step) > len(begin):
        raise ShapeError(f'begin {begin}, end {end} and step {step} do not fit an array of '
                         f'shape {tuple(shape)}')
    key = []
    for axis, length in enumerate(shape[:len(begin)]):
        s = step[axis] if axis < len(step) else None
        start, stop, s, count = slice_bounds(length, begin[axis], end[axis], s)
        if count == 0 and length > 0:
            raise ShapeError(f'slicing axis {axis} of length {length} with begin='
                             f'{begin[axis]}, end={end[axis]}, step={s} selects nothing')
        key.append(slice(start, stop if stop >= 0 else None, s))
    return tuple(key)


def _sliced_shape(key, shape):
    return tuple(len(range(*k.indices(d))) for k, d in zip(key, shape)) + tuple(shape[len(key):])


def _slice_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    return list(in_shapes), [_sliced_shape(_slice_key(attrs, shape), shape)]


def _slice_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0][_slice_key(attrs, ins[0].shape)]


SLICE_PARAMS = (Param('begin', p_slice, REQUIRED, 'first index per axis (None: the edge)'),
                Param('end', p_slice, REQUIRED, 'index past the last per axis (None: the edge)'),
                Param('step', p_slice, (), 'step per axis (None or missing: 1)'))


def _slice_args(attrs):
    return {'begin': attrs['begin'], 'end': attrs['end'], 'step': attrs['step']}


register('slice', _slice_kernel, infer_shape=_slice_infer, params=SLICE_PARAMS,
         aliases=('crop',),
         gradient=lambda F, attrs, ins, outs, og: [
             F._slice_assign(F.zeros_like(ins[0]), og[0], **_slice_args(attrs))],
         doc='A region of the input: begin, end and step per leading axis.')


def _assign_infer(attrs, in_shapes):
    lhs = in_shapes[0]
    if lhs is not None and len(in_shapes) > 1 and in_shapes[1] is not None:
        region = _sliced_shape(_slice_key(attrs, lhs), lhs)
        if broadcast_shapes(in_shapes[1], region) != region:
            raise ShapeError(f'a value of shape {in_shapes[1]} cannot fill a region of '
                             f'shape {region}')
    return list(in_shapes), [lhs]


def _slice_assign_kernel(attrs, ins, outs, ctx):
    copy_into(outs[0], ins[0])
    outs[0][_slice_key(attrs, outs[0].shape)] = ins[1]


def _slice_assign_scalar_kernel(attrs, ins, outs, ctx):
    copy_into(outs[0], ins[0])
    outs[0][_slice_key(attrs, outs[0].shape)] = attrs['scalar']


register('_slice_assign', _slice_assign_kernel, inputs=('lhs', 'rhs'),
         infer_shape=_assign_infer, infer_type=first_type, params=SLICE_PARAMS,
         inplace=((0, 0),), aliases=('_crop_assign',),
         gradient=lambda F, attrs, ins, outs, og: [
             F._slice_assign_scalar(og[0], scalar=0.0, **_slice_args(attrs)),
             F._reduce_to_shape(F.slice(og[0], **_slice_args(attrs)), ins[1])],
         doc='`lhs` with the region begin:end:step replaced by `rhs` (broadcast).')
register('_slice_assign_scalar', _slice_assign_scalar_kernel, infer_shape=_assign_infer,
         params=SLICE_PARAMS + (Param('scalar', p_float, 0.0),), inplace=((0, 0),),
         aliases=('_crop_assign_scalar',),
         gradient=lambda F, attrs, ins, outs, og: [
             F._slice_assign_scalar(og[0], scalar=0.0, **_slice_args(attrs))],
         doc='`data` with the region begin:end:step set to `scalar`.')


def _axis_slice_attrs(attrs, shape):
    """slice_axis's attributes as those of slice on an array of `shape`."""
    axis = normalize_axis(attrs['axis'], len(shape))
    pad = (None,) * axis
    return {'begin': pad + (attrs['begin'],), 'end': pad + (attrs['end'],), 'step': ()}


def _slice_axis_infer(attrs, in_shapes):
    if in_shapes[0] is None:
        return list(in_shapes), [None]
    return _slice_infer(_axis_slice_attrs(attrs, in_shapes[0]), in_shapes[:1])


def _slice_axis_kernel(attrs, ins, outs, ctx):
    _slice_kernel(_axis_slice_attrs(attrs, ins[0].shape), ins, outs, ctx)


def _axis_assign_kernel(attrs, ins, outs, ctx):
    _slice_assign_kernel(_axis_slice_attrs(attrs, ins[0].shape), ins, outs, ctx)


def _axis_assign_infer(attrs, in_shapes):
    if in_shapes[0] is None:
        return list(in_shapes), [None]
    return _assign_infer(_axis_slice_attrs(attrs, in_shapes[0]), in_shapes)


AXIS_SLICE_PARAMS = (Param('axis', p_int, REQUIRED), Param('begin', p_int, REQUIRED),
                     Param('end', p_optional(p_int), REQUIRED, 'None: to the end'))


def _axis_slice_args(attrs):
    return {'axis': attrs['axis'], 'begin': attrs['begin'], 'end': attrs['end']}


register('slice_axis', _slice_axis_kernel, infer_shape=_slice_axis_infer,
         params=AXIS_SLICE_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [
             F._slice_axis_assign(F.zeros_like(ins[0]), og[0], **_axis_slice_args(attrs))],
         doc='Elements begin:end along one axis.')
register('_slice_axis_assign', _axis_assign_kernel, inputs=('lhs', 'rhs'),
         infer_shape=_axis_assign_infer, infer_type=first_type, params=AXIS_SLICE_PARAMS,
         inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: [
             F._slice_axis_assign(og[0], F.zeros_like(ins[1]), **_axis_slice_args(attrs)),
             F.slice_axis(og[0], **_axis_slice_args(attrs))],
         doc='`lhs` with elements begin:end along `axis` replaced by `rhs`.')


# ----------------------------------------------------------------------------------------------
# take, pick, one_hot, gather_nd

MODE = Param('mode', p_enum('clip', 'wrap', 'raise'), 'clip', 'out-of-range indices')


def _indices(index, length, mode, xp):
    index = index.astype(np.int64)
    if mode == 'wrap':
        return index % length
    if mode == 'raise' and ((index < 0) | (index >= length)).any():
        raise IndexError(f'an index is out of range for an axis of length {length}')
    return xp.clip(index, 0, length - 1)


def _take_infer(attrs, in_shapes):
    data, index = in_shapes
    if data is None or index is None:
        return list(in_shapes), [None]
    axis = normalize_axis(attrs['axis'], len(data))
    return list(in_shapes), [data[:axis] + tuple(index) + data[axis + 1:]]


def _take_kernel(attrs, ins, outs, ctx):
    data, index = ins
    axis = normalize_axis(attrs['axis'], data.ndim)
    index = _indices(index, data.shape[axis], attrs['mode'], ctx.xp)
    outs[0][...] = ctx.xp.take(data, index, axis=axis)


def _backward_take_kernel(attrs, ins, outs, ctx):
    grad, index, out = ins[0], ins[1], outs[0]
    axis = normalize_axis(attrs['axis'], out.ndim)
    index = _indices(index, out.shape[axis], attrs['mode'], ctx.xp).reshape(-1)
    moved = ctx.xp.moveaxis(out, axis, 0)
    moved[...] = 0
    rows = grad.reshape(out.shape[:axis] + (index.size,) + out.shape[axis + 1:])
    ctx.xp.add.at(moved, index, ctx.xp.moveaxis(rows, axis, 0))


TAKE_PARAMS = (Param('axis', p_int, 0), MODE)

register('take', _take_kernel, inputs=('a', 'indices'), infer_shape=_take_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]), params=TAKE_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_take(og[0], ins[1], ins[0], axis=attrs['axis'], mode=attrs['mode']),
             F.zeros_like(ins[1])],
         doc='Elements of `a` at `indices` along `axis` (clipped, wrapped or checked).')
register('_backward_take', _backward_take_kernel, inputs=('data', 'indices', 'like'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[2]]),
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]), params=TAKE_PARAMS,
         doc='Scatter-add `data` into zeros shaped like `like` at `indices` (take\'s gradient).')


def _pick_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    axis = normalize_axis(attrs['axis'], len(data))
    out = data[:axis] + ((1,) if attrs['keepdims'] else ()) + data[axis + 1:]
    index_shape = data[:axis] + data[axis + 1:]
    if in_shapes[1] is not None and prod(in_shapes[1]) != prod(index_shape):
        raise ShapeError(f'index of shape {tuple(in_shapes[1])} does not fit data of shape '
                         f'{tuple(data)} along axis {attrs["axis"]}')
    return [data, in_shapes[1] or index_shape], [out or (1,)]


def _pick_positions(attrs, data_shape, index, xp):
    axis = normalize_axis(attrs['axis'], len(data_shape))
    index = _indices(index, data_shape[axis], attrs['mode'], xp)
    return axis, index.reshape(data_shape[:axis] + (1,) + data_shape[axis + 1:])


def _pick_kernel(attrs, ins, outs, ctx):
    axis, index = _pick_positions(attrs, ins[0].shape, ins[1], ctx.xp)
    picked = ctx.xp.take_along_axis(ins[0], index, axis=axis)
    outs[0][...] = picked.reshape(outs[0].shape)


def _backward_pick_kernel(attrs, ins, outs, ctx):
    out = outs[0]
    axis, index = _pick_positions(attrs, out.shape, ins[1], ctx.xp)
    out[...] = 0
    ctx.xp.put_along_axis(out, index, ins[0].reshape(index.shape), axis=axis)


PICK_PARAMS = (Param('axis', p_int, -1), Param('keepdims', p_bool, False), MODE)

register('pick', _pick_kernel, inputs=('data', 'index'), infer_shape=_pick_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]), params=PICK_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_pick(og[0], ins[1], ins[0], axis=attrs['axis'],
                              keepdims=attrs['keepdims'], mode=attrs['mode']),
             F.zeros_like(ins[1])],
         doc='One element per position along `axis`, chosen by `index`.')
register('_backward_pick', _backward_pick_kernel, inputs=('data', 'index', 'like'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[2]]),
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]), params=PICK_PARAMS,
         doc='Place `data` at the picked positions of zeros shaped like `like`.')


def _one_hot_kernel(attrs, ins, outs, ctx):
    out, depth = outs[0], attrs['depth']
    index = ins[0].astype(np.int64)
    out[...] = attrs['off_value']
    valid = (index >= 0) & (index < depth)
    hot = (index[..., None] == ctx.xp.arange(depth)) & valid[..., None]
    out[hot] = attrs['on_value']


register('one_hot', _one_hot_kernel, inputs=('indices',),
         infer_shape=lambda attrs, shapes: (list(shapes), [
             None if shapes[0] is None else tuple(shapes[0]) + (attrs['depth'],)]),
         infer_type=lambda attrs, dt: (list(dt), [attrs['dtype']]),
         params=(Param('depth', p_int, REQUIRED), Param('on_value', p_float, 1.0),
                 Param('off_value', p_float, 0.0), Param('dtype', p_dtype, np.dtype('float32'))),
         gradient=lambda F, attrs, ins, outs, og: [F.zeros_like(ins[0])],
         doc='One-hot rows of length `depth` (off_value where an index is out of range).')


def _gather_infer(attrs, in_shapes):
    data, index = in_shapes
    if data is None or index is None:
        return list(in_shapes), [None]
    if not index or index[0] > len(data):
        raise ShapeError(f'indices of shape {tuple(index)} cannot index data of shape '
                         f'{tuple(data)}: the first dimension must be at most {len(data)}')
    return list(in_shapes), [tuple(index[1:]) + tuple(data[index[0]:])]


def _gather_kernel(attrs, ins, outs, ctx):
    data, index = ins
    outs[0][...] = data[tuple(index.astype(np.int64))]


def _backward_gather_kernel(attrs, ins, outs, ctx):
    grad, index, out = ins[0], ins[1], outs[0]
    out[...] = 0
    ctx.xp.add.at(out, tuple(index.astype(np.int64)), grad)


register('gather_nd', _gather_kernel, inputs=('data', 'indices'), infer_shape=_gather_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_gather_nd(og[0], ins[1], ins[0]),
                                                   F.zeros_like(ins[1])],
         doc='Elements of `data` at the index tuples that are the columns of `indices`.')
register('_backward_gather_nd', _backward_gather_kernel, inputs=('data', 'indices', 'like'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[2]]),
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]),
         doc='Scatter-add `data` into zeros shaped like `like` (gather_nd\'s gradient).')


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
         outputs=('data_grad',), infer_shape=like_input(1),
         infer_type=like_input(0))


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
# NumPy-style advanced indexing (NDArray.__getitem__/__setitem__ with index arrays)

def p_index_key(value):
    """A tuple of ints, slices, None, Ellipsis and integer NumPy arrays (kept as given)."""
    key = value if isinstance(value, tuple) else (value,)
    for part in key:
        if not (part is None or part is Ellipsis or isinstance(part, (int, slice, np.integer))
                or isinstance(part, np.ndarray) and part.dtype.kind in 'iub'):
            raise ValueError('a tuple of ints, slices, None, Ellipsis and integer arrays')
    return key


def indexed_shape(shape, key) -> tuple:
    """The shape of ``x[key]`` for an array of `shape`, or IndexError (no data touched)."""
    return np.broadcast_to(np.empty((), np.uint8), shape)[key].shape


def _advanced_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    try:
        return list(in_shapes), [indexed_shape(shape, attrs['key'])]
    except IndexError as exc:
        raise ShapeError(f'index {attrs["key"]} does not fit shape {tuple(shape)}: {exc}')


def _advanced_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0][attrs['key']]


def _advanced_backward_kernel(attrs, ins, outs, ctx):
    out = outs[0]
    out[...] = 0
    ctx.xp.add.at(out, attrs['key'], ins[0])


def _advanced_assign_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is not None and len(in_shapes) > 1 and in_shapes[1] is not None:
        region = _advanced_infer(attrs, in_shapes[:1])[1][0]
        if broadcast_shapes(in_shapes[1], region) != region:
            raise ShapeError(f'a value of shape {tuple(in_shapes[1])} cannot fill a region of '
                             f'shape {region}')
    return list(in_shapes), [data]


def _advanced_assign_kernel(attrs, ins, outs, ctx):
    copy_into(outs[0], ins[0])
    outs[0][attrs['key']] = ins[1] if len(ins) > 1 else attrs['scalar']


KEY = Param('key', p_index_key, REQUIRED, 'the index: ints, slices, None, Ellipsis, arrays')

register('_advanced_index', _advanced_kernel, infer_shape=_advanced_infer, params=(KEY,),
         gradient=lambda F, attrs, ins, outs, og: [
             F._advanced_index_backward(og[0], ins[0], key=attrs['key'])],
         doc='``data[key]`` with NumPy\'s rules for integer index arrays (a copy).')
register('_advanced_index_backward', _advanced_backward_kernel, inputs=('data', 'like'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=first_type, params=(KEY,),
         doc='Scatter-add `data` at `key` into zeros shaped like `like`.')
register('_advanced_index_assign', _advanced_assign_kernel, inputs=('lhs', 'rhs'),
         infer_shape=_advanced_assign_infer, infer_type=first_type, params=(KEY,),
         inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: [
             F._advanced_index_assign_scalar(og[0], key=attrs['key'], scalar=0.0),
             F._reduce_to_shape(F._advanced_index(og[0], key=attrs['key']), ins[1])],
         doc='`lhs` with ``lhs[key] = rhs``.')
register('_advanced_index_assign_scalar', _advanced_assign_kernel,
         infer_shape=_advanced_assign_infer, params=(KEY, Param('scalar', p_float, 0.0)),
         inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: [
             F._advanced_index_assign_scalar(og[0], key=attrs['key'], scalar=0.0)],
         doc='`data` with ``data[key] = scalar``.')
