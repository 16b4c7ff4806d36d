"""The Symbol: a handle on outputs of a graph under construction, with MXNet 1.x's API.

A Symbol holds output entries ``(node, index)`` of :class:`SymbolNode` objects that point at
their inputs directly, so symbols built from one another share nodes. ``to_graph()`` turns the
nodes reachable from a symbol into the index-based :class:`~ember.symbol.graph.Graph` that passes
and the executor read; ``Symbol.from_graph`` goes back.

>>> from ember import symbol as sym
>>> x = sym.var('x')
>>> fc = sym.FullyConnected(x, num_hidden=4, name='fc1')
>>> out = sym.relu(fc * 2 + 1, name='act')
>>> out.list_arguments(), out.list_outputs()
(['x', 'fc1_weight', 'fc1_bias'], ['act_output'])
>>> out.infer_shape(x=(3, 5))
([(3, 5), (4, 5), (4,)], [(3, 4)], [])
>>> sym.load_json(out.tojson()).tojson() == out.tojson()
True
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np

from ember.base import EmberError, NotImplementedForSymbol, dtype_of
from ember.op import registry
from ember.symbol import json_io
from ember.symbol.attribute import AttrScope
from ember.symbol.graph import (HIDDEN_KEYS, Entry, Graph, Node, NodeMethods, attr_text_of,
                                hidden_key, topo_order)
from ember.symbol.infer import (FLAG_OF_TYPE, infer_shapes, infer_types, normalize_shape,
                                shape_is_known)
from ember.symbol.name import NameManager

__all__ = ['Symbol', 'SymbolNode', 'NotImplementedForSymbol', 'var', 'Variable', 'Group',
           'load', 'load_json', 'fromjson', 'node_symbols', 'create']

_STORAGE_TYPES = {'default': 0, 'row_sparse': 1, 'csr': 2}


class SymbolNode(NodeMethods):
    """A node of a symbol under construction: a variable (``op`` None) or an operator call
    whose ``inputs`` are ``(SymbolNode, output index)`` pairs.

    Only ``Symbol._set_attr`` changes a node after creation (as in MXNet, every symbol sharing
    the node sees the change).
    """

    __slots__ = ('op', 'name', 'attrs', 'inputs', 'attr_text')

    def __init__(self, op, name, attrs=None, inputs=(), attr_text=None):
        self.op = op
        self.name = name
        self.attrs = attrs if attrs is not None else {}
        self.inputs = tuple(inputs)
        self.attr_text = attr_text if attr_text is not None else {}

    def __repr__(self):
        return f'SymbolNode({self.op.name if self.op else "null"}, {self.name!r})'


def _inputs_of(node):
    return [source for source, _ in node.inputs]


# Bumped by every change to a symbol's nodes or heads (_set_attr, _compose): a symbol keeps
# its last to_graph() while the count stays the same. Binding a hybridized Gluon block asks
# for its arguments, auxiliary states and inputs eight times; inceptionv3's graph takes 8 ms
# to build each time (a fifth of a warm compile cache's first call).
_changes = 0


def _changed():
    global _changes
    _changes += 1


class Symbol:
    """Outputs of a symbolic graph. Build with ``mx.sym.var`` and the operator functions."""

    __hash__ = object.__hash__

    def __init__(self, heads):
        self._heads = tuple(heads)
        self._graph = None          # (_changes when built, the graph)

    # ------------------------------------------------------------------------------------------
    # Graph form

    def _nodes(self) -> list:
        return topo_order([node for node, _ in self._heads], _inputs_of)

    def to_graph(self) -> Graph:
        """The index-based graph of every node this symbol depends on (topological order)."""
        kept = self.__dict__.get('_graph')
        if kept is not None and kept[0] == _changes:
            return kept[1]
        built = self._build_graph()
        self._graph = (_changes, built)
        return built

    def _build_graph(self) -> Graph:
        order = self._nodes()
        position = {id(node): i for i, node in enumerate(order)}
        nodes = [Node(n.op, n.name, n.attrs,
                      tuple(Entry(position[id(s)], i) for s, i in n.inputs), dict(n.attr_text))
                 for n in order]
        return Graph(nodes, [Entry(position[id(n)], i) for n, i in self._heads])

    @classmethod
    def from_graph(cls, graph: Graph, entries=None) -> 'Symbol':
        """A symbol over new nodes built from `graph`, with outputs `entries` (default: the
        graph's outputs; hidden outputs may be named too)."""
        nodes = _symbol_nodes(graph)
        return cls([(nodes[e.node], e.index) for e in (graph.outputs if entries is None
                                                       else entries)])

    # ------------------------------------------------------------------------------------------
    # Names, outputs and inputs

    @property
    def name(self):
        """The name of the node when every output comes from one node, else None."""
        node = self._single_node()
        return None if node is None else node.name

    def _single_node(self):
        nodes = {id(node): node for node, _ in self._heads}
        return next(iter(nodes.values())) if len(nodes) == 1 else None

    def list_outputs(self) -> list:
        """``fc1_output``, ``split0_output1``; a variable's own name."""
        return [node.output_names()[index] for node, index in self._heads]

    def list_arguments(self) -> list:
        """Names of the variables that are not auxiliary states, in depth-first order."""
        graph = self.to_graph()
        return [graph.nodes[i].name for i in graph.arg_nodes]

    def list_auxiliary_states(self) -> list:
        """Names of the variables some operator updates (BatchNorm's moving mean and var)."""
        graph = self.to_graph()
        return [graph.nodes[i].name for i in graph.aux_nodes]

    def list_inputs(self) -> list:
        """Names of every variable, arguments and auxiliary states."""
        graph = self.to_graph()
        return [graph.nodes[i].name for i in graph.input_nodes]

    def get_internals(self) -> 'Symbol':
        """A symbol with every output of every node (hidden outputs included), in order."""
        return Symbol([(node, i) for node in self._nodes() for i in range(node.num_outputs)])

    def get_children(self):
        """A symbol of the inputs of this symbol's output nodes, or None for a variable."""
        heads, seen = [], set()
        for node, _ in self._heads:
            if id(node) not in seen:
                seen.add(id(node))
                heads.extend(node.inputs)
        return Symbol(heads) if heads else None

    def __len__(self):
        return len(self._heads)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, index):
        """Output `index` (int, negative counts from the end), a slice, or an output name.

        The hidden outputs of a single operator (BatchNorm's mean and var) follow its visible
        ones, for graph passes: ``bn[1]`` is ``bn_mean`` although ``len(bn)`` is 1.
        """
        if isinstance(index, slice):
            return Group([self[i] for i in range(*index.indices(len(self)))])
        if isinstance(index, str):
            index = self._output_position(index)
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            raise TypeError(f'Symbol index {index!r}: expected an int, a slice or an output '
                            f'name')
        index = int(index)
        if -len(self) <= index < len(self):
            return Symbol([self._heads[index]])
        node = self._single_node()
        if index >= 0 and node is not None and index < node.num_outputs and all(
                i == k for k, (_, i) in enumerate(self._heads)):
            return Symbol([(node, index)])
        raise IndexError(f'Symbol index {index} is out of range for {len(self)} outputs')

    def _output_position(self, name):
        names = self.list_outputs()
        if names.count(name) > 1:
            raise ValueError(f'There are multiple outputs with name "{name}"')
        if name in names:
            return names.index(name)
        node = self._single_node()
        if node is not None and name in node.output_names():
            return node.output_names().index(name)
        raise ValueError(f'Cannot find output that matches name "{name}"; outputs: {names}')

    def __repr__(self):
        name = self.name
        if name is None:
            return f'<Symbol group [{", ".join(s.name for s in self)}]>'
        return f'<Symbol {name}>'

    def __bool__(self):
        raise NotImplementedForSymbol(self.__bool__, 'bool')

    # What only an NDArray can do: a Symbol holds no values (MXNet raises the same error).
    def wait_to_read(self):
        raise NotImplementedForSymbol(self.wait_to_read, None)

    def asnumpy(self):
        raise NotImplementedForSymbol(self.asnumpy, None)

    def asscalar(self):
        raise NotImplementedForSymbol(self.asscalar, None)

    def as_in_context(self, context):
        raise NotImplementedForSymbol(self.as_in_context, None)

    def detach(self):
        raise NotImplementedForSymbol(self.detach, None)

    def backward(self, out_grad=None, retain_graph=False, train_mode=True):
        raise NotImplementedForSymbol(self.backward, None)

    # ------------------------------------------------------------------------------------------
    # Attributes

    def attr(self, key):
        """The attribute `key` of this symbol's node (``'name'``, ``'op_name'`` too), or None.

        >>> from ember import symbol as sym
        >>> w = sym.var('w', lr_mult=2)
        >>> w.attr('lr_mult'), w.attr('__lr_mult__'), w.attr('op_name')
        ('2', '2', 'null')
        """
        node = self._single_node()
        if node is None:
            return None
        if key == 'name':
            return node.name
        if key == 'op_name':
            return 'null' if node.op is None else node.op.name
        if key in node.attr_text:
            return node.attr_text[key]
        return node.attr_text.get(hidden_key(key))

    def list_attr(self, recursive=False) -> dict:
        """The attributes of this symbol's node (operator parameters included)."""
        if recursive:
            raise DeprecationWarning('Symbol.list_attr with recursive=True has been '
                                     'deprecated. Please use attr_dict instead.')
        node = self._single_node()
        return {} if node is None else dict(node.attr_text)

    def attr_dict(self) -> dict:
        """``{node name: {key: value}}`` for every node with attributes."""
        return {node.name: dict(node.attr_text) for node in self._nodes() if node.attr_text}

    def _set_attr(self, **kwargs):
        """Set string attributes of this symbol's node (``name`` renames it)."""
        node = self._single_node()
        if node is None:
            raise EmberError('Symbol._set_attr only works for non-grouped symbols')
        _changed()
        for key, value in kwargs.items():
            if not isinstance(value, str):
                raise ValueError(f'Set Attr only accepts string values; {key}={value!r}')
            if key == 'name':
                node.name = value
            else:
                node.attr_text[hidden_key(key)] = value
        if node.op is not None:
            params = {p.name for p in node.op.params}
            node.attrs = node.op.parse_attrs({k: v for k, v in node.attr_text.items()
                                              if k in params})

    # ------------------------------------------------------------------------------------------
    # Composition

    def __copy__(self):
        return Symbol.from_graph(self.to_graph())

    def __deepcopy__(self, memo):
        return self.__copy__()

    copy = __copy__

    def __call__(self, *args, **kwargs):
        """A copy with variables replaced: positional symbols take the arguments in order,
        keyword symbols the variables of that name."""
        composed = self.__copy__()
        composed._compose(*args, **kwargs)
        return composed

    def _compose(self, *args, **kwargs):
        """Replace this symbol's variables in place (see ``__call__``)."""
        kwargs.pop('name', None)       # MXNet names only atomic symbols here; ours never are
        if args and kwargs:
            raise TypeError('compose only accept input Symbols either as positional or keyword '
                            'arguments, not both')
        for value in args + tuple(kwargs.values()):
            if not isinstance(value, Symbol):
                raise TypeError(f'Compose expect `Symbol` as arguments, got '
                                f'{type(value).__name__}')
        nodes = self._nodes()
        if args:
            replace = _positional_map(nodes, self.to_graph(), args)
        else:
            replace = _keyword_map([n for n in nodes if n.op is None], kwargs)
        self._heads = _substitute(self._heads, replace)
        _changed()

    # ------------------------------------------------------------------------------------------
    # Inference

    def infer_shape(self, *args, **kwargs):
        """(argument shapes, output shapes, auxiliary shapes) from some known shapes, given
        positionally in ``list_arguments`` order or by name; ``(None, None, None)`` (with a
        warning) when some shape cannot be decided."""
        graph, shapes = self._shapes(args, kwargs)
        result = _split(graph, shapes)
        if all(shape_is_known(s) for part in result for s in part):
            return result
        unknown = [f'{graph.nodes[i].name}: {shapes[graph.node_row_ptr[i]]}'
                   for i in graph.arg_nodes if not shape_is_known(shapes[graph.node_row_ptr[i]])]
        warnings.warn('Cannot decide shape for the following arguments (0s in shape means '
                      'unknown dimensions). Consider providing them as input:\n\t'
                      + '\n\t'.join(unknown[:10]), stacklevel=2)
        return None, None, None

    def infer_shape_partial(self, *args, **kwargs):
        """Like ``infer_shape``, with None (or 0 dimensions) where a shape is not known."""
        return _split(*self._shapes(args, kwargs))

    def _shapes(self, args, kwargs):
        graph = self.to_graph()
        for key, value in list(enumerate(args)) + list(kwargs.items()):
            if value is not None and not isinstance(value, (tuple, list)):
                raise TypeError(f'Arguments need to be shapes (tuple), but argument {key!r} is '
                                f'{type(value).__name__}')
        known = _known_by_name(graph, args, kwargs, 'infer_shape')
        return graph, infer_shapes(graph, {k: normalize_shape(v) for k, v in known.items()})

    def infer_type(self, *args, **kwargs):
        """(argument dtypes, output dtypes, auxiliary dtypes) as NumPy types, from some known
        dtypes; ``(None, None, None)`` (with a warning) when some dtype cannot be decided."""
        graph, dtypes = self._types(args, kwargs)
        result = _split(graph, dtypes)
        if all(d is not None for part in result for d in part):
            return tuple([d.type for d in part] for part in result)
        unknown = [graph.nodes[i].name for i in graph.arg_nodes
                   if dtypes[graph.node_row_ptr[i]] is None]
        warnings.warn('Cannot decide type for the following arguments. Consider providing them '
                      'as input:\n\t' + '\n\t'.join(unknown[:10]), stacklevel=2)
        return None, None, None

    def infer_type_partial(self, *args, **kwargs):
        """Like ``infer_type``, with None where a dtype is not known."""
        return tuple([None if d is None else d.type for d in part]
                     for part in _split(*self._types(args, kwargs)))

    def _types(self, args, kwargs):
        graph = self.to_graph()
        known = _known_by_name(graph, args, kwargs, 'infer_type')
        return graph, infer_types(graph, {k: None if v is None else dtype_of(v)
                                          for k, v in known.items()})

    # ------------------------------------------------------------------------------------------
    # Serialization

    def tojson(self) -> str:
        """MXNet 1.x's JSON form of the graph."""
        return json_io.dumps(self.to_graph())

    def save(self, fname, remove_amp_cast=True):
        """Write ``tojson()`` to `fname` (MXNet's ``-symbol.json`` files)."""
        if not isinstance(fname, str):
            raise TypeError(f'fname {fname!r}: expected a file name (str)')
        with open(fname, 'w', encoding='utf-8') as stream:
            stream.write(self.tojson())

    def __getstate__(self):
        return {'handle': self.tojson()}

    def __setstate__(self, state):
        self._heads = load_json(state['handle'])._heads
        self._graph = None

    # ------------------------------------------------------------------------------------------
    # Arithmetic (the operators mx.nd uses: broadcast_* between symbols, *_scalar with numbers)

    def __add__(self, other):
        return _binary(self, other, 'broadcast_add', '_PlusScalar')

    __radd__ = __add__

    def __sub__(self, other):
        return _binary(self, other, 'broadcast_sub', '_MinusScalar')

    def __rsub__(self, other):
        return _binary(self, other, None, '_RMinusScalar')

    def __mul__(self, other):
        return _binary(self, other, 'broadcast_mul', '_MulScalar')

    __rmul__ = __mul__

    def __truediv__(self, other):
        return _binary(self, other, 'broadcast_div', '_DivScalar')

    def __rtruediv__(self, other):
        return _binary(self, other, None, '_RDivScalar')

    def __mod__(self, other):
        return _binary(self, other, 'broadcast_mod', '_ModScalar')

    def __rmod__(self, other):
        return _binary(self, other, None, '_RModScalar')

    def __pow__(self, other):
        return _binary(self, other, 'broadcast_power', '_PowerScalar')

    def __rpow__(self, other):
        return _binary(self, other, None, '_RPowerScalar')

    def __neg__(self):
        return create(registry.get('negative'), 'negative', [self])

    def __abs__(self):
        return create(registry.get('abs'), 'abs', [self])

    def __eq__(self, other):
        return _binary(self, other, 'broadcast_equal', '_equal_scalar')

    def __ne__(self, other):
        return _binary(self, other, 'broadcast_not_equal', '_not_equal_scalar')

    def __gt__(self, other):
        return _binary(self, other, 'broadcast_greater', '_greater_scalar')

    def __ge__(self, other):
        return _binary(self, other, 'broadcast_greater_equal', '_greater_equal_scalar')

    def __lt__(self, other):
        return _binary(self, other, 'broadcast_lesser', '_lesser_scalar')

    def __le__(self, other):
        return _binary(self, other, 'broadcast_lesser_equal', '_lesser_equal_scalar')

    # ------------------------------------------------------------------------------------------
    # Operator shortcuts that need more than ``mx.sym.<op>(self, ...)``

    def reshape(self, *shape, **kwargs) -> 'Symbol':
        """``Reshape``; the shape may be given as ints, a tuple or ``shape=``."""
        if shape and all(isinstance(d, (int, np.integer)) for d in shape):
            shape = (tuple(shape),)
        return _namespace.reshape(self, *shape, **kwargs)

    def astype(self, dtype, **kwargs) -> 'Symbol':
        return _namespace.cast(self, dtype=dtype, **kwargs)


# mx.sym (the ember.symbol package, which generates a function per operator): the package
# hands itself over as it loads (bind_namespace), since it imports this module
_namespace = None


def bind_namespace(namespace) -> None:
    """Makes `namespace` (the ember.symbol package) the one operator methods call into."""
    global _namespace
    _namespace = namespace


# Operator methods: ``x.sum(axis=1)`` is ``mx.sym.sum(x, axis=1)``, found at call time.
FLUENT_METHODS = (
    'sum', 'mean', 'max', 'min', 'prod', 'norm', 'argmax', 'argmin', 'nansum', 'nanprod',
    'sign', 'sqrt', 'rsqrt', 'cbrt', 'rcbrt', 'square', 'reciprocal', 'exp', 'expm1', 'log',
    'log2', 'log10', 'log1p', 'floor', 'ceil', 'round', 'rint', 'trunc', 'fix', 'abs',
    'sin', 'cos', 'tan', 'arcsin', 'arccos', 'arctan', 'sinh', 'cosh', 'tanh', 'arcsinh',
    'arccosh', 'arctanh', 'degrees', 'radians', 'relu', 'sigmoid', 'softmax', 'log_softmax',
    'softmin', 'flatten', 'expand_dims', 'squeeze', 'transpose', 'swapaxes', 'flip', 'tile',
    'repeat', 'pad', 'split', 'slice', 'slice_axis', 'take', 'pick', 'one_hot', 'clip',
    'broadcast_to', 'broadcast_like', 'broadcast_axes', 'zeros_like', 'ones_like',
    'reshape_like', 'topk', 'sort', 'argsort', 'diag', 'dot', 'batch_dot',
)


def _fluent(name):
    def method(self, *args, **kwargs):
        return getattr(_namespace, name)(self, *args, **kwargs)
    method.__name__ = name
    method.__qualname__ = f'Symbol.{name}'
    method.__doc__ = f'``mx.sym.{name}(self, ...)``.'
    return method


for _name in FLUENT_METHODS:
    setattr(Symbol, _name, _fluent(_name))


# ----------------------------------------------------------------------------------------------
# Building symbols

def create(op, hint, inputs=(), named=None, params=None, name=None, attr=None) -> Symbol:
    """A symbol of one call of `op`: `inputs` positional symbols, `named` symbols by input name,
    `params` the parameters (and user attributes such as ``__lr_mult__``). Missing inputs
    become variables ``<name>_<input>``; unnamed calls are named by the NameManager after
    `hint`."""
    params = dict(params or {})
    user = {k: params.pop(k) for k in list(params)
            if k in HIDDEN_KEYS or (k.startswith('__') and k.endswith('__'))}
    user.update(AttrScope.current.get(attr))
    attrs = op.parse_attrs(params)
    node_name = NameManager.current.get(name, hint)
    text = attr_text_of(op, params, user)
    entries = _bind_inputs(op, node_name, op.input_names(attrs), list(inputs), dict(named or {}),
                           text)
    node = SymbolNode(op, node_name, attrs, entries, text)
    return Symbol([(node, i) for i in range(op.num_visible_outputs(attrs))])


def _bind_inputs(op, node_name, names, inputs, named, text):
    if len(inputs) > len(names):
        raise TypeError(f'{op.name}: takes {len(names)} inputs ({", ".join(names)}), got '
                        f'{len(inputs)}')
    unknown = sorted(set(named) - set(names))
    if unknown:
        raise TypeError(f'{op.name}: unknown inputs {unknown}; inputs are {", ".join(names)}')
    entries = []
    for position, input_name in enumerate(names):
        value = inputs[position] if position < len(inputs) else named.get(input_name)
        if position < len(inputs) and input_name in named:
            raise TypeError(f'{op.name}: got two values for input {input_name!r}')
        if value is None:
            # As MXNet does, the new variable copies the operator's attributes (lr_mult...).
            entries.append((SymbolNode(None, f'{node_name}_{input_name}', attr_text=dict(text)),
                            0))
        else:
            entries.append(_one_entry(value, input_name, op.name))
    return entries


def _one_entry(value, what, op_name='compose'):
    if not isinstance(value, Symbol):
        raise TypeError(f'{op_name}: input {what!r} must be a Symbol, got '
                        f'{type(value).__name__}')
    if len(value._heads) != 1:
        raise ValueError(f'{op_name}: input {what!r} is a group of {len(value._heads)} outputs '
                         f'({value.list_outputs()}); pass one of them (sym[i])')
    return value._heads[0]


def _binary(symbol, other, symbol_op, scalar_op):
    if isinstance(other, Symbol):
        if symbol_op is None:
            return NotImplemented
        return create(registry.get(symbol_op), symbol_op.lower(), [symbol, other])
    if isinstance(other, numbers.Number) and not isinstance(other, complex):
        return create(registry.get(scalar_op), scalar_op.lower(), [symbol], params={
            'scalar': other})
    return NotImplemented


def var(name, attr=None, shape=None, lr_mult=None, wd_mult=None, dtype=None, init=None,
        stype=None, **kwargs) -> Symbol:
    """A variable: an input, a parameter or an auxiliary state.

    >>> from ember import symbol as sym
    >>> w = sym.var('w', shape=(16, 0), dtype='float16', init='zeros')
    >>> sorted(w.list_attr().items())
    [('__dtype__', '2'), ('__init__', 'zeros'), ('__shape__', '(16, 0)')]
    """
    if not isinstance(name, str):
        raise TypeError(f'Expect a string for variable `name`, got {type(name).__name__}')
    text = AttrScope.current.get(attr)
    if shape is not None:
        text['__shape__'] = str(shape)
    if lr_mult is not None:
        text['__lr_mult__'] = str(lr_mult)
    if wd_mult is not None:
        text['__wd_mult__'] = str(wd_mult)
    if dtype is not None:
        text['__dtype__'] = str(_type_flag(dtype))
    if init is not None:
        text['__init__'] = init if isinstance(init, str) else init.dumps()
    if stype is not None:
        text['__storage_type__'] = str(_storage_type(stype))
    for key, value in kwargs.items():
        if not (key.startswith('__') and key.endswith('__')):
            raise ValueError(f'Attribute name={key} is not supported. Additional attributes '
                             f'must start and end with double underscores, e.g, __yourattr__')
        text[key] = str(value)
    symbol = Symbol([(SymbolNode(None, name), 0)])
    symbol._set_attr(**text)
    return symbol


Variable = var


def _type_flag(dtype):
    name = dtype_of(dtype).name
    if name not in FLAG_OF_TYPE:
        raise TypeError(f'dtype {name}: MXNet graphs hold {", ".join(FLAG_OF_TYPE)}')
    return FLAG_OF_TYPE[name]


def _storage_type(stype):
    if stype not in _STORAGE_TYPES:
        raise ValueError(f'stype {stype!r}: expected one of {", ".join(_STORAGE_TYPES)}')
    return _STORAGE_TYPES[stype]


def Group(symbols, create_fn=None) -> Symbol:  # noqa: N802 (MXNet's name)
    """One symbol with the outputs of all `symbols`, in order, made by `create_fn` (a Symbol
    class taking the outputs; Symbol when None).

    >>> from ember import symbol as sym
    >>> sym.Group([sym.var('a'), sym.relu(sym.var('b'), name='r')]).list_outputs()
    ['a', 'r_output']
    """
    symbols = list(symbols)
    if not symbols or not all(isinstance(s, Symbol) for s in symbols):
        raise TypeError('Expected a list of symbols as input')
    return (create_fn or Symbol)([head for s in symbols for head in s._heads])


def load_json(json_str) -> Symbol:
    """The symbol of MXNet 1.x's JSON text (``tojson()``, ``-symbol.json`` files)."""
    if not isinstance(json_str, str):
        raise TypeError(f'load_json: expected JSON text (str), got {type(json_str).__name__}')
    return Symbol.from_graph(json_io.loads(json_str))


fromjson = load_json


def load(fname) -> Symbol:
    """The symbol saved in file `fname` (``Symbol.save``, MXNet's ``-symbol.json``)."""
    if not isinstance(fname, str):
        raise TypeError(f'fname {fname!r}: expected a file name (str)')
    with open(fname, encoding='utf-8') as stream:
        return load_json(stream.read())


def node_symbols(graph: Graph) -> list:
    """Per node of `graph`, a symbol of all its outputs (hidden ones included); the symbols
    share one set of new nodes, so the gradient pass can build on any entry."""
    nodes = _symbol_nodes(graph)
    return [Symbol([(node, i) for i in range(node.num_outputs)]) for node in nodes]


def _symbol_nodes(graph):
    nodes = []
    for node in graph.nodes:
        inputs = [(nodes[e.node], e.index) for e in node.inputs]
        nodes.append(SymbolNode(node.op, node.name, node.attrs, inputs, dict(node.attr_text)))
    return nodes


# ----------------------------------------------------------------------------------------------
# Helpers of composition and inference

def _positional_map(nodes, graph, args):
    """Positional symbols replace the arguments in order (`nodes` in `graph`'s order)."""
    arguments = [nodes[i] for i in graph.arg_nodes]
    if len(args) > len(arguments):
        raise TypeError(f'compose: got {len(args)} positional symbols, but there are only '
                        f'{len(arguments)} arguments: {[v.name for v in arguments]}')
    return {id(v): _one_entry(s, v.name) for v, s in zip(arguments, args)}


def _keyword_map(variables, kwargs):
    replace = {id(v): _one_entry(kwargs[v.name], v.name) for v in variables if v.name in kwargs}
    missing = sorted(set(kwargs) - {v.name for v in variables})
    if missing:
        raise EmberError(f'compose: keyword arguments {missing} match no variable; variables: '
                         f'{[v.name for v in variables]}')
    return replace


def _substitute(heads, replace):
    """`heads` with variables replaced (``replace``: id(variable) -> entry); nodes above a
    replaced variable are copied, the others shared."""
    copies = {}

    def new_entry(source, index):
        if id(source) in replace:
            return replace[id(source)]
        return copies.get(id(source), source), index

    for node in topo_order([n for n, _ in heads], _inputs_of):
        if node.op is None:
            continue
        inputs = [new_entry(s, i) for s, i in node.inputs]
        if any(new[0] is not old[0] or new[1] != old[1] for new, old in zip(inputs, node.inputs)):
            copies[id(node)] = SymbolNode(node.op, node.name, node.attrs, inputs,
                                          dict(node.attr_text))
    return tuple(new_entry(n, i) for n, i in heads)


def _known_by_name(graph, args, kwargs, what):
    if args and kwargs:
        raise ValueError(f'{what}: give known values either positionally or by name, not both')
    if args:
        names = [graph.nodes[i].name for i in graph.arg_nodes]
        if len(args) > len(names):
            raise ValueError(f'{what}: got {len(args)} positional values, but there are '
                             f'{len(names)} arguments: {names}')
        return {name: value for name, value in zip(names, args) if value is not None}
    inputs = [graph.nodes[i].name for i in graph.input_nodes]
    for key in kwargs:
        if key not in inputs:
            raise EmberError(f'{what}: keyword argument name {key!r} not found; candidate '
                             f'arguments: {inputs}')
    return {k: v for k, v in kwargs.items() if v is not None}


def _split(graph, values):
    """Per-entry values as (argument, output, auxiliary) lists."""
    ptr = graph.node_row_ptr
    return ([values[ptr[i]] for i in graph.arg_nodes],
            [values[graph.entry_id(e)] for e in graph.outputs],
            [values[ptr[i]] for i in graph.aux_nodes])
