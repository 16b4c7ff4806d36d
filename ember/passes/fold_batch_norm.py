"""Inference: a BatchNorm folds into the Convolution or FullyConnected before it, when that
layer's output feeds only the BatchNorm: ``w' = w * s`` and ``b' = (b - mean) * s + beta`` per
output channel, with ``s = gamma / sqrt(var + eps)``. Off in training, without parameter values
(``options.params``) and with ``MXNET_SUBGRAPH_BACKEND=NONE`` (:mod:`ember.passes.subgraph`).

A convolution becomes ``_sg_conv`` with ``weight_scale``: its inputs are its own weight, the
new variables ``<layer>_folded_bias`` and ``<layer>_folded_scale`` (``s``), and it scales the
weight itself (oneDNN into the reordered copy it keeps), so no folded copy of the weights is
stored. A FullyConnected gets ``<layer>_folded_weight`` and ``<layer>_folded_bias`` (the
originals may be shared or bound by the user). The new variables' values travel on the graph,
``attrs['folded']`` (a :class:`Folded`), which the executor binds and refreshes when the values
they came from change.

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.passes import fold_batch_norm
>>> from ember.passes.options import Options
>>> conv = sym.Convolution(sym.var('x'), kernel=(1, 1), num_filter=2, no_bias=True, name='c')
>>> net = sym.BatchNorm(conv, fix_gamma=False, name='bn')
>>> names = ['c_weight', 'bn_gamma', 'bn_beta', 'bn_moving_mean', 'bn_moving_var']
>>> values = dict(zip(names, [np.ones((2, 3, 1, 1), np.float32)] + [np.ones(2, np.float32)] * 4))
>>> graph = fold_batch_norm.run(net.to_graph(), Options(params=values))
>>> [n.op.name for n in graph.nodes if n.op], sorted(graph.attrs['folded'].values)
(['_sg_conv'], ['c_folded_bias', 'c_folded_scale'])
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ember.op import registry
from ember.op.nn._common import is_channel_last
from ember.passes import subgraph
from ember.passes.options import Options
from ember.passes._rewrite import Rewriter, unique_name
from ember.symbol.graph import Entry, Node, make_node
from ember.symbol.infer import FLAG_OF_TYPE

__all__ = ['run', 'Folded', 'Refold']

OPT_LEVEL = 1       # an optimisation: off under -O0 (NEURON_CC_FLAGS)

_log = logging.getLogger(__name__)

_FOLD_INTO = ('Convolution', 'FullyConnected')


@dataclass(frozen=True)
class Folded:
    """Variables a pass introduced with values: `values` (name -> NumPy array) computed from
    the variables `sources`; ``refold(params)`` computes them again from new values (a
    :class:`Refold`, which holds no values: the compile cache stores it with the graph).

    The values the pass computed are handed out by the first read of `values` and then
    dropped: the executor copies them into its own arrays, and keeping them here would hold
    a second copy of every folded parameter for the executor's life. A later read folds the
    variables' current values again.

    >>> folded = Folded({'w': 1}, ('v',), lambda params: {'w': params['v'] + 1}, {'v': 4})
    >>> folded.values, folded.values
    ({'w': 1}, {'w': 5})
    """
    first_values: dict
    sources: tuple
    refold: Callable
    params: dict                          # the variables' values the pass was given
    _pending: list = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, '_pending', [self.first_values])
        object.__setattr__(self, 'first_values', None)

    @property
    def values(self) -> dict:
        """Name -> value of every folded variable."""
        if self._pending:
            return self._pending.pop()
        return self.refold(self.params)


@dataclass(frozen=True)
class _Recipe:
    """How one BatchNorm folded: the names of what its values come from and go to."""
    is_conv: bool
    weight: str | None          # a FullyConnected's weight (a convolution scales its own)
    bias: str | None            # the layer's bias, if it has one
    bn_params: tuple            # gamma, beta, moving mean, moving variance
    eps: float
    fix_gamma: bool
    dtype: str
    outputs: tuple              # the folded variables: (bias, scale) or (weight, bias)


@dataclass(frozen=True)
class Refold:
    """The folded variables' values from parameter values (a mapping name -> array)."""
    recipes: tuple

    def __call__(self, params) -> dict:
        values = {}
        for recipe in self.recipes:
            values.update(zip(recipe.outputs, _recipe_values(recipe, params)))
        return values


def run(graph, options=Options()):
    """`graph` with its BatchNorms folded and ``attrs['folded']`` for the new variables; the
    same graph when none folds."""
    if not subgraph.enabled() or options.is_train or not options.params:
        return graph
    folded_graph, recipes = _fold(graph, options.params)
    if not recipes:
        return graph
    given = options.params
    names = {folded_graph.nodes[i].name for i in folded_graph.input_nodes}
    sources = tuple(name for name in given if name not in names)
    refold = Refold(tuple(recipes))
    folded = refold(given)
    _log.debug('fold_batch_norm: %d variables folded from %d', len(folded), len(sources))
    return folded_graph.replace(attrs={**folded_graph.attrs,
                                       'folded': Folded(folded, sources, refold, given)})


def _fold(graph, params):
    """(the graph with the foldable BatchNorms folded, the recipe of each fold)."""
    reads = subgraph.Reads(graph)
    folds = {position: node.inputs[0].node for position, node in enumerate(graph.nodes)
             if _foldable(graph, position, reads, params)}
    if not folds:
        return graph, []
    rewriter, taken, recipes = Rewriter(graph), {n.name for n in graph.nodes}, []
    layers = set(folds.values())
    for position in range(len(graph.nodes)):
        if position in folds:
            recipes.append(_place_folded(graph, rewriter, position, folds[position], params,
                                         taken))
        elif position not in layers:
            rewriter.copy(position)
    return rewriter.finish(), recipes


def _foldable(graph, position, reads, params):
    bn = graph.nodes[position]
    if not subgraph.is_op(bn, 'BatchNorm') or bn.inputs[0].index != 0:
        return False
    layer = graph.nodes[bn.inputs[0].node]
    if not subgraph.is_op(layer, *_FOLD_INTO) \
            or reads.sole_reader(bn.inputs[0].node) != position:
        return False
    if not all(reads.unread(Entry(position, i)) for i in (1, 2)):
        return False
    # a convolution scales its own weight: only a FullyConnected's weight value is needed
    needed = list(layer.inputs[1 + subgraph.is_op(layer, 'Convolution'):]) + list(bn.inputs[1:])
    return _channel_axis_fits(layer, bn.attrs['axis']) and all(
        graph.nodes[e.node].op is None and graph.nodes[e.node].name in params for e in needed)


def _channel_axis_fits(layer, axis):
    """Whether BatchNorm's `axis` is the layer's output-channel axis."""
    if subgraph.is_op(layer, 'FullyConnected'):
        return axis in (1, -1) if layer.attrs['flatten'] else axis == -1
    ndim = len(layer.attrs['kernel']) + 2
    channel = ndim - 1 if is_channel_last(layer.attrs['layout']) else 1
    return -ndim <= axis < ndim and axis % ndim == channel


def _place_folded(graph, rewriter, bn_position, layer_position, params, taken):
    bn, layer = graph.nodes[bn_position], graph.nodes[layer_position]
    is_conv = subgraph.is_op(layer, 'Convolution')
    if is_conv:
        # the convolution scales its weight itself (oneDNN into the copy it keeps): a folded
        # copy of every weight would cost as much memory as the weights
        roles = ('bias', 'scale')
        op, attrs = registry.get('_sg_conv'), {**layer.attrs, 'no_bias': False,
                                               'weight_scale': True}
        inputs = [rewriter.new(layer.inputs[0]), rewriter.new(layer.inputs[1])]
    else:
        roles = ('weight', 'bias')
        op, attrs = layer.op, {**layer.attrs, 'no_bias': False}
        inputs = [rewriter.new(layer.inputs[0])]
    name_of = lambda entry: graph.nodes[entry.node].name  # noqa: E731
    outputs = tuple(unique_name(f'{layer.name}_folded_{role}', taken) for role in roles)
    recipe = _Recipe(is_conv, None if is_conv else name_of(layer.inputs[1]),
                     None if layer.attrs['no_bias'] else name_of(layer.inputs[2]),
                     tuple(name_of(e) for e in bn.inputs[1:]), bn.attrs['eps'],
                     bn.attrs['fix_gamma'], _dtype(graph, params, layer.inputs[1]).name,
                     outputs)
    for name, value in zip(outputs, _recipe_values(recipe, params)):
        inputs.append(Entry(rewriter.add(_variable(name, value)), 0))
    rewriter.place(bn_position, make_node(op, bn.name, attrs, inputs, layer.user_attrs))
    return recipe


def _recipe_values(recipe, params):
    """The folded variables' values, in the order of ``recipe.outputs``: per output channel,
    in float64, ``s = gamma / sqrt(var + eps)`` and the bias ``(b - mean) * s + beta``; a
    convolution gets (bias, s), a FullyConnected (its weight scaled by s, bias)."""
    gamma, beta, mean, var = (subgraph.host(params[n]).astype(np.float64)
                              for n in recipe.bn_params)
    bias = 0 if recipe.bias is None else subgraph.host(params[recipe.bias])
    if recipe.fix_gamma:
        gamma = np.ones_like(gamma)
    scale = gamma / np.sqrt(var + recipe.eps)
    bias = (bias - mean) * scale + beta
    if recipe.is_conv:
        return bias.astype(recipe.dtype), scale.astype(recipe.dtype)
    weight = subgraph.host(params[recipe.weight])
    scaled = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
    return scaled.astype(recipe.dtype), bias.astype(recipe.dtype)


def _variable(name, value):
    """A variable node that declares its value's shape and dtype (for inference)."""
    text = {'__shape__': str(tuple(value.shape))}
    if value.dtype.name in FLAG_OF_TYPE:
        text['__dtype__'] = str(FLAG_OF_TYPE[value.dtype.name])
    return Node(None, name, attr_text=text)


def _dtype(graph, params, entry):
    """The dtype of variable `entry`: of its value, else as inferred, else float32."""
    name = graph.nodes[entry.node].name
    if name in params:
        return np.dtype(params[name].dtype)     # no host copy of the weight for its dtype
    dtypes = graph.attrs.get('dtype')
    known = dtypes[graph.entry_id(entry)] if dtypes is not None else None
    return np.dtype(known) if known is not None else np.dtype(np.float32)
