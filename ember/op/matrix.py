"""Shape and layout operators: reshape, transpose, slicing, joining, splitting, indexing, dot.

The rules are MXNet's: ``Reshape`` understands the special codes 0 (copy a dimension), -1
(infer), -2 (copy the rest), -3 (merge two), -4 (split one) and ``reverse``; ``dot`` contracts
the last axis of ``lhs`` with the first axis of ``rhs`` for N-d arrays; ``slice`` takes begin,
end and step tuples with None for "from the edge".

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('Reshape')
>>> op.infer_shape(op.parse_attrs({'shape': (-4, 1, 2, -2)}), [(2, 3, 4)])[1]
[(1, 2, 3, 4)]
>>> op.infer_shape(op.parse_attrs({'shape': (-1, 0), 'reverse': True}), [(10, 5, 4)])[1]
[(50, 4)]
"""
from __future__ import annotations

import numpy as np

from ember import accel
from ember.base import prod
from ember.op.elemwise import broadcast_shapes
from ember.op.registry import (REQUIRED, Param, ShapeError, p_bool, p_dtype, p_enum, p_float,
                               p_int, p_optional, p_shape, register, same_shape)

__all__ = ['p_slice', 'slice_bounds', 'normalize_axis']


def normalize_axis(axis, ndim, what='axis'):
    """`axis` in [0, ndim); raises ShapeError for one out of range."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f'{what} {axis} is out of bounds for an array of {ndim} dimensions')
    return axis % ndim


def _identity_type(attrs, dtypes):
    return list(dtypes), [dtypes[0]]


def _copy_into(out, value):
    if out is not value:
        out[...] = value


# ----------------------------------------------------------------------------------------------
# Reshape and friends.

def _reshape_target(attrs, dshape):
    if attrs['shape']:
        try:
            return accel.infer_reshape(dshape, attrs['shape'], attrs['reverse'])
        except ValueError as exc:
            raise ShapeError(str(exc)) from None
    target = list(attrs['target_shape'])      # the deprecated form: one 0 is inferred
    if attrs['keep_highest']:
        target[0] = dshape[0]
    if 0 in target:
        rest = prod(d for d in target if d != 0)
        target[target.index(0)] = prod(dshape) // max(rest, 1)
    return tuple(target)


def _reshape_infer(attrs, in_shapes):
    dshape = in_shapes[0]
    if dshape is None:
        return list(in_shapes), [None]
    out = _reshape_target(attrs, dshape)
    if prod(out) != prod(dshape):
        raise ShapeError(f'cannot reshape {tuple(dshape)} ({prod(dshape)} elements) to '
                         f'{out} ({prod(out)} elements)')
    return list(in_shapes), [out]


def _reshape_kernel(attrs, ins, outs, ctx):
    _copy_into(outs[0], ins[0].reshape(outs[0].shape))


def _like_grad(F, attrs, ins, outs, og):
    return [F.reshape_like(og[0], ins[0])]


register('Reshape', _reshape_kernel, infer_shape=_reshape_infer, gradient=_like_grad,
         inplace=((0, 0),), aliases=('reshape',),
         params=(Param('shape', p_shape, (), 'the new shape, with special codes 0 -1 -2 -3 -4'),
                 Param('reverse', p_bool, False, 'apply the special codes right to left'),
                 Param('target_shape', p_shape, (), 'deprecated: use shape'),
                 Param('keep_highest', p_bool, False, 'deprecated: keep the first dimension')),
         doc='The input with a new shape of the same size.')


def _reshape_like_infer(attrs, in_shapes):
    lhs, rhs = in_shapes
    if lhs is not None and rhs is not None and prod(lhs) != prod(rhs):
        raise ShapeError(f'cannot reshape {tuple(lhs)} to the shape of {tuple(rhs)}')
    return list(in_shapes), [rhs]


register('reshape_like', _reshape_kernel, inputs=('lhs', 'rhs'),
         infer_shape=_reshape_like_infer, infer_type=_identity_type,
         gradient=lambda F, attrs, ins, outs, og: [F.reshape_like(og[0], ins[0]),
                                                   F.zeros_like(ins[1])],
         doc='`lhs` reshaped to the shape of `rhs`.')


def _shape_op(name, shape_fn, params=(), aliases=(), doc=''):
    """Register an operator that only changes the shape: a copy into the new shape."""
    def infer(attrs, in_shapes):
        if in_shapes[0] is None:
            return list(in_shapes), [None]
        return list(in_shapes), [tuple(shape_fn(attrs, tuple(in_shapes[0])))]
    register(name, _reshape_kernel, infer_shape=infer, gradient=_like_grad, params=params,
             inplace=((0, 0),), aliases=aliases, doc=doc)


def _flatten_shape(attrs, shape):
    if not shape:
        return (1, 1)
    return (shape[0], prod(shape[1:]))


def _expand_dims_shape(attrs, shape):
    axis = normalize_axis(attrs['axis'], len(shape) + 1)
    return shape[:axis] + (1,) + shape[axis:]


def _squeeze_shape(attrs, shape):
    if attrs['axis'] is None:
        return tuple(d for d in shape if d != 1) or (1,)
    axes = {normalize_axis(a, len(shape)) for a in attrs['axis']}
    for axis in axes:
        if shape[axis] != 1:
            raise ShapeError(f'cannot squeeze axis {axis} of length {shape[axis]} in {shape}')
    return tuple(d for i, d in enumerate(shape) if i not in axes) or (1,)


_shape_op('Flatten', _flatten_shape, aliases=('flatten',),
          doc='Collapse every axis after the first: (d0, d1*...*dn).')
_shape_op('expand_dims', _expand_dims_shape, params=(Param('axis', p_int, REQUIRED),),
          doc='Insert an axis of length 1 at `axis`.')
_shape_op('squeeze', _squeeze_shape,
          params=(Param('axis', p_optional(p_shape), None, 'axes of length 1 to remove'),),
          doc='Remove axes of length 1 (all of them when `axis` is None).')


# ----------------------------------------------------------------------------------------------
# transpose, swapaxes, reverse

def _transpose_axes(attrs, ndim):
    axes = attrs['axes']
    if not axes:
        return tuple(reversed(range(ndim)))
    normalized = tuple(a % ndim if -ndim <= a < ndim else a for a in axes)
    if sorted(normalized) != list(range(ndim)):
        raise ShapeError(f'axes {tuple(axes)} are not a permutation of the {ndim} axes')
    return normalized


def _transpose_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    axes = _transpose_axes(attrs, len(shape))
    return list(in_shapes), [tuple(shape[a] for a in axes)]


def _transpose_kernel(attrs, ins, outs, ctx):
    view = ins[0].transpose(_transpose_axes(attrs, ins[0].ndim))
    if ctx.xp is np and _onednn_provider().transpose(view, outs[0]):
        return
    outs[0][...] = view


def _onednn_provider():
    # imported on first use: ember.op.nn imports this module
    from ember.op.nn import onednn_provider
    return onednn_provider


def _transpose_grad(F, attrs, ins, outs, og):
    axes = attrs['axes']
    inverse = tuple(np.argsort([a % len(axes) for a in axes])) if axes else ()
    return [F.transpose(og[0], axes=tuple(int(a) for a in inverse))]


register('transpose', _transpose_kernel, infer_shape=_transpose_infer, gradient=_transpose_grad,
         params=(Param('axes', p_shape, (), 'the permutation; () reverses the axes'),),
         doc='Permute the axes.')


def _swap_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    out = list(shape)
    a, b = (normalize_axis(attrs[k], len(shape)) for k in ('dim1', 'dim2'))
    out[a], out[b] = out[b], out[a]
    return list(in_shapes), [tuple(out)]


def _swap_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0].swapaxes(attrs['dim1'], attrs['dim2'])


register('SwapAxis', _swap_kernel, infer_shape=_swap_infer, aliases=('swapaxes',),
         params=(Param('dim1', p_int, 0), Param('dim2', p_int, 0)),
         gradient=lambda F, attrs, ins, outs, og: [F.swapaxes(og[0], dim1=attrs['dim1'],
                                                              dim2=attrs['dim2'])],
         doc='Swap two axes.')


def _flip_infer(attrs, in_shapes):
    if in_shapes[0] is not None:
        for axis in attrs['axis']:
            normalize_axis(axis, len(in_shapes[0]))
    return list(in_shapes), [in_shapes[0]]


def _flip_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.flip(ins[0], axis=attrs['axis'])


register('reverse', _flip_kernel, infer_shape=_flip_infer, aliases=('flip',),
         params=(Param('axis', p_shape, REQUIRED, 'axes to reverse'),),
         gradient=lambda F, attrs, ins, outs, og: [F.reverse(og[0], axis=attrs['axis'])],
         doc='Reverse the order of elements along the given axes.')


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
    _copy_into(outs[0], ins[0])
    outs[0][_slice_key(attrs, outs[0].shape)] = ins[1]


def _slice_assign_scalar_kernel(attrs, ins, outs, ctx):
    _copy_into(outs[0], ins[0])
    outs[0][_slice_key(attrs, outs[0].shape)] = attrs['scalar']


register('_slice_assign', _slice_assign_kernel, inputs=('lhs', 'rhs'),
         infer_shape=_assign_infer, infer_type=_identity_type, params=SLICE_PARAMS,
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
         infer_shape=_axis_assign_infer, infer_type=_identity_type, params=AXIS_SLICE_PARAMS,
         inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: [
             F._slice_axis_assign(og[0], F.zeros_like(ins[1]), **_axis_slice_args(attrs)),
             F.slice_axis(og[0], **_axis_slice_args(attrs))],
         doc='`lhs` with elements begin:end along `axis` replaced by `rhs`.')


# ----------------------------------------------------------------------------------------------
# Concat, stack, split

def _variadic_names(attrs):
    return [f'arg{i}' for i in range(attrs['num_args'])]


def _concat_infer(attrs, in_shapes):
    known = [s for s in in_shapes if s is not None]
    if len(known) < len(in_shapes):
        return list(in_shapes), [None]
    first = known[0]
    axis = normalize_axis(attrs['dim'], len(first), 'dim')
    for shape in known[1:]:
        if len(shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(shape, first))
                                           if i != axis):
            raise ShapeError(f'cannot concatenate shapes {[tuple(s) for s in known]} along '
                             f'dim {attrs["dim"]}: the other dimensions differ')
    total = sum(s[axis] for s in known)
    return list(in_shapes), [first[:axis] + (total,) + first[axis + 1:]]


def _concat_kernel(attrs, ins, outs, ctx):
    ctx.xp.concatenate(ins, axis=attrs['dim'], out=outs[0])


VARIADIC = Param('num_args', p_int, REQUIRED, 'number of inputs')

register('Concat', _concat_kernel, inputs=_variadic_names, infer_shape=_concat_infer,
         variadic='num_args', aliases=('concat',),
         params=(VARIADIC, Param('dim', p_int, 1, 'the axis to join along')),
         gradient=lambda F, attrs, ins, outs, og: _as_list(
             F._split_like(og[0], *ins, num_args=len(ins), dim=attrs['dim']), len(ins)),
         doc='Join arrays along an existing axis.')


def _as_list(result, count):
    return [result] if count == 1 else list(result)


def _split_like_infer(attrs, in_shapes):
    return list(in_shapes), list(in_shapes[1:])


def _split_like_kernel(attrs, ins, outs, ctx):
    axis = normalize_axis(attrs['dim'], ins[0].ndim, 'dim')
    start = 0
    for out in outs:
        stop = start + out.shape[axis]
        out[...] = ins[0][(slice(None),) * axis + (slice(start, stop),)]
        start = stop


register('_split_like', _split_like_kernel,
         inputs=lambda attrs: ['data'] + _variadic_names(attrs),
         outputs=lambda attrs: [f'output{i}' for i in range(attrs['num_args'])],
         infer_shape=_split_like_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0]] * attrs['num_args']),
         variadic='num_args', params=(VARIADIC, Param('dim', p_int, 1)),
         doc='Split `data` along `dim` into pieces shaped like the other inputs (the gradient '
             'of Concat).')


def _stack_infer(attrs, in_shapes):
    known = [s for s in in_shapes if s is not None]
    if len(known) < len(in_shapes):
        return list(in_shapes), [None]
    if any(s != known[0] for s in known):
        raise ShapeError(f'stack needs inputs of one shape, got {[tuple(s) for s in known]}')
    axis = normalize_axis(attrs['axis'], len(known[0]) + 1)
    return list(in_shapes), [known[0][:axis] + (len(known),) + known[0][axis:]]


def _stack_kernel(attrs, ins, outs, ctx):
    ctx.xp.stack(ins, axis=attrs['axis'], out=outs[0])


register('stack', _stack_kernel, inputs=_variadic_names, infer_shape=_stack_infer,
         variadic='num_args',
         params=(VARIADIC, Param('axis', p_int, 0, 'the new axis')),
         gradient=lambda F, attrs, ins, outs, og: _as_list(
             F.split(og[0], num_outputs=len(ins), axis=attrs['axis'], squeeze_axis=True),
             len(ins)),
         doc='Join arrays of one shape along a new axis.')


def _split_infer(attrs, in_shapes):
    count, shape = attrs['num_outputs'], in_shapes[0]
    if shape is None:
        return list(in_shapes), [None] * count
    axis = normalize_axis(attrs['axis'], len(shape))
    if count <= 0 or shape[axis] % count:
        raise ShapeError(f'num_outputs={count} does not divide axis {attrs["axis"]} of '
                         f'length {shape[axis]} in {tuple(shape)}')
    piece = shape[axis] // count
    if attrs['squeeze_axis']:
        if piece != 1:
            raise ShapeError(f'squeeze_axis needs pieces of length 1, got {piece}')
        out = shape[:axis] + shape[axis + 1:]
    else:
        out = shape[:axis] + (piece,) + shape[axis + 1:]
    return list(in_shapes), [out] * count


def _split_kernel(attrs, ins, outs, ctx):
    axis = normalize_axis(attrs['axis'], ins[0].ndim)
    pieces = ctx.xp.split(ins[0], len(outs), axis=axis)
    for out, piece in zip(outs, pieces):
        out[...] = piece.reshape(out.shape)


def _split_grad(F, attrs, ins, outs, og):
    grads = og
    if attrs['squeeze_axis']:
        grads = [F.expand_dims(g, axis=attrs['axis']) for g in og]
    if len(grads) == 1:
        return [grads[0]]
    return [F.concat(*grads, num_args=len(grads), dim=attrs['axis'])]


register('SliceChannel', _split_kernel, infer_shape=_split_infer, aliases=('split',),
         outputs=lambda attrs: [f'output{i}' for i in range(attrs['num_outputs'])],
         infer_type=lambda attrs, dt: (list(dt), [dt[0]] * attrs['num_outputs']),
         params=(Param('num_outputs', p_int, REQUIRED), Param('axis', p_int, 1),
                 Param('squeeze_axis', p_bool, False)),
         gradient=_split_grad, doc='Split an array into equal pieces along an axis.')


# ----------------------------------------------------------------------------------------------
# clip, where, Cast, _copyto

def _clip_kernel(attrs, ins, outs, ctx):
    x = ins[0]
    low, high = attrs['a_min'], attrs['a_max']
    if x.dtype.kind in 'iub':
        low, high = int(np.ceil(low)), int(np.floor(high))
    ctx.xp.clip(x, low, high, out=outs[0])


register('clip', _clip_kernel, inplace=((0, 0),), elemwise=True,
         params=(Param('a_min', p_float, REQUIRED), Param('a_max', p_float, REQUIRED)),
         gradient=lambda F, attrs, ins, outs, og: [
             og[0] * F._greater_equal_scalar(ins[0], scalar=attrs['a_min'])
             * F._lesser_equal_scalar(ins[0], scalar=attrs['a_max'])],
         doc='Limit values to [a_min, a_max].')


def _where_infer(attrs, in_shapes):
    cond, x, y = in_shapes
    _, (shape,) = same_shape(attrs, [x, y])
    if cond is not None and shape is not None and tuple(cond) != tuple(shape):
        if len(cond) != 1 or cond[0] != shape[0]:
            raise ShapeError(f'condition of shape {tuple(cond)} must have the shape of x and y '
                             f'{tuple(shape)} or be 1-D of length {shape[0]}')
    return [cond, shape, shape], [shape]


def _where_kernel(attrs, ins, outs, ctx):
    cond, x, y = ins
    if cond.shape != x.shape:
        cond = cond.reshape(cond.shape + (1,) * (x.ndim - 1))
    outs[0][...] = ctx.xp.where(cond != 0, x, y)


def _where_grad(F, attrs, ins, outs, og):
    cond, g = ins[0], og[0]
    zeros = F.zeros_like(g)
    return [F.zeros_like(cond), F.where(cond, g, zeros), F.where(cond, zeros, g)]


register('where', _where_kernel, inputs=('condition', 'x', 'y'), infer_shape=_where_infer,
         infer_type=lambda attrs, dt: _where_type(dt), gradient=_where_grad,
         doc='Elements of x where condition is non-zero, else of y.')


def _where_type(dtypes):
    cond, x, y = dtypes
    if x is not None and y is not None and x != y:
        raise ShapeError(f'x and y must have the same dtype, got {x} and {y}')
    dtype = x if x is not None else y
    return [cond, dtype, dtype], [dtype]


def _cast_kernel(attrs, ins, outs, ctx):
    _copy_into(outs[0], ins[0].astype(outs[0].dtype, copy=False))


register('Cast', _cast_kernel, aliases=('cast',),
         params=(Param('dtype', p_dtype, REQUIRED, 'the new dtype'),),
         infer_type=lambda attrs, dt: (list(dt), [attrs['dtype']]),
         gradient=lambda F, attrs, ins, outs, og: [F._cast_like(og[0], ins[0])],
         doc='Convert to another dtype.')
register('_cast_like', _cast_kernel, inputs=('data', 'like'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[0]]),
         infer_type=lambda attrs, dt: (list(dt), [dt[1]]),
         gradient=lambda F, attrs, ins, outs, og: [F._cast_like(og[0], ins[0]),
                                                   F.zeros_like(ins[1])],
         doc='`data` converted to the dtype of `like` (the gradient of Cast).')


def _copyto_kernel(attrs, ins, outs, ctx):
    source = ins[0]
    if ctx.xp is np and type(source) is not np.ndarray:
        source = source.get()       # a device array coming to the host
    elif ctx.xp is not np:
        source = ctx.xp.asarray(source)
    _copy_into(outs[0], source)


def _copyto_grad(F, attrs, ins, outs, og):
    source = ins[0]
    if hasattr(source, 'context'):   # imperative: the gradient goes back to the source device
        return [og[0].as_in_context(source.context)]
    return [og[0]]


register('_copyto', _copyto_kernel, gradient=_copyto_grad,
         infer_type=lambda attrs, dt: (list(dt), [dt[0]]),
         doc='A copy of the input, possibly on another device (the output\'s).')


# ----------------------------------------------------------------------------------------------
# Broadcasting to a shape

def _broadcast_to_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    target = attrs['shape']
    if len(target) != len(shape):
        raise ShapeError(f'cannot broadcast {tuple(shape)} to {target}: ranks differ')
    out = tuple(d if t == 0 else t for d, t in zip(shape, target))
    if any(d != t and d != 1 for d, t in zip(shape, out)):
        raise ShapeError(f'cannot broadcast {tuple(shape)} to {target}')
    return list(in_shapes), [out]


def _broadcast_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0]


def _to_input_shape(F, attrs, ins, outs, og):
    return [F._reduce_to_shape(og[0], ins[0])] + [F.zeros_like(x) for x in ins[1:]]


register('broadcast_to', _broadcast_kernel, infer_shape=_broadcast_to_infer,
         gradient=_to_input_shape, params=(Param('shape', p_shape, REQUIRED, '0 keeps a dim'),),
         doc='Broadcast axes of length 1 to the given shape.')


def _broadcast_like_infer(attrs, in_shapes):
    lhs, rhs = in_shapes
    if lhs is None or rhs is None:
        return list(in_shapes), [None]
    if len(lhs) != len(rhs) or any(a != b and a != 1 for a, b in zip(lhs, rhs)):
        raise ShapeError(f'cannot broadcast {tuple(lhs)} like {tuple(rhs)}')
    return list(in_shapes), [tuple(rhs)]


register('broadcast_like', _broadcast_kernel, inputs=('lhs', 'rhs'),
         infer_shape=_broadcast_like_infer, infer_type=_identity_type,
         gradient=_to_input_shape, doc='Broadcast `lhs` to the shape of `rhs`.')


def _broadcast_axis_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    axes, sizes = attrs['axis'], attrs['size']
    if len(axes) != len(sizes):
        raise ShapeError(f'axis {axes} and size {sizes} must have the same length')
    out = list(shape)
    for axis, size in zip(axes, sizes):
        axis = normalize_axis(axis, len(shape))
        if shape[axis] != 1:
            raise ShapeError(f'cannot broadcast axis {axis} of length {shape[axis]} (not 1)')
        out[axis] = size
    return list(in_shapes), [tuple(out)]


register('broadcast_axis', _broadcast_kernel, infer_shape=_broadcast_axis_infer,
         aliases=('broadcast_axes',), gradient=_to_input_shape,
         params=(Param('axis', p_shape, ()), Param('size', p_shape, ())),
         doc='Broadcast the given axes of length 1 to the given sizes.')


# ----------------------------------------------------------------------------------------------
# tile, repeat

def _tile_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    reps = attrs['reps']
    ndim = max(len(shape), len(reps))
    shape = (1,) * (ndim - len(shape)) + tuple(shape)
    reps = (1,) * (ndim - len(reps)) + tuple(reps)
    return list(in_shapes), [tuple(d * r for d, r in zip(shape, reps))]


def _backward_tile_kernel(attrs, ins, outs, ctx):
    grad, out = ins[0], outs[0]
    like = (1,) * (grad.ndim - out.ndim) + out.shape
    split = []
    for g, d in zip(grad.shape, like):
        split += [g // d, d]
    summed = grad.reshape(split).sum(axis=tuple(range(0, len(split), 2)))
    out[...] = summed.reshape(out.shape)


def _tile_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.tile(ins[0], attrs['reps'])


register('tile', _tile_kernel, infer_shape=_tile_infer, params=(Param('reps', p_shape, REQUIRED),),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_tile(og[0], ins[0])],
         doc='Repeat the whole array `reps` times along each axis.')
register('_backward_tile', _backward_tile_kernel, inputs=('data', 'like'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=_identity_type, doc='Sum the tiles of `data` into the shape of `like`.')


def _repeat_infer(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    count, axis = attrs['repeats'], attrs['axis']
    if axis is None:
        return list(in_shapes), [(prod(shape) * count,)]
    axis = normalize_axis(axis, len(shape))
    return list(in_shapes), [shape[:axis] + (shape[axis] * count,) + shape[axis + 1:]]


def _backward_repeat_kernel(attrs, ins, outs, ctx):
    grad, out = ins[0], outs[0]
    count, axis = attrs['repeats'], attrs['axis']
    if axis is None:
        out[...] = grad.reshape(-1, count).sum(axis=1).reshape(out.shape)
        return
    axis = normalize_axis(axis, out.ndim)
    split = out.shape[:axis + 1] + (count,) + out.shape[axis + 1:]
    out[...] = grad.reshape(split).sum(axis=axis + 1)


REPEAT_PARAMS = (Param('repeats', p_int, REQUIRED), Param('axis', p_optional(p_int), None))

def _repeat_kernel(attrs, ins, outs, ctx):
    repeated = ctx.xp.repeat(ins[0], attrs['repeats'], axis=attrs['axis'])
    outs[0][...] = repeated.reshape(outs[0].shape)


register('repeat', _repeat_kernel, infer_shape=_repeat_infer, params=REPEAT_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_repeat(og[0], ins[0], repeats=attrs['repeats'], axis=attrs['axis'])],
         doc='Repeat each element `repeats` times (along `axis`, or flattened if None).')
register('_backward_repeat', _backward_repeat_kernel, inputs=('data', 'like'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=_identity_type, params=REPEAT_PARAMS,
         doc='Sum the repeats of `data` into the shape of `like`.')


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
# dot, batch_dot

def _matrix_view(shape, transpose, left):
    """(kept dims, contracted size) of an operand of dot, as MXNet's DotShape views it."""
    if len(shape) == 1:
        return (), shape[0]
    if left != transpose:   # lhs not transposed, or rhs transposed: contract the last axis
        return tuple(shape[:-1]), shape[-1]
    return tuple(shape[1:]), shape[0]


def _dot_infer(attrs, in_shapes):
    lhs, rhs = in_shapes
    if lhs is None or rhs is None:
        return list(in_shapes), [None]
    ta, tb = attrs['transpose_a'], attrs['transpose_b']
    if len(lhs) == 1 and len(rhs) == 1:
        if ta or tb or lhs != rhs:
            raise ShapeError(f'shape mismatch: {tuple(lhs)} X {tuple(rhs)} (vectors of equal '
                             f'length, not transposed)')
        return list(in_shapes), [(1,)]
    kept_l, k_l = _matrix_view(lhs, ta, True)
    kept_r, k_r = _matrix_view(rhs, tb, False)
    if k_l != k_r:
        raise ShapeError(f'shape mismatch: {tuple(lhs)} X {tuple(rhs)} with transpose_a={ta}, '
                         f'transpose_b={tb}: contracted dimensions {k_l} and {k_r} differ')
    return list(in_shapes), [kept_l + kept_r]


def _as_matrix(x, transpose, left):
    if x.ndim == 1:
        return x.reshape(1, -1) if left else x.reshape(-1, 1)
    if left != transpose:
        matrix = x.reshape(-1, x.shape[-1])
        return matrix if left else matrix.T
    matrix = x.reshape(x.shape[0], -1)
    return matrix.T if left else matrix


def _dot_kernel(attrs, ins, outs, ctx):
    a = _as_matrix(ins[0], attrs['transpose_a'], True)
    b = _as_matrix(ins[1], attrs['transpose_b'], False)
    out = outs[0].reshape(a.shape[0], b.shape[1])
    ctx.xp.matmul(a, b, out=out)


def _backward_dot_kernel(attrs, ins, outs, ctx):
    grad, lhs, rhs = ins
    ta, tb = attrs['transpose_a'], attrs['transpose_b']
    a, b = _as_matrix(lhs, ta, True), _as_matrix(rhs, tb, False)
    g = grad.reshape(a.shape[0], b.shape[1])
    grad_a, grad_b = g @ b.T, a.T @ g          # gradients of the matrix views
    outs[0][...] = (grad_a.T if ta and lhs.ndim > 1 else grad_a).reshape(lhs.shape)
    outs[1][...] = (grad_b.T if tb and rhs.ndim > 1 else grad_b).reshape(rhs.shape)


def _dot_grad(F, attrs, ins, outs, og):
    return list(F._backward_dot(og[0], ins[0], ins[1], transpose_a=attrs['transpose_a'],
                                transpose_b=attrs['transpose_b']))


DOT_PARAMS = (Param('transpose_a', p_bool, False), Param('transpose_b', p_bool, False),
              Param('forward_stype', p_optional(p_enum('default', 'csr', 'row_sparse')), None))

register('dot', _dot_kernel, inputs=('lhs', 'rhs'), infer_shape=_dot_infer, params=DOT_PARAMS,
         gradient=_dot_grad,
         doc='Matrix product; N-d arrays contract the last axis of lhs with the first of rhs.')
register('_backward_dot', _backward_dot_kernel, inputs=('out_grad', 'lhs', 'rhs'),
         outputs=('lhs_grad', 'rhs_grad'), params=DOT_PARAMS[:2],
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1], shapes[2]]),
         infer_type=lambda attrs, dt: (list(dt), [dt[1], dt[2]]),
         doc='The gradients of dot with respect to lhs and rhs.')


def _batch_dot_infer(attrs, in_shapes):
    lhs, rhs = in_shapes
    if lhs is None or rhs is None:
        return list(in_shapes), [None]
    if len(lhs) < 3 or len(rhs) != len(lhs) or lhs[:-2] != rhs[:-2]:
        raise ShapeError(f'batch_dot needs arrays of rank >= 3 with equal batch dimensions, '
                         f'got {tuple(lhs)} X {tuple(rhs)}')
    m, k = (lhs[-1], lhs[-2]) if attrs['transpose_a'] else lhs[-2:]
    k2, n = (rhs[-1], rhs[-2]) if attrs['transpose_b'] else rhs[-2:]
    if k != k2:
        raise ShapeError(f'shape mismatch: {tuple(lhs)} X {tuple(rhs)}: contracted dimensions '
                         f'{k} and {k2} differ')
    return list(in_shapes), [tuple(lhs[:-2]) + (m, n)]


def _batch_dot_kernel(attrs, ins, outs, ctx):
    a, b = ins
    if attrs['transpose_a']:
        a = a.swapaxes(-1, -2)
    if attrs['transpose_b']:
        b = b.swapaxes(-1, -2)
    ctx.xp.matmul(a, b, out=outs[0])


def _batch_dot_grad(F, attrs, ins, outs, og):
    lhs, rhs, g = ins[0], ins[1], og[0]
    ta, tb = attrs['transpose_a'], attrs['transpose_b']
    grad_l = (F.batch_dot(rhs, g, transpose_a=tb, transpose_b=True) if ta
              else F.batch_dot(g, rhs, transpose_b=not tb))
    grad_r = (F.batch_dot(g, lhs, transpose_a=True, transpose_b=ta) if tb
              else F.batch_dot(lhs, g, transpose_a=not ta))
    return [grad_l, grad_r]


register('batch_dot', _batch_dot_kernel, inputs=('lhs', 'rhs'), infer_shape=_batch_dot_infer,
         params=DOT_PARAMS, gradient=_batch_dot_grad,
         doc='Matrix products of the matching matrices of two batches.')


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
    _copy_into(outs[0], ins[0])
    outs[0][attrs['key']] = ins[1] if len(ins) > 1 else attrs['scalar']


KEY = Param('key', p_index_key, REQUIRED, 'the index: ints, slices, None, Ellipsis, arrays')

register('_advanced_index', _advanced_kernel, infer_shape=_advanced_infer, params=(KEY,),
         gradient=lambda F, attrs, ins, outs, og: [
             F._advanced_index_backward(og[0], ins[0], key=attrs['key'])],
         doc='``data[key]`` with NumPy\'s rules for integer index arrays (a copy).')
register('_advanced_index_backward', _advanced_backward_kernel, inputs=('data', 'like'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=_identity_type, params=(KEY,),
         doc='Scatter-add `data` at `key` into zeros shaped like `like`.')
register('_advanced_index_assign', _advanced_assign_kernel, inputs=('lhs', 'rhs'),
         infer_shape=_advanced_assign_infer, infer_type=_identity_type, params=(KEY,),
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
