"""Resizing the two spatial axes of NCHW data: BilinearResize2D and AdaptiveAvgPooling2D.

Both are separable: each output plane is ``Rows @ plane @ Cols.T`` with small interpolation
(or averaging) matrices, and the gradient is ``Rows.T @ grad @ Cols``, so both directions are
two matrix products per batch.

>>> import numpy as np
>>> from ember.op.contrib.resize import bilinear_matrix
>>> bilinear_matrix(3, 2, align_corners=True)
array([[1. , 0. ],
       [0.5, 0.5],
       [0. , 1. ]])
"""
from __future__ import annotations


import numpy as np

from ember.op.host import register
from ember.op.registry import (Param, ShapeError, p_bool, p_enum, p_float, p_int, p_optional,
                               p_shape)

__all__ = ['bilinear_matrix', 'average_matrix']


def bilinear_matrix(out_size, in_size, align_corners=True, dtype=np.float64):
    """(out_size, in_size) weights of 1-D linear interpolation, MXNet's convention: corners
    aligned, or half-pixel centres clamped at the border."""
    # MXNet works out source positions in float32 whatever the data's dtype
    dst = np.arange(out_size, dtype=np.float32)
    if align_corners:
        scale = np.float32((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
        src = dst * scale
    else:
        scale = float(np.float32(in_size / out_size))
        src = ((dst.astype(np.float64) + 0.5) * scale - 0.5).astype(np.float32)
        src = np.maximum(src, np.float32(0))
    low = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    high = np.minimum(low + 1, in_size - 1)
    frac = (src - low.astype(np.float32)).astype(np.float64)
    weights = np.zeros((out_size, in_size))
    np.add.at(weights, (np.arange(out_size), low), 1 - frac)
    np.add.at(weights, (np.arange(out_size), high), frac)
    return weights.astype(dtype)


def average_matrix(out_size, in_size, dtype=np.float64):
    """(out_size, in_size) weights of adaptive average pooling: bin i averages
    [floor(i*in/out), ceil((i+1)*in/out))."""
    bins = np.arange(out_size)
    start = (bins * in_size) // out_size
    stop = -((-(bins + 1) * in_size) // out_size)
    cols = np.arange(in_size)
    inside = (cols >= start[:, None]) & (cols < stop[:, None])
    return (inside / (stop - start)[:, None]).astype(dtype)


def _separable(x, rows, cols, out):
    """out[n, c] = rows @ x[n, c] @ cols.T for NCHW arrays."""
    np.matmul(np.matmul(rows, x), cols.T, out=out)


def _check_nchw(shape, what='data'):
    if len(shape) != 4:
        raise ShapeError(f'{what} must be 4-D (NCHW), got shape {shape}')


# ----------------------------------------------------------------------------------------------
# BilinearResize2D.

def _scaled(size, scale, odd):
    if odd and size % 2 == 1:
        return int((size - 1) * scale + 1)
    return int(size * scale)


_PARITY = {'to_even_down': lambda n: n - n % 2, 'to_even_up': lambda n: n + n % 2,
           'to_odd_down': lambda n: n - 1 + n % 2, 'to_odd_up': lambda n: n + 1 - n % 2}


def _resize_size(attrs, data, like):
    mode, height, width = attrs['mode'], data[2], data[3]
    if mode == 'like':
        return like[2], like[3]
    if mode in _PARITY:
        return _PARITY[mode](height), _PARITY[mode](width)
    scales = attrs['scale_height'], attrs['scale_width']
    if mode == 'odd_scale' or scales != (None, None):
        if None in scales:
            raise ShapeError(f'mode={mode!r} with scales needs both scale_height and '
                             f'scale_width, got {scales}')
        odd = mode == 'odd_scale'
        return _scaled(height, scales[0], odd), _scaled(width, scales[1], odd)
    return attrs['height'], attrs['width']


def _resize_inputs(attrs):
    return ['data', 'like'] if attrs['mode'] == 'like' else ['data']


def _resize_shape(attrs, in_shapes):
    data = in_shapes[0]
    like = in_shapes[1] if len(in_shapes) > 1 else None
    if data is None or (attrs['mode'] == 'like' and like is None):
        return list(in_shapes), [None]
    _check_nchw(data)
    if like is not None:
        _check_nchw(like, 'like')
    height, width = _resize_size(attrs, data, like)
    if height < 1 or width < 1:
        raise ShapeError(f'the output would be {height}x{width}; it needs at least 1x1')
    return list(in_shapes), [(data[0], data[1], height, width)]


def _resize_matrices(attrs, in_hw, out_hw, dtype):
    return [bilinear_matrix(o, i, attrs['align_corners'], dtype)
            for o, i in zip(out_hw, in_hw)]


def _resize_kernel(attrs, ins, outs, ctx):
    x, out = ins[0], outs[0]
    rows, cols = _resize_matrices(attrs, x.shape[2:], out.shape[2:], x.dtype)
    _separable(x, rows, cols, out)


def _resize_backward(attrs, ins, outs, ctx):
    grad, out = ins[0], outs[0]
    rows, cols = _resize_matrices(attrs, out.shape[2:], grad.shape[2:], grad.dtype)
    _separable(grad, rows.T, cols.T, out)
    for extra in outs[1:]:
        extra[...] = 0


def _resize_grad(F, attrs, ins, outs, og):
    grads = F._backward_contrib_BilinearResize2D(og[0], *ins, **attrs)
    return list(grads) if len(ins) > 1 else [grads]


_RESIZE = (Param('height', p_int, 1, 'Output height (mode size).'),
           Param('width', p_int, 1, 'Output width (mode size).'),
           Param('scale_height', p_optional(p_float), None,
                 'Output height as a multiple of the input height.'),
           Param('scale_width', p_optional(p_float), None,
                 'Output width as a multiple of the input width.'),
           Param('mode', p_enum('size', 'like', 'odd_scale', 'to_even_down', 'to_even_up',
                                'to_odd_down', 'to_odd_up'), 'size',
                 'How the output size is chosen.'),
           Param('align_corners', p_bool, True,
                 'Align the corner pixels (else sample at half-pixel centres).'))

register('_contrib_BilinearResize2D', _resize_kernel, inputs=_resize_inputs,
         infer_shape=_resize_shape, params=_RESIZE, gradient=_resize_grad,
         doc='Bilinear resizing of the two spatial axes of NCHW data.')
register('_backward_contrib_BilinearResize2D', _resize_backward,
         inputs=lambda attrs: ['out_grad'] + _resize_inputs(attrs),
         outputs=lambda attrs: ['data_grad', 'like_grad'][:len(_resize_inputs(attrs))],
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])), params=_RESIZE,
         doc='The gradient of BilinearResize2D (zeros for `like`).')


# ----------------------------------------------------------------------------------------------
# AdaptiveAvgPooling2D.

def _output_size(attrs):
    size = attrs['output_size']
    if len(size) == 0:
        return 1, 1
    if len(size) == 1:
        return size[0], size[0]
    if len(size) != 2 or min(size) < 1:
        raise ShapeError(f'output_size={size}: expected one or two positive sizes')
    return tuple(size)


def _pool_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    _check_nchw(data)
    return list(in_shapes), [tuple(data[:2]) + _output_size(attrs)]


def _pool_kernel(attrs, ins, outs, ctx):
    x, out = ins[0], outs[0]
    rows, cols = (average_matrix(o, i, x.dtype) for o, i in zip(out.shape[2:], x.shape[2:]))
    _separable(x, rows, cols, out)


def _pool_backward(attrs, ins, outs, ctx):
    grad, out = ins[0], outs[0]
    rows, cols = (average_matrix(o, i, grad.dtype) for o, i in zip(grad.shape[2:],
                                                                      out.shape[2:]))
    _separable(grad, rows.T, cols.T, out)


_POOL = (Param('output_size', p_shape, (), 'Output (height, width), one size for both, or () '
                                            'for 1x1.'),)
register('_contrib_AdaptiveAvgPooling2D', _pool_kernel, infer_shape=_pool_shape, params=_POOL,
         gradient=lambda F, attrs, ins, outs, og: [F._backward_contrib_AdaptiveAvgPooling2D(
             og[0], ins[0], **attrs)],
         doc='Average pooling of NCHW data onto an output_size grid of bins that split each '
             'spatial axis as evenly as possible.')
register('_backward_contrib_AdaptiveAvgPooling2D', _pool_backward, inputs=('out_grad', 'data'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]), params=_POOL,
         doc='The gradient of AdaptiveAvgPooling2D.')
