"""Predefined networks and their pretrained weights (``mx.gluon.model_zoo``).

>>> import ember as mx
>>> net = mx.gluon.model_zoo.vision.get_model('squeezenet1.1', classes=10)
>>> type(net).__name__
'SqueezeNet'
"""
from ember.gluon.model_zoo import model_store, vision

__all__ = ['model_store', 'vision']
