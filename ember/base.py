"""Errors and small numeric helpers shared by every layer."""
from __future__ import annotations

import os

import numpy as np

from ember import config
from ember.config import ConfigError

__all__ = ['EmberError', 'MXNetError', 'ConfigError', 'prod', 'dtype_of', 'DTYPE_NAMES',
           'data_dir']


class EmberError(Exception):
    """An error raised by Ember's runtime (MXNet programs catch it as ``MXNetError``)."""


MXNetError = EmberError

# MXNet's dtype names, in the order of its type flags (see docs/formats).
DTYPE_NAMES = ('float32', 'float64', 'float16', 'uint8', 'int32', 'int8', 'int64', 'bool')


def prod(shape) -> int:
    """Number of elements of a shape (1 for a scalar shape)."""
    size = 1
    for dim in shape:
        size *= dim
    return size


def dtype_of(dtype) -> np.dtype:
    """A NumPy dtype from a name, a type or a dtype; bfloat16 through ml_dtypes."""
    if dtype is None:
        return np.dtype(np.float32)
    if isinstance(dtype, np.dtype):
        return dtype
    if dtype in ('bfloat16', 'bf16'):
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(dtype)
    except TypeError:
        raise TypeError(f'dtype {dtype!r} is not a data type; expected a name such as '
                        "'float32', 'float16', 'int32' or a NumPy type") from None


def data_dir() -> str:
    """Ember's data directory: ``MXNET_HOME`` with ``~`` expanded (default ``~/.mxnet``).

    Read at each call, so an override applies at once. It is not created here: callers that
    write into it create it (``os.makedirs(path, exist_ok=True)``).

    >>> with config.override(MXNET_HOME='/tmp/ember-data'):
    ...     data_dir()
    '/tmp/ember-data'
    """
    return os.path.expanduser(config.get('MXNET_HOME'))
