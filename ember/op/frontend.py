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
        params = [_P(name, _P.POSITIONAL_OR_KEYWORD, default=None) for name in op.inputs]
    else:
        params = [_P('data', _P.VAR_POSITIONAL)]
    kind = _P.POSITIONAL_OR_KEYWORD if fixed else _P.KEYWORD_ONLY
    params += [_P(p.name, kind, default=None) for p in op.params if p.name != op.variadic]
    params += [_P(name, _P.KEYWORD_ONLY, default=None) for name in keywords]
    return inspect.Signature(params + [_P('kwargs', _P.VAR_KEYWORD)])


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
    ``_internal`` module); operators registered later are generated on first access."""

    def __init__(self, namespace, internal, make_function, module_name):
        self._namespace, self._internal = namespace, internal
        self._make, self._module_name = make_function, module_name
        self.hand_written = frozenset(namespace)   # names the module defines itself

    def generate(self, name):
        fn = self._make(registry.get(name), name)
        self._namespace[name] = fn
        if name.startswith('_'):
            setattr(self._internal, name, fn)
        return fn

    def populate(self):
        for name in registry.all_ops():
            if name not in self.hand_written:
                self.generate(name)

    def getattr(self, name):
        """For the module's ``__getattr__``."""
        if name.startswith('__') or name not in registry.all_ops():
            raise AttributeError(f'module {self._module_name} has no attribute {name!r}')
        return self.generate(name)
