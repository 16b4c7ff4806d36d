"""MXNet's oneDNN subgraph backend (``MXNET_SUBGRAPH_BACKEND``: 'MKLDNN', the default, or 'NONE'
to turn it off): the graph rewrites for the CPU kernels, one pass each, and what they share.

For inference (``options.is_train`` False), in this order:

1. :mod:`~ember.passes.remove_identities`: ``_copy`` and ``Dropout`` outside training go.
2. :mod:`~ember.passes.fold_batch_norm`: BatchNorm folds into the Convolution or
   FullyConnected before it, with the parameter values of ``options.params``.
3. :mod:`~ember.passes.fuse_layers`: Convolution + residual add + activation become one
   ``_sg_conv``, FullyConnected + activation one ``_sg_fc``.
4. :mod:`~ember.passes.channel_last`: where channel-last is the faster layout
   (:func:`channel_last_pays`), 2-D float32 convolutions and the operators around them run
   on NHWC activations.

A training graph takes step 4 for every float32 2-D convolution (nothing folds or fuses into a
convolution, so each node keeps its gradient), then
5. :mod:`~ember.passes.fuse_batch_norm_relu`: BatchNorm with the relu (and residual add)
   after it as one operator whose compiled kernels apply both.

A node that replaces a pattern takes the name of the pattern's last node, so the graph's output
names stay. Shapes in ``attrs`` are dropped when nodes change (entry ids change); the pipeline
infers them again before the next pass.

>>> from ember import config
>>> with config.override(MXNET_SUBGRAPH_BACKEND='NONE'):
...     enabled()
False
"""
from __future__ import annotations

import numpy as np

from ember import config
from ember.passes._rewrite import Rewriter
from ember.symbol.graph import Entry, consumers

__all__ = ['enabled', 'channel_last_pays', 'Reads', 'is_op', 'act_type', 'residual_of',
           'same_shapes', 'replaced', 'host']

ADDS = ('elemwise_add', 'broadcast_add')


def enabled() -> bool:
    """Whether the rewrites run (``MXNET_SUBGRAPH_BACKEND`` is not 'NONE')."""
    return config.get('MXNET_SUBGRAPH_BACKEND') != 'NONE'


def channel_last_pays(device=None) -> bool:
    """Whether convolutions on `device` (None: the CPU) run faster on channel-last
    activations. On the CPU they do with both providers: oneDNN's kernels read and write plain
    NHWC at full speed and are slowed by plain NCHW, and the NumPy provider's 1x1 convolutions
    are then plain GEMMs (conv_algos.py --end-to-end). GPU layouts are not measured yet: left
    as they are."""
    return device is None or device.device_type == 'cpu'


class Reads:
    """Who reads each entry of a graph, graph outputs included."""

    def __init__(self, graph):
        self.graph = graph
        self.users = consumers(graph)
        self.outputs = {e.node for e in graph.outputs}
        self.output_entries = set(graph.outputs)

    def readers(self, entry):
        """Positions of the nodes reading `entry`."""
        nodes = self.graph.nodes
        return [user for user, slot in self.users[entry.node]
                if nodes[user].inputs[slot] == entry]

    def sole_reader(self, position):
        """The one node reading node `position`'s outputs, when that is all that reads them
        (not a graph output); else None."""
        users = self.users[position]
        if position in self.outputs or len(users) != 1:
            return None
        return users[0][0]

    def unread(self, entry):
        return entry not in self.output_entries and not self.readers(entry)


def is_op(node, *names):
    return node.op is not None and node.op.name in names


def act_type(node):
    """The activation `node` applies (an Activation or a relu), else None."""
    if is_op(node, 'Activation'):
        return node.attrs['act_type']
    return 'relu' if is_op(node, 'relu') else None


def residual_of(graph, node, layer_position):
    """The other operand when `node` adds the layer's output to a same-shape residual."""
    if not is_op(node, *ADDS) or Entry(layer_position, 0) not in node.inputs:
        return None
    if is_op(node, 'broadcast_add') and not same_shapes(graph, node.inputs):
        return None
    return node.inputs[1] if node.inputs[0] == Entry(layer_position, 0) else node.inputs[0]


def same_shapes(graph, entries):
    shapes = graph.attrs.get('shape')
    if shapes is None:
        return False
    known = [shapes[graph.entry_id(e)] for e in entries]
    return known[0] is not None and all(s == known[0] for s in known)


def replaced(graph, placed, dropped):
    """`graph` with the nodes `placed` ({position: node with old-graph inputs}) in the places
    of the nodes at those positions, and without the nodes at the positions `dropped` (the
    rest of each pattern)."""
    rewriter = Rewriter(graph)
    for position in range(len(graph.nodes)):
        if position in placed:
            rewriter.copy(position, placed[position])
        elif position not in dropped:
            rewriter.copy(position)
    return rewriter.finish()


def host(value):
    """A parameter's value (an NDArray or anything NumPy takes) as a NumPy array."""
    return value.asnumpy() if hasattr(value, 'asnumpy') else np.asarray(value)
