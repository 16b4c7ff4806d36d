"""Reduced precision: stochastic rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN, _SEED), bf16
storage (XLA_USE_BF16, XLA_DOWNCAST_BF16, read once at start: tested in new processes) and the
small CNN trained under XLA_USE_BF16."""
import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.op import precision

REPO = Path(__file__).resolve().parents[1]


def accumulate(steps, start=256.0, step=0.5):
    """A bfloat16 accumulator that adds `step` `steps` times, each sum cast back."""
    acc = mx.nd.array([start]).astype('bfloat16')
    for _ in range(steps):
        acc = (acc.astype('float32') + step).astype('bfloat16')
    return float(acc.asnumpy()[0])


def test_a_bf16_accumulator_stalls_to_nearest_even_and_tracks_the_sum_stochastically():
    exact = 256.0 + 0.5 * 600
    assert accumulate(600) == 256.0           # 256.5 rounds back to 256, every time
    with config.override(NEURON_RT_STOCHASTIC_ROUNDING_EN=True):
        tracked = accumulate(600)
    assert abs(tracked - exact) < 0.15 * (exact - 256.0), tracked


def test_stochastic_rounding_is_seeded_and_reproducible(monkeypatch):
    values = mx.nd.array(np.linspace(1, 2, 4000, dtype=np.float32))

    def cast(seed):
        monkeypatch.setattr(precision, '_keys', itertools.count(1))   # the same program order
        with config.override(NEURON_RT_STOCHASTIC_ROUNDING_EN=True,
                             NEURON_RT_STOCHASTIC_ROUNDING_SEED=seed):
            return values.astype('bfloat16').asnumpy().astype(np.float32)
    first, again, other = cast(1), cast(1), cast(2)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    nearest = values.astype('bfloat16').asnumpy().astype(np.float32)
    assert not np.array_equal(first, nearest)
    wide = values.asnumpy()
    assert abs(float((first - wide).mean())) < abs(float((nearest - wide).mean())) + 1e-4


@pytest.mark.parametrize('target, spacing', [('fp16', 2.0 ** -10), ('tf32', 2.0 ** -10),
                                             ('bf16', 2.0 ** -7)])
def test_each_format_rounds_up_with_the_chance_of_its_distance(target, spacing):
    # a quarter of the spacing above 1.0: nearest-even gives 1.0, stochastic rounding
    # 1 + spacing a quarter of the time
    values = np.full(20000, 1.0 + spacing / 4, np.float32)
    assert set(precision.rounded(values, target).tolist()) == {1.0}
    with precision.keyed_stream(5):
        rounded = precision.rounded(values, target)
    assert set(rounded.tolist()) == {1.0, 1.0 + spacing}
    assert abs(float(rounded.mean()) - (1.0 + spacing / 4)) < spacing / 40


def test_saturation_keeps_overflow_finite():
    big = np.array([1e6, -1e6, 3.39e38, np.nan], np.float32)
    half = precision.rounded(big, 'fp16', saturate=True)
    assert half[:2].tolist() == [65504.0, -65504.0] and np.isnan(half[3])
    assert np.isinf(precision.rounded(big, 'fp16')[:2]).all()
    assert np.isfinite(precision.rounded(big[:3], 'bf16', saturate=True)).all()


def test_casts_in_a_graph_round_stochastically_per_node_and_call():
    net = mx.sym.amp_cast(mx.sym.var('x'), dtype='bfloat16')
    x = mx.nd.array(np.full(1000, 1.0 + 2.0 ** -9, np.float32))
    with config.override(NEURON_RT_STOCHASTIC_ROUNDING_EN=True):
        exe = net.bind(mx.cpu(), {'x': x})
        first = exe.forward()[0].asnumpy().astype(np.float32)
        second = exe.forward()[0].asnumpy().astype(np.float32)
    assert set(first.tolist()) == {1.0, 1.0078125}
    assert not np.array_equal(first, second)          # a fresh stream per call


# ----------------------------------------------------------------------------------------------
# Kernels over narrow storage (precision.widened), on bfloat16 arrays made by hand

class _View:
    def __init__(self, array):
        self.shape, self.dtype, self.stored = array.shape, np.dtype(np.float32), array.dtype


def _multi_sgd_mom(arrays, lrs, sliceable):
    """multi_sgd_mom_update over bfloat16 (weight, grad, mom) triples, rounded to nearest."""
    from ember.op import registry
    op = registry.get('multi_sgd_mom_update')
    attrs = op.parse_attrs({'num_weights': len(lrs), 'lrs': lrs, 'wds': [1e-4] * len(lrs),
                            'momentum': 0.9})
    ins = [a for triple in arrays for a in triple]
    outs = [triple[0] for triple in arrays]
    views = [_View(a) for a in ins]
    kernel = precision.widened(op.kernel, views, [_View(o) for o in outs],
                               op.mutate_indices(attrs), sliceable=sliceable)
    kernel(attrs, ins, outs, registry.KernelContext(mx.cpu()))


def test_a_sliceable_update_runs_in_slices_with_the_same_result(monkeypatch):
    rng = np.random.default_rng(0)
    shapes = [(300, 7), (5,), (1000,)]
    made = [[rng.standard_normal(shape).astype(precision.BFLOAT16) for _ in range(3)]
            for shape in shapes]
    whole = [[a.copy() for a in triple] for triple in made]
    sliced = [[a.copy() for a in triple] for triple in made]
    _multi_sgd_mom(whole, [0.1, 0.2, 0.3], sliceable=False)
    calls = []
    real = precision._scratch

    def counted(needed, workspace=None):
        calls.append(needed)
        return real(needed, workspace)
    monkeypatch.setattr(precision, '_scratch', counted)
    monkeypatch.setattr(precision, 'SLICE_BYTES', 4096)
    _multi_sgd_mom(sliced, [0.1, 0.2, 0.3], sliceable=True)
    # the copies' 3 x 4 x 3105 x 4 bytes in ten slices: the 5-element weight bounds the count
    assert len(calls) == 5 and max(calls) <= 3 * 4 * 3105 * 4 // 5 + 12 * 64
    for a, b in zip(itertools.chain(*whole), itertools.chain(*sliced)):
        assert a.tobytes() == b.tobytes()
    assert any(a.tobytes() != b.tobytes() for a, b in zip(itertools.chain(*whole),
                                                           itertools.chain(*made)))


def test_a_call_larger_than_the_kept_scratch_frees_its_copies(monkeypatch):
    from ember.op import registry
    monkeypatch.setattr(precision, 'KEPT_SCRATCH', 1 << 16)
    double = precision.widened(lambda attrs, ins, outs, ctx: np.multiply(ins[0], 2, out=outs[0]),
                               [_View(np.zeros(1, precision.BFLOAT16))],
                               [_View(np.zeros(1, precision.BFLOAT16))])
    for size in (1000, 100_000, 1000):
        x = np.arange(size).astype(precision.BFLOAT16)
        out = np.zeros(size, precision.BFLOAT16)
        double({}, [x], [out], registry.KernelContext(mx.cpu()))
        assert np.array_equal(out.astype(np.float32), 2 * x.astype(np.float32))
        kept = precision._local.scratch.buffer.size
        assert kept <= 1 << 16          # 800 KB of copies were not kept by this thread
    assert precision.scratch_bytes() >= 2 * 4 * 100_000


# ----------------------------------------------------------------------------------------------
# bf16 storage, in new processes

CHILD = '''
import hashlib, json
import numpy as np
import ember as mx
from ember.executor import pipeline
acc = mx.nd.array([256.0])
for _ in range(600):
    acc += 0.5
wide = mx.nd.array(np.linspace(1, 2, 5000), dtype='float64')
cast = (mx.nd.array(np.linspace(1, 2, 5000)) * 1.0001).asnumpy()
net = mx.sym.relu(mx.sym.FullyConnected(mx.sym.var('x'), num_hidden=256, name='fc'))
shapes = {'x': (64, 128), 'fc_weight': (256, 128), 'fc_bias': (256,)}
g = pipeline.compile_graph(net.to_graph(), shapes, {n: np.float32 for n in shapes})
exe = net.simple_bind(mx.cpu(), x=(8, 4))
exe.arg_dict['x'][:] = 1
exe.arg_dict['fc_weight'][:] = 0.25
out = exe.forward()[0]
from ember.op import precision
big = net.simple_bind(mx.cpu(), x=(64, 128))
big.arg_dict['x'][:] = 1
big.forward()[0].wait_to_read()
from ember.ndarray import io as ndio
loaded = mx.nd.load_frombuffer(ndio.dumps({'w': np.array([1.5, -2.25], np.float32)}))['w']
print(json.dumps({
    'loaded': loaded.asnumpy().tolist(), 'loaded_stored': str(loaded._view.stored),
    'scratch': precision.scratch_bytes(),
    'acc': float(acc.asscalar()), 'dtype': acc.dtype.__name__,
    'stored': str(acc._view.stored), 'nbytes': acc._view.nbytes,
    'float64_stored': str(wide._view.stored), 'float64_reads': str(wide.asnumpy().dtype),
    'cast_digest': hashlib.sha256(cast.tobytes()).hexdigest(),
    'planned': g.attrs['memory_plan'].entry_bytes, 'out': out.asnumpy()[0, :2].tolist(),
    'workspaces': [g.attrs['memory_plan'].sizes[s] for s in g.attrs['memory_plan'].workspaces
                   if s >= 0],
    'out_dtype': str(out.asnumpy().dtype)}))
'''


def run_child(**env):
    child = subprocess.run([sys.executable, '-c', CHILD], cwd=REPO, capture_output=True,
                           text=True, timeout=120,
                           env=config.child_environ(PYTHONPATH=str(REPO), **env))
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout)


def test_xla_use_bf16_stores_narrow_reads_wide_and_rounds_stochastically():
    plain = run_child()
    bf16 = run_child(XLA_USE_BF16=1)
    assert (plain['stored'], plain['nbytes'], plain['acc']) == ('float32', 4, 556.0)
    assert (bf16['dtype'], bf16['stored'], bf16['nbytes']) == ('float32', 'bfloat16', 2)
    assert bf16['float64_stored'] == 'bfloat16' and bf16['float64_reads'] == 'float64'
    assert abs(bf16['acc'] - 556.0) < 45          # stochastic rounding is on by default
    assert bf16['planned'] * 2 == plain['planned']
    # the full-precision copies of a node's arrays have their place in the plan: those of
    # FullyConnected (relu fused into it): x, weight, bias and output
    assert plain['workspaces'] == []
    assert bf16['workspaces'] == [4 * (64 * 128 + 256 * 128 + 256 + 64 * 256)]
    # and the executor runs the node there: no thread's scratch grew to those copies' size
    assert plain['scratch'] == 0 and 0 < bf16['scratch'] < bf16['workspaces'][0]
    assert bf16["out"] == [1.0, 1.0] and bf16["out_dtype"] == "float32"
    # a loaded file's values go into narrow storage too (not read straight into it)
    assert (plain['loaded_stored'], bf16['loaded_stored']) == ('float32', 'bfloat16')
    assert plain['loaded'] == bf16['loaded'] == [1.5, -2.25]
    nearest = run_child(XLA_USE_BF16=1, NEURON_RT_STOCHASTIC_ROUNDING_EN=0)
    assert nearest['acc'] == 256.0
    # the same seed gives the same bits whatever the threads
    threads = run_child(XLA_USE_BF16=1, OMP_NUM_THREADS=1, MXNET_CPU_WORKER_NTHREADS=3)
    assert threads['cast_digest'] == bf16['cast_digest'] and threads['acc'] == bf16['acc']
    downcast = run_child(XLA_DOWNCAST_BF16=1)
    assert (downcast['stored'], downcast['float64_stored']) == ('bfloat16', 'float32')


def test_the_small_cnn_trains_to_the_same_accuracy_with_bf16_storage():
    script = ('import json, sys; sys.path.insert(0, "tests"); import test_precision as t; '
              'print(json.dumps(t.train_small_cnn()))')
    # algorithms by rule: measured choices would differ between the runs (timing noise)
    child = subprocess.run([sys.executable, '-c', script], cwd=REPO, capture_output=True,
                           text=True, timeout=300,
                           env=config.child_environ(PYTHONPATH=str(REPO), XLA_USE_BF16=1,
                                                    MXNET_CUDNN_AUTOTUNE_DEFAULT=0))
    assert child.returncode == 0, child.stderr
    bf16 = json.loads(child.stdout)
    assert bf16['stored'] == 'bfloat16'
    with config.override(MXNET_CUDNN_AUTOTUNE_DEFAULT='0'):
        wide = train_small_cnn()
    assert wide['stored'] == 'float32'
    assert wide['accuracy'] >= 0.95 and abs(bf16['accuracy'] - wide['accuracy']) <= 0.01, \
        (wide, bf16)


def train_small_cnn():
    """test_train_cnn's network and data (fewer images, more epochs, 2000 held out: one
    image is 0.05%), hybridized: held-out accuracy and the weights' storage dtype."""
    from test_train_cnn import evaluate, make_shapes, small_cnn, train
    state = np.random.get_state()
    np.random.seed(0)
    mx.random.seed(0)
    try:
        loader = mx.gluon.data.DataLoader
        data = mx.gluon.data.ArrayDataset
        train_loader = loader(data(*make_shapes(800, seed=1)), batch_size=32, shuffle=True,
                              last_batch='discard')
        test_loader = loader(data(*make_shapes(2000, seed=2)), batch_size=200)
        net = small_cnn()
        net.collect_params().initialize(mx.init.Xavier(), ctx=mx.cpu())
        net.hybridize()
        train(net, train_loader, mx.cpu(), epochs=6)
        return {'accuracy': evaluate(net, test_loader, mx.cpu()),
                'stored': str(net[0].weight.data()._view.stored)}
    finally:
        np.random.set_state(state)
