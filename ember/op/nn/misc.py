"""Embedding, UpSampling, Pad and smooth_l1."""
from __future__ import annotations

import numpy as np

from ember.op.nn._common import assign_shape, make_window, outputs_of
from ember.op.nn.conv.generic import conv_backward_data, conv_backward_weight, conv_forward
from ember.op.registry import (
    REQUIRED, Param, ShapeError, p_bool, p_dtype, p_enum, p_float, p_int, p_shape, register)

# ----------------------------------------------------------------------------------------------
# Embedding

EMBEDDING_PARAMS = (
    Param('input_dim', p_int, REQUIRED, 'Rows of the table (the vocabulary size).'),
    Param('output_dim', p_int, REQUIRED, 'Width of each embedding.'),
    Param('dtype', p_dtype, np.dtype(np.float32), 'dtype of the table and the output.'),
    Param('sparse_grad', p_bool, False, "The weight's gradient is row_sparse: the rows the "
          'indices name (ember.op.sparse_ops).'),
)


def _embedding_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    assign_shape('Embedding', in_shapes, 1, 'weight', (attrs['input_dim'], attrs['output_dim']))
    data = in_shapes[0]
    return in_shapes, [None if data is None else tuple(data) + (attrs['output_dim'],)]


def _embedding_type(attrs, in_dtypes):
    data, weight = in_dtypes
    table = weight if weight is not None else attrs['dtype']
    return [data if data is not None else table, table], [table]


def _embedding_kernel(attrs, ins, outs, ctx):
    """Rows of the table; indices outside [0, input_dim) are clipped, as MXNet does."""
    xp = ctx.xp
    if xp is np:
        xp.take(ins[1], ins[0].astype(np.int64), axis=0, out=outs[0], mode='clip')
    else:  # CuPy's take has no mode: clip the indices first
        index = xp.clip(ins[0].astype(np.int64), 0, ins[1].shape[0] - 1)
        xp.take(ins[1], index, axis=0, out=outs[0])


def _embedding_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data) -> the table's gradient."""
    xp, width = ctx.xp, attrs['output_dim']
    index = xp.clip(ins[1].astype(np.int64).reshape(-1), 0, attrs['input_dim'] - 1)
    outs[0].fill(0)
    xp.add.at(outs[0], index, ins[0].reshape(-1, width))


def _embedding_gradient(F, attrs, inputs, outputs, out_grads):
    return [None, F._backward_Embedding(out_grads[0], inputs[0], **attrs)]


register('Embedding', _embedding_kernel, infer_shape=_embedding_infer,
         infer_type=_embedding_type, inputs=('data', 'weight'), params=EMBEDDING_PARAMS,
         gradient=_embedding_gradient,
         doc='Look up rows of weight (input_dim, output_dim) by the indices in data.')

register('_backward_Embedding', _embedding_backward_kernel, inputs=('out_grad', 'data'),
         outputs=('weight_grad',), params=EMBEDDING_PARAMS,
         infer_shape=lambda attrs, shapes: (list(shapes),
                                            [(attrs['input_dim'], attrs['output_dim'])]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]))


# ----------------------------------------------------------------------------------------------
# UpSampling: nearest repeats pixels (of one or more inputs, concatenated or summed); bilinear
# is a depthwise deconvolution whose weight the caller initialises to a bilinear kernel.

UPSAMPLING_PARAMS = (
    Param('scale', p_int, REQUIRED, 'Output size over input size.'),
    Param('num_filter', p_int, 0, 'bilinear: the channels (the deconvolution groups).'),
    Param('sample_type', p_enum('nearest', 'bilinear'), REQUIRED),
    Param('multi_input_mode', p_enum('concat', 'sum'), 'concat',
          'nearest with several inputs: concatenate channels or sum.'),
    Param('num_args', p_int, REQUIRED, 'Inputs (nearest); 2 for bilinear (data, weight).'),
    Param('workspace', p_int, 512, 'Accepted for compatibility.'),
)


def _upsampling_inputs(attrs):
    if attrs['sample_type'] == 'bilinear':
        return ['data', 'weight']
    return [f'arg{i}' for i in range(attrs['num_args'])]


def _bilinear_kernel_size(scale):
    return 2 * scale - scale % 2


def _bilinear_window(attrs, size_in):
    scale = attrs['scale']
    size = _bilinear_kernel_size(scale)
    pad = -(-(scale - 1) // 2)  # ceil((scale - 1) / 2)
    size_out = tuple(n * scale for n in size_in)
    return make_window((size,) * len(size_in), (scale,) * len(size_in), (1,) * len(size_in),
                       (pad,) * len(size_in), size_out, tuple(size_in))


def _upsampling_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    if any(s is not None and len(s) != 4 for s in in_shapes[:1]):
        raise ShapeError(f'UpSampling: data has shape {in_shapes[0]}; expected (N, C, H, W)')
    first = in_shapes[0]
    if first is None:
        return in_shapes, [None]
    scale = attrs['scale']
    size_out = (first[2] * scale, first[3] * scale)
    if attrs['sample_type'] == 'bilinear':
        kernel = _bilinear_kernel_size(scale)
        assign_shape('UpSampling', in_shapes, 1, 'weight', (first[1], 1, kernel, kernel))
        return in_shapes, [(first[0], first[1]) + size_out]
    if any(s is None for s in in_shapes):
        return in_shapes, [None]
    channels = 0
    for index, shape in enumerate(in_shapes):
        if len(shape) != 4 or shape[0] != first[0] or any(
                o % n for o, n in zip(size_out, shape[2:])):
            raise ShapeError(f'UpSampling: input {index} has shape {tuple(shape)}; its size '
                             f'must divide the output size {size_out} of batch {first[0]}')
        if attrs['multi_input_mode'] == 'sum' and shape[1] != first[1]:
            raise ShapeError(f"UpSampling: multi_input_mode='sum' needs equal channels, got "
                             f'{first[1]} and {shape[1]}')
        channels += shape[1]
    if attrs['multi_input_mode'] == 'sum':
        channels = first[1]
    return in_shapes, [(first[0], channels) + size_out]


def _blocks(array, size_in):
    """(N, C, H*s, W*s) viewed as (N, C, H, s, W, s)."""
    n, c, height, width = array.shape
    h, w = size_in
    return array.reshape(n, c, h, height // h, w, width // w)


def _channel_ranges(attrs, inputs):
    start = 0
    for x in inputs:
        if attrs['multi_input_mode'] == 'sum':
            yield slice(None)
        else:
            yield slice(start, start + x.shape[1])
            start += x.shape[1]


def _upsampling_kernel(attrs, ins, outs, ctx):
    out = outs[0]
    if attrs['sample_type'] == 'bilinear':
        window = _bilinear_window(attrs, ins[0].shape[2:])
        conv_backward_data(ctx.xp, ins[0], ins[1], window, ins[0].shape[1], out, ctx)
        return
    summing = attrs['multi_input_mode'] == 'sum' and len(ins) > 1
    if summing:
        out.fill(0)
    for x, channels in zip(ins, _channel_ranges(attrs, ins)):
        target = _blocks(out[:, channels], x.shape[2:])
        expanded = x[:, :, :, None, :, None]
        if summing:
            target += expanded
        else:
            target[...] = expanded


def _upsampling_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, *inputs)."""
    dy, inputs = ins[0], ins[1:]
    if attrs['sample_type'] == 'bilinear':
        x, weight = inputs
        window = _bilinear_window(attrs, x.shape[2:])
        conv_forward(ctx.xp, dy, weight, window, x.shape[1], outs[0], ctx)
        conv_backward_weight(ctx.xp, x, dy, window, x.shape[1], outs[1], ctx)
        return
    for x, channels, dx in zip(inputs, _channel_ranges(attrs, inputs), outs):
        dx[...] = _blocks(dy[:, channels], x.shape[2:]).sum(axis=(3, 5))


def _upsampling_gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_UpSampling(out_grads[0], *inputs, **attrs)
    return outputs_of(grads, len(inputs))


register('UpSampling', _upsampling_kernel, infer_shape=_upsampling_infer,
         inputs=_upsampling_inputs, params=UPSAMPLING_PARAMS, gradient=_upsampling_gradient,
         variadic='num_args', resources=('temp',),
         doc='Enlarge (N, C, H, W) data by an integer scale: nearest repeats pixels, bilinear '
             'is a depthwise deconvolution with weight (C, 1, k, k), k = 2 * scale - scale % 2.')

register('_backward_UpSampling', _upsampling_backward_kernel,
         inputs=lambda attrs: ['out_grad'] + _upsampling_inputs(attrs),
         outputs=lambda attrs: [f'{name}_grad' for name in _upsampling_inputs(attrs)],
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         params=UPSAMPLING_PARAMS, resources=('temp',))


# ----------------------------------------------------------------------------------------------
# Pad

PAD_PARAMS = (
    Param('mode', p_enum('constant', 'edge', 'reflect'), 'constant'),
    Param('pad_width', p_shape, REQUIRED,
          'Before and after counts for every axis: (b0, a0, b1, a1, ...).'),
    Param('constant_value', p_float, 0.0),
)


def _pairs(attrs, ndim):
    width = attrs['pad_width']
    if len(width) != 2 * ndim:
        raise ShapeError(f'Pad: pad_width {width} has {len(width)} entries; {ndim}-D data needs '
                         f'{2 * ndim} (before and after for every axis)')
    return [(width[2 * i], width[2 * i + 1]) for i in range(ndim)]


def _pad_infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    pairs = _pairs(attrs, len(data))
    if attrs['mode'] == 'reflect' and any(max(p) >= n for p, n in zip(pairs, data) if any(p)):
        raise ShapeError(f"Pad: mode='reflect' needs padding smaller than each axis; got "
                         f'pad_width {attrs["pad_width"]} for shape {tuple(data)}')
    return list(in_shapes), [tuple(n + b + a for n, (b, a) in zip(data, pairs))]


def _pad_kernel(attrs, ins, outs, ctx):
    xp, x, out = ctx.xp, ins[0], outs[0]
    pairs = _pairs(attrs, x.ndim)
    if attrs['mode'] == 'constant':
        out.fill(attrs['constant_value'])
        out[tuple(slice(b, b + n) for (b, _), n in zip(pairs, x.shape))] = x
    else:
        out[...] = xp.pad(x, pairs, mode=attrs['mode'])


def _pad_backward_kernel(attrs, ins, outs, ctx):
    """Input (out_grad,): fold the padding's gradient back onto the elements it copied."""
    grad = ins[0]
    for axis, (before, after) in enumerate(_pairs(attrs, grad.ndim)):
        grad = _fold_axis(attrs['mode'], grad, axis, before, after)
    outs[0][...] = grad


def _fold_axis(mode, grad, axis, before, after):
    moved = grad.swapaxes(0, axis)
    size = moved.shape[0] - before - after
    center = moved[before:before + size].copy()
    if mode == 'edge':
        center[0] += moved[:before].sum(axis=0)
        center[size - 1] += moved[before + size:].sum(axis=0)
    elif mode == 'reflect':
        center[1:1 + before] += moved[:before][::-1]
        center[size - 1 - after:size - 1] += moved[before + size:][::-1]
    return center.swapaxes(0, axis)


def _pad_gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_Pad(out_grads[0], **attrs)]


def _pad_backward_infer(attrs, in_shapes):
    grad = in_shapes[0]
    if grad is None:
        return list(in_shapes), [None]
    pairs = _pairs(attrs, len(grad))
    return list(in_shapes), [tuple(n - b - a for n, (b, a) in zip(grad, pairs))]


register('Pad', _pad_kernel, infer_shape=_pad_infer, params=PAD_PARAMS,
         gradient=_pad_gradient, aliases=('pad',),
         doc='Pad every axis by pad_width with a constant, the edge values or a reflection.')

register('_backward_Pad', _pad_backward_kernel, inputs=('out_grad',), outputs=('data_grad',),
         infer_shape=_pad_backward_infer, params=PAD_PARAMS)


# ----------------------------------------------------------------------------------------------
# smooth_l1

SMOOTH_L1_PARAMS = (Param('scalar', p_float, 1.0, 'sigma: the quadratic part is |x| < '
                                                    '1 / sigma^2.'),)


def _smooth_l1_kernel(attrs, ins, outs, ctx):
    x, sigma2 = ins[0], attrs['scalar'] ** 2
    magnitude = ctx.xp.abs(x)
    outs[0][...] = ctx.xp.where(magnitude < 1 / sigma2, 0.5 * sigma2 * x * x,
                                magnitude - 0.5 / sigma2)


def _smooth_l1_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data)."""
    dy, x = ins
    sigma2 = attrs['scalar'] ** 2
    slope = ctx.xp.where(ctx.xp.abs(x) < 1 / sigma2, sigma2 * x, ctx.xp.sign(x))
    outs[0][...] = dy * slope


register('smooth_l1', _smooth_l1_kernel, params=SMOOTH_L1_PARAMS, elemwise=True,
         gradient=lambda F, attrs, ins, outs, og: [F._backward_smooth_l1(og[0], ins[0],
                                                                         **attrs)],
         doc='0.5 (sigma x)^2 where |x| < 1 / sigma^2, else |x| - 0.5 / sigma^2.')

register('_backward_smooth_l1', _smooth_l1_backward_kernel, inputs=('out_grad', 'data'),
         outputs=('data_grad',), params=SMOOTH_L1_PARAMS, elemwise=True)
