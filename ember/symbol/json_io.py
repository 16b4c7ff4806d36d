"""MXNet 1.x's JSON graph format, read and written byte for byte as MXNet writes it.

A document has ``nodes`` (each ``op`` — ``"null"`` for a variable —, ``name``, ``attrs`` with
every value a string, ``inputs`` as ``[node, output, version]``), ``arg_nodes`` (the variables),
``node_row_ptr`` (the first entry id of each node), ``heads`` (the outputs) and ``attrs``
(``{"mxnet_version": ["int", 10901]}``). Older files keep operator parameters under ``param``
and user attributes under ``attr``, write inputs as ``[node, output]``, store ``ctx_group``
or ``lr_mult`` without underscores and may leave out auxiliary inputs; ``loads`` reads them
too, adding variables named ``<node>_<input>`` for missing inputs as MXNet's upgrader does.

>>> from ember.op import registry
>>> from ember.symbol.graph import Entry, Graph, Node, make_node
>>> g = Graph([Node(None, 'x'), make_node(registry.get('Activation'), 'act',
...                                       {'act_type': 'relu'}, [Entry(0)])], [Entry(1)])
>>> print(dumps(g))  # doctest: +NORMALIZE_WHITESPACE
{
  "nodes": [
    {
      "op": "null",
      "name": "x",
      "inputs": []
    },
    {
      "op": "Activation",
      "name": "act",
      "attrs": {"act_type": "relu"},
      "inputs": [[0, 0, 0]]
    }
  ],
  "arg_nodes": [0],
  "node_row_ptr": [0, 1, 2],
  "heads": [[1, 0, 0]],
  "attrs": {"mxnet_version": ["int", 10901]}
}
>>> [n.name for n in loads(dumps(g)).nodes]
['x', 'act']
"""
from __future__ import annotations

import json

from ember.base import EmberError
from ember.op import registry
from ember.symbol.graph import HIDDEN_KEYS, Entry, Graph, Node

__all__ = ['dumps', 'loads', 'MXNET_VERSION']

MXNET_VERSION = 10901          # the version Ember's files claim: MXNet 1.9.1


# ----------------------------------------------------------------------------------------------
# Writing

def dumps(graph: Graph) -> str:
    """The JSON text of `graph`, formatted as MXNet's writer formats it."""
    document = {
        'nodes': [_node_document(node) for node in graph.nodes],
        'arg_nodes': list(graph.input_nodes),
        'node_row_ptr': list(graph.node_row_ptr),
        'heads': [[e.node, e.index, 0] for e in graph.outputs],
        'attrs': {'mxnet_version': ['int', MXNET_VERSION]},
    }
    out = []
    _write(document, out, 0)
    return ''.join(out)


def _node_document(node):
    document = {'op': 'null' if node.op is None else node.op.name, 'name': node.name}
    if node.attr_text:
        document['attrs'] = dict(sorted(node.attr_text.items()))
    document['inputs'] = [[e.node, e.index, 0] for e in node.inputs]
    return document


def _write(value, out, depth):
    """dmlc's JSON writer: an object spans lines when it has more than one key, an array when
    it has more than ten items or holds objects; separators are ', ' and indents two spaces."""
    if isinstance(value, dict):
        items = [(f'{_quote(key)}: ', item) for key, item in value.items()]
        _write_items('{', '}', items, len(value) > 1, out, depth)
    elif isinstance(value, list):
        multi_line = len(value) > 10 or any(isinstance(v, dict) for v in value)
        _write_items('[', ']', [('', item) for item in value], multi_line, out, depth)
    elif isinstance(value, str):
        out.append(_quote(value))
    else:
        out.append(str(int(value)))


def _write_items(begin, end, items, multi_line, out, depth):
    out.append(begin)
    newline = '\n' + '  ' * (depth + 1)
    for count, (prefix, item) in enumerate(items):
        if count:
            out.append(', ')
        if multi_line:
            out.append(newline)
        out.append(prefix)
        _write(item, out, depth + 1)
    if multi_line and items:
        out.append('\n' + '  ' * depth)
    out.append(end)


_ESCAPES = {'\r': '\\r', '\n': '\\n', '\\': '\\\\', '\t': '\\t', '"': '\\"'}


def _quote(text):
    return '"' + ''.join(_ESCAPES.get(ch, ch) for ch in text) + '"'


# ----------------------------------------------------------------------------------------------
# Reading

def loads(text: str) -> Graph:
    """The graph of MXNet JSON `text` (any 1.x version, and the older ``param``/``attr`` form)."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EmberError(f'symbol JSON: not valid JSON ({exc})') from None
    if not isinstance(document, dict) or 'nodes' not in document or 'heads' not in document:
        raise EmberError('symbol JSON: expected an object with "nodes" and "heads" (MXNet\'s '
                         'graph format)')
    nodes, moved = [], []           # moved[i]: the position of the file's node i
    for position, raw in enumerate(document['nodes']):
        moved.append(_load_node(raw, position, nodes, moved))
    heads = [_entry(raw, moved, len(moved), 'heads') for raw in document['heads']]
    return Graph(nodes, heads)


def _load_node(raw, position, nodes, moved):
    name, op_name = raw.get('name'), raw.get('op')
    if not isinstance(name, str) or not isinstance(op_name, str):
        raise EmberError(f'symbol JSON: node {position} needs a string "op" and "name", got '
                         f'{raw!r:.200}')
    text = _attr_text(raw)
    inputs = [_entry(e, moved, position, f'node {name!r}') for e in raw.get('inputs', [])]
    if op_name == 'null':
        nodes.append(Node(None, name, {}, (), text))
        return len(nodes) - 1
    op = _operator(op_name, name)
    attrs = _parse(op, name, text)
    names = op.input_names(attrs)
    if len(inputs) > len(names):
        raise EmberError(f'symbol JSON: node {name!r} ({op.name}) has {len(inputs)} inputs; '
                         f'the operator takes {len(names)} ({", ".join(names)})')
    for input_name in names[len(inputs):]:
        # Files from before auxiliary states were explicit leave them out.
        nodes.append(Node(None, f'{name}_{input_name}', {}, (), dict(text)))
        inputs.append(Entry(len(nodes) - 1, 0))
    nodes.append(Node(op, name, attrs, tuple(inputs), text))
    return len(nodes) - 1


def _attr_text(raw):
    text = {}
    for key in ('param', 'attr', 'attrs'):
        for attr_key, value in (raw.get(key) or {}).items():
            text[f'__{attr_key}__' if attr_key in HIDDEN_KEYS else attr_key] = str(value)
    return text


def _entry(raw, moved, before, where):
    if not isinstance(raw, list) or len(raw) not in (2, 3):
        raise EmberError(f'symbol JSON: {where}: entry {raw!r} must be [node, output] or '
                         f'[node, output, version]')
    node, index = int(raw[0]), int(raw[1])
    if not 0 <= node < before:
        raise EmberError(f'symbol JSON: {where}: entry {raw!r} refers to node {node}, which '
                         f'does not come before it')
    return Entry(moved[node], index)


def _operator(op_name, node_name):
    try:
        return registry.get(op_name)
    except AttributeError as exc:
        raise EmberError(f'symbol JSON: node {node_name!r}: {exc}') from None


def _parse(op, node_name, text):
    params = {p.name for p in op.params}
    try:
        return op.parse_attrs({k: v for k, v in text.items() if k in params})
    except (TypeError, ValueError) as exc:
        raise EmberError(f'symbol JSON: node {node_name!r}: {exc}') from None
