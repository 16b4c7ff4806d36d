"""A training graph's forward nodes (those its forward outputs need) first, before memory
planning: the executor runs ``nodes[:num_forward_nodes]`` in forward and the rest in backward,
and passes after the gradient pass may have moved or merged nodes. ``num_forward_nodes`` is
counted again; a graph without a backward part comes back unchanged.

>>> from ember import symbol as sym
>>> from ember.passes import forward_first, gradient
>>> g = gradient.with_gradients(sym.exp(sym.var('x'), name='e').to_graph())
>>> forward_first.run(g).attrs['gradient'].num_forward_nodes
2
"""
from __future__ import annotations

import dataclasses

from ember.base import EmberError
from ember.passes.options import Options
from ember.symbol.graph import Entry, Graph

__all__ = ['run']


def run(graph, options=Options()):
    """`graph` with its forward nodes first and ``attrs['gradient']`` counting them."""
    info = graph.attrs.get('gradient')
    if info is None:
        return graph
    forward = _needed(graph, graph.outputs[:info.num_forward_outputs])
    heads = {name for _, name in info.head_grads}
    late = sorted(p for p in forward if graph.nodes[p].name in heads)
    if late:
        raise EmberError(f'a graph pass made the forward outputs depend on the head gradient '
                         f'{graph.nodes[late[0]].name!r}; forward and backward nodes must not '
                         f'be merged')
    order = sorted(forward) + [p for p in range(len(graph.nodes)) if p not in forward]
    info = dataclasses.replace(info, num_forward_nodes=len(forward))
    if order == list(range(len(graph.nodes))):
        return graph.replace(attrs={**graph.attrs, 'gradient': info})
    return _reordered(graph, order, info)


def _needed(graph, entries):
    needed = {e.node for e in entries}
    for position in range(len(graph.nodes) - 1, -1, -1):
        if position in needed:
            needed.update(e.node for e in graph.nodes[position].inputs)
    return needed


def _reordered(graph, order, info):
    new_position = {old: new for new, old in enumerate(order)}

    def remap(entry):
        return Entry(new_position[entry.node], entry.index)
    nodes = [dataclasses.replace(graph.nodes[old], inputs=tuple(map(remap,
                                                                    graph.nodes[old].inputs)))
             for old in order]
    attrs = {k: v for k, v in graph.attrs.items() if not isinstance(v, (tuple, list))}
    return Graph(nodes, [remap(e) for e in graph.outputs], {**attrs, 'gradient': info})
