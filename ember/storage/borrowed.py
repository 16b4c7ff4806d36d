"""Storage borrowed from a buffer that no pool owns: a decoded image, a shared-memory mapping.

An NDArray needs of its storage handle what a pool's :class:`~ember.storage.pool.Handle` has:
``buffer`` (a flat uint8 host array), ``nbytes``, ``size``, ``device``, ``zeroed`` and
``release``. A ``Borrowed`` handle has them over someone else's memory, which it keeps alive;
nothing returns to a pool when the array goes.

>>> import numpy as np
>>> pixels = np.arange(6, dtype=np.uint8)
>>> handle = Borrowed(pixels)
>>> handle.nbytes, bool(np.shares_memory(handle.buffer, pixels))
(6, True)
"""
from __future__ import annotations

import numpy as np

from ember.device import cpu

__all__ = ['Borrowed']


class Borrowed:
    """A storage handle over the bytes of the C-contiguous host array `array`."""

    __slots__ = ('buffer', 'nbytes', 'size', 'device', 'zeroed')

    def __init__(self, array, device=None):
        if not array.flags.c_contiguous:
            raise ValueError('Borrowed: the array must be C-contiguous')
        self.buffer = array.reshape(-1).view(np.uint8)
        self.nbytes = self.size = self.buffer.size
        self.device = device or cpu()
        self.zeroed = False

    @property
    def released(self) -> bool:
        return self.buffer is None

    def release(self, cache: bool = True) -> None:
        """Let go of the buffer (its owner frees it when nothing else holds it)."""
        self.buffer = None
