"""NDArray and the imperative path: infer, allocate, push one engine operation.

An NDArray is a storage handle from the device's pool, a :class:`View` of it (shape, dtype,
byte offset; C order) and the engine variable that orders every read and write of the storage.
Views made by ``reshape`` and by indexing a contiguous region share the handle and the variable
with their base, as in MXNet.

:func:`invoke` runs an operator: shapes and dtypes are inferred at the call (so errors raise
there), outputs come from the pool, and one function that calls the kernel on raw backend arrays
is pushed to the engine. Reading a value (``asnumpy``, ``wait_to_read``) waits for the variable
and raises the error of any failed operator it depends on.

>>> import ember.ndarray as nd
>>> a = nd.array([[1, 2, 3], [4, 5, 6]])
>>> b = a * 2 + 1
>>> b
<BLANKLINE>
[[ 3.  5.  7.]
 [ 9. 11. 13.]]
<NDArray 2x3 @cpu(0)>
>>> row = b[1]              # a view: shares storage and variable with b
>>> row += 1
>>> b.asnumpy()[1].tolist()
[10.0, 12.0, 14.0]
"""
from __future__ import annotations

import collections
import contextlib
import numbers
from dataclasses import dataclass, field

import numpy as np

from ember import backend, config, engine, resource, storage
from ember import device as _device
from ember.base import EmberError, dtype_of, prod
from ember.op import precision, registry
from ember.op import elemwise, indexing, init, matrix, random, reduce  # noqa: F401  (families)
from ember.op.registry import KernelContext, ShapeError

__all__ = ['NDArray', 'View', 'invoke', 'waitall', 'parse_device', 'view_of', 'empty']

# Set by ember.autograd: the recording/training state (attributes `recording`, `training`) and
# the function called with (op, attrs, inputs, outputs) for every operator while recording.
_ag_state = None
_record_hook = None


def _never(op, inputs, out):
    return False


# Set by ember.ndarray.storage: whether a call involves sparse storage, and the path that runs
# it (storage types decided before the kernel runs).
_sparse_involved = _never
_sparse_invoke = None


@dataclass(frozen=True, slots=True)
class View:
    """Where an array lies in its storage: shape, dtype and offset in bytes; C order.
    ``stored`` is the dtype of the elements in storage: `dtype` itself, unless bf16 storage
    (XLA_USE_BF16, :mod:`ember.op.precision`) keeps it narrower."""
    shape: tuple
    dtype: np.dtype
    offset: int
    size: int
    nbytes: int = field(init=False, compare=False)    # read on every allocation
    # None: as bf16 storage stores `dtype`; given: memory another layer laid out
    stored: np.dtype = field(default=None, compare=False)

    def __post_init__(self):
        stored = self.stored if self.stored is not None else precision.stored_dtype(self.dtype)
        object.__setattr__(self, 'stored', stored)
        object.__setattr__(self, 'nbytes', self.size * stored.itemsize)


_VIEWS: dict = {}


def view_of(shape, dtype, offset=0, stored=None) -> View:
    """The view of `shape` and `dtype` at `offset` (views at offset 0 are shared); `stored`
    where the memory holds another dtype than bf16 storage would give `dtype`."""
    if stored is not None and stored != precision.stored_dtype(dtype):
        return View(shape, dtype, offset, prod(shape), stored)
    if offset:
        return View(shape, dtype, offset, prod(shape))
    key = (shape, dtype)
    found = _VIEWS.get(key)
    if found is None:
        if len(_VIEWS) > 4096:
            _VIEWS.clear()
        found = _VIEWS[key] = View(shape, dtype, 0, prod(shape))
    return found


class NDArray:
    """An n-dimensional array on a device, computed asynchronously by the engine.

    Create arrays with ``mx.nd.array``, ``mx.nd.zeros`` and the operators; arithmetic,
    comparisons and indexing follow MXNet 1.x.

    >>> import ember.ndarray as nd
    >>> x = nd.ones((2, 2))
    >>> (x + x).asnumpy().tolist(), x.shape, x.dtype, x.context
    ([[2.0, 2.0], [2.0, 2.0]], (2, 2), <class 'numpy.float32'>, cpu(0))
    """

    __slots__ = ('_handle', '_view', '_var', '_device', '_raw', '_ag', '_grad', '_grad_req',
                 '_fresh_grad', '__weakref__')
    __array_priority__ = 1000.0
    __array_ufunc__ = None      # NumPy defers to our reflected operators

    def __init__(self, handle, view, var, device):
        self._handle = handle       # storage.Handle, kept alive by every view of it
        self._view = view
        self._var = var
        self._device = device
        self._raw = None            # cached backend array over the view
        self._ag = None             # autograd entry (set by ember.autograd)
        self._grad = None
        self._grad_req = 'null'
        self._fresh_grad = False    # set when backward writes this array as a gradient

    # ------------------------------------------------------------------------------------------
    # Metadata

    @property
    def shape(self) -> tuple:
        return self._view.shape

    @property
    def dtype(self):
        """The NumPy scalar type of the elements (``numpy.float32``), as in MXNet."""
        return self._view.dtype.type

    @property
    def size(self) -> int:
        return self._view.size

    @property
    def ndim(self) -> int:
        return len(self._view.shape)

    @property
    def context(self):
        return self._device

    ctx = context

    @property
    def stype(self) -> str:
        return 'default'

    @property
    def handle(self):
        """The storage handle (the buffer on loan from the pool)."""
        return self._handle

    @property
    def T(self) -> 'NDArray':
        if self.ndim != 2:
            raise ValueError(f'only a 2-D array can be transposed with .T, got shape '
                             f'{self.shape}')
        return _invoke1(_TRANSPOSE, self, _EMPTY_AXES)

    def __len__(self):
        if not self._view.shape:
            raise TypeError('len() of a 0-d NDArray')
        return self._view.shape[0]

    def __repr__(self):
        shape_info = 'x'.join(str(d) for d in self.shape)
        return f'\n{self.asnumpy()}\n<{type(self).__name__} {shape_info} @{self._device}>'

    __hash__ = object.__hash__

    # ------------------------------------------------------------------------------------------
    # Raw data and synchronisation

    def _data(self):
        """The backend array over this view (valid while this NDArray lives)."""
        raw = self._raw
        if raw is None:
            view = self._view
            buffer = self._handle.buffer
            if type(buffer) is np.ndarray:
                raw = np.ndarray(view.shape, view.stored, buffer, view.offset)
            else:
                start = view.offset
                raw = buffer[start:start + view.nbytes]
                raw = raw.view(view.stored).reshape(view.shape)
            self._raw = raw
        return raw

    def wait_to_read(self) -> None:
        """Wait until pending writes finish; raise the error of a failed one."""
        engine.get().wait_for_var(self._var)
        _finished.clear()

    def asnumpy(self) -> np.ndarray:
        """A NumPy copy of the values (waits for pending writes).

        >>> import ember.ndarray as nd
        >>> nd.arange(3).asnumpy()
        array([0., 1., 2.], dtype=float32)
        """
        engine.get().wait_for_var(self._var)
        _finished.clear()
        raw = self._data()
        view = self._view
        if type(raw) is not np.ndarray:
            host = backend.to_host(raw, self._device)       # already a fresh copy
            return host if view.stored is view.dtype else host.astype(view.dtype)
        # narrow storage reads as the array's dtype
        return raw.copy() if view.stored is view.dtype else raw.astype(view.dtype)

    def asscalar(self):
        """The value of a one-element array as a NumPy scalar.

        >>> import ember.ndarray as nd
        >>> nd.array([7]).asscalar()
        np.float32(7.0)
        """
        if self.size != 1:
            raise ValueError(f'asscalar needs an array of one element, got shape {self.shape}')
        return self.asnumpy().reshape(-1)[0]

    def __array__(self, dtype=None, copy=None):
        values = self.asnumpy()
        return values if dtype is None else values.astype(dtype, copy=False)

    def __bool__(self):
        if self.size == 1:
            return bool(self.asscalar())
        if self.size == 0:
            return False
        raise ValueError('the truth value of an NDArray with more than one element is '
                         'ambiguous')

    def __reduce__(self):
        return _rebuild, (self.asnumpy(), str(self._device))

    # ------------------------------------------------------------------------------------------
    # Copies, devices, dtypes, shapes

    def copy(self) -> 'NDArray':
        """A new array with the same values on the same device."""
        return _invoke1(_COPY, self, _NO_ATTRS)

    def copyto(self, other):
        """Copy into `other` (an NDArray of the same shape) or onto a device; returns it."""
        if isinstance(other, NDArray):
            if other is self:
                return self
            if other.shape != self.shape:
                raise ValueError(f'copyto: shape {self.shape} does not match the destination '
                                 f'{other.shape}')
            invoke(_COPYTO, [self], _NO_ATTRS, out=[other])
            return other
        if isinstance(other, _device.Device):
            return invoke(_COPYTO, [self], _NO_ATTRS, device=other)[0]
        raise TypeError(f'copyto: expected an NDArray or a device, got {type(other).__name__}')

    def as_in_context(self, context) -> 'NDArray':
        """This array if it is on `context`, else a copy there."""
        if self._device == context:
            return self
        return self.copyto(context)

    as_in_ctx = as_in_context

    def astype(self, dtype, copy=True) -> 'NDArray':
        """The values converted to `dtype` (this array itself when copy=False and unchanged)."""
        dtype = dtype_of(dtype)
        if not copy and dtype == self._view.dtype:
            return self
        return invoke(_CAST, [self], {'dtype': dtype})[0]

    def tostype(self, stype):
        """This array as storage type `stype`: itself for 'default', else a new
        'row_sparse' or 'csr' array (``ember.ndarray.sparse``) of the non-zeros."""
        if stype == 'default':
            return self
        return invoke(registry.get('cast_storage'), [self], {'stype': stype})[0]

    def reshape(self, *shape, **kwargs) -> 'NDArray':
        """A view with a new shape; MXNet's special codes 0, -1, -2, -3, -4 and `reverse`.

        >>> import ember.ndarray as nd
        >>> nd.zeros((2, 3, 4)).reshape(-3, 0).shape
        (6, 4)
        """
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        shape = tuple(kwargs.pop('shape', shape))
        reverse = bool(kwargs.pop('reverse', False))
        if kwargs:
            raise TypeError(f'reshape: unknown arguments {sorted(kwargs)}')
        attrs = {'shape': shape, 'reverse': reverse, 'target_shape': (), 'keep_highest': False}
        try:
            new_shape = _RESHAPE.infer_shape(attrs, [self.shape])[1][0]
        except ShapeError as exc:
            raise ShapeError(f'reshape: {exc}') from None
        return self._reshaped(new_shape, _RESHAPE, attrs)

    def _reshaped(self, new_shape, op, attrs):
        view = self._view
        out = NDArray(self._handle, view_of(tuple(new_shape), view.dtype, view.offset,
                                            view.stored), self._var, self._device)
        _maybe_record(op, attrs, [self], [out])
        return out

    def reshape_like(self, other) -> 'NDArray':
        return self.reshape(other.shape)

    def _alias(self) -> 'NDArray':
        """Another NDArray object over the same storage and variable (no autograd entry)."""
        return NDArray(self._handle, self._view, self._var, self._device)

    # ------------------------------------------------------------------------------------------
    # Indexing: x[key] and x[key] = value are ember.ndarray.indexing's getitem and setitem,
    # which that module (built on this one) installs on the class.

    def __iter__(self):
        if not self.shape:
            raise TypeError('iteration over a 0-d NDArray')
        return (self[i] for i in range(self.shape[0]))

    # ------------------------------------------------------------------------------------------
    # Arithmetic

    def __add__(self, other):
        return _binary(self, other, _ADD, _PLUS_SCALAR)

    __radd__ = __add__

    def __sub__(self, other):
        return _binary(self, other, _SUB, _MINUS_SCALAR)

    def __rsub__(self, other):
        return _binary(self, other, None, _RMINUS_SCALAR)

    def __mul__(self, other):
        return _binary(self, other, _MUL, _MUL_SCALAR)

    __rmul__ = __mul__

    def __truediv__(self, other):
        return _binary(self, other, _DIV, _DIV_SCALAR)

    def __rtruediv__(self, other):
        return _binary(self, other, None, _RDIV_SCALAR)

    def __mod__(self, other):
        return _binary(self, other, _MOD, _MOD_SCALAR)

    def __rmod__(self, other):
        return _binary(self, other, None, _RMOD_SCALAR)

    def __pow__(self, other):
        return _binary(self, other, _POWER, _POWER_SCALAR)

    def __rpow__(self, other):
        return _binary(self, other, None, _RPOWER_SCALAR)

    def __neg__(self):
        return _invoke1(_NEGATIVE, self, _NO_ATTRS)

    def __abs__(self):
        return _invoke1(_ABS, self, _NO_ATTRS)

    def __iadd__(self, other):
        return _inplace(self, other, _ADD, _PLUS_SCALAR)

    def __isub__(self, other):
        return _inplace(self, other, _SUB, _MINUS_SCALAR)

    def __imul__(self, other):
        return _inplace(self, other, _MUL, _MUL_SCALAR)

    def __itruediv__(self, other):
        return _inplace(self, other, _DIV, _DIV_SCALAR)

    def __imod__(self, other):
        return _inplace(self, other, _MOD, _MOD_SCALAR)

    def __ipow__(self, other):
        return _inplace(self, other, _POWER, _POWER_SCALAR)

    def __eq__(self, other):
        return _binary(self, other, _EQUAL, _EQUAL_SCALAR)

    def __ne__(self, other):
        return _binary(self, other, _NOT_EQUAL, _NOT_EQUAL_SCALAR)

    def __gt__(self, other):
        return _binary(self, other, _GREATER, _GREATER_SCALAR)

    def __ge__(self, other):
        return _binary(self, other, _GREATER_EQUAL, _GREATER_EQUAL_SCALAR)

    def __lt__(self, other):
        return _binary(self, other, _LESSER, _LESSER_SCALAR)

    def __le__(self, other):
        return _binary(self, other, _LESSER_EQUAL, _LESSER_EQUAL_SCALAR)


def _rebuild(values, device_text):
    """An unpickled NDArray: `values` (a NumPy array) on the device named `device_text`."""
    result = empty(values.shape, parse_device(device_text), values.dtype)
    fill_fresh(result, values)
    return result


# ----------------------------------------------------------------------------------------------
# Operator methods (sum, mean, relu, ...) delegate to the generated namespace, looked up at call
# time so that operators registered by later families work as methods too.

# mx.nd (the ember.ndarray package, which generates a function per operator): the package
# hands itself over as it loads (bind_namespace), since it imports this module
_namespace = None


def bind_namespace(namespace) -> None:
    """Makes `namespace` (the ember.ndarray package) the one operator methods call into."""
    global _namespace
    _namespace = namespace

FLUENT_METHODS = (
    'sum', 'mean', 'max', 'min', 'prod', 'norm', 'argmax', 'argmin', 'nansum', 'nanprod',
    'abs', 'sign', 'sqrt', 'rsqrt', 'cbrt', 'square', 'reciprocal', 'exp', 'expm1', 'log',
    'log2', 'log10', 'log1p', 'floor', 'ceil', 'round', 'rint', 'trunc', 'fix',
    'sin', 'cos', 'tan', 'arcsin', 'arccos', 'arctan', 'sinh', 'cosh', 'tanh', 'arcsinh',
    'arccosh', 'arctanh', 'degrees', 'radians', 'relu', 'sigmoid', 'softmax', 'log_softmax',
    'flatten', 'expand_dims', 'squeeze', 'transpose', 'swapaxes', 'flip', 'tile', 'repeat',
    'pad', 'split', 'slice', 'slice_axis', 'take', 'pick', 'one_hot', 'clip',
    'broadcast_to', 'broadcast_like', 'broadcast_axes', 'zeros_like', 'ones_like',
    'topk', 'sort', 'argsort', 'diag', 'dot', 'batch_dot',
)


def _fluent(name):
    def method(self, *args, **kwargs):
        return getattr(_namespace, name)(self, *args, **kwargs)
    method.__name__ = name
    method.__qualname__ = f'NDArray.{name}'
    method.__doc__ = f'``mx.nd.{name}(self, ...)``.'
    return method


for _name in FLUENT_METHODS:
    setattr(NDArray, _name, _fluent(_name))


# ----------------------------------------------------------------------------------------------
# Devices

def parse_device(value):
    """A Device from a Device, None (the current device) or text such as 'cpu(0)' / 'gpu'."""
    if value is None:
        return _device.current_device()
    if isinstance(value, _device.Device):
        return value
    if isinstance(value, str):
        text = value.strip()
        kind, _, rest = text.partition('(')
        index = rest.rstrip(')').strip() or '0'
        if kind in _device.Device.devstr2type and index.isdigit():
            return _device.Device(kind, int(index))
    raise ValueError(f"device {value!r}: expected a device such as mx.cpu(0) or 'gpu(1)'")


# ----------------------------------------------------------------------------------------------
# The imperative path

# What each finished operator used, handed back to the pushing thread, which drops it on its
# next call: the buffers return to the pool just before that thread allocates again, and the
# worker spends its turn on the GIL running kernels rather than freeing arrays (measured: the
# same CPU time either way, a lower wall time this way). The deque's append and clear need no
# lock.
_finished = collections.deque()


class _OpInfo:
    """Per-operator facts that invoke needs on every call, computed once."""

    __slots__ = ('op', 'kernel', 'name', 'resources', 'mutate', 'fixed_outputs', 'sliceable')

    def __init__(self, op):
        self.op = op
        self.kernel = op.kernel
        self.name = op.name
        self.resources = tuple(op.resources)
        self.mutate = op.mutate if callable(op.mutate) else tuple(op.mutate)
        self.fixed_outputs = None if callable(op.outputs) else len(op.outputs)
        self.sliceable = op.sliceable


_INFO: dict = {}


def _info(op) -> _OpInfo:
    info = _INFO.get(op.name)
    if info is None or info.op is not op:
        info = _INFO[op.name] = _OpInfo(op)
    return info


_XP: dict = {}
_CONTEXTS: dict = {}


def _xp(device):
    xp = _XP.get(device)
    if xp is None:
        xp = _XP[device] = backend.for_device(device).xp
    return xp


def _kernel_context(device, resources):
    """The KernelContext of a call, with the settings at the call; shared between calls when
    no resource is requested."""
    state = _ag_state
    train = state is not None and state.training
    safe = config.get('MXNET_SAFE_ACCUMULATION')
    deterministic = config.get('MXNET_ENFORCE_DETERMINISM')
    if not resources:
        key = (device, train, safe, deterministic)
        found = _CONTEXTS.get(key)
        if found is None:
            found = _CONTEXTS[key] = KernelContext(device, train, _xp(device),
                                                   safe_accumulation=safe,
                                                   deterministic=deterministic)
        return found, ()
    ctx = KernelContext(device, train, _xp(device), safe_accumulation=safe,
                        deterministic=deterministic)
    extra_writes = []
    for kind in resources:
        if kind == 'temp':
            ctx.temp = resource.temp_space(device)
            extra_writes.append(ctx.temp.var)
        elif kind == 'random':
            ctx.random = resource.random_stream(device)
            extra_writes.append(ctx.random.var)
        elif kind == 'dropout':
            ctx.random = resource.dropout_state(device)
            extra_writes.append(ctx.random.var)
        else:
            raise EmberError(f'unknown resource {kind!r}; expected temp, random or dropout')
    return ctx, extra_writes


def invoke(op, inputs, attrs, out=None, device=None) -> list:
    """Run operator `op` on NDArrays `inputs` with parsed `attrs`; return its outputs.

    Shapes and dtypes are inferred here, so errors raise at the call; outputs come from the
    device's pool unless `out` (a list of NDArrays) is given. One function is pushed to the
    engine, reading the inputs' variables and writing the outputs', the mutated inputs' and
    those of the resources the operator asks for.

    >>> import ember.ndarray as nd
    >>> from ember.op import registry
    >>> x = nd.array([1, 2, 3])
    >>> invoke(registry.get('_mul_scalar'), [x], {'scalar': 2.0})[0].asnumpy()
    array([2., 4., 6.], dtype=float32)
    """
    if _finished:
        _finished.clear()
    if _sparse_involved(op, inputs, out):
        return _sparse_invoke(op, inputs, attrs, out, device)
    info = _info(op)
    out_shapes, out_dtypes = _infer(op, attrs, inputs)
    if device is None:
        device = _device_of(op, attrs, inputs, out)
    if out is not None:
        outputs = _check_out(op, out, out_shapes, out_dtypes)
    elif len(out_shapes) == 1:
        outputs = [_empty(out_shapes[0], out_dtypes[0], device)]
    else:
        outputs = [_empty(shape, dtype, device) for shape, dtype in zip(out_shapes, out_dtypes)]
    ctx, extra_writes = _kernel_context(device, info.resources)
    writes = [o._var for o in outputs]
    mutate = info.mutate(attrs) if callable(info.mutate) else info.mutate
    if mutate:
        writes.extend(inputs[i]._var for i in mutate)
    if extra_writes:
        writes.extend(extra_writes)
    kernel = _rounding(info.kernel, inputs, outputs, mutate, info.sliceable)

    def run():
        try:
            kernel(attrs, [x._data() for x in inputs], [o._data() for o in outputs], ctx)
        finally:
            _finished.append((inputs, outputs))
    engine.get().push(run, [x._var for x in inputs], writes, _push_device(info, device, inputs),
                      0, info.name)
    state = _ag_state
    if _record_hook is not None and (state is None or state.recording):
        _record_hook(op, attrs, inputs, outputs)
    return outputs


def _push_device(info, device, inputs):
    """Where an operation runs: its output's device, except that a copy from a GPU runs on
    that GPU's copy workers, whose streams order it after the kernels that wrote its source."""
    if info.name == '_copyto' and inputs and device.device_type != 'gpu' \
            and inputs[0]._device.device_type == 'gpu':
        return inputs[0]._device
    return device


def _rounding(kernel, inputs, outputs, mutate=(), sliceable=False):
    """`kernel` as this call runs it: on full-precision copies of narrowly stored arrays
    (:func:`precision.widened`), and in the next stream of stochastic rounding when that is
    on (what the configuration says at the push, not when a worker runs it)."""
    if not precision.involved():
        return kernel
    if precision.storage_map():
        kernel = precision.widened(kernel, [x._view for x in inputs],
                                   [o._view for o in outputs], mutate or (),
                                   sliceable=sliceable)
    if precision.stochastic():
        kernel = precision.keyed(kernel, precision.next_key())
    return kernel


def _infer(op, attrs, inputs):
    in_shapes = [x._view.shape for x in inputs]
    in_dtypes = [x._view.dtype for x in inputs]
    try:
        _, out_shapes = op.infer_shape(attrs, in_shapes)
        _, out_dtypes = op.infer_type(attrs, in_dtypes)
    except (ShapeError, ValueError) as exc:
        raise ShapeError(f'{op.name}: {exc} (input shapes {in_shapes}, dtypes '
                         f'{[d.name for d in in_dtypes]})') from None
    # `in` would compare dtypes with ==, and np.dtype('float64') == None holds
    if None in out_shapes or _holds_none(out_dtypes):
        raise ShapeError(f'{op.name}: cannot infer the output shapes and dtypes from input '
                         f'shapes {in_shapes}')
    return out_shapes, out_dtypes


def _holds_none(values):
    for value in values:
        if value is None:
            return True
    return False


def _device_of(op, attrs, inputs, out):
    if out:
        return out[0]._device
    if not inputs:
        return parse_device(attrs.get('ctx'))
    device = inputs[0]._device
    for x in inputs:
        if x._device is not device and x._device != device:
            raise EmberError(f'{op.name}: inputs are on different devices ({device} and '
                             f'{x._device}); copy them with as_in_context first')
    return device


def _check_out(op, out, out_shapes, out_dtypes):
    if isinstance(out, NDArray):
        out = [out]
    if len(out) != len(out_shapes):
        raise ValueError(f'{op.name}: out= has {len(out)} arrays; the operator has '
                         f'{len(out_shapes)} outputs')
    for array, shape, dtype in zip(out, out_shapes, out_dtypes):
        if not isinstance(array, NDArray):
            raise TypeError(f'{op.name}: out= must hold NDArrays, got {type(array).__name__}')
        if array.shape != tuple(shape) or array._view.dtype != dtype:
            raise ShapeError(f'{op.name}: out= has shape {array.shape} and dtype '
                             f'{array._view.dtype}; the result has shape {tuple(shape)} and '
                             f'dtype {dtype}')
    return list(out)


def _empty(shape, dtype, device) -> NDArray:
    view = view_of(tuple(shape), dtype)
    handle = storage.manager(device).alloc(view.nbytes)
    return NDArray(handle, view, _new_var(), device)


def empty(shape, ctx=None, dtype=None) -> NDArray:
    """An uninitialised array (its values are whatever the pooled buffer held)."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    return _empty(tuple(shape), dtype_of(dtype), parse_device(ctx))


def copy_from_host(dst: NDArray, source) -> None:
    """Write array-like `source`, broadcast to dst's shape, into `dst` through the engine.

    The values are copied first, so the caller may change `source` right after.
    """
    values = _host_values(dst, source)
    stream = _host_stream(dst)

    def run():
        with stream:
            _write_raw(dst._data(), values, dst._device)
    engine.get().push(run, (), (dst._var,), dst._device, 0, '_copy_from_host')


def fill_fresh(dst: NDArray, source) -> None:
    """Write `source` into a just-allocated array that nothing else can reference yet."""
    with _host_stream(dst):
        _write_raw(dst._data(), _host_values(dst, source, copy=False), dst._device)


def _host_stream(dst):
    """The stream of stochastic rounding for a write into narrow storage, when on."""
    view = dst._view
    if view.stored is not view.dtype and precision.stochastic():
        return precision.keyed_stream(precision.next_key())
    return contextlib.nullcontext()


def _host_values(dst, source, copy=True):
    values = np.asarray(source)
    if values.shape != dst.shape:
        try:
            values = np.broadcast_to(values, dst.shape)
        except ValueError:
            raise ValueError(f'cannot copy a value of shape {values.shape} into an array of '
                             f'shape {dst.shape}') from None
    dtype = dst._view.dtype
    if copy or values.dtype != dtype or not values.flags.c_contiguous:
        values = np.array(values, dtype=dtype, order='C', copy=True)
    return values


def _write_raw(raw, values, device):
    if type(raw) is np.ndarray:
        if raw.dtype is not values.dtype and raw.dtype != values.dtype:
            precision.round_into(raw, values)      # narrow storage
        else:
            np.copyto(raw, values)
    else:
        if raw.dtype != values.dtype:                # narrow storage, rounded on the host
            narrow = np.empty(raw.shape, raw.dtype)
            precision.round_into(narrow, values)
            values = narrow
        backend.write_from_host(raw, values, device)


def _maybe_record(op, attrs, inputs, outputs):
    hook = _record_hook
    if hook is not None:
        state = _ag_state
        if state is None or state.recording:
            hook(op, attrs, inputs, outputs)


def waitall() -> None:
    """Wait for every pushed operation; raise the first error nobody has waited for."""
    try:
        engine.get().wait_all()
    finally:
        _finished.clear()


# ----------------------------------------------------------------------------------------------
# The fast path of NDArray's arithmetic: operators whose output has the first input's shape and
# dtype need no inference beyond one check, one allocation and one push.

class _Fast:
    """An operator of the fast path: its declaration, kernel and name."""

    __slots__ = ('op', 'kernel', 'name', 'same_shape')

    def __init__(self, name, same_shape=True):
        self.op = registry.get(name)
        self.kernel = self.op.kernel
        self.name = self.op.name
        self.same_shape = same_shape    # output shape and dtype are the first input's


# The last shared context: (device, training, safe accumulation, determinism, context).
_last_context = (None, False, False, False, None)


def _plain_context(device):
    """The shared KernelContext of `device` for operators without resources, with the
    training mode and the settings at the call."""
    global _last_context
    state = _ag_state
    train = state is not None and state.training
    safe = config.get('MXNET_SAFE_ACCUMULATION')
    deterministic = config.get('MXNET_ENFORCE_DETERMINISM')
    seen_device, seen_train, seen_safe, seen_deterministic, ctx = _last_context
    if (seen_device is device and seen_train is train and seen_safe is safe
            and seen_deterministic is deterministic):
        return ctx
    ctx = _kernel_context(device, ())[0]
    _last_context = (device, train, safe, deterministic, ctx)
    return ctx


# Engine variables of new arrays are made directly (what eng.new_var() does), saving a call on
# every operator.
_new_var = engine.Var


def _fast_output(first):
    """A new array of `first`'s shape and dtype on its device."""
    if _finished:
        _finished.clear()       # buffers of finished operators go back before we allocate
    view = first._view
    if view.offset:
        view = view_of(view.shape, view.dtype)
    device = first._device
    handle = storage.manager(device).alloc(view.nbytes)
    return NDArray(handle, view, _new_var(), device)


def _fast_unary(info, x, attrs) -> NDArray:
    out = _fast_output(x)
    kernel, ctx = info.kernel, _plain_context(x._device)
    if precision.involved():
        kernel = _rounding(kernel, [x], [out])

    def run():
        try:
            raw = x._raw
            kernel(attrs, [x._data() if raw is None else raw], [out._data()], ctx)
        finally:
            _finished.append((x, out))
    engine.get().push(run, (x._var,), (out._var,), x._device, 0, info.name)
    state = _ag_state
    if _record_hook is not None and (state is None or state.recording):
        _record_hook(info.op, attrs, [x], [out])
    return out


def _fast_binary(info, x, y) -> NDArray:
    out = _fast_output(x)
    kernel, ctx = info.kernel, _plain_context(x._device)
    if precision.involved():
        kernel = _rounding(kernel, [x, y], [out])

    def run():
        try:
            kernel(_NO_ATTRS, [x._data(), y._data()], [out._data()], ctx)
        finally:
            _finished.append((x, y, out))
    engine.get().push(run, (x._var, y._var), (out._var,), x._device, 0, info.name)
    state = _ag_state
    if _record_hook is not None and (state is None or state.recording):
        _record_hook(info.op, _NO_ATTRS, [x, y], [out])
    return out


def _invoke1(info, x, attrs) -> NDArray:
    if info.same_shape:
        return _fast_unary(info, x, attrs)
    return invoke(info.op, [x], attrs)[0]


_NUMBERS = (int, float)


def _binary(x, other, array_op, scalar_op):
    cls = other.__class__
    if cls is NDArray or isinstance(other, NDArray):
        if array_op is None:
            return NotImplemented
        if (x._view.shape == other._view.shape and x._view.dtype is other._view.dtype
                and x._device is other._device and other._handle is not None):
            return _fast_binary(array_op, x, other)
        return invoke(array_op.op, [x, other], _NO_ATTRS)[0]
    if cls in _NUMBERS or isinstance(other, numbers.Real):
        return _fast_unary(scalar_op, x, {'scalar': float(other)})
    return NotImplemented


def _inplace(x, other, array_op, scalar_op):
    if isinstance(other, NDArray):
        invoke(array_op.op, [x, other], _NO_ATTRS, out=[x])
    elif isinstance(other, numbers.Real):
        invoke(scalar_op.op, [x], {'scalar': float(other)}, out=[x])
    else:
        return NotImplemented
    return x


_NO_ATTRS: dict = {}
_EMPTY_AXES = {'axes': ()}
_TRANSPOSE = _Fast('transpose', same_shape=False)
_COPY = _Fast('_copy')
_NEGATIVE = _Fast('negative')
_ABS = _Fast('abs')
_RESHAPE = registry.get('Reshape')
_COPYTO = registry.get('_copyto')
_CAST = registry.get('Cast')

_ADD, _SUB, _MUL, _DIV, _MOD, _POWER = (
    _Fast(f'broadcast_{k}') for k in ('add', 'sub', 'mul', 'div', 'mod', 'power'))
_EQUAL, _NOT_EQUAL, _GREATER, _GREATER_EQUAL, _LESSER, _LESSER_EQUAL = (
    _Fast(f'broadcast_{k}') for k in ('equal', 'not_equal', 'greater', 'greater_equal',
                                       'lesser', 'lesser_equal'))
(_PLUS_SCALAR, _MINUS_SCALAR, _RMINUS_SCALAR, _MUL_SCALAR, _DIV_SCALAR, _RDIV_SCALAR,
 _MOD_SCALAR, _RMOD_SCALAR, _POWER_SCALAR, _RPOWER_SCALAR) = (
    _Fast(f'_{k}_scalar') for k in ('plus', 'minus', 'rminus', 'mul', 'div', 'rdiv', 'mod',
                                    'rmod', 'power', 'rpower'))
(_EQUAL_SCALAR, _NOT_EQUAL_SCALAR, _GREATER_SCALAR, _GREATER_EQUAL_SCALAR, _LESSER_SCALAR,
 _LESSER_EQUAL_SCALAR) = (
    _Fast(f'_{k}_scalar') for k in ('equal', 'not_equal', 'greater', 'greater_equal', 'lesser',
                                    'lesser_equal'))
