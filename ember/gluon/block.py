"""Blocks: the building unit of Gluon networks, in MXNet 1.x's style.

>>> import ember as mx
>>> net = mx.gluon.nn.Dense(3, in_units=2, prefix='fc_')
>>> net.initialize(mx.init.One())
>>> net(mx.nd.ones((1, 2))).asnumpy().tolist()
[[2.0, 2.0, 2.0]]
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict

from ember import autograd, initializer
from ember import ndarray as nd
from ember.base import EmberError
from ember.gluon.parameter import DeferredInitializationError, Parameter, ParameterDict

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
        self._saved.append(getattr(_BlockScope._current, 'value', None))
        _BlockScope._current.value = self
        return self

    def __exit__(self, *exc):
        if self._block._empty_prefix:
            return False
        _BlockScope._current.value = self._saved.pop()
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
            arrays[key] = param.data(param.list_ctx()[0])
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

    ``F`` is ``mx.nd`` when called on arrays; hybridized graphs trace it with ``mx.sym``.
    """

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix, params)
        self._active = False
        self._flags = {}

    def hybridize(self, active=True, static_alloc=False, static_shape=False,
                  forward_bulk_size=None, backward_bulk_size=None, **kwargs):
        self._active = active
        self._flags = dict(static_alloc=static_alloc, static_shape=static_shape,
                           forward_bulk_size=forward_bulk_size,
                           backward_bulk_size=backward_bulk_size, **kwargs)
        super().hybridize(active, static_alloc=static_alloc, static_shape=static_shape,
                          forward_bulk_size=forward_bulk_size,
                          backward_bulk_size=backward_bulk_size, **kwargs)

    def infer_shape(self, *args):
        """Fill in unknown parameter shapes from the inputs (layers override this)."""
        unknown = [p.name for p in self._reg_params.values() if not p._shape_known()]
        raise DeferredInitializationError(
            f'{type(self).__name__} cannot infer the shapes of {", ".join(unknown)} from its '
            f'inputs: give full shapes or define infer_shape()')

    def _param_values(self, device):
        return {key: p.data(device) for key, p in self._reg_params.items()}

    def forward(self, x, *args):
        device = x.context if isinstance(x, nd.NDArray) else None
        try:
            params = self._param_values(device)
        except DeferredInitializationError:
            with autograd.pause():
                self.infer_shape(x, *args)
            for param in self._reg_params.values():
                param._finish_deferred_init()
            params = self._param_values(device)
        return self.hybrid_forward(nd, x, *args, **params)

    def hybrid_forward(self, F, x, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} must define hybrid_forward()')
