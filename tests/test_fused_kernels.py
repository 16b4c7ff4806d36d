"""The compiled forms of two fused chains, relu(a + b) (ember._kernels.add_relu) and relu's
gradient of a sum (add_relu_grad), against the NumPy blocks they replace: bit for bit."""
import threading

import numpy as np
import pytest

import ember as mx
from ember import autograd, config, engine
from ember.gluon import nn
from ember.op import fused, registry, tuning
from ember.op.registry import KernelContext

kernels = fused._kernels
pytestmark = pytest.mark.skipif(kernels is None, reason='ember._kernels is not built')

RELU = ('Activation', {'act_type': 'relu'})
RELU_GRAD = ('_backward_Activation', {'act_type': 'relu'})
FORWARD = fused.chain_text(2, [('broadcast_add', {}, ['i0', 'i1']), RELU + (['s0'],)], [1])
BACKWARD = fused.chain_text(3, [('elemwise_add', {}, ['i0', 'i1']), RELU_GRAD + (['s0', 'i2'],)],
                            [1])
CHAINS = {'add_relu': FORWARD, 'add_relu_grad': BACKWARD}
# not multiples of the 4 values a vector takes, and one of several blocks (split when asked)
SIZES = [1, 7, 33, 1000, fused.BLOCK + 1003]
LARGE = SIZES[-1]


class CountingKernels:
    """ember._kernels with a count of the calls per function."""

    def __init__(self):
        self.calls = {}
        self.teams = []                  # the threads asked of each call
        self._lock = threading.Lock()    # the kernel threads call it concurrently

    def __getattr__(self, name):
        if not callable(getattr(kernels, name)):
            return getattr(kernels, name)

        def call(*args, **team):
            with self._lock:
                self.calls[name] = self.calls.get(name, 0) + 1
                self.teams.append(team.get('threads', 1))
            return getattr(kernels, name)(*args, **team)
        return call


@pytest.fixture
def proxy(monkeypatch):
    proxy = CountingKernels()
    monkeypatch.setattr(fused, '_kernels', proxy)
    return proxy


@pytest.fixture
def counted(proxy):
    return proxy.calls


def values(size, seed):
    """float32 values with signed zeros, NaN, infinities, negatives and sums that overflow."""
    rng = np.random.default_rng(seed)
    special = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, -1.5, 2.5, 3e38, -3e38, 1e-45],
                       np.float32)
    pool = np.concatenate([special, rng.standard_normal(22).astype(np.float32)])
    return rng.choice(pool, size)


def inputs(chain, size, seed=0):
    return [values(size, seed + k) for k in range(fused.parse_chain(chain).num_inputs)]


def reference(chain, ins):
    """The chain in NumPy, whole arrays at once."""
    with np.errstate(all='ignore'):
        total = ins[0] + ins[1]
        return np.maximum(total, 0) if chain == FORWARD else total * (ins[2] > 0)


def run(chain, ins, out=None, compiled=True):
    """The _FusedElemwise kernel of `chain` (ember._kernels hidden unless `compiled`)."""
    out = np.full_like(ins[0], np.nan) if out is None else out
    saved = fused._kernels
    fused._kernels = saved if compiled else None
    try:
        with np.errstate(all='ignore'):
            registry.get('_FusedElemwise').kernel({'chain': chain}, ins, [out], KernelContext(None))
    finally:
        fused._kernels = saved
    return out


def assert_same_bits(got, want):
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def injected_tuner(cost_ns):
    """A tuner that finds every float32 kernel costs `cost_ns` per element and a split 20 us on
    2 cores, whatever the clock says (10 ns: split from 4000 elements); it runs each sample it
    is given once."""
    def time_kernel(prepare):
        prepare(tuning.SAMPLE_SIZES[0])()
        return cost_ns
    return tuning.Tuner(tuning.Settings(frozenset({'float32'}), 2), time_kernel,
                        lambda: (20000.0, 2))


@pytest.fixture(autouse=True)
def never_split(monkeypatch):
    """No test depends on the clock: kernels are too cheap to split unless a test says."""
    monkeypatch.setattr(tuning, '_tuner', injected_tuner(cost_ns=1e-6))


# ----------------------------------------------------------------------------------------------
# Results

@pytest.mark.parametrize('function', CHAINS)
@pytest.mark.parametrize('size', SIZES)
def test_compiled_chain_equals_the_blocks_bit_for_bit(function, size, counted):
    chain = CHAINS[function]
    ins = inputs(chain, size)
    got = run(chain, ins)
    # no fallback, small or large; above a block the tuner times a sample of the kernel first
    assert counted == {function: 1 + (size > fused.BLOCK)}
    assert_same_bits(got, run(chain, ins, compiled=False))
    assert_same_bits(got, reference(chain, ins))


def test_relu_keeps_nan_and_clears_negative_zero(counted):
    a = np.array([-0.0, -0.0, 0.0, np.nan, -1.0, 1.0, np.inf, -np.inf], np.float32)
    b = np.array([-0.0, 0.0, -0.0, 1.0, 0.5, -0.5, -np.inf, -1.0], np.float32)
    got = run(FORWARD, [a, b])
    assert counted == {'add_relu': 1}
    assert np.isnan(got[[3, 6]]).all() and not np.signbit(got[~np.isnan(got)]).any()
    assert got.tolist()[:3] == [0.0, 0.0, 0.0]


def test_relu_gradient_follows_numpy_multiply(counted):
    a = np.array([-2.0, 1.0, np.nan, np.inf, 3.0, -0.0, -1.0], np.float32)
    b = np.array([1.0, 1.0, 0.0, 0.0, 1.0, -0.0, 0.5], np.float32)
    y = np.array([-1.0, 0.0, 1.0, -1.0, np.nan, -1.0, 2.0], np.float32)
    got = run(BACKWARD, [a, b, y])
    assert counted == {'add_relu_grad': 1}
    # closed: sum * 0 (-0.0 for a negative sum, NaN for infinity); NaN y counts as closed
    assert np.signbit(got[[0, 5]]).all() and np.isnan(got[[2, 3]]).all()
    assert got[[1, 4]].tolist() == [0.0, 0.0] and got[6] == -0.5


@config.override(OMP_NUM_THREADS=2)
@pytest.mark.parametrize('team', [True, False], ids=['openmp team', 'kernel pool'])
@pytest.mark.parametrize('function', CHAINS)
def test_large_arrays_split_across_threads_with_the_same_results(function, team, proxy,
                                                                  monkeypatch):
    if team and not kernels.openmp:
        pytest.skip('ember._kernels is built without OpenMP')
    monkeypatch.setattr(fused, 'use_team', team)
    chain = CHAINS[function]
    tuner = injected_tuner(cost_ns=10.0)
    monkeypatch.setattr(tuning, '_tuner', tuner)
    splits, real = [], engine.parallel_for

    def spy(n, fn, split=None):
        splits.append(split)
        real(n, fn, split)
    monkeypatch.setattr(engine, 'parallel_for', spy)
    ins = inputs(chain, LARGE, seed=5)
    got = run(chain, ins)
    if team:
        # the sample the tuner timed, then one call that splits on a team of two threads
        assert splits == [] and proxy.calls == {function: 2} and proxy.teams == [1, 2]
    else:
        # the sample, then one call per kernel thread
        assert splits == [True] and proxy.calls == {function: 3} and proxy.teams == [1, 1, 1]
    # the kernel was timed under its own name, not as the blocks
    assert tuner.cost_ns(f'_kernels.{function}', np.float32) == 10.0
    assert tuner.cost_ns('_FusedElemwise[' + ','.join(
        s.op.name for s in fused.parse_chain(chain).steps) + ']', np.float32) is None
    assert_same_bits(got, reference(chain, ins))


@pytest.mark.parametrize('function, position', [('add_relu', 'a'), ('add_relu', 'b'),
                                                ('add_relu_grad', 'a'), ('add_relu_grad', 'b'),
                                                ('add_relu_grad', 'y')])
@pytest.mark.parametrize('size', [33, LARGE])
def test_output_may_be_an_input(function, position, size, counted):
    chain = CHAINS[function]
    ins = inputs(chain, size, seed=7)
    want = reference(chain, ins)
    target = ins['aby'.index(position)]
    got = run(chain, ins, out=target)
    assert got is target and counted == {function: 1 + (size > fused.BLOCK)}
    assert_same_bits(got, want)


# the inputs in other places: add(i1, i0) with the relu operator, and y first
SWAPPED_FORWARD = fused.chain_text(2, [('elemwise_add', {}, ['i1', 'i0']), ('relu', {}, ['s0'])],
                                   [1])
SWAPPED_BACKWARD = fused.chain_text(
    3, [('broadcast_add', {}, ['i2', 'i1']), RELU_GRAD + (['s0', 'i0'],)], [1])


def test_inputs_in_other_places_are_passed_where_the_kernel_takes_them(counted):
    assert fused.compiled(SWAPPED_FORWARD).kernel == fused._CompiledKernel('add_relu', (1, 0))
    assert fused.compiled(SWAPPED_BACKWARD).kernel == fused._CompiledKernel('add_relu_grad',
                                                                            (2, 1, 0))
    a, b, y = inputs(BACKWARD, 1000, seed=3)
    assert_same_bits(run(SWAPPED_FORWARD, [b, a]), reference(FORWARD, [a, b]))
    assert_same_bits(run(SWAPPED_BACKWARD, [y, b, a]), reference(BACKWARD, [a, b, y]))
    assert counted == {'add_relu': 1, 'add_relu_grad': 1}


ADD = ('broadcast_add', {}, ['i0', 'i1'])


@pytest.mark.parametrize('steps, outputs', [
    ([ADD, ('Activation', {'act_type': 'tanh'}, ['s0'])], [1]),
    ([('broadcast_mul', {}, ['i0', 'i1']), RELU + (['s0'],)], [1]),
    ([ADD, RELU + (['s0'],)], [0, 1]),
    ([ADD, RELU_GRAD + (['i2', 's0'],)], [1]),
    ([ADD, RELU + (['s0'],), ('exp', {}, ['s1'])], [2]),
], ids=['tanh', 'product', 'sum kept too', 'sum as output', 'a third step'])
def test_other_chains_have_no_compiled_kernel(steps, outputs):
    chain = fused.chain_text(3, steps, outputs)
    assert fused.compiled(chain).kernel is None


# ----------------------------------------------------------------------------------------------
# What runs the blocks instead

@pytest.mark.parametrize('case', ['broadcast', 'float64', 'strided'])
def test_arrays_the_kernels_do_not_take_run_the_blocks(case, counted):
    a, b = values(5 * 8, 1).reshape(5, 8), values(8, 2).reshape(1, 8)
    if case == 'broadcast':
        ins, out = [a, b], np.empty((5, 8), np.float32)
    elif case == 'float64':
        ins = [a.astype(np.float64), np.broadcast_to(b, a.shape).astype(np.float64)]
        out = np.empty(a.shape, np.float64)
    else:
        wide = values(5 * 16, 3).reshape(5, 16)
        ins, out = [wide[:, ::2], a], np.empty((5, 8), np.float32)
    got = run(FORWARD, ins, out=out)
    assert not counted
    assert_same_values(got, reference(FORWARD, ins))


def assert_same_values(got, want):
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_without_the_compiled_module_the_blocks_run(monkeypatch):
    monkeypatch.setattr(fused, '_kernels', None)
    ins = inputs(BACKWARD, 1000)
    assert_same_bits(run(BACKWARD, ins), reference(BACKWARD, ins))


# ----------------------------------------------------------------------------------------------
# The C functions' arguments

def test_kernel_arguments_are_checked():
    x = np.zeros(10, np.float32)
    with pytest.raises(TypeError, match="b: expected float32 values, got buffer format 'd'"):
        kernels.add_relu(x, x.astype(np.float64), np.empty_like(x), 0, 10)
    with pytest.raises(TypeError, match="a: expected float32 values, got buffer format 'i'"):
        kernels.add_relu(x.astype(np.int32), x, np.empty_like(x), 0, 10)
    with pytest.raises(ValueError, match='y: expected 10 float32 values, got 9'):
        kernels.add_relu_grad(x, x, x[:9].copy(), np.empty_like(x), 0, 10)
    with pytest.raises(ValueError, match='out: expected 10 float32 values, got 11'):
        kernels.add_relu(x, x, np.empty(11, np.float32), 0, 10)
    with pytest.raises(ValueError, match=r'element range \[3, 11\): expected 0 <= lo <= hi '
                                         r'<= 10'):
        kernels.add_relu(x, x, np.empty_like(x), 3, 11)
    for lo, hi in [(-1, 5), (6, 5)]:
        with pytest.raises(ValueError, match=r'element range'):
            kernels.add_relu_grad(x, x, x, np.empty_like(x), lo, hi)
    read_only = np.empty_like(x)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match='read-only'):
        kernels.add_relu(x, x, read_only, 0, 10)
    with pytest.raises((ValueError, BufferError), match='contiguous'):
        kernels.add_relu(np.zeros(20, np.float32)[::2], x, np.empty_like(x), 0, 10)


def test_kernels_write_only_their_range():
    a, b = np.arange(-4, 6, dtype=np.float32), np.ones(10, np.float32)
    out = np.full(10, 7.0, np.float32)
    kernels.add_relu(a, b, out, 2, 9)
    assert out.tolist() == [7, 7, 0, 0, 1, 2, 3, 4, 5, 7]
    kernels.add_relu_grad(a, b, b, out, 0, 0)
    assert out.tolist() == [7, 7, 0, 0, 1, 2, 3, 4, 5, 7]


# ----------------------------------------------------------------------------------------------
# Through a graph

class Residual(nn.HybridBlock):
    """Two residual blocks, relu(dense(x) + x): their training graph holds both chains."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.first = nn.Dense(16, flatten=False, in_units=16)
        self.second = nn.Dense(16, flatten=False, in_units=16)

    def hybrid_forward(self, F, x):
        y = F.Activation(self.first(x) + x, act_type='relu')
        return F.Activation(self.second(y) + y, act_type='relu')


def residual_net(values=None):
    """A hybridized Residual, with the parameter values `values` (in order) when given."""
    net = Residual()
    net.initialize(mx.init.Xavier())
    for param, value in zip(net.collect_params().values(), values or ()):
        param.set_data(value)
    net.hybridize()
    return net


def train_step(net, x, head):
    """The output and the gradients of x and of every parameter after one recorded step."""
    x = x.copy()
    x.attach_grad()
    with autograd.record():
        out = net(x)
    out.backward(head)
    grads = [p.grad().asnumpy() for p in net.collect_params().values()]
    return [out.asnumpy(), x.grad.asnumpy()] + grads


def test_hybridized_training_runs_the_kernels_and_matches_the_unfused_graph(counted):
    rng = np.random.default_rng(4)
    x = mx.nd.array(rng.standard_normal((6, 5, 16)).astype(np.float32))
    head = mx.nd.array(rng.standard_normal((6, 5, 16)).astype(np.float32))
    net = residual_net()
    fused_results = train_step(net, x, head)
    assert counted == {'add_relu': 2, 'add_relu_grad': 1}
    counted.clear()
    with config.override(MXNET_USE_FUSION=False):
        values = [param.data() for param in net.collect_params().values()]
        plain_results = train_step(residual_net(values), x, head)
    assert not counted
    for got, want in zip(fused_results, plain_results):
        assert_same_values(got, want)
