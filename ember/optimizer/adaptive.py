"""Optimizers with per-coordinate step sizes: Adam, AdamW, RMSProp, AdaGrad, AdaDelta, Ftrl,
FTML, LAMB, Adamax and Nadam (MXNet 1.x's update rules)."""
from __future__ import annotations

import math

import numpy as np

from ember import ndarray as nd
from ember.optimizer.optimizer import Optimizer, register

__all__ = ['Adam', 'AdamW', 'RMSProp', 'AdaGrad', 'AdaDelta', 'Ftrl', 'FTRL', 'FTML', 'LAMB',
           'Adamax', 'Nadam']


def _zeros(weight, count):
    """``count`` zero arrays shaped like ``weight`` (a tuple)."""
    return tuple(nd.zeros(weight.shape, weight.context, dtype=weight.dtype)
                 for _ in range(count))


def _bias_correction(beta1, beta2, t):
    """Adam's bias correction of step ``t``, folded into the learning rate."""
    return math.sqrt(1. - beta2 ** t) / (1. - beta1 ** t)


@register
class Adam(Optimizer):
    """Adam, with the bias correction folded into the learning rate::

        g = clip(rescale_grad * grad + wd * weight, clip_gradient)
        mean = beta1 * mean + (1 - beta1) * g
        var = beta2 * var + (1 - beta2) * g**2
        weight -= lr * sqrt(1 - beta2**t) / (1 - beta1**t) * mean / (sqrt(var) + epsilon)

    >>> import ember as mx
    >>> adam = mx.optimizer.Adam(learning_rate=0.1)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([1., -1.])
    >>> adam.update(0, weight, grad, adam.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([0.9, 1.1], dtype=float32)
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 lazy_update=True, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lazy_update = lazy_update

    def create_state(self, index, weight):
        return _zeros(weight, 2)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        t = self._index_update_count[index]
        lr = self._get_lr(index) * _bias_correction(self.beta1, self.beta2, t)
        mean, var = state
        nd.adam_update(weight, grad, mean, var, out=weight, lazy_update=self.lazy_update,
                       lr=lr, wd=self._get_wd(index), beta1=self.beta1, beta2=self.beta2,
                       epsilon=self.epsilon, rescale_grad=self.rescale_grad,
                       **self._clip_kwargs())


@register
class AdamW(Optimizer):
    """Adam with decoupled weight decay (MXNet's ``adamw_update`` operator)::

        g = clip(rescale_grad * grad, clip_gradient)
        mean, var as in Adam
        weight -= eta * (mean / (sqrt(var) + epsilon) + wd * weight)

    where ``eta`` is the learning rate, times Adam's bias correction ``sqrt(1 - beta2**t) /
    (1 - beta1**t)`` with ``correct_bias``. This is MXNet 2's ``optimizer.AdamW`` (MXNet 1.x
    has the operator only, as ``contrib.adamw_update``); the operator skips the step when the
    scaled gradient overflowed (a NaN or infinite ``rescale_grad``).

    >>> import ember as mx
    >>> adamw = mx.optimizer.AdamW(learning_rate=0.1, wd=0.5)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([1., -1.])
    >>> adamw.update(0, weight, grad, adamw.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([0.8842, 1.0842], dtype=float32)
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-6,
                 correct_bias=True, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.correct_bias = correct_bias

    def create_state(self, index, weight):
        return _zeros(weight, 2)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        eta = self._get_lr(index)
        if self.correct_bias:
            t = self._index_update_count[index]
            eta *= _bias_correction(self.beta1, self.beta2, t)
        # The operator takes rescale_grad as an array so that loss scaling can skip a step.
        scale = nd.full((1,), self.rescale_grad, ctx=weight.context, dtype=np.float32)
        mean, var = state
        nd.adamw_update(weight, grad, mean, var, scale, out=weight, lr=1.0, eta=eta,
                        wd=self._get_wd(index), beta1=self.beta1, beta2=self.beta2,
                        epsilon=self.epsilon, **self._clip_kwargs())


@register
class RMSProp(Optimizer):
    """RMSProp: Tieleman & Hinton's, or Graves' centred form with ``centered=True``::

        g = clip(rescale_grad * grad + wd * weight, clip_gradient)
        n = (1 - gamma1) * g**2 + gamma1 * n
        weight -= lr * g / sqrt(n + epsilon)                              (centered=False)

        m = (1 - gamma1) * g + gamma1 * m
        delta = gamma2 * delta - lr * g / sqrt(n - m**2 + epsilon)        (centered=True)
        weight += delta

    ``clip_weights`` clips the new weight to ``[-clip_weights, clip_weights]``.

    >>> import ember as mx
    >>> rms = mx.optimizer.RMSProp(learning_rate=0.1, gamma1=0.75)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([2., -2.])
    >>> rms.update(0, weight, grad, rms.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([0.8, 1.2], dtype=float32)
    """

    def __init__(self, learning_rate=0.001, gamma1=0.9, gamma2=0.9, epsilon=1e-8,
                 centered=False, clip_weights=None, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.gamma1, self.gamma2, self.epsilon = gamma1, gamma2, epsilon
        self.centered = centered
        self.clip_weights = clip_weights

    def create_state(self, index, weight):
        return _zeros(weight, 3 if self.centered else 1)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        kwargs = {'lr': self._get_lr(index), 'wd': self._get_wd(index), 'gamma1': self.gamma1,
                  'epsilon': self.epsilon, 'rescale_grad': self.rescale_grad, 'out': weight,
                  **self._clip_kwargs()}
        if self.clip_weights:
            kwargs['clip_weights'] = self.clip_weights
        if self.centered:
            nd.rmspropalex_update(weight, grad, *state, gamma2=self.gamma2, **kwargs)
        else:
            nd.rmsprop_update(weight, grad, state[0], **kwargs)


@register
class AdaGrad(Optimizer):
    """AdaGrad::

        g = clip(rescale_grad * grad, clip_gradient)
        history += g**2
        weight -= lr * (g / sqrt(history + eps) + wd * weight)

    >>> import ember as mx
    >>> adagrad = mx.optimizer.AdaGrad(learning_rate=0.1)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([2., -2.])
    >>> adagrad.update(0, weight, grad, adagrad.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([0.9, 1.1], dtype=float32)
    """

    def __init__(self, eps=1e-7, **kwargs):
        super().__init__(**kwargs)
        self.float_stable_eps = eps

    def create_state(self, index, weight):
        return _zeros(weight, 1)[0]

    def update(self, index, weight, grad, state):
        self._update_count(index)
        nd.adagrad_update(weight, grad, state, out=weight, lr=self._get_lr(index),
                          wd=self._get_wd(index), epsilon=self.float_stable_eps,
                          rescale_grad=self.rescale_grad, **self._clip_kwargs())


@register
class AdaDelta(Optimizer):
    """AdaDelta (no learning rate: the accumulators set the step)::

        g = clip(rescale_grad * grad, clip_gradient)
        acc_g = rho * acc_g + (1 - rho) * g**2
        delta = sqrt(acc_delta + epsilon) / sqrt(acc_g + epsilon) * g
        acc_delta = rho * acc_delta + (1 - rho) * delta**2
        weight -= delta + wd * weight

    >>> import ember as mx
    >>> adadelta = mx.optimizer.AdaDelta(rho=0.5, epsilon=0.25)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([1., -1.])
    >>> adadelta.update(0, weight, grad, adadelta.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([0.4226, 1.5774], dtype=float32)
    """

    def __init__(self, rho=0.90, epsilon=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.rho, self.epsilon = rho, epsilon

    def create_state(self, index, weight):
        return _zeros(weight, 2)

    def update(self, index, weight, grad, state):
        wd = self._get_wd(index)
        self._update_count(index)
        acc_g, acc_delta = state
        nd.adadelta_update(weight, grad, acc_g, acc_delta, out=weight, rho=self.rho,
                           epsilon=self.epsilon, wd=wd, rescale_grad=self.rescale_grad,
                           **self._clip_kwargs())


@register
class Ftrl(Optimizer):
    """FTRL-proximal ("Ad Click Prediction: a View from the Trenches")::

        g = clip(rescale_grad * grad, clip_gradient)
        z += g - (sqrt(n + g**2) - sqrt(n)) * weight / lr
        n += g**2
        weight = (sign(z) * lamda1 - z) / ((beta + sqrt(n)) / lr + wd) * (abs(z) > lamda1)

    >>> import ember as mx
    >>> ftrl = mx.optimizer.Ftrl(learning_rate=0.5, lamda1=0.5)
    >>> weight, grad = mx.nd.zeros((2,)), mx.nd.array([2., -3.])
    >>> ftrl.update(0, weight, grad, ftrl.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([-0.25  ,  0.3125], dtype=float32)
    """

    def __init__(self, lamda1=0.01, learning_rate=0.1, beta=1, **kwargs):
        super().__init__(**kwargs)
        self.lamda1, self.beta = lamda1, beta
        # Set after the base class, as MXNet does: it is the rate even with an lr_scheduler.
        self.lr = learning_rate

    def create_state(self, index, weight):
        return _zeros(weight, 2)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        z, n = state
        nd.ftrl_update(weight, grad, z, n, out=weight, lr=self._get_lr(index),
                       wd=self._get_wd(index), lamda1=self.lamda1, beta=self.beta,
                       rescale_grad=self.rescale_grad, **self._clip_kwargs())


FTRL = Ftrl


@register
class FTML(Optimizer):
    """Follow the Moving Leader (Zheng & Kwok, 2017), MXNet's ``ftml_update``::

        g = clip(rescale_grad * grad + wd * weight, clip_gradient)
        v = beta2 * v + (1 - beta2) * g**2
        d_t = (1 - beta1**t) / lr * (sqrt(v / (1 - beta2**t)) + epsilon)
        z = beta1 * z + (1 - beta1) * g - (d_t - beta1 * d) * weight
        weight = -z / d_t

    >>> import ember as mx
    >>> ftml = mx.optimizer.FTML(learning_rate=0.1, beta1=0.5, beta2=0.5, epsilon=0.)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([1., -1.])
    >>> ftml.update(0, weight, grad, ftml.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([0.9, 1.1], dtype=float32)
    """

    def __init__(self, beta1=0.6, beta2=0.999, epsilon=1e-8, **kwargs):
        super().__init__(**kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index, weight):
        return _zeros(weight, 3)        # d, v, z

    def update(self, index, weight, grad, state):
        self._update_count(index)
        kwargs = {'clip_grad': self.clip_gradient} if self.clip_gradient else {}
        nd.ftml_update(weight, grad, *state, out=weight, lr=self._get_lr(index),
                       wd=self._get_wd(index), beta1=self.beta1, beta2=self.beta2,
                       epsilon=self.epsilon, rescale_grad=self.rescale_grad,
                       t=self._index_update_count[index], **kwargs)


@register
class LAMB(Optimizer):
    """LAMB (You et al., 2019): Adam's direction scaled per layer by ``|weight| / |step|``::

        g = clip(rescale_grad * grad, clip_gradient)
        mean, var as in Adam, bias-corrected with bias_correction
        step = mean / (sqrt(var) + epsilon) + wd * weight
        r1 = clip(norm(weight), lower_bound, upper_bound); r2 = norm(step)
        weight -= lr * (r1 / r2 if r1 > 0 and r2 > 0 else 1) * step

    Each weight is one ``lamb_update_phase1`` and one ``lamb_update_phase2`` (MXNet's
    aggregated ``multi_lamb_update`` is not provided).

    >>> import ember as mx
    >>> lamb = mx.optimizer.LAMB(learning_rate=0.1)
    >>> weight, grad = mx.nd.array([3., 4.]), mx.nd.array([1., -1.])
    >>> lamb.update(0, weight, grad, lamb.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([2.6464, 4.3536], dtype=float32)
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-6,
                 lower_bound=None, upper_bound=None, bias_correction=True, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        self.bias_correction = bias_correction

    def create_state(self, index, weight):
        return _zeros(weight, 2)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        mean, var = state
        step = nd.lamb_update_phase1(
            weight, grad, mean, var, beta1=self.beta1, beta2=self.beta2, epsilon=self.epsilon,
            t=self._index_update_count[index], bias_correction=self.bias_correction,
            wd=self._get_wd(index), rescale_grad=self.rescale_grad, **self._clip_kwargs())
        bounds = {}
        if self.lower_bound:
            bounds['lower_bound'] = self.lower_bound
        if self.upper_bound:
            bounds['upper_bound'] = self.upper_bound
        nd.lamb_update_phase2(weight, step, nd.norm(weight), nd.norm(step), out=weight,
                              lr=self._get_lr(index), **bounds)


@register
class Adamax(Optimizer):
    """AdaMax, Adam under the infinity norm (Kingma & Ba, section 7)::

        g = clip(rescale_grad * grad + wd * weight, clip_gradient)
        m = beta1 * m + (1 - beta1) * g
        u = maximum(beta2 * u, abs(g))
        weight -= lr / (1 - beta1**t) * m / u

    >>> import ember as mx
    >>> adamax = mx.optimizer.Adamax(learning_rate=0.1)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([2., -2.])
    >>> adamax.update(0, weight, grad, adamax.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([0.9, 1.1], dtype=float32)
    """

    def __init__(self, learning_rate=0.002, beta1=0.9, beta2=0.999, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2 = beta1, beta2

    def create_state(self, index, weight):
        return _zeros(weight, 2)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        t = self._index_update_count[index]
        lr = self._get_lr(index) / (1. - self.beta1 ** t)
        g = _decayed_gradient(self, grad, weight, self._get_wd(index))
        m, u = state
        m[:] = self.beta1 * m + (1. - self.beta1) * g
        u[:] = nd.maximum(self.beta2 * u, nd.abs(g))
        weight[:] -= lr * m / u


@register
class Nadam(Optimizer):
    """Adam with Nesterov momentum (Dozat, 2016) and its momentum warm-up schedule::

        g = clip(rescale_grad * grad + wd * weight, clip_gradient)
        mu_t = beta1 * (1 - 0.5 * 0.96**(t * schedule_decay)); mu_t+1 likewise
        m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g**2
        m_bar = (1 - mu_t) * g / (1 - prod(mu_1..mu_t)) + mu_t+1 * m / (1 - prod(mu_1..mu_t+1))
        weight -= lr * m_bar / (sqrt(v / (1 - beta2**t)) + epsilon)

    The product of the momenta, ``m_schedule``, is one for the whole optimizer, as in MXNet.

    >>> import ember as mx
    >>> nadam = mx.optimizer.Nadam(learning_rate=0.1)
    >>> weight, grad = mx.nd.ones((2,)), mx.nd.array([1., -1.])
    >>> nadam.update(0, weight, grad, nadam.create_state(0, weight))
    >>> weight.asnumpy().round(4)
    array([0.8944, 1.1056], dtype=float32)
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 schedule_decay=0.004, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.schedule_decay = schedule_decay
        self.m_schedule = 1.

    def create_state(self, index, weight):
        return _zeros(weight, 2)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        lr, t = self._get_lr(index), self._index_update_count[index]
        g = _decayed_gradient(self, grad, weight, self._get_wd(index))
        momentum_t = self._momentum_at(t)
        momentum_next = self._momentum_at(t + 1)
        self.m_schedule = self.m_schedule * momentum_t
        m_schedule_next = self.m_schedule * momentum_next
        m, v = state
        m[:] = self.beta1 * m + (1. - self.beta1) * g
        v[:] = self.beta2 * v + (1. - self.beta2) * g * g
        m_bar = ((1. - momentum_t) * g / (1. - self.m_schedule)
                 + momentum_next * m / (1. - m_schedule_next))
        v_hat = v / (1. - self.beta2 ** t)
        weight[:] -= lr * m_bar / (nd.sqrt(v_hat) + self.epsilon)

    def _momentum_at(self, t):
        return self.beta1 * (1. - 0.5 * 0.96 ** (t * self.schedule_decay))


def _decayed_gradient(optimizer, grad, weight, wd):
    """clip(rescale_grad * grad + wd * weight, clip_gradient), as a new array."""
    g = grad * optimizer.rescale_grad + wd * weight
    if optimizer.clip_gradient is not None:
        g = nd.clip(g, -optimizer.clip_gradient, optimizer.clip_gradient)
    return g
