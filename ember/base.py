"""Errors and small helpers shared by every layer; MXNet's ``mx.base`` names.

>>> from ember.base import MXNetError, NotImplementedForSymbol
>>> print(NotImplementedForSymbol(len, '+=', 1))  # doctest: +NORMALIZE_WHITESPACE
Function len (namely operator '+=') with arguments (<class 'int'>) is not implemented for
Symbol and only available in NDArray.
>>> issubclass(NotImplementedForSymbol, MXNetError), issubclass(MXNetError, RuntimeError)
(True, True)
"""
from __future__ import annotations

import inspect
import os
import sys

import numpy as np

from ember import config
from ember.config import ConfigError

__all__ = ['EmberError', 'MXNetError', 'ConfigError', 'prod', 'dtype_of', 'DTYPE_NAMES',
           'data_dir', 'data_dir_default', 'NotImplementedForSymbol',
           'NotSupportedForSparseNDArray', 'register_error', 'error_types', 'string_types',
           'numeric_types', 'integer_types', 'basestring', 'long', 'py_str', 'mx_real_t',
           'classproperty', 'with_metaclass', 'build_param_doc', 'add_fileline_to_docstring']

# Python 2 names that MXNet 1.x code still uses.
basestring = str
long = int
string_types = (str,)
numeric_types = (float, int, np.generic)
integer_types = (int, np.int32, np.int64)
mx_real_t = np.float32          # the default dtype of arrays

# Error classes by name (``register_error``); the class of an error reported by name.
error_types: dict = {}


def register_error(func_name=None, cls=None):
    """Record an error class in ``error_types`` under its name (or `func_name`); usable as a
    decorator, with or without a name.

    >>> @register_error
    ... class TooLate(RuntimeError):
    ...     pass
    >>> error_types['TooLate'] is TooLate
    True
    >>> register_error('OldName', TooLate) is TooLate and error_types['OldName'] is TooLate
    True
    """
    if callable(func_name):
        cls, func_name = func_name, func_name.__name__

    def register(error_class):
        error_types[func_name if isinstance(func_name, str) else error_class.__name__] = \
            error_class
        return error_class
    return register if cls is None else register(cls)


@register_error
class EmberError(RuntimeError):
    """An error raised by Ember's runtime (MXNet programs catch it as ``MXNetError``)."""


MXNetError = EmberError
error_types['MXNetError'] = EmberError


class _OnlyForNDArray(EmberError):
    """An NDArray operation called where it cannot run; says which operator and arguments."""
    _what = ''

    def __init__(self, function, alias=None, *args):
        super().__init__()
        self.function = getattr(function, '__name__', str(function))
        self.alias = alias
        self.args = [str(type(arg)) for arg in args]

    def __str__(self):
        text = f'Function {self.function}'
        if self.alias:
            text += f' (namely operator {self.alias!r})'
        if self.args:
            text += f' with arguments ({", ".join(self.args)})'
        return text + f' is not {self._what} and only available in NDArray.'


class NotImplementedForSymbol(_OnlyForNDArray, TypeError):
    """An NDArray operation that a Symbol cannot do (it holds no values)."""
    _what = 'implemented for Symbol'


class NotSupportedForSparseNDArray(_OnlyForNDArray):
    """An operation that a sparse array does not support."""
    _what = 'supported for SparseNDArray'


def py_str(x) -> str:
    """Bytes from a C interface as text (UTF-8)."""
    return x.decode('utf-8')


class _ClassProperty:
    def __init__(self, getter):
        self.getter = getter

    def __get__(self, obj, owner=None):
        return self.getter.__get__(obj, owner if owner is not None else type(obj))()


def classproperty(func):
    """A read-only property of the class itself (``Cls.value``), as MXNet's ``classproperty``.

    >>> class Scope:
    ...     @classproperty
    ...     def current(cls):
    ...         return cls.__name__
    >>> Scope.current
    'Scope'
    """
    if not isinstance(func, (classmethod, staticmethod)):
        func = classmethod(func)
    return _ClassProperty(func)


def with_metaclass(meta, *bases):
    """A base class whose subclasses are made by the metaclass `meta`.

    >>> class Meta(type):
    ...     pass
    >>> class Thing(with_metaclass(Meta, object)):
    ...     pass
    >>> type(Thing) is Meta, Thing.__bases__
    (True, (<class 'object'>,))
    """
    class _Temporary(meta):
        def __new__(cls, name, _bases, namespace):
            return meta(name, bases, namespace)
    return type.__new__(_Temporary, 'temporary_class', (), {})


def build_param_doc(arg_names, arg_types, arg_descs, remove_dup=True) -> str:
    """The 'Parameters' section of a docstring from names, types and descriptions.

    >>> print(build_param_doc(['data', 'axis'], ['NDArray', 'int'], ['Input.', '']))
    Parameters
    ----------
    data : NDArray
        Input.
    axis : int
    <BLANKLINE>
    """
    seen, entries = set(), []
    for name, type_info, description in zip(arg_names, arg_types, arg_descs):
        if name == 'num_args' or (remove_dup and name in seen):
            continue
        seen.add(name)
        entries.append(f'{name} : {type_info}' + (f'\n    {description}' if description else ''))
    return 'Parameters\n----------\n' + '\n'.join(entries) + '\n'


def add_fileline_to_docstring(module, incursive=True) -> None:
    """Append 'From:file:line' to the docstring of each function (and, with `incursive`, each
    class's methods) of `module` (a module or its name)."""
    if isinstance(module, str):
        module = sys.modules[module]
    for _, obj in inspect.getmembers(module):
        if inspect.isfunction(obj) or inspect.ismethod(obj):
            _add_fileline(getattr(obj, '__func__', obj))
        elif inspect.isclass(obj) and incursive:
            add_fileline_to_docstring(obj, False)


def _add_fileline(function) -> None:
    if function.__doc__ is None or 'From:' in function.__doc__:
        return
    try:
        path = inspect.getsourcefile(function)
        line = inspect.getsourcelines(function)[1]
    except (OSError, TypeError):
        return
    if path:
        function.__doc__ += f'\n\nFrom:{path}:{line}'

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


def data_dir_default() -> str:
    """Where data goes when ``MXNET_HOME`` is unset: ``~/.mxnet``."""
    return os.path.join(os.path.expanduser('~'), '.mxnet')


def data_dir() -> str:
    """Ember's data directory: ``MXNET_HOME`` with ``~`` expanded (default ``~/.mxnet``).

    Read at each call, so an override applies at once. It is not created here: callers that
    write into it create it (``os.makedirs(path, exist_ok=True)``).

    >>> with config.override(MXNET_HOME='/tmp/ember-data'):
    ...     data_dir()
    '/tmp/ember-data'
    """
    return os.path.expanduser(config.get('MXNET_HOME'))
