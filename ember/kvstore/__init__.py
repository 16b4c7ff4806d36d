"""KVStore: sums gradients across devices, processes and machines (``mx.kv``, ``mx.kvstore``).

``create(name)`` makes a store by type name. In one process: ``'local'`` (sums on the CPU),
``'device'`` (sums on the devices; along link trees with ``MXNET_KVSTORE_USETREE``) and
``'nccl'`` (GPUs only). Across processes and machines, over MPI (``mpi4py``):
``'dist_sync'``, ``'dist_device_sync'`` (the sum inside each rank on its devices) and
``'dist_async'``. ``'horovod'`` and ``'byteps'`` name those packages. Custom stores register with
:meth:`KVStoreBase.register` and are created by name like these.

>>> import ember as mx
>>> kv = mx.kv.create('device')
>>> kv.type, kv.rank, kv.num_workers
('device', 0, 1)
"""
from __future__ import annotations

from ember import config
from ember.base import prod
from ember.kvstore import base, kvstore
from ember.kvstore.base import KVStoreBase, TestStore, pushpull_all
from ember.kvstore.compression import GradientCompression
from ember.kvstore.local import KVStoreLocal, KVStoreNCCL
from ember.kvstore.plugins import BytePS, Horovod

__all__ = ['create', 'create_kvstore', 'pushpull_all', 'KVStore', 'KVStoreBase', 'KVStoreLocal',
           'TestStore', 'GradientCompression', 'TYPES', 'base', 'kvstore']

KVStore = kvstore.KVStore


def _dist(name):
    from ember.kvstore.dist import KVStoreDist
    return KVStoreDist(name)


# name -> (factory, what it is); every built-in type on one record
TYPES = {
    'local': (lambda: KVStoreLocal('local'), 'one process; sums on the CPU'),
    'device': (lambda: KVStoreLocal('device'), 'one process; sums on the devices'),
    'nccl': (KVStoreNCCL, 'one process; sums across GPUs'),
    'dist_sync': (lambda: _dist('dist_sync'), 'MPI ranks, synchronous; CPU sum in a rank'),
    'dist_device_sync': (lambda: _dist('dist_device_sync'),
                         'MPI ranks, synchronous; device sum in a rank'),
    'dist_async': (lambda: _dist('dist_async'), 'MPI ranks, asynchronous updates'),
}
_ALIASES = {'dist_sync_device': 'dist_device_sync', 'dist': 'dist_sync'}


def create(name='local'):
    """A new store of type `name` (see the module docstring; custom registered names too).

    >>> import ember as mx
    >>> mx.kv.create('locl')
    Traceback (most recent call last):
        ...
    ValueError: unknown kvstore type 'locl': expected one of local, ...; did you mean 'local'?
    """
    if not isinstance(name, str):
        raise TypeError(f'kvstore name {name!r}: expected a str such as \'local\'')
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key in KVStoreBase.kv_registry:
        return KVStoreBase.kv_registry[key]()
    if key in TYPES:
        return TYPES[key][0]()
    raise ValueError(_unknown(name))


def _unknown(name):
    from ember.config import _suggest
    known = list(TYPES) + [n for n in KVStoreBase.kv_registry if n not in TYPES]
    return (f'unknown kvstore type {name!r}: expected one of {", ".join(known)}'
            + _suggest(name, known))


def _register_plugins():
    for klass in (Horovod, BytePS):
        KVStoreBase.kv_registry.setdefault(klass.__name__.lower(), klass)


_register_plugins()
base.create = create        # MXNet's base module has create too; it is defined here, above
base.__all__.append('create')


# MXNet updates on a 'local' store only while no weight exceeds this many elements.
_LOCAL_UPDATE_LIMIT = 1024 * 1024 * 16


def create_kvstore(kvstore, num_device, arg_params):
    """(store or None, update_on_kvstore) for training on `num_device` devices, as MXNet's
    Module and Trainer decide: no store for one device in one process; the optimizer runs on
    the store when ``MXNET_UPDATE_ON_KVSTORE`` says so and the store can, except on a
    ``'local'`` store holding a weight of more than 16M elements. `arg_params` maps parameter
    names to arrays or shapes.

    >>> import ember as mx
    >>> create_kvstore('device', 1, {'w': (2, 2)})
    (None, False)
    >>> kv, on_store = create_kvstore('device', 2, {'w': (2, 2)})
    >>> kv.type, on_store
    ('device', True)
    """
    update_on_kvstore = bool(config.get('MXNET_UPDATE_ON_KVSTORE'))
    if kvstore is None:
        store = None
    elif isinstance(kvstore, KVStoreBase):
        store = kvstore
    elif isinstance(kvstore, str):
        store = None if num_device == 1 and 'dist' not in kvstore else create(kvstore)
        if store is not None and kvstore == 'local' and _largest(arg_params) > \
                _LOCAL_UPDATE_LIMIT:
            update_on_kvstore = False
    else:
        raise TypeError(f'kvstore {kvstore!r}: expected a KVStore, a type name such as '
                        f"'device' or 'dist_sync', or None")
    if store is None:
        return None, False
    return store, update_on_kvstore and bool(store.is_capable(KVStoreBase.OPTIMIZER))


def _largest(arg_params):
    sizes = [prod(getattr(value, 'shape', value)) for value in arg_params.values()]
    return max(sizes, default=0)
