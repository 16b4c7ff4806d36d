"""Below ``-O2`` (NEURON_CC_FLAGS) nothing measures: every convolution takes its algorithm by
rule (``cudnn_tune='off'``), so compiling and the first run time nothing.

>>> from ember import config, symbol as sym
>>> net = sym.Convolution(sym.var('x'), kernel=(3, 3), num_filter=2, name='c')
>>> with config.override(NEURON_CC_FLAGS='-O1'):
...     [n.attrs['cudnn_tune'] for n in run(net.to_graph()).nodes if n.op]
['off']
"""
from __future__ import annotations

import dataclasses

from ember import config
from ember.passes.options import Options

__all__ = ['run']


def run(graph, options=Options()):
    """`graph` with measurement turned off at opt levels 0 and 1; else `graph` itself."""
    if config.get('NEURON_CC_FLAGS').opt_level >= 2:
        return graph
    nodes = tuple(_by_rule(node) for node in graph.nodes)
    if all(a is b for a, b in zip(nodes, graph.nodes)):
        return graph
    return graph.replace(nodes=nodes)


def _by_rule(node):
    if node.op is None or 'cudnn_tune' not in node.attrs or node.attrs['cudnn_tune'] == 'off':
        return node
    return dataclasses.replace(node, attrs={**node.attrs, 'cudnn_tune': 'off'},
                               attr_text={**node.attr_text, 'cudnn_tune': 'off'})
