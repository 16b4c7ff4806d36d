"""``mx.gluon.contrib.cnn``: deformable convolutions (v1 and the modulated v2)."""
from ember.gluon.contrib.cnn import conv_layers
from ember.gluon.contrib.cnn.conv_layers import *  # noqa: F401,F403
from ember.gluon.contrib.cnn.conv_layers import __all__ as _layers

__all__ = list(_layers) + ['conv_layers']
