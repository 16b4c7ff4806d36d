"""Common-subexpression elimination: nodes with the same operator, attributes and inputs are
computed once (``MXNET_ELIMINATE_COMMON_EXPR``, on by default).

Two nodes merge when their operator, parsed attributes (:meth:`OpDef.attrs_key`), user attributes
and inputs (after earlier merges) are equal. Never merged: variables, random operators, operators
that update an input (optimizer updates, BatchNorm's moving statistics), custom operators (user
code may keep state), and nodes whose outputs are graph outputs (each output keeps its own node
so that output arrays never alias). Runs on any graph, forward or forward+backward; run it before
:mod:`~ember.passes.mirror`, whose recomputed nodes differ from their originals only by the user
attribute ``__mirror_of__`` (which keeps them apart here).

>>> from ember import symbol as sym
>>> from ember.passes import cse
>>> x = sym.var('x')
>>> out = sym.exp(x, name='a') + sym.exp(x, name='b')
>>> len(out.to_graph().nodes), len(cse.run(out.to_graph()).nodes)
(4, 3)
"""
from __future__ import annotations

import logging

from ember import config
from ember.passes._rewrite import Rewriter
from ember.passes.options import Options
from ember.symbol.graph import Entry

__all__ = ['run']

OPT_LEVEL = 1       # an optimisation: off under -O0 (NEURON_CC_FLAGS)

_log = logging.getLogger(__name__)

# Operators whose every call must run: user code behind them may keep state (MXNet's
# FCreateOpState operators are never merged either).
_STATEFUL = frozenset({'Custom', '_backward_Custom'})


def run(graph, options=Options()):
    """`graph` with duplicate computations merged into their first occurrence; the same graph
    object when nothing merges or ``MXNET_ELIMINATE_COMMON_EXPR`` is off."""
    if not config.get('MXNET_ELIMINATE_COMMON_EXPR'):
        return graph
    rewriter, first_of, merged = Rewriter(graph), {}, 0
    output_nodes = {entry.node for entry in graph.outputs}
    for position, node in enumerate(graph.nodes):
        key = _key(node, rewriter) if _mergeable(node) else None
        kept = first_of.get(key) if key is not None else None
        if kept is not None and position not in output_nodes:
            for index in range(node.num_outputs):
                rewriter.alias(Entry(position, index), Entry(kept, index))
            merged += 1
            continue
        new_position = rewriter.copy(position)
        if key is not None:
            first_of.setdefault(key, new_position)
    if not merged:
        return graph
    result = rewriter.finish()
    _log.debug('cse: merged %d nodes, %d -> %d', merged, len(graph.nodes), len(result.nodes))
    return result


def _mergeable(node) -> bool:
    op = node.op
    return (op is not None and not op.random and 'random' not in op.resources
            and op.name not in _STATEFUL and not op.mutate_indices(node.attrs))


def _key(node, rewriter) -> tuple:
    user = tuple(sorted(node.user_attrs.items()))
    inputs = tuple(rewriter.new(e) for e in node.inputs)
    return node.op.name, node.op.attrs_key(node.attrs), user, inputs
