"""A simulated GPU for the tests of the logic that does not need one: streams and events that
log what is asked of them, and a device backend whose arrays are NumPy's.

``FakeGpu`` has what ``ember.backend.gpu.CupyBackend`` offers the layers above it (``xp``,
``alloc``, memory figures, ``new_stream``, ``fence``, ``await_fence``, ``make_generator``);
``installed(...)`` makes ``backend.for_device(gpu(i))`` return fakes while a test runs.
"""
from __future__ import annotations

import contextlib
import itertools
import threading

import numpy as np

from ember import backend, config, engine
from ember.backend import gpu as gpu_backend
from ember.device import gpu

_ids = itertools.count()


class FakeEvent:
    """An event: not done until the test (or a synchronize) says so."""

    def __init__(self, stream, fails=None):
        self.stream = stream
        self.id = next(_ids)
        self.done = False
        self.synchronized = 0
        self.fails = fails          # an exception synchronize() raises (a device error)

    def synchronize(self):
        self.synchronized += 1
        if self.fails is not None:
            raise self.fails
        self.done = True

    def __repr__(self):
        return f'<event {self.id} on stream {self.stream.id}>'


class FakeStream:
    """A stream: logs the events it records and waits for, and the threads that use it."""

    def __init__(self, device_id):
        self.device_id = device_id
        self.id = next(_ids)
        self.recorded = []
        self.waited = []
        self.threads = set()
        self.synchronized = 0
        self.fail_next_event = None

    def activate(self):
        self.threads.add(threading.current_thread().name)
        _active.stream = self

    def record(self):
        event = FakeEvent(self, self.fail_next_event)
        self.fail_next_event = None
        self.recorded.append(event)
        return event

    def wait(self, event):
        self.waited.append(event)

    def synchronize(self):
        self.synchronized += 1
        for event in self.recorded:
            event.done = True

    def __repr__(self):
        return f'<stream {self.id} of gpu({self.device_id})>'


class _Active(threading.local):
    stream = None


_active = _Active()


def active_stream():
    """The fake stream the calling thread last activated."""
    return _active.stream


class FakeGpu:
    """A device of `capacity` bytes whose arrays are NumPy arrays and whose streams are fakes."""

    kind = 'gpu'
    zeroed = False
    xp = np
    oom_errors = (MemoryError,)

    def __init__(self, device_id=0, capacity=1 << 30):
        self.device_id = device_id
        self.capacity = capacity
        self.live = 0
        self.streams = []
        self.library_cache_releases = 0

    def alloc(self, nbytes):
        if self.live + nbytes > self.capacity:
            raise MemoryError(f'{nbytes} bytes do not fit')
        self.live += nbytes
        return np.zeros(nbytes, np.uint8)

    def total_memory(self):
        return self.capacity

    def free_memory(self):
        return self.capacity - self.live

    def synchronize(self):
        for stream in self.streams:
            stream.synchronize()

    def release_library_cache(self):
        self.library_cache_releases += 1

    def new_stream(self):
        stream = FakeStream(self.device_id)
        self.streams.append(stream)
        _every_stream.append(stream)
        return stream

    def fence(self):
        return gpu_backend.fence(list(_every_stream))

    def await_fence(self, events):
        gpu_backend.await_fence(events, list(_every_stream))

    def make_generator(self, seed_sequence):
        return np.random.Generator(np.random.PCG64(seed_sequence))


_every_stream: list = []


@contextlib.contextmanager
def installed(count=1, **overrides):
    """`count` fake GPUs as gpu(0)... for the block, with the engine (and so its threads and
    their streams) and pools built afresh under the configuration `overrides`."""
    fakes = [FakeGpu(i) for i in range(count)]
    saved = dict(backend._backends)
    for index, fake in enumerate(fakes):
        backend._backends[gpu(index)] = fake
    _every_stream.clear()
    try:
        with config.override(MXNET_GPU_WORKER_NSTREAMS=overrides.pop(
                'MXNET_GPU_WORKER_NSTREAMS', 1), **overrides):
            yield fakes
            engine.get().wait_all()
    finally:
        engine.reset()
        backend._backends.clear()
        backend._backends.update(saved)
        _every_stream.clear()
        from ember import resource, storage
        storage.reset()
        resource.reset()
