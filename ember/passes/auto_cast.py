"""``--auto-cast`` of NEURON_CC_FLAGS: operands rounded to bf16, fp16 or tf32 precision.

``--auto-cast matmult`` rounds the data and weight of every product (convolutions, dense
layers, dot products, RNNs) to ``--auto-cast-type`` (default bf16), ``--auto-cast all`` every
floating input of every operator (the inputs an operator updates in place aside); ``none``
(the default) leaves the graph as it is. Each rounded entry gets one ``_round_to_precision``
node, shared by its readers: the values stay float32 and the kernels accumulate in float32, as
a reduced-precision unit with a float32 accumulator computes; rounding is stochastic under
NEURON_RT_STOCHASTIC_ROUNDING_EN. ``--enable-saturate-infinity`` rounds values past the
format's range to its largest finite value instead of infinity.

>>> from ember import config, symbol as sym
>>> from ember.passes import infer_shape, infer_type
>>> from ember.passes.options import Options
>>> import numpy as np
>>> net = sym.FullyConnected(sym.var('x'), num_hidden=2, name='fc')
>>> options = Options({'x': (1, 3)}, {'x': np.dtype('float32')})
>>> g = infer_type.run(infer_shape.run(net.to_graph(), options), options)
>>> with config.override(NEURON_CC_FLAGS='--auto-cast matmult'):
...     [n.op.name for n in run(g, options).nodes if n.op]
['_round_to_precision', '_round_to_precision', 'FullyConnected']
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ember import config
from ember.op import registry
from ember.passes.options import Options
from ember.passes._rewrite import Rewriter, unique_name
from ember.symbol.graph import Entry, make_node

__all__ = ['run', 'MATMULT']

# the products: their first two inputs (data, weight) are rounded under 'matmult'
MATMULT = ('Convolution', 'Deconvolution', 'FullyConnected', 'dot', 'batch_dot', 'RNN',
           '_sg_conv', '_sg_fc', 'linalg_gemm', 'linalg_gemm2')
_ROUND = '_round_to_precision'


def run(graph, options=Options()):
    """`graph` with the operands that the flags ask for rounded; the same graph when none."""
    flags = config.get('NEURON_CC_FLAGS')
    if flags.auto_cast == 'none':
        return graph
    chosen = {position: _operands(graph, node, flags.auto_cast)
              for position, node in enumerate(graph.nodes) if node.op is not None}
    if not any(chosen.values()):
        return graph
    rewriter, taken = Rewriter(graph), {n.name for n in graph.nodes}
    rounded = {}                  # old entry -> new entry of its rounded value
    attrs = {'precision': flags.auto_cast_type, 'saturate': flags.saturate_infinity}
    for position, node in enumerate(graph.nodes):
        for slot in chosen.get(position, ()):
            entry = node.inputs[slot]
            if entry not in rounded:
                name = unique_name(f'{graph.nodes[entry.node].name}_{flags.auto_cast_type}',
                                   taken)
                round_node = make_node(registry.get(_ROUND), name, attrs,
                                       [rewriter.new(entry)])
                rounded[entry] = Entry(rewriter.add(round_node), 0)
        if chosen.get(position):
            inputs = tuple(rounded[e] if slot in chosen[position] else rewriter.new(e)
                           for slot, e in enumerate(node.inputs))
            rewriter.place(position, dataclasses.replace(node, inputs=inputs))
        else:
            rewriter.copy(position)
    return rewriter.finish()


def _operands(graph, node, mode):
    """The input slots of `node` to round."""
    if node.op.name == _ROUND:
        return ()
    if mode == 'matmult':
        slots = range(min(2, len(node.inputs))) if node.op.name in MATMULT else ()
    else:
        mutated = set(node.op.mutate_indices(node.attrs))
        slots = [i for i in range(len(node.inputs)) if i not in mutated]
    dtypes = graph.attrs['dtype']
    return tuple(i for i in slots
                 if np.dtype(dtypes[graph.entry_id(node.inputs[i])]) == np.float32)
