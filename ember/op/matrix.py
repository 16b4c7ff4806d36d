"""Shape and layout operators: reshape, transpose, joining, splitting, casting, broadcasting,
tiling, the diagonal, the shape as an array, and moving blocks between depth and space.

The rules are MXNet's: ``Reshape`` understands the special codes 0 (copy a dimension), -1
(infer), -2 (copy the rest), -3 (merge two), -4 (split one) and ``reverse``; ``dot`` contracts
the last axis of ``lhs`` with the first axis of ``rhs`` for N-d arrays (:mod:`ember.op.dot`);
slicing and indexing are :mod:`ember.op.indexing`'s.

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

from ember import accel, backend
from ember.op import precision
from ember.base import prod
from ember.op.registry import (REQUIRED, Param, ShapeError, like_input, p_bool, p_dtype, p_float,
                               p_int, p_optional, p_shape, register, same_shape)

__all__ = ['normalize_axis', 'first_type', 'copy_into']


def normalize_axis(axis, ndim, what='axis'):
    """`axis` in [0, ndim); raises ShapeError for one out of range."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f'{what} {axis} is out of bounds for an array of {ndim} dimensions')
    return axis % ndim


def first_type(attrs, dtypes):
    """An infer_type whose one output takes the first input's dtype."""
    return list(dtypes), [dtypes[0]]


def copy_into(out, value):
    """out = value, unless they are one array."""
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
    copy_into(outs[0], ins[0].reshape(outs[0].shape))


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
         infer_shape=_reshape_like_infer, infer_type=first_type,
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
    if outs[0].dtype in precision.ROUNDED and ins[0].dtype in precision.WIDE:
        # to bfloat16 or float16: stochastically inside a stream (NEURON_RT_STOCHASTIC_*)
        precision.round_into(outs[0], ins[0])
        return
    copy_into(outs[0], ins[0].astype(outs[0].dtype, copy=False))


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
    source, out = ins[0], outs[0]
    if type(source) is np.ndarray and type(out) is np.ndarray:
        copy_into(out, source)
    else:   # a GPU takes part: host <-> device, or between GPUs (peer to peer or via the host)
        backend.copy_between(out, source)


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
         infer_shape=_broadcast_like_infer, infer_type=first_type,
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
         infer_type=first_type, doc='Sum the tiles of `data` into the shape of `like`.')


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
         infer_type=first_type, params=REPEAT_PARAMS,
         doc='Sum the repeats of `data` into the shape of `like`.')


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
         outputs=('data_grad',), params=DIAG_PARAMS, infer_shape=like_input(1),
         infer_type=like_input(0))


# ----------------------------------------------------------------------------------------------
# shape_array, size_array

_INT64 = np.dtype(np.int64)


def zero_gradient(F, attrs, inputs, outputs, out_grads):
    return [F.zeros_like(x) for x in inputs]


def _shape_array_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.asarray(ins[0].shape, dtype=np.int64)


register('shape_array', _shape_array_kernel,
         infer_shape=lambda attrs, s: (list(s), [None if s[0] is None else (len(s[0]),)]),
         infer_type=lambda attrs, dt: (list(dt), [_INT64]), gradient=zero_gradient,
         doc='The shape of the input as a 1-D int64 array.')
register('size_array', lambda attrs, ins, outs, ctx: outs[0].fill(ins[0].size),
         infer_shape=lambda attrs, s: (list(s), [(1,)]),
         infer_type=lambda attrs, dt: (list(dt), [_INT64]), gradient=zero_gradient,
         doc='The number of elements of the input as an int64 array of shape (1,).')


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
