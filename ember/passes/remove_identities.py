"""Identity nodes go before the inference rewrites: ``_copy`` (``identity``), and ``Dropout`` in
its default 'training' mode (an identity outside training) whose mask nobody reads. Off in
training and with ``MXNET_SUBGRAPH_BACKEND=NONE`` (:mod:`ember.passes.subgraph`).

>>> from ember import symbol as sym
>>> from ember.passes import remove_identities
>>> net = sym.relu(sym.Dropout(sym.var('x'), p=0.5, name='d'), name='r')
>>> [n.name for n in remove_identities.run(net.to_graph()).nodes]
['x', 'r']
"""
from __future__ import annotations

from ember.passes import subgraph
from ember.passes.options import Options
from ember.passes._rewrite import without_identities
from ember.symbol.graph import Entry

__all__ = ['run']

OPT_LEVEL = 1       # an optimisation: off under -O0 (NEURON_CC_FLAGS)


def run(graph, options=Options()):
    """`graph` without its identity nodes; the same graph when there are none."""
    if not subgraph.enabled() or options.is_train:
        return graph
    reads = subgraph.Reads(graph)
    removable = {position for position, node in enumerate(graph.nodes)
                 if _is_identity(node) and position not in reads.outputs
                 and (node.num_outputs == 1 or reads.unread(Entry(position, 1)))}
    return without_identities(graph, removable)


def _is_identity(node):
    if subgraph.is_op(node, 'Dropout'):
        return node.attrs['mode'] == 'training'
    return subgraph.is_op(node, '_copy')
