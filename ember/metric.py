"""Evaluation metrics (MXNet 1.x's ``mx.metric``).

A metric accumulates ``sum_metric`` over ``num_inst`` instances with ``update(labels, preds)``
and reports their ratio with ``get()``. Labels and predictions are lists of arrays (or one
array): NDArrays, whose values are read with ``asnumpy()``, or NumPy arrays. Besides the local
sums that ``reset_local()`` clears (once per logging interval), metrics keep global sums that
only ``reset()`` clears.

>>> import numpy
>>> from ember import metric
>>> acc = metric.create('acc')
>>> acc.update([numpy.array([0, 1, 1])], [numpy.array([[0.7, 0.3], [0.2, 0.8], [0.9, 0.1]])])
>>> acc.get()
('accuracy', 0.6666666666666666)
"""
from __future__ import annotations

import difflib
import math
from collections import OrderedDict

import numpy

__all__ = ['EvalMetric', 'CompositeEvalMetric', 'Accuracy', 'TopKAccuracy', 'CrossEntropy',
           'Perplexity', 'MAE', 'MSE', 'RMSE', 'Loss', 'CustomMetric', 'np', 'create',
           'register', 'alias', 'check_label_shapes', 'F1', 'MCC', 'PCC', 'PearsonCorrelation',
           'NegativeLogLikelihood', 'Torch', 'Caffe', 'numeric_types', 'string_types']

numeric_types = (float, int, numpy.generic)
string_types = (str,)

_METRICS: dict[str, type] = {}


def register(klass, name=None):
    """Make a metric class creatable by its lower-cased class name (or `name`)."""
    _METRICS[(name or klass.__name__).lower()] = klass
    return klass


def alias(*names):
    """Make a metric class creatable by more names as well."""
    def add(klass):
        for name in names:
            _METRICS[name.lower()] = klass
        return klass
    return add


def _as_numpy(values):
    return values.asnumpy() if hasattr(values, 'asnumpy') else numpy.asarray(values)


def _is_array(values):
    return hasattr(values, 'shape') and not isinstance(values, (list, tuple))


def check_label_shapes(labels, preds, wrap=False, shape=False):
    """Raise ValueError unless labels and preds have the same length (or shape).

    With ``wrap``, a single array is wrapped in a list first, and the pair is returned.
    """
    if wrap:
        labels = [labels] if _is_array(labels) else labels
        preds = [preds] if _is_array(preds) else preds
    label_shape = labels.shape if shape else len(labels)
    pred_shape = preds.shape if shape else len(preds)
    if label_shape != pred_shape:
        raise ValueError(f'Shape of labels {label_shape} does not match shape of predictions '
                         f'{pred_shape}')
    return labels, preds


class EvalMetric:
    """Base class of metrics: accumulates sums and instance counts, locally and globally.

    >>> class Hits(EvalMetric):
    ...     def update(self, labels, preds):
    ...         self.sum_metric += sum(l == p for l, p in zip(labels, preds))
    ...         self.num_inst += len(labels)
    >>> hits = Hits('hits')
    >>> hits.update([1, 2], [1, 3])
    >>> hits.get()
    ('hits', 0.5)
    """

    def __init__(self, name, output_names=None, label_names=None, **kwargs):
        self.name = str(name)
        self.output_names = output_names
        self.label_names = label_names
        self._has_global_stats = kwargs.pop('has_global_stats', False)
        self._kwargs = kwargs
        self.reset()

    def __str__(self):
        return f'EvalMetric: {dict(self.get_name_value())}'

    def get_config(self):
        """The arguments that recreate this metric with ``create(config)``."""
        config = self._kwargs.copy()
        config.update({'metric': self.__class__.__name__, 'name': self.name,
                       'output_names': self.output_names, 'label_names': self.label_names})
        return config

    def update_dict(self, label, pred):
        """Update from dicts of named outputs and labels (the Module API's form)."""
        if self.output_names is not None:
            pred = [pred[name] for name in self.output_names]
        else:
            pred = list(pred.values())
        if self.label_names is not None:
            label = [label[name] for name in self.label_names]
        else:
            label = list(label.values())
        self.update(label, pred)

    def update(self, labels, preds):
        raise NotImplementedError(f'{type(self).__name__} must define update(labels, preds)')

    def _accumulate(self, value, count):
        """Add ``value`` over ``count`` instances to the local and global sums."""
        self.sum_metric += value
        self.global_sum_metric += value
        self.num_inst += count
        self.global_num_inst += count

    def reset(self):
        """Clear the local and the global sums."""
        self.num_inst = 0
        self.sum_metric = 0.0
        self.global_num_inst = 0
        self.global_sum_metric = 0.0

    def reset_local(self):
        """Clear the local sums only (the global ones keep counting)."""
        self.num_inst = 0
        self.sum_metric = 0.0

    def get(self):
        """(name, value) of the local sums; the value is NaN before any update."""
        if self.num_inst == 0:
            return (self.name, float('nan'))
        return (self.name, self.sum_metric / self.num_inst)

    def get_global(self):
        """(name, value) over everything since the last ``reset()``."""
        if not self._has_global_stats:
            return self.get()
        if self.global_num_inst == 0:
            return (self.name, float('nan'))
        return (self.name, self.global_sum_metric / self.global_num_inst)

    def get_name_value(self):
        """[(name, value), ...] of the local values."""
        return _name_value_pairs(*self.get())

    def get_global_name_value(self):
        """[(name, value), ...] of the global values."""
        return _name_value_pairs(*self.get_global())


def _name_value_pairs(name, value):
    names = name if isinstance(name, list) else [name]
    values = value if isinstance(value, list) else [value]
    return list(zip(names, values))


@register
@alias('composite')
class CompositeEvalMetric(EvalMetric):
    """Several metrics updated together; ``get()`` returns lists of names and values.

    >>> both = CompositeEvalMetric(['mse', 'mae'])
    >>> both.update([numpy.array([1.0, 2.0])], [numpy.array([2.0, 2.0])])
    >>> both.get()
    (['mse', 'mae'], [0.5, 0.5])
    """

    def __init__(self, metrics=None, name='composite', output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        self.metrics = [create(m) for m in (metrics or [])]

    def add(self, metric):
        """Add a child metric (an instance, a name, or anything ``create`` accepts)."""
        self.metrics.append(create(metric))

    def get_metric(self, index):
        """The child metric at ``index``."""
        if not -len(self.metrics) <= index < len(self.metrics):
            raise ValueError(f'Metric index {index} is out of range 0 and {len(self.metrics)}')
        return self.metrics[index]

    def update_dict(self, labels, preds):
        if self.label_names is not None:
            labels = OrderedDict(i for i in labels.items() if i[0] in self.label_names)
        if self.output_names is not None:
            preds = OrderedDict(i for i in preds.items() if i[0] in self.output_names)
        for metric in self.metrics:
            metric.update_dict(labels, preds)

    def update(self, labels, preds):
        for metric in self.metrics:
            metric.update(labels, preds)

    def reset(self):
        # The base __init__ calls reset() before the children exist.
        for metric in getattr(self, 'metrics', []):
            metric.reset()

    def reset_local(self):
        for metric in self.metrics:
            metric.reset_local()

    def get(self):
        return _gather(metric.get() for metric in self.metrics)

    def get_global(self):
        return _gather(metric.get_global() for metric in self.metrics)

    def get_config(self):
        config = super().get_config()
        config.update({'metrics': [m.get_config() for m in self.metrics]})
        return config


def _gather(results):
    names, values = [], []
    for name, value in results:
        names.extend(name if isinstance(name, list) else [name])
        values.extend(value if isinstance(value, list) else [value])
    return (names, values)


@register
@alias('acc')
class Accuracy(EvalMetric):
    """Fraction of predictions equal to the labels; class scores are reduced by argmax on axis.

    >>> acc = Accuracy()
    >>> acc.update(numpy.array([1, 0]), numpy.array([[0.1, 0.9], [0.2, 0.8]]))
    >>> acc.get()
    ('accuracy', 0.5)
    """

    def __init__(self, axis=1, name='accuracy', output_names=None, label_names=None):
        super().__init__(name, axis=axis, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        self.axis = axis

    def update(self, labels, preds):
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _as_numpy(label), _as_numpy(pred)
            if pred.shape != label.shape:
                pred = numpy.argmax(pred, axis=self.axis)
            label = label.astype('int32').ravel()
            pred = pred.astype('int32').ravel()
            check_label_shapes(label, pred)
            self._accumulate(int((pred == label).sum()), len(pred))


@register
@alias('top_k_accuracy', 'top_k_acc')
class TopKAccuracy(EvalMetric):
    """Fraction of labels among the ``top_k`` highest-scored classes (``top_k`` > 1).

    >>> top2 = TopKAccuracy(top_k=2)
    >>> top2.update([numpy.array([2, 0])], [numpy.array([[0.1, 0.5, 0.4], [0.2, 0.5, 0.3]])])
    >>> top2.get()
    ('top_k_accuracy_2', 0.5)
    """

    def __init__(self, top_k=1, name='top_k_accuracy', output_names=None, label_names=None):
        super().__init__(name, top_k=top_k, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        if top_k <= 1:
            raise ValueError(f'top_k={top_k!r}: expected an integer > 1; use Accuracy for 1')
        self.top_k = top_k
        self.name += f'_{top_k}'

    def update(self, labels, preds):
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            pred = _as_numpy(pred).astype('float32')
            if pred.ndim > 2:
                raise ValueError(f'predictions of shape {pred.shape}: expected at most 2 dims')
            label = _as_numpy(label).astype('int32')
            check_label_shapes(label, pred)
            self._accumulate(self._correct(label, pred), pred.shape[0])

    def _correct(self, label, pred):
        if pred.ndim == 1:
            return int((pred.astype('int32') == label.ravel()).sum())
        top_k = min(pred.shape[1], self.top_k)
        # argpartition is enough: the order within the top k does not matter.
        best = numpy.argpartition(pred, -top_k, axis=1)[:, -top_k:]
        return int((best == label.reshape(-1, 1)).sum())


@register
@alias('ce')
class CrossEntropy(EvalMetric):
    """Mean of -log(probability of the label); ``eps`` keeps the log finite.

    >>> ce = CrossEntropy()
    >>> ce.update([numpy.array([1])], [numpy.array([[0.5, 0.5]])])
    >>> round(ce.get()[1], 4)
    0.6931
    """

    def __init__(self, eps=1e-12, name='cross-entropy', output_names=None, label_names=None):
        super().__init__(name, eps=eps, output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        self.eps = eps

    def update(self, labels, preds):
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _as_numpy(label).ravel(), _as_numpy(pred)
            if label.shape[0] != pred.shape[0]:
                raise ValueError(f'{label.shape[0]} labels for {pred.shape[0]} predictions')
            prob = pred[numpy.arange(label.shape[0]), label.astype('int64')]
            self._accumulate(float((-numpy.log(prob + self.eps)).sum()), label.shape[0])


@register
class Perplexity(EvalMetric):
    """exp(mean -log(probability of the label)), skipping labels equal to ``ignore_label``.

    >>> perplexity = Perplexity(ignore_label=None)
    >>> perplexity.update([numpy.array([0, 1])], [numpy.array([[0.5, 0.5], [0.75, 0.25]])])
    >>> round(perplexity.get()[1], 4)
    2.8284
    """

    def __init__(self, ignore_label, axis=-1, name='perplexity', output_names=None,
                 label_names=None):
        super().__init__(name, ignore_label=ignore_label, output_names=output_names,
                         label_names=label_names, has_global_stats=True)
        self.ignore_label = ignore_label
        self.axis = axis

    def update(self, labels, preds):
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _as_numpy(label).ravel(), _as_numpy(pred)
            if label.size * pred.shape[-1] != pred.size:
                raise ValueError(f'shape mismatch: labels {label.shape} vs. predictions '
                                 f'{pred.shape}')
            prob = self._label_prob(label, pred)
            count = prob.size
            if self.ignore_label is not None:
                ignore = label == self.ignore_label
                count -= int(ignore.sum())
                prob = numpy.where(ignore, 1.0, prob)
            self._accumulate(-float(numpy.log(numpy.maximum(1e-10, prob)).sum()), count)

    def _label_prob(self, label, pred):
        scores = numpy.moveaxis(pred, self.axis, -1)
        scores = scores.reshape(-1, scores.shape[-1])
        # Out-of-range labels are clipped, as MXNet's pick does by default.
        index = numpy.clip(label.astype('int64'), 0, scores.shape[1] - 1)
        return numpy.take_along_axis(scores, index.reshape(-1, 1), axis=1).ravel()

    def get(self):
        if self.num_inst == 0:
            return (self.name, float('nan'))
        return (self.name, math.exp(self.sum_metric / self.num_inst))

    def get_global(self):
        if self.global_num_inst == 0:
            return (self.name, float('nan'))
        return (self.name, math.exp(self.global_sum_metric / self.global_num_inst))


class _Regression(EvalMetric):
    """Metrics averaged per batch: each update adds one value, as MXNet 1.x counts them."""

    def __init__(self, name, output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names,
                         has_global_stats=True)

    def update(self, labels, preds):
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label, pred = _as_numpy(label), _as_numpy(pred)
            # A vector is a column: labels (n,) against predictions (n, 1) do not broadcast.
            label = label.reshape(label.shape[0], 1) if label.ndim == 1 else label
            pred = pred.reshape(pred.shape[0], 1) if pred.ndim == 1 else pred
            self._accumulate(float(self._batch_value(label - pred)), 1)

    def _batch_value(self, error):
        raise NotImplementedError


@register
class MAE(_Regression):
    """Mean absolute error, averaged over batches.

    >>> mae = MAE()
    >>> mae.update([numpy.array([1.0, 3.0])], [numpy.array([2.0, 2.0])])
    >>> mae.get()
    ('mae', 1.0)
    """

    def __init__(self, name='mae', output_names=None, label_names=None):
        super().__init__(name, output_names, label_names)

    def _batch_value(self, error):
        return numpy.abs(error).mean()


@register
class MSE(_Regression):
    """Mean squared error, averaged over batches.

    >>> mse = MSE()
    >>> mse.update([numpy.array([1.0, 3.0])], [numpy.array([3.0, 3.0])])
    >>> mse.get()
    ('mse', 2.0)
    """

    def __init__(self, name='mse', output_names=None, label_names=None):
        super().__init__(name, output_names, label_names)

    def _batch_value(self, error):
        return (error ** 2.0).mean()


@register
class RMSE(_Regression):
    """Root mean squared error of each batch, averaged over batches.

    >>> rmse = RMSE()
    >>> rmse.update([numpy.array([1.0, 3.0])], [numpy.array([3.0, 3.0])])
    >>> round(rmse.get()[1], 4)
    1.4142
    """

    def __init__(self, name='rmse', output_names=None, label_names=None):
        super().__init__(name, output_names, label_names)

    def _batch_value(self, error):
        return numpy.sqrt((error ** 2.0).mean())


@register
@alias('loss')
class Loss(EvalMetric):
    """Mean of the values of the predictions (loss outputs); labels are ignored.

    >>> loss = Loss()
    >>> loss.update(None, [numpy.array([1.0, 2.0, 6.0])])
    >>> loss.get()
    ('loss', 3.0)
    """

    def __init__(self, name='loss', output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names,
                         has_global_stats=True)

    def update(self, _, preds):
        preds = [preds] if _is_array(preds) else preds
        for pred in preds:
            pred = _as_numpy(pred)
            self._accumulate(float(pred.sum()), pred.size)


@register
class CustomMetric(EvalMetric):
    """A metric from ``feval(label, pred)`` on NumPy arrays, returning a value per batch or a
    ``(sum_metric, num_inst)`` pair.

    >>> def hits(label, pred):
    ...     return int((label == pred).sum()), label.size
    >>> custom = CustomMetric(hits)
    >>> custom.update([numpy.array([1, 2])], [numpy.array([1, 3])])
    >>> custom.get()
    ('hits', 0.5)
    """

    def __init__(self, feval, name=None, allow_extra_outputs=False, output_names=None,
                 label_names=None):
        if name is None:
            name = feval.__name__
            if '<' in name:
                name = f'custom({name})'
        super().__init__(name, feval=feval, allow_extra_outputs=allow_extra_outputs,
                         output_names=output_names, label_names=label_names,
                         has_global_stats=True)
        self._feval = feval
        self._allow_extra_outputs = allow_extra_outputs

    def update(self, labels, preds):
        if not self._allow_extra_outputs:
            labels, preds = check_label_shapes(labels, preds, True)
        for pred, label in zip(preds, labels):
            result = self._feval(_as_numpy(label), _as_numpy(pred))
            if isinstance(result, tuple):
                self._accumulate(*result)
            else:
                self._accumulate(result, 1)

    def get_config(self):
        raise NotImplementedError('CustomMetric cannot be serialized')


def np(numpy_feval, name=None, allow_extra_outputs=False):
    """A CustomMetric from a function of NumPy arrays (MXNet's ``mx.metric.np``).

    >>> metric = np(lambda label, pred: float(abs(label - pred).max()), name='max_err')
    >>> metric.update([numpy.array([1.0])], [numpy.array([1.5])])
    >>> metric.get()
    ('max_err', 0.5)
    """
    def feval(label, pred):
        return numpy_feval(label, pred)
    feval.__name__ = numpy_feval.__name__
    return CustomMetric(feval, name, allow_extra_outputs)


def create(metric, *args, **kwargs):
    """A metric from a name, a list (a composite), a function (a CustomMetric), a config dict
    or an instance (returned as is).

    >>> create(['acc', 'ce']).get()[0]
    ['accuracy', 'cross-entropy']
    >>> create('top_k_accuracy', top_k=5).name
    'top_k_accuracy_5'
    """
    if isinstance(metric, EvalMetric):
        if args or kwargs:
            raise TypeError(f'create({metric!r}) takes no arguments for a metric instance')
        return metric
    if isinstance(metric, dict):
        config = dict(metric, **kwargs)
        return create(config.pop('metric'), *args, **config)
    if callable(metric):
        return CustomMetric(metric, *args, **kwargs)
    if isinstance(metric, list):
        composite = CompositeEvalMetric()
        for child in metric:
            composite.add(create(child, *args, **kwargs))
        return composite
    if not isinstance(metric, str):
        raise TypeError(f'metric {metric!r}: expected a name, a list, a function or an '
                        'EvalMetric')
    return _lookup(metric)(*args, **kwargs)


def _lookup(name):
    try:
        return _METRICS[name.lower()]
    except KeyError:
        close = difflib.get_close_matches(name.lower(), list(_METRICS), n=1)
        hint = f'; did you mean {close[0]!r}?' if close else ''
        raise ValueError(f'metric {name!r} is not registered; known metrics: '
                         f'{", ".join(sorted(_METRICS))}{hint}') from None


# ----------------------------------------------------------------------------------------------
# Binary and multi-class classification, correlation, likelihood


class _BinaryCounts:
    """True/false positive/negative counts of a binary classifier, locally and globally."""

    FIELDS = ('true_positives', 'false_positives', 'false_negatives', 'true_negatives')

    def __init__(self):
        self.local = dict.fromkeys(self.FIELDS, 0)
        self.total = dict.fromkeys(self.FIELDS, 0)

    def update(self, label, pred, owner):
        pred_label = numpy.argmax(_as_numpy(pred), axis=1)
        label = _as_numpy(label).astype('int32').ravel()
        check_label_shapes(label, pred_label)
        if len(numpy.unique(label)) > 2:
            raise ValueError(f'{owner} supports binary classification only; the labels hold '
                             f'{sorted(numpy.unique(label).tolist())}')
        predicted, actual = pred_label == 1, label == 1
        counts = {'true_positives': predicted & actual, 'false_positives': predicted & ~actual,
                  'false_negatives': ~predicted & actual, 'true_negatives': ~predicted & ~actual}
        for field, hits in counts.items():
            self.local[field] += int(hits.sum())
            self.total[field] += int(hits.sum())

    def reset_local(self):
        self.local = dict.fromkeys(self.FIELDS, 0)

    def reset(self):
        self.reset_local()
        self.total = dict.fromkeys(self.FIELDS, 0)

    def examples(self, use_global=False) -> int:
        return sum((self.total if use_global else self.local).values())

    def fscore(self, use_global=False) -> float:
        counts = self.total if use_global else self.local
        found = counts['true_positives'] + counts['false_positives']
        relevant = counts['true_positives'] + counts['false_negatives']
        precision = counts['true_positives'] / found if found else 0.0
        recall = counts['true_positives'] / relevant if relevant else 0.0
        return 2 * precision * recall / (precision + recall) if precision + recall else 0.0

    def matthewscc(self, use_global=False) -> float:
        counts = self.total if use_global else self.local
        if not self.examples(use_global):
            return 0.0
        tp, fp, fn, tn = (float(counts[field]) for field in self.FIELDS)
        # Zero factors are left out of the denominator, as MXNet does.
        denominator = math.prod(t for t in (tp + fp, tp + fn, tn + fp, tn + fn) if t != 0)
        return (tp * tn - fp * fn) / math.sqrt(denominator)


class _BinaryMetric(EvalMetric):
    """F1 and MCC: 'macro' averages the score of each update, 'micro' scores all counts."""

    def __init__(self, name, output_names=None, label_names=None, average='macro'):
        if average not in ('macro', 'micro'):
            raise ValueError(f"average={average!r}: expected 'macro' or 'micro'")
        self.average = average
        self.counts = _BinaryCounts()
        super().__init__(name, output_names=output_names, label_names=label_names,
                         has_global_stats=True)

    def _score(self, use_global):
        raise NotImplementedError

    def update(self, labels, preds):
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            self.counts.update(label, pred, type(self).__name__)
        if self.average == 'macro':
            self.sum_metric += self._score(False)
            self.global_sum_metric += self._score(True)
            self.num_inst += 1
            self.global_num_inst += 1
            self.counts.reset()
        else:
            self.sum_metric = self._score(False) * self.counts.examples()
            self.global_sum_metric = self._score(True) * self.counts.examples(True)
            self.num_inst = self.counts.examples()
            self.global_num_inst = self.counts.examples(True)

    def reset(self):
        super().reset()
        if hasattr(self, 'counts'):
            self.counts.reset()

    def reset_local(self):
        super().reset_local()
        self.counts.reset_local()


@register
class F1(_BinaryMetric):
    """F1 score of a binary classifier, 2 * precision * recall / (precision + recall); the
    prediction is the argmax over axis 1. 'macro' averages the score of each update, 'micro'
    scores everything seen.

    >>> f1 = F1()
    >>> f1.update([numpy.array([0., 1., 1.])], [numpy.array([[0.3, 0.7], [0., 1.], [0.4, 0.6]])])
    >>> f1.get()
    ('f1', 0.8)
    """

    def __init__(self, name='f1', output_names=None, label_names=None, average='macro'):
        super().__init__(name, output_names, label_names, average)

    def _score(self, use_global):
        return self.counts.fscore(use_global)


@register
class MCC(_BinaryMetric):
    """Matthews correlation coefficient of a binary classifier:
    (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)), from -1 to 1.

    >>> mcc = MCC()
    >>> mcc.update([numpy.array([0, 1, 1, 0])], [numpy.array([[0.8, 0.2], [0.3, 0.7],
    ...                                                       [0.6, 0.4], [0.9, 0.1]])])
    >>> round(mcc.get()[1], 4)
    0.5774
    """

    def __init__(self, name='mcc', output_names=None, label_names=None, average='macro'):
        super().__init__(name, output_names, label_names, average)

    def _score(self, use_global):
        return self.counts.matthewscc(use_global)


@register
@alias('pearsonr')
class PearsonCorrelation(EvalMetric):
    """Pearson correlation of predictions and labels (flattened): 'macro' averages the
    coefficient of each update, 'micro' computes it over everything seen (running means and
    sums of squares, Welford's method).

    >>> pearson = PearsonCorrelation()
    >>> pearson.update([numpy.array([[1, 0], [0, 1], [0, 1]])],
    ...                [numpy.array([[0.3, 0.7], [0, 1.], [0.4, 0.6]])])
    >>> round(pearson.get()[1], 6)
    0.421637
    """

    def __init__(self, name='pearsonr', output_names=None, label_names=None, average='macro'):
        if average not in ('macro', 'micro'):
            raise ValueError(f"average={average!r}: expected 'macro' or 'micro'")
        self.average = average
        super().__init__(name, output_names=output_names, label_names=label_names,
                         has_global_stats=True)

    def reset(self):
        super().reset()
        self._moments = {'label': [0, 0.0, 0.0], 'pred': [0, 0.0, 0.0]}
        self._co_moment = 0.0

    def update(self, labels, preds):
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label = _as_numpy(label).ravel().astype(numpy.float64)
            pred = _as_numpy(pred).ravel().astype(numpy.float64)
            check_label_shapes(label, pred, False, True)
            self.num_inst += 1
            self.global_num_inst += 1
            if self.average == 'macro':
                coefficient = float(numpy.corrcoef(pred, label)[0, 1])
                self.sum_metric += coefficient
                self.global_sum_metric += coefficient
            else:
                self._add_micro(label, pred)

    def _add_micro(self, label, pred):
        _welford(self._moments['label'], label)
        mean_label = self._moments['label'][1]
        self._co_moment += float(numpy.sum((label - mean_label) *
                                           (pred - self._moments['pred'][1])))
        _welford(self._moments['pred'], pred)

    def get(self):
        if self.num_inst == 0:
            return (self.name, float('nan'))
        if self.average == 'macro':
            return (self.name, self.sum_metric / self.num_inst)
        count, _, label_sq = self._moments['label']
        pred_sq = self._moments['pred'][2]
        return (self.name, self._co_moment / math.sqrt(label_sq * pred_sq) if count > 1
                else float('nan'))


def _welford(moments, values):
    """Add `values` to [count, mean, sum of squared deviations] in place (MXNet's variant:
    one mean step for the whole batch)."""
    count, mean, squares = moments
    count += len(values)
    delta = values - mean
    mean += float(numpy.sum(delta / count))
    squares += float(numpy.sum(delta * (values - mean)))
    moments[:] = [count, mean, squares]


@register
class PCC(EvalMetric):
    """The multi-class Matthews correlation coefficient (Pearson's over the K x K confusion
    matrix, which grows with the labels seen); for two classes it equals MCC.

    >>> pcc = PCC()
    >>> pcc.update([numpy.array([0, 1, 2, 2])], [numpy.array([0, 1, 2, 1])])
    >>> round(pcc.get()[1], 4)
    0.7
    """

    def __init__(self, name='pcc', output_names=None, label_names=None,
                 has_global_stats=True):
        self.k = 2
        super().__init__(name, output_names=output_names, label_names=label_names,
                         has_global_stats=has_global_stats)

    def _grow(self, extra):
        self.lcm = numpy.pad(self.lcm, ((0, extra), (0, extra)))
        self.gcm = numpy.pad(self.gcm, ((0, extra), (0, extra)))
        self.k += extra

    @staticmethod
    def _calc_mcc(matrix):
        n = matrix.sum()
        by_pred, by_label = matrix.sum(axis=1), matrix.sum(axis=0)
        cov_pred = numpy.sum(by_pred * (n - by_pred))
        cov_label = numpy.sum(by_label * (n - by_label))
        if cov_pred == 0 or cov_label == 0:
            return float('nan')
        cov = numpy.sum(matrix.diagonal() * n - by_pred * by_label)
        return float(cov / (cov_pred * cov_label) ** 0.5)

    def update(self, labels, preds):
        labels, preds = check_label_shapes(labels, preds, True)
        for label, pred in zip(labels, preds):
            label = _as_numpy(label).astype('int32')
            pred = _as_numpy(pred)
            pred = pred.argmax(axis=1) if pred.shape != label.shape else pred.astype('int32')
            largest = int(max(pred.max(), label.max()))
            if largest >= self.k:
                self._grow(largest + 1 - self.k)
            counts = numpy.zeros((self.k, self.k))
            numpy.add.at(counts, (pred.ravel(), label.ravel()), 1)
            self.lcm += counts
            self.gcm += counts
        self.num_inst += 1
        self.global_num_inst += 1

    @property
    def sum_metric(self):
        return self._calc_mcc(self.lcm) * self.num_inst

    @sum_metric.setter
    def sum_metric(self, value):
        pass    # derived from the confusion matrix

    @property
    def global_sum_metric(self):
        return self._calc_mcc(self.gcm) * self.global_num_inst

    @global_sum_metric.setter
    def global_sum_metric(self, value):
        pass

    def reset(self):
        self.global_num_inst = 0
        self.gcm = numpy.zeros((self.k, self.k))
        self.reset_local()

    def reset_local(self):
        self.num_inst = 0
        self.lcm = numpy.zeros((self.k, self.k))


@register
@alias('nll_loss')
class NegativeLogLikelihood(CrossEntropy):
    """Mean of -log(probability of the label) over the examples; `eps` keeps it finite
    (CrossEntropy under MXNet's other name).

    >>> nll = NegativeLogLikelihood()
    >>> nll.update([numpy.array([0, 1, 1])], [numpy.array([[0.3, 0.7], [0, 1.], [0.4, 0.6]])])
    >>> round(nll.get()[1], 6)
    0.571599
    """

    def __init__(self, eps=1e-12, name='nll-loss', output_names=None, label_names=None):
        super().__init__(eps=eps, name=name, output_names=output_names,
                         label_names=label_names)


@register
class Torch(Loss):
    """The loss of a Torch criterion (:class:`Loss` under MXNet's old name)."""

    def __init__(self, name='torch', output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names)


@register
class Caffe(Loss):
    """The loss of a Caffe layer (:class:`Loss` under MXNet's old name)."""

    def __init__(self, name='caffe', output_names=None, label_names=None):
        super().__init__(name, output_names=output_names, label_names=label_names)
