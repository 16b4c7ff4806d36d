"""Object-detection operators: box IoU, non-maximum suppression, bipartite matching, box
encoding and decoding, and the SSD layers MultiBoxPrior, MultiBoxTarget and MultiBoxDetection.

Boxes are ``(x1, y1, x2, y2)`` corners unless a ``format`` says ``center`` (``(x, y, w, h)``);
areas are ``w * h`` (no +1 pixel). The greedy loops (suppression, matching) follow MXNet's
order exactly, since their results depend on it; each step is a vectorised update. Only
box_nms passes a gradient (to the boxes it keeps); the others have MXNet's zero gradients.

>>> import numpy as np
>>> from ember.op.contrib.detection import iou
>>> iou(np.array([[0., 0., 1., 1.]]), np.array([[0., 0., 2., 2.], [3., 3., 4., 4.]]))
array([[0.25, 0.  ]])
"""
from __future__ import annotations

import numpy as np

from ember.op.host import register
from ember.op.registry import Param, ShapeError, p_bool, p_enum, p_float, p_int, same_type
from ember.op.optimizer_ops import _p_floats

__all__ = ['iou', 'to_corners', 'nms_order']

_FORMAT = p_enum('corner', 'center')


def _zero_grads(F, attrs, ins, outs, og):
    return [F.zeros_like(x) for x in ins]


def to_corners(boxes, fmt):
    """(..., 4) boxes in `fmt` as corners."""
    if fmt == 'corner':
        return boxes
    half = boxes[..., 2:4] / 2
    return np.concatenate([boxes[..., :2] - half, boxes[..., :2] + half], axis=-1)


def _to_center(boxes):
    size = boxes[..., 2:4] - boxes[..., :2]
    return np.concatenate([boxes[..., :2] + size / 2, size], axis=-1)


def iou(lhs, rhs):
    """Pairwise IoU of corner boxes: (..., N, 4) x (..., M, 4) -> (..., N, M)."""
    low = np.maximum(lhs[..., :, None, :2], rhs[..., None, :, :2])
    high = np.minimum(lhs[..., :, None, 2:4], rhs[..., None, :, 2:4])
    inter = np.prod(np.clip(high - low, 0, None), axis=-1)
    area_l = np.prod(lhs[..., 2:4] - lhs[..., :2], axis=-1)
    area_r = np.prod(rhs[..., 2:4] - rhs[..., :2], axis=-1)
    union = area_l[..., :, None] + area_r[..., None, :] - inter
    with np.errstate(divide='ignore', invalid='ignore'):
        return np.where(union > 0, inter / union, 0.0)


# ----------------------------------------------------------------------------------------------
# box_iou.

def _box_iou_shape(attrs, in_shapes):
    lhs, rhs = in_shapes
    if lhs is None or rhs is None:
        return list(in_shapes), [None]
    for name, shape in (('lhs', lhs), ('rhs', rhs)):
        if not shape or shape[-1] != 4:
            raise ShapeError(f'{name} must hold boxes of 4 values in its last axis, got {shape}')
    return list(in_shapes), [tuple(lhs[:-1]) + tuple(rhs[:-1])]


def _box_iou_kernel(attrs, ins, outs, ctx):
    lhs, rhs = (to_corners(x, attrs['format']).reshape(-1, 4) for x in ins)
    outs[0][...] = iou(lhs, rhs).reshape(outs[0].shape)


register('_contrib_box_iou', _box_iou_kernel, inputs=('lhs', 'rhs'),
         infer_shape=_box_iou_shape, infer_type=same_type, gradient=_zero_grads,
         params=(Param('format', _FORMAT, 'corner', 'corner (x1, y1, x2, y2) or center '
                                                    '(x, y, w, h)'),),
         doc='The IoU of every box of lhs with every box of rhs: shape lhs[:-1] + rhs[:-1].')


# ----------------------------------------------------------------------------------------------
# Greedy suppression shared by box_nms and MultiBoxDetection.

def nms_order(boxes, classes, threshold, strict=True):
    """Positions kept by greedy NMS over `boxes` (corners, already in priority order): a box
    is dropped when its IoU with a kept box of the same class (any class where `classes` is
    None) exceeds `threshold` (reaches it, with strict False)."""
    count = len(boxes)
    overlaps = iou(boxes, boxes)
    clash = overlaps > threshold if strict else overlaps >= threshold
    if classes is not None:
        clash &= classes[:, None] == classes[None, :]
    alive = np.ones(count, bool)
    for i in range(count):
        if alive[i]:
            later = clash[i, i + 1:]
            alive[i + 1:] &= ~later
    return np.flatnonzero(alive)


# ----------------------------------------------------------------------------------------------
# box_nms.

_NMS = (Param('overlap_thresh', p_float, 0.5, 'Suppress boxes that overlap a kept one more.'),
        Param('valid_thresh', p_float, 0.0, 'Keep only boxes whose score is greater.'),
        Param('topk', p_int, -1, 'Suppress among the topk best scores only (-1: all).'),
        Param('coord_start', p_int, 2, 'Index of the first box coordinate.'),
        Param('score_index', p_int, 1, 'Index of the score.'),
        Param('id_index', p_int, -1, 'Index of the class id (-1: none).'),
        Param('background_id', p_int, -1, 'Class id of boxes to drop (-1: none).'),
        Param('force_suppress', p_bool, False, 'Suppress across classes.'),
        Param('in_format', _FORMAT, 'corner', 'Box format of the input.'),
        Param('out_format', _FORMAT, 'corner', 'Box format of the output.'))


def _nms_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None, None]
    width = data[-1] if data else 0
    needed = max(attrs['coord_start'] + 4, attrs['score_index'] + 1, attrs['id_index'] + 1)
    if len(data) < 2 or width < needed:
        raise ShapeError(f'data must be (..., boxes, values) with at least {needed} values per '
                         f'box (coord_start={attrs["coord_start"]}, score_index='
                         f'{attrs["score_index"]}, id_index={attrs["id_index"]}), got {data}')
    return list(in_shapes), [data, tuple(data[:-1])]


def _nms_keep(attrs, rows):
    """Positions of `rows` (one batch, (N, K)) that box_nms keeps, best score first."""
    scores = rows[:, attrs['score_index']]
    valid = scores > attrs['valid_thresh']
    classes = None
    if attrs['id_index'] >= 0:
        classes = rows[:, attrs['id_index']]
        if attrs['background_id'] >= 0:
            valid &= classes != attrs['background_id']
    candidates = np.flatnonzero(valid)
    candidates = candidates[np.argsort(-scores[candidates], kind='stable')]
    if attrs['topk'] > 0:
        candidates = candidates[:attrs['topk']]
    start = attrs['coord_start']
    boxes = to_corners(rows[candidates, start:start + 4], attrs['in_format'])
    same_class = None if attrs['force_suppress'] or classes is None else classes[candidates]
    return candidates[nms_order(boxes, same_class, attrs['overlap_thresh'])]


def _nms_kernel(attrs, ins, outs, ctx):
    data = ins[0]
    rows = data.reshape(-1, *data.shape[-2:])
    out = outs[0].reshape(rows.shape)
    order = outs[1].reshape(rows.shape[:2])
    out[...] = -1
    order[...] = -1
    start = attrs['coord_start']
    for batch, batch_rows in enumerate(rows):
        kept = _nms_keep(attrs, batch_rows)
        out[batch, :len(kept)] = batch_rows[kept]
        order[batch, :len(kept)] = kept
        if attrs['in_format'] != attrs['out_format']:
            boxes = out[batch, :len(kept), start:start + 4]
            boxes[...] = (_to_center(boxes) if attrs['out_format'] == 'center'
                          else to_corners(boxes, 'center'))


def _nms_backward(attrs, ins, outs, ctx):
    grad, order = ins
    rows = grad.reshape(-1, *grad.shape[-2:])
    positions = order.reshape(rows.shape[:2]).astype(np.int64)
    out = outs[0].reshape(rows.shape)
    out[...] = 0
    batch, slot = np.nonzero(positions >= 0)
    out[batch, positions[batch, slot]] = rows[batch, slot]


register('_contrib_box_nms', _nms_kernel, outputs=('output', 'indices'), visible_outputs=1,
         infer_shape=_nms_shape, params=_NMS,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0], dtypes[0]]),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_contrib_box_nms(
             og[0], outs[1], **attrs)],
         aliases=('_contrib_box_non_maximum_suppression',),
         doc='Non-maximum suppression of each batch of boxes (data (..., N, K)): the kept '
             'boxes by descending score, then rows of -1.')
register('_backward_contrib_box_nms', _nms_backward, inputs=('out_grad', 'indices'),
         params=_NMS, infer_shape=lambda attrs, shapes: (list(shapes), [shapes[0]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
         doc='The gradient of box_nms: each kept row back to where it came from.')


# ----------------------------------------------------------------------------------------------
# bipartite_matching.

def _matching_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None, None]
    if len(data) < 2:
        raise ShapeError(f'data must be (..., rows, cols) scores, got {data}')
    return list(in_shapes), [tuple(data[:-1]), tuple(data[:-2]) + (data[-1],)]


def _match_one(scores, attrs, rows_out, cols_out):
    """MXNet's greedy matching: pairs in order of score (ties in row-major order), each row
    and column used once, scores beyond the threshold left out. Each step takes the best
    pair left, so the loop runs once per match."""
    rows_out[...] = -1
    cols_out[...] = -1
    ascend = attrs['is_ascend']
    work = np.where(scores < attrs['threshold'] if ascend else scores > attrs['threshold'],
                    scores.astype(np.float64), np.inf if ascend else -np.inf)
    count, limit = 0, attrs['topk']
    while True:
        flat = int(np.argmin(work) if ascend else np.argmax(work))
        row, col = divmod(flat, scores.shape[1])
        if not np.isfinite(work[row, col]):
            return
        rows_out[row], cols_out[col] = col, row
        work[row, :] = np.inf if ascend else -np.inf
        work[:, col] = np.inf if ascend else -np.inf
        count += 1
        # MXNet stops once it has made one match more than topk
        if 0 < limit < count:
            return


def _matching_kernel(attrs, ins, outs, ctx):
    data = ins[0]
    scores = data.reshape(-1, *data.shape[-2:])
    rows = outs[0].reshape(scores.shape[:2])
    cols = outs[1].reshape(len(scores), scores.shape[2])
    for batch in range(len(scores)):
        _match_one(scores[batch], attrs, rows[batch], cols[batch])


register('_contrib_bipartite_matching', _matching_kernel, outputs=('rows', 'cols'),
         infer_shape=_matching_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]] * 2),
         gradient=_zero_grads,
         params=(Param('is_ascend', p_bool, False, 'Lower scores match first.'),
                 Param('threshold', p_float, doc='Scores must be above it (below, ascending).'),
                 Param('topk', p_int, -1, 'Limit on matches (-1: none).')),
         doc='Greedy bipartite matching of a (..., rows, cols) score matrix: the column each '
             'row matched and the row each column matched, -1 where none.')


# ----------------------------------------------------------------------------------------------
# box_encode and box_decode.

def _center_size(boxes):
    size = boxes[..., 2:4] - boxes[..., :2]
    return boxes[..., :2] + 0.5 * size, size


def _encode_kernel(attrs, ins, outs, ctx):
    samples, matches, anchors, refs, means, stds = ins
    index = np.clip(matches.astype(np.int64), 0, refs.shape[1] - 1)
    matched = np.take_along_axis(refs, index[..., None], axis=1)
    ref_center, ref_size = _center_size(matched)
    center, size = _center_size(anchors)
    with np.errstate(divide='ignore', invalid='ignore'):
        targets = np.concatenate([(ref_center - center) / size, np.log(ref_size / size)], -1)
    targets = (targets - means) / stds
    positive = (samples > 0.5)[..., None]
    outs[0][...] = np.where(positive, targets, 0)
    outs[1][...] = np.broadcast_to(positive, outs[1].shape)


def _encode_shape(attrs, in_shapes):
    samples, matches, anchors, refs, means, stds = in_shapes
    if samples is None:
        return list(in_shapes), [None, None]
    out = tuple(samples) + (4,)
    return [samples, samples, out, refs, (4,), (4,)], [out, out]


register('_contrib_box_encode', _encode_kernel,
         inputs=('samples', 'matches', 'anchors', 'refs', 'means', 'stds'),
         outputs=('targets', 'masks'), infer_shape=_encode_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[2]] * 2),
         gradient=_zero_grads,
         doc='Regression targets ((center offset)/size, log size ratio, normalised by means '
             'and stds) of anchors whose sample is positive, towards their matched refs; masks '
             'mark them.')


def _decode_kernel(attrs, ins, outs, ctx):
    data, anchors = ins
    if attrs['format'] == 'corner':
        center, size = _center_size(anchors)
    else:
        center, size = anchors[..., :2], anchors[..., 2:4]
    stds = np.array([attrs[f'std{i}'] for i in range(4)], dtype=data.dtype)
    scaled = data * stds
    middle = scaled[..., :2] * size + center
    log_size = scaled[..., 2:4]
    if attrs['clip'] > 0:
        log_size = np.minimum(log_size, attrs['clip'])
    half = np.exp(log_size) * size * 0.5
    outs[0][...] = np.concatenate([middle - half, middle + half], axis=-1)


def _decode_shape(attrs, in_shapes):
    data, anchors = in_shapes
    if data is not None and (len(data) != 3 or data[-1] != 4):
        raise ShapeError(f'data must be (batch, boxes, 4), got {data}')
    return list(in_shapes), [data]


register('_contrib_box_decode', _decode_kernel, inputs=('data', 'anchors'),
         infer_shape=_decode_shape, infer_type=same_type, gradient=_zero_grads,
         params=tuple(Param(f'std{i}', p_float, 1.0, f'Scale of coordinate {i}.')
                      for i in range(4))
         + (Param('clip', p_float, -1.0, 'Upper bound of the log size (negative: none).'),
            Param('format', _FORMAT, 'center', 'Format of the anchors.')),
         doc='Corner boxes from regression offsets relative to anchors (the inverse of '
             'box_encode with zero means).')


# ----------------------------------------------------------------------------------------------
# MultiBoxPrior.

_PRIOR = (Param('sizes', _p_floats, (1.0,), 'Box sizes relative to the image.'),
          Param('ratios', _p_floats, (1.0,), 'Width/height ratios.'),
          Param('clip', p_bool, False, 'Clip the boxes to [0, 1].'),
          Param('steps', _p_floats, (-1.0, -1.0), 'Cell size (y, x); -1: 1/height, 1/width.'),
          Param('offsets', _p_floats, (0.5, 0.5), 'Offset of the centre within a cell.'))


def _prior_count(attrs):
    return len(attrs['sizes']) + len(attrs['ratios']) - 1


def _prior_shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None]
    if len(data) < 4:
        raise ShapeError(f'data must be (batch, channels, height, width), got {data}')
    return list(in_shapes), [(1, data[2] * data[3] * _prior_count(attrs), 4)]


def _prior_halves(attrs, height, width):
    """(anchors, 2) half widths and heights of the anchors of one cell, MXNet's order: every
    size at the first ratio, then the first size at the other ratios."""
    sizes, ratios = attrs['sizes'], attrs['ratios']
    pairs = [(s, ratios[0]) for s in sizes] + [(sizes[0], r) for r in ratios[1:]]
    size = np.array([p[0] for p in pairs], np.float32)
    root = np.sqrt(np.array([p[1] for p in pairs], np.float32))
    return np.stack([size * height / width * root / 2, size / root / 2], axis=-1)


def _prior_kernel(attrs, ins, outs, ctx):
    height, width = ins[0].shape[2:4]
    step_y, step_x = attrs['steps']
    step_y = 1.0 / height if step_y <= 0 else step_y
    step_x = 1.0 / width if step_x <= 0 else step_x
    off_y, off_x = attrs['offsets']
    cy = ((np.arange(height, dtype=np.float32) + off_y) * step_y)[:, None, None]
    cx = ((np.arange(width, dtype=np.float32) + off_x) * step_x)[None, :, None]
    half = _prior_halves(attrs, height, width)
    half_w, half_h = half[:, 0], half[:, 1]
    boxes = np.stack(np.broadcast_arrays(cx - half_w, cy - half_h, cx + half_w, cy + half_h),
                     axis=-1)
    if attrs['clip']:
        boxes = np.clip(boxes, 0, 1)
    outs[0][...] = boxes.reshape(outs[0].shape)


register('_contrib_MultiBoxPrior', _prior_kernel, infer_shape=_prior_shape,
         infer_type=same_type, params=_PRIOR, gradient=_zero_grads,
         doc='SSD anchor boxes for every cell of the feature map data (batch, channels, '
             'height, width): (1, height*width*anchors, 4) corners.')


# ----------------------------------------------------------------------------------------------
# MultiBoxTarget.

_VARIANCES = Param('variances', _p_floats, (0.1, 0.1, 0.2, 0.2),
                   'Divide the box regression targets by these.')
_TARGET = (Param('overlap_threshold', p_float, 0.5, 'IoU that makes an anchor positive.'),
           Param('ignore_label', p_float, -1.0, 'Class target of anchors left out.'),
           Param('negative_mining_ratio', p_float, -1.0,
                 'Negatives per positive (hard negative mining); <= 0: every negative.'),
           Param('negative_mining_thresh', p_float, 0.5,
                 'Anchors below this IoU may be mined as negatives.'),
           Param('minimum_negative_samples', p_int, 0,
                 'Accepted for MXNet\'s sake; its CPU kernel, which Ember follows, ignores it.'),
           _VARIANCES)


def _target_shape(attrs, in_shapes):
    anchor, label, cls_pred = in_shapes
    if anchor is None or label is None or cls_pred is None:
        return list(in_shapes), [None] * 3
    if len(anchor) != 3 or anchor[-1] != 4 or len(label) != 3 or len(cls_pred) != 3:
        raise ShapeError(f'expected anchor (1, N, 4), label (batch, M, >=5) and cls_pred '
                         f'(batch, classes, N), got {anchor}, {label}, {cls_pred}')
    if cls_pred[2] != anchor[1]:
        raise ShapeError(f'cls_pred has {cls_pred[2]} anchors, anchor has {anchor[1]}')
    batch, count = label[0], anchor[1]
    return list(in_shapes), [(batch, count * 4), (batch, count * 4), (batch, count)]


def _greedy_best_pairs(overlaps, anchor_taken):
    """MXNet's first stage: match each ground truth to one anchor, best IoU first."""
    best = {}
    work = np.where(overlaps > 1e-6, overlaps, -np.inf)
    while True:
        flat = int(np.argmax(work))
        anchor, truth = divmod(flat, overlaps.shape[1])
        if not np.isfinite(work[anchor, truth]):
            return best
        best[anchor] = truth
        anchor_taken[anchor] = True
        work[anchor, :] = -np.inf
        work[:, truth] = -np.inf


def _background_prob(cls_pred):
    """Softmax probability of class 0 per anchor, for (classes, anchors) scores."""
    shifted = np.exp(cls_pred - cls_pred.max(axis=0))
    return shifted[0] / shifted.sum(axis=0)


def _target_one(attrs, anchors, truths, cls_pred):
    """(flags, matched truth, truths): flag 1 positive, 0 negative, -1 ignored."""
    count = len(anchors)
    flags = np.full(count, -1)
    matched = np.full(count, -1)
    if len(truths) == 0:
        return flags, matched
    overlaps = iou(anchors, truths[:, 1:5])
    taken = np.zeros(count, bool)
    for anchor, truth in _greedy_best_pairs(overlaps, taken).items():
        matched[anchor] = truth
    free = ~taken
    # without an overlap threshold MXNet never looks at the free anchors' overlaps
    by_overlap = attrs['overlap_threshold'] > 0
    best_iou = np.where(taken, np.inf, overlaps.max(axis=1) if by_overlap else -1.0)
    matched[free] = overlaps[free].argmax(axis=1)
    if by_overlap:
        taken |= free & (best_iou > attrs['overlap_threshold'])
    flags[taken] = 1
    positives = int(taken.sum())
    if attrs['negative_mining_ratio'] > 0:
        wanted = min(int(positives * attrs['negative_mining_ratio']), count - positives)
        pool = np.flatnonzero(~taken & (best_iou < attrs['negative_mining_thresh']))
        hardest = pool[np.argsort(_background_prob(cls_pred)[pool], kind='stable')]
        flags[hardest[:wanted]] = 0
    else:
        flags[~taken] = 0
    return flags, matched


def _target_kernel(attrs, ins, outs, ctx):
    anchor, label, cls_pred = ins
    anchors = anchor.reshape(-1, 4)
    loc_target, loc_mask, cls_target = outs
    center, size = _center_size(anchors.astype(np.float64))
    variances = np.array(attrs['variances'])
    for batch in range(label.shape[0]):
        rows = label[batch]
        valid = np.cumprod(rows[:, 0] != -1).astype(bool)
        truths = rows[valid]
        flags, matched = _target_one(attrs, anchors, truths, cls_pred[batch])
        positive = flags == 1
        cls_target[batch] = np.where(positive, truths[matched, 0] + 1 if len(truths) else 0,
                                     np.where(flags == 0, 0, attrs['ignore_label']))
        targets = np.zeros((len(anchors), 4))
        if positive.any():
            truth_center, truth_size = _center_size(truths[matched[positive], 1:5])
            targets[positive] = np.concatenate([
                (truth_center - center[positive]) / size[positive],
                np.log(truth_size / size[positive])], axis=-1) / variances
        loc_target[batch] = targets.reshape(-1)
        loc_mask[batch] = np.repeat(positive, 4)


register('_contrib_MultiBoxTarget', _target_kernel, inputs=('anchor', 'label', 'cls_pred'),
         outputs=('loc_target', 'loc_mask', 'cls_target'), infer_shape=_target_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]] * 3),
         params=_TARGET, gradient=_zero_grads,
         doc='SSD training targets: anchors matched to the labels (class, corners; -1 rows '
             'end them) by IoU, with box regression targets, their mask, and class targets '
             '(class + 1, 0 for background, ignore_label for anchors left out).')


# ----------------------------------------------------------------------------------------------
# MultiBoxDetection.

_DETECTION = (Param('clip', p_bool, True, 'Clip the boxes to [0, 1].'),
              Param('threshold', p_float, 0.01, 'Least score of a detection.'),
              Param('background_id', p_int, 0,
                    'Background class; MXNet 1.9.1 always treats class 0 as background.'),
              Param('nms_threshold', p_float, 0.5, 'IoU at which NMS suppresses.'),
              Param('force_suppress', p_bool, False, 'Suppress across classes.'),
              _VARIANCES,
              Param('nms_topk', p_int, -1, 'Keep the nms_topk best before NMS (-1: all).'))


def _detection_shape(attrs, in_shapes):
    cls_prob, loc_pred, anchor = in_shapes
    if cls_prob is None:
        return list(in_shapes), [None]
    if len(cls_prob) != 3:
        raise ShapeError(f'cls_prob must be (batch, classes, anchors), got {cls_prob}')
    batch, _, count = cls_prob
    if loc_pred is not None and tuple(loc_pred) != (batch, count * 4):
        raise ShapeError(f'loc_pred must be (batch, anchors*4) = {(batch, count * 4)}, got '
                         f'{loc_pred}')
    if anchor is not None and tuple(anchor[-2:]) != (count, 4):
        raise ShapeError(f'anchor must be (1, {count}, 4), got {anchor}')
    return [cls_prob, (batch, count * 4), (1, count, 4)], [(batch, count, 6)]


def _decode_detections(attrs, anchors, loc):
    center, size = _center_size(anchors)
    v = attrs['variances']
    middle = loc[:, :2] * np.array(v[:2], np.float32) * size + center
    half = np.exp(loc[:, 2:4] * np.array(v[2:], np.float32)) * size / 2
    boxes = np.concatenate([middle - half, middle + half], axis=-1)
    return np.clip(boxes, 0, 1) if attrs['clip'] else boxes


def _detect_one(attrs, probs, loc, anchors, out):
    """One batch item into out (anchors, 6), following MXNet's CPU kernel."""
    out[...] = -1
    scores = probs[1:]
    best = scores.argmax(axis=0)
    score = scores[best, np.arange(scores.shape[1])]
    valid = np.flatnonzero(score >= attrs['threshold'])
    if len(valid) == 0:
        return
    rows = np.concatenate([best[valid, None].astype(out.dtype), score[valid, None],
                           _decode_detections(attrs, anchors[valid], loc[valid])], axis=1)
    order = np.argsort(-rows[:, 1], kind='stable')
    keep = len(order) if attrs['nms_topk'] < 0 else min(attrs['nms_topk'], len(order))
    out[:len(rows)] = rows
    out[:keep] = rows[order[:keep]]
    out[keep:len(rows), 0] = -1
    top = out[:keep]
    classes = None if attrs['force_suppress'] else top[:, 0]
    kept = nms_order(top[:, 2:6], classes, attrs['nms_threshold'], strict=False)
    suppressed = np.ones(keep, bool)
    suppressed[kept] = False
    top[suppressed, 0] = -1


def _detection_kernel(attrs, ins, outs, ctx):
    cls_prob, loc_pred, anchor = ins
    anchors = anchor.reshape(-1, 4)
    loc = loc_pred.reshape(len(cls_prob), -1, 4)
    for batch in range(len(cls_prob)):
        _detect_one(attrs, cls_prob[batch], loc[batch], anchors, outs[0][batch])


register('_contrib_MultiBoxDetection', _detection_kernel,
         inputs=('cls_prob', 'loc_pred', 'anchor'), infer_shape=_detection_shape,
         infer_type=same_type, params=_DETECTION, gradient=_zero_grads,
         doc='SSD detections (batch, anchors, 6) of (class, score, corners): anchors decoded '
             'by loc_pred, best class per anchor above threshold, sorted by score, with NMS '
             '(class -1 marks the dropped rows).')
