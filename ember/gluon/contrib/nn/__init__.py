"""``mx.gluon.contrib.nn``: containers beyond ``gluon.nn``."""
from ember.gluon.contrib.nn.basic_layers import HybridConcurrent, Identity

__all__ = ['HybridConcurrent', 'Identity']
