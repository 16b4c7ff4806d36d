"""The memory planner: in-place reuse, sharing within a size ratio, colours, and what is never
shared; each variable's effect on the planned bytes. Planning is pure: it runs nothing."""
import numpy as np
import pytest

import ember as mx
from ember import config, engine
from ember.base import EmberError
from ember.passes import gradient, infer_shape, infer_type, plan_memory
from ember.passes.options import Options
from ember.passes.plan_memory import ALIGNMENT, EXTERNAL


def typed(symbol, **shapes):
    graph = infer_shape.run(symbol.to_graph(), Options(shapes=shapes))
    return infer_type.run(graph, Options(dtypes={name: np.float32 for name in shapes}))


def plan_of(graph, **overrides):
    with config.override(**overrides):
        return plan_memory.run(graph).attrs['memory_plan']


def chain():
    """Three element-wise operators in a row, each able to work in place."""
    return mx.sym.relu(mx.sym.exp(mx.sym.var('x') * 2), name='out')


def twice(symbol, name):
    """An operator that reads its input twice, so it can never take that input's buffer."""
    return mx.sym.broadcast_add(symbol, symbol, name=name)


def two_branches():
    x = mx.sym.var('x')
    a = twice(twice(mx.sym.exp(x, name='a1'), 'a2'), 'a3')
    b = twice(twice(mx.sym.exp(x, name='b1'), 'b2'), 'b3')
    return mx.sym.broadcast_add(a, b, name='join')


def entries_named(graph, prefix):
    return [graph.node_row_ptr[i] for i, node in enumerate(graph.nodes)
            if node.op is not None and node.name.startswith(prefix)]


def test_in_place_keeps_a_chain_in_one_buffer_and_its_switch_raises_bytes():
    graph = typed(chain(), x=(1024,))
    on = plan_of(graph)
    off = plan_of(graph, MXNET_EXEC_ENABLE_INPLACE=False)
    assert on.planned_bytes == 4096 and on.entry_bytes == 3 * 4096
    assert [slot for slot in on.inplace if slot >= 0] == [0, 0]
    assert off.planned_bytes == 2 * 4096 > on.planned_bytes
    assert all(slot < 0 for slot in off.inplace)


def test_match_range_zero_turns_all_sharing_off():
    graph = typed(chain(), x=(1024,))
    shared = plan_of(graph)
    unshared = plan_of(graph, NNVM_EXEC_MATCH_RANGE=0)
    assert unshared.planned_bytes == unshared.entry_bytes == 3 * 4096 > shared.planned_bytes
    assert len(set(unshared.storage) - {EXTERNAL}) == 3


def test_match_range_bounds_the_size_ratio_of_reuse():
    # `big` (4 KiB) is dead once `half` (2 KiB) is computed; `out` (2 KiB, not in place since
    # it reads `half` twice) may take big's buffer only if a ratio of 2 is allowed.
    big = mx.sym.exp(mx.sym.var('x'), name='big')
    half = mx.sym.slice_axis(big, axis=0, begin=0, end=512, name='half')
    graph = typed(twice(half, 'out'), x=(1024,))
    exact = plan_of(graph, NNVM_EXEC_MATCH_RANGE=1)
    swept = plan_of(graph)
    eid_big, eid_out = entries_named(graph, 'big')[0], entries_named(graph, 'out')[0]
    # ratio 1: out gets a buffer of its own (which the layout may still lay over big's)
    assert exact.storage[eid_out] != exact.storage[eid_big] and exact.match_range == 1
    assert sum(exact.sizes) == 4096 + 2048 + 2048
    assert exact.planned_bytes == 4096 + 2048      # laid over big's bytes once it is dead
    assert swept.planned_bytes == 4096 + 2048 and swept.match_range == 2
    assert swept.storage[eid_out] == swept.storage[eid_big]
    assert swept.sizes[swept.storage[eid_big]] == 4096


def test_more_colours_keep_parallel_branches_apart():
    graph = typed(two_branches(), x=(256,))
    one = plan_of(graph)
    two = plan_of(graph, MXNET_EXEC_NUM_TEMP=2)
    many = plan_of(graph, MXNET_EXEC_NUM_TEMP=4)

    def buffers(plan, prefix):
        return {plan.storage[eid] for eid in entries_named(graph, prefix)}
    assert buffers(one, 'a') & buffers(one, 'b')
    assert not buffers(two, 'a') & buffers(two, 'b')
    assert one.planned_bytes < two.planned_bytes <= many.planned_bytes
    assert (one.colours, two.colours) == (1, 2)


def test_graph_outputs_are_never_released_and_variables_live_outside():
    x = mx.sym.var('x')
    first = twice(mx.sym.exp(x, name='e'), 'first')
    later = twice(twice(first, 'mid'), 'last')
    graph = typed(mx.sym.Group([first, later]), x=(64,))
    plan = plan_of(graph)
    out = graph.entry_id(graph.outputs[0])
    after = range(out + 1, graph.num_entries)
    assert plan.storage[out] not in {plan.storage[e] for e in after}
    assert plan.storage[graph.node_row_ptr[graph.input_nodes[0]]] == EXTERNAL


def test_external_entries_are_left_out():
    graph = typed(chain(), x=(16,))
    last = graph.entry_id(graph.outputs[0])
    plan = plan_memory.plan(graph, external=[last]).attrs['memory_plan']
    assert plan.storage[last] == EXTERNAL and plan.offset_of(last) is None
    assert plan.entry_bytes == 2 * 64


def _live_ranges(graph):
    """Per operator output: (first node that has it, last node that reads it)."""
    last = {}
    for position, node in enumerate(graph.nodes):
        for entry in node.inputs:
            last[graph.entry_id(entry)] = position
    for entry in graph.outputs:
        last[graph.entry_id(entry)] = len(graph.nodes)
    return {eid: (position, last.get(eid, position))
            for position, node in enumerate(graph.nodes) if node.op is not None
            for eid in range(graph.node_row_ptr[position], graph.node_row_ptr[position + 1])}


@pytest.mark.parametrize('overrides', [{}, {'MXNET_EXEC_NUM_TEMP': 3},
                                       {'MXNET_EXEC_ENABLE_INPLACE': False}])
def test_entries_sharing_a_buffer_are_never_alive_together(overrides):
    data = mx.sym.var('data')
    net = mx.sym.Convolution(data, kernel=(3, 3), num_filter=4, pad=(1, 1), name='conv')
    net = mx.sym.relu(mx.sym.BatchNorm(net, name='bn'), name='relu')
    net = mx.sym.FullyConnected(net + mx.sym.sigmoid(net), num_hidden=3, name='fc')
    graph = gradient.with_gradients(typed(mx.sym.SoftmaxOutput(net, name='sm'), data=(2, 3, 5, 5)))
    options = Options(shapes={'data': (2, 3, 5, 5)}, dtypes={'data': 'float32'})
    graph = infer_type.run(infer_shape.run(graph, options), options)
    plan = plan_of(graph, **overrides)
    ranges = _live_ranges(graph)
    by_buffer = {}
    for eid, (start, end) in ranges.items():
        by_buffer.setdefault(plan.storage[eid], []).append((start, end, eid))
    for spans in by_buffer.values():
        spans.sort()
        for (_, end, eid), (start, _, next_eid) in zip(spans, spans[1:]):
            # an in-place output starts where its input's last reader is: itself
            touching = end == start and plan.inplace[next_eid] >= 0
            assert end < start or touching, (eid, next_eid)
    for sid, (offset, size) in enumerate(zip(plan.offsets, plan.sizes)):
        assert offset % ALIGNMENT == 0 and offset + size <= plan.planned_bytes
    # buffers laid over the same addresses are never alive together, and share an engine var
    for a in by_buffer:
        for b in by_buffer:
            if a >= b or a == EXTERNAL or b == EXTERNAL:
                continue
            if (plan.offsets[a] < plan.offsets[b] + plan.sizes[b]
                    and plan.offsets[b] < plan.offsets[a] + plan.sizes[a]):
                assert plan.groups[a] == plan.groups[b]
                for start, end, _ in by_buffer[a]:
                    for other_start, other_end, _ in by_buffer[b]:
                        assert end < other_start or other_end < start
    # sharing saves a good part of what a buffer per entry would take
    unshared = plan_of(graph, NNVM_EXEC_MATCH_RANGE=0, MXNET_EXEC_ENABLE_INPLACE=False)
    assert unshared.planned_bytes >= plan.entry_bytes
    assert plan.planned_bytes * 1.5 <= unshared.planned_bytes


def test_planning_runs_nothing():
    graph = typed(two_branches(), x=(4096,))
    eng = engine.get()
    eng.wait_all()
    before = eng.stats()['pushes']
    plan_memory.run(graph)
    assert eng.stats()['pushes'] == before


def test_unknown_shapes_are_reported():
    with pytest.raises(EmberError, match='run the infer_shape'):
        plan_memory.run(chain().to_graph())
    graph = infer_type.run(infer_shape.run(chain().to_graph()),
                           Options(dtypes={'x': 'float32'}))
    with pytest.raises(EmberError, match="entry '_mulscalar"):
        plan_memory.run(graph)


def test_bf16_storage_plans_each_nodes_full_precision_copies_over_dead_buffers(monkeypatch):
    from ember.op import precision
    monkeypatch.setattr(precision, '_map', {np.dtype(np.float32): precision.BFLOAT16})
    net = mx.sym.var('x')
    for k in range(4):
        net = mx.sym.relu(mx.sym.FullyConnected(net, num_hidden=256, name=f'fc{k}'))
    graph = typed(net, x=(64, 256), **{f'fc{k}_{p}': s for k in range(4)
                                      for p, s in (('weight', (256, 256)), ('bias', (256,)))})
    plan = plan_of(graph)
    ranges = _live_ranges(graph)
    wide = 4 * (64 * 256 + 256 * 256 + 256 + 64 * 256)      # x, weight, bias, output in float32
    for position, sid in enumerate(plan.workspaces):
        if graph.nodes[position].op is None:
            assert sid == EXTERNAL
            continue
        assert plan.sizes[sid] == (wide if graph.nodes[position].op.name == 'FullyConnected'
                                   else 4 * 2 * 64 * 256)
        start, end = plan.offsets[sid], plan.offsets[sid] + plan.sizes[sid]
        for eid, (first, last) in ranges.items():
            other = plan.storage[eid]
            if other == EXTERNAL or not first <= position <= last:
                continue
            # nothing alive at its node lies in its bytes
            assert end <= plan.offsets[other] or plan.offsets[other] + plan.sizes[other] <= start
        for other in range(len(plan.sizes)):     # what shares its bytes shares its variable
            if start < plan.offsets[other] + plan.sizes[other] and plan.offsets[other] < end:
                assert plan.groups[other] == plan.groups[sid]
    # the copies reuse the bytes of dead activations: less than a buffer of their own each
    workspaces = [sid for sid in plan.workspaces if sid != EXTERNAL]
    assert plan.planned_bytes < plan.entry_bytes + sum(plan.sizes[s] for s in workspaces)
    # no sharing at all: no workspaces (each node then uses its thread's scratch)
    assert set(plan_of(graph, NNVM_EXEC_MATCH_RANGE=0).workspaces) == {EXTERNAL}
    monkeypatch.setattr(precision, '_map', {})
    assert set(plan_of(graph).workspaces) == {EXTERNAL}
