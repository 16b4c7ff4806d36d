"""``mx.sym.random``: symbols that draw random numbers.

Scalar parameters draw with ``_random_<dist>``; Symbol parameters draw ``shape`` values per
element of them with ``_sample_<dist>``.

>>> import ember.symbol as sym
>>> sym.random.uniform(0, 1, shape=(2, 3)).infer_shape()[1]
[(2, 3)]
>>> sym.random.normal(sym.var('mu'), sym.var('sigma'), shape=4).infer_shape(mu=(2,),
...                                                                         sigma=(2,))[1]
[(2, 4)]
"""
from __future__ import annotations

from ember.op import frontend as _frontend
from ember.op import registry as _registry
from ember.symbol.register import make_function as _make_function
from ember.symbol.symbol import Symbol as _Symbol, create as _create

__all__ = ['uniform', 'normal', 'randn', 'exponential', 'gamma', 'poisson', 'negative_binomial',
           'generalized_negative_binomial', 'randint', 'multinomial', 'shuffle']


def _call(op_name, inputs=(), **params):
    params = {k: v for k, v in params.items() if v is not None}
    name, attr = params.pop('name', None), params.pop('attr', None)
    return _create(_registry.get(op_name), op_name.lstrip('_').lower(), list(inputs),
                   params=params, name=name, attr=attr)


def _draw(dist, params, shape, dtype, kwargs):
    if any(isinstance(v, _Symbol) for v in params.values()):
        if not all(isinstance(v, _Symbol) for v in params.values()):
            raise TypeError(f'random {dist}: the distribution parameters must all be Symbols '
                            f'or all numbers')
        return _call(f'_sample_{dist}', list(params.values()), shape=shape, dtype=dtype,
                     **kwargs)
    return _call(f'_random_{dist}', shape=shape, dtype=dtype, **params, **kwargs)


def uniform(low=0, high=1, shape=None, dtype=None, **kwargs):
    """Uniform draws from [low, high)."""
    if isinstance(low, _Symbol) or isinstance(high, _Symbol):
        return _call('_sample_uniform', [low, high], shape=shape, dtype=dtype, **kwargs)
    return _call('_random_uniform', low=low, high=high, shape=shape, dtype=dtype, **kwargs)


def normal(loc=0, scale=1, shape=None, dtype=None, **kwargs):
    """Normal draws with mean loc and deviation scale."""
    if isinstance(loc, _Symbol) or isinstance(scale, _Symbol):
        return _call('_sample_normal', [loc, scale], shape=shape, dtype=dtype, **kwargs)
    return _call('_random_normal', loc=loc, scale=scale, shape=shape, dtype=dtype, **kwargs)


def randn(*shape, loc=0, scale=1, dtype=None, **kwargs):
    """Normal draws of the given shape."""
    return normal(loc, scale, shape=shape or None, dtype=dtype, **kwargs)


def exponential(scale=1, shape=None, dtype=None, **kwargs):
    """Exponential draws with mean scale."""
    if isinstance(scale, _Symbol):
        return _call('_sample_exponential', [1.0 / scale], shape=shape, dtype=dtype, **kwargs)
    return _call('_random_exponential', lam=1.0 / scale, shape=shape, dtype=dtype, **kwargs)


def gamma(alpha=1, beta=1, shape=None, dtype=None, **kwargs):
    """Gamma draws with shape alpha and scale beta."""
    return _draw('gamma', {'alpha': alpha, 'beta': beta}, shape, dtype, kwargs)


def poisson(lam=1, shape=None, dtype=None, **kwargs):
    """Poisson draws with mean lam."""
    return _draw('poisson', {'lam': lam}, shape, dtype, kwargs)


def negative_binomial(k=1, p=1, shape=None, dtype=None, **kwargs):
    """Failures before the k-th success with success probability p."""
    return _draw('negative_binomial', {'k': k, 'p': p}, shape, dtype, kwargs)


def generalized_negative_binomial(mu=1, alpha=1, shape=None, dtype=None, **kwargs):
    """Negative binomial draws with mean mu and dispersion alpha."""
    return _draw('generalized_negative_binomial', {'mu': mu, 'alpha': alpha}, shape, dtype,
                 kwargs)


def randint(low, high, shape=None, dtype=None, **kwargs):
    """Integers drawn uniformly from [low, high)."""
    return _call('_random_randint', low=low, high=high, shape=shape, dtype=dtype, **kwargs)


def multinomial(data, shape=None, get_prob=True, dtype='int32', **kwargs):
    """Class indices drawn from the probability rows of data (and their log-probabilities)."""
    return _call('_sample_multinomial', [data], shape=shape, get_prob=get_prob, dtype=dtype,
                 **kwargs)


def shuffle(data, **kwargs):
    """data with its first axis randomly permuted."""
    return _call('_shuffle', [data], **kwargs)


_generator = _frontend.Submodule(globals(), ('_random_',), _make_function, __name__,
                                 select=lambda name: name.endswith('_like'))


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ += _generator.names()
