"""The operator tuner: whether splitting an element-wise kernel across the kernel threads pays.

MXNet's tuner times, per operator and dtype, one element of the kernel, and splits a call
across its OpenMP threads only when the work saved exceeds the fork/join overhead. Ember does
the same for its NumPy kernels. On first use of an operator with a dtype that
``MXNET_USE_OPERATOR_TUNING`` enables (it defaults to ``MXNET_ENABLE_OPERATOR_TUNING``: ``0``
none, ``1`` all, or a list such as ``float32,float16``), the kernel runs a few times on a copy
of the first few thousand elements of its real inputs, on one thread; the slope of time against
elements is its cost per element (the fixed cost of the call drops out). The overhead of a split
is timed once per process on the kernel pool. A call of ``size`` elements splits when::

    size * cost_per_element * (1 - 1 / cores) > overhead(cores)

with ``cores`` from ``MXNET_USE_NUM_CORES_OPERATOR_TUNING`` (unset: the threads one operator
may use), and the overhead scaled from the pool's thread count to ``cores`` by the helpers to
wake. Dtypes not tuned keep the size rule: split from ``MXNET_CPU_PARALLEL_SIZE`` elements.
The three tuning variables are read when the tuner is first used.

>>> import numpy as np
>>> tuner = Tuner(Settings(dtypes=frozenset({'float32'}), cores=2))
>>> tuner.record('exp', np.float32, per_element_ns=2.0)
>>> tuner.record_overhead(20000.0)
>>> tuner.should_split('exp', np.float32, 5000), tuner.should_split('exp', np.float32, 50000)
(False, True)
"""
from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ember import config
from ember.engine import threads

__all__ = ['Settings', 'Tuner', 'tuner', 'should_split', 'worth_splitting', 'split_threshold',
           'prefix_sample', 'time_kernel_ns', 'time_split_ns', 'reset', 'MIN_SIZE',
           'SAMPLE_SIZES']

# Below this many elements a tuned call never splits (and is not measured): even a kernel of
# 30 ns per element saves less than the ~20 us a split of Python threads costs.
MIN_SIZE = 1024
# Elements of the two timed runs: the slope between them is the cost per element.
SAMPLE_SIZES = (1024, 8192)
_REPEATS = 3            # timed runs per sample size; the fastest counts
_OVERHEAD_REPEATS = 9   # timed empty splits; the median counts

# prepare(k) -> a function that runs the kernel once on k sample elements (built beforehand, so
# that the timing covers the kernel alone)
Prepare = Callable[[int], Callable[[], None]]


@dataclass(frozen=True)
class Settings:
    """What the tuning variables ask for: the dtype names to tune and the cores assumed."""

    dtypes: frozenset
    cores: int

    @classmethod
    def from_config(cls) -> 'Settings':
        cores = config.get('MXNET_USE_NUM_CORES_OPERATOR_TUNING') or threads.kernel_threads()
        return cls(frozenset(config.get('MXNET_USE_OPERATOR_TUNING')), cores)


def worth_splitting(size: int, per_element_ns: float, overhead_ns: float, cores: int) -> bool:
    """Whether `cores` threads sharing `size` elements save more than the split costs.

    >>> worth_splitting(100000, 1.0, 20000.0, 2), worth_splitting(100000, 1.0, 20000.0, 1)
    (True, False)
    """
    return size > split_threshold(per_element_ns, overhead_ns, cores)


def split_threshold(per_element_ns: float, overhead_ns: float, cores: int) -> float:
    """The size above which splitting pays: ``overhead / (cost * (1 - 1 / cores))``.

    >>> split_threshold(1.0, 20000.0, 2)
    40000.0
    """
    saved_per_element = per_element_ns * (1.0 - 1.0 / cores) if cores >= 2 else 0.0
    if saved_per_element <= 0.0:
        return float('inf')
    return overhead_ns / saved_per_element


class Tuner:
    """Measurements of one process and the decisions drawn from them.

    `time_kernel(prepare) -> ns per element` and `time_split() -> (ns, pool threads)` do the
    measuring; tests inject their own, or :meth:`record` results, so that no decision depends
    on the clock.
    """

    def __init__(self, settings: Settings, time_kernel=None, time_split=None):
        self.settings = settings
        self._time_kernel = time_kernel or time_kernel_ns
        self._time_split = time_split or time_split_ns
        self._costs: dict[tuple, float] = {}
        self._split_cost: tuple | None = None       # (ns of one split, pool threads)
        self._overhead: float | None = None          # of a split over the assumed cores
        self._keys: dict = {}                        # dtype as given -> np.dtype, or None
        self._thresholds: dict = {}                  # (op, dtype as given) -> split from size
        self._lock = threading.Lock()

    def tunes(self, dtype) -> bool:
        """Whether calls with `dtype` are decided by measurement."""
        return self._tuned_key(dtype) is not None

    def _tuned_key(self, dtype):
        # dtypes arrive as np.dtype objects or scalar types, which hash differently
        try:
            return self._keys[dtype]
        except KeyError:
            canonical = np.dtype(dtype)
            tuned = canonical.name in self.settings.dtypes
            key = self._keys[dtype] = canonical if tuned else None
            return key

    def should_split(self, op_name: str, dtype, size: int, prepare: Prepare | None = None) -> bool:
        """Whether a call of `op_name` on `size` elements of `dtype` should split; `prepare`
        builds a sample run when the operator has not been measured yet."""
        threshold = self._thresholds.get((op_name, dtype))
        if threshold is not None:       # every call after the first, on the hot path
            return size > threshold
        key = self._tuned_key(dtype)
        if key is None:
            return size >= config.get('MXNET_CPU_PARALLEL_SIZE')
        if size < MIN_SIZE or self.settings.cores < 2 or threads.in_parallel_region():
            return False
        cost = self._costs.get((op_name, key))
        if cost is None:
            if prepare is None:
                return size >= config.get('MXNET_CPU_PARALLEL_SIZE')
            cost = self._measure(op_name, key, prepare)
        threshold = max(MIN_SIZE - 1, split_threshold(cost, self.overhead_ns(),
                                                      self.settings.cores))
        self._thresholds[(op_name, dtype)] = threshold
        return size > threshold

    def cost_ns(self, op_name: str, dtype) -> float | None:
        """The measured cost per element, or None before the first measurement."""
        return self._costs.get((op_name, np.dtype(dtype)))

    def record(self, op_name: str, dtype, per_element_ns: float) -> None:
        """Store a cost per element as if it had been measured."""
        self._costs[(op_name, np.dtype(dtype))] = float(per_element_ns)
        self._thresholds.clear()

    def record_overhead(self, split_ns: float, pool_threads: int | None = None) -> None:
        """Store the cost of one split on a pool of `pool_threads` (default: the cores)."""
        self._split_cost = (float(split_ns), pool_threads or self.settings.cores)
        self._overhead = None
        self._thresholds.clear()

    def overhead_ns(self) -> float:
        """The cost of splitting over the assumed cores: the pool's measured cost, scaled by
        the helper threads to wake (infinite when the pool has no helpers)."""
        overhead = self._overhead
        if overhead is None:
            with self._lock:
                if self._split_cost is None:
                    self._split_cost = self._time_split()
            split_ns, pool_threads = self._split_cost
            overhead = float('inf')
            if pool_threads >= 2:
                overhead = split_ns * (self.settings.cores - 1) / (pool_threads - 1)
            self._overhead = overhead
        return overhead

    def _measure(self, op_name, dtype, prepare):
        with self._lock:
            cost = self._costs.get((op_name, dtype))
            if cost is None:
                # nested kernels (fused chains call the steps' kernels) must not split meanwhile
                with threads.serial_region():
                    cost = self._costs[(op_name, dtype)] = self._time_kernel(prepare)
        return cost


# ----------------------------------------------------------------------------------------------
# Measuring.

def time_kernel_ns(prepare: Prepare) -> float:
    """Nanoseconds per element of the kernel that `prepare` builds, on this thread."""
    small, large = SAMPLE_SIZES
    small_ns, large_ns = _fastest_ns(prepare(small)), _fastest_ns(prepare(large))
    slope = (large_ns - small_ns) / (large - small)
    # a disturbed timing can make the slope meaningless; the mean then bounds it from above
    return slope if slope > 0 else large_ns / large


def _fastest_ns(run: Callable[[], None]) -> float:
    run()       # first touch of the sample and any lazy set-up
    best = float('inf')
    for _ in range(_REPEATS):
        start = time.perf_counter_ns()
        run()
        best = min(best, time.perf_counter_ns() - start)
    return best


def time_split_ns() -> tuple:
    """(nanoseconds of an empty split on the kernel pool, the pool's threads)."""
    pool = threads.kernel_pool()
    if pool.nthreads < 2:
        return 0.0, pool.nthreads

    def nothing(start, stop):
        return None
    pool.run(pool.nthreads, nothing)
    times = []
    for _ in range(_OVERHEAD_REPEATS):
        start = time.perf_counter_ns()
        pool.run(pool.nthreads, nothing)
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times), pool.nthreads


def prefix_sample(arg, shape, size: int):
    """A fresh contiguous array of `size` elements: the first ones of `arg` broadcast to
    `shape`, repeated as needed (real values, so the timing meets the same slow paths as the
    call). Scalars pass through.

    >>> prefix_sample(np.arange(3.0), (2, 3), 8)
    array([0., 1., 2., 0., 1., 2., 0., 1.])
    """
    if not isinstance(arg, np.ndarray):
        return arg
    first = np.broadcast_to(arg, shape).flat[:size]
    return np.resize(first, size)


# ----------------------------------------------------------------------------------------------
# The process's tuner.

_tuner: Tuner | None = None
_tuner_lock = threading.Lock()


def tuner() -> Tuner:
    """The process's tuner, built from the tuning variables on first use."""
    found = _tuner
    if found is None:
        found = _build()
    return found


def _build() -> Tuner:
    global _tuner
    with _tuner_lock:
        if _tuner is None:
            _tuner = Tuner(Settings.from_config())
        return _tuner


def should_split(op_name: str, dtype, size: int, prepare: Prepare | None = None) -> bool:
    """Whether a call of `op_name` on `size` elements of `dtype` should split across the
    kernel threads (see the module's docstring).

    >>> should_split('add', np.float32, 10)
    False
    """
    return tuner().should_split(op_name, dtype, size, prepare)


def reset() -> None:
    """Forget the measurements and settings; the next use reads the variables again."""
    global _tuner
    with _tuner_lock:
        _tuner = None


config.register_reset('op', reset)
# without MXNET_USE_NUM_CORES_OPERATOR_TUNING the cores follow the engine's thread settings
config.register_reset('engine', reset)
