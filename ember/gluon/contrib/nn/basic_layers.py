"""Extra containers of ``mx.gluon.contrib.nn`` (used by Inception, DenseNet and SqueezeNet).

>>> import ember as mx
>>> from ember.gluon.contrib.nn import HybridConcurrent, Identity
>>> net = HybridConcurrent(axis=1)
>>> net.add(Identity(), Identity())
>>> net(mx.nd.ones((2, 3))).shape
(2, 6)
"""
from __future__ import annotations

from ember.gluon.block import HybridBlock
from ember.gluon.nn import HybridSequential

__all__ = ['HybridConcurrent', 'Identity']


class HybridConcurrent(HybridSequential):
    """Every child sees the same input; their outputs are concatenated along `axis`."""

    def __init__(self, axis=-1, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        self.axis = axis

    def hybrid_forward(self, F, x):
        outputs = [block(x) for block in self._children.values()]
        return F.concat(*outputs, dim=self.axis)


class Identity(HybridBlock):
    """Passes its input through (a branch of a HybridConcurrent that keeps the input)."""

    def hybrid_forward(self, F, x):
        return x
