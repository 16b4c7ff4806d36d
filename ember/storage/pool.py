"""A pool of one device's buffers: a rounding strategy, a cache of freed buffers, the reserve.

Freed buffers are cached in a dict of lists keyed by their (rounded) size and reused for a
request of the same rounded size. This sits on the path of every imperative operator, often
with the allocating and the releasing thread running at once, so a release takes no lock: it
appends the buffer to a queue of returns, which the next allocation (or ``stats``) moves into
the cache under the pool's lock. The system allocator is called outside the lock.

>>> from ember import backend, device
>>> pool = Pool(device.cpu(), backend.for_device(device.cpu()), Round(cutoff=24), reserve=5)
>>> handle = pool.alloc(100)
>>> handle.nbytes, handle.size, handle.buffer.nbytes
(100, 128, 128)
>>> handle.release()
>>> pool.alloc(120).size, pool.stats()['cache_hits']
(128, 1)
"""
from __future__ import annotations

import gc
import threading
from collections import deque
from dataclasses import dataclass
from typing import ClassVar

from ember.base import EmberError

__all__ = ['Naive', 'Round', 'Unpooled', 'Pool', 'DevicePool', 'Handle', 'OutOfMemoryError']


class OutOfMemoryError(EmberError, MemoryError):
    """A device could not provide a buffer even after the pool released its cache."""


# ----------------------------------------------------------------------------------------------
# Rounding strategies (MXNET_*_MEM_POOL_TYPE).

@dataclass(frozen=True)
class Naive:
    """Exact sizes, except requests above `large_round` round up to a multiple of it.

    >>> Naive(large_round=1024).round(1000), Naive(large_round=1024).round(1025)
    (1000, 2048)
    """
    large_round: int
    pooled: ClassVar[bool] = True

    def round(self, nbytes: int) -> int:
        if nbytes <= self.large_round:
            return nbytes
        return -(-nbytes // self.large_round) * self.large_round


@dataclass(frozen=True)
class Round:
    """Below 2**cutoff the next power of two; from there on the next multiple of 2**cutoff.

    >>> Round(cutoff=10).round(3), Round(cutoff=10).round(1025)
    (4, 2048)
    """
    cutoff: int
    pooled: ClassVar[bool] = True

    def round(self, nbytes: int) -> int:
        linear = 1 << self.cutoff
        if nbytes < linear:
            return 1 << (nbytes - 1).bit_length() if nbytes else 0
        return -(-nbytes // linear) * linear


@dataclass(frozen=True)
class Unpooled:
    """Exact sizes, nothing cached: every release frees.

    >>> Unpooled().round(1000)
    1000
    """
    pooled: ClassVar[bool] = False

    def round(self, nbytes: int) -> int:
        return nbytes


# ----------------------------------------------------------------------------------------------

class Handle:
    """A buffer on loan from a pool. ``release()`` or garbage collection returns it.

    ``buffer`` is a flat uint8 array of ``size`` bytes (the pooled size, at least ``nbytes``).
    Whoever keeps a view of the buffer must keep the handle alive as long. ``zeroed`` says
    the buffer came straight from a backend whose allocations read as zeros (not from the
    pool's cache): until something writes it, it holds zeros.
    """

    __slots__ = ('buffer', 'nbytes', 'size', 'device', 'zeroed', '_pool')

    def __init__(self, buffer, nbytes, size, pool, zeroed=False):
        self.buffer = buffer
        self.nbytes = nbytes
        self.size = size
        self.device = pool.device
        self.zeroed = zeroed
        self._pool = pool

    def release(self, cache: bool = True) -> None:
        """Return the buffer to its pool (to be freed rather than cached when `cache` is
        False); later calls do nothing."""
        pool = self._pool
        if pool is None:
            return
        with pool._lock:        # two threads may release one handle: only one returns it
            if self._pool is None:
                return
            self._pool = None
        pool._take_back(self.size, self.buffer if cache else None)
        self.buffer = None

    def __del__(self):
        # The last reference is gone, so no other thread can release this handle: no lock.
        # This runs for nearly every operator: Pool._take_back, inlined.
        pool = self._pool
        if pool is not None:
            self._pool = None
            pool._returned.append((self.size, self.buffer if pool._caching else None))
            self.buffer = None
            profiler = pool._profiler
            if profiler is not None and profiler.memory_enabled():
                pool._record()

    @property
    def released(self) -> bool:
        return self._pool is None

    def __repr__(self):
        state = 'released' if self._pool is None else f'{self.size} bytes'
        return f'<Handle {self.nbytes} bytes on {self.device}: {state}>'


class Pool:
    """The storage manager of one device.

    `backend` provides ``alloc(nbytes)``, ``free_memory()``, ``total_memory()`` and
    ``oom_errors``; tests pass a simulated device. Before a system allocation that would leave
    less than `reserve` percent of the device free, the cache is released; on an out-of-memory
    error it is released and the allocation tried once more.
    """

    _handle_type = Handle

    def __init__(self, device, backend, strategy, reserve: int, profiler=None):
        self.device = device
        self.strategy = strategy
        self.reserve = reserve
        self._backend = backend
        self._round = strategy.round
        self._caching = strategy.pooled  # False for Unpooled, and once closed
        self._oom_errors = tuple(backend.oom_errors)
        self._profiler = profiler
        self._reuse = None              # DevicePool: waits a cached buffer's fence
        self._counter = f'Memory: {device}'
        self._total = None              # read on first need: it does not change
        # Re-entrant: user code run by the garbage collector inside a locked region may
        # release a handle explicitly.
        self._lock = threading.RLock()
        self._returned = deque()        # (size, buffer or None) released, not yet accounted
        self._sizes: dict[int, int] = {}   # request -> pooled size
        self._free: dict[int, list] = {}
        self._in_use = self._cached = self._peak = 0
        self._allocations = self._cache_hits = self._system_allocs = self._releases = 0

    def alloc(self, nbytes: int) -> Handle:
        """A handle on a buffer of at least `nbytes` bytes."""
        size = self._sizes.get(nbytes)
        if size is None:
            size = self._size_of(nbytes)
        with self._lock:
            if self._returned:
                self._account_returns()
            self._allocations += 1
            cached = self._free.get(size)
            if cached:
                buffer = cached.pop()
                if self._reuse is not None:
                    buffer = self._reuse(buffer)
                self._cached -= size
                self._cache_hits += 1
                in_use = self._in_use = self._in_use + size
                if in_use > self._peak:
                    self._peak = in_use
            else:
                buffer = None
        zeroed = buffer is None and getattr(self._backend, 'zeroed', False)
        if buffer is None:
            buffer = self._system_alloc(nbytes, size)
        profiler = self._profiler
        if profiler is not None and profiler.memory_enabled():
            self._record()
        return self._handle_type(buffer, nbytes, size, self, zeroed)

    def _size_of(self, nbytes):
        """The pooled size of a request, remembered for alloc's dict lookup (cheaper than
        calling the strategy)."""
        if len(self._sizes) >= 1024:
            self._sizes.clear()
        size = self._sizes[nbytes] = self._round(nbytes)
        return size

    def _add_in_use(self, size):
        self._in_use += size
        if self._in_use > self._peak:
            self._peak = self._in_use

    def _system_alloc(self, nbytes, size):
        cached = self._cached       # for the error message: what the pool held at the request
        if cached and self._would_cut_reserve(size):
            self.empty_cache()
        try:
            buffer = self._backend.alloc(size)
        except self._oom_errors:
            buffer = self._retry_after_release(nbytes, size, cached)
        with self._lock:
            self._system_allocs += 1
            self._add_in_use(size)
        return buffer

    def _would_cut_reserve(self, size):
        if self._total is None:
            self._total = self._backend.total_memory()
        reserved = self._total * self.reserve // 100
        return self._backend.free_memory() - size < reserved

    def _retry_after_release(self, nbytes, size, cached):
        gc.collect()  # handles caught in reference cycles return their buffers to the cache
        with self._lock:
            self._account_returns()
            cached = max(cached, self._cached)
        self.empty_cache()
        try:
            return self._backend.alloc(size)
        except self._oom_errors as exc:
            raise OutOfMemoryError(self._oom_message(nbytes, size, cached)) from exc

    def _oom_message(self, nbytes, size, cached):
        try:
            free = f'{self._backend.free_memory()} bytes'
        except Exception:  # noqa: BLE001 - the message must not fail in turn
            free = 'an unknown number of bytes'
        return (f'{self.device}: out of memory: asked for {nbytes} bytes ({size} pooled); '
                f'{self._in_use} bytes are held by live arrays, {cached} were cached and have '
                f'been released, {free} are free on the device. Free arrays or use smaller '
                f'batches')

    def _take_back(self, size, buffer):
        """Queue a released buffer; one the pool will not cache is freed by the caller
        dropping it."""
        self._returned.append((size, buffer if self._caching else None))
        profiler = self._profiler
        if profiler is not None and profiler.memory_enabled():
            self._record()

    def _account_returns(self):
        """Move released buffers into the cache and out of the bytes in use (lock held)."""
        returned, free = self._returned, self._free
        keep = self._caching
        while returned:
            size, buffer = returned.popleft()
            self._in_use -= size
            self._releases += 1
            if buffer is not None and keep:
                cached = free.get(size)
                if cached is None:
                    free[size] = [buffer]
                else:
                    cached.append(buffer)
                self._cached += size

    def _record(self):
        with self._lock:
            self._account_returns()
            in_use = self._in_use
        self._profiler.record_counter(self._counter, in_use)

    def empty_cache(self) -> None:
        """Free every cached buffer (live handles keep theirs)."""
        with self._lock:
            self._account_returns()
            dropped = self._free
            self._free = {}
            self._cached = 0
        dropped.clear()  # freed here, outside the lock
        release = getattr(self._backend, 'release_library_cache', None)
        if release is not None:
            release()

    def close(self) -> None:
        """Free the cache and stop caching: buffers released from now on are freed."""
        with self._lock:
            self._caching = False
        self.empty_cache()

    def stats(self) -> dict:
        """Bytes in use (pooled sizes), cached and at peak, and counts of what happened."""
        with self._lock:
            self._account_returns()
            return {'in_use': self._in_use, 'cached': self._cached, 'peak': self._peak,
                    'allocations': self._allocations, 'cache_hits': self._cache_hits,
                    'system_allocs': self._system_allocs, 'releases': self._releases}

    def __repr__(self):
        return f'<Pool {self.device} {self.strategy} reserve={self.reserve}%>'


# ----------------------------------------------------------------------------------------------
# Device memory that kernels use asynchronously.

class DeviceHandle(Handle):
    """A handle of a :class:`DevicePool`: returning the buffer records its fence."""

    __slots__ = ()

    def __del__(self):
        pool = self._pool
        if pool is not None:
            self._pool = None
            pool._take_back(self.size, self.buffer)
            self.buffer = None


class DevicePool(Pool):
    """The pool of a device whose kernels run asynchronously on streams (a GPU).

    A buffer released while kernels queued on some stream may still read or write it is cached
    with a fence (``backend.fence()``: an event after the work queued so far on every stream);
    when it is handed out again, ``backend.await_fence(fence)`` makes every stream wait for the
    fence's events that are not done yet, so the next user's kernels, on whatever stream, start
    after the last user's, and the host never waits.
    """

    _handle_type = DeviceHandle

    def __init__(self, device, backend, strategy, reserve: int, profiler=None):
        super().__init__(device, backend, strategy, reserve, profiler)
        self._fence = backend.fence
        self._reuse = self._after_fence

    def _take_back(self, size, buffer):
        if buffer is not None and self._caching:
            try:
                buffer = (buffer, self._fence())
            except Exception:  # noqa: BLE001 - no fence (the driver is shutting down): not
                buffer = None  # cached, freed
        super()._take_back(size, buffer)

    def _after_fence(self, entry):
        buffer, fence = entry
        self._backend.await_fence(fence)
        return buffer
