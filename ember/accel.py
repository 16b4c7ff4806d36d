"""Shape arithmetic of the imperative hot path, compiled when possible (MXNet's Cython switch).

Every imperative operator call broadcasts, sizes or reshapes shapes, and every oneDNN call
binds the addresses of its arrays. ``ember._accel`` is a small C extension (built by
``setup.py``; optional) doing this without the interpreter's overhead; this module is its
loader and carries the pure-Python implementation that behaves identically, error messages
included.

``MXNET_ENABLE_CYTHON`` (default on) picks the compiled module when it imports, else Python;
``MXNET_ENFORCE_CYTHON`` makes a failed import an ``ImportError`` instead. Both are read once
at import; :func:`reload` reads them again (``config.override`` calls it). ``BACKEND`` says
which one is in use. Call the functions through the module (``accel.broadcast_shape``), since
:func:`reload` rebinds them.

>>> from ember import accel
>>> accel.broadcast_shape((2, 1, 4), (3, 1))
(2, 3, 4)
>>> accel.shape_size(())
1
>>> accel.infer_reshape((2, 3, 4), (-3, -2))
(6, 4)
>>> accel.infer_reshape((10, 5, 4), (-1, 0), reverse=True)
(50, 4)
"""
from __future__ import annotations

import importlib
import operator

import numpy as np

from ember import config

__all__ = ['BACKEND', 'broadcast_shape', 'shape_size', 'infer_reshape', 'data_address',
           'reload', 'python_impl']

INT64_MAX = 2**63 - 1
INT64_MIN = -2**63
SPECIAL_CODES = '(0, -1, -2, -3, -4)'


# ----------------------------------------------------------------------------------------------
# The pure-Python implementation. ember/_accel.c mirrors it line for line; keep them in step
# (tests/test_accel.py compares both on a table of cases, messages included).

def _dims(shape, what):
    """A tuple of dimensions from a tuple or list of integers, each in [0, 2**63 - 1]."""
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f'{what} must be a tuple or list of integers, got '
                        f'{type(shape).__name__}')
    dims = tuple([operator.index(dim) for dim in shape])
    for dim in dims:
        if dim < 0:
            raise ValueError(f'{what} {shape!r}: dimension {dim} is negative')
        if dim > INT64_MAX:
            raise ValueError(f'{what} {shape!r}: dimension {dim} is too large')
    return dims


def _size_or_none(dims):
    """Product of the dimensions; None when it exceeds 2**63 - 1 (a zero wins)."""
    if 0 in dims:
        return 0
    size = 1
    for dim in dims:
        size *= dim
        if size > INT64_MAX:
            return None
    return size


def _py_broadcast_shape(a, b):
    """NumPy broadcasting of two shapes."""
    lhs, rhs = _dims(a, 'shape'), _dims(b, 'shape')
    ndim = max(len(lhs), len(rhs))
    padded_lhs = (1,) * (ndim - len(lhs)) + lhs
    padded_rhs = (1,) * (ndim - len(rhs)) + rhs
    out = []
    for x, y in zip(padded_lhs, padded_rhs):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise ValueError(f'shapes {lhs} and {rhs} cannot be broadcast together: '
                             f'dimensions {x} and {y} differ and neither is 1')
    return tuple(out)


def _py_shape_size(shape):
    """Number of elements of a shape (1 for ())."""
    dims = _dims(shape, 'shape')
    size = _size_or_none(dims)
    if size is None:
        raise ValueError(f'shape {dims} has more than 2**63 - 1 elements')
    return size


def _codes(target):
    if not isinstance(target, (tuple, list)):
        raise TypeError(f'reshape target must be a tuple or list of integers, got '
                        f'{type(target).__name__}')
    codes = tuple([operator.index(code) for code in target])
    for code in codes:
        if code < INT64_MIN or code > INT64_MAX:
            raise ValueError(f'reshape target {target!r}: {code} is out of range')
    return codes


def _py_infer_reshape(src_shape, target, reverse=False):
    """The output shape of MXNet's Reshape with its special codes 0, -1, -2, -3 and -4."""
    src = _dims(src_shape, 'input shape')
    codes = _codes(target)
    size = _size_or_none(src)
    if size is None:
        raise ValueError(f'shape {src} has more than 2**63 - 1 elements')
    where = f'reshape {src} -> {codes}'
    dims = src[::-1] if reverse else src
    todo = codes[::-1] if reverse else codes
    out = []
    infer_at = -1
    used = 0
    i = 0
    while i < len(todo):
        code = todo[i]
        position = len(todo) - 1 - i if reverse else i
        if code > 0:
            out.append(code)
            used += 1
        elif code == 0:
            if used >= len(dims):
                raise ValueError(f'{where}: 0 at position {position} has no input dimension '
                                 'left to copy')
            out.append(dims[used])
            used += 1
        elif code == -1:
            if infer_at >= 0:
                raise ValueError(f'{where}: at most one dimension can be -1')
            infer_at = len(out)
            out.append(1)
            used += 1
        elif code == -2:
            out.extend(dims[used:])
            used = max(used, len(dims))
        elif code == -3:
            if used + 1 >= len(dims):
                raise ValueError(f'{where}: -3 at position {position} needs two input '
                                 'dimensions to merge')
            merged = _size_or_none((dims[used], dims[used + 1]))
            if merged is None:
                raise ValueError(f'{where}: merging {dims[used]} and {dims[used + 1]} '
                                 'overflows')
            out.append(merged)
            used += 2
        elif code == -4:
            if i + 2 >= len(todo):
                raise ValueError(f'{where}: -4 at position {position} must be followed by '
                                 'two sizes')
            if used >= len(dims):
                raise ValueError(f'{where}: -4 at position {position} has no input '
                                 'dimension left to split')
            out.extend(_split(where, dims[used], todo[i + 1], todo[i + 2]))
            used += 1
            i += 2
        else:
            raise ValueError(f'{where}: {code} at position {position} is neither a size nor '
                             f'a special code {SPECIAL_CODES}')
        i += 1
    if infer_at >= 0:
        known = _size_or_none(out)
        if not known or size % known:
            raise ValueError(f'{where}: cannot infer the -1 dimension: the other dimensions '
                             f'do not divide the input size {size}')
        out[infer_at] = size // known
    if reverse:
        out.reverse()
    if _size_or_none(out) != size:
        raise ValueError(f'{where}: output shape {tuple(out)} does not have the {size} '
                         'elements of the input')
    return tuple(out)


def _split(where, whole, first, second):
    """The two sizes that -4 splits `whole` into; one of them may be -1."""
    if first < -1 or second < -1:
        raise ValueError(f'{where}: -4 split sizes must be >= 0 or -1, got {first} and '
                         f'{second}')
    if first == -1 and second == -1:
        raise ValueError(f'{where}: -4 split sizes cannot both be -1')
    if first == -1:
        first = whole // second if second and whole % second == 0 else -1
    elif second == -1:
        second = whole // first if first and whole % first == 0 else -1
    if first < 0 or second < 0 or _size_or_none((first, second)) != whole:
        raise ValueError(f'{where}: split sizes {first} and {second} do not divide input '
                         f'dimension {whole}')
    return first, second


def _py_data_address(array):
    """The address of the first element of an array (an object with the buffer protocol)."""
    interface = getattr(array, '__array_interface__', None)
    if interface is None:
        try:
            interface = np.asarray(memoryview(array)).__array_interface__
        except TypeError:
            raise TypeError('data_address: expected an array (an object with the buffer '
                            f'protocol), got {type(array).__name__}') from None
    return interface['data'][0]


# ----------------------------------------------------------------------------------------------
# Choosing the implementation.

class _PythonImpl:
    broadcast_shape = staticmethod(_py_broadcast_shape)
    shape_size = staticmethod(_py_shape_size)
    infer_reshape = staticmethod(_py_infer_reshape)
    data_address = staticmethod(_py_data_address)


python_impl = _PythonImpl()
_FUNCTIONS = ('broadcast_shape', 'shape_size', 'infer_reshape', 'data_address')


def _choose():
    """(backend name, module-like object) from MXNET_ENABLE_CYTHON / MXNET_ENFORCE_CYTHON."""
    if not config.get('MXNET_ENABLE_CYTHON'):
        return 'python', python_impl
    try:
        return 'compiled', importlib.import_module('ember._accel')
    except ImportError as exc:
        if config.get('MXNET_ENFORCE_CYTHON'):
            raise ImportError(
                'MXNET_ENFORCE_CYTHON=1 and MXNET_ENABLE_CYTHON=1, but the compiled module '
                f'ember._accel cannot be imported ({exc}); build it with '
                "'python setup.py build_ext --inplace' or unset MXNET_ENFORCE_CYTHON") from exc
        return 'python', python_impl


def reload() -> str:
    """Read MXNET_ENABLE_CYTHON and MXNET_ENFORCE_CYTHON again and rebind; returns BACKEND.

    >>> from ember import accel, config
    >>> with config.override(MXNET_ENABLE_CYTHON=False):
    ...     accel.BACKEND
    'python'
    """
    global BACKEND
    backend, impl = _choose()
    for name in _FUNCTIONS:
        globals()[name] = getattr(impl, name)
    BACKEND = backend
    return backend


BACKEND = 'python'
broadcast_shape = _py_broadcast_shape
shape_size = _py_shape_size
infer_reshape = _py_infer_reshape
data_address = _py_data_address


def _deferred(name):
    def call(*args, **kwargs):
        reload()    # raises the ConfigError that deferred the choice at import
        return globals()[name](*args, **kwargs)
    return call


try:
    reload()
except config.ConfigError:
    # A bad value must not abort `import ember`: the first shape computation reads the
    # variables again and raises the error there, where the user's operator call waits.
    for _name in _FUNCTIONS:
        globals()[_name] = _deferred(_name)
config.register_reset('ndarray', reload)
