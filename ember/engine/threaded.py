"""The threaded engines: dependency tracking per var and pools of worker threads.

Each var keeps a FIFO queue like MXNet's ThreadedVar: a read is granted while no write is
granted or queued before it, a write once the reads and write before it have finished. An
operation runs when all its vars are granted. One engine lock guards every var's fields; a push
takes it once and so does a completion, for a few list operations each.

On tiny operators the cost is the Python around the kernel, and the GIL lets one thread run
it at a time, so the pushing thread and the workers share as little as possible:

- ready operations go through a ``SimpleQueue`` whose C methods are called directly;
- the engine lock is taken once per push and once per completion; a thread that finds it
  taken yields the GIL and tries again rather than blocking (``core.take_lock``), since a
  blocked thread wakes holding the lock but not the GIL and starts a lock convoy;
- a var makes its queue (a short list) only when an operation has to wait on it, and an
  operation checks its vars for errors only while some error is pending;
- a completion wakes a waiting thread only when what it waits for has happened (nothing left
  in flight; half the back-pressure bound drained), not at every completion;
- a thread that keeps pushing lets the workers catch up every ``_YIELD_EVERY`` operations, so
  what is in flight stays small enough to run from the cache.
"""
from __future__ import annotations

import heapq
import threading
import time
from queue import SimpleQueue

from ember.engine import gpu as _gpu
from ember.engine.core import Engine, normalise, role, take_lock
from ember.engine.threads import pin_current_thread
from ember.engine.var import READ, WAIT_READ, WAIT_WRITE, WRITE, Op

__all__ = ['ThreadedEngine', 'ThreadedEnginePerDevice']

# A thread that keeps pushing holds the GIL for its whole switch interval (5 ms), so hundreds
# of tiny operations pile up before a worker may run them, and their closures, arrays and
# records no longer fit in the cache the worker runs in (a third slower per operator). Every
# this many pushes, with at least as many in flight, the pushing thread lets a worker catch up.
_YIELD_EVERY = 64


class Pool:
    """Worker threads taking ready operations in FIFO order; threads start at the first op.

    ``put(op)`` (called with the engine lock held) and ``take()`` are attributes: after the
    first put they are the queue's own methods, with no Python frame around them.
    """

    def __init__(self, engine, name, nthreads, pinned, serves='cpu'):
        self.engine = engine
        self.name = name
        self.nthreads = nthreads
        self.pinned = pinned        # whether KMP_AFFINITY applies (CPU workers)
        # 'cpu', 'gpu' (every op on the thread's GPU streams) or 'any' (checked per op)
        self.serves = serves
        self.threads = []
        self._queue = SimpleQueue()
        self.take = self._queue.get
        self.put = self._first_put

    def _first_put(self, op):
        self._start()
        self.put = self._started_put()
        self.put(op)

    def _started_put(self):
        return self._queue.put

    def _start(self):
        for index in range(self.nthreads):
            core = self.engine.next_core() if self.pinned else None
            thread = threading.Thread(target=self.engine.work, args=(self, core), daemon=True,
                                      name=f'ember-{self.name}-{index}')
            thread.start()
            self.threads.append(thread)

    def stop(self):
        for _ in self.threads:
            self._queue.put(None)
        for thread in self.threads:
            thread.join()
        self.threads = []
        self.put = self._first_put


class PriorityPool(Pool):
    """Worker threads that take the highest-priority ready op first (push order among ties)."""

    def __init__(self, engine, name, nthreads, pinned, serves='cpu'):
        super().__init__(engine, name, nthreads, pinned, serves)
        self._heap = []
        self._heap_lock = threading.Lock()
        self.take = self._take_highest

    def _started_put(self):
        return self._put_in_order

    def _put_in_order(self, op):
        with self._heap_lock:
            heapq.heappush(self._heap, (-op.priority, op.seq, op))
        self._queue.put(True)

    def _take_highest(self):
        if self._queue.get() is None:
            return None
        with self._heap_lock:
            return heapq.heappop(self._heap)[2]


class ThreadedEngine(Engine):
    """One pool of ``MXNET_CPU_WORKER_NTHREADS`` workers runs operations of every device."""

    def __init__(self, settings):
        super().__init__(settings)
        self._room = threading.Condition(self._lock)    # back-pressure: in-flight drained
        self._idle = threading.Condition(self._lock)    # wait_idle: nothing in flight
        self._room_waiters = 0
        self._idle_waiters = 0
        self._inflight = 0
        self._max_inflight = settings.max_inflight
        # A push that finds the bound reached waits until half of it has drained: the pushing
        # thread then wakes once per max_inflight / 2 completions instead of at each of them.
        self._resume_at = settings.max_inflight // 2
        self._cpu_threads = 0       # CPU workers started, for pinning
        self._pools = []
        self._build_pools()

    def _build_pools(self):
        self._shared = self._new_pool('worker', self.settings.cpu_workers, True, serves='any')

    def _new_pool(self, name, nthreads, pinned, kind=Pool, serves='cpu'):
        pool = kind(self, name, nthreads, pinned, serves)
        self._pools.append(pool)
        return pool

    def pool_for(self, device, priority, name, copy):
        return self._shared

    def next_core(self):
        """The core for the next CPU worker thread (called with the engine lock held)."""
        index = self._cpu_threads
        self._cpu_threads += 1
        total = self.settings.cpu_workers + self.settings.cpu_priority_workers
        return self.affinity.core_for(index, total) if self.affinity else None

    def submit(self, fn, reads, writes, device, priority, name, symbolic, copy, stack, count,
               inline=False):
        reads, writes = normalise(reads, writes)
        here = inline and not role.worker and (device is None or device.device_type != 'gpu')
        op = Op(fn, reads, writes, self.pool_for(device, priority, name, copy), device,
                priority, name, symbolic, stack)
        lock = self._lock
        if not lock.acquire(False):
            take_lock(lock)
        try:
            if self._inflight >= self._max_inflight and not role.worker:
                self._wait_for_room()
            self._inflight += 1
            self._pushes += 1
            self._operations += count
            op.seq = self._pushes
            wait = 0
            for var in reads:
                if var.writing or var.queue:
                    _enqueue(var, op, READ)
                    wait += 1
                else:
                    var.readers += 1
            for var in writes:
                if var.writing or var.readers or var.queue:
                    _enqueue(var, op, WRITE)
                    wait += 1
                else:
                    var.writing = True
            op.wait = wait
            here = here and not wait
            if not wait and not here:
                op.pool.put(op)
            pushes, inflight = self._pushes, self._inflight
        finally:
            lock.release()
        if here:            # its vars are held as a worker would hold them: run it now
            self._complete(op, self.run(op))
            return
        if not pushes % _YIELD_EVERY and inflight >= _YIELD_EVERY and not role.worker:
            time.sleep(0)       # releases the GIL long enough for a worker to take it

    def _wait_for_room(self):
        while self._inflight > self._resume_at:
            self._room_waiters += 1
            self._room.wait()

    def work(self, pool, core):
        """A worker thread's loop: run ready ops until the pool stops."""
        role.worker = True
        if core is not None:
            pin_current_thread(core)
        take, run, complete = pool.take, self._runner(pool.serves), self._complete
        while True:
            op = take()
            if op is None:
                return
            complete(op, run(op))
            op = None       # while idle, hold no closure (and the arrays it captured)

    def _runner(self, serves):
        """How a worker of a pool serving `serves` runs an op: GPU ops on the thread's
        streams (ember.engine.gpu), checked per op where a pool serves every device."""
        run = self.run
        if serves == 'cpu':
            return run

        def on_gpu(op):
            return _gpu.run_on_stream(op, run)
        if serves == 'gpu':
            return on_gpu

        def any_device(op):
            device = op.device
            if device is not None and device.device_type == 'gpu':
                return on_gpu(op)
            return run(op)
        return any_device

    def _complete(self, op, failure):
        op.fn = None        # free what the function captured before waiters see it finish
        lock = self._lock
        if not lock.acquire(False):
            take_lock(lock)
        try:
            if failure is not None:
                self._attach(failure, op)
            for var in op.reads:
                var.readers -= 1
                if not var.readers and var.queue:
                    self._grant(var)
            for var in op.writes:
                var.writing = False
                var.version += 1
                if var.queue:
                    self._grant(var)
            inflight = self._inflight = self._inflight - 1
            if self._room_waiters and inflight <= self._resume_at:
                self._room_waiters = 0
                self._room.notify_all()
            if self._idle_waiters and not inflight:
                self._idle_waiters = 0
                self._idle.notify_all()
        finally:
            lock.release()

    def _attach(self, failure, op):
        """Record `failure` before any later op is granted, so that those ops see it."""
        self._register(failure, op)
        for var in op.writes:
            if var.carries_errors:
                var.failure = failure

    def _grant(self, var):
        """Grant `var` to the ops at the head of its queue that may now run (lock held)."""
        queue = var.queue
        while queue:
            waiter, mode = queue[0]
            if var.writing or (mode & 1 and var.readers):     # WRITE and WAIT_WRITE need it alone
                return
            del queue[0]
            if mode == READ:
                var.readers += 1
            elif mode == WRITE:
                var.writing = True
            else:                   # a thread in wait_for_var: wake it
                waiter.release()
                continue
            waiter.wait -= 1
            if not waiter.wait:
                waiter.pool.put(waiter)

    def _wait_var_idle(self, var, write):
        with self._lock:
            busy = var.writing or var.queue or (write and var.readers)
            if busy:
                self._check_not_worker('wait_for_var')
                gate = threading.Lock()
                gate.acquire()
                _enqueue(var, gate, WAIT_WRITE if write else WAIT_READ)
        if busy:
            gate.acquire()

    def wait_idle(self):
        with self._lock:
            if not self._inflight:
                return
            self._check_not_worker('wait_all')
            while self._inflight:
                self._idle_waiters += 1
                self._idle.wait()

    def _inflight_count(self):
        return self._inflight

    def shutdown(self):
        super().shutdown()
        for pool in self._pools:
            pool.stop()


def _enqueue(var, waiter, mode):
    """Queue `waiter` (an op, or a waiting thread's gate) on `var` (lock held)."""
    queue = var.queue
    if queue is None:
        # A list, not a deque: queues hold an entry or two (at most the in-flight bound), and
        # a deque's 760 bytes per var of every pending operation crowd the cache.
        var.queue = [(waiter, mode)]
    else:
        queue.append((waiter, mode))


class ThreadedEnginePerDevice(ThreadedEngine):
    """Worker pools per device, a priority pool for the CPU, and copy workers per GPU.

    CPU pushes (cpu and cpu_pinned devices) run on the pool of their device id, sized
    ``MXNET_CPU_WORKER_NTHREADS``; CPU pushes with priority > 0 on the
    ``MXNET_CPU_PRIORITY_NTHREADS`` priority pool, highest first. GPU pushes run on
    ``MXNET_GPU_WORKER_NTHREADS`` workers of their GPU, copies (``copy=True`` or a name starting
    with '_copyto') on its ``MXNET_GPU_COPY_NTHREADS`` copy workers.
    """

    def _build_pools(self):
        settings = self.settings
        self._cpu0 = self._new_pool('cpu0', settings.cpu_workers, True)
        self._priority = self._new_pool('cpu-priority', settings.cpu_priority_workers, True,
                                        PriorityPool)
        self._by_device = {('cpu', 0): self._cpu0}
        # The CPU device of the last lookup and its pool, one tuple so that threads replace it
        # whole: comparing identities is cheaper than hashing a Device.
        self._recent_cpu = (None, None)

    def pool_for(self, device, priority, name, copy):
        if device is None:
            return self._priority if priority > 0 else self._cpu0
        if priority > 0 and device.device_type != 'gpu':
            return self._priority
        recent_device, pool = self._recent_cpu
        if device is recent_device:
            return pool
        if device.device_type != 'gpu':
            pool = self._pool_of(('cpu', device.device_id))
            self._recent_cpu = (device, pool)
            return pool
        copy = copy or (name is not None and name.startswith('_copyto'))
        return self._pool_of(('gpu-copy' if copy else 'gpu', device.device_id))

    def _pool_of(self, key):
        pool = self._by_device.get(key)
        return pool if pool is not None else self._add_pool(key)

    def _add_pool(self, key):
        kind, device_id = key
        sizes = {'cpu': self.settings.cpu_workers, 'gpu': self.settings.gpu_workers,
                 'gpu-copy': self.settings.gpu_copy_workers}
        with self._lock:
            pool = self._by_device.get(key)
            if pool is None:
                pool = self._new_pool(f'{kind}{device_id}', sizes[kind], kind == 'cpu',
                                      serves='cpu' if kind == 'cpu' else 'gpu')
                self._by_device[key] = pool
        return pool
