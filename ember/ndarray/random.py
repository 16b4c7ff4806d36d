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

__all__ = ['uniform', 'normal', 'randint']


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
