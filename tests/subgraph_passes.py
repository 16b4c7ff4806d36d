"""The CPU rewrites of MXNET_SUBGRAPH_BACKEND, run in the pipeline's order on a test's graph.

:func:`rewritten` takes a graph and parameter values and returns ``(graph, params)``: the
graph after the five passes and the values of its variables that have one (the given ones it
still reads, and the folded ones). Shapes are inferred again between the passes where the
graph had them, as the pipeline does; a graph without shapes stays without (a residual add is
then not recognised, and nothing goes channel-last).
"""
from ember.passes import (
    channel_last, fold_batch_norm, fuse_batch_norm_relu, fuse_layers, remove_identities)
from ember.passes.options import Options
from ember.symbol.infer import infer_shapes

PASSES = (remove_identities, fold_batch_norm, fuse_layers, channel_last, fuse_batch_norm_relu)


def rewritten(graph, params=None, is_train=False, device=None):
    """(graph, params) after the subgraph passes; `params` itself where no pass changed which
    variables have values."""
    options = Options(params=dict(params or {}), is_train=is_train, device=device)
    original, values = graph, params
    for each in PASSES:
        before = graph
        graph = each.run(_shapes_again(original, graph), options)
        if each is fold_batch_norm and 'folded' in graph.attrs:
            values = {**_still_read(graph, params), **graph.attrs['folded'].values}
        elif each is channel_last and graph is not before and not is_train:
            values = _still_read(graph, values)
    return graph, values


def _still_read(graph, values):
    names = {graph.nodes[i].name for i in graph.input_nodes}
    return {name: value for name, value in (values or {}).items() if name in names}


def _shapes_again(original, graph):
    """`graph` with ``attrs['shape']`` again where `original` had it and a rewrite dropped it."""
    shapes = original.attrs.get('shape')
    if shapes is None or 'shape' in graph.attrs:
        return graph
    known = {original.nodes[i].name: shapes[original.node_row_ptr[i]]
             for i in original.input_nodes}
    return graph.replace(attrs={**graph.attrs, 'shape': tuple(infer_shapes(graph, known))})
