"""The passes a bound graph goes through, in order: the one place that lists them.

Each pass is a module of :mod:`ember.passes` with ``run(graph, ...)``; each checks its own
variable (``MXNET_SUBGRAPH_BACKEND``, ``MXNET_ELIMINATE_COMMON_EXPR``, ``MXNET_BACKWARD_DO_MIRROR``,
``MXNET_USE_FUSION``, ...) and returns the graph unchanged when it is off. A pass gets the
keyword arguments its ``run`` names among ``shapes``, ``dtypes`` (by variable name),
``is_train``, ``device``, ``grad_req``, ``params`` (variable name -> value) and
``num_forward_outputs``. One that returns ``(graph, params)`` (BatchNorm folding) introduces
variables with values: they are recorded as ``attrs['folded']``, a :class:`Folded`, which the
executor binds and refreshes when the values they came from change. Before each pass the
shapes and dtypes (``attrs['shape']``, ``attrs['dtype']``) are inferred again if the graph
changed. An optimisation pass not built yet is skipped, and :func:`missing` names it.

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

import dataclasses
import importlib
import inspect
import logging
from dataclasses import dataclass, field
from typing import Callable

from ember.base import EmberError
from ember.passes import bulk, gradient, infer_shape, infer_type, plan_memory
from ember.symbol.graph import Entry, Graph
from ember.symbol.infer import shape_is_known

__all__ = ['PASSES', 'compile_graph', 'missing', 'direct_gradients', 'Options', 'Folded']

_log = logging.getLogger(__name__)

PASSES = (
    'subgraph',         # MXNET_SUBGRAPH_BACKEND: fold BatchNorm, fuse convolutions (inference);
                        # channel-last convolution regions (inference and training)
    'cse',              # MXNET_ELIMINATE_COMMON_EXPR: merge identical nodes
    'gradient',         # the backward part, when some grad_req is not 'null'
    'mirror',           # MXNET_BACKWARD_DO_MIRROR: recompute cheap forward results in backward
    'fusion',           # MXNET_USE_FUSION: element-wise chains as one kernel
    'plan_memory',      # MXNET_EXEC_ENABLE_INPLACE, NNVM_EXEC_MATCH_RANGE, MXNET_EXEC_NUM_TEMP
    'infer_storage',    # storage types (csr, row_sparse); sparse entries leave the arena
    'bulk',             # MXNET_EXEC_BULK_EXEC_*: segments, one engine push each
)

_ABSENT: set = set()


@dataclass(frozen=True)
class Options:
    """What the passes may ask for."""
    shapes: dict                          # variable name -> shape
    dtypes: dict                          # variable name -> dtype
    grad_req: dict = field(default_factory=dict)    # argument name -> 'write', 'add', 'null'
    is_train: bool = False
    device: object = None
    params: dict = field(default_factory=dict)      # variable name -> value (NDArray)


@dataclass(frozen=True)
class Folded:
    """Variables a pass introduced with values: `values` (name -> NumPy array) computed from
    the variables `sources`; ``refold(params)`` computes them again from new values.

    The values the pass computed are handed out by the first read of `values` and then
    dropped: the executor copies them into its own arrays, and keeping them here would hold
    a second copy of every folded parameter (100 MB for resnet50) for the executor's life.
    A later read folds the variables' current values again.

    >>> folded = Folded({'w': 1}, ('v',), lambda params: {'w': params['v'] + 1}, {'v': 4})
    >>> folded.values, folded.values
    ({'w': 1}, {'w': 5})
    """
    first_values: dict
    sources: tuple
    refold: Callable
    params: dict                          # the variables' values the pass was given
    _pending: list = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, '_pending', [self.first_values])
        object.__setattr__(self, 'first_values', None)

    @property
    def values(self) -> dict:
        """Name -> value of every folded variable."""
        if self._pending:
            return self._pending.pop()
        return self.refold(self.params)


def compile_graph(graph, shapes, dtypes, grad_req=None, is_train=None, device=None,
                  params=None):
    """`graph` through every pass of :data:`PASSES`; the result carries ``attrs['shape']``,
    ``['dtype']``, ``['memory_plan']``, ``['segments']`` and, when some argument wants a
    gradient, ``['gradient']``. `is_train` (default: whether gradients are computed) is what
    the optimisation passes are told; `params` gives the values of variables (for passes that
    fold parameters)."""
    grad_req = dict(grad_req or {})
    wants_grad = any(req != 'null' for req in grad_req.values())
    options = Options(dict(shapes), dict(dtypes), grad_req,
                      wants_grad if is_train is None else bool(is_train), device,
                      dict(params or {}))
    for name in PASSES:
        graph = _typed(graph, options)
        graph = _apply(name, graph, options)
    return graph


def missing() -> list:
    """The optimisation passes of :data:`PASSES` that this build does not have."""
    return [name for name in PASSES if _load(name) is None]


def direct_gradients(graph, grad_req) -> dict:
    """Gradient outputs the executor writes straight into the user's gradient arrays:
    ``{entry id: argument name}`` for 'write' gradients computed by a backward operator (each
    entry once); the others (a head gradient, a forward value) are copied or added after they
    are computed."""
    info = graph.attrs.get('gradient')
    if info is None:
        return {}
    direct = {}
    for k, name in enumerate(info.wrt):
        entry = graph.outputs[info.num_forward_outputs + k]
        eid = graph.entry_id(entry)
        if (grad_req.get(name) == 'write' and entry.node >= info.num_forward_nodes
                and graph.nodes[entry.node].op is not None and eid not in direct):
            direct[eid] = name
    return direct


# ----------------------------------------------------------------------------------------------

def _apply(name, graph, options):
    if name == 'gradient':
        if not any(req != 'null' for req in options.grad_req.values()):
            return graph
        wrt = [graph.nodes[i].name for i in graph.arg_nodes]
        return gradient.run(graph, wrt, {n: options.grad_req.get(n, 'null') for n in wrt})
    if name == 'plan_memory':
        graph = _typed(_forward_first(graph), options)
        return plan_memory.run(graph, external=direct_gradients(graph, options.grad_req))
    if name == 'bulk':
        return bulk.run(graph)
    module = _load(name)
    if module is None:
        return graph
    kwargs = _wanted(module.run, graph, options)
    result = module.run(graph, **kwargs)
    if isinstance(result, tuple):
        return _with_folded(module, graph, kwargs, options, *result)
    return result


def _load(name):
    if name in _ABSENT:
        return None
    try:
        return importlib.import_module(f'ember.passes.{name}')
    except ModuleNotFoundError as exc:
        if exc.name != f'ember.passes.{name}':
            raise                      # the pass exists but something it imports does not
        _ABSENT.add(name)
        _log.info('pipeline: pass %r is not built yet; skipped', name)
        return None


def _wanted(run, graph, options):
    params = inspect.signature(run).parameters
    info = graph.attrs.get('gradient')
    values = {'shapes': options.shapes, 'dtypes': options.dtypes, 'is_train': options.is_train,
              'device': options.device, 'grad_req': options.grad_req,
              'params': options.params,
              'num_forward_outputs': len(graph.outputs) if info is None
              else info.num_forward_outputs}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return values
    return {k: v for k, v in values.items() if k in params}


def _with_folded(module, before, kwargs, options, graph, params):
    """`graph` with ``attrs['folded']`` for the variables the pass introduced with values."""
    given = options.params
    new = {k: v for k, v in (params or {}).items() if k not in given}
    if not new:
        return graph
    names = {graph.nodes[i].name for i in graph.input_nodes}
    sources = tuple(k for k in given if k not in names)
    folded_names = frozenset(new)         # not `new` itself: the closure would hold its values

    def refold(values):
        return {k: v for k, v in module.run(before, **{**kwargs, 'params': values})[1].items()
                if k in folded_names}
    return graph.replace(attrs={**graph.attrs, 'folded': Folded(new, sources, refold, given)})


def _typed(graph, options):
    """`graph` with every entry's shape and dtype, inferred if a pass dropped them."""
    if len(graph.attrs.get('shape', ())) != graph.num_entries:
        graph = infer_shape.run(graph, _known(graph, options.shapes))
    if len(graph.attrs.get('dtype', ())) != graph.num_entries:
        graph = infer_type.run(graph, _known(graph, options.dtypes))
    _check_known(graph)
    return graph


def _known(graph, values):
    names = {graph.nodes[i].name for i in graph.input_nodes}
    return {k: v for k, v in values.items() if k in names}


def _check_known(graph):
    ptr, shapes, dtypes = graph.node_row_ptr, graph.attrs['shape'], graph.attrs['dtype']
    unknown = [f'{graph.nodes[i].name}: shape {shapes[ptr[i]]}, dtype {dtypes[ptr[i]]}'
               for i in graph.input_nodes
               if not shape_is_known(shapes[ptr[i]]) or dtypes[ptr[i]] is None]
    if unknown:
        raise EmberError('cannot bind: the shape or dtype of these inputs is not known; give '
                         'them (simple_bind keyword shapes, type_dict):\n\t'
                         + '\n\t'.join(unknown[:10]))


def _forward_first(graph):
    """A training graph whose forward nodes (those the forward outputs need) come first, with
    ``num_forward_nodes`` counted again: passes after the gradient may move or merge nodes."""
    info = graph.attrs.get('gradient')
    if info is None:
        return graph
    forward = _needed(graph, graph.outputs[:info.num_forward_outputs])
    heads = {name for _, name in info.head_grads}
    late = sorted(p for p in forward if graph.nodes[p].name in heads)
    if late:
        raise EmberError(f'a graph pass made the forward outputs depend on the head gradient '
                         f'{graph.nodes[late[0]].name!r}; forward and backward nodes must not '
                         f'be merged')
    order = sorted(forward) + [p for p in range(len(graph.nodes)) if p not in forward]
    info = dataclasses.replace(info, num_forward_nodes=len(forward))
    if order == list(range(len(graph.nodes))):
        return graph.replace(attrs={**graph.attrs, 'gradient': info})
    return _reordered(graph, order, info)


def _needed(graph, entries):
    needed = {e.node for e in entries}
    for position in range(len(graph.nodes) - 1, -1, -1):
        if position in needed:
            needed.update(e.node for e in graph.nodes[position].inputs)
    return needed


def _reordered(graph, order, info):
    new_position = {old: new for new, old in enumerate(order)}

    def remap(entry):
        return Entry(new_position[entry.node], entry.index)
    nodes = [dataclasses.replace(graph.nodes[old], inputs=tuple(map(remap,
                                                                    graph.nodes[old].inputs)))
             for old in order]
    attrs = {k: v for k, v in graph.attrs.items() if not isinstance(v, (tuple, list))}
    return Graph(nodes, [remap(e) for e in graph.outputs], {**attrs, 'gradient': info})
