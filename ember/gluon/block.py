"""Blocks: the building unit of Gluon networks, in MXNet 1.x's style.

>>> import ember as mx
>>> net = mx.gluon.nn.Dense(3, in_units=2, prefix='fc_')
>>> net.initialize(mx.init.One())
>>> net(mx.nd.ones((1, 2))).asnumpy().tolist()
[[2.0, 2.0, 2.0]]
"""
from __future__ import annotations

import contextlib
import re
import threading
import warnings
import weakref
from collections import OrderedDict

from ember import autograd, initializer
from ember import ndarray as nd
from ember import symbol
from ember.base import EmberError
from ember.gluon.parameter import DeferredInitializationError, Parameter, ParameterDict
from ember.numpy.multiarray import wrap as as_np_inplace
from ember.numpy.symbol import as_np_symbol
from ember.util import is_np_array
from ember.op.registry import ShapeError
from ember.symbol.name import Prefix

__all__ = ['Block', 'HybridBlock', 'HookHandle']


class _NameCounter(threading.local):
    def __init__(self):
        self.counts = {}


_top_names = _NameCounter()


class _BlockScope:
    """The naming scope of a Block: children created inside it get prefixes under the parent's."""
    _current = threading.local()

    def __init__(self, block):
        self._block = block
        self._counter = {}
        self._saved = []

    @staticmethod
    def create(prefix, params, hint):
        current = getattr(_BlockScope._current, 'value', None)
        if current is None:
            if prefix is None:
                count = _top_names.counts.get(hint, 0)
                _top_names.counts[hint] = count + 1
                prefix = f'{hint}{count}_'
            params = ParameterDict(prefix) if params is None else ParameterDict(params.prefix,
                                                                                params)
            return prefix, params
        if prefix is None:
            count = current._counter.get(hint, 0)
            current._counter[hint] = count + 1
            prefix = f'{hint}{count}_'
        if params is None:
            parent = current._block.params
            params = ParameterDict(parent.prefix + prefix, parent._shared)
        else:
            params = ParameterDict(params.prefix, params)
        return current._block.prefix + prefix, params

    def __enter__(self):
        if self._block._empty_prefix:
            return self
        # Symbols made inside (hybrid_forward traced with mx.sym) are named under the prefix.
        names = Prefix(self._block.prefix)
        names.__enter__()
        self._saved.append((getattr(_BlockScope._current, 'value', None), names))
        _BlockScope._current.value = self
        return self

    def __exit__(self, *exc):
        if self._block._empty_prefix:
            return False
        _BlockScope._current.value, names = self._saved.pop()
        names.__exit__(*exc)
        return False


class HookHandle:
    """Returned by register_forward_hook; `detach()` removes the hook."""

    def __init__(self, hooks, key):
        self._hooks, self._key = hooks, key

    def detach(self):
        self._hooks.pop(self._key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()
        return False


class Block:
    """Base class of all layers and models; subclasses define ``forward``."""

    def __init__(self, prefix=None, params=None):
        self._empty_prefix = prefix == ''
        self._prefix, self._params = _BlockScope.create(prefix, params, self._alias())
        self._name = self._prefix[:-1] if self._prefix.endswith('_') else self._prefix
        self._scope = _BlockScope(self)
        self._children = OrderedDict()
        self._reg_params = OrderedDict()
        self._forward_hooks = OrderedDict()
        self._forward_pre_hooks = OrderedDict()
        self._hook_count = 0

    def _alias(self):
        return type(self).__name__.lower()

    def __repr__(self):
        lines = [f'  ({key}): ' + _indent(repr(child)) for key, child in self._children.items()]
        if not lines:
            return f'{type(self).__name__}()'
        return type(self).__name__ + '(\n' + '\n'.join(lines) + '\n)'

    def __setattr__(self, name, value):
        if isinstance(value, Block):
            self.register_child(value, name)
        elif isinstance(value, Parameter):
            existing = self.__dict__.get('_reg_params')
            if existing is not None:
                existing[name] = value
        super().__setattr__(name, value)

    # -- naming ----------------------------------------------------------------------------------
    @property
    def prefix(self):
        return self._prefix

    @property
    def name(self):
        return self._name

    @property
    def params(self):
        """This block's own parameters (children's are in collect_params())."""
        return self._params

    def name_scope(self):
        """Create children inside this block's naming scope: ``with self.name_scope(): ...``."""
        return self._scope

    # -- structure -------------------------------------------------------------------------------
    def register_child(self, block, name=None):
        if name is None:
            name = str(len(self._children))
        self._children[name] = block

    def collect_params(self, select=None):
        """Every parameter of this block and its children; `select` is a regular expression."""
        result = ParameterDict(self._params.prefix)
        pattern = re.compile(select) if select else None
        for key, param in list(self._params.items()) + [
                (p.name, p) for p in self._reg_params.values()]:
            if pattern is None or pattern.match(key):
                result._params.setdefault(key, param)
        for child in self._children.values():
            result.update(child.collect_params(select))
        return result

    def _collect_params_with_prefix(self, prefix=''):
        if prefix:
            prefix += '.'
        found = OrderedDict((prefix + key, p) for key, p in self._reg_params.items())
        for name, child in self._children.items():
            found.update(child._collect_params_with_prefix(prefix + name))
        return found

    def initialize(self, init=None, ctx=None, verbose=False, force_reinit=False):
        """Initialize every parameter (default initializer: Uniform)."""
        self.collect_params().initialize(init or initializer.Uniform(), ctx, verbose,
                                         force_reinit)

    def apply(self, fn):
        for child in self._children.values():
            child.apply(fn)
        fn(self)
        return self

    def cast(self, dtype):
        for child in self._children.values():
            child.cast(dtype)
        for param in self.params.values():
            param.cast(dtype)
        for param in self._reg_params.values():
            param.cast(dtype)

    def hybridize(self, active=True, **kwargs):
        for child in self._children.values():
            child.hybridize(active, **kwargs)

    def zero_grad(self):
        self.collect_params().zero_grad()

    def reset_ctx(self, ctx):
        self.collect_params().reset_ctx(ctx)

    # -- files -----------------------------------------------------------------------------------
    def save_parameters(self, filename, deduplicate=False):
        """Save parameters under structural names ('0.weight'), as MXNet 1.x does."""
        params = self._collect_params_with_prefix()
        seen = {}
        arrays = OrderedDict()
        for key, param in params.items():
            if deduplicate and id(param) in seen:
                continue
            seen[id(param)] = key
            arrays[key] = param._reduce()
        nd.save(filename, arrays)

    def load_parameters(self, filename, ctx=None, allow_missing=False, ignore_extra=False,
                        cast_dtype=False, dtype_source='current'):
        loaded = nd.load(filename)
        params = self._collect_params_with_prefix()
        if not loaded and not params:
            return
        if isinstance(loaded, list):
            raise EmberError(f'{filename} holds an unnamed list of arrays, not parameters')
        if not any('.' in key for key in loaded):
            # Files from ParameterDict.save / old MXNet use full parameter names.
            self.collect_params().load(filename, ctx, allow_missing, ignore_extra,
                                       restore_prefix=self.prefix)
            return
        from ember.gluon.parameter import _assign_loaded
        if cast_dtype and dtype_source == 'saved':
            for key, value in loaded.items():
                if key in params:
                    params[key].cast(value.dtype)
        _assign_loaded(params, loaded, filename, ctx, allow_missing, ignore_extra)

    def save_params(self, filename):
        self.save_parameters(filename)

    def load_params(self, filename, ctx=None, allow_missing=False, ignore_extra=False):
        self.load_parameters(filename, ctx, allow_missing, ignore_extra)

    # -- calling ---------------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook):
        """hook(block, inputs) runs before forward."""
        return self._add_hook(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook):
        """hook(block, inputs, outputs) runs after forward."""
        return self._add_hook(self._forward_hooks, hook)

    def _add_hook(self, table, hook):
        self._hook_count += 1
        table[self._hook_count] = hook
        return HookHandle(table, self._hook_count)

    def __call__(self, *args):
        for hook in list(self._forward_pre_hooks.values()):
            hook(self, args)
        out = self.forward(*args)
        for hook in list(self._forward_hooks.values()):
            hook(self, args, out)
        return out

    def forward(self, *args):
        raise NotImplementedError(f'{type(self).__name__} must define forward()')

    def summary(self, *inputs):
        """Print each block's output shape and parameter count for the given inputs."""
        rows, handles = [], []

        def record(block, _, out):
            shapes = [o.shape for o in out] if isinstance(out, (list, tuple)) else out.shape
            count = sum(p.data().size for p in block._reg_params.values()
                        if p._data is not None)
            rows.append((f'{type(block).__name__}-{len(rows) + 1}', shapes, count))
        self.apply(lambda b: handles.append(b.register_forward_hook(record)))
        try:
            self(*inputs)
        finally:
            for handle in handles:
                handle.detach()
        total = sum(p.data().size for p in self.collect_params().values() if p._data is not None)
        print(f'{"Layer (type)":>30} {"Output Shape":>25} {"Param #":>12}')
        for name, shape, count in rows:
            print(f'{name:>30} {str(shape):>25} {count:>12}')
        print(f'Parameters in forward computation graph: {total}')


def _indent(text):
    return text.replace('\n', '\n  ')


class HybridBlock(Block):
    """A Block whose computation is written as ``hybrid_forward(F, x, ...)``.

    ``F`` is ``mx.nd`` when called on arrays. After ``hybridize()`` the first call traces
    ``hybrid_forward`` with ``F = mx.sym`` into one graph (inputs are the variables ``data``, or
    ``data0``, ``data1``, ... for several); later calls run that graph through a CachedOp
    bound once per input signature (shapes, dtypes, device).

    >>> import ember as mx
    >>> net = mx.gluon.nn.Dense(2, in_units=3, prefix='fc_')
    >>> net.initialize(mx.init.One())
    >>> net.hybridize()
    >>> net(mx.nd.ones((1, 3))).asnumpy().tolist()
    [[3.0, 3.0]]
    >>> inputs, graph = net._cached_graph
    >>> [s.name for s in inputs], graph.list_inputs()
    (['data'], ['data', 'fc_weight', 'fc_bias'])
    """

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix, params)
        self._active = False
        self._flags = {}
        self._cached_graph = ()          # (input variables, output symbol) of the last trace
        self._cached_op = None
        self._cached_op_args = ()        # per graph input: (True, data position) or (False, param)
        self._cached_op_data_positions = ()   # (graph input, data position) of the data inputs
        self._cached_op_params = None    # (Parameter.tables_changed, device, arrays) last read
        self._in_format = None
        self._out_format = None

    def hybridize(self, active=True, static_alloc=False, static_shape=False,
                  forward_bulk_size=None, backward_bulk_size=None, **kwargs):
        """Run this block (and its children) as a traced graph from the next call on, or
        imperatively again with ``active=False``.

        `static_alloc` keeps the executor and its memory of every input signature across
        calls (without it only the signature in use keeps its executor); `static_shape` is
        accepted for MXNet's sake (executors are bound per input shape anyway); the bulk sizes
        set the most operators per engine push in forward and backward for this graph.
        """
        accepted = _cached_op_class().FLAGS[:-2]
        unknown = sorted(set(kwargs) - set(accepted))
        if unknown:
            raise TypeError(f'hybridize: unknown flags {unknown}; accepted: active, '
                            f'{", ".join(accepted)}')
        self._active = active
        self._flags = dict(static_alloc=static_alloc, static_shape=static_shape,
                           forward_bulk_size=forward_bulk_size,
                           backward_bulk_size=backward_bulk_size, **kwargs)
        self._clear_cached_op()
        if active and (self._forward_hooks or self._forward_pre_hooks):
            warnings.warn(f'"{self.name}" is being hybridized while still having forward '
                          f'hook/pre-hook. If "{self.name}" is a child of HybridBlock, the '
                          f'hooks will not take effect.', stacklevel=2)
        super().hybridize(active, static_alloc=static_alloc, static_shape=static_shape,
                          forward_bulk_size=forward_bulk_size,
                          backward_bulk_size=backward_bulk_size, **kwargs)

    def _clear_cached_op(self):
        self._cached_graph = ()
        self._cached_op = None

    def cast(self, dtype):
        self._clear_cached_op()
        super().cast(dtype)

    # -- calling ---------------------------------------------------------------------------------
    def forward(self, x, *args):
        """Symbols in: a symbol out (traced with ``F = mx.sym``); arrays in: arrays out, through
        the cached graph when hybridized, else ``hybrid_forward(mx.nd, ...)``."""
        if _has_symbol(x, args):
            return self._symbolic_forward(x, *args)
        if self._active and not _imperative_only.active:
            return self._call_cached_op(x, *args)
        return self._imperative_forward(x, *args)

    def _symbolic_forward(self, x, *args):
        params = {key: _param_var(p) for key, p in self._reg_params.items()}
        if is_np_array() or _any_np(x, args):
            params = {key: as_np_symbol(v) for key, v in params.items()}
        with self.name_scope():
            return self.hybrid_forward(symbol, x, *args, **params)

    def _imperative_forward(self, x, *args):
        device = x.context if isinstance(x, nd.NDArray) else _first_device(args)
        try:
            params = self._param_values(device)
        except DeferredInitializationError:
            with autograd.pause():
                self.infer_shape(x, *args)
            for param in self._reg_params.values():
                param._finish_deferred_init()
            params = self._param_values(device)
        return self.hybrid_forward(nd, x, *args, **params)

    def _param_values(self, device):
        return {key: p.data(device) for key, p in self._reg_params.items()}

    def hybrid_forward(self, F, x, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} must define hybrid_forward()')

    # -- the traced graph ------------------------------------------------------------------------
    def _get_graph(self, *args):
        """(input variables, output symbol): traced once per input structure."""
        flat, in_format = _flatten(args, 'input')
        if self._cached_graph and in_format == self._in_format:
            return self._cached_graph
        variables = _input_variables(flat)
        if is_np_array() or _any_np(flat):
            variables = [None if v is None else as_np_symbol(v) for v in variables]
        grouped, _ = _regroup(variables, in_format)
        out = self._symbolic_forward(*grouped)
        outputs, self._out_format = _flatten(out, 'output')
        if any(not isinstance(o, symbol.Symbol) for o in outputs):
            raise ValueError(f'{self.name}: hybrid_forward must return (nested lists of) '
                             f'Symbols when traced, got {out!r}')
        self._in_format = in_format
        self._cached_graph = ([v for v in variables if v is not None], symbol.Group(outputs))
        self._cached_op = None
        return self._cached_graph

    def _build_cache(self, *args):
        inputs, out = self._get_graph(*args)
        data_names = {var.name: i for i, var in enumerate(inputs)}
        params = self.collect_params()
        input_names = out.list_inputs()
        unknown = [n for n in input_names if n not in params and n not in data_names]
        if unknown:
            raise EmberError(f'{self.name}: the traced graph reads {unknown}, which are neither '
                             f'inputs {list(data_names)} nor parameters of this block')
        _warn_unused(data_names, params, set(input_names))
        self._cached_op_params = None
        self._cached_op_args = tuple((True, data_names[n]) if n in data_names
                                     else (False, params[n]) for n in input_names)
        self._cached_op_data_positions = tuple(
            (position, index) for position, (is_arg, index) in enumerate(self._cached_op_args)
            if is_arg)
        flags = dict(self._flags)
        flags['data_indices'] = [i for i, (is_arg, _) in enumerate(self._cached_op_args)
                                 if is_arg]
        flags['param_indices'] = [i for i, (is_arg, _) in enumerate(self._cached_op_args)
                                  if not is_arg]
        self._cached_op = _cached_op_class()(out, flags)

    def _call_cached_op(self, *args):
        flat, in_format = _flatten(args, 'input')
        if self._cached_op is None or in_format != self._in_format:
            self._build_cache(*args)
        data = [a for a in flat if a is not None]
        device = data[0].context
        try:
            cargs = self._cached_op_inputs(data, device)
        except DeferredInitializationError:
            self._deferred_infer_shape(*args)
            for is_arg, param in self._cached_op_args:
                if not is_arg:
                    param._finish_deferred_init()
            cargs = self._cached_op_inputs(data, device)
        out = self._cached_op(*cargs)
        if isinstance(out, nd.NDArray):
            out = [out]
        if is_np_array() or _any_np(data):
            out = [as_np_inplace(o) for o in out]
        return _regroup(list(out), self._out_format)[0]

    def _cached_op_inputs(self, data, device):
        # the parameters' arrays as the last call read them, while no parameter's table of
        # arrays has been replaced since (a resnet50_v1 call reads about 300)
        changed = Parameter.tables_changed
        kept = self._cached_op_params
        if kept is None or kept[0] != changed or kept[1] != device:
            kept = self._cached_op_params = (changed, device, [
                None if is_arg else param.data(device) for is_arg, param in self._cached_op_args])
        inputs = list(kept[2])
        for position, index in self._cached_op_data_positions:
            inputs[position] = data[index]
        return inputs

    def _deferred_infer_shape(self, *args):
        with autograd.pause():
            try:
                self.infer_shape(*args)
            except (DeferredInitializationError, ShapeError):
                pass        # the imperative pass below finds the shapes or names the error
            if any(not p._shape_known() for is_arg, p in self._cached_op_args if not is_arg):
                # Shapes the graph cannot reach (through reshape and concat, as in fused RNN
                # layers) come from the layers' own infer_shape, run by one imperative pass.
                with _imperative_only():
                    self._imperative_forward(*args)

    # -- shapes and types from the graph ---------------------------------------------------------
    def infer_shape(self, *args):
        """Fill in unknown parameter shapes from the inputs' shapes, through the traced graph
        (layers may override this with a direct rule)."""
        self._infer_attrs('shape', *args)
        unknown = [p.name for p in self._reg_params.values() if not p._shape_known()]
        if unknown:
            shapes = [a.shape for a in _flatten(args, 'input')[0] if a is not None]
            raise DeferredInitializationError(
                f'{type(self).__name__} cannot infer the shapes of {", ".join(unknown)} from '
                f'inputs of shapes {shapes}: give full shapes or define infer_shape()')

    def infer_type(self, *args):
        """Set the parameters' dtypes from the inputs' dtypes, through the traced graph."""
        self._infer_attrs('dtype', *args)

    def _infer_attrs(self, attr, *args):
        inputs, out = self._get_graph(*args)
        arrays = [a for a in _flatten(args, 'input')[0] if a is not None]
        known = {var.name: getattr(a, attr) for var, a in zip(inputs, arrays)}
        infer = out.infer_shape_partial if attr == 'shape' else out.infer_type_partial
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            arg_attrs, _, aux_attrs = infer(**known)
        found = dict(zip(out.list_arguments(), arg_attrs))
        found.update(zip(out.list_auxiliary_states(), aux_attrs))
        for param in self.collect_params().values():
            value = found.get(param.name)
            if value is None:
                continue
            if attr == 'shape':
                param.shape = value
            elif param.dtype != value:
                param.cast(value)

    # -- files -----------------------------------------------------------------------------------
    def export(self, path, epoch=0, remove_amp_cast=True):
        """Write the traced graph to ``path-symbol.json`` and the parameters to
        ``path-%04d.params`` (keys ``arg:<name>``, ``aux:<name>``), as MXNet 1.x does; returns
        the two file names. Call after a forward pass of the hybridized block.

        >>> import os, tempfile
        >>> import ember as mx
        >>> net = mx.gluon.nn.Dense(2, in_units=3, prefix='fc_')
        >>> net.initialize()
        >>> net.hybridize()
        >>> _ = net(mx.nd.ones((1, 3)))
        >>> files = net.export(os.path.join(tempfile.mkdtemp(), 'fc'), epoch=1)
        >>> [os.path.basename(f) for f in files]
        ['fc-symbol.json', 'fc-0001.params']
        >>> sorted(mx.nd.load(files[1]))
        ['arg:fc_bias', 'arg:fc_weight']
        """
        if not self._cached_graph:
            raise RuntimeError('Please first call block.hybridize() and then run forward with '
                               'this block at least once before calling export.')
        graph = self._cached_graph[1]
        symbol_file = f'{path}-symbol.json'
        graph.save(symbol_file, remove_amp_cast=remove_amp_cast)
        arg_names = set(graph.list_arguments())
        aux_names = set(graph.list_auxiliary_states())
        arrays = OrderedDict()
        for name, param in self.collect_params().items():
            if name in arg_names:
                arrays[f'arg:{name}'] = param._reduce()
            elif name in aux_names:
                arrays[f'aux:{name}'] = param._reduce()
        params_file = f'{path}-{epoch:04d}.params'
        nd.save(params_file, arrays)
        return symbol_file, params_file


# ----------------------------------------------------------------------------------------------
# Inputs and outputs of traced graphs: nested lists flattened and regrouped as MXNet does.

def _flatten(args, what):
    """(flat list, format): format 0 for one array or symbol, n for a symbol of n outputs,
    -1 for None, a list of formats for a list or tuple."""
    if isinstance(args, nd.NDArray):
        return [args], 0
    if isinstance(args, symbol.Symbol):
        count = len(args.list_outputs())
        return [args], count if count > 1 else 0
    if args is None:
        return [None], -1
    if not isinstance(args, (list, tuple)):
        raise ValueError(f'HybridBlock {what} must be (nested) list of Symbol or NDArray, but '
                         f'got {args!r} of type {type(args).__name__}')
    flat, formats = [], []
    for item in args:
        items, fmt = _flatten(item, what)
        flat.extend(items)
        formats.append(fmt)
    return flat, formats


def _regroup(items, fmt):
    """Undo ``_flatten``: (nested value, the items left over)."""
    if isinstance(fmt, int):
        if fmt == 0:
            return items[0], items[1:]
        if fmt == -1:
            if items[0] is not None:
                raise ValueError(f'a hybridized block traced with None in this position was '
                                 f'called with {items[0]!r}; call it with None there')
            return None, items[1:]
        return list(items[:fmt]), items[fmt:]
    grouped = []
    for item_fmt in fmt:
        value, items = _regroup(items, item_fmt)
        grouped.append(value)
    return grouped, items


def _has_symbol(x, args):
    if isinstance(x, nd.NDArray) and all(isinstance(a, nd.NDArray) or a is None for a in args):
        return False
    return any(isinstance(a, symbol.Symbol) for a in _flatten((x,) + args, 'input')[0])


def _any_np(*groups):
    """Whether any array among (nested lists of) `groups` is an ``mx.np`` array."""
    for group in groups:
        items = group if isinstance(group, (list, tuple)) else [group]
        for item in items:
            if isinstance(item, (list, tuple)):
                if _any_np(item):
                    return True
            elif isinstance(item, (nd.NDArray, symbol.Symbol)) and type(item) not in (
                    nd.NDArray, symbol.Symbol):
                return True
    return False


def _first_device(args):
    for item in _flatten(args, 'input')[0]:
        if isinstance(item, nd.NDArray):
            return item.context
    return None


def _input_variables(flat):
    """MXNet's names: ``data`` for one input, ``data0``, ``data1``, ... for several."""
    count = sum(item is not None for item in flat)
    if count == 0:
        raise ValueError('a hybridized block needs at least one input that is not None')
    names = iter(['data'] if count == 1 else [f'data{i}' for i in range(count)])
    return [None if item is None else symbol.var(next(names)) for item in flat]


# One variable per parameter, so a parameter used twice in a graph is one input of it.
_VARIABLES = weakref.WeakKeyDictionary()


def _param_var(param):
    key = (param.shape, param.dtype)
    cached = _VARIABLES.get(param)
    if cached is None or cached[0] != key:
        cached = _VARIABLES[param] = (key, param.var())
    return cached[1]


def _warn_unused(data_names, params, used):
    unused_inputs = [f'{i}-th' for name, i in data_names.items() if name not in used]
    if unused_inputs:
        warnings.warn(f'The {", ".join(unused_inputs)} input to HybridBlock is not used by any '
                      f'computation. Is this intended?', stacklevel=5)
    unused_params = [name for name in params.keys() if name not in used]
    if unused_params:
        warnings.warn(f'Parameter {", ".join(unused_params)} is not used by any computation. '
                      f'Is this intended?', stacklevel=5)


def _cached_op_class():
    # Imported on first use: the executor and its passes are not needed for imperative Gluon.
    from ember.executor.cached_op import CachedOp
    return CachedOp


class _ImperativeOnly(threading.local):
    """Inside ``with _imperative_only():`` hybridized blocks run hybrid_forward(mx.nd, ...)."""
    active = False

    @contextlib.contextmanager
    def __call__(self):
        previous, self.active = self.active, True
        try:
            yield
        finally:
            self.active = previous


_imperative_only = _ImperativeOnly()
