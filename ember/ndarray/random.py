"""Random arrays (``mx.nd.random``): draws from the device's random stream.

The streams start seeded, so a program draws the same numbers on every run until
``mx.random.seed`` reseeds them. Bad parameters (``scale < 0``) fail when the operator runs and
raise at the next wait, as in MXNet.

>>> import ember.ndarray as nd
>>> x = nd.random.uniform(-1, 1, shape=(2, 3))
>>> x.shape, bool((x.asnumpy() >= -1).all() and (x.asnumpy() < 1).all())
((2, 3), True)
>>> nd.random.randint(0, 5, shape=4).dtype
<class 'numpy.int32'>
"""
from __future__ import annotations

from ember.op import registry
from ember.ndarray.ndarray import NDArray, invoke, parse_device

__all__ = ['uniform', 'normal', 'randint', 'exponential', 'gamma', 'poisson', 'negative_binomial',
           'generalized_negative_binomial', 'shuffle']


def _draw(op_name, params, shape, dtype, ctx, out, kwargs):
    op = registry.get(op_name)
    for key, value in params.items():
        if isinstance(value, NDArray):
            raise TypeError(f'random {op_name[8:]}: {key} must be a number; sampling with '
                            'NDArray parameters is not supported')
    if shape is not None:
        params['shape'] = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype is not None:
        params['dtype'] = dtype
    params.update(kwargs)
    attrs = op.parse_attrs(params)
    device = out.context if out is not None else parse_device(ctx)
    return invoke(op, [], attrs, out=None if out is None else [out], device=device)[0]


def uniform(low=0.0, high=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from the uniform distribution on [low, high) (float32 unless `dtype`)."""
    return _draw('_random_uniform', {'low': low, 'high': high}, shape, dtype, ctx, out, kwargs)


def normal(loc=0.0, scale=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from the normal distribution with mean `loc` and standard deviation `scale`."""
    return _draw('_random_normal', {'loc': loc, 'scale': scale}, shape, dtype, ctx, out,
                 kwargs)


def randint(low, high, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Integers drawn uniformly from [low, high) (int32 unless `dtype`)."""
    return _draw('_random_randint', {'low': low, 'high': high}, shape, dtype, ctx, out,
                 kwargs)


def exponential(scale=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from the exponential distribution with mean `scale`."""
    return _draw('_random_exponential', {'lam': 1.0 / scale}, shape, dtype, ctx, out, kwargs)


def gamma(alpha=1.0, beta=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from the gamma distribution with shape `alpha` and scale `beta`."""
    return _draw('_random_gamma', {'alpha': alpha, 'beta': beta}, shape, dtype, ctx, out,
                 kwargs)


def poisson(lam=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from the Poisson distribution with rate `lam`."""
    return _draw('_random_poisson', {'lam': lam}, shape, dtype, ctx, out, kwargs)


def negative_binomial(k=1, p=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Failures before the `k`-th success of trials that succeed with probability `p`."""
    return _draw('_random_negative_binomial', {'k': k, 'p': p}, shape, dtype, ctx, out, kwargs)


def generalized_negative_binomial(mu=1.0, alpha=1.0, shape=None, dtype=None, ctx=None,
                                  out=None, **kwargs):
    """Draws from the negative binomial with mean `mu` and dispersion `alpha`."""
    return _draw('_random_generalized_negative_binomial', {'mu': mu, 'alpha': alpha}, shape,
                 dtype, ctx, out, kwargs)


def shuffle(data, **kwargs):
    """A copy of `data` with its first axis randomly permuted."""
    return invoke(registry.get('_shuffle'), [data], registry.get('_shuffle').parse_attrs(kwargs))[0]
