"""Mirroring: recompute cheap forward values in the backward pass instead of keeping them
(``MXNET_BACKWARD_DO_MIRROR=1``), trading compute for memory as MXNet's memonger does.

It runs on a forward+backward graph (after the gradient pass, before fusion and memory
planning); a graph without a backward part comes back unchanged. The forward part is what the
graph's first ``attrs['num_forward_outputs']`` outputs depend on (the gradient pass writes it),
else the first ``attrs['gradient'].num_forward_nodes`` nodes; every other node is backward. A
backward node that reads a forward value computed by a cheap operator reads a copy instead,
``<name>_mirror``, placed right before the first backward node that needs it, so the memory
planner can free the forward value as soon as the forward part is done with it. A mirror's
inputs are mirrors too where their operators are cheap, up to chains of :data:`MAX_DEPTH`
recomputed nodes; beyond that it reads the kept forward values.

Cheap means anything but Convolution, FullyConnected, Concat, SoftmaxOutput and Dropout, as in
MXNet, less random operators and operators that update an input. BatchNorm updates its moving
statistics, so it is not run again: its mirror is a ``_bn_apply`` node that applies the batch
mean and inverse std the forward node output (hidden outputs 1 and 2, per-channel vectors kept
instead of the big output) with BatchNorm's formula. Only output 0 is recomputed; backward
nodes read the statistics from the forward node.
A node with the user attribute ``__force_mirroring__='True'`` is mirrored whatever its
operator, even when the variable is off, as in MXNet (unless it is random or updates an input
other than BatchNorm's moving statistics).
The copies compute exactly what the originals did, so gradients stay identical. A mirror
carries the user attribute ``__mirror_of__`` (its original's name), which also keeps
:mod:`~ember.passes.cse` from merging it back.

>>> from ember import config, symbol as sym
>>> from ember.passes import mirror
>>> x = sym.var('x')
>>> y = sym.tanh(x, name='t')
>>> dy = sym._backward_Activation(sym.var('head'), y, act_type='tanh', name='grad')
>>> graph = sym.Group([y, dy]).to_graph()
>>> graph = graph.replace(attrs={'num_forward_outputs': 1})     # y; then its gradient
>>> with config.override(MXNET_BACKWARD_DO_MIRROR=True):
...     mirrored = mirror.run(graph)
>>> [n.name for n in mirrored.nodes]
['x', 't', 'head', 't_mirror', 'grad']
"""
from __future__ import annotations

import dataclasses
import logging

from ember import config
from ember.base import EmberError
from ember.op import registry
from ember.passes._rewrite import Rewriter, forward_count
from ember.passes.options import Options
from ember.symbol.graph import Entry

__all__ = ['run', 'MAX_DEPTH', 'EXPENSIVE']

_log = logging.getLogger(__name__)

# Operators never recomputed: costly, or their output must not be recomputed.
EXPENSIVE = frozenset({'Convolution', 'FullyConnected', 'Concat', 'SoftmaxOutput', 'Dropout'})
# The longest chain of nodes one backward use may recompute.
MAX_DEPTH = 8


def run(graph, options=Options()):
    """`graph` with mirrors of its cheap forward nodes feeding the backward nodes; the same
    graph object when nothing is mirrored or the graph has no backward part."""
    forced = [_forced(node) for node in graph.nodes]
    enabled = config.get('MXNET_BACKWARD_DO_MIRROR')
    if not enabled and not any(forced):
        return graph
    forward = _forward_nodes(graph, graph.attrs.get('num_forward_outputs'))
    if forward is None:
        return graph
    candidates = [position in forward and _mirrorable(node, enabled, forced[position])
                  for position, node in enumerate(graph.nodes)]
    depth = _depths(graph, candidates)
    result = _Mirrorer(graph, forward, candidates, depth).build()
    if result is None:
        return graph
    _log.debug('mirror: %d nodes recomputed in backward, %d -> %d nodes',
               len(result.nodes) - len(graph.nodes), len(graph.nodes), len(result.nodes))
    return result


def _forced(node) -> bool:
    return node.attr_text.get('__force_mirroring__', '').lower() in ('true', '1')


def _mirrorable(node, enabled, forced) -> bool:
    op = node.op
    if op is None or op.random or 'random' in op.resources:
        return False    # a second run would draw other numbers
    if op.mutate_indices(node.attrs) and not _applies_batch_stats(node):
        return False    # a second run would update the state again
    return forced or (enabled and op.name not in EXPENSIVE)


def _applies_batch_stats(node) -> bool:
    """Whether the mirror of `node` is a ``_bn_apply`` of its statistics, not a copy.

    Under MXNET_SAFE_ACCUMULATION float32 statistics are computed in float64 and rounded when
    stored, so applying the stored ones would not reproduce the output bit for bit."""
    return node.op.name == 'BatchNorm' and not config.get('MXNET_SAFE_ACCUMULATION')


def _recomputed(node, index) -> bool:
    """Whether the mirror of `node` recomputes its output `index` (else it is read as kept)."""
    return index == 0 or not _applies_batch_stats(node)


def _forward_nodes(graph, num_forward_outputs):
    """Positions of the forward part; None when the graph has no backward part."""
    if num_forward_outputs is None:
        count = forward_count(graph)
        return None if count is None else set(range(count))
    if not 0 < num_forward_outputs <= len(graph.outputs):
        raise EmberError(f'mirror: num_forward_outputs={num_forward_outputs!r}; a graph with '
                         f'{len(graph.outputs)} outputs has 1 to {len(graph.outputs)} forward '
                         f'outputs (then its gradients)')
    if num_forward_outputs == len(graph.outputs):
        return None
    needed = {e.node for e in graph.outputs[:num_forward_outputs]}
    for position in range(len(graph.nodes) - 1, -1, -1):
        if position in needed:
            needed.update(e.node for e in graph.nodes[position].inputs)
    return needed


def _depths(graph, candidates) -> list:
    """Per candidate, the length of the chain of nodes its mirror recomputes."""
    depth = [0] * len(graph.nodes)
    for position, node in enumerate(graph.nodes):
        if candidates[position]:
            depth[position] = 1 + max((depth[e.node] for e in node.inputs
                                       if _chained(graph, candidates, depth, e)), default=0)
    return depth


def _chained(graph, candidates, depth, entry) -> bool:
    """Whether a mirror reads the mirror of `entry` (else its forward value)."""
    position = entry.node
    return (candidates[position] and depth[position] < MAX_DEPTH
            and _recomputed(graph.nodes[position], entry.index))


class _Mirrorer:
    """Copies the graph, emitting mirrors on demand before their first backward reader."""

    def __init__(self, graph, forward, candidates, depth):
        self.graph, self.forward = graph, forward
        self.candidates, self.depth = candidates, depth
        self.rewriter = Rewriter(graph)
        self.mirror_of = {}           # old position -> new position of its mirror

    def build(self):
        for position, node in enumerate(self.graph.nodes):
            if position in self.forward:
                self.rewriter.copy(position)
            else:
                inputs = tuple(self._backward_input(e) for e in node.inputs)
                self.rewriter.place(position, dataclasses.replace(node, inputs=inputs))
        return self.rewriter.finish() if self.mirror_of else None

    def _backward_input(self, entry):
        if (entry.node in self.forward and self.candidates[entry.node]
                and _recomputed(self.graph.nodes[entry.node], entry.index)):
            return Entry(self._mirror(entry.node), entry.index)
        return self.rewriter.new(entry)

    def _mirror(self, position):
        found = self.mirror_of.get(position)
        if found is not None:
            return found
        node = self.graph.nodes[position]
        inputs = tuple(Entry(self._mirror(e.node), e.index)
                       if _chained(self.graph, self.candidates, self.depth, e)
                       else self.rewriter.new(e) for e in node.inputs)
        attr_text = {**node.attr_text, '__mirror_of__': node.name}
        copy = dataclasses.replace(node, name=f'{node.name}_mirror', inputs=inputs,
                                   attr_text=attr_text)
        if _applies_batch_stats(node):
            copy = self._batch_stats_applied(position, copy)
        self.mirror_of[position] = self.rewriter.add(copy)
        return self.mirror_of[position]

    def _batch_stats_applied(self, position, copy):
        """BatchNorm's mirror: data, gamma and beta as `copy` reads them, then the forward
        node's batch mean and inverse std instead of the moving statistics."""
        stats = tuple(self.rewriter.new(Entry(position, index)) for index in (1, 2))
        return dataclasses.replace(copy, op=registry.get('_bn_apply'),
                                   inputs=copy.inputs[:3] + stats)
