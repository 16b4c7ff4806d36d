"""``Symbol.bind``, ``Symbol.simple_bind`` and ``Symbol.eval`` (MXNet 1.x).

They are attached to :class:`~ember.symbol.Symbol` when :mod:`ember.executor` is imported, since
the symbol layer may not import the executor.

>>> import ember as mx
>>> import ember.executor
>>> a, b = mx.sym.var('a'), mx.sym.var('b')
>>> (a * b + 1).eval(mx.cpu(), a=mx.nd.array([1, 2]), b=mx.nd.array([3, 4]))[0].asnumpy()
array([4., 9.], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from ember.base import EmberError, dtype_of
from ember.executor.executor import Executor
from ember.ndarray import sparse
from ember.ndarray.creation import zeros
from ember.ndarray.ndarray import NDArray, parse_device, view_of
from ember.passes.gradient import grad_reqs_of
from ember.symbol.infer import shape_is_known
from ember.symbol.symbol import Symbol

__all__ = ['bind', 'simple_bind', 'eval_symbol']


def bind(self, ctx, args, args_grad=None, grad_req='write', aux_states=None, group2ctx=None,
         shared_exec=None):
    """An :class:`Executor` over the given arrays (used as they are, not copied).

    `args` (and `args_grad`, `aux_states`) are lists in ``list_arguments`` order or dicts by
    name; an argument without a gradient array gets no gradient. `grad_req` is 'write', 'add'
    or 'null', for all arguments or per argument (a list, or a dict where missing names are
    'null'). `shared_exec` is accepted for compatibility: every executor has its own arena.
    """
    device = parse_device(ctx)
    _check_group2ctx(group2ctx, device)
    arg_names, aux_names = self.list_arguments(), self.list_auxiliary_states()
    arg_arrays = _arrays('args', args, arg_names, False, device)
    grad_arrays = ([None] * len(arg_names) if args_grad is None
                   else _arrays('args_grad', args_grad, arg_names, True, device))
    aux_arrays = _arrays('aux_states', [] if aux_states is None else aux_states, aux_names,
                         False, device)
    reqs = grad_reqs_of(arg_names, grad_req)
    reqs = {name: 'null' if grad is None else reqs[name]
            for name, grad in zip(arg_names, grad_arrays)}
    return Executor(self, device, arg_arrays, grad_arrays, reqs, aux_arrays, group2ctx)


def simple_bind(self, ctx, grad_req='write', type_dict=None, stype_dict=None, group2ctx=None,
                shared_arg_names=None, shared_exec=None, shared_buffer=None, **kwargs):
    """An :class:`Executor` with new arrays (zeros) for the arguments, their gradients and
    the auxiliary states, from input shapes given by name (``data=(32, 784)``).

    `type_dict` gives dtypes by name (float32 for arguments without one). Arguments named in
    `shared_arg_names` take ``shared_exec``'s arrays (parameters shared between bucketing
    executors); the auxiliary states are then ``shared_exec``'s too. Other arrays are taken
    from `shared_buffer` (name -> NDArray; ``'grad of <name>'`` for gradients) where one there
    is large enough, and new ones are put into it.
    """
    device = parse_device(ctx)
    _check_group2ctx(group2ctx, device)
    arg_names, aux_names = self.list_arguments(), self.list_auxiliary_states()
    stypes = _storage_types(self, arg_names, stype_dict)
    arg_shapes, aux_shapes = _inferred_shapes(self, kwargs)
    arg_types, aux_types = _inferred_types(self, type_dict)
    reqs = grad_reqs_of(arg_names, grad_req)
    shared = set(shared_arg_names or ())
    if shared and shared_exec is None:
        raise EmberError('simple_bind: shared_arg_names needs shared_exec')
    arrays = _Allocator(device, shared_exec, shared, shared_buffer)
    arg_arrays, grad_arrays = [], []
    for name, shape, dtype in zip(arg_names, arg_shapes, arg_types):
        stype = stypes.get(name, 'default')
        arg_arrays.append(arrays.argument(name, shape, dtype) if stype == 'default'
                          else sparse.zeros(stype, shape, device, dtype))
        # a row_sparse argument (an embedding's weight) gets a row_sparse gradient
        grad_arrays.append(None if reqs[name] == 'null'
                           else arrays.gradient(name, shape, dtype) if stype != 'row_sparse'
                           else sparse.zeros(stype, shape, device, dtype))
    aux_arrays = [arrays.auxiliary(name, shape, dtype)
                  for name, shape, dtype in zip(aux_names, aux_shapes, aux_types)]
    return Executor(self, device, arg_arrays, grad_arrays, reqs, aux_arrays, group2ctx)


def eval_symbol(self, ctx=None, **kwargs):
    """The outputs of this symbol for the arguments given by name (a list of NDArrays)."""
    return bind(self, ctx, kwargs).forward()


Symbol.bind = bind
Symbol.simple_bind = simple_bind
Symbol.eval = eval_symbol
eval_symbol.__name__ = 'eval'


# ----------------------------------------------------------------------------------------------

def _arrays(what, values, names, allow_missing, device):
    """`values` (a list in `names` order or a dict by name) as a list of NDArrays."""
    if isinstance(values, (list, tuple)):
        if len(values) != len(names):
            raise ValueError(f'Length of {what} ({len(values)}) does not match the number of '
                             f'arguments ({len(names)}: {names})')
        arrays = list(values)
    elif isinstance(values, dict):
        if not allow_missing:
            missing = [name for name in names if name not in values]
            if missing:
                raise ValueError(f'key `{missing[0]}` is missing in `{what}`; expected keys: '
                                 f'{names}')
        arrays = [values.get(name) for name in names]
    else:
        raise TypeError(f'{what}: only accept list of NDArrays or dict of str to NDArray, got '
                        f'{type(values).__name__}')
    for name, array in zip(names, arrays):
        _check_array(what, name, array, allow_missing, device)
    return arrays


def _check_array(what, name, array, allow_missing, device):
    if array is None and allow_missing:
        return
    if not isinstance(array, NDArray):
        raise TypeError(f'{what}[{name!r}]: only accept list of NDArrays or dict of str to '
                        f'NDArray, got {type(array).__name__}')
    if array.context != device:
        raise EmberError(f'{what}[{name!r}] is on {array.context}, the executor on {device}; '
                         f'copy it with as_in_context({device})')


def _check_group2ctx(group2ctx, device):
    """Groups placed on other devices are refused rather than silently run on `device`."""
    for group, target in (group2ctx or {}).items():
        if parse_device(target) != device:
            raise EmberError(f'group2ctx: group {group!r} on {target}: placing groups on '
                             f'devices other than the executor\'s ({device}) is not supported')


def _storage_types(symbol, arg_names, stype_dict):
    """Argument name -> storage type: `stype_dict`, else the variable's ``stype``."""
    numbers = {'0': 'default', '1': 'row_sparse', '2': 'csr'}
    attrs = symbol.attr_dict()
    stypes = {name: numbers.get(attrs.get(name, {}).get('__storage_type__', '0'), 'default')
              for name in arg_names}
    for name, stype in (stype_dict or {}).items():
        if name not in stypes:
            raise EmberError(f'stype_dict: {name!r} is not an argument of the symbol; '
                             f'arguments: {arg_names}')
        if stype not in numbers.values():
            raise EmberError(f"stype_dict[{name!r}] = {stype!r}: expected 'default', "
                             f"'row_sparse' or 'csr'")
        stypes[name] = stype
    return stypes


def _inferred_shapes(symbol, shapes):
    arg_shapes, _, aux_shapes = symbol.infer_shape_partial(**shapes)
    names = symbol.list_arguments() + symbol.list_auxiliary_states()
    unknown = [f'{name}: {shape}' for name, shape in zip(names, arg_shapes + aux_shapes)
               if not shape_is_known(shape)]
    if unknown:
        raise EmberError('simple_bind error: cannot infer the shapes of these inputs from '
                         f'{shapes}; give them as keyword shapes:\n\t' + '\n\t'.join(unknown))
    return arg_shapes, aux_shapes


def _inferred_types(symbol, type_dict):
    if type_dict is None:
        attrs = symbol.attr_dict()
        type_dict = {name: np.float32 for name in symbol.list_arguments()
                     if '__dtype__' not in attrs.get(name, {})}
    arg_types, _, aux_types = symbol.infer_type_partial(**type_dict)
    names = symbol.list_arguments() + symbol.list_auxiliary_states()
    unknown = [name for name, dtype in zip(names, arg_types + aux_types) if dtype is None]
    if unknown:
        raise EmberError(f'simple_bind error: cannot infer the dtypes of {unknown}; give them '
                         f'in type_dict')
    return [dtype_of(t) for t in arg_types], [dtype_of(t) for t in aux_types]


class _Allocator:
    """Arrays of simple_bind: shared with `shared_exec`, reused from `shared_buffer`, or new."""

    def __init__(self, device, shared_exec, shared_names, shared_buffer):
        self.device = device
        self.shared_exec = shared_exec
        self.shared_names = shared_names
        self.shared_buffer = shared_buffer

    def argument(self, name, shape, dtype):
        if name in self.shared_names:
            return self._shared(self.shared_exec.arg_dict, name, shape, dtype)
        return self._buffered(name, shape, dtype)

    def gradient(self, name, shape, dtype):
        if name in self.shared_names:
            found = self.shared_exec.grad_dict.get(name)
            if found is not None:
                return self._shared(self.shared_exec.grad_dict, name, shape, dtype)
        return self._buffered(f'grad of {name}', shape, dtype)

    def auxiliary(self, name, shape, dtype):
        if self.shared_exec is not None:
            return self._shared(self.shared_exec.aux_dict, name, shape, dtype)
        return zeros(shape, self.device, dtype)

    def _shared(self, arrays, name, shape, dtype):
        array = arrays.get(name)
        if array is None or array.shape != tuple(shape) or array._view.dtype != dtype:
            found = 'nothing' if array is None else f'{array.shape} {array._view.dtype}'
            raise EmberError(f'simple_bind: shared array {name!r} of shared_exec is {found}; '
                             f'this executor needs {tuple(shape)} {dtype}')
        return array

    def _buffered(self, key, shape, dtype):
        buffer = self.shared_buffer
        if buffer is None:
            return zeros(shape, self.device, dtype)
        found = buffer.get(key)
        size = int(np.prod(shape))
        if found is not None and found._view.dtype == dtype and found.size >= size:
            if found.shape == tuple(shape):
                return found
            view = view_of(tuple(shape), dtype, found._view.offset)
            return NDArray(found.handle, view, found._var, found.context)
        array = zeros(shape, self.device, dtype)
        buffer[key] = array
        return array
