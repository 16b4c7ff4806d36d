"""The array module and raw allocation of each device kind.

``for_device(dev)`` returns the device's backend: ``xp`` (numpy or cupy), ``alloc(nbytes)`` (a
flat uint8 array), ``total_memory()``, ``free_memory()``, ``synchronize()``, ``oom_errors`` (the
exceptions that mean "out of memory") and ``make_generator(seed_sequence)``; a GPU's also
``new_stream()``, ``fence()`` and ``await_fence(events)`` (``backend.gpu``). ``cpu_pinned``
memory is page-locked where a GPU exists. Only this package imports CuPy or loads native
libraries (``backend.native``, ``backend.onednn``, ``backend.cudnn``).

>>> from ember import backend, device
>>> be = backend.for_device(device.cpu())
>>> be.xp.__name__, be.alloc(8).nbytes
('numpy', 8)
>>> backend.num_gpus() >= 0
True
"""
from __future__ import annotations

import threading

import numpy as np

from ember import config
from ember.backend import native
from ember.backend.cpu import NumpyBackend
from ember.backend import gpu as _gpu
from ember.backend.gpu import CupyBackend, PinnedBackend, probe
from ember.base import EmberError

__all__ = ['for_device', 'num_gpus', 'NumpyBackend', 'CupyBackend', 'PinnedBackend', 'native',
           'copy_between', 'peer_matrix', 'to_host', 'write_from_host']

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
    if dev.device_type == 'cpu_pinned' and probe()[0] is not None:
        return PinnedBackend(probe()[0], NumpyBackend())
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


def peer_matrix(device_ids) -> list:
    """Rows of 0/1 for the GPUs `device_ids`: whether each can reach the other's memory
    directly (P2P); all 0 where ``MXNET_ENABLE_GPU_P2P`` is off or without GPUs."""
    matrix = _gpu.peer_matrix() if config.get('MXNET_ENABLE_GPU_P2P') else ()
    return [[matrix[a][b] if a < len(matrix) and b < len(matrix) else 0 for b in device_ids]
            for a in device_ids]


def copy_between(dst, src) -> None:
    """dst = src across devices (host <-> GPU, GPU <-> GPU) on the calling thread's stream;
    between GPUs peer to peer where ``MXNET_ENABLE_GPU_P2P`` and the hardware allow it,
    else through host memory."""
    _gpu.transfer(dst, src, config.get('MXNET_ENABLE_GPU_P2P'))


def to_host(raw, device):
    """A NumPy copy of the raw array of an array on `device`."""
    if type(raw) is np.ndarray:
        return raw.copy()
    return for_device(device).to_host(raw)


def write_from_host(raw, values, device) -> None:
    """raw[...] = values (a C-contiguous host array of raw's shape and dtype)."""
    if type(raw) is np.ndarray:
        np.copyto(raw, values)
    else:
        for_device(device).write_from_host(raw, values)


def _reset():
    native.reset()
    _gpu.reset()
    with _lock:
        # device backends read the tensor-core settings when made: made again from the new
        # configuration (the host's hold no settings)
        for dev in [d for d in _backends if d.device_type == 'gpu']:
            del _backends[dev]


config.register_reset('backend', _reset)
