"""How ``mx.npx`` runs Ember's registered operators on mx.np arrays (``mx.nd``'s functions)
or on Symbols (``mx.sym``'s), giving mx.np arrays and mx.np Symbols back.

>>> from ember import numpy as np
>>> from ember.numpy_extension.operators import operator_function
>>> operator_function('relu', 'relu')(np.array([-1.0, 2.0]))
array([0., 2.])
"""
from __future__ import annotations

from ember import ndarray as _nd
from ember.ndarray.ndarray import NDArray
from ember.numpy.multiarray import is_symbol, wrap
from ember.op import registry

__all__ = ['operator_function']


def _call(op_name, inputs, params, public, out=None):
    """``mx.nd.<op_name>`` (``mx.sym`` with Symbols) on `inputs` (None ones left out); the
    result written into `out` when given."""
    inputs = [x for x in inputs if x is not None]
    params = {k: v for k, v in params.items() if v is not None}
    params.pop('name', None)
    if any(is_symbol(x) for x in inputs):
        from ember import symbol
        from ember.numpy.symbol import as_np_symbol
        result = getattr(symbol, op_name)(*inputs, **params)
        outputs = [as_np_symbol(symbol.Symbol([head])) for head in result._heads]
        return outputs[0] if len(outputs) == 1 else outputs
    for x in inputs:
        if not isinstance(x, NDArray):
            raise TypeError(f'npx.{public}: inputs must be mx.np arrays, got '
                            f'{type(x).__name__}')
    result = getattr(_nd, op_name)(*inputs, **params)
    result = [wrap(r) for r in result] if isinstance(result, (list, tuple)) else wrap(result)
    if out is not None:
        targets = out if isinstance(out, (list, tuple)) else [out]
        for target, value in zip(targets, result if isinstance(result, list) else [result]):
            target[...] = value
        return out
    return result


def operator_function(op_name, public):
    """``npx.<public>``: registered operator `op_name` on mx.np arrays or Symbols."""
    def function(*args, out=None, name=None, **kwargs):
        return _call(op_name, list(args), kwargs, public, out)
    function.__name__ = function.__qualname__ = public
    function.__doc__ = f'``{op_name}`` on mx.np arrays: {registry.get(op_name).doc}'
    return function
