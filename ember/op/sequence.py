"""Operators on padded batches of sequences: SequenceMask, SequenceLast and SequenceReverse.

Data is laid out time-major, (max_len, batch, ...) with ``axis=0`` (MXNet's default), or
batch-major, (batch, max_len, ...) with ``axis=1``. With ``use_sequence_length=True`` a second
input ``sequence_length`` of shape (batch,) gives each sequence's length (fractional lengths are
truncated, as MXNet casts them to int); without it every sequence fills ``max_len``.

>>> import numpy as np
>>> from ember.op import registry
>>> data = np.arange(6, dtype=np.float32).reshape(3, 2)        # 3 steps, 2 sequences
>>> lengths = np.array([1, 3], np.float32)
>>> op = registry.get('SequenceMask')
>>> attrs = op.parse_attrs({'use_sequence_length': True, 'value': -1})
>>> out = np.empty_like(data)
>>> op.kernel(attrs, [data, lengths], [out], registry.KernelContext(None))
>>> out.tolist()
[[0.0, 1.0], [-1.0, 3.0], [-1.0, 5.0]]
"""
from __future__ import annotations

import numpy as np

from ember.base import EmberError
from ember.op.nn._common import assign_shape, typed_like_first
from ember.op.registry import Param, ShapeError, p_bool, p_float, p_int, register

__all__ = ['step_lengths']

LENGTH_PARAMS = (
    Param('use_sequence_length', p_bool, False,
          'take a second input sequence_length of shape (batch,)'),
    Param('axis', p_int, 0, 'the time axis: 0 for (max_len, batch, ...), 1 for (batch, '
          'max_len, ...)'),
)
MASK_PARAMS = LENGTH_PARAMS + (Param('value', p_float, 0.0, 'the value of masked positions'),)


def _inputs(attrs):
    return ['data', 'sequence_length'] if attrs['use_sequence_length'] else ['data']


def _time_axis(name, attrs, ndim):
    axis = attrs['axis']
    if axis not in (0, 1) or ndim < 2:
        raise ShapeError(f'{name}: axis={axis} with {ndim}-D data: the time axis must be 0 or 1 '
                         'of data with at least 2 dimensions')
    return axis


def _infer_for(name, drop_time_axis=False):
    def infer(attrs, in_shapes):
        in_shapes = list(in_shapes)
        data = in_shapes[0]
        if data is None:
            return in_shapes, [None]
        axis = _time_axis(name, attrs, len(data))
        if attrs['use_sequence_length']:
            assign_shape(name, in_shapes, 1, 'sequence_length', (data[1 - axis],))
        out = data[:axis] + data[axis + 1:] if drop_time_axis else data
        return in_shapes, [tuple(out)]
    return infer


def step_lengths(xp, attrs, ins):
    """Each sequence's length as int64 (max_len for all without use_sequence_length)."""
    data, axis = ins[0], attrs['axis']
    if attrs['use_sequence_length']:
        return ins[1].astype(np.int64)
    return xp.full((data.shape[1 - axis],), data.shape[axis], dtype=np.int64)


def _time_major(xp, array, axis):
    """A (max_len, batch, ...) view of `array`."""
    return array if axis == 0 else xp.swapaxes(array, 0, 1)


def _check_lengths(name, xp, lengths, low, high):
    bad = (lengths < low) | (lengths > high)
    if bool(bad.any()):
        index = int(xp.argmax(bad))
        raise EmberError(f'{name}: sequence_length[{index}]={int(lengths[index])} is outside '
                         f'[{low}, {high}] ({high} is the length of the time axis)')


# ----------------------------------------------------------------------------------------------
# SequenceMask

def _mask_kernel(attrs, ins, outs, ctx):
    xp, data, out = ctx.xp, ins[0], outs[0]
    if out is not data:
        out[...] = data
    if not attrs['use_sequence_length']:
        return
    steps = _time_major(xp, out, attrs['axis'])
    past_end = xp.arange(steps.shape[0])[:, None] >= step_lengths(xp, attrs, ins)[None, :]
    steps[past_end] = attrs['value']


def _mask_gradient(F, attrs, inputs, outputs, out_grads):
    if not attrs['use_sequence_length']:
        return [out_grads[0]]
    return [F.SequenceMask(out_grads[0], inputs[1], use_sequence_length=True, value=0.0,
                           axis=attrs['axis']), None]


register('SequenceMask', _mask_kernel, inputs=_inputs, infer_shape=_infer_for('SequenceMask'),
         infer_type=typed_like_first(free=(1,)), params=MASK_PARAMS, gradient=_mask_gradient,
         inplace=((0, 0),),
         doc='Set the steps of each sequence at or past its length to `value`.')


# ----------------------------------------------------------------------------------------------
# SequenceLast

def _last_steps(name, xp, attrs, ins):
    lengths = step_lengths(xp, attrs, ins)
    _check_lengths(name, xp, lengths, 1, ins[0].shape[attrs['axis']])
    return lengths - 1, xp.arange(lengths.shape[0])


def _last_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    steps, batch = _last_steps('SequenceLast', xp, attrs, ins)
    outs[0][...] = _time_major(xp, ins[0], attrs['axis'])[steps, batch]


def _backward_last_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data[, sequence_length]): out_grad placed at each last step."""
    xp, grad = ctx.xp, outs[0]
    steps, batch = _last_steps('SequenceLast', xp, attrs, ins[1:])
    grad[...] = 0
    _time_major(xp, grad, attrs['axis'])[steps, batch] = ins[0]


def _last_gradient(F, attrs, inputs, outputs, out_grads):
    rest = [None] if attrs['use_sequence_length'] else []
    return [F._backward_SequenceLast(out_grads[0], *inputs, **attrs)] + rest


register('SequenceLast', _last_kernel, inputs=_inputs,
         infer_shape=_infer_for('SequenceLast', drop_time_axis=True),
         infer_type=typed_like_first(free=(1,)), params=LENGTH_PARAMS, gradient=_last_gradient,
         doc='The last step of each sequence (step length-1); the time axis is removed.')
register('_backward_SequenceLast', _backward_last_kernel,
         inputs=lambda attrs: ['out_grad'] + _inputs(attrs), outputs=('data_grad',),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]), params=LENGTH_PARAMS,
         doc="SequenceLast's gradient: out_grad at each sequence's last step, zeros elsewhere.")


# ----------------------------------------------------------------------------------------------
# SequenceReverse

def _reverse_kernel(attrs, ins, outs, ctx):
    xp, axis = ctx.xp, attrs['axis']
    data = _time_major(xp, ins[0], axis)
    max_len = data.shape[0]
    lengths = step_lengths(xp, attrs, ins)
    _check_lengths('SequenceReverse', xp, lengths, 0, max_len)
    steps = xp.arange(max_len)[:, None]
    # step t of a sequence of length L comes from step L-1-t; padding steps stay in place
    source = xp.where(steps < lengths[None, :], lengths[None, :] - 1 - steps, steps)
    source = source.reshape(source.shape + (1,) * (data.ndim - 2))
    reversed_steps = xp.take_along_axis(data, xp.broadcast_to(source, data.shape), axis=0)
    _time_major(xp, outs[0], axis)[...] = reversed_steps


def _reverse_gradient(F, attrs, inputs, outputs, out_grads):
    rest = [None] if attrs['use_sequence_length'] else []
    return [F.SequenceReverse(out_grads[0], *inputs[1:], **attrs)] + rest


register('SequenceReverse', _reverse_kernel, inputs=_inputs,
         infer_shape=_infer_for('SequenceReverse'), infer_type=typed_like_first(free=(1,)),
         params=LENGTH_PARAMS, gradient=_reverse_gradient,
         doc='Reverse the first length steps of each sequence; padding steps stay in place.')
