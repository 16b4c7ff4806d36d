"""The execution program of a compiled graph: arrays for every entry, one engine push per segment.

Operator outputs are views of one arena taken from the device's pool, placed by the memory plan;
each buffer of the plan has its own engine variable, so the engine orders a buffer's reuse after
the reads of its previous contents, and operators on different buffers may run at once. Variables
(arguments, auxiliary states, head gradients) and gradients written straight into the user's
arrays are the caller's NDArrays.

A segment of the bulk pass becomes one function that calls its kernels in order with prebuilt
:class:`~ember.op.registry.KernelContext` objects (one for training, one for inference), pushed
with the segment's input variables as reads and its outputs', mutated inputs' and resources'
variables as writes. Gradients that are added to (``grad_req='add'``) or copied into the user's
arrays run as steps of the backward segments.

>>> import numpy as np
>>> from ember import device, symbol as sym
>>> from ember.executor import pipeline
>>> from ember.ndarray.creation import array
>>> graph = pipeline.compile_graph(sym.exp(sym.var('x') * 2, name='e').to_graph(),
...                                {'x': (2,)}, {'x': np.float32})
>>> program = Program(graph, device.cpu(), {0: array([0, 0.5])})
>>> program.run('forward', is_train=False)
>>> program.outputs[0].asnumpy().round(3), len(program.forward)
(array([1.   , 2.718], dtype=float32), 1)
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from ember import backend, engine, resource, storage
from ember.base import EmberError
from ember.ndarray.ndarray import NDArray, view_of
from ember.ndarray.storage import is_sparse, new_array
from ember.op import precision, registry, sparse
from ember.op.registry import KernelContext
from ember.passes.plan_memory import ALIGNMENT, EXTERNAL

__all__ = ['Program']


@dataclass(frozen=True)
class _Step:
    """One kernel call with its raw arrays, contexts per mode, and engine variables."""
    position: int           # the node it runs (-1 for a gradient's add or copy)
    name: str
    kernel: object
    attrs: dict
    ins: tuple
    outs: tuple
    contexts: tuple         # (inference context, training context)
    reads: tuple
    writes: tuple


@dataclass(frozen=True)
class _Push:
    """A segment: steps run in order as one engine operation."""
    name: str
    steps: tuple
    reads: tuple
    writes: tuple
    functions: tuple        # (inference function, training function)


class Program:
    """A planned graph on one device bound to arrays.

    `bound` maps the entry id of every variable, and of every gradient written straight into a
    user's array, to its NDArray; `commits` lists ``(entry id, NDArray, 'add' or 'copy')``
    gradients that backward adds or copies into the user's arrays.
    """

    def __init__(self, graph, device, bound, commits=()):
        self.graph = graph
        self.device = device
        # NEURON_RT_STOCHASTIC_ROUNDING_EN as the program is built: its casts round in
        # streams of their own (one per node, a key per call)
        self._stochastic = precision.stochastic()
        self._plan = graph.attrs['memory_plan']
        self.xp = backend.for_device(device).xp
        self.arena = storage.manager(device).alloc(max(self._plan.planned_bytes, ALIGNMENT))
        self.entries = self._entry_arrays(bound)
        distinct = {id(x): x for x in bound.values()}.values()
        self.variable_bytes = sum(x.size * np.dtype(x.dtype).itemsize for x in distinct
                                  if not is_sparse(x))
        # entry ids some operator reads or the graph outputs; the rest may stay unwritten
        self._read_entries = {graph.entry_id(e) for node in graph.nodes for e in node.inputs}
        self._read_entries.update(graph.entry_id(e) for e in graph.outputs)
        info = graph.attrs.get('gradient')
        self.num_forward_nodes = len(graph.nodes) if info is None else info.num_forward_nodes
        steps = {position: self._op_step(position) for position, node in enumerate(graph.nodes)
                 if node.op is not None}
        segments = graph.attrs['segments']
        self.forward = tuple(_push(s.name, [steps[p] for p in s.nodes])
                             for s in segments if not s.backward)
        backward = [(s.name, [steps[p] for p in s.nodes]) for s in segments if s.backward]
        self.backward = self._with_commits(backward, commits)
        self.reuses_forward = self._backward_reuses_forward()

    # ------------------------------------------------------------------------------------------

    @property
    def outputs(self) -> list:
        """The NDArrays of the graph's outputs (views of the arena, or bound arrays)."""
        return [self.entries[self.graph.entry_id(e)] for e in self.graph.outputs]

    def _backward_reuses_forward(self) -> bool:
        """Whether backward writes a buffer that holds a forward result, so that backward
        needs a forward before it runs again."""
        ptr, storage_of = self.graph.node_row_ptr, self._plan.storage
        forward = {storage_of[e] for e in range(ptr[self.num_forward_nodes])}
        backward = {storage_of[e] for e in range(ptr[self.num_forward_nodes], ptr[-1])}
        return bool((forward & backward) - {EXTERNAL})

    def run(self, part, is_train, monitor=None):
        """Push the segments of `part` ('forward' or 'backward'). With `monitor`, a function
        of a step, every step is pushed alone and ``monitor(step)`` called after it."""
        pushes = self.forward if part == 'forward' else self.backward
        push = engine.get().push
        device = self.device
        if monitor is None:
            for item in pushes:
                push(item.functions[is_train], item.reads, item.writes, device, 0, item.name,
                     True)
            return
        for item in pushes:
            for step in item.steps:
                single = _push(step.name, [step])
                push(single.functions[is_train], single.reads, single.writes, device, 0,
                     single.name, True)
                monitor(step)

    # ------------------------------------------------------------------------------------------

    def _entry_arrays(self, bound):
        graph, plan = self.graph, self._plan
        shapes, dtypes = graph.attrs['shape'], graph.attrs['dtype']
        new_var = engine.get().new_var
        # buffers laid out over the same addresses share a variable, so their users run in order
        group_vars = {group: new_var() for group in set(plan.groups)}
        buffer_vars = [group_vars[group] for group in plan.groups] if plan.groups \
            else [new_var() for _ in plan.sizes]
        self._buffer_vars = buffer_vars
        stypes = graph.attrs.get('stype')
        arrays = []
        for eid in range(graph.num_entries):
            sid = plan.storage[eid]
            if sid == EXTERNAL:
                if eid in bound:
                    arrays.append(bound[eid])
                elif stypes is not None and stypes[eid] != sparse.DEFAULT:
                    # a sparse result: its parts are made by its kernel, outside the arena
                    arrays.append(new_array(stypes[eid], shapes[eid], dtypes[eid],
                                            self.device))
                else:
                    raise EmberError(f'program: entry {eid} lives outside the arena but no '
                                     f'array was bound to it')
            else:
                view = view_of(tuple(shapes[eid]), dtypes[eid], plan.offsets[sid])
                arrays.append(NDArray(self.arena, view, buffer_vars[sid], self.device))
        return arrays

    def _op_step(self, position):
        graph, node = self.graph, self.graph.nodes[position]
        inputs = [self.entries[graph.entry_id(e)] for e in node.inputs]
        outputs = [self.entries[graph.entry_id(e)] for e in graph.node_outputs(position)]
        writes = [x._var for x in outputs]
        writes += [inputs[i]._var for i in node.op.mutate_indices(node.attrs)]
        temp = random = None
        if 'temp' in node.op.resources:
            temp = resource.temp_space(self.device)
            writes.append(temp.var)
        if 'random' in node.op.resources:
            random = resource.random_stream(self.device)
            writes.append(random.var)
        elif 'dropout' in node.op.resources:
            random = resource.dropout_state(self.device)
            writes.append(random.var)
        external = self._plan.storage
        input_vars = tuple(x._var if external[graph.entry_id(e)] == EXTERNAL else None
                           for x, e in zip(inputs, node.inputs))
        unused = frozenset(index for index, entry in enumerate(graph.node_outputs(position))
                           if graph.entry_id(entry) not in self._read_entries)
        contexts = tuple(KernelContext(self.device, mode, self.xp, temp, random,
                                       input_vars=input_vars, unused_outputs=unused,
                                       variable_bytes=self.variable_bytes)
                         for mode in (False, True))
        kernel = _kernel_for(node, inputs, outputs)
        if not any(map(is_sparse, (*inputs, *outputs))):
            workspace = self._workspace(position)
            if workspace is not None:
                writes.append(workspace._var)
            kernel = precision.widened(kernel, [x._view for x in inputs],
                                       [x._view for x in outputs],
                                       node.op.mutate_indices(node.attrs),
                                       workspace=None if workspace is None else
                                       workspace._data())
        if self._stochastic:
            kernel = precision.keyed_per_call(kernel, node.name)
        return _Step(position, f'{node.name}({node.op.name})', kernel, node.attrs,
                     tuple(x._data() for x in inputs), tuple(x._data() for x in outputs),
                     contexts, tuple(x._var for x in inputs), tuple(writes))

    def _workspace(self, position):
        """The bytes the plan set aside at node `position` for full-precision copies under
        bf16 storage, as an array of the arena with its buffer's variable, or None."""
        sid = self._plan.workspaces[position] if self._plan.workspaces else EXTERNAL
        if sid == EXTERNAL:
            return None
        view = view_of((self._plan.sizes[sid],), np.dtype(np.uint8), self._plan.offsets[sid])
        return NDArray(self.arena, view, self._buffer_vars[sid], self.device)

    def _with_commits(self, backward, commits):
        """Backward pushes with the add/copy steps of the gradients placed after the step
        that computes them (first, when a forward entry or a variable is the gradient)."""
        after, early = {}, []
        for eid, target, kind in commits:
            step = self._commit_step(self.entries[eid], target, kind)
            position = _node_of(self.graph, eid)
            if position >= self.num_forward_nodes and self.graph.nodes[position].op is not None:
                after.setdefault(position, []).append(step)
            else:
                early.append(step)
        pushes = []
        for name, steps in backward:
            ordered = []
            for step in steps:
                ordered.append(step)
                ordered.extend(after.pop(step.position, []))
            pushes.append([name, ordered])
        if early and pushes:
            pushes[0][1] = early + pushes[0][1]
        elif early:
            pushes.append(['_grad_copy', early])
        return tuple(_push(name, steps) for name, steps in pushes)

    def _commit_step(self, source, target, kind):
        kernel = _add_into if kind == 'add' else _copy_into
        if is_sparse(source) or is_sparse(target):
            kernel = _sparse_commit(kind, source, target)
        else:
            kernel = precision.widened(kernel, [source._view], [target._view],
                                       accumulates=kind == 'add')
        name = f'_grad_{kind}'
        contexts = (KernelContext(self.device, False, self.xp),) * 2
        return _Step(-1, name, kernel, {}, (source._data(),), (target._data(),), contexts,
                     (source._var,), (target._var,))


def _node_of(graph, eid):
    return bisect.bisect_right(graph.node_row_ptr, eid) - 1


def _kernel_for(node, inputs, outputs):
    """The node's dense kernel; where sparse arrays take part, the kernel that
    :func:`ember.op.sparse.decide` gives, writing into the outputs' own storage types."""
    if not sparse.produces_sparse(node.op) and not any(map(is_sparse, (*inputs, *outputs))):
        return node.op.kernel
    dispatch = sparse.decide(node.op, node.attrs, [x.stype for x in inputs],
                             [x.shape for x in inputs], len(outputs))
    return sparse.into_outputs(dispatch.kernel, dispatch.out_stypes, [o.stype for o in outputs])


def _sparse_commit(kind, source, target):
    """A gradient's copy or add into the user's array where either is sparse."""
    if kind == 'copy':
        return lambda attrs, ins, outs, ctx: sparse.cast_into(ins[0], outs[0], ctx.xp)
    add = registry.get('elemwise_add')
    dispatch = sparse.decide(add, {}, (target.stype, source.stype),
                             (target.shape, source.shape), 1)
    kernel = sparse.into_outputs(dispatch.kernel, dispatch.out_stypes, (target.stype,))
    return lambda attrs, ins, outs, ctx: kernel({}, [outs[0], ins[0]], outs, ctx)


def _add_into(attrs, ins, outs, ctx):
    ctx.xp.add(outs[0], ins[0], out=outs[0])


def _copy_into(attrs, ins, outs, ctx):
    outs[0][...] = ins[0]


def _push(name, steps):
    writes = tuple(dict.fromkeys(var for step in steps for var in step.writes))
    written = set(writes)
    reads = tuple(var for var in dict.fromkeys(v for step in steps for v in step.reads)
                  if var not in written)
    return _Push(name, tuple(steps), reads, writes,
                 (_segment_function(steps, False), _segment_function(steps, True)))


def _segment_function(steps, is_train):
    calls = tuple((s.kernel, s.attrs, list(s.ins), list(s.outs), s.contexts[is_train])
                  for s in steps)
    names = tuple(s.name for s in steps)

    def run():
        index = 0
        try:
            for index, (kernel, attrs, ins, outs, ctx) in enumerate(calls):
                kernel(attrs, ins, outs, ctx)
        except Exception as exc:
            raise EmberError(f'operator {names[index]}: {type(exc).__name__}: {exc}') from exc
    return run
