"""Run a snapshot of NEURON_DUMP_HLO_SNAPSHOT again and compare with what it recorded.

    python -m ember replay SNAPSHOT.npz [--rtol 1e-5] [--atol 1e-6]

Binds the snapshot's graph on the CPU to its recorded inputs, runs the forward (or forward
and backward, for a backward snapshot) and prints per output the largest difference from the
recorded output. A snapshot of a failed execution replays to see whether the error comes back.
Exit status 0: every output matches (or the recorded error came back); 1: something differs.
"""
from __future__ import annotations

import argparse

import numpy as np

__all__ = ['add_arguments', 'run', 'replay']


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('snapshot', help='a .npz file written under NEURON_DUMP_HLO_SNAPSHOT')
    parser.add_argument('--rtol', type=float, default=1e-5)
    parser.add_argument('--atol', type=float, default=1e-6)


def run(args) -> int:
    from ember.compiler import snapshot
    shot = snapshot.read(args.snapshot)
    meta = shot.meta
    print(f'{args.snapshot}: {meta.get("part")} of graph {meta.get("name")} '
          f'(is_train={meta.get("is_train")}, recorded on {meta.get("device")})')
    try:
        got = replay(shot)
    except Exception as exc:  # noqa: BLE001 - the replay's error is the answer
        error = f'{type(exc).__name__}: {exc}'
        print(f'the replay failed: {error}')
        recorded = meta.get('error')
        if recorded:
            print(f'recorded error: {recorded}')
            return 0
        return 1
    if meta.get('error'):
        print(f'recorded error: {meta["error"]}; the replay ran without one')
    return _compare(shot.outputs, got, args.rtol, args.atol)


def replay(shot) -> dict:
    """Name -> NumPy array of what the snapshot's graph computes from its inputs."""
    import ember as mx
    meta = shot.meta
    symbol = mx.sym.load_json(meta['graph'])
    inputs = {n: mx.nd.array(v, dtype=v.dtype) for n, v in shot.inputs.items()}
    args = {n: inputs[n] for n in symbol.list_arguments()}
    aux = {n: inputs[n] for n in symbol.list_auxiliary_states()}
    backward = meta['part'] == 'backward'
    reqs = meta.get('grad_req', {}) if backward else {}
    grads = {n: mx.nd.zeros(a.shape, dtype=a.dtype) for n, a in args.items()
             if reqs.get(n, 'null') != 'null'}
    exe = symbol.bind(mx.cpu(), args, args_grad=grads or None,
                      grad_req={n: reqs.get(n, 'null') for n in args}, aux_states=aux)
    outputs = exe.forward(is_train=bool(meta.get('is_train')))
    if not backward:
        return {n: o.asnumpy() for n, o in zip(symbol.list_outputs(), outputs)}
    heads = [inputs[f'out_grad[{i}]'] if f'out_grad[{i}]' in inputs else None
             for i in range(len(outputs))]
    exe.backward(heads)
    return {n: g.asnumpy() for n, g in grads.items()}


def _compare(recorded, got, rtol, atol) -> int:
    width = max([len(n) for n in recorded] + [6])
    print(f'{"output":{width}}  {"max |diff|":>12}  {"recorded max":>12}  result')
    differ = 0
    for name, want in recorded.items():
        have = got.get(name)
        if have is None:
            print(f'{name:{width}}  {"-":>12}  {"-":>12}  missing from the replay')
            differ += 1
            continue
        want64, have64 = want.astype(np.float64), have.astype(np.float64)
        same = want.shape == have.shape and np.allclose(have64, want64, rtol, atol,
                                                         equal_nan=True)
        diff = np.nanmax(np.abs(have64 - want64)) if want.shape == have.shape and want.size \
            else float('nan')
        largest = np.nanmax(np.abs(want64)) if want.size else 0.0
        print(f'{name:{width}}  {diff:12.4g}  {largest:12.4g}  '
              f'{"matches" if same else "DIFFERS"}')
        differ += not same
    print('the replay matches the snapshot' if not differ
          else f'{differ} of {len(recorded)} outputs differ')
    return 1 if differ else 0
