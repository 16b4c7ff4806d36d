"""``mx.image`` (also ``mx.img``): reading, resizing, cropping and augmenting images as
NDArrays, and ``ImageIter``.

>>> import ember as mx
>>> mx.image.scale_down((100, 50), (80, 80))
(50, 50)
"""
from ember.image.image import *  # noqa: F401,F403
from ember.image.image import __all__ as _image_all
from ember.image.image_iter import ImageIter

__all__ = list(_image_all) + ['ImageIter', 'image']
