"""The dynamic loss scale of AMP: high enough that small float16 gradients do not vanish,
lowered whenever a gradient overflows.

>>> import ember as mx
>>> scaler = LossScaler()
>>> scaler.loss_scale
65536.0
>>> class P:
...     grad_req = 'write'
...     def __init__(self, g): self._g = g
...     def list_grad(self): return [self._g]
>>> scaler.has_overflow([P(mx.nd.array([1.0, float('inf')]))]), scaler.loss_scale
(True, 65536.0)
>>> scaler.has_overflow([P(mx.nd.array([1.0]))]), scaler.loss_scale  # the halving applies now
(False, 32768.0)
"""
from __future__ import annotations

import logging

from ember.ndarray import multi_all_finite

__all__ = ['LossScaler', 'multi_all_finite']

_log = logging.getLogger(__name__)


class LossScaler:
    """Starts at 2**16; an overflow halves it (from the next step on); 2000 steps without one
    double it, up to 2**24."""

    def __init__(self, initial=2.0 ** 16, largest=2.0 ** 24, window=2000):
        self._loss_scale = float(initial)
        self._next_loss_scale = self._loss_scale
        self._largest = float(largest)
        self._window = int(window)
        self._clean_steps = 0

    @property
    def loss_scale(self) -> float:
        return self._loss_scale

    def has_overflow(self, params) -> bool:
        """Whether a gradient of `params` holds an infinity or a NaN; moves the scale on."""
        grads = [grad for param in params if param.grad_req != 'null'
                 for grad in param.list_grad()]
        # one operator over every gradient, one value read back (MXNet's way)
        overflow = bool(grads) and not multi_all_finite(
            *grads, num_arrays=len(grads)).asscalar()
        self._loss_scale = self._next_loss_scale
        if overflow:
            self._next_loss_scale = self._loss_scale / 2.0
            self._clean_steps = 0
            _log.info('AMP: decreasing the loss scale to %g', self._next_loss_scale)
            return True
        self._clean_steps += 1
        if self._clean_steps == self._window:
            self._clean_steps = 0
            self._next_loss_scale = min(self._largest, self._loss_scale * 2.0)
            _log.info('AMP: increasing the loss scale to %g', self._next_loss_scale)
        return False
