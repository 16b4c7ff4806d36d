"""Updater: holds each weight's optimizer state and applies the optimizer (MXNet's ``Updater``).

States are saved without pickle: :meth:`Updater.get_states` writes MXNet's NDArray list format
(what ``mx.nd.save`` writes), one array per state named by its index and position in the
state's tuple (``'3'``, ``'3/0'``, ``'3/1'``), plus one uint8 array holding a JSON header that
records the structure of each state, the update counts and, with ``dump_optimizer``, the
optimizer's settings. Loading builds only registered optimizer classes and schedulers from
:mod:`ember.lr_scheduler`, so a states file cannot run code.
"""
from __future__ import annotations

import json

import numpy as np

from ember import lr_scheduler as _lr_scheduler
from ember import ndarray as nd
from ember.base import EmberError
from ember.ndarray import io as nd_io
from ember.optimizer.optimizer import Optimizer

__all__ = ['Updater', 'get_updater']

HEADER = '__ember_updater__'
FORMAT_VERSION = 1


class Updater:
    """Apply ``optimizer`` to weights by index, creating each weight's state on first use.

    Called with lists, it updates weights of one dtype and device in chunks of
    ``optimizer.aggregate_num`` (one optimizer call, and for SGD one operator, per chunk).

    >>> import ember as mx
    >>> updater = mx.optimizer.get_updater(mx.optimizer.SGD(learning_rate=0.5))
    >>> weights = [mx.nd.ones((2,)), mx.nd.ones((3,))]
    >>> grads = [mx.nd.ones((2,)), mx.nd.ones((3,))]
    >>> updater([0, 1], grads, weights)
    >>> weights[1].asnumpy()
    array([0.5, 0.5, 0.5], dtype=float32)
    >>> restored = mx.optimizer.get_updater(mx.optimizer.SGD())
    >>> restored.set_states(updater.get_states())
    >>> sorted(restored.states)
    [0, 1]
    """

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.states = {}
        self.states_synced = {}

    @property
    def aggregate_updates(self):
        # Follows the optimizer, which set_states or a Trainer may replace.
        return self.optimizer.aggregate_num > 0

    def __call__(self, index, grad, weight):
        if isinstance(index, (list, tuple)):
            indices, grads, weights = list(index), list(grad), list(weight)
        else:
            indices, grads, weights = [index], [grad], [weight]
        if len(grads) != len(indices) or len(weights) != len(indices):
            raise ValueError(f'Updater: got {len(indices)} indices, {len(grads)} gradients and '
                             f'{len(weights)} weights; expected one of each per weight')
        if not weights:
            return
        self.optimizer._set_current_context(weights[0].context.device_id)
        for idx, weight in zip(indices, weights):
            self._ensure_state(idx, weight)
        if self.aggregate_updates:
            self._update_aggregated(indices, grads, weights)
        else:
            for idx, grad, weight in zip(indices, grads, weights):
                self.optimizer.update_multi_precision(idx, weight, grad, self.states[idx])

    def _ensure_state(self, index, weight):
        if index not in self.states:
            self.states[index] = self.optimizer.create_state_multi_precision(index, weight)
            self.states_synced[index] = True
        elif not self.states_synced[index]:
            self.states[index] = self.sync_state_context(self.states[index], weight.context)
            self.states_synced[index] = True

    def _update_aggregated(self, indices, grads, weights):
        # One operator takes weights of one dtype and device only.
        groups = {}
        for idx, grad, weight in zip(indices, grads, weights):
            groups.setdefault((weight.dtype, weight.context), []).append((idx, weight, grad))
        size = self.optimizer.aggregate_num
        for members in groups.values():
            for start in range(0, len(members), size):
                chunk = members[start:start + size]
                chunk_indices = [idx for idx, _, _ in chunk]
                self.optimizer.update_multi_precision(
                    chunk_indices, [w for _, w, _ in chunk], [g for _, _, g in chunk],
                    [self.states[idx] for idx in chunk_indices])

    def sync_state_context(self, state, context):
        """``state`` (an NDArray or nested tuples and lists of them) moved to ``context``."""
        if isinstance(state, nd.NDArray):
            return state.as_in_context(context)
        if isinstance(state, (tuple, list)):
            return type(state)(self.sync_state_context(item, context) for item in state)
        return state

    def get_states(self, dump_optimizer=False):
        """The states as bytes in MXNet's NDArray list format (see the module docstring).

        With ``dump_optimizer`` the optimizer's settings (learning rate, scheduler, weight
        decay, ...) are saved too and :meth:`set_states` restores the optimizer from them.
        """
        arrays, entries = {}, []
        for index, state in self.states.items():
            entries.append([_encode_key(index), _flatten_state(_array_name(index), state,
                                                               arrays)])
        header = {'format': FORMAT_VERSION, 'states': entries,
                  'counts': _encode_counts(self.optimizer)}
        if dump_optimizer:
            header['optimizer'] = _encode_optimizer(self.optimizer)
        blob = json.dumps(header, allow_nan=True).encode('utf-8')
        arrays[HEADER] = np.frombuffer(blob, dtype=np.uint8).copy()
        return nd_io.dumps(arrays)

    def set_states(self, states):
        """Restore what :meth:`get_states` wrote (bytes).

        The arrays load on the current device and move to each weight's device at its next
        update. Without a saved optimizer, the update counts go to the current optimizer.
        """
        arrays, header = _read_states(states)
        restored = {}
        for key, tree in header['states']:
            restored[key] = _unflatten_state(tree, arrays)
        if 'optimizer' in header:
            self.optimizer = _decode_optimizer(header['optimizer'])
        _restore_counts(self.optimizer, header['counts'])
        self.states = restored
        self.states_synced = dict.fromkeys(restored, False)


def get_updater(optimizer):
    """An :class:`Updater` for ``optimizer`` (the function KVStore and Trainer call)."""
    return Updater(optimizer)


# ----------------------------------------------------------------------------------------------
# States: nested tuples and lists of NDArrays and None, flattened to named arrays.

def _array_name(index):
    name = str(index)
    if name == HEADER:
        raise EmberError(f'Updater: index {index!r} is reserved for the states header')
    return name


def _flatten_state(name, state, arrays):
    """A JSON tree describing ``state``; its arrays go into ``arrays`` under path names."""
    if state is None:
        return None
    if isinstance(state, nd.NDArray):
        if name in arrays:
            raise EmberError(f'Updater: two states map to the array name {name!r} (indices '
                             f'such as 3 and "3" cannot be saved together)')
        arrays[name] = state.asnumpy()
        return {'array': name}
    if isinstance(state, (tuple, list)):
        kind = 'tuple' if isinstance(state, tuple) else 'list'
        return {kind: [_flatten_state(f'{name}/{i}', item, arrays)
                       for i, item in enumerate(state)]}
    raise EmberError(f'Updater: cannot save a state of type {type(state).__name__} (state '
                     f'{name!r}); states are NDArrays, None, or tuples and lists of them')


def _unflatten_state(tree, arrays):
    if tree is None:
        return None
    if 'array' in tree:
        name = tree['array']
        if name not in arrays:
            raise EmberError(f'Updater states: the header names array {name!r}, which the '
                             f'file does not hold')
        return nd.array(arrays[name], dtype=arrays[name].dtype)
    kind, items = next(iter(tree.items()))
    values = [_unflatten_state(item, arrays) for item in items]
    return tuple(values) if kind == 'tuple' else values


def _read_states(states):
    if not isinstance(states, (bytes, bytearray, memoryview)):
        raise TypeError(f'set_states expects the bytes get_states returned, got '
                        f'{type(states).__name__}')
    arrays = nd_io.loads(states)
    if not isinstance(arrays, dict) or HEADER not in arrays:
        raise EmberError('set_states: these bytes are an NDArray list without the updater '
                         f'header {HEADER!r}; expected what Updater.get_states returns '
                         '(pickled MXNet states are not read)')
    header = json.loads(arrays.pop(HEADER).tobytes().decode('utf-8'))
    if header.get('format') != FORMAT_VERSION:
        raise EmberError(f'set_states: states format {header.get("format")!r}, expected '
                         f'{FORMAT_VERSION}')
    return arrays, header


# ----------------------------------------------------------------------------------------------
# Keys, update counts and optimizer settings as JSON.

def _encode_key(key):
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise EmberError(f'Updater: cannot save the state of index {key!r}; indices are ints '
                         f'or strs')
    return key


def _encode_counts(optimizer):
    per_device = [[device, [[_encode_key(k), n] for k, n in counts.items()]]
                  for device, counts in optimizer._all_index_update_counts.items()]
    return {'num_update': optimizer.num_update, 'per_device': per_device}


def _restore_counts(optimizer, counts):
    optimizer.num_update = counts['num_update']
    optimizer._all_index_update_counts = {
        device: dict(items) for device, items in counts['per_device']}
    optimizer._index_update_count = optimizer._all_index_update_counts.setdefault(0, {})


def _encode_optimizer(optimizer):
    name = type(optimizer).__name__.lower()
    if Optimizer.opt_registry.get(name) is not type(optimizer):
        raise EmberError(f'get_states(dump_optimizer=True): {type(optimizer).__name__} is not '
                         f'a registered optimizer, so it could not be rebuilt; register it '
                         f'with mx.optimizer.register')
    state = optimizer.__getstate__()
    skipped = ('_index_update_count', '_all_index_update_counts', 'num_update')
    attrs = {key: _encode_value(value, key) for key, value in state.items()
             if key not in skipped}
    return {'class': name, 'attrs': attrs}


def _decode_optimizer(encoded):
    klass = Optimizer.opt_registry.get(encoded['class'])
    if klass is None:
        raise EmberError(f'set_states: the saved optimizer {encoded["class"]!r} is not '
                         f'registered; register it before loading')
    optimizer = klass.__new__(klass)
    attrs = {key: _decode_value(value) for key, value in encoded['attrs'].items()}
    optimizer.__setstate__(attrs)
    return optimizer


def _encode_value(value, where):
    """JSON for plain values, tuples, dicts with any keys and learning-rate schedulers."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    if isinstance(value, list):
        return [_encode_value(item, where) for item in value]
    if isinstance(value, tuple):
        return {'tuple': [_encode_value(item, where) for item in value]}
    if isinstance(value, dict):
        return {'dict': [[_encode_value(k, where), _encode_value(v, where)]
                         for k, v in value.items()]}
    if isinstance(value, _lr_scheduler.LRScheduler):
        return {'lr_scheduler': _scheduler_name(value),
                'attrs': _encode_value(vars(value), where)}
    raise EmberError(f'get_states(dump_optimizer=True): optimizer attribute {where!r} holds '
                     f'a {type(value).__name__}, which cannot be saved; save without '
                     f'dump_optimizer')


def _scheduler_name(scheduler):
    name = type(scheduler).__name__
    if getattr(_lr_scheduler, name, None) is not type(scheduler):
        raise EmberError(f'get_states(dump_optimizer=True): lr_scheduler {name} is not one of '
                         f'ember.lr_scheduler\'s schedulers, so it could not be rebuilt')
    return name


def _decode_value(value):
    if isinstance(value, list):
        return [_decode_value(item) for item in value]
    if not isinstance(value, dict):
        return value
    if 'tuple' in value:
        return tuple(_decode_value(item) for item in value['tuple'])
    if 'dict' in value:
        return {_hashable(_decode_value(k)): _decode_value(v) for k, v in value['dict']}
    if 'lr_scheduler' in value:
        return _decode_scheduler(value)
    raise EmberError(f'set_states: unexpected value {value!r} in the saved optimizer')


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, list) else key


def _decode_scheduler(value):
    klass = getattr(_lr_scheduler, value['lr_scheduler'], None)
    if not (isinstance(klass, type) and issubclass(klass, _lr_scheduler.LRScheduler)):
        raise EmberError(f'set_states: {value["lr_scheduler"]!r} is not a scheduler of '
                         f'ember.lr_scheduler')
    scheduler = klass.__new__(klass)
    vars(scheduler).update(_decode_value(value['attrs']))
    return scheduler
