"""Losses (``mx.gluon.loss``), as in MXNet 1.x.

Every loss returns one value per sample: the element losses, weighted by ``sample_weight``
(broadcast) and the scalar ``weight``, averaged over every axis but ``batch_axis``.

>>> import ember as mx
>>> loss = mx.gluon.loss.L2Loss()
>>> loss(mx.nd.array([[1.0, 2.0]]), mx.nd.array([[1.0, 4.0]])).asnumpy().tolist()
[1.0]
"""
from __future__ import annotations

import math
from numbers import Number

from ember.gluon.block import HybridBlock

__all__ = ['Loss', 'L1Loss', 'L2Loss', 'SigmoidBinaryCrossEntropyLoss', 'SigmoidBCELoss',
           'SoftmaxCrossEntropyLoss', 'SoftmaxCELoss', 'KLDivLoss', 'CTCLoss', 'HuberLoss',
           'HingeLoss', 'SquaredHingeLoss', 'LogisticLoss', 'TripletLoss', 'PoissonNLLLoss',
           'CosineEmbeddingLoss', 'SDMLLoss']


def _apply_weighting(F, loss, weight=None, sample_weight=None):
    """``loss * sample_weight * weight``; `sample_weight` broadcasts, `weight` is a number."""
    if sample_weight is not None:
        loss = F.broadcast_mul(loss, sample_weight)
    if weight is not None:
        if not isinstance(weight, Number):
            raise TypeError(f'loss weight={weight!r}: expected a number')
        loss = loss * weight
    return loss


def _reshape_like(F, x, y):
    """`x` with `y`'s shape (labels given as (N,) for predictions of (N, 1))."""
    return F.reshape_like(x, y)


def _batch_mean(F, loss, batch_axis):
    return F.mean(loss, axis=batch_axis, exclude=True)


def _softrelu(F, x):
    """log(1 + exp(x)), computed stably by the operator."""
    return F.Activation(x, act_type='softrelu')


class Loss(HybridBlock):
    """Base class of losses: a scalar `weight` and the `batch_axis` kept in the result."""

    _apply_weighting = staticmethod(_apply_weighting)

    def __init__(self, weight, batch_axis, **kwargs):
        super().__init__(**kwargs)
        self._weight = weight
        self._batch_axis = batch_axis

    def __repr__(self):
        return f'{type(self).__name__}(batch_axis={self._batch_axis}, w={self._weight})'

    def hybrid_forward(self, F, x, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} must define hybrid_forward()')


class L2Loss(Loss):
    """``weight / 2 * (label - pred) ** 2``, averaged per sample.

    >>> import ember as mx
    >>> mx.gluon.loss.L2Loss()(mx.nd.array([[0.0, 0.0]]), mx.nd.array([[2.0, 0.0]])).asnumpy()
    array([1.], dtype=float32)
    """

    def __init__(self, weight=1., batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        label = _reshape_like(F, label, pred)
        loss = F.square(label - pred)
        loss = _apply_weighting(F, loss, self._weight / 2, sample_weight)
        return _batch_mean(F, loss, self._batch_axis)


class L1Loss(Loss):
    """``|label - pred|``, averaged per sample."""

    def __init__(self, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        label = _reshape_like(F, label, pred)
        loss = F.abs(label - pred)
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        return _batch_mean(F, loss, self._batch_axis)


class SigmoidBinaryCrossEntropyLoss(Loss):
    """Binary cross-entropy of ``sigmoid(pred)`` (or of `pred` itself when `from_sigmoid`)
    against labels in [0, 1]; `pos_weight` (a forward argument) scales the positive term.

    >>> import ember as mx
    >>> bce = mx.gluon.loss.SigmoidBCELoss()
    >>> round(float(bce(mx.nd.array([[0.0]]), mx.nd.array([[1.0]])).asnumpy()[0]), 4)
    0.6931
    """

    def __init__(self, from_sigmoid=False, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._from_sigmoid = from_sigmoid

    def hybrid_forward(self, F, pred, label, sample_weight=None, pos_weight=None):
        label = _reshape_like(F, label, pred)
        if self._from_sigmoid:
            loss = self._from_probabilities(F, pred, label, pos_weight)
        elif pos_weight is None:
            # max(x, 0) - x * z + log(1 + exp(-|x|)): no overflow for large |x|
            loss = F.relu(pred) - pred * label + _softrelu(F, -F.abs(pred))
        else:
            log_weight = F.broadcast_mul(pos_weight - 1, label) + 1
            loss = pred - pred * label + log_weight * (
                _softrelu(F, -F.abs(pred)) + F.relu(-pred))
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        return _batch_mean(F, loss, self._batch_axis)

    @staticmethod
    def _from_probabilities(F, pred, label, pos_weight):
        eps = 1e-12
        positive = F.log(pred + eps) * label
        if pos_weight is not None:
            positive = F.broadcast_mul(positive, pos_weight)
        return -(positive + F.log(1. - pred + eps) * (1. - label))


SigmoidBCELoss = SigmoidBinaryCrossEntropyLoss


class SoftmaxCrossEntropyLoss(Loss):
    """Cross-entropy of ``softmax(pred)`` along `axis` against class indices
    (`sparse_label`) or probability vectors; `from_logits` means `pred` is log-probabilities.

    >>> import ember as mx
    >>> ce = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    >>> round(float(ce(mx.nd.array([[0.0, 0.0]]), mx.nd.array([1])).asnumpy()[0]), 4)
    0.6931
    """

    def __init__(self, axis=-1, sparse_label=True, from_logits=False, weight=None,
                 batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._axis = axis
        self._sparse_label = sparse_label
        self._from_logits = from_logits

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        if not self._from_logits:
            pred = F.log_softmax(pred, axis=self._axis)
        if self._sparse_label:
            loss = -F.pick(pred, label, axis=self._axis, keepdims=True)
        else:
            label = _reshape_like(F, label, pred)
            loss = -F.sum(pred * label, axis=self._axis, keepdims=True)
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        return _batch_mean(F, loss, self._batch_axis)


SoftmaxCELoss = SoftmaxCrossEntropyLoss


class KLDivLoss(Loss):
    """Kullback-Leibler divergence ``label * (log(label) - pred)`` summed over each sample;
    `pred` holds log-probabilities when `from_logits` (the default), else it is passed through
    log_softmax.
    """

    def __init__(self, from_logits=True, axis=-1, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._from_logits = from_logits
        self._axis = axis

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        if not self._from_logits:
            pred = F.log_softmax(pred, axis=self._axis)
        loss = label * (F.log(label + 1e-12) - pred)
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        # summed over each sample, as MXNet 1.9.1 does (earlier releases took the mean)
        return F.sum(loss, axis=self._batch_axis, exclude=True)


class CTCLoss(Loss):
    """Connectionist temporal classification loss (the blank label is the last class).

    `layout` is 'NTC' or 'TNC' for `pred`, `label_layout` 'NT' or 'TN' for `label`;
    padded label positions hold -1 unless `label_lengths` is given.
    """

    def __init__(self, layout='NTC', label_layout='NT', weight=None, **kwargs):
        if layout not in ('NTC', 'TNC'):
            raise ValueError(f"CTCLoss: layout={layout!r}: expected 'NTC' or 'TNC'")
        if label_layout not in ('NT', 'TN'):
            raise ValueError(f"CTCLoss: label_layout={label_layout!r}: expected 'NT' or 'TN'")
        self._layout = layout
        self._label_layout = label_layout
        super().__init__(weight, label_layout.find('N'), **kwargs)

    def hybrid_forward(self, F, pred, label, pred_lengths=None, label_lengths=None,
                       sample_weight=None):
        if self._layout == 'NTC':
            pred = F.swapaxes(pred, dim1=0, dim2=1)
        if self._batch_axis == 1:
            label = F.swapaxes(label, dim1=0, dim2=1)
        inputs = [pred, label] + [x for x in (pred_lengths, label_lengths) if x is not None]
        loss = F.CTCLoss(*inputs, use_data_lengths=pred_lengths is not None,
                         use_label_lengths=label_lengths is not None, blank_label='last')
        return _apply_weighting(F, loss, self._weight, sample_weight)


class HuberLoss(Loss):
    """``|d| - rho / 2`` where ``|d| > rho``, else ``d ** 2 / (2 * rho)``, for
    ``d = label - pred``."""

    def __init__(self, rho=1, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._rho = rho

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        label = _reshape_like(F, label, pred)
        distance = F.abs(label - pred)
        beyond = distance > self._rho
        loss = beyond * (distance - 0.5 * self._rho) + \
            (1 - beyond) * ((0.5 / self._rho) * F.square(distance))
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        return _batch_mean(F, loss, self._batch_axis)


class HingeLoss(Loss):
    """``max(0, margin - pred * label)`` for labels in {-1, 1}."""

    def __init__(self, margin=1, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._margin = margin

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        label = _reshape_like(F, label, pred)
        loss = F.relu(self._margin - pred * label)
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        return _batch_mean(F, loss, self._batch_axis)


class SquaredHingeLoss(Loss):
    """``max(0, margin - pred * label) ** 2`` for labels in {-1, 1}."""

    def __init__(self, margin=1, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._margin = margin

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        label = _reshape_like(F, label, pred)
        loss = F.square(F.relu(self._margin - pred * label))
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        return _batch_mean(F, loss, self._batch_axis)


class LogisticLoss(Loss):
    """``log(1 + exp(-pred * label))`` for 'signed' labels in {-1, 1}, or the binary
    cross-entropy of logits for 'binary' labels in {0, 1}."""

    def __init__(self, weight=None, batch_axis=0, label_format='signed', **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        if label_format not in ('signed', 'binary'):
            raise ValueError(f"LogisticLoss: label_format={label_format!r}: expected "
                             f"'signed' or 'binary'")
        self._label_format = label_format

    def hybrid_forward(self, F, pred, label, sample_weight=None):
        label = _reshape_like(F, label, pred)
        if self._label_format == 'signed':
            label = (label + 1.0) / 2.0
        loss = F.relu(pred) - pred * label + _softrelu(F, -F.abs(pred))
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        return _batch_mean(F, loss, self._batch_axis)


class TripletLoss(Loss):
    """``max(0, |pred - positive|^2 - |pred - negative|^2 + margin)`` per sample."""

    def __init__(self, margin=1, weight=None, batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._margin = margin

    def hybrid_forward(self, F, pred, positive, negative, sample_weight=None):
        positive = _reshape_like(F, positive, pred)
        negative = _reshape_like(F, negative, pred)
        loss = F.sum(F.square(positive - pred) - F.square(negative - pred),
                     axis=self._batch_axis, exclude=True)
        loss = F.relu(loss + self._margin)
        return _apply_weighting(F, loss, self._weight, sample_weight)


class PoissonNLLLoss(Loss):
    """Negative log-likelihood of `target` under a Poisson distribution of mean
    ``exp(pred)`` (`from_logits`) or `pred`; averaged over all elements, as in MXNet."""

    def __init__(self, weight=None, from_logits=True, batch_axis=0, compute_full=False,
                 **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._from_logits = from_logits
        self._compute_full = compute_full

    def hybrid_forward(self, F, pred, target, sample_weight=None, epsilon=1e-08):
        target = _reshape_like(F, target, pred)
        if self._from_logits:
            loss = F.exp(pred) - target * pred
        else:
            loss = pred - target * F.log(pred + epsilon)
        if self._compute_full:
            # Stirling's approximation of log(target!), counted only where target > 1
            stirling = target * F.log(target) - target + 0.5 * F.log(2 * math.pi * target)
            loss = loss + stirling * (target > 1)
        loss = _apply_weighting(F, loss, self._weight, sample_weight)
        return F.mean(loss)


class CosineEmbeddingLoss(Loss):
    """``1 - cos(input1, input2)`` for label 1, ``max(0, cos - margin)`` for label -1;
    one value per sample, shaped (N, 1) as in MXNet."""

    def __init__(self, weight=None, batch_axis=0, margin=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self._margin = margin

    def hybrid_forward(self, F, input1, input2, label, sample_weight=None):
        input1 = _reshape_like(F, input1, input2)
        label = F.reshape(label, shape=(-1, 1))
        cos_sim = self._cosine_similarity(F, input1, input2)
        similar = (label == 1) * (1 - cos_sim)
        dissimilar = F.relu((label == -1) * (cos_sim - self._margin))
        return _apply_weighting(F, similar + dissimilar, self._weight, sample_weight)

    @staticmethod
    def _cosine_similarity(F, x, y, axis=-1):
        x_norm = F.reshape(F.norm(x, axis=axis), shape=(-1, 1))
        y_norm = F.reshape(F.norm(y, axis=axis), shape=(-1, 1))
        x_dot_y = F.reshape(F.sum(x * y, axis=axis), shape=(-1, 1))
        return x_dot_y / F._maximum_scalar(x_norm * y_norm, scalar=1e-12)


class SDMLLoss(Loss):
    """Smoothed deep metric learning loss of two batches of aligned embeddings, (N, D) each:
    row i of `x1` should be nearest to row i of `x2`. The negative squared distances of every
    pair go through a softmax over `x2`'s rows, and the loss is the KL divergence to the
    identity smoothed by `smoothing_parameter` (1 - s on the diagonal, s / (N - 1) elsewhere);
    one value per row of `x1`.

    >>> import ember as mx
    >>> loss = SDMLLoss()
    >>> x = mx.nd.array([[0.0, 1.0], [5.0, 0.0]])
    >>> loss(x, x).shape, bool((loss(x, x) < loss(x, x[::-1])).asnumpy().all())
    ((2,), True)
    """

    def __init__(self, smoothing_parameter=0.3, weight=1., batch_axis=0, **kwargs):
        super().__init__(weight, batch_axis, **kwargs)
        self.kl_loss = KLDivLoss(from_logits=True)
        self.smoothing_parameter = smoothing_parameter

    @staticmethod
    def _compute_distances(F, x1, x2):
        """Squared euclidean distance of every row of x1 to every row of x2: (N, N)."""
        differences = F.broadcast_sub(F.expand_dims(x1, axis=1), F.expand_dims(x2, axis=0))
        return F.sum(differences * differences, axis=2)

    def _compute_labels(self, F, distances):
        ones = F.ones_like(F.sum(distances, axis=1))
        gold = F.diag(ones)
        others = F.broadcast_div(1 - gold, F.sum(ones) - 1)
        return gold * (1 - self.smoothing_parameter) + others * self.smoothing_parameter

    def hybrid_forward(self, F, x1, x2):
        distances = self._compute_distances(F, x1, x2)
        log_probabilities = F.log_softmax(-distances, axis=1)
        return self.kl_loss(log_probabilities, self._compute_labels(F, distances))
