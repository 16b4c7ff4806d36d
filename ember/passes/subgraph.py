"""Inference graph fusion, MXNet's oneDNN subgraph backend (``MXNET_SUBGRAPH_BACKEND``: 'MKLDNN',
the default, or 'NONE' to turn it off).

For inference only (``is_train=False``), in this order:

1. Identity nodes go: ``_copy`` (``identity``), and ``Dropout`` in its default 'training' mode
   (an identity outside training) whose mask nobody reads.
2. BatchNorm folds into the Convolution or FullyConnected before it, when that layer's output
   feeds only the BatchNorm: ``w' = w * s`` and ``b' = (b - mean) * s + beta`` per output
   channel, with ``s = gamma / sqrt(var + eps)``. This needs the parameter values, so the pass
   takes them and returns the new ones, ``run(graph, params) -> (graph, params)``; the
   executor runs it at bind time, when they are known (and again when they change). The
   folded weight and bias are new variables ``<layer>_folded_weight`` and
   ``<layer>_folded_bias`` (the originals may be shared or bound by the user). Without the
   values a BatchNorm stays.
3. Convolution, an element-wise add of a residual and an activation become one ``_sg_conv``
   node (either of the add and the activation may be missing), and FullyConnected with an
   activation one ``_sg_fc`` node (operators in :mod:`ember.op.fused`). ``_sg_conv`` may write
   its output over the residual (an in-place pair), like oneDNN's sum post-op.

A node that replaces a pattern takes the name of the pattern's last node, so the graph's output
names stay. Shapes in ``attrs`` are dropped when nodes change (entry ids change).

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.passes import subgraph
>>> conv = sym.Convolution(sym.var('x'), kernel=(1, 1), num_filter=2, no_bias=True, name='c')
>>> net = sym.relu(sym.BatchNorm(conv, fix_gamma=False, name='bn'), name='r')
>>> names = ['c_weight', 'bn_gamma', 'bn_beta', 'bn_moving_mean', 'bn_moving_var']
>>> values = dict(zip(names, [np.ones((2, 3, 1, 1), np.float32)] + [np.ones(2, np.float32)] * 4))
>>> graph, params = subgraph.run(net.to_graph(), values)
>>> [n.op.name for n in graph.nodes if n.op], sorted(params)
(['_sg_conv'], ['c_folded_bias', 'c_folded_weight'])
"""
from __future__ import annotations

import logging

import numpy as np

from ember import config
from ember.op import registry
from ember.op.nn._common import is_channel_last
from ember.passes._rewrite import Rewriter, unique_name
from ember.symbol.graph import Entry, Node, consumers, make_node
from ember.symbol.infer import FLAG_OF_TYPE, infer_shapes

__all__ = ['run']

_log = logging.getLogger(__name__)

_FOLD_INTO = ('Convolution', 'FullyConnected')
_ADD = ('elemwise_add', 'broadcast_add')


def run(graph, params=None, is_train=False):
    """``(graph, params)`` after the inference fusions. `params` maps variable names to values
    (NumPy arrays or NDArrays); when a BatchNorm folds, the returned dict holds the values of
    the new graph's variables that have one (the folded ones as NumPy arrays), else it is
    `params` itself. Returns `graph` and `params` unchanged for training graphs and with
    ``MXNET_SUBGRAPH_BACKEND=NONE``."""
    if is_train or config.get('MXNET_SUBGRAPH_BACKEND') == 'NONE':
        return graph, params
    original = graph
    graph = _remove_identities(graph)
    graph, params = _fold_batch_norms(graph, params)
    graph = _fuse_layers(_shapes_again(original, graph))
    _log.debug('subgraph: %d -> %d nodes', len(original.nodes), len(graph.nodes))
    return graph, params


def _shapes_again(original, graph):
    """`graph` with ``attrs['shape']`` again where `original` had it and a rewrite dropped it
    (the residual add of a convolution is recognised by its shapes)."""
    shapes = original.attrs.get('shape')
    if shapes is None or 'shape' in graph.attrs:
        return graph
    known = {original.nodes[i].name: shapes[original.node_row_ptr[i]]
             for i in original.input_nodes}
    return graph.replace(attrs={**graph.attrs, 'shape': tuple(infer_shapes(graph, known))})


# ----------------------------------------------------------------------------------------------
# Helpers on the old graph.

class _Reads:
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


def _is_op(node, *names):
    return node.op is not None and node.op.name in names


def _act_type(node):
    if _is_op(node, 'Activation'):
        return node.attrs['act_type']
    return 'relu' if _is_op(node, 'relu') else None


# ----------------------------------------------------------------------------------------------
# 1. Identities.

def _remove_identities(graph):
    reads = _Reads(graph)
    removable = {position for position, node in enumerate(graph.nodes)
                 if _is_identity(node) and position not in reads.outputs
                 and (node.num_outputs == 1 or reads.unread(Entry(position, 1)))}
    if not removable:
        return graph
    rewriter = Rewriter(graph)
    for position, node in enumerate(graph.nodes):
        if position in removable:
            rewriter.alias(Entry(position, 0), rewriter.new(node.inputs[0]))
        else:
            rewriter.copy(position)
    return rewriter.finish()


def _is_identity(node):
    if _is_op(node, 'Dropout'):
        return node.attrs['mode'] == 'training'
    return _is_op(node, '_copy')


# ----------------------------------------------------------------------------------------------
# 2. BatchNorm folding.

def _fold_batch_norms(graph, params):
    reads = _Reads(graph)
    folds = {position: node.inputs[0].node for position, node in enumerate(graph.nodes)
             if _foldable(graph, position, reads, params or {})}
    if not folds:
        return graph, params
    rewriter, taken, folded = Rewriter(graph), {n.name for n in graph.nodes}, {}
    layers = set(folds.values())
    for position in range(len(graph.nodes)):
        if position in folds:
            _place_folded(graph, rewriter, position, folds[position], params, folded, taken)
        elif position not in layers:
            rewriter.copy(position)
    graph = rewriter.finish()
    names = {node.name for node in graph.nodes if node.op is None}
    kept = {name: value for name, value in params.items() if name in names}
    return graph, {**kept, **folded}


def _foldable(graph, position, reads, params):
    bn = graph.nodes[position]
    if not _is_op(bn, 'BatchNorm') or bn.inputs[0].index != 0:
        return False
    layer = graph.nodes[bn.inputs[0].node]
    if not _is_op(layer, *_FOLD_INTO) or reads.sole_reader(bn.inputs[0].node) != position:
        return False
    if not all(reads.unread(Entry(position, i)) for i in (1, 2)):
        return False
    needed = list(layer.inputs[1:]) + list(bn.inputs[1:])
    return _channel_axis_fits(layer, bn.attrs['axis']) and all(
        graph.nodes[e.node].op is None and graph.nodes[e.node].name in params for e in needed)


def _channel_axis_fits(layer, axis):
    """Whether BatchNorm's `axis` is the layer's output-channel axis."""
    if _is_op(layer, 'FullyConnected'):
        return axis in (1, -1) if layer.attrs['flatten'] else axis == -1
    ndim = len(layer.attrs['kernel']) + 2
    channel = ndim - 1 if is_channel_last(layer.attrs['layout']) else 1
    return -ndim <= axis < ndim and axis % ndim == channel


def _place_folded(graph, rewriter, bn_position, layer_position, params, folded, taken):
    bn, layer = graph.nodes[bn_position], graph.nodes[layer_position]
    weight, bias = _folded_values(graph, bn, layer, params)
    entries = []
    for role, value in (('weight', weight), ('bias', bias)):
        name = unique_name(f'{layer.name}_folded_{role}', taken)
        folded[name] = value
        entries.append(Entry(rewriter.add(_variable(name, value)), 0))
    node = make_node(layer.op, bn.name, {**layer.attrs, 'no_bias': False},
                     [rewriter.new(layer.inputs[0])] + entries, layer.user_attrs)
    rewriter.place(bn_position, node)


def _variable(name, value):
    """A variable node that declares its value's shape and dtype (for inference)."""
    text = {'__shape__': str(tuple(value.shape))}
    if value.dtype.name in FLAG_OF_TYPE:
        text['__dtype__'] = str(FLAG_OF_TYPE[value.dtype.name])
    return Node(None, name, attr_text=text)


def _folded_values(graph, bn, layer, params):
    def value(entry):
        return _host(params[graph.nodes[entry.node].name])
    weight = value(layer.inputs[1])
    bias = np.zeros(weight.shape[0]) if layer.attrs['no_bias'] else value(layer.inputs[2])
    gamma, beta, mean, var = (value(e).astype(np.float64) for e in bn.inputs[1:])
    if bn.attrs['fix_gamma']:
        gamma = np.ones_like(gamma)
    scale = gamma / np.sqrt(var + bn.attrs['eps'])
    new_weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
    new_bias = (bias - mean) * scale + beta
    return new_weight.astype(weight.dtype), new_bias.astype(weight.dtype)


def _host(value):
    return value.asnumpy() if hasattr(value, 'asnumpy') else np.asarray(value)


# ----------------------------------------------------------------------------------------------
# 3. Convolution + add + activation, FullyConnected + activation.

def _fuse_layers(graph):
    reads, claimed, patterns = _Reads(graph), set(), {}
    for position, node in enumerate(graph.nodes):
        if _is_op(node, 'Convolution', 'FullyConnected'):
            found = _layer_pattern(graph, position, reads, claimed)
            if found is not None:
                members, fused = found
                claimed.update(members)
                patterns[members[-1]] = (members, fused)
    if not patterns:
        return graph
    skipped = {m for members, _ in patterns.values() for m in members[:-1]}
    rewriter = Rewriter(graph)
    for position in range(len(graph.nodes)):
        if position in patterns:
            rewriter.copy(position, patterns[position][1])
        elif position not in skipped:
            rewriter.copy(position)
    return rewriter.finish()


def _layer_pattern(graph, position, reads, claimed):
    """(member positions, fused node with old-graph inputs) for the layer at `position`."""
    layer, members, residual = graph.nodes[position], [position], None
    following = reads.sole_reader(position)
    if _is_op(layer, 'Convolution') and following is not None and following not in claimed:
        residual = _residual(graph, graph.nodes[following], position)
        if residual is not None:
            members.append(following)
            following = reads.sole_reader(following)
    act_type = None
    if following is not None and following not in claimed:
        act_type = _act_type(graph.nodes[following])
        if act_type is not None:
            members.append(following)
    if len(members) == 1:
        return None
    return members, _fused_node(graph, layer, graph.nodes[members[-1]], residual, act_type)


def _residual(graph, node, layer_position):
    """The other operand when `node` adds the layer's output to a same-shape residual."""
    if not _is_op(node, *_ADD) or Entry(layer_position, 0) not in node.inputs:
        return None
    if _is_op(node, 'broadcast_add') and not _same_shapes(graph, node.inputs):
        return None
    return node.inputs[1] if node.inputs[0] == Entry(layer_position, 0) else node.inputs[0]


def _same_shapes(graph, entries):
    shapes = graph.attrs.get('shape')
    if shapes is None:
        return False
    known = [shapes[graph.entry_id(e)] for e in entries]
    return known[0] is not None and all(s == known[0] for s in known)


def _fused_node(graph, layer, last, residual, act_type):
    inputs = list(layer.inputs) + ([residual] if residual is not None else [])
    if _is_op(layer, 'FullyConnected'):
        return make_node(registry.get('_sg_fc'), last.name, {**layer.attrs, 'act_type': act_type},
                         inputs, layer.user_attrs)
    params = {**layer.attrs, 'with_sum': residual is not None, 'act_type': act_type}
    return make_node(registry.get('_sg_conv'), last.name, params, inputs, layer.user_attrs)
