"""Operators: the registry and one module per family. Importing this package registers them all."""
from ember.op import registry
from ember.op import elemwise, reduce, matrix, indexing, dot, init, random  # noqa: F401
from ember.op import nn, optimizer_ops  # noqa: F401  (registration side effects)
from ember.op import sequence  # noqa: F401
from ember.op import fused  # noqa: F401
from ember.op import image  # noqa: F401
from ember.op import contrib, control_flow, group_norm, legacy, linalg  # noqa: F401
from ember.op import numeric, optimizer_multi, same_shape_binary, sampling, spatial  # noqa: F401
from ember.op import (np_elemwise, np_init, np_linalg, np_manip, np_random,  # noqa: F401
                      np_reduce, np_shape, np_stats)
from ember.op import sparse_ops, sparse_optimizer  # noqa: F401  (sparse kernels: last)
from ember.op import rounding  # noqa: F401  (_round_to_precision: --auto-cast)

__all__ = ['registry']
