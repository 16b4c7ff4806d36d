"""``mx.contrib``: MXNet's contributed modules (``amp``: automatic mixed precision)."""
import importlib as _importlib

__all__ = ['amp']


def __getattr__(name):
    if name in __all__:
        module = _importlib.import_module(f'ember.contrib.{name}')
        globals()[name] = module
        return module
    raise AttributeError(f"module 'ember.contrib' has no attribute {name!r}")
