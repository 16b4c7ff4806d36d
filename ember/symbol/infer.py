"""Shape and dtype inference over a :class:`~ember.symbol.graph.Graph`.

Each operator's ``infer_shape`` (``infer_type``) sees its inputs' shapes so far and may fill
unknown inputs (a weight from ``num_hidden``) as well as its outputs. Sweeps run forward and
backward over the nodes until nothing changes, as MXNet's pass does, so a shape known at a
consumer reaches the variable that feeds it.

Shapes follow MXNet 1.x: a tuple where a 0 dimension is unknown, ``None`` when nothing is known
(a variable's ``__shape__`` of ``(16, 0)`` knows only the first dimension). Dtypes are NumPy
dtypes, ``None`` when unknown; a variable's ``__dtype__`` holds MXNet's type flag.

>>> from ember.op import registry
>>> from ember.symbol.graph import Entry, Graph, Node, make_node
>>> fc = make_node(registry.get('FullyConnected'), 'fc', {'num_hidden': 4},
...                [Entry(0), Entry(1), Entry(2)])
>>> g = Graph([Node(None, 'x'), Node(None, 'w'), Node(None, 'b'), fc], [Entry(3)])
>>> infer_shapes(g, {'x': (2, 3)})
[(2, 3), (4, 3), (4,), (2, 4)]
"""
from __future__ import annotations

import numpy as np

from ember.base import EmberError, dtype_of
from ember.op.registry import ShapeError, _literal

__all__ = ['infer_shapes', 'infer_types', 'shape_is_known', 'normalize_shape', 'TYPE_FLAGS',
           'FLAG_OF_TYPE']

# MXNet's type flags (mshadow), as in the ``__dtype__`` attribute of variables.
TYPE_FLAGS = {0: 'float32', 1: 'float64', 2: 'float16', 3: 'uint8', 4: 'int32', 5: 'int8',
              6: 'int64', 7: 'bool', 8: 'int16', 9: 'uint16', 10: 'uint32', 11: 'uint64',
              12: 'bfloat16'}
FLAG_OF_TYPE = {name: flag for flag, name in TYPE_FLAGS.items()}

# Errors an operator's inference raises for inputs that do not fit (reported with the node).
_FIT_ERRORS = (ShapeError, EmberError, ValueError, IndexError)


def shape_is_known(shape) -> bool:
    """Every dimension known (MXNet 1.x: no 0 dimension)."""
    return shape is not None and all(d > 0 for d in shape)


def _partial(shape) -> bool:
    return shape is not None and not shape_is_known(shape)


def normalize_shape(shape):
    """A user's or an attribute's shape: a tuple of ints, 0 for unknown (also -1 or None);
    ``()`` means unknown, as in MXNet 1.x."""
    if shape is None:
        return None
    if isinstance(shape, str):
        shape = _literal(shape)
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(0 if d is None or int(d) < 0 else int(d) for d in shape)
    except TypeError:
        raise TypeError(f'shape {shape!r}: expected a tuple of ints such as (3, 8)') from None
    return dims or None


def _normalize_dtype(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, (int, np.integer)) and not isinstance(dtype, bool):
        if dtype < 0:
            return None
        if int(dtype) not in TYPE_FLAGS:
            raise ValueError(f'type flag {dtype}: expected -1 (unknown) or one of '
                             f'{sorted(TYPE_FLAGS)} (MXNet\'s flags)')
        return dtype_of(TYPE_FLAGS[int(dtype)])
    return dtype_of(dtype)


# ----------------------------------------------------------------------------------------------
# Shapes

def infer_shapes(graph, known=None) -> list:
    """Per entry id, the shape found (``None`` where nothing is known).

    `known` maps variable names to shapes; a variable without one starts from its ``__shape__``
    attribute. Raises :class:`ShapeError` naming the node and the shapes that do not fit.
    """
    known = known or {}
    shapes = [None] * graph.num_entries
    for position in graph.input_nodes:
        node = graph.nodes[position]
        given = normalize_shape(known.get(node.name))
        if given is None:
            given = normalize_shape(node.attr_text.get('__shape__'))
        shapes[graph.node_row_ptr[position]] = given
    _propagate(graph, shapes, _node_shapes, _unify_shape)
    return shapes


def _node_shapes(node, in_shapes, out_shapes=()):
    in_shapes = _from_outputs(node, in_shapes, out_shapes)
    try:
        return node.op.infer_shape(node.attrs, list(in_shapes))
    except _FIT_ERRORS as exc:
        if not any(_partial(s) for s in in_shapes):
            raise _node_error('infer_shape', node, in_shapes, exc) from exc
    # Some operators cannot read partly known shapes: try again without them.
    fallback = [None if _partial(s) else s for s in in_shapes]
    try:
        return node.op.infer_shape(node.attrs, fallback)
    except _FIT_ERRORS as exc:
        raise _node_error('infer_shape', node, in_shapes, exc) from exc


def _from_outputs(node, in_shapes, out_shapes):
    """Inputs completed from what is known of the outputs, where the operator says how."""
    fill = node.op.infer_shape_from_outputs
    if fill is None or not any(s is not None for s in out_shapes):
        return list(in_shapes)
    told = fill(node.attrs, list(in_shapes), list(out_shapes))
    merged = [_unify_shape(old, new) for old, new in zip(in_shapes, told)]
    return [old if new is None else new for old, new in zip(in_shapes, merged)]


def _unify_shape(old, new):
    """The shape that agrees with both (unknown dimensions filled), or None on a conflict."""
    if new is None:
        return old
    new = tuple(max(int(d), 0) for d in new)    # -1 (NumPy-shape unknown) counts as 0
    if old is None or old == new:
        return new
    if len(old) != len(new) or any(a and b and a != b for a, b in zip(old, new)):
        return None
    return tuple(a or b for a, b in zip(old, new))


# ----------------------------------------------------------------------------------------------
# Dtypes

def infer_types(graph, known=None) -> list:
    """Per entry id, the dtype found (``None`` where unknown). `known` maps variable names to
    dtypes; a variable without one starts from its ``__dtype__`` attribute."""
    known = known or {}
    dtypes = [None] * graph.num_entries
    for position in graph.input_nodes:
        node = graph.nodes[position]
        given = _normalize_dtype(known.get(node.name))
        if given is None and '__dtype__' in node.attr_text:
            given = _dtype_attr(node.attr_text['__dtype__'])
        dtypes[graph.node_row_ptr[position]] = given
    _propagate(graph, dtypes, _node_types, _unify_dtype)
    return dtypes


def _dtype_attr(text):
    """A ``__dtype__`` attribute: MXNet's type flag ('0', '-1' unknown), or a dtype name."""
    stripped = text.strip()
    if stripped.lstrip('-').isdigit():
        return _normalize_dtype(int(stripped))
    return _normalize_dtype(stripped)


def _node_types(node, in_dtypes, out_dtypes=()):
    try:
        return node.op.infer_type(node.attrs, list(in_dtypes))
    except _FIT_ERRORS as exc:
        raise _node_error('infer_type', node, in_dtypes, exc) from exc


def _unify_dtype(old, new):
    if new is None:
        return old
    new = np.dtype(new)
    if old is None or old == new:
        return new
    return None


# ----------------------------------------------------------------------------------------------

def _propagate(graph, values, infer_node, unify):
    """Sweep forward, backward, forward... until a sweep changes nothing: then every node
    agrees with the values. Values only gain information, so this ends."""
    order = [i for i, n in enumerate(graph.nodes) if n.op is not None]
    changed = True
    while changed:
        changed = False
        for position in order:
            changed |= _update_node(graph, position, values, infer_node, unify)
        order = order[::-1]


def _update_node(graph, position, values, infer_node, unify):
    node, ptr = graph.nodes[position], graph.node_row_ptr
    in_ids = [ptr[e.node] + e.index for e in node.inputs]
    out_values = values[ptr[position]:ptr[position] + len(node.output_names())]
    new_ins, new_outs = infer_node(node, [values[i] for i in in_ids], out_values)
    changed = False
    slots = [(entry_id, value, f'input {name!r}') for entry_id, value, name
             in zip(in_ids, new_ins, node.input_names())]
    slots += [(ptr[position] + k, value, f'output {name!r}')
              for k, (value, name) in enumerate(zip(new_outs, node.output_names()))]
    for entry_id, value, what in slots:
        merged = unify(values[entry_id], value)
        if merged is None and value is not None:
            kind = 'infer_shape' if unify is _unify_shape else 'infer_type'
            raise ShapeError(f'{kind}: operator {node.name!r} ({node.op.name}) infers {what} as '
                             f'{_show(value)}, but it is {_show(values[entry_id])} elsewhere in '
                             f'the graph')
        if not _same(merged, values[entry_id]):
            values[entry_id] = merged
            changed = True
    return changed


def _same(a, b):
    # Not ``a == b``: NumPy reads None as float64 there.
    return a is b or (a is not None and b is not None and a == b)


def _node_error(kind, node, in_values, exc):
    inputs = ', '.join(f'{name}={_show(value)}'
                       for name, value in zip(node.input_names(), in_values))
    return ShapeError(f'{kind}: operator {node.name!r} ({node.op.name}): {exc}; inputs: '
                      f'{inputs or "none"}')


def _show(value):
    if isinstance(value, np.dtype):
        return value.name
    return str(value)
