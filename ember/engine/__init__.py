"""The dependency engine: runs pushed functions in the order their variables require.

``fn()`` runs once every earlier write to its reads, and every earlier read or write of its
writes, has finished; reads of a var run concurrently, writes alone, and each var is served in
push order. ``MXNET_ENGINE_TYPE`` picks the engine: ``NaiveEngine`` (synchronous, on the
pushing thread), ``ThreadedEngine`` (one shared worker pool) or ``ThreadedEnginePerDevice``
(pools per device, a priority pool, GPU copy workers; the default).

Errors follow MXNet. A failing ``fn`` attaches its error to every var it writes; an operation
that reads or writes a var carrying an error is skipped and passes the same error on to its
writes. One failure is one record shared by every var it reached: ``wait_for_var`` raises it
once (as :class:`OperatorError`, chained to the original) and that handles it everywhere, so
waiting again on that var, or on any other var it reached, returns normally and ``wait_all``
no longer raises it. ``wait_all`` raises the first unhandled failure in push order and clears
all of them. With ``DMLC_LOG_STACK_TRACE_DEPTH=N`` the error names the N innermost frames that
pushed the failing operation.

At most ``MXNET_ENGINE_MAX_INFLIGHT`` operations are pushed but unfinished; a push beyond that
waits until half of them have finished (pushes from inside an operation never wait).
``bulk(n)`` groups a thread's consecutive pushes into engine operations of up to ``n``
functions; ``eng.stats()`` counts engine operations ('pushes') and pushed functions
('operations'). Each operation is reported to the profiler when ``profiler.operator_enabled``
says so.

>>> from ember import engine
>>> eng = engine.get()
>>> x, y = eng.new_var(), eng.new_var()
>>> log = []
>>> eng.push(lambda: log.append('write x'), writes=[x])
>>> eng.push(lambda: log.append('x to y'), reads=[x], writes=[y])
>>> eng.wait_for_var(y)
>>> log
['write x', 'x to y']
>>> eng.push(lambda: 1 / 0, writes=[x])
>>> eng.wait_for_var(x)
Traceback (most recent call last):
    ...
ember.engine.var.OperatorError: operator <lambda> failed: ZeroDivisionError: division by zero
>>> eng.wait_all()
"""
from __future__ import annotations

import atexit
import os
import threading

from ember import config, cores
from ember.backend import native
from ember.engine import gpu as _gpu
from ember.engine import threads as _threads
from ember.engine.segment import bulk, flush as _flush_bulk, set_bulk_size
from ember.engine.core import Engine, NaiveEngine, Settings, role as _role
from ember.engine.threaded import ThreadedEngine, ThreadedEnginePerDevice
from ember.engine import core as _core
from ember.engine.threads import kernel_threads, parallel_for
from ember.engine.var import OperatorError, Var

__all__ = ['get', 'reset', 'state_token', 'bulk', 'set_bulk_size', 'parallel_for',
           'kernel_threads', 'Engine', 'NaiveEngine', 'ThreadedEngine',
           'ThreadedEnginePerDevice', 'Var', 'OperatorError', 'Settings', 'in_worker']


def in_worker() -> bool:
    """Whether this thread is running an engine operation (where waiting would deadlock)."""
    return _core.role.worker


KINDS = {'NaiveEngine': NaiveEngine, 'ThreadedEngine': ThreadedEngine,
         'ThreadedEnginePerDevice': ThreadedEnginePerDevice}

_engine: Engine | None = None
_build_lock = threading.Lock()
_carried: list = []         # unhandled failures of a reset engine, handed to the next one


def get() -> Engine:
    """The process engine, built from the configuration on first use.

    >>> get() is get()
    True
    """
    engine = _engine
    if engine is not None:
        return engine
    return _build()


def _build() -> Engine:
    global _engine, _carried
    with _build_lock:
        if _engine is None:
            cores.claim()       # NEURON_RT_VISIBLE_CORES: pin before sizing any pool
            settings = Settings.from_config()
            engine = KINDS[settings.kind](settings)
            engine.adopt(_carried)
            _carried = []
            _engine = engine
        return _engine


def reset() -> None:
    """Finish all work, stop the worker threads; the next :func:`get` reads the configuration.

    Unhandled errors survive the reset: the next engine's ``wait_all`` raises them.
    """
    global _engine, _carried
    _flush_bulk()
    with _build_lock:
        engine, _engine = _engine, None
        if engine is not None:
            engine.shutdown()
            _carried = _carried + engine.unhandled()
    _threads.stop_kernel_pool()
    _gpu.reset()


def state_token() -> tuple:
    """What a test must leave as found: engine settings and the count of unhandled errors.

    Building the engine lazily does not change the token; a leaked override or an error
    nobody waited for does.

    >>> state_token() == state_token()
    True
    """
    engine = _engine
    if engine is None:
        return Settings.from_config(), sum(f.error is not None for f in _carried)
    engine.wait_idle()
    return engine.settings, len(engine.unhandled())


config.register_reset('engine', reset)


def _wait_at_exit():
    engine = _engine
    if engine is not None:
        engine.wait_idle()


def _before_fork():
    engine = _engine
    if engine is not None and not _role.worker:
        engine.wait_idle()
    native.pause_openmp()       # the child could not start this thread's OpenMP team again


def _after_fork_in_child():
    """The child has none of the parent's threads: start over, keeping unhandled errors."""
    global _engine, _carried, _build_lock
    engine, _engine = _engine, None
    _build_lock = threading.Lock()
    if engine is not None:
        _carried = _carried + [f for f in engine._failures if f.error is not None]
    _threads.forget_kernel_pool()


atexit.register(_wait_at_exit)
os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
