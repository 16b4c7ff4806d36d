"""How the Estimator trains and evaluates on one batch; subclass to change it."""
from __future__ import annotations

from ember import autograd
from ember.gluon.utils import split_and_load

__all__ = ['BatchProcessor']


class BatchProcessor:
    """The Estimator's per-batch work: ``fit_batch`` (forward under autograd and backward,
    on each device's slice of the batch) and ``evaluate_batch`` (forward with the validation
    net and loss). Both return ``(data, label, pred, loss)``, lists with one entry per device.

    >>> import ember as mx
    >>> net = mx.gluon.nn.Dense(1)
    >>> est = mx.gluon.contrib.estimator.Estimator(net, mx.gluon.loss.L2Loss(),
    ...                                             trainer=mx.gluon.Trainer(
    ...                                                 net.collect_params(), 'sgd'))
    >>> batch = (mx.nd.ones((4, 3)), mx.nd.zeros((4, 1)))
    >>> data, label, pred, loss = BatchProcessor().fit_batch(est, batch)
    >>> pred[0].shape, loss[0].shape
    ((4, 1), (4,))
    """

    def _get_data_and_label(self, batch, ctx, batch_axis=0):
        data = split_and_load(batch[0], ctx_list=ctx, batch_axis=batch_axis)
        label = split_and_load(batch[1], ctx_list=ctx, batch_axis=batch_axis)
        return data, label

    def evaluate_batch(self, estimator, val_batch, batch_axis=0):
        """Predictions and losses of the validation net on `val_batch` (data, label)."""
        data, label = self._get_data_and_label(val_batch, estimator.context, batch_axis)
        pred = [estimator.val_net(x) for x in data]
        loss = [estimator.val_loss(y_hat, y) for y_hat, y in zip(pred, label)]
        return data, label, pred, loss

    def fit_batch(self, estimator, train_batch, batch_axis=0):
        """Forward and backward of the training net on `train_batch` (data, label); the
        gradients are left for a GradientUpdateHandler to apply."""
        data, label = self._get_data_and_label(train_batch, estimator.context, batch_axis)
        with autograd.record():
            pred = [estimator.net(x) for x in data]
            loss = [estimator.loss(y_hat, y) for y_hat, y in zip(pred, label)]
        for value in loss:
            value.backward()
        return data, label, pred, loss
