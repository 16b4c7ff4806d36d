"""The accumulation rule, and the settings a KernelContext captures at the operator's call."""
import threading

import ml_dtypes
import numpy as np
import pytest

import ember as mx
from ember import config
from ember.op import registry
from ember.op.accumulate import accumulation_dtype
from ember.op.nn._common import accumulation_dtype as nn_accumulation_dtype


@pytest.mark.parametrize('dtype, safe, expected', [
    (np.float16, False, np.float16),
    (np.float16, True, np.float32),
    (ml_dtypes.bfloat16, True, np.float32),
    (np.float32, False, np.float32),
    (np.float32, True, np.float64),
    (np.float64, True, np.float64),
    (np.int32, True, np.int32),
    (np.uint8, True, np.uint8),
    (np.bool_, True, np.bool_),
])
def test_mxnet_rule(dtype, safe, expected):
    assert accumulation_dtype(dtype, safe) == np.dtype(expected)


@pytest.mark.parametrize('dtype, safe, expected', [
    (np.float16, False, np.float32),
    (ml_dtypes.bfloat16, False, np.float32),
    (np.float32, False, np.float32),
    (np.float32, True, np.float64),
    (np.int64, False, np.int64),
])
def test_neural_network_kernels_sum_half_floats_in_float32(dtype, safe, expected):
    assert nn_accumulation_dtype(dtype, safe) == np.dtype(expected)


def test_without_a_flag_the_configuration_now_decides():
    assert accumulation_dtype(np.float32) == np.float32
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        assert accumulation_dtype(np.float32) == np.float64
        assert accumulation_dtype(np.float32, safe=False) == np.float32


# ----------------------------------------------------------------------------------------------
# Settings captured at the call: a kernel held on the worker still sees the configuration of
# the call that pushed it.

SEEN = []
GATE = {'open': threading.Event()}
PLAIN_OP, TEMP_OP = '_test_accumulate_settings', '_test_accumulate_settings_temp'


def _record_settings(attrs, ins, outs, ctx):
    GATE['open'].wait(timeout=10)
    SEEN.append((ctx.safe_accumulation, ctx.deterministic, ctx.temp is not None))
    outs[0][...] = ins[0]


if PLAIN_OP not in registry.all_ops():      # the module may be imported twice (doctest run)
    registry.register(PLAIN_OP, _record_settings)
    registry.register(TEMP_OP, _record_settings, resources=('temp',))


@pytest.mark.parametrize('name, uses_temp', [(PLAIN_OP, False), (TEMP_OP, True)])
def test_the_settings_of_the_call_reach_a_kernel_that_runs_later(name, uses_temp):
    SEEN.clear()
    GATE['open'] = threading.Event()
    if config.get('MXNET_ENGINE_TYPE') == 'NaiveEngine':
        GATE['open'].set()                  # kernels run at the call: nothing to hold
    op, x = getattr(mx.nd, name), mx.nd.ones((2,))
    try:
        with config.override(MXNET_SAFE_ACCUMULATION=True, MXNET_ENFORCE_DETERMINISM=True):
            first = op(x)
        second = op(x)
    finally:
        GATE['open'].set()
    first.wait_to_read()
    second.wait_to_read()
    assert sorted(SEEN) == [(False, False, uses_temp), (True, True, uses_temp)]


def test_a_context_built_directly_takes_the_configuration_at_construction():
    with config.override(MXNET_SAFE_ACCUMULATION=True, MXNET_ENFORCE_DETERMINISM=True):
        ctx = registry.KernelContext(None)
    assert (ctx.safe_accumulation, ctx.deterministic) == (True, True)
    assert registry.KernelContext(None).safe_accumulation is False
