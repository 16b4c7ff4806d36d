"""Reductions across the devices of one process: the arithmetic of the local stores.

A reducer sums a key's arrays from several devices into a merge buffer and copies a value back
out to several devices, each step one engine operation ordered by the arrays' variables, so
that a reduction starts as soon as its inputs are written and never blocks the caller.

- :class:`CPUReducer` (``'local'``): the sum lands on ``cpu(0)``.
- :class:`DeviceReducer` (``'device'``): each key's sum lands on one of its devices, the keys
  spread over the devices by size, so no device does all the work; with 2-bit compression each
  device quantizes its array (keeping its residual) and the merge device dequantizes and sums.
- :class:`TreeReducer` (``'device'`` with ``MXNET_KVSTORE_USETREE``): sums along the trees of
  :mod:`ember.kvstore.tree`, level by level; arrays of at least
  ``MXNET_KVSTORE_TREE_ARRAY_BOUND`` elements are cut into one slice per tree.

CPU contexts share memory, so a sum on the CPU reads every context's array in place. An array
of at least ``MXNET_KVSTORE_BIGARRAY_BOUND`` elements is summed by
``MXNET_KVSTORE_REDUCTION_NTHREADS`` threads, each over its own range of elements.
"""
from __future__ import annotations

import threading
from queue import SimpleQueue

import numpy as np

from ember import config, engine
from ember import ndarray as nd
from ember.device import cpu
from ember.kvstore import tree as _tree

__all__ = ['CPUReducer', 'DeviceReducer', 'TreeReducer', 'make_reducer', 'sum_into',
           'reduction_ranges']

_PRIORITY_NAME = 'kvstore'


def reduction_ranges(size):
    """Element ranges that separate threads sum: one range below
    ``MXNET_KVSTORE_BIGARRAY_BOUND``, else ``MXNET_KVSTORE_REDUCTION_NTHREADS`` ranges."""
    if size < config.get('MXNET_KVSTORE_BIGARRAY_BOUND'):
        return [(0, size)]
    return _tree.slices_for_trees(size, config.get('MXNET_KVSTORE_REDUCTION_NTHREADS'))


class _Team:
    """Threads that each sum their own range of a big array: thread i always takes range i,
    so a reduction split n ways runs on n threads."""

    def __init__(self, size):
        self.queues = [SimpleQueue() for _ in range(size)]
        for index, queue in enumerate(self.queues):
            threading.Thread(target=self._work, args=(queue,), daemon=True,
                             name=f'ember-kv-reduce-{index}').start()

    @staticmethod
    def _work(queue):
        while True:
            task, done = queue.get()
            try:
                task()
                done.put(None)
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                done.put(error)

    def run(self, tasks):
        done = SimpleQueue()
        for queue, task in zip(self.queues, tasks):
            queue.put((task, done))
        errors = [done.get() for _ in tasks]
        for error in errors:
            if error is not None:
                raise error


_teams: dict = {}
_teams_lock = threading.Lock()


def _team(size):
    with _teams_lock:
        if size not in _teams:
            _teams[size] = _Team(size)
        return _teams[size]


def sum_into(out, sources):
    """out = sum(sources), raw arrays of one size; ranges of big arrays on separate threads."""
    ranges = reduction_ranges(out.size)
    if len(ranges) == 1:
        _sum_range(out, sources, 0, out.size)
        return
    _team(len(ranges)).run([lambda b=begin, e=end: _sum_range(out, sources, b, e)
                            for begin, end in ranges])


def _sum_range(out, sources, begin, end):
    """Sum elements [begin, end) of every source into out (which may be one of them)."""
    target = out.reshape(-1)[begin:end]
    flats = [source.reshape(-1)[begin:end] for source in sources]
    if len(flats) == 1:
        target[...] = flats[0]
        return
    np.add(flats[0], flats[1], out=target)
    for flat in flats[2:]:
        target += flat


def push_sum(out, sources, priority=0, name='kvstore_reduce'):
    """Push ``out = sum(sources)`` (NDArrays) to the engine on out's device."""
    if any(s.context.device_type == 'gpu' for s in sources) or out.context.device_type == 'gpu':
        moved = [s.as_in_context(out.context) for s in sources]
        nd.add_n(*moved, out=out)
        return

    def run():
        sum_into(out._data(), [s._data() for s in sources])
    engine.get().push(run, [s._var for s in sources], [out._var], out.context, priority, name)


def push_copies(source, outs, priority=0):
    """Copy `source` into every array of `outs` (skipping `source` itself)."""
    for out in outs:
        if out is not source:
            source.copyto(out)


class CPUReducer:
    """Sums on ``cpu(0)``; one array is its own sum."""

    def __init__(self, compression=None):
        self.compression = compression
        self._buffers = {}

    def merge_device(self, key, values):
        return cpu(0)

    def reduce(self, key, values, priority=0):
        """The sum of `values` (NDArrays of one shape), as an NDArray."""
        if len(values) == 1 and self.compression is None:
            return values[0]
        device = self.merge_device(key, values)
        merged = self._buffer(('merged', key), values[0], device)
        if self.compression is not None:
            return self._reduce_compressed(key, values, merged, priority)
        push_sum(merged, values, priority)
        return merged

    def broadcast(self, key, source, outs, priority=0):
        push_copies(source, outs, priority)

    def _buffer(self, name, like, device):
        found = self._buffers.get(name)
        if found is None or found.shape != like.shape or found.context != device:
            found = self._buffers[name] = nd.empty(like.shape, device, like.dtype)
        return found

    def _reduce_compressed(self, key, values, merged, priority):
        """Each value quantized on its device with its own residual; summed dequantized."""
        packed = [self._quantize(key, i, value, priority) for i, value in enumerate(values)]
        gc, size = self.compression, merged.size

        def run():
            parts = [gc.dequantize(p._data(), size) for p in packed]
            sum_into(merged._data(), [part.reshape(merged.shape) for part in parts])
        engine.get().push(run, [p._var for p in packed], [merged._var], merged.context,
                          priority, 'kvstore_dequantize')
        return merged

    def _quantize(self, key, index, value, priority):
        gc = self.compression
        residual = self._residual(key, index, value)
        packed = self._buffer(('packed', key, index), _flat_like(value, gc), value.context)

        def run():
            packed._data()[...] = gc.quantize(value._data(), residual._data())
        engine.get().push(run, [value._var], [residual._var, packed._var], value.context,
                          priority, 'kvstore_quantize')
        return packed

    def _residual(self, key, index, value):
        name = ('residual', key, index)
        if name not in self._buffers:
            self._buffers[name] = nd.zeros(value.shape, ctx=value.context, dtype=value.dtype)
        return self._buffers[name]


def _flat_like(value, gc):
    return nd.empty((gc.compressed_size(value.size),), value.context, np.float32)


class DeviceReducer(CPUReducer):
    """Sums on one of the key's devices, the keys spread over the devices by bytes."""

    def __init__(self, compression=None):
        super().__init__(compression)
        self._merge_devices = {}
        self._load = {}

    def merge_device(self, key, values):
        device = self._merge_devices.get(key)
        if device is None:
            candidates = list(dict.fromkeys(v.context for v in values))
            device = min(candidates, key=lambda d: (self._load.get(d, 0), candidates.index(d)))
            self._load[device] = self._load.get(device, 0) + values[0].size
            self._merge_devices[key] = device
        return device


class TreeReducer(DeviceReducer):
    """Sums and broadcasts along trees over the link topology of the key's devices."""

    def __init__(self, compression=None):
        super().__init__(compression)
        self._trees = {}

    def trees(self, devices):
        devices = tuple(devices)
        if devices not in self._trees:
            self._trees[devices] = _tree.trees_for(devices)
        return self._trees[devices]

    def reduce(self, key, values, priority=0):
        devices = [v.context for v in values]
        if len(set(devices)) != len(devices) or len(values) == 1 or self.compression:
            return super().reduce(key, values, priority)
        device = self.merge_device(key, values)
        merged = self._buffer(('merged', key), values[0], device)
        for tree, (begin, end) in self._plan(key, devices, values[0].size):
            self._reduce_along(key, tree, values, merged, begin, end, priority)
        return merged

    def broadcast(self, key, source, outs, priority=0):
        devices = [out.context for out in outs]
        if len(set(devices)) != len(devices) or len(outs) == 1:
            return super().broadcast(key, source, outs, priority)
        for tree, (begin, end) in self._plan(key, devices, source.size):
            self._broadcast_along(tree, source, outs, begin, end)

    def _plan(self, key, devices, size):
        """(tree, element range) pairs: the tree of the key's merge device, or one slice per
        tree for big arrays."""
        trees = self.trees(devices)
        if size >= config.get('MXNET_KVSTORE_TREE_ARRAY_BOUND'):
            return list(zip(trees, _tree.slices_for_trees(size, len(trees))))
        root = devices.index(self._merge_devices.get(key, devices[0]))
        return [(trees[root], (0, size))]

    def _reduce_along(self, key, tree, values, merged, begin, end, priority):
        partial = {}        # device index -> NDArray slice holding its subtree's sum so far
        for level in reversed(tree.levels):
            for parent, child in level:
                target = self._partial_buffer(key, parent, values[parent], begin, end)
                sources = [partial.get(parent, _flat(values[parent], begin, end)),
                           partial.get(child, _flat(values[child], begin, end))]
                push_sum(target, sources, priority, 'kvstore_tree_reduce')
                partial[parent] = target
        result = partial.get(tree.root, _flat(values[tree.root], begin, end))
        result.copyto(_flat(merged, begin, end))

    def _partial_buffer(self, key, index, like, begin, end):
        return _flat(self._buffer(('partial', key, index), like, like.context), begin, end)

    def _broadcast_along(self, tree, source, outs, begin, end):
        _flat(source, begin, end).copyto(_flat(outs[tree.root], begin, end))
        for level in tree.levels:
            for parent, child in level:
                _flat(outs[parent], begin, end).copyto(_flat(outs[child], begin, end))


def _flat(array, begin, end):
    """Elements [begin, end) of `array` as a 1-D view (shares its storage and variable)."""
    flat = array.reshape((-1,))
    if begin == 0 and end == array.size:
        return flat
    return flat[begin:end]


def make_reducer(kind, compression=None):
    """The reducer of a store type: 'local' sums on the CPU, 'device' on the devices (along
    trees with ``MXNET_KVSTORE_USETREE``)."""
    if kind == 'local':
        return CPUReducer(compression)
    if config.get('MXNET_KVSTORE_USETREE'):
        return TreeReducer(compression)
    return DeviceReducer(compression)
