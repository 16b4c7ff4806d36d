"""Pooling (max, avg, sum, lp) over 1-D, 2-D and 3-D windows: oneDNN for max and average
pooling where it runs, else one vectorised NumPy pass per tap."""
from __future__ import annotations

import numpy as np

from ember import config, engine
from ember.op.nn import onednn_provider
from ember.op.nn._common import (
    accumulation_dtype, channel_first, check_layout, interior, is_channel_last, join_layout,
    layout_param, padded_input, pool_window, scratch, shape_param, split_layout,
    window_slices)
from ember.op.registry import (
    REQUIRED, Param, ShapeError, like_input, p_bool, p_enum, p_float, p_int, p_optional, p_shape,
    register)

POOL_PARAMS = (
    shape_param('kernel', doc='Window size; ignored with global_pool.'),
    Param('pool_type', p_enum('max', 'avg', 'sum', 'lp'), 'max'),
    Param('global_pool', p_bool, False, 'Pool over the whole spatial extent.'),
    Param('cudnn_off', p_bool, False, 'Accepted for compatibility.'),
    Param('pooling_convention', p_enum('valid', 'full', 'same'), 'valid',
          'Output size rounding: valid floors, full ceils, same is ceil(size / stride).'),
    shape_param('stride'),
    shape_param('pad'),
    Param('p_value', p_optional(p_int), None, 'The p of lp pooling.'),
    Param('count_include_pad', p_optional(p_bool), None,
          'avg: count padded elements in the divisor (None means True).'),
    layout_param(),
)


def _infer(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    if len(data) not in (3, 4, 5):
        raise ShapeError(f'Pooling: data has shape {tuple(data)}; expected 3-D, 4-D or 5-D')
    if attrs['pool_type'] == 'lp' and not attrs['p_value']:
        raise ShapeError("Pooling: pool_type='lp' needs p_value (e.g. p_value=2)")
    check_layout('Pooling', attrs['layout'], data)
    batch, channels, size_in = split_layout(tuple(data), attrs['layout'])
    window = pool_window(attrs, size_in)
    return list(in_shapes), [join_layout(batch, channels, window.size_out, attrs['layout'])]


def _pad_value(pool_type, dtype):
    if pool_type != 'max':
        return 0
    # bfloat16 (ml_dtypes) is a floating type NumPy reports as kind 'V'
    return np.iinfo(dtype).min if dtype.kind in 'iu' else -np.inf


def _divisor(attrs, window, xp, dtype):
    """Elements per window of avg pooling, broadcastable against the output."""
    include_pad = attrs['count_include_pad'] in (None, True)
    declared_after = window.pad_before if attrs['pooling_convention'] != 'same' \
        else window.pad_after
    count = np.ones((), dtype=np.int64)
    for i, (k, s, before, after, n, o) in enumerate(zip(
            window.kernel, window.stride, window.pad_before, declared_after,
            window.size_in, window.size_out)):
        start = np.arange(o) * s - before
        if include_pad:
            per_dim = np.minimum(start + k, n + after) - start
        else:
            per_dim = np.minimum(start + k, n) - np.maximum(start, 0)
        count = np.multiply.outer(count, np.maximum(per_dim, 1))
    return xp.asarray(count.astype(dtype))


def _signed_root(xp, value, p):
    if p % 2:
        return xp.sign(value) * xp.abs(value) ** (1.0 / p)
    return value ** (1.0 / p)


def _pad_buffer(attrs, x, window, ctx):
    """Scratch for `x` (a channel-first view) padded, laid out as the data is (None without
    padding): channel-last data padded channel-first took two transposing copies (65 of
    resnet50_v1's 540 ms at batch 8 without oneDNN)."""
    if not window.has_padding:
        return None
    xp, layout = ctx.xp, attrs['layout']
    shape = x.shape[:2] + window.padded
    if is_channel_last(layout):
        buffer, = scratch(ctx, xp, (shape[:1] + shape[2:] + shape[1:2], x.dtype))
        return channel_first(xp, buffer, layout)
    buffer, = scratch(ctx, xp, (shape, x.dtype))
    return buffer


# Padding copies the input: a batch is pooled a few samples at a time so that the copy (kept by
# the temporary workspace) stays small; ResNet-50's first pooling at batch 32 copied 101 MB.
_CHUNK_BYTES = 16 << 20


def _kernel(attrs, ins, outs, ctx):
    if onednn_provider.pooling_forward(attrs, ins[0], outs[0], ctx.safe_accumulation):
        return
    xp, layout = ctx.xp, attrs['layout']
    x, y = channel_first(xp, ins[0], layout), channel_first(xp, outs[0], layout)
    window = pool_window(attrs, x.shape[2:])
    step = max(1, _CHUNK_BYTES // max(x[:1].nbytes, 1)) if window.has_padding else len(x)
    for lo in range(0, max(len(x), 1), step):
        _pool(attrs, x[lo:lo + step], y[lo:lo + step], window, ctx)


def _pool(attrs, x, y, window, ctx):
    xp = ctx.xp
    buffer = _pad_buffer(attrs, x, window, ctx)
    fill = _pad_value(attrs['pool_type'], x.dtype)
    kind, p = attrs['pool_type'], attrs['p_value']
    dtype = _accumulator(kind, y.dtype, ctx.safe_accumulation)

    def samples(lo, hi):
        padded = x[lo:hi] if buffer is None else padded_input(xp, x[lo:hi], window, fill,
                                                              buffer[lo:hi])
        # one vectorised pass per kernel tap: far faster than reducing a strided window view
        taps = (padded[tap] for _, tap in window_slices(window))
        total = next(taps).astype(dtype)
        if kind == 'lp':
            total **= p
        for values in taps:
            if kind == 'max':
                xp.maximum(total, values, out=total)
            else:
                total += values ** p if kind == 'lp' else values
        if kind == 'avg':
            total /= _divisor(attrs, window, xp, total.dtype)
        y[lo:hi] = _signed_root(xp, total, p) if kind == 'lp' else total
    # the samples split over the kernel threads (NumPy's ufuncs release the GIL)
    engine.parallel_for(len(x), samples,
                        split=xp is np and x.size >= config.get('MXNET_CPU_PARALLEL_SIZE'))


def _accumulator(kind, dtype, safe):
    if kind == 'max':
        return dtype
    return accumulation_dtype(dtype, safe) if dtype.kind == 'f' else np.dtype(np.float64)


def _backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, out); max pooling routes each gradient to the first maximum."""
    if onednn_provider.pooling_backward(attrs, ins[0], ins[1], outs[0], ctx):
        return
    xp, layout = ctx.xp, attrs['layout']
    dy, x, y = (channel_first(xp, a, layout) for a in ins)
    dx = channel_first(xp, outs[0], layout)
    window = pool_window(attrs, x.shape[2:])
    kind = attrs['pool_type']
    padded_shape, needs_data = x.shape[:2] + window.padded, kind in ('max', 'lp')
    x_buf, dpad = scratch(ctx, xp,
                          (padded_shape, x.dtype) if window.has_padding and needs_data else None,
                          (padded_shape, dx.dtype) if window.has_padding else None)
    padded = padded_input(xp, x, window, _pad_value(kind, x.dtype), x_buf) if needs_data \
        else None
    if dpad is None:
        dpad = dx
    dpad.fill(0)
    if kind == 'max':
        taken = xp.zeros(y.shape, dtype=bool)
        for _, tap in window_slices(window):
            hit = (padded[tap] == y) & ~taken
            dpad[tap] += dy * hit
            taken |= hit
    else:
        share = _tap_gradient(attrs, window, xp, dy, y)
        for _, tap in window_slices(window):
            dpad[tap] += share if kind != 'lp' else share * padded[tap] ** (attrs['p_value'] - 1)
    if window.has_padding:
        dx[...] = dpad[interior(window)]


def _tap_gradient(attrs, window, xp, dy, y):
    """What every tap of a window receives (before the lp factor of its own input)."""
    kind = attrs['pool_type']
    if kind == 'avg':
        return dy / _divisor(attrs, window, xp, dy.dtype)
    if kind == 'lp':
        safe = xp.where(y == 0, 1, y)
        return xp.where(y == 0, 0, dy * safe ** (1 - attrs['p_value']))
    return dy


def _gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_Pooling(out_grads[0], inputs[0], outputs[0], **attrs)]


register('Pooling', _kernel, infer_shape=_infer, params=POOL_PARAMS, gradient=_gradient,
         resources=('temp',),
         doc='Max, average, sum or Lp pooling over windows of the spatial dims.')

register('_backward_Pooling', _backward_kernel, inputs=('out_grad', 'data', 'output'),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         outputs=('data_grad',), params=POOL_PARAMS, resources=('temp',))


# ----------------------------------------------------------------------------------------------
# ROIPooling

ROI_PARAMS = (Param('pooled_size', p_shape, REQUIRED, '(height, width) of each pooled region'),
              Param('spatial_scale', p_float, REQUIRED, 'ratio of feature-map to input-image '
                    'size: multiplies the ROI coordinates'))


def _roi_infer(attrs, in_shapes):
    data, rois = in_shapes
    if data is None or rois is None:
        return list(in_shapes), [None, None]
    if len(data) != 4 or len(rois) != 2 or rois[1] != 5 or len(attrs['pooled_size']) != 2:
        raise ShapeError(f'ROIPooling: needs data (N, C, H, W), rois (R, 5) and a 2-D '
                         f'pooled_size, got {tuple(data)}, {tuple(rois)} and '
                         f'{attrs["pooled_size"]}')
    out = (rois[0], data[1]) + tuple(attrs['pooled_size'])
    return list(in_shapes), [out, out]


def _c_round(value):
    return int(np.floor(abs(value) + 0.5) * np.sign(value))


def _roi_bins(roi, scale, pooled, height, width):
    """The (h0, h1, w0, w1) window of every bin of one ROI, clipped to the feature map."""
    x0, y0, x1, y1 = (_c_round(float(v) * scale) for v in roi[1:])
    bin_h = max(y1 - y0 + 1, 1) / pooled[0]
    bin_w = max(x1 - x0 + 1, 1) / pooled[1]
    for ph in range(pooled[0]):
        h0 = min(max(int(np.floor(ph * bin_h)) + y0, 0), height)
        h1 = min(max(int(np.ceil((ph + 1) * bin_h)) + y0, 0), height)
        for pw in range(pooled[1]):
            w0 = min(max(int(np.floor(pw * bin_w)) + x0, 0), width)
            w1 = min(max(int(np.ceil((pw + 1) * bin_w)) + x0, 0), width)
            yield ph, pw, h0, h1, w0, w1


def _roi_kernel(attrs, ins, outs, ctx):
    xp, (data, rois), (out, where) = ctx.xp, ins, outs
    _, channels, height, width = data.shape
    for r, roi in enumerate(rois.tolist() if xp is np else rois.get().tolist()):
        image = data[int(roi[0])]
        for ph, pw, h0, h1, w0, w1 in _roi_bins(roi, attrs['spatial_scale'],
                                                attrs['pooled_size'], height, width):
            if h1 <= h0 or w1 <= w0:
                out[r, :, ph, pw], where[r, :, ph, pw] = 0, -1
                continue
            window = image[:, h0:h1, w0:w1].reshape(channels, -1)
            local = window.argmax(axis=1)
            out[r, :, ph, pw] = window[xp.arange(channels), local]
            where[r, :, ph, pw] = (h0 + local // (w1 - w0)) * width + w0 + local % (w1 - w0)


def _roi_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, max positions, data, rois): out_grad added at each maximum."""
    xp, (grad, where, _, rois), out = ctx.xp, ins, outs[0]
    out[...] = 0
    index = where.astype(np.int64)
    valid = index >= 0
    batch = xp.broadcast_to(rois[:, 0].astype(np.int64)[:, None, None, None], index.shape)
    channel = xp.broadcast_to(xp.arange(index.shape[1])[None, :, None, None], index.shape)
    flat = out.reshape(out.shape[0], out.shape[1], -1)
    xp.add.at(flat, (batch[valid], channel[valid], index[valid]), grad[valid])


register('ROIPooling', _roi_kernel, inputs=('data', 'rois'), infer_shape=_roi_infer,
         infer_type=lambda attrs, dt: (list(dt), [dt[0], dt[0]]),
         outputs=('output', 'maxidx'), visible_outputs=1, params=ROI_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_ROIPooling(og[0], outs[1], ins[0], ins[1], **attrs), None],
         doc='Max-pool each region of interest [batch, x1, y1, x2, y2] (image coordinates, '
             'scaled by spatial_scale) into pooled_size bins.')
register('_backward_ROIPooling', _roi_backward_kernel,
         inputs=('out_grad', 'maxidx', 'data', 'rois'), outputs=('data_grad',),
         params=ROI_PARAMS, infer_shape=like_input(2), infer_type=like_input(2))
