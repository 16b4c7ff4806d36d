"""Element-wise fusion: chains and small DAGs of element-wise operators become one
``_FusedElemwise`` node that makes a single pass over memory (``MXNET_USE_FUSION``, on by
default; the kernel is in :mod:`ember.op.fused`).

Where it runs: last of the passes that change nodes, after the gradient pass has built the
backward part (and after mirror and subgraph), since the fused operator has no gradient. On a
training graph a group is all forward or all backward nodes (the executor runs the forward part
alone), and the forward values that backward nodes read become extra outputs of the fused
node.

Which nodes fuse: operators declared ``elemwise`` with one output, neither random nor updating
an input. With ``graph.attrs['shape']`` (the shape pass ran first) every member's output must
have the group's shape, and the ``broadcast_*`` operators may join; without shapes only
operators whose inputs all share their output's shape fuse. A node joins the groups of its
inputs when no node outside them reads a member before it (the fused node takes the place of its
last member), up to :data:`MAX_STEPS` members. The fused node takes the last member's name and
its first output is the last member's value, so that output keeps its name.

>>> from ember import symbol as sym
>>> from ember.passes import fusion
>>> out = sym.relu(sym.var('x') * 2 + 1, name='act')
>>> fused = fusion.run(out.to_graph())
>>> [n.op.name for n in fused.nodes if n.op], fused.output_names()
(['_FusedElemwise'], ['act_output'])
"""
from __future__ import annotations

import logging

from ember import config
from ember.op import registry
from ember.op.fused import chain_text
from ember.passes._rewrite import Rewriter, forward_count
from ember.passes.options import Options
from ember.symbol.graph import Entry, attr_text_of, consumers, make_node

__all__ = ['run', 'MAX_STEPS']

OPT_LEVEL = 1       # an optimisation: off under -O0 (NEURON_CC_FLAGS)

_log = logging.getLogger(__name__)

# Bounds the generated code and the scratch memory of one fused node.
MAX_STEPS = 32


def run(graph, options=Options()):
    """`graph` with its element-wise groups fused; the same graph object when nothing fuses or
    ``MXNET_USE_FUSION`` is off. Shapes in ``attrs`` are dropped when nodes change."""
    if not config.get('MXNET_USE_FUSION'):
        return graph
    groups = _groups(graph)
    if not groups:
        return graph
    result = _rewrite(graph, groups)
    _log.debug('fusion: %d groups of %d nodes, %d -> %d nodes', len(groups),
               sum(map(len, groups)), len(graph.nodes), len(result.nodes))
    return result


# ----------------------------------------------------------------------------------------------
# Finding the groups.

def _groups(graph) -> list:
    """Lists of member positions (ascending), two or more each."""
    users, shapes, boundary = consumers(graph), graph.attrs.get('shape'), forward_count(graph)
    group_of, members = {}, {}
    for position, node in enumerate(graph.nodes):
        if not _fusible(node, shapes is not None):
            continue
        joined = [position]
        for group in {group_of[e.node] for e in node.inputs if e.node in group_of}:
            if _same_part(boundary, group, position) and _can_join(
                    graph, members[group], position, users, shapes, len(joined)):
                joined.extend(members.pop(group))
        joined.sort()
        for member in joined:
            group_of[member] = position
        members[position] = joined
    return [group for group in members.values() if len(group) > 1]


def _fusible(node, shapes_known) -> bool:
    op = node.op
    if op is None or not op.elemwise or op.random or op.num_outputs(node.attrs) != 1:
        return False
    if op.mutate_indices(node.attrs) or op.resources:
        return False
    # without shapes, only operators whose inputs all have the output's shape
    return shapes_known or op.infer_shape is registry.same_shape


def _same_part(boundary, a, b):
    """Whether nodes `a` and `b` are both forward or both backward: the executor runs the
    forward part alone, so no fused node may straddle them."""
    return boundary is None or (a < boundary) == (b < boundary)


def _can_join(graph, group, position, users, shapes, size):
    if len(group) + size > MAX_STEPS:
        return False
    node, first = graph.nodes[position], graph.nodes[group[0]]
    if node.attr_text.get('__ctx_group__') != first.attr_text.get('__ctx_group__'):
        return False
    if shapes is not None and not _same_known_shape(graph, shapes, group[-1], position):
        return False
    # the fused node sits where its last member is: nobody outside may read a member earlier
    inside = set(group)
    return all(user >= position for member in group for user, _ in users[member]
               if user not in inside)


def _same_known_shape(graph, shapes, a, b):
    shape_a = shapes[graph.entry_id(Entry(a, 0))]
    shape_b = shapes[graph.entry_id(Entry(b, 0))]
    return shape_a is not None and shape_a == shape_b and all(d > 0 for d in shape_a)


# ----------------------------------------------------------------------------------------------
# Building the fused nodes.

def _rewrite(graph, groups):
    last_of = {group[-1]: group for group in groups}
    skipped = {member for group in groups for member in group[:-1]}
    rewriter, users = Rewriter(graph), consumers(graph)
    for position in range(len(graph.nodes)):
        if position in last_of:
            _place_fused(graph, rewriter, last_of[position], users)
        elif position not in skipped:
            rewriter.copy(position)
    return rewriter.finish()


def _place_fused(graph, rewriter, group, users):
    step_of = {member: index for index, member in enumerate(group)}
    inputs, steps = [], []
    for member in group:
        node = graph.nodes[member]
        args = [f's{step_of[e.node]}' if e.node in step_of else f'i{_index(inputs, e)}'
                for e in node.inputs]
        steps.append((node.op.name, attr_text_of(node.op, node.attrs), args))
    exported = _exported(graph, group, users)
    last = graph.nodes[group[-1]]
    chain = chain_text(len(inputs), steps, [step_of[m] for m in exported])
    fused = make_node(registry.get('_FusedElemwise'), last.name, {'chain': chain},
                      [rewriter.new(e) for e in inputs], last.user_attrs)
    position = rewriter.add(fused)
    for index, member in enumerate(exported):
        rewriter.alias(Entry(member, 0), Entry(position, index))


def _index(inputs, entry):
    if entry not in inputs:
        inputs.append(entry)
    return inputs.index(entry)


def _exported(graph, group, users):
    """The members whose values leave the group: the last one first (output 0 keeps its
    name), then those read outside or that are graph outputs."""
    inside = set(group)
    outputs = {e.node for e in graph.outputs}
    read_outside = [m for m in group[:-1]
                    if m in outputs or any(u not in inside for u, _ in users[m])]
    return [group[-1]] + read_outside
