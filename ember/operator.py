"""``mx.operator``: operators written in Python, with MXNet 1.x's CustomOp API.

Subclass :class:`CustomOpProp` (what the operator takes and gives: argument, output and
auxiliary-state names, shape and type inference, ``create_operator``) and :class:`CustomOp`
(``forward`` and ``backward`` on NDArrays, results written with ``self.assign``), register the
prop with ``@mx.operator.register('name')`` and call ``mx.nd.Custom(*inputs, op_type='name',
**kwargs)``; inputs are the arguments, then the auxiliary states. Keyword arguments reach the
prop's ``__init__`` as strings, as in MXNet.

How it runs: ``mx.nd.Custom`` infers shapes and dtypes through the prop (errors raise at the
call), allocates the outputs and calls ``forward`` on the calling thread. The operators that
``forward`` calls are pushed to the engine as usual and its waits (``asnumpy``) wait as usual:
no engine worker ever waits for work queued behind it, so nothing deadlocks, and the call
returns without waiting for the work ``forward`` pushed (MXNet runs the same code on a thread
of its own). An exception raised by ``forward`` is attached to the outputs, by ``backward`` to
the gradients, and raised as an :class:`~ember.base.EmberError` by the wait that reads them,
as for any failed operator. Under ``autograd.record()`` the gradient calls ``backward`` of the
same CustomOp instance, so what ``forward`` kept on ``self`` is there.

>>> import ember as mx
>>> class Scale(mx.operator.CustomOp):
...     def forward(self, is_train, req, in_data, out_data, aux):
...         self.assign(out_data[0], req[0], in_data[0] * 3)
...     def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
...         self.assign(in_grad[0], req[0], out_grad[0] * 3)
>>> @mx.operator.register('doc_scale')
... class ScaleProp(mx.operator.CustomOpProp):
...     def create_operator(self, ctx, shapes, dtypes):
...         return Scale()
>>> x = mx.nd.array([1, 2]); x.attach_grad()
>>> with mx.autograd.record():
...     y = mx.nd.Custom(x, op_type='doc_scale')
>>> y.backward()
>>> y.asnumpy().tolist(), x.grad.asnumpy().tolist()
([3.0, 6.0], [3.0, 3.0])
"""
from __future__ import annotations

import collections
import threading
import warnings
from collections import OrderedDict

import numpy as np

from ember import autograd, device as _device, engine
from ember import ndarray as _ndarray
from ember.base import EmberError, py_str
from ember import engine as _engine
from ember.ndarray.ndarray import NDArray, View
from ember.op import custom
from ember.op import registry as _registry
from ember.op.registry import ShapeError
from ember.util import is_np_array

__all__ = ['CustomOp', 'CustomOpProp', 'register', 'Custom', 'get_all_registered_operators',
           'NDArray', 'PythonOp', 'NumpyOp', 'NDArrayOp', 'OperatorArguments',
           'get_operator_arguments', 'is_np_array', 'py_str']


class CustomOp:
    """The computation of a custom operator: override ``forward`` and ``backward``."""

    def __init__(self):
        pass

    def forward(self, is_train, req, in_data, out_data, aux):
        """Compute `out_data` from `in_data` (lists of NDArrays); write with ``assign``."""
        raise NotImplementedError(f'{type(self).__name__} does not implement forward')

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        """Compute `in_grad` from `out_grad`; write with ``assign``."""
        raise NotImplementedError(f'{type(self).__name__} does not implement backward')

    def assign(self, dst, req, src):
        """Write `src` (an NDArray or array-like) into `dst` as `req` says.

        'null' does nothing, 'write' and 'inplace' overwrite, 'add' accumulates.
        """
        if req == 'null':
            return
        if req in ('write', 'inplace'):
            dst[:] = src
        elif req == 'add':
            if not isinstance(src, NDArray):
                src = _ndarray.array(src, ctx=dst.context, dtype=dst.dtype)
            dst += src
        else:
            raise ValueError(f"assign: req={req!r}: expected 'null', 'write', 'inplace' or "
                             "'add'")


class CustomOpProp:
    """What a custom operator takes and gives; override what differs from the defaults.

    The defaults: one argument 'data', one output 'output' of the data's shape and dtype, no
    auxiliary states. ``need_top_grad=False`` marks a loss, whose backward ignores out_grad.
    """

    def __init__(self, need_top_grad=True):
        self.need_top_grad_ = need_top_grad

    def infer_shape(self, in_shape):
        """(argument shapes, output shapes[, auxiliary shapes]) from the argument shapes."""
        return in_shape, (in_shape[0],) * len(self.list_outputs()), ()

    def infer_type(self, in_type):
        """(argument dtypes, output dtypes[, auxiliary dtypes]) from the argument dtypes."""
        return (in_type, [in_type[0]] * len(self.list_outputs()),
                [in_type[0]] * len(self.list_auxiliary_states()))

    def infer_storage_type(self, in_stype):
        """Storage types: dense ('default') throughout."""
        return (in_stype, ['default'] * len(self.list_outputs()),
                ['default'] * len(self.list_auxiliary_states()))

    def infer_storage_type_backward(self, ograd_stype, in_stype, out_stype, igrad_stype,
                                    aux_stype):
        """Storage types of the backward pass: dense ('default') throughout."""
        def dense(stypes):
            return ['default'] * len(stypes)
        return (dense(ograd_stype), dense(in_stype), dense(out_stype), dense(igrad_stype),
                dense(aux_stype))

    def list_arguments(self):
        return ['data']

    def list_outputs(self):
        return ['output']

    def list_auxiliary_states(self):
        return []

    def declare_backward_dependency(self, out_grad, in_data, out_data):
        """What backward reads: out_grad (unless need_top_grad is False), in_data, out_data."""
        deps = list(out_grad) if getattr(self, 'need_top_grad_', True) else []
        return deps + list(in_data) + list(out_data)

    def create_operator(self, ctx, in_shapes, in_dtypes):
        """The CustomOp that computes this operator on device `ctx`."""
        raise NotImplementedError(f'{type(self).__name__} does not implement create_operator')


def register(reg_name):
    """Class decorator: register a CustomOpProp subclass as op_type `reg_name`.

    >>> import ember as mx
    >>> @mx.operator.register('doc_noop')
    ... class NoopProp(mx.operator.CustomOpProp):
    ...     pass
    >>> 'doc_noop' in mx.operator.get_all_registered_operators()
    True
    """
    def do_register(prop_cls):
        if not (isinstance(prop_cls, type) and issubclass(prop_cls, CustomOpProp)):
            raise TypeError(f'mx.operator.register({reg_name!r}): expected a CustomOpProp '
                            f'subclass, got {prop_cls!r}')
        custom.register_prop(reg_name, prop_cls)
        return prop_cls
    return do_register


def get_all_registered_operators():
    """The op_type names registered with :func:`register`."""
    return custom.registered()


# ----------------------------------------------------------------------------------------------
# mx.nd.Custom: the user's code on the calling thread.

def Custom(*data, op_type=None, out=None, name=None, **kwargs):
    """Run the custom operator registered as `op_type` on `data` (arguments, then aux states).

    NDArray keyword arguments named like the prop's inputs are inputs; the other keyword
    arguments go to the prop's ``__init__`` as strings. Returns an NDArray, or a list when the
    operator has several outputs.
    """
    if op_type is None:
        raise TypeError('Custom: missing op_type (the name given to mx.operator.register)')
    if len(data) == 1 and isinstance(data[0], (list, tuple)):
        data = tuple(data[0])
    named = {key: kwargs.pop(key) for key in list(kwargs) if isinstance(kwargs[key], NDArray)}
    prop = custom.make_prop(op_type, kwargs)
    inputs = _bind_inputs(op_type, prop, list(data), named)
    result = _CustomCall(op_type, prop, inputs)(*inputs)
    return result if out is None else _copy_into(out, result)


def _bind_inputs(op_type, prop, inputs, named):
    names = list(prop.list_arguments()) + list(prop.list_auxiliary_states())
    for input_name in names[len(inputs):]:
        if input_name in named:
            inputs.append(named.pop(input_name))
    if named:
        raise TypeError(f'Custom {op_type!r}: unknown inputs {sorted(named)}; inputs are '
                        f'{", ".join(names)}')
    if len(inputs) != len(names):
        raise TypeError(f'Custom {op_type!r}: expected {len(names)} inputs ({", ".join(names)}),'
                        f' got {len(inputs)}')
    for input_name, value in zip(names, inputs):
        if not isinstance(value, NDArray):
            raise TypeError(f'Custom {op_type!r}: input {input_name!r} must be an NDArray, got '
                            f'{type(value).__name__}')
    return inputs


def _device_of(op_type, inputs):
    if not inputs:
        return _device.current_device()
    first = inputs[0].context
    for x in inputs[1:]:
        if x.context != first:
            raise EmberError(f'Custom {op_type!r}: inputs are on different devices ({first} and '
                             f'{x.context}); copy them with as_in_context first')
    return first


def _copy_into(out, result):
    targets = out if isinstance(out, (list, tuple)) else [out]
    results = result if isinstance(result, list) else [result]
    if len(targets) != len(results):
        raise ValueError(f'Custom: out= has {len(targets)} arrays; the operator has '
                         f'{len(results)} outputs')
    for target, value in zip(targets, results):
        value.copyto(target)
    return out


class _CustomCall(autograd.Function):
    """One call of a custom operator: its CustomOp instance and the arrays backward needs."""

    def __init__(self, op_type, prop, inputs):
        super().__init__()
        self.op_type = op_type
        self.num_args = len(prop.list_arguments())
        self.device = _device_of(op_type, inputs)
        self.is_train = autograd.is_training()
        shapes, dtypes = [x.shape for x in inputs], [np.dtype(x.dtype) for x in inputs]
        in_shapes, self.out_shapes, _ = custom.infer_shapes(prop, shapes, op_type)
        _check_given(op_type, 'shape', shapes, in_shapes)
        in_types, self.out_types, _ = custom.infer_types(prop, dtypes, op_type)
        _check_given(op_type, 'dtype', dtypes, in_types)
        self.op = prop.create_operator(self.device, [list(s) for s in in_shapes],
                                       [t.type for t in in_types])
        self.in_data = self.out_data = self.aux = None

    def forward(self, *inputs):
        outputs = [_ndarray.empty(shape, ctx=self.device, dtype=dtype)
                   for shape, dtype in zip(self.out_shapes, self.out_types)]
        self.in_data = [x.detach() for x in inputs[:self.num_args]]
        self.aux = list(inputs[self.num_args:])
        self.out_data = [o.detach() for o in outputs]
        _guarded(self, 'forward', outputs + self.aux, self.op.forward, self.is_train,
                 ['write'] * len(outputs), self.in_data, self.out_data, self.aux)
        return outputs[0] if len(outputs) == 1 else outputs

    def backward(self, *out_grads):
        in_grad = [_ndarray.zeros(x.shape, ctx=self.device, dtype=x.dtype)
                   for x in self.in_data]
        _guarded(self, 'backward', in_grad, self.op.backward, ['write'] * len(in_grad),
                 list(out_grads), self.in_data, self.out_data, in_grad, self.aux)
        return in_grad + [None] * len(self.aux)


def _check_given(op_type, what, given, inferred):
    for index, (have, want) in enumerate(zip(given, inferred)):
        differs = tuple(have) != tuple(want) if what == 'shape' else have != want
        if differs:
            raise ShapeError(f'Custom {op_type!r}: input {index} has {what} {have}, but the '
                             f'prop infers {want}')


def _guarded(call, stage, targets, fn, *args):
    """Run the user's `fn`; an exception becomes the failure of the `targets` arrays."""
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - raised by the wait that reads the targets
        _fail_later(error, targets, call.device, f'Custom[{call.op_type}].{stage}')


def _fail_later(error, targets, device, label):
    def fail():
        raise error
    engine.get().push(fail, (), [x._var for x in targets], device, name=label)


# ----------------------------------------------------------------------------------------------
# The runner of the registry operators Custom and _backward_Custom (graph execution).

class _Borrowed:
    """Stands in for a storage handle over memory that a kernel was given."""

    __slots__ = ('buffer', 'size')

    def __init__(self, raw):
        self.buffer = raw.reshape(-1).view('uint8')
        self.size = self.buffer.size


def _borrow(raw, device) -> NDArray:
    """An NDArray over a kernel's raw array, with an engine variable of its own."""
    if not raw.flags.c_contiguous:
        raise EmberError(f'Custom: a kernel array of shape {raw.shape} is not C-contiguous; '
                         'NDArrays need contiguous memory')
    # the kernel's array as it is (a full-precision copy under bf16 storage)
    view = View(tuple(raw.shape), np.dtype(raw.dtype), 0, int(raw.size), np.dtype(raw.dtype))
    return NDArray(_Borrowed(raw), view, engine.get().new_var(), device)


def _settle(arrays):
    """Wait until the work the user's code pushed on `arrays` has finished."""
    eng = engine.get()
    for array in arrays:
        eng.wait_for_var(array._var, write=True)


class _KernelRunner:
    """Runs the user's code for the registry operators, one CustomOp per configuration.

    As MXNet's executors do, one bound configuration (op_type, input shapes and dtypes,
    device) keeps one CustomOp instance, shared by its forward and backward.
    """

    def __init__(self, capacity=256):
        self._operators = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def forward(self, attrs, ins, outs, ctx):
        op_type = attrs['op_type']
        prop = custom.make_prop(op_type, {})
        n = len(prop.list_arguments())
        if getattr(prop, 'numpy_kernel', False):
            # NumPy code on the kernel's own arrays: no NDArray, nothing to wait for
            op = self._operator(op_type, prop, ins, ctx.device)
            op.forward(ctx.is_train, ['write'] * len(outs), list(ins[:n]), list(outs),
                       list(ins[n:]))
            return
        _check_thread(op_type)
        op = self._operator(op_type, prop, ins, ctx.device)
        wrapped = [_borrow(raw, ctx.device) for raw in list(ins) + list(outs)]
        inputs, outputs = wrapped[:len(ins)], wrapped[len(ins):]
        with autograd.pause(ctx.is_train):
            op.forward(ctx.is_train, ['write'] * len(outs), inputs[:n], outputs, inputs[n:])
        _settle(wrapped)

    def backward(self, attrs, ins, outs, ctx):
        op_type = attrs['op_type']
        prop = custom.make_prop(op_type, {})
        n_out, n = len(prop.list_outputs()), len(prop.list_arguments())
        if getattr(prop, 'numpy_kernel', False):
            op = self._operator(op_type, prop, ins[n_out:n_out + n] + ins[2 * n_out + n:],
                                ctx.device)
            for raw in outs:
                raw[...] = 0
            op.backward(['write'] * n, list(ins[:n_out]), list(ins[n_out:n_out + n]),
                        list(ins[n_out + n:2 * n_out + n]), list(outs),
                        list(ins[2 * n_out + n:]))
            return
        _check_thread(op_type)
        wrapped = [_borrow(raw, ctx.device) for raw in ins]
        out_grad, in_data = wrapped[:n_out], wrapped[n_out:n_out + n]
        out_data, aux = wrapped[n_out + n:2 * n_out + n], wrapped[2 * n_out + n:]
        op = self._operator(op_type, prop, ins[n_out:n_out + n] + ins[2 * n_out + n:],
                            ctx.device)
        for raw in outs:
            raw[...] = 0
        in_grad = [_borrow(raw, ctx.device) for raw in outs]
        with autograd.pause(ctx.is_train):
            op.backward(['write'] * n, out_grad, in_data, out_data, in_grad, aux)
        _settle(wrapped + in_grad)

    def _operator(self, op_type, prop, inputs, device):
        shapes = tuple(tuple(x.shape) for x in inputs)
        dtypes = tuple(np.dtype(x.dtype) for x in inputs)
        key = (op_type, type(prop), shapes, dtypes, device)
        with self._lock:
            found = self._operators.get(key)
            if found is not None:
                self._operators.move_to_end(key)
                return found
        op = prop.create_operator(device, [list(s) for s in shapes], [d.type for d in dtypes])
        with self._lock:
            self._operators[key] = op
            while len(self._operators) > self._capacity:
                self._operators.popitem(last=False)
        return op


def _check_thread(op_type):
    if _engine.in_worker():
        raise EmberError(f'Custom {op_type!r} ran on an engine worker thread, where the mx.nd '
                         'operators it calls could never finish before it returns; call it '
                         'with mx.nd.Custom (which runs it on the calling thread), or execute '
                         'the graph with MXNET_ENGINE_TYPE=NaiveEngine')


custom.set_runner(_KernelRunner())
_ndarray.Custom = _ndarray.op.Custom = Custom        # mx.nd.Custom
_ndarray.__all__.append('Custom')
_ndarray.op.__all__.append('Custom')


# ----------------------------------------------------------------------------------------------
# MXNet's older Python operators (PythonOp, NumpyOp, NDArrayOp), run as custom operators.

class PythonOp:
    """An operator written in Python, MXNet's older form (deprecated there for CustomOp):
    override ``forward(in_data, out_data)``, ``backward(out_grad, in_data, out_data,
    in_grad)``, ``infer_shape``, ``list_arguments`` and ``list_outputs``; calling the object
    (or ``get_symbol``) on symbols gives a Symbol. The arrays handed over are NDArrays (NumPy
    arrays for :class:`NumpyOp`); write results into them in place. A :class:`NumpyOp` runs
    under any engine; one handed NDArrays calls ``mx.nd`` operators, so, as any ``Custom`` in a
    graph, it runs with ``MXNET_ENGINE_TYPE=NaiveEngine``.

    >>> import warnings, ember as mx
    >>> class Square(mx.operator.NumpyOp):
    ...     def forward(self, in_data, out_data):
    ...         out_data[0][:] = in_data[0] * in_data[0]
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter('ignore')
    ...     square = Square()
    >>> y = square(mx.sym.var('x'))
    >>> y.bind(mx.cpu(), {'x': mx.nd.array([1, 2])}).forward()[0].asnumpy().tolist()
    [1.0, 4.0]
    """

    def __init__(self, need_top_grad=True):
        self.info_ = None
        self.need_top_grad_ = need_top_grad
        self._op_type = None
        warnings.warn(f'{type(self).__name__} has been deprecated. Please use CustomOp',
                      stacklevel=2)

    def __call__(self, *args, **kwargs):
        return self.get_symbol(*args, **kwargs)

    def get_symbol(self, *args, **kwargs):
        """A Symbol running this operator on the symbols `args` (keyword: by argument name)."""
        from ember import symbol
        if self._op_type is None:
            self._op_type = f'_{type(self).__name__}_{id(self):x}'
            custom.register_prop(self._op_type, _legacy_prop(self))
        return symbol.Custom(*args, op_type=self._op_type, **kwargs)

    def forward(self, in_data, out_data):
        """Write the outputs into `out_data` from `in_data`."""
        raise NotImplementedError(f'{type(self).__name__} does not implement forward')

    def backward(self, out_grad, in_data, out_data, in_grad):
        """Write the input gradients into `in_grad`."""
        raise NotImplementedError(f'{type(self).__name__} does not implement backward')

    def infer_shape(self, in_shape):
        """(argument shapes, output shapes): by default one output of the first input's shape."""
        return in_shape, [in_shape[0]]

    def list_outputs(self):
        return ['output']

    def list_arguments(self):
        return ['data']

    def need_top_grad(self):
        """Whether backward reads the output gradient (a loss does not)."""
        return self.need_top_grad_

    def _to_user(self, arrays):
        return list(arrays)

    def _from_user(self, targets, values, reqs):
        for target, value, req in zip(targets, values, reqs):
            if value is not target:
                CustomOp.assign(None, target, req, value)


class NDArrayOp(PythonOp):
    """A :class:`PythonOp` handed NDArrays."""

    def declare_backward_dependency(self, out_grad, in_data, out_data):
        """What backward reads: the output gradient (when needed), the inputs and outputs."""
        deps = list(out_grad) if self.need_top_grad() else []
        return deps + list(in_data) + list(out_data)


class NumpyOp(PythonOp):
    """A :class:`PythonOp` handed NumPy arrays (copies, written back after the call)."""

    def _to_user(self, arrays):
        # in a graph the kernel's NumPy arrays come as they are (written in place)
        return [a if isinstance(a, np.ndarray) else a.asnumpy() for a in arrays]


def _legacy_prop(python_op):
    """A CustomOpProp class running `python_op`."""
    class LegacyProp(CustomOpProp):
        numpy_kernel = isinstance(python_op, NumpyOp)   # runs on any engine thread

        def __init__(self, **kwargs):
            super().__init__(need_top_grad=python_op.need_top_grad())

        def list_arguments(self):
            return python_op.list_arguments()

        def list_outputs(self):
            return python_op.list_outputs()

        def infer_shape(self, in_shape):
            shapes = python_op.infer_shape(in_shape)
            return shapes[0], shapes[1], []

        def create_operator(self, ctx, in_shapes, in_dtypes):
            return _LegacyRunner(python_op)
    return LegacyProp


class _LegacyRunner(CustomOp):
    def __init__(self, python_op):
        super().__init__()
        self.python_op = python_op

    def forward(self, is_train, req, in_data, out_data, aux):
        op = self.python_op
        outs = op._to_user(out_data)
        op.forward(op._to_user(in_data), outs)
        op._from_user(out_data, outs, req)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        op = self.python_op
        grads = op._to_user(in_grad)
        op.backward(op._to_user(out_grad), op._to_user(in_data), op._to_user(out_data), grads)
        op._from_user(in_grad, grads, req)


# ----------------------------------------------------------------------------------------------
# What an operator takes, as MXNet describes it.

OperatorArguments = collections.namedtuple('OperatorArguments', ['narg', 'names', 'types'])


def get_operator_arguments(op_name):
    """The inputs and parameters of operator `op_name`, with their types described in MXNet's
    words (Ember's parameter types are coarser: an optional number reads 'string or None').

    >>> import ember as mx
    >>> mx.operator.get_operator_arguments('relu')
    OperatorArguments(narg=1, names=['data'], types=['NDArray-or-Symbol'])
    """
    op = _registry.get(op_name)
    if op.variadic:
        names, types = ['data'], ['NDArray-or-Symbol[]']
    else:   # the inputs at the parameters' defaults (FullyConnected: with its bias)
        defaults = {p.name: p.default for p in op.params if p.default is not _registry.REQUIRED}
        names = op.input_names(defaults)
        types = ['NDArray-or-Symbol'] * len(names)
    for param in op.params:
        names.append(param.name)
        types.append(_param_text(param))
    return OperatorArguments(len(names), names, types)


_TYPE_NAMES = {_registry.p_int: 'int', _registry.p_float: 'float', _registry.p_bool: 'boolean',
               _registry.p_str: 'string', _registry.p_shape: 'Shape(tuple)',
               _registry.p_axes: 'Shape or None', _registry.p_dtype: 'dtype'}


def _param_text(param) -> str:
    choices = getattr(param.convert, 'choices', None)
    if choices:
        listed = (['None'] if param.default is None else []) + sorted(map(repr, choices))
        kind = '{' + ', '.join(listed) + '}'
        if param.default is None:    # MXNet's text for an enum that may be unset
            return kind + ",optional, default='None'"
    else:
        kind = _TYPE_NAMES.get(param.convert, 'string')
        if getattr(param.convert, 'accepts_none', False):
            kind += ' or None'
    if param.default is _registry.REQUIRED:
        return f'{kind}, required'
    default = param.default
    if isinstance(default, bool):
        text = str(int(default))
    elif isinstance(default, str):
        text = repr(default)
    elif isinstance(default, np.dtype):
        text = repr(default.name)
    elif isinstance(default, tuple):
        text = str(list(default))
    else:
        text = str(default)
    return f'{kind}, optional, default={text}'
