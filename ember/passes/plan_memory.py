"""Memory planning: every operator output gets a place in one arena, reused once it is dead.

Walking the nodes in topological order with a reference count per buffer, an output

* takes over an input's buffer in place when the operator allows it (``op.inplace_pairs``), this
  operator is the buffer's last reader and the sizes agree (``MXNET_EXEC_ENABLE_INPLACE``);
* else takes a released buffer whose size is within a factor ``match_range`` of its own (the
  smallest large enough, else the largest smaller one, grown), released by a node of its colour;
* else gets a new buffer.

Plans are made for ``match_range`` = 1, 2, 4, ... up to ``NNVM_EXEC_MATCH_RANGE`` and the one with
the fewest bytes is kept; 0 turns all sharing off, in place included. ``MXNET_EXEC_NUM_TEMP``
colours: the ``n - 1`` longest chains of operators get a colour each and the rest share the last,
and a buffer is only reused by a node of the colour that released it, so independent branches
keep separate buffers and may run at once. Graph outputs are never released, and variables
(arguments, auxiliary states) and the entries in `external` live outside the arena.

Under bf16 storage (``XLA_USE_BF16``, ``XLA_DOWNCAST_BF16``) an operator runs on full-precision
copies of its narrow arrays (:func:`ember.op.precision.widened`). Those copies get a
*workspace* in the plan: a buffer of its own, alive at its node only, which the layout places
among the others over buffers dead at that time. resnet50_v1 training at batch 16 has
workspaces up to 196 MB (BatchNorm's backward at 112x112); with them its arena grows from 614
to 658 MB, where a scratch per thread held 196 MB (the largest) on top of 614.

The buffers are then laid out in the arena: largest first, each at the lowest offset where it
overlaps no buffer that is alive at the same time (a buffer is alive from the first write of
an entry it holds to the last read of one). Buffers that share addresses are never alive
together; they share one engine variable (``MemoryPlan.groups``), so that the engine also runs
their users in order. Reuse by matching sizes alone leaves gaps (a large buffer idle while
small ones come and go); the layout fills them: resnet50_v1 training at batch 16 needs 1.42 GB
planned buffer by buffer and 1.28 GB laid out.

>>> from ember import symbol as sym
>>> from ember.passes import infer_shape, infer_type, plan_memory
>>> from ember.passes.options import Options
>>> net = sym.relu(sym.exp(sym.var('x') * 2), name='out')
>>> options = Options(shapes={'x': (1024,)}, dtypes={'x': 'float32'})
>>> g = infer_type.run(infer_shape.run(net.to_graph(), options), options)
>>> plan = plan_memory.run(g).attrs['memory_plan']
>>> plan.entry_bytes, plan.planned_bytes      # three outputs of 4 KiB, one buffer in place
(12288, 4096)
"""
from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass

import numpy as np

from ember import config
from ember.base import EmberError, prod
from ember.op import precision, sparse
from ember.passes.gradient import direct_gradients
from ember.passes.options import Options
from ember.symbol.infer import shape_is_known

__all__ = ['run', 'plan', 'MemoryPlan', 'EXTERNAL', 'ALIGNMENT']

_log = logging.getLogger(__name__)
EXTERNAL = -1       # storage id of an entry that lives outside the arena
ALIGNMENT = 64      # bytes: every buffer starts at a multiple of it


@dataclass(frozen=True)
class MemoryPlan:
    """Where each entry lives: ``storage[entry id]`` is a buffer id or EXTERNAL; buffer ``s``
    lies at ``offsets[s]`` in the arena, ``sizes[s]`` bytes long."""
    storage: tuple
    offsets: tuple
    sizes: tuple
    inplace: tuple          # per entry id: the input slot whose buffer it took over, or -1
    planned_bytes: int      # the arena's size
    entry_bytes: int        # what every planned entry would take in a buffer of its own
    match_range: int        # the ratio of the kept plan (0: no sharing)
    colours: int
    groups: tuple = ()      # per buffer: the group of buffers sharing addresses (engine var)
    workspaces: tuple = ()  # per node: the buffer of its full-precision copies, or EXTERNAL

    def offset_of(self, entry_id: int):
        """Byte offset of an entry in the arena, or None for an external one."""
        sid = self.storage[entry_id]
        return None if sid == EXTERNAL else self.offsets[sid]


def run(graph, options=Options()):
    """`graph` with ``attrs['memory_plan']``: :func:`plan` with the gradients that the
    executor writes straight into the user's arrays (``options.grad_req``) outside the
    arena."""
    return plan(graph, external=direct_gradients(graph, options.grad_req))


def plan(graph, shapes=None, dtypes=None, external=()):
    """`graph` with ``attrs['memory_plan']``, a :class:`MemoryPlan`.

    `shapes` and `dtypes` are per entry id (default ``attrs['shape']``/``attrs['dtype']``);
    `external` lists entry ids that the caller places outside the arena (gradients written
    straight into the user's arrays).
    """
    inplace = config.get('MXNET_EXEC_ENABLE_INPLACE')
    match_range = config.get('NNVM_EXEC_MATCH_RANGE')
    colours = config.get('MXNET_EXEC_NUM_TEMP')
    sizes = _entry_sizes(graph, shapes, dtypes)
    external = _external_entries(graph, external)
    node_colour = _colour_nodes(graph, colours)
    workspaces = _workspace_sizes(graph, shapes, dtypes)
    if match_range == 0:
        # nothing shares: the copies stay in the scratch of the thread that runs the node
        best = _plan(graph, sizes, external, node_colour, 0, False, [0] * len(workspaces))
    else:
        ranges = [1 << k for k in range(match_range.bit_length()) if 1 << k <= match_range]
        plans = [_plan(graph, sizes, external, node_colour, r, inplace, workspaces)
                 for r in ranges]
        # ties go to the plan with fewer buffer bytes: more reuse, fewer engine variables
        best = min(plans, key=lambda p: (p.planned_bytes, sum(p.sizes)))
    _log.debug('plan_memory: %d bytes planned for %d bytes of outputs (match range %d, %d '
               'colours, in place %s)', best.planned_bytes, best.entry_bytes, best.match_range,
               colours, inplace and match_range > 0)
    return graph.replace(attrs={**graph.attrs, 'memory_plan': best})


def _entry_sizes(graph, shapes, dtypes):
    shapes = graph.attrs.get('shape') if shapes is None else shapes
    dtypes = graph.attrs.get('dtype') if dtypes is None else dtypes
    if shapes is None or dtypes is None:
        raise EmberError('plan_memory: the graph has no shapes or dtypes; run the infer_shape '
                         'and infer_type passes first')
    sizes = []
    for eid, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        if not shape_is_known(shape) or dtype is None:
            if _is_op_entry(graph, eid):
                raise EmberError(f'plan_memory: entry {_entry_name(graph, eid)} has shape '
                                 f'{shape} and dtype {dtype}; every operator output must be '
                                 f'known')
            sizes.append(0)
        else:
            # as stored: bf16 storage (XLA_USE_BF16) halves float32 buffers
            sizes.append(prod(shape) * precision.stored_dtype(np.dtype(dtype)).itemsize)
    return sizes


def _workspace_sizes(graph, shapes, dtypes):
    """Per node, the bytes of the full-precision copies :func:`ember.op.precision.widened`
    makes of its narrow inputs and outputs (0 where none is narrow, or where a sparse array
    takes part: those kernels are not widened)."""
    if not precision.storage_map():
        return [0] * len(graph.nodes)
    shapes = graph.attrs.get('shape') if shapes is None else shapes
    dtypes = graph.attrs.get('dtype') if dtypes is None else dtypes
    stypes = graph.attrs.get('stype')
    wide = []
    for shape, dtype in zip(shapes, dtypes):
        narrow = (dtype is not None and shape_is_known(shape)
                  and precision.stored_dtype(np.dtype(dtype)) != np.dtype(dtype))
        wide.append(precision.padded(prod(shape) * np.dtype(dtype).itemsize) if narrow else 0)
    sizes = []
    for position, node in enumerate(graph.nodes):
        if node.op is None:
            sizes.append(0)
            continue
        eids = [graph.entry_id(e) for e in node.inputs]
        eids += range(graph.node_row_ptr[position], graph.node_row_ptr[position + 1])
        if stypes is not None and any(stypes[e] != sparse.DEFAULT for e in eids):
            sizes.append(0)
            continue
        sizes.append(sum(wide[e] for e in eids))
    return sizes


def _is_op_entry(graph, eid):
    return graph.nodes[_node_of(graph, eid)].op is not None


def _node_of(graph, eid):
    return bisect.bisect_right(graph.node_row_ptr, eid) - 1


def _entry_name(graph, eid):
    position = _node_of(graph, eid)
    return repr(graph.nodes[position].output_names()[eid - graph.node_row_ptr[position]])


def _external_entries(graph, external):
    ptr = graph.node_row_ptr
    variables = {ptr[i] for i in graph.input_nodes}
    return variables | set(external)


# ----------------------------------------------------------------------------------------------
# Colours (MXNET_EXEC_NUM_TEMP): MXNet's greedy colouring by heaviest paths.

def _colour_nodes(graph, colours):
    """Per node its colour: colour c < colours - 1 is the c-th longest chain of operators not
    yet coloured; every other node has the last colour."""
    colour = [None] * len(graph.nodes)
    weight = [0 if node.op is None else 1 for node in graph.nodes]
    used = 0
    while used < colours - 1:
        path = _heaviest_path(graph, weight)
        if not path:
            break
        for position in path:
            colour[position] = used
            weight[position] = 0
        used += 1
    return tuple(used if c is None else c for c in colour)


def _heaviest_path(graph, weight):
    """The nodes of weight 1 on the path of greatest total weight (dynamic programming)."""
    best, previous = [0] * len(graph.nodes), [-1] * len(graph.nodes)
    for position, node in enumerate(graph.nodes):
        for entry in node.inputs:
            if best[entry.node] > best[position]:
                best[position], previous[position] = best[entry.node], entry.node
        best[position] += weight[position]
    end = max(range(len(best)), key=best.__getitem__, default=-1)
    path = []
    while end >= 0 and best[end] > 0:
        if weight[end]:
            path.append(end)
        end = previous[end]
    return path


# ----------------------------------------------------------------------------------------------
# One plan for one match range.

class _Allocator:
    """Buffers of the arena and the released ones, searched by size within the match range."""

    def __init__(self, match_range, node_colour):
        self.match_range = match_range
        self.node_colour = node_colour
        self.sizes = []
        self.colours = []           # per buffer: the colour of the node that created it
        self.free = []              # sorted (size, buffer id, releasing node)
        self.alive = {}             # buffer id -> [first, last, open] node positions per tenancy

    def request(self, nbytes, position):
        if self.match_range:
            found = self._match(nbytes, self.node_colour[position])
            if found is not None:
                return found
        self.sizes.append(nbytes)
        self.colours.append(self.node_colour[position])
        return len(self.sizes) - 1

    def workspace(self, nbytes, position):
        """A buffer of its own, alive at node `position` alone (never shared by matching)."""
        self.sizes.append(nbytes)
        self.colours.append(self.node_colour[position])
        sid = len(self.sizes) - 1
        _extend(self.alive, sid, position)
        _close(self.alive, sid)
        return sid

    def _match(self, nbytes, colour):
        low, high = nbytes / self.match_range, nbytes * self.match_range
        mid = bisect.bisect_left(self.free, (nbytes, -1, -1))
        larger = range(mid, len(self.free))
        smaller = range(mid - 1, -1, -1)
        for index in list(larger) + list(smaller):
            size, sid, releaser = self.free[index]
            if not low <= size <= high or self.node_colour[releaser] != colour:
                continue
            del self.free[index]
            self.sizes[sid] = max(size, nbytes)
            return sid
        return None

    def release(self, sid, position):
        bisect.insort(self.free, (self.sizes[sid], sid, position))
        _close(self.alive, sid)


def _plan(graph, sizes, external, node_colour, match_range, inplace, workspace_sizes):
    refs = _reference_counts(graph)
    workspaces = [EXTERNAL] * len(graph.nodes)
    storage = [EXTERNAL] * graph.num_entries
    taken_over = [-1] * graph.num_entries
    buffer_refs = {}
    alloc = _Allocator(match_range, node_colour)
    alive = alloc.alive
    for position, node in enumerate(graph.nodes):
        if node.op is None:
            continue
        outputs = range(graph.node_row_ptr[position], graph.node_row_ptr[position + 1])
        for entry in node.inputs:
            _extend(alive, storage[graph.entry_id(entry)], position)
        if inplace:
            _take_inputs_in_place(graph, position, sizes, external, refs, storage, buffer_refs,
                                  taken_over)
        for eid in outputs:
            if storage[eid] == EXTERNAL and eid not in external:
                storage[eid] = alloc.request(sizes[eid], position)
                buffer_refs[storage[eid]] = refs[eid]
            _extend(alive, storage[eid], position)
        if workspace_sizes[position]:
            # alive at this node alone: clear of its inputs and outputs, over dead buffers
            workspaces[position] = alloc.workspace(workspace_sizes[position], position)
        for entry in node.inputs:
            _drop_reference(storage[graph.entry_id(entry)], buffer_refs, alloc, position)
        for eid in outputs:
            if storage[eid] != EXTERNAL and buffer_refs[storage[eid]] == 0:
                alloc.release(storage[eid], position)     # nothing reads it
    for entry in graph.outputs:
        _extend(alive, storage[graph.entry_id(entry)], len(graph.nodes))
    return _finish(storage, alloc, taken_over, sizes, external, match_range, node_colour,
                   workspaces)


def _extend(alive, sid, position):
    """Buffer `sid` is used at node `position`: a new tenancy starts when the last one has
    ended (the buffer was released and taken again), else the current one grows."""
    if sid == EXTERNAL:
        return
    spans = alive.setdefault(sid, [])
    if spans and spans[-1][2]:
        spans[-1][1] = max(spans[-1][1], position)
    else:
        spans.append([position, position, True])


def _close(alive, sid):
    """Buffer `sid` was released: its next use starts a new tenancy."""
    spans = alive.get(sid)
    if spans:
        spans[-1][2] = False


def _reference_counts(graph):
    """Per entry: the inputs that read it, plus one that never ends for graph outputs."""
    refs = [0] * graph.num_entries
    for node in graph.nodes:
        for entry in node.inputs:
            refs[graph.entry_id(entry)] += 1
    for entry in graph.outputs:
        refs[graph.entry_id(entry)] += 1 << 30
    return refs


def _take_inputs_in_place(graph, position, sizes, external, refs, storage, buffer_refs,
                          taken_over):
    node = graph.nodes[position]
    taken = set()
    for slot, out_index in node.op.inplace_pairs(node.attrs):
        eid_in = graph.entry_id(node.inputs[slot])
        eid_out = graph.node_row_ptr[position] + out_index
        sid = storage[eid_in]
        if (slot in taken or sid == EXTERNAL or eid_out in external
                or storage[eid_out] != EXTERNAL or buffer_refs[sid] != 1
                or sizes[eid_in] != sizes[eid_out] or refs[eid_out] == 0):
            continue
        taken.add(slot)
        storage[eid_out] = sid
        taken_over[eid_out] = slot
        buffer_refs[sid] += refs[eid_out]


def _drop_reference(sid, buffer_refs, alloc, position):
    if sid == EXTERNAL:
        return
    buffer_refs[sid] -= 1
    if buffer_refs[sid] == 0:
        alloc.release(sid, position)


def _finish(storage, alloc, taken_over, sizes, external, match_range, node_colour,
            workspaces):
    buffer_sizes = alloc.sizes
    offsets, total, groups = _lay_out(buffer_sizes, alloc.alive, alloc.colours,
                                      overlap=match_range > 0)
    entry_bytes = sum(size for eid, size in enumerate(sizes) if storage[eid] != EXTERNAL)
    return MemoryPlan(tuple(storage), tuple(offsets), tuple(buffer_sizes), tuple(taken_over),
                      total, entry_bytes, match_range, max(node_colour, default=0) + 1,
                      tuple(groups), tuple(workspaces))


def _lay_out(buffer_sizes, alive, colours, overlap):
    """(offset per buffer, arena bytes, group per buffer): largest buffer first, each at the
    lowest aligned offset clear of every placed buffer alive at the same time or of another
    colour (independent branches keep apart, so that they may run at once); with `overlap`
    off, every buffer after the previous one. Buffers of no bytes take no place."""
    padded = [-(-size // ALIGNMENT) * ALIGNMENT for size in buffer_sizes]
    offsets, placed = [0] * len(buffer_sizes), []
    parent = list(range(len(buffer_sizes)))
    for sid in sorted(range(len(buffer_sizes)), key=lambda k: (-padded[k], k)):
        if not padded[sid]:
            continue
        busy = sorted((offsets[o], offsets[o] + padded[o], o) for o in placed
                      if not overlap or colours[o] != colours[sid]
                      or _together(alive.get(sid, ()), alive.get(o, ())))
        offsets[sid] = _lowest_gap(busy, padded[sid])
        for o in placed:                 # address neighbours share an engine variable
            if offsets[o] < offsets[sid] + padded[sid] and offsets[sid] < offsets[o] + padded[o]:
                parent[_root(parent, o)] = _root(parent, sid)
        placed.append(sid)
    total = max((offsets[k] + padded[k] for k in range(len(padded))), default=0)
    return offsets, total, [_root(parent, k) for k in range(len(padded))]


def _together(spans, others) -> bool:
    """Whether two buffers' tenancies (sorted [first, last, _] node positions) overlap."""
    i = j = 0
    while i < len(spans) and j < len(others):
        if spans[i][0] <= others[j][1] and others[j][0] <= spans[i][1]:
            return True
        if spans[i][1] < others[j][1]:
            i += 1
        else:
            j += 1
    return False


def _lowest_gap(busy, size):
    offset = 0
    for start, end, _ in busy:
        if start - offset >= size:
            break
        offset = max(offset, end)
    return offset


def _root(parent, k):
    while parent[k] != k:
        parent[k] = parent[parent[k]]
        k = parent[k]
    return k
