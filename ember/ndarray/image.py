"""``mx.nd.image``: the image operators (registered as ``_image_*``) under their short names.

>>> import ember.ndarray as nd
>>> image = nd.ones((4, 6, 3), dtype='uint8') * 255
>>> nd.image.to_tensor(image).shape, float(nd.image.to_tensor(image).max().asscalar())
((3, 4, 6), 1.0)
>>> nd.image.resize(image, (3, 2)).shape
(2, 3, 3)
"""
from __future__ import annotations

from ember.op import registry
from ember.ndarray.register import make_function

PREFIX = '_image_'
__all__ = sorted(name[len(PREFIX):] for name in registry.all_ops() if name.startswith(PREFIX))

for _name in __all__:
    globals()[_name] = make_function(registry.get(PREFIX + _name), _name)
