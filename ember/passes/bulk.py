"""Bulk segmentation: consecutive operators grouped into segments, each one engine operation.

A graph without a backward part (inference) is one segment under
``MXNET_EXEC_BULK_EXEC_INFERENCE``. A training graph (one the gradient pass extended) is cut into
segments of at most ``MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD`` operators in its forward part and
``..._BWD`` in its backward part under ``MXNET_EXEC_BULK_EXEC_TRAIN``. Off, or with a size of 0 or
1, every operator is a segment of its own (one profiler event per operator).

>>> from ember import config, symbol as sym
>>> from ember.passes import bulk
>>> g = sym.relu(sym.exp(sym.var('x')), name='r').to_graph()
>>> [s.name for s in bulk.run(g).attrs['segments']]
['bulk[exp,relu]']
>>> with config.override(MXNET_EXEC_BULK_EXEC_INFERENCE=False):
...     [s.name for s in bulk.run(g).attrs['segments']]
['exp', 'relu']
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ember import config
from ember.passes.options import Options

__all__ = ['run', 'Segment']

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Segment:
    """Operator nodes (positions, in order) run as one engine operation."""
    nodes: tuple
    backward: bool
    name: str           # the operator's name, or 'bulk[op,op,...]'


def run(graph, options=Options()):
    """`graph` with ``attrs['segments']``: a tuple of :class:`Segment` covering every operator
    node, forward segments first. Whether the graph has a gradient part picks the training or
    the inference rule, as in MXNet (not ``options.is_train``: a forward pass in training
    mode without gradients bulks as inference)."""
    bulk_inference = config.get('MXNET_EXEC_BULK_EXEC_INFERENCE')
    bulk_train = config.get('MXNET_EXEC_BULK_EXEC_TRAIN')
    info = graph.attrs.get('gradient')
    is_train = info is not None
    split = len(graph.nodes) if info is None else info.num_forward_nodes
    if is_train:
        fwd = config.get('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD') if bulk_train else 1
        bwd = config.get('MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD') if bulk_train else 1
    else:
        fwd = bwd = len(graph.nodes) if bulk_inference else 1
    segments = (_segments(graph, range(split), fwd, False)
                + _segments(graph, range(split, len(graph.nodes)), bwd, True))
    _log.debug('bulk: %d operators in %d segments (%s)', sum(len(s.nodes) for s in segments),
               len(segments), 'training' if is_train else 'inference')
    return graph.replace(attrs={**graph.attrs, 'segments': segments})


def _segments(graph, positions, size, backward):
    ops = [p for p in positions if graph.nodes[p].op is not None]
    size = max(size, 1)
    return tuple(_segment(graph, tuple(ops[i:i + size]), backward)
                 for i in range(0, len(ops), size))


def _segment(graph, nodes, backward):
    names = [graph.nodes[p].op.name for p in nodes]
    name = names[0] if len(names) == 1 else 'bulk[' + ','.join(names) + ']'
    return Segment(nodes, backward, name)
