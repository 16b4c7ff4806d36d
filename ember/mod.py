"""``mx.mod``: the facade over :mod:`ember.module` (MXNet 1.x's module API).

>>> from ember import mod, module
>>> mod.Module is module.Module, mod.BaseModule is module.BaseModule
(True, True)
"""
from ember.module import *  # noqa: F401,F403
from ember.module import __all__  # noqa: F401
