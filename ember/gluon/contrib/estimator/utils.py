"""Checks the Estimator and its handlers share: metric lists, and the metric a loss suggests."""
from __future__ import annotations

from ember.gluon.loss import SoftmaxCrossEntropyLoss
from ember.metric import Accuracy, CompositeEvalMetric, EvalMetric

__all__ = ['Accuracy', 'CompositeEvalMetric', 'EvalMetric', 'SoftmaxCrossEntropyLoss']


def _check_metrics(metrics) -> list:
    """A list of EvalMetrics from one metric, a composite (flattened) or a list (None: [])."""
    if isinstance(metrics, CompositeEvalMetric):
        return [leaf for metric in metrics.metrics for leaf in _check_metrics(metric)]
    if isinstance(metrics, EvalMetric):
        return [metrics]
    metrics = list(metrics or [])
    wrong = [m for m in metrics if not isinstance(m, EvalMetric)]
    if wrong:
        raise ValueError(f'metrics must be an EvalMetric or a list of them (mx.metric), got '
                         f'{wrong[0]!r}')
    return metrics


def _check_handler_metric_ref(handler, known_metrics) -> None:
    """A handler may only watch metrics the estimator updates (its train or val metrics)."""
    for attribute in ('metrics', 'monitor'):
        reference = getattr(handler, attribute, None)
        for metric in reference if isinstance(reference, list) else [reference]:
            if metric is not None and metric not in known_metrics:
                raise ValueError(f'event handler {type(handler).__name__} refers to the metric '
                                 f'{metric!r}, which is neither among estimator.train_metrics '
                                 f'nor estimator.val_metrics; use one of those')


def _suggest_metric_for_loss(loss):
    """Accuracy for a softmax cross-entropy loss, else None."""
    return Accuracy() if isinstance(loss, SoftmaxCrossEntropyLoss) else None
