"""Automatic differentiation over the operator registry's gradients (MXNet's ``mx.autograd``).

While recording, every operator call on arrays that need gradients adds a node to a tape: the
operator's gradient rule, its inputs and its outputs. ``backward`` walks the nodes in reverse and
applies each rule with ``F = mx.nd``; under ``create_graph`` the rules are themselves recorded, so
gradients of gradients work wherever the rules are built from differentiable operators.

>>> import ember as mx
>>> x = mx.nd.array([1.0, 2.0, 3.0])
>>> x.attach_grad()
>>> with mx.autograd.record():
...     y = (x * x).sum()
>>> y.backward()
>>> x.grad.asnumpy().tolist()
[2.0, 4.0, 6.0]
"""
from __future__ import annotations

import threading
import weakref

from ember import ndarray as nd
from ember.base import EmberError, string_types  # noqa: F401  (a name of mx.autograd)
from ember.ndarray import NDArray  # noqa: F401
from ember.ndarray import ndarray as _ndmod

__all__ = ['record', 'pause', 'train_mode', 'predict_mode', 'is_recording', 'is_training',
           'set_recording', 'set_training', 'mark_variables', 'backward', 'grad', 'Function',
           'NDArray', 'string_types', 'get_symbol']


class _State(threading.local):
    recording = False
    training = False


_state = _State()
_ndmod._ag_state = _state


def is_recording() -> bool:
    return _state.recording


def is_training() -> bool:
    return _state.training


def set_recording(is_recording: bool) -> bool:
    """Turn recording on or off; returns the previous state."""
    previous = _state.recording
    _state.recording = bool(is_recording)
    return previous


def set_training(train_mode: bool) -> bool:
    """Choose training or prediction behaviour (Dropout, BatchNorm); returns the previous state."""
    previous = _state.training
    _state.training = bool(train_mode)
    return previous


class _Scope:
    def __init__(self, recording, training):
        self._recording, self._training = recording, training
        self._saved = []

    def __enter__(self):
        saved = (_state.recording, _state.training)
        self._saved.append(saved)
        if self._recording is not None:
            _state.recording = self._recording
        if self._training is not None:
            _state.training = self._training
        return self

    def __exit__(self, *exc):
        _state.recording, _state.training = self._saved.pop()
        return False


def record(train_mode: bool = True) -> _Scope:
    """Record operators for differentiation inside the block (training behaviour by default)."""
    return _Scope(True, train_mode)


def pause(train_mode: bool = False) -> _Scope:
    """Stop recording inside the block."""
    return _Scope(False, train_mode)


def train_mode() -> _Scope:
    return _Scope(None, True)


def predict_mode() -> _Scope:
    return _Scope(None, False)


# ----------------------------------------------------------------------------------------------
# The tape.

class _Node:
    """One recorded call: how to turn output gradients into input gradients."""
    __slots__ = ('grad_fn', 'inputs', 'outputs', 'name', 'op', 'attrs')

    def __init__(self, grad_fn, inputs, outputs, name, op=None, attrs=None):
        self.grad_fn = grad_fn
        self.inputs = inputs          # NDArrays (their _ag entries lead further back)
        self.outputs = outputs        # (shape, dtype, context, alias) per output
        self.name = name
        self.op = op                  # the registered operator (None: a Function, a CachedOp)
        self.attrs = attrs


def _needs_grad(array) -> bool:
    return array._ag is not None


def _record_op(op, attrs, inputs, outputs):
    """Hook called by the imperative path for every operator while recording."""
    if not any(_needs_grad(x) for x in inputs):
        return
    if op.gradient is None:
        raise EmberError(f'operator {op.name} has no gradient; wrap its inputs in '
                         f'autograd.pause() or stop_gradient if none is needed')
    saved_outputs = [out._alias() for out in outputs]

    def grad_fn(out_grads):
        return op.gradient(nd, attrs, list(inputs), saved_outputs, out_grads)
    _attach(grad_fn, inputs, outputs, op.name, saved_outputs, op=op, attrs=attrs)


# Gradients a grad_fn returned that still belong to it (a hybridized block's executor writes
# them again at its next backward): stored into .grad they are copied anyway, but
# autograd.grad copies them before handing them out. id -> array.
_lent = weakref.WeakValueDictionary()


def lend(arrays):
    """Mark gradients returned by a grad_fn as owned by it: ``grad()`` returns copies."""
    for array in arrays:
        if array is not None:
            _lent[id(array)] = array


def _own(array):
    return array.copy() if _lent.get(id(array)) is array else array


def _as_recorded(array):
    """`array` as the node sees it now: an alias keeping its current autograd entry, so that an
    operator writing into it later (``x[1] = 0``, ``x += y``) does not change where this
    node's gradient goes."""
    alias = array._alias()
    alias._ag = array._ag
    return alias


def _attach(grad_fn, inputs, outputs, name, saved_outputs=(), op=None, attrs=None):
    node = _Node(grad_fn, [_as_recorded(x) for x in inputs],
                 [(o.shape, o.dtype, o.context) for o in outputs], name, op, attrs)
    for index, out in enumerate(outputs):
        out._ag = (node, index)
    # Rules that use the forward output (exp, tanh) must see it as recorded, so that
    # create_graph differentiates through it; the node-output cycle is left to the collector.
    for out, saved in zip(outputs, saved_outputs):
        saved._ag = out._ag


_ndmod._record_hook = _record_op


class _Leaf:
    """The autograd entry of a variable: where its gradient goes."""
    __slots__ = ('array_ref', 'grad_req')

    def __init__(self, array, grad_req):
        import weakref
        self.array_ref = weakref.ref(array)
        self.grad_req = grad_req


_GRAD_REQS = ('write', 'add', 'null')


def mark_variables(variables, gradients, grad_reqs='write'):
    """Mark arrays as variables whose gradients are written into `gradients`."""
    if not isinstance(variables, (list, tuple)):
        variables, gradients = [variables], [gradients]
    if isinstance(grad_reqs, str):
        grad_reqs = [grad_reqs] * len(variables)
    for var, gradient, req in zip(variables, gradients, grad_reqs):
        if req not in _GRAD_REQS:
            raise ValueError(f"grad_req {req!r}: expected 'write', 'add' or 'null'")
        var._grad = gradient
        var._grad_req = req
        var._ag = None if req == 'null' else _Leaf(var, req)


def _attach_grad(array, grad_req='write', stype=None):
    """NDArray.attach_grad: allocate a zero gradient buffer of storage type `stype` (the
    array's own by default) and mark the array as a variable."""
    stype = array.stype if stype is None else stype
    mark_variables([array], [nd.sparse.zeros(stype, array.shape, ctx=array.context,
                                             dtype=array.dtype)], grad_req)


def _detach(array):
    """The same value, cut off from the recorded graph."""
    alias = array._alias()
    alias._ag = None
    return alias


_ndmod.NDArray.attach_grad = _attach_grad
_ndmod.NDArray.grad = property(lambda self: self._grad, doc='The gradient buffer, or None.')
_ndmod.NDArray.grad_req = property(lambda self: self._grad_req)
_ndmod.NDArray.detach = _detach


# ----------------------------------------------------------------------------------------------
# Backward.

def _topological(heads):
    """Nodes reachable from the heads, each after every node that consumes its outputs."""
    order, seen = [], set()
    stack = [(h._ag[0], False) for h in heads if isinstance(h._ag, tuple)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for x in node.inputs:
            if isinstance(x._ag, tuple) and id(x._ag[0]) not in seen:
                stack.append((x._ag[0], False))
    order.reverse()
    return order


def _accumulate(table, key, value):
    table[key] = value if key not in table else table[key] + value


def _run_backward(heads, head_grads, retain_graph, create_graph, train, storing=False):
    heads = list(heads)
    if head_grads is None:
        head_grads = [None] * len(heads)
    node_grads, leaf_grads, leaves = {}, {}, {}
    for head, hgrad in zip(heads, head_grads):
        if head._ag is None:
            raise EmberError('cannot differentiate with respect to a head that was not computed '
                             'under autograd.record() from arrays with attach_grad()')
        if hgrad is None:
            hgrad = nd.ones(head.shape, ctx=head.context, dtype=head.dtype)
        _route(head, hgrad, node_grads, leaf_grads, leaves)
    order = _topological(heads)
    scope = record(train) if create_graph else pause(train)
    previous = _targets.storing, _targets.once
    _targets.storing, _targets.once = storing, _used_once(heads, order) if storing else frozenset()
    try:
        with scope:
            for node in order:
                _backward_node(node, node_grads, leaf_grads, leaves)
                if not retain_graph:
                    node.inputs = []
    finally:
        _targets.storing, _targets.once = previous
    return leaf_grads, leaves


class _Targets(threading.local):
    """What the backward pass running on this thread does with the variables' gradients:
    whether it stores them into .grad (``backward``) or returns them (``grad``), and the
    variables whose single gradient comes from one place in the graph."""
    storing = False
    once = frozenset()


_targets = _Targets()


def _used_once(heads, order):
    """ids of the variable entries that are a head or a node's input exactly once."""
    uses = {}
    for x in [*heads, *(x for node in order for x in node.inputs)]:
        if isinstance(x._ag, _Leaf):
            uses[id(x._ag)] = uses.get(id(x._ag), 0) + 1
    return frozenset(key for key, count in uses.items() if count == 1)


def gradient_target(array) -> str:
    """How a grad_fn that runs during a backward pass may treat variable `array`'s .grad
    array when it would write `array`'s gradient there itself (a hybridized block's executor
    is bound to its parameters' .grad arrays):

    'direct': its gradient is that array's whole new value (``backward`` stores it there, with
        grad_req 'write', and no other part of the graph adds to it): write it and return
        ``array.grad`` itself, no copy is made;
    'copy': ``backward`` stores the sum of this and other gradients: return a copy;
    'keep': .grad must keep its value (``autograd.grad``, grad_req 'add', or not a
        variable): return the gradient elsewhere.
    """
    entry = array._ag
    if not _targets.storing or not isinstance(entry, _Leaf) or entry.grad_req != 'write':
        return 'keep'
    return 'direct' if id(entry) in _targets.once else 'copy'


def _route(array, gradient, node_grads, leaf_grads, leaves):
    entry = array._ag
    if isinstance(entry, tuple):
        _accumulate(node_grads, (id(entry[0]), entry[1]), gradient)
    elif isinstance(entry, _Leaf):
        leaves[id(entry)] = entry
        _accumulate(leaf_grads, id(entry), gradient)


def _backward_node(node, node_grads, leaf_grads, leaves):
    outs = [node_grads.pop((id(node), i), None) for i in range(len(node.outputs))]
    if all(g is None for g in outs):
        return
    if not node.inputs:
        raise EmberError(f'the graph through {node.name} was already freed by a backward pass; '
                         'pass retain_graph=True to backward more than once')
    outs = [g if g is not None else nd.zeros(shape, ctx=ctx, dtype=dtype)
            for g, (shape, dtype, ctx) in zip(outs, node.outputs)]
    in_grads = node.grad_fn(outs)
    for x, g in zip(node.inputs, in_grads):
        if g is not None and x._ag is not None:
            _route(x, g, node_grads, leaf_grads, leaves)


def backward(heads, head_grads=None, retain_graph=False, train_mode=True):
    """Compute gradients of `heads` and write them into the variables' `.grad` arrays."""
    if not isinstance(heads, (list, tuple)):
        heads = [heads]
        head_grads = None if head_grads is None else [head_grads]
    leaf_grads, leaves = _run_backward(heads, head_grads, retain_graph, False, train_mode,
                                       storing=True)
    for key, gradient in leaf_grads.items():
        _store(leaves[key], gradient)


def _store(leaf, gradient):
    array = leaf.array_ref()
    if array is None or array._grad is None or leaf.grad_req == 'null':
        return
    if leaf.grad_req == 'add':
        array._grad += gradient
    elif gradient is not array._grad:      # else a grad_fn wrote it there ('direct')
        if gradient.stype == 'default' and array._grad.stype == 'default':
            array._grad[:] = gradient
        else:       # into the buffer's own storage type: a row_sparse one takes the rows
            gradient.copyto(array._grad)
    array._grad._fresh_grad = True      # Trainer.step checks that backward reached it


def grad(heads, variables, head_grads=None, retain_graph=None, create_graph=False,
         train_mode=True):
    """Gradients of `heads` with respect to `variables`, returned instead of stored.

    With ``create_graph=True`` the returned gradients are recorded too and can be differentiated.
    """
    single = not isinstance(variables, (list, tuple))
    variables = [variables] if single else list(variables)
    if not isinstance(heads, (list, tuple)):
        heads = [heads]
        head_grads = None if head_grads is None else [head_grads]
    for var in variables:
        if not isinstance(var._ag, _Leaf):
            raise EmberError('autograd.grad: every variable needs attach_grad() (or '
                             'mark_variables) before recording')
    retain = create_graph if retain_graph is None else retain_graph
    leaf_grads, _ = _run_backward(heads, head_grads, retain, create_graph, train_mode)
    result = []
    for var in variables:
        gradient = leaf_grads.get(id(var._ag))
        if gradient is None:
            gradient = nd.zeros(var.shape, ctx=var.context, dtype=var.dtype)
        result.append(_own(gradient))
    return result[0] if single else result


def _ndarray_backward(self, out_grad=None, retain_graph=False, train_mode=True):
    backward([self], None if out_grad is None else [out_grad], retain_graph, train_mode)


_ndmod.NDArray.backward = _ndarray_backward


# ----------------------------------------------------------------------------------------------

class Function:
    """A user-defined differentiable operation, as MXNet's ``autograd.Function``.

    >>> import ember as mx
    >>> class Sigmoid(mx.autograd.Function):
    ...     def forward(self, x):
    ...         y = 1 / (1 + mx.nd.exp(-x))
    ...         self.save_for_backward(y)
    ...         return y
    ...     def backward(self, dy):
    ...         y, = self.saved_tensors
    ...         return dy * y * (1 - y)
    >>> x = mx.nd.array([0.0]); x.attach_grad()
    >>> with mx.autograd.record():
    ...     z = Sigmoid()(x)
    >>> z.backward(); float(x.grad.asscalar())
    0.25
    """

    def __init__(self):
        self.saved_tensors = ()

    def save_for_backward(self, *arrays):
        self.saved_tensors = arrays

    def forward(self, *inputs):
        raise NotImplementedError

    def backward(self, *output_grads):
        raise NotImplementedError

    def __call__(self, *inputs):
        with pause(is_training()):
            outputs = self.forward(*inputs)
        single = not isinstance(outputs, (list, tuple))
        out_list = [outputs] if single else list(outputs)
        if is_recording() and any(_needs_grad(x) for x in inputs):
            def grad_fn(out_grads):
                with pause(is_training()):
                    grads = self.backward(*out_grads)
                return [grads] if not isinstance(grads, (list, tuple)) else list(grads)
            _attach(grad_fn, inputs, out_list, type(self).__name__)
        return outputs


# ----------------------------------------------------------------------------------------------
# The recorded graph as a Symbol.

# Builds a Symbol from the steps of tape_of; the symbol layer installs it (it sits above).
_symbol_maker = None


def tape_of(x):
    """The recorded computation that produced `x`, in order: ``('var', name)`` for an array
    marked for gradients, ``('null', name)`` for another input, ``('op', name, op, attrs,
    inputs)`` for a recorded operator, `inputs` being (step, output index) pairs; and the
    (step, output index) of `x`."""
    steps, seen = [], {}
    head = _tape_entry(x, steps, seen)
    return steps, head


def _tape_entry(array, steps, seen):
    entry = array._ag
    if not isinstance(entry, tuple):
        key = id(array)
        if key not in seen:
            kind = 'var' if isinstance(entry, _Leaf) else 'null'
            seen[key] = len(steps)
            steps.append((kind, f'{kind}{sum(s[0] != "op" for s in steps)}'))
        return seen[key], 0
    node, index = entry
    if id(node) not in seen:
        if node.op is None:
            raise EmberError(f'get_symbol: the recorded graph holds {node.name}, which is not '
                             'an operator (an autograd.Function or a hybridized block)')
        inputs = [_tape_entry(a, steps, seen) for a in node.inputs]
        seen[id(node)] = len(steps)
        steps.append(('op', f'node_{sum(s[0] == "op" for s in steps)}', node.op, node.attrs,
                      inputs))
    return seen[id(node)], index


def get_symbol(x):
    """The recorded computation that produced `x`, as a Symbol (needs ``mx.sym``): recorded
    operators become nodes ``node_<k>``, arrays marked for gradients variables ``var<k>``, other
    inputs ``null<k>``, as MXNet names them.

    >>> import ember as mx
    >>> x = mx.nd.ones((2,)); x.attach_grad()
    >>> with record():
    ...     y = mx.nd.relu(x * 2)
    >>> get_symbol(y).list_arguments()
    ['var0']
    """
    if _symbol_maker is None:
        raise EmberError('get_symbol needs the symbol layer: import ember.symbol (mx.sym)')
    return _symbol_maker(*tape_of(x))
