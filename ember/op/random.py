"""Random draws: every operator that draws from the device's random stream
(``resources=('random',)``), so seeding orders them. Each checks its parameters in the kernel:
a bad ``scale`` fails when the operator runs, and the error surfaces at the next wait, as in
MXNet.

>>> from ember.op import registry
>>> op = registry.get('_random_uniform')
>>> op.infer_shape(op.parse_attrs({'shape': (2, 3)}), [])[1]
[(2, 3)]
"""
from __future__ import annotations

import numpy as np

from ember.base import EmberError
from ember.op.init import CTX, SHAPE, dtype_param, no_input_type
from ember.op.registry import (REQUIRED, Param, p_dtype, p_float, p_int, p_optional, register)

__all__ = []


# ----------------------------------------------------------------------------------------------
# Random draws

def _random_shape(attrs, in_shapes):
    # MXNet 1.x has no 0-d arrays: a draw without a shape is one value of shape (1,)
    return [], [attrs['shape'] or (1,)]


# Values drawn at a time into a large host output. The generators draw in float64 (int64 for
# integers): one draw of a whole 4096x25088 weight held 822 MB beside its 411 MB output, and
# set vgg16's peak RSS (1300 MB against 790 after the first batch). A generator consumes its
# stream value by value, so drawing consecutive pieces gives the same values as one draw.
_DRAW_CHUNK = 1 << 18


def _draw(name, draw, check, params, dtype='float32', aliases=(), doc=''):
    def kernel(attrs, ins, outs, ctx):
        check(attrs)
        out = outs[0]
        generator = ctx.random.generator
        if ctx.xp is np and out.size > _DRAW_CHUNK and out.flags.c_contiguous:
            flat = out.reshape(-1)
            for start in range(0, flat.size, _DRAW_CHUNK):
                piece = flat[start:start + _DRAW_CHUNK]
                piece[...] = draw(generator, attrs, piece.shape)
            return
        out[...] = ctx.xp.asarray(draw(generator, attrs, out.shape))
    register(name, kernel, inputs=(), infer_shape=_random_shape, infer_type=no_input_type,
             params=params + (SHAPE, CTX, dtype_param(dtype)), resources=('random',),
             random=True, aliases=aliases, doc=doc)


def _require(condition, message):
    if not condition:
        raise EmberError(message)


_draw('_random_uniform',
      lambda gen, attrs, shape: gen.uniform(attrs['low'], attrs['high'], shape),
      lambda attrs: _require(attrs['low'] <= attrs['high'],
                             f'_random_uniform: low={attrs["low"]} must be <= '
                             f'high={attrs["high"]}'),
      (Param('low', p_float, 0.0), Param('high', p_float, 1.0)),
      aliases=('random_uniform', 'uniform'), doc='Uniform draws from [low, high).')
_draw('_random_normal',
      lambda gen, attrs, shape: gen.normal(attrs['loc'], attrs['scale'], shape),
      lambda attrs: _require(attrs['scale'] >= 0,
                             f'_random_normal: scale={attrs["scale"]} must be non-negative'),
      (Param('loc', p_float, 0.0), Param('scale', p_float, 1.0)),
      aliases=('random_normal', 'normal'), doc='Gaussian draws with mean loc and std scale.')
_draw('_random_randint',
      lambda gen, attrs, shape: gen.integers(attrs['low'], attrs['high'], shape),
      lambda attrs: _require(attrs['low'] < attrs['high'],
                             f'_random_randint: low={attrs["low"]} must be < '
                             f'high={attrs["high"]}'),
      (Param('low', p_int, REQUIRED), Param('high', p_int, REQUIRED)), dtype='int32',
      aliases=('random_randint',), doc='Uniform integers from [low, high).')


# ----------------------------------------------------------------------------------------------
# More distributions (their dtype defaults to None, read as float32), and _shuffle

def _random_op(name, draw, check, params, doc):
    def kernel(attrs, ins, outs, ctx):
        check(attrs)
        out = outs[0]
        out[...] = ctx.xp.asarray(draw(ctx.random.generator, attrs, out.shape))
    register(f'_random_{name}', kernel, inputs=(), resources=('random',), random=True,
             infer_shape=lambda attrs, s: ([], [attrs['shape'] or (1,)]),
             infer_type=lambda attrs, dt: ([], [attrs['dtype'] or np.dtype(np.float32)]),
             params=params + (SHAPE, CTX, Param('dtype', p_optional(p_dtype), None,
                                                'dtype of the output (None: float32)')),
             aliases=(f'random_{name}',), doc=doc)


def _generalized_negative_binomial(gen, attrs, shape):
    mu, alpha = attrs['mu'], attrs['alpha']
    if alpha == 0:
        return gen.poisson(mu, shape)
    return gen.poisson(gen.gamma(1 / alpha, mu * alpha, shape))


_random_op('exponential', lambda gen, a, shape: gen.exponential(1 / a['lam'], shape),
           lambda a: _require(a['lam'] > 0, f'_random_exponential: lam={a["lam"]} must be '
                              'positive'),
           (Param('lam', p_float, 1.0, 'rate (inverse scale)'),),
           'Exponential draws with rate lam.')
_random_op('gamma', lambda gen, a, shape: gen.gamma(a['alpha'], a['beta'], shape),
           lambda a: _require(a['alpha'] > 0 and a['beta'] > 0,
                              f'_random_gamma: alpha={a["alpha"]} and beta={a["beta"]} must be '
                              'positive'),
           (Param('alpha', p_float, 1.0, 'shape'), Param('beta', p_float, 1.0, 'scale')),
           'Gamma draws with shape alpha and scale beta.')
_random_op('poisson', lambda gen, a, shape: gen.poisson(a['lam'], shape),
           lambda a: _require(a['lam'] >= 0, f'_random_poisson: lam={a["lam"]} must be '
                              'non-negative'),
           (Param('lam', p_float, 1.0, 'the mean'),), 'Poisson draws with mean lam.')
_random_op('negative_binomial',
           lambda gen, a, shape: gen.negative_binomial(a['k'], a['p'], shape),
           lambda a: _require(a['k'] > 0 and 0 < a['p'] <= 1,
                              f'_random_negative_binomial: k={a["k"]} must be positive and '
                              f'p={a["p"]} in (0, 1]'),
           (Param('k', p_int, 1, 'successes to wait for'),
            Param('p', p_float, 1.0, 'success probability of each trial')),
           'Failures before the k-th success, with success probability p.')
_random_op('generalized_negative_binomial', _generalized_negative_binomial,
           lambda a: _require(a['mu'] > 0 and a['alpha'] >= 0,
                              f'_random_generalized_negative_binomial: mu={a["mu"]} must be '
                              f'positive and alpha={a["alpha"]} non-negative'),
           (Param('mu', p_float, 1.0, 'the mean'),
            Param('alpha', p_float, 1.0, 'dispersion (0: Poisson)')),
           'Negative binomial draws with mean mu and dispersion alpha.')


def _shuffle_kernel(attrs, ins, outs, ctx):
    order = ctx.xp.asarray(ctx.random.generator.permutation(ins[0].shape[0]))
    outs[0][...] = ins[0][order]


register('_shuffle', _shuffle_kernel, resources=('random',), random=True,
         aliases=('shuffle',), doc='The input with its first axis randomly permuted.')
