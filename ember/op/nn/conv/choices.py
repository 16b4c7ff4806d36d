"""The algorithm measured fastest per convolution problem: a process-wide cache of names.

A key is whatever identifies a measurement (the problem, the tuning mode, the limits it was
measured under and whether oneDNN was on; :func:`ember.op.nn.conv.algorithms.choose` makes
them), a value the name of an algorithm in the problem's table. The cache is all a later run
needs to skip measuring, so it is kept apart from everything else the subsystem remembers.

>>> choices = Choices()
>>> choices.remember(('a problem', 'mode'), 'gemm')
>>> choices.get(('a problem', 'mode')), len(choices)
('gemm', 1)
>>> before = choices.generation
>>> choices.clear()
>>> choices.get(('a problem', 'mode')) is None, choices.generation != before
(True, True)
"""
from __future__ import annotations

import threading

__all__ = ['Choices']


class Choices:
    """Key -> algorithm name, thread-safe. :attr:`generation` changes whenever the choices
    are forgotten (:meth:`clear`): a caller that remembers a choice remembers it too."""

    def __init__(self):
        self._names: dict = {}
        self._lock = threading.Lock()
        self.generation = 0
        # the per-call lookup is the dict's own: the dict is never replaced, only cleared
        self.get = self._names.get

    def remember(self, key, name: str) -> None:
        with self._lock:
            self._names[key] = name

    def clear(self) -> None:
        """Forget every choice (the next call of each problem measures again)."""
        with self._lock:
            self._names.clear()
            self.generation += 1

    def snapshot(self) -> dict:
        """A copy: key -> algorithm name."""
        with self._lock:
            return dict(self._names)

    def __len__(self) -> int:
        return len(self._names)
