"""Graph rewrites for the CPU kernels, MXNet's oneDNN subgraph backend (``MXNET_SUBGRAPH_BACKEND``:
'MKLDNN', the default, or 'NONE' to turn it off): fusion and channel-last regions for
inference, channel-last regions for training.

For inference (``is_train=False``), in this order:

1. Identity nodes go: ``_copy`` (``identity``), and ``Dropout`` in its default 'training' mode
   (an identity outside training) whose mask nobody reads.
2. BatchNorm folds into the Convolution or FullyConnected before it, when that layer's output
   feeds only the BatchNorm: ``w' = w * s`` and ``b' = (b - mean) * s + beta`` per output
   channel, with ``s = gamma / sqrt(var + eps)``. This needs the parameter values, so the pass
   takes them and returns the new ones, ``run(graph, params) -> (graph, params)``; the
   executor runs it at bind time, when they are known (and again when they change). A
   convolution becomes ``_sg_conv`` with ``weight_scale``: its inputs are its own weight, the
   new variables ``<layer>_folded_bias`` and ``<layer>_folded_scale`` (``s``), and it scales the
   weight itself (oneDNN into the reordered copy it keeps), so no folded copy of the weights
   is stored. A FullyConnected gets ``<layer>_folded_weight`` and ``<layer>_folded_bias`` (the
   originals may be shared or bound by the user). Without the values a BatchNorm stays.
3. Convolution, an element-wise add of a residual and an activation become one ``_sg_conv``
   node (either of the add and the activation may be missing), and FullyConnected with an
   activation one ``_sg_fc`` node (operators in :mod:`ember.op.fused`). ``_sg_conv`` may write
   its output over the residual (an in-place pair), like oneDNN's sum post-op.
4. Where channel-last is the faster layout (:func:`channel_last_pays`: on the CPU, with
   either kernel provider), 2-D float32
   convolutions whose weights are known become ``_sg_conv`` with ``layout='NHWC'``, their
   weight the same variable (``weight_layout='OIHW'``: no transposed copy), and the operators
   around them follow while they can: Pooling (``layout='NHWC'``), BatchNorm (``axis=3``), Concat on
   channels (``dim=3``) and same-shape element-wise operators. A ``transpose`` enters the
   channel-last region and another leaves it before any other reader (a ``Reshape`` when the
   spatial size is 1x1, as after global pooling), so activations stay NHWC from the stem to the
   classifier instead of being reordered around every convolution.

A training graph (``is_train=True``) takes step 4, for every float32 2-D convolution (its
weight's value is not needed): nothing folds into a convolution or fuses with one, so each node
keeps its gradient, and the convolutions become plain ``_sg_conv`` nodes whose gradient,
``_backward_sg_conv``, reads the weight and writes its gradient through (F, kh, kw, C) views of
the (F, C, kh, kw) arrays. oneDNN's backward kernels, like its forward ones, are faster on
plain NHWC than on plain NCHW, the Winograd gradients need no transposes, and NHWC max
pooling's backward pass is four times faster (resnet50_v1 training at batch 16: see
docs/architecture.md). Then a BatchNorm whose output only a relu reads becomes one
``_contrib_BatchNormWithReLU`` with it (named after the relu), unless
``MXNET_BACKWARD_DO_MIRROR`` recomputes BatchNorms in the backward pass: the compiled kernels
apply the relu inside the normalisation and its gradient inside BatchNorm's backward pass, two
passes over memory fewer (33 relus in a resnet50_v1 training step).

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
(['_sg_conv'], ['c_folded_bias', 'c_folded_scale', 'c_weight'])
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from ember import config
from ember.op import registry
from ember.op.nn._common import is_channel_last
from ember.passes._rewrite import Rewriter, unique_name, without_identities
from ember.symbol.graph import Entry, Node, consumers, make_node
from ember.symbol.infer import FLAG_OF_TYPE, infer_shapes

__all__ = ['run']

_log = logging.getLogger(__name__)

_FOLD_INTO = ('Convolution', 'FullyConnected')
_ADD = ('elemwise_add', 'broadcast_add')


def run(graph, params=None, is_train=False, device=None):
    """``(graph, params)`` after the inference fusions. `params` maps variable names to values
    (NumPy arrays or NDArrays); when a BatchNorm folds, the returned dict holds the values of
    the new graph's variables that have one (the folded ones as NumPy arrays), else it is
    `params` itself. A training graph only goes channel-last (step 4, with plain ``_sg_conv``
    nodes, which have a gradient). Returns `graph` and `params` unchanged with
    ``MXNET_SUBGRAPH_BACKEND=NONE``."""
    if config.get('MXNET_SUBGRAPH_BACKEND') == 'NONE':
        return graph, params
    if is_train:
        if channel_last_pays(device):
            original = graph
            graph, _ = _channel_last(graph, params, training=True)
            graph = _batch_norm_relu(_batch_norm_add_relu(_shapes_again(original, graph)))
        return graph, params
    original = graph
    graph = _remove_identities(graph)
    graph, params = _fold_batch_norms(graph, params)
    graph = _fuse_layers(_shapes_again(original, graph))
    if channel_last_pays(device):
        graph, params = _channel_last(_shapes_again(original, graph), params)
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


def _batch_norm_add_relu(graph):
    """Training: BatchNorm, an add of a same-shape residual and relu as one
    ``_sg_bn_add_relu`` (named after the relu) where each reads only the one before, unless
    mirroring is on."""
    if config.get('MXNET_BACKWARD_DO_MIRROR'):
        return graph
    reads, fused, skipped = _Reads(graph), {}, set()
    for position, node in enumerate(graph.nodes):
        if not _is_op(node, 'BatchNorm'):
            continue
        add = reads.sole_reader(position)
        if add is None or add in skipped:
            continue
        residual = _residual(graph, graph.nodes[add], position)
        if residual is None or not _same_shapes(graph, graph.nodes[add].inputs):
            continue
        relu = reads.sole_reader(add)
        if relu is None or _act_type(graph.nodes[relu]) != 'relu':
            continue
        fused[relu] = make_node(registry.get('_sg_bn_add_relu'), graph.nodes[relu].name,
                                node.attrs, node.inputs + (residual,), node.user_attrs)
        skipped.update((position, add))
    if not fused:
        return graph
    _log.debug('subgraph: %d BatchNorm + add + relu fused', len(fused))
    return _replaced(graph, fused, skipped)


def _batch_norm_relu(graph):
    """Training: BatchNorm + relu as one ``_contrib_BatchNormWithReLU`` where the relu alone
    reads the BatchNorm (none of its outputs is a graph output), unless mirroring is on (the
    mirror pass recomputes BatchNorm, not the fused operator)."""
    if config.get('MXNET_BACKWARD_DO_MIRROR'):
        return graph
    reads, fused, skipped = _Reads(graph), {}, set()
    for position, node in enumerate(graph.nodes):
        if not _is_op(node, 'BatchNorm'):
            continue
        following = reads.sole_reader(position)
        if following is None or _act_type(graph.nodes[following]) != 'relu' \
                or graph.nodes[following].inputs != (Entry(position, 0),):
            continue
        fused[following] = make_node(registry.get('_contrib_BatchNormWithReLU'),
                                     graph.nodes[following].name, node.attrs, node.inputs,
                                     node.user_attrs)
        skipped.add(position)
    if not fused:
        return graph
    _log.debug('subgraph: %d BatchNorm + relu pairs fused', len(fused))
    return _replaced(graph, fused, skipped)


# ----------------------------------------------------------------------------------------------
# 1. Identities.

def _remove_identities(graph):
    reads = _Reads(graph)
    removable = {position for position, node in enumerate(graph.nodes)
                 if _is_identity(node) and position not in reads.outputs
                 and (node.num_outputs == 1 or reads.unread(Entry(position, 1)))}
    return without_identities(graph, removable)


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
    # a convolution scales its own weight: only a FullyConnected's weight value is needed
    needed = list(layer.inputs[1 + _is_op(layer, 'Convolution'):]) + list(bn.inputs[1:])
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
    scale, bias = _folded_scale_and_bias(graph, bn, layer, params)
    if _is_op(layer, 'Convolution'):
        # the convolution scales its weight itself (oneDNN into the copy it keeps): a folded
        # copy of every weight would cost as much memory as the weights
        dtype = _dtype(graph, params, layer.inputs[1])
        values = (('bias', bias.astype(dtype)), ('scale', scale.astype(dtype)))
        op, attrs = registry.get('_sg_conv'), {**layer.attrs, 'no_bias': False,
                                               'weight_scale': True}
        inputs = [rewriter.new(layer.inputs[0]), rewriter.new(layer.inputs[1])]
    else:
        weight = _param(graph, params, layer.inputs[1])
        scaled = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        values = (('weight', scaled.astype(weight.dtype)), ('bias', bias.astype(weight.dtype)))
        op, attrs = layer.op, {**layer.attrs, 'no_bias': False}
        inputs = [rewriter.new(layer.inputs[0])]
    for role, value in values:
        name = unique_name(f'{layer.name}_folded_{role}', taken)
        folded[name] = value
        inputs.append(Entry(rewriter.add(_variable(name, value)), 0))
    rewriter.place(bn_position, make_node(op, bn.name, attrs, inputs, layer.user_attrs))


def _variable(name, value):
    """A variable node that declares its value's shape and dtype (for inference)."""
    text = {'__shape__': str(tuple(value.shape))}
    if value.dtype.name in FLAG_OF_TYPE:
        text['__dtype__'] = str(FLAG_OF_TYPE[value.dtype.name])
    return Node(None, name, attr_text=text)


def _param(graph, params, entry):
    return _host(params[graph.nodes[entry.node].name])


def _dtype(graph, params, entry):
    """The dtype of variable `entry`: of its value, else as inferred, else float32."""
    name = graph.nodes[entry.node].name
    if name in params:
        return _host(params[name]).dtype
    dtypes = graph.attrs.get('dtype')
    known = dtypes[graph.entry_id(entry)] if dtypes is not None else None
    return np.dtype(known) if known is not None else np.dtype(np.float32)


def _folded_scale_and_bias(graph, bn, layer, params):
    """Per output channel, in float64: ``s = gamma / sqrt(var + eps)`` and the bias
    ``(b - mean) * s + beta``."""
    gamma, beta, mean, var = (_param(graph, params, e).astype(np.float64)
                              for e in bn.inputs[1:])
    bias = 0 if layer.attrs['no_bias'] else _param(graph, params, layer.inputs[2])
    if bn.attrs['fix_gamma']:
        gamma = np.ones_like(gamma)
    scale = gamma / np.sqrt(var + bn.attrs['eps'])
    return scale, (bias - mean) * scale + beta


def _host(value):
    return value.asnumpy() if hasattr(value, 'asnumpy') else np.asarray(value)


# ----------------------------------------------------------------------------------------------
# 3. Convolution + add + activation, FullyConnected + activation.

def _fuse_layers(graph):
    reads, claimed, patterns = _Reads(graph), set(), {}
    for position, node in enumerate(graph.nodes):
        if _is_op(node, 'Convolution', 'FullyConnected') or _bare_sg_conv(node):
            found = _layer_pattern(graph, position, reads, claimed)
            if found is not None:
                members, fused = found
                claimed.update(members)
                patterns[members[-1]] = (members, fused)
    if not patterns:
        return graph
    return _replaced(graph, {position: fused for position, (_, fused) in patterns.items()},
                     {m for members, _ in patterns.values() for m in members[:-1]})


def _replaced(graph, placed, dropped):
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


def _layer_pattern(graph, position, reads, claimed):
    """(member positions, fused node with old-graph inputs) for the layer at `position`."""
    layer, members, residual = graph.nodes[position], [position], None
    following = reads.sole_reader(position)
    if (_is_op(layer, 'Convolution') or _bare_sg_conv(layer)) and following is not None \
            and following not in claimed:
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


def _bare_sg_conv(node):
    """A folded convolution with no residual or activation taken in yet."""
    return _is_op(node, '_sg_conv') and not node.attrs['with_sum'] and \
        node.attrs['act_type'] is None


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


# ----------------------------------------------------------------------------------------------
# 4. Channel-last regions.

def channel_last_pays(device=None) -> bool:
    """Whether convolutions on `device` (None: the CPU) run faster on channel-last
    activations. On the CPU they do with both providers: oneDNN's kernels read and write plain
    NHWC at full speed and are slowed by plain NCHW, and the NumPy provider's 1x1 convolutions
    are then plain GEMMs (resnet50_v1 with ``MXNET_MKLDNN_ENABLED=0``: 14.3 -> 15.4 img/s at
    batch 8, 16.1 -> 17.3 at batch 32). GPU layouts are not measured yet: left as they are."""
    return device is None or device.device_type == 'cpu'


_TO_LAST, _TO_FIRST = (0, 2, 3, 1), (0, 3, 1, 2)


class _ChannelLast:
    """Builds the new graph: `last` maps an old entry to its new channel-last entry when its
    producer switched layout; entries without one keep their meaning (channel-first)."""

    def __init__(self, graph, params, training=False):
        self.graph, self.params, self.training = graph, dict(params or {}), training
        self.shapes = graph.attrs['shape']
        self.rewriter = Rewriter(graph)
        self.taken = {n.name for n in graph.nodes}
        self.last, self.first_of, self.last_of = {}, {}, {}
        self.switched = 0

    def shape(self, entry):
        return self.shapes[self.graph.entry_id(entry)]

    def to_last(self, entry):
        """A new entry holding old `entry` channel-last."""
        if entry in self.last:
            return self.last[entry]
        if entry not in self.last_of:
            node = self.graph.nodes[entry.node]
            self.last_of[entry] = self._transpose(self.rewriter.new(entry), _TO_LAST,
                                                  f'{node.name}_to_nhwc')
        return self.last_of[entry]

    def to_first(self, entry):
        """A new entry holding old `entry` in its original (channel-first) layout."""
        if entry not in self.last:
            return self.rewriter.new(entry)
        if entry not in self.first_of:
            name = f'{self.graph.nodes[entry.node].name}_to_nchw'
            shape = self.shape(entry)
            if shape[2:] == (1, 1):          # the same bytes either way: no copy needed
                node = make_node(registry.get('Reshape'), unique_name(name, self.taken),
                                 {'shape': shape}, [self.last[entry]])
                self.first_of[entry] = Entry(self.rewriter.add(node), 0)
            else:
                self.first_of[entry] = self._transpose(self.last[entry], _TO_FIRST, name)
        return self.first_of[entry]

    def _transpose(self, new_entry, axes, name):
        node = make_node(registry.get('transpose'), unique_name(name, self.taken),
                         {'axes': axes}, [new_entry])
        return Entry(self.rewriter.add(node), 0)

    def keep(self, position):
        node = self.graph.nodes[position]
        inputs = tuple(self.to_first(e) for e in node.inputs)
        self.rewriter.place(position, dataclasses.replace(node, inputs=inputs))

    def switch(self, position, attrs, inputs, op=None):
        """Put old node `position` channel-last: new `attrs`, `inputs` already new entries,
        `op` when it changes; its first output is channel-last, the others (statistics) keep
        their meaning."""
        node = self.graph.nodes[position]
        new = make_node(op or node.op, node.name, attrs, inputs, node.user_attrs)
        at = self.rewriter.add(new)
        self.last[Entry(position, 0)] = Entry(at, 0)
        for index in range(1, new.num_outputs):
            self.rewriter.alias(Entry(position, index), Entry(at, index))
        self.switched += 1

    def finish(self):
        for entry in self.graph.outputs:
            self.rewriter.alias(entry, self.to_first(entry))
        graph = self.rewriter.finish()
        if self.training:
            return graph, self.params
        names = {node.name for node in graph.nodes if node.op is None}
        return graph, {k: v for k, v in self.params.items() if k in names}


def _channel_last(graph, params, training=False):
    """Step 4. For inference a convolution goes channel-last when its weight's value is known;
    in `training` any float32 2-D convolution does (nothing is fused, so every node keeps its
    gradient)."""
    if 'shape' not in graph.attrs or not (params or training):
        return graph, params
    if training and 'dtype' not in graph.attrs:
        return graph, params
    build = _ChannelLast(graph, params, training)
    for position, node in enumerate(graph.nodes):
        if node.op is None:
            build.rewriter.copy(position)
            continue
        switched = _switched_node(build, position, node)
        if switched is None:
            build.keep(position)
        else:
            build.switch(position, *switched)
    if not build.switched:
        return graph, params
    result, kept = build.finish()
    _log.debug('subgraph: %d operators run channel-last', build.switched)
    return result, kept


def _switched_node(build, position, node):
    """(attrs, new inputs) of `node` channel-last, or None when it stays as it is."""
    name = node.op.name
    if name in ('Convolution', '_sg_conv'):
        return _switched_conv(build, node)
    if not any(e in build.last for e in node.inputs) or len(build.shape(Entry(position, 0))) != 4:
        return None                      # only operators fed by the channel-last region follow
    if name == 'Pooling' and node.attrs['layout'] in (None, 'NCHW'):
        return {**node.attrs, 'layout': 'NHWC'}, [build.to_last(node.inputs[0])]
    if name == 'BatchNorm' and node.attrs['axis'] % 4 == 1:
        return ({**node.attrs, 'axis': 3},
                [build.to_last(node.inputs[0])] + [build.rewriter.new(e) for e in node.inputs[1:]])
    if name == 'Concat' and node.attrs['dim'] % 4 == 1:
        return {**node.attrs, 'dim': 3}, [build.to_last(e) for e in node.inputs]
    if _same_shape_elemwise(build, position, node):
        return dict(node.attrs), [build.to_last(e) for e in node.inputs]
    return None


def _switched_conv(build, node):
    """A channel-last ``_sg_conv`` for a Convolution or ``_sg_conv``: its weight stays the
    variable it was (F, C, *k), ``weight_layout='OIHW'``, rather than a transposed copy: oneDNN
    reorders it into its own layout anyway, and the NumPy algorithms keep the contiguous copy
    they need only when they run."""
    weight = node.inputs[1]
    variable = build.graph.nodes[weight.node]
    if len(node.attrs['kernel']) != 2 or node.attrs['layout'] not in (None, 'NCHW'):
        return None
    if build.training:
        # any weight will do (a view of it is read), but only float32 data runs the fast
        # channel-last kernels
        dtypes = build.graph.attrs['dtype']
        if any(dtypes[build.graph.entry_id(e)] != np.float32 for e in node.inputs[:2]):
            return None
    elif (variable.op is not None or variable.name not in build.params
            or _host(build.params[variable.name]).dtype != np.float32):
        return None
    op = registry.get('_sg_conv')
    attrs = {'with_sum': False, 'act_type': None, 'weight_scale': False, **node.attrs}
    names = _sg_conv_inputs(node)
    inputs = [build.to_last(node.inputs[0]), build.to_first(weight)]
    inputs += [build.to_last(e) if name == 'sum' else build.rewriter.new(e)
               for name, e in zip(names[2:], node.inputs[2:])]
    return {**attrs, 'layout': 'NHWC', 'weight_layout': 'OIHW'}, inputs, op


def _sg_conv_inputs(node):
    """The names of a Convolution's or ``_sg_conv``'s inputs, in order."""
    if node.op.name == 'Convolution':
        return ['data', 'weight'] + ([] if node.attrs['no_bias'] else ['bias'])
    return node.op.input_names(node.attrs)


def _same_shape_elemwise(build, position, node):
    op = node.op
    if not op.elemwise or op.num_outputs(node.attrs) != 1 or op.mutate_indices(node.attrs):
        return False
    out = build.shape(Entry(position, 0))
    return all(build.shape(e) == out for e in node.inputs)
