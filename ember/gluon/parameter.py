"""Gluon parameters: named weights with deferred initialization, gradients and per-device copies."""
from __future__ import annotations

import re
from collections import OrderedDict

import numpy as np

from ember import autograd, initializer
from ember import ndarray as nd
from ember.base import EmberError, dtype_of
from ember.device import Device, current_device
from ember.ndarray import NDArray
from ember.symbol import Symbol
from ember.numpy.multiarray import wrap as as_np_inplace
from ember.util import is_np_array

__all__ = ['Parameter', 'Constant', 'ParameterDict', 'DeferredInitializationError',
           'tensor_types']


# What a block's forward pass takes: arrays, or symbols while it is traced.
tensor_types = (Symbol, NDArray)

class DeferredInitializationError(EmberError):
    """A parameter's shape is not known yet; it is initialized at the first forward pass."""


_GRAD_REQS = ('write', 'add', 'null')


class Parameter:
    """A weight of a Block: its data on one or more devices, its gradient and its settings.

    >>> import ember as mx
    >>> p = mx.gluon.Parameter('w', shape=(2, 3))
    >>> p.initialize(mx.init.One())
    >>> float(p.data().asnumpy().sum())
    6.0

    ``stype='row_sparse'`` keeps the weight in a KVStore, as MXNet does for large embeddings:
    a Trainer must be created with it, and a forward pass reads the rows it needs with
    :meth:`row_sparse_data` (the store pulls them); ``data()`` is refused. The Trainer then
    pushes each step's gradient to the store, which updates the weight.

    >>> w = mx.gluon.Parameter('w', shape=(5, 2), stype='row_sparse', grad_stype='row_sparse')
    >>> w.initialize(mx.init.One())
    >>> trainer = mx.gluon.Trainer([w], 'sgd', {'learning_rate': 1.0}, kvstore='local')
    >>> rows = w.row_sparse_data(mx.nd.array([1, 3]))
    >>> rows.stype, rows.indices.asnumpy().tolist()
    ('row_sparse', [1, 3])
    """

    def __init__(self, name, grad_req='write', shape=None, dtype='float32', lr_mult=1.0,
                 wd_mult=1.0, init=None, allow_deferred_init=False, differentiable=True,
                 stype='default', grad_stype='default'):
        self.name = name
        self._shape = _as_shape(shape)
        self.dtype = dtype_of(dtype)
        self.lr_mult, self.wd_mult = lr_mult, wd_mult
        self.init = init
        self.allow_deferred_init = allow_deferred_init
        self._differentiable = differentiable
        self._data = None          # OrderedDict device -> NDArray
        self._grad = None
        self._deferred = None      # (init, devices, default_init) waiting for a shape
        self._grad_req = None
        self.grad_req = grad_req if differentiable else 'null'
        self._stype, self._grad_stype = _checked_stype(name, 'stype', stype), \
            _checked_stype(name, 'grad_stype', grad_stype)
        self._trainer = None       # the Trainer of a row_sparse parameter (it owns the store)

    def __repr__(self):
        return f'Parameter {self.name} (shape={self.shape}, dtype={self.dtype.name})'

    # Counts every replacement of any parameter's table of arrays (initialization, reset_ctx,
    # cast, ...): a hybridized block keeps the arrays it last read per call and reads them
    # again only when this has moved.
    tables_changed = 0

    @property
    def _data(self):
        """The arrays per device (an OrderedDict), None before initialization."""
        return self._table

    @_data.setter
    def _data(self, table):
        self._table = table
        Parameter.tables_changed += 1

    # -- settings --------------------------------------------------------------------------------
    @property
    def grad_req(self):
        return self._grad_req

    @grad_req.setter
    def grad_req(self, req):
        if req not in _GRAD_REQS:
            raise ValueError(f"{self.name}: grad_req={req!r}: expected 'write', 'add' or 'null'")
        if not self._differentiable:
            req = 'null'
        if self._grad_req == req:
            return
        self._grad_req = req
        if self._data is not None:
            self._init_grad()

    @property
    def shape(self):
        return self._shape

    @shape.setter
    def shape(self, new_shape):
        new_shape = _as_shape(new_shape)
        if self._shape is None:
            self._shape = new_shape
            return
        if len(new_shape) != len(self._shape) or any(
                0 not in (old, new) and old != new for old, new in zip(self._shape, new_shape)):
            raise EmberError(f'{self.name}: shape {new_shape} does not match the declared '
                             f'shape {self._shape}')
        # 0 means unknown on either side: keep whatever is known.
        self._shape = tuple(new or old for old, new in zip(self._shape, new_shape))

    def _shape_known(self):
        return self._shape is not None and all(d > 0 for d in self._shape)

    # -- initialization --------------------------------------------------------------------------
    def initialize(self, init=None, ctx=None, default_init=None, force_reinit=False):
        """Create the data on `ctx` (a device or a list), now or at the first forward pass."""
        if default_init is None:
            default_init = initializer.Uniform()
        if self._data is not None and not force_reinit:
            return
        self._data = self._grad = None
        devices = _devices(ctx)
        init = self.init if init is None else init
        if not self._shape_known():
            if not self.allow_deferred_init:
                raise EmberError(f'{self.name}: cannot initialize with unknown shape '
                                 f'{self.shape}; give the full shape or allow deferred init')
            self._deferred = (init, devices, default_init)
            return
        self._init_now(init, devices, default_init)

    def _init_now(self, init, devices, default_init):
        with autograd.pause():
            data = nd.zeros(self._shape, ctx=devices[0], dtype=self.dtype)
            desc = initializer.InitDesc(self.name)
            if init is not None:
                # An initializer chosen for this parameter applies whatever its name.
                _as_initializer(init)._init_weight(desc, data)
            else:
                _as_initializer(default_init)(desc, data)
        self._init_from(data, devices)

    def _init_from(self, value, devices):
        """Initialize with `value` (a dense NDArray of this shape and dtype that nobody else
        holds: one just initialised, or one load_parameters read) as the data on its own
        device, copies of it on the others."""
        with autograd.pause():
            self._data = _np_mode(OrderedDict(
                (dev, self._stored(value if dev == value.context else value.copyto(dev)))
                for dev in devices))
        self._deferred = None
        self._init_grad()

    def _stored(self, array):
        return array if self._stype == 'default' else array.tostype(self._stype)

    def _finish_deferred_init(self):
        if self._deferred is None:
            return
        if not self._shape_known():
            raise DeferredInitializationError(
                f'{self.name}: shape {self.shape} is still unknown; run a forward pass first')
        self._init_now(*self._deferred)

    def _init_grad(self):
        if self._grad_req == 'null':
            self._grad = None
            for data in self._data.values():
                autograd.mark_variables([data], [None], 'null')
            return
        self._grad = _np_mode(OrderedDict(
            (dev, nd.sparse.zeros(self._grad_stype, data.shape, ctx=dev, dtype=data.dtype))
            for dev, data in self._data.items()))
        for dev, data in self._data.items():
            autograd.mark_variables([data], [self._grad[dev]], self._grad_req)

    # -- access ----------------------------------------------------------------------------------
    def _check(self, table, ctx, what):
        if table is None:
            if self._deferred is not None:
                raise DeferredInitializationError(
                    f'{self.name} has not been initialized yet: its shape is inferred at the '
                    f'first forward pass')
            if what == 'grad' and self._data is not None:
                raise EmberError(f'{self.name} has no gradient because grad_req is null')
            raise EmberError(f'{self.name} has not been initialized; call initialize() first')
        if ctx is None:
            if len(table) == 1:
                return next(iter(table.values()))
            ctx = current_device()
        try:
            return table[ctx]
        except KeyError:
            raise EmberError(f'{self.name} was initialized on {list(table)}, not on {ctx}') \
                from None

    def data(self, ctx=None):
        if self._stype != 'default':
            raise EmberError(f"Cannot return a copy of Parameter '{self.name}' on ctx {ctx} via "
                             f"data() because its storage type is {self._stype}. Please use "
                             f"row_sparse_data() instead.")
        table = self._table
        if ctx is not None and table is not None:
            # a hybridized block reads every parameter this way on each call
            array = table.get(ctx)
            if array is not None:
                return array
        return self._check(table, ctx, 'data')

    def list_data(self):
        if self._stype != 'default':
            raise EmberError(f"Cannot return copies of Parameter '{self.name}' on all contexts "
                             f"via list_data() because its storage type is {self._stype}. "
                             f"Please use row_sparse_data() instead.")
        return self._list_arrays()

    def _list_arrays(self):
        """The arrays of every device, whatever the storage type."""
        self._check(self._data, None if self._data is None else next(iter(self._data)), 'data')
        return list(self._data.values())

    def row_sparse_data(self, row_id):
        """The rows `row_id` of a row_sparse parameter, pulled from its Trainer's store into
        its array on ``row_id``'s device (which it returns)."""
        if self._stype != 'row_sparse':
            raise EmberError(f"Cannot return a copy of Parameter '{self.name}' via "
                             f"row_sparse_data() because its storage type is {self._stype}. "
                             f"Please use data() instead.")
        array = self._check(self._data, row_id.context, 'data')
        self._pull_rows([array], row_id)
        return array

    def list_row_sparse_data(self, row_id):
        """The rows `row_id` of a row_sparse parameter, pulled into its array on every
        device (a list)."""
        if self._stype != 'row_sparse':
            raise EmberError(f"Cannot return copies of Parameter '{self.name}' on all contexts "
                             f"via list_row_sparse_data() because its storage type is "
                             f"{self._stype}. Please use data() instead.")
        arrays = self._list_arrays()
        self._pull_rows(arrays, row_id)
        return arrays

    def _pull_rows(self, arrays, row_id, full=False):
        if self._trainer is None:
            raise EmberError(f"Cannot get row_sparse data for Parameter '{self.name}' when no "
                             f"Trainer is created with it.")
        self._trainer._row_sparse_pull(self, arrays, row_id, full)

    def _set_trainer(self, trainer):
        if self._stype != 'default' and self._trainer is not None and \
                self._trainer is not trainer:
            raise EmberError(f"Failed to set the trainer for Parameter '{self.name}' because it "
                             f"was already set. More than one trainers for a "
                             f"{self._stype} Parameter is not supported.")
        self._trainer = trainer

    def _reduce(self):
        """The value on the CPU: the mean over the devices; a row_sparse parameter's every
        row, pulled from its Trainer's store."""
        if self._stype == 'default':
            arrays = self.list_data()
            with autograd.pause():
                total = arrays[0].copyto(Device('cpu', 0))
                for other in arrays[1:]:
                    total += other.copyto(Device('cpu', 0))
                return total / len(arrays) if len(arrays) > 1 else total
        if self._trainer is None:
            raise EmberError(f"Cannot reduce row_sparse data for Parameter '{self.name}' when "
                             f"no Trainer is created with it.")
        rows = nd.sparse.zeros('row_sparse', self.shape, dtype=self.dtype)
        self._pull_rows([rows], nd.arange(0, self.shape[0], dtype='int64'), full=True)
        return rows

    def grad(self, ctx=None):
        if self._data is not None and self._grad is None:
            return self._check(None, ctx, 'grad')
        return self._check(self._grad, ctx, 'grad')

    def list_grad(self):
        if self._grad is None:
            return self._check(None, None, 'grad')
        return list(self._grad.values())

    def list_ctx(self):
        if self._data is None:
            if self._deferred is not None:
                return list(self._deferred[1])
            raise EmberError(f'{self.name} has not been initialized')
        return list(self._data)

    def set_data(self, data):
        """Replace the value on every device (shape must match)."""
        self.shape = data.shape
        if self._data is None:
            if self._deferred is None:
                raise EmberError(f'{self.name} has not been initialized')
            self._finish_deferred_init()
        if self._stype != 'default':
            # sparse arrays are replaced, not written into; the store starts again from them
            with autograd.pause():
                self._data = OrderedDict((dev, self._stored(nd.array(data).copyto(dev)))
                                         for dev in self._data)
            self._init_grad()
            if self._trainer is not None:
                self._trainer._reset_kvstore()
            return
        for arr in self._data.values():
            arr[:] = data

    def zero_grad(self):
        if self._grad is None:
            return
        for g in self._grad.values():
            g[:] = 0

    def reset_ctx(self, ctx):
        devices = _devices(ctx)
        if self._data is not None:
            value = self._check(self._data, next(iter(self._data)), 'data')
            with autograd.pause():
                self._data = _np_mode(OrderedDict((dev, value.copyto(dev)) for dev in devices))
            self._init_grad()
        elif self._deferred is not None:
            init, _, default_init = self._deferred
            self._deferred = (init, devices, default_init)

    def cast(self, dtype):
        self.dtype = dtype_of(dtype)
        if self._data is None:
            return
        with autograd.pause():
            self._data = _np_mode(OrderedDict((d, a.astype(self.dtype))
                                              for d, a in self._data.items()))
        self._init_grad()

    def var(self):
        """The symbol of this parameter (for hybridized graphs)."""
        from ember import symbol
        return symbol.var(self.name, shape=self.shape, dtype=self.dtype,
                          lr_mult=self.lr_mult, wd_mult=self.wd_mult, init=self.init)


class Constant(Parameter):
    """A parameter that never changes and gets no gradient."""

    def __init__(self, name, value):
        value = value if isinstance(value, nd.NDArray) else nd.array(np.asarray(value))
        self.value = value
        super().__init__(name, grad_req='null', shape=value.shape, dtype=value.dtype,
                         init=_ConstantInit(value))


class _ConstantInit(initializer.Initializer):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def _init_weight(self, desc, arr):
        arr[:] = self.value

    __call__ = _init_weight


def _np_mode(table):
    """Under NumPy array semantics (``npx.set_np()``), the arrays of a new table become
    ``mx.np`` arrays, as MXNet's parameters do; the table owns them, so in place."""
    if is_np_array():
        for array in table.values():
            as_np_inplace(array)
    return table


def _as_initializer(init):
    return initializer.create(init) if isinstance(init, str) else init


def _as_shape(shape):
    if shape is None:
        return None
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(d) for d in shape)


def _devices(ctx):
    if ctx is None:
        return [current_device()]
    if isinstance(ctx, Device):
        return [ctx]
    devices = list(ctx)
    if not devices:
        raise ValueError('ctx: expected a device or a non-empty list of devices')
    return devices


class ParameterDict:
    """Parameters of a Block by full name, with a shared prefix."""

    def __init__(self, prefix='', shared=None):
        self._prefix = prefix
        self._params = OrderedDict()
        self._shared = shared

    def __repr__(self):
        body = '\n'.join(f'  {p}' for p in self._params.values())
        return f'{self._prefix} (\n{body}\n)'

    @property
    def prefix(self):
        return self._prefix

    def __getitem__(self, key):
        return self._params[key]

    def __iter__(self):
        return iter(self._params)

    def __len__(self):
        return len(self._params)

    def __contains__(self, key):
        return key in self._params

    def keys(self):
        return self._params.keys()

    def values(self):
        return self._params.values()

    def items(self):
        return self._params.items()

    def _lookup(self, name):
        if name in self._params:
            return self._params[name]
        if self._shared is not None and name in self._shared._params:
            self._params[name] = self._shared._params[name]
            return self._params[name]
        return None

    def get(self, name, **kwargs):
        """The parameter `prefix + name`, created with `kwargs` if it does not exist."""
        full = self._prefix + name
        param = self._lookup(full)
        if param is None:
            param = Parameter(full, **kwargs)
            self._params[full] = param
            return param
        for key, value in kwargs.items():
            _merge_setting(param, key, value)
        return param

    def get_constant(self, name, value=None):
        full = self._prefix + name
        param = self._lookup(full)
        if param is None:
            if value is None:
                raise KeyError(f'no constant {full!r} and no value to create it')
            param = Constant(full, value)
            self._params[full] = param
        return param

    def update(self, other):
        for name, param in other.items():
            existing = self._params.get(name)
            if existing is not None and existing is not param:
                raise EmberError(f'cannot update: two different parameters named {name!r}')
            self._params[name] = param

    def select(self, select=None):
        if select is None:
            return self
        pattern = re.compile(select)
        subset = ParameterDict(self._prefix)
        subset._params = OrderedDict((k, v) for k, v in self._params.items()
                                     if pattern.match(k))
        return subset

    def initialize(self, init=None, ctx=None, verbose=False, force_reinit=False):
        if init is None:
            init = initializer.Uniform()
        for param in self.values():
            param.initialize(None, ctx, init, force_reinit=force_reinit)

    def zero_grad(self):
        for param in self.values():
            param.zero_grad()

    def reset_ctx(self, ctx):
        for param in self.values():
            param.reset_ctx(ctx)

    def list_ctx(self):
        devices = []
        for param in self.values():
            devices.extend(d for d in param.list_ctx() if d not in devices)
        return devices

    def setattr(self, name, value):
        for param in self.values():
            setattr(param, name, value)

    def save(self, filename, strip_prefix=''):
        arrays = {}
        for param in self.values():
            name = param.name
            if strip_prefix and name.startswith(strip_prefix):
                name = name[len(strip_prefix):]
            arrays[name] = param._reduce()
        nd.save(filename, arrays)

    def load(self, filename, ctx=None, allow_missing=False, ignore_extra=False,
             restore_prefix=''):
        loaded = {restore_prefix + k.split(':', 1)[-1]: v for k, v in nd.load(filename).items()}
        _assign_loaded(self._params, loaded, filename, ctx, allow_missing, ignore_extra)


_STYPES = ('default', 'row_sparse', 'csr')


def _checked_stype(name, what, stype):
    if stype not in _STYPES:
        raise ValueError(f"{name}: {what}={stype!r}: expected 'default', 'row_sparse' or "
                         f"'csr'")
    return stype


def _merge_setting(param, key, value):
    if key == 'shape':
        if value is not None:
            param.shape = value
        return
    if key == 'init' and param.init is None:
        param.init = value
        return
    if key in ('dtype',):
        value = dtype_of(value)
    current = getattr(param, key, None)
    if value is not None and current is not None and current != value and key != 'init':
        raise EmberError(f'{param.name}: {key}={value!r} conflicts with {current!r}')


def _assign_loaded(params, loaded, filename, ctx, allow_missing, ignore_extra):
    if not allow_missing:
        missing = [name for name in params if name not in loaded]
        if missing:
            raise EmberError(f'{filename} has no value for {", ".join(missing)} '
                             f'(pass allow_missing=True to skip them)')
    if not ignore_extra:
        extra = [name for name in loaded if name not in params]
        if extra:
            raise EmberError(f'{filename} has values for unknown parameters '
                             f'{", ".join(extra)} (pass ignore_extra=True to skip them)')
    for name, param in params.items():
        if name not in loaded:
            continue
        value = loaded[name]
        if value.dtype != param.dtype:
            value = value.astype(param.dtype)
        if param._data is None:
            param.shape = value.shape
            devices = _devices(ctx) if ctx is not None else (
                param._deferred[1] if param._deferred else [current_device()])
            if value.stype == 'default':
                # the loaded array itself becomes the data: read once, not copied again
                param._init_from(value, devices)
                continue
            # values come from the file: any placeholder works, whatever the name
            param.initialize(init=initializer.Zero(), ctx=devices, force_reinit=True)
        param.set_data(value)
