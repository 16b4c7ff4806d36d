"""``mx.random``: seeding and drawing random arrays.

>>> from ember import random
>>> random.seed(42)
>>> first = random.uniform(shape=(3,)).asnumpy()
>>> random.seed(42)
>>> bool((random.uniform(shape=(3,)).asnumpy() == first).all())
True
"""
from __future__ import annotations

from ember import resource
from ember.ndarray.ndarray import parse_device
from ember.ndarray.random import (exponential, gamma, generalized_negative_binomial,
                                  multinomial, negative_binomial, normal, poisson, randint,
                                  randn, shuffle, uniform)

from ember.base import integer_types  # noqa: E402  (names of MXNet's mx.random)
from ember.device import Context  # noqa: E402

__all__ = ['seed', 'uniform', 'normal', 'randint', 'exponential', 'gamma', 'poisson',
           'negative_binomial', 'generalized_negative_binomial', 'shuffle', 'multinomial',
           'randn', 'Context', 'integer_types']


def seed(seed_state, ctx='all') -> None:
    """Reseed the random streams of every device (``ctx='all'``) or of one device.

    Operators pushed before the call draw from the old state, those pushed after from the new.
    """
    resource.seed(seed_state, None if ctx == 'all' else parse_device(ctx))
