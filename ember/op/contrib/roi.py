"""Region-of-interest pooling: ROIAlign and PSROIPooling (position-sensitive, R-FCN).

A region is ``(batch index, x1, y1, x2, y2)`` in image coordinates, scaled to the feature map
by ``spatial_scale``. Both operators average over each bin of a region, and the average is
separable: bin (i, j) of a plane is ``Rows[i] @ plane @ Cols[j].T`` with per-region row and
column weights (bilinear samples for ROIAlign, box filters for PSROIPooling). The forward is
two matrix products per region and the backward their transposes, with no loop over bins.

>>> import numpy as np
>>> from ember.op.contrib.roi import align_weights
>>> align_weights(np.array([0.5]), np.array([2.5]), 2, 4, 1)[0].round(3)
array([[0.   , 0.875, 0.125, 0.   ],
       [0.   , 0.   , 0.625, 0.375]])
"""
from __future__ import annotations

import numpy as np

from ember.op.host import register
from ember.op.registry import (REQUIRED, Param, ShapeError, p_bool, p_float, p_int, p_shape,
                               same_type)

__all__ = ['align_weights', 'box_weights']

# Regions pooled at once: bounds the (regions, channels, bins, width) intermediate.
_CHUNK = 64


def align_weights(start, length, bins, size, grid):
    """(regions, bins, size) weights of ROIAlign along one axis: the mean over `grid` (per
    region; MXNet's ceil(length / bins) where ``sample_ratio`` <= 0) bilinear samples per bin,
    each 0 outside [-1, size] and clamped to the border inside it."""
    grid = np.broadcast_to(np.asarray(grid), start.shape)
    most = int(grid.max()) if grid.size else 1
    step = length / bins
    sample = np.arange(most)
    pos = (start[:, None, None] + np.arange(bins)[None, :, None] * step[:, None, None]
           + (sample[None, None, :] + 0.5) * (step / grid)[:, None, None])
    used = (sample[None, None, :] < grid[:, None, None]) & (pos >= -1.0) & (pos <= size)
    pos = np.clip(pos, 0, None)
    low = np.floor(pos).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    frac = np.where(at_end, 0.0, pos - low)
    weights = np.zeros(start.shape + (bins, size))
    region, bin_index = np.indices(pos.shape[:2])
    for s in range(most):
        scale = used[..., s] / grid[:, None]
        np.add.at(weights, (region, bin_index, low[..., s]), (1 - frac[..., s]) * scale)
        np.add.at(weights, (region, bin_index, high[..., s]), frac[..., s] * scale)
    return weights


def box_weights(start, stop, size):
    """(regions, bins, size) averaging weights of the integer windows [start, stop) (empty
    windows average to 0)."""
    cells = np.arange(size)
    inside = (cells >= start[..., None]) & (cells < stop[..., None])
    counts = np.maximum(stop - start, 1)[..., None]
    return inside / counts


def _pool(data, batch, rows, cols, out):
    """out[r] = rows[r] @ data[batch[r]] @ cols[r].T for every channel, regions in chunks."""
    for first in range(0, len(batch), _CHUNK):
        part = slice(first, first + _CHUNK)
        planes = data[batch[part]]                                  # (R, C, H, W)
        out[part] = np.matmul(np.matmul(rows[part][:, None], planes),
                              np.swapaxes(cols[part], 1, 2)[:, None])


def _unpool(grad, batch, rows, cols, out):
    """The transpose of _pool: out[batch[r]] += rows[r].T @ grad[r] @ cols[r]."""
    out[...] = 0
    for first in range(0, len(batch), _CHUNK):
        part = slice(first, first + _CHUNK)
        planes = np.matmul(np.matmul(np.swapaxes(rows[part], 1, 2)[:, None], grad[part]),
                           cols[part][:, None])
        np.add.at(out, batch[part], planes.astype(out.dtype, copy=False))


def _batch_indices(rois, count):
    batch = rois[:, 0].astype(np.int64)
    valid = (batch >= 0) & (batch < count)
    return np.where(valid, batch, 0), valid


def _check_rois(shape):
    if len(shape) != 2 or shape[1] != 5:
        raise ShapeError(f'rois must be (regions, 5) rows of (batch index, x1, y1, x2, y2), '
                         f'got {shape}')


# ----------------------------------------------------------------------------------------------
# ROIAlign.

_ALIGN = (Param('pooled_size', p_shape, REQUIRED, 'Output bins (height, width).'),
          Param('spatial_scale', p_float, REQUIRED, 'Image to feature-map scale.'),
          Param('sample_ratio', p_int, -1, 'Samples per bin side (<= 0: ceil(roi/bins)).'),
          Param('position_sensitive', p_bool, False,
                'Bin (i, j) reads its own channel group (R-FCN).'),
          Param('aligned', p_bool, False, 'Shift by half a pixel (pixel centres).'))


def _align_shape(attrs, in_shapes):
    data, rois = in_shapes
    if data is None or rois is None:
        return list(in_shapes), [None]
    if len(data) != 4:
        raise ShapeError(f'data must be NCHW, got {data}')
    _check_rois(rois)
    ph, pw = _bins(attrs)
    channels = data[1]
    if attrs['position_sensitive']:
        if channels % (ph * pw):
            raise ShapeError(f'position_sensitive needs channels ({channels}) divisible by the '
                             f'bins {ph}x{pw}')
        channels //= ph * pw
    return list(in_shapes), [(rois[0], channels, ph, pw)]


def _bins(attrs):
    size = attrs['pooled_size']
    if len(size) != 2 or min(size) < 1:
        raise ShapeError(f'pooled_size={size}: expected (height, width) of positive sizes')
    return size


def _align_weights(attrs, rois, height, width):
    ph, pw = _bins(attrs)
    offset = 0.5 if attrs['aligned'] else 0.0
    corners = rois[:, 1:5].astype(np.float64) * attrs['spatial_scale'] - offset
    size = corners[:, 2:4] - corners[:, :2]
    if not attrs['aligned']:
        size = np.maximum(size, 1.0)
    ratio = attrs['sample_ratio']
    grids = [np.full(len(rois), ratio) if ratio > 0 else np.ceil(size[:, k] / bins)
             .astype(np.int64) for k, bins in ((1, ph), (0, pw))]
    rows = align_weights(corners[:, 1], size[:, 1], ph, height, np.maximum(grids[0], 1))
    cols = align_weights(corners[:, 0], size[:, 0], pw, width, np.maximum(grids[1], 1))
    return rows, cols


def _sensitive(attrs, full, channels):
    """Bin (i, j) of output channel c from input channel (c*ph + i)*pw + j."""
    ph, pw = _bins(attrs)
    c, i, j = np.indices((channels, ph, pw))
    return full[:, (c * ph + i) * pw + j, i, j]


def _align_kernel(attrs, ins, outs, ctx):
    data, rois = ins
    batch, valid = _batch_indices(rois, data.shape[0])
    rows, cols = (w.astype(data.dtype) for w in _align_weights(attrs, rois, *data.shape[2:]))
    ph, pw = _bins(attrs)
    full = np.empty((len(rois), data.shape[1], ph, pw), data.dtype)
    _pool(data, batch, rows, cols, full)
    out = _sensitive(attrs, full, outs[0].shape[1]) if attrs['position_sensitive'] else full
    outs[0][...] = out * valid[:, None, None, None]


def _align_backward(attrs, ins, outs, ctx):
    grad, _, rois = ins
    data_grad = outs[0]
    batch, valid = _batch_indices(rois, data_grad.shape[0])
    rows, cols = (w.astype(grad.dtype) for w in _align_weights(attrs, rois,
                                                                 *data_grad.shape[2:]))
    grad = grad * valid[:, None, None, None]
    if attrs['position_sensitive']:
        ph, pw = _bins(attrs)
        full = np.zeros((len(rois), data_grad.shape[1], ph, pw), grad.dtype)
        c, i, j = np.indices(grad.shape[1:])
        full[:, (c * ph + i) * pw + j, i, j] = grad
        grad = full
    _unpool(grad, batch, rows, cols, data_grad)
    outs[1][...] = 0


register('_contrib_ROIAlign', _align_kernel, inputs=('data', 'rois'), infer_shape=_align_shape,
         infer_type=same_type, params=_ALIGN,
         gradient=lambda F, attrs, ins, outs, og: list(F._backward_ROIAlign(og[0], *ins,
                                                                            **attrs)),
         doc='Region features by bilinear sampling (Mask R-CNN): (regions, channels, '
             'pooled height, pooled width).')
register('_backward_ROIAlign', _align_backward, inputs=('out_grad', 'data', 'rois'),
         outputs=('data_grad', 'rois_grad'), params=_ALIGN,
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradient of ROIAlign (none for the regions).')


# ----------------------------------------------------------------------------------------------
# PSROIPooling.

_PSROI = (Param('spatial_scale', p_float, REQUIRED, 'Image to feature-map scale.'),
          Param('output_dim', p_int, REQUIRED, 'Output channels.'),
          Param('pooled_size', p_int, REQUIRED, 'Bins per side.'),
          Param('group_size', p_int, 0, 'Position-sensitive groups per side (0: pooled_size).'))


def _group(attrs):
    return attrs['group_size'] or attrs['pooled_size']


def _psroi_shape(attrs, in_shapes):
    data, rois = in_shapes
    if data is None or rois is None:
        return list(in_shapes), [None]
    _check_rois(rois)
    group = _group(attrs)
    if len(data) != 4 or data[1] != attrs['output_dim'] * group * group:
        raise ShapeError(f'data must be NCHW with output_dim * group_size^2 = '
                         f'{attrs["output_dim"] * group * group} channels, got {data}')
    size = attrs['pooled_size']
    return list(in_shapes), [(rois[0], attrs['output_dim'], size, size)]


def _round_half_away(x):
    x = x.astype(np.float64)
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


def _psroi_windows(attrs, rois, size, axis):
    """Integer [start, stop) windows (regions, bins) along x (axis 0) or y (axis 1)."""
    scale, bins = attrs['spatial_scale'], attrs['pooled_size']
    start = _round_half_away(rois[:, 1 + axis]) * scale
    end = (_round_half_away(rois[:, 3 + axis]) + 1.0) * scale
    step = np.maximum(end - start, 0.1) / bins
    index = np.arange(bins)
    low = np.floor(index * step[:, None] + start[:, None])
    high = np.ceil((index + 1) * step[:, None] + start[:, None])
    return np.clip(low, 0, size).astype(np.int64), np.clip(high, 0, size).astype(np.int64)


def _psroi_weights(attrs, rois, height, width):
    rows = box_weights(*_psroi_windows(attrs, rois, height, 1), height)
    cols = box_weights(*_psroi_windows(attrs, rois, width, 0), width)
    return rows, cols


def _psroi_channels(attrs):
    """Input channel of each (output channel, bin row, bin column)."""
    size, group = attrs['pooled_size'], _group(attrs)
    c, i, j = np.indices((attrs['output_dim'], size, size))
    gi = np.clip(i * group // size, 0, group - 1)
    gj = np.clip(j * group // size, 0, group - 1)
    return (c * group + gi) * group + gj, i, j


def _psroi_kernel(attrs, ins, outs, ctx):
    data, rois = ins
    batch, valid = _batch_indices(rois, data.shape[0])
    rows, cols = (w.astype(data.dtype) for w in _psroi_weights(attrs, rois, *data.shape[2:]))
    size = attrs['pooled_size']
    full = np.empty((len(rois), data.shape[1], size, size), data.dtype)
    _pool(data, batch, rows, cols, full)
    channel, i, j = _psroi_channels(attrs)
    outs[0][...] = full[:, channel, i, j] * valid[:, None, None, None]


def _psroi_backward(attrs, ins, outs, ctx):
    grad, data, rois = ins
    batch, valid = _batch_indices(rois, data.shape[0])
    rows, cols = (w.astype(grad.dtype) for w in _psroi_weights(attrs, rois, *data.shape[2:]))
    size = attrs['pooled_size']
    full = np.zeros((len(rois), data.shape[1], size, size), grad.dtype)
    channel, i, j = _psroi_channels(attrs)
    full[:, channel, i, j] = grad * valid[:, None, None, None]
    _unpool(full, batch, rows, cols, outs[0])
    outs[1][...] = 0


register('_contrib_PSROIPooling', _psroi_kernel, inputs=('data', 'rois'),
         infer_shape=_psroi_shape, infer_type=same_type, params=_PSROI,
         gradient=lambda F, attrs, ins, outs, og: list(F._backward__contrib_PSROIPooling(
             og[0], *ins, **attrs)),
         doc='Position-sensitive region pooling (R-FCN): bin (i, j) of output channel c '
             'averages its own input channel group.')
register('_backward__contrib_PSROIPooling', _psroi_backward, inputs=('out_grad', 'data', 'rois'),
         outputs=('data_grad', 'rois_grad'), params=_PSROI,
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradient of PSROIPooling (none for the regions).')


# ----------------------------------------------------------------------------------------------
# RROIAlign: ROIAlign over rotated regions (x_center, y_center, width, height, angle in
# degrees); the sample points rotate with the region, so each one is read on its own.

_RROI = (Param('pooled_size', p_shape, REQUIRED, 'Output bins (height, width).'),
         Param('spatial_scale', p_float, REQUIRED, 'Image to feature-map scale.'),
         Param('sampling_ratio', p_int, -1, 'Samples per bin side (<= 0: ceil(roi/bins)).'))


def _rroi_shape(attrs, in_shapes):
    data, rois = in_shapes
    if data is None or rois is None:
        return list(in_shapes), [None]
    if len(data) != 4 or len(rois) != 2 or rois[1] != 6:
        raise ShapeError(f'expected data NCHW and rois (regions, 6) of (batch index, x centre, '
                         f'y centre, width, height, angle), got {data} and {rois}')
    return list(in_shapes), [(rois[0], data[1]) + tuple(_bins(attrs))]


def _rotated_samples(attrs, rois):
    """Sample positions (R, PH, PW, S) of y and x, their weights (1/count, 0 for padding)."""
    ph, pw = _bins(attrs)
    scale = attrs['spatial_scale']
    center_x, center_y = rois[:, 1] * scale, rois[:, 2] * scale
    width = np.maximum(rois[:, 3] * scale, 1.0)
    height = np.maximum(rois[:, 4] * scale, 1.0)
    theta = rois[:, 5] * np.pi / 180.0
    ratio = attrs['sampling_ratio']
    grid_h = np.full(len(rois), ratio) if ratio > 0 else np.ceil(height / ph).astype(np.int64)
    grid_w = np.full(len(rois), ratio) if ratio > 0 else np.ceil(width / pw).astype(np.int64)
    grid_h, grid_w = np.maximum(grid_h, 1), np.maximum(grid_w, 1)
    gy, gx = int(grid_h.max()), int(grid_w.max())
    iy, ix = np.arange(gy), np.arange(gx)
    r = (slice(None), None, None, None, None)
    yy = (-height / 2)[r] + np.arange(ph)[:, None, None, None] * (height / ph)[r] \
        + (iy[:, None] + 0.5) * (height / ph / grid_h)[r]
    xx = (-width / 2)[r] + np.arange(pw)[None, :, None, None] * (width / pw)[r] \
        + (ix[None, :] + 0.5) * (width / pw / grid_w)[r]
    cos, sin = np.cos(theta)[r], np.sin(theta)[r]
    x = xx * cos + yy * sin + center_x[r]
    y = yy * cos - xx * sin + center_y[r]
    used = (iy[:, None] < grid_h[r]) & (ix[None, :] < grid_w[r])
    weight = used / (grid_h * grid_w)[r]
    shape = (len(rois), ph, pw, gy * gx)
    return (np.broadcast_to(y, shape[:3] + (gy, gx)).reshape(shape),
            np.broadcast_to(x, shape[:3] + (gy, gx)).reshape(shape),
            np.broadcast_to(weight, shape[:3] + (gy, gx)).reshape(shape))


def _align_corners(y, x, height, width):
    """ROIAlign's bilinear neighbours of points (y, x): (rows, cols, weights) per corner."""
    outside = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y, x = np.clip(y, 0, None), np.clip(x, 0, None)
    top, left = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    at_bottom, at_right = top >= height - 1, left >= width - 1
    top, left = np.where(at_bottom, height - 1, top), np.where(at_right, width - 1, left)
    fy = np.where(at_bottom, 0.0, y - top)
    fx = np.where(at_right, 0.0, x - left)
    bottom, right = np.minimum(top + 1, height - 1), np.minimum(left + 1, width - 1)
    keep = ~outside
    return [(top, left, (1 - fy) * (1 - fx) * keep), (top, right, (1 - fy) * fx * keep),
            (bottom, left, fy * (1 - fx) * keep), (bottom, right, fy * fx * keep)]


def _rroi_kernel(attrs, ins, outs, ctx):
    data, rois = ins
    batch, valid = _batch_indices(rois, data.shape[0])
    y, x, weight = _rotated_samples(attrs, rois.astype(np.float64))
    out = np.zeros(outs[0].shape, np.float64)
    for rows, cols, corner in _align_corners(y, x, *data.shape[2:]):
        picked = data[batch[:, None, None, None], :, rows, cols]          # (R, PH, PW, S, C)
        out += np.moveaxis((picked * (corner * weight)[..., None]).sum(axis=3), -1, 1)
    outs[0][...] = out * valid[:, None, None, None]


def _rroi_backward(attrs, ins, outs, ctx):
    grad, data, rois = ins
    batch, valid = _batch_indices(rois, data.shape[0])
    y, x, weight = _rotated_samples(attrs, rois.astype(np.float64))
    data_grad = np.zeros(data.shape, np.float64)
    g = np.moveaxis(grad * valid[:, None, None, None], 1, -1)[:, :, :, None, :]  # (R,PH,PW,1,C)
    for rows, cols, corner in _align_corners(y, x, *data.shape[2:]):
        np.add.at(data_grad, (batch[:, None, None, None], slice(None), rows, cols),
                  g * (corner * weight)[..., None])
    outs[0][...] = data_grad
    outs[1][...] = 0


register('_contrib_RROIAlign', _rroi_kernel, inputs=('data', 'rois'), infer_shape=_rroi_shape,
         infer_type=same_type, params=_RROI,
         gradient=lambda F, attrs, ins, outs, og: list(F._backward_RROIAlign(og[0], *ins,
                                                                             **attrs)),
         doc='ROIAlign over rotated regions (batch index, x centre, y centre, width, height, '
             'angle in degrees).')
register('_backward_RROIAlign', _rroi_backward, inputs=('out_grad', 'data', 'rois'),
         outputs=('data_grad', 'rois_grad'), params=_RROI,
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradient of RROIAlign (none for the regions).')


# ----------------------------------------------------------------------------------------------
# DeformablePSROIPooling: PSROIPooling whose bins move by learned offsets (Deformable R-FCN).

_DPSROI = (Param('spatial_scale', p_float, REQUIRED, 'Image to feature-map scale.'),
           Param('output_dim', p_int, REQUIRED, 'Output channels.'),
           Param('group_size', p_int, REQUIRED, 'Position-sensitive groups per side.'),
           Param('pooled_size', p_int, REQUIRED, 'Bins per side.'),
           Param('part_size', p_int, 0, 'Offset cells per side (0: pooled_size).'),
           Param('sample_per_part', p_int, 1, 'Samples per bin side.'),
           Param('trans_std', p_float, 0.0, 'Scale of the offsets.'),
           Param('no_trans', p_bool, False, 'Ignore the offsets (no trans input).'))


def _dpsroi_inputs(attrs):
    return ['data', 'rois'] if attrs['no_trans'] else ['data', 'rois', 'trans']


def _dpsroi_shape(attrs, in_shapes):
    data, rois = in_shapes[:2]
    if data is None or rois is None:
        return list(in_shapes), [None, None]
    _check_rois(rois)
    size, group = attrs['pooled_size'], attrs['group_size']
    if len(data) != 4 or data[1] != attrs['output_dim'] * group * group:
        raise ShapeError(f'data must be NCHW with output_dim * group_size^2 = '
                         f'{attrs["output_dim"] * group * group} channels, got {data}')
    out = (rois[0], attrs['output_dim'], size, size)
    return list(in_shapes), [out, out]


class _DeformedBins:
    """Sample points of every (region, output channel, bin, sample) and their input
    channels, with MXNet's rounding, offsets and border."""

    def __init__(self, attrs, rois, trans, data_shape):
        size, group = attrs['pooled_size'], attrs['group_size']
        part = attrs['part_size'] or size
        samples = attrs['sample_per_part']
        out_dim = attrs['output_dim']
        classes = 1 if trans is None else trans.shape[1] // 2
        height, width = data_shape[2:]
        scale = attrs['spatial_scale']
        rounded = _round_half_away(rois[:, 1:5])
        start = rounded[:, :2] * scale - 0.5
        end = (rounded[:, 2:] + 1.0) * scale - 0.5
        extent = np.maximum(end - start, 0.1)                        # (R, 2): width, height
        self.extent = extent
        c, ph, pw = np.indices((out_dim, size, size))
        part_h = np.floor(ph / size * part).astype(np.int64)
        part_w = np.floor(pw / size * part).astype(np.int64)
        self.trans_index = (c // (out_dim // classes), part_h, part_w)
        if trans is None:
            shift_x = shift_y = np.zeros((len(rois), out_dim, size, size))
        else:
            cls, rows, cols = self.trans_index
            shift_x = trans[:, 2 * cls, rows, cols] * attrs['trans_std']
            shift_y = trans[:, 2 * cls + 1, rows, cols] * attrs['trans_std']
        r = (slice(None), None, None, None)
        bin_w, bin_h = extent[:, 0] / size, extent[:, 1] / size
        w0 = pw * bin_w[r] + start[:, 0][r] + shift_x * extent[:, 0][r]
        h0 = ph * bin_h[r] + start[:, 1][r] + shift_y * extent[:, 1][r]
        steps = np.arange(samples)
        self.x = w0[..., None, None] + (steps[None, :] * (bin_w / samples)[r][..., None, None])
        self.y = h0[..., None, None] + (steps[:, None] * (bin_h / samples)[r][..., None, None])
        self.x, self.y = np.broadcast_arrays(self.x, self.y)
        self.used = ((self.x >= -0.5) & (self.x <= width - 0.5)
                     & (self.y >= -0.5) & (self.y <= height - 0.5))
        self.count = self.used.sum(axis=(-1, -2))
        self.x = np.clip(self.x, 0, width - 1)
        self.y = np.clip(self.y, 0, height - 1)
        gh = np.clip(np.floor(ph * group / size), 0, group - 1).astype(np.int64)
        gw = np.clip(np.floor(pw * group / size), 0, group - 1).astype(np.int64)
        self.channel = (c * group + gh) * group + gw                 # (C_out, P, P)

    def neighbours(self):
        """The four neighbours of each point: (rows, cols, weights)."""
        x1, y1 = np.floor(self.x).astype(np.int64), np.floor(self.y).astype(np.int64)
        x2, y2 = np.ceil(self.x).astype(np.int64), np.ceil(self.y).astype(np.int64)
        dx, dy = self.x - x1, self.y - y1
        return [(y1, x1, (1 - dx) * (1 - dy)), (y2, x1, (1 - dx) * dy),
                (y1, x2, dx * (1 - dy)), (y2, x2, dx * dy)]


def _dpsroi_values(data, batch, bins):
    index = (batch[:, None, None, None, None, None], bins.channel[None, :, :, :, None, None])
    return [(data[index + (rows, cols)], weight) for rows, cols, weight in bins.neighbours()]


def _dpsroi_kernel(attrs, ins, outs, ctx):
    data, rois = ins[0], ins[1]
    trans = None if attrs['no_trans'] else ins[2]
    batch, valid = _batch_indices(rois, data.shape[0])
    bins = _DeformedBins(attrs, rois, trans, data.shape)
    total = sum(value * weight for value, weight in _dpsroi_values(data, batch, bins))
    summed = (total * bins.used).sum(axis=(-1, -2))
    with np.errstate(divide='ignore', invalid='ignore'):
        pooled = np.where(bins.count > 0, summed / bins.count, 0.0)
    outs[0][...] = pooled * valid[:, None, None, None]
    outs[1][...] = bins.count


def _dpsroi_backward(attrs, ins, outs, ctx):
    grad, data, rois = ins[0], ins[1], ins[2]
    trans = None if attrs['no_trans'] else ins[3]
    batch, valid = _batch_indices(rois, data.shape[0])
    bins = _DeformedBins(attrs, rois, trans, data.shape)
    with np.errstate(divide='ignore', invalid='ignore'):
        per_point = np.where(bins.count > 0, grad * valid[:, None, None, None] / bins.count, 0)
    per_point = per_point[..., None, None] * bins.used
    data_grad = np.zeros(data.shape, np.float64)
    index = (batch[:, None, None, None, None, None], bins.channel[None, :, :, :, None, None])
    values = {}
    for corner, (rows, cols, weight) in enumerate(bins.neighbours()):
        np.add.at(data_grad, index + (rows, cols), per_point * weight)
        values[corner] = data[index + (rows, cols)]
    outs[0][...] = data_grad
    outs[1][...] = 0
    if trans is None:
        return
    x1 = np.floor(bins.x)
    y1 = np.floor(bins.y)
    dx, dy = bins.x - x1, bins.y - y1
    slope_x = (values[2] - values[0]) * (1 - dy) + (values[3] - values[1]) * dy
    slope_y = (values[1] - values[0]) * (1 - dx) + (values[3] - values[2]) * dx
    std = attrs['trans_std']
    move_x = (slope_x * per_point).sum(axis=(-1, -2)) * std * bins.extent[:, 0, None, None, None]
    move_y = (slope_y * per_point).sum(axis=(-1, -2)) * std * bins.extent[:, 1, None, None, None]
    trans_grad = np.zeros(trans.shape, np.float64)
    cls, rows, cols = bins.trans_index
    region = np.arange(len(rois))[:, None, None, None]
    np.add.at(trans_grad, (region, 2 * cls, rows, cols), move_x)
    np.add.at(trans_grad, (region, 2 * cls + 1, rows, cols), move_y)
    outs[2][...] = trans_grad


def _dpsroi_grad(F, attrs, ins, outs, og):
    grads = F._backward__contrib_DeformablePSROIPooling(og[0], *ins, **attrs)
    return list(grads)


register('_contrib_DeformablePSROIPooling', _dpsroi_kernel, inputs=_dpsroi_inputs,
         outputs=('output', 'top_count'), visible_outputs=1, infer_shape=_dpsroi_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]] * 2), params=_DPSROI,
         gradient=_dpsroi_grad,
         doc='Position-sensitive region pooling whose bins move by the offsets trans '
             '(Deformable R-FCN): each bin averages sample_per_part^2 bilinear reads.')
register('_backward__contrib_DeformablePSROIPooling', _dpsroi_backward,
         inputs=lambda attrs: ['out_grad'] + _dpsroi_inputs(attrs),
         outputs=lambda attrs: [f'{n}_grad' for n in _dpsroi_inputs(attrs)], params=_DPSROI,
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradients of DeformablePSROIPooling (for data and trans).')
