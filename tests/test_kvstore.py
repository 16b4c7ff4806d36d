"""KVStore in one process: the API and MXNet's semantics, 2-bit compression against MXNet 1.9.1,
the reduction variables, and data-parallel training over several CPU contexts."""
import threading

import numpy as np
import pytest

import ember as mx
from ember import config, engine
from ember.base import EmberError
from ember.kvstore import comm, tree

from data_files import DATA

FIXTURES = np.load(DATA / 'kvstore' / 'mxnet-kvstore.npz')
CPUS = [mx.cpu(0), mx.cpu(1)]


# ----------------------------------------------------------------------------------------------
# Creating stores

def test_create_names_every_accepted_type_for_an_unknown_one():
    with pytest.raises(ValueError) as info:
        mx.kv.create('devise')
    message = str(info.value)
    for name in ('local', 'device', 'nccl', 'dist_sync', 'dist_device_sync', 'dist_async',
                 'horovod', 'byteps'):
        assert name in message
    assert message.endswith("did you mean 'device'?")


def test_nccl_says_it_needs_gpus_and_plugins_name_their_package():
    from ember import backend
    if backend.num_gpus():
        pytest.skip('this machine has GPUs')
    with pytest.raises(EmberError, match='needs at least one'):
        mx.kv.create('nccl')
    for name in ('horovod', 'byteps'):
        with pytest.raises(EmberError, match=f'needs the {name} package|{name} is installed'):
            mx.kv.create(name)


def test_a_registered_store_is_created_by_name():
    @mx.kv.KVStoreBase.register
    class CountingStore(mx.kv.KVStoreBase):
        def __init__(self):
            self.calls = 0

        def pushpull(self, key, value, out=None, priority=0):
            self.calls += 1

    try:
        store = mx.kv.create('CountingStore')
        store.pushpull(0, mx.nd.ones((1,)))
        assert store.calls == 1 and store.type == 'countingstore'
        with pytest.raises(NotImplementedError, match='does not support broadcast'):
            store.broadcast(0, mx.nd.ones((1,)), mx.nd.ones((1,)))
    finally:
        mx.kv.KVStoreBase.kv_registry.pop('countingstore')


def test_teststore_sums_without_an_optimizer():
    kv = mx.kvstore.base.create('teststore')      # MXNet's base module creates stores too
    assert isinstance(kv, mx.kvstore.base.TestStore)
    assert isinstance(mx.kv.create('local'), mx.kvstore.kvstore.KVStore)
    outs = [mx.nd.zeros((2,)), mx.nd.zeros((2,))]
    kv.pushpull('k', [mx.nd.ones((2,)), mx.nd.ones((2,)) * 3], out=outs)
    assert [o.asnumpy().tolist() for o in outs] == [[4.0, 4.0]] * 2
    assert kv.is_capable('optimizer') is False
    with pytest.raises(ValueError, match='unknown capability'):
        kv.is_capable('sparse')


# ----------------------------------------------------------------------------------------------
# MXNet's semantics

@pytest.mark.parametrize('kind', ['local', 'device'])
def test_push_sums_and_replaces_then_the_updater_updates(kind):
    kv = mx.kv.create(kind)
    kv.init(3, mx.nd.ones((2, 3)))
    kv.push(3, [mx.nd.ones((2, 3), ctx=mx.cpu(i)) * (i + 1) for i in range(3)])
    out = mx.nd.zeros((2, 3))
    kv.pull(3, out=out)
    assert out.asnumpy().tolist() == [[6.0] * 3] * 2
    seen = []

    def update(key, pushed, stored):
        seen.append(key)
        stored += pushed * 2
    kv._set_updater(update)
    kv.push(3, mx.nd.ones((2, 3)))
    kv.pull(3, out=out)
    assert seen == [3] and out.asnumpy()[0].tolist() == [8.0] * 3


def test_string_keys_lists_of_keys_and_duplicates_in_one_call():
    kv = mx.kv.create('local')
    kv.init(['a', 'b'], [mx.nd.zeros((2,)), mx.nd.zeros((3,))])
    kv.push(['a', 'b', 'a'], [mx.nd.ones((2,)), mx.nd.ones((3,)) * 2, mx.nd.ones((2,)) * 5])
    outs = [mx.nd.zeros((2,)), mx.nd.zeros((3,))]
    kv.pull(['a', 'b'], out=outs)
    assert outs[0].asnumpy().tolist() == [6.0, 6.0] and outs[1].asnumpy().tolist() == [2.0] * 3


def test_errors_name_the_key():
    kv = mx.kv.create('local')
    with pytest.raises(EmberError, match="pull of key 3: the key has not been initialized"):
        kv.pull(3, out=mx.nd.zeros((2,)))
    with pytest.raises(EmberError, match="push of key 5: the key has not been initialized"):
        kv.push(5, mx.nd.ones((2,)))
    kv.init(3, mx.nd.ones((2,)))
    with pytest.raises(EmberError, match='key 3: the key is already initialized'):
        kv.init(3, mx.nd.ones((2,)))
    with pytest.raises(EmberError, match=r'push of key 3: shape \(3,\) does not match'):
        kv.push(3, mx.nd.ones((3,)))
    with pytest.raises(EmberError, match='mixed key types'):
        kv.init('w', mx.nd.ones((2,)))
    with pytest.raises(EmberError, match="not supported by the 'local' store"):
        kv.set_gradient_compression({'type': '2bit'})
    with pytest.raises(EmberError, match='runs no optimizer'):
        kv.save_optimizer_states('unused')


def test_pushpull_broadcast_and_row_sparse_pull():
    kv = mx.kv.create('device')
    kv.broadcast('w', mx.nd.ones((2,)) * 7, out=[mx.nd.zeros((2,), ctx=c) for c in CPUS])
    outs = [mx.nd.zeros((2,), ctx=c) for c in CPUS]
    kv.pushpull('w', [mx.nd.ones((2,), ctx=c) * (i + 1) for i, c in enumerate(CPUS)], out=outs)
    assert [o.asnumpy().tolist() for o in outs] == [[3.0, 3.0]] * 2
    assert (kv.type, kv.rank, kv.num_workers) == ('device', 0, 1)
    kv.barrier()


def test_row_sparse_pull_takes_only_the_rows_asked_for():
    kv = mx.kv.create('device')
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    kv.init('emb', mx.nd.sparse.row_sparse_array((table[[1, 4]], [1, 4]), shape=(6, 2)))
    kv.init('dense', mx.nd.array(table))
    outs = [mx.nd.sparse.zeros('row_sparse', (6, 2), ctx=c) for c in CPUS]
    kv.row_sparse_pull('emb', out=outs, row_ids=[mx.nd.array([4, 0, 4]), mx.nd.array([1])])
    # as MXNet 1.9.1 gives it: every row asked for, zeros where none is stored
    assert outs[0].indices.asnumpy().tolist() == [0, 4]
    assert outs[0].data.asnumpy().tolist() == [[0, 0], table[4].tolist()]
    assert outs[1].indices.asnumpy().tolist() == [1] and outs[1].context == CPUS[1]
    dense_rows = mx.nd.sparse.zeros('row_sparse', (6, 2))
    kv.row_sparse_pull('dense', out=dense_rows, row_ids=mx.nd.array([5, 2]))
    assert dense_rows.indices.asnumpy().tolist() == [2, 5]
    np.testing.assert_array_equal(dense_rows.tostype('default').asnumpy()[[2, 5]], table[[2, 5]])
    with pytest.raises(IndexError, match='outside 0..5'):
        kv.row_sparse_pull('dense', out=dense_rows, row_ids=mx.nd.array([6]))
    with pytest.raises(ValueError, match='out and row_ids are required'):
        kv.row_sparse_pull('dense', out=dense_rows)


def test_optimizer_on_the_store_matches_mxnet_and_its_states_round_trip(tmp_path):
    grads = FIXTURES['sgd_grads']
    kv = mx.kv.create('local')
    kv.init('w', mx.nd.array(FIXTURES['sgd_weight']))
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.01,
                                      rescale_grad=0.5))
    out = mx.nd.zeros((4, 5))
    for step in range(2):
        kv.push('w', [mx.nd.array(grads[step, d], ctx=CPUS[d]) for d in range(2)])
        kv.pull('w', out=out)
        np.testing.assert_array_equal(out.asnumpy(), FIXTURES['sgd_pulled'][step])
    kv.save_optimizer_states(str(tmp_path / 'states'))
    again = mx.kv.create('local')
    again.init('w', out)
    again.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.01,
                                         rescale_grad=0.5))
    again.load_optimizer_states(str(tmp_path / 'states'))
    again.push('w', [mx.nd.array(grads[2, d], ctx=CPUS[d]) for d in range(2)])
    again.pull('w', out=out)
    np.testing.assert_array_equal(out.asnumpy(), FIXTURES['sgd_pulled'][2])


@pytest.mark.parametrize('case', ['two', 'one'])
def test_two_bit_compression_matches_mxnet_bit_for_bit(case):
    pushed, pulled = FIXTURES[f'{case}_pushed'], FIXTURES[f'{case}_pulled']
    steps, devices, shape = pushed.shape[0], pushed.shape[1], pushed.shape[2:]
    kv = mx.kv.create('device')
    kv.set_gradient_compression({'type': '2bit',
                                 'threshold': float(FIXTURES[f'{case}_threshold'])})
    kv.init(0, mx.nd.zeros(shape))
    out = mx.nd.zeros(shape)
    for step in range(steps):
        kv.push(0, [mx.nd.array(pushed[step, d], ctx=CPUS[d]) for d in range(devices)])
        kv.pull(0, out=out)
        np.testing.assert_array_equal(out.asnumpy(), pulled[step])


def test_compression_parameters_are_checked():
    kv = mx.kv.create('device')
    with pytest.raises(ValueError, match="type '3bit'"):
        kv.set_gradient_compression({'type': '3bit'})
    with pytest.raises(ValueError, match='must be greater than 0'):
        kv.set_gradient_compression({'type': '2bit', 'threshold': -1})
    with pytest.raises(ValueError, match="'type' is required"):
        kv.set_gradient_compression({'threshold': 1})


# ----------------------------------------------------------------------------------------------
# Devices and the reduction variables

def test_each_cpu_context_runs_on_its_own_engine_pool():
    if config.get('MXNET_ENGINE_TYPE') != 'ThreadedEnginePerDevice':
        pytest.skip('pools per device belong to ThreadedEnginePerDevice')
    names = {}
    for device in CPUS:
        var = engine.get().new_var()
        engine.get().push(lambda d=device: names.setdefault(d, threading.current_thread().name),
                          writes=[var], device=device)
        engine.get().wait_for_var(var)
    assert names[mx.cpu(0)].startswith('ember-cpu0') and names[mx.cpu(1)].startswith(
        'ember-cpu1')


def test_big_arrays_sum_on_reduction_threads(monkeypatch):
    threads = set()
    original = comm._sum_range

    def spy(out, sources, begin, end):
        threads.add(threading.current_thread().name)
        original(out, sources, begin, end)
    monkeypatch.setattr(comm, '_sum_range', spy)
    values = [mx.nd.ones((40,), ctx=c) * (i + 1) for i, c in enumerate(CPUS)]
    with config.override(MXNET_KVSTORE_BIGARRAY_BOUND=40, MXNET_KVSTORE_REDUCTION_NTHREADS=3):
        assert comm.reduction_ranges(40) == [(0, 14), (14, 27), (27, 40)]
        assert comm.reduction_ranges(39) == [(0, 39)]
        kv = mx.kv.create('local')
        kv.init(0, mx.nd.zeros((40,)))
        kv.pushpull(0, values)
        assert values[1].asnumpy().tolist() == [3.0] * 40
    assert len(threads) == 3 and all(t.startswith('ember-kv-reduce') for t in threads)


def test_device_store_spreads_keys_over_the_devices():
    kv = mx.kv.create('device')
    for key, size in enumerate((100, 60, 50)):
        kv.init(key, mx.nd.zeros((size,)))
        kv.push(key, [mx.nd.ones((size,), ctx=c) for c in CPUS])
    devices = [kv._reducer.merge_device(key, None) for key in range(3)]
    assert devices == [mx.cpu(0), mx.cpu(1), mx.cpu(1)]


def four_cpus():
    return [mx.cpu(i) for i in range(4)]


def test_usetree_reduces_along_the_tree_and_big_arrays_over_every_tree(monkeypatch, capsys):
    devices = four_cpus()
    ring = np.array([[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]])
    tree.use_link_matrix(devices, ring)
    edges = []
    original = comm.push_sum

    def spy(out, sources, priority=0, name='kvstore_reduce'):
        if name == 'kvstore_tree_reduce':
            edges.append((out.context.device_id, sources[1].context.device_id, out.size))
        original(out, sources, priority, name)
    monkeypatch.setattr(comm, 'push_sum', spy)
    try:
        with config.override(MXNET_KVSTORE_USETREE=True, MXNET_KVSTORE_LOGTREE=True,
                             MXNET_KVSTORE_TREE_ARRAY_BOUND=8):
            kv = mx.kv.create('device')
            kv.init(['small', 'big'], [mx.nd.zeros((6,)), mx.nd.zeros((8,))])
            small = [mx.nd.ones((6,), ctx=d) * (i + 1) for i, d in enumerate(devices)]
            big = [mx.nd.ones((8,), ctx=d) * (i + 1) for i, d in enumerate(devices)]
            kv.pushpull(['small', 'big'], [small, big])
            assert all(v.asnumpy().tolist() == [10.0] * 6 for v in small)
            assert all(v.asnumpy().tolist() == [10.0] * 8 for v in big)
    finally:
        tree.use_link_matrix(devices, None)
    # On the ring 0-1-2-3-0, bisecting around root 0 gives {0, 1} | {2, 3} (2 links cut, as
    # few as any split); the far half's head is 3, the one linked to 0. So 0 <- 3 on top and
    # 0 <- 1, 3 <- 2 below, all real links; the small key reduces bottom-up along them.
    assert edges[:3] == [(0, 1, 6), (3, 2, 6), (0, 3, 6)]
    # The big key goes in four slices of 2, one per tree (roots 0, 1, 2, 3).
    assert sorted({size for _, _, size in edges[3:]}) == [2] and len(edges[3:]) == 12
    printed = capsys.readouterr().err
    assert 'Kernighan-Lin tree rooted at cpu(0)' in printed
    assert 'level 1: cpu(0) <- cpu(3)' in printed


def test_without_usetree_no_tree_is_built(monkeypatch):
    built = []
    monkeypatch.setattr(tree, 'trees_for', lambda devices: built.append(devices) or [])
    kv = mx.kv.create('device')
    kv.init(0, mx.nd.zeros((4,)))
    kv.pushpull(0, [mx.nd.ones((4,), ctx=d) for d in four_cpus()])
    assert built == [] and type(kv._reducer) is comm.DeviceReducer


# ----------------------------------------------------------------------------------------------
# Trainer and update_on_kvstore

def small_cnn(contexts):
    net = mx.gluon.nn.HybridSequential(prefix='cnn_')
    with net.name_scope():
        net.add(mx.gluon.nn.Conv2D(4, 3, in_channels=1, activation='relu'),
                mx.gluon.nn.MaxPool2D(2), mx.gluon.nn.Flatten(),
                mx.gluon.nn.Dense(3, in_units=36))
    mx.random.seed(5)
    net.initialize(mx.init.Xavier(), ctx=contexts)
    net.hybridize()
    return net


RNG = np.random.RandomState(3)
IMAGES = RNG.rand(8, 1, 8, 8).astype('float32')
LABELS = RNG.randint(0, 3, 8).astype('float32')


def train_cnn(contexts, steps=3, **trainer_args):
    net = small_cnn(contexts)
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd',
                               {'learning_rate': 0.5, 'momentum': 0.9}, **trainer_args)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(steps):
        images = mx.gluon.utils.split_and_load(IMAGES, contexts)
        labels = mx.gluon.utils.split_and_load(LABELS, contexts)
        with mx.autograd.record():
            losses = [loss(net(x), y) for x, y in zip(images, labels)]
        for part in losses:
            part.backward()
        trainer.step(len(IMAGES))
    return net, trainer


def weights_of(net, context):
    return [p.data(context).asnumpy() for p in net.collect_params().values()]


def assert_same_weights(actual, expected):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5 * np.abs(e).max())


@pytest.mark.parametrize('kvstore,update_on_kvstore', [('device', None), ('device', False),
                                                       ('local', None)])
def test_two_cpu_contexts_train_like_one_on_the_whole_batch(kvstore, update_on_kvstore):
    single, _ = train_cnn([mx.cpu(0)])
    double, trainer = train_cnn(CPUS, kvstore=kvstore, update_on_kvstore=update_on_kvstore)
    assert trainer._update_on_kvstore is (update_on_kvstore is not False)
    for context in CPUS:
        assert_same_weights(weights_of(double, context), weights_of(single, mx.cpu(0)))


def test_update_on_kvstore_variable_and_the_argument_that_wins():
    with config.override(MXNET_UPDATE_ON_KVSTORE=False):
        _, trainer = train_cnn(CPUS, steps=1)
        assert trainer._update_on_kvstore is False
        _, trainer = train_cnn(CPUS, steps=1, update_on_kvstore=True)
        assert trainer._update_on_kvstore is True
    _, trainer = train_cnn(CPUS, steps=1)
    assert trainer._update_on_kvstore is True
    with pytest.raises(EmberError, match='update_on_kvstore'):
        trainer.allreduce_grads()


def test_a_store_without_optimizer_refuses_update_on_kvstore():
    with pytest.raises(ValueError, match='cannot run an optimizer'):
        train_cnn(CPUS, steps=1, kvstore=mx.kv.create('teststore'), update_on_kvstore=True)
    _, trainer = train_cnn(CPUS, steps=1, kvstore=mx.kv.create('teststore'))
    assert trainer._update_on_kvstore is False


def test_allreduce_grads_then_update_is_a_step():
    single, _ = train_cnn([mx.cpu(0)], steps=1)
    net = small_cnn(CPUS)
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd',
                               {'learning_rate': 0.5, 'momentum': 0.9},
                               update_on_kvstore=False)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    images = mx.gluon.utils.split_and_load(IMAGES, CPUS)
    labels = mx.gluon.utils.split_and_load(LABELS, CPUS)
    with mx.autograd.record():
        losses = [loss(net(x), y) for x, y in zip(images, labels)]
    for part in losses:
        part.backward()
    trainer.allreduce_grads()
    grads = [p.list_grad() for p in net.collect_params().values()]
    assert all(np.array_equal(g[0].asnumpy(), g[1].asnumpy()) for g in grads)
    trainer.update(len(IMAGES))
    assert_same_weights(weights_of(net, mx.cpu(1)), weights_of(single, mx.cpu(0)))


def test_split_and_load_puts_one_slice_on_each_context():
    parts = mx.gluon.utils.split_and_load(np.arange(12.0).reshape(6, 2), CPUS + [mx.cpu(2)])
    assert [p.context for p in parts] == [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    assert [p.asnumpy()[:, 0].tolist() for p in parts] == [[0, 2], [4, 6], [8, 10]]
