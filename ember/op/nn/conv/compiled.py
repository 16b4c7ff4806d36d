"""The compiled convolution kernels (``ember._winograd``, built by setup.py where a C compiler
is found) and how their calls run: the register-blocked products that the compiled Winograd
F(4x4, 3x3), the 1-D Winograd, the 1x1 kernels, the packed GEMM and FullyConnected's dense
kernel share, split over the calling thread's OpenMP team or the kernel threads
(:func:`run_compiled`), and a call worked out once to run again (:class:`Prepared`).

Without the module (no C compiler) :data:`MODULE` is None and every algorithm that needs it
declines; NumPy runs the convolutions.

>>> compiled_products() == (MODULE is not None)
True
"""
from __future__ import annotations

import types

from ember import config
from ember.backend import native
from ember.engine.threads import in_parallel_region, team_cores
from ember.op.nn.conv.common import run_parts

__all__ = ['MODULE', 'PANEL', 'compiled_products', 'run_compiled', 'round_up', 'same_view',
           'Prepared']

# the compiled module (None where it is not built)
MODULE = native.compiled_module('_winograd')

# Filters per panel of packed weights (PANEL in ember/_winograd.c).
PANEL = 16

# Whether run_compiled() uses the OpenMP team where the module has one (tests turn it off to
# run the kernel-pool path).
use_team = True


def compiled_products() -> bool:
    """Whether the compiled module (and so its products) is built."""
    return MODULE is not None


def run_compiled(kernel, elements, calls) -> None:
    """``kernel(*args)`` for each tuple in `calls`, `kernel` one of the compiled module's:
    at once where the `elements` of work reach ``MXNET_CPU_PARALLEL_SIZE``, on the calling
    thread's OpenMP team where the module has one (``team``: oneDNN's threads, still
    spinning from the last kernel), else on the kernel threads; one after the other inside a
    split (:func:`ember.engine.in_parallel_region`) or below the size."""
    if len(calls) > 1 and elements >= config.get('MXNET_CPU_PARALLEL_SIZE') \
            and not in_parallel_region():
        if MODULE.openmp and use_team and isinstance(kernel, types.BuiltinFunctionType):
            MODULE.team(kernel, calls, team_cores(len(calls)))
            return
        run_parts(len(calls), elements, lambda index: kernel(*calls[index]), blas=False)
        return
    for args in calls:
        kernel(*args)


def round_up(n, step):
    return -(-n // step) * step


def same_view(a, b) -> bool:
    """Whether `a` and `b` are the same elements of the same memory, as their own objects."""
    return (a.shape == b.shape and a.strides == b.strides and a.dtype == b.dtype
            and a.__array_interface__['data'][0] == b.__array_interface__['data'][0])


class Prepared:
    """A compiled F(4x4) or line call worked out once (its split, chunks and arguments), to
    run again on the same arrays while the transformed weights kept for its weight version
    are the ones it was worked out with (`u`, kept in `store`; None where the call
    transforms them itself, fused: it then reads the weights as they are). Each run takes its
    scratch afresh (a later request may move the temp space)."""

    __slots__ = ('u', 'specs', 'alloc', 'convolve', 'store')

    def __init__(self, u, specs, alloc, convolve, store):
        self.u, self.specs, self.alloc, self.convolve = u, specs, alloc, convolve
        self.store = store

    def run(self, weight_version) -> bool:
        """Runs the call again; False (nothing written) when the weights kept for
        `weight_version` are not the ones it was worked out with."""
        if self.u is not None and self.store.get(weight_version) is not self.u:
            return False
        self.convolve(*self.alloc(self.specs))
        return True
