"""Operators without array inputs: constants, ranges and random draws.

They take the output's ``shape``, ``dtype`` and device (``ctx``) as attributes. Random operators
draw from the device's random stream (``resources=('random',)``), so seeding orders them, and
check their parameters in the kernel: a bad ``scale`` fails when the operator runs, and the
error surfaces at the next wait, as in MXNet.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_arange')
>>> attrs = op.parse_attrs({'start': 2, 'stop': 5})
>>> op.infer_shape(attrs, [])[1], op.infer_type(attrs, [])[1]
([(3,)], [dtype('float32')])
"""
from __future__ import annotations

import math

import numpy as np

from ember.base import EmberError
from ember.op.registry import (REQUIRED, Param, ShapeError, p_bool, p_dtype, p_float, p_int,
                               p_optional, p_shape, register)

__all__ = ['p_ctx', 'arange_length']


def p_ctx(value):
    """A device, its text form ('cpu(0)') or None; kept as given, read by the caller."""
    if value is None or isinstance(value, str) or hasattr(value, 'device_type'):
        return value
    raise ValueError("a device such as mx.cpu(0) or 'cpu(0)'")


CTX = Param('ctx', p_ctx, None, 'the device of the output (None: the current device)')
SHAPE = Param('shape', p_shape, (), 'shape of the output')


def _dtype_param(default):
    return Param('dtype', p_optional(p_dtype), np.dtype(default), 'dtype of the output')


def _no_input_infer(attrs, in_shapes):
    return [], [attrs['shape']]


def _no_input_type(attrs, in_dtypes):
    return [], [attrs['dtype'] or np.dtype(np.float32)]


def _constant(name, value, extra=(), doc=''):
    def kernel(attrs, ins, outs, ctx):
        outs[0].fill(attrs['value'] if value is None else value)
    register(name, kernel, inputs=(), infer_shape=_no_input_infer, infer_type=_no_input_type,
             params=(SHAPE, CTX, _dtype_param('float32')) + extra, doc=doc)


_constant('_zeros', 0, doc='An array of zeros.')
_constant('_ones', 1, doc='An array of ones.')
_constant('_full', None, extra=(Param('value', p_float, 0.0, 'the fill value'),),
          doc='An array filled with `value`.')


# ----------------------------------------------------------------------------------------------
# arange

def arange_length(start, stop, step) -> int:
    """How many values ``start, start+step, ...`` lie before `stop` (MXNet's rule)."""
    if step == 0:
        raise ShapeError('arange: step cannot be 0')
    length = math.ceil((stop - start) / step)
    if length < 0:
        raise ShapeError(f'arange: no values from {start} to {stop} with step {step}')
    return length


def _range_of(attrs):
    start, stop = attrs['start'], attrs['stop']
    if stop is None:
        start, stop = 0.0, start
    return start, stop, attrs['step']


def _arange_infer(attrs, in_shapes):
    return [], [(arange_length(*_range_of(attrs)) * attrs['repeat'],)]


def _arange_kernel(attrs, ins, outs, ctx):
    start, stop, step = _range_of(attrs)
    values = start + step * ctx.xp.arange(arange_length(start, stop, step), dtype=np.float64)
    if attrs['repeat'] > 1:
        values = ctx.xp.repeat(values, attrs['repeat'])
    outs[0][...] = values


register('_arange', _arange_kernel, inputs=(), infer_shape=_arange_infer,
         infer_type=_no_input_type,
         params=(Param('start', p_float, 0.0), Param('stop', p_optional(p_float), None),
                 Param('step', p_float, 1.0), Param('repeat', p_int, 1),
                 Param('infer_range', p_bool, False), CTX, _dtype_param('float32')),
         doc='Evenly spaced values in [start, stop), each repeated `repeat` times.')


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
    register(name, kernel, inputs=(), infer_shape=_random_shape, infer_type=_no_input_type,
             params=params + (SHAPE, CTX, _dtype_param(dtype)), resources=('random',),
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
