"""The compiled graphs loaded in this process, least recently used first
(NEURON_NUM_RECENT_MODELS_TO_KEEP).

A graph is loaded while some executor holds a program built from its artefact (a graph no
executor holds any more is forgotten when the next one loads). Every run
touches its graph; past N graphs, the least recently used one is unloaded: its executors drop
their programs (and the arenas with them) and the artefact is forgotten. Using it again loads
the artefact from the disk cache (or, without one, from the bytes kept here): it is never
compiled again. A graph an executor may not drop now (a training forward whose backward is
still to come) stays until it may.

>>> class Holder:
...     def __init__(self): self.dropped = []
...     def pinned(self, digest): return False
...     def unload(self, digest): self.dropped.append(digest)
>>> graphs, holder = LoadedGraphs(), Holder()
>>> for digest in ('a', 'b', 'c'):
...     graphs.add(digest, artefact=object(), holder=holder)
>>> graphs.add('d', artefact=object())     # no executor holds it: the next add forgets it
>>> graphs.touch('a', limit=3)        # 'b' is now the least recently used
>>> holder.dropped, graphs.digests()
(['b'], ['c', 'd', 'a'])
"""
from __future__ import annotations

import collections
import threading
import weakref

from ember.compiler import counting

__all__ = ['LoadedGraphs', 'LOADED']


class LoadedGraphs:
    """digest -> (artefact, holders), in order of use."""

    def __init__(self):
        self._order: collections.OrderedDict = collections.OrderedDict()
        self._holders: dict = {}
        self._kept_bytes: dict = {}          # digest -> artefact bytes, where no disk has them
        self._lock = threading.RLock()

    def get(self, digest):
        """The loaded artefact of `digest` (marked used), or None."""
        with self._lock:
            artefact = self._order.get(digest)
            if artefact is not None:
                self._order.move_to_end(digest)
            return artefact

    def add(self, digest, artefact, holder=None) -> None:
        """Load `artefact`; graphs no executor holds any more are forgotten."""
        with self._lock:
            for other in [d for d in self._order if d != digest
                          and not self._holders.get(d)]:
                del self._order[other]
                self._holders.pop(other, None)
            self._order[digest] = artefact
            self._order.move_to_end(digest)
            if holder is not None:
                self._holders.setdefault(digest, weakref.WeakSet()).add(holder)

    def attach(self, digest, holder) -> None:
        """`holder` (with ``pinned(digest)`` and ``unload(digest)``) runs a program of
        `digest`."""
        with self._lock:
            self._holders.setdefault(digest, weakref.WeakSet()).add(holder)

    def keep_bytes(self, digest, data: bytes) -> None:
        """Keep the artefact's bytes here: it has no disk entry to come back from."""
        with self._lock:
            self._kept_bytes[digest] = data

    def kept_bytes(self, digest):
        with self._lock:
            return self._kept_bytes.get(digest)

    def touch(self, digest, limit) -> None:
        """`digest` ran now; with `limit` (graphs to keep, None: all), unload the least
        recently used past it."""
        with self._lock:
            if digest in self._order:
                self._order.move_to_end(digest)
            if limit is None or len(self._order) <= limit:
                return
            victims = [d for d in self._order if d != digest][:len(self._order) - limit]
        for victim in victims:
            self._unload(victim)

    def _unload(self, digest) -> None:
        with self._lock:
            holders = list(self._holders.get(digest, ()))
            if any(holder.pinned(digest) for holder in holders):
                return
            self._order.pop(digest, None)
            self._holders.pop(digest, None)
        for holder in holders:
            holder.unload(digest)
        counting.count('graphs unloaded')

    def digests(self) -> list:
        with self._lock:
            return list(self._order)

    def clear(self) -> None:
        with self._lock:
            self._order.clear()
            self._holders.clear()
            self._kept_bytes.clear()


LOADED = LoadedGraphs()
