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
>>> nd.random.normal(nd.array([0, 10]), nd.array([1, 1]), shape=3).shape   # per-element
(2, 3)
>>> nd.random.uniform_like(nd.zeros((2, 2), dtype='float64')).dtype
<class 'numpy.float64'>
"""
from __future__ import annotations

from ember.op import frontend as _frontend
from ember.op import registry
from ember.ndarray.ndarray import NDArray, invoke, parse_device
from ember.ndarray.register import make_function as _make_function

__all__ = ['uniform', 'normal', 'randint', 'exponential', 'gamma', 'poisson', 'negative_binomial',
           'generalized_negative_binomial', 'shuffle', 'multinomial', 'randn']


def _sample(name, params, shape, dtype, out, kwargs):
    """Draws with NDArray parameters: `shape` values per parameter element."""
    if not all(isinstance(v, NDArray) for v in params.values()):
        kinds = sorted({type(v).__name__ for v in params.values()})
        raise TypeError(f'random {name}: the distribution parameters must all be NDArrays or '
                        f'all numbers, got {" and ".join(kinds)}')
    op = registry.get(f'_sample_{name}')
    attrs = op.parse_attrs({'shape': () if shape is None else shape, 'dtype': dtype, **kwargs})
    return invoke(op, list(params.values()), attrs, out=None if out is None else [out])[0]


def _draw(op_name, params, shape, dtype, ctx, out, kwargs):
    op = registry.get(op_name)
    if any(isinstance(value, NDArray) for value in params.values()):
        return _sample(op_name[len('_random_'):], params, shape, dtype, out, kwargs)
    if shape is not None:
        params['shape'] = (shape,) if isinstance(shape, int) else tuple(shape)
    if dtype is not None:
        params['dtype'] = dtype
    params.update(kwargs)
    attrs = op.parse_attrs(params)
    device = out.context if out is not None else parse_device(ctx)
    return invoke(op, [], attrs, out=None if out is None else [out], device=device)[0]


def uniform(low=0.0, high=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from the uniform distribution on [low, high) (float32 unless `dtype`). With
    NDArray parameters, `shape` draws per element of them."""
    if isinstance(low, NDArray) or isinstance(high, NDArray):
        return _sample('uniform', {'low': low, 'high': high}, shape, dtype, out, kwargs)
    return _draw('_random_uniform', {'low': low, 'high': high}, shape, dtype, ctx, out, kwargs)


def normal(loc=0.0, scale=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from the normal distribution with mean `loc` and standard deviation `scale`."""
    if isinstance(loc, NDArray) or isinstance(scale, NDArray):
        return _sample('normal', {'mu': loc, 'sigma': scale}, shape, dtype, out, kwargs)
    return _draw('_random_normal', {'loc': loc, 'scale': scale}, shape, dtype, ctx, out,
                 kwargs)


def randn(*shape, loc=0.0, scale=1.0, dtype=None, ctx=None, out=None, **kwargs):
    """Normal draws of the given shape (``randn(2, 3)``), mean `loc`, deviation `scale`."""
    return normal(loc, scale, shape=shape or None, dtype=dtype, ctx=ctx, out=out, **kwargs)


def multinomial(data, shape=None, get_prob=False, out=None, dtype='int32', **kwargs):
    """Class indices drawn from the probability rows of `data` (last axis), `shape` per row;
    with `get_prob`, also the log-probability of each draw (differentiable in data)."""
    op = registry.get('_sample_multinomial')
    attrs = op.parse_attrs({'shape': () if shape is None else shape, 'get_prob': get_prob,
                            'dtype': dtype, **kwargs})
    outputs = invoke(op, [data], attrs, out=None if out is None else
                     (list(out) if isinstance(out, (list, tuple)) else [out]))
    return outputs if get_prob else outputs[0]


def randint(low, high, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Integers drawn uniformly from [low, high) (int32 unless `dtype`)."""
    return _draw('_random_randint', {'low': low, 'high': high}, shape, dtype, ctx, out,
                 kwargs)


def exponential(scale=1.0, shape=None, dtype=None, ctx=None, out=None, **kwargs):
    """Draws from the exponential distribution with mean `scale`."""
    if isinstance(scale, NDArray):
        return _sample('exponential', {'lam': 1.0 / scale}, shape, dtype, out, kwargs)
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


_generator = _frontend.Submodule(globals(), ('_random_',), _make_function, __name__,
                                 select=lambda name: name.endswith('_like'))


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ += _generator.names()
