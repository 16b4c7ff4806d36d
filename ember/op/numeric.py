"""Numeric operators MXNet 1.x has beside its main families: eye, linspace, histogram, hypot,
cumsum, index raveling, split_v2, im2col/col2im, finiteness checks, sums of squares,
reset_arrays and the AMP casts.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_ravel_multi_index')
>>> out = np.empty(2)
>>> op.kernel(op.parse_attrs({'shape': (3, 4)}), [np.array([[1., 2.], [3., 0.]])], [out],
...           registry.KernelContext(None))
>>> out
array([7., 8.])
"""
from __future__ import annotations

import math

import numpy as np

from ember.op.elemwise import apply_ufunc, broadcast_shapes
from ember.op import precision
from ember.op.init import CTX
from ember.op.optimizer_ops import _p_floats
from ember.op.host import register
from ember.op.registry import (REQUIRED, Param, ShapeError, p_bool, p_dtype, p_float, p_int,
                               p_optional, p_shape, same_shape, same_type)

__all__ = ['conv_positions']


def _zero_grads(F, attrs, ins, outs, og):
    return [F.zeros_like(x) for x in ins]


def _dtype_param(default):
    return Param('dtype', p_optional(p_dtype), np.dtype(default), 'dtype of the output')


def _no_input_type(attrs, in_dtypes):
    return [], [attrs['dtype'] or np.dtype(np.float32)]


# ----------------------------------------------------------------------------------------------
# eye and linspace.

def _eye_shape(attrs, in_shapes):
    rows = attrs['N']
    cols = attrs['M'] or rows
    if rows < 0 or cols < 0:
        raise ShapeError(f'N={rows} and M={cols} must not be negative')
    return [], [(rows, cols)]


def _eye_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.eye(*outs[0].shape, k=attrs['k'], dtype=outs[0].dtype)


register('_eye', _eye_kernel, inputs=(), infer_shape=_eye_shape, infer_type=_no_input_type,
         params=(Param('N', p_int, REQUIRED, 'Rows.'),
                 Param('M', p_int, 0, 'Columns (0: N).'),
                 Param('k', p_int, 0, 'Diagonal: 0 the main one, > 0 above, < 0 below.'),
                 CTX, _dtype_param('float32')),
         doc='A 2-D array with ones on diagonal k and zeros elsewhere.')


def _linspace_shape(attrs, in_shapes):
    if attrs['num'] < 0:
        raise ShapeError(f'num={attrs["num"]} must not be negative')
    return [], [(attrs['num'],)]


def _linspace_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.linspace(attrs['start'], attrs['stop'], attrs['num'],
                                   endpoint=attrs['endpoint'])


register('_linspace', _linspace_kernel, inputs=(), infer_shape=_linspace_shape,
         infer_type=_no_input_type,
         params=(Param('start', p_float, REQUIRED, 'The first value.'),
                 Param('stop', p_float, REQUIRED, 'The last value (or the bound, see endpoint).'),
                 Param('num', p_int, REQUIRED, 'How many values.'),
                 Param('endpoint', p_bool, True, 'Whether stop is the last value.'),
                 CTX, _dtype_param('float32')),
         doc='num evenly spaced values from start to stop.')


# ----------------------------------------------------------------------------------------------
# histogram.

def _histogram_inputs(attrs):
    return ['data'] if attrs['bin_cnt'] is not None else ['data', 'bins']


def _histogram_shape(attrs, in_shapes):
    count = attrs['bin_cnt']
    if count is None:
        bins = in_shapes[1]
        if bins is None:
            return list(in_shapes), [None, None]
        if len(bins) != 1 or bins[0] < 2:
            raise ShapeError(f'bins must be 1-D with at least 2 edges, got {bins}')
        return list(in_shapes), [(bins[0] - 1,), bins]
    if count < 1 or attrs['range'] is None:
        raise ShapeError(f'bin_cnt={count} needs a positive count and a range')
    return list(in_shapes), [(count,), (count + 1,)]


def _histogram_kernel(attrs, ins, outs, ctx):
    data = ins[0].reshape(-1)
    if attrs['bin_cnt'] is None:
        counts, edges = np.histogram(data, bins=ins[1])
    else:
        counts, edges = np.histogram(data, bins=attrs['bin_cnt'], range=attrs['range'])
    outs[0][...] = counts
    outs[1][...] = edges


register('_histogram', _histogram_kernel, inputs=_histogram_inputs, outputs=('counts', 'edges'),
         infer_shape=_histogram_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [np.dtype(np.int64), dtypes[-1]]),
         params=(Param('bin_cnt', p_optional(p_int), None,
                       'Number of equal bins over range (None: the edges are an input).'),
                 Param('range', p_optional(_p_floats), None,
                       'The (low, high) the bins cover.')),
         doc='Counts of the values in each bin (the last bin includes its right edge), and the '
             'bin edges.')


# ----------------------------------------------------------------------------------------------
# hypot.

def _hypot_grads(F, a, b, out, og):
    return [F._reduce_to_shape(og * a / out, a), F._reduce_to_shape(og * b / out, b)]


register('broadcast_hypot', lambda attrs, ins, outs, ctx: apply_ufunc(np.hypot, ins, outs[0]),
         inputs=('lhs', 'rhs'), elemwise=True,
         infer_shape=lambda attrs, shapes: (list(shapes), [None if None in shapes else
                                                           broadcast_shapes(*shapes)]),
         gradient=lambda F, attrs, ins, outs, og: _hypot_grads(F, ins[0], ins[1], outs[0],
                                                               og[0]),
         doc='sqrt(lhs^2 + rhs^2) with broadcasting.')
register('_hypot', lambda attrs, ins, outs, ctx: apply_ufunc(np.hypot, ins, outs[0]),
         inputs=('lhs', 'rhs'), infer_shape=same_shape, elemwise=True, aliases=('_Hypot',),
         gradient=lambda F, attrs, ins, outs, og: [og[0] * ins[0] / outs[0],
                                                   og[0] * ins[1] / outs[0]],
         doc='sqrt(lhs^2 + rhs^2) of two arrays of one shape.')
register('_hypot_scalar',
         lambda attrs, ins, outs, ctx: apply_ufunc(np.hypot, (ins[0], attrs['scalar']),
                                                   outs[0]),
         params=(Param('scalar', p_float, REQUIRED, 'The other operand.'),), elemwise=True,
         aliases=('_HypotScalar',), inplace=((0, 0),),
         gradient=lambda F, attrs, ins, outs, og: [og[0] * ins[0] / outs[0]],
         doc='sqrt(x^2 + scalar^2).')


# ----------------------------------------------------------------------------------------------
# cumsum.

def _cumsum_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    axis = attrs['axis']
    if axis is None:
        return list(in_shapes), [(int(np.prod(data)),)]
    if not -len(data) <= axis < len(data):
        raise ShapeError(f'axis={axis} is out of range for shape {data}')
    return list(in_shapes), [tuple(data)]


def _cumsum_kernel(attrs, ins, outs, ctx):
    data = ins[0]
    axis = attrs['axis']
    source = data.reshape(-1) if axis is None else data
    ctx.xp.cumsum(source, axis=0 if axis is None else axis, out=outs[0],
                  dtype=outs[0].dtype)


def _cumsum_backward(attrs, ins, outs, ctx):
    grad, data = ins
    axis = 0 if attrs['axis'] is None else attrs['axis']
    flipped = np.flip(grad, axis=axis)
    outs[0][...] = np.flip(np.cumsum(flipped, axis=axis), axis=axis).reshape(data.shape)


_CUMSUM = (Param('axis', p_optional(p_int), None, 'The axis (None: the flattened array).'),
           Param('dtype', p_optional(p_dtype), None, 'dtype of the sums (None: the input\'s).'))
register('cumsum', _cumsum_kernel, inputs=('a',), infer_shape=_cumsum_shape, params=_CUMSUM,
         infer_type=lambda attrs, dtypes: (list(dtypes), [attrs['dtype'] or dtypes[0]]),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_cumsum(og[0], ins[0], **attrs)],
         doc='Cumulative sums along axis (of the flattened array when axis is None).')
register('_backward_cumsum', _cumsum_backward, inputs=('out_grad', 'a'), params=_CUMSUM,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='The gradient of cumsum: cumulative sums from the end.')


# ----------------------------------------------------------------------------------------------
# ravel_multi_index and unravel_index.

def _ravel_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    if len(data) < 1 or data[0] != len(attrs['shape']):
        raise ShapeError(f'data must hold one row per axis of shape={attrs["shape"]}, got '
                         f'{data}')
    return list(in_shapes), [tuple(data[1:])]


def _ravel_kernel(attrs, ins, outs, ctx):
    strides = np.cumprod((attrs['shape'][1:] + (1,))[::-1])[::-1]
    index = ins[0].astype(np.int64)
    outs[0][...] = np.tensordot(strides, index, axes=1)


def _unravel_kernel(attrs, ins, outs, ctx):
    index = ins[0].astype(np.int64)
    outs[0][...] = np.stack(np.unravel_index(index % int(np.prod(attrs['shape'])),
                                             attrs['shape']))


_SHAPE = (Param('shape', p_shape, REQUIRED, 'The shape the indices refer to.'),)
register('_ravel_multi_index', _ravel_kernel, infer_shape=_ravel_shape, params=_SHAPE,
         gradient=_zero_grads, aliases=('ravel_multi_index',),
         doc='Flat indices into `shape` of the multi-indices in the columns of data (one row '
             'per axis).')
register('_unravel_index', _unravel_kernel, params=_SHAPE, gradient=_zero_grads,
         aliases=('unravel_index',),
         infer_shape=lambda attrs, shapes: (list(shapes), [None if shapes[0] is None else
                                                           (len(attrs['shape']),)
                                                           + tuple(shapes[0])]),
         doc='Multi-indices into `shape` (one row per axis) of the flat indices in data.')


# ----------------------------------------------------------------------------------------------
# _split_v2 (behind mx.nd.split_v2).

_SPLIT = (Param('indices', p_shape, REQUIRED, 'Start of each part along axis (first 0).'),
          Param('axis', p_int, 0, 'The axis to split.'),
          Param('squeeze_axis', p_bool, False, 'Drop the axis when each part has size 1.'),
          Param('sections', p_int, 0, 'Split into this many equal parts (0: use indices).'))


def _split_bounds(attrs, size):
    if attrs['sections'] > 0:
        if size % attrs['sections']:
            raise ShapeError(f'an axis of size {size} does not split into '
                             f'{attrs["sections"]} equal parts')
        step = size // attrs['sections']
        starts = list(range(0, size, step))
    else:
        starts = list(attrs['indices'])
    stops = starts[1:] + [size]
    for start, stop in zip(starts, stops):
        if not 0 <= start <= stop <= size:
            raise ShapeError(f'split points {tuple(starts)} must increase within 0..{size}')
    return list(zip(starts, stops))


def _split_count(attrs):
    return attrs['sections'] if attrs['sections'] > 0 else len(attrs['indices'])


def _split_shape(attrs, in_shapes):
    data = in_shapes[0]
    count = _split_count(attrs)
    if data is None:
        return list(in_shapes), [None] * count
    axis = attrs['axis'] % len(data)
    shapes = []
    for start, stop in _split_bounds(attrs, data[axis]):
        part = list(data)
        part[axis] = stop - start
        if attrs['squeeze_axis']:
            if stop - start != 1:
                raise ShapeError('squeeze_axis needs every part to have size 1 along axis')
            part.pop(axis)
        shapes.append(tuple(part))
    return list(in_shapes), shapes


def _split_kernel(attrs, ins, outs, ctx):
    data = ins[0]
    axis = attrs['axis'] % data.ndim
    for out, (start, stop) in zip(outs, _split_bounds(attrs, data.shape[axis])):
        part = np.take(data, np.arange(start, stop), axis=axis)
        out[...] = part.reshape(out.shape)


def _split_grad(F, attrs, ins, outs, og):
    axis = attrs['axis']
    parts = [F.expand_dims(g, axis=axis) for g in og] if attrs['squeeze_axis'] else list(og)
    return [F.concat(*parts, dim=axis) if len(parts) > 1 else parts[0]]


register('_split_v2', _split_kernel, infer_shape=_split_shape, params=_SPLIT,
         outputs=lambda attrs: [f'output{i}' for i in range(_split_count(attrs))],
         infer_type=lambda attrs, dtypes: (list(dtypes), dtypes[:1] * _split_count(attrs)),
         gradient=_split_grad,
         doc='Parts of data along axis, at the split points `indices` or in `sections` equal '
             'parts.')


# ----------------------------------------------------------------------------------------------
# im2col and col2im: sliding windows as columns, and back (summing overlaps).

_WINDOWS = (Param('kernel', p_shape, REQUIRED, 'Window size per spatial axis.'),
            Param('stride', p_shape, (), 'Step per spatial axis (default 1).'),
            Param('dilate', p_shape, (), 'Dilation per spatial axis (default 1).'),
            Param('pad', p_shape, (), 'Zero padding per spatial axis (default 0).'))


def _geometry(attrs, spatial):
    dims = len(attrs['kernel'])
    if len(spatial) != dims:
        raise ShapeError(f'kernel {attrs["kernel"]} has {dims} axes; the data has '
                         f'{len(spatial)} spatial axes')
    stride = attrs['stride'] or (1,) * dims
    dilate = attrs['dilate'] or (1,) * dims
    pad = attrs['pad'] or (0,) * dims
    out = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, k, s, d, p in zip(spatial, attrs['kernel'], stride, dilate, pad))
    if min(out) < 1:
        raise ShapeError(f'windows of {attrs["kernel"]} do not fit spatial size {spatial}')
    return stride, dilate, pad, out


def conv_positions(attrs, spatial):
    """Per kernel offset, the slices of the padded data that the windows read."""
    stride, dilate, _, out = _geometry(attrs, spatial)
    for offset in np.ndindex(*attrs['kernel']):
        yield tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                    for o, d, n, s in zip(offset, dilate, out, stride))


def _im2col_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    out = _geometry(attrs, data[2:])[3]
    return list(in_shapes), [(data[0], data[1] * math.prod(attrs['kernel']), math.prod(out))]


def _padding(attrs, ndim):
    pad = attrs['pad'] or (0,) * ndim
    return [(0, 0), (0, 0)] + [(p, p) for p in pad]


def _im2col(attrs, data, out):
    spatial = data.shape[2:]
    padded = np.pad(data, _padding(attrs, len(spatial)))
    columns = out.reshape(data.shape[0], data.shape[1], -1, out.shape[-1])
    for k, window in enumerate(conv_positions(attrs, spatial)):
        columns[:, :, k] = padded[(slice(None), slice(None)) + window].reshape(
            data.shape[:2] + (-1,))


def _col2im(attrs, columns, out):
    spatial = out.shape[2:]
    pad = attrs['pad'] or (0,) * len(spatial)
    padded = np.zeros(out.shape[:2] + tuple(n + 2 * p for n, p in zip(spatial, pad)),
                      out.dtype)
    grouped = columns.reshape(out.shape[0], out.shape[1], -1, columns.shape[-1])
    out_spatial = _geometry(attrs, spatial)[3]
    for k, window in enumerate(conv_positions(attrs, spatial)):
        padded[(slice(None), slice(None)) + window] += grouped[:, :, k].reshape(
            out.shape[:2] + out_spatial)
    out[...] = padded[(slice(None), slice(None)) + tuple(slice(p, p + n) for p, n in
                                                         zip(pad, spatial))]


def _col2im_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    size = attrs['output_size']
    per_window = math.prod(attrs['kernel'])
    out = _geometry(attrs, size)[3]
    if len(data) != 3 or data[1] % per_window or data[2] != math.prod(out):
        raise ShapeError(f'data must be (N, C*{per_window}, {math.prod(out)}) for kernel '
                         f'{attrs["kernel"]} over {size}, got {data}')
    return list(in_shapes), [(data[0], data[1] // per_window) + tuple(size)]


register('im2col', lambda attrs, ins, outs, ctx: _im2col(attrs, ins[0], outs[0]),
         infer_shape=_im2col_shape, infer_type=same_type, params=_WINDOWS,
         gradient=lambda F, attrs, ins, outs, og: [F._backward_im2col(og[0], ins[0], **attrs)],
         doc='The sliding windows of data (N, C, *spatial) as columns: (N, C*prod(kernel), '
             'windows).')
register('_backward_im2col', lambda attrs, ins, outs, ctx: _col2im(attrs, ins[0], outs[0]),
         inputs=('out_grad', 'data'), params=_WINDOWS,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='The gradient of im2col: col2im onto the data\'s shape.')
register('col2im', lambda attrs, ins, outs, ctx: _col2im(attrs, ins[0], outs[0]),
         infer_shape=_col2im_shape, infer_type=same_type,
         params=(Param('output_size', p_shape, REQUIRED, 'Spatial size of the output.'),)
         + _WINDOWS,
         gradient=lambda F, attrs, ins, outs, og: [F.im2col(
             og[0], **{k: v for k, v in attrs.items() if k != 'output_size'})],
         doc='The adjoint of im2col: columns summed back into an (N, C, *output_size) array.')


# ----------------------------------------------------------------------------------------------
# Finiteness and sums of squares over several arrays; reset_arrays.

def _variadic(name, count='num_arrays'):
    return lambda attrs: [f'{name}_{i}' for i in range(attrs[count])]


def _finite_kernel(attrs, ins, outs, ctx):
    finite = all(bool(ctx.xp.isfinite(x).all()) for x in ins)
    if attrs['init_output']:
        outs[0][...] = 1.0 if finite else 0.0
    elif not finite:
        outs[0][...] = 0.0


def _one_value(attrs, in_shapes):
    return list(in_shapes), [(1,)]


def _float32_out(attrs, in_dtypes):
    return list(in_dtypes), [np.dtype(np.float32)]


_INIT = Param('init_output', p_bool, True, 'Start from 1 (else only write 0 when a value is '
                                           'not finite).')
register('all_finite', _finite_kernel, params=(_INIT,), infer_shape=_one_value,
         infer_type=_float32_out,
         doc='1 (float32, shape (1,)) when every value of data is finite, else 0.')
register('multi_all_finite', _finite_kernel, inputs=_variadic('data'), variadic='num_arrays',
         params=(Param('num_arrays', p_int, 1, 'Number of arrays.'), _INIT),
         infer_shape=_one_value, infer_type=_float32_out,
         doc='1 (float32, shape (1,)) when every value of every array is finite, else 0.')


def _sum_sq_kernel(attrs, ins, outs, ctx):
    for index, x in enumerate(ins):
        flat = x.reshape(-1).astype(np.float32)
        outs[0][index] = np.dot(flat, flat)


register('multi_sum_sq', _sum_sq_kernel, inputs=_variadic('data'), variadic='num_arrays',
         params=(Param('num_arrays', p_int, REQUIRED, 'Number of arrays.'),),
         infer_shape=lambda attrs, shapes: (list(shapes), [(attrs['num_arrays'],)]),
         infer_type=_float32_out,
         doc='The sum of squares of each array (float32, one value per array).')


def _reset_kernel(attrs, ins, outs, ctx):
    for x in ins:
        x[...] = 0


register('reset_arrays', _reset_kernel, inputs=_variadic('data'), outputs=(),
         variadic='num_arrays', mutate=lambda attrs: tuple(range(attrs['num_arrays'])),
         params=(Param('num_arrays', p_int, REQUIRED, 'Number of arrays.'),),
         infer_shape=lambda attrs, shapes: (list(shapes), []),
         infer_type=lambda attrs, dtypes: (list(dtypes), []),
         doc='Set every value of every array to zero, in place (no outputs).')


# ----------------------------------------------------------------------------------------------
# AMP casts: between the float dtypes (bfloat16 included); other dtypes pass unchanged.

_FLOATS = ('float16', 'float32', 'float64', 'bfloat16')


def _amp_target(source, dtype):
    return dtype if np.dtype(source).name in _FLOATS else np.dtype(source)


def _amp_cast_kernel(attrs, ins, outs, ctx):
    # narrowing rounds stochastically inside a stream (NEURON_RT_STOCHASTIC_ROUNDING_EN)
    precision.round_into(outs[0], ins[0])


register('amp_cast', _amp_cast_kernel, params=(Param('dtype', p_dtype, REQUIRED,
                                                     'The float dtype to cast to.'),),
         infer_type=lambda attrs, dtypes: (list(dtypes), [None if dtypes[0] is None else
                                                          _amp_target(dtypes[0],
                                                                      attrs['dtype'])]),
         # a cast parameter's shape follows from its reader (FullyConnected's weight), as
         # MXNet's element-wise shape inference does both ways
         infer_shape_from_outputs=lambda attrs, ins, outs: [outs[0]],
         gradient=lambda F, attrs, ins, outs, og: [F._cast_like(og[0], ins[0])],
         doc='Cast a float array to dtype (AMP); arrays of other dtypes pass unchanged.')


def _multicast_types(attrs, in_dtypes):
    if any(d is None for d in in_dtypes):
        return list(in_dtypes), [None] * len(in_dtypes)
    floats = [np.dtype(d) for d in in_dtypes if np.dtype(d).name in _FLOATS]
    if not floats:
        return list(in_dtypes), list(in_dtypes)
    pick = min if attrs['cast_narrow'] else max
    target = pick(floats, key=lambda d: d.itemsize)
    return list(in_dtypes), [_amp_target(d, target) for d in in_dtypes]


def _multicast_kernel(attrs, ins, outs, ctx):
    for x, out in zip(ins, outs):
        precision.round_into(out, x)


register('amp_multicast', _multicast_kernel, inputs=_variadic('data', 'num_outputs'),
         variadic='num_outputs',
         outputs=lambda attrs: [f'output{i}' for i in range(attrs['num_outputs'])],
         params=(Param('num_outputs', p_int, REQUIRED, 'Number of arrays.'),
                 Param('cast_narrow', p_bool, False, 'Cast to the narrowest float dtype '
                                                     '(else the widest).')),
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes)),
         infer_shape_from_outputs=lambda attrs, ins, outs: list(outs),
         infer_type=_multicast_types,
         gradient=lambda F, attrs, ins, outs, og: [F._cast_like(g, x) for g, x in zip(og, ins)],
         doc='Cast the float arrays to one float dtype (the widest, or the narrowest with '
             'cast_narrow); others pass unchanged.')
