"""MXNet's ``mx.util``: the NumPy-semantics switches, their decorators, and process helpers.

Two switches choose how MXNet 1.x code behaves. *NumPy shape* semantics lets ``()`` be the
shape of a scalar and ``0`` a length; Ember's arrays always allow both, so the switch is only
recorded for code that asks. *NumPy array* semantics makes Gluon hand out ``mx.np.ndarray``
(parameters, layer outputs, data batches) instead of ``mx.nd.NDArray``; ``set_np`` turns on both
and refuses array semantics without shape semantics. Both are per thread, as in MXNet 1.9.

>>> from ember import util
>>> util.is_np_array()
False
>>> with util.np_shape(), util.np_array():
...     util.is_np_array(), util.is_np_shape()
(True, True)
>>> @util.use_np
... def inside():
...     return util.is_np_array()
>>> inside(), util.is_np_array()
(True, False)
"""
from __future__ import annotations

import ctypes
import functools
import inspect
import threading

from ember import backend, config
from ember.base import EmberError
from ember.numpy import _ufunc

__all__ = ['is_np_shape', 'set_np_shape', 'np_shape', 'use_np_shape',
           'is_np_array', 'np_array', 'use_np_array', 'use_np', 'set_np', 'reset_np',
           'getenv', 'setenv', 'get_gpu_count', 'get_gpu_memory', 'get_cuda_compute_capability',
           'np_ufunc_legal_option', 'wrap_np_unary_func', 'wrap_np_binary_func', 'set_module',
           'c_str', 'py_str']


class _Semantics(threading.local):
    shape = False
    array = False


_state = _Semantics()


# ----------------------------------------------------------------------------------------------
# NumPy shape semantics

def is_np_shape() -> bool:
    """Whether NumPy shape semantics is on in this thread."""
    return _state.shape


def set_np_shape(active) -> bool:
    """Turn NumPy shape semantics on or off; returns the previous state.

    Turning it off while NumPy array semantics is on is refused, as in MXNet."""
    active = bool(active)
    if not active and _state.array:
        raise ValueError('set_np_shape(False): NumPy array semantics is still on and needs NumPy '
                         'shape semantics; call reset_np() to turn both off')
    previous, _state.shape = _state.shape, active
    return previous


class _Scope:
    """Sets one switch for a ``with`` block and restores it after."""

    def __init__(self, setter, active):
        self._setter, self._active = setter, active
        self._saved = []

    def __enter__(self):
        self._saved.append(None if self._active is None else self._setter(self._active))
        return self

    def __exit__(self, *exc):
        previous = self._saved.pop()
        if previous is not None:
            self._setter(previous)
        return False


def np_shape(active=True) -> _Scope:
    """A ``with`` block under (or, with ``active=False``, without) NumPy shape semantics."""
    return _Scope(set_np_shape, active)


# ----------------------------------------------------------------------------------------------
# NumPy array semantics

def is_np_array() -> bool:
    """Whether NumPy array semantics is on in this thread: Gluon then hands out mx.np arrays."""
    return _state.array


def _set_np_array(active) -> bool:
    previous, _state.array = _state.array, bool(active)
    return previous


def np_array(active=True) -> _Scope:
    """A ``with`` block under (or without) NumPy array semantics."""
    return _Scope(_set_np_array, active)


def set_np(shape=True, array=True) -> None:
    """Turn on NumPy shape and array semantics (``npx.set_np()``).

    >>> from ember import util
    >>> util.set_np(); util.is_np_array()
    True
    >>> util.reset_np(); util.is_np_array()
    False
    """
    if array and not shape:
        raise ValueError('set_np(shape=False, array=True): NumPy array semantics needs NumPy '
                         'shape semantics')
    if not array:
        _set_np_array(False)
    set_np_shape(shape)
    _set_np_array(array)


def reset_np() -> None:
    """Turn off both NumPy semantics."""
    set_np(shape=False, array=False)


# ----------------------------------------------------------------------------------------------
# Decorators

def _decorate(func, wrap_callable, what):
    if inspect.isclass(func):
        for name, member in inspect.getmembers(func, _wrappable):
            if isinstance(member, property):
                setattr(func, name, property(wrap_callable(member.__get__), member.__set__,
                                             member.__delete__, member.__doc__))
            else:
                setattr(func, name, wrap_callable(member))
        return func
    if callable(func):
        return wrap_callable(func)
    raise TypeError(f'{what} decorates classes and callables, got {type(func).__name__}')


def _wrappable(member):
    return inspect.isfunction(member) or inspect.ismethod(member) or isinstance(member, property)


def _scoped(make_scope):
    def wrap(func):
        @functools.wraps(func)
        def scoped(*args, **kwargs):
            with make_scope():
                return func(*args, **kwargs)
        return scoped
    return wrap


def use_np_shape(func):
    """Run a function, or every method and property of a class, under NumPy shape semantics."""
    return _decorate(func, _scoped(np_shape), 'use_np_shape')


def use_np_array(func):
    """Run a function, or every method and property of a class, under NumPy array semantics
    (``use_np`` turns on NumPy shape semantics too, which mx.np code expects)."""
    return _decorate(func, _scoped(np_array), 'use_np_array')


def use_np(func):
    """Both ``use_np_shape`` and ``use_np_array``: the usual decorator of Gluon blocks written
    for ``mx.np``."""
    return use_np_shape(use_np_array(func))


# ----------------------------------------------------------------------------------------------
# Keyword checks of NumPy-style universal functions

def np_ufunc_legal_option(key, value) -> bool:
    """Whether ``key=value`` is a keyword a NumPy ufunc accepts with a value it accepts.

    >>> np_ufunc_legal_option('casting', 'same_kind'), np_ufunc_legal_option('casting', 'x')
    (True, False)
    """
    return _ufunc.legal_option(key, value)


def _finish(function, result, dtype, where, out):
    return _ufunc.finish(result, dtype, where, out, where_function=_np_where)


def _np_where(condition, x, y):
    from ember.numpy import _op
    return _op.where_(condition, x, y)


def wrap_np_unary_func(func):
    """Give ``func(x, out=None)`` NumPy's ufunc keywords (where, casting, order, dtype,
    subok), rejecting unknown ones with a TypeError.

    >>> from ember import numpy as np
    >>> square = wrap_np_unary_func(lambda x, out=None: np.multiply(x, x, out=out))
    >>> square(np.array([1., 2.]), dtype='float64')
    array([1., 4.], dtype=float64)
    """
    @functools.wraps(func)
    def unary(x, out=None, **kwargs):
        dtype, where = _ufunc.options(func.__name__, kwargs)
        target = out if dtype is None and where is True else None
        return _finish(func, func(x, out=target), dtype, where, out)
    return unary


def wrap_np_binary_func(func):
    """``wrap_np_unary_func`` for ``func(x1, x2, out=None)``."""
    @functools.wraps(func)
    def binary(x1, x2, out=None, **kwargs):
        dtype, where = _ufunc.options(func.__name__, kwargs)
        target = out if dtype is None and where is True else None
        return _finish(func, func(x1, x2, out=target), dtype, where, out)
    return binary


def set_module(module):
    """Decorator that sets ``__module__`` of a function or class (how its name prints)."""
    def decorator(func):
        if module is not None:
            func.__module__ = module
        return func
    return decorator


# ----------------------------------------------------------------------------------------------
# The process: environment and GPUs

def getenv(name):
    """The value of environment variable `name`, or None when it is not set.

    >>> from ember import util
    >>> util.setenv('UTIL_DOCTEST_VALUE', 'on'); util.getenv('UTIL_DOCTEST_VALUE')
    'on'
    >>> util.setenv('UTIL_DOCTEST_VALUE', None); util.getenv('UTIL_DOCTEST_VALUE') is None
    True
    """
    return config.environ_value(name)


def setenv(name, value) -> None:
    """Set environment variable `name` to the text `value` (None removes it)."""
    config.set_environ_value(name, value)


def get_gpu_count() -> int:
    """How many GPUs this process can use."""
    return backend.num_gpus()


def get_gpu_memory(gpu_dev_id):
    """(free, total) bytes of memory of GPU `gpu_dev_id`."""
    from ember.device import gpu
    found = backend.num_gpus()
    if not 0 <= int(gpu_dev_id) < found:
        raise EmberError(f'get_gpu_memory: no GPU {gpu_dev_id}; this machine has {found}')
    device_backend = backend.for_device(gpu(int(gpu_dev_id)))
    return device_backend.free_memory(), device_backend.total_memory()


def get_cuda_compute_capability(ctx) -> int:
    """The compute capability of the GPU of device `ctx` as an int (8.0 gives 80)."""
    if getattr(ctx, 'device_type', None) != 'gpu':
        raise ValueError(f'get_cuda_compute_capability: expected a GPU device, got {ctx}')
    return backend.for_device(ctx).compute_capability()


def c_str(string):
    """`string` as a C ``char *`` (``ctypes.c_char_p``) for calls into C libraries."""
    return ctypes.c_char_p(string.encode('utf-8'))


def py_str(x) -> str:
    """Bytes from a C library as a Python string."""
    return x.decode('utf-8')
