"""``mx.gluon.contrib.nn``: containers beyond ``gluon.nn``, pixel shuffles, SyncBatchNorm."""
from ember.gluon.contrib.nn.basic_layers import *  # noqa: F401,F403
from ember.gluon.contrib.nn.basic_layers import __all__ as _layers

__all__ = list(_layers) + ['basic_layers']
