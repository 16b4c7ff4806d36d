"""``mx.nd`` functions generated from the operator registry (closures, not generated source).

Each function takes the operator's inputs (positionally or by name; ``*data`` for variadic
operators, whose count parameter is filled in), then its parameters (positionally after the
inputs, as MXNet's generated functions allow, or by name), and ``out=`` / ``name=``. It returns
one NDArray, or a list when the operator has several visible outputs.

>>> import ember.ndarray as nd
>>> import inspect
>>> str(inspect.signature(nd.clip))
'(data=None, a_min=None, a_max=None, *, out=None, name=None, **kwargs)'
>>> nd.clip(nd.array([-2, 0.5, 3]), 0, 1).asnumpy().tolist()
[0.0, 0.5, 1.0]
"""
from __future__ import annotations

import inspect

from ember.ndarray.ndarray import NDArray, invoke
from ember.op import frontend

__all__ = ['make_function', 'signature_of']

def signature_of(op) -> inspect.Signature:
    """The Python signature of the function generated for `op`."""
    return frontend.signature_of(op, ('out', 'name'))


class _AttrCache:
    """Parsed attributes per argument tuple: parsing is the costliest step of a small call."""

    def __init__(self, op):
        self.op = op
        self.cache = {}

    def parse(self, kwargs):
        try:
            key = tuple(kwargs.items())
            found = self.cache.get(key)
        except TypeError:        # an unhashable value (a list): parse every time
            return self.op.parse_attrs(kwargs)
        if found is None:
            found = self.op.parse_attrs(kwargs)
            if len(self.cache) > 512:
                self.cache.clear()
            self.cache[key] = found
        return found


def _check_input(op, name, value):
    if not isinstance(value, NDArray):
        raise TypeError(f'{op.name}: input {name!r} must be an NDArray, got '
                        f'{type(value).__name__}')


def _keep_class(inputs, outputs):
    """Outputs take the class of the first input (an ``mx.np`` array in, ``mx.np`` out)."""
    cls = type(inputs[0]) if inputs else NDArray
    if getattr(cls, 'outputs_keep_class', False):
        for output in outputs:
            if type(output) is NDArray:
                output.__class__ = cls
    return outputs


def _result(op, attrs, outputs, out):
    if out is not None:
        return out
    visible = op.num_visible_outputs(attrs)
    if visible == 1:
        return outputs[0]
    return outputs[:visible]


def _out_list(out):
    if out is None or isinstance(out, (list, tuple)):
        return out
    return [out]


def make_function(op, public_name=None):
    """The ``mx.nd`` function of operator `op`."""
    public_name = public_name or op.name
    attrs_of = _AttrCache(op).parse
    if callable(op.inputs):
        fn = _dynamic_inputs(op, attrs_of)
    else:
        fn = _fixed_inputs(op, attrs_of)
    return frontend.name_function(fn, op, public_name, 'ember.ndarray', ('out', 'name'))


def _fixed_inputs(op, attrs_of):
    input_names = tuple(op.inputs)
    param_names = tuple(p.name for p in op.params)
    n_in = len(input_names)
    most = n_in + len(param_names)

    def fn(*args, out=None, name=None, **kwargs):
        if len(args) > most:
            raise TypeError(f'{op.name}: takes at most {most} positional arguments '
                            f'({", ".join(input_names + param_names)}), got {len(args)}')
        inputs = list(args[:n_in])
        for index in range(len(inputs), n_in):
            inputs.append(kwargs.pop(input_names[index], None))
        for index, value in enumerate(inputs):
            _check_input(op, input_names[index], value)
        for pname, value in zip(param_names, args[n_in:]):
            if pname in kwargs:
                raise TypeError(f'{op.name}: got two values for {pname!r}')
            kwargs[pname] = value
        attrs = attrs_of(kwargs)
        outputs = _keep_class(inputs, invoke(op, inputs, attrs, out=_out_list(out)))
        return _result(op, attrs, outputs, out)
    return fn


def _dynamic_inputs(op, attrs_of):
    """Variadic operators (``*data``) and those whose inputs depend on their attributes."""
    variadic = op.variadic
    param_names = {p.name for p in op.params}

    def fn(*args, out=None, name=None, **kwargs):
        if len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = tuple(args[0])
        split = 0
        while split < len(args) and isinstance(args[split], NDArray):
            split += 1
        inputs, extra = list(args[:split]), args[split:]
        if variadic is not None and extra:
            _check_input(op, f'data[{split}]', extra[0])
        named = {k: kwargs.pop(k) for k in list(kwargs)
                 if k not in param_names and (kwargs[k] is None or isinstance(kwargs[k], NDArray))}
        named = {k: v for k, v in named.items() if v is not None}
        positional_params = [p.name for p in op.params if p.name != variadic]
        for pname, value in zip(positional_params, extra):
            kwargs[pname] = value
        if variadic is not None and kwargs.get(variadic) is None:
            kwargs[variadic] = len(inputs)
        attrs = attrs_of(kwargs)
        inputs = _bind_named(op, attrs, inputs, named)
        outputs = _keep_class(inputs, invoke(op, inputs, attrs, out=_out_list(out)))
        return _result(op, attrs, outputs, out)
    return fn


def _bind_named(op, attrs, inputs, named):
    names = op.input_names(attrs)
    for input_name in names[len(inputs):]:
        if input_name not in named:
            raise TypeError(f'{op.name}: missing input {input_name!r} (inputs: '
                            f'{", ".join(names)})')
        inputs.append(named.pop(input_name))
    if named:
        raise TypeError(f'{op.name}: unknown inputs {sorted(named)}; inputs are '
                        f'{", ".join(names)}')
    if len(inputs) != len(names):
        raise TypeError(f'{op.name}: expected {len(names)} inputs ({", ".join(names)}), got '
                        f'{len(inputs)}')
    return inputs
