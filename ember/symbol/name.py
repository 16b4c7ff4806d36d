"""Automatic names of symbols: ``NameManager`` counts per hint, ``Prefix`` prepends a prefix.

The current manager is per thread; ``with NameManager():`` or ``with Prefix('net_'):`` makes a
new one current inside the block.

>>> from ember.symbol.name import NameManager, Prefix
>>> with NameManager():
...     manager = NameManager.current
...     manager.get(None, 'fullyconnected'), manager.get(None, 'fullyconnected')
('fullyconnected0', 'fullyconnected1')
>>> with Prefix('net_'):
...     NameManager.current.get(None, 'conv'), NameManager.current.get('fc', 'fullyconnected')
('net_conv0', 'net_fc')
"""
from __future__ import annotations

import threading

__all__ = ['NameManager', 'Prefix']


class _Current(threading.local):
    def __init__(self):
        self.value = NameManager()


class _ManagerType(type):
    @property
    def current(cls) -> 'NameManager':
        """The name manager of this thread."""
        return NameManager._current.value

    @current.setter
    def current(cls, value):
        NameManager._current.value = value


class NameManager(metaclass=_ManagerType):
    """Gives each unnamed symbol ``<hint><count>`` (``fullyconnected0``, ``fullyconnected1``)."""

    _current: _Current

    def __init__(self):
        self._counter = {}
        self._old_manager = None

    def get(self, name, hint):
        """`name` when given, else the next automatic name for `hint`."""
        if name:
            return name
        count = self._counter.get(hint, 0)
        self._counter[hint] = count + 1
        return f'{hint}{count}'

    def __enter__(self):
        self._old_manager = NameManager._current.value
        NameManager._current.value = self
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        NameManager._current.value = self._old_manager
        self._old_manager = None


NameManager._current = _Current()


class Prefix(NameManager):
    """A name manager that puts `prefix` before every name, given or automatic."""

    def __init__(self, prefix):
        super().__init__()
        self._prefix = prefix

    def get(self, name, hint):
        return self._prefix + super().get(name, hint)
