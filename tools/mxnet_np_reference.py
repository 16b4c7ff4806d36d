"""Record what MXNet 1.9.1's ``mx.np`` gives for every case of ``tests/np_cases.py``.

Run with MXNet 1.9.1's Python (the peers' environment) from the repository root:

    OMP_NUM_THREADS=2 ~/.cache/ember-bench/mxnet-1.9.1/bin/python tools/mxnet_np_reference.py

It writes ``tests/data/mxnet-1.9.1/np_cases.json``: per case id, either the outputs (dtype,
shape and, for small outputs, values) or the name of the error MXNet raised. The arrays are
drawn exactly as the test draws them, so ``tests/test_numpy_mxnet.py`` compares Ember's results
with MXNet's call by call.
"""
from __future__ import annotations

import json
import os
import sys
import zlib

import numpy as onp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests'))

from np_cases import CASES, Arr  # noqa: E402

OUTPUT = os.path.join(ROOT, 'tests', 'data', 'mxnet-1.9.1', 'np_cases.json')
MAX_VALUES = 64


def _convert(value, rng, mx_np):
    if isinstance(value, Arr):
        values = value.draw(rng)
        return mx_np.array(values, dtype=values.dtype)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Arr) for v in value):
        return type(value)(_convert(v, rng, mx_np) for v in value)
    return value


def _flatten(value):
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def _describe(output):
    if hasattr(output, 'asnumpy'):
        values = output.asnumpy()
    elif isinstance(output, onp.ndarray):
        values = output
    else:
        return {'python': repr(output)}
    record = {'dtype': values.dtype.name, 'shape': list(values.shape)}
    if values.size <= MAX_VALUES and values.dtype.kind in 'biuf':
        record['values'] = values.astype(onp.float64).reshape(-1).tolist()
    return record


def _function(mx_np, name):
    target = mx_np
    for part in name.split('.'):
        target = getattr(target, part)
    return target


def run_case(case, mx_np):
    rng = onp.random.default_rng(zlib.crc32(case.id.encode()))
    args = [_convert(v, rng, mx_np) for v in case.args]
    try:
        result = _function(mx_np, case.name)(*args, **case.kwargs)
        return {'outputs': [_describe(o) for o in _flatten(result)]}
    except Exception as exc:  # noqa: BLE001  (every failure is a fact to record)
        return {'error': type(exc).__name__}


def main():
    import mxnet
    from mxnet import np as mx_np, npx
    npx.set_np()
    found = {case.id: run_case(case, mx_np) for case in CASES}
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, 'w') as handle:
        json.dump({'mxnet': mxnet.__version__, 'numpy': onp.__version__, 'cases': found},
                  handle, indent=0, sort_keys=True)
    failed = sum('error' in v for v in found.values())
    print(f'{len(found)} cases, {failed} raised in MXNet; wrote {OUTPUT}')


if __name__ == '__main__':
    main()
