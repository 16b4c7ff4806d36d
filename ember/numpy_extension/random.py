"""``mx.npx.random``: seeding and the samplers MXNet adds to NumPy's (bernoulli, and draws of
a batch shape for every parameter).

>>> from ember import numpy as np, numpy_extension as npx
>>> npx.random.seed(3)
>>> npx.random.uniform_n(np.zeros(2), np.ones(2), batch_shape=(4,)).shape
(4, 2)
"""
from __future__ import annotations

import math

import numpy as onp

from ember import resource
from ember.ndarray.ndarray import NDArray, parse_device
from ember.numpy import _op
from ember.numpy import random as _random
from ember.numpy.multiarray import is_symbol

__all__ = ['seed', 'bernoulli', 'normal_n', 'uniform_n']


def seed(seed, ctx='all'):  # noqa: A002  (MXNet's name)
    """Reseed the random streams of every device (``ctx='all'``) or of one."""
    resource.seed(seed, None if ctx == 'all' else parse_device(ctx))


def bernoulli(prob=None, logit=None, size=None, dtype=None, ctx=None, out=None):
    """1.0 with probability `prob` (or sigmoid(`logit`)), else 0.0."""
    if (prob is None) == (logit is None):
        raise ValueError('bernoulli: give exactly one of prob and logit')
    if logit is not None:
        prob = _sigmoid(logit)
    return _random._draw('bernoulli', {'prob': prob}, size, dtype, ctx, out)


def _sigmoid(logit):
    if isinstance(logit, NDArray) or is_symbol(logit):
        return _op.reciprocal(_op.add(_op.exp(_op.negative(logit)), 1.0))
    return 1 / (1 + math.exp(-logit))


def _batch_size(batch_shape, params):
    if batch_shape is None:
        return None
    batch = (batch_shape,) if isinstance(batch_shape, int) else tuple(batch_shape)
    shapes = [p.shape for p in params if isinstance(p, NDArray)]
    return batch + (tuple(onp.broadcast_shapes(*shapes)) if shapes else ())


def uniform_n(low=0.0, high=1.0, batch_shape=None, dtype=None, ctx=None):
    """Uniform draws of shape ``batch_shape + broadcast(low, high).shape``."""
    return _random.uniform(low, high, _batch_size(batch_shape, (low, high)), dtype, ctx)


def normal_n(loc=0.0, scale=1.0, batch_shape=None, dtype=None, ctx=None):
    """Normal draws of shape ``batch_shape + broadcast(loc, scale).shape``."""
    return _random.normal(loc, scale, _batch_size(batch_shape, (loc, scale)), dtype, ctx)
