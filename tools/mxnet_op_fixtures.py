"""Write MXNet 1.9.1's answers for Ember's operator fixtures: tests/data/mxnet-1.9.1-ops/*.npz.

Run it in MXNet 1.9.1's environment (the one ``benchmarks/peers`` builds), from the repository
root::

    OMP_NUM_THREADS=2 ~/.cache/ember-bench/mxnet-1.9.1/bin/python tools/mxnet_op_fixtures.py

Each family of cases becomes one ``.npz`` file. A case calls one function of ``mx.nd`` (a
dotted path such as ``contrib.box_nms``) on inputs drawn here with NumPy, records under
``autograd`` and, where the case names inputs to differentiate, runs backward from random
head gradients. The file keeps, per case ``<id>``: ``<id>/spec`` (the call as JSON),
``<id>/in<i>`` (inputs), ``<id>/out<i>`` (MXNet's outputs), ``<id>/head<i>`` and
``<id>/grad<i>`` (head gradients and the gradients of the inputs named in ``grad``).
tests/test_mxnet_op_fixtures.py replays every case on Ember and compares.
"""
from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

import numpy as np

F32 = 'float32'
OUT_DIR = Path(__file__).resolve().parents[1] / 'tests' / 'data' / 'mxnet-1.9.1-ops'


def case(id, op, inputs, grad=(), grad_outputs=None, train=False, imperative_only=False,
         keywords=None, rtol=None, out=None, **kwargs):
    """`inputs`: arrays, or functions of a NumPy Generator that return one.
    `grad_outputs`: the outputs that get head gradients (default all).
    `imperative_only`: the output's shape depends on values, so there is no symbolic form.
    `keywords`: per input, the keyword it is passed by (None: positionally).
    `rtol`: a looser relative tolerance, where MXNet's own arithmetic is coarser.
    `out`: indices of inputs passed as out= (updates that MXNet runs only in place)."""
    return dict(id=id, op=op, inputs=inputs, kwargs=kwargs, grad=list(grad), heads=grad_outputs,
                train=train, imperative_only=imperative_only,
                keywords=keywords or [None] * len(inputs), rtol=rtol, out=out)


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def normal(*shape, dtype='float64'):
    return lambda rng: rng.standard_normal(shape).astype(dtype)


def uniform(low, high, *shape, dtype='float64'):
    return lambda rng: rng.uniform(low, high, shape).astype(dtype)


def spd(*shape, dtype='float64'):
    """Symmetric positive-definite matrices of shape (..., n, n)."""
    def draw(rng):
        a = rng.standard_normal(shape)
        return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)
    return draw


def lower(*shape, dtype='float64'):
    """Well-conditioned lower-triangular matrices."""
    def draw(rng):
        a = np.tril(rng.standard_normal(shape))
        idx = np.arange(shape[-1])
        a[..., idx, idx] = rng.uniform(1.0, 2.0, shape[:-1])
        return a.astype(dtype)
    return draw


def const(values, dtype='float32'):
    return lambda rng: np.array(values, dtype=dtype)


LINALG = [
    case('gemm', 'linalg.gemm', [normal(2, 3, 4), normal(2, 4, 5), normal(2, 3, 5)],
         grad=(0, 1, 2), alpha=0.7, beta=-1.5),
    case('gemm-transposed', 'linalg.gemm', [normal(4, 3), normal(5, 4), normal(3, 5)],
         grad=(0, 1, 2), transpose_a=True, transpose_b=True),
    case('gemm2-axis', 'linalg.gemm2', [normal(2, 4, 3, 5), normal(2, 5, 3, 6)], grad=(0, 1),
         axis=-3, alpha=2.0),
    case('gemm2-transpose-a', 'linalg.gemm2', [normal(3, 4, 2), normal(3, 4, 5)], grad=(0, 1),
         transpose_a=True),
    case('potrf', 'linalg.potrf', [spd(2, 3, 3)], grad=(0,)),
    case('potri', 'linalg.potri', [lower(2, 3, 3)], grad=(0,)),
    case('trmm', 'linalg.trmm', [normal(2, 3, 3), normal(2, 3, 4)], grad=(0, 1), alpha=1.5),
    case('trmm-right-upper-t', 'linalg.trmm', [normal(3, 3), normal(2, 3)], grad=(0, 1),
         rightside=True, lower=False, transpose=True),
    case('trsm', 'linalg.trsm', [lower(2, 3, 3), normal(2, 3, 2)], grad=(0, 1), alpha=0.5),
    case('trsm-right-transpose', 'linalg.trsm', [lower(3, 3), normal(4, 3)], grad=(0, 1),
         rightside=True, transpose=True),
    case('trsm-upper', 'linalg.trsm', [lambda rng: np.swapaxes(lower(3, 3)(rng), 0, 1),
                                       normal(3, 2)], grad=(0, 1), lower=False),
    case('syrk', 'linalg.syrk', [normal(2, 3, 4)], grad=(0,), alpha=0.5),
    case('syrk-transpose', 'linalg.syrk', [normal(3, 4)], grad=(0,), transpose=True),
    case('gelqf', 'linalg.gelqf', [normal(2, 3, 5)], grad=(0,)),
    case('syevd', 'linalg.syevd', [spd(2, 4, 4)], grad=(0,)),
    case('inverse', 'linalg.inverse', [spd(2, 3, 3)], grad=(0,)),
    case('det', 'linalg.det', [normal(2, 3, 3)], grad=(0,)),
    case('det-single', 'linalg.det', [normal(3, 3)], grad=(0,)),
    case('slogdet', 'linalg.slogdet', [normal(3, 3, 3)], grad=(0,), grad_outputs=[1]),
    case('sumlogdiag', 'linalg.sumlogdiag', [spd(2, 3, 3)], grad=(0,)),
    case('extractdiag', 'linalg.extractdiag', [normal(2, 4, 4)], grad=(0,), offset=-1),
    case('makediag', 'linalg.makediag', [normal(2, 3)], grad=(0,), offset=2),
    case('extracttrian', 'linalg.extracttrian', [normal(2, 4, 4)], grad=(0,), offset=1),
    case('extracttrian-upper', 'linalg.extracttrian', [normal(3, 3)], grad=(0,), lower=False),
    case('maketrian', 'linalg.maketrian', [normal(2, 6)], grad=(0,), offset=-1),
    case('maketrian-upper', 'linalg.maketrian', [normal(10)], grad=(0,), lower=False),
    case('gemm2-float32', 'linalg.gemm2', [normal(2, 3, dtype='float32'),
                                           normal(3, 2, dtype='float32')], grad=(0, 1)),
]

CONTRIB = [
    case('arange_like', 'contrib.arange_like', [normal(2, 3, dtype='float32')], start=1.5,
         step=-2, repeat=2),
    case('arange_like-axis', 'contrib.arange_like', [const(np.zeros((2, 5), 'int32'), 'int32')],
         axis=1, start=3),
    case('index_array', 'contrib.index_array', [normal(2, 3, 2)]),
    case('index_array-axes', 'contrib.index_array', [normal(2, 3, 2)], axes=(2, 0)),
    case('index_copy', 'contrib.index_copy', [normal(5, 3), const([4, 1], 'int64'),
                                              normal(2, 3)], grad=(0, 2)),
    case('quadratic', 'contrib.quadratic', [normal(3, 4)], grad=(0,), a=1.5, b=-2, c=0.5),
    case('div_sqrt_dim', 'contrib.div_sqrt_dim', [normal(2, 3, 5)], grad=(0,)),
    case('gradientmultiplier', 'contrib.gradientmultiplier', [normal(2, 3)], grad=(0,),
         scalar=-0.5),
    case('round_ste', 'contrib.round_ste', [const([[-1.5, -0.5, 0.4], [0.5, 1.5, 2.6]],
                                                  'float64')], grad=(0,)),
    case('sign_ste', 'contrib.sign_ste', [normal(2, 3)], grad=(0,)),
    case('allclose', 'contrib.allclose', [const([1.0, 2.0]), const([1.0, 2.00001])]),
    case('allclose-far', 'contrib.allclose', [const([1.0, np.nan]), const([1.0, np.nan])],
         equal_nan=False),
] + [
    case(name, f'contrib.{name}', [const([1.0, np.inf, -np.inf, np.nan])], imperative_only=True)
    for name in ('isinf', 'isnan', 'isfinite')
] + [
    case('boolean_mask', 'contrib.boolean_mask', [normal(4, 3), const([1, 0, 1, 1], 'int32')],
         grad=(0,), imperative_only=True),
    case('resize', 'contrib.BilinearResize2D', [normal(2, 2, 3, 4)], grad=(0,), height=5,
         width=7),
    case('resize-half-pixel', 'contrib.BilinearResize2D', [normal(1, 2, 5, 4)], grad=(0,),
         height=3, width=6, align_corners=False),
    case('resize-like', 'contrib.BilinearResize2D', [normal(1, 1, 3, 3), normal(1, 1, 4, 5)],
         grad=(0,), mode='like'),
    case('resize-odd-scale', 'contrib.BilinearResize2D', [normal(1, 1, 5, 4)], grad=(0,),
         mode='odd_scale', scale_height=1.5, scale_width=0.5),
    case('resize-scale', 'contrib.BilinearResize2D', [normal(1, 1, 5, 4)], grad=(0,),
         scale_height=1.7, scale_width=2.2),
    case('resize-to-odd-up', 'contrib.BilinearResize2D', [normal(1, 1, 4, 5)], grad=(0,),
         mode='to_odd_up'),
    case('adaptive-avg', 'contrib.AdaptiveAvgPooling2D', [normal(2, 2, 5, 7)], grad=(0,),
         output_size=(3, 4)),
    case('adaptive-avg-up', 'contrib.AdaptiveAvgPooling2D', [normal(1, 2, 3, 2)], grad=(0,),
         output_size=4),
    case('adaptive-avg-global', 'contrib.AdaptiveAvgPooling2D', [normal(2, 3, 4, 4)],
         grad=(0,)),
    # MXNet runs these in float32 only on the CPU
    case('selfatt-qk', 'contrib.interleaved_matmul_selfatt_qk', [normal(4, 2, 12, dtype=F32)],
         grad=(0,), heads=2),
    case('selfatt-valatt', 'contrib.interleaved_matmul_selfatt_valatt',
         [normal(4, 2, 12, dtype=F32), normal(4, 4, 4, dtype=F32)], grad=(0, 1), heads=2),
    case('encdec-qk', 'contrib.interleaved_matmul_encdec_qk',
         [normal(3, 2, 6, dtype=F32), normal(5, 2, 12, dtype=F32)], grad=(0, 1), heads=3),
    case('encdec-valatt', 'contrib.interleaved_matmul_encdec_valatt',
         [normal(5, 2, 12, dtype=F32), normal(6, 3, 5, dtype=F32)], grad=(0, 1), heads=3),
]

def boxes(*shape, low=0.0, high=1.0):
    """Random corner boxes (..., 4) inside [low, high]."""
    def draw(rng):
        corners = rng.uniform(low, high, shape + (2, 2))     # (..., point, coordinate)
        corners.sort(axis=-2)
        return corners.reshape(shape + (4,)).astype(F32)
    return draw


def detections(batch, count, classes=3):
    """(batch, count, 6) rows of (class id, score, corners) with distinct scores."""
    def draw(rng):
        ids = rng.integers(0, classes, (batch, count, 1))
        scores = rng.permutation(batch * count).reshape(batch, count, 1) / (batch * count)
        corners = boxes(batch, count, high=0.6)(rng) + rng.uniform(0, 0.4, (batch, count, 1))
        return np.concatenate([ids, scores, corners], axis=-1).astype(F32)
    return draw


def scores(*shape):
    """Distinct scores in [0, 1): no ties for greedy orders."""
    return lambda rng: (rng.permutation(int(np.prod(shape))).reshape(shape)
                        / np.prod(shape)).astype(F32)


def probabilities(batch, classes, count):
    def draw(rng):
        logits = rng.standard_normal((batch, classes, count)) * 2
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(F32)
    return draw


def labels(batch, count, padding, classes=3):
    """(batch, count + padding, 5) ground truths (class, corners), -1 rows at the end."""
    def draw(rng):
        rows = np.concatenate([rng.integers(0, classes, (batch, count, 1)),
                               boxes(batch, count)(rng)], axis=-1)
        return np.concatenate([rows, -np.ones((batch, padding, 5))], axis=1).astype(F32)
    return draw


def anchors(height, width, sizes, ratios):
    """MultiBoxPrior's anchors, written out here (centres of cells, MXNet's order)."""
    def draw(rng):
        cy, cx = np.meshgrid((np.arange(height) + 0.5) / height,
                             (np.arange(width) + 0.5) / width, indexing='ij')
        pairs = [(s, ratios[0]) for s in sizes] + [(sizes[0], r) for r in ratios[1:]]
        out = [np.stack([cx - s * np.sqrt(r) * height / width / 2, cy - s / np.sqrt(r) / 2,
                         cx + s * np.sqrt(r) * height / width / 2, cy + s / np.sqrt(r) / 2],
                        -1) for s, r in pairs]
        return np.stack(out, axis=2).reshape(1, -1, 4).astype(F32)
    return draw


DETECTION = [
    case('box_iou', 'contrib.box_iou', [boxes(2, 3), boxes(4)], grad=(0,)),
    case('box_iou-center', 'contrib.box_iou', [boxes(5), boxes(3)], format='center'),
    case('box_nms', 'contrib.box_nms', [detections(2, 12)], grad=(0,), overlap_thresh=0.3,
         valid_thresh=0.1),
    case('box_nms-classes', 'contrib.box_nms', [detections(1, 16)], grad=(0,),
         overlap_thresh=0.2, id_index=0, topk=10),
    case('box_nms-background', 'contrib.box_nms', [detections(2, 10)], id_index=0,
         background_id=1, overlap_thresh=0.4, out_format='center'),
    case('box_nms-force', 'contrib.box_nms', [detections(1, 16)], id_index=0,
         force_suppress=True, overlap_thresh=0.25, in_format='center', out_format='center'),
    case('box_nms-layout', 'contrib.box_nms',
         [lambda rng: detections(1, 9)(rng)[..., [2, 3, 4, 5, 1, 0]]],
         coord_start=0, score_index=4, id_index=5, overlap_thresh=0.3),
    case('bipartite_matching', 'contrib.bipartite_matching', [scores(2, 5, 4)], threshold=0.2),
    case('bipartite_matching-ascend', 'contrib.bipartite_matching', [scores(4, 6)],
         threshold=0.7, is_ascend=True),
    case('bipartite_matching-topk', 'contrib.bipartite_matching', [scores(6, 5)],
         threshold=0.1, topk=2),
    case('box_encode', 'contrib.box_encode',
         [lambda rng: rng.choice([-1, 0, 1], (2, 6)).astype(F32),
          lambda rng: rng.integers(0, 3, (2, 6)).astype(F32), boxes(2, 6), boxes(2, 3),
          const([0.1, -0.1, 0.0, 0.2]), const([0.1, 0.1, 0.2, 0.2])]),
    case('box_decode', 'contrib.box_decode', [normal(2, 5, 4, dtype=F32), boxes(1, 5)],
         std0=0.1, std1=0.1, std2=0.2, std3=0.2, format='corner'),
    case('box_decode-center-clip', 'contrib.box_decode',
         [lambda rng: rng.normal(0, 3, (1, 4, 4)).astype(F32), boxes(1, 4)], clip=1.5),
    case('prior', 'contrib.MultiBoxPrior', [normal(1, 2, 3, 4, dtype=F32)],
         sizes=(0.5, 0.25), ratios=(1, 2, 0.5)),
    case('prior-steps-clip', 'contrib.MultiBoxPrior', [normal(2, 1, 2, 2, dtype=F32)],
         sizes=(0.7,), ratios=(1, 3), steps=(0.4, 0.3), offsets=(0.2, 0.7), clip=True),
    case('target', 'contrib.MultiBoxTarget',
         [anchors(4, 4, (0.4, 0.2), (1, 2)), labels(2, 3, 1),
          normal(2, 4, 48, dtype=F32)]),
    case('target-mining', 'contrib.MultiBoxTarget',
         [anchors(4, 4, (0.4, 0.2), (1, 2)), labels(2, 2, 2),
          normal(2, 4, 48, dtype=F32)], negative_mining_ratio=3, overlap_threshold=0.4,
         ignore_label=-2, variances=(0.2, 0.2, 0.1, 0.1)),
    case('target-min-negatives', 'contrib.MultiBoxTarget',
         [anchors(3, 3, (0.5,), (1,)), labels(1, 1, 0), normal(1, 2, 9, dtype=F32)],
         negative_mining_ratio=1, minimum_negative_samples=4),
    case('target-no-truth', 'contrib.MultiBoxTarget',
         [anchors(2, 2, (0.5,), (1,)), const(-np.ones((1, 2, 5))), normal(1, 2, 4, dtype=F32)],
         negative_mining_ratio=1, minimum_negative_samples=2),
    case('detection', 'contrib.MultiBoxDetection',
         [probabilities(2, 4, 32), normal(2, 128, dtype=F32), anchors(4, 4, (0.4, 0.2), (1,))],
         threshold=0.3),
    case('detection-topk-force', 'contrib.MultiBoxDetection',
         [probabilities(1, 3, 32), normal(1, 128, dtype=F32), anchors(4, 4, (0.4, 0.2), (1,))],
         nms_topk=6, force_suppress=True, nms_threshold=0.3, clip=False),
]

def rois(count, batch, size, scale=1.0):
    """(count, 5) regions (batch index, corners) over a size x size image; some reach past
    its border."""
    def draw(rng):
        corners = rng.uniform(-0.2 * size, 1.1 * size, (count, 2, 2))
        corners.sort(axis=1)
        index = rng.integers(0, batch, (count, 1))
        return np.concatenate([index, corners.reshape(count, 4) * scale], 1).astype(F32)
    return draw


ROI = [
    case('roi_align', 'contrib.ROIAlign', [normal(2, 3, 8, 8, dtype=F32), rois(5, 2, 8)],
         grad=(0,), pooled_size=(3, 2), spatial_scale=1.0),
    case('roi_align-scaled', 'contrib.ROIAlign', [normal(1, 2, 6, 7, dtype=F32),
                                                  rois(4, 1, 24, scale=1.0)],
         grad=(0,), pooled_size=(2, 2), spatial_scale=0.25, sample_ratio=2),
    case('roi_align-aligned', 'contrib.ROIAlign', [normal(2, 2, 5, 5, dtype=F32), rois(4, 2, 5)],
         grad=(0,), pooled_size=(2, 3), spatial_scale=1.0, aligned=True),
    case('roi_align-position-sensitive', 'contrib.ROIAlign',
         [normal(1, 8, 6, 6, dtype=F32), rois(3, 1, 6)], grad=(0,), pooled_size=(2, 2),
         spatial_scale=1.0, position_sensitive=True),
    case('psroi', 'contrib.PSROIPooling', [normal(2, 18, 7, 7, dtype=F32), rois(4, 2, 7)],
         grad=(0,), spatial_scale=1.0, output_dim=2, pooled_size=3),
    case('psroi-group', 'contrib.PSROIPooling', [normal(1, 8, 10, 10, dtype=F32),
                                                 rois(3, 1, 20)],
         grad=(0,), spatial_scale=0.5, output_dim=2, pooled_size=4, group_size=2),
]

def affine(batch):
    """Affine maps near the identity (N, 6), so that samples land inside and outside."""
    return lambda rng: (np.array([1, 0, 0, 0, 1, 0]) + rng.normal(0, 0.3, (batch, 6))).astype(F32)


SPATIAL = [
    case('grid-affine', 'GridGenerator', [affine(2)], grad=(0,), transform_type='affine',
         target_shape=(3, 4)),
    case('grid-warp', 'GridGenerator', [normal(2, 2, 3, 4, dtype=F32)], grad=(0,),
         transform_type='warp'),
    case('sampler', 'BilinearSampler', [normal(2, 3, 4, 5, dtype=F32),
                                        uniform(-1.2, 1.2, 2, 2, 3, 4, dtype=F32)], grad=(0, 1)),
    case('transformer', 'SpatialTransformer', [normal(2, 2, 5, 5, dtype=F32), affine(2)],
         grad=(0, 1), target_shape=(4, 3), transform_type='affine', sampler_type='bilinear'),
    case('correlation', 'Correlation', [normal(1, 3, 6, 7, dtype=F32),
                                        normal(1, 3, 6, 7, dtype=F32)], grad=(0, 1),
         max_displacement=2, pad_size=2),
    case('correlation-kernel-strides', 'Correlation',
         [normal(2, 2, 9, 9, dtype=F32), normal(2, 2, 9, 9, dtype=F32)], grad=(0, 1),
         kernel_size=3, max_displacement=2, stride1=2, stride2=2, pad_size=1),
    case('correlation-absolute', 'Correlation', [normal(1, 2, 5, 5, dtype=F32),
                                                 normal(1, 2, 5, 5, dtype=F32)],
         grad=(0, 1), max_displacement=1, pad_size=1, is_multiply=False),
    case('crop', 'Crop', [normal(1, 2, 5, 6, dtype=F32)], grad=(0,), h_w=(3, 2), offset=(1, 2)),
    case('crop-like-center', 'Crop', [normal(2, 1, 6, 5, dtype=F32),
                                      normal(2, 1, 3, 3, dtype=F32)], grad=(0,),
         num_args=2, center_crop=True),
]

LEGACY = [
    case('group_norm', 'GroupNorm', [normal(2, 6, 3, 2), normal(3), normal(3)],
         grad=(0, 1, 2), num_groups=3, output_mean_var=True, eps=1e-3),
    case('group_norm-one', 'GroupNorm', [normal(3, 4, 5), normal(1), normal(1)],
         grad=(0, 1, 2)),
    # MXNet's backward of instance mode sums over axis 1, not the last axis its forward uses:
    # right for 2-D data only (Ember's gradient is the forward's, for any shape)
    case('softmax_activation', 'SoftmaxActivation', [normal(3, 4, dtype=F32)], grad=(0,)),
    case('softmax_activation-channel', 'SoftmaxActivation', [normal(2, 3, 2, 2, dtype=F32)],
         grad=(0,),
         mode='channel'),
    case('convolution_v1', 'Convolution_v1', [normal(1, 2, 5, 5, dtype=F32),
                                              normal(3, 2, 3, 3, dtype=F32),
                                              normal(3, dtype=F32)],
         grad=(0, 1, 2), kernel=(3, 3), num_filter=3, pad=(1, 1), stride=(2, 1)),
    case('pooling_v1', 'Pooling_v1', [normal(1, 2, 5, 5, dtype=F32)], grad=(0,), kernel=(2, 2),
         stride=(2, 2), pooling_convention='full', pool_type='avg'),
    case('pooling_v1-max', 'Pooling_v1', [normal(2, 1, 4, 4, dtype=F32)], grad=(0,),
         kernel=(3, 3), pool_type='max', pad=(1, 1)),
    case('batch_take', 'batch_take', [normal(3, 4), const([3, 0, 2], 'int32')]),
    case('choose_element_0index', 'choose_element_0index', [normal(3, 4), const([3, 0, 2])],
         grad=(0,)),
    case('fill_element_0index', 'fill_element_0index',
         [normal(3, 4, dtype=F32), normal(3, dtype=F32), const([1, 3, 0])]),
]

NUMERIC = [
    case('eye', 'eye', [], N=3, M=5, k=-1, imperative_only=True),
    case('linspace', 'linspace', [], start=-1, stop=2, num=7, imperative_only=True),
    case('linspace-open', 'linspace', [], start=0, stop=1, num=4, endpoint=False,
         imperative_only=True),
    case('histogram', 'histogram', [const([0.1, 0.5, 0.5, 0.9, 1.0, 2.0, -1.0])], bins=4,
         range=(0, 1), imperative_only=True),
    case('histogram-edges', 'histogram', [normal(20, dtype=F32), const([-1, 0, 0.5, 2])],
         imperative_only=True),
    case('broadcast_hypot', 'broadcast_hypot', [normal(2, 1), normal(1, 3)], grad=(0, 1)),
    case('cumsum', 'cumsum', [normal(2, 3)], grad=(0,)),
    case('cumsum-axis', 'cumsum', [normal(2, 3, 2)], grad=(0,), axis=1),
    case('cumsum-int', 'cumsum', [const([[1, 2], [3, 4]], 'int32')], axis=0),
    case('ravel_multi_index', 'ravel_multi_index', [const([[3, 6, 6], [4, 5, 1]])],
         shape=(7, 6)),
    case('unravel_index', 'unravel_index', [const([22, 41, 37])], shape=(7, 6)),
    case('split_v2', 'split_v2', [normal(4, 6)], grad=(0,), indices_or_sections=(1, 4), axis=1,
         imperative_only=True),
    case('split_v2-sections-squeeze', 'split_v2', [normal(3, 2)], grad=(0,),
         indices_or_sections=3, squeeze_axis=True, imperative_only=True),
    case('im2col', 'im2col', [normal(2, 2, 5, 4)], grad=(0,), kernel=(3, 2), stride=(2, 1),
         pad=(1, 0), dilate=(1, 2)),
    case('col2im', 'col2im', [normal(1, 6, 16)], grad=(0,), output_size=(4, 5),
         kernel=(3, 1), pad=(1, 1), stride=(1, 2)),
    case('all_finite', 'all_finite', [const([1.0, np.inf])]),
    case('all_finite-yes', 'all_finite', [normal(3)]),
    case('multi_all_finite', 'multi_all_finite', [normal(2, dtype=F32), const([np.nan])],
         num_arrays=2),
    case('multi_sum_sq', 'multi_sum_sq', [normal(3, dtype=F32), normal(2, 2, dtype=F32)],
         num_arrays=2),
    case('amp_cast', 'amp_cast', [normal(3, dtype=F32)], grad=(0,), dtype='float16'),
    case('amp_cast-int', 'amp_cast', [const([1, 2], 'int32')], dtype='float16'),
    # amp_multicast fails inside MXNet 1.9.1's CPU build (oneDNN) for any dtype but float32
]

def counts(*shape, high=6):
    return lambda rng: rng.integers(0, high, shape).astype('float64')


RANDOM = [
    case('pdf_normal', 'random_pdf_normal', [normal(2, 3), normal(2), uniform(0.5, 2, 2)],
         grad=(0, 1, 2)),
    case('pdf_normal-log', 'random_pdf_normal', [normal(2, 2, 3), normal(2, 2),
                                                 uniform(0.5, 2, 2, 2)],
         grad=(0, 1, 2), is_log=True),
    case('pdf_uniform', 'random_pdf_uniform', [uniform(0, 1, 3, 2), uniform(-1, 0, 3),
                                               uniform(1, 2, 3)], grad=(0, 1, 2)),
    case('hawkesll', 'contrib.hawkesll',
         [uniform(0.5, 1, 3, 2, dtype=F32), uniform(0.1, 0.5, 2, dtype=F32),
          uniform(0.5, 2, 2, dtype=F32), uniform(0, 1, 3, 2, dtype=F32),
          uniform(0.1, 1, 3, 5, dtype=F32),
          lambda rng: rng.integers(0, 2, (3, 5)).astype('int32'), const([5, 2, 0]),
          const([6.0, 3.0, 1.5])],
         grad=(0, 1, 2), grad_outputs=[0]),
    # MXNet's digamma is good to about 1e-6 relative
    case('pdf_gamma', 'random_pdf_gamma', [uniform(0.2, 3, 2, 4), uniform(0.5, 3, 2),
                                           uniform(0.5, 2, 2)], grad=(0, 1, 2), rtol=1e-5),
    case('pdf_exponential', 'random_pdf_exponential', [uniform(0, 3, 3, 2), uniform(0.5, 2, 3)],
         grad=(0, 1), is_log=True),
    case('pdf_poisson', 'random_pdf_poisson', [counts(2, 3), uniform(0.5, 4, 2)],
         grad=(0, 1)),
    case('pdf_negative_binomial', 'random_pdf_negative_binomial',
         [counts(2, 3), uniform(1, 5, 2), uniform(0.2, 0.8, 2)], grad=(0, 1, 2)),
    case('pdf_generalized_negative_binomial', 'random_pdf_generalized_negative_binomial',
         [counts(3, 2), uniform(0.5, 4, 3), uniform(0.1, 1.5, 3)], grad=(0, 1, 2),
         is_log=True),
    case('pdf_dirichlet', 'random_pdf_dirichlet',
         [lambda rng: rng.dirichlet([1, 2, 3], (2, 4)), uniform(0.5, 3, 2, 3)], grad=(0, 1),
         rtol=1e-5),
]

def weights_and_states(count, *shapes, states=2, low=None):
    """Inputs of a multi-weight update: per weight (weight, grad, states...), interleaved."""
    def draw(index):
        def one(rng):
            shape = shapes[index // (2 + states)]
            kind = index % (2 + states)
            value = rng.normal(size=shape) if kind < 2 else rng.uniform(0.01, 0.5, shape)
            return value.astype(low if low is not None and kind < 2 else F32)
        return one
    return [draw(i) for i in range(count * (2 + states))]


OPTIMIZER = [
    case('multi_lars', 'multi_lars', [uniform(0.1, 1, 3, dtype=F32), const([4.0, 0.0, 9.0]),
                                      const([1.0, 1.0, 0.0]), const([0.01, 0.02, 0.0])],
         eta=0.001, eps=1e-8, rescale_grad=2.0),
    case('preloaded_sgd', 'preloaded_multi_sgd_update',
         weights_and_states(2, (3,), (2, 2), states=0) + [const([0.1, 0.2]), const([0.0, 0.5])],
         num_weights=2, rescale_grad=0.5, clip_gradient=0.3, out=[0, 2], imperative_only=True),
    case('preloaded_sgd_mom', 'preloaded_multi_sgd_mom_update',
         weights_and_states(2, (3,), (2,), states=1) + [const([0.1, 0.2]), const([0.0, 0.5])],
         num_weights=2, momentum=0.9, out=[0, 3], imperative_only=True),
]

def rpn_scores(batch, anchors, height, width):
    """(batch, 2A, H, W) background/foreground probabilities with distinct foregrounds."""
    def draw(rng):
        fg = (rng.permutation(batch * anchors * height * width).reshape(
            batch, anchors, height, width) + 0.5) / (batch * anchors * height * width)
        return np.concatenate([1 - fg, fg], axis=1).astype(F32)
    return draw


PROPOSAL = [
    case('proposal', 'contrib.Proposal',
         [rpn_scores(1, 6, 5, 6), lambda rng: rng.normal(0, 0.2, (1, 24, 5, 6)).astype(F32),
          const([[80, 96, 1.0]])],
         scales=(2, 4), ratios=(0.5, 1, 2), feature_stride=16, rpn_pre_nms_top_n=40,
         rpn_post_nms_top_n=12, rpn_min_size=8, threshold=0.6, output_score=True),
    case('proposal-padded', 'contrib.Proposal',
         [rpn_scores(1, 3, 3, 3), lambda rng: rng.normal(0, 0.1, (1, 12, 3, 3)).astype(F32),
          const([[40, 40, 0.5]])],
         scales=(4,), ratios=(0.5, 1, 2), feature_stride=16, rpn_pre_nms_top_n=20,
         rpn_post_nms_top_n=30, rpn_min_size=16, threshold=0.5),
    case('multi_proposal', 'contrib.MultiProposal',
         [rpn_scores(2, 3, 4, 4), lambda rng: rng.normal(0, 0.3, (2, 12, 4, 4)).astype(F32),
          const([[64, 60, 1.0], [50, 64, 2.0]])],
         scales=(2, 3, 4), ratios=(1,), feature_stride=16, rpn_pre_nms_top_n=30,
         rpn_post_nms_top_n=8, rpn_min_size=4, threshold=0.7, output_score=True),
    case('proposal-iou-loss', 'contrib.Proposal',
         [rpn_scores(1, 2, 3, 3), lambda rng: rng.normal(0, 2, (1, 8, 3, 3)).astype(F32),
          const([[48, 48, 1.0]])],
         scales=(2,), ratios=(0.5, 2), feature_stride=16, rpn_pre_nms_top_n=10,
         rpn_post_nms_top_n=5, rpn_min_size=2, iou_loss=True),
]

DEFORMABLE = [
    case('deformable', 'contrib.DeformableConvolution',
         [normal(2, 4, 5, 6, dtype=F32),
          lambda rng: rng.normal(0, 0.8, (2, 18, 5, 6)).astype(F32),
          normal(3, 4, 3, 3, dtype=F32), normal(3, dtype=F32)],
         grad=(0, 1, 2, 3), kernel=(3, 3), pad=(1, 1), num_filter=3),
    case('deformable-groups-stride', 'contrib.DeformableConvolution',
         [normal(1, 4, 7, 7, dtype=F32),
          lambda rng: rng.normal(0, 1.5, (1, 16, 3, 3)).astype(F32),
          normal(4, 2, 2, 2, dtype=F32)],
         grad=(0, 1, 2), kernel=(2, 2), stride=(2, 2), dilate=(2, 2), num_filter=4,
         num_group=2, num_deformable_group=2, no_bias=True),
    # ModulatedDeformableConvolution runs on GPUs only in MXNet 1.9.1
]

def rotated_rois(count, batch, size):
    """(count, 6) rotated regions (batch index, centre, width, height, angle)."""
    def draw(rng):
        return np.concatenate([rng.integers(0, batch, (count, 1)),
                               rng.uniform(-0.1 * size, 1.1 * size, (count, 2)),
                               rng.uniform(1, size, (count, 2)),
                               rng.uniform(-180, 180, (count, 1))], axis=1).astype(F32)
    return draw


# MXNet 1.9.1's RROIAlign has no gradient (Ember's is checked by finite differences)
ROI += [
    case('rroi_align', 'contrib.RROIAlign', [normal(2, 3, 9, 8, dtype=F32),
                                             rotated_rois(5, 2, 8)],
         pooled_size=(2, 3), spatial_scale=1.0),
    case('rroi_align-scaled', 'contrib.RROIAlign', [normal(1, 2, 6, 6, dtype=F32),
                                                    rotated_rois(3, 1, 24)],
         pooled_size=(3, 2), spatial_scale=0.25, sampling_ratio=2),
]

ROI += [
    case('deformable_psroi', 'contrib.DeformablePSROIPooling',
         [normal(2, 8, 7, 7, dtype=F32), rois(4, 2, 7),
          lambda rng: rng.normal(0, 1, (4, 2, 2, 2)).astype(F32)],
         grad=(0, 2), spatial_scale=1.0, output_dim=2, group_size=2, pooled_size=2,
         sample_per_part=2, trans_std=0.1),
    case('deformable_psroi-classes', 'contrib.DeformablePSROIPooling',
         [normal(1, 18, 8, 8, dtype=F32), rois(3, 1, 16),
          lambda rng: rng.normal(0, 1, (3, 4, 3, 3)).astype(F32)],
         grad=(0, 2), spatial_scale=0.5, output_dim=2, group_size=3, pooled_size=3,
         sample_per_part=3, trans_std=0.2),
    case('deformable_psroi-no-trans', 'contrib.DeformablePSROIPooling',
         [normal(1, 4, 6, 6, dtype=F32), rois(2, 1, 6)], grad=(0,), spatial_scale=1.0,
         output_dim=1, group_size=2, pooled_size=4, part_size=2, no_trans=True),
]

FAMILIES = {'linalg': LINALG, 'contrib': CONTRIB, 'detection': DETECTION, 'roi': ROI,
            'spatial': SPATIAL, 'legacy': LEGACY, 'numeric': NUMERIC, 'random': RANDOM,
            'optimizer': OPTIMIZER, 'proposal': PROPOSAL, 'deformable': DEFORMABLE}


def resolve(module, dotted):
    for part in dotted.split('.'):
        module = getattr(module, part)
    return module


def split_inputs(spec, values):
    """The inputs passed positionally, and those passed by keyword."""
    keywords = spec['keywords']
    return ([v for v, k in zip(values, keywords) if k is None],
            {k: v for v, k in zip(values, keywords) if k is not None})


def run(mx, spec, inputs, heads_in=None, rng=None):
    """Call the case on framework `mx`; returns (outputs, heads, grads) as NumPy arrays."""
    fn = resolve(mx.nd, spec['op'])
    arrays = [mx.nd.array(x, dtype=x.dtype) for x in inputs]
    for index in spec['grad']:
        arrays[index].attach_grad()
    positional, named = split_inputs(spec, arrays)
    if spec['out'] is not None:
        named['out'] = [arrays[i] for i in spec['out']]
    with mx.autograd.record(train_mode=spec['train']):
        result = fn(*positional, **named, **spec['kwargs'])
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    heads, grads = [], []
    if spec['grad']:
        chosen = spec['heads'] if spec['heads'] is not None else range(len(outputs))
        if heads_in is None:
            heads = [rng.standard_normal(outputs[i].shape).astype(outputs[i].dtype)
                     for i in chosen]
        else:
            heads = heads_in
        mx.autograd.backward([outputs[i] for i in chosen],
                             [mx.nd.array(h, dtype=h.dtype) for h in heads])
        grads = [arrays[i].grad.asnumpy() for i in spec['grad']]
    return [o.asnumpy() for o in outputs], heads, grads


def write_family(mx, name, cases):
    store = {}
    for item in cases:
        rng = rng_for(f'{name}/{item["id"]}')
        inputs = [x(rng) if callable(x) else np.asarray(x) for x in item['inputs']]
        spec = {k: item[k] for k in ('op', 'kwargs', 'grad', 'heads', 'train',
                                     'imperative_only', 'keywords', 'rtol', 'out')}
        try:
            outputs, heads, grads = run(mx, spec, inputs, rng=rng)
        except Exception:
            print(f'{name}/{item["id"]}: MXNet failed', file=sys.stderr)
            raise
        key = item['id']
        store[f'{key}/spec'] = np.frombuffer(json.dumps(spec).encode(), np.uint8)
        for kind, values in (('in', inputs), ('out', outputs), ('head', heads),
                             ('grad', grads)):
            for i, value in enumerate(values):
                store[f'{key}/{kind}{i}'] = value
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT_DIR / f'{name}.npz', **store)
    print(f'{name}: {len(cases)} cases')


def main(names):
    import mxnet as mx
    for name in names or FAMILIES:
        write_family(mx, name, FAMILIES[name])


if __name__ == '__main__':
    main(sys.argv[1:])
