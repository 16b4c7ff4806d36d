"""Operators: the registry and one module per family. Importing this package registers them all."""
from ember.op import registry
from ember.op import elemwise, reduce, matrix, indexing, dot, init, random  # noqa: F401
from ember.op import nn, optimizer_ops  # noqa: F401  (registration side effects)
from ember.op import sequence  # noqa: F401
from ember.op import fused  # noqa: F401
from ember.op import image  # noqa: F401
from ember.op import amp  # noqa: F401

__all__ = ['registry']
