"""Spatial transformer networks and optical-flow layers: GridGenerator, BilinearSampler,
SpatialTransformer, Correlation and Crop.

Sampling grids hold normalised coordinates: (-1, -1) is the centre of the top-left pixel and
(1, 1) that of the bottom-right one; channel 0 is x, channel 1 is y. The sampler reads zeros
outside the input.

>>> import numpy as np
>>> from ember.op.spatial import affine_grid
>>> affine_grid(np.array([[1., 0, 0, 0, 1, 0]]), 2, 3)[0, 0]
array([[-1.,  0.,  1.],
       [-1.,  0.,  1.]])
"""
from __future__ import annotations

import math

import numpy as np

from ember.op.host import register
from ember.op.registry import (REQUIRED, Param, ShapeError, p_bool, p_enum, p_int, p_optional,
                               p_shape, same_type)

__all__ = ['affine_grid', 'bilinear_sample']


# ----------------------------------------------------------------------------------------------
# GridGenerator.

def _base_grid(height, width, dtype=np.float64):
    """(3, height*width) rows x, y, 1 of the normalised target coordinates."""
    ys = np.linspace(-1, 1, height) if height > 1 else np.full(1, -1.0)
    xs = np.linspace(-1, 1, width) if width > 1 else np.full(1, -1.0)
    y, x = np.meshgrid(ys, xs, indexing='ij')
    return np.stack([x.ravel(), y.ravel(), np.ones(height * width)]).astype(dtype)


def affine_grid(theta, height, width):
    """(N, 2, height, width) source coordinates of 2x3 affine maps `theta` (N, 6)."""
    grid = theta.reshape(-1, 2, 3) @ _base_grid(height, width, theta.dtype)
    return grid.reshape(-1, 2, height, width)


def _grid_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    if attrs['transform_type'] == 'affine':
        height, width = attrs['target_shape']
        if len(data) != 2 or data[1] != 6:
            raise ShapeError(f'affine GridGenerator needs data (batch, 6), got {data}')
        if height < 1 or width < 1:
            raise ShapeError(f'target_shape={attrs["target_shape"]} must be positive')
        return list(in_shapes), [(data[0], 2, height, width)]
    if len(data) != 4 or data[1] != 2:
        raise ShapeError(f'warp GridGenerator needs a flow (batch, 2, height, width), got {data}')
    return list(in_shapes), [tuple(data)]


def _warp_scale(height, width):
    return np.array([(width - 1) / 2, (height - 1) / 2]).reshape(1, 2, 1, 1)


def _grid_kernel(attrs, ins, outs, ctx):
    data, out = ins[0], outs[0]
    if attrs['transform_type'] == 'affine':
        out[...] = affine_grid(data, *out.shape[2:])
        return
    height, width = data.shape[2:]
    base = _base_grid(height, width)[:2].reshape(1, 2, height, width)
    out[...] = data / _warp_scale(height, width) + base


def _grid_backward(attrs, ins, outs, ctx):
    grad, out = ins[0], outs[0]
    if attrs['transform_type'] == 'affine':
        height, width = grad.shape[2:]
        flat = grad.reshape(len(grad), 2, -1)
        out[...] = (flat @ _base_grid(height, width, grad.dtype).T).reshape(out.shape)
    else:
        out[...] = grad / _warp_scale(*grad.shape[2:])


_GRID = (Param('transform_type', p_enum('affine', 'warp'), REQUIRED,
               'affine: data holds 2x3 maps; warp: data holds a flow field in pixels.'),
         Param('target_shape', p_shape, (0, 0), 'Output (height, width) of an affine grid.'))

register('GridGenerator', _grid_kernel, infer_shape=_grid_shape, infer_type=same_type,
         params=_GRID,
         gradient=lambda F, attrs, ins, outs, og: [F._backward_GridGenerator(og[0], ins[0],
                                                                            **attrs)],
         doc='A sampling grid for BilinearSampler from affine maps or a flow field.')
register('_backward_GridGenerator', _grid_backward, inputs=('out_grad', 'data'), params=_GRID,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='The gradient of GridGenerator.')


# ----------------------------------------------------------------------------------------------
# BilinearSampler.

def _corners(grid, height, width):
    """The four neighbours of each grid point: (row, col, weight, d weight/dx, d weight/dy)
    with rows and columns clamped and the weights zero where the neighbour is outside."""
    x = (grid[:, 0] + 1) * (width - 1) / 2
    y = (grid[:, 1] + 1) * (height - 1) / 2
    left, top = np.floor(x), np.floor(y)
    wx, wy = (1 - (x - left), x - left), (1 - (y - top), y - top)
    left, top = left.astype(np.int64), top.astype(np.int64)
    corners = []
    for dy in (0, 1):
        for dx in (0, 1):
            row, col = top + dy, left + dx
            inside = (row >= 0) & (row < height) & (col >= 0) & (col < width)
            sign_x, sign_y = (1 if dx else -1), (1 if dy else -1)
            corners.append((np.clip(row, 0, height - 1), np.clip(col, 0, width - 1),
                            wy[dy] * wx[dx] * inside, sign_x * wy[dy] * inside,
                            sign_y * wx[dx] * inside))
    return corners


def _gather(data, row, col):
    """data (N, C, H, W) at per-batch positions (N, Ho, Wo) -> (N, C, Ho, Wo)."""
    batch = np.arange(len(data))[:, None, None]
    return np.moveaxis(data[batch, :, row, col], -1, 1)


def bilinear_sample(data, grid):
    """(N, C, Ho, Wo) bilinear samples of data at the normalised grid, zeros outside."""
    out = np.zeros(data.shape[:2] + grid.shape[2:], np.result_type(data, grid))
    for row, col, weight, _, _ in _corners(grid, *data.shape[2:]):
        out += _gather(data, row, col) * weight[:, None]
    return out


def _sampler_shape(attrs, in_shapes):
    data, grid = in_shapes
    if data is None or grid is None:
        return list(in_shapes), [None]
    if len(data) != 4 or len(grid) != 4 or grid[1] != 2 or grid[0] != data[0]:
        raise ShapeError(f'expected data (N, C, H, W) and grid (N, 2, Ho, Wo), got {data} and '
                         f'{grid}')
    return list(in_shapes), [(data[0], data[1], grid[2], grid[3])]


def _sampler_kernel(attrs, ins, outs, ctx):
    outs[0][...] = bilinear_sample(*ins)


def _sampler_backward(attrs, ins, outs, ctx):
    grad, data, grid = ins
    data_grad, grid_grad = outs
    height, width = data.shape[2:]
    batch = np.broadcast_to(np.arange(len(data))[:, None, None], (len(data),) + grid.shape[2:])
    data_grad[...] = 0
    slope_x = slope_y = 0
    for row, col, weight, weight_dx, weight_dy in _corners(grid, height, width):
        spread = np.moveaxis(grad * weight[:, None], 1, -1)          # (N, Ho, Wo, C)
        np.add.at(data_grad, (batch, slice(None), row, col), spread.astype(data_grad.dtype))
        value = (_gather(data, row, col) * grad).sum(axis=1)
        slope_x = slope_x + value * weight_dx
        slope_y = slope_y + value * weight_dy
    grid_grad[:, 0] = slope_x * (width - 1) / 2
    grid_grad[:, 1] = slope_y * (height - 1) / 2


register('BilinearSampler', _sampler_kernel, inputs=('data', 'grid'),
         infer_shape=_sampler_shape, infer_type=same_type,
         params=(Param('cudnn_off', p_optional(p_bool), None, 'Accepted for MXNet\'s sake.'),),
         gradient=lambda F, attrs, ins, outs, og: list(F._backward_BilinearSampler(
             og[0], *ins)),
         doc='Bilinear samples of data (N, C, H, W) at the normalised coordinates of grid '
             '(N, 2, Ho, Wo), zeros outside.')
register('_backward_BilinearSampler', _sampler_backward, inputs=('out_grad', 'data', 'grid'),
         outputs=('data_grad', 'grid_grad'),
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradients of BilinearSampler for data and grid.')


# ----------------------------------------------------------------------------------------------
# SpatialTransformer: GridGenerator then BilinearSampler.

def _transformer_shape(attrs, in_shapes):
    data, loc = in_shapes
    if data is None:
        return list(in_shapes), [None]
    height, width = attrs['target_shape']
    if len(data) != 4 or height < 1 or width < 1:
        raise ShapeError(f'expected data (N, C, H, W) and a positive target_shape, got {data} '
                         f'and {attrs["target_shape"]}')
    return [data, (data[0], 6)], [(data[0], data[1], height, width)]


def _transformer_kernel(attrs, ins, outs, ctx):
    data, loc = ins
    outs[0][...] = bilinear_sample(data, affine_grid(loc, *attrs['target_shape']))


def _transformer_grad(F, attrs, ins, outs, og):
    data, loc = ins
    grid = F.GridGenerator(loc, transform_type='affine', target_shape=attrs['target_shape'])
    data_grad, grid_grad = list(F._backward_BilinearSampler(og[0], data, grid))
    return [data_grad, F._backward_GridGenerator(grid_grad, loc, transform_type='affine',
                                                 target_shape=attrs['target_shape'])]


register('SpatialTransformer', _transformer_kernel, inputs=('data', 'loc'),
         infer_shape=_transformer_shape, infer_type=same_type, gradient=_transformer_grad,
         params=(Param('target_shape', p_shape, (0, 0), 'Output (height, width).'),
                 Param('transform_type', p_enum('affine'), REQUIRED, 'Only affine.'),
                 Param('sampler_type', p_enum('bilinear'), REQUIRED, 'Only bilinear.'),
                 Param('cudnn_off', p_optional(p_bool), None, 'Accepted for MXNet\'s sake.')),
         doc='data resampled through the affine maps loc (N, 6) onto a target_shape grid.')


# ----------------------------------------------------------------------------------------------
# Correlation (FlowNet): products of data1's patches with data2's displaced patches.

_CORRELATION = (Param('kernel_size', p_int, 1, 'Side of the compared patches (odd).'),
                Param('max_displacement', p_int, 1, 'Largest displacement compared.'),
                Param('stride1', p_int, 1, 'Step between the patches of data1.'),
                Param('stride2', p_int, 1, 'Step between the displacements.'),
                Param('pad_size', p_int, 0, 'Zero padding of both inputs.'),
                Param('is_multiply', p_bool, True, 'Multiply (else absolute difference).'))


def _correlation_geometry(attrs, height, width):
    """(radius in displacements, output height, output width)."""
    kernel, displacement = attrs['kernel_size'], attrs['max_displacement']
    border = displacement + (kernel - 1) // 2
    padded_h, padded_w = height + 2 * attrs['pad_size'], width + 2 * attrs['pad_size']
    out_h = math.ceil((padded_h - 2 * border) / attrs['stride1'])
    out_w = math.ceil((padded_w - 2 * border) / attrs['stride1'])
    return displacement // attrs['stride2'], out_h, out_w


def _correlation_shape(attrs, in_shapes):
    one, two = in_shapes
    if one is None or two is None:
        return list(in_shapes), [None]
    if len(one) != 4 or tuple(one) != tuple(two):
        raise ShapeError(f'data1 and data2 must be NCHW of one shape, got {one} and {two}')
    if attrs['kernel_size'] % 2 == 0 or min(attrs['stride1'], attrs['stride2']) < 1:
        raise ShapeError(f'kernel_size must be odd and strides positive, got '
                         f'{attrs["kernel_size"]}, {attrs["stride1"]}, {attrs["stride2"]}')
    radius, out_h, out_w = _correlation_geometry(attrs, *one[2:])
    if out_h < 1 or out_w < 1:
        raise ShapeError(f'inputs of {one[2:]} are too small for max_displacement='
                         f'{attrs["max_displacement"]} and kernel_size={attrs["kernel_size"]}')
    return list(in_shapes), [(one[0], (2 * radius + 1) ** 2, out_h, out_w)]


def _displacements(attrs):
    radius = attrs['max_displacement'] // attrs['stride2']
    steps = np.arange(-radius, radius + 1) * attrs['stride2']
    return [(dy, dx) for dy in steps for dx in steps]


def _padded(x, pad):
    return np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if pad else x


def _window_origins(attrs, out_h, out_w):
    """Rows and columns (padded coordinates) of the top-left corner of each data1 patch."""
    start = attrs['max_displacement']
    return (start + np.arange(out_h) * attrs['stride1'],
            start + np.arange(out_w) * attrs['stride1'])


def _box_sum(plane, kernel):
    """Sum over kernel x kernel windows anchored at each top-left position (valid part)."""
    total = np.cumsum(np.cumsum(np.pad(plane, ((0, 0), (1, 0), (1, 0))), 1), 2)
    return (total[:, kernel:, kernel:] - total[:, :-kernel, kernel:]
            - total[:, kernel:, :-kernel] + total[:, :-kernel, :-kernel])


def _shifted(x, dy, dx):
    """x moved so that out[..., y, x] = x[..., y + dy, x + dx], zeros where that is outside."""
    out = np.zeros_like(x)
    height, width = x.shape[-2:]
    src_y = slice(max(dy, 0), height + min(dy, 0))
    dst_y = slice(max(-dy, 0), height - max(dy, 0))
    src_x = slice(max(dx, 0), width + min(dx, 0))
    dst_x = slice(max(-dx, 0), width - max(dx, 0))
    out[..., dst_y, dst_x] = x[..., src_y, src_x]
    return out


def _correlation_kernel(attrs, ins, outs, ctx):
    one, two = (_padded(x, attrs['pad_size']) for x in ins)
    out = outs[0]
    rows, cols = _window_origins(attrs, *out.shape[2:])
    kernel = attrs['kernel_size']
    norm = kernel * kernel * one.shape[1]
    for channel, (dy, dx) in enumerate(_displacements(attrs)):
        other = _shifted(two, dy, dx)
        pair = (one * other) if attrs['is_multiply'] else np.abs(one - other)
        window = _box_sum(pair.sum(axis=1), kernel)
        out[:, channel] = window[:, rows][:, :, cols] / norm


def _spread(grad, attrs, shape):
    """Each output gradient spread over the kernel window of its data1 patch (padded
    coordinates): the transpose of taking window sums at the patch origins."""
    rows, cols = _window_origins(attrs, *grad.shape[-2:])
    kernel = attrs['kernel_size']
    spread = np.zeros(shape)
    for h in range(kernel):
        for w in range(kernel):
            spread[:, rows[:, None] + h, cols[None, :] + w] += grad
    return spread


def _correlation_backward(attrs, ins, outs, ctx):
    grad, one_raw, two_raw = ins
    pad = attrs['pad_size']
    one, two = _padded(one_raw, pad), _padded(two_raw, pad)
    norm = attrs['kernel_size'] ** 2 * one.shape[1]
    grad_one, grad_two = np.zeros(one.shape), np.zeros(two.shape)
    for channel, (dy, dx) in enumerate(_displacements(attrs)):
        weight = _spread(grad[:, channel], attrs, (one.shape[0],) + one.shape[2:])[:, None]
        weight = weight / norm
        other = _shifted(two, dy, dx)
        if attrs['is_multiply']:
            grad_one += weight * other
            grad_two += _shifted(weight * one, -dy, -dx)
        else:
            sign = np.sign(one - other) * weight
            grad_one += sign
            grad_two -= _shifted(sign, -dy, -dx)
    height, width = one_raw.shape[2:]
    outs[0][...] = grad_one[:, :, pad:pad + height, pad:pad + width]
    outs[1][...] = grad_two[:, :, pad:pad + height, pad:pad + width]


register('Correlation', _correlation_kernel, inputs=('data1', 'data2'),
         infer_shape=_correlation_shape, infer_type=same_type, params=_CORRELATION,
         gradient=lambda F, attrs, ins, outs, og: list(F._backward_Correlation(og[0], *ins,
                                                                               **attrs)),
         doc='FlowNet correlation: for each displacement of data2 (one output channel each), '
             'the mean over a kernel window and the channels of data1 * data2 (or |data1 - '
             'data2|).')
register('_backward_Correlation', _correlation_backward, inputs=('out_grad', 'data1', 'data2'),
         outputs=('data1_grad', 'data2_grad'), params=_CORRELATION,
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradients of Correlation.')


# ----------------------------------------------------------------------------------------------
# Crop.

_CROP = (Param('num_args', p_int, 1, 'Inputs: data, and crop_like to take its size from.'),
         Param('offset', p_shape, (0, 0), 'Top-left corner (y, x) of the crop.'),
         Param('h_w', p_shape, (0, 0), 'Height and width of the crop (one input).'),
         Param('center_crop', p_bool, False, 'Centre the crop (offset ignored).'))


def _crop_window(attrs, data, like):
    height, width = (like[2], like[3]) if like is not None else attrs['h_w']
    if attrs['center_crop']:
        top, left = (data[2] - height) // 2, (data[3] - width) // 2
    else:
        top, left = attrs['offset']
    if height < 1 or width < 1 or top < 0 or left < 0 or top + height > data[2] \
            or left + width > data[3]:
        raise ShapeError(f'the crop {height}x{width} at ({top}, {left}) does not fit in data '
                         f'{data}')
    return top, left, height, width


def _crop_shape(attrs, in_shapes):
    data = in_shapes[0]
    like = in_shapes[1] if attrs['num_args'] == 2 else None
    if data is None or (attrs['num_args'] == 2 and like is None):
        return list(in_shapes), [None]
    if len(data) != 4:
        raise ShapeError(f'data must be NCHW, got {data}')
    _, _, height, width = _crop_window(attrs, data, like)
    return list(in_shapes), [(data[0], data[1], height, width)]


def _crop_kernel(attrs, ins, outs, ctx):
    like = ins[1].shape if len(ins) > 1 else None
    top, left, height, width = _crop_window(attrs, ins[0].shape, like)
    outs[0][...] = ins[0][:, :, top:top + height, left:left + width]


def _crop_backward(attrs, ins, outs, ctx):
    grad, data = ins[0], ins[1]
    like = ins[2].shape if len(ins) > 2 else None
    top, left, height, width = _crop_window(attrs, data.shape, like)
    for out in outs:
        out[...] = 0
    outs[0][:, :, top:top + height, left:left + width] = grad


def _crop_inputs(attrs):
    if attrs['num_args'] not in (1, 2):
        raise ShapeError(f'num_args={attrs["num_args"]}: Crop takes 1 or 2 inputs')
    return ['data', 'crop_like'][:attrs['num_args']]


register('Crop', _crop_kernel, inputs=_crop_inputs, infer_shape=_crop_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]), params=_CROP,
         variadic='num_args',
         gradient=lambda F, attrs, ins, outs, og: _as_list(F._backward_Crop(og[0], *ins,
                                                                            **attrs), len(ins)),
         doc='A spatial crop of NCHW data: h_w at offset, or the size of crop_like.')
register('_backward_Crop', _crop_backward,
         inputs=lambda attrs: ['out_grad'] + _crop_inputs(attrs),
         outputs=lambda attrs: [f'{n}_grad' for n in _crop_inputs(attrs)], params=_CROP,
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradient of Crop: out_grad placed back in the window, zeros elsewhere.')


def _as_list(grads, count):
    return [grads] if count == 1 else list(grads)
