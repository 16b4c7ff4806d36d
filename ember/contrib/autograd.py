"""MXNet's first autograd interface (``mx.contrib.autograd``), kept for old programs: the
training state and recording switched together, and gradients of functions.

>>> import ember as mx
>>> grad_of_square = grad(lambda x: x * x)
>>> grad_of_square(mx.nd.array([3.0]))[0].asnumpy().tolist()
[6.0]
"""
from __future__ import annotations

import functools

from ember import autograd as _autograd
from ember.base import string_types
from ember.ndarray import NDArray, zeros_like

__all__ = ['set_is_training', 'TrainingStateScope', 'train_section', 'test_section',
           'mark_variables', 'backward', 'compute_gradient', 'grad_and_loss', 'grad',
           'NDArray', 'zeros_like', 'string_types']


def set_is_training(is_train) -> bool:
    """Switch training mode and recording together; returns the previous state."""
    previous = _autograd.set_training(bool(is_train))
    _autograd.set_recording(bool(is_train))
    return previous


class TrainingStateScope:
    """A ``with`` block in (or out of) training mode and recording."""

    def __init__(self, enter_state):
        self._enter_state = enter_state
        self._prev = None

    def __enter__(self):
        self._prev = set_is_training(self._enter_state)

    def __exit__(self, ptype, value, trace):
        if self._prev != self._enter_state:
            set_is_training(self._prev)


def train_section():
    """Record and train inside the block (``autograd.record()`` of today)."""
    return TrainingStateScope(True)


def test_section():
    """Neither record nor train inside the block."""
    return TrainingStateScope(False)


def mark_variables(variables, gradients, grad_reqs='write'):
    """Attach the given gradient arrays to `variables`."""
    _autograd.mark_variables(variables, gradients, grad_reqs)


def backward(outputs, out_grads=None, retain_graph=False):
    """Back-propagate from `outputs` (a list) with head gradients `out_grads`."""
    if not isinstance(outputs, (list, tuple)):
        raise TypeError('backward: outputs must be a list or tuple of NDArrays')
    if out_grads is not None and len(out_grads) != len(outputs):
        raise ValueError(f'{len(out_grads)} head gradients for {len(outputs)} outputs')
    _autograd.backward(list(outputs), out_grads, retain_graph=retain_graph)


def compute_gradient(outputs):
    """``backward(outputs)``."""
    backward(outputs)


def grad_and_loss(func, argnum=None):
    """A function returning (gradients of `func` with respect to its arguments — those at
    positions `argnum`, or all —, `func`'s outputs)."""
    @functools.wraps(func)
    def wrapped(*args):
        positions = argnum if isinstance(argnum, list) else [argnum] if argnum is not None \
            else range(len(args))
        variables = [args[i] for i in positions]
        for x in variables:
            if not isinstance(x, NDArray):
                raise TypeError(f'grad_and_loss: argument of type {type(x).__name__}; the '
                                'differentiated arguments must be NDArrays')
        grads = [zeros_like(x) for x in variables]
        mark_variables(variables, grads)
        with train_section():
            outputs = func(*args)
        compute_gradient([outputs] if isinstance(outputs, NDArray) else outputs)
        return grads, outputs
    return wrapped


def grad(func, argnum=None):
    """A function returning the gradients of `func` (see :func:`grad_and_loss`)."""
    with_loss = grad_and_loss(func, argnum)

    @functools.wraps(with_loss)
    def wrapped(*args):
        return with_loss(*args)[0]
    return wrapped
