"""NumPy kernels on any device: a GPU's arrays go through the host.

The operator families written for NumPy (linalg, contrib, spatial, ...) declare themselves
with :func:`register`, which wraps each kernel so that on a device whose array module is not
NumPy the inputs are copied to the host, the kernel runs there (with a host generator seeded
from the device's stream, so seeding still orders the draws), and the outputs and the inputs
it updates in place are copied back. On the CPU the kernel runs as it is.

>>> import numpy as np
>>> from ember.op.host import on_host
>>> calls = []
>>> kernel = on_host(lambda attrs, ins, outs, ctx: calls.append(type(ins[0]).__name__))
>>> from ember.op.registry import KernelContext
>>> kernel({}, [np.ones(2)], [np.empty(2)], KernelContext(None))
>>> calls
['ndarray']
"""
from __future__ import annotations

import dataclasses
import types

import numpy as np

from ember.op import registry

__all__ = ['on_host', 'register']


def _to_host(array):
    """A NumPy copy of a device array (CuPy's ``get``)."""
    return array.get() if hasattr(array, 'get') else np.array(array)


def _host_random(ctx):
    if ctx.random is None:
        return None
    seed = int(ctx.random.generator.integers(0, 2 ** 62))
    return types.SimpleNamespace(generator=np.random.default_rng(seed))


def on_host(kernel, mutate=()):
    """`kernel` for any device: on a non-NumPy device it runs on host copies, and its outputs
    and the inputs `mutate` names (indices, or a function of the attributes) are copied
    back."""
    def run(attrs, ins, outs, ctx):
        if ctx.xp is np:
            return kernel(attrs, ins, outs, ctx)
        host_ins = [_to_host(x) for x in ins]
        host_outs = [np.empty(o.shape, o.dtype) for o in outs]
        host_ctx = dataclasses.replace(ctx, xp=np, random=_host_random(ctx), temp=None)
        kernel(attrs, host_ins, host_outs, host_ctx)
        for out, value in zip(outs, host_outs):
            out[...] = ctx.xp.asarray(value)
        for index in (mutate(attrs) if callable(mutate) else mutate):
            ins[index][...] = ctx.xp.asarray(host_ins[index])
    run.__name__ = getattr(kernel, '__name__', 'kernel')
    run.__doc__ = kernel.__doc__
    return run


def register(name, kernel, **fields):
    """:func:`ember.op.registry.register` with the kernel wrapped by :func:`on_host`."""
    return registry.register(name, on_host(kernel, fields.get('mutate', ())), **fields)
