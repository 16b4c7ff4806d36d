"""``mx.sym.image``: the image operators (registered as ``_image_*``) under their short names.

>>> import ember.symbol as sym
>>> tensor = sym.image.to_tensor(sym.var('image'))
>>> tensor.infer_shape(image=(4, 6, 3))[1]
[(3, 4, 6)]
"""
from __future__ import annotations

from ember.op import registry
from ember.symbol.register import make_function

PREFIX = '_image_'
__all__ = sorted(name[len(PREFIX):] for name in registry.all_ops() if name.startswith(PREFIX))

for _name in __all__:
    globals()[_name] = make_function(registry.get(PREFIX + _name), _name)
