"""SymbolBlock: a Gluon block made from a symbol (a graph exported by ``HybridBlock.export``, by
MXNet itself, or built with ``mx.sym``).

>>> import ember as mx
>>> data = mx.sym.var('data')
>>> out = mx.sym.FullyConnected(data, num_hidden=2, name='fc')
>>> block = mx.gluon.SymbolBlock(out, data)
>>> sorted(block.collect_params().keys())
['fc_bias', 'fc_weight']
>>> block.initialize(mx.init.One())
>>> block(mx.nd.ones((1, 3))).asnumpy().tolist()
[[3.0, 3.0]]
"""
from __future__ import annotations

import copy
import os

import numpy as np

from ember import ndarray as nd
from ember import symbol
from ember.base import EmberError
from ember.gluon.block import HybridBlock, _flatten, _regroup
from ember.gluon.parameter import ParameterDict

__all__ = ['SymbolBlock']


class SymbolBlock(HybridBlock):
    """Run the graph `outputs` with `inputs` (variables) as the block's inputs; every other
    variable of the graph becomes a parameter (auxiliary states with ``grad_req='null'``).

    Parameters whose shapes the graph leaves open are inferred at the first call; parameters
    may be shared with another block through `params`.
    """

    def __init__(self, outputs, inputs, params=None):
        super().__init__(prefix=None, params=None)
        self._prefix = ''
        self._name = ''
        self._params = ParameterDict('', params)
        if isinstance(inputs, symbol.Symbol) and len(inputs.list_outputs()) == 1:
            inputs = [inputs]
        if isinstance(outputs, (list, tuple)) and len(outputs) == 1:
            outputs = outputs[0]
        variables, self._in_format = _flatten(inputs, 'input')
        flat_outputs, self._out_format = _flatten(outputs, 'output')
        out = symbol.Group(flat_outputs)
        input_names = {_variable_name(v) for v in variables}
        self._declare_params(out, variables, input_names)
        self._cached_graph = (variables, out)
        prefix_length = _common_prefix_length(list(self._params.keys()))
        self._reg_params = {key[prefix_length:]: param for key, param in self._params.items()}

    def _declare_params(self, out, variables, input_names):
        arg_types, aux_types = _param_types(out, variables)
        # A variable's __init__ (Parameter.var() writes it) initializes the parameter.
        inits = {name: attrs.get('__init__') for name, attrs in out.attr_dict().items()}
        for name, dtype in zip(out.list_arguments(), arg_types):
            if name not in input_names:
                self.params.get(name, allow_deferred_init=True, dtype=dtype,
                                init=inits.get(name))
        for name, dtype in zip(out.list_auxiliary_states(), aux_types):
            if name not in input_names:
                self.params.get(name, grad_req='null', allow_deferred_init=True, dtype=dtype,
                                init=inits.get(name))

    @staticmethod
    def imports(symbol_file, input_names, param_file=None, ctx=None, allow_missing=False,
                ignore_extra=False):
        """A SymbolBlock from ``prefix-symbol.json`` and, optionally, ``prefix-0000.params``
        (as written by ``HybridBlock.export``), with `input_names` as its inputs.

        >>> import os, tempfile
        >>> import ember as mx
        >>> net = mx.gluon.nn.Dense(2, in_units=3, prefix='fc_')
        >>> net.initialize(mx.init.One())
        >>> net.hybridize()
        >>> _ = net(mx.nd.ones((1, 3)))
        >>> symbol_file, params_file = net.export(os.path.join(tempfile.mkdtemp(), 'fc'))
        >>> block = mx.gluon.SymbolBlock.imports(symbol_file, ['data'], params_file)
        >>> block(mx.nd.ones((1, 3))).asnumpy().tolist()
        [[3.0, 3.0]]
        """
        graph = symbol.load(symbol_file)
        if isinstance(input_names, str):
            input_names = [input_names]
        if param_file is None:
            inputs = [symbol.var(name, dtype='float32') for name in input_names]
        else:
            inputs = [symbol.var(name) for name in input_names]
        block = SymbolBlock(graph, inputs)
        if param_file is not None:
            block.collect_params().load(param_file, ctx, allow_missing, ignore_extra)
        return block

    def forward(self, x, *args):
        if isinstance(x, nd.NDArray):
            return self._call_cached_op(x, *args)
        if not isinstance(x, symbol.Symbol):
            raise TypeError(f'SymbolBlock: expected NDArray or Symbol inputs, got '
                            f'{type(x).__name__}')
        flat, in_format = _flatten([x] + list(args), 'input')
        if in_format != self._in_format:
            raise ValueError(f'SymbolBlock: inputs of format {in_format} do not match the '
                             f'declared inputs {self._in_format}')
        composed = copy.copy(self._cached_graph[1])
        composed._compose(**{_variable_name(v): s for v, s in zip(self._cached_graph[0], flat)})
        return _regroup(list(composed), self._out_format)[0]

    def _get_graph(self, *args):
        _, in_format = _flatten(args, 'input')
        if in_format != self._in_format:
            raise ValueError(f'SymbolBlock: inputs of format {in_format} do not match the '
                             f'declared inputs {self._in_format}')
        return self._cached_graph

    def _clear_cached_op(self):
        graph = self._cached_graph
        super()._clear_cached_op()
        self._cached_graph = graph

    def hybrid_forward(self, F, x, *args, **kwargs):
        raise NotImplementedError('SymbolBlock runs its graph; it has no hybrid_forward')


def _common_prefix_length(names):
    """MXNet's common prefix of the parameter names (structural names are the rest); one that
    is a whole name is cut back to its last '_', so that no name becomes empty."""
    prefix = os.path.commonprefix(names)
    if prefix in names:
        prefix = prefix[:prefix.rfind('_') + 1]
    return len(prefix)


def _variable_name(var):
    if len(var.get_internals().list_outputs()) != 1:
        raise EmberError(f'SymbolBlock: inputs must be variables, but {var.name!r} is the '
                         f'output of an operator')
    return var.name


def _param_types(out, variables):
    """The dtypes of the graph's arguments and auxiliary states, inferred from the inputs'
    declared dtypes (float32 where none is declared); float32 where undecided."""
    graph_inputs = set(out.list_inputs())
    known = {var.name: _declared_dtype(var) for var in variables if var.name in graph_inputs}
    arg_types, _, aux_types = out.infer_type_partial(**known)
    default = np.dtype('float32')
    return ([default if t is None else np.dtype(t) for t in arg_types],
            [default if t is None else np.dtype(t) for t in aux_types])


def _declared_dtype(var):
    types = var.infer_type_partial()[0]
    return types[0] if types and types[0] is not None else np.float32
