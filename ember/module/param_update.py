"""How a module applies its optimizer across devices and workers (MXNet 1.x's
``model._create_kvstore``, ``_initialize_kvstore`` and ``_update_params*``).

:func:`create_kvstore` (``ember.kvstore.create_kvstore``) decides: no store for one device in
one process; otherwise a KVStore, with the optimizer on the store (``update_on_kvstore``) when
``MXNET_UPDATE_ON_KVSTORE`` and the store allow it.

- No store: each device's copy of a weight is updated with its own gradient; the updater keys
  states by ``index * num_device + k``.
- A store without the optimizer: the gradients are all-reduced through it (summed over the
  devices and workers, back into every device's gradient), then each copy is updated as above,
  so the copies stay equal.
- A store with the optimizer: the gradients are pushed, the store updates its copy, and every
  device pulls the weights back.

Gradients go to the store in one call, last parameter first, which is the order backward
writes them: a distributed store all-reduces them in buckets (``BUCKET_CAP_MB``) that start as
soon as their gradients are written.

>>> import ember as mx
>>> create_kvstore('local', 1, {})
(None, False)
>>> kv, on_store = create_kvstore('local', 2, {'w': mx.nd.zeros((2,))})
>>> kv.type, on_store
('local', True)
"""
from __future__ import annotations

from ember.kvstore import create_kvstore, pushpull_all

__all__ = ['create_kvstore', 'initialize_kvstore', 'update_params', 'update_params_on_kvstore']


def initialize_kvstore(kvstore, param_arrays, arg_params, param_names, update_on_kvstore):
    """Put each parameter into the store; when the store runs the optimizer, also broadcast
    its value (rank 0's) to every device."""
    for index, on_devices in enumerate(param_arrays):
        name = param_names[index]
        if update_on_kvstore:
            kvstore.broadcast(name, arg_params[name], out=on_devices)
        else:
            kvstore.init(name, arg_params[name])


def _with_gradients(param_arrays, grad_arrays, param_names):
    """(name, weights, gradients) of the parameters that have gradients, last first."""
    chosen = [(param_names[i], weights, grads)
              for i, (weights, grads) in enumerate(zip(param_arrays, grad_arrays))
              if grads[0] is not None]
    return chosen[::-1]


def update_params_on_kvstore(param_arrays, grad_arrays, kvstore, param_names):
    """Push the gradients to the store, which updates the weights; pull the weights back."""
    chosen = _with_gradients(param_arrays, grad_arrays, param_names)
    if chosen:
        names, weights, grads = map(list, zip(*chosen))
        pushpull_all(kvstore, names, grads, out=weights)


def update_params(param_arrays, grad_arrays, updater, num_device, kvstore=None,
                  param_names=None):
    """All-reduce the gradients through `kvstore` (when there is one), then update every
    device's copy of each weight, one updater call per device."""
    if kvstore is not None:
        chosen = _with_gradients(param_arrays, grad_arrays, param_names)
        if chosen:
            names, _, grads = map(list, zip(*chosen))
            pushpull_all(kvstore, names, grads)
    per_device = [[] for _ in range(num_device)]
    for index, (weights, grads) in enumerate(zip(param_arrays, grad_arrays)):
        if grads[0] is None:
            continue
        for k, (weight, grad) in enumerate(zip(weights, grads)):
            per_device[k].append((index * num_device + k, grad, weight))
    for updates in per_device:
        if updates:
            indices, grads, weights = zip(*updates)
            updater(list(indices), list(grads), list(weights))
