"""Casts of mixed precision: ``amp_cast`` and ``amp_multicast`` (MXNet's, inserted by
``mx.contrib.amp``), and ``_round_to_precision`` (inserted by ``--auto-cast`` in
NEURON_CC_FLAGS).

``amp_cast`` converts floating-point data to `dtype` and leaves other data as it is;
``amp_multicast`` converts its floating inputs to the widest floating type among them (the
narrowest with ``cast_narrow``). Their gradients convert back. ``_round_to_precision`` keeps
float32 but rounds each value to bfloat16, float16 or tf32 precision (to nearest-even, or
stochastically under NEURON_RT_STOCHASTIC_ROUNDING_EN): a product of such operands is what a
reduced-precision unit computes, accumulated in float32. Its gradient passes through.

>>> import ember as mx
>>> x = mx.nd.array([1.0, 1.00390625, 3.0])
>>> mx.nd.amp_cast(x, dtype='bfloat16').dtype.__name__
'bfloat16'
>>> mx.nd._round_to_precision(x, precision='bf16').asnumpy().tolist()
[1.0, 1.0, 3.0]
"""
from __future__ import annotations

import numpy as np

from ember.op import precision
from ember.op.matrix import copy_into
from ember.op.registry import REQUIRED, Param, ShapeError, p_bool, p_dtype, p_int, register

__all__ = []


def _is_float(dtype) -> bool:
    return dtype is not None and (np.dtype(dtype).kind == 'f' or dtype == precision.BFLOAT16)


def _cast_to(out, value):
    if out.dtype in precision.ROUNDED and value.dtype in precision.WIDE:
        precision.round_into(out, value)
    else:
        copy_into(out, value.astype(out.dtype, copy=False))


def _amp_cast_kernel(attrs, ins, outs, ctx):
    _cast_to(outs[0], ins[0])


def _amp_cast_type(attrs, dtypes):
    dtype = dtypes[0]
    return list(dtypes), [attrs['dtype'] if _is_float(dtype) else dtype]


register('amp_cast', _amp_cast_kernel, params=(Param('dtype', p_dtype, REQUIRED,
                                                     'the floating type to cast to'),),
         infer_type=_amp_cast_type,
         gradient=lambda F, attrs, ins, outs, og: [F._cast_like(og[0], ins[0])],
         doc='Floating-point data converted to dtype (other data unchanged); for AMP.')


def _widest(attrs, dtypes):
    floats = [np.dtype(d) for d in dtypes if _is_float(d)]
    if not floats:
        return None
    pick = min if attrs['cast_narrow'] else max
    return pick(floats, key=lambda d: d.itemsize)


def _multicast_type(attrs, dtypes):
    if len(dtypes) != attrs['num_outputs']:
        raise ShapeError(f'amp_multicast: {len(dtypes)} inputs for num_outputs='
                         f'{attrs["num_outputs"]}')
    target = _widest(attrs, dtypes)
    return list(dtypes), [target if _is_float(d) else d for d in dtypes]


def _multicast_kernel(attrs, ins, outs, ctx):
    for out, value in zip(outs, ins):
        _cast_to(out, value)


def _multicast_shape(attrs, shapes):
    return list(shapes), list(shapes)


register('amp_multicast', _multicast_kernel,
         inputs=lambda attrs: [f'data{i}' for i in range(attrs['num_outputs'])],
         variadic='num_outputs',
         outputs=lambda attrs: [f'output{i}' for i in range(attrs['num_outputs'])],
         params=(Param('num_outputs', p_int, REQUIRED, 'the number of inputs and outputs'),
                 Param('cast_narrow', p_bool, False,
                       'cast to the narrowest floating type instead of the widest')),
         infer_shape=_multicast_shape, infer_type=_multicast_type,
         gradient=lambda F, attrs, ins, outs, og: [F._cast_like(g, x)
                                                   for g, x in zip(og, ins)],
         doc='Floating inputs converted to the widest floating type among them; for AMP.')


def _precision_param(text):
    if text not in precision.PRECISIONS:
        raise ValueError(', '.join(precision.PRECISIONS))
    return text


def _round_kernel(attrs, ins, outs, ctx):
    values = precision.rounded(ins[0], attrs['precision'], attrs['saturate'])
    copy_into(outs[0], values.astype(outs[0].dtype, copy=False))


register('_round_to_precision', _round_kernel,
         params=(Param('precision', _precision_param, REQUIRED, 'bf16, fp16 or tf32'),
                 Param('saturate', p_bool, False,
                       'values past the format become its largest finite value')),
         gradient=lambda F, attrs, ins, outs, og: [og[0]], elemwise=False,
         doc='Each value rounded to bf16, fp16 or tf32 precision, kept in its dtype.')
