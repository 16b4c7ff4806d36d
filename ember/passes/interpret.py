"""A reference interpreter: evaluate a graph node by node with ``mx.nd``.

Slow and simple on purpose: tests run a graph before and after a pass and compare the results.
It allocates every value anew (no memory plan, no bulking), so it checks what a pass computes,
not how the executor runs it.

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.passes import interpret
>>> graph = sym.relu(sym.var('x') * 2, name='r').to_graph()
>>> interpret.run(graph, {'x': np.array([-1., 2.], np.float32)})
[array([0., 4.], dtype=float32)]
"""
from __future__ import annotations

import difflib

import numpy as np

from ember import autograd
from ember.base import EmberError
from ember.ndarray import NDArray, invoke
from ember.ndarray.creation import array

__all__ = ['run']


def run(graph, inputs: dict, is_train: bool = False) -> list:
    """The values of `graph`'s outputs as NumPy arrays.

    `inputs` maps every variable's name to a NumPy array or an NDArray (an NDArray is used as
    is, so operators that update an input, such as BatchNorm in training, update it).
    `is_train` runs the operators in training mode (Dropout drops, BatchNorm uses batch
    statistics).
    """
    values = []
    with autograd.train_mode() if is_train else autograd.predict_mode():
        for node in graph.nodes:
            if node.op is None:
                values.append([_input_value(node.name, inputs)])
            else:
                args = [values[e.node][e.index] for e in node.inputs]
                values.append(invoke(node.op, args, node.attrs))
    return [values[e.node][e.index].asnumpy() for e in graph.outputs]


def _input_value(name, inputs):
    if name not in inputs:
        close = difflib.get_close_matches(name, list(inputs), n=1)
        hint = f'; did you mean {close[0]!r}?' if close else ''
        raise EmberError(f'interpret: no value for variable {name!r}; given '
                         f'{sorted(inputs)}{hint}')
    value = inputs[name]
    if isinstance(value, NDArray):
        return value
    value = np.asarray(value)
    return array(value, dtype=value.dtype)
