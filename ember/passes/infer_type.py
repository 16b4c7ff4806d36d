"""Type inference pass: ``graph.attrs['dtype']`` holds each entry's NumPy dtype.

The inference itself is :func:`ember.symbol.infer.infer_types` (the Symbol API uses it too).

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.passes import infer_type
>>> from ember.passes.options import Options
>>> graph = sym.relu(sym.var('x'), name='r').to_graph()
>>> infer_type.run(graph, Options(dtypes={'x': np.float16})).attrs['dtype']
(dtype('float16'), dtype('float16'))
"""
from __future__ import annotations

from ember.passes.options import Options
from ember.symbol.infer import infer_types

__all__ = ['run']


def run(graph, options=Options()):
    """`graph` with ``attrs['dtype']``: a tuple of dtypes (None where unknown) per entry id,
    from ``options.dtypes`` (variable name -> dtype) and the variables' ``__dtype__``
    attributes."""
    inferred = infer_types(graph, options.dtypes)
    return graph.replace(attrs={**graph.attrs, 'dtype': tuple(inferred)})
