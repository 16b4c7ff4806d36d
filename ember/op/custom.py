"""The Custom operator: operators written in Python with MXNet's ``mx.operator`` API.

``mx.operator.register(name)`` puts a ``CustomOpProp`` class in the table kept here. The
registry declarations ``Custom`` and ``_backward_Custom`` read the prop for their inputs
(arguments, then auxiliary states), outputs and shape and type inference, so graph passes treat
a custom operator like any other. Running the user's ``forward`` and ``backward`` needs
NDArrays, a higher layer: :mod:`ember.operator` installs the runner (``set_runner``) and gives
``mx.nd.Custom``, which runs the user's code on the calling thread.

The declarations take ``op_type`` only: the registry has no open attribute set yet, so keyword
arguments for the prop reach it through ``mx.nd.Custom`` alone. This module is imported by
:mod:`ember.operator`, not by the ``ember.op`` package, so that ``mx.nd`` is built without a
generated ``Custom`` and finds the one ``ember.operator`` gives.

>>> from ember.op import custom
>>> class Prop:
...     def list_arguments(self): return ['data']
...     def list_outputs(self): return ['output']
...     def list_auxiliary_states(self): return []
...     def infer_shape(self, in_shape): return in_shape, [in_shape[0]], []
>>> custom.register_prop('doc_identity', Prop)
>>> custom.infer_shapes(custom.make_prop('doc_identity', {}), [(2, 3)])
([(2, 3)], [(2, 3)], [])
"""
from __future__ import annotations

import difflib
import threading
import warnings

import numpy as np

from ember.base import EmberError, dtype_of
from ember.op.registry import REQUIRED, Param, ShapeError, p_str, register

__all__ = ['register_prop', 'prop_class', 'registered', 'make_prop', 'infer_shapes',
           'infer_types', 'set_runner']

_props: dict = {}
_lock = threading.Lock()
_runner = None      # set by ember.operator: forward(attrs, ins, outs, ctx), backward(...)


def register_prop(name: str, prop_class) -> None:
    """Make `prop_class` the CustomOpProp of op_type `name` (a new one replaces, with a
    warning, as in MXNet)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f'custom operator name {name!r}: expected a non-empty string')
    with _lock:
        if name in _props and _props[name] is not prop_class:
            warnings.warn(f'custom operator {name!r} is registered again: the new '
                          f'{prop_class.__name__} replaces {_props[name].__name__}',
                          stacklevel=3)
        _props[name] = prop_class


def prop_class(name: str):
    """The CustomOpProp class registered as `name`."""
    found = _props.get(name)
    if found is None:
        close = difflib.get_close_matches(str(name), list(_props), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else (
            '; register one with @mx.operator.register(name)')
        raise EmberError(f'no custom operator registered as op_type={name!r}{hint}')
    return found


def registered() -> list:
    """The op_type names registered so far."""
    return sorted(_props)


def make_prop(op_type: str, kwargs: dict):
    """A prop instance; keyword values are passed as strings, as MXNet does."""
    cls = prop_class(op_type)
    try:
        return cls(**{key: str(value) for key, value in kwargs.items()})
    except TypeError as exc:
        raise TypeError(f'Custom op_type={op_type!r}: {cls.__name__}({", ".join(kwargs)}) '
                        f'failed: {exc}') from None


def set_runner(runner) -> None:
    """Install what runs the user's code (``ember.operator`` does this on import)."""
    global _runner
    _runner = runner


# ----------------------------------------------------------------------------------------------
# Inference through the prop.

def _names(prop):
    return (list(prop.list_arguments()), list(prop.list_outputs()),
            list(prop.list_auxiliary_states()))


def _split(op_type, what, result, counts):
    """(in, out, aux) lists from a prop's 2- or 3-part answer, with their counts checked."""
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        raise ShapeError(f'Custom {op_type!r}: {what} must return 2 or 3 lists (inputs, '
                         f'outputs[, auxiliary states]), got {result!r}')
    parts = [list(part) for part in result] + ([[]] if len(result) == 2 else [])
    for part, count, kind in zip(parts, counts, ('input', 'output', 'auxiliary')):
        if len(part) != count:
            raise ShapeError(f'Custom {op_type!r}: {what} returned {len(part)} {kind} '
                             f'entries, expected {count}')
    return parts


def infer_shapes(prop, in_shapes, op_type=None):
    """(argument + aux shapes, output shapes, aux shapes) from ``prop.infer_shape``."""
    args, outs, aux = _names(prop)
    op_type = op_type or type(prop).__name__
    if len(in_shapes) != len(args) + len(aux):
        raise ShapeError(f'Custom {op_type!r}: got {len(in_shapes)} inputs, expected '
                         f'{len(args) + len(aux)} ({", ".join(args + aux)})')
    given = [list(s) for s in in_shapes[:len(args)]]
    result = _split(op_type, 'infer_shape', prop.infer_shape(given),
                    (len(args), len(outs), len(aux)))
    arg_shapes, out_shapes, aux_shapes = ([tuple(int(d) for d in s) for s in part]
                                          for part in result)
    return arg_shapes + aux_shapes, out_shapes, aux_shapes


def infer_types(prop, in_dtypes, op_type=None):
    """(argument + aux dtypes, output dtypes, aux dtypes) from ``prop.infer_type``."""
    args, outs, aux = _names(prop)
    given = [np.dtype(d).type for d in in_dtypes[:len(args)]]
    result = _split(op_type or type(prop).__name__, 'infer_type', prop.infer_type(given),
                    (len(args), len(outs), len(aux)))
    arg_types, out_types, aux_types = ([dtype_of(d) for d in part] for part in result)
    return arg_types + aux_types, out_types, aux_types


# ----------------------------------------------------------------------------------------------
# The registry declarations.

OP_TYPE = (Param('op_type', p_str, REQUIRED, 'the name given to mx.operator.register'),)


def _prop(attrs):
    return make_prop(attrs['op_type'], {k: v for k, v in attrs.items() if k != 'op_type'})


def _inputs(attrs):
    args, _, aux = _names(_prop(attrs))
    return args + aux


def _infer_shape(attrs, in_shapes):
    prop = _prop(attrs)
    if any(s is None for s in in_shapes):
        return list(in_shapes), [None] * len(prop.list_outputs())
    ins, outs, _ = infer_shapes(prop, in_shapes, attrs['op_type'])
    return ins, outs


def _infer_type(attrs, in_dtypes):
    prop = _prop(attrs)
    if not in_dtypes or in_dtypes[0] is None:
        return list(in_dtypes), [None] * len(prop.list_outputs())
    dtypes = [d if d is not None else in_dtypes[0] for d in in_dtypes]
    ins, outs, _ = infer_types(prop, dtypes, attrs['op_type'])
    return ins, outs


def _aux_indices(attrs):
    args, _, aux = _names(_prop(attrs))
    return tuple(range(len(args), len(args) + len(aux)))


def _gradient(F, attrs, inputs, outputs, out_grads):
    args, outs, aux = _names(_prop(attrs))
    n = len(args)
    grads = F._backward_Custom(*out_grads, *inputs[:n], *outputs, *inputs[n:], **attrs)
    grads = [grads] if n == 1 else list(grads)
    return grads + [None] * len(aux)


def _run(stage):
    def kernel(attrs, ins, outs, ctx):
        if _runner is None:
            raise EmberError(f'Custom {attrs["op_type"]!r}: import ember.operator '
                             '(mx.operator) to run custom operators')
        getattr(_runner, stage)(attrs, ins, outs, ctx)
    return kernel


def _backward_inputs(attrs):
    args, outs, aux = _names(_prop(attrs))
    return ([f'out_grad_{name}' for name in outs] + [f'in_data_{name}' for name in args]
            + [f'out_data_{name}' for name in outs] + [f'aux_{name}' for name in aux])


def _backward_shapes(attrs, values):
    args, outs, _ = _names(_prop(attrs))
    return list(values), list(values[len(outs):len(outs) + len(args)])


register('Custom', _run('forward'), inputs=_inputs,
         outputs=lambda attrs: _prop(attrs).list_outputs(), infer_shape=_infer_shape,
         infer_type=_infer_type, mutate=_aux_indices, params=OP_TYPE, gradient=_gradient,
         open_attrs=True, doc='A custom operator registered with mx.operator.register (see ember.operator).')
register('_backward_Custom', _run('backward'), inputs=_backward_inputs,
         outputs=lambda attrs: [f'in_grad_{name}' for name in _prop(attrs).list_arguments()],
         infer_shape=_backward_shapes, infer_type=_backward_shapes, params=OP_TYPE,
         open_attrs=True, doc="The gradient of Custom: the user's backward.")
