"""Operators without array inputs: constants and ranges (random draws are :mod:`ember.op.random`).

They take the output's ``shape``, ``dtype`` and device (``ctx``) as attributes.

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

from ember.op.registry import (Param, ShapeError, p_bool, p_dtype, p_float, p_int, p_optional,
                               p_shape, register)

__all__ = ['p_ctx', 'arange_length', 'CTX', 'SHAPE', 'dtype_param', 'no_input_type']


def p_ctx(value):
    """A device, its text form ('cpu(0)') or None; kept as given, read by the caller."""
    if value is None or isinstance(value, str) or hasattr(value, 'device_type'):
        return value
    raise ValueError("a device such as mx.cpu(0) or 'cpu(0)'")


CTX = Param('ctx', p_ctx, None, 'the device of the output (None: the current device)')
SHAPE = Param('shape', p_shape, (), 'shape of the output')


def dtype_param(default):
    """The ``dtype`` parameter of an operator without inputs, `default` when not given."""
    return Param('dtype', p_optional(p_dtype), np.dtype(default), 'dtype of the output')


def _no_input_infer(attrs, in_shapes):
    return [], [attrs['shape']]


def no_input_type(attrs, in_dtypes):
    """The output's dtype: the ``dtype`` attribute, float32 when it is None."""
    return [], [attrs['dtype'] or np.dtype(np.float32)]


def _constant(name, value, extra=(), doc=''):
    def kernel(attrs, ins, outs, ctx):
        outs[0].fill(attrs['value'] if value is None else value)
    register(name, kernel, inputs=(), infer_shape=_no_input_infer, infer_type=no_input_type,
             params=(SHAPE, CTX, dtype_param('float32')) + extra, doc=doc)


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
         infer_type=no_input_type,
         params=(Param('start', p_float, 0.0), Param('stop', p_optional(p_float), None),
                 Param('step', p_float, 1.0), Param('repeat', p_int, 1),
                 Param('infer_range', p_bool, False), CTX, dtype_param('float32')),
         doc='Evenly spaced values in [start, stop), each repeated `repeat` times.')
