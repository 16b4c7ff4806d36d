"""Channel-last regions: where channel-last is the faster layout
(:func:`ember.passes.subgraph.channel_last_pays`: on the CPU, with either kernel provider), 2-D
float32 convolutions become ``_sg_conv`` with ``layout='NHWC'``, their weight the same variable
(``weight_layout='OIHW'``: no transposed copy), and the operators around them follow while they
can: Pooling (``layout='NHWC'``), BatchNorm (``axis=3``), Concat on channels (``dim=3``) and
same-shape element-wise operators. A ``transpose`` enters the channel-last region and another
leaves it before any other reader (a ``Reshape`` when the spatial size is 1x1, as after global
pooling), so activations stay NHWC from the stem to the classifier instead of being reordered
around every convolution.

For inference a convolution goes channel-last when its weight's value is known
(``options.params``). A training graph switches every float32 2-D convolution (its weight's
value is not needed): the convolutions become plain ``_sg_conv`` nodes whose gradient,
``_backward_sg_conv``, reads the weight and writes its gradient through (F, kh, kw, C) views of
the (F, C, kh, kw) arrays; oneDNN's backward kernels, like its forward ones, are faster on
plain NHWC, the Winograd gradients need no transposes, and NHWC max pooling's backward pass
is several times faster (compare.py --train). Off with ``MXNET_SUBGRAPH_BACKEND=NONE``.

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.passes import channel_last, infer_shape
>>> from ember.passes.options import Options
>>> conv = sym.Convolution(sym.var('x'), kernel=(3, 3), num_filter=4, no_bias=True, name='c')
>>> options = Options(shapes={'x': (1, 2, 5, 5)},
...                   params={'c_weight': np.ones((4, 2, 3, 3), np.float32)})
>>> graph = infer_shape.run(sym.relu(conv, name='r').to_graph(), options)
>>> [n.name for n in channel_last.run(graph, options).nodes if n.op]
['x_to_nhwc', 'c', 'r', 'r_to_nchw']
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np

from ember.op import registry
from ember.passes import subgraph
from ember.passes.options import Options
from ember.passes._rewrite import Rewriter, unique_name
from ember.symbol.graph import Entry, make_node

__all__ = ['run']

OPT_LEVEL = 1       # an optimisation: off under -O0 (NEURON_CC_FLAGS)

_log = logging.getLogger(__name__)


def run(graph, options=Options()):
    """`graph` with its channel-last regions; the same graph when no convolution switches.
    Inference needs the weights' values, training the graph's dtypes."""
    if not subgraph.enabled() or not subgraph.channel_last_pays(options.device):
        return graph
    training = options.is_train
    if 'shape' not in graph.attrs or not (options.params or training):
        return graph
    if training and 'dtype' not in graph.attrs:
        return graph
    build = _ChannelLast(graph, options.params, training)
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
        return graph
    _log.debug('channel_last: %d operators run channel-last', build.switched)
    return build.finish()


_TO_LAST, _TO_FIRST = (0, 2, 3, 1), (0, 3, 1, 2)


class _ChannelLast:
    """Builds the new graph: `last` maps an old entry to its new channel-last entry when its
    producer switched layout; entries without one keep their meaning (channel-first)."""

    def __init__(self, graph, params, training=False):
        self.graph, self.params, self.training = graph, params, training
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
        return self.rewriter.finish()


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
            or subgraph.host(build.params[variable.name]).dtype != np.float32):
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
