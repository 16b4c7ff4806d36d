"""Graph passes: one module per pass, each with one entry point ``run(graph, options) -> graph``
(:class:`~ember.passes.options.Options`; the pipeline, :mod:`ember.executor.pipeline`, lists them).

A pass reads a :class:`~ember.symbol.graph.Graph` (nodes in topological order, entries,
the operator registry's declarations) and returns a new graph; results that are per entry,
such as shapes, go into ``graph.attrs`` under the pass's key. Passes never touch the engine or
storage, so each is tested on small graphs alone. Import a pass by its module
(``from ember.passes import infer_shape``).
"""
