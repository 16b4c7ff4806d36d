"""Deformable convolutions: DeformableConvolution (DCN) and ModulatedDeformableConvolution
(DCNv2), on NCHW data.

Each kernel tap of each output position reads the input at its regular place moved by a
learned offset (``offset``: for every deformable group and tap, a y and an x offset per output
position), bilinearly; DCNv2 also scales each read by a ``mask``. The reads form columns
(channels * taps, output positions) that one matrix product per group turns into the output,
as im2col does for a plain convolution. The backward spreads the column gradient back through
bilinear weights and differentiates those weights for the offsets.

The border follows MXNet 1.9.1's kernels: DeformableConvolution reads only points in
[0, size) and clamps the last row and column; DCNv2 reads points in (-1, size) with zeros for
neighbours outside.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_contrib_DeformableConvolution')
>>> attrs = op.parse_attrs({'kernel': (3, 3), 'num_filter': 4, 'pad': (1, 1)})
>>> op.infer_shape(attrs, [(2, 3, 5, 5), None, None, None])[1]
[(2, 4, 5, 5)]
"""
from __future__ import annotations

import numpy as np

from ember.op.host import register
from ember.op.registry import (REQUIRED, Param, ShapeError, p_bool, p_enum, p_int, p_optional,
                               p_shape, same_type)

__all__ = []


def _geometry(attrs, data):
    kernel = attrs['kernel']
    if len(kernel) != 2:
        raise ShapeError(f'kernel={kernel}: deformable convolutions are 2-D')
    stride = attrs['stride'] or (1, 1)
    dilate = attrs['dilate'] or (1, 1)
    pad = attrs['pad'] or (0, 0)
    out = tuple((n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, k, s, d, p in zip(data[2:], kernel, stride, dilate, pad))
    return stride, dilate, pad, out


def _inputs(modulated):
    def inputs(attrs):
        names = ['data', 'offset'] + (['mask'] if modulated else []) + ['weight']
        return names + ([] if attrs['no_bias'] else ['bias'])
    return inputs


def _shape(modulated):
    def infer(attrs, in_shapes):
        data = in_shapes[0]
        if data is None:
            return list(in_shapes), [None]
        if len(data) != 4:
            raise ShapeError(f'data must be NCHW, got {data}')
        groups, deformable = attrs['num_group'], attrs['num_deformable_group']
        if data[1] % groups or data[1] % deformable or attrs['num_filter'] % groups:
            raise ShapeError(f'channels {data[1]} and num_filter {attrs["num_filter"]} must be '
                             f'divisible by num_group={groups} (and the channels by '
                             f'num_deformable_group={deformable})')
        _, _, _, out = _geometry(attrs, data)
        taps = attrs['kernel'][0] * attrs['kernel'][1]
        shapes = [data, (data[0], 2 * deformable * taps) + out]
        if modulated:
            shapes.append((data[0], deformable * taps) + out)
        shapes.append((attrs['num_filter'], data[1] // groups) + tuple(attrs['kernel']))
        if not attrs['no_bias']:
            shapes.append((attrs['num_filter'],))
        for given, wanted in zip(in_shapes, shapes):
            if given is not None and tuple(given) != tuple(wanted):
                raise ShapeError(f'expected input shapes {shapes}, got {in_shapes}')
        return shapes, [(data[0], attrs['num_filter']) + out]
    return infer


class _Samples:
    """Where every tap of every output position reads, per image and deformable group:
    positions (N, G, K, Ho, Wo) and the four bilinear neighbours."""

    def __init__(self, attrs, data_shape, offset):
        stride, dilate, pad, out = _geometry(attrs, data_shape)
        kh, kw = attrs['kernel']
        n, groups = data_shape[0], attrs['num_deformable_group']
        self.height, self.width = data_shape[2:]
        moves = offset.reshape(n, groups, kh * kw, 2, *out).astype(np.float64)
        tap_y, tap_x = np.divmod(np.arange(kh * kw), kw)
        base_y = (np.arange(out[0]) * stride[0] - pad[0])[:, None] + 0 * np.arange(out[1])
        base_x = 0 * np.arange(out[0])[:, None] + np.arange(out[1]) * stride[1] - pad[1]
        self.y = base_y + (tap_y * dilate[0])[:, None, None] + moves[:, :, :, 0]
        self.x = base_x + (tap_x * dilate[1])[:, None, None] + moves[:, :, :, 1]

    def corners(self, clamped=False):
        """(rows, cols, weight, d weight/dy, d weight/dx) of the four neighbours: points in
        (-1, size) with zeros outside, or (`clamped`, DCN's forward) points in [0, size) with
        the last row and column clamped."""
        height, width = self.height, self.width
        y, x = self.y, self.x
        moves_y = moves_x = True       # whether the read still follows the offset
        if clamped:
            inside = (y >= 0) & (y < height) & (x >= 0) & (x < width)
            moves_y, moves_x = np.floor(y) < height - 1, np.floor(x) < width - 1
            y = np.where(moves_y, y, height - 1)
            x = np.where(moves_x, x, width - 1)
        else:
            inside = (y > -1) & (y < height) & (x > -1) & (x < width)
        top, left = np.floor(y), np.floor(x)
        fy, fx = y - top, x - left
        top, left = top.astype(np.int64), left.astype(np.int64)
        for dy in (0, 1):
            for dx in (0, 1):
                row, col = top + dy, left + dx
                valid = inside & (row >= 0) & (row < height) & (col >= 0) & (col < width)
                wy = fy if dy else 1 - fy
                wx = fx if dx else 1 - fx
                yield (np.clip(row, 0, height - 1), np.clip(col, 0, width - 1),
                       wy * wx * valid, (1 if dy else -1) * wx * valid * moves_y,
                       (1 if dx else -1) * wy * valid * moves_x)


def _grouped(x, groups):
    """(N, C, ...) -> (N, groups, C/groups, ...)."""
    return x.reshape(x.shape[0], groups, x.shape[1] // groups, *x.shape[2:])


def _gather(data, rows, cols):
    """data (N, G, Cg, H, W) at per-group positions (N, G, K, Ho, Wo) -> (N, G, Cg, K, Ho, Wo)."""
    n, g = np.indices(rows.shape[:2])
    picked = data[n[..., None, None, None], g[..., None, None, None], :, rows, cols]
    return np.moveaxis(picked, -1, 2)


def _columns(attrs, data, samples, mask, clamped):
    """(N, C, K, Ho, Wo) bilinear reads (times the mask)."""
    grouped = _grouped(data, attrs['num_deformable_group'])
    columns = 0
    for rows, cols, weight, _, _ in samples.corners(clamped):
        columns = columns + _gather(grouped, rows, cols) * weight[:, :, None]
    if mask is not None:
        columns = columns * mask.reshape(samples.y.shape)[:, :, None]
    return columns.reshape(data.shape[0], data.shape[1], *samples.y.shape[2:])


def _conv_columns(attrs, columns, weight):
    """The output (N, F, Ho, Wo) of the columns (N, C, K, Ho, Wo) and weight (F, C/g, kh, kw)."""
    groups = attrs['num_group']
    n, channels, taps, out_h, out_w = columns.shape
    cols = columns.reshape(n, groups, (channels // groups) * taps, out_h * out_w)
    filters = weight.reshape(groups, weight.shape[0] // groups, -1)
    return np.matmul(filters[None], cols).reshape(n, weight.shape[0], out_h, out_w)


def _split(modulated, ins):
    data, offset = ins[0], ins[1]
    mask = ins[2] if modulated else None
    rest = ins[3:] if modulated else ins[2:]
    return data, offset, mask, rest[0], (rest[1] if len(rest) > 1 else None)


def _kernel(modulated):
    def kernel(attrs, ins, outs, ctx):
        data, offset, mask, weight, bias = _split(modulated, ins)
        samples = _Samples(attrs, data.shape, offset)
        columns = _columns(attrs, data, samples, mask, clamped=not modulated)
        out = _conv_columns(attrs, columns, weight)
        if bias is not None:
            out = out + bias.reshape(1, -1, 1, 1)
        outs[0][...] = out
    return kernel


def _backward(modulated):
    def kernel(attrs, ins, outs, ctx):
        grad = ins[0]
        data, offset, mask, weight, bias = _split(modulated, ins[1:])
        samples = _Samples(attrs, data.shape, offset)
        plain = _columns(attrs, data, samples, None, clamped=not modulated)
        groups, deformable = attrs['num_group'], attrs['num_deformable_group']
        n, channels, taps, out_h, out_w = plain.shape
        scaled = plain if mask is None else (
            _grouped(plain, deformable) * mask.reshape(samples.y.shape)[:, :, None]
        ).reshape(plain.shape)
        g = grad.reshape(n, groups, weight.shape[0] // groups, out_h * out_w)
        cols = scaled.reshape(n, groups, (channels // groups) * taps, out_h * out_w)
        weight_grad = np.einsum('ngfp,ngcp->gfc', g, cols).reshape(weight.shape)
        filters = weight.reshape(groups, weight.shape[0] // groups, -1)
        col_grad = np.einsum('gfc,ngfp->ngcp', filters, g).reshape(plain.shape)
        col_grad = _grouped(col_grad, deformable)                  # (N, G, Cg, K, Ho, Wo)
        if mask is not None:
            mask_grad = (col_grad * _grouped(plain, deformable)).sum(axis=2)
            col_grad = col_grad * mask.reshape(samples.y.shape)[:, :, None]
        data_grad = np.zeros(_grouped(data, deformable).shape, np.float64)
        dy = dx = 0
        gn, gg = np.indices(samples.y.shape[:2])
        for rows, cols_, weight_, weight_dy, weight_dx in samples.corners(not modulated):
            values = _gather(_grouped(data, deformable), rows, cols_)
            dy = dy + (values * col_grad).sum(axis=2) * weight_dy
            dx = dx + (values * col_grad).sum(axis=2) * weight_dx
            spread = np.moveaxis(col_grad * weight_[:, :, None], 2, -1)
            np.add.at(data_grad, (gn[..., None, None, None], gg[..., None, None, None],
                                  slice(None), rows, cols_), spread)
        results = [data_grad.reshape(data.shape),
                   np.stack([dy, dx], axis=3).reshape(offset.shape)]
        if mask is not None:
            results.append(mask_grad.reshape(mask.shape))
        results.append(weight_grad)
        if bias is not None:
            results.append(grad.sum(axis=(0, 2, 3)))
        for out, value in zip(outs, results):
            out[...] = value
    return kernel


_PARAMS = (Param('kernel', p_shape, REQUIRED, 'Kernel (height, width).'),
           Param('stride', p_shape, (), 'Stride (default 1).'),
           Param('dilate', p_shape, (), 'Dilation (default 1).'),
           Param('pad', p_shape, (), 'Zero padding (default 0).'),
           Param('num_filter', p_int, REQUIRED, 'Output channels.'),
           Param('num_group', p_int, 1, 'Groups of channels convolved separately.'),
           Param('num_deformable_group', p_int, 1, 'Groups of channels sharing offsets.'),
           Param('workspace', p_int, 1024, 'Accepted for MXNet\'s sake.'),
           Param('no_bias', p_bool, False, 'Leave out the bias.'),
           Param('layout', p_optional(p_enum('NCHW', 'NCW', 'NCDHW')), None,
                 'Only NCHW is supported.'))
_MODULATED = _PARAMS + (Param('im2col_step', p_int, 64, 'Accepted for MXNet\'s sake.'),)


def _declare(name, modulated, params, doc):
    inputs = _inputs(modulated)
    register(name, _kernel(modulated), inputs=inputs, infer_shape=_shape(modulated),
             infer_type=same_type, params=params,
             gradient=lambda F, attrs, ins, outs, og: list(getattr(
                 F, f'_backward_{name}')(og[0], *ins, **attrs)) if len(ins) > 1 else [
                 getattr(F, f'_backward_{name}')(og[0], *ins, **attrs)],
             doc=doc)
    register(f'_backward_{name}', _backward(modulated),
             inputs=lambda attrs: ['out_grad'] + inputs(attrs),
             outputs=lambda attrs: [f'{n}_grad' for n in inputs(attrs)], params=params,
             infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
             infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
             doc=f'The gradients of {name[len("_contrib_"):]}.')


_declare('_contrib_DeformableConvolution', False, _PARAMS,
         'Convolution whose kernel taps read at learned offsets (bilinear, zeros outside).')
_declare('_contrib_ModulatedDeformableConvolution', True, _MODULATED,
         'Deformable convolution whose reads are also scaled by a learned mask (DCNv2).')
