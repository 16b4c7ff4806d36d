"""Rebuilding a graph node by node: what the rewriting passes (cse, subgraph, fusion, mirror)
share. Not a pass itself.

A :class:`Rewriter` walks the old graph's nodes in order; for each one a pass copies it, drops it
(pointing its outputs at entries already built), or adds new nodes in its place. Old entries are
translated to new ones with :meth:`Rewriter.new`, so a pass never renumbers by hand.

>>> from ember import symbol as sym
>>> graph = sym.relu(sym.var('x') * 2, name='r').to_graph()
>>> rw = Rewriter(graph)
>>> for position in range(len(graph.nodes)):
...     _ = rw.copy(position)
>>> [n.name for n in rw.finish().nodes] == [n.name for n in graph.nodes]
True
"""
from __future__ import annotations

import dataclasses

from ember.base import EmberError
from ember.symbol.graph import Entry, Graph, prune

__all__ = ['Rewriter', 'forward_count', 'graph_level_attrs', 'unique_name',
           'without_identities']


class Rewriter:
    """The new graph under construction from `graph`."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes = []
        self._entry_of = {}           # old Entry -> new Entry

    def new(self, entry: Entry) -> Entry:
        """The new entry standing for old `entry` (its node must be copied or aliased)."""
        return self._entry_of[entry]

    def add(self, node) -> int:
        """Append a new node (inputs already in new entries); its new position."""
        self.nodes.append(node)
        return len(self.nodes) - 1

    def copy(self, position: int, node=None) -> int:
        """Copy old node `position` (or put `node`, with old-entry inputs, in its place)."""
        node = self.graph.nodes[position] if node is None else node
        inputs = tuple(self.new(e) for e in node.inputs)
        return self.place(position, dataclasses.replace(node, inputs=inputs))

    def place(self, position: int, node) -> int:
        """Add `node` (inputs in new entries) as the replacement of old node `position`: its
        outputs stand for the old node's outputs, index by index."""
        new_position = self.add(node)
        for index in range(node.num_outputs):
            self._entry_of[Entry(position, index)] = Entry(new_position, index)
        return new_position

    def alias(self, old: Entry, new: Entry) -> None:
        """Old entry `old` is now computed by new entry `new`."""
        self._entry_of[old] = new

    def finish(self) -> Graph:
        """The new graph, without nodes its outputs no longer need."""
        outputs = [self.new(e) for e in self.graph.outputs]
        graph = prune(Graph(self.nodes, outputs)).replace(attrs=graph_level_attrs(self.graph))
        return _recount_forward(graph)


def without_identities(graph: Graph, positions) -> Graph:
    """`graph` without the nodes at `positions`, each an identity: its first output is its
    first input, and readers of it read that input instead (`graph` itself when none)."""
    if not positions:
        return graph
    rewriter = Rewriter(graph)
    for position, node in enumerate(graph.nodes):
        if position in positions:
            rewriter.alias(Entry(position, 0), rewriter.new(node.inputs[0]))
        else:
            rewriter.copy(position)
    return rewriter.finish()


def forward_count(graph: Graph):
    """How many nodes, from the first, are the forward part of a graph with a backward part
    (``attrs['gradient']`` from the gradient pass); None without one."""
    info = graph.attrs.get('gradient')
    return None if info is None else info.num_forward_nodes


def _recount_forward(graph):
    """Keep ``attrs['gradient'].num_forward_nodes`` true: the forward part is what the forward
    outputs reach, and it must still come first."""
    info = graph.attrs.get('gradient')
    if info is None:
        return graph
    reached = {e.node for e in graph.outputs[:info.num_forward_outputs]}
    for position in range(len(graph.nodes) - 1, -1, -1):
        if position in reached:
            reached.update(e.node for e in graph.nodes[position].inputs)
    if reached != set(range(len(reached))):
        raise EmberError('rewrite: the forward nodes no longer come first; a pass mixed the '
                         'forward and backward parts')
    info = dataclasses.replace(info, num_forward_nodes=len(reached))
    return graph.replace(attrs={**graph.attrs, 'gradient': info})


def graph_level_attrs(graph: Graph) -> dict:
    """The attrs that survive a rewrite: per-entry and per-node results (tuples and lists, such
    as ``shape`` and ``dtype``) no longer match the new entry ids, so they are dropped."""
    return {k: v for k, v in graph.attrs.items() if not isinstance(v, (tuple, list))}


def unique_name(name: str, taken: set) -> str:
    """`name`, or `name` with the first free numeric suffix; added to `taken`."""
    candidate, suffix = name, 1
    while candidate in taken:
        candidate = f'{name}{suffix}'
        suffix += 1
    taken.add(candidate)
    return candidate
