"""Per-device temporary workspaces and random-number streams, handed out round-robin.

A device has ``MXNET_CPU_TEMP_COPY`` workspaces and ``MXNET_CPU_PARALLEL_RAND_COPY`` random
streams (``MXNET_GPU_*`` on a GPU). A GPU also has ``MXNET_GPU_CUDNN_DROPOUT_STATE_COPY``
dropout states, the random streams that Dropout draws its masks from there (on the CPU it draws
from the random streams). Each copy carries an engine variable; an operator that uses a copy
adds ``copy.var`` to the variables it writes, so operators given the same copy run one after
the other and more copies let more of them run at once.

>>> from ember import resource, device
>>> space = resource.temp_space(device.cpu())
>>> space.get((2, 3), 'float32').shape
(2, 3)
>>> resource.seed(7)
>>> stream = resource.random_stream(device.cpu())
>>> from ember import engine
>>> engine.get().wait_for_var(stream.var)   # seed() is ordered after pending draws
>>> first = stream.generator.random()
>>> resource.seed(7)
>>> engine.get().wait_for_var(stream.var)
>>> stream.generator.random() == first
True
"""
from __future__ import annotations

import itertools
import operator
import threading

import numpy as np

from ember import backend, config, engine, storage
from ember.base import dtype_of, prod

__all__ = ['TempSpace', 'RandomStream', 'temp_space', 'random_stream', 'dropout_state', 'drawing_cycles', 'seed',
           'copies', 'reset', 'DEFAULT_SEED']

DEFAULT_SEED = 0  # streams start seeded, as in MXNet: unseeded programs draw the same numbers


class TempSpace:
    """A workspace that grows to the largest request and is kept between uses."""

    def __init__(self, device, index: int, var):
        self.device = device
        self.index = index
        self.var = var
        self._handle = None
        # arrays carved from the buffer per request (ember.op.nn._common.scratch), forgotten
        # when the buffer goes: a node asks for the same scratch on every call
        self.carved = {}

    def get(self, shape, dtype='float32'):
        """A C-contiguous array of `shape` and `dtype` on the workspace's buffer.

        A view stays valid until the next ``get`` that needs a larger buffer; the contents are
        not initialised.
        """
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = dtype_of(dtype)
        nbytes = prod(shape) * dtype.itemsize
        if self._handle is None or self._handle.size < nbytes:
            self._grow(nbytes)
        return self._handle.buffer[:nbytes].view(dtype).reshape(shape)

    def _grow(self, nbytes):
        self.carved.clear()
        if self._handle is not None:
            # a workspace only grows, so no later request fits the outgrown size: free it
            self._handle.release(cache=False)
        self._handle = storage.manager(self.device).alloc(nbytes)

    def release(self) -> None:
        """Free the buffer (the next ``get`` allocates again): for a user that held it
        once, such as an algorithm measured and not chosen."""
        self.carved.clear()
        if self._handle is not None:
            self._handle.release(cache=False)
            self._handle = None

    @property
    def capacity(self) -> int:
        """Bytes of the current buffer (0 before the first ``get``)."""
        return 0 if self._handle is None else self._handle.size

    def __repr__(self):
        return f'<TempSpace {self.index} on {self.device}: {self.capacity} bytes>'


class RandomStream:
    """A random generator of one device; ``generator`` is replaced when the stream is seeded."""

    def __init__(self, device, index: int, var, generator):
        self.device = device
        self.index = index
        self.var = var
        self.generator = generator

    def state(self):
        """The generator's state now, which :meth:`restore` puts back."""
        generator = self.generator
        if hasattr(generator, 'snapshot'):                  # a device's generator
            return generator.snapshot()
        return generator.bit_generator.state

    def restore(self, state) -> None:
        generator = self.generator
        if hasattr(generator, 'snapshot'):
            generator.restore(state)
        else:
            generator.bit_generator.state = state

    def __repr__(self):
        return f'<RandomStream {self.index} on {self.device}>'


class _DeviceResources:
    """The copies of one device and the round-robin cycles over them."""

    def __init__(self, dev, seed_value):
        kind = 'GPU' if dev.device_type == 'gpu' else 'CPU'
        new_var = engine.get().new_var
        make_generator = backend.for_device(dev).make_generator
        self.device = dev
        self.temp = tuple(TempSpace(dev, i, new_var(carries_errors=False))
                          for i in range(config.get(f'MXNET_{kind}_TEMP_COPY')))
        self.random = tuple(RandomStream(dev, i, new_var(carries_errors=False),
                                         make_generator(_seed_sequence(seed_value, dev, i)))
                            for i in range(config.get(f'MXNET_{kind}_PARALLEL_RAND_COPY')))
        # a GPU's dropout states are streams of their own, numbered after the random ones
        count = len(self.random)
        self.dropout = self.random if kind == 'CPU' else tuple(
            RandomStream(dev, count + i, new_var(carries_errors=False),
                         make_generator(_seed_sequence(seed_value, dev, count + i)))
            for i in range(config.get('MXNET_GPU_CUDNN_DROPOUT_STATE_COPY')))
        self.next_temp = itertools.cycle(self.temp).__next__  # C-level: atomic across threads
        self.next_random = itertools.cycle(self.random).__next__
        self.next_dropout = (self.next_random if kind == 'CPU'
                             else itertools.cycle(self.dropout).__next__)


_devices: dict = {}
_lock = threading.Lock()
_global_seed = DEFAULT_SEED


def _resources(dev) -> _DeviceResources:
    found = _devices.get(dev)
    if found is not None:
        return found
    with _lock:
        if dev not in _devices:
            _devices[dev] = _DeviceResources(dev, _global_seed)
        return _devices[dev]


def temp_space(dev) -> TempSpace:
    """The next temporary workspace of device `dev` (round-robin)."""
    return _resources(dev).next_temp()


def random_stream(dev) -> RandomStream:
    """The next random stream of device `dev` (round-robin)."""
    return _resources(dev).next_random()


def dropout_state(dev) -> RandomStream:
    """The next dropout state of device `dev` (round-robin); on the CPU its random stream."""
    return _resources(dev).next_dropout()


def drawing_cycles(dev) -> tuple:
    """The round-robin cycles of random streams of device `dev`, each as (the resource kinds
    that take from it, its streams, the function taking the next): one on the CPU, whose dropout
    draws from the random streams, two on a GPU, whose dropout states are streams of their own."""
    found = _resources(dev)
    if found.dropout is found.random:
        return ((('random', 'dropout'), found.random, random_stream),)
    return ((('random',), found.random, random_stream),
            (('dropout',), found.dropout, dropout_state))


def copies(dev) -> tuple[tuple[TempSpace, ...], tuple[RandomStream, ...]]:
    """Every workspace and every random stream of device `dev`."""
    found = _resources(dev)
    return found.temp, found.random


def seed(seed_value: int, device=None) -> None:
    """Reseed the random streams of `device`, or of every device when it is None.

    Stream i of a device gets a seed derived from (seed_value, device, i), so the same seed
    gives the same draws. Reseeding goes through the engine as a write of each stream's
    variable: operators pushed before it draw from the old state, those pushed after from the
    new one.
    """
    global _global_seed
    try:
        seed_value = operator.index(seed_value)
    except TypeError:
        raise TypeError(f'seed {seed_value!r}: expected an integer') from None
    if device is None:
        with _lock:
            _global_seed = seed_value  # devices first used later start from it too
            targets = list(_devices.values())
    else:
        targets = [_resources(device)]
    for resources in targets:
        for stream in dict.fromkeys(resources.random + resources.dropout):
            _push_reseed(stream, seed_value)


def _push_reseed(stream, seed_value):
    generator = backend.for_device(stream.device).make_generator(
        _seed_sequence(seed_value, stream.device, stream.index))

    def reseed():
        stream.generator = generator

    engine.get().push(reseed, [], [stream.var], stream.device, name='random_seed')


def _seed_sequence(seed_value, dev, index) -> np.random.SeedSequence:
    # MXNet accepts any C int as a seed; SeedSequence wants a non-negative one
    return np.random.SeedSequence(seed_value % 2**64,
                                  spawn_key=(dev.device_typeid, dev.device_id, index))


def reset() -> None:
    """Drop every device's copies; the next request builds them from the configuration."""
    with _lock:
        _devices.clear()


config.register_reset('resource', reset)
