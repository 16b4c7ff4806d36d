"""Region proposals of Faster R-CNN's RPN: Proposal (one image) and MultiProposal (a batch).

Anchors of every ratio and scale sit at each cell of the score map (``feature_stride`` pixels
apart); the box deltas move them, the boxes are clipped to the image, boxes smaller than
``rpn_min_size`` (times the image scale) lose their score, the best ``rpn_pre_nms_top_n`` go
through NMS and the first ``rpn_post_nms_top_n`` survivors are the regions, repeated in turn
when fewer survive. Boxes are in pixels, with MXNet's (and py-faster-rcnn's) +1 widths.

>>> from ember.op.contrib.proposal import base_anchors
>>> base_anchors(16, (0.5, 1, 2), (8,)).tolist()
[[-84.0, -40.0, 99.0, 55.0], [-56.0, -56.0, 71.0, 71.0], [-36.0, -80.0, 51.0, 95.0]]
"""
from __future__ import annotations

import numpy as np

from ember.op.optimizer_ops import _p_floats
from ember.op.host import register
from ember.op.registry import Param, ShapeError, p_bool, p_float, p_int

__all__ = ['base_anchors']


def base_anchors(stride, ratios, scales):
    """(ratios * scales, 4) anchors around the first cell, ratio by ratio."""
    size = float(stride)
    center = 0.5 * (size - 1)
    out = []
    for ratio in ratios:
        for scale in scales:
            base_w = np.floor(np.sqrt(np.floor(size * size / ratio)) + 0.5)
            width = base_w * scale
            height = np.floor(base_w * ratio + 0.5) * scale
            out.append([center - 0.5 * (width - 1), center - 0.5 * (height - 1),
                        center + 0.5 * (width - 1), center + 0.5 * (height - 1)])
    return np.array(out)


def _decode(boxes, deltas, iou_loss):
    if iou_loss:
        return boxes + deltas
    width = boxes[:, 2] - boxes[:, 0] + 1
    height = boxes[:, 3] - boxes[:, 1] + 1
    center_x = boxes[:, 0] + 0.5 * (width - 1)
    center_y = boxes[:, 1] + 0.5 * (height - 1)
    new_x = deltas[:, 0] * width + center_x
    new_y = deltas[:, 1] * height + center_y
    new_w = np.exp(deltas[:, 2]) * width
    new_h = np.exp(deltas[:, 3]) * height
    return np.stack([new_x - 0.5 * (new_w - 1), new_y - 0.5 * (new_h - 1),
                     new_x + 0.5 * (new_w - 1), new_y + 0.5 * (new_h - 1)], axis=1)


def _nms(boxes, threshold, limit):
    """Positions kept by greedy NMS over boxes sorted by score (+1 areas; IoU above the
    threshold suppresses), at most `limit`."""
    area = (boxes[:, 2] - boxes[:, 0] + 1) * (boxes[:, 3] - boxes[:, 1] + 1)
    low = np.maximum(boxes[:, None, :2], boxes[None, :, :2])
    high = np.minimum(boxes[:, None, 2:4], boxes[None, :, 2:4])
    inter = np.prod(np.clip(high - low + 1, 0, None), axis=-1)
    overlap = inter / (area[:, None] + area[None, :] - inter)
    alive = np.ones(len(boxes), bool)
    kept = []
    for i in range(len(boxes)):
        if not alive[i]:
            continue
        kept.append(i)
        if len(kept) == limit:
            break
        alive[i + 1:] &= ~(overlap[i, i + 1:] > threshold)
    return np.array(kept, np.int64)


def _propose(attrs, scores, deltas, info):
    """(rois (post_nms_top_n, 4), their scores) for one image: scores (2A, H, W) with the
    foreground in the second half, deltas (4A, H, W), info (height, width, scale)."""
    anchors_per_cell = scores.shape[0] // 2
    height, width = scores.shape[1:]
    stride = attrs['feature_stride']
    base = base_anchors(stride, attrs['ratios'], attrs['scales'])
    shift_y, shift_x = np.meshgrid(np.arange(height) * stride, np.arange(width) * stride,
                                   indexing='ij')
    shifts = np.stack([shift_x, shift_y, shift_x, shift_y], axis=-1)[:, :, None, :]
    boxes = (base[None, None] + shifts).reshape(-1, 4)                 # (H, W, A) order
    foreground = np.moveaxis(scores[anchors_per_cell:], 0, -1).reshape(-1).astype(np.float64)
    moves = np.moveaxis(deltas.reshape(anchors_per_cell, 4, height, width), (0, 1), (2, 3))
    boxes = _decode(boxes, moves.reshape(-1, 4).astype(np.float64), attrs['iou_loss'])
    im_height, im_width, im_scale = (float(v) for v in info[:3])
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, im_width - 1)
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, im_height - 1)
    rows, cols = np.indices((height, width))
    outside = (rows >= int(im_height / stride)) | (cols >= int(im_width / stride))
    foreground = np.where(np.repeat(outside.reshape(-1), anchors_per_cell), -1.0, foreground)
    min_size = attrs['rpn_min_size'] * im_scale
    small = ((boxes[:, 2] - boxes[:, 0] + 1 < min_size)
             | (boxes[:, 3] - boxes[:, 1] + 1 < min_size))
    boxes[small] += np.array([-1, -1, 1, 1]) * (min_size / 2)
    foreground[small] = -1.0
    order = np.argsort(-foreground, kind='stable')[:attrs['rpn_pre_nms_top_n']]
    kept = order[_nms(boxes[order], attrs['threshold'], attrs['rpn_post_nms_top_n'])]
    chosen = kept[np.arange(attrs['rpn_post_nms_top_n']) % len(kept)]
    return boxes[chosen], foreground[chosen]


_PARAMS = (Param('rpn_pre_nms_top_n', p_int, 6000, 'Best boxes kept before NMS.'),
           Param('rpn_post_nms_top_n', p_int, 300, 'Regions returned per image.'),
           Param('threshold', p_float, 0.7, 'IoU above which NMS suppresses.'),
           Param('rpn_min_size', p_int, 16, 'Least box side, in image pixels before scaling.'),
           Param('scales', _p_floats, (4.0, 8.0, 16.0, 32.0), 'Anchor scales.'),
           Param('ratios', _p_floats, (0.5, 1.0, 2.0), 'Anchor aspect ratios.'),
           Param('feature_stride', p_int, 16, 'Image pixels per score-map cell.'),
           Param('output_score', p_bool, False, 'Also return the scores.'),
           Param('iou_loss', p_bool, False, 'Deltas are corner offsets (else centre/size).'))


def _shape(batched):
    def infer(attrs, in_shapes):
        scores, deltas, info = in_shapes
        count = 2 if attrs['output_score'] else 1
        if scores is None:
            return list(in_shapes), [None] * count
        anchors = len(attrs['ratios']) * len(attrs['scales'])
        if len(scores) != 4 or scores[1] != 2 * anchors:
            raise ShapeError(f'cls_prob must be (batch, 2 * {anchors} anchors, height, width), '
                             f'got {scores}')
        if not batched and scores[0] != 1:
            raise ShapeError(f'Proposal takes one image (use MultiProposal for a batch), got '
                             f'{scores[0]}')
        rows = scores[0] * attrs['rpn_post_nms_top_n']
        filled = [scores, (scores[0], 4 * anchors) + tuple(scores[2:]), (scores[0], 3)]
        return filled, [(rows, 5), (rows, 1)][:count]
    return infer


def _kernel(attrs, ins, outs, ctx):
    scores, deltas, info = ins
    top = attrs['rpn_post_nms_top_n']
    for image in range(len(scores)):
        rois, kept_scores = _propose(attrs, scores[image], deltas[image], info[image])
        rows = slice(image * top, (image + 1) * top)
        outs[0][rows, 0] = image
        outs[0][rows, 1:] = rois
        if attrs['output_score']:
            outs[1][rows, 0] = kept_scores


def _zero_grads(F, attrs, ins, outs, og):
    return [F.zeros_like(x) for x in ins]


for _name, _batched in (('_contrib_Proposal', False), ('_contrib_MultiProposal', True)):
    register(_name, _kernel, inputs=('cls_prob', 'bbox_pred', 'im_info'),
             outputs=lambda attrs: ['output', 'score'][:2 if attrs['output_score'] else 1],
             infer_shape=_shape(_batched), params=_PARAMS, gradient=_zero_grads,
             infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]] * (
                 2 if attrs['output_score'] else 1)),
             doc='Region proposals (batch index, x1, y1, x2, y2) from RPN scores and box '
                 'deltas' + (' for a batch of images' if _batched else ' for one image')
                 + ', rpn_post_nms_top_n per image.')
