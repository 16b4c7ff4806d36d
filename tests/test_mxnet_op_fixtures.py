"""Operators against MXNet 1.9.1's own answers (tests/data/mxnet-1.9.1-ops, written by
tools/mxnet_op_fixtures.py): each case is replayed on Ember with the inputs and head gradients
MXNet saw, and the outputs and input gradients must match MXNet's."""
from __future__ import annotations

import json

import numpy as np
import pytest

import ember as mx
from data_files import DATA

FIXTURES = DATA / 'mxnet-1.9.1-ops'


def _cases():
    found = []
    for path in sorted(FIXTURES.glob('*.npz')):
        with np.load(path) as store:
            ids = sorted({key.rsplit('/', 1)[0] for key in store.files})
        found += [pytest.param(path, case_id, id=f'{path.stem}-{case_id}') for case_id in ids]
    return found


def _load(path, case_id):
    with np.load(path) as store:
        spec = json.loads(store[f'{case_id}/spec'].tobytes())
        # JSON keeps tuples as lists; MXNet was called with tuples
        spec['kwargs'] = {k: tuple(v) if isinstance(v, list) else v
                          for k, v in spec['kwargs'].items()}
        arrays = {kind: [store[f'{case_id}/{kind}{i}'] for i in range(64)
                         if f'{case_id}/{kind}{i}' in store.files]
                  for kind in ('in', 'out', 'head', 'grad')}
    return spec, arrays


def _resolve(dotted):
    target = mx.nd
    for part in dotted.split('.'):
        target = getattr(target, part)
    return target


def _split(spec, values):
    """The inputs passed positionally, and those passed by keyword (spec['keywords'])."""
    keywords = spec.get('keywords') or [None] * len(values)
    return ([v for v, k in zip(values, keywords) if k is None],
            {k: v for v, k in zip(values, keywords) if k is not None})


def _run(spec, arrays):
    inputs = [mx.nd.array(x, dtype=x.dtype) for x in arrays['in']]
    for index in spec['grad']:
        inputs[index].attach_grad()
    positional, named = _split(spec, inputs)
    if spec.get('out') is not None:
        named['out'] = [inputs[i] for i in spec['out']]
    with mx.autograd.record(train_mode=spec['train']):
        result = _resolve(spec['op'])(*positional, **named, **spec['kwargs'])
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    grads = []
    if spec['grad']:
        chosen = spec['heads'] if spec['heads'] is not None else range(len(outputs))
        mx.autograd.backward([outputs[i] for i in chosen],
                             [mx.nd.array(h, dtype=h.dtype) for h in arrays['head']])
        grads = [inputs[i].grad.asnumpy() for i in spec['grad']]
    return [o.asnumpy() for o in outputs], grads


def _run_symbolic(spec, arrays):
    """The same call as a symbol graph, bound and run by the executor."""
    names = [f'in{i}' for i in range(len(arrays['in']))]
    target = mx.sym
    for part in spec['op'].split('.'):
        target = getattr(target, part)
    positional, named = _split(spec, [mx.sym.var(n) for n in names])
    result = target(*positional, **named, **spec['kwargs'])
    chosen = spec['heads'] if spec['heads'] is not None else range(len(result))
    grad_req = {n: 'write' if i in spec['grad'] else 'null' for i, n in enumerate(names)}
    args = {n: mx.nd.array(x, dtype=x.dtype) for n, x in zip(names, arrays['in'])}
    grads = {n: mx.nd.zeros(x.shape, dtype=x.dtype) for n, x in zip(names, arrays['in'])
             if grad_req[n] == 'write'}
    exe = result.bind(mx.cpu(), args, args_grad=grads, grad_req=grad_req)
    outputs = [o.asnumpy() for o in exe.forward(is_train=spec['train'])]
    if spec['grad']:
        heads = [mx.nd.zeros(o.shape, dtype=o.dtype) for o in outputs]
        for index, head in zip(chosen, arrays['head']):
            heads[index] = mx.nd.array(head, dtype=head.dtype)
        exe.backward(heads)
    return outputs, [grads[names[i]].asnumpy() for i in spec['grad']]


def _tolerance(dtype):
    return (1e-4, 1e-5) if np.dtype(dtype) == np.float32 else (1e-7, 1e-9)


@pytest.mark.parametrize('form', ['imperative', 'symbolic'])
@pytest.mark.parametrize('path,case_id', _cases())
def test_matches_mxnet(path, case_id, form):
    spec, arrays = _load(path, case_id)
    if form == 'symbolic' and spec.get('imperative_only'):
        pytest.skip(f'{spec["op"]} has a shape that depends on values: mx.nd only')
    outputs, grads = (_run if form == 'imperative' else _run_symbolic)(spec, arrays)
    assert len(outputs) == len(arrays['out'])
    for index, (got, want) in enumerate(zip(outputs + grads, arrays['out'] + arrays['grad'])):
        what = f'output {index}' if index < len(outputs) else \
            f'gradient of input {spec["grad"][index - len(outputs)]}'
        assert got.shape == want.shape, f'{case_id} {what}: shape {got.shape} != {want.shape}'
        assert got.dtype == want.dtype, f'{case_id} {what}: dtype {got.dtype} != {want.dtype}'
        rtol, atol = _tolerance(want.dtype)
        rtol = max(rtol, spec.get('rtol') or 0)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                                   err_msg=f'{case_id} {what} differs from MXNet 1.9.1')


def _exercised():
    """mx.nd.<op> for every case, and mx.sym.<op> for those that also run symbolically."""
    names = set()
    for path in sorted(FIXTURES.glob('*.npz')):
        with np.load(path) as store:
            for key in store.files:
                if key.endswith('/spec'):
                    spec = json.loads(store[key].tobytes())
                    names.add(f'ember.ndarray.{spec["op"]}')
                    if not spec.get('imperative_only'):
                        names.add(f'ember.symbol.{spec["op"]}')
    return sorted(names)


# The functions this test runs by name, for `python -m ember api-coverage`.
EXERCISED_API = _exercised()
