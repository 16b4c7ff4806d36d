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

from ember import engine
from ember.executor.program import Program
from ember.ndarray.creation import zeros
from ember.passes.plan_memory import EXTERNAL

__all__ = ['run_on_zeros', 'ZeroProgram']


def run_on_zeros(graph, options) -> list:
    """Run `graph` (compiled) forward, and backward where it has a gradient, with every
    variable and every array outside the arena zeros; returns the outputs, written."""
    device = _device(options)
    plan, shapes, dtypes = graph.attrs['memory_plan'], graph.attrs['shape'], graph.attrs['dtype']
    bound = {eid: zeros(shapes[eid], device, dtypes[eid])
             for eid, sid in enumerate(plan.storage) if sid == EXTERNAL}
    program = Program(graph, device, bound)
    program.run('forward', bool(options.is_train))
    if graph.attrs.get('gradient') is not None:
        program.run('backward', True)
    outputs = program.outputs
    eng = engine.get()
    for array in list(outputs) + list(bound.values()):
        eng.wait_for_var(array._var)
    return outputs


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
