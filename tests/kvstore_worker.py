"""What each MPI rank runs for tests/test_kvstore_dist.py (started by ``python -m ember launch``
or plain ``mpiexec``): ``kvstore_worker.py OUT_DIR SCENARIO...``. Each scenario checks one
behaviour of the distributed stores; each rank writes its findings to OUT_DIR/rank-<r>.json.

Training scenarios compare a small CNN trained data-parallel (each rank on its share of every
batch) with the same CNN trained on one device on the whole batch, which every rank also
computes by itself.
"""
import json
import os
import sys
import threading

import numpy as np

import ember as mx
from ember import config, engine
from ember.kvstore import dist
from ember.kvstore.compression import GradientCompression

RNG = np.random.RandomState(3)
IMAGES = RNG.rand(8, 1, 8, 8).astype('float32')
LABELS = RNG.randint(0, 3, 8).astype('float32')
STEPS = 3


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


def train(contexts, images, labels, kvstore, **trainer_args):
    net = small_cnn(contexts)
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd',
                               {'learning_rate': 0.5, 'momentum': 0.9}, kvstore=kvstore,
                               **trainer_args)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    for _ in range(STEPS):
        xs = mx.gluon.utils.split_and_load(images, contexts)
        ys = mx.gluon.utils.split_and_load(labels, contexts)
        with mx.autograd.record():
            losses = [loss(net(x), y) for x, y in zip(xs, ys)]
        for part in losses:
            part.backward()
        trainer.step(len(IMAGES))       # the global batch: gradients are summed over ranks
    return [p.data(contexts[0]).asnumpy() for p in net.collect_params().values()]


def largest_difference(actual, expected):
    """The largest difference relative to the largest weight, over all parameters."""
    return max(float(np.abs(a - e).max() / np.abs(e).max()) for a, e in zip(actual, expected))


def my_share(kv, array):
    per_rank = len(array) // kv.num_workers
    return array[kv.rank * per_rank:(kv.rank + 1) * per_rank]


def single_device():
    return train([mx.cpu(0)], IMAGES, LABELS, None)


def scenario_trainer(kv_name):
    kv = mx.kv.create(kv_name)
    contexts = [mx.cpu(0), mx.cpu(1)] if 'device' in kv_name else [mx.cpu(0)]
    weights = train(contexts, my_share(kv, IMAGES), my_share(kv, LABELS), kv)
    return {'difference': largest_difference(weights, single_device())}


def scenario_buckets():
    """update_on_kvstore=False: the gradients are all-reduced in buckets of BUCKET_CAP_MB."""
    sizes = []
    original = dist._run_bucket

    def spy(world, items):
        sizes.append([item.info.size for item in items])
        original(world, items)
    dist._run_bucket = spy
    try:
        kv = mx.kv.create('dist_sync')
        with config.override(BUCKET_CAP_MB=200 / 2**20):        # 200 bytes: 50 floats
            weights = train([mx.cpu(0)], my_share(kv, IMAGES), my_share(kv, LABELS), kv,
                            update_on_kvstore=False)
    finally:
        dist._run_bucket = original
    # the CNN's parameters, last first: dense bias 3, dense weight 108, conv bias 4, weight 36
    return {'difference': largest_difference(weights, single_device()),
            'buckets': sizes[:3]}


def scenario_module():
    kv = mx.kv.create('dist_sync')
    data = mx.sym.var('data')
    net = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), name='conv')
    net = mx.sym.Activation(net, act_type='relu')
    net = mx.sym.FullyConnected(mx.sym.flatten(net), num_hidden=3, name='fc')
    net = mx.sym.SoftmaxOutput(net, name='softmax')

    def fit(images, labels, kvstore):
        mx.random.seed(11)
        module = mx.mod.Module(net, context=mx.cpu(0))
        batches = mx.io.NDArrayIter(images, labels, batch_size=len(images))
        module.fit(batches, num_epoch=STEPS, kvstore=kvstore, optimizer='sgd',
                   optimizer_params={'learning_rate': 0.5, 'momentum': 0.9},
                   initializer=mx.init.Xavier())
        return [v.asnumpy() for _, v in sorted(module.get_params()[0].items())]

    weights = fit(my_share(kv, IMAGES), my_share(kv, LABELS), kv)
    return {'difference': largest_difference(weights, fit(IMAGES, LABELS, None))}


def separable(n, seed):
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 3, n)
    images = rng.rand(n, 1, 8, 8).astype('float32') * 0.3
    for k in range(3):
        images[labels == k, 0, 2 * k:2 * k + 3, :] += 1.0
    return images, labels.astype('float32')


def accuracy(net, images, labels):
    predicted = net(mx.nd.array(images)).asnumpy().argmax(axis=1)
    return float((predicted == labels).mean())


def scenario_async():
    kv = mx.kv.create('dist_async')
    images, labels = separable(64, seed=kv.rank)
    net = small_cnn([mx.cpu(0)])
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.2},
                               kvstore=kv)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    for epoch in range(6):
        for start in range(0, 64, 16):
            x = mx.nd.array(images[start:start + 16])
            y = mx.nd.array(labels[start:start + 16])
            with mx.autograd.record():
                part = loss(net(x), y)
            part.backward()
            trainer.step(16)
    kv.barrier()
    test_images, test_labels = separable(90, seed=99)
    return {'accuracy': accuracy(net, test_images, test_labels),
            'update_on_kvstore': trainer._update_on_kvstore}


def scenario_compression():
    """dist_sync with 2-bit compression: the servers sum each worker's dequantized codes."""
    kv = mx.kv.create('dist_sync')
    kv.set_gradient_compression({'type': '2bit', 'threshold': 0.5})
    kv.init('g', mx.nd.zeros((40,)))
    quantizer = GradientCompression({'type': '2bit', 'threshold': 0.5})
    residuals = [np.zeros(40, np.float32) for _ in range(kv.num_workers)]
    exact = True
    for step in range(3):
        grads = [np.random.RandomState(100 * step + r).uniform(-1, 1, 40).astype(np.float32)
                 for r in range(kv.num_workers)]
        kv.push('g', mx.nd.array(grads[kv.rank]))
        out = mx.nd.zeros((40,))
        kv.pull('g', out=out)
        expected = sum(quantizer.dequantize(quantizer.quantize(g, left), 40)
                       for g, left in zip(grads, residuals))
        exact = exact and np.array_equal(out.asnumpy(), expected)
    return {'exact': bool(exact)}


def scenario_bigarray():
    kv = mx.kv.create('dist_sync')
    shapes = []
    with config.override(MXNET_KVSTORE_BIGARRAY_BOUND=10):
        kv.init(['big', 'small'], [mx.nd.zeros((25,)), mx.nd.zeros((5,))])
    kv._set_updater(lambda key, pushed, stored: (shapes.append((key, stored.shape)),
                                                 stored.__iadd__(pushed)))
    kv.push(['big', 'small'], [mx.nd.ones((25,)) * (kv.rank + 1), mx.nd.ones((5,))])
    outs = [mx.nd.zeros((25,)), mx.nd.zeros((5,))]
    kv.pull(['big', 'small'], out=outs)
    total = sum(range(1, kv.num_workers + 1))
    # the big key's rows, pulled as a row-sparse array from every server's slice
    rows = mx.nd.sparse.zeros('row_sparse', (25,))
    kv.row_sparse_pull('big', out=rows, row_ids=mx.nd.array([20, 3, 20], dtype='int64'))
    return {'rows': [rows.indices.asnumpy().tolist(), rows.data.asnumpy().tolist()],
            'big_shards': [list(s) for s in kv._keys['big'].shards],
            'small_shards': [list(s) for s in kv._keys['small'].shards],
            'updated_shapes': [[key, list(shape)] for key, shape in shapes],
            'sums_right': outs[0].asnumpy().tolist() == [total] * 25
            and outs[1].asnumpy().tolist() == [kv.num_workers] * 5}


def scenario_bad_input():
    kv = mx.kv.create('dist_sync')
    found = {}
    try:
        kv.init('bad', mx.nd.zeros((2 + kv.rank,)))
        kv.barrier()
    except mx.base.EmberError as exc:        # raised through the engine: an OperatorError
        found['mismatch'] = str(exc)
        found['mismatch_kind'] = type(exc.__cause__).__name__
    try:
        kv.push('never', mx.nd.ones((2,)))
    except mx.base.EmberError as exc:
        found['before_init'] = str(exc)
    kv.barrier()        # the ranks still agree afterwards
    found['still_works'] = True
    return found


def scenario_overlap():
    """A bucket's all-reduce starts once its own gradients are written, while the gradient of
    the next bucket is still being computed."""
    kv = mx.kv.create('dist_sync')
    kv.init(['ready', 'late'], [mx.nd.zeros((64,)), mx.nd.zeros((64,))])
    ready, late = mx.nd.ones((64,)), mx.nd.ones((64,))
    gate = threading.Event()
    engine.get().push(lambda: gate.wait(60), writes=[late._var], name='slow_backward')
    with config.override(BUCKET_CAP_MB=300 / 2**20):
        kv.pushpull(['ready', 'late'], [ready, late])
    ready.wait_to_read()
    first_done_while_late_blocked = not gate.is_set()
    gate.set()
    late.wait_to_read()
    return {'overlap': first_done_while_late_blocked,
            'sums': [ready.asnumpy()[0].item(), late.asnumpy()[0].item()]}


def scenario_keep():
    """After an all-reduce the store serves the sum on a pull; once the array that received
    it changed, the pull is an error on every rank, not a hang."""
    kv = mx.kv.create('dist_sync')
    kv.init('s', mx.nd.zeros((6,)))
    value, out = mx.nd.ones((6,)) * (kv.rank + 1), mx.nd.zeros((6,))
    kv.pushpull('s', value)
    kv.pull('s', out=out)
    found = {'pulled': out.asnumpy().tolist()}
    kv.pushpull('s', value)
    value[:] = 0
    try:
        kv.pull('s', out=out)
        out.wait_to_read()
    except mx.base.EmberError as exc:
        found['error'] = str(exc)
    kv.barrier()
    return found


def scenario_repeat():
    """A training loop's pushpull: the same keys and arrays each step (planned once, run on
    the calling thread when the arrays are ready), then new arrays under the same keys, an
    `out`, and a changed bucket cap: every call sums what it was given."""
    kv = mx.kv.create('dist_sync')
    kv.init(['a', 'b'], [mx.nd.zeros((5,)), mx.nd.zeros((3,))])
    seen, threads = [], set()
    original = dist._run_bucket

    def spy(world, items):
        threads.add(threading.current_thread() is threading.main_thread())
        original(world, items)
    dist._run_bucket = spy
    try:
        for step in range(3):
            a, b = mx.nd.ones((5,)) * (kv.rank + step), mx.nd.ones((3,)) * step
            for _ in range(2):      # the same arrays twice: the second sums the first's sum
                mx.nd.waitall()     # ready: the all-reduce runs on this thread
                kv.pushpull(['a', 'b'], [a, b])
            seen.append([a.asnumpy()[0].item(), b.asnumpy()[0].item()])
            del a, b                # new arrays may take the old ones' ids
        value, out = mx.nd.ones((5,)), mx.nd.zeros((5,))
        mx.nd.waitall()
        if kv.rank == 1:        # not ready here: an engine worker runs it, against rank 0's
            gate = threading.Timer(0.2, lambda: None)                   # calling thread
            gate.start()
            engine.get().push(gate.join, writes=[value._var], name='slow_backward')
        kv.pushpull('a', value, out=out)
        seen.append(out.asnumpy().tolist())
        with config.override(BUCKET_CAP_MB=16 / 2**20):       # 4 floats: one key a bucket
            kv.pushpull(['a', 'b'], [mx.nd.ones((5,)), mx.nd.ones((3,))])
    finally:
        dist._run_bucket = original
    return {'sums': seen, 'on_main_thread': sorted(threads)}


def scenario_raise():
    kv = mx.kv.create('dist_sync')
    kv.init(0, mx.nd.zeros((4,)))
    if kv.rank == 1:
        raise RuntimeError('rank 1 fails on purpose')
    for _ in range(3):
        kv.pushpull(0, mx.nd.ones((4,)))
    mx.nd.waitall()
    return {}


def scenario_exit_early():
    kv = mx.kv.create('dist_sync')
    kv.init(0, mx.nd.zeros((4,)))
    if kv.rank == 1:
        return {}
    value = mx.nd.ones((4,))
    kv.pushpull(0, value)
    value.wait_to_read()
    return {}


def scenario_die():
    kv = mx.kv.create('dist_sync')
    kv.init(0, mx.nd.zeros((4,)))
    if kv.rank == 1:
        os.kill(os.getpid(), 9)
    value = mx.nd.ones((4,))
    kv.pushpull(0, value)
    value.wait_to_read()
    return {}


def scenario_where():
    mx.nd.ones((1,)).asnumpy()      # the engine starts and pins the process
    return sorted(os.sched_getaffinity(0))


SCENARIOS = {
    'where': scenario_where,
    'dist_sync': lambda: scenario_trainer('dist_sync'),
    'dist_device_sync': lambda: scenario_trainer('dist_device_sync'),
    'buckets': scenario_buckets, 'module': scenario_module, 'async': scenario_async,
    'compression': scenario_compression, 'bigarray': scenario_bigarray,
    'bad_input': scenario_bad_input, 'overlap': scenario_overlap, 'keep': scenario_keep,
    'raise': scenario_raise, 'repeat': scenario_repeat,
    'exit_early': scenario_exit_early, 'die': scenario_die,
}


def main(out_dir, names):
    results = {}
    for name in names:
        results[name] = SCENARIOS[name]()
    rank = mx.kv.create('dist_sync').rank
    with open(os.path.join(out_dir, f'rank-{rank}.json'), 'w') as f:
        json.dump(results, f)


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2:])
