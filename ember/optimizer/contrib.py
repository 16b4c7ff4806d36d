"""MXNet's ``mx.optimizer.contrib``: GroupAdaGrad, AdaGrad with one rate per row."""
from __future__ import annotations

from ember import ndarray as nd
from ember.ndarray import NDArray, clip, mean, sqrt, square, zeros
from ember.optimizer.optimizer import Optimizer, register

__all__ = ['GroupAdaGrad', 'Optimizer', 'register', 'NDArray', 'clip', 'mean', 'sqrt', 'square',
           'zeros']


@register
class GroupAdaGrad(Optimizer):
    """AdaGrad whose history holds one value per row of a 2-D weight (embeddings)::

        g = clip(rescale_grad * grad, clip_gradient)
        history += mean(square(g), axis=1, keepdims=True)
        weight -= lr * g / sqrt(history + eps)

    Weight decay is not supported.

    >>> import ember as mx
    >>> opt = mx.optimizer.contrib.GroupAdaGrad(learning_rate=1.0, eps=0.0)
    >>> weight = mx.nd.zeros((2, 2))
    >>> opt.update(0, weight, mx.nd.array([[3, 4], [1, 1]]), opt.create_state(0, weight))
    >>> weight.asnumpy().round(3)
    array([[-0.849, -1.131],
           [-1.   , -1.   ]], dtype=float32)
    """

    def __init__(self, eps=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.float_stable_eps = eps

    def create_state(self, index, weight):
        if weight.ndim != 2:
            raise ValueError(f'GroupAdaGrad: weight {index} has shape {weight.shape}; it '
                             'takes 2-D weights (one rate per row)')
        return zeros((weight.shape[0], 1), weight.context)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        lr, wd = self._get_lr(index), self._get_wd(index)
        if wd != 0:
            raise ValueError(f'GroupAdaGrad: weight decay {wd} of weight {index}: not supported')
        grad = grad * self.rescale_grad
        if self.clip_gradient is not None:
            grad = clip(grad, -self.clip_gradient, self.clip_gradient)
        state[:] = state + mean(square(grad), axis=1, keepdims=True)
        weight[:] = weight - lr * grad / sqrt(nd.broadcast_add(state, nd.array(
            [self.float_stable_eps], ctx=state.context)))
