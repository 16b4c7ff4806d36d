"""SGD and its relatives: SGD with momentum (aggregated over several weights), NAG, Signum."""
from __future__ import annotations

import numpy as np

from ember import config
from ember import ndarray as nd
from ember.optimizer.optimizer import Optimizer, _warn_float16, register

__all__ = ['SGD', 'ccSGD', 'NAG', 'Signum']


def _as_lists(indices, weights, grads, states):
    if isinstance(indices, (list, tuple)):
        return list(indices), list(weights), list(grads), list(states)
    return [indices], [weights], [grads], [states]


def _interleave(*columns):
    """[w0, g0, s0, w1, g1, s1, ...] from the columns [w0, w1], [g0, g1], [s0, s1]."""
    return [item for row in zip(*columns) for item in row]


class _MasterCopyMixin:
    """State ``(state, float32 master copy)`` for float16 weights, as SGD and NAG keep it."""

    def create_state_multi_precision(self, index, weight):
        if self.multi_precision and weight.dtype == np.float16:
            master = weight.astype(np.float32)
            return (self.create_state(index, master), master)
        _warn_float16(self, weight)
        return self.create_state(index, weight)

    def _zeros_like_if_momentum(self, weight):
        if self.momentum == 0.0:
            return None
        return nd.zeros(weight.shape, weight.context, dtype=weight.dtype)


@register
class SGD(_MasterCopyMixin, Optimizer):
    """Stochastic gradient descent with momentum and weight decay::

        rescaled = clip(rescale_grad * grad, clip_gradient) + wd * weight
        state = momentum * state - lr * rescaled        (momentum > 0)
        weight = weight + state                         (or weight - lr * rescaled)

    Up to ``MXNET_OPTIMIZER_AGGREGATION_SIZE`` weights (read when the optimizer is made) are
    updated by one ``multi_*sgd*_update`` operator: :class:`~ember.optimizer.Updater` hands them
    over as lists. ``multi_precision`` keeps float32 master copies of float16 weights.

    >>> import ember as mx
    >>> sgd = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.ones((2,))
    >>> state = sgd.create_state(0, weight)
    >>> sgd.update(0, weight, grad, state)
    >>> sgd.update(0, weight, grad, state)
    >>> weight.asnumpy()
    array([0.71, 0.71], dtype=float32)
    """

    def __init__(self, momentum=0.0, lazy_update=True, **kwargs):
        super().__init__(**kwargs)
        self.momentum = momentum
        self.lazy_update = lazy_update
        self.aggregate_num = config.get('MXNET_OPTIMIZER_AGGREGATION_SIZE')

    def create_state(self, index, weight):
        return self._zeros_like_if_momentum(weight)

    def update(self, index, weight, grad, state):
        self._update_impl(index, weight, grad, state, multi_precision=False)

    def update_multi_precision(self, index, weight, grad, state):
        first = weight[0] if isinstance(index, (list, tuple)) else weight
        mixed = self.multi_precision and first.dtype == np.float16
        self._update_impl(index, weight, grad, state, multi_precision=mixed)

    def _update_impl(self, indices, weights, grads, states, multi_precision):
        indices, weights, grads, states = _as_lists(indices, weights, grads, states)
        self._update_count(indices)
        if not multi_precision and any(w.stype != 'default' or g.stype != 'default'
                                       for w, g in zip(weights, grads)):
            self._update_each(indices, weights, grads, states)
            return
        kwargs = dict(self._op_kwargs(), num_weights=len(weights), out=weights,
                      lrs=tuple(self._get_lrs(indices)), wds=tuple(self._get_wds(indices)))
        # One operator for all the weights: a single engine operation.
        if multi_precision:
            self._multi_mp_update(weights, grads, states, kwargs)
        elif self.momentum > 0:
            nd.multi_sgd_mom_update(*_interleave(weights, grads, states), **kwargs)
        else:
            nd.multi_sgd_update(*_interleave(weights, grads), **kwargs)

    def _update_each(self, indices, weights, grads, states):
        # sparse weights or gradients: one operator each, lazy with a row_sparse gradient
        for index, weight, grad, state in zip(indices, weights, grads, states):
            kwargs = dict(self._op_kwargs(), lr=self._get_lr(index), wd=self._get_wd(index),
                          lazy_update=self.lazy_update, out=weight)
            if state is not None:
                nd.sgd_mom_update(weight, grad, state, **kwargs)
            else:
                nd.sgd_update(weight, grad, **kwargs)

    def _multi_mp_update(self, weights, grads, states, kwargs):
        moms = [state[0] for state in states]
        masters = [state[1] for state in states]
        if self.momentum > 0:
            nd.multi_mp_sgd_mom_update(*_interleave(weights, grads, moms, masters), **kwargs)
        else:
            nd.multi_mp_sgd_update(*_interleave(weights, grads, masters), **kwargs)

    def _op_kwargs(self):
        kwargs = {'rescale_grad': self.rescale_grad, **self._clip_kwargs()}
        if self.momentum > 0:
            kwargs['momentum'] = self.momentum
        return kwargs


@register
class ccSGD(SGD):  # noqa: N801 - MXNet's name
    """Deprecated in MXNet 1.x: the same as :class:`SGD`."""


@register
class NAG(_MasterCopyMixin, Optimizer):
    """Nesterov accelerated gradient::

        rescaled = clip(rescale_grad * grad, clip_gradient) + wd * weight
        state = momentum * state - lr * rescaled
        weight = weight + momentum * state - lr * rescaled

    Without momentum it is plain SGD.

    >>> import ember as mx
    >>> nag = mx.optimizer.NAG(learning_rate=0.1, momentum=0.9)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.ones((2,))
    >>> nag.update(0, weight, grad, nag.create_state(0, weight))
    >>> weight.asnumpy()
    array([0.81, 0.81], dtype=float32)
    """

    def __init__(self, momentum=0.0, **kwargs):
        super().__init__(**kwargs)
        self.momentum = momentum

    def create_state(self, index, weight):
        return self._zeros_like_if_momentum(weight)

    def update(self, index, weight, grad, state):
        self._update_impl(index, weight, grad, state, multi_precision=False)

    def update_multi_precision(self, index, weight, grad, state):
        mixed = (self.multi_precision and weight.dtype == np.float16
                 and isinstance(state, (tuple, list)))
        self._update_impl(index, weight, grad, state, multi_precision=mixed)

    def _update_impl(self, index, weight, grad, state, multi_precision):
        self._update_count(index)
        kwargs = {'rescale_grad': self.rescale_grad, 'lr': self._get_lr(index),
                  'wd': self._get_wd(index), 'out': weight, **self._clip_kwargs()}
        if self.momentum > 0:
            kwargs['momentum'] = self.momentum
        if multi_precision:
            mom, master = state
            if mom is not None:
                nd.mp_nag_mom_update(weight, grad, mom, master, **kwargs)
            else:
                nd.mp_sgd_update(weight, grad, master, **kwargs)
        elif state is not None:
            nd.nag_mom_update(weight, grad, state, **kwargs)
        else:
            nd.sgd_update(weight, grad, **kwargs)


@register
class Signum(Optimizer):
    """signSGD and Signum: step by the sign of the gradient or of its momentum::

        state = momentum * state - (1 - momentum) * (clip(rescale_grad * grad) + wd * weight)
        weight = (1 - lr * wd_lh) * weight + lr * sign(state)

    With ``momentum=0`` it is signSGD: ``weight = (1 - lr*wd) * weight - lr * sign(grad)``.
    ``wd_lh`` is decoupled weight decay.

    >>> import ember as mx
    >>> signum = mx.optimizer.Signum(learning_rate=0.1)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([3., -0.5])
    >>> signum.update(0, weight, grad, signum.create_state(0, weight))
    >>> weight.asnumpy()
    array([0.9, 1.1], dtype=float32)
    """

    def __init__(self, learning_rate=0.01, momentum=0.9, wd_lh=0.0, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.momentum = momentum
        self.wd_lh = wd_lh

    def create_state(self, index, weight):
        if self.momentum == 0.0:
            return None
        return nd.zeros(weight.shape, weight.context, dtype=weight.dtype)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        kwargs = {'rescale_grad': self.rescale_grad, 'lr': self._get_lr(index),
                  'wd': self._get_wd(index), 'out': weight, **self._clip_kwargs()}
        if state is None:
            nd.signsgd_update(weight, grad, **kwargs)
            return
        kwargs['momentum'] = self.momentum
        if self.wd_lh:
            kwargs['wd_lh'] = self.wd_lh
        nd.signum_update(weight, grad, state, **kwargs)
