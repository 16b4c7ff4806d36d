"""``mx.npx.image``: the image operators (``mx.nd.image``, registered as ``_image_*``) on
mx.np arrays and Symbols, one function per registered operator.

>>> from ember import numpy as np, numpy_extension as npx
>>> sorted(set(npx.image.__all__) - set(dir(npx.image)))
[]
"""
from __future__ import annotations

from ember.numpy_extension.operators import _call
from ember.op import registry

PREFIX = '_image_'
__all__ = sorted(name[len(PREFIX):] for name in registry.all_ops() if name.startswith(PREFIX))


def _function(op_name, public):
    def function(*args, out=None, name=None, **kwargs):
        return _call(op_name, list(args), kwargs, f'image.{public}', out)
    function.__name__ = function.__qualname__ = public
    function.__doc__ = f'``{op_name}`` on mx.np arrays: {registry.get(op_name).doc}'
    return function


for _name in __all__:
    globals()[_name] = _function(PREFIX + _name, _name)
