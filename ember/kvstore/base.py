"""KVStoreBase: the interface every key-value store shares, and the registry of store types.

A store type is a class registered under its lower-cased name; :func:`ember.kvstore.create`
looks names up here, so a custom store registered with :meth:`KVStoreBase.register` is created
like a built-in one.

Keys are ints or strings (one kind per store). A value is an NDArray, or a list of NDArrays for
one key (its copies on several devices: a push sums them); with a list of keys, a list of such
values. :func:`key_value_pairs` turns what a caller passed into ``[(key, [arrays])]``, grouping
a key named twice in one call.
"""
from __future__ import annotations

import numbers
import warnings

from ember.base import EmberError
from ember.ndarray import NDArray

__all__ = ['KVStoreBase', 'TestStore', 'key_value_pairs', 'check_key_type', 'pushpull_all']


class KVStoreBase:
    """The interface of a key-value store for data-parallel training (MXNet's ``KVStoreBase``).

    Subclasses implement what they support; the base methods refuse with an error naming the
    store and the method. Register a subclass to create it by name:

    >>> import ember as mx
    >>> @mx.kv.KVStoreBase.register
    ... class EchoStore(mx.kv.KVStoreBase):
    ...     @property
    ...     def type(self):
    ...         return 'echostore'
    >>> mx.kv.create('EchoStore').type
    'echostore'
    >>> _ = mx.kv.KVStoreBase.kv_registry.pop('echostore')
    """

    OPTIMIZER = 'optimizer'
    kv_registry: dict = {}
    # Whether pushpull takes a list of keys in one call (Ember's stores, which then reduce
    # them in buckets); Trainer and Module call a custom store once per key, as MXNet does.
    takes_key_lists = False

    @staticmethod
    def register(klass):
        """Register `klass` under its lower-cased class name (replacing, with a warning)."""
        if not isinstance(klass, type):
            raise TypeError(f'KVStoreBase.register: expected a class, got {klass!r}')
        name = klass.__name__.lower()
        previous = KVStoreBase.kv_registry.get(name)
        if previous is not None and previous is not klass:
            warnings.warn(f'kvstore {name!r}: {klass.__module__}.{klass.__name__} replaces '
                          f'{previous.__module__}.{previous.__name__}', stacklevel=2)
        KVStoreBase.kv_registry[name] = klass
        return klass

    def _refuse(self, method):
        raise NotImplementedError(f'{type(self).__name__} ({self.type!r}) does not support '
                                  f'{method}')

    def broadcast(self, key, value, out, priority=0):
        """Initialize `key` with `value` (rank 0's) and write it into every array of `out`."""
        self._refuse('broadcast')

    def pushpull(self, key, value, out=None, priority=0):
        """Push `value` (summed over its arrays and the workers) and pull the result into
        `out` (into `value` when `out` is None)."""
        self._refuse('pushpull')

    def set_optimizer(self, optimizer):
        """Run `optimizer` on the store's values when gradients are pushed."""
        self._refuse('set_optimizer')

    def is_capable(self, capability):
        """Whether the store supports `capability` (``KVStoreBase.OPTIMIZER``)."""
        self._refuse('is_capable')

    def save_optimizer_states(self, fname, dump_optimizer=False):
        """Write the optimizer's states (and with `dump_optimizer`, the optimizer)."""
        self._refuse('save_optimizer_states')

    def load_optimizer_states(self, fname):
        """Read what :meth:`save_optimizer_states` wrote."""
        self._refuse('load_optimizer_states')

    @property
    def type(self):
        """The store's type name."""
        return type(self).__name__.lower()

    @property
    def rank(self):
        """This worker's rank, in ``range(num_workers)``."""
        return 0

    @property
    def num_workers(self):
        """How many workers push to the store."""
        return 1


@KVStoreBase.register
class TestStore(KVStoreBase):
    """A store that only sums in this process, for testing custom-store plumbing (MXNet's
    ``teststore``): no optimizer, no initialization.

    >>> import ember as mx
    >>> kv = mx.kv.create('teststore')
    >>> a, b = mx.nd.ones((2,)), mx.nd.ones((2,)) * 2
    >>> kv.pushpull(0, [a, b])
    >>> a.asnumpy().tolist()
    [3.0, 3.0]
    """

    __test__ = False    # not a pytest test class

    def broadcast(self, key, value, out, priority=0):
        for target in _as_list(out):
            value.copyto(target)

    def pushpull(self, key, value, out=None, priority=0):
        outs = dict(key_value_pairs(key, value if out is None else out, 'output'))
        for k, values in key_value_pairs(key, value):
            total = values[0].copy() if len(values) == 1 else _sum_on(values,
                                                                       values[0].context)
            for target in outs[k]:
                total.copyto(target)

    def is_capable(self, capability):
        return _capability(capability, optimizer=False)

    @property
    def type(self):
        return 'teststore'


def _sum_on(values, device):
    total = values[0].as_in_context(device).copy()
    for value in values[1:]:
        total += value.as_in_context(device)
    return total


def _capability(capability, optimizer):
    if str(capability).lower() == KVStoreBase.OPTIMIZER:
        return optimizer
    raise ValueError(f'unknown capability {capability!r}: expected '
                     f'{KVStoreBase.OPTIMIZER!r}')


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def check_key_type(key):
    """`key` as an int or str; anything else is refused."""
    if isinstance(key, str):
        return key
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        return int(key)
    raise TypeError(f'kvstore key {key!r} ({type(key).__name__}): expected an int or a str')


def key_value_pairs(keys, values, what='value'):
    """``[(key, [arrays])]`` from a key or list of keys and their values, in first-seen order
    of the keys; arrays given for the same key in one call are grouped.

    >>> import ember as mx
    >>> a, b = mx.nd.ones((1,)), mx.nd.zeros((1,))
    >>> [(k, len(v)) for k, v in key_value_pairs([3, 'w'], [a, [a, b]])]
    [(3, 1), ('w', 2)]
    """
    if isinstance(keys, (list, tuple)):
        if not isinstance(values, (list, tuple)) or len(values) != len(keys):
            count = len(values) if isinstance(values, (list, tuple)) else 1
            raise ValueError(f'kvstore: {len(keys)} keys but {count} {what}s; give one '
                             f'{what} (an NDArray or a list of them) per key')
        pairs = [(check_key_type(k), _arrays(k, v, what)) for k, v in zip(keys, values)]
    else:
        pairs = [(check_key_type(keys), _arrays(keys, values, what))]
    grouped = {}
    for key, arrays in pairs:
        grouped.setdefault(key, []).extend(arrays)
    return list(grouped.items())


def _arrays(key, value, what):
    arrays = _as_list(value)
    if not arrays:
        raise ValueError(f'kvstore key {key!r}: the {what} list is empty')
    for array in arrays:
        if not isinstance(array, NDArray):
            raise TypeError(f'kvstore key {key!r}: each {what} must be an NDArray, got '
                            f'{type(array).__name__}')
    return arrays


def require(condition, message):
    if not condition:
        raise EmberError(message)


def pushpull_all(store, keys, values, out=None):
    """``store.pushpull`` of several keys: in one call where the store takes lists of keys,
    else one call per key (what a custom store written for MXNet expects)."""
    if store.takes_key_lists:
        store.pushpull(keys, values, out=out)
        return
    outs = values if out is None else out
    for key, value, target in zip(keys, values, outs):
        store.pushpull(key, value, out=target)
