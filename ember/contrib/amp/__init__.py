"""``mx.contrib.amp``: automatic mixed precision (see :mod:`ember.contrib.amp.amp`)."""
from ember.contrib.amp import amp, lists, loss_scaler
from ember.contrib.amp.amp import *  # noqa: F401,F403
from ember.contrib.amp.amp import __all__ as _names
from ember.contrib.amp.loss_scaler import LossScaler

__all__ = list(_names) + ['amp', 'lists', 'loss_scaler', 'LossScaler']
