"""``mx.np.ndarray``: NumPy's array interface on Ember's NDArray (engine, pooled storage,
autograd), and the call path every ``mx.np`` function takes.

An ``mx.np.ndarray`` *is* an NDArray (a subclass): ``mx.nd`` functions and Gluon take it, and
give it back. Arithmetic, comparisons and indexing follow NumPy (broadcasting, zero-dim
results, boolean masks, advanced indexing) with the dtype rules of :mod:`ember.op.np_rules`.
Basic indexing of a contiguous region and reshaping give views sharing storage, as in NumPy.

:func:`apply` runs one registry operator: on arrays it pushes the operator to the engine and
returns ``mx.np.ndarray`` outputs; when an input is a Symbol it adds a node to the graph
instead, so that the same ``mx.np`` code runs inside a hybridized block.

>>> from ember import numpy as np
>>> x = np.arange(6).reshape(2, 3)
>>> x[1, 2], x[x > 2], x.sum(axis=0)
(array(5.), array([3., 4., 5.]), array([3., 5., 7.]))
>>> x.dtype, (x.astype('int32') // 2).dtype
(dtype('float32'), dtype('int32'))
"""
from __future__ import annotations

import builtins
import contextlib
import numbers
import sys
import threading

import numpy as onp

from ember import autograd
from ember import ndarray as nd
from ember.base import EmberError, dtype_of
from ember.ndarray import indexing as _indexing
from ember.ndarray.ndarray import (NDArray, fill_fresh, invoke, parse_device, view_of,
                                   empty as _nd_empty)
from ember.op import registry
from ember.op.np_rules import FLOAT32

# This module also holds every mx.np function (hold_every_function), ``any`` and ``round``
# among them: its own code uses the built-ins by these names.
_any, _round = builtins.any, builtins.round

__all__ = ['ndarray', 'apply', 'array', 'as_np', 'wrap', 'is_symbol', 'NotForSymbol',
           'building_graph']


class NotForSymbol(EmberError, TypeError):
    """An ``mx.np`` function whose result depends on values, called on a Symbol."""


def _symbol_class():
    module = sys.modules.get('ember.symbol.symbol')
    return None if module is None else module.Symbol


def is_symbol(value) -> bool:
    symbol = _symbol_class()
    return symbol is not None and isinstance(value, symbol)


# ----------------------------------------------------------------------------------------------
# Conversions between NDArray and ndarray

def wrap(array):
    """`array` (a fresh NDArray nobody else holds) as an ``mx.np.ndarray``, in place."""
    if type(array) is NDArray:
        array.__class__ = ndarray
    return array


def as_np(array):
    """An ``mx.np.ndarray`` sharing `array`'s storage, variable and autograd entry."""
    if isinstance(array, ndarray):
        return array
    return _alias(array, ndarray)


def _alias(array, cls):
    alias = cls(array._handle, array._view, array._var, array._device)
    alias._ag, alias._grad, alias._grad_req = array._ag, array._grad, array._grad_req
    return alias


_OPS: dict = {}


def _op(name):
    op = _OPS.get(name)
    if op is None:
        op = _OPS[name] = registry.get(name)
    return op


class _GraphScope(threading.local):
    active = False


_graph_scope = _GraphScope()


@contextlib.contextmanager
def building_graph():
    """Inside, every mx.np function builds graph nodes, those without array inputs too
    (``F.np.zeros`` in a traced ``hybrid_forward``)."""
    previous, _graph_scope.active = _graph_scope.active, True
    try:
        yield
    finally:
        _graph_scope.active = previous


def apply(op_name, inputs, attrs=None, out=None, ctx=None):
    """Run operator `op_name` on `inputs` (arrays) with `attrs`; one array, or a list when the
    operator has several outputs. With a Symbol among the inputs (or while
    :func:`building_graph`), build the graph node instead."""
    op = _op(op_name)
    attrs = dict(attrs or {})
    if _graph_scope.active or _any(is_symbol(x) for x in inputs):
        return _hooks.symbol_node(op, inputs, attrs)
    if ctx is not None:
        attrs['ctx'] = parse_device(ctx)
    parsed = op.parse_attrs(attrs)
    outputs = invoke(op, list(inputs), parsed)
    visible = op.num_visible_outputs(parsed)
    for output in outputs:
        wrap(output)
    result = outputs[0] if visible == 1 else list(outputs[:visible])
    if out is not None:
        return _write_out(result, out)
    return result


def _write_out(result, out):
    if isinstance(result, list):
        for target, value in zip(out, result):
            _write_out(value, target)
        return out
    if not isinstance(out, NDArray):
        raise TypeError(f'out= must be an mx.np.ndarray, got {type(out).__name__}')
    if out.shape != result.shape:
        raise ValueError(f'out= has shape {out.shape}; the result has shape {result.shape}')
    out[...] = result
    return out


# ----------------------------------------------------------------------------------------------
# Making arrays



def array(object, dtype=None, ctx=None):
    """An ``mx.np.ndarray`` with the values of `object`.

    Python data gives float32 (MXNet's default, booleans included) unless `dtype` is given;
    NumPy and Ember arrays keep their dtype.

    >>> import numpy
    >>> from ember import numpy as np
    >>> np.array([1, 2]).dtype, np.array([True]).dtype, np.array(numpy.arange(2)).dtype
    (dtype('float32'), dtype('float32'), dtype('int64'))
    """
    if isinstance(object, NDArray):
        dtype = object.dtype if dtype is None else dtype_of(dtype)
        device = object.context if ctx is None else parse_device(ctx)
        copied = as_np(object).astype(dtype, copy=True)
        return copied if copied.context == device else copied.as_in_ctx(device)
    if isinstance(object, onp.ndarray):
        values = object
    else:
        try:
            values = onp.asarray(object)
        except (TypeError, ValueError) as exc:
            raise TypeError(f'array: cannot make an array of {type(object).__name__} '
                            f'({exc})') from None
        if values.dtype == object_dtype:
            raise TypeError(f'array: {object!r} is not numeric data')
        if dtype is None:
            dtype = FLOAT32         # MXNet's default for Python data, booleans included
    dtype = values.dtype if dtype is None else dtype_of(dtype)
    if dtype.kind in 'cOUS':
        raise TypeError(f'array: dtype {dtype} is not supported (numbers and bools only)')
    result = _nd_empty(values.shape, parse_device(ctx), dtype)
    fill_fresh(result, values)
    return wrap(result)


object_dtype = onp.dtype(object)


def _scalar_or_array(value, like=None):
    """Python numbers stay numbers; array-likes become mx.np arrays (on `like`'s device)."""
    if isinstance(value, NDArray) or is_symbol(value):
        return value
    if isinstance(value, (numbers.Number, onp.number, onp.bool_)) and not isinstance(
            value, complex):
        return value.item() if isinstance(value, (onp.number, onp.bool_)) else value
    device = like.context if isinstance(like, NDArray) else None
    return array(value, ctx=device)


def as_array(value, like=None):
    """`value` as an array (numbers too: as 0-d arrays of the default dtypes)."""
    value = _scalar_or_array(value, like)
    if isinstance(value, NDArray) or is_symbol(value):
        return value
    device = like.context if isinstance(like, NDArray) else None
    return array(value, ctx=device)


# ----------------------------------------------------------------------------------------------
# Indexing

def _is_index_array(part):
    return isinstance(part, (NDArray, onp.ndarray, list)) or isinstance(part, (bool, onp.bool_))


def _numpy_part(part):
    """An index part as NumPy understands it: arrays on the host, masks as positions."""
    if isinstance(part, NDArray):
        part = part.asnumpy()
    if isinstance(part, list):
        part = onp.asarray(part)
    if isinstance(part, onp.ndarray):
        if part.dtype == onp.bool_:
            return part.nonzero()
        if part.dtype.kind == 'f':
            if not onp.all(onp.mod(part, 1) == 0):
                raise IndexError('only integers, slices, None, Ellipsis and integer or boolean '
                                 'arrays are valid indices')
            part = part.astype(onp.int64)
    return (part,)


def _advanced_key(key):
    """Boolean masks become their positions (one index array per masked axis)."""
    parts = []
    for part in key:
        if isinstance(part, (bool, onp.bool_)):
            parts.append(onp.asarray(part))
        else:
            parts.extend(_numpy_part(part))
    return tuple(parts)


def _basic_result_shape(key, shape):
    """The shape of ``x[key]`` for a basic key (ints, slices, None, Ellipsis)."""
    return onp.broadcast_to(onp.empty((), onp.uint8), shape)[key].shape


def getitem(x, key):
    key = key if isinstance(key, tuple) else (key,)
    if _any(_is_index_array(part) for part in key):
        numpy_key = _advanced_key(key)
        return wrap(invoke(_op('_advanced_index'), [x], {'key': numpy_key})[0])
    try:
        final = _basic_result_shape(key, x.shape)
    except (IndexError, TypeError) as exc:
        raise IndexError(f'index {key} does not fit shape {x.shape}: {exc}') from None
    expanded = _indexing._expand(key, x.ndim)
    index = _indexing.parse_basic(expanded, x.shape)
    offset = _indexing._contiguous_offset(x.shape, index) if x.ndim else 0
    if offset is not None and not _indexing._recording():
        view = x._view
        return ndarray(x._handle, view_of(final, view.dtype,
                                          view.offset + offset * view.dtype.itemsize),
                       x._var, x._device)
    return apply('_npi_basic_index', [x], {'key': key})


def setitem(x, key, value):
    key = key if isinstance(key, tuple) else (key,)
    if _any(_is_index_array(part) for part in key):
        key = _advanced_key(key)
    if isinstance(value, (onp.number, onp.bool_)):
        value = value.item()
    if isinstance(value, bool):
        value = int(value)
    if x.ndim == 0 and key in ((), (Ellipsis,), (slice(None),)):
        _fill_zero_dim(x, value)
        return
    _indexing.setitem(x, key, value)


def _fill_zero_dim(x, value):
    flat = NDArray(x._handle, view_of((1,), x._view.dtype, x._view.offset), x._var, x._device)
    if isinstance(value, NDArray):
        value = value.reshape(1) if value.size == 1 else value
    _indexing.setitem(flat, (slice(None),), value)


# ----------------------------------------------------------------------------------------------
# The array

def _fallback_value(value):
    if isinstance(value, NDArray):
        return value.asnumpy()
    if isinstance(value, (list, tuple)):
        return type(value)(_fallback_value(v) for v in value)
    return value


def _fallback_result(value, device):
    if isinstance(value, onp.ndarray):
        if value.dtype.kind in 'biuf':
            return array(value, ctx=device)
        return value
    if isinstance(value, tuple):
        return tuple(_fallback_result(v, device) for v in value)
    if isinstance(value, list):
        return [_fallback_result(v, device) for v in value]
    return value


def fallback(function, name=None):
    """`function` (NumPy's) run on host copies of ``mx.np`` arrays, giving ``mx.np`` arrays.

    MXNet's ``mx.np`` offers NumPy functions it has no operator for this way; they record no
    gradient."""
    def call(*args, **kwargs):
        device = next((a.context for a in list(args) + list(kwargs.values())
                       if isinstance(a, NDArray)), None)
        result = function(*_fallback_value(list(args)), **{
            k: _fallback_value(v) for k, v in kwargs.items()})
        return _fallback_result(result, device)
    call.__name__ = call.__qualname__ = name or function.__name__
    call.__doc__ = (f'NumPy\'s ``{name or function.__name__}`` on host copies of the arrays '
                    f'(no gradient).')
    call.numpy_function = function
    return call


class ndarray(NDArray):
    """An n-dimensional array with NumPy's interface, on a device, computed by the engine.

    >>> from ember import numpy as np
    >>> a = np.array([[1., 2.], [3., 4.]])
    >>> a
    array([[1., 2.],
           [3., 4.]])
    >>> a.T @ a, a.mean(), a[0] * 2
    (array([[10., 14.],
           [14., 20.]]), array(2.5), array([2., 4.]))
    """

    __slots__ = ()
    outputs_keep_class = True       # mx.nd functions give mx.np arrays back for these

    # -- metadata ---------------------------------------------------------------------------------
    @property
    def dtype(self):
        """The dtype (``numpy.dtype``), as NumPy gives it."""
        return self._view.dtype

    @property
    def T(self):
        return _ops.transpose(self)

    @property
    def itemsize(self):
        return self._view.dtype.itemsize

    @property
    def nbytes(self):
        return self._view.nbytes

    @property
    def strides(self):
        item, strides, step = self._view.dtype.itemsize, [], 1
        for dim in reversed(self.shape):
            strides.append(step * item)
            step *= dim
        return tuple(reversed(strides))

    def __repr__(self):
        values = self.asnumpy()
        text = onp.array2string(values, separator=', ', prefix='array(')
        extras = []
        if values.dtype not in (onp.float32, onp.bool_) or values.size == 0 and values.ndim > 1:
            if values.size == 0 and values.shape != (0,):
                extras.append(f'shape={values.shape}')
            if values.dtype not in (onp.float32, onp.bool_):
                extras.append(f'dtype={values.dtype.name}')
        if self._device.device_type != 'cpu':
            extras.append(f'ctx={self._device}')
        return f'array({text}{"".join(", " + e for e in extras)})'

    def __str__(self):
        text = str(self.asnumpy())
        if self._device.device_type == 'cpu' or self.ndim == 0:
            return text
        return f'{text} @{self._device}'

    def __format__(self, spec):
        if self.ndim == 0:
            return format(self.item(), spec)
        return format(str(self), spec)

    def __hash__(self):
        return id(self) >> 4

    # -- conversions ------------------------------------------------------------------------------
    def item(self, *args):
        """The value of a one-element array as a Python scalar."""
        values = self.asnumpy()
        if not args and values.size != 1:
            raise ValueError('can only convert an array of size 1 to a Python scalar')
        return values.item(*args)

    def tolist(self):
        return self.asnumpy().tolist()

    def asscalar(self):
        return self.item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._view.dtype.kind not in 'iub':
            raise TypeError('only integer arrays of one element can be used as an index')
        return int(self.item())

    def __bool__(self):
        if self.size == 0:
            return False
        if self.size > 1:
            raise ValueError('the truth value of an array with more than one element is '
                             'ambiguous; use a.any() or a.all()')
        return bool(self.item())

    def __complex__(self):
        return complex(self.item())

    def __round__(self, ndigits=None):
        if self.ndim == 0:
            return _round(self.item(), ndigits)
        return _ops.round(self, ndigits or 0)

    def __reduce__(self):
        return _rebuild, (self.asnumpy(), str(self._device))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy's ufuncs on mx.np arrays: Ember's function of the same name when there is one,
        else NumPy's on host copies."""
        mine = getattr(_ops, ufunc.__name__, None) if method == '__call__' else None
        if mine is not None and not hasattr(mine, 'numpy_function'):
            return mine(*inputs, **kwargs)
        function = getattr(ufunc, method)
        return fallback(function, f'{ufunc.__name__}.{method}')(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        mine = getattr(_ops, func.__name__, None)
        if mine is not None and mine is not func and not hasattr(mine, 'numpy_function'):
            return mine(*args, **kwargs)
        return fallback(func)(*args, **kwargs)

    def as_nd_ndarray(self):
        """The same array (shared storage) as a legacy ``mx.nd.NDArray``."""
        return _alias(self, NDArray)

    def as_np_ndarray(self):
        return self

    def asnumpy(self):
        return NDArray.asnumpy(self)

    def copy(self, order='C'):
        if order not in ('C', 'K', 'A'):
            raise ValueError(f"copy: order={order!r}: arrays are row-major ('C')")
        return wrap(NDArray.copy(self))

    def copyto(self, other):
        return wrap(NDArray.copyto(self, other))

    def as_in_ctx(self, ctx):
        if self._device == ctx:
            return self
        return self.copyto(ctx)

    as_in_context = as_in_ctx

    def to_device(self, device):
        return self.as_in_ctx(device)

    def astype(self, dtype, order='K', casting='unsafe', subok=True, copy=True):
        """The values converted to `dtype` (this array itself with copy=False when unchanged)."""
        dtype = dtype_of(dtype)
        if order not in ('C', 'K', 'A'):
            raise ValueError(f"astype: order={order!r}: arrays are row-major ('C')")
        if not onp.can_cast(self._view.dtype, dtype, casting):
            raise TypeError(f'astype: cannot cast {self._view.dtype} to {dtype} with '
                            f'casting={casting!r}')
        if not copy and dtype == self._view.dtype:
            return self
        return wrap(invoke(_op('Cast'), [self], {'dtype': dtype})[0])

    def attach_grad(self, grad_req='write', stype=None):
        """Allocate a zero gradient (an ``mx.np.ndarray``) and mark this array as a variable."""
        if stype not in (None, 'default'):
            raise ValueError(f"attach_grad: stype={stype!r}: only 'default' (dense) is "
                             f"supported")
        gradient = wrap(nd.zeros(self.shape, ctx=self.context, dtype=self.dtype))
        autograd.mark_variables([self], [gradient], grad_req)

    def detach(self):
        alias = ndarray(self._handle, self._view, self._var, self._device)
        return alias

    def wait_to_read(self):
        NDArray.wait_to_read(self)

    # -- shapes -----------------------------------------------------------------------------------
    def reshape(self, *args, **kwargs):
        """A view with a new shape (NumPy's rules; ints or one tuple; ``order='C'``)."""
        order = kwargs.pop('order', 'C')
        if kwargs:
            raise TypeError(f'reshape: unknown arguments {sorted(kwargs)}')
        shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
        return _ops.reshape(self, tuple(shape), order=order)

    def reshape_like(self, other):
        return self.reshape(other.shape)

    def flatten(self, order='C'):
        return self.reshape(-1, order=order).copy()

    def ravel(self, order='C'):
        return self.reshape(-1, order=order)

    def squeeze(self, axis=None):
        return _ops.squeeze(self, axis)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or isinstance(axes[0], (tuple, list))):
            axes = axes[0]
        return _ops.transpose(self, tuple(axes) if axes else None)

    def swapaxes(self, axis1, axis2):
        return _ops.swapaxes(self, axis1, axis2)

    def fill(self, value):
        self[...] = value

    def __len__(self):
        if not self.shape:
            raise TypeError('len() of unsized object')
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError('iteration over a 0-d array')
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, key):
        return getitem(self, key)

    def __setitem__(self, key, value):
        setitem(self, key, value)

    # -- arithmetic -------------------------------------------------------------------------------
    def __add__(self, other):
        return _ops.add(self, other)

    def __radd__(self, other):
        return _ops.add(other, self)

    def __sub__(self, other):
        return _ops.subtract(self, other)

    def __rsub__(self, other):
        return _ops.subtract(other, self)

    def __mul__(self, other):
        return _ops.multiply(self, other)

    def __rmul__(self, other):
        return _ops.multiply(other, self)

    def __truediv__(self, other):
        return _ops.true_divide(self, other)

    def __rtruediv__(self, other):
        return _ops.true_divide(other, self)

    __div__, __rdiv__ = __truediv__, __rtruediv__

    def __floordiv__(self, other):
        return _ops.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return _ops.floor_divide(other, self)

    def __mod__(self, other):
        return _ops.mod(self, other)

    def __rmod__(self, other):
        return _ops.mod(other, self)

    def __divmod__(self, other):
        return _ops.floor_divide(self, other), _ops.mod(self, other)

    def __pow__(self, other):
        return _ops.power(self, other)

    def __rpow__(self, other):
        return _ops.power(other, self)

    def __matmul__(self, other):
        return _ops.matmul(self, other)

    def __rmatmul__(self, other):
        return _ops.matmul(other, self)

    def __and__(self, other):
        return _ops.bitwise_and(self, other)

    __rand__ = __and__

    def __or__(self, other):
        return _ops.bitwise_or(self, other)

    __ror__ = __or__

    def __xor__(self, other):
        return _ops.bitwise_xor(self, other)

    __rxor__ = __xor__

    def __neg__(self):
        return _ops.negative(self)

    def __pos__(self):
        return _ops.positive(self)

    def __abs__(self):
        return _ops.absolute(self)

    def __invert__(self):
        return _ops.invert(self)

    def __eq__(self, other):
        if other is None:
            return _ops.full(self.shape, False, ctx=self.context)
        return _ops.equal(self, other)

    def __ne__(self, other):
        if other is None:
            return _ops.full(self.shape, True, ctx=self.context)
        return _ops.not_equal(self, other)

    def __gt__(self, other):
        return _ops.greater(self, other)

    def __ge__(self, other):
        return _ops.greater_equal(self, other)

    def __lt__(self, other):
        return _ops.less(self, other)

    def __le__(self, other):
        return _ops.less_equal(self, other)

    def _inplace(self, function, other):
        result = function(self, other)
        if result.dtype != self.dtype and not onp.can_cast(result.dtype, self.dtype,
                                                           'same_kind'):
            raise TypeError(f'in-place {function.__name__}: cannot cast the {result.dtype} '
                            f'result back to {self.dtype}')
        self[...] = result
        return self

    def __iadd__(self, other):
        return self._inplace(_ops.add, other)

    def __isub__(self, other):
        return self._inplace(_ops.subtract, other)

    def __imul__(self, other):
        return self._inplace(_ops.multiply, other)

    def __itruediv__(self, other):
        return self._inplace(_ops.true_divide, other)

    __idiv__ = __itruediv__

    def __ifloordiv__(self, other):
        return self._inplace(_ops.floor_divide, other)

    def __imod__(self, other):
        return self._inplace(_ops.mod, other)

    def __ipow__(self, other):
        return self._inplace(_ops.power, other)

    def __imatmul__(self, other):
        return self._inplace(_ops.matmul, other)

    def __iand__(self, other):
        return self._inplace(_ops.bitwise_and, other)

    def __ior__(self, other):
        return self._inplace(_ops.bitwise_or, other)

    def __ixor__(self, other):
        return self._inplace(_ops.bitwise_xor, other)


def _rebuild(values, device_text):
    return array(values, dtype=values.dtype, ctx=parse_device(device_text))


# Methods that are ``mx.np.<name>(self, ...)``.
_METHODS = ('all', 'any', 'argmax', 'argmin', 'argsort', 'clip', 'cumsum', 'diagonal', 'dot',
            'max', 'min', 'mean', 'nonzero', 'prod', 'repeat', 'round', 'sort', 'std', 'sum',
            'take', 'tile', 'trace', 'var', 'ptp', 'flip', 'split', 'broadcast_to', 'pad',
            'abs', 'sign', 'sqrt', 'square', 'exp', 'expm1', 'log', 'log2', 'log10', 'log1p',
            'sin', 'cos', 'tan', 'arcsin', 'arccos', 'arctan', 'sinh', 'cosh', 'tanh',
            'arcsinh', 'arccosh', 'arctanh', 'floor', 'ceil', 'rint', 'trunc', 'fix', 'cbrt',
            'reciprocal', 'degrees', 'radians', 'nansum', 'nanprod')
def _method(namespace_of, name):
    def method(self, *args, **kwargs):
        return getattr(namespace_of(), name)(self, *args, **kwargs)
    method.__name__ = name
    method.__qualname__ = f'ndarray.{name}'
    method.__doc__ = f'``{name}(self, ...)``.'
    return method


def _numpy_ops():
    return _hooks.functions


for _name in _METHODS:
    setattr(ndarray, _name, _method(_numpy_ops, _name))


class _Hooks:
    """What modules above this one provide (this one imports none of them): the module of
    mx.np's functions, which the array's methods call, and the maker of graph nodes."""
    functions = None          # ember.numpy._op, set when it loads
    symbol_node = None        # ember.numpy.symbol.create, set when it loads


_hooks = _Hooks()


class _Functions:
    """``_ops.<name>``: the function of mx.np called by a method (resolved at call time)."""

    def __getattr__(self, name):
        return getattr(_hooks.functions, name)


_ops = _Functions()


def hold_every_function(functions):
    """As MXNet's ``mxnet.numpy.multiarray``, this module holds every function of mx.np (called
    by the package once they are all defined)."""
    global __all__
    for name, function in functions.items():
        globals().setdefault(name, function)
    __all__ = sorted(set(__all__) | set(functions))
