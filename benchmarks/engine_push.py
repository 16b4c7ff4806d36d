"""Cost of an engine push: pushes/s and µs per push, per engine kind, for a trivial function.

    python benchmarks/engine_push.py [--ops N]

'chain' pushes N operations that each write the same var (every op waits for the one before);
'independent' pushes N operations on N fresh vars. The time covers pushing and running all of
them (push, dispatch to a worker, run, completion) until wait_all returns.
"""
from __future__ import annotations

import argparse
import time

from ember import config, engine


def _noop():
    pass


def chain(eng, count):
    var = eng.new_var()
    writes = (var,)
    start = time.perf_counter()
    for _ in range(count):
        eng.push(_noop, writes=writes)
    pushed = time.perf_counter()
    eng.wait_all()
    return pushed - start, time.perf_counter() - start


def independent(eng, count):
    vars_ = [(eng.new_var(),) for _ in range(count)]
    start = time.perf_counter()
    for writes in vars_:
        eng.push(_noop, writes=writes)
    pushed = time.perf_counter()
    eng.wait_all()
    return pushed - start, time.perf_counter() - start


def read_write(eng, count):
    """An imperative op's shape: read two inputs, write a fresh output."""
    a, b = eng.new_var(), eng.new_var()
    outs = [(eng.new_var(),) for _ in range(count)]
    reads = (a, b)
    start = time.perf_counter()
    for writes in outs:
        eng.push(_noop, reads=reads, writes=writes)
    pushed = time.perf_counter()
    eng.wait_all()
    return pushed - start, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--ops', type=int, default=100000)
    args = parser.parse_args()
    print(f'{"engine":<26}{"workload":<14}{"push µs":>9}{"total µs/op":>13}{"ops/s":>12}')
    for kind in ('NaiveEngine', 'ThreadedEngine', 'ThreadedEnginePerDevice'):
        with config.override(MXNET_ENGINE_TYPE=kind):
            eng = engine.get()
            for workload in (chain, independent, read_write):
                workload(eng, 1000)             # warm up: start the workers
                pushed, total = workload(eng, args.ops)
                print(f'{kind:<26}{workload.__name__:<14}{pushed / args.ops * 1e6:>9.2f}'
                      f'{total / args.ops * 1e6:>13.2f}{args.ops / total:>12,.0f}')


if __name__ == '__main__':
    main()
