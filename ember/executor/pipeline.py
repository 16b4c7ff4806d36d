"""The passes a bound graph goes through, in order: the one place that lists them.

Every pass is a module of :mod:`ember.passes` with ``run(graph, options) -> graph``; each checks
its own variable (``MXNET_SUBGRAPH_BACKEND``, ``MXNET_ELIMINATE_COMMON_EXPR``,
``MXNET_BACKWARD_DO_MIRROR``, ``MXNET_USE_FUSION``, ...) and the :class:`Options` it needs, and
returns the graph unchanged when it is off. What a pass hands to the executor travels on the
graph (``attrs``: the gradient's split, BatchNorm's folded parameters, the memory plan, the
segments). Before each pass the shapes and dtypes (``attrs['shape']``, ``attrs['dtype']``) are
inferred again if the graph changed. A pass that only optimises says so with a module-level
``OPT_LEVEL = 1``: under ``-O0`` in NEURON_CC_FLAGS it does not run.

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.executor import pipeline
>>> net = sym.FullyConnected(sym.var('x'), num_hidden=4, name='fc')
>>> g = pipeline.compile_graph(net.to_graph(), {'x': (2, 3)}, {'x': np.float32},
...                            grad_req={'fc_weight': 'write'})
>>> g.output_names(), g.attrs['memory_plan'].planned_bytes > 0
(['fc_output', 'fc_backward_fullyconnected_weight_grad'], True)
"""
from __future__ import annotations

from ember.base import EmberError
from ember import config
from ember.passes import (
    algorithm_search, auto_cast, bulk, channel_last, cse, fold_batch_norm, forward_first,
    fuse_batch_norm_relu, fuse_layers, fusion, gradient, infer_shape, infer_storage, infer_type,
    mirror, plan_memory, remove_identities)
from ember.passes.options import Options
from ember.symbol.infer import shape_is_known

__all__ = ['PASSES', 'compile_graph', 'typed', 'Options']

PASSES = (
    remove_identities,      # MXNET_SUBGRAPH_BACKEND (inference): _copy, unread Dropout
    fold_batch_norm,        # ... BatchNorm into the layer before it, with the parameters
    fuse_layers,            # ... convolution + add + activation, FullyConnected + activation
    channel_last,           # ... NHWC regions around 2-D convolutions (inference and training)
    fuse_batch_norm_relu,   # ... (training) BatchNorm + relu, BatchNorm + add + relu
    auto_cast,              # NEURON_CC_FLAGS --auto-cast: operands rounded to bf16/fp16/tf32
    algorithm_search,       # NEURON_CC_FLAGS below -O2: convolutions by rule, nothing measured
    cse,                    # MXNET_ELIMINATE_COMMON_EXPR: merge identical nodes
    gradient,               # the backward part, when some grad_req is not 'null'
    mirror,                 # MXNET_BACKWARD_DO_MIRROR: recompute cheap forward results in backward
    fusion,                 # MXNET_USE_FUSION: element-wise chains as one kernel
    forward_first,          # the forward nodes first again, counted
    plan_memory,            # MXNET_EXEC_ENABLE_INPLACE, NNVM_EXEC_MATCH_RANGE, MXNET_EXEC_NUM_TEMP
    infer_storage,          # storage types (csr, row_sparse); sparse entries leave the arena
    bulk,                   # MXNET_EXEC_BULK_EXEC_*: segments, one engine push each
)


def compile_graph(graph, shapes, dtypes, grad_req=None, is_train=None, device=None,
                  params=None):
    """`graph` through every pass of :data:`PASSES`; the result carries ``attrs['shape']``,
    ``['dtype']``, ``['memory_plan']``, ``['segments']`` and, when some argument wants a
    gradient, ``['gradient']``. `is_train` (default: whether gradients are computed) is what
    the optimisation passes are told; `params` gives the values of variables (for passes that
    fold parameters)."""
    grad_req = dict(grad_req or {})
    wants_gradients = any(req != 'null' for req in grad_req.values())
    options = Options(dict(shapes), dict(dtypes), grad_req,
                      wants_gradients if is_train is None else bool(is_train), device,
                      dict(params or {}))
    level = config.get('NEURON_CC_FLAGS').opt_level
    for each in PASSES:
        if getattr(each, 'OPT_LEVEL', 0) <= level:
            graph = each.run(_typed(graph, options), options)
    return graph


def typed(graph, options):
    """`graph` with the shapes and dtypes of its entries inferred for `options`."""
    return _typed(graph, options)


def _typed(graph, options):
    """`graph` with every entry's shape and dtype, inferred if a pass dropped them."""
    if len(graph.attrs.get('shape', ())) != graph.num_entries:
        graph = infer_shape.run(graph, options)
    if len(graph.attrs.get('dtype', ())) != graph.num_entries:
        graph = infer_type.run(graph, options)
    _check_known(graph)
    return graph


def _check_known(graph):
    ptr, shapes, dtypes = graph.node_row_ptr, graph.attrs['shape'], graph.attrs['dtype']
    unknown = [f'{graph.nodes[i].name}: shape {shapes[ptr[i]]}, dtype {dtypes[ptr[i]]}'
               for i in graph.input_nodes
               if not shape_is_known(shapes[ptr[i]]) or dtypes[ptr[i]] is None]
    if unknown:
        raise EmberError('cannot bind: the shape or dtype of these inputs is not known; give '
                         'them (simple_bind keyword shapes, type_dict):\n\t'
                         + '\n\t'.join(unknown[:10]))
