"""Shape inference pass: ``graph.attrs['shape']`` holds each entry's shape.

The inference itself is :func:`ember.symbol.infer.infer_shapes` (the Symbol API uses it too);
see there for the conventions (None: unknown; 0 dimensions: unknown dimensions).

>>> from ember import symbol as sym
>>> from ember.passes import infer_shape
>>> from ember.passes.options import Options
>>> graph = sym.FullyConnected(sym.var('x'), num_hidden=4, name='fc').to_graph()
>>> shapes = infer_shape.run(graph, Options(shapes={'x': (2, 3)})).attrs['shape']
>>> shapes[graph.entry_id(graph.outputs[0])]
(2, 4)
"""
from __future__ import annotations

from ember.passes.options import Options
from ember.symbol.infer import infer_shapes

__all__ = ['run']


def run(graph, options=Options()):
    """`graph` with ``attrs['shape']``: a tuple of shapes per entry id, from
    ``options.shapes`` (variable name -> shape) and the variables' ``__shape__`` attributes.
    Raises ShapeError naming the node whose shapes do not fit."""
    inferred = infer_shapes(graph, options.shapes)
    return graph.replace(attrs={**graph.attrs, 'shape': tuple(inferred)})
