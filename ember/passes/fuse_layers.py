"""Inference: a Convolution, an element-wise add of a same-shape residual and an activation
become one ``_sg_conv`` node (either of the add and the activation may be missing), and a
FullyConnected with an activation one ``_sg_fc`` node (operators in :mod:`ember.op.fused`).
``_sg_conv`` may write its output over the residual (an in-place pair), like oneDNN's sum
post-op. Off in training and with ``MXNET_SUBGRAPH_BACKEND=NONE``
(:mod:`ember.passes.subgraph`).

>>> from ember import symbol as sym
>>> from ember.passes import fuse_layers
>>> conv = sym.Convolution(sym.var('x'), kernel=(1, 1), num_filter=2, name='c')
>>> [n.op.name for n in fuse_layers.run(sym.relu(conv, name='r').to_graph()).nodes if n.op]
['_sg_conv']
"""
from __future__ import annotations

import logging

from ember.op import registry
from ember.passes import subgraph
from ember.passes.options import Options
from ember.symbol.graph import make_node

__all__ = ['run']

OPT_LEVEL = 1       # an optimisation: off under -O0 (NEURON_CC_FLAGS)

_log = logging.getLogger(__name__)


def run(graph, options=Options()):
    """`graph` with its layer patterns fused; the same graph when none is found."""
    if not subgraph.enabled() or options.is_train:
        return graph
    reads, claimed, patterns = subgraph.Reads(graph), set(), {}
    for position, node in enumerate(graph.nodes):
        if subgraph.is_op(node, 'Convolution', 'FullyConnected') or _bare_sg_conv(node):
            found = _layer_pattern(graph, position, reads, claimed)
            if found is not None:
                members, fused = found
                claimed.update(members)
                patterns[members[-1]] = (members, fused)
    if not patterns:
        return graph
    _log.debug('fuse_layers: %d patterns fused', len(patterns))
    return subgraph.replaced(graph, {position: fused for position, (_, fused) in patterns.items()},
                             {m for members, _ in patterns.values() for m in members[:-1]})


def _layer_pattern(graph, position, reads, claimed):
    """(member positions, fused node with old-graph inputs) for the layer at `position`."""
    layer, members, residual = graph.nodes[position], [position], None
    following = reads.sole_reader(position)
    if (subgraph.is_op(layer, 'Convolution') or _bare_sg_conv(layer)) \
            and following is not None and following not in claimed:
        residual = subgraph.residual_of(graph, graph.nodes[following], position)
        if residual is not None:
            members.append(following)
            following = reads.sole_reader(following)
    act_type = None
    if following is not None and following not in claimed:
        act_type = subgraph.act_type(graph.nodes[following])
        if act_type is not None:
            members.append(following)
    if len(members) == 1:
        return None
    return members, _fused_node(layer, graph.nodes[members[-1]], residual, act_type)


def _bare_sg_conv(node):
    """A folded convolution with no residual or activation taken in yet."""
    return subgraph.is_op(node, '_sg_conv') and not node.attrs['with_sum'] and \
        node.attrs['act_type'] is None


def _fused_node(layer, last, residual, act_type):
    inputs = list(layer.inputs) + ([residual] if residual is not None else [])
    if subgraph.is_op(layer, 'FullyConnected'):
        return make_node(registry.get('_sg_fc'), last.name, {**layer.attrs, 'act_type': act_type},
                         inputs, layer.user_attrs)
    params = {**layer.attrs, 'with_sum': residual is not None, 'act_type': act_type}
    return make_node(registry.get('_sg_conv'), last.name, params, inputs, layer.user_attrs)
