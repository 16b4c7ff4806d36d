"""The dtype a kernel accumulates sums in: MXNet's ``MXNET_SAFE_ACCUMULATION`` rule, in one place.

Without safe accumulation a float sums in its own dtype; with it float16 (and bfloat16) sum in
float32 and float32 in float64. Integers and booleans sum in their own dtype. A kernel passes the
flag its :class:`~ember.op.registry.KernelContext` captured at the call
(``ctx.safe_accumulation``), so the configuration of the call applies even when the kernel runs
later on an engine worker.

>>> import numpy as np
>>> accumulation_dtype(np.float16, safe=False), accumulation_dtype(np.float16, safe=True)
(dtype('float16'), dtype('float32'))
>>> accumulation_dtype(np.float32, safe=True), accumulation_dtype(np.int32, safe=True)
(dtype('float64'), dtype('int32'))
>>> accumulation_dtype(np.float16, safe=False, half_in_float32=True)
dtype('float32')
"""
from __future__ import annotations

import numpy as np

from ember import config

__all__ = ['accumulation_dtype']

_FLOAT32 = np.dtype(np.float32)
_FLOAT64 = np.dtype(np.float64)
# Floating dtypes NumPy does not mark as kind 'f' (ml_dtypes registers them as kind 'V').
_EXTENSION_FLOATS = frozenset({'bfloat16'})


def accumulation_dtype(dtype, safe: bool | None = None, half_in_float32: bool = False):
    """The dtype to sum values of `dtype` in.

    `safe` is the ``MXNET_SAFE_ACCUMULATION`` flag of the call (``ctx.safe_accumulation`` in a
    kernel); None reads the configuration now, for code that runs at the call. With
    `half_in_float32`, 16-bit floats sum in float32 even without the flag (kernels whose
    results NumPy's float16 arithmetic would make too coarse, such as normalisation).
    """
    dtype = np.dtype(dtype)
    if dtype.kind != 'f' and dtype.name not in _EXTENSION_FLOATS:
        return dtype
    if safe is None:
        safe = config.get('MXNET_SAFE_ACCUMULATION')
    if dtype.itemsize < 4:
        return _FLOAT32 if safe or half_in_float32 else dtype
    if dtype.itemsize == 4 and safe:
        return _FLOAT64
    return dtype
