"""Pooled storage per device.

``manager(dev)`` is the device's pool, built on first use from the configuration: the CPU
devices read the ``MXNET_CPU_MEM_*`` variables and the GPUs the ``MXNET_GPU_MEM_*`` ones (pool
type Naive, Round or Unpooled; the rounding sizes; the reserve percentage). These are read once;
``reset()`` drops every pool so that the next use reads them again.

>>> from ember import storage, device
>>> handle = storage.manager(device.cpu()).alloc(10)
>>> handle.buffer.nbytes >= 10
True
>>> handle.release()
>>> device.cpu().empty_cache()
>>> storage.manager(device.cpu()).stats()['cached']
0
"""
from __future__ import annotations

import threading

from ember import backend, config, device
from ember.storage.pool import (DevicePool, Handle, Naive, OutOfMemoryError, Pool, Round,
                                Unpooled)

__all__ = ['manager', 'reset', 'strategy_for', 'Pool', 'DevicePool', 'Handle', 'Naive', 'Round',
           'Unpooled', 'OutOfMemoryError']

_managers: dict = {}
_lock = threading.Lock()
# The device and pool of the last lookup: nearly every call asks for the same device, and
# comparing identities is cheaper than hashing a Device.
_last = (None, None)


def manager(dev) -> Pool:
    """The pool of device `dev`."""
    global _last
    last_device, pool = _last
    if last_device is dev:
        return pool
    pool = _managers.get(dev)
    if pool is None:
        pool = _create(dev)
    with _lock:
        if _managers.get(dev) is pool:      # not dropped by a reset meanwhile
            _last = (dev, pool)
    return pool


def _create(dev) -> Pool:
    be = backend.for_device(dev)  # outside the lock: it raises for a missing GPU
    prefix = _prefix(dev)
    with _lock:
        pool = _managers.get(dev)
        if pool is None:
            kind = DevicePool if hasattr(be, 'fence') else Pool
            pool = kind(dev, be, strategy_for(dev), config.get(prefix + 'MEM_POOL_RESERVE'),
                        profiler=_profiler_module())
            _managers[dev] = pool
        return pool


def _prefix(dev) -> str:
    return 'MXNET_GPU_' if dev.device_type == 'gpu' else 'MXNET_CPU_'


def strategy_for(dev):
    """The rounding strategy the configuration gives device `dev`'s pool.

    >>> from ember import config, device
    >>> with config.override(MXNET_CPU_MEM_POOL_TYPE='Round'):
    ...     strategy_for(device.cpu())
    Round(cutoff=24)
    """
    prefix = _prefix(dev)
    kind = config.get(prefix + 'MEM_POOL_TYPE')
    if kind == 'Naive':
        return Naive(config.get(prefix + 'MEM_LARGE_ALLOC_ROUND_SIZE'))
    if kind == 'Round':
        return Round(config.get(prefix + 'MEM_POOL_ROUND_LINEAR_CUTOFF'))
    return Unpooled()


def reset() -> None:
    """Drop every pool; buffers still on loan are freed when their handles release them."""
    global _last
    with _lock:
        pools = list(_managers.values())
        _managers.clear()
        _last = (None, None)
    for pool in pools:
        pool.close()


def _profiler_module():
    # the profiler is an optional layer below storage: pools record memory counters when it is
    # present and memory profiling is on
    try:
        from ember import profiler
    except ImportError:
        return None
    if not hasattr(profiler, 'memory_enabled'):
        return None
    return profiler


def _empty_cache(dev) -> None:
    manager(dev).empty_cache()


config.register_reset('storage', reset)
device._hooks.empty_cache = _empty_cache
