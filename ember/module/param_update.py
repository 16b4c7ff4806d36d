"""How a module applies its optimizer across devices (MXNet 1.x's ``model._update_params*``).

Three ways, chosen by :func:`create_kvstore`:

- one device, or ``kvstore=None``: each device's copy of a weight is updated with its own
  gradient; the updater keys states by ``index * num_device + k``.
- ``'local'``/``'device'`` on several devices: the gradients are summed across devices first
  (what MXNet's local KVStore push/pull does), written back to every device, then each copy is
  updated as above, so the copies stay equal. The sum runs here, on the first device, rather
  than through a KVStore object: in one process it is the same arithmetic.
- a KVStore object, or a ``dist_*`` name (``ember.kvstore.create``): MXNet's protocol,
  ``init``/``push``/``pull``, with the optimizer running on the store when
  ``update_on_kvstore``.

>>> import ember as mx
>>> create_kvstore('local', 1, {})
(None, False)
>>> create_kvstore('local', 2, {})
('local', False)
"""
from __future__ import annotations

from ember import ndarray as nd
from ember.base import EmberError, prod

__all__ = ['create_kvstore', 'initialize_kvstore', 'update_params', 'update_params_on_kvstore',
           'LOCAL_REDUCTIONS']

LOCAL_REDUCTIONS = ('local', 'device')
# MXNet updates on the store unless a weight is this big (then the workers update their copies).
_BIG_WEIGHT = 1024 * 1024 * 16


def _is_kvstore(obj):
    return all(hasattr(obj, name) for name in ('init', 'push', 'pull', 'set_optimizer'))


def create_kvstore(kvstore, num_device, arg_params):
    """(kvstore, update_on_kvstore): None, a local reduction name ('local', 'device') or a
    KVStore object, and whether the optimizer runs on the store."""
    if kvstore is None:
        return None, False
    if _is_kvstore(kvstore):
        return kvstore, True
    if not isinstance(kvstore, str):
        raise TypeError(f'kvstore {kvstore!r}: expected a KVStore, a name (local, device, '
                        f'dist_sync, ...) or None')
    if 'dist' not in kvstore:
        if kvstore not in LOCAL_REDUCTIONS:
            raise ValueError(f'kvstore {kvstore!r}: expected local, device, a dist_* name or '
                             f'None')
        return (None if num_device == 1 else kvstore), False
    store = _create_distributed(kvstore)
    biggest = max((prod(p.shape) for p in arg_params.values()), default=0)
    return store, biggest <= _BIG_WEIGHT


def _create_distributed(name):
    try:
        from ember import kvstore as kvs
    except ImportError as exc:
        raise EmberError(f'kvstore {name!r} needs ember.kvstore, which is not available '
                         f'({exc}); use kvstore="local" on one machine') from None
    return kvs.create(name)


def initialize_kvstore(kvstore, param_arrays, arg_params, param_names, update_on_kvstore):
    """Put each parameter into the store (and, when it updates them, pull it to the devices)."""
    for index, on_devices in enumerate(param_arrays):
        name = param_names[index]
        kvstore.init(name, arg_params[name])
        if update_on_kvstore:
            kvstore.pull(name, on_devices, priority=-index)


def update_params_on_kvstore(param_arrays, grad_arrays, kvstore, param_names):
    """Push the gradients to the store, which updates the weights; pull the weights back."""
    for index, (weights, grads) in enumerate(zip(param_arrays, grad_arrays)):
        if grads[0] is None:
            continue
        name = param_names[index]
        kvstore.push(name, grads, priority=-index)
        kvstore.pull(name, weights, priority=-index)


def update_params(param_arrays, grad_arrays, updater, num_device, kvstore=None,
                  param_names=None):
    """Reduce the gradients across devices (per `kvstore`), then update every device's copy
    of each weight, one updater call per device."""
    per_device = [[] for _ in range(num_device)]
    for index, (weights, grads) in enumerate(zip(param_arrays, grad_arrays)):
        if grads[0] is None:
            continue
        _reduce(kvstore, grads, param_names[index] if param_names else index, index)
        for k, (weight, grad) in enumerate(zip(weights, grads)):
            per_device[k].append((index * num_device + k, grad, weight))
    for updates in per_device:
        if updates:
            indices, grads, weights = zip(*updates)
            updater(list(indices), list(grads), list(weights))


def _reduce(kvstore, grads, name, index):
    if kvstore is None or len(grads) == 1 and isinstance(kvstore, str):
        return
    if isinstance(kvstore, str):
        total = nd.add_n(*[g.as_in_context(grads[0].context) for g in grads])
        for grad in grads:
            total.copyto(grad)
        return
    kvstore.push(name, grads, priority=-index)
    kvstore.pull(name, grads, priority=-index)
