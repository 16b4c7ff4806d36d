"""``mx.kvstore.kvstore``: MXNet's module of the store class. Every store Ember creates
(``'local'``, ``'device'``, ``'dist_sync'``, ...) is a :class:`KVStore`.

>>> import ember as mx
>>> isinstance(mx.kv.create('device'), KVStore)
True
"""
from ember.kvstore.base import KVStoreBase as KVStore

__all__ = ['KVStore']
