"""``mx.np.random``'s samplers: draws from the device's random stream (seeded by
``mx.random.seed``), float32 unless a dtype is given.

Each distribution is one operator ``_npi_random_<name>`` whose parameters are attributes when they
are numbers and inputs when they are arrays (``tensor_params`` names which): the output has
shape `size`, or the parameters' broadcast shape without one. Distributions with a pathwise
derivative pass gradients to their array parameters (the draw written as a function of the
parameters and of noise that does not depend on them: ``normal = loc + scale * z``).

>>> from ember.op import registry
>>> op = registry.get('_npi_random_normal')
>>> attrs = op.parse_attrs({'size': (2, 3), 'tensor_params': ('loc',)})
>>> op.input_names(attrs), op.infer_shape(attrs, [(3,)])[1]
(['loc'], [(2, 3)])
"""
from __future__ import annotations

import numpy as np

from ember.op.init import CTX
from ember.op.np_rules import (FLOAT32, INT64, broadcast_all, gradient_shapes, outputs_of,
                               sum_to_shape)
from ember.op.registry import (Param, ShapeError, p_bool, p_dtype, p_float, p_int, p_optional,
                               p_shape, p_str, register)

__all__ = ['DISTRIBUTIONS']


def _whole(value):
    return int(value) if isinstance(value, float) else value.astype(np.int64)


def _log(xp, y):
    return xp.log(xp.where(y > 0, y, 1))


# name -> (parameter names and defaults, draw(generator, params, size),
#          derivatives {param: fn(xp, y, params)} of the draw, default dtype)
DISTRIBUTIONS = {
    'uniform': ((('low', 0.0), ('high', 1.0)),
                lambda gen, p, size: gen.uniform(p['low'], p['high'], size),
                {'low': lambda xp, y, p: (p['high'] - y) / (p['high'] - p['low']),
                 'high': lambda xp, y, p: (y - p['low']) / (p['high'] - p['low'])}, FLOAT32),
    'normal': ((('loc', 0.0), ('scale', 1.0)),
               lambda gen, p, size: gen.normal(p['loc'], p['scale'], size),
               {'loc': lambda xp, y, p: 1.0,
                'scale': lambda xp, y, p: (y - p['loc']) / p['scale']}, FLOAT32),
    'gamma': ((('shape', None), ('scale', 1.0)),
              lambda gen, p, size: gen.gamma(p['shape'], p['scale'], size),
              {'scale': lambda xp, y, p: y / p['scale']}, FLOAT32),
    'beta': ((('a', None), ('b', None)),
             lambda gen, p, size: gen.beta(p['a'], p['b'], size), {}, FLOAT32),
    'chisquare': ((('df', None),), lambda gen, p, size: gen.chisquare(p['df'], size), {},
                  FLOAT32),
    'exponential': ((('scale', 1.0),),
                    lambda gen, p, size: gen.exponential(p['scale'], size),
                    {'scale': lambda xp, y, p: y / p['scale']}, FLOAT32),
    'gumbel': ((('loc', 0.0), ('scale', 1.0)),
               lambda gen, p, size: gen.gumbel(p['loc'], p['scale'], size),
               {'loc': lambda xp, y, p: 1.0,
                'scale': lambda xp, y, p: (y - p['loc']) / p['scale']}, FLOAT32),
    'logistic': ((('loc', 0.0), ('scale', 1.0)),
                 lambda gen, p, size: gen.logistic(p['loc'], p['scale'], size),
                 {'loc': lambda xp, y, p: 1.0,
                  'scale': lambda xp, y, p: (y - p['loc']) / p['scale']}, FLOAT32),
    'lognormal': ((('mean', 0.0), ('sigma', 1.0)),
                  lambda gen, p, size: gen.lognormal(p['mean'], p['sigma'], size),
                  {'mean': lambda xp, y, p: y,
                   'sigma': lambda xp, y, p: y * (_log(xp, y) - p['mean']) / p['sigma']},
                  FLOAT32),
    'pareto': ((('a', None),), lambda gen, p, size: gen.pareto(p['a'], size),
               {'a': lambda xp, y, p: -(y + 1) * xp.log1p(y) / p['a']}, FLOAT32),
    'power': ((('a', None),), lambda gen, p, size: gen.power(p['a'], size),
              {'a': lambda xp, y, p: -y * _log(xp, y) / p['a']}, FLOAT32),
    'rayleigh': ((('scale', 1.0),), lambda gen, p, size: gen.rayleigh(p['scale'], size),
                 {'scale': lambda xp, y, p: y / p['scale']}, FLOAT32),
    'weibull': ((('a', None),), lambda gen, p, size: gen.weibull(p['a'], size),
                {'a': lambda xp, y, p: -y * _log(xp, y) / p['a']}, FLOAT32),
    'randint': ((('low', 0), ('high', None)),
                lambda gen, p, size: gen.integers(_whole(p['low']), _whole(p['high']), size), {},
                INT64),
    'bernoulli': ((('prob', None),),
                  lambda gen, p, size: gen.random(size) < p['prob'], {}, FLOAT32),
}


def _size_param():
    return Param('size', p_optional(p_shape), None, 'shape of the draw')


def _params_of(attrs, names, values):
    """The distribution's parameters: arrays from `values` for the tensor ones, else attrs."""
    found = dict(zip(attrs['tensor_params'], values))
    return {name: found[name] if name in found else attrs[name] for name in names}


def _draw_shape(attrs, shapes):
    if attrs['size'] is not None:
        size = tuple(attrs['size'])
        if shapes and broadcast_all(list(shapes) + [size]) != size:
            raise ShapeError(f'parameters of shapes {[tuple(s) for s in shapes]} do not '
                             f'broadcast to size {size}')
        return size
    return broadcast_all(shapes) if shapes else ()


def _register(name, spec):
    defaults, draw, derivatives, default_dtype = spec
    names = [n for n, _ in defaults]
    params = tuple(Param(n, p_optional(p_float), d) for n, d in defaults) + (
        Param('tensor_params', p_optional(p_shape_names), ()), _size_param(), CTX,
        Param('dtype', p_optional(p_dtype), None))

    def inputs(attrs):
        return list(attrs['tensor_params'] or ())

    def infer_shape(attrs, shapes):
        if any(s is None for s in shapes):
            return list(shapes), [None]
        return list(shapes), [_draw_shape(attrs, shapes)]

    def infer_type(attrs, dtypes):
        return list(dtypes), [attrs['dtype'] or default_dtype]

    def kernel(attrs, ins, outs, ctx):
        values = _params_of(attrs, names, [x.astype(np.float64) for x in ins])
        missing = [n for n in names if values[n] is None]
        if missing:
            raise ShapeError(f'np.random.{name}: {", ".join(missing)} must be given')
        out = outs[0]
        out[...] = ctx.xp.asarray(draw(ctx.random.generator, values, out.shape))

    def gradient(F, attrs, ins, outs, og):
        wanted = [n for n in attrs['tensor_params'] if n in derivatives]
        if not wanted:
            return [None] * len(ins)
        grads = F._backward_npi_random(og[0], outs[0], *ins, dist=name, **attrs)
        return outputs_of(grads)
    register(f'_npi_random_{name}', kernel, inputs=inputs, params=params,
             infer_shape=infer_shape,
             infer_type=infer_type, resources=('random',), random=True,
             gradient=gradient if derivatives else None,
             doc=f'Draws of ``np.random.{name}``.')


def p_shape_names(value):
    if isinstance(value, str):
        value = tuple(v.strip(" '") for v in value.strip('()[]').split(',') if v.strip(" '"))
    return tuple(str(v) for v in value)


for _name, _spec in DISTRIBUTIONS.items():
    _register(_name, _spec)


def _backward_random_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    og, y, arrays = ins[0], ins[1], ins[2:]
    defaults, _, derivatives, _ = DISTRIBUTIONS[attrs['dist']]
    names = [n for n, _ in defaults]
    dtype = og.dtype if og.dtype.kind == 'f' else np.dtype(np.float64)
    values = _params_of(attrs, names, [a.astype(dtype) for a in arrays])
    y = y.astype(dtype)
    for out, name, array in zip(outs, attrs['tensor_params'], arrays):
        derivative = derivatives.get(name)
        if derivative is None:
            out[...] = 0
            continue
        with np.errstate(all='ignore'):
            out[...] = sum_to_shape(xp, og * derivative(xp, y, values), array.shape)


_GRAD_PARAMS = (Param('dist', p_str),) + tuple(
    Param(n, p_optional(p_float), None) for n in sorted({n for spec in DISTRIBUTIONS.values()
                                                         for n, _ in spec[0]})) + (
    Param('tensor_params', p_optional(p_shape_names), ()), _size_param(), CTX,
    Param('dtype', p_optional(p_dtype), None))
register('_backward_npi_random', _backward_random_kernel,
         inputs=lambda attrs: ['ograd', 'y'] + list(attrs['tensor_params']),
         outputs=lambda attrs: [f'{n}_grad' for n in attrs['tensor_params']],
         params=_GRAD_PARAMS,
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[1]], lambda attrs, s: list(s[2:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[2:])),
         doc='Pathwise gradients of a draw with respect to its array parameters.')


# ----------------------------------------------------------------------------------------------
# choice, multinomial, shuffle, multivariate normal

def _choice_shape(attrs, shapes):
    size = attrs['size']
    return list(shapes), [() if size is None else tuple(size)]


def _choice_kernel(attrs, ins, outs, ctx):
    gen, xp, out = ctx.random.generator, ctx.xp, outs[0]
    weights = ins[0].astype(np.float64) if ins else None
    if weights is not None:
        weights = weights / weights.sum()
    population = attrs['a']
    if not attrs['replace'] and out.size > population:
        raise ShapeError(f'np.random.choice: cannot take {out.size} values from {population} '
                         f'without replacement')
    picks = gen.choice(population, out.shape, replace=attrs['replace'],
                       p=None if weights is None else _host(weights))
    out[...] = xp.asarray(picks)


def _host(values):
    return values if isinstance(values, np.ndarray) else values.get()


register('_npi_choice', _choice_kernel,
         inputs=lambda attrs: ['p'] if attrs['weighted'] else [],
         params=(Param('a', p_int), _size_param(), Param('replace', p_bool, True),
                 Param('weighted', p_bool, False), CTX),
         infer_shape=_choice_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [INT64]), resources=('random',),
         random=True, doc='Positions drawn from range(a), uniformly or with weights p.')


def _multinomial_shape(attrs, shapes):
    size = () if attrs['size'] is None else tuple(attrs['size'])
    return list(shapes), [size + (len(attrs['pvals']),)]


def _multinomial_kernel(attrs, ins, outs, ctx):
    gen, out = ctx.random.generator, outs[0]
    pvals = np.asarray(attrs['pvals'], dtype=np.float64)
    out[...] = ctx.xp.asarray(gen.multinomial(attrs['n'], pvals, out.shape[:-1]))


register('_npi_multinomial', _multinomial_kernel, inputs=(),
         params=(Param('n', p_int), Param('pvals', lambda v: tuple(float(x) for x in v)),
                 _size_param(), CTX),
         infer_shape=_multinomial_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [INT64]), resources=('random',),
         random=True, doc='Counts of n draws over outcomes of probabilities pvals.')


def _shuffle_kernel(attrs, ins, outs, ctx):
    order = ctx.random.generator.permutation(ins[0].shape[0]) if ins[0].ndim else None
    outs[0][...] = ins[0] if order is None else ins[0][ctx.xp.asarray(order)]


register('_npi_shuffle', _shuffle_kernel, inputs=('x',), resources=('random',), random=True,
         inplace=(), doc='The array with its first axis in a random order.')


def _mvn_shape(attrs, shapes):
    mean, cov = shapes
    if mean is None or cov is None:
        return list(shapes), [None]
    if len(mean) != 1 or tuple(cov) != (mean[0], mean[0]):
        raise ShapeError(f'multivariate_normal: mean of shape {tuple(mean)} and cov of shape '
                         f'{tuple(cov)}; expected (N,) and (N, N)')
    size = () if attrs['size'] is None else tuple(attrs['size'])
    return list(shapes), [size + tuple(mean)]


def _mvn_kernel(attrs, ins, outs, ctx):
    mean, cov = (_host(x).astype(np.float64) for x in ins)
    draws = ctx.random.generator.multivariate_normal(mean, cov, outs[0].shape[:-1],
                                                    check_valid=attrs['check_valid'],
                                                    tol=attrs['tol'])
    outs[0][...] = ctx.xp.asarray(draws)


register('_npi_multivariate_normal', _mvn_kernel, inputs=('mean', 'cov'),
         params=(_size_param(), Param('check_valid', p_str, 'warn'),
                 Param('tol', p_float, 1e-8)),
         infer_shape=_mvn_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]), resources=('random',),
         random=True, doc='Draws of a multivariate normal distribution.')
