"""CachedOp: a traced graph run on arrays, bound once per input signature (MXNet's CachedOp).

Hybridized Gluon blocks call their graph through a CachedOp. Each call looks up an executor by
the inputs' shapes and dtypes, the device and which inputs need gradients; the first call of a
signature binds one. Parameters are bound as they are (no copy), so the executor reads their
current values and updates auxiliary states (BatchNorm's moving statistics) in place; data
inputs are copied into the executor's input arrays and outputs out of its arena (the next call
overwrites the arena).

While ``autograd`` records, a call is one node of the tape whose gradient runs the executor's
backward. That computes the parameters' gradients straight into their .grad arrays (no copy,
no second array per gradient: resnet50_v1's training at batch 16 peaked 60-120 MB lower),
except where another part of the graph adds to them or ``autograd.grad`` asks (.grad then
keeps its value). The executor is held for that node until its backward has run (or the node
is freed), and a call meanwhile binds a second executor. With ``static_alloc`` every
signature keeps its executors and their memory from call to call; without it only the
signature in use does, and the others' memory goes back to the pool when another signature
is called.

>>> import ember as mx
>>> from ember.executor.cached_op import CachedOp
>>> x = mx.sym.var('data')
>>> op = CachedOp(mx.sym.relu(x * 2))
>>> op(mx.nd.array([-1.0, 3.0])).asnumpy().tolist()
[0.0, 6.0]
>>> op.signatures()
[Signature(shapes=((2,),), dtypes=(dtype('float32'),), device=cpu(0), grad_reqs=('null',))]
"""
from __future__ import annotations

import contextlib
import itertools
import operator
import threading
import weakref
from dataclasses import dataclass, field

from ember import autograd, config
from ember import ndarray as nd
from ember.base import EmberError
from ember.executor.bind import bind
from ember.ndarray.storage import SPARSE_CLASSES

__all__ = ['CachedOp', 'Signature']


@dataclass(frozen=True)
class Signature:
    """What an executor is bound for: per input its shape and dtype name, the device, and per
    input 'write' where a gradient is computed for it, else 'null'."""
    shapes: tuple
    dtypes: tuple
    device: object
    grad_reqs: tuple
    # (position, storage type) of the sparse inputs; () when all are dense
    stypes: tuple = field(default=(), repr=False)


class CachedOp:
    """Run symbol `sym` on NDArrays given in ``sym.list_inputs()`` order.

    `flags` (pairs or a dict): ``static_alloc``, ``static_shape``, ``forward_bulk_size``,
    ``backward_bulk_size`` (most operators per engine push, overriding
    ``MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD`` / ``_BWD`` for this graph), ``data_indices``
    and ``param_indices`` (which inputs are data and which parameters; default: all data).
    ``static_shape`` and ``inline_limit`` are accepted for MXNet's sake: executors are bound
    per input shape anyway, and a traced graph holds its children's operators inline.
    """

    FLAGS = ('static_alloc', 'static_shape', 'inline_limit', 'forward_bulk_size',
             'backward_bulk_size', 'data_indices', 'param_indices')

    def __init__(self, sym, flags=()):
        flags = dict(flags)
        unknown = sorted(set(flags) - set(self.FLAGS))
        if unknown:
            raise ValueError(f'CachedOp: unknown flags {unknown}; accepted: '
                             f'{", ".join(self.FLAGS)}')
        self._symbol = sym
        self._input_names = tuple(sym.list_inputs())
        self._null_reqs = ('null',) * len(self._input_names)
        self._aux_names = frozenset(sym.list_auxiliary_states())
        self._num_outputs = len(sym.list_outputs())
        self._static_alloc = bool(flags.get('static_alloc', False))
        self._bulk = (flags.get('forward_bulk_size'), flags.get('backward_bulk_size'))
        # Parameters and auxiliary states are bound as they are; BatchNorm updates the latter.
        params = [int(i) for i in flags.get('param_indices') or ()]
        params += [i for i, name in enumerate(self._input_names) if name in self._aux_names]
        self._param_positions = frozenset(params)
        self._param_order = tuple(sorted(self._param_positions))
        self._pool = {}                # Signature -> list of _Bound
        # Reentrant: a finalizer may release an executor during a collection inside _acquire.
        self._lock = threading.RLock()
        self.num_binds = 0

    def signatures(self) -> list:
        """The signatures bound so far, in the order they were first seen."""
        return list(self._pool)

    def __call__(self, *args, out=None):
        if len(args) != len(self._input_names):
            raise ValueError(f'CachedOp: expected {len(self._input_names)} inputs '
                             f'({", ".join(self._input_names)}), got {len(args)}')
        if not all(map(isinstance, args, itertools.repeat(nd.NDArray))):
            name, value = next((n, v) for n, v in zip(self._input_names, args)
                               if not isinstance(v, nd.NDArray))
            raise TypeError(f'CachedOp: input {name!r} must be an NDArray, got '
                            f'{type(value).__name__}')
        recording = autograd.is_recording() and any(a._ag is not None for a in args)
        signature = self._signature(args, recording)
        bound = self._acquire(signature, args)
        outputs = bound.forward(args, autograd.is_training())
        if recording:
            self._record(bound, args, outputs)
        else:
            self._release(bound, bound.lease)
        if out is not None:
            return _write_out(outputs, out)
        return outputs[0] if len(outputs) == 1 else outputs

    # -- executors per signature -----------------------------------------------------------------
    def _signature(self, args, recording):
        if recording:
            reqs = tuple('write' if a._ag is not None and name not in self._aux_names
                         else 'null' for name, a in zip(self._input_names, args))
        else:
            reqs = self._null_reqs
        # np.dtype objects hash and compare by value; their .name costs microseconds each
        views = [a._view for a in args]
        stypes = () if SPARSE_CLASSES.isdisjoint(map(type, args)) else tuple(
            (i, a.stype) for i, a in enumerate(args) if a.stype != 'default')
        return Signature(tuple([v.shape for v in views]), tuple([v.dtype for v in views]),
                         args[0].context, reqs, stypes)

    def _acquire(self, signature, args):
        params = self._param_arrays(args)
        with self._lock:
            if not self._static_alloc:
                self._drop_idle(signature)
            pool = self._pool.setdefault(signature, [])
            # Executors bound to parameter arrays that were since replaced are dropped.
            pool[:] = [b for b in pool if b.lease is not None or b.params_match(params)]
            for bound in pool:
                if bound.lease is None:
                    bound.lease = object()
                    return bound
        bound = self._bind(signature, args)
        bound.lease = object()
        with self._lock:
            self._pool.setdefault(signature, []).append(bound)
        return bound

    def _drop_idle(self, signature):
        """Without static_alloc only the signature in use keeps idle executors (and their
        memory); the others go back to the pool."""
        for other in list(self._pool):
            if other != signature:
                busy = [b for b in self._pool[other] if b.lease is not None]
                if busy:
                    self._pool[other] = busy
                else:
                    del self._pool[other]

    def _release(self, bound, lease):
        with self._lock:
            if bound.lease is lease:
                bound.lease = None

    def _param_arrays(self, args):
        return tuple([args[i] for i in self._param_order])

    def _bind(self, signature, args):
        self.num_binds += 1
        return _Bound(self._symbol, self._input_names, self._aux_names, self._param_order,
                      signature, args, self._bulk)

    # -- autograd --------------------------------------------------------------------------------
    def _record(self, bound, args, outputs):
        lease, generation = bound.lease, bound.generation
        cached_op = self

        def grad_fn(out_grads):
            if autograd.is_recording():
                raise EmberError('gradients of gradients through a hybridized block are not '
                                 'supported; call hybridize(active=False) for create_graph')
            if bound.generation != generation:
                raise EmberError('the executor of this hybridized call ran another forward '
                                 'since this one; run backward before calling the block again')
            grads = bound.backward(out_grads)
            cached_op._release(bound, lease)
            return grads
        weakref.finalize(grad_fn, CachedOp._release, self, bound, lease)
        autograd._attach(grad_fn, list(args), outputs, 'CachedOp')


class _Bound:
    """One executor of a CachedOp and the arrays it was bound with: the caller's arrays for
    parameters and auxiliary states and, where they fit (:func:`_fits`), the parameters'
    .grad arrays for their gradients; its own for data inputs and the other gradients."""

    def __init__(self, sym, input_names, aux_names, param_positions, signature, args, bulk):
        self.lease = None
        self.generation = 0
        self._input_names = input_names
        self._reqs = dict(zip(input_names, signature.grad_reqs))
        self._params = {input_names[i]: args[i] for i in param_positions}
        # in position order, as CachedOp._param_arrays lists the arrays of a call
        self._param_arrays = tuple(args[i] for i in param_positions)
        self._data_positions = tuple((name, i) for i, name in enumerate(input_names)
                                     if name not in self._params)
        arrays = {name: self._params[name] if name in self._params else _like(value)
                  for name, value in zip(input_names, args)}
        arg_names = sym.list_arguments()
        # parameters' gradients are computed straight into their .grad arrays where they have
        # one that fits: backward() then has nothing to copy (see backward)
        self._direct = {n: self._params[n]._grad for n in arg_names
                        if self._reqs[n] != 'null' and _fits(self._params.get(n))}
        grads = {n: self._direct[n] if n in self._direct else _like_grad(arrays[n])
                 for n in arg_names if self._reqs[n] != 'null'}
        self._bulk = _bulk_values(bulk)
        with self._bulk_scope():
            self.executor = bind(
                sym, signature.device, args={n: arrays[n] for n in arg_names}, args_grad=grads,
                grad_req={n: self._reqs[n] for n in arg_names},
                aux_states={n: arrays[n] for n in input_names if n in aux_names})

    def _bulk_scope(self):
        # The bulk pass reads these variables when a mode's program is compiled, which may be
        # at the first forward of that mode.
        return config.override(**self._bulk) if self._bulk else contextlib.nullcontext()

    def params_match(self, params):
        """Whether `params` (CachedOp._param_arrays of a call) are the arrays bound here."""
        return all(map(operator.is_, params, self._param_arrays))

    def forward(self, args, is_train):
        self.generation += 1
        data = {name: args[i] for name, i in self._data_positions}
        with self._bulk_scope():
            self.executor.forward(is_train=is_train, **data)
        return [o.copy() for o in self.executor.outputs]

    def backward(self, out_grads):
        # A parameter bound to its .grad array: that array is the gradient handed back
        # ('direct', autograd.gradient_target), or a copy of it where other gradients are
        # added to it ('copy'), or a copy with .grad given its value back ('keep').
        modes = {name: autograd.gradient_target(self._params[name])
                 for name, grad in self._direct.items() if self._params[name]._grad is grad}
        kept = {name: self._direct[name].copy() for name, mode in modes.items()
                if mode == 'keep'}
        with self._bulk_scope():
            self.executor.backward(out_grads=list(out_grads))
        grad_dict = self.executor.grad_dict
        grads, lent = [], []
        for name in self._input_names:
            grad = grad_dict[name] if self._reqs[name] != 'null' else None
            if modes.get(name) in ('copy', 'keep'):
                grad = grad.copy()
            else:
                lent.append(grad)
            if name in kept:
                self._direct[name][:] = kept[name]
            grads.append(grad)
        # lent, not copied: backward() copies them into .grad (a copy here would be a second
        # pass and a second copy of every gradient), autograd.grad() copies them itself
        autograd.lend(lent)
        return grads


def _like(array):
    return nd.sparse.empty(array.stype, array.shape, array.context, array.dtype)


def _like_grad(array):
    """A gradient array for `array`, of the storage type of its .grad (a parameter's
    row_sparse gradient stays row_sparse: a dense one could be the size of a whole
    embedding), else dense."""
    grad = getattr(array, '_grad', None)
    stype = grad.stype if grad is not None else 'default'
    return nd.sparse.empty(stype, array.shape, array.context, array.dtype)


def _fits(param):
    """Whether parameter array `param` has a dense .grad array of its own shape, dtype and
    device that ``backward`` overwrites (grad_req 'write'), so that its executor may write
    it. (With 'add' every backward would have to keep and restore it.)"""
    grad = getattr(param, '_grad', None)
    return (getattr(param, '_grad_req', None) == 'write' and type(grad) is nd.NDArray
            and grad.shape == param.shape
            and grad.dtype == param.dtype and grad.context == param.context)


def _bulk_values(bulk):
    forward, backward = bulk
    values = {}
    if forward is not None:
        values['MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD'] = int(forward)
    if backward is not None:
        values['MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD'] = int(backward)
    return values


def _write_out(outputs, out):
    targets = [out] if isinstance(out, nd.NDArray) else list(out)
    if len(targets) != len(outputs):
        raise ValueError(f'CachedOp: out holds {len(targets)} arrays for {len(outputs)} outputs')
    for target, value in zip(targets, outputs):
        target[:] = value
    return out
