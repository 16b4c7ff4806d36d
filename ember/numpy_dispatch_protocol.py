"""MXNet's ``mxnet.numpy_dispatch_protocol``: decorators for code that relies on NumPy's
dispatch protocols, under which NumPy's own functions and ufuncs given ``mx.np`` arrays run
Ember's functions (``ndarray.__array_function__``, ``ndarray.__array_ufunc__``).

NumPy has had both protocols since 1.17, older than any NumPy Ember runs with, so the decorated
function always runs; a failure inside it is reported as a failure of the protocol.

>>> import numpy
>>> from ember import numpy as np
>>> from ember.numpy_dispatch_protocol import with_array_function_protocol
>>> @with_array_function_protocol
... def check():
...     assert isinstance(numpy.sum(np.ones(2)), np.ndarray)
>>> check()
>>> from ember.numpy_dispatch_protocol import with_array_ufunc_protocol
>>> @with_array_ufunc_protocol
... def check_ufunc():
...     assert isinstance(numpy.exp(np.ones(2)), np.ndarray)
>>> check_ufunc()
"""
from __future__ import annotations

import functools

__all__ = ['with_array_function_protocol', 'with_array_ufunc_protocol']


def _protocol_runner(protocol):
    def decorator(func):
        @functools.wraps(func)
        def run(*args, **kwargs):
            try:
                func(*args, **kwargs)
            except Exception as exc:
                raise RuntimeError(f'{func.__name__} failed under NumPy\'s array {protocol} '
                                   f'protocol: {exc}') from exc
        return run
    return decorator


with_array_function_protocol = _protocol_runner('function')
with_array_function_protocol.__doc__ = (
    'Run `func` (it returns nothing) with NumPy\'s array function protocol; raise '
    'RuntimeError naming it when it fails.')
with_array_ufunc_protocol = _protocol_runner('ufunc')
with_array_ufunc_protocol.__doc__ = (
    'Run `func` (it returns nothing) with NumPy\'s array ufunc protocol; raise RuntimeError '
    'naming it when it fails.')
