"""Control flow in symbol graphs (``mx.sym.contrib.foreach``, ``while_loop``, ``cond``).

The user's Python function is called once on placeholder variables; the symbol it returns
becomes a :class:`Subgraph` held by one ``_foreach`` / ``_while_loop`` / ``_cond`` node (see
:mod:`ember.op.control_flow`). Whatever the function reads from outside is an input of that
node: outer variables (a hybridized block's parameters) stay variables of the subgraph, and
outer operator outputs are cut out and fed in, so they are computed once, not per step.

A subgraph runs node by node on raw arrays inside its operator's kernel. Its gradient is
the graph the gradient pass makes of it; the pass sits above this layer, so the executor
package installs it (:func:`set_gradient_pass`) when it loads, as it must before any graph
runs backward.

>>> import ember as mx
>>> import ember.executor
>>> data, state = mx.sym.var('data'), mx.sym.var('state')
>>> outs, final = mx.sym.contrib.foreach(lambda x, s: (x + s, x + s), data, state)
>>> exe = mx.sym.Group([outs, final]).bind(mx.cpu(), {'data': mx.nd.array([1, 2, 3]),
...                                                    'state': mx.nd.array([10])})
>>> [o.asnumpy().ravel().tolist() for o in exe.forward()]
[[11.0, 13.0, 16.0], [16.0]]
"""
from __future__ import annotations


from ember.base import EmberError
from ember.op import registry
from ember.op.registry import KernelContext
from ember.symbol.infer import infer_shapes, infer_types
from ember.symbol.attribute import AttrScope
from ember.symbol.name import NameManager
from ember.symbol.symbol import Group, Symbol, SymbolNode, create, var

__all__ = ['Subgraph', 'foreach', 'while_loop', 'cond', 'set_gradient_pass']

_gradient_pass = None


def set_gradient_pass(run) -> None:
    """Install the gradient pass (``ember.passes.gradient.with_gradients``) subgraphs use."""
    global _gradient_pass
    _gradient_pass = run


class Subgraph:
    """A graph run inside an operator; its variables are fed from the operator's inputs."""

    def __init__(self, graph, input_positions, label):
        self.graph = graph
        self.input_positions = tuple(input_positions)
        self.label = label
        names = [graph.nodes[i].name for i in graph.input_nodes]
        aux = {graph.nodes[i].name for i in graph.aux_nodes}
        self.mutated = tuple(p for name, p in zip(names, self.input_positions) if name in aux)
        self._variables = list(zip(graph.input_nodes, self.input_positions))
        self._gradient = None

    def __repr__(self):
        return f'<Subgraph {self.label}: {len(self.graph.nodes)} nodes at {id(self):#x}>'

    __str__ = __repr__

    # ------------------------------------------------------------------------------------------
    # Inference

    def _known(self, values):
        return {self.graph.nodes[node].name: values[position]
                for node, position in self._variables if values[position] is not None}

    def _filled(self, values, found):
        ptr = self.graph.node_row_ptr
        filled = list(values)
        for node, position in self._variables:
            if filled[position] is None:
                filled[position] = found[ptr[node]]
        return filled, [found[self.graph.entry_id(e)] for e in self.graph.outputs]

    def infer_shape(self, shapes):
        found = infer_shapes(self.graph, self._known(shapes))
        return self._filled(shapes, [None if s is None or 0 in s else tuple(s) for s in found])

    def infer_type(self, dtypes):
        return self._filled(dtypes, infer_types(self.graph, self._known(dtypes)))

    # ------------------------------------------------------------------------------------------
    # Running

    def run(self, inputs, ctx):
        """The outputs for operator inputs `inputs` (raw arrays)."""
        return _run_graph(self.graph, self._feed(inputs), ctx)

    def _feed(self, inputs):
        return {self.graph.nodes[node].name: inputs[position]
                for node, position in self._variables}

    def vjp(self, inputs, head_grads, ctx):
        """Per operator input, the gradient of sum(outputs * head_grads) (None where none)."""
        graph, info = self._gradient_graph()
        values = self._feed(inputs)
        for index, name in info.head_grads:
            values[name] = head_grads[index]
        results = _run_graph(graph, values, ctx)[info.num_forward_outputs:]
        grads = [None] * len(inputs)
        by_name = dict(zip(info.wrt, results))
        for node, position in self._variables:
            grad = by_name.get(self.graph.nodes[node].name)
            if grad is not None:
                grads[position] = grad if grads[position] is None else grads[position] + grad
        return grads

    def _gradient_graph(self):
        if self._gradient is None:
            if _gradient_pass is None:
                raise EmberError('the gradient of a control-flow operator needs the gradient '
                                 'pass: import ember.executor')
            aux = set(self.graph.aux_nodes)
            wrt = [self.graph.nodes[i].name for i in self.graph.input_nodes if i not in aux]
            graph = _gradient_pass(self.graph, wrt=wrt)
            self._gradient = (graph, graph.attrs['gradient'])
        return self._gradient


def _run_graph(graph, values, ctx):
    """Every node of `graph` on raw arrays, in order; returns the outputs' arrays."""
    xp = ctx.xp
    results = []
    for node in graph.nodes:
        if node.op is None:
            results.append([_variable(values, node.name)])
            continue
        ins = [results[e.node][e.index] for e in node.inputs]
        results.append(_call(node, ins, xp, ctx))
    return [results[e.node][e.index] for e in graph.outputs]


def _variable(values, name):
    if name not in values:
        raise EmberError(f'subgraph: no value for variable {name!r}')
    return values[name]


def _call(node, ins, xp, ctx):
    op, attrs = node.op, node.attrs
    _, shapes = op.infer_shape(attrs, [tuple(x.shape) for x in ins])
    _, dtypes = op.infer_type(attrs, [x.dtype for x in ins])
    outs = [xp.empty(shape, dtype) for shape, dtype in zip(shapes, dtypes)]
    node_ctx = KernelContext(ctx.device, ctx.is_train, xp, temp=ctx.temp, random=ctx.random,
                             safe_accumulation=ctx.safe_accumulation,
                             deterministic=ctx.deterministic)
    try:
        op.kernel(attrs, ins, outs, node_ctx)
    except Exception as exc:
        raise EmberError(f'subgraph node {node.name!r} ({op.name}) failed: {exc}') from exc
    return outs


# ----------------------------------------------------------------------------------------------
# Building subgraphs from Python functions.

SUBGRAPH_KEY = '__subgraph_name__'


def _call_inside(label, fn, *args):
    """Call the user's function; the nodes it makes are marked as the subgraph's (MXNet's
    ``__subgraph_name__`` attribute); whatever else they read comes from outside."""
    with AttrScope(**{SUBGRAPH_KEY: label}):
        return fn(*args)


def _as_list(value, what):
    """(list of symbols, whether a single symbol was given)."""
    if isinstance(value, Symbol):
        return [value], True
    if isinstance(value, (list, tuple)) and all(isinstance(v, Symbol) for v in value):
        return list(value), False
    raise TypeError(f'{what} must be a Symbol or a list of Symbols, got {type(value).__name__}')


def _flat(symbols):
    """Single-output symbols of every output of `symbols`."""
    return [s[i] for s in symbols for i in range(len(s))]


class _Cut:
    """The nodes of a subgraph rebuilt apart from the outer graph: outer operator outputs
    they read become new variables, outer variables are read as they are."""

    def __init__(self, label):
        self.label = label
        self.copies = {}        # id of an inside node -> its copy
        self.cut = {}           # (id of an outside node, output) -> the variable replacing it
        self.outside = {}       # variable name -> the outer symbol that feeds it

    def entry(self, src, index):
        if id(src) in self.copies:
            return (self.copies[id(src)], index)
        if src.op is None:
            self.outside.setdefault(src.name, Symbol([(src, 0)]))
            return (src, index)
        key = (id(src), index)
        if key not in self.cut:
            name = f'{src.name}_output{index}_{self.label}'
            self.cut[key] = SymbolNode(None, name)
            self.outside[name] = Symbol([(src, index)])
        return (self.cut[key], 0)

    def graph(self, outputs):
        for node in Group(outputs)._nodes():
            if node.op is not None and node.attr_text.get(SUBGRAPH_KEY) == self.label:
                self.copies[id(node)] = SymbolNode(node.op, node.name, node.attrs,
                                                   [self.entry(s, i) for s, i in node.inputs],
                                                   dict(node.attr_text))
        return Symbol([self.entry(*s._heads[0]) for s in outputs]).to_graph()


def make_subgraph(outputs, placeholders, label):
    """The graph of `outputs` (made inside subgraph `label`) and {name: outer symbol} of what
    it reads from outside; the placeholders are left out (the loop feeds them). Returns a
    builder of the Subgraph (given every variable's operator input position) and that dict."""
    cut = _Cut(label)
    graph = cut.graph(outputs)
    own = {p.name for p in placeholders}
    outer = {name: symbol for name, symbol in cut.outside.items() if name not in own}

    def build(position_of):
        names = [graph.nodes[i].name for i in graph.input_nodes]
        return Subgraph(graph, [position_of[n] for n in names], label)
    return build, outer


def _outer_inputs(outers, positions):
    """Merge the outside inputs of several subgraphs into `positions` (name -> operator input,
    the placeholders' already in): the outer symbols in input order."""
    symbols = []
    for outer in outers:
        for name, symbol in outer.items():
            if name not in positions:
                positions[name] = len(positions)
                symbols.append(symbol)
    return symbols


def _placeholders(prefix, count):
    return [var(f'{prefix}{i}') for i in range(count)]


def _node_name(hint):
    """The operator node's name, which also marks the nodes of its subgraphs."""
    return NameManager.current.get(None, hint)


def foreach(body, data, init_states, name='foreach'):
    """Run `body(data slice, states) -> (outputs, new states)` over the first axis of
    `data`; returns (outputs stacked along a new first axis, final states), each a Symbol or
    a list as `body` returned them and `init_states` was given."""
    data_list, single_data = _as_list(data, 'data')
    states_list, single_state = _as_list(init_states, 'init_states')
    node = _node_name(name)
    slices = _placeholders(f'{node}_data', len(data_list))
    states = _placeholders(f'{node}_state', len(states_list))
    outs, new_states = _call_inside(node, body, slices[0] if single_data else slices,
                                    states[0] if single_state else states)
    out_list, single_out = _as_list(outs, 'the outputs of body')
    new_list, _ = _as_list(new_states, 'the states body returns')
    if len(new_list) != len(states_list):
        raise ValueError(f'foreach: body returned {len(new_list)} states for '
                         f'{len(states_list)} initial states')
    loop = slices + states
    build, outer = make_subgraph(_flat(out_list) + _flat(new_list), loop, node)
    positions = {p.name: i for i, p in enumerate(loop)}
    inputs = data_list + states_list + _outer_inputs([outer], positions)
    result = create(registry.get('_foreach'), '_foreach', inputs, name=node, params={
        'subgraph': build(positions), 'num_data': len(data_list),
        'num_states': len(states_list), 'num_outputs': len(out_list),
        'num_inputs': len(inputs)})
    outputs = [result[i] for i in range(len(out_list))]
    finals = [result[len(out_list) + i] for i in range(len(states_list))]
    return (outputs[0] if single_out else outputs), (finals[0] if single_state else finals)


def while_loop(cond, func, loop_vars, max_iterations=None, name='while_loop'):
    """Run `func(*loop_vars) -> (outputs, new loop_vars)` while `cond(*loop_vars)` holds, at
    most `max_iterations` times; returns (outputs stacked and padded with zeros to
    max_iterations, final loop variables)."""
    if max_iterations is None:
        raise ValueError('while_loop: max_iterations is required for symbols')
    var_list, single_var = _as_list(loop_vars, 'loop_vars')
    node = _node_name(name)
    placeholders = _placeholders(f'{node}_var', len(var_list))
    condition, _ = _as_list(_call_inside(f'{node}_cond', cond, *placeholders),
                            'the result of cond')
    outs, new_vars = _call_inside(f'{node}_func', func, *placeholders)
    out_list, single_out = ([], False) if outs is None or (isinstance(outs, (list, tuple))
                                                           and not outs) else \
        _as_list(outs, 'the outputs of func')
    new_list, _ = _as_list(new_vars, 'the loop variables func returns')
    if len(new_list) != len(var_list):
        raise ValueError(f'while_loop: func returned {len(new_list)} loop variables for '
                         f'{len(var_list)}')
    build_cond, outer_cond = make_subgraph(condition, placeholders, f'{node}_cond')
    build_func, outer_func = make_subgraph(_flat(out_list) + _flat(new_list), placeholders,
                                           f'{node}_func')
    positions = {p.name: i for i, p in enumerate(placeholders)}
    inputs = var_list + _outer_inputs([outer_cond, outer_func], positions)
    result = create(registry.get('_while_loop'), '_while_loop', inputs, name=node, params={
        'cond': build_cond(positions), 'func': build_func(positions),
        'max_iterations': max_iterations, 'num_loop_vars': len(var_list),
        'num_outputs': len(out_list), 'num_inputs': len(inputs)})
    outputs = [result[i] for i in range(len(out_list))]
    finals = [result[len(out_list) + i] for i in range(len(var_list))]
    return (outputs[0] if single_out else outputs), (finals[0] if single_var else finals)


def cond(pred, then_func, else_func, name='cond'):
    """`then_func()` where `pred` (a one-element symbol) is non-zero, else `else_func()`;
    only the branch taken runs."""
    node = _node_name(name)
    then_list, single = _as_list(_call_inside(f'{node}_then', then_func),
                                 'the result of then_func')
    else_list, _ = _as_list(_call_inside(f'{node}_else', else_func), 'the result of else_func')
    if len(then_list) != len(else_list):
        raise ValueError(f'cond: then_func returned {len(then_list)} outputs, else_func '
                         f'{len(else_list)}')
    builds, outers = [], []
    for label, symbols in ((f'{node}_pred', [pred]), (f'{node}_then', then_list),
                           (f'{node}_else', else_list)):
        build, outer = make_subgraph(_flat(symbols), [], label)
        builds.append(build)
        outers.append(outer)
    positions = {}
    inputs = _outer_inputs(outers, positions)
    result = create(registry.get('_cond'), '_cond', inputs, name=node, params={
        'cond': builds[0](positions), 'then_branch': builds[1](positions),
        'else_branch': builds[2](positions), 'num_outputs': len(then_list),
        'num_inputs': len(inputs)})
    outputs = [result[i] for i in range(len(then_list))]
    return outputs[0] if single else outputs
