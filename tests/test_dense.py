"""The compiled dense kernel (ember._winograd.dense): an inner product of a few rows that
reads each row of the weight once, which FullyConnected runs for batches of 1 to 4."""
import numpy as np
import pytest

import ember as mx
from ember.op import fused
from ember.op.nn import fully_connected, onednn_provider
from ember.op.nn.conv import compiled

_winograd = compiled.MODULE
needs_module = pytest.mark.skipif(_winograd is None, reason='ember._winograd is not built')


def product(seed, rows, inputs, outputs):
    """x (rows, inputs), w (outputs, inputs), bias and the float64 x w^T + bias."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, inputs)).astype(np.float32)
    w = rng.standard_normal((outputs, inputs)).astype(np.float32)
    bias = rng.standard_normal(outputs).astype(np.float32)
    return x, w, bias, x.astype(np.float64) @ w.T.astype(np.float64) + bias


def dense(x, w, bias, relu=False, calls=1, chunk=8, span=None):
    out = np.full((x.shape[0], w.shape[0]), np.nan, np.float32)
    claim = np.zeros(1, np.int64)
    span = span or (0, w.shape[0])
    _winograd.team(_winograd.dense, [(x, w, bias, out, relu, span, chunk, claim)] * calls)
    return out


def assert_close(out, expected):
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


# rows: 1 to 4 in one pass over the weight, 5 and 7 in two; inputs: 16 a whole vector, 1, 15,
# 17 and 100 with a tail; outputs: whole and partial blocks of 2 and 4
@pytest.mark.parametrize('rows', [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize('inputs', [1, 15, 16, 17, 100])
@pytest.mark.parametrize('outputs', [1, 3, 5, 8, 37])
def test_dense_matches_float64(build, rows, inputs, outputs):
    x, w, bias, expected = product(rows * 100 + inputs, rows, inputs, outputs)
    assert_close(dense(x, w, bias), expected)
    assert_close(dense(x, w, None), expected - bias)
    assert_close(dense(x, w, bias, relu=True), np.maximum(expected, 0))


@needs_module
def test_dense_writes_only_its_range_of_outputs():
    x, w, bias, expected = product(1, 3, 40, 30)
    out = dense(x, w, bias, span=(7, 19), chunk=5)
    assert_close(out[:, 7:19], expected[:, 7:19])
    assert np.isnan(out[:, :7]).all() and np.isnan(out[:, 19:]).all()


@needs_module
def test_dense_bits_do_not_depend_on_threads_or_chunks():
    """Each output is summed by one thread in the same order, however the outputs are cut."""
    x, w, bias, _ = product(2, 2, 300, 70)
    first = dense(x, w, bias, calls=1, chunk=70)
    for calls, chunk in ((3, 1), (2, 7), (3, 64)):
        assert dense(x, w, bias, calls=calls, chunk=chunk).tobytes() == first.tobytes()


@needs_module
def test_the_avx512_and_avx2_dense_agree_bit_for_bit(wide_and_narrow):
    """The AVX-512 build sums 16 lanes in one vector and 4 outputs at a time, the AVX2 one in
    two vectors and 2 outputs: every output is still the same chain of multiply-adds."""
    x, w, bias, expected = product(3, 3, 131, 23)
    wide, narrow = wide_and_narrow(lambda: dense(x, w, bias, relu=True))
    assert wide.tobytes() == narrow.tobytes()
    assert_close(wide, np.maximum(expected, 0))


@needs_module
def test_dense_relu_keeps_nan_as_numpy_maximum_does():
    x = np.array([[1.0, np.nan], [1.0, 2.0]], np.float32)
    w = np.array([[1.0, 1.0], [-1.0, 0.0], [2.0, 0.0]], np.float32)
    out = dense(x, w, None, relu=True)
    expected = np.maximum(x @ w.T, 0)
    np.testing.assert_array_equal(out, expected)
    assert np.isnan(out[0, 0]) and out[1, 1] == 0.0


@needs_module
@pytest.mark.parametrize('change, message', [
    (dict(x=np.zeros((2, 5), np.float32)), r'x \(2, 5\), w \(3, 4\) and out \(2, 3\)'),
    (dict(out=np.zeros((1, 3), np.float32)), r'and out \(1, 3\): expected x \(rows, inputs\)'),
    (dict(x=np.zeros((2, 0), np.float32), w=np.zeros((3, 0), np.float32)),
     'at least 1 input'),
    (dict(span=(2, 4)), r'outputs \[2, 4\): expected 0 <= lo <= hi <= 3'),
    (dict(chunk=0), 'chunk 0: expected at least 1 output'),
    (dict(w=np.zeros((3, 4))), 'w: expected float32 values'),
    (dict(x=np.zeros((2, 8), np.float32)[:, ::2]), 'x: ndarray is not C-contiguous'),
    (dict(out=np.zeros(6, np.float32)), 'out: expected a 2-D matrix, got 1 dimensions'),
    (dict(bias=np.zeros(2, np.float32)), 'bias'),
])
def test_dense_errors_name_the_argument(change, message):
    args = dict(x=np.zeros((2, 4), np.float32), w=np.zeros((3, 4), np.float32), bias=None,
                out=np.zeros((2, 3), np.float32), relu=False, span=(0, 3), chunk=4)
    args.update(change)
    with pytest.raises((ValueError, TypeError, BufferError), match=message):
        _winograd.dense(*args.values())


# ----------------------------------------------------------------------------------------------
# FullyConnected on it

@pytest.fixture
def dense_calls(monkeypatch):
    """The calls FullyConnected makes of the dense kernel, as (rows, relu)."""
    calls = []
    run = fully_connected.run_compiled

    def counted(kernel, elements, call_args):
        if kernel is _winograd.dense:
            calls.append((call_args[0][0].shape[0], call_args[0][4]))
        run(kernel, elements, call_args)
    monkeypatch.setattr(fully_connected, 'run_compiled', counted)
    return calls


@needs_module
@pytest.mark.parametrize('batch', [1, 2, 4, 5])
@pytest.mark.parametrize('no_bias', [False, True])
def test_fully_connected_of_a_few_rows_runs_the_dense_kernel(dense_calls, batch, no_bias):
    x, w, bias, expected = product(batch, batch, 60, 24)
    args = [mx.nd.array(x.reshape(batch, 3, 4, 5)), mx.nd.array(w)]
    args += [] if no_bias else [mx.nd.array(bias)]
    out = mx.nd.FullyConnected(*args, num_hidden=24, no_bias=no_bias).asnumpy()
    assert_close(out, expected - bias if no_bias else expected)
    assert dense_calls == ([(batch, False)] if batch <= fully_connected.DENSE_MAX_ROWS else [])


@needs_module
def test_unflattened_data_runs_its_leading_axes_as_rows(dense_calls):
    x, w, bias, expected = product(9, 4, 10, 6)
    out = mx.nd.FullyConnected(mx.nd.array(x.reshape(2, 2, 10)), mx.nd.array(w),
                               mx.nd.array(bias), num_hidden=6, flatten=False).asnumpy()
    assert_close(out, expected.reshape(2, 2, 6))
    assert dense_calls == [(4, False)]


@needs_module
def test_float64_data_takes_another_kernel(dense_calls):
    x, w, bias, expected = product(10, 1, 20, 5)
    out = mx.nd.FullyConnected(mx.nd.array(x, dtype='float64'), mx.nd.array(w, dtype='float64'),
                               mx.nd.array(bias, dtype='float64'), num_hidden=5).asnumpy()
    np.testing.assert_allclose(out, expected, rtol=1e-10)
    assert dense_calls == []


@needs_module
def test_a_fused_dense_layer_applies_its_relu_in_the_kernel_once(dense_calls, monkeypatch):
    """Hybridized for inference, Dense(act='relu') is one _sg_fc node: at batch 1 its relu
    is the kernel's; a sigmoid is still applied after it."""
    activated = []
    activate = fused._activate
    monkeypatch.setattr(fused, '_activate',
                        lambda xp, out, act: activated.append(act) or activate(xp, out, act))
    for act in ('relu', 'sigmoid'):
        net = mx.gluon.nn.HybridSequential()
        net.add(mx.gluon.nn.Dense(40, activation=act, in_units=30))
        net.initialize()
        net.hybridize()
        x = mx.nd.random.normal(shape=(1, 30))
        with mx.autograd.predict_mode():
            out = net(x).asnumpy()
        w, b = net[0].weight.data().asnumpy(), net[0].bias.data().asnumpy()
        z = x.asnumpy().astype(np.float64) @ w.T.astype(np.float64) + b
        assert_close(out, np.maximum(z, 0) if act == 'relu' else 1 / (1 + np.exp(-z)))
    assert dense_calls == [(1, True), (1, False)]
    assert activated == ['sigmoid']


@needs_module
def test_an_output_over_its_own_input_takes_another_kernel(dense_calls):
    """out = x w^T into x itself (a square weight): the dense kernel would read rows it has
    overwritten, so another kernel runs."""
    x, w, bias, expected = product(11, 2, 8, 8)
    data = mx.nd.array(x)
    mx.nd.FullyConnected(data, mx.nd.array(w), mx.nd.array(bias), num_hidden=8, out=data)
    assert_close(data.asnumpy(), expected)
    assert dense_calls == []


@needs_module
@pytest.mark.parametrize('batch, dense', [(1, True), (2, False), (4, False)])
def test_a_graph_s_weight_of_a_few_rows_runs_on_the_kept_blocked_copy(dense_calls, batch, dense):
    """In inference a graph's weight has a version: from 2 rows oneDNN's kept blocked copy is
    faster than the dense kernel, at one row they run alike and the dense kernel keeps none."""
    if not onednn_provider.enabled():
        pytest.skip('oneDNN is not available')
    net = mx.gluon.nn.Dense(24, in_units=40)
    net.initialize()
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.random.normal(shape=(batch, 40))
    with mx.autograd.predict_mode():
        out = net(x).asnumpy()
    w, b = net.weight.data().asnumpy(), net.bias.data().asnumpy()
    assert_close(out, x.asnumpy().astype(np.float64) @ w.T.astype(np.float64) + b)
    assert dense_calls == ([(batch, False)] if dense else [])
