"""Storage-type inference: the storage type of every entry, decided before anything runs
(MXNet's ``FInferStorageType`` pass), and sparse entries taken out of the arena.

Variables take the storage type of the arrays they are bound to (``params``), else their
``__storage_type__`` attribute (``sym.var(stype=...)``), else dense; each operator's outputs
take what :func:`ember.op.sparse.decide` gives for its inputs' types (its sparse kernel, or
dense outputs). A graph with no sparse entry is returned unchanged. Otherwise the graph gets
``attrs['stype']`` (a tuple per entry id) and, when memory is planned already, a new plan in
which the sparse entries live outside the arena (their sizes are known only when their
kernels run); the entries the first plan kept outside stay outside.

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.passes import infer_shape, infer_type, infer_storage
>>> from ember.passes.options import Options
>>> x = sym.var('x', stype='csr')
>>> g = sym.dot(x, sym.var('w'), transpose_a=True, name='d').to_graph()
>>> options = Options({'x': (4, 3), 'w': (4, 2)}, {'x': np.float32, 'w': np.float32})
>>> g = infer_type.run(infer_shape.run(g, options), options)
>>> infer_storage.run(g, options).attrs['stype']
('csr', 'default', 'row_sparse')
"""
from __future__ import annotations

import logging

from ember.op import sparse
from ember.passes import plan_memory
from ember.passes.options import Options
from ember.passes.plan_memory import EXTERNAL

__all__ = ['run', 'infer', 'sparse_entries']

_log = logging.getLogger(__name__)
# symbol.py stores sym.var(stype=...) as this attribute, MXNet's number for the type
_STORAGE_NUMBERS = {'0': sparse.DEFAULT, '1': sparse.ROW_SPARSE, '2': sparse.CSR_TYPE}


def run(graph, options=Options()):
    """`graph` with ``attrs['stype']`` and sparse entries outside the arena, or `graph`
    itself when every entry is dense. ``options.params`` gives the bound arrays."""
    stypes = infer(graph, options.params)
    if all(stype == sparse.DEFAULT for stype in stypes):
        return graph
    graph = graph.replace(attrs={**graph.attrs, 'stype': stypes})
    _log.debug('infer_storage: %d sparse entries of %d', len(sparse_entries(graph)),
               graph.num_entries)
    plan = graph.attrs.get('memory_plan')
    if plan is None:
        return graph
    kept_out = {eid for eid, sid in enumerate(plan.storage)
                if sid == EXTERNAL and _is_output(graph, eid)}
    return plan_memory.plan(graph, external=kept_out | sparse_entries(graph))


def infer(graph, params=None) -> tuple:
    """The storage type of every entry, by entry id."""
    params = params or {}
    shapes = graph.attrs['shape']
    stypes = [sparse.DEFAULT] * graph.num_entries
    for position, node in enumerate(graph.nodes):
        first = graph.node_row_ptr[position]
        if node.op is None:
            stypes[first] = _variable_stype(node, params)
            continue
        ids = [graph.entry_id(e) for e in node.inputs]
        decided = sparse.decide(node.op, node.attrs, [stypes[i] for i in ids],
                                [shapes[i] for i in ids], node.num_outputs)
        stypes[first:first + node.num_outputs] = decided.out_stypes
    return tuple(stypes)


def sparse_entries(graph) -> set:
    """Entry ids whose storage type is not dense."""
    return {eid for eid, stype in enumerate(graph.attrs.get('stype', ()))
            if stype != sparse.DEFAULT}


def _variable_stype(node, params):
    bound = params.get(node.name)
    if bound is not None:
        return bound.stype
    return _STORAGE_NUMBERS.get(node.attr_text.get('__storage_type__', '0'), sparse.DEFAULT)


def _is_output(graph, eid):
    import bisect
    return graph.nodes[bisect.bisect_right(graph.node_row_ptr, eid) - 1].op is not None
