"""Learning-rate schedules (MXNet 1.x's ``mx.lr_scheduler``).

A scheduler is called with the number of updates done so far and returns the learning rate for
the next one. Every scheduler can start with a warm-up: ``warmup_steps`` updates that rise
linearly from ``warmup_begin_lr`` to ``base_lr`` (or stay at ``warmup_begin_lr`` with
``warmup_mode='constant'``). The optimizer sets ``base_lr`` from its ``learning_rate``.

>>> from ember import lr_scheduler
>>> schedule = lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=1.0)
>>> [schedule(n) for n in range(1, 7)]
[1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
"""
from __future__ import annotations

import logging
import math

__all__ = ['LRScheduler', 'FactorScheduler', 'MultiFactorScheduler', 'PolyScheduler',
           'CosineScheduler']

_log = logging.getLogger(__name__)
WARMUP_MODES = ('linear', 'constant')


def _require_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f'{name}={value!r}: expected an integer >= {low}')
    if value < low:
        raise ValueError(f'{name}={value!r}: expected an integer >= {low}')


def _check_factor(factor):
    if factor > 1.0:
        raise ValueError(f'factor={factor!r}: expected a number <= 1 so that the learning rate '
                         'decreases')


class LRScheduler:
    """Base class: holds ``base_lr`` and computes the warm-up.

    >>> schedule = LRScheduler(base_lr=0.1, warmup_steps=4, warmup_begin_lr=0.02)
    >>> [round(schedule.get_warmup_lr(n), 4) for n in range(4)]
    [0.02, 0.04, 0.06, 0.08]
    """

    def __init__(self, base_lr=0.01, warmup_steps=0, warmup_begin_lr=0, warmup_mode='linear'):
        _require_int('warmup_steps', warmup_steps, 0)
        if warmup_begin_lr > base_lr:
            raise ValueError(f'warmup_begin_lr={warmup_begin_lr!r}: expected at most '
                             f'base_lr={base_lr!r}')
        if warmup_mode not in WARMUP_MODES:
            raise ValueError(f"warmup_mode={warmup_mode!r}: expected 'linear' or 'constant'")
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.warmup_final_lr = base_lr
        self.warmup_begin_lr = warmup_begin_lr
        self.warmup_mode = warmup_mode

    def get_warmup_lr(self, num_update):
        """The learning rate of update ``num_update`` (< warmup_steps) during the warm-up."""
        if num_update >= self.warmup_steps:
            raise ValueError(f'num_update={num_update} is past the warm-up of '
                             f'{self.warmup_steps} steps')
        if self.warmup_mode == 'constant':
            return self.warmup_begin_lr
        rise = self.warmup_final_lr - self.warmup_begin_lr
        return self.warmup_begin_lr + rise * float(num_update) / float(self.warmup_steps)

    def __call__(self, num_update):
        raise NotImplementedError(f'{type(self).__name__} must define __call__(num_update)')


class FactorScheduler(LRScheduler):
    """Multiply the rate by ``factor`` every ``step`` updates, down to ``stop_factor_lr``.

    The rate changes once ``num_update`` passes a multiple of ``step``. The scheduler keeps
    the decayed rate in ``base_lr``, so calls must come with non-decreasing ``num_update``.

    >>> schedule = FactorScheduler(step=10, factor=0.5, stop_factor_lr=0.2, base_lr=1.0)
    >>> [schedule(n) for n in (10, 11, 21, 31, 41)]
    [1.0, 0.5, 0.25, 0.2, 0.2]
    """

    def __init__(self, step, factor=1, stop_factor_lr=1e-8, base_lr=0.01, warmup_steps=0,
                 warmup_begin_lr=0, warmup_mode='linear'):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if step < 1:
            raise ValueError(f'step={step!r}: expected a number of updates >= 1')
        _check_factor(factor)
        self.step = step
        self.factor = factor
        self.stop_factor_lr = stop_factor_lr
        self.count = 0

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        # A loop rather than an if: training resumed at a later update catches up at once.
        while num_update > self.count + self.step:
            self.count += self.step
            self.base_lr *= self.factor
            if self.base_lr < self.stop_factor_lr:
                self.base_lr = self.stop_factor_lr
                _log.info('Update[%d]: now learning rate arrived at %0.5e, will not change '
                          'in the future', num_update, self.base_lr)
            else:
                _log.info('Update[%d]: Change learning rate to %0.5e', num_update, self.base_lr)
        return self.base_lr


class MultiFactorScheduler(LRScheduler):
    """Multiply the rate by ``factor`` once ``num_update`` passes each entry of ``step``.

    >>> schedule = MultiFactorScheduler(step=[2, 4], factor=0.5, base_lr=1.0)
    >>> [schedule(n) for n in range(1, 7)]
    [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    """

    def __init__(self, step, factor=1, base_lr=0.01, warmup_steps=0, warmup_begin_lr=0,
                 warmup_mode='linear'):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(step, (list, tuple)) or not step:
            raise TypeError(f'step={step!r}: expected a non-empty list of update counts')
        for previous, current in zip(step, step[1:]):
            if current <= previous:
                raise ValueError(f'step={list(step)!r}: expected strictly increasing counts')
        if step[0] < 1:
            raise ValueError(f'step={list(step)!r}: expected counts >= 1')
        _check_factor(factor)
        self.step = list(step)
        self.cur_step_ind = 0
        self.factor = factor
        self.count = 0

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while self.cur_step_ind < len(self.step) and num_update > self.step[self.cur_step_ind]:
            self.count = self.step[self.cur_step_ind]
            self.cur_step_ind += 1
            self.base_lr *= self.factor
            _log.info('Update[%d]: Change learning rate to %0.5e', num_update, self.base_lr)
        return self.base_lr


class _DecayToFinal(LRScheduler):
    """Shared by the schedules that decay from base_lr to final_lr over max_update updates."""

    def __init__(self, max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr,
                 warmup_mode):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        _require_int('max_update', max_update, 1)
        self.base_lr_orig = self.base_lr
        self.max_update = max_update
        self.final_lr = final_lr
        self.max_steps = self.max_update - self.warmup_steps

    def _decay(self, progress):
        raise NotImplementedError

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        # Past max_update the rate stays where the schedule ended.
        if num_update <= self.max_update:
            progress = float(num_update - self.warmup_steps) / float(self.max_steps)
            span = self.base_lr_orig - self.final_lr
            self.base_lr = self.final_lr + span * self._decay(progress)
        return self.base_lr


class PolyScheduler(_DecayToFinal):
    """Polynomial decay: ``final_lr + (base_lr - final_lr) * (1 - progress) ** pwr``.

    >>> schedule = PolyScheduler(max_update=4, base_lr=1.0, pwr=2)
    >>> [schedule(n) for n in range(6)]
    [1.0, 0.5625, 0.25, 0.0625, 0.0, 0.0]
    """

    def __init__(self, max_update, base_lr=0.01, pwr=2, final_lr=0, warmup_steps=0,
                 warmup_begin_lr=0, warmup_mode='linear'):
        super().__init__(max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr,
                         warmup_mode)
        self.power = pwr

    def _decay(self, progress):
        return pow(1 - progress, self.power)


class CosineScheduler(_DecayToFinal):
    """Cosine decay: ``final_lr + (base_lr - final_lr) * (1 + cos(pi * progress)) / 2``.

    >>> schedule = CosineScheduler(max_update=4, base_lr=1.0, final_lr=0.2)
    >>> [round(schedule(n), 4) for n in range(6)]
    [1.0, 0.8828, 0.6, 0.3172, 0.2, 0.2]
    """

    def __init__(self, max_update, base_lr=0.01, final_lr=0, warmup_steps=0, warmup_begin_lr=0,
                 warmup_mode='linear'):
        super().__init__(max_update, base_lr, final_lr, warmup_steps, warmup_begin_lr,
                         warmup_mode)

    def _decay(self, progress):
        return (1 + math.cos(math.pi * progress)) / 2
