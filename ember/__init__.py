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
from ember import ndarray  # noqa: E402


def _late_numpy_namespace(package, name):
    """mx.nd.np / mx.sym.np and their long names: importing mx.np attaches them."""
    def load():
        _numpy_name('np')
        return getattr(package, name)
    return load


for _name in ('np', 'numpy', 'npx', 'numpy_extension'):
    ndarray.late_namespaces[_name] = _late_numpy_namespace(ndarray, _name)
# MXNet's mx.nd.CachedOp is the executor's, a layer above mx.nd
ndarray.late_namespaces['CachedOp'] = lambda: _importlib.import_module(
    'ember.executor.cached_op').CachedOp
from ember import nd, random  # noqa: E402
from ember import autograd  # noqa: E402


def _symbol_of_tape(steps, head):
    """autograd.get_symbol's builder, in the symbol layer (loaded on first use)."""
    return _importlib.import_module('ember.symbol.tape').from_tape(steps, head)


autograd._symbol_maker = _symbol_of_tape
from ember import operator  # noqa: E402,F401  (installs mx.nd.Custom)
from ember import initializer, lr_scheduler, metric  # noqa: E402
from ember import initializer as init  # noqa: E402

# Heavier packages load on first use (``mx.gluon``), which keeps ``import ember`` quick.
_LAZY = ('gluon', 'optimizer', 'test_utils', 'io', 'callback', 'sym', 'symbol',
         'name', 'attribute', 'mod', 'model', 'module', 'executor', 'image', 'kvstore',
         'operator', 'error', 'runtime', 'libinfo', 'log', 'registry', 'misc', 'rnn',
         'monitor', 'visualization', 'contrib', 'numpy_dispatch_protocol',
         'numpy_op_fallback', 'executor_manager')
# MXNet's short names for modules (``mx.viz``), loaded on first use like the modules.
_ALIASES = {'rnd': 'random', 'viz': 'visualization', 'mon': 'monitor', 'kv': 'kvstore',
            'img': 'image'}


# mx.np, mx.npx, mx.util and MXNet's top-level switches of NumPy semantics, loaded on first use.
_NUMPY = {'np': 'ember.numpy', 'numpy': 'ember.numpy', 'npx': 'ember.numpy_extension',
          'numpy_extension': 'ember.numpy_extension', 'util': 'ember.util'}
_UTIL_NAMES = ('is_np_array', 'is_np_shape', 'np_array', 'np_shape', 'set_np_shape', 'use_np',
               'use_np_array', 'use_np_shape')
_NUMPY.update({n: 'ember.util' for n in _UTIL_NAMES})


def _numpy_name(name):
    module = _importlib.import_module(_NUMPY[name])
    _importlib.import_module('ember.numpy_extension')     # attaches mx.nd.npx / mx.sym.npx
    value = getattr(module, name) if name in _UTIL_NAMES else module
    globals()[name] = value
    return value


def __getattr__(name):
    if name in _ALIASES:
        module = _importlib.import_module(f'ember.{_ALIASES[name]}')
        globals()[name] = module
        return module
    if name == 'recordio':
        from ember.io import recordio
        globals()['recordio'] = recordio
        return recordio
    if name == 'AttrScope':
        from ember.attribute import AttrScope
        return AttrScope
    if name in _NUMPY:
        return _numpy_name(name)
    if name == 'np_symbol':         # MXNet's module of the mx.sym.np functions
        _numpy_name('np')
        globals()['np_symbol'] = _importlib.import_module('ember.symbol').numpy
        return globals()['np_symbol']
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
           'gluon', 'test_utils', 'Context', 'Device', 'cpu', 'gpu', 'cpu_pinned',
           'current_context', 'EmberError', 'MXNetError', 'recordio', 'AttrScope',
           'np_symbol', *_LAZY, *_ALIASES, *_NUMPY]
