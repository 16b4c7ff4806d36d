"""SGD's relatives for large batches (LARS, LBSGD), asynchronous training (DCASGD), sampling
(SGLD), and the Test optimizer of MXNet's own tests."""
from __future__ import annotations

import logging
import math

import numpy as np

from ember import ndarray as nd
from ember.optimizer.optimizer import Optimizer, _warn_float16, register
from ember.optimizer.sgd import SGD

__all__ = ['LARS', 'LBSGD', 'DCASGD', 'SGLD', 'Test']

# Layers whose rate LARS leaves alone: normalisation scales and shifts, biases.
_NOT_SCALED = ('gamma', 'beta', 'bias')


def _l2_norm(array, scale=1.0) -> float:
    return float(nd.norm(array.astype('float32')).asnumpy().reshape(-1)[0]) * scale


def _clipped(optimizer, grad):
    grad = grad * optimizer.rescale_grad
    if optimizer.clip_gradient is not None:
        grad = nd.clip(grad, -optimizer.clip_gradient, optimizer.clip_gradient)
    return grad


@register
class LARS(SGD):
    """SGD with momentum whose rate is scaled per layer (Layer-wise Adaptive Rate Scaling)::

        lr_layer = lr * eta * |w| / (|rescale_grad * g| + wd * |w| + eps)

    when both norms are positive, else ``lr``; normalisation and bias parameters (names
    ending in gamma, beta or bias) keep ``lr``. With ``momentum_correction`` the momentum is
    scaled by the change of the global rate since the last step (a scheduler's).

    >>> import ember as mx
    >>> lars = mx.optimizer.LARS(learning_rate=0.1, eta=0.5)
    >>> weight, grad = mx.nd.array([3.0, 4.0]), mx.nd.array([0.6, 0.8])
    >>> lars.update(0, weight, grad, lars.create_state(0, weight))
    >>> weight.asnumpy().round(4)    # lr * 0.5 * 5 / 1 = 0.25
    array([2.85, 3.8 ], dtype=float32)
    """

    def __init__(self, momentum=0.0, lazy_update=True, eta=0.001, eps=0,
                 momentum_correction=True, **kwargs):
        super().__init__(momentum=momentum, lazy_update=lazy_update, **kwargs)
        self.eta = eta
        self.eps = eps
        self.momentum_correction = momentum_correction
        self.last_lr = None
        self.cur_lr = None

    def set_wd_mult(self, args_wd_mult):
        """Weight decay applies to weights only (names ending in _weight), as in MXNet."""
        super().set_wd_mult(args_wd_mult)
        for name in self.idx2name.values():
            if not name.endswith('_weight') and name not in args_wd_mult:
                self.wd_mult[name] = 0.0

    def _get_lrs(self, indices):
        rate = self.learning_rate
        self.last_lr = rate if self.cur_lr is None else self.cur_lr
        self.cur_lr = rate
        return super()._get_lrs(indices)

    def _update_impl(self, indices, weights, grads, states, multi_precision):
        indices, weights, grads, states = _as_lists(indices, weights, grads, states)
        self._update_count(indices)
        lrs = [self._layer_rate(index, weight, grad, lr, wd) for index, weight, grad, lr, wd in
               zip(indices, weights, grads, self._get_lrs(indices), self._get_wds(indices))]
        kwargs = dict(rescale_grad=self.rescale_grad, **self._clip_kwargs(),
                      num_weights=len(weights), out=weights, lrs=tuple(lrs),
                      wds=tuple(self._get_wds(indices)))
        if self.momentum > 0:
            kwargs['momentum'] = self._corrected_momentum()
        if multi_precision:
            self._multi_mp_update(weights, grads, states, kwargs)
        elif self.momentum > 0:
            nd.multi_sgd_mom_update(*_interleave(weights, grads, states), **kwargs)
        else:
            nd.multi_sgd_update(*_interleave(weights, grads), **kwargs)

    def _layer_rate(self, index, weight, grad, lr, wd):
        name = self.idx2name.get(index, str(index))
        if name.endswith(_NOT_SCALED):
            return lr
        weight_norm = _l2_norm(weight)
        grad_norm = _l2_norm(grad, self.rescale_grad)
        if weight_norm > 0 and grad_norm > 0:
            return lr * self.eta * weight_norm / (grad_norm + wd * weight_norm + self.eps)
        return lr

    def _corrected_momentum(self):
        if self.momentum_correction and self.last_lr:
            return self.momentum * self.cur_lr / self.last_lr
        return self.momentum


def _as_lists(indices, weights, grads, states):
    if isinstance(indices, (list, tuple)):
        return list(indices), list(weights), list(grads), list(states)
    return [indices], [weights], [grads], [states]


def _interleave(*columns):
    return [item for row in zip(*columns) for item in row]


@register
class LBSGD(Optimizer):
    """Large-batch SGD: gradients of ``batch_scale`` calls are summed, and every
    ``batch_scale``-th call makes one SGD (with momentum) step with their mean, its rate
    multiplied by a warm-up factor rising from 1 to ``batch_scale`` over ``warmup_epochs *
    updates_per_epoch`` updates ('linear', 'power2' or 'sqrt'), or by LARS's layer-wise
    factor (``warmup_strategy='lars'``, clipped to [0.01, 100]). Other calls change nothing.

    >>> import ember as mx
    >>> opt = mx.optimizer.LBSGD(learning_rate=0.1, batch_scale=2, warmup_epochs=0)
    >>> weight, state = mx.nd.ones((1,)), None
    >>> opt.update(0, weight, mx.nd.array([1.0]), state); weight.asnumpy()
    array([1.], dtype=float32)
    >>> opt.update(0, weight, mx.nd.array([3.0]), state); weight.asnumpy()  # 1 - 0.1*2*2
    array([0.6], dtype=float32)
    """

    def __init__(self, momentum=0.0, multi_precision=False, warmup_strategy='linear',
                 warmup_epochs=5, batch_scale=1, updates_per_epoch=32, begin_epoch=0,
                 num_epochs=60, **kwargs):
        super().__init__(multi_precision=multi_precision, **kwargs)
        if warmup_strategy not in ('linear', 'power2', 'sqrt', 'lars'):
            raise ValueError(f"LBSGD: warmup_strategy={warmup_strategy!r}: expected 'linear', "
                             "'power2', 'sqrt' or 'lars'")
        logging.info('Large-batch SGD: batch_scale=%s, warmup_epochs=%s, warmup_strategy=%s, '
                     'updates_per_epoch=%s', batch_scale, warmup_epochs, warmup_strategy,
                     updates_per_epoch)
        self.momentum = momentum
        self.warmup_strategy = warmup_strategy
        self.warmup_epochs = warmup_epochs
        self.batch_scale = batch_scale
        self.updates_per_epoch = updates_per_epoch
        self.init_updates = begin_epoch * updates_per_epoch
        self.num_epochs = num_epochs
        self.cumgrads = {}

    def create_state(self, index, weight):
        if self.multi_precision and weight.dtype == np.float16:
            master = weight.astype(np.float32)
            momentum = (nd.zeros(weight.shape, weight.context, dtype=np.float32)
                        if self.momentum != 0.0 else None)
            return (momentum, master)
        _warn_float16(self, weight)
        if self.momentum == 0.0:
            return None
        return nd.zeros(weight.shape, weight.context, dtype=weight.dtype)

    def _get_lbmult(self, nup):
        """The warm-up factor after `nup` accumulated updates."""
        warmup = self.warmup_epochs * self.updates_per_epoch
        most = float(self.batch_scale)
        if nup >= warmup:
            return most
        if warmup <= 1:
            return 1.0
        progress = {'linear': nup / warmup, 'power2': (nup / warmup) ** 2,
                    'sqrt': math.sqrt(nup / warmup)}.get(self.warmup_strategy, 0.0)
        return 1.0 + (most - 1) * progress

    def _get_lars(self, weight, g, wd):
        """LARS's factor sqrt(|w|^2 / (|g|^2 + wd |w|^2)), clipped to [0.01, 100]."""
        weight_sq = float((weight * weight).asnumpy().sum())
        grad_sq = float((g * g).asnumpy().sum())
        return min(max(math.sqrt(weight_sq / (grad_sq + wd * weight_sq + 1e-18)), 0.01), 100.0)

    def _cumulate_gradient(self, grad, index):
        previous = self.cumgrads.get(index)
        if previous and previous['num_cums'] > 0:
            total = {'cum_grad': previous['cum_grad'] + grad,
                     'num_cums': previous['num_cums'] + 1}
        else:
            total = {'cum_grad': grad, 'num_cums': self.init_updates + 1}
        self.cumgrads[index] = total
        return total

    def update(self, index, weight, grad, state):
        lr, wd = self._get_lr(index), self._get_wd(index)
        self._update_count(index)
        total = self._cumulate_gradient(grad, index)
        if total['num_cums'] % self.batch_scale != 0:
            return
        grad = total['cum_grad'] / self.batch_scale
        factor = (self._get_lars(weight, grad, wd) if self.warmup_strategy == 'lars'
                  else self._get_lbmult(total['num_cums']))
        self._step(weight, grad, state, lr * factor, wd)
        self.cumgrads[index]['cum_grad'] = 0

    def _step(self, weight, grad, state, lr, wd):
        kwargs = {'rescale_grad': self.rescale_grad, 'lr': lr, 'wd': wd, 'out': weight,
                  **self._clip_kwargs()}
        if self.momentum > 0:
            kwargs['momentum'] = self.momentum
        if isinstance(state, (list, tuple)):
            momentum, master = state
            if momentum is not None:
                nd.mp_sgd_mom_update(weight, grad, momentum, master, **kwargs)
            else:
                nd.mp_sgd_update(weight, grad, master, **kwargs)
        elif state is not None:
            nd.sgd_mom_update(weight, grad, state, **kwargs)
        else:
            nd.sgd_update(weight, grad, **kwargs)


@register
class DCASGD(Optimizer):
    """Delay-compensated asynchronous SGD: the gradient is corrected for the weight having
    moved since it was computed::

        step = -lr * (g + wd * w + lamda * g * g * (w - w_previous))
        mom = momentum * mom + step   (or step without momentum);  w_previous = w;  w += mom

    >>> import ember as mx
    >>> opt = mx.optimizer.DCASGD(learning_rate=0.1, lamda=1.0)
    >>> weight = mx.nd.array([1.0])
    >>> state = opt.create_state(0, weight)
    >>> weight[:] = 2.0        # moved since the state's copy was taken
    >>> opt.update(0, weight, mx.nd.array([1.0]), state); weight.asnumpy()  # 2 - 0.1*(1+1)
    array([1.8], dtype=float32)
    """

    def __init__(self, momentum=0.0, lamda=0.04, **kwargs):
        super().__init__(**kwargs)
        self.momentum = momentum
        self.weight_previous = {}
        self.lamda = lamda

    def create_state(self, index, weight):
        momentum = (nd.zeros(weight.shape, weight.context, dtype=weight.dtype)
                    if self.momentum != 0.0 else None)
        return (momentum, weight.copy())

    def update(self, index, weight, grad, state):
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        grad = _clipped(self, grad)
        momentum, previous = state
        step = -lr * (grad + wd * weight + self.lamda * grad * grad * (weight - previous))
        if momentum is not None:
            momentum[:] = momentum * self.momentum + step
            step = momentum
        previous[:] = weight
        weight[:] = weight + step


@register
class SGLD(Optimizer):
    """Stochastic gradient Langevin dynamics: half a gradient step plus Gaussian noise of
    variance lr, so that the weights sample the posterior rather than settle::

        w += -lr / 2 * (g + wd * w) + normal(0, sqrt(lr))
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def create_state(self, index, weight):
        return None

    def update(self, index, weight, grad, state):
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        grad = _clipped(self, grad)
        noise = nd.random.normal(0, math.sqrt(lr), shape=weight.shape, dtype=weight.dtype,
                                 ctx=weight.context)
        weight[:] = weight - lr / 2 * (grad + wd * weight) + noise


@register
class Test(Optimizer):
    """MXNet's optimizer for tests: ``w += rescale_grad * g``; the state copies the weight.

    >>> import ember as mx
    >>> opt, weight = mx.optimizer.Test(rescale_grad=0.5), mx.nd.ones((2,))
    >>> state = opt.create_state(0, weight)
    >>> opt.update(0, weight, mx.nd.ones((2,)), state); state.asnumpy()
    array([1.5, 1.5], dtype=float32)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def create_state(self, index, weight):
        return nd.zeros(weight.shape, weight.context)

    def update(self, index, weight, grad, state):
        weight[:] = weight + grad * self.rescale_grad
        state[:] = weight
