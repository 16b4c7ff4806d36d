"""Gradient pass: the forward graph extended with the gradients of its outputs.

Each operator's ``gradient(F, attrs, inputs, outputs, out_grads)`` is applied with ``F = mx.sym``,
walking the nodes in reverse. The gradient flowing into forward output ``i`` is a new variable
``<output name>_head_grad`` (the executor copies ``backward(out_grads)`` into it); a loss
operator's rule ignores it, so it is not part of the graph then. Several contributions to one
entry are summed (``elemwise_add``, ``add_n`` from three). Auxiliary states and arguments whose
``grad_req`` is ``'null'`` get no gradient; an argument that no output depends on gets zeros.

The result's outputs are the forward outputs followed by one gradient per argument that wants
one (``attrs['gradient'].wrt`` names them in order). Forward nodes come first, so the executor
runs ``nodes[:num_forward_nodes]`` in forward and the rest in backward.

>>> from ember import symbol as sym
>>> from ember.passes import gradient
>>> y = sym.FullyConnected(sym.var('x'), num_hidden=2, name='fc')
>>> g = gradient.with_gradients(y.to_graph(), grad_req={'fc_weight': 'write', 'fc_bias': 'add'})
>>> g.attrs['gradient'].wrt, g.output_names()[0]
(('fc_weight', 'fc_bias'), 'fc_output')
>>> [g.nodes[i].name for i in g.arg_nodes][-1]
'fc_output_head_grad'

In the pipeline, :func:`run` takes the requests from ``options.grad_req`` (and does nothing
when none asks for a gradient).
"""
from __future__ import annotations

import ast
import logging
from dataclasses import dataclass

from ember import symbol as F
from ember.base import EmberError
from ember.passes._rewrite import without_identities
from ember.passes.options import Options
from ember.symbol.graph import Entry, prune
from ember.symbol.infer import FLAG_OF_TYPE, infer_shapes, infer_types
from ember.symbol.name import NameManager

__all__ = ['run', 'with_gradients', 'direct_gradients', 'GradientInfo', 'GRAD_REQS',
           'grad_reqs_of']

_log = logging.getLogger(__name__)
GRAD_REQS = ('write', 'add', 'null')


@dataclass(frozen=True)
class GradientInfo:
    """What the gradient pass added: the split between forward and backward, and what each
    gradient output and head-gradient variable stands for."""
    num_forward_nodes: int
    num_forward_outputs: int
    wrt: tuple              # argument names, one per gradient output, in order
    grad_req: tuple         # 'write' or 'add' per name of `wrt`
    head_grads: tuple       # (forward output index, variable name) of every head gradient used


def grad_reqs_of(arg_names, grad_req) -> dict:
    """`grad_req` (a str for all, a list in argument order, or a dict; missing names: 'null')
    as a dict name -> req, checked.

    >>> grad_reqs_of(['a', 'b'], {'a': 'add'})
    {'a': 'add', 'b': 'null'}
    """
    if isinstance(grad_req, str):
        reqs = dict.fromkeys(arg_names, grad_req)
    elif isinstance(grad_req, dict):
        unknown = sorted(set(grad_req) - set(arg_names))
        if unknown:
            raise EmberError(f'grad_req names {unknown}, which are not arguments; arguments: '
                             f'{list(arg_names)}')
        reqs = {name: grad_req.get(name, 'null') for name in arg_names}
    elif isinstance(grad_req, (list, tuple)):
        if len(grad_req) != len(arg_names):
            raise EmberError(f'grad_req has {len(grad_req)} items; there are '
                             f'{len(arg_names)} arguments: {list(arg_names)}')
        reqs = dict(zip(arg_names, grad_req))
    else:
        raise TypeError(f'grad_req {grad_req!r}: expected a str, a list or a dict')
    for name, req in reqs.items():
        if req not in GRAD_REQS:
            raise ValueError(f"grad_req {req!r} of {name!r}: expected 'write', 'add' or 'null'")
    return reqs


def run(graph, options=Options()):
    """`graph` with the gradients ``options.grad_req`` asks for (every argument's request; a
    name missing is 'null'); `graph` itself when none asks for one."""
    if not options.wants_gradients:
        return graph
    wrt = [graph.nodes[i].name for i in graph.arg_nodes]
    return with_gradients(graph, wrt, {name: options.grad_req.get(name, 'null') for name in wrt})


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


def with_gradients(graph, wrt=None, grad_req='write'):
    """`graph` (pruned to what its outputs need) with the gradients of the arguments `wrt`
    (names; default every argument) appended as outputs; ``attrs['gradient']`` is a
    :class:`GradientInfo`. Known shapes and dtypes of the outputs (``attrs['shape']``,
    ``attrs['dtype']``) become the head-gradient variables' ``__shape__``/``__dtype__``."""
    graph = _pruned(graph)
    arg_names = [graph.nodes[i].name for i in graph.arg_nodes]
    wrt = list(arg_names if wrt is None else wrt)
    missing = sorted(set(wrt) - set(arg_names))
    if missing:
        raise EmberError(f'gradient: {missing} are not arguments of the graph; arguments: '
                         f'{arg_names}')
    reqs = grad_reqs_of(wrt, grad_req)
    wanted = [name for name in wrt if reqs[name] != 'null']
    symbols = F.node_symbols(graph)
    heads, head_vars = _head_gradients(graph, symbols)
    grads = _backpropagate(graph, symbols, heads, wanted)
    full = F.Group([_entry(symbols, e) for e in graph.outputs] + grads).to_graph()
    present = {full.nodes[i].name for i in full.arg_nodes}
    info = GradientInfo(len(graph.nodes), len(graph.outputs), tuple(wanted),
                        tuple(reqs[name] for name in wanted),
                        tuple((i, name) for i, name in head_vars if name in present))
    # 'num_forward_outputs' is what the mirror pass reads.
    full = full.replace(attrs={'gradient': info, 'num_forward_outputs': info.num_forward_outputs})
    full = _without_identity_reductions(full, graph)
    _log.debug('gradient: %d forward nodes, %d backward nodes, %d gradients',
               info.num_forward_nodes, len(full.nodes) - info.num_forward_nodes, len(wanted))
    return full


def _without_identity_reductions(full, forward):
    """`full` without the ``_reduce_to_shape`` nodes whose gradient already has the shape it
    is reduced to (a same-shape residual add): they would copy it, and reading the forward
    value only for its shape would keep that value alive through the backward pass."""
    if 'shape' not in forward.attrs:
        return full
    known = _variable_values(forward, forward.attrs['shape'])
    known.update({full.nodes[i].name: _declared_shape(full.nodes[i]) for i in full.arg_nodes
                  if full.nodes[i].name not in known})
    shapes = infer_shapes(full, {k: v for k, v in known.items() if v is not None})
    identities = {position for position, node in enumerate(full.nodes)
                  if node.op is not None and node.op.name == '_reduce_to_shape'
                  and shapes[full.entry_id(node.inputs[0])] is not None
                  and shapes[full.entry_id(node.inputs[0])]
                  == shapes[full.entry_id(node.inputs[1])]}
    _log.debug('gradient: %d same-shape reductions dropped', len(identities))
    return without_identities(full, identities)


def _declared_shape(node):
    text = node.attr_text.get('__shape__') if node.attr_text else None
    return None if text is None else tuple(ast.literal_eval(text))


def _pruned(graph):
    # Forward nodes must be exactly those the outputs reach: they come first in the result.
    pruned = prune(graph)
    if pruned is graph:
        return graph
    keep = {k: graph.attrs[k] for k in ('shape', 'dtype') if k in graph.attrs}
    if not keep:
        return pruned
    # Re-infer from the variables' values, which survive pruning unchanged.
    by_name = {k: _variable_values(graph, graph.attrs[k]) for k in keep}
    attrs = {}
    if 'shape' in by_name:
        attrs['shape'] = tuple(infer_shapes(pruned, by_name['shape']))
    if 'dtype' in by_name:
        attrs['dtype'] = tuple(infer_types(pruned, by_name['dtype']))
    return pruned.replace(attrs=attrs)


def _variable_values(graph, values):
    ptr = graph.node_row_ptr
    return {graph.nodes[i].name: values[ptr[i]] for i in graph.input_nodes
            if values[ptr[i]] is not None}


def _entry(symbols, entry):
    return symbols[entry.node][entry.index]


def _head_gradients(graph, symbols):
    """One variable per forward output, shaped like it where the shape is known."""
    shapes, dtypes = graph.attrs.get('shape'), graph.attrs.get('dtype')
    names = graph.output_names()
    heads, head_vars = {}, []
    for i, entry in enumerate(graph.outputs):
        name = f'{names[i]}_head_grad' if names.count(names[i]) == 1 else \
            f'{names[i]}{i}_head_grad'
        kwargs = {}
        eid = graph.entry_id(entry)
        if shapes is not None and shapes[eid] is not None:
            kwargs['shape'] = shapes[eid]
        if dtypes is not None and dtypes[eid] is not None and dtypes[eid].name in FLAG_OF_TYPE:
            kwargs['dtype'] = dtypes[eid]
        heads.setdefault(entry, []).append(F.var(name, **kwargs))
        head_vars.append((i, name))
    return heads, head_vars


def _backpropagate(graph, symbols, grads, wanted):
    """Apply every needed gradient rule in reverse; return the summed gradient per name."""
    needed = _reaches(graph, set(wanted))
    for position in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[position]
        if node.op is None or not needed[position]:
            continue
        outs = [grads.pop(e, None) for e in graph.node_outputs(position)]
        if all(g is None for g in outs):
            continue
        for entry, grad in _node_gradients(graph, symbols, position, outs):
            if needed[entry.node]:
                grads.setdefault(entry, []).append(grad)
    by_name = {graph.nodes[i].name: Entry(i) for i in graph.arg_nodes}
    return [_sum(grads.get(by_name[name]), _entry(symbols, by_name[name]), name)
            for name in wanted]


def _reaches(graph, names):
    """Per node: whether a gradient can flow from it to one of the variables `names`."""
    reaches = [False] * len(graph.nodes)
    for position, node in enumerate(graph.nodes):
        if node.op is None:
            reaches[position] = node.name in names
        else:
            reaches[position] = any(reaches[e.node] for e in node.inputs)
    return reaches


def _node_gradients(graph, symbols, position, outs):
    node = graph.nodes[position]
    if node.op.gradient is None:
        raise EmberError(f'gradient: operator {node.name!r} ({node.op.name}) has no gradient; '
                         f'set grad_req to null for the arguments it depends on, or wrap it in '
                         f'BlockGrad')
    out_syms = [symbols[position][k] for k in range(node.num_outputs)]
    out_grads = [_sum(g, out_sym, f'{node.name}_out{k}')
                 for k, (g, out_sym) in enumerate(zip(outs, out_syms))]
    inputs = [_entry(symbols, e) for e in node.inputs]
    with _BackwardNames(node.name):
        in_grads = node.op.gradient(F, node.attrs, inputs, out_syms, out_grads)
    if len(in_grads) != len(node.inputs):
        raise EmberError(f'gradient: the rule of {node.op.name} returned {len(in_grads)} '
                         f'gradients for {len(node.inputs)} inputs')
    for g in in_grads:
        if g is not None and len(g) != 1:
            raise EmberError(f'gradient: the rule of {node.op.name} returned a group of '
                             f'{len(g)} outputs for one input')
    return [(entry, g) for entry, g in zip(node.inputs, in_grads) if g is not None]


def _sum(contributions, like, name):
    """The sum of the gradients reaching one entry; zeros shaped like it when there are none."""
    if not contributions:
        return F.zeros_like(like, name=f'{name}_zero_grad')
    if len(contributions) == 1:
        return contributions[0]
    if len(contributions) == 2:
        return F.elemwise_add(*contributions, name=f'{name}_grad_sum')
    return F.add_n(*contributions, name=f'{name}_grad_sum')


class _BackwardNames(NameManager):
    """Names the nodes of a gradient rule after the forward node: ``fc1_backward_fullyconnected``
    (a number is added from the second of a kind)."""

    def __init__(self, forward_name):
        super().__init__()
        self._forward = forward_name

    def get(self, name, hint):
        if name:
            return name
        count = self._counter.get(hint, 0)
        self._counter[hint] = count + 1
        stem = f'{self._forward}_{hint.lstrip("_")}'
        return stem if count == 0 else f'{stem}{count}'
