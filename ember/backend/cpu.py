"""The host backend: NumPy arrays in 64-byte aligned buffers (2 MiB aligned from 2 MiB, for
huge pages), memory figures from /proc/meminfo.

>>> from ember.backend.cpu import NumpyBackend
>>> buf = NumpyBackend().alloc(100)
>>> buf.dtype.name, buf.shape, buf.ctypes.data % 64
('uint8', (100,), 0)
>>> NumpyBackend().alloc(4 << 20).ctypes.data % (2 << 20)
0
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os

import numpy as np

ALIGNMENT = 64  # a cache line, and the widest vector register (AVX-512) oneDNN loads from
# Buffers of at least this many bytes start on a boundary of it: the size of a transparent huge
# page on x86-64. NumPy asks the kernel for huge pages (madvise) on allocations of 4 MiB and
# more, but its buffers start anywhere, so only the 2 MiB-aligned stretches inside them get
# huge pages: about half of a 4 MiB array. An aligned buffer is covered whole. All-reducing
# four 4 MiB arrays over MPI (2 ranks) took 1.24 ms per array aligned, 1.48 as NumPy places
# them and 1.79 on small pages only: copying through shared memory misses the TLB less. The
# padding before and after is address space only: it is never written, so never mapped.
HUGE_PAGE = 2 << 20
_MEMINFO = '/proc/meminfo'


class NumpyBackend:
    """Arrays of one host device (cpu or cpu_pinned): ``xp`` is NumPy."""

    xp = np
    kind = 'cpu'
    oom_errors = (MemoryError,)
    zeroed = True       # alloc's buffers read as zeros

    def alloc(self, nbytes: int) -> np.ndarray:
        """A flat uint8 array of zeros, `nbytes` long, whose first byte is 64-byte aligned
        (:data:`HUGE_PAGE` aligned from :data:`HUGE_PAGE` bytes on).

        Zeros through calloc: a large buffer is mapped from the system untouched, so it takes
        no physical memory until written, and an array of zeros made on it needs no fill (a
        model's gradient arrays cost nothing until a backward pass writes them)."""
        alignment = HUGE_PAGE if nbytes >= HUGE_PAGE else ALIGNMENT
        # (from 2 MiB the allocation is at least 4 MiB, which NumPy advises for huge pages)
        raw = np.zeros(nbytes + alignment, dtype=np.uint8)
        start = -raw.ctypes.data % alignment
        return raw[start:][:nbytes]  # in two steps: NumPy keeps an empty slice at the base

    def total_memory(self) -> int:
        """Bytes of physical memory (MemTotal)."""
        return _meminfo_bytes(b'MemTotal:')

    def free_memory(self) -> int:
        """Bytes that can be allocated without swapping (MemAvailable)."""
        return _meminfo_bytes(b'MemAvailable:')

    def synchronize(self) -> None:
        """Host kernels finish before they return: nothing to wait for."""

    def make_generator(self, seed_sequence: np.random.SeedSequence) -> np.random.Generator:
        """A PCG64 generator seeded from `seed_sequence`."""
        return np.random.Generator(np.random.PCG64(seed_sequence))


def _meminfo_bytes(key: bytes) -> int:
    # os.read of one page is the cheapest way to read this small file (the pool reads it
    # before allocating while it holds a cache)
    fd = os.open(_MEMINFO, os.O_RDONLY)
    try:
        text = os.read(fd, 8192)
    finally:
        os.close(fd)
    start = text.index(key) + len(key)
    return int(text[start:text.index(b'kB', start)]) * 1024


def return_free_heap() -> bool:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``); False where
    the C library has no such call.

    NumPy's temporaries come from malloc. After many of them are freed (binding a graph folds
    and transposes every weight on the host), glibc keeps the freed pages for the process,
    because its threshold for returning memory rises with the sizes it has seen: resnet50_v1
    inference at batch 8 held 100 MB more than it used. Trimming once after such a burst
    returns them; trimming always (``MALLOC_TRIM_THRESHOLD_=0``) would also return the pages
    of every training temporary and fault them in again, 17% slower per step here.

    >>> return_free_heap() in (True, False)
    True
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


_TRIM: list = []


def _malloc_trim():
    if not _TRIM:
        name = ctypes.util.find_library('c')
        function = getattr(ctypes.CDLL(name), 'malloc_trim', None) if name else None
        if function is not None:
            function.argtypes, function.restype = [ctypes.c_size_t], ctypes.c_int
        _TRIM.append(function)
    return _TRIM[0]
