"""The Executor: a symbol bound to arrays on a device, with MXNet 1.x's API.

Binding runs the graph through the passes of :mod:`ember.executor.pipeline` (shapes and dtypes,
optimisations, the gradient when some ``grad_req`` is not 'null', memory planning, bulk
segmentation) and builds a :class:`~ember.executor.program.Program`: one arena for every
intermediate result and one engine push per segment. ``forward`` and ``backward`` only push.

>>> import ember as mx
>>> import ember.executor
>>> x = mx.sym.var('x')
>>> y = mx.sym.FullyConnected(x, num_hidden=2, no_bias=True, name='fc')
>>> exe = y.simple_bind(mx.cpu(), x=(1, 3))
>>> exe.arg_dict['fc_weight'][:] = 1
>>> exe.forward(is_train=True, x=mx.nd.array([[1, 2, 3]]))[0].asnumpy()
array([[6., 6.]], dtype=float32)
>>> exe.backward(mx.nd.ones((1, 2)))
>>> exe.grad_dict['fc_weight'].asnumpy()
array([[1., 2., 3.],
       [1., 2., 3.]], dtype=float32)
"""
from __future__ import annotations

import numpy as np

from ember import engine
from ember.backend.cpu import return_free_heap
from ember.base import EmberError
from ember import config
from ember.executor import compile, pipeline, snapshots
from ember.executor.compile import LOADED
from ember.executor.trial import ZeroProgram
from ember.passes.gradient import direct_gradients
from ember.passes.options import Options
from ember.executor.program import Program
from ember.ndarray import creation
from ember.op import precision
from ember.ndarray.ndarray import NDArray, empty, view_of

__all__ = ['Executor']


class _Compiled:
    """The program of one mode, the head-gradient arrays that backward fills, and the arrays
    of folded parameters; `digest` names the compiled graph in the compile cache."""

    def __init__(self, graph, program, head_grads, folded_arrays, sources, digest=None):
        self.graph = graph
        self.digest = digest
        self.program = program
        self.head_grads = head_grads        # forward output index -> NDArray
        self.heads_are_ones = set(head_grads)
        self.folded_arrays = folded_arrays  # variable name -> NDArray
        self.sources = sources              # name -> NDArray the folded values come from
        self.source_vars = [a._var for a in sources.values()]
        # Versions (finished writes) of the sources when the folded values were computed.
        self.source_versions = [tuple(a._var.version for a in sources.values())]
        info = graph.attrs.get('gradient')
        count = len(graph.outputs) if info is None else info.num_forward_outputs
        self.outputs = program.outputs[:count]

    def refresh_folded(self):
        """Push the folding again, ordered after every write of its sources pushed so far; it
        computes only when one of them was written since the last fold."""
        if not self.folded_arrays:
            return
        sources, folded = self.sources, self.folded_arrays
        refold, last = self.graph.attrs['folded'].refold, self.source_versions
        xp = self.program.xp
        settled = engine.get().settled_versions(self.source_vars)
        if settled is not None and settled == last[0]:
            # nothing written since the last fold: no push, so the folded arrays keep their
            # versions and kernels their work derived from them (oneDNN's reordered weights)
            return

        def run():
            versions = tuple(a._var.version for a in sources.values())
            if versions == last[0]:
                return
            values = refold({name: _host(a._data()) for name, a in sources.items()})
            missing = sorted(set(folded) - set(values))
            if missing:
                raise EmberError(f'folding {missing} again gave nothing: the configuration '
                                 f'changed since bind (MXNET_SUBGRAPH_BACKEND?); bind again')
            for name, value in values.items():
                precision.round_into(folded[name]._data(), xp.asarray(value))
            last[0] = versions
        engine.get().push(run, [a._var for a in sources.values()],
                          [a._var for a in folded.values()], self.program.device, 0,
                          '_fold_params', True)


class Executor:
    """A bound symbol; create it with ``Symbol.bind`` or ``Symbol.simple_bind``.

    `arg_arrays`, `grad_arrays` (None where no gradient is computed) and `aux_arrays` are the
    arrays in ``list_arguments`` / ``list_auxiliary_states`` order, used as they are (not
    copied); `grad_req` maps every argument to 'write', 'add' or 'null'.
    """

    def __init__(self, symbol, ctx, arg_arrays, grad_arrays, grad_req, aux_arrays,
                 group2ctx=None):
        self._symbol = symbol
        self._ctx = ctx
        self._group2ctx = group2ctx
        self._arg_names = symbol.list_arguments()
        self._arg_index = None              # argument name -> position (_copy_inputs)
        self._aux_names = symbol.list_auxiliary_states()
        self.arg_arrays = list(arg_arrays)
        self.grad_arrays = list(grad_arrays)
        self.aux_arrays = list(aux_arrays)
        self._grad_req = dict(grad_req)
        self._graph = symbol.to_graph()
        self._has_grad = any(req != 'null' for req in self._grad_req.values())
        self._compiled = {}
        self._monitor = None
        self._forward_fresh = False         # backward may use the last forward's results
        self._last_train = True             # the mode of the last forward
        self._awaiting_backward = False     # a training forward ran; its backward has not
        self._name = _graph_name(symbol)
        self._last_mode = self._has_grad
        self._last = self._compiled_for(self._has_grad)

    # ------------------------------------------------------------------------------------------
    # Running

    def forward(self, is_train=False, **kwargs):
        """Compute the outputs; keyword arrays are first copied into the arguments of that name.

        `is_train` picks the training behaviour of operators such as Dropout and BatchNorm.
        Returns ``self.outputs``.
        """
        self._copy_inputs(kwargs)
        compiled = self._compiled_for(bool(is_train))
        _touch(compiled)
        compiled.refresh_folded()
        with snapshots.watch(self, compiled, 'forward', bool(is_train)):
            compiled.program.run('forward', bool(is_train), self._monitor_step(compiled))
        self._last, self._last_mode = compiled, self._mode_of(bool(is_train))
        self._forward_fresh = True
        self._last_train = bool(is_train)
        self._awaiting_backward = self._has_grad and bool(is_train)
        return self.outputs

    def backward(self, out_grads=None, is_train=True):
        """Compute the gradients of the arguments into ``grad_arrays``, from the gradients of
        the outputs, `out_grads` (an NDArray, a list in output order or a dict by output name;
        ones where not given, as autograd does; loss outputs ignore them).

        Backward uses the results of the last forward; when backward reuses their buffers, a
        second backward without a forward in between runs the forward again first.
        """
        if not self._has_grad:
            return
        compiled = self._compiled_for(True)
        _touch(compiled)
        self._set_head_grads(compiled, self._out_grad_list(out_grads))
        if not self._forward_fresh and compiled.program.reuses_forward:
            compiled.program.run('forward', self._last_train)
        with snapshots.watch(self, compiled, 'backward', bool(is_train)):
            compiled.program.run('backward', bool(is_train), self._monitor_step(compiled))
        self._forward_fresh = not compiled.program.reuses_forward
        self._awaiting_backward = False

    @property
    def outputs(self) -> list:
        """The output arrays, overwritten by every forward (an unloaded graph's are new
        arrays: NEURON_NUM_RECENT_MODELS_TO_KEEP)."""
        if self._last is None:
            self._last = self._compiled_for(self._last_mode)
        return list(self._last.outputs)

    # ------------------------------------------------------------------------------------------
    # NEURON_NUM_RECENT_MODELS_TO_KEEP (ember.compiler.loaded calls these)

    def pinned(self, digest) -> bool:
        """Whether the program of `digest` must stay: its backward is still to run."""
        training = self._compiled.get(True)
        return self._awaiting_backward and training is not None and training.digest == digest

    def unload(self, digest) -> None:
        """Drop the programs of compiled graph `digest` (and their arenas)."""
        for mode, compiled in list(self._compiled.items()):
            if compiled.digest == digest:
                del self._compiled[mode]
        if self._last is not None and self._last.digest == digest:
            self._last = None

    def set_monitor_callback(self, callback, monitor_all=False):
        """Call ``callback(name, array)`` after every operator with each of its outputs
        (``fc1_output``), and with its inputs too (``fc1_data``) when `monitor_all`.
        Operators then run one engine push each."""
        self._monitor = None if callback is None else (callback, bool(monitor_all))

    # ------------------------------------------------------------------------------------------
    # Arrays by name

    @property
    def arg_dict(self) -> dict:
        return _named('arguments', self._arg_names, self.arg_arrays)

    @property
    def grad_dict(self) -> dict:
        return _named('arguments', self._arg_names, self.grad_arrays)

    @property
    def aux_dict(self) -> dict:
        return _named('auxiliary states', self._aux_names, self.aux_arrays)

    @property
    def output_dict(self) -> dict:
        return _named('outputs', self._symbol.list_outputs(), self.outputs)

    def copy_params_from(self, arg_params, aux_params=None, allow_extra_params=False):
        """Copy parameter values (dicts of name -> NDArray) into the bound arrays."""
        _copy_named(arg_params, self.arg_dict, allow_extra_params,
                    'Find name "{}" that is not in the arguments')
        if aux_params is not None:
            _copy_named(aux_params, self.aux_dict, allow_extra_params,
                        'Find name {} that is not in the auxiliary states')

    # ------------------------------------------------------------------------------------------

    def reshape(self, partial_shaping=False, allow_up_sizing=False, **kwargs):
        """A new executor for new input shapes, sharing the arrays whose shape is unchanged
        (and the memory of those that shrink) with this one.

        An argument not named in `kwargs` may change shape only with `partial_shaping`, and
        grow only with `allow_up_sizing`.
        """
        arg_shapes, _, aux_shapes = self._symbol.infer_shape(**kwargs)
        if arg_shapes is None:
            raise EmberError(f'reshape: cannot infer every shape from {kwargs}')
        new = {'args': [], 'grads': [], 'aux': []}
        for name, array, grad, shape in zip(self._arg_names, self.arg_arrays, self.grad_arrays,
                                            arg_shapes):
            new['args'].append(_resized(array, shape, name, kwargs, partial_shaping,
                                        allow_up_sizing))
            new['grads'].append(None if grad is None else _resized(
                grad, shape, name, kwargs, partial_shaping, allow_up_sizing))
        for name, array, shape in zip(self._aux_names, self.aux_arrays, aux_shapes):
            new['aux'].append(_resized(array, shape, name, kwargs, partial_shaping,
                                       allow_up_sizing))
        executor = Executor(self._symbol, self._ctx, new['args'], new['grads'], self._grad_req,
                            new['aux'], self._group2ctx)
        executor._monitor = self._monitor
        return executor

    def debug_str(self) -> str:
        """The bound graph, node by node, in MXNet's layout, ending with the arena size:
        ``Total N MB allocated``."""
        compiled = self._compiled.get(self._has_grad, self._last)
        graph = compiled.graph
        lines = ['Symbol Outputs:']
        lines += [f'\toutput[{i}]={graph.nodes[e.node].name}({e.index})'
                  for i, e in enumerate(graph.outputs)]
        for node in graph.nodes:
            lines += _node_lines(graph, node)
        planned = graph.attrs['memory_plan'].planned_bytes
        lines.append(f'Total {planned >> 20} MB allocated')
        return '\n'.join(lines) + '\n'

    # ------------------------------------------------------------------------------------------

    def _compiled_for(self, is_train):
        # An executor that computes gradients has one program for both modes; one that does
        # not compiles each mode on first use (inference-only rewrites such as BatchNorm
        # folding must not run in training mode).
        key = self._mode_of(is_train)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._compile(key)
        return compiled

    def _mode_of(self, is_train):
        return True if self._has_grad else bool(is_train)

    def _compile(self, is_train):
        by_name = dict(zip(self._arg_names + self._aux_names,
                           self.arg_arrays + self.aux_arrays))
        options = Options({n: a.shape for n, a in by_name.items()},
                          {n: a._view.dtype for n, a in by_name.items()},
                          self._grad_req if self._has_grad else {}, bool(is_train), self._ctx,
                          by_name)
        result = compile.compile_graph(self._graph, options, self._name, holder=self)
        if result.extracted:
            return self._zeros(options, result.key.digest)
        graph = result.graph
        heads = self._head_grad_arrays(graph)
        folded, sources = self._folded_arrays(graph, by_name)
        bound = self._bound_entries(graph, {**by_name, **folded,
                                            **{n: a for n, a in heads.values()}})
        bound.update(self._direct_gradients(graph))
        program = Program(graph, self._ctx, bound, self._commits(graph))
        # binding made and dropped host temporaries (folded and transposed weights): return
        # their pages now, or the process keeps them for good
        return_free_heap()
        return _Compiled(graph, program, {i: a for i, (_, a) in heads.items()}, folded,
                         sources, result.key.digest)

    def _zeros(self, options, digest):
        """NEURON_EXTRACT_GRAPHS_ONLY: a program of zeros in the graph's output shapes."""
        graph = pipeline.typed(self._graph, options)
        grads = [g for g, name in zip(self.grad_arrays, self._arg_names)
                 if g is not None and self._grad_req.get(name) == 'write']
        return _Compiled(graph, ZeroProgram(graph, self._ctx, grads), {}, {}, {}, digest)

    def _folded_arrays(self, graph, by_name):
        """Arrays for the variables a pass introduced with values, and their sources."""
        folded = graph.attrs.get('folded')
        if folded is None:
            return {}, {}
        arrays = {name: creation.array(value, self._ctx, value.dtype)
                  for name, value in folded.values.items()}
        return arrays, {name: by_name[name] for name in folded.sources}

    def _head_grad_arrays(self, graph):
        """Forward output index -> (variable name, array of ones) per head gradient."""
        info = graph.attrs.get('gradient')
        if info is None:
            return {}
        shapes, dtypes = graph.attrs['shape'], graph.attrs['dtype']
        result = {}
        for index, name in info.head_grads:
            eid = graph.entry_id(graph.outputs[index])
            array = empty(shapes[eid], self._ctx, dtypes[eid])
            array[:] = 1
            result[index] = (name, array)
        return result

    def _bound_entries(self, graph, by_name):
        bound = {}
        for position in graph.input_nodes:
            name = graph.nodes[position].name
            if name not in by_name:
                raise EmberError(f'bind: the compiled graph has a variable {name!r} that is '
                                 f'neither an argument nor an auxiliary state')
            bound[graph.node_row_ptr[position]] = by_name[name]
        return bound

    def _direct_gradients(self, graph):
        grads = dict(zip(self._arg_names, self.grad_arrays))
        return {eid: grads[name]
                for eid, name in direct_gradients(graph, self._grad_req).items()}

    def _commits(self, graph):
        info = graph.attrs.get('gradient')
        if info is None:
            return []
        direct = direct_gradients(graph, self._grad_req)
        grads = dict(zip(self._arg_names, self.grad_arrays))
        commits = []
        for k, name in enumerate(info.wrt):
            eid = graph.entry_id(graph.outputs[info.num_forward_outputs + k])
            if direct.get(eid) != name:
                kind = 'add' if self._grad_req[name] == 'add' else 'copy'
                commits.append((eid, grads[name], kind))
        return commits

    def _copy_inputs(self, kwargs):
        if not kwargs:
            return
        if self._arg_index is None:
            # the names are checked for duplicates as arg_dict does, once: they stay
            self._arg_index = {name: index for index, name in enumerate(
                _named('arguments', self._arg_names, self._arg_names))}
        for name, array in kwargs.items():
            if not isinstance(array, (NDArray, np.ndarray)):
                raise ValueError('only accept keyword argument of NDArrays and numpy.ndarray')
            index = self._arg_index.get(name)
            if index is None:
                raise TypeError(f'Unknown argument {name}; arguments: {self._arg_names}')
            target = self.arg_arrays[index]
            if target.shape != array.shape:
                raise ValueError(f'Shape not match! Argument {name}, need: '
                                 f'{target.shape}, received: {array.shape}')
            target[:] = array

    def _out_grad_list(self, out_grads):
        if out_grads is None:
            return []
        if isinstance(out_grads, NDArray):
            return [out_grads]
        if isinstance(out_grads, dict):
            return [out_grads.get(k) for k in self._symbol.list_outputs()]
        out_grads = list(out_grads)
        for value in out_grads:
            if value is not None and not isinstance(value, NDArray):
                raise TypeError(f'inputs must be NDArray, got {type(value).__name__}')
        return out_grads

    def _set_head_grads(self, compiled, out_grads):
        for index, array in compiled.head_grads.items():
            given = out_grads[index] if index < len(out_grads) else None
            if given is not None:
                if given.shape != array.shape:
                    raise ValueError(f'backward: out_grads[{index}] has shape {given.shape}; '
                                     f'output {index} has shape {array.shape}')
                array[:] = given
                compiled.heads_are_ones.discard(index)
            elif index not in compiled.heads_are_ones:
                array[:] = 1
                compiled.heads_are_ones.add(index)

    def _monitor_step(self, compiled):
        if self._monitor is None:
            return None
        callback, monitor_all = self._monitor
        graph, entries = compiled.graph, compiled.program.entries

        def report(step):
            if step.position < 0:
                return
            node = graph.nodes[step.position]
            if monitor_all:
                for name, entry in zip(node.input_names(), node.inputs):
                    callback(f'{node.name}_{name}', entries[graph.entry_id(entry)])
            for name, entry in zip(node.output_names(), graph.node_outputs(step.position)):
                callback(name, entries[graph.entry_id(entry)])
        return report

    def __repr__(self):
        return f'<Executor of {self._symbol.list_outputs()} on {self._ctx}>'


# ----------------------------------------------------------------------------------------------

def _graph_name(symbol) -> str:
    """A readable name of a bound graph: its first output's node."""
    outputs = symbol.list_outputs()
    return outputs[0].removesuffix('_output') if outputs else 'graph'


def _touch(compiled) -> None:
    """The graph of `compiled` runs now (NEURON_NUM_RECENT_MODELS_TO_KEEP counts uses)."""
    limit = config.get('NEURON_NUM_RECENT_MODELS_TO_KEEP')
    if limit is not None and compiled.digest is not None:
        LOADED.touch(compiled.digest, limit)


def _host(raw):
    return raw if isinstance(raw, np.ndarray) else raw.get()


def _named(what, names, arrays):
    if len(set(names)) != len(names):
        raise ValueError(f'Duplicate names detected in the {what}: {names}')
    return dict(zip(names, arrays))


def _copy_named(params, targets, allow_extra, message):
    for name, array in params.items():
        if name in targets:
            target = targets[name]
            array.astype(target.dtype).copyto(target)
        elif not allow_extra:
            raise ValueError(message.format(name))


def _resized(array, shape, name, kwargs, partial_shaping, allow_up_sizing):
    shape = tuple(shape)
    if array.shape == shape:
        return array
    if name not in kwargs and not partial_shaping:
        raise AssertionError(f'Shape of unspecified array arg:{name} changed. This can cause '
                             f'the new executor to not share parameters with the old one. '
                             f'Please check for error in network. If this is intended, set '
                             f'partial_shaping=True to suppress this warning.')
    size = int(np.prod(shape))
    if size > array.size:
        if not allow_up_sizing:
            raise AssertionError(f'New shape of arg:{name} larger than original. First making '
                                 f'a big executor and then down sizing it is more efficient '
                                 f'than the reverse. If you really want to up size, set '
                                 f'allow_up_sizing=True to enable allocation of new arrays.')
        return empty(shape, array.context, array._view.dtype)
    view = view_of(shape, array._view.dtype, array._view.offset)
    return NDArray(array.handle, view, array._var, array.context)


def _node_lines(graph, node):
    if node.op is None:
        return [f'Variable:{node.name}']
    lines = ['--------------------', f'Op:{node.op.name}, Name={node.name}', 'Inputs:']
    for i, entry in enumerate(node.inputs):
        source = graph.nodes[entry.node]
        version = ' version=0' if source.op is None else ''
        lines.append(f'\targ[{i}]={source.name}({entry.index}){version}')
    if node.attr_text:
        lines.append('Attrs:')
        lines += [f'\t{k}={v}' for k, v in sorted(node.attr_text.items())]
    return lines
