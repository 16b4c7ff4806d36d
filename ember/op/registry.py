"""The operator registry: one declaration per operator, read by every layer above.

An operator is declared once with its kernel, shape and type inference, gradient, in-place pairs
and the resources it asks for. ``mx.nd`` and ``mx.sym`` are generated from these declarations and
every graph pass reads them.

Conventions
-----------
kernel(attrs, ins, outs, ctx)
    ``ins`` and ``outs`` are raw backend arrays (NumPy or CuPy); the kernel writes its results
    into ``outs`` (never rebinds them) and returns nothing. ``ctx`` is a :class:`KernelContext`.
infer_shape(attrs, in_shapes) -> (in_shapes, out_shapes)
    Shapes are tuples, ``None`` where unknown. Inference may fill unknown input shapes (the
    weight of FullyConnected from ``num_hidden``) and raises :class:`ShapeError` on a mismatch.
infer_type(attrs, in_dtypes) -> (in_dtypes, out_dtypes)
    NumPy dtypes, ``None`` where unknown.
gradient(F, attrs, inputs, outputs, out_grads) -> list
    Written with the operators of ``F`` (``mx.nd`` or ``mx.sym``), so the same rule serves
    autograd, higher-order gradients and the graph's gradient pass. One entry per input,
    ``None`` where an input gets no gradient.

Settings captured at the call
-----------------------------
A kernel may run later on an engine worker, after the configuration of its call has changed
(a ``config.override`` block that ended), so it reads no configuration itself. Whoever builds
the :class:`KernelContext` fills these fields from the configuration at the call: the
imperative path per operator call, the graph executor per run of a program.

``ctx.safe_accumulation``
    ``MXNET_SAFE_ACCUMULATION``: sums accumulate wider; pass it to
    :func:`ember.op.accumulate.accumulation_dtype`.
``ctx.deterministic``
    ``MXNET_ENFORCE_DETERMINISM``: use only bit-reproducible algorithms.

Filled by the graph executor only (the imperative path leaves them empty):

``ctx.unused_outputs``
    Indices of outputs that no operator reads and that are not outputs of the graph (MXNet's
    ``kNullOp`` request): a kernel may skip computing them, e.g. the data gradient of a
    network's first convolution.
``ctx.input_vars`` / ``ctx.input_version(i)``
    The engine variables of inputs that are the graph's variables (parameters, folded
    weights), whose version tells a kernel whether the input changed since it last saw it.
``ctx.memo``
    A dictionary the kernel may fill: the executor hands a node the same context, and the
    same arrays, on every call of its program, so a kernel may keep there what it worked out
    for those arrays (a convolution its oneDNN primitive and arguments). It must check that
    the arrays and whatever decided the work are still the same before using it.

A context built without them (a test calling a kernel directly) takes the configuration at
construction.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ember import config
from ember.base import EmberError, dtype_of

__all__ = ['Param', 'OpDef', 'KernelContext', 'register', 'get', 'all_ops', 'ShapeError',
           'REQUIRED', 'p_int', 'p_float', 'p_bool', 'p_str', 'p_enum', 'p_shape', 'p_dtype',
           'p_optional', 'p_axes', 'same_shape', 'same_type', 'elemwise_shape', 'like_input',
           'variadic_names', 'zero_gradient', 'NUM_ARGS']

REQUIRED = object()


class ShapeError(EmberError, ValueError):
    """Shapes or types of an operator's inputs do not fit together."""


# ----------------------------------------------------------------------------------------------
# Attribute converters: each takes a Python value or MXNet's string form (from JSON graphs).

def _literal(value):
    if isinstance(value, str):
        text = value.strip()
        if text in ('None', ''):
            return None
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    return value


def p_int(value):
    value = _literal(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ValueError('an integer')
    return int(value)


def p_float(value):
    value = _literal(value)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ValueError('a number')
    return float(value)


def p_bool(value):
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ('true', '1'):
            return True
        if lowered in ('false', '0'):
            return False
        raise ValueError('True or False')
    if isinstance(value, (bool, int, np.bool_, np.integer)):
        return bool(value)
    raise ValueError('True or False')


def p_str(value):
    if not isinstance(value, str):
        raise ValueError('a string')
    return value


def p_enum(*choices):
    def convert(value):
        if value not in choices:
            raise ValueError('one of ' + ', '.join(repr(c) for c in choices))
        return value
    convert.choices = choices
    return convert


def p_shape(value):
    """A tuple of ints from an int, a sequence, or MXNet's '(3, 3)' / '[3,3]' text."""
    value = _literal(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),)
    if isinstance(value, (tuple, list)):
        return tuple(p_int(v) for v in value)
    raise ValueError('a shape such as (3, 3)')


def p_axes(value):
    """None, an int, or a tuple of ints (axis arguments of reductions)."""
    value = _literal(value)
    if value is None or value == ():
        return None if value is None else ()
    return p_shape(value)


def p_dtype(value):
    value = _literal(value) if isinstance(value, str) and value in ('None', '') else value
    if value is None:
        return None
    try:
        return dtype_of(value)
    except TypeError:
        raise ValueError('a dtype such as float32') from None


def p_optional(convert):
    def optional(value):
        return None if _literal(value) is None else convert(value)
    optional.choices = getattr(convert, 'choices', None)
    optional.accepts_none = True
    return optional


@dataclass(frozen=True)
class Param:
    name: str
    convert: Callable[[Any], Any]
    default: Any = REQUIRED
    doc: str = ''


# The `num_args` of a variadic operator.
NUM_ARGS = Param('num_args', p_int, REQUIRED, 'number of inputs')


# ----------------------------------------------------------------------------------------------
# Inference helpers for the common cases.

def same_shape(attrs, in_shapes):
    """Every input and the one output share the first known shape."""
    known = [s for s in in_shapes if s is not None]
    if not known:
        return list(in_shapes), [None]
    shape = known[0]
    for other in known[1:]:
        if other != shape:
            raise ShapeError(f'inputs must have the same shape, got {shape} and {other}')
    return [shape] * len(in_shapes), [shape]


def same_type(attrs, in_dtypes):
    """Every input and every output share the first known dtype."""
    known = [d for d in in_dtypes if d is not None]
    dtype = known[0] if known else None
    for other in known[1:]:
        if other != dtype:
            raise ShapeError(f'inputs must have the same dtype, got {dtype} and {other}')
    return [dtype] * len(in_dtypes), [dtype]


def like_input(index):
    """An infer_shape or infer_type whose one output takes input `index`'s shape or dtype."""
    return lambda attrs, values: (list(values), [values[index]])


def variadic_names(attrs):
    """The inputs of a variadic operator: arg0, arg1, ... (``num_args`` of them)."""
    return [f'arg{i}' for i in range(attrs['num_args'])]


def zero_gradient(F, attrs, inputs, outputs, out_grads):
    """The gradient of an output that does not change with its inputs (a shape, an index)."""
    return [F.zeros_like(x) for x in inputs]


def elemwise_shape(fn):
    """Wrap fn(attrs, *shapes) -> out_shape (all inputs known) as an infer_shape."""
    def infer(attrs, in_shapes):
        if any(s is None for s in in_shapes):
            return list(in_shapes), [None]
        return list(in_shapes), [tuple(fn(attrs, *in_shapes))]
    return infer


# ----------------------------------------------------------------------------------------------

def _config_at_construction(name):
    return lambda: config.get(name)


@dataclass
class KernelContext:
    """What a kernel may use beyond its arrays: device, mode, requested resources and the
    settings of its call (see the module docstring).

    >>> from ember import config
    >>> with config.override(MXNET_SAFE_ACCUMULATION=True):
    ...     ctx = KernelContext(None)
    >>> ctx.safe_accumulation, KernelContext(None, safe_accumulation=False).safe_accumulation
    (True, False)
    """
    device: Any
    is_train: bool = False
    xp: Any = np                      # the array module of the device (numpy or cupy)
    temp: Any = None                  # resource.TempSpace when the operator asks for 'temp'
    random: Any = None                # resource.RandomStream when it asks for 'random'
    # what a kernel keeps between calls of one graph node: the executor keeps each node's
    # context for its program's life and calls the node on the same arrays every time
    # (``ctx.memo`` below); elsewhere each call has a fresh, empty one
    memo: dict = field(default_factory=dict)
    # engine variables of inputs whose contents stay until written (a graph's variables: the
    # executor fills it), None elsewhere; see input_version
    input_vars: tuple = ()
    # indices of outputs nobody reads (MXNet's null request): a kernel may leave them unwritten
    unused_outputs: frozenset = frozenset()
    # bytes of the graph's variables (parameters, auxiliary states, inputs) when the executor
    # runs the kernel, 0 elsewhere: the size of the model, for kernels that keep copies derived
    # from its weights
    variable_bytes: int = 0
    safe_accumulation: bool = field(
        default_factory=_config_at_construction('MXNET_SAFE_ACCUMULATION'))
    deterministic: bool = field(
        default_factory=_config_at_construction('MXNET_ENFORCE_DETERMINISM'))

    def input_version(self, index: int):
        """``(engine variable, version)`` of input `index` when its variable is known, else
        None. The pair changes whenever the input is written, so a kernel may keep work
        derived from the input (weights reordered for a library) as long as the pair it was
        made from stays the same.

        >>> from ember import engine
        >>> var = engine.get().new_var()
        >>> ctx = KernelContext(None, input_vars=(None, var))
        >>> ctx.input_version(0), ctx.input_version(1) == (var, 0)
        (None, True)
        """
        var = self.input_vars[index] if index < len(self.input_vars) else None
        return None if var is None else (var, var.version)


@dataclass(frozen=True)
class OpDef:
    name: str
    kernel: Callable
    infer_shape: Callable = same_shape
    infer_type: Callable = same_type
    inputs: Any = ('data',)           # names, or fn(attrs) -> names for variadic operators
    outputs: Any = ('output',)        # names, or fn(attrs) -> names
    visible_outputs: Any = None       # int or fn(attrs) -> int; None: all outputs
    params: tuple = ()
    gradient: Callable | None = None
    inplace: Any = ()                 # (input, output) index pairs that may share memory,
                                      # or fn(attrs) -> pairs for variadic operators
    resources: tuple = ()             # 'temp', 'random', 'dropout' (a GPU's dropout states)
    mutate: Any = ()                  # indices of inputs the kernel updates (auxiliary states),
                                      # or fn(attrs) -> indices
    aux: tuple = ()                   # names of inputs that are auxiliary states
    random: bool = False              # draws random numbers: never merged by CSE
    elemwise: bool = False            # element-wise: candidate for fusion
    # works element by element on arrays of equal size (inputs and outputs), so that it may
    # run on the k-th of n slices of each array in turn (bf16 storage widens a large call a
    # slice at a time); every array must have a partner of its size (no scalar tensors)
    sliceable: bool = False
    doc: str = ''
    aliases: tuple = ()
    variadic: str | None = None       # the param that counts the inputs (e.g. 'num_args')
    open_attrs: bool = False          # keep unknown keyword arguments as strings (Custom)
    # fn(attrs, in_shapes, out_shapes) -> in_shapes: what known outputs tell of the inputs
    # (the batch of FullyConnected's data from its output), as MXNet's backward inference
    infer_shape_from_outputs: Callable | None = None

    def parse_attrs(self, kwargs: dict) -> dict:
        """Canonical attribute values from Python values or MXNet's strings."""
        attrs = {}
        names = {p.name for p in self.params}
        for key in kwargs:
            if self.open_attrs and key not in names:
                attrs[key] = kwargs[key] if isinstance(kwargs[key], str) else str(kwargs[key])
            elif key not in names and not key.startswith('__'):
                raise TypeError(f'{self.name}: unknown argument {key!r}; it accepts '
                                f'{", ".join(sorted(names)) or "no arguments"}')
        for param in self.params:
            value = kwargs.get(param.name)
            if value is None and param.name in kwargs and getattr(param.convert,
                                                                   'accepts_none', False):
                attrs[param.name] = None      # an explicit None means "no value" (axis=None)
            elif value is not None:
                attrs[param.name] = self._convert(param, value)
            elif param.default is REQUIRED:
                raise TypeError(f'{self.name}: missing required argument {param.name!r}')
            else:
                attrs[param.name] = param.default
        return attrs

    def _convert(self, param, value):
        try:
            return param.convert(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(f'{self.name}: {param.name}={value!r}: expected {exc}') from None

    def input_names(self, attrs) -> list:
        return list(self.inputs(attrs) if callable(self.inputs) else self.inputs)

    def output_names(self, attrs) -> list:
        return list(self.outputs(attrs) if callable(self.outputs) else self.outputs)

    def mutate_indices(self, attrs) -> tuple:
        return tuple(self.mutate(attrs) if callable(self.mutate) else self.mutate)

    def inplace_pairs(self, attrs) -> tuple:
        return tuple(self.inplace(attrs) if callable(self.inplace) else self.inplace)

    def num_outputs(self, attrs) -> int:
        return len(self.output_names(attrs))

    def num_visible_outputs(self, attrs) -> int:
        if self.visible_outputs is None:
            return self.num_outputs(attrs)
        if callable(self.visible_outputs):
            return self.visible_outputs(attrs)
        return self.visible_outputs

    @staticmethod
    def attrs_key(attrs: dict) -> tuple:
        """A hashable form of parsed attributes (for CSE and caches)."""
        return tuple(sorted((k, str(v)) for k, v in attrs.items()))

    @staticmethod
    def attrs_to_strings(attrs: dict) -> dict:
        """MXNet's JSON form: every attribute value as a string."""
        return {k: _to_string(v) for k, v in attrs.items() if v is not None}


def _to_string(value):
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, bool):
        return str(value)
    return str(value)


_OPS: dict[str, OpDef] = {}


def register(name: str, kernel: Callable, **fields) -> OpDef:
    """Declare an operator. Names and aliases must be new."""
    op = OpDef(name=name, kernel=kernel, **fields)
    if not callable(op.inputs):
        clash = set(op.inputs) & {p.name for p in op.params}
        if clash:
            raise RuntimeError(f'operator {name!r}: {sorted(clash)} is both an input and a '
                               f'parameter; mx.nd needs distinct names')
    for key in (name,) + tuple(op.aliases):
        if key in _OPS:
            raise RuntimeError(f'operator {key!r} is registered twice')
        _OPS[key] = op
    return op


def get(name: str) -> OpDef:
    try:
        return _OPS[name]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(name, list(_OPS), n=1)
        hint = f'; did you mean {close[0]!r}?' if close else ''
        raise AttributeError(f'no operator named {name!r}{hint}') from None


def all_ops() -> dict[str, OpDef]:
    """Every name (aliases included) mapped to its declaration."""
    return dict(_OPS)
