"""``AttrScope``: attributes given to every symbol created inside a ``with`` block.

Scopes nest: an inner scope adds to (and overrides) the outer one's attributes.

>>> from ember.symbol.attribute import AttrScope
>>> with AttrScope(ctx_group='dev1'):
...     with AttrScope(group='4'):
...         sorted(AttrScope.current.get({'group': '5'}).items())
[('ctx_group', 'dev1'), ('group', '5')]
"""
from __future__ import annotations

import threading

__all__ = ['AttrScope']


class _Current(threading.local):
    def __init__(self):
        self.value = AttrScope()


class _ScopeType(type):
    @property
    def current(cls) -> 'AttrScope':
        """The attribute scope of this thread."""
        return AttrScope._current.value

    @current.setter
    def current(cls, value):
        AttrScope._current.value = value


class AttrScope(metaclass=_ScopeType):
    """Attribute manager for scoping: ``with AttrScope(ctx_group='dev1'): ...``.

    Values must be strings, as in MXNet.
    """

    _current: _Current

    def __init__(self, **kwargs):
        for key, value in kwargs.items():
            if not isinstance(value, str):
                raise ValueError(f'AttrScope: attribute {key}={value!r} must be a string')
        self._attr = kwargs
        self._old_scope = None

    def get(self, attr):
        """The scope's attributes updated with `attr` (a dict or None), as a new dict."""
        merged = dict(self._attr)
        if attr:
            merged.update(attr)
        return merged

    def __enter__(self):
        self._old_scope = AttrScope._current.value
        self._attr = {**self._old_scope._attr, **self._attr}
        AttrScope._current.value = self
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        AttrScope._current.value = self._old_scope
        self._old_scope = None


AttrScope._current = _Current()
