"""The CUDA backend end to end: operators, autograd, hybridized networks, training and random
draws on gpu(0), checked against the CPU. Skipped where no GPU is visible (CI has none); the
operator table (test_operator_table.py) runs every row on gpu(0) as well.

The first test runs everywhere: it checks the NumPy-Generator methods that
``backend.gpu.DeviceGenerator`` builds for CuPy, with NumPy standing in for CuPy."""
import numpy as np
import pytest

import ember as mx
from ember import autograd, backend, gluon, nd
from ember.backend.gpu import DeviceGenerator

HAS_GPU = backend.num_gpus() > 0
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason='needs CuPy and a CUDA device')


class _NoExtras:
    """A generator with only the methods CuPy's Generator has that DeviceGenerator uses."""

    def __init__(self, seed):
        self._gen = np.random.default_rng(seed)

    def standard_normal(self, size=None):
        return self._gen.standard_normal(size)

    def random(self, size=None, dtype=np.float64):
        return self._gen.random(size, dtype=dtype)

    def gamma(self, shape, scale=1.0, size=None):
        return self._gen.gamma(shape, scale, size)

    def poisson(self, lam=1.0, size=None):
        return self._gen.poisson(lam, size)


def test_device_generator_builds_the_missing_numpy_methods():
    gen = DeviceGenerator(np, _NoExtras(0))
    normal = gen.normal(1.0, 2.0, 200_000)
    assert abs(normal.mean() - 1.0) < 0.03 and abs(normal.std() - 2.0) < 0.03
    failures = gen.negative_binomial(3, 0.4, 200_000)       # mean k(1-p)/p, var k(1-p)/p^2
    assert abs(failures.mean() - 4.5) < 0.05 and abs(failures.var() - 11.25) < 0.3
    assert not gen.negative_binomial(3, 1.0, 10).any()       # p = 1: no failures
    assert sorted(gen.permutation(50).tolist()) == list(range(50))
    assert gen.random(3).shape == (3,)                       # everything else is delegated


def _both(fn):
    """fn(ctx) on the CPU and on gpu(0), as NumPy arrays."""
    return [[a.asnumpy() for a in fn(ctx)] for ctx in (mx.cpu(), mx.gpu(0))]


@needs_gpu
def test_arrays_live_on_the_gpu_and_copy_back():
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = nd.array(values, ctx=mx.gpu(0))
    b = (a * 2 + 1).sum(axis=1)
    assert b.context == mx.gpu(0)
    np.testing.assert_allclose(b.asnumpy(), (values * 2 + 1).sum(1))
    np.testing.assert_allclose(nd.dot(a, a.T).asnumpy(), values @ values.T, rtol=1e-6)
    host = a.copyto(mx.cpu())
    assert host.context == mx.cpu() and np.array_equal(host.asnumpy(), values)


@needs_gpu
def test_convolution_gradients_match_the_cpu():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)

    def run(ctx):
        data, weight = nd.array(x, ctx=ctx), nd.array(w, ctx=ctx)
        data.attach_grad()
        weight.attach_grad()
        with autograd.record():
            y = nd.Convolution(data, weight, kernel=(3, 3), num_filter=4, no_bias=True,
                               pad=(1, 1))
            y = nd.Pooling(nd.relu(y), kernel=(2, 2), stride=(2, 2), pool_type='max')
            loss = (y * y).sum()
        loss.backward()
        return y, data.grad, weight.grad
    cpu, gpu = _both(run)
    for got, want in zip(gpu, cpu):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _resnet18():
    mx.random.seed(0)
    net = gluon.model_zoo.vision.get_model('resnet18_v1', classes=10)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.hybridize(static_alloc=True, static_shape=True)
    return net


@needs_gpu
def test_hybridized_network_gives_the_cpu_output():
    net = _resnet18()
    x = np.random.default_rng(1).standard_normal((4, 3, 64, 64)).astype(np.float32)
    on_cpu = net(nd.array(x)).asnumpy()
    net.collect_params().reset_ctx(mx.gpu(0))
    on_gpu = net(nd.array(x, ctx=mx.gpu(0)))
    assert on_gpu.context == mx.gpu(0)
    np.testing.assert_allclose(on_gpu.asnumpy(), on_cpu, rtol=1e-3, atol=1e-3)


@needs_gpu
def test_training_on_the_gpu_lowers_the_loss():
    gpu = mx.gpu(0)
    net = _resnet18()
    net.collect_params().reset_ctx(gpu)
    trainer = gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.05,
                                                          'momentum': 0.9})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.default_rng(2)
    x = nd.array(rng.standard_normal((16, 3, 32, 32)).astype(np.float32), ctx=gpu)
    y = nd.array(rng.integers(0, 10, 16).astype(np.float32), ctx=gpu)
    losses = []
    for _ in range(6):
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(16)
        losses.append(loss.mean().asscalar())
    assert all(p.data().context == gpu for p in net.collect_params().values())
    assert losses[-1] < losses[0] / 4, losses


@needs_gpu
@pytest.mark.parametrize('name, attrs, mean, var', [
    ('normal', dict(loc=1, scale=2), 1, 4),
    ('uniform', dict(low=-1, high=1), 0, 1 / 3),
    ('exponential', dict(lam=2), 0.5, 0.25),
    ('gamma', dict(alpha=2, beta=3), 6, 18),
    ('poisson', dict(lam=4), 4, 4),
    ('negative_binomial', dict(k=3, p=0.4), 4.5, 11.25),
    ('generalized_negative_binomial', dict(mu=2, alpha=0.5), 2, 4),
    ('randint', dict(low=0, high=10), 4.5, 8.25),
])
def test_random_draws_on_the_gpu(name, attrs, mean, var):
    mx.random.seed(3)
    draws = getattr(nd.random, name)(shape=(200_000,), ctx=mx.gpu(0), **attrs)
    assert draws.context == mx.gpu(0)
    values = draws.asnumpy().astype(np.float64)
    assert abs(values.mean() - mean) < 0.02 * max(1, mean)
    assert abs(values.var() - var) < 0.03 * max(1, var)


@needs_gpu
def test_shuffle_dropout_and_embedding_on_the_gpu():
    gpu = mx.gpu(0)
    mx.random.seed(4)
    shuffled = nd.shuffle(nd.array(np.arange(10), ctx=gpu)).asnumpy()
    assert sorted(shuffled.tolist()) == list(range(10))
    kept = (nd.Dropout(nd.ones((10_000,), ctx=gpu), p=0.5, mode='always').asnumpy() > 0)
    assert 0.45 < kept.mean() < 0.55
    table = nd.array(np.arange(12, dtype=np.float32).reshape(4, 3), ctx=gpu)
    rows = nd.Embedding(nd.array([0, 3, 7, -1], ctx=gpu), table, input_dim=4, output_dim=3)
    np.testing.assert_array_equal(rows.asnumpy()[:, 0], [0, 9, 9, 0])   # clipped, as MXNet


@needs_gpu
def test_a_gpu_streams_state_comes_back_after_draws():
    from ember import resource
    for stream in (resource.random_stream(mx.gpu(0)), resource.dropout_state(mx.gpu(0))):
        saved = stream.state()
        first = stream.generator.random(1000).get()
        stream.restore(saved)
        assert np.array_equal(stream.generator.random(1000).get(), first)


@needs_gpu
def test_a_compiled_dropout_network_draws_alike_compiled_or_loaded(tmp_path):
    """The compilation's trial run on the GPU puts the random and dropout streams back."""
    from ember import config
    from ember.compiler import counters
    from ember.executor import compile as compiling
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, in_units=64), gluon.nn.Dropout(0.5))
    net.initialize(ctx=mx.gpu(0))
    x = nd.ones((32, 64), ctx=mx.gpu(0))

    def masks():
        mx.random.seed(3)
        net.hybridize(active=False)
        net.hybridize()
        with autograd.record():
            out = net(x)
        return (out.asnumpy() == 0), nd.random.uniform(shape=4, ctx=mx.gpu(0)).asnumpy()
    compiling.LOADED.clear()
    try:
        with config.override(NEURON_CC_FLAGS=f'--cache_dir={tmp_path}'):
            compiled = masks()                  # compiles, the trial run included
            compiling.LOADED.clear()            # as a new process would start
            loads = counters()['loads']
            loaded = masks()
            assert counters()['loads'] > loads
    finally:
        compiling.LOADED.clear()
    assert np.array_equal(compiled[0], loaded[0]) and np.array_equal(compiled[1], loaded[1])


@needs_gpu
@pytest.mark.parametrize('kind', ['device', 'nccl'])
def test_kvstore_sums_arrays_on_the_gpu(kind):
    kv = mx.kv.create(kind)
    places = [mx.gpu(0), mx.gpu(0), mx.cpu()] if kind == 'device' else [mx.gpu(0)] * 2
    kv.init('w', nd.zeros((3,), ctx=mx.gpu(0)))
    outs = [nd.zeros((3,), ctx=p) for p in places]
    kv.pushpull('w', [nd.ones((3,), ctx=p) * (i + 1) for i, p in enumerate(places)], out=outs)
    total = float(sum(range(1, len(places) + 1)))
    assert [o.asnumpy().tolist() for o in outs] == [[total] * 3] * len(places)


# ----------------------------------------------------------------------------------------------
# The whole operator table on gpu(0) against the CPU, and the six benchmark networks

def _table_cases():
    import test_operator_table as table
    return table


def _relative_error(got, want):
    want = np.asarray(want, np.float64)
    scale = max(np.linalg.norm(want.ravel()), 1e-30)
    return float(np.linalg.norm((np.asarray(got, np.float64) - want).ravel()) / scale)


def _run_case(table, case, values, ctx, heads):
    """Outputs and input gradients of one table row on `ctx` (float64, as the table runs)."""
    from ember.op import registry
    arrays = [nd.array(v, ctx=ctx, dtype=np.float64) for v in values]
    differentiable = case.grad != () and registry.get(case.op).gradient is not None
    if differentiable:
        for array in arrays:
            array.attach_grad()
    with autograd.record(train_mode=case.train):
        outputs = table._function(case)(*arrays)
    if differentiable:
        autograd.backward(outputs, [nd.array(h, ctx=ctx, dtype=o.dtype)
                                    for h, o in zip(heads(outputs), outputs)])
    wanted = range(len(arrays)) if case.grad is None else (case.grad or ())
    grads = [arrays[i].grad.asnumpy() for i in wanted] if differentiable else []
    return [o.asnumpy() for o in outputs], grads


def _gpu_table_params():
    try:
        table = _table_cases()
    except ImportError:
        return []
    return [pytest.param(case, id=case.id, marks=case.marks) for case in table.CASES]


@needs_gpu
@pytest.mark.parametrize('case', _gpu_table_params())
def test_operator_table_row_on_gpu_gives_the_cpus_results(case):
    import zlib
    from ember.op import registry
    table = _table_cases()
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    values = [draw(rng) for draw in case.inputs]
    head_rng = np.random.default_rng(1)
    head_values = {}

    def heads(outputs):
        key = tuple(o.shape for o in outputs)
        if key not in head_values:
            head_values[key] = [head_rng.standard_normal(o.shape) for o in outputs]
        return head_values[key]
    mx.random.seed(0)
    cpu = _run_case(table, case, values, mx.cpu(), heads)
    mx.random.seed(0)
    gpu = _run_case(table, case, values, mx.gpu(0), heads)
    random = registry.get(case.op).random
    for index, (got, want) in enumerate(zip(gpu[0] + gpu[1], cpu[0] + cpu[1])):
        assert got.shape == want.shape, f'{case.id} result {index}'
        if not random:      # random draws differ between devices; shapes must not
            error = _relative_error(got, want)
            assert error <= max(case.rtol, 1e-9) * 10, f'{case.id} result {index}: {error}'


BENCH_NETWORKS = ('alexnet', 'vgg16', 'inceptionbn', 'inceptionv3', 'resnet50_v1',
                  'resnet152_v1')


@needs_gpu
@pytest.mark.parametrize('name', BENCH_NETWORKS)
def test_benchmark_network_on_gpu_gives_the_cpus_output(name):
    mx.random.seed(0)
    net = gluon.model_zoo.vision.get_model(name, classes=1000)
    net.initialize(mx.init.Xavier(magnitude=2.0), ctx=mx.cpu())
    net.hybridize(static_alloc=True, static_shape=True)
    size = 299 if name == 'inceptionv3' else 224
    x = np.random.default_rng(5).standard_normal((2, 3, size, size)).astype(np.float32)
    on_cpu = net(nd.array(x)).asnumpy()
    net.collect_params().reset_ctx(mx.gpu(0))
    on_gpu = net(nd.array(x, ctx=mx.gpu(0)))
    assert on_gpu.context == mx.gpu(0)
    assert _relative_error(on_gpu.asnumpy(), on_cpu) < 1e-3


@needs_gpu
def test_fused_elementwise_group_runs_as_one_cuda_kernel():
    from ember.op import fused
    x = mx.sym.var('x')
    y = mx.sym.relu(mx.sym.sigmoid(x * 2 + 1) * x)
    values = np.random.default_rng(6).standard_normal((64, 33)).astype(np.float32)
    results = {}
    for ctx in (mx.cpu(), mx.gpu(0)):
        executor = y.bind(ctx, {'x': nd.array(values, ctx=ctx)})
        results[ctx] = executor.forward()[0].asnumpy()
    assert any(program._cuda for program in fused._PROGRAMS.values())
    np.testing.assert_allclose(results[mx.gpu(0)], results[mx.cpu()], rtol=1e-5, atol=1e-6)


@needs_gpu
def test_streams_keep_a_copy_between_devices_in_order():
    gpu = mx.gpu(0)
    a = nd.array(np.arange(1 << 20, dtype=np.float32), ctx=gpu)
    for _ in range(20):                 # many kernels queued before the copy reads the result
        a = a * 1.0001 + 1
    host = a.copyto(mx.cpu()).asnumpy()
    expected = np.arange(1 << 20, dtype=np.float32)
    for _ in range(20):
        expected = expected * np.float32(1.0001) + np.float32(1)
    np.testing.assert_allclose(host, expected, rtol=1e-5)


@needs_gpu
def test_gpu_pool_statistics_and_empty_cache():
    from ember import storage
    pool = storage.manager(mx.gpu(0))
    array = nd.zeros((1 << 20,), ctx=mx.gpu(0))
    array.wait_to_read()
    assert pool.stats()['in_use'] >= 4 << 20
    del array
    mx.gpu(0).empty_cache()
    assert pool.stats()['cached'] == 0
    free, total = mx.context.gpu_memory_info(0)
    assert 0 < free <= total


@needs_gpu
def test_cudnn_is_loaded_and_its_version_checked():
    from ember.backend import cudnn
    assert cudnn.library() is not None, cudnn.status()
    assert cudnn.library().version() >= 90000
