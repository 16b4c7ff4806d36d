"""A compiled graph run once on zeros: the trial run of a compilation, in which convolutions
measure and choose their algorithms (the artefact stores the choices), and the zeros that a
graph returns under NEURON_EXTRACT_GRAPHS_ONLY.

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.executor import pipeline
>>> from ember.passes.options import Options
>>> options = Options({'x': (2, 3)}, {'x': np.dtype('float32')})
>>> g = pipeline.compile_graph(sym.exp(sym.var('x')).to_graph(), options.shapes,
...                            options.dtypes)
>>> [o.asnumpy().tolist() for o in run_on_zeros(g, options)]
[[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]]
"""
from __future__ import annotations

import contextlib

from ember import engine, resource
from ember.executor.program import Program
from ember.ndarray.creation import zeros
from ember.passes.plan_memory import EXTERNAL

__all__ = ['run_on_zeros', 'ZeroProgram']


def run_on_zeros(graph, options) -> list:
    """Run `graph` (compiled) forward, and backward where it has a gradient, with every
    variable and every array outside the arena zeros; returns the outputs, written. The
    device's random streams are as they were afterwards: a seeded program draws the same
    numbers whether its graphs were compiled now or loaded."""
    device = _device(options)
    plan, shapes, dtypes = graph.attrs['memory_plan'], graph.attrs['shape'], graph.attrs['dtype']
    bound = {eid: zeros(shapes[eid], device, dtypes[eid])
             for eid, sid in enumerate(plan.storage) if sid == EXTERNAL}
    with _random_streams_kept(graph, device):
        program = Program(graph, device, bound)
        program.run('forward', bool(options.is_train))
        if graph.attrs.get('gradient') is not None:
            program.run('backward', True)
        outputs = program.outputs
        eng = engine.get()
        for array in list(outputs) + list(bound.values()):
            eng.wait_for_var(array._var)
    return outputs


@contextlib.contextmanager
def _random_streams_kept(graph, device):
    """The random streams' states (dropout states too), and which stream the next operator of
    each cycle takes, restored."""
    users = [node.op.resources for node in graph.nodes if node.op is not None]
    cycles = []
    for kinds, streams, take in resource.drawing_cycles(device):
        drawing = sum(1 for used in users if any(kind in used for kind in kinds))
        if drawing:
            cycles.append((streams, take, drawing))
    if not cycles:
        yield
        return
    eng = engine.get()
    streams = [stream for cycle in cycles for stream in cycle[0]]
    for stream in streams:
        eng.wait_for_var(stream.var)
    states = [(stream, stream.state()) for stream in streams]
    try:
        yield
    finally:
        for stream in streams:
            eng.wait_for_var(stream.var)
        for stream, state in states:
            stream.restore(state)
        # building the program took `drawing` streams round-robin: go round to where it was
        for cycle, take, drawing in cycles:
            for _ in range((len(cycle) - drawing % len(cycle)) % len(cycle)):
                take(device)


def _device(options):
    if options.device is not None:
        return options.device
    from ember.device import cpu
    return cpu()


class ZeroProgram:
    """What a graph recorded under NEURON_EXTRACT_GRAPHS_ONLY runs instead of its program:
    its forward writes zeros into outputs of the graph's shapes and dtypes (`graph` has them
    inferred), its backward zeros into the gradients it would write (`grads`)."""

    reuses_forward = False
    entries = ()

    def __init__(self, graph, device, grads):
        shapes, dtypes = graph.attrs['shape'], graph.attrs['dtype']
        self.device = device
        self.outputs = [zeros(shapes[graph.entry_id(e)], device, dtypes[graph.entry_id(e)])
                        for e in graph.outputs]
        self._grads = list(grads)

    def run(self, part, is_train, monitor=None):
        for array in self.outputs if part == 'forward' else self._grads:
            array[:] = 0
