"""``mx.sym`` functions generated from the operator registry (closures, not generated source).

Each function takes the operator's inputs as symbols (positionally or by name; ``*data`` for
variadic operators, whose count parameter is filled in), then its parameters (positionally after
the inputs, or by name), and ``name=`` / ``attr=``. Inputs left out become variables named
``<name>_<input>`` (``fc1_weight``); without ``name`` the NameManager names the node after the
function (``fullyconnected0``). It returns a Symbol of the operator's visible outputs.

>>> import ember.symbol as sym
>>> import inspect
>>> str(inspect.signature(sym.Activation))
'(data=None, act_type=None, *, name=None, attr=None, out=None, **kwargs)'
>>> sym.Activation(sym.var('x'), 'relu', name='act').list_attr()
{'act_type': 'relu'}
"""
from __future__ import annotations

import inspect

from ember.op import frontend
from ember.symbol.symbol import Symbol, create

__all__ = ['make_function', 'signature_of']

def signature_of(op) -> inspect.Signature:
    """The Python signature of the function generated for `op`."""
    return frontend.signature_of(op, ('name', 'attr', 'out'))


def make_function(op, public_name=None):
    """The ``mx.sym`` function of operator `op`."""
    public_name = public_name or op.name
    hint = public_name.lower()
    fn = _dynamic_inputs(op, hint) if callable(op.inputs) else _fixed_inputs(op, hint)
    return frontend.name_function(fn, op, public_name, 'ember.symbol', ('name', 'attr', 'out'))


def _keep_class(inputs, result):
    """The result takes the class of the first input (``mx.np``'s symbols stay so)."""
    first = next((x for x in inputs if isinstance(x, Symbol)), None)
    cls = type(first) if first is not None else Symbol
    return result if cls is Symbol else cls(result._heads)


def _fixed_inputs(op, hint):
    input_names = tuple(op.inputs)
    param_names = tuple(p.name for p in op.params)
    n_in = len(input_names)
    most = n_in + len(param_names)

    def fn(*args, name=None, attr=None, out=None, **kwargs):
        if len(args) > most:
            raise TypeError(f'{op.name}: takes at most {most} positional arguments '
                            f'({", ".join(input_names + param_names)}), got {len(args)}')
        named = {k: kwargs.pop(k) for k in input_names if k in kwargs}
        _params_from_positions(op, param_names, args[n_in:], kwargs)
        return _keep_class(list(args[:n_in]) + list(named.values()),
                           create(op, hint, args[:n_in], named, kwargs, name, attr))
    return fn


def _dynamic_inputs(op, hint):
    """Variadic operators (``*data``) and those whose inputs depend on their parameters."""
    variadic = op.variadic
    param_names = {p.name for p in op.params}
    positional_params = tuple(p.name for p in op.params if p.name != variadic)

    def fn(*args, name=None, attr=None, out=None, **kwargs):
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        split = 0
        while split < len(args) and isinstance(args[split], Symbol):
            split += 1
        named = {k: kwargs.pop(k) for k in list(kwargs) if k not in param_names
                 and (kwargs[k] is None or isinstance(kwargs[k], Symbol))}
        named = {k: v for k, v in named.items() if v is not None}
        if variadic is not None and split < len(args):
            raise TypeError(f'{op.name}: input data[{split}] must be a Symbol, got '
                            f'{type(args[split]).__name__}')
        _params_from_positions(op, positional_params, args[split:], kwargs)
        if variadic is not None and kwargs.get(variadic) is None:
            kwargs[variadic] = split + len(named)
        return _keep_class(list(args[:split]) + list(named.values()),
                           create(op, hint, args[:split], named, kwargs, name, attr))
    return fn


def _params_from_positions(op, names, values, kwargs):
    for pname, value in zip(names, values):
        if pname in kwargs:
            raise TypeError(f'{op.name}: got two values for {pname!r}')
        kwargs[pname] = value
