"""MXNet's ``mx.misc``: the first learning-rate schedulers, called with the iteration.

:mod:`ember.lr_scheduler` holds the schedulers optimizers use; these keep old scripts running.

>>> from ember.misc import FactorScheduler
>>> schedule = FactorScheduler(step=10, factor=0.5)
>>> schedule.base_lr = 1.0
>>> [schedule(i) for i in (0, 9, 10, 25)]
[1.0, 1.0, 0.5, 0.25]
"""
import logging

__all__ = ['LearningRateScheduler', 'FactorScheduler']


class LearningRateScheduler:
    """Base class: ``scheduler(iteration)`` gives the learning rate; ``base_lr`` starts it."""

    def __init__(self):
        self.base_lr = 0.01

    def __call__(self, iteration):
        raise NotImplementedError('a LearningRateScheduler subclass defines __call__')


class FactorScheduler(LearningRateScheduler):
    """Multiply the rate by `factor` every `step` iterations."""

    def __init__(self, step, factor=0.1):
        super().__init__()
        if step < 1:
            raise ValueError(f'FactorScheduler: step={step}: expected 1 or more iterations')
        if factor >= 1.0:
            raise ValueError(f'FactorScheduler: factor={factor}: expected less than 1, so '
                             'that the rate decreases')
        self.step = step
        self.factor = factor
        self.old_lr = self.base_lr

    def __call__(self, iteration):
        lr = self.base_lr * self.factor ** (int(iteration) // self.step)
        if lr != self.old_lr:
            self.old_lr = lr
            logging.info('At iteration [%d]: switch to learning rate %.5f', iteration, lr)
        return lr
