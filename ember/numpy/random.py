"""``mx.np.random``: samplers drawing from the device's random stream (``mx.random.seed``
seeds them), float32 unless a dtype is given. Parameters may be numbers or arrays (broadcast
together, or to `size`); the samplers written as functions of their parameters (normal,
uniform, exponential, gumbel, logistic, lognormal, pareto, power, rayleigh, weibull, gamma's
scale) pass gradients to array parameters.

>>> import ember as mx
>>> from ember import numpy as np
>>> mx.random.seed(7)
>>> a = np.random.uniform(size=(2, 3))
>>> mx.random.seed(7)
>>> bool((a == np.random.uniform(size=(2, 3))).all()), a.dtype
(True, dtype('float32'))
"""
from __future__ import annotations

import numbers

import numpy as onp

from ember.base import dtype_of
from ember.ndarray.ndarray import NDArray
from ember.numpy import _op
from ember.numpy.multiarray import apply, is_symbol

__all__ = ['randint', 'uniform', 'normal', 'choice', 'rand', 'multinomial',
           'multivariate_normal', 'logistic', 'gumbel', 'shuffle', 'randn', 'gamma', 'beta',
           'chisquare', 'exponential', 'lognormal', 'weibull', 'pareto', 'power', 'rayleigh']


def _size(size):
    if size is None:
        return None
    return (int(size),) if isinstance(size, (int, onp.integer)) else tuple(int(s) for s in size)


def _draw(dist, params, size=None, dtype=None, ctx=None, out=None):
    """One draw of `dist`: numbers become attributes, arrays inputs."""
    attrs, inputs, tensor_names = {}, [], []
    like = next((v for v in params.values() if isinstance(v, NDArray) or is_symbol(v)), None)
    for name, value in params.items():
        if isinstance(value, (NDArray,)) or is_symbol(value):
            inputs.append(value)
            tensor_names.append(name)
        elif value is None or isinstance(value, numbers.Real):
            attrs[name] = None if value is None else float(value)
        else:
            inputs.append(_op._array_arg(value, like))
            tensor_names.append(name)
    attrs.update(tensor_params=tuple(tensor_names), size=_size(size),
                 dtype=None if dtype is None else dtype_of(dtype))
    if ctx is None and inputs and not is_symbol(inputs[0]):
        ctx = inputs[0].context
    result = apply(f'_npi_random_{dist}', inputs, attrs, ctx=ctx)
    if out is not None:
        out[...] = result
        return out
    return result


def uniform(low=0.0, high=1.0, size=None, dtype=None, ctx=None, out=None):
    """Draws from [low, high)."""
    return _draw('uniform', {'low': low, 'high': high}, size, dtype, ctx, out)


def normal(loc=0.0, scale=1.0, size=None, dtype=None, ctx=None, out=None):
    """Gaussian draws of mean `loc` and standard deviation `scale`."""
    return _draw('normal', {'loc': loc, 'scale': scale}, size, dtype, ctx, out)


def randint(low, high=None, size=None, dtype=None, ctx=None, out=None):
    """Integers from [low, high) (int64 unless `dtype`); from [0, low) without `high`."""
    if high is None:
        low, high = 0, low
    return _draw('randint', {'low': low, 'high': high}, size, dtype, ctx, out)


def rand(*size, **kwargs):
    """Uniform draws from [0, 1) of shape `size`."""
    return uniform(size=size or None, **kwargs)


def randn(*size, **kwargs):
    """Standard normal draws of shape `size`."""
    return normal(size=size or None, **kwargs)


def gamma(shape, scale=1.0, size=None, dtype=None, ctx=None, out=None):
    """Gamma draws of shape `shape` and scale `scale`."""
    return _draw('gamma', {'shape': shape, 'scale': scale}, size, dtype, ctx, out)


def beta(a, b, size=None, dtype=None, ctx=None):
    """Beta draws."""
    return _draw('beta', {'a': a, 'b': b}, size, dtype, ctx)


def chisquare(df, size=None, dtype=None, ctx=None):
    """Chi-square draws with `df` degrees of freedom."""
    return _draw('chisquare', {'df': df}, size, dtype, ctx)


def exponential(scale=1.0, size=None, ctx=None, out=None):
    """Exponential draws of mean `scale`."""
    return _draw('exponential', {'scale': scale}, size, None, ctx, out)


def gumbel(loc=0.0, scale=1.0, size=None, ctx=None, out=None):
    """Gumbel draws."""
    return _draw('gumbel', {'loc': loc, 'scale': scale}, size, None, ctx, out)


def logistic(loc=0.0, scale=1.0, size=None, ctx=None, out=None):
    """Logistic draws."""
    return _draw('logistic', {'loc': loc, 'scale': scale}, size, None, ctx, out)


def lognormal(mean=0.0, sigma=1.0, size=None, dtype=None, ctx=None, out=None):
    """Log-normal draws (the log is normal with `mean` and `sigma`)."""
    return _draw('lognormal', {'mean': mean, 'sigma': sigma}, size, dtype, ctx, out)


def pareto(a, size=None, ctx=None, out=None):
    """Pareto II (Lomax) draws of shape `a`, as NumPy's."""
    return _draw('pareto', {'a': a}, size, None, ctx, out)


def power(a, size=None, ctx=None, out=None):
    """Draws in [0, 1] of density ``a * x**(a - 1)``."""
    return _draw('power', {'a': a}, size, None, ctx, out)


def rayleigh(scale=1.0, size=None, ctx=None, out=None):
    """Rayleigh draws."""
    return _draw('rayleigh', {'scale': scale}, size, None, ctx, out)


def weibull(a, size=None, ctx=None, out=None):
    """Weibull draws of shape `a`."""
    return _draw('weibull', {'a': a}, size, None, ctx, out)


def choice(a, size=None, replace=True, p=None, ctx=None, out=None):
    """Draws from range(a) (int64), or from the elements of a 1-D array; weights `p`."""
    population = a
    if not isinstance(a, (int, onp.integer)):
        population = _op._array_arg(a)
        if population.ndim != 1:
            raise ValueError('choice: a must be an int or a 1-D array')
        ctx = ctx or population.context
    count = int(population) if isinstance(population, (int, onp.integer)) else \
        population.shape[0]
    inputs = []
    if p is not None:
        weights = _op._array_arg(p)
        if weights.shape != (count,):
            raise ValueError(f'choice: p has shape {weights.shape}; expected ({count},)')
        inputs.append(weights)
        ctx = ctx or weights.context
    picks = apply('_npi_choice', inputs, {'a': count, 'size': _size(size), 'replace': replace,
                                         'weighted': p is not None}, ctx=ctx)
    result = picks if isinstance(population, (int, onp.integer)) else _op.take(population,
                                                                               picks)
    if out is not None:
        out[...] = result
        return out
    return result


def multinomial(n, pvals, size=None, **kwargs):
    """Counts (int64) of n draws over outcomes of probabilities pvals."""
    values = pvals.asnumpy() if isinstance(pvals, NDArray) else onp.asarray(pvals)
    return apply('_npi_multinomial', [], {'n': int(n), 'pvals': tuple(values.tolist()),
                                          'size': _size(size)}, ctx=kwargs.get('ctx'))


def multivariate_normal(mean, cov, size=None, check_valid=None, tol=None):
    """Draws of the normal distribution with mean vector `mean` and covariance `cov`."""
    mean = _op._array_arg(mean)
    cov = _op._array_arg(cov, mean)
    return apply('_npi_multivariate_normal', [mean, cov], {
        'size': _size(size), 'check_valid': check_valid or 'warn',
        'tol': 1e-8 if tol is None else tol})


def shuffle(x):
    """Shuffle the first axis of `x` in place."""
    if not isinstance(x, NDArray):
        raise TypeError(f'shuffle: expected an mx.np array, got {type(x).__name__}')
    x[...] = apply('_npi_shuffle', [x])
