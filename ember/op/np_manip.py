"""``mx.np``'s array manipulation: operators whose outputs are elements of their inputs, moved
(transpose, flip, roll, concatenate, split, take, where, pad, ...).

Such a *gather* is declared once with a NumPy function ``fn(xp, *arrays, **attrs)``. Its
gradient needs no rule of its own: the backward operator runs the same function on arrays that
hold each element's position (1, 2, ... in place of the values; 0 marks elements that come from
no input, such as padding) and adds every output gradient into the position it names. That is
exact for every gather, broadcasting and repeats included. Shapes come from running the function
on zero-stride stand-ins of the inputs, unless a rule is given.

>>> import numpy as np
>>> from ember.op import registry
>>> from ember.op.registry import KernelContext
>>> back = registry.get('_backward_npi_flip')
>>> grad = np.empty(3)
>>> back.kernel({'axis': 0}, [np.array([10., 20., 30.]), np.zeros(3)], [grad],
...             KernelContext(None))
>>> grad
array([30., 20., 10.])
"""
from __future__ import annotations

import numpy as np

from ember.op.np_rules import (broadcast_all, eval_shapes, gradient_shapes, normalize_axis,
                               outputs_of, p_any, p_int_tuple, p_scalar, p_shape_or_int,
                               promote_all, promote_scalar, scalar_as)
from ember.op.np_rules import unknown as _unknown
from ember.op.registry import (Param, ShapeError, p_axes, p_bool, p_int, p_optional, p_shape,
                               p_str, register)

__all__ = ['gather']


def _first_type(count):
    return lambda attrs, in_dtypes: (list(in_dtypes), [in_dtypes[0]] * count(attrs))


def gather(name, fn, inputs=('a',), params=(), diff=None, outputs=1, infer_shape=None,
           infer_type=None, index_attrs=None, variadic=None, doc=''):
    """Register gather `name` computing ``fn(xp, *arrays, **attrs)`` and its backward.

    `diff`: indices of the inputs that get gradients (default all); `outputs`: a count or
    fn(attrs) -> count; `index_attrs`: fn(attrs) -> attrs for the position pass (scalars that
    would be taken for positions become 0)."""
    count = outputs if callable(outputs) else (lambda attrs: outputs)
    fixed_inputs = not callable(inputs)
    diff_of = (lambda n: tuple(range(n))) if diff is None else (lambda n: tuple(diff))
    shape_rule = infer_shape or _eval_shape(fn, count)
    output_names = (lambda attrs: [f'output{i}' for i in range(count(attrs))])

    def kernel(attrs, ins, outs, ctx):
        results = fn(ctx.xp, *ins, **attrs)
        results = results if isinstance(results, (list, tuple)) else [results]
        for out, result in zip(outs, results):
            out[...] = result

    def gradient(F, attrs, ins, outs, og):
        grads = getattr(F, f'_backward{name}')(*og, *ins, **attrs)
        grads = outputs_of(grads)
        wanted = diff_of(len(ins))
        result = [None] * len(ins)
        for index, grad in zip(wanted, grads):
            result[index] = grad
        return result

    register(name, kernel, inputs=inputs, outputs=output_names, params=params,
             infer_shape=shape_rule, infer_type=infer_type or _first_type(count), gradient=gradient,
             variadic=variadic, doc=doc)
    _register_backward(name, fn, inputs, params, count, diff_of, index_attrs, fixed_inputs,
                       variadic, shape_rule)


def _eval_shape(fn, count):
    def infer(attrs, in_shapes):
        if any(s is None for s in in_shapes):
            return list(in_shapes), [None] * count(attrs)
        return list(in_shapes), eval_shapes(fn, in_shapes, attrs=attrs)
    return infer


def _register_backward(name, fn, inputs, params, count, diff_of, index_attrs, fixed, variadic,
                       shape_rule):
    def input_names(attrs):
        forward = list(inputs) if fixed else list(inputs(attrs))
        return [f'ograd{i}' for i in range(count(attrs))] + forward

    def split(attrs, items):
        n = count(attrs)
        return items[:n], items[n:]

    def forward_shapes(attrs, shapes):
        forward = split(attrs, shapes)[1]
        if any(s is None for s in forward):
            return None
        return shape_rule(attrs, forward)[1]

    def gradient_shapes_of(attrs, shapes):
        forward = split(attrs, shapes)[1]
        return [forward[i] for i in diff_of(len(forward))]

    def infer_shape(attrs, in_shapes):
        return gradient_shapes(count(attrs), forward_shapes, gradient_shapes_of)(attrs,
                                                                                 in_shapes)

    def infer_type(attrs, in_dtypes):
        _, forward = split(attrs, in_dtypes)
        return list(in_dtypes), [forward[i] for i in diff_of(len(forward))]

    def kernel(attrs, ins, outs, ctx):
        ograds, forward = split(attrs, ins)
        wanted = diff_of(len(forward))
        position_attrs = index_attrs(attrs) if index_attrs else attrs
        grads = positions_vjp(ctx.xp, fn, ograds, forward, wanted, position_attrs)
        for out, grad in zip(outs, grads):
            out[...] = grad

    register(f'_backward{name}', kernel, inputs=input_names,
             outputs=lambda attrs: [f'grad{i}' for i in range(len(diff_of(
                 len(input_names(attrs)) - count(attrs))))],
             params=params, infer_shape=infer_shape, infer_type=infer_type, variadic=variadic,
             doc=f'Gradient of ``{name}``: output gradients added at the positions they came '
                 f'from.')


def positions_vjp(xp, fn, ograds, inputs, wanted, attrs):
    """Input gradients of gather `fn`: run it on position arrays, add gradients by position."""
    arrays, start, spans = list(inputs), 1, []
    for index in wanted:
        size = inputs[index].size
        arrays[index] = xp.arange(start, start + size, dtype=np.int64).reshape(
            inputs[index].shape)
        spans.append((start, size))
        start += size
    results = fn(xp, *arrays, **attrs)
    results = results if isinstance(results, (list, tuple)) else [results]
    positions = xp.concatenate([xp.asarray(r).reshape(-1) for r in results] or [xp.zeros(0)])
    weights = xp.concatenate([g.reshape(-1).astype(np.float64) for g in ograds]
                             or [xp.zeros(0)])
    totals = xp.bincount(positions.astype(np.int64), weights=weights, minlength=start)
    return [totals[begin:begin + size].reshape(inputs[index].shape)
            for index, (begin, size) in zip(wanted, spans)]


# ----------------------------------------------------------------------------------------------
# Shape rules of the common gathers (cheaper than running on stand-ins)

def _transpose_shape(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [None]
    axes = attrs['axes']
    if axes is None:
        return list(in_shapes), [tuple(reversed(shape))]
    if sorted(a % max(len(shape), 1) for a in axes) != list(range(len(shape))):
        raise ShapeError(f'axes {axes} are not a permutation of the {len(shape)} axes')
    return list(in_shapes), [tuple(shape[a] for a in axes)]


def _broadcast_to_shape(attrs, in_shapes):
    shape = in_shapes[0]
    if shape is None:
        return list(in_shapes), [attrs['shape']]
    target = attrs['shape']
    if broadcast_all([shape, target]) != tuple(target):
        raise ShapeError(f'an array of shape {tuple(shape)} cannot be broadcast to {target}')
    return list(in_shapes), [tuple(target)]


def _joined_shape(stack):
    def infer(attrs, in_shapes):
        if any(s is None for s in in_shapes):
            return list(in_shapes), [None]
        first, axis = in_shapes[0], attrs['axis']
        if not stack and axis is None:
            return list(in_shapes), [(sum(int(np.prod(s)) for s in in_shapes),)]
        if any(len(s) != len(first) for s in in_shapes) or (
                stack and any(tuple(s) != tuple(first) for s in in_shapes)):
            raise ShapeError(f'arrays of shapes {[tuple(s) for s in in_shapes]} cannot be '
                             f'{"stacked" if stack else "joined"}')
        if stack:
            axis = normalize_axis(axis, len(first) + 1)[0]
            return list(in_shapes), [tuple(first[:axis]) + (len(in_shapes),)
                                     + tuple(first[axis:])]
        axis = normalize_axis(axis, len(first))[0]
        for s in in_shapes:
            if any(a != b for i, (a, b) in enumerate(zip(s, first)) if i != axis):
                raise ShapeError(f'arrays of shapes {[tuple(t) for t in in_shapes]} differ '
                                 f'off axis {axis}')
        joined = list(first)
        joined[axis] = sum(s[axis] for s in in_shapes)
        return list(in_shapes), [tuple(joined)]
    return infer


def _promoted_type(attrs, in_dtypes):
    if any(d is None for d in in_dtypes):
        return list(in_dtypes), [None]
    return list(in_dtypes), [promote_all(list(in_dtypes))]


def _variadic(attrs):
    return [f'arg{i}' for i in range(attrs['num_args'])]


def _cast_all(xp, arrays):
    dtype = promote_all([a.dtype for a in arrays])
    return [a.astype(dtype, copy=False) for a in arrays]


# ----------------------------------------------------------------------------------------------
# The gathers

_AXIS_OPT = Param('axis', p_optional(p_int), None)

gather('_npi_transpose', lambda xp, a, axes: xp.transpose(a, axes),
       params=(Param('axes', p_optional(p_axes), None),), infer_shape=_transpose_shape,
       doc='``np.transpose``: axes permuted (reversed for None).')
gather('_npi_broadcast_to', lambda xp, a, shape: xp.broadcast_to(a, shape),
       params=(Param('shape', p_shape),), infer_shape=_broadcast_to_shape,
       doc='``np.broadcast_to`` with NumPy\'s broadcasting rules.')
gather('_npi_swapaxes', lambda xp, a, axis1, axis2: xp.swapaxes(a, axis1, axis2),
       params=(Param('axis1', p_int), Param('axis2', p_int)),
       doc='``np.swapaxes``: two axes interchanged.')
gather('_npi_moveaxis',
       lambda xp, a, source, destination: xp.moveaxis(a, source, destination),
       params=(Param('source', p_int_tuple), Param('destination', p_int_tuple)),
       doc='``np.moveaxis``: axes moved to new positions, the others keeping their order.')
gather('_npi_concatenate',
       lambda xp, *arrays, axis, num_args: xp.concatenate(
           _cast_all(xp, [a.reshape(-1) for a in arrays] if axis is None else arrays),
           axis=0 if axis is None else axis),
       inputs=_variadic, variadic='num_args', infer_shape=_joined_shape(False),
       infer_type=_promoted_type,
       params=(Param('num_args', p_int), Param('axis', p_optional(p_int), 0)),
       doc='``np.concatenate`` along an axis (of the flattened arrays for None).')
gather('_npi_stack',
       lambda xp, *arrays, axis, num_args: xp.stack(_cast_all(xp, arrays), axis=axis),
       inputs=_variadic, variadic='num_args', infer_shape=_joined_shape(True),
       infer_type=_promoted_type, params=(Param('num_args', p_int), Param('axis', p_int, 0)),
       doc='``np.stack``: arrays of one shape joined along a new axis.')


def _split(xp, a, indices_or_sections, axis, uneven):
    if not uneven and isinstance(indices_or_sections, int) and \
            a.shape[axis] % indices_or_sections:
        raise ValueError(f'an axis of length {a.shape[axis]} does not split into '
                         f'{indices_or_sections} equal parts; np.array_split allows unequal '
                         f'parts')
    return xp.array_split(a, indices_or_sections, axis=axis)


def _split_count(attrs):
    sections = attrs['indices_or_sections']
    return sections if isinstance(sections, int) else len(sections) + 1


gather('_npi_split', _split, outputs=_split_count,
       params=(Param('indices_or_sections', p_shape_or_int), Param('axis', p_int, 0),
               Param('uneven', p_bool, False)),
       doc='``np.split`` / ``np.array_split``: parts of an array along an axis.')
gather('_npi_flip', lambda xp, a, axis: xp.flip(a, axis),
       params=(Param('axis', p_optional(p_axes), None),),
       infer_shape=lambda attrs, shapes: (list(shapes), [shapes[0]]),
       doc='``np.flip``: elements in reverse order along axes.')
gather('_npi_roll', lambda xp, a, shift, axis: xp.roll(a, shift, axis),
       params=(Param('shift', p_int_tuple), Param('axis', p_optional(p_axes), None)),
       infer_shape=lambda attrs, shapes: (list(shapes), [shapes[0]]),
       doc='``np.roll``: elements shifted cyclically.')
gather('_npi_rot90', lambda xp, a, k, axes: xp.rot90(a, k, axes),
       params=(Param('k', p_int, 1), Param('axes', p_shape, (0, 1))),
       doc='``np.rot90``: rotation by 90 degrees in the plane of two axes.')
gather('_npi_tile', lambda xp, a, reps: xp.tile(a, reps), params=(Param('reps', p_int_tuple),),
       doc='``np.tile``: the array repeated as tiles.')
gather('_npi_repeat', lambda xp, a, repeats, axis: xp.repeat(a, repeats, axis),
       params=(Param('repeats', p_shape_or_int), _AXIS_OPT),
       doc='``np.repeat``: each element repeated.')


def _pad(xp, a, pad_width, mode, constant_values, reflect_type):
    if mode == 'constant':
        return xp.pad(a, pad_width, mode, constant_values=constant_values)
    if mode in ('reflect', 'symmetric'):
        return xp.pad(a, pad_width, mode, reflect_type=reflect_type)
    return xp.pad(a, pad_width, mode)


_PAD_GATHERS = ('constant', 'edge', 'reflect', 'symmetric', 'wrap')


def _pad_positions(attrs):
    if attrs['mode'] not in _PAD_GATHERS or attrs['reflect_type'] == 'odd':
        raise ShapeError(f"np.pad: mode={attrs['mode']!r}"
                         f"{' with reflect_type odd' if attrs['reflect_type'] == 'odd' else ''}"
                         f" computes values from many elements and has no gradient in Ember; "
                         f"modes {', '.join(_PAD_GATHERS)} have one")
    return dict(attrs, constant_values=0)


gather('_npi_pad', _pad, index_attrs=_pad_positions,
       params=(Param('pad_width', p_any), Param('mode', p_str, 'constant'),
               Param('constant_values', p_any, 0), Param('reflect_type', p_str, 'even')),
       doc='``np.pad``; gradients for the modes that copy elements.')
gather('_npi_diag', lambda xp, a, k: xp.diag(a, k), params=(Param('k', p_int, 0),),
       doc='``np.diag``: the diagonal of a matrix, or a matrix of a diagonal.')
gather('_npi_diagflat', lambda xp, a, k: xp.diagflat(a, k), params=(Param('k', p_int, 0),),
       doc='``np.diagflat``: a matrix with the flattened input on a diagonal.')
gather('_npi_diagonal',
       lambda xp, a, offset, axis1, axis2: xp.diagonal(a, offset, axis1, axis2),
       params=(Param('offset', p_int, 0), Param('axis1', p_int, 0), Param('axis2', p_int, 1)),
       doc='``np.diagonal``: diagonals over two axes.')
gather('_npi_tril', lambda xp, a, k: xp.tril(a, k), params=(Param('k', p_int, 0),),
       infer_shape=lambda attrs, shapes: (list(shapes), [shapes[0]]),
       doc='``np.tril``: the lower triangle, zeros above diagonal `k`.')
gather('_npi_triu', lambda xp, a, k: xp.triu(a, k), params=(Param('k', p_int, 0),),
       infer_shape=lambda attrs, shapes: (list(shapes), [shapes[0]]),
       doc='``np.triu``: the upper triangle, zeros below diagonal `k`.')


def _as_index(xp, indices):
    return indices if indices.dtype.kind in 'iu' else indices.astype(np.int64)


gather('_npi_take',
       lambda xp, a, indices, axis, mode: xp.take(a, _as_index(xp, indices), axis=axis,
                                                  mode=mode),
       inputs=('a', 'indices'), diff=(0,), params=(_AXIS_OPT, Param('mode', p_str, 'raise')),
       doc='``np.take``: elements at integer positions along an axis.')
gather('_npi_take_along_axis',
       lambda xp, a, indices, axis: xp.take_along_axis(a, _as_index(xp, indices), axis),
       inputs=('a', 'indices'), diff=(0,), params=(_AXIS_OPT,),
       doc='``np.take_along_axis``: elements picked by index arrays along an axis.')


def _where(xp, condition, x, y):
    x, y = _cast_all(xp, [x, y])
    return xp.where(condition, x, y)


def _where_shape(attrs, in_shapes):
    if any(s is None for s in in_shapes):
        return list(in_shapes), [None]
    return list(in_shapes), [broadcast_all(in_shapes)]


gather('_npi_where', _where, inputs=('condition', 'x', 'y'), diff=(1, 2),
       infer_shape=_where_shape,
       infer_type=lambda attrs, dtypes: (list(dtypes), [None if _unknown(dtypes[1:]) else
                                                        promote_all(list(dtypes[1:]))]),
       doc='``np.where(condition, x, y)``: elements of x where the condition holds, else y.')


def _where_scalar_type(attrs, in_dtypes):
    dtype = in_dtypes[1]
    return list(in_dtypes), [None if dtype is None else promote_scalar(dtype, attrs['scalar'])]


def _where_scalar(xp, condition, a, scalar, reverse):
    dtype = promote_scalar(a.dtype, scalar)
    value = scalar_as(scalar, dtype)
    a = a.astype(dtype, copy=False)
    return xp.where(condition, value, a) if reverse else xp.where(condition, a, value)


gather('_npi_where_scalar', _where_scalar, inputs=('condition', 'x'), diff=(1,),
       infer_shape=_where_shape, infer_type=_where_scalar_type,
       index_attrs=lambda attrs: dict(attrs, scalar=0),
       params=(Param('scalar', p_scalar), Param('reverse', p_bool, False)),
       doc='``np.where`` with a Python scalar for y (for x with reverse=True).')


def _delete(xp, a, obj, axis):
    return xp.delete(a, list(obj) if isinstance(obj, tuple) else obj, axis=axis)


gather('_npi_delete', _delete, params=(Param('obj', p_shape_or_int), _AXIS_OPT),
       doc='``np.delete``: the array without the given positions.')


def _insert(xp, a, values, obj, axis):
    values = values.astype(a.dtype, copy=False)
    return xp.insert(a, list(obj) if isinstance(obj, tuple) else obj, values, axis=axis)


gather('_npi_insert', _insert, inputs=('a', 'values'),
       params=(Param('obj', p_shape_or_int), _AXIS_OPT),
       doc='``np.insert``: values inserted before the given positions.')
def p_basic_key(value):
    """A basic index: a tuple of ints, slices, None and Ellipsis."""
    key = value if isinstance(value, tuple) else (value,)
    for part in key:
        if not (part is None or part is Ellipsis or isinstance(part, slice)
                or isinstance(part, (int, np.integer)) and not isinstance(part, bool)):
            raise ValueError('a tuple of ints, slices, None and Ellipsis')
    return key


gather('_npi_basic_index', lambda xp, a, key: a[key], params=(Param('key', p_basic_key),),
       doc='``a[key]`` for a basic key (ints, slices, None, Ellipsis), NumPy\'s rules.')
gather('_npi_resize', lambda xp, a, new_shape: xp.resize(a, new_shape),
       params=(Param('new_shape', p_shape),),
       infer_shape=lambda attrs, shapes: (list(shapes), [tuple(attrs['new_shape'])]),
       doc='``np.resize``: the flattened array repeated or cut to a new shape.')


# ----------------------------------------------------------------------------------------------
# Sorting positions (no gradient: the result is positions)

def _argsort_kernel(attrs, ins, outs, ctx):
    xp, a = ctx.xp, ins[0]
    axis = attrs['axis']
    source = a.reshape(-1) if axis is None else a
    order = xp.argsort(-source if attrs['descending'] else source,
                       axis=-1 if axis is None else axis, kind='stable')
    outs[0][...] = order


def _argsort_shape(attrs, shapes):
    shape = shapes[0]
    if shape is None:
        return list(shapes), [None]
    if attrs['axis'] is None:
        return list(shapes), [(int(np.prod(shape)),)]
    normalize_axis(attrs['axis'], len(shape))
    return list(shapes), [tuple(shape)]


register('_npi_argsort', _argsort_kernel, inputs=('a',),
         params=(Param('axis', p_optional(p_int), -1), Param('descending', p_bool, False)),
         infer_shape=_argsort_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [np.dtype(np.int64)]),
         gradient=lambda F, attrs, ins, outs, og: [F.zeros_like(ins[0])],
         doc='``np.argsort``: positions that sort the array (stable).')
