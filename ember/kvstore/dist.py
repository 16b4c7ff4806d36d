"""The distributed stores over MPI: ``'dist_sync'``, ``'dist_device_sync'``, ``'dist_async'``.

Every rank is a worker and also the server of a share of the keys. A key smaller than
``MXNET_KVSTORE_BIGARRAY_BOUND`` elements lives whole on one rank (the one with the fewest
elements so far, decided the same way on every rank in init order); a bigger one is sliced
across all ranks, rank r serving slice r. Inside a rank, the arrays of a key on several
devices are summed first (on the CPU for ``dist_sync``, on the devices for
``dist_device_sync``).

Synchronous stores move data with collectives (:mod:`ember.kvstore.mpi`):

- push: the ranks' sums meet on the key's servers (``Reduce`` to the owner, ``Reduce_scatter``
  over the slices); each server then updates its part with the optimizer
  (``set_optimizer``), or stores the sum. With 2-bit compression the workers send their
  quantized arrays (each keeping its residual) and the servers dequantize and sum.
- pull: the servers' parts go to every rank (``Bcast``, ``Allgatherv``).
- pushpull without an optimizer on the store is an all-reduce. Keys pushed in one call go in
  buckets of at most ``BUCKET_CAP_MB`` in the order given (the Trainer gives the last
  parameter first, the order backward writes gradients), a bigger key alone; each bucket is
  one engine operation that starts as soon as its arrays are written, so the first buckets
  are reduced while backward computes the rest. Small keys of a bucket are packed into one
  all-reduce. No copy of the sum is made for the store: a later pull takes it from the array
  it landed in, which works while nothing has written that array since (else the pull is an
  error on every rank, saying so), and keeps the all-reduce as fast as MPI's own.

``dist_async`` sends each push to its servers, which apply it as it arrives, and a pull asks
the servers for their current values; a thread per rank serves its keys.
"""
from __future__ import annotations

import functools
import threading
import time

import numpy as np

from ember import config, engine
from ember import ndarray as nd
from ember import optimizer as opt
from ember.base import EmberError
from ember.device import cpu
from ember.kvstore import comm
from ember.kvstore import mpi as _mpi
from ember.kvstore.base import KVStoreBase, _capability, key_value_pairs
from ember.kvstore.compression import GradientCompression, parse_params
from ember.kvstore.local import retain_rows, row_sparse_requests
from ember.kvstore.mpi import Step
from ember.kvstore.tree import slices_for_trees

__all__ = ['KVStoreDist', 'plan_buckets', 'MPI_DTYPES']

MPI_DTYPES = ('float32', 'float64', 'int32', 'int64')
_PRIORITY = 1
# Keys below this many bytes share one all-reduce inside a bucket; larger ones go in place.
_PACK_BYTES = 256 * 1024
_PUSH, _PULL, _REPLY, _FLUSH, _ACK = range(5)
_KINDS = 8


def plan_buckets(sizes, cap_bytes):
    """Group consecutive items of `sizes` (bytes each, in reduction order) into buckets of at
    most `cap_bytes`; an item bigger than the cap goes alone. Returns lists of indices.

    >>> plan_buckets([4, 4, 4, 10, 2], 8)
    [[0, 1], [2], [3], [4]]
    """
    buckets, current, filled = [], [], 0
    for index, size in enumerate(sizes):
        if current and filled + size > cap_bytes:
            buckets.append(current)
            current, filled = [], 0
        current.append(index)
        filled += size
    if current:
        buckets.append(current)
    return buckets


class _Key:
    """Where one key lives: its servers' element ranges and this rank's part."""

    def __init__(self, ident, name, shape, dtype, shards, rank):
        self.id, self.name = ident, name
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.dtype_name = self.dtype.name
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.shards = shards                    # [(rank, begin, end)]
        mine = [(begin, end) for owner, begin, end in shards if owner == rank]
        self.part = mine[0] if mine else None
        whole = len(shards) == 1
        part_shape = self.shape if whole else ((mine[0][1] - mine[0][0],) if mine else ())
        self.stored = nd.zeros(part_shape, ctx=cpu(0), dtype=self.dtype) if mine else None
        self.received = None                    # the summed push before the optimizer runs
        # After an all-reduce (pushpull without an optimizer) the sum lives in the array it
        # was reduced into; the stored part is copied from there only when read, if that
        # array still holds it (its variable at latest_version).
        self.latest = None
        self.latest_version = None

    @property
    def sliced(self):
        return len(self.shards) > 1

    def counts(self):
        return [end - begin for _, begin, end in self.shards]

    def step(self, op, problem=''):
        return Step(op, self.name, self.size, self.dtype.name, self.shape, problem)


class KVStoreDist(KVStoreBase):
    """A store shared by the MPI ranks (see the module docstring)."""

    takes_key_lists = True

    def __init__(self, kind):
        self._kind = kind
        self._world = _mpi.world()
        self._reducer = comm.make_reducer('device' if 'device' in kind else 'local')
        self._keys = {}
        self._key_type = None
        self._load = [0] * self._world.size
        self._updater = None
        self._compression = None
        self._residuals = {}
        self._server = _AsyncServer(self) if 'async' in kind else None
        self._plans = {}            # _plan_signature -> (the arrays, pushpull's buckets)

    # -- identity ---------------------------------------------------------------------------
    @property
    def type(self):
        return self._kind

    @property
    def rank(self):
        return self._world.rank

    @property
    def num_workers(self):
        return self._world.size

    def is_capable(self, capability):
        return _capability(capability, optimizer=True)

    # -- keys ---------------------------------------------------------------------------------
    def _pairs(self, key, value, what):
        pairs = key_value_pairs(key, value, what)
        for k, _ in pairs:
            if self._key_type is None:
                self._key_type = type(k)
            elif type(k) is not self._key_type:
                raise EmberError(f'kvstore key {k!r}: this store uses '
                                 f'{self._key_type.__name__} keys; mixed key types are not '
                                 f'allowed')
        return pairs

    def _info(self, key, what, arrays=()):
        info = self._keys.get(key)
        if info is None:
            raise EmberError(f'kvstore {what} of key {key!r} on rank {self.rank}: the key has '
                             f'not been initialized; call init({key!r}, value) first')
        for array in arrays:
            if array.shape != info.shape:
                raise EmberError(f'kvstore {what} of key {key!r} on rank {self.rank}: shape '
                                 f'{array.shape} does not match the shape {info.shape} it was '
                                 f'initialized with')
        return info

    def _place(self, size):
        ranks = self._world.size
        if ranks > 1 and size >= config.get('MXNET_KVSTORE_BIGARRAY_BOUND'):
            return [(r, b, e) for r, (b, e) in enumerate(slices_for_trees(size, ranks))]
        owner = min(range(ranks), key=lambda r: (self._load[r], r))
        self._load[owner] += size
        return [(owner, 0, size)]

    def _materialize(self, info):
        """Copy the last all-reduced sum into this rank's stored part, before a pull or an
        optimizer reads it. Returns why it cannot ('' when it can): the collective then
        carries the reason, so that every rank raises it instead of waiting for this one."""
        latest = info.latest
        if latest is None:
            return ''
        info.latest = None
        eng = engine.get()
        if eng.settled_versions([latest._var]) is None:
            eng.wait_for_var(latest._var)
        if latest._var.version != info.latest_version:
            return (f'rank {self.rank} no longer has its last pushpull sum: it was all-reduced '
                    f'into an array written since, and a store without an optimizer keeps no '
                    f'second copy (pull before changing that array, or push and pull '
                    f'separately)')
        begin, end = info.part
        comm._flat(latest, begin, end).copyto(info.stored.reshape((-1,)))
        return ''

    # -- init -----------------------------------------------------------------------------------
    def init(self, key, value):
        """Initialize each key with rank 0's value (a collective: every rank calls it, and it
        returns once the values are in place, raising any disagreement between the ranks)."""
        done, added = engine.get().new_var(), []
        for k, arrays in self._pairs(key, value, 'value'):
            if k in self._keys:
                raise EmberError(f'kvstore init of key {k!r}: the key is already initialized '
                                 f'(init and broadcast take a key once)')
            value0 = arrays[0]
            _check_dtype(k, value0)
            info = _Key(len(self._keys), k, value0.shape, value0.dtype, self._place(value0.size),
                        self.rank)
            self._keys[k] = info
            added.append(k)
            self._world.push(info.step('init'), self._initializer(info, value0),
                             reads=[value0._var], writes=_vars(info.stored) + [done])
            if self._server is not None:
                self._server.start()
        try:
            engine.get().wait_for_var(done)
        except EmberError:
            for k in added:
                del self._keys[k]
            raise

    def _initializer(self, info, value):
        world = self._world

        def run():
            full = value._data() if world.rank == 0 else np.empty(info.shape, info.dtype)
            world.comm.Bcast(full, root=0)
            if info.stored is not None:
                begin, end = info.part
                info.stored._data().reshape(-1)[...] = full.reshape(-1)[begin:end]
        return run

    # -- push -----------------------------------------------------------------------------------
    def push(self, key, value, priority=0):
        """Sum each key's arrays on this rank, then on its servers across the ranks; the
        servers update (or replace) their parts."""
        for k, arrays in self._pairs(key, value, 'value'):
            info = self._info(k, 'push', arrays)
            merged = self._reducer.reduce(k, arrays, priority)
            if self._server is not None:
                self._server.send_push(info, self._payload(info, merged))
            else:
                self._push_sync(info, merged)

    def _payload(self, info, merged):
        """What a worker sends for `merged`: the array, or its 2-bit codes."""
        if self._compression is None:
            return merged
        return self._quantize(info, merged)

    def _push_sync(self, info, merged):
        problem = ''
        if self._updater is None:
            info.latest = None          # the push replaces the stored part whole
        else:
            problem = self._materialize(info)
        target = self._target(info)
        payload = self._payload(info, merged)
        if self._compression is None:
            fn = self._reducer_to_servers(info, merged, target)
        else:
            fn = self._compressed_to_servers(info, payload, target)
        self._world.push(info.step('push', problem), fn, reads=[payload._var],
                         writes=_vars(target))
        self._apply(info)

    def _target(self, info):
        """Where this rank receives its part of a push: the stored part, or with an
        optimizer a buffer the optimizer then reads."""
        if info.stored is None:
            return None
        if self._updater is None:
            return info.stored
        if info.received is None:
            info.received = nd.zeros(info.stored.shape, ctx=cpu(0), dtype=info.dtype)
        return info.received

    def _apply(self, info):
        if self._updater is not None and info.stored is not None:
            self._updater(info.name, info.received, info.stored)

    def _reducer_to_servers(self, info, merged, target):
        world = self._world
        SUM = world.MPI.SUM

        def run():
            send = merged._data().reshape(-1)
            receive = target._data().reshape(-1) if target is not None else None
            if info.sliced:
                world.comm.Reduce_scatter(send, receive, recvcounts=info.counts(), op=SUM)
            else:
                world.comm.Reduce(send, receive, op=SUM, root=info.shards[0][0])
        return run

    def _quantize(self, info, merged):
        gc = self._compression
        residual = self._residuals.get(info.name)
        if residual is None:
            residual = self._residuals[info.name] = nd.zeros((info.size,), ctx=cpu(0),
                                                             dtype=np.float32)
        sizes = [gc.compressed_size(n) for n in info.counts()]
        packed = nd.empty((sum(sizes),), cpu(0), np.float32)

        def run():
            grad, left = merged._data().reshape(-1), residual._data()
            out, at = packed._data(), 0
            for (_, begin, end), words in zip(info.shards, sizes):
                out[at:at + words] = gc.quantize(grad[begin:end], left[begin:end])
                at += words
        engine.get().push(run, [merged._var], [residual._var, packed._var], cpu(0), 0,
                          'kvstore_quantize')
        return packed

    def _compressed_to_servers(self, info, packed, target):
        """Every worker's codes for a server part go to that server (an all-to-all), which
        dequantizes each and sums them."""
        world, gc = self._world, self._compression
        words = [gc.compressed_size(n) for n in info.counts()]
        owners = [owner for owner, _, _ in info.shards]
        send_counts = [sum(w for o, w in zip(owners, words) if o == r) for r in range(world.size)]
        mine = sum(w for o, w in zip(owners, words) if o == world.rank)

        def run():
            received = np.empty(mine * world.size, np.float32)
            world.comm.Alltoallv([packed._data(), send_counts, _displacements(send_counts),
                                  world.MPI.FLOAT],
                                 [received, [mine] * world.size,
                                  _displacements([mine] * world.size), world.MPI.FLOAT])
            if target is not None:
                part = target._data().reshape(-1)
                parts = [gc.dequantize(received[r * mine:(r + 1) * mine], part.size)
                         for r in range(world.size)]
                comm.sum_into(part, parts)
        return run

    # -- pull -----------------------------------------------------------------------------------
    def pull(self, key, out=None, priority=0, ignore_sparse=True):
        """Copy each key's value from its servers into `out` on this rank."""
        if out is None:
            raise ValueError('kvstore pull: out is required (an NDArray or a list of them)')
        for k, outs in self._pairs(key, out, 'output'):
            info = self._info(k, 'pull', outs)
            first = outs[0]
            if self._server is not None:
                self._server.pull(info, first)
            else:
                problem = self._materialize(info)
                self._world.push(info.step('pull', problem), self._from_servers(info, first),
                                 reads=_vars(info.stored), writes=[first._var])
            self._reducer.broadcast(k, first, outs, priority)

    def _from_servers(self, info, out):
        world = self._world

        def run():
            full = out._data().reshape(-1)
            if info.sliced:
                counts = info.counts()
                world.comm.Allgatherv(info.stored._data(),
                                      [full, counts, _displacements(counts), _mpi_type(world,
                                                                                       full)])
                return
            owner = info.shards[0][0]
            if world.rank == owner:
                full[...] = info.stored._data().reshape(-1)
            world.comm.Bcast(full, root=owner)
        return run

    # -- pushpull -------------------------------------------------------------------------------
    def pushpull(self, key, value, out=None, priority=0):
        """Push then pull; without an optimizer on the store, one all-reduce per bucket."""
        if self._updater is not None or self._compression is not None or self._server:
            self.push(key, value, priority)
            self.pull(key, value if out is None else out, priority)
            return
        signature = _plan_signature(key, value, out)
        found = self._plans.get(signature) if signature is not None else None
        arrays = _flat_arrays(value, out)
        if found is not None and len(found[0]) == len(arrays) and all(
                kept is array for kept, array in zip(found[0], arrays)):
            buckets = found[1]
        else:
            buckets = self._plan_allreduce(key, value, out, priority)
            if signature is not None:
                # one plan per keys: new arrays replace the last ones (the store holds the
                # last arrays of its keys anyway, as `latest`), at most _KEPT_PLANS plans
                self._plans.pop(signature, None)
                if len(self._plans) >= _KEPT_PLANS:
                    self._plans.pop(next(iter(self._plans)))
                self._plans[signature] = (arrays, buckets)
        world = self._world
        for step, items, reads, writes in buckets:
            # a bucket whose gradients are ready all-reduces on this thread (it would wait
            # for it next): MPI's calls ran 10-20 us slower each on an engine worker (2
            # ranks, 4 x 1 MB: 0.86 ms there, 0.77 ms here)
            world.push(step, functools.partial(_run_bucket, world, items), reads=reads,
                       writes=writes, name='kvstore_allreduce_bucket', inline=True)
            for item in items:
                item.finish()

    def _plan_allreduce(self, key, value, out, priority):
        """The buckets of a pushpull: (agreed step, items, reads, writes) each."""
        pairs = self._pairs(key, value, 'value')
        outs = dict(pairs if out is None else self._pairs(key, out, 'output'))
        items = []
        for k, arrays in pairs:
            info = self._info(k, 'pushpull', arrays + outs[k])
            merged = self._reducer.reduce(k, arrays, priority)
            items.append(_AllReduce(info, merged, arrays[0], outs[k], self._reducer))
        cap = int(config.get('BUCKET_CAP_MB') * 1024 * 1024)
        buckets = []
        for bucket in plan_buckets([item.info.size * item.info.dtype.itemsize
                                    for item in items], cap):
            chosen = [items[i] for i in bucket]
            keys = tuple(item.info.name for item in chosen)
            step = Step('allreduce', keys[0] if len(keys) == 1 else keys,
                        sum(item.info.size for item in chosen),
                        ','.join(sorted({item.info.dtype_name for item in chosen})))
            reads = [item.send._var for item in chosen if item.send is not item.receive]
            writes = [item.receive._var for item in chosen]
            buckets.append((step, chosen, reads, writes))
        return buckets

    def broadcast(self, key, value, out, priority=0):
        """Initialize each key with rank 0's `value` and pull it into `out` on every rank."""
        self.init(key, value)
        self.pull(key, out, priority)

    def row_sparse_pull(self, key, out=None, priority=0, row_ids=None):
        """Pull the rows `row_ids` of each key into row-sparse outputs. The servers keep dense
        values, so each key is pulled whole and its rows kept on this rank."""
        outs_by_key = self._pairs(key, out, 'output')
        for (k, outs), rows in row_sparse_requests(outs_by_key, out, row_ids):
            whole = nd.zeros(outs[0].shape, ctx=outs[0].context, dtype=outs[0].dtype)
            self.pull(k, out=whole, priority=priority)
            for target, row in zip(outs, rows):
                retain_rows(whole, row, target)

    # -- optimizer, compression, synchronisation ----------------------------------------------
    def set_optimizer(self, optimizer):
        """Run `optimizer` on every server rank (each rank uses its own, equal, optimizer
        object; the ranks check that they agree)."""
        signature = (type(optimizer).__name__, optimizer.learning_rate, optimizer.wd)
        self._world.call(Step('set_optimizer', signature))
        self._set_updater(opt.get_updater(optimizer))

    def _set_updater(self, updater):
        if not callable(updater):
            raise TypeError(f'kvstore updater {updater!r}: expected a callable '
                            f'updater(key, input, stored)')
        self._updater = updater

    set_updater = _set_updater

    def save_optimizer_states(self, fname, dump_optimizer=False):
        raise EmberError(f'save_optimizer_states on {self._kind!r}: the optimizer states live '
                         f'on the server ranks, each holding its own keys; save the weights, '
                         f'or train with update_on_kvstore=False to keep states per worker')

    def load_optimizer_states(self, fname):
        raise EmberError(f'load_optimizer_states on {self._kind!r}: the optimizer states live '
                         f'on the server ranks; see save_optimizer_states')

    def set_gradient_compression(self, compression_params):
        """Send pushed gradients as 2-bit codes with error feedback (worker to server)."""
        kind, _ = parse_params(compression_params)
        self._compression = GradientCompression(compression_params) if kind == '2bit' else None

    def barrier(self):
        """Wait until every rank reaches this point (after its pushes have arrived)."""
        if self._server is not None:
            self._server.flush()
        self._world.call(Step('barrier'))

    _barrier = barrier


# pushpull's plans kept per store: a training loop all-reduces the same arrays under the
# same keys every step, and planning them again cost about 40 us a call of four keys
_KEPT_PLANS = 16


def _plan_signature(key, value, out):
    """Where a pushpull's plan is kept: its keys, whether it has outputs and the bucket cap
    (the plan is used again for the same arrays); None where a key has several values (their
    sum is pushed anew each call)."""
    keys = tuple(key) if isinstance(key, (list, tuple)) else (key,)
    if not all(type(k) in (int, str) for k in keys):
        return None
    values = value if isinstance(key, (list, tuple)) else [value]
    outs = () if out is None else (out if isinstance(key, (list, tuple)) else [out])
    if not isinstance(values, (list, tuple)) or not isinstance(outs, (list, tuple)) or any(
            isinstance(v, (list, tuple)) for v in (*values, *outs)):
        return None
    return keys, bool(outs), config.get('BUCKET_CAP_MB')


def _flat_arrays(value, out):
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if out is not None:
        values += list(out) if isinstance(out, (list, tuple)) else [out]
    return values


class _AllReduce:
    """One key of a bucket: what it sends, where the sum lands, how it reaches the outputs."""

    def __init__(self, info, merged, pushed, outs, reducer):
        self.info, self.outs, self.reducer = info, outs, reducer
        self.send = merged
        if merged is not pushed or merged is outs[0]:
            self.receive = merged           # the reducer's buffer, or pushed into itself
        elif outs[0].context == merged.context:
            self.receive = outs[0]
        else:
            self.receive = reducer._buffer(('allreduce', info.name), merged, merged.context)
        self.packed = info.size * info.dtype.itemsize < _PACK_BYTES

    def finish(self):
        """Copy the sum to the other outputs; this rank's stored part is taken from it only
        when something reads the stored value (:meth:`KVStoreDist._materialize`)."""
        info = self.info
        if info.stored is not None:
            info.latest = self.receive
        self.reducer.broadcast(info.name, self.receive, self.outs)


def _run_bucket(world, items):
    """All-reduce a bucket: small keys packed together per dtype, the others in place."""
    SUM = world.MPI.SUM
    by_dtype = {}
    for item in items:
        if item.packed and len(items) > 1:
            by_dtype.setdefault(item.info.dtype, []).append(item)
        else:
            _allreduce_one(world, item.send._data(), item.receive._data(), SUM)
    for group in by_dtype.values():
        flat = np.concatenate([item.send._data().reshape(-1) for item in group])
        world.comm.Allreduce(world.MPI.IN_PLACE, flat, op=SUM)
        at = 0
        for item in group:
            size = item.info.size
            item.receive._data().reshape(-1)[...] = flat[at:at + size]
            at += size
    for item in items:
        # the version the sum has once this operation completes (the engine adds one)
        item.info.latest_version = item.receive._var.version + 1


def _allreduce_one(world, send, receive, op):
    if send is receive or send.ctypes.data == receive.ctypes.data:
        world.comm.Allreduce(world.MPI.IN_PLACE, receive, op=op)
    else:
        world.comm.Allreduce(send, receive, op=op)


class _AsyncServer:
    """dist_async: a thread per rank applies the pushes for its keys as they arrive and
    answers pulls; workers send from engine operations ordered by their own variable."""

    def __init__(self, store):
        self.store = store
        self.world = store._world
        self.var = engine.get().new_var(carries_errors=False)
        self.thread = None
        self.stopping = False
        self.by_id = {}
        self.error = None

    def start(self):
        for info in list(self.store._keys.values()):
            self.by_id[info.id] = info
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name='ember-kvstore-server',
                                           daemon=True)
            self.thread.start()
            self.world.closing.append(self.flush)
            self.world.closed.append(self.stop)

    # -- the worker's side --------------------------------------------------------------------
    def send_push(self, info, payload):
        world = self.world

        def run():
            data = payload._data().reshape(-1)
            at = 0
            for owner, begin, end in info.shards:
                size = self._payload_size(end - begin)
                if self.store._compression is None:
                    part, at = data[begin:end], at
                else:
                    part, at = data[at:at + size], at + size
                world.wait(world.p2p.Isend(part, dest=owner, tag=_tag(_PUSH, info.id)))
        engine.get().push(run, [payload._var], [self.var], cpu(0), _PRIORITY, 'kvstore_send')

    def _payload_size(self, count):
        gc = self.store._compression
        return count if gc is None else gc.compressed_size(count)

    def pull(self, info, out):
        world = self.world

        def run():
            full = out._data().reshape(-1)
            for owner, begin, end in info.shards:
                world.wait(world.p2p.Isend(np.empty(0, np.uint8), dest=owner,
                                           tag=_tag(_PULL, info.id)))
                world.wait(world.replies.Irecv(full[begin:end], source=owner,
                                               tag=_tag(_REPLY, info.id)))
        engine.get().push(run, [], [self.var, out._var], cpu(0), _PRIORITY, 'kvstore_request')

    def flush(self):
        """Wait until every server has applied this rank's pushes."""
        world = self.world

        def run():
            for owner in range(world.size):
                world.wait(world.p2p.Isend(np.empty(0, np.uint8), dest=owner,
                                           tag=_tag(_FLUSH, 0)))
                world.wait(world.replies.Irecv(np.empty(0, np.uint8), source=owner,
                                               tag=_tag(_ACK, 0)))
        done = engine.get().new_var()
        engine.get().push(run, [], [self.var, done], cpu(0), _PRIORITY, 'kvstore_flush')
        engine.get().wait_for_var(done)

    def stop(self):
        self.stopping = True
        if self.thread is not None:
            self.thread.join()

    # -- the server's side --------------------------------------------------------------------
    def _serve(self):
        status = self.world.MPI.Status()
        delay = 0.0
        while not self.stopping:
            if not self.world.p2p.Iprobe(source=self.world.MPI.ANY_SOURCE,
                                         tag=self.world.MPI.ANY_TAG, status=status):
                time.sleep(delay)
                delay = min(2e-3, delay * 2 + 2e-5)
                continue
            delay = 0.0
            kind, ident = status.Get_tag() % _KINDS, status.Get_tag() // _KINDS
            try:
                self._handle(kind, ident, status.Get_source())
            except Exception as exc:  # noqa: BLE001 - a server error stops every rank
                print(f'ember: kvstore server on rank {self.world.rank} failed: {exc!r}',
                      flush=True)
                self.world.abort(1)

    def _handle(self, kind, ident, source):
        p2p, replies = self.world.p2p, self.world.replies
        if kind == _FLUSH:
            p2p.Recv(np.empty(0, np.uint8), source=source, tag=_tag(_FLUSH, ident))
            replies.Send(np.empty(0, np.uint8), dest=source, tag=_tag(_ACK, 0))
            return
        info = self.by_id.get(ident) or self._refresh(ident)
        stored = info.stored
        if kind == _PULL:
            p2p.Recv(np.empty(0, np.uint8), source=source, tag=_tag(_PULL, ident))
            replies.Send(stored.asnumpy().reshape(-1), dest=source, tag=_tag(_REPLY, ident))
            return
        values = self._receive_push(info, source)
        self._apply(info, values)

    def _refresh(self, ident):
        self.start()
        return self.by_id[ident]

    def _receive_push(self, info, source):
        count = info.stored.size
        gc = self.store._compression
        buffer = np.empty(self._payload_size(count), info.dtype if gc is None else np.float32)
        self.world.p2p.Recv(buffer, source=source, tag=_tag(_PUSH, info.id))
        return buffer if gc is None else gc.dequantize(buffer, count)

    def _apply(self, info, values):
        received = nd.array(values.reshape(info.stored.shape), ctx=cpu(0), dtype=info.dtype)
        if self.store._updater is None:
            received.copyto(info.stored)
        else:
            self.store._updater(info.name, received, info.stored)
        info.stored.wait_to_read()


def _tag(kind, ident):
    return ident * _KINDS + kind


def _vars(array):
    return [] if array is None else [array._var]


def _displacements(counts):
    return [int(x) for x in np.concatenate([[0], np.cumsum(counts)[:-1]])]


def _mpi_type(world, array):
    names = {'float32': 'FLOAT', 'float64': 'DOUBLE', 'int32': 'INT32_T', 'int64': 'INT64_T'}
    return getattr(world.MPI, names[array.dtype.name])


def _check_dtype(key, array):
    name = np.dtype(array.dtype).name
    if name not in MPI_DTYPES:
        raise EmberError(f'kvstore init of key {key!r}: dtype {name} cannot be summed over '
                         f'MPI here; the distributed stores take {", ".join(MPI_DTYPES)} '
                         f'(cast the array first)')
