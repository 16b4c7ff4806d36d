"""The stores of one process: ``'local'``, ``'device'`` and ``'nccl'``.

Each key holds one stored array. A push sums the pushed arrays (a reducer of
:mod:`ember.kvstore.comm`); with an updater (``set_optimizer`` or ``_set_updater``) the sum
updates the stored array, ``updater(key, summed, stored)``, otherwise it replaces it. A pull
copies the stored array to every output. Every step is an engine operation: calls return at
once, and reading an output waits for what it depends on.

>>> import ember as mx
>>> kv = mx.kv.create('local')
>>> kv.init(3, mx.nd.ones((2, 3)))
>>> kv.push(3, [mx.nd.ones((2, 3)) * 2, mx.nd.ones((2, 3)) * 4])
>>> out = mx.nd.zeros((2, 3))
>>> kv.pull(3, out=out)
>>> out.asnumpy()[0].tolist()
[6.0, 6.0, 6.0]
"""
from __future__ import annotations

import numpy as np

from ember import backend
from ember import ndarray as nd
from ember import optimizer as opt
from ember.base import EmberError
from ember.device import cpu
from ember.kvstore import comm
from ember.kvstore.base import KVStoreBase, _capability, key_value_pairs
from ember.kvstore.compression import GradientCompression, parse_params
from ember.ndarray import sparse

__all__ = ['KVStoreLocal', 'KVStoreNCCL']


class KVStoreLocal(KVStoreBase):
    """A store in this process: ``'local'`` sums on the CPU, ``'device'`` on the devices."""

    takes_key_lists = True

    def __init__(self, kind='local'):
        self._kind = kind
        self._store = {}
        self._key_type = None
        self._updater = None
        self._compression = None
        self._reducer = comm.make_reducer(self._reducer_kind())

    def _reducer_kind(self):
        return 'local' if self._kind == 'local' else 'device'

    # -- identity ---------------------------------------------------------------------------
    @property
    def type(self):
        return self._kind

    @property
    def rank(self):
        return 0

    @property
    def num_workers(self):
        return 1

    def is_capable(self, capability):
        return _capability(capability, optimizer=True)

    # -- keys ---------------------------------------------------------------------------------
    def _pairs(self, key, value, what):
        pairs = key_value_pairs(key, value, what)
        for k, _ in pairs:
            kind = type(k)
            if self._key_type is None:
                self._key_type = kind
            elif kind is not self._key_type:
                raise EmberError(f'kvstore key {k!r}: this store uses '
                                 f'{self._key_type.__name__} keys; mixed key types are not '
                                 f'allowed')
        return pairs

    def _stored(self, key, what):
        stored = self._store.get(key)
        if stored is None:
            raise EmberError(f'kvstore {what} of key {key!r}: the key has not been '
                             f'initialized; call init({key!r}, value) first')
        return stored

    def _check_shapes(self, key, stored, arrays, what):
        for array in arrays:
            if array.shape != stored.shape:
                raise EmberError(f'kvstore {what} of key {key!r}: shape {array.shape} does '
                                 f'not match the shape {stored.shape} it was initialized with')

    # -- the API --------------------------------------------------------------------------------
    def init(self, key, value):
        """Store the initial value of each key (once per key).

        >>> import ember as mx
        >>> kv = mx.kv.create('device')
        >>> kv.init(['a', 'b'], [mx.nd.zeros((2,)), mx.nd.ones((3,))])
        """
        for k, arrays in self._pairs(key, value, 'value'):
            if k in self._store:
                raise EmberError(f'kvstore init of key {k!r}: the key is already '
                                 f'initialized (init and broadcast take a key once)')
            self._store[k] = arrays[0].copyto(self._home(arrays[0]))

    def _home(self, array):
        return cpu(0) if self._kind == 'local' else array.context

    def push(self, key, value, priority=0):
        """Sum the arrays pushed for each key and update (or replace) its stored value."""
        for k, arrays in self._pairs(key, value, 'value'):
            stored = self._stored(k, 'push')
            self._check_shapes(k, stored, arrays, 'push')
            merged = self._reducer.reduce(k, arrays, priority)
            self._apply(k, merged, priority)

    def _apply(self, key, merged, priority):
        stored = self._store[key]
        if self._updater is None:
            merged.copyto(stored)
            return
        if stored.context != merged.context:
            stored = self._store[key] = stored.copyto(merged.context)
        self._updater(key, merged, stored)

    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        """Copy each key's stored value into its outputs."""
        if out is None:
            raise ValueError('kvstore pull: out is required (an NDArray or a list of them)')
        for k, outs in self._pairs(key, out, 'output'):
            stored = self._stored(k, 'pull')
            self._check_shapes(k, stored, outs, 'pull')
            self._reducer.broadcast(k, stored, outs, priority)

    def pushpull(self, key, value, out=None, priority=0):
        """Push `value`, then pull into `out` (into `value` when `out` is None).

        >>> import ember as mx
        >>> kv = mx.kv.create('device')
        >>> kv.init(0, mx.nd.zeros((2,)))
        >>> grads = [mx.nd.ones((2,), ctx=mx.cpu(i)) * (i + 1) for i in range(2)]
        >>> kv.pushpull(0, grads)
        >>> [g.asnumpy().tolist() for g in grads]
        [[3.0, 3.0], [3.0, 3.0]]
        """
        self.push(key, value, priority)
        self.pull(key, value if out is None else out, priority)

    def broadcast(self, key, value, out, priority=0):
        """Initialize each key with `value` and pull it into `out`."""
        self.init(key, value)
        self.pull(key, out, priority)

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """Pull only the rows `row_ids` of each key into row-sparse outputs: the cost is the
        rows pulled, not the key's size."""
        outs_by_key = self._pairs(key, out, 'output')
        for (k, outs), rows in row_sparse_requests(outs_by_key, out, row_ids):
            stored = self._stored(k, 'row_sparse_pull')
            for target, row in zip(outs, rows):
                retain_rows(stored, row, target)

    # -- optimizer ------------------------------------------------------------------------------
    def set_optimizer(self, optimizer):
        """Update stored values with `optimizer` on every push."""
        self._set_updater(opt.get_updater(optimizer))

    def _set_updater(self, updater):
        """Call ``updater(key, summed, stored)`` on every push instead of replacing."""
        if not callable(updater):
            raise TypeError(f'kvstore updater {updater!r}: expected a callable '
                            f'updater(key, input, stored)')
        self._updater = updater

    set_updater = _set_updater

    def _optimizer_updater(self, what):
        if not isinstance(self._updater, opt.Updater):
            raise EmberError(f'kvstore {what}: this store runs no optimizer; call '
                             f'set_optimizer first')
        return self._updater

    def save_optimizer_states(self, fname, dump_optimizer=False):
        """Write the optimizer's states to `fname` (with the optimizer: `dump_optimizer`)."""
        blob = self._optimizer_updater('save_optimizer_states').get_states(dump_optimizer)
        with open(fname, 'wb') as stream:
            stream.write(blob)

    def load_optimizer_states(self, fname):
        """Read states that :meth:`save_optimizer_states` wrote."""
        updater = self._optimizer_updater('load_optimizer_states')
        with open(fname, 'rb') as stream:
            updater.set_states(stream.read())

    # -- compression and synchronisation -------------------------------------------------------
    def set_gradient_compression(self, compression_params):
        """Compress pushed gradients to 2 bits with error feedback (``'device'`` stores).

        >>> import ember as mx
        >>> kv = mx.kv.create('device')
        >>> kv.set_gradient_compression({'type': '2bit', 'threshold': 0.5})
        """
        if 'device' not in self._kind:
            raise EmberError(f"gradient compression is not supported by the {self._kind!r} "
                             f"store; use 'device' or a 'dist' store")
        kind, threshold = parse_params(compression_params)
        gc = GradientCompression(compression_params) if kind == '2bit' else None
        self._compression = gc
        self._reducer.compression = gc

    def barrier(self):
        """Wait for all workers: one worker here, so it returns at once."""

    _barrier = barrier


class KVStoreNCCL(KVStoreLocal):
    """``'nccl'``: the device reduction across GPUs; refused where there are none."""

    def __init__(self):
        count = backend.num_gpus()
        if count == 0:
            raise EmberError("kvstore 'nccl' reduces across GPUs and needs at least one; "
                             "this machine has none (no CUDA device through CuPy). On CPU "
                             "contexts use 'device' or 'local'")
        super().__init__('nccl')


def row_sparse_requests(outs_by_key, out, row_ids):
    """((key, outputs), row ids per output) for each key of a row_sparse_pull. As in MXNet,
    `row_ids` is one array for every output, or a list with one per output (across all
    keys, in order), or one entry per key (an array or a list for that key's outputs)."""
    if out is None or row_ids is None:
        raise ValueError('row_sparse_pull: out and row_ids are required')
    counts = [len(outs) for _, outs in outs_by_key]
    if not isinstance(row_ids, (list, tuple)):
        per_key = [[row_ids] * n for n in counts]
    elif len(row_ids) == sum(counts):
        starts = np.cumsum([0] + counts)
        per_key = [list(row_ids[a:b]) for a, b in zip(starts[:-1], starts[1:])]
    elif len(row_ids) == len(counts):
        per_key = [list(r) if isinstance(r, (list, tuple)) else [r] * n
                   for r, n in zip(row_ids, counts)]
    else:
        raise ValueError(f'row_sparse_pull: {len(row_ids)} row_ids for {len(counts)} keys '
                         f'with {sum(counts)} outputs; give one, one per key or one per output')
    for rows, n in zip(per_key, counts):
        if len(rows) != n:
            raise ValueError(f'row_sparse_pull: {len(rows)} row_ids for {n} outputs of a key')
    return zip(outs_by_key, per_key)


def retain_rows(value, row_ids, target):
    """Copy the rows `row_ids` (any order, repeats allowed) of `value` into `target`, a
    row-sparse array of value's shape (or a dense one, which gets zeros elsewhere); its
    cost is the rows asked for."""
    ids = np.unique(np.asarray(row_ids.asnumpy() if hasattr(row_ids, 'asnumpy') else row_ids,
                               dtype=np.int64))
    if ids.size and (ids[0] < 0 or ids[-1] >= value.shape[0]):
        raise IndexError(f'row_sparse_pull: row ids {ids.tolist()} outside 0..'
                         f'{value.shape[0] - 1}')
    if tuple(target.shape) != tuple(value.shape):
        raise ValueError(f'row_sparse_pull: output shape {tuple(target.shape)} differs from '
                         f"the key's {tuple(value.shape)}")
    sparse.retain(value, nd.array(ids, ctx=value.context, dtype='int64')).copyto(target)
