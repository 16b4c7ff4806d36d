"""``_round_to_precision``, which ``--auto-cast`` (NEURON_CC_FLAGS) puts before products: it
keeps float32 but rounds each value to bfloat16, float16 or tf32 precision (to nearest-even,
or stochastically under NEURON_RT_STOCHASTIC_ROUNDING_EN), so that a product of such operands
is what a reduced-precision unit computes, accumulated in float32. Its gradient passes
through. (MXNet's AMP casts, ``amp_cast`` and ``amp_multicast``, are in ``op/numeric.py``.)

>>> import ember as mx
>>> x = mx.nd.array([1.0, 1.00390625, 3.0])
>>> mx.nd._round_to_precision(x, precision='bf16').asnumpy().tolist()
[1.0, 1.0, 3.0]
"""
from __future__ import annotations

from ember.op import precision
from ember.op.matrix import copy_into
from ember.op.registry import REQUIRED, Param, p_bool, register

__all__ = []


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
