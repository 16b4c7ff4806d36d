"""Training: a BatchNorm whose output only a relu reads becomes one
``_contrib_BatchNormWithReLU`` with it (named after the relu), and a BatchNorm, an add of a
same-shape residual and a relu one ``_sg_bn_add_relu``: the compiled kernels apply the relu
inside the normalisation and its gradient inside BatchNorm's backward pass, two passes over
memory fewer (kernel_team.py). Only where channel-last pays (the CPU,
:func:`ember.passes.subgraph.channel_last_pays`); off with ``MXNET_BACKWARD_DO_MIRROR``, which
recomputes BatchNorm and not the fused operators, and with ``MXNET_SUBGRAPH_BACKEND=NONE``.

>>> from ember import symbol as sym
>>> from ember.passes import fuse_batch_norm_relu
>>> from ember.passes.options import Options
>>> net = sym.relu(sym.BatchNorm(sym.var('x'), name='bn'), name='r')
>>> graph = fuse_batch_norm_relu.run(net.to_graph(), Options(is_train=True))
>>> [n.op.name for n in graph.nodes if n.op]
['_contrib_BatchNormWithReLU']
"""
from __future__ import annotations

import logging

from ember import config
from ember.op import registry
from ember.passes import subgraph
from ember.passes.options import Options
from ember.symbol.graph import Entry, make_node

__all__ = ['run']

OPT_LEVEL = 1       # an optimisation: off under -O0 (NEURON_CC_FLAGS)

_log = logging.getLogger(__name__)


def run(graph, options=Options()):
    """`graph` with its BatchNorm + relu patterns fused; the same graph when none is."""
    if not subgraph.enabled() or not options.is_train \
            or not subgraph.channel_last_pays(options.device) \
            or config.get('MXNET_BACKWARD_DO_MIRROR'):
        return graph
    return _batch_norm_relu(_batch_norm_add_relu(graph))


def _batch_norm_add_relu(graph):
    """BatchNorm, an add of a same-shape residual and relu as one ``_sg_bn_add_relu`` (named
    after the relu) where each reads only the one before."""
    reads, fused, skipped = subgraph.Reads(graph), {}, set()
    for position, node in enumerate(graph.nodes):
        if not subgraph.is_op(node, 'BatchNorm'):
            continue
        add = reads.sole_reader(position)
        if add is None or add in skipped:
            continue
        residual = subgraph.residual_of(graph, graph.nodes[add], position)
        if residual is None or not subgraph.same_shapes(graph, graph.nodes[add].inputs):
            continue
        relu = reads.sole_reader(add)
        if relu is None or subgraph.act_type(graph.nodes[relu]) != 'relu':
            continue
        fused[relu] = make_node(registry.get('_sg_bn_add_relu'), graph.nodes[relu].name,
                                node.attrs, node.inputs + (residual,), node.user_attrs)
        skipped.update((position, add))
    if not fused:
        return graph
    _log.debug('fuse_batch_norm_relu: %d BatchNorm + add + relu fused', len(fused))
    return subgraph.replaced(graph, fused, skipped)


def _batch_norm_relu(graph):
    """BatchNorm + relu as one ``_contrib_BatchNormWithReLU`` where the relu alone reads the
    BatchNorm (none of its outputs is a graph output)."""
    reads, fused, skipped = subgraph.Reads(graph), {}, set()
    for position, node in enumerate(graph.nodes):
        if not subgraph.is_op(node, 'BatchNorm'):
            continue
        following = reads.sole_reader(position)
        if following is None or subgraph.act_type(graph.nodes[following]) != 'relu' \
                or graph.nodes[following].inputs != (Entry(position, 0),):
            continue
        fused[following] = make_node(registry.get('_contrib_BatchNormWithReLU'),
                                     graph.nodes[following].name, node.attrs, node.inputs,
                                     node.user_attrs)
        skipped.add(position)
    if not fused:
        return graph
    _log.debug('fuse_batch_norm_relu: %d BatchNorm + relu pairs fused', len(fused))
    return subgraph.replaced(graph, fused, skipped)
