"""``mx.mod``: the facade over :mod:`ember.module` (MXNet 1.x's module API).

>>> from ember import mod, module
>>> mod.Module is module.Module, mod.BaseModule is module.BaseModule
(True, True)
"""
from ember.module import (BaseModule, BucketingModule, DataParallelExecutorGroup,  # noqa: F401
                          Module)

__all__ = ['BaseModule', 'Module', 'BucketingModule', 'DataParallelExecutorGroup']
