"""What `mx.nd` and `mx.sym` share when they generate one function per registered operator."""
from __future__ import annotations

import inspect

from ember.op import registry

__all__ = ['signature_of', 'name_function', 'Generator']

_P = inspect.Parameter


def signature_of(op, keywords) -> inspect.Signature:
    """The signature of `op`'s generated function: its inputs, its parameters, then `keywords`
    (keyword-only, default None) and ``**kwargs``."""
    fixed = not callable(op.inputs)
    if fixed:
        params = [_param(name, _P.POSITIONAL_OR_KEYWORD) for name in op.inputs]
    else:
        params = [_param('data', _P.VAR_POSITIONAL)]
    kind = _P.POSITIONAL_OR_KEYWORD if fixed else _P.KEYWORD_ONLY
    params += [_param(p.name, kind) for p in op.params if p.name != op.variadic]
    params += [_param(name, _P.KEYWORD_ONLY) for name in keywords]
    params = tuple(params) + (_param('kwargs', _P.VAR_KEYWORD),)
    found = _signatures.get(params)
    if found is None:
        found = _signatures[params] = inspect.Signature(params)
    return found


# (name, kind) -> its Parameter (default None where it may have one), and the parameters ->
# their Signature: about 2000 generated functions share a few hundred distinct parameters and
# fewer distinct signatures, and each object is one more for every full garbage collection to
# scan (20 000 of them, about 4 ms a collection, when each function had its own)
_params: dict = {}
_signatures: dict = {}


def _param(name, kind):
    found = _params.get((name, kind))
    if found is None:
        default = _P.empty if kind in (_P.VAR_POSITIONAL, _P.VAR_KEYWORD) else None
        found = _params[(name, kind)] = _P(name, kind, default=default)
    return found


def name_function(fn, op, public_name, module, keywords):
    """Give a generated function its name, docstring, signature and module."""
    fn.__name__ = fn.__qualname__ = public_name
    fn.__doc__ = _doc(op, public_name)
    fn.__signature__ = signature_of(op, keywords)
    fn.__module__ = module
    return fn


def _doc(op, public_name) -> str:
    lines = [op.doc or f'The {op.name} operator.', '']
    if public_name != op.name:
        lines.append(f'Registered as ``{op.name}``.')
    if op.params:
        lines.append('Parameters: ' + ', '.join(
            p.name + ('' if p.default is registry.REQUIRED else f'={p.default!r}')
            for p in op.params))
    return '\n'.join(lines)


class Generator:
    """Fills a module's namespace with a function per operator (underscore names also go to its
    ``_internal`` module, the others to its ``op`` module, as MXNet sorts them); operators
    registered later are generated on first access."""

    def __init__(self, namespace, internal, make_function, module_name, public=None):
        self._namespace, self._internal, self._public = namespace, internal, public
        self._make, self._module_name = make_function, module_name
        self.hand_written = frozenset(namespace)   # names the module defines itself

    def generate(self, name):
        fn = self._make(registry.get(name), name)
        self._namespace[name] = fn
        if name.startswith('_'):
            setattr(self._internal, name, fn)
        elif self._public is not None:
            setattr(self._public, name, fn)
        return fn

    def public_getattr(self, name):
        """For the ``op`` module's ``__getattr__``."""
        if name.startswith('_'):
            raise AttributeError(f'module {self._public.__name__} has no attribute {name!r}')
        found = self._namespace.get(name)
        return found if found is not None else self.getattr(name)

    def populate(self):
        for name in registry.all_ops():
            if name not in self.hand_written:
                self.generate(name)

    def getattr(self, name):
        """For the module's ``__getattr__``."""
        if name.startswith('__') or name not in registry.all_ops():
            raise AttributeError(f'module {self._module_name} has no attribute {name!r}')
        return self.generate(name)


class Submodule:
    """Fills a submodule (``mx.nd.linalg``) with the operators whose registered names start with
    one of `prefixes`, under the name that follows the prefix (``_linalg_gemm`` is
    ``linalg.gemm``), as MXNet sorts its operators. `select` (a predicate on the registered
    name) narrows the set: ``mx.nd.random`` takes only the ``_random_*_like`` operators.
    Names the module defines itself are left alone."""

    def __init__(self, namespace, prefixes, make_function, module_name, select=None):
        self._namespace, self._prefixes = namespace, tuple(prefixes)
        self._make, self._module_name = make_function, module_name
        self._select = select or (lambda name: True)
        self.hand_written = frozenset(namespace)

    def _registered(self, short):
        for prefix in self._prefixes:
            name = prefix + short
            if name in registry.all_ops() and self._select(name):
                return name
        return None

    def generate(self, short, name):
        fn = self._make(registry.get(name), short)
        fn.__module__ = self._module_name
        self._namespace[short] = fn
        return fn

    def names(self) -> list:
        """The short names of the operators this submodule exposes (registered so far)."""
        found = []
        for name in registry.all_ops():
            for prefix in self._prefixes:
                if name.startswith(prefix) and self._select(name):
                    found.append(name[len(prefix):])
        return sorted(set(found) - self.hand_written)

    def populate(self):
        for short in self.names():
            self.generate(short, self._registered(short))

    def getattr(self, short):
        """For the module's ``__getattr__``."""
        name = None if short.startswith('__') else self._registered(short)
        if name is None:
            raise AttributeError(f'module {self._module_name} has no attribute {short!r}')
        return self.generate(short, name)
