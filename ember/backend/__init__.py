"""The array module and raw allocation of each device kind.

``for_device(dev)`` returns the device's backend: ``xp`` (numpy or cupy), ``alloc(nbytes)`` (a
flat uint8 array), ``total_memory()``, ``free_memory()``, ``synchronize()``, ``oom_errors`` (the
exceptions that mean "out of memory") and ``make_generator(seed_sequence)``. Only this package
imports CuPy or loads native libraries (``backend.native``).

>>> from ember import backend, device
>>> be = backend.for_device(device.cpu())
>>> be.xp.__name__, be.alloc(8).nbytes
('numpy', 8)
>>> backend.num_gpus() >= 0
True
"""
from __future__ import annotations

import threading

from ember import config
from ember.backend import native
from ember.backend.cpu import NumpyBackend
from ember.backend.gpu import CupyBackend, probe
from ember.base import EmberError

__all__ = ['for_device', 'num_gpus', 'NumpyBackend', 'CupyBackend', 'native']

_backends: dict = {}
_lock = threading.Lock()


def for_device(dev):
    """The backend of device `dev` (one object per device, created on first use)."""
    found = _backends.get(dev)
    if found is not None:
        return found
    with _lock:
        if dev not in _backends:
            _backends[dev] = _create(dev)
        return _backends[dev]


def _create(dev):
    if dev.device_type != 'gpu':
        return NumpyBackend()
    cupy, count, why_none = probe()
    if cupy is None:
        raise EmberError(f'{dev}: no GPU backend: {why_none}')
    if dev.device_id >= count:
        raise EmberError(f'{dev}: no such GPU; this machine has {count} '
                         f'(gpu(0) to gpu({count - 1}))')
    return CupyBackend(cupy, dev.device_id)


def num_gpus() -> int:
    """How many CUDA devices CuPy sees (0 without CuPy or CUDA). Never raises."""
    return probe()[1]


config.register_reset('backend', native.reset)
