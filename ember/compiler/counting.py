"""What the graph compiler did in this process: compiles, cache hits and misses, artefacts
loaded, seconds spent compiling. They show in the profiler's aggregate table (the 'graph
compiler' block of ``mx.profiler.dumps()``) and through :func:`counters`.

>>> before = counters()['compiles']
>>> count('compiles')
>>> counters()['compiles'] - before
1
"""
from __future__ import annotations

import threading

from ember.profiler import recorder

__all__ = ['counters', 'count', 'add_seconds', 'NAMES']

NAMES = ('compiles', 'hits', 'misses', 'loads', 'compile seconds', 'failures replayed',
         'graphs extracted', 'graphs unloaded')
_values = dict.fromkeys(NAMES, 0)
_values['compile seconds'] = 0.0
_lock = threading.Lock()


def counters() -> dict:
    """Name -> value, counted since the process started.

    ``compiles``: graphs compiled (the passes ran); ``hits``: compilations answered by the
    cache (in memory or on disk); ``misses``: compilations the cache could not answer;
    ``loads``: artefacts read from the disk cache; ``compile seconds``: time spent compiling;
    ``failures replayed``: cached compile errors raised again; ``graphs extracted``: graphs
    recorded by NEURON_EXTRACT_GRAPHS_ONLY; ``graphs unloaded``: graphs unloaded under
    NEURON_NUM_RECENT_MODELS_TO_KEEP.
    """
    with _lock:
        return dict(_values)


def count(name: str, amount: int = 1) -> None:
    with _lock:
        _values[name] += amount


def add_seconds(seconds: float) -> None:
    with _lock:
        _values['compile seconds'] += seconds


recorder.register_totals('graph compiler', counters)
