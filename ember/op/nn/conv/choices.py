"""The algorithm measured fastest per convolution problem: a process-wide cache of names.

A key is whatever identifies a measurement (the problem, the tuning mode, the limits it was
measured under and whether oneDNN was on; :func:`ember.op.nn.conv.algorithms.choose` makes
them), a value the name of an algorithm in the problem's table. The cache is all a later run
needs to skip measuring, so it is kept apart from everything else the subsystem remembers.

>>> choices = Choices()
>>> choices.remember(('a problem', 'mode'), 'gemm')
>>> choices.get(('a problem', 'mode')), len(choices)
('gemm', 1)
>>> saved = choices.export()
>>> before = choices.generation
>>> choices.clear()
>>> choices.get(('a problem', 'mode')) is None, choices.generation != before
(True, True)
>>> choices.load(saved)
>>> choices.get(('a problem', 'mode'))
'gemm'

:meth:`export` writes keys as plain data (a dataclass or an enum in a key becomes its class's
name and its fields), so that another process rebuilds equal keys with its own hashes: the
compile cache stores a graph's choices this way, and a warm start measures nothing again.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import threading

__all__ = ['Choices']


class Choices:
    """Key -> algorithm name, thread-safe. :attr:`generation` changes whenever the choices
    are forgotten (:meth:`clear`): a caller that remembers a choice remembers it too."""

    def __init__(self):
        self._names: dict = {}
        self._lock = threading.Lock()
        self.generation = 0
        self._recorders: list = []
        # the per-call lookup is the dict's own: the dict is never replaced, only cleared
        self.get = self._names.get

    @contextlib.contextmanager
    def recording(self):
        """A block whose lookups (:meth:`get`, from any thread) are collected into the set it
        gives: the keys a graph's run chose by, for :meth:`export`."""
        used: set = set()
        names = self._names

        def get(key):
            for recorder in self._recorders:
                recorder.add(key)
            return names.get(key)
        with self._lock:
            self._recorders.append(used)
            self.get = get
        try:
            yield used
        finally:
            with self._lock:
                self._recorders.remove(used)
                if not self._recorders:
                    self.get = names.get

    def remember(self, key, name: str) -> None:
        with self._lock:
            self._names[key] = name

    def clear(self) -> None:
        """Forget every choice (the next call of each problem measures again)."""
        with self._lock:
            self._names.clear()
            self.generation += 1

    def export(self, keys=None) -> list:
        """[(key as plain data, algorithm name)] of `keys` (default: every choice)."""
        names = self.snapshot()
        chosen = names if keys is None else {k: names[k] for k in keys if k in names}
        return [(_plain(key), name) for key, name in chosen.items()]

    def load(self, exported) -> None:
        """Remember the choices of :meth:`export`'s list."""
        with self._lock:
            for key, name in exported:
                self._names[_rebuilt(key)] = name

    def snapshot(self) -> dict:
        """A copy: key -> algorithm name."""
        with self._lock:
            return dict(self._names)

    def __len__(self) -> int:
        return len(self._names)


# Keys hold tuples, strings, numbers, bools, None, frozen dataclasses (ConvProblem) and enums
# (TuneMode) of Ember's own modules; tagged lists stand for the last two.

def _plain(value):
    if dataclasses.is_dataclass(value):
        fields = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return ['dataclass', type(value).__module__, type(value).__qualname__, fields]
    if isinstance(value, enum.Enum):
        return ['enum', type(value).__module__, type(value).__qualname__, value.value]
    if isinstance(value, tuple):
        return ['tuple', [_plain(v) for v in value]]
    return value


def _rebuilt(value):
    if not isinstance(value, list):
        return value
    if value[0] == 'tuple':
        return tuple(_rebuilt(v) for v in value[1])
    kind, module, qualname, content = value
    if not module.startswith('ember.'):
        raise ValueError(f'a saved choice names {module}.{qualname}, not a class of Ember')
    cls = importlib.import_module(module)
    for part in qualname.split('.'):
        cls = getattr(cls, part)
    if kind == 'enum':
        return cls(content)
    return cls(**{name: _rebuilt(v) for name, v in content.items()})
