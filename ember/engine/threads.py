"""Threads inside one operator: the kernel pool, ``parallel_for``, the OpenMP team, BLAS
limits and pinning.

``OMP_NUM_THREADS`` sizes the kernel pool and limits the BLAS/OpenMP libraries (through
threadpoolctl); ``KMP_AFFINITY`` pins the engine's CPU workers, the kernel pool's threads and
the OpenMP team threads that run the compiled kernels (:func:`team_cores`) to cores, the way
Intel's OpenMP pins its team.

The compiled kernels of ``ember._winograd`` run their parts on the OpenMP team of the calling
thread, the threads that its oneDNN kernels use too (one GNU libgomp in the process): between
two kernels those threads spin for a while, so the next kernel's parts start at once, where
waking a kernel-pool thread costs about 45 us on a virtual machine (a parallel_for that does
nothing took 47 us on the 2-core KVM guest here). NumPy's ufunc chunks need the GIL to start,
so they stay on the kernel pool.

Unless the user sets ``OMP_NUM_THREADS``, the threads of one operator times the engine's CPU
workers never exceed the cores: each of ``MXNET_CPU_WORKER_NTHREADS`` workers gets an equal
share (all cores with the default single worker; MXNet would use half of them).
"""
from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from queue import SimpleQueue

from ember import config

__all__ = ['kernel_threads', 'cpu_workers', 'parallel_for', 'in_parallel_region',
           'serial_region', 'blas_limits', 'kernel_pool', 'Affinity', 'affinity_from_config',
           'team_cores', 'team_threads', 'team_arguments']


def kernel_threads() -> int:
    """Threads one operator may use: ``OMP_NUM_THREADS``, else the cores of the process
    divided among the engine's CPU workers (all of them for one worker).

    >>> kernel_threads() >= 1
    True
    """
    asked = config.get('OMP_NUM_THREADS')
    if asked is not None:
        return asked
    return max(1, config.cpu_count() // cpu_workers())


def cpu_workers() -> int:
    """Engine threads that may run CPU operators at once (the NaiveEngine runs them on the
    pushing thread)."""
    if config.get('MXNET_ENGINE_TYPE') == 'NaiveEngine':
        return 1
    return config.get('MXNET_CPU_WORKER_NTHREADS')


@dataclass(frozen=True)
class Affinity:
    """Where the i-th pinned thread runs: ``cores[(offset + i * stride) % len(cores)]``."""

    kind: str          # 'compact' or 'scatter' ('balanced' pins like 'scatter')
    offset: int
    cores: tuple

    def core_for(self, index: int, nthreads: int) -> int:
        stride = 1
        if self.kind != 'compact':
            stride = max(1, len(self.cores) // max(1, nthreads))
        return self.cores[(self.offset + index * stride) % len(self.cores)]


def affinity_from_config() -> Affinity | None:
    """The pinning that ``KMP_AFFINITY`` asks for, or None (unset, none, disabled, explicit).

    The permute number reorders levels of the machine topology; without topology information
    it has no effect here. 'explicit' needs a proclist, which is not supported, so it pins
    nothing.
    """
    value = config.get('KMP_AFFINITY')
    if value is None or value['type'] not in ('compact', 'scatter', 'balanced'):
        return None
    # the process's cores, not the calling thread's: a pinned worker may start the pool
    return Affinity(value['type'], value['offset'], config.process_cores())


def pin_current_thread(core: int) -> None:
    """On Linux, affinity of pid 0 is the calling thread's: this pins only this thread."""
    os.sched_setaffinity(0, {core})


class BlasLimit:
    """Sets the BLAS and OpenMP thread pools to ``OMP_NUM_THREADS`` while an engine runs;
    without it, lowers any pool above :func:`kernel_threads` to that (several engine workers
    each running a GEMM on every core would oversubscribe them), leaving smaller pools (a
    user's ``OPENBLAS_NUM_THREADS``) as they are.

    Under ``MXNET_ENFORCE_DETERMINISM`` they get one thread: OpenBLAS splits a GEMM's sums by
    thread count, so other counts give other bits.
    """

    def __init__(self):
        self._limits = None
        limits = blas_limits()
        if limits is not None:
            from threadpoolctl import threadpool_limits
            self._limits = threadpool_limits(limits=limits)

    def restore(self) -> None:
        if self._limits is not None:
            self._limits.restore_original_limits()
            self._limits = None


def blas_limits(pools: list | None = None):
    """What :class:`BlasLimit` passes to threadpoolctl: a thread count for every pool, a dict
    of library prefix -> count for the pools to lower, or None to change nothing. `pools`
    are threadpoolctl's ``threadpool_info()`` records (read when not given).

    A pthreads OpenBLAS loaded without ``OPENBLAS_THREAD_TIMEOUT`` (NumPy imported before
    Ember, which sets it otherwise) gets one thread, whatever ``OMP_NUM_THREADS`` says: after
    each GEMM its threads would spin for about 0.1 s on the cores that oneDNN and the kernel
    threads need next (a resnet50 training step took 1.4x as long; 1.6x with
    ``OMP_NUM_THREADS=2`` on 2 cores, which OpenBLAS also reads). Ember's own GEMMs split over
    its kernel threads."""
    if config.get('MXNET_ENFORCE_DETERMINISM'):
        return 1
    asked = config.get('OMP_NUM_THREADS')
    if pools is None:
        from threadpoolctl import threadpool_info
        pools = threadpool_info()
    if asked is not None:
        if asked == 1 or not any(_spins(pool) for pool in pools):
            return asked
        return {pool['prefix']: 1 if _spins(pool) else asked for pool in pools}
    target = kernel_threads()
    lower = {pool['prefix']: 1 if _spins(pool) else target for pool in pools
             if pool['num_threads'] > (1 if _spins(pool) else target)}
    return lower or None


def _spins(pool) -> bool:
    """Whether `pool` is a pthreads OpenBLAS whose threads spin for its default timeout."""
    return (pool.get('internal_api') == 'openblas' and pool.get('threading_layer') == 'pthreads'
            and config.native_value('OPENBLAS_THREAD_TIMEOUT') is None)


# ----------------------------------------------------------------------------------------------
# parallel_for

class _Latch:
    """Counts finished chunks; keeps the first error to re-raise in the caller."""

    def __init__(self, count):
        self.count = count
        self.error = None
        self.lock = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()

    def finish(self, error):
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.count -= 1
            last = self.count == 0
        if last:
            self.done.release()


class KernelPool:
    """Persistent helper threads for ``parallel_for``; the caller runs the first chunk."""

    def __init__(self, nthreads: int, affinity: Affinity | None):
        self.nthreads = nthreads
        self._tasks = SimpleQueue()
        self._threads = []
        for index in range(1, nthreads):
            core = affinity.core_for(index, nthreads) if affinity else None
            thread = threading.Thread(target=self._work, args=(core,), daemon=True,
                                      name=f'ember-kernel-{index}')
            thread.start()
            self._threads.append(thread)

    def _work(self, core):
        _region.active = True
        if core is not None:
            pin_current_thread(core)
        while True:
            task = self._tasks.get()
            if task is None:
                return
            fn, start, stop, latch = task
            error = None
            try:
                fn(start, stop)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                error = exc
            latch.finish(error)

    def run(self, n, fn):
        chunks = self.nthreads
        bounds = [n * i // chunks for i in range(chunks + 1)]
        latch = _Latch(chunks - 1)
        for i in range(1, chunks):
            self._tasks.put((fn, bounds[i], bounds[i + 1], latch))
        # the caller's chunk is inside the split too: work it nests must not split again
        outer, _region.active = _region.active, True
        try:
            fn(bounds[0], bounds[1])
        finally:
            _region.active = outer
            latch.done.acquire()
        if latch.error is not None:
            raise latch.error

    def stop(self):
        for _ in self._threads:
            self._tasks.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []


class _Region(threading.local):
    active = False      # this thread runs a chunk of a split: helpers always, callers during it


_region = _Region()


@contextlib.contextmanager
def serial_region():
    """Run a block as if inside a chunk of a split: the ``parallel_for`` calls it makes run
    serially (the operator tuner times kernels on one thread this way).

    >>> with serial_region():
    ...     in_parallel_region()
    True
    """
    outer = _region.active
    _region.active = True
    try:
        yield
    finally:
        _region.active = outer


def in_parallel_region() -> bool:
    """Whether this thread runs a chunk of a ``parallel_for`` split (nested work runs serially).

    >>> in_parallel_region()
    False
    """
    return _region.active


_pool: KernelPool | None = None
_pool_lock = threading.Lock()


def _kernel_pool() -> KernelPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = KernelPool(kernel_threads(), affinity_from_config())
        return _pool


def stop_kernel_pool() -> None:
    """Join the helper threads; the next ``parallel_for`` starts a pool from configuration
    (and the next OpenMP team takes its cores from it)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
        _team_cores.clear()
    if pool is not None:
        pool.stop()


def forget_kernel_pool() -> None:
    """After fork: the child has no helper threads, so drop the pool without joining."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()
    _team_cores.clear()


# ----------------------------------------------------------------------------------------------
# The OpenMP team

_team_cores: dict = {}      # team size -> cores (None: not pinned), until the pool stops


def team_cores(count: int) -> tuple | None:
    """The core of each of the `count` threads of an OpenMP team that ``KMP_AFFINITY``
    pins, as the kernel pool pins its threads (thread 0, the caller, is the engine's to pin),
    or None where it pins nothing.

    >>> team_cores(2) is None or len(team_cores(2)) == 2
    True
    """
    cores = _team_cores.get(count, False)
    if cores is False:
        affinity = affinity_from_config()
        cores = None if affinity is None else tuple(affinity.core_for(index, count)
                                                    for index in range(count))
        _team_cores[count] = cores
    return cores


def parallel_for(n: int, fn, split: bool | None = None) -> None:
    """Run ``fn(start, stop)`` over ``[0, n)``: split across the kernel threads from
    ``MXNET_CPU_PARALLEL_SIZE`` elements on, else in one call on this thread. A caller that
    decided for itself (the operator tuner) passes `split`.

    Chunks are disjoint, cover ``[0, n)`` and run concurrently: NumPy releases the GIL inside
    ufuncs that write into ``out=`` slices. Inside a chunk, nested calls run serially.

    >>> import numpy as np
    >>> x, y = np.arange(10.0), np.empty(10)
    >>> parallel_for(10, lambda start, stop: np.multiply(x[start:stop], 2, out=y[start:stop]))
    >>> y[-1]
    np.float64(18.0)
    """
    if split is None:
        split = n >= config.get('MXNET_CPU_PARALLEL_SIZE')
    if not split or _region.active:
        fn(0, n)
        return
    pool = _pool or _kernel_pool()
    if pool.nthreads == 1:
        fn(0, n)
        return
    pool.run(n, fn)


def team_threads(n: int, split: bool | None = None) -> int:
    """Threads for a compiled kernel that splits `n` units of work on the calling thread's
    OpenMP team itself (see ember/_team.h): every kernel thread where ``parallel_for`` would
    split the same work, else 1.

    >>> team_threads(10, split=False)
    1
    >>> with serial_region():
    ...     team_threads(10, split=True)
    1
    """
    if split is None:
        split = n >= config.get('MXNET_CPU_PARALLEL_SIZE')
    if not split or _region.active:
        return 1
    return kernel_threads()


def team_arguments(split: bool | None = True, n: int = 0) -> dict:
    """The ``threads`` and ``cores`` keyword arguments of a compiled kernel that splits `n`
    units of work on the calling thread's OpenMP team (see ember/_team.h): `split` as
    ``parallel_for`` takes it (None: from ``MXNET_CPU_PARALLEL_SIZE`` units on), the cores as
    ``team_cores`` pins them (None for one thread).

    >>> team_arguments(split=False)
    {'threads': 1, 'cores': None}
    >>> team_arguments(split=None, n=1)['threads']
    1
    """
    threads = team_threads(n, split)
    return {'threads': threads, 'cores': team_cores(threads) if threads > 1 else None}


def kernel_pool() -> KernelPool:
    """The running kernel pool (started from configuration on first use)."""
    return _pool or _kernel_pool()
