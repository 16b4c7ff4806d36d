"""What every engine shares (push, waits, failures, statistics) and the NaiveEngine."""
from __future__ import annotations

import operator
import os
import threading
import time
from dataclasses import dataclass

from ember import config, profiler as _profiler
from ember.base import EmberError
from ember.device import cpu
from ember.engine import gpu as _gpu
from ember.engine import segment as _segment
from ember.engine.threads import BlasLimit, affinity_from_config, kernel_threads
from ember.engine.var import (WRITE, Failure, Op, Var, first_failure, push_site,
                              raise_failure)

__all__ = ['Engine', 'NaiveEngine', 'Settings']

_CPU0 = cpu(0)
# Failures kept before handled ones are dropped from the list wait_all scans.
_FAILURES_KEPT = 64


def take_lock(lock) -> None:
    """Acquire `lock` (one the caller failed to take at once) while holding the GIL.

    A thread woken from a blocking acquire holds the lock but not yet the GIL. If the other
    thread, now running, needs the lock, it blocks in turn, and on two free cores the threads
    settle into passing lock and GIL back and forth at every operation: a convoy costing two
    context switches per operator. Yielding the GIL between attempts keeps whoever holds the
    lock also able to run; after many attempts (the holder was descheduled) this blocks.
    """
    for _ in range(_LOCK_SPINS):
        _yield_gil()
        if lock.acquire(False):
            return
    lock.acquire()


_LOCK_SPINS = 200
# Both release the GIL; sched_yield (Unix) returns sooner.
_yield_gil = getattr(os, 'sched_yield', None) or (lambda: time.sleep(0))


class _ThreadRole(threading.local):
    worker = False      # set in engine worker threads: they must not block on back-pressure


role = _ThreadRole()


@dataclass(frozen=True)
class Settings:
    """The start-up configuration an engine is built from (also its state token)."""

    kind: str
    cpu_workers: int
    cpu_priority_workers: int
    gpu_workers: int
    gpu_copy_workers: int
    max_inflight: int
    kernel_threads: int
    affinity: str | None

    @classmethod
    def from_config(cls) -> 'Settings':
        affinity = config.get('KMP_AFFINITY')
        return cls(config.get('MXNET_ENGINE_TYPE'), config.get('MXNET_CPU_WORKER_NTHREADS'),
                   config.get('MXNET_CPU_PRIORITY_NTHREADS'),
                   config.get('MXNET_GPU_WORKER_NTHREADS'), config.get('MXNET_GPU_COPY_NTHREADS'),
                   config.get('MXNET_ENGINE_MAX_INFLIGHT'), kernel_threads(),
                   affinity['raw'] if affinity else None)


_WRITING, _QUEUE, _VERSION = (operator.attrgetter(name) for name in ('writing', 'queue',
                                                                      'version'))


def normalise(reads, writes):
    """Vars once each; a var both read and written is a write. Fast for one write."""
    if len(writes) == 1:
        if writes[0].__class__ is not Var:
            _reject('writes', writes)
        if writes[0] in reads:
            reads = [var for var in reads if var is not writes[0]]
    elif writes:
        _check_vars('writes', writes)
        writes = tuple(dict.fromkeys(writes))
        reads = [var for var in reads if var not in writes]
    if len(reads) == 1:
        if reads[0].__class__ is not Var:
            _reject('reads', reads)
    elif len(reads) == 2:
        first, second = reads
        if first.__class__ is not Var or second.__class__ is not Var:
            _reject('reads', reads)
        if first is second:
            reads = (first,)
    elif reads:
        _check_vars('reads', reads)
        reads = tuple(dict.fromkeys(reads))
    return reads, writes


def _check_vars(what, vars_):
    for var in vars_:
        if var.__class__ is not Var:
            _reject(what, vars_)


def _reject(what, vars_):
    bad = next(var for var in vars_ if var.__class__ is not Var)
    raise TypeError(f'engine push: {what} holds {bad!r} ({type(bad).__name__}); expected '
                    'engine Vars (eng.new_var())')


class Engine:
    """Schedules functions on versioned variables; see ``ember.engine`` for the contract."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.affinity = affinity_from_config()
        self._blas = BlasLimit()
        self._lock = threading.Lock()
        self._failures = []         # failures in the order they happened, handled or not
        self._pushes = 0
        self._operations = 0

    def new_var(self, carries_errors=True) -> Var:
        """A fresh variable with no pending operations.

        Pass ``carries_errors=False`` for resources that only order operators: a failure of an
        operator that writes such a var is not passed on to the var's later users.
        """
        return Var(carries_errors)

    def push(self, fn, reads=(), writes=(), device=None, priority=0, name=None, symbolic=False,
             copy=False, inline=False):
        """Schedule ``fn()`` after the earlier operations on its vars (see ``ember.engine``).

        `reads` and `writes` are sequences of Vars. `copy=True`, or a name starting with
        '_copyto', sends a GPU push to the device's copy workers. `inline=True` runs a CPU
        operation whose vars are all free on the pushing thread, before push returns (a
        worker would only take it over: the KVStore's collectives, whose MPI calls also run
        slower off the thread that waits for them).
        """
        depth = config.get('DMLC_LOG_STACK_TRACE_DEPTH')
        stack = push_site(depth) if depth else None
        if _segment.active_threads and _segment.append(
                self, fn, reads, writes, device, priority, name, symbolic, copy, stack):
            return
        self.submit(fn, reads, writes, device, priority, name, symbolic, copy, stack, 1, inline)

    def submit(self, fn, reads, writes, device, priority, name, symbolic, copy, stack, count,
               inline=False):
        """One engine operation standing for `count` pushed operations."""
        raise NotImplementedError

    def wait_for_var(self, var: Var, write: bool = False) -> None:
        """Wait until the pushed writes of `var` finish (with `write`, its reads as well);
        raise its pending error once."""
        _segment.flush()
        self._wait_var_idle(var, write)
        if var.gpu is not None:
            _gpu.host_wait(var, write)
        failure = var.failure
        if failure is None or failure.error is None:
            return
        with self._lock:
            error = failure.take()
        if error is not None:
            raise_failure(failure, error)

    def wait_all(self) -> None:
        """Wait for every pushed operation; raise the first pending error, clearing all."""
        _segment.flush()
        self.wait_idle()
        _gpu.synchronize_all()
        with self._lock:
            pending = [f for f in self._failures if f.error is not None]
            self._failures = []
            errors = [f.take() for f in pending]
        if pending:
            first = min(range(len(pending)), key=lambda i: pending[i].seq)
            raise_failure(pending[first], errors[first])

    def settled_versions(self, variables) -> tuple | None:
        """The versions of `variables` when none of them has a write pushed and not finished
        (an imperative bulk segment is pushed first), else None. Taken under the engine's
        lock, so a write finishing meanwhile is seen either as pending or as done.

        >>> from ember import engine
        >>> eng = engine.get()
        >>> var = eng.new_var()
        >>> eng.push(lambda: None, writes=[var]); eng.wait_for_var(var)
        >>> eng.settled_versions([var])
        (1,)
        """
        _segment.flush()
        with self._lock:
            if any(map(_WRITING, variables)):
                return None
            if any(map(_QUEUE, variables)):
                for var in variables:
                    if var.queue and any(mode == WRITE for _, mode in var.queue):
                        return None
            return tuple(map(_VERSION, variables))

    def wait_idle(self) -> None:
        """Wait for every pushed operation without raising."""

    def _wait_var_idle(self, var, write):
        """Wait until `var` has no pending writes (and no reads, with `write`)."""

    def stats(self) -> dict:
        """{'pushes': engine operations, 'operations': pushed functions, 'inflight': ...}."""
        with self._lock:
            return {'pushes': self._pushes, 'operations': self._operations,
                    'inflight': self._inflight_count()}

    def _inflight_count(self):
        return 0

    def unhandled(self) -> list:
        """Failures nobody has waited for yet."""
        with self._lock:
            return [f for f in self._failures if f.error is not None]

    def adopt(self, failures) -> None:
        """Take over a previous engine's unhandled failures (wait_all still raises them)."""
        with self._lock:
            self._failures.extend(failures)

    def shutdown(self) -> None:
        """Finish all work and release threads and library limits."""
        self.wait_idle()
        self._blas.restore()

    def run(self, op):
        """Run a granted op: skip it when a var carries a failure; return the failure or None."""
        if Failure.pending:
            failure = first_failure(op.reads) or first_failure(op.writes)
            if failure is not None:
                return failure
        profiler = _profiler     # a module global, so tests can swap in a recorder
        if profiler.operator_enabled(op.symbolic):
            return self._run_timed(op, profiler)
        try:
            op.fn()
        except BaseException as error:  # noqa: BLE001 - attached to the written vars
            return Failure(error, op)
        return None

    def _run_timed(self, op, profiler):
        failure = None
        begin = profiler.now_us()
        try:
            op.fn()
        except BaseException as error:  # noqa: BLE001 - attached to the written vars
            failure = Failure(error, op)
        profiler.record_operator(op.label(), op.device or _CPU0, begin, profiler.now_us(),
                                 op.symbolic)
        return failure

    def _register(self, failure, op):
        """Keep a failure `op` raised (not one it inherited) for wait_all; lock held."""
        if failure.seq != op.seq:
            return
        Failure.pending += 1
        failures = self._failures
        if len(failures) >= _FAILURES_KEPT:
            failures[:] = [f for f in failures if f.error is not None]
        failures.append(failure)

    def _check_not_worker(self, what):
        if role.worker:
            raise EmberError(f'{what} was called inside an engine operation, where it would '
                             'wait for itself; wait outside the pushed function')

    def __repr__(self):
        return f'<{type(self).__name__} {self.settings}>'


class NaiveEngine(Engine):
    """Runs each operation on the pushing thread at push time (for debugging).

    Errors still surface at wait time, as with the threaded engines.
    """

    def submit(self, fn, reads, writes, device, priority, name, symbolic, copy, stack, count,
               inline=False):
        reads, writes = normalise(reads, writes)
        op = Op(fn, reads, writes, None, device, priority, name, symbolic, stack)
        with self._lock:
            self._pushes += 1
            self._operations += count
            op.seq = self._pushes
        if device is not None and device.device_type == 'gpu':
            failure = _gpu.run_on_stream(op, self.run)
        else:
            failure = self.run(op)
        with self._lock:
            if failure is not None:
                self._register(failure, op)
            for var in writes:
                var.version += 1
                if failure is not None:
                    var.failure = failure
