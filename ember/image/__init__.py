"""``mx.image`` (also ``mx.img``): reading, resizing, cropping, rotating and augmenting images
as NDArrays, ``ImageIter``, and the detection augmenters and ``ImageDetIter``
(``mx.image.detection``, also ``mx.image.det``).

>>> import ember as mx
>>> mx.image.scale_down((100, 50), (80, 80))
(50, 50)
"""
from ember import io, ndarray as nd  # noqa: F401  (MXNet's module has them)
from ember.base import numeric_types  # noqa: F401
from ember.io import recordio  # noqa: F401
from ember.util import is_np_array  # noqa: F401
from ember.image import image
from ember.image.image import *  # noqa: F401,F403
from ember.image.image_iter import ImageIter
from ember.image import detection
from ember.image.detection import *  # noqa: F401,F403
from ember.image.detection import copyMakeBorder  # noqa: F401  (the operator, as in MXNet)

det = detection
# MXNet's image module holds ImageIter (defined beside it here, as it imports image.py) and
# MXNet's helpers it imports
for _name in ('ImageIter', 'is_np_array', 'numeric_types'):
    setattr(image, _name, globals()[_name])
    image.__all__.append(_name)

__all__ = sorted(set(image.__all__) | set(detection.__all__)
                 | {'image', 'detection', 'det', 'io', 'nd', 'recordio'})
