"""``mx.np`` against MXNet 1.9.1 itself: the calls of ``tests/np_cases.py`` give the dtypes,
shapes and values that MXNet's gave (``tests/data/mxnet-1.9.1/np_cases.json``, written by
``tools/mxnet_np_reference.py`` under MXNet 1.9.1), except the deviations listed below, each
with its reason. Calls that MXNet 1.9.1 could not make (it raised) are only checked against
NumPy, in ``test_numpy.py``.
"""
from __future__ import annotations

import json
import os

import numpy as onp
import pytest

import ember as mx
from np_cases import CASES
from test_numpy import _draw_all, _function, _outputs

FIXTURE = os.path.join(os.path.dirname(__file__), 'data', 'mxnet-1.9.1', 'np_cases.json')
RECORDED = json.load(open(FIXTURE))['cases']

_TRUNCATED = ('MXNet 1.9.1 computes float functions of integer arrays in the integer dtype '
              '(np.sin of int32 gives int32 zeros); Ember gives float32, MXNet\'s default float')
DEVIATIONS = {f'{name}-int': _TRUNCATED for name in (
    'sin', 'cos', 'tan', 'arctan', 'sinh', 'cosh', 'tanh', 'arcsinh', 'exp', 'expm1', 'degrees',
    'radians', 'cbrt', 'sqrt', 'log', 'log10', 'log2', 'log1p', 'fabs', 'std', 'var')}

# Outputs whose order NumPy leaves open (any partition is right).
UNORDERED = {'argpartition'}

CHECKED = [c for c in CASES if 'outputs' in RECORDED.get(c.id, {})]


def test_fixture_covers_the_table():
    assert {c.id for c in CASES} <= set(RECORDED), 'run tools/mxnet_np_reference.py again'


def _compare_value(case, got, record):
    if 'python' in record:
        text = record['python']
        if text[0] in '-0123456789':
            assert onp.isclose(float(got), float(text), rtol=1e-6), case.id
        elif text in ('True', 'False'):
            assert repr(bool(got)) == text, case.id
        else:
            assert repr(got) == text, f'{case.id}: {got!r} against MXNet {text}'
        return
    values = onp.asarray(got.asnumpy() if hasattr(got, 'asnumpy') else got)
    assert list(values.shape) == record['shape'], f'{case.id}: shape against MXNet'
    if case.dtype != 'numpy':       # the fallbacks give what the NumPy in use gives
        assert values.dtype.name == record['dtype'], \
            f'{case.id}: dtype {values.dtype} against MXNet {record["dtype"]}'
    if 'values' in record and case.numpy_compare and case.name not in UNORDERED:
        onp.testing.assert_allclose(values.astype(onp.float64).reshape(-1),
                                    onp.array(record['values']), rtol=1e-4, atol=1e-5,
                                    err_msg=f'{case.id}: values against MXNet')


@pytest.mark.parametrize('case', CHECKED, ids=[c.id for c in CHECKED])
def test_against_mxnet(case):
    if case.id in DEVIATIONS:
        record = RECORDED[case.id]['outputs'][0]
        _, args = _draw_all(case)
        got = _function(case.name)(*args, **case.kwargs)
        assert got.dtype.name != record['dtype'], f'{case.id} now agrees with MXNet: drop the ' \
                                                  f'deviation'
        return
    _, args = _draw_all(case)
    got = _outputs(_function(case.name)(*args, **case.kwargs))
    records = RECORDED[case.id]['outputs']
    assert len(got) == len(records), f'{case.id}: {len(got)} outputs, MXNet {len(records)}'
    for value, record in zip(got, records):
        _compare_value(case, value, record)


def test_mxnet_default_dtypes():
    """MXNet's defaults that NumPy does not share, beyond the table."""
    from ember import numpy as np
    assert np.array([1, 2]).dtype == onp.float32
    assert np.array([True, False]).dtype == onp.float32
    assert np.arange(3).dtype == onp.float32
    assert np.full(2, 7).dtype == onp.float32
    assert (np.ones(2, dtype='int32') / 2).dtype == onp.float32
    assert np.random.randint(0, 3, size=2).dtype == onp.int64
    assert np.array(onp.arange(3)).dtype == onp.int64
    assert mx.np.random.uniform(size=2).dtype == onp.float32
