"""Ember: a deep-learning runtime with MXNet 1.x's API (``import ember as mx``).

>>> import ember as mx
>>> float((mx.nd.ones((2, 3)) * 2 + 1).sum().asscalar())
18.0
"""
import importlib as _importlib
import sys as _sys

from ember import config


def _set_openblas_timeout():
    """OpenBLAS reads OPENBLAS_THREAD_TIMEOUT once, when NumPy loads it: set it before anything
    below imports NumPy, so its threads stop spinning on cores that oneDNN needs next."""
    if 'numpy' in _sys.modules:
        import logging
        logging.getLogger(__name__).debug(
            'OPENBLAS_THREAD_TIMEOUT: NumPy was imported before Ember, so OpenBLAS keeps the '
            'timeout it loaded with; it runs on one thread while the engine runs '
            '(engine.threads.blas_limits)')
    else:
        config.set_native_default('OPENBLAS_THREAD_TIMEOUT')


_set_openblas_timeout()

from ember import base, device  # noqa: E402  (after the native-library defaults)
from ember.base import EmberError, MXNetError  # noqa: E402
from ember.device import Context, Device, cpu, cpu_pinned, current_context, gpu  # noqa: E402
from ember import context, engine, profiler, storage  # noqa: E402
from ember import op  # noqa: E402,F401  (registers every operator)
from ember import nd, ndarray, random  # noqa: E402
from ember import autograd  # noqa: E402
from ember import operator  # noqa: E402,F401  (installs mx.nd.Custom)
from ember import initializer, lr_scheduler, metric  # noqa: E402
from ember import initializer as init  # noqa: E402

# Heavier packages load on first use (``mx.gluon``), which keeps ``import ember`` quick.
_LAZY = ('gluon', 'optimizer', 'test_utils', 'io', 'callback', 'sym', 'symbol',
         'name', 'attribute', 'mod', 'model', 'module', 'executor', 'image', 'kvstore',
         'contrib')


def __getattr__(name):
    if name == 'recordio':
        from ember.io import recordio
        globals()['recordio'] = recordio
        return recordio
    if name == 'kv':
        globals()['kv'] = __getattr__('kvstore')
        return globals()['kv']
    if name == 'AttrScope':
        from ember.attribute import AttrScope
        return AttrScope
    if name == 'img':
        return __getattr__('image')
    if name in _LAZY:
        if name == 'sym':
            _importlib.import_module('ember.executor')     # attaches Symbol.bind/simple_bind
        module = _importlib.import_module(f'ember.{name}')
        globals()[name] = module
        return module
    raise AttributeError(f"module 'ember' has no attribute {name!r}")


try:
    profiler.autostart()
except config.ConfigError as _error:
    # A bad value never aborts the import; say so where the user sees it.
    import warnings as _warnings
    _warnings.warn(f'{_error}; the profiler was not started', stacklevel=2)

__version__ = '0.1.0'
__all__ = ['config', 'base', 'device', 'context', 'engine', 'profiler', 'storage', 'nd', 'ndarray',
           'random', 'autograd', 'initializer', 'init', 'lr_scheduler', 'metric', 'optimizer',
           'gluon', 'kvstore', 'kv', 'test_utils',
           'Context', 'Device', 'cpu', 'gpu', 'cpu_pinned',
           'current_context', 'EmberError', 'MXNetError']
