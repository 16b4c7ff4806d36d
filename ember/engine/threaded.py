"""The threaded engines: dependency tracking per var and pools of worker threads.

Each var keeps a FIFO queue like MXNet's ThreadedVar: a read is granted while no write is
granted or queued before it, a write once the reads and write before it have finished. An
operation runs when all its vars are granted. One engine lock guards every var's fields; it is
held for a few list operations per push and per completion only.
"""
from __future__ import annotations

import heapq
import threading
from queue import SimpleQueue

from ember.engine.core import Engine, normalise, role
from ember.engine.threads import pin_current_thread
from ember.engine.var import READ, WAIT_READ, WAIT_WRITE, WRITE, Op

__all__ = ['ThreadedEngine', 'ThreadedEnginePerDevice']


class Pool:
    """Worker threads taking ready operations in FIFO order; threads start at the first op."""

    def __init__(self, engine, name, nthreads, pinned):
        self.engine = engine
        self.name = name
        self.nthreads = nthreads
        self.pinned = pinned        # whether KMP_AFFINITY applies (CPU workers)
        self.threads = []
        self._queue = SimpleQueue()

    def put(self, op):
        """Hand a ready op to the workers (called with the engine lock held)."""
        if not self.threads:
            self._start()
        self._queue.put(op)

    def take(self):
        return self._queue.get()

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


class PriorityPool(Pool):
    """Worker threads that take the highest-priority ready op first (push order among ties)."""

    def __init__(self, engine, name, nthreads, pinned):
        super().__init__(engine, name, nthreads, pinned)
        self._heap = []
        self._heap_lock = threading.Lock()

    def put(self, op):
        if not self.threads:
            self._start()
        with self._heap_lock:
            heapq.heappush(self._heap, (-op.priority, op.seq, op))
        self._queue.put(True)

    def take(self):
        if self._queue.get() is None:
            return None
        with self._heap_lock:
            return heapq.heappop(self._heap)[2]


class ThreadedEngine(Engine):
    """One pool of ``MXNET_CPU_WORKER_NTHREADS`` workers runs operations of every device."""

    def __init__(self, settings):
        super().__init__(settings)
        self._changed = threading.Condition(self._lock)
        self._inflight = 0
        self._waiters = 0           # threads waiting on _changed (wait_all, back-pressure)
        self._max_inflight = settings.max_inflight
        self._cpu_threads = 0       # CPU workers started, for pinning
        self._pools = []
        self._build_pools()

    def _build_pools(self):
        self._shared = self._new_pool('worker', self.settings.cpu_workers, True)

    def _new_pool(self, name, nthreads, pinned, kind=Pool):
        pool = kind(self, name, nthreads, pinned)
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

    def submit(self, fn, reads, writes, device, priority, name, symbolic, copy, stack, count):
        reads, writes = normalise(reads, writes)
        op = Op(fn, reads, writes, self.pool_for(device, priority, name, copy), device,
                priority, name, symbolic, stack)
        with self._lock:
            if self._inflight >= self._max_inflight and not role.worker:
                self._wait_for_room()
            self._inflight += 1
            self._pushes += 1
            self._operations += count
            op.seq = self._pushes
            wait = 0
            for var in reads:
                if var.writing or var.queue:
                    var.queue.append((op, READ))
                    wait += 1
                else:
                    var.readers += 1
            for var in writes:
                if var.writing or var.readers or var.queue:
                    var.queue.append((op, WRITE))
                    wait += 1
                else:
                    var.writing = True
            op.wait = wait
            if not wait:
                op.pool.put(op)

    def _wait_for_room(self):
        self._waiters += 1
        try:
            while self._inflight >= self._max_inflight:
                self._changed.wait()
        finally:
            self._waiters -= 1

    def work(self, pool, core):
        """A worker thread's loop: run ready ops until the pool stops."""
        role.worker = True
        if core is not None:
            pin_current_thread(core)
        take, run, complete = pool.take, self.run, self._complete
        while True:
            op = take()
            if op is None:
                return
            complete(op, run(op))
            op = None       # while idle, hold no closure (and the arrays it captured)

    def _complete(self, op, failure):
        op.fn = None        # free what the function captured before waiters see it finish
        with self._lock:
            for var in op.reads:
                var.readers -= 1
                if not var.readers and var.queue:
                    self._grant(var)
            for var in op.writes:
                var.writing = False
                var.version += 1
                if failure is not None and var.carries_errors:
                    var.failure = failure
                if var.queue:
                    self._grant(var)
            self._inflight -= 1
            if failure is not None:
                self._register(failure, op)
            if self._waiters:
                self._changed.notify_all()

    def _grant(self, var):
        """Grant `var` to the ops at the head of its queue that may now run (lock held)."""
        queue = var.queue
        while queue:
            waiter, mode = queue[0]
            if var.writing or (mode & 1 and var.readers):     # WRITE and WAIT_WRITE need it alone
                return
            queue.popleft()
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
                var.queue.append((gate, WAIT_WRITE if write else WAIT_READ))
        if busy:
            gate.acquire()

    def wait_idle(self):
        with self._lock:
            if not self._inflight:
                return
            self._check_not_worker('wait_all')
            self._waiters += 1
            try:
                while self._inflight:
                    self._changed.wait()
            finally:
                self._waiters -= 1

    def _inflight_count(self):
        return self._inflight

    def shutdown(self):
        super().shutdown()
        for pool in self._pools:
            pool.stop()


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

    def pool_for(self, device, priority, name, copy):
        if device is None:
            return self._priority if priority > 0 else self._cpu0
        if device.device_type != 'gpu':
            if priority > 0:
                return self._priority
            key = ('cpu', device.device_id)
        else:
            copy = copy or (name is not None and name.startswith('_copyto'))
            key = ('gpu-copy' if copy else 'gpu', device.device_id)
        pool = self._by_device.get(key)
        return pool if pool is not None else self._add_pool(key)

    def _add_pool(self, key):
        kind, device_id = key
        sizes = {'cpu': self.settings.cpu_workers, 'gpu': self.settings.gpu_workers,
                 'gpu-copy': self.settings.gpu_copy_workers}
        with self._lock:
            pool = self._by_device.get(key)
            if pool is None:
                pool = self._new_pool(f'{kind}{device_id}', sizes[kind], kind == 'cpu')
                self._by_device[key] = pool
        return pool
