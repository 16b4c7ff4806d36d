"""MXNET_SAFE_ACCUMULATION: reductions over float16 accumulate in float32, over float32 in
float64, read live at each call.

Each case is built so that accumulating in the input's own dtype loses precision: a long column
summed one row at a time (NumPy reduces the leading axis of a C-order array row by row), where
the running total outgrows the dtype's resolution. The guard tests check that on the raw data.
"""
import threading

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.op import registry
from ember.test_utils import assert_almost_equal

ROWS = 4096


def tenths_float16():
    """4096 rows of float16(0.1): their total 409.5 exceeds 256, past which float16 steps by
    0.25 and adding 0.1 rounds away."""
    return np.full((ROWS, 2), 0.1, np.float16)


def big_then_ones_float32():
    """2**24 then 1000 ones: float32 steps by 2 above 2**24, so adding 1 rounds away."""
    column = np.ones(1001, np.float32)
    column[0] = 2.0 ** 24
    return np.stack([column, column], axis=1)


def exact(values, reduction):
    return reduction(values.astype(np.float64))


def test_cases_lose_precision_when_accumulated_in_their_own_dtype():
    half, single = tenths_float16(), big_then_ones_float32()
    assert abs(float(half.sum(axis=0, dtype=np.float16)[0]) - 409.5) > 100
    assert single.sum(axis=0, dtype=np.float32)[0] == 2.0 ** 24
    assert exact(single, lambda v: v.sum(axis=0))[0] == 2.0 ** 24 + 1000


SUM_CASES = [
    # (id, data, ember reduction, reference over float64, rtol)
    ('sum-float16', tenths_float16, lambda x: mx.nd.sum(x, axis=0),
     lambda v: v.sum(axis=0), 1e-3),
    ('mean-float16', tenths_float16, lambda x: mx.nd.mean(x, axis=0),
     lambda v: v.mean(axis=0), 1e-3),
    ('norm-float16', tenths_float16, lambda x: mx.nd.norm(x, axis=0),
     lambda v: np.sqrt((v * v).sum(axis=0)), 1e-3),
    ('norm-l1-float16', tenths_float16, lambda x: mx.nd.norm(x, ord=1, axis=0),
     lambda v: np.abs(v).sum(axis=0), 1e-3),
    ('sum-all-float16', tenths_float16, lambda x: mx.nd.sum(x),
     lambda v: v.sum().reshape(1), 1e-3),
    ('sum-float32', big_then_ones_float32, lambda x: mx.nd.sum(x, axis=0),
     lambda v: v.sum(axis=0), 1e-9),
    ('mean-float32', big_then_ones_float32, lambda x: mx.nd.mean(x, axis=0),
     lambda v: v.mean(axis=0), 1e-7),
]


@pytest.mark.parametrize('name,make,reduce,reference,rtol', SUM_CASES,
                         ids=[case[0] for case in SUM_CASES])
def test_reductions_accumulate_wider(name, make, reduce, reference, rtol):
    values = make()
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        result = reduce(mx.nd.array(values, dtype=values.dtype))
        assert result.dtype == values.dtype
        assert_almost_equal(result.asnumpy().astype(np.float64), exact(values, reference),
                            rtol=rtol, atol=0)


def test_the_variable_is_read_at_each_call():
    x = mx.nd.array(tenths_float16(), dtype=np.float16)
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        safe = mx.nd.sum(x, axis=0).asnumpy()
    with config.override(MXNET_SAFE_ACCUMULATION=False):
        plain = mx.nd.sum(x, axis=0).asnumpy()
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        again = mx.nd.sum(x, axis=0).asnumpy()
    assert np.array_equal(safe, again)
    assert not np.array_equal(safe, plain), 'MXNET_SAFE_ACCUMULATION made no difference'


def small_tail(dtype, rows):
    """A column whose softmax normaliser is 1 plus many terms too small to add to 1 one by one
    in `dtype`: exp(0) and rows - 1 times exp(-20)."""
    column = np.full(rows, -20.0)
    column[0] = 0.0
    return np.stack([column, column], axis=1).astype(dtype)


def softmax_reference(values, axis):
    wide = values.astype(np.float64)
    z = np.exp(wide - wide.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize('dtype,rows,rtol', [(np.float32, 20001, 1e-6),
                                             (np.float16, ROWS, 2e-3)])
def test_softmax_normalises_with_a_wider_sum(dtype, rows, rtol):
    if dtype == np.float16:
        values = np.random.default_rng(0).uniform(-1, 1, (rows, 2)).astype(dtype)
    else:
        values = small_tail(dtype, rows)
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        result = mx.nd.softmax(mx.nd.array(values, dtype=dtype), axis=0).asnumpy()
    assert result.dtype == dtype
    assert_almost_equal(result.astype(np.float64), softmax_reference(values, 0), rtol=rtol,
                        atol=1e-7 if dtype == np.float32 else 1e-6)


def test_log_softmax_normalises_with_a_wider_sum():
    values = small_tail(np.float32, 20001)
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        result = mx.nd.log_softmax(mx.nd.array(values), axis=0).asnumpy()
    expected = np.log(softmax_reference(values, 0))
    assert abs(result[0, 0] - expected[0, 0]) < 1e-7      # -log(1 + 2e4 * exp(-20)) ~ -4e-5
    assert_almost_equal(result.astype(np.float64), expected, rtol=1e-6, atol=1e-6)


def test_softmax_over_a_long_float16_row():
    values = np.random.default_rng(1).normal(0, 0.01, (2, ROWS)).astype(np.float16)
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        result = mx.nd.softmax(mx.nd.array(values, dtype=np.float16)).asnumpy()
    assert_almost_equal(result.sum(axis=-1, dtype=np.float64), np.ones(2), rtol=0, atol=2e-3)
    assert_almost_equal(result.astype(np.float64), softmax_reference(values, -1), rtol=2e-3,
                        atol=1e-7)


def test_layer_norm_statistics_accumulate_wider():
    values = big_then_ones_float32()
    gamma, beta = mx.nd.ones((len(values),)), mx.nd.zeros((len(values),))
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        out, mean, std = [a.asnumpy() for a in mx.nd.LayerNorm(
            mx.nd.array(values), gamma, beta, axis=0, output_mean_var=True)]
    wide = values.astype(np.float64)
    assert_almost_equal(mean[0].astype(np.float64), wide.mean(axis=0), rtol=1e-7, atol=0)
    assert_almost_equal(std[0].astype(np.float64), np.sqrt(wide.var(axis=0) + 1e-5), rtol=1e-6,
                        atol=0)
    expected = (wide - wide.mean(axis=0)) / np.sqrt(wide.var(axis=0) + 1e-5)
    assert_almost_equal(out.astype(np.float64), expected, rtol=1e-5, atol=1e-5)


def test_layer_norm_over_a_long_float16_row():
    values = (0.1 + np.random.default_rng(2).normal(0, 0.01, (2, ROWS))).astype(np.float16)
    gamma = mx.nd.ones((ROWS,), dtype=np.float16)
    beta = mx.nd.zeros((ROWS,), dtype=np.float16)
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        out, mean, _ = [a.asnumpy() for a in mx.nd.LayerNorm(
            mx.nd.array(values, dtype=np.float16), gamma, beta, output_mean_var=True)]
    wide = values.astype(np.float64)
    assert_almost_equal(mean.reshape(-1).astype(np.float64), wide.mean(axis=-1), rtol=1e-3,
                        atol=0)
    expected = (wide - wide.mean(axis=-1, keepdims=True)) / np.sqrt(
        wide.var(axis=-1, keepdims=True) + 1e-5)
    assert_almost_equal(out.astype(np.float64), expected, rtol=1e-2, atol=2e-2)


# ----------------------------------------------------------------------------------------------
# Kernels run later, on an engine worker: the configuration of the call must still apply.

HOLD = {'release': threading.Event()}
HOLD_OP = '_test_safe_accumulation_hold'


def _hold_kernel(attrs, ins, outs, ctx):
    HOLD['release'].wait(timeout=10)
    outs[0][...] = ins[0]


if HOLD_OP not in registry.all_ops():       # the module may be imported twice (doctest run)
    registry.register(HOLD_OP, _hold_kernel)


@pytest.mark.skipif(config.get('MXNET_ENGINE_TYPE') == 'NaiveEngine',
                    reason='the naive engine runs each kernel at its call')
def test_the_value_at_the_call_applies_when_the_kernel_runs_later():
    HOLD['release'] = threading.Event()
    try:
        held = getattr(mx.nd, HOLD_OP)(mx.nd.array(tenths_float16(), dtype=np.float16))
        with config.override(MXNET_SAFE_ACCUMULATION=True):
            total = mx.nd.sum(held, axis=0)      # waits for `held`, so runs after the block
    finally:
        HOLD['release'].set()
    assert_almost_equal(total.asnumpy().astype(np.float64), np.full(2, 409.5), rtol=1e-3,
                        atol=0)
