"""The CUDA backend: CuPy arrays in raw device allocations.

Only this module imports CuPy. Buffers come straight from cudaMalloc rather than from CuPy's own
memory pool, because Ember's storage layer is the pool: a second pool underneath would keep
memory that ``empty_cache()`` and the reserve check believe they returned to the device.
"""
from __future__ import annotations

import functools

import numpy as np

_CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation


@functools.cache
def probe():
    """(cupy module or None, number of CUDA devices, why there is none). Never raises."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install failing at import
        return None, 0, f'CuPy is not installed ({exc}); install cupy-cuda12x'
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when there is no driver or no device
        return None, 0, f'no CUDA device ({exc})'
    if count == 0:
        return None, 0, 'no CUDA device'
    return cupy, count, ''


def device_names() -> list:
    """The model name of every CUDA device (none without CuPy or a GPU)."""
    cupy, count, _ = probe()
    return [_name(cupy.cuda.runtime.getDeviceProperties(i)['name']) for i in range(count)]


def _name(raw):
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class CupyBackend:
    """Arrays of one CUDA device: ``xp`` is CuPy. Needs CuPy and a GPU (see ``probe``)."""

    kind = 'gpu'

    def __init__(self, cupy, device_id: int):
        self.xp = cupy
        self.device_id = device_id
        self._cuda_device = cupy.cuda.Device(device_id)
        self.oom_errors = (cupy.cuda.memory.OutOfMemoryError, MemoryError)

    def alloc(self, nbytes: int):
        """A flat uint8 CuPy array of `nbytes` (cudaMalloc aligns to 256 bytes)."""
        cupy = self.xp
        with self._cuda_device:
            memory = self._malloc(nbytes)
            pointer = cupy.cuda.MemoryPointer(memory, 0)
            return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=pointer)

    def _malloc(self, nbytes):
        cupy = self.xp
        try:
            return cupy.cuda.memory.Memory(nbytes)
        except cupy.cuda.runtime.CUDARuntimeError as exc:
            if exc.status != _CUDA_ERROR_MEMORY_ALLOCATION:
                raise
            # the pool retries on OutOfMemoryError after releasing its cache
            raise cupy.cuda.memory.OutOfMemoryError(nbytes, self.total_memory()) from exc

    def total_memory(self) -> int:
        return self._mem_info()[1]

    def free_memory(self) -> int:
        return self._mem_info()[0]

    def compute_capability(self) -> int:
        """The CUDA compute capability as an int (8.6 gives 86)."""
        return int(self._cuda_device.compute_capability)

    def _mem_info(self):
        with self._cuda_device:
            return self.xp.cuda.runtime.memGetInfo()

    def synchronize(self) -> None:
        """Wait for every kernel queued on this device."""
        self._cuda_device.synchronize()

    def make_generator(self, seed_sequence: np.random.SeedSequence):
        """A CuPy generator (XORWOW) seeded from `seed_sequence`, with the methods of NumPy's
        ``Generator`` that the operators call (see :class:`DeviceGenerator`)."""
        seed = int(seed_sequence.generate_state(1, np.uint64)[0] >> 1)  # fits a signed int64
        with self._cuda_device:
            return DeviceGenerator(self.xp, self.xp.random.Generator(self.xp.random.XORWOW(seed)))


class DeviceGenerator:
    """NumPy's ``Generator`` interface over a CuPy generator, drawing on the device.

    CuPy's ``Generator`` lacks some of NumPy's methods (``normal``, ``negative_binomial``,
    ``permutation``); they are built here from the ones it has, and every other method is
    CuPy's own."""

    def __init__(self, cupy, generator):
        self._xp, self._gen = cupy, generator

    def __getattr__(self, name):
        return getattr(self._gen, name)

    def normal(self, loc=0.0, scale=1.0, size=None):
        return loc + scale * self._gen.standard_normal(size)

    def negative_binomial(self, n, p, size=None):
        """Failures before the n-th success: Poisson with a Gamma(n, (1-p)/p) mean."""
        if p == 1:
            return self._xp.zeros(size, dtype=np.int64)
        return self._gen.poisson(self._gen.gamma(n, (1 - p) / p, size))

    def permutation(self, n):
        return self._xp.argsort(self._gen.random(n))
