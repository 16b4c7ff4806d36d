"""The graph IR that passes and the executor work on.

A :class:`Graph` is a tuple of :class:`Node` in topological order (every input of a node comes
before it) and the :class:`Entry` list of its outputs. A node is a variable (``op is None``) or an
operator call; an entry names one output of one node by position: ``Entry(node, index)``.

A node carries its operator attributes twice, for two readers. ``attrs`` holds the parsed values
with defaults filled in (what kernels, shape and type inference and passes read); ``attr_text``
holds what MXNet keeps in a node's attribute dictionary: the operator parameters that were given,
as strings, plus user attributes such as ``__shape__``, ``__lr_mult__``, ``__force_mirroring__``
or ``__ctx_group__`` (the JSON form writes exactly ``attr_text``). Build operator nodes with
:func:`make_node` so that both agree.

Every output of a node has an entry id, its position in the flat list of all outputs
(``graph.entry_id(entry)``, MXNet's ``node_row_ptr``): passes keep per-entry results, such as
``graph.attrs['shape']``, in lists indexed by it. Passes return new graphs
(``dataclasses.replace(graph, attrs={**graph.attrs, 'shape': ...})``); nodes and graphs are frozen.

>>> from ember.op import registry
>>> x = Node(None, 'x')
>>> relu = make_node(registry.get('relu'), 'r', {}, [Entry(0)])
>>> g = Graph((x, relu), (Entry(1),))
>>> g.num_entries, [n.name for n in g.nodes if n.is_variable], g.output_names()
(2, ['x'], ['r_output'])
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable

import numpy as np

from ember.base import EmberError
from ember.op.registry import REQUIRED, OpDef

__all__ = ['Entry', 'Node', 'NodeMethods', 'Graph', 'make_node', 'attr_text_of', 'param_text',
           'topo_order', 'consumers', 'prune', 'HIDDEN_KEYS', 'hidden_key']

# Attribute names MXNet stores as ``__name__`` (lr_mult='2' is kept as __lr_mult__='2').
HIDDEN_KEYS = ('ctx_group', 'lr_mult', 'wd_mult', 'force_mirroring', 'mirror_stage',
               'profiler_scope')


def hidden_key(key: str) -> str:
    """The stored form of a user attribute name: ``lr_mult`` -> ``__lr_mult__``."""
    return f'__{key}__' if key in HIDDEN_KEYS else key


@dataclass(frozen=True)
class Entry:
    """Output `index` of node `node` (a position in ``Graph.nodes``)."""
    node: int
    index: int = 0


class NodeMethods:
    """What a node's operator and attributes tell about it; shared with the Symbol builder's
    nodes (``op``, ``name``, ``attrs``, ``attr_text`` attributes)."""

    __slots__ = ()

    @property
    def is_variable(self) -> bool:
        return self.op is None

    @property
    def num_outputs(self) -> int:
        """Every output, hidden ones included (BatchNorm: output, mean, var)."""
        return 1 if self.op is None else self.op.num_outputs(self.attrs)

    @property
    def num_visible_outputs(self) -> int:
        return 1 if self.op is None else self.op.num_visible_outputs(self.attrs)

    def output_names(self) -> list:
        """MXNet's names of this node's outputs: ``fc1_output``, ``bn_mean``; a variable's name."""
        if self.op is None:
            return [self.name]
        return [f'{self.name}_{out}' for out in self.op.output_names(self.attrs)]

    def input_names(self) -> list:
        return [] if self.op is None else self.op.input_names(self.attrs)

    @property
    def user_attrs(self) -> dict:
        """The attributes that are not operator parameters (all of a variable's)."""
        params = set() if self.op is None else {p.name for p in self.op.params}
        return {k: v for k, v in self.attr_text.items() if k not in params}


@dataclass(frozen=True, eq=False)
class Node(NodeMethods):
    """A variable (``op`` None) or an operator call. Compared by identity."""
    op: OpDef | None
    name: str
    attrs: dict = field(default_factory=dict)       # parsed operator attributes, defaults filled
    inputs: tuple = ()                              # Entry per input of the operator
    attr_text: dict = field(default_factory=dict)   # MXNet's attribute dictionary, all strings


def param_text(value) -> str:
    """MXNet's string form of a parameter value: ``str(value)``, dtypes by name."""
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, type) and issubclass(value, np.generic):
        return np.dtype(value).name
    return str(value)


def attr_text_of(op: OpDef, params: dict, user_attrs: dict | None = None) -> dict:
    """MXNet's attribute dictionary of an operator node: the parameters given (a None that
    only restates the default is left out) and the user attributes, all as strings."""
    text = {}
    for param in op.params:
        if param.name not in params:
            continue
        value = params[param.name]
        if value is not None:
            text[param.name] = param_text(value)
        elif getattr(param.convert, 'accepts_none', False) and param.default not in (None,
                                                                                  REQUIRED):
            text[param.name] = 'None'
    text.update({hidden_key(k): str(v) for k, v in (user_attrs or {}).items()})
    return text


def make_node(op: OpDef, name: str, params: dict, inputs: Iterable[Entry],
              user_attrs: dict | None = None) -> Node:
    """An operator node from parameter values as a user gives them (Python values or strings)."""
    return Node(op, name, op.parse_attrs(params), tuple(inputs),
                attr_text_of(op, params, user_attrs))


@dataclass(frozen=True, eq=False)
class Graph:
    """Nodes in topological order and the entries that are the graph's outputs.

    ``attrs`` holds what passes computed, keyed by name (``'shape'``, ``'dtype'``: one value
    per entry id).
    """
    nodes: tuple
    outputs: tuple
    attrs: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, 'nodes', tuple(self.nodes))
        object.__setattr__(self, 'outputs', tuple(self.outputs))
        for position, node in enumerate(self.nodes):
            for entry in node.inputs:
                self._check_entry(entry, position, f'input of node {node.name!r}')
        for entry in self.outputs:
            self._check_entry(entry, len(self.nodes), 'graph output')

    def _check_entry(self, entry, before, what):
        if not 0 <= entry.node < before:
            raise EmberError(f'graph: {what} {entry} refers to node {entry.node}; it must be '
                             f'one of the {before} nodes before it (topological order)')
        if not 0 <= entry.index < self.nodes[entry.node].num_outputs:
            node = self.nodes[entry.node]
            raise EmberError(f'graph: {what} {entry} asks for output {entry.index} of '
                             f'{node.name!r}, which has {node.num_outputs}')

    @cached_property
    def node_row_ptr(self) -> tuple:
        """Entry id of each node's first output; the last item is the number of entries."""
        ptr = [0]
        for node in self.nodes:
            ptr.append(ptr[-1] + node.num_outputs)
        return tuple(ptr)

    @property
    def num_entries(self) -> int:
        return self.node_row_ptr[-1]

    def entry_id(self, entry: Entry) -> int:
        return self.node_row_ptr[entry.node] + entry.index

    def node_outputs(self, position: int) -> list:
        """The entries of every output of node `position`, hidden ones included."""
        return [Entry(position, i) for i in range(self.nodes[position].num_outputs)]

    @cached_property
    def aux_nodes(self) -> tuple:
        """Positions of the variables some operator updates (MXNet's auxiliary states)."""
        mutated = set()
        for node in self.nodes:
            if node.op is not None:
                mutated.update(node.inputs[i].node for i in node.op.mutate_indices(node.attrs))
        return tuple(i for i, n in enumerate(self.nodes) if n.op is None and i in mutated)

    @cached_property
    def arg_nodes(self) -> tuple:
        """Positions of the variables that are arguments (not auxiliary states), in order."""
        aux = set(self.aux_nodes)
        return tuple(i for i, n in enumerate(self.nodes) if n.op is None and i not in aux)

    @property
    def input_nodes(self) -> tuple:
        """Positions of every variable, arguments and auxiliary states, in order."""
        return tuple(i for i, n in enumerate(self.nodes) if n.op is None)

    def output_names(self) -> list:
        """MXNet's ``list_outputs``: ``fc1_output``, a variable's own name."""
        return [self.nodes[e.node].output_names()[e.index] for e in self.outputs]

    def replace(self, **changes) -> 'Graph':
        return dataclasses.replace(self, **changes)


def topo_order(roots: Iterable[Any], inputs_of: Callable[[Any], Iterable[Any]]) -> list:
    """Every object reachable from `roots`, inputs before users (post-order depth-first, the
    order MXNet lists arguments in). Objects are told apart by identity; no recursion.

    >>> deps = {'c': ['a', 'b'], 'b': ['a'], 'a': []}
    >>> topo_order(['c'], deps.__getitem__)
    ['a', 'b', 'c']
    """
    order, seen, done = [], set(), object()
    for root in roots:
        if id(root) in seen:
            continue
        seen.add(id(root))
        stack = [(root, iter(inputs_of(root)))]
        while stack:
            item, pending = stack[-1]
            child = next(pending, done)
            if child is done:
                stack.pop()
                order.append(item)
            elif id(child) not in seen:
                seen.add(id(child))
                stack.append((child, iter(inputs_of(child))))
    return order


def consumers(graph: Graph) -> list:
    """Per node position, the ``(consumer position, input slot)`` pairs that read its outputs."""
    users = [[] for _ in graph.nodes]
    for position, node in enumerate(graph.nodes):
        for slot, entry in enumerate(node.inputs):
            users[entry.node].append((position, slot))
    return users


def prune(graph: Graph) -> Graph:
    """The graph without the nodes its outputs do not depend on, in the same order and
    renumbered (pass results in ``attrs`` are dropped, since entry ids change)."""
    live = [False] * len(graph.nodes)
    for entry in graph.outputs:
        live[entry.node] = True
    for position in range(len(graph.nodes) - 1, -1, -1):
        if live[position]:
            for entry in graph.nodes[position].inputs:
                live[entry.node] = True
    if all(live):
        return graph
    kept = [i for i, alive in enumerate(live) if alive]
    new_position = {old: new for new, old in enumerate(kept)}

    def remap(entry):
        return Entry(new_position[entry.node], entry.index)
    nodes = [dataclasses.replace(node, inputs=tuple(map(remap, node.inputs)))
             for node in (graph.nodes[old] for old in kept)]
    return Graph(nodes, [remap(e) for e in graph.outputs])
