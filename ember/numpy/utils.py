"""MXNet's ``mxnet.numpy.utils``: the dtypes and constants of ``mx.np``.

>>> from ember.numpy import utils
>>> utils.float32 is __import__('numpy').float32, utils.NINF
(True, -inf)
"""
from __future__ import annotations

import builtins

import numpy as onp

__all__ = ['float16', 'float32', 'float64', 'uint8', 'int32', 'int8', 'int64', 'bool',
           'bool_', 'pi', 'inf', 'nan', 'PZERO', 'NZERO', 'newaxis', 'finfo', 'e', 'NINF',
           'PINF', 'NAN', 'NaN']

float16, float32, float64 = onp.float16, onp.float32, onp.float64
uint8, int8, int32, int64 = onp.uint8, onp.int8, onp.int32, onp.int64
bool_ = onp.bool_
bool = builtins.bool  # noqa: A001  (MXNet's name: the Python type)

pi, e, inf, nan = onp.pi, onp.e, onp.inf, onp.nan
PZERO, NZERO = 0.0, -0.0
PINF, NINF = onp.inf, -onp.inf
NAN = NaN = onp.nan
newaxis = None
finfo = onp.finfo
