"""Imperative dispatch overhead: µs per operator on tiny arrays, per engine, beside NumPy.

    python benchmarks/dispatch.py [--ops N] [--runs R]

Each row pushes N operators on 2x2 float32 arrays, then waits once; the figure is the median
over R runs of (elapsed time / N). On tiny arrays the kernel is negligible, so this is the cost
of the Python path: argument handling, inference, allocation, the engine push, the worker's run
and completion. 'cpu µs' is the process CPU time per operator (both threads), which is less
sensitive to other load on the machine than the wall time. The NumPy column runs the same
expression on NumPy arrays (no engine, no asynchrony): the floor for a Python-level runtime.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ember import config
from ember import ndarray as nd

WORKLOADS = {
    # name: (ember step, numpy step); each takes and returns the running value
    'a = a + 1': (lambda a, b: a + 1, lambda a, b: a + 1),
    'a = a + b': (lambda a, b: a + b, lambda a, b: a + b),
    'a = dot(a, b)': (lambda a, b: nd.dot(a, b), lambda a, b: np.dot(a, b)),
    's = sum(a)': (lambda a, b: nd.sum(b), lambda a, b: np.sum(b, keepdims=True)),
}


def _time(step, a, b, ops, wait):
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(ops):
        a = step(a, b)
    wait(a)
    return (time.perf_counter() - wall) / ops * 1e6, (time.process_time() - cpu) / ops * 1e6


def measure(step, make, wait, ops, runs):
    """(median wall µs/op, median cpu µs/op) of `runs` runs of `ops` steps."""
    a, b = make(), make()
    _time(step, a, b, min(ops, 1000), wait)         # warm up: pools, threads, caches
    results = [_time(step, a, b, ops, wait) for _ in range(runs)]
    return (statistics.median(r[0] for r in results),
            statistics.median(r[1] for r in results))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--ops', type=int, default=20000)
    parser.add_argument('--runs', type=int, default=7)
    args = parser.parse_args()
    header = f'{"workload":<16}{"engine":<26}{"wall µs/op":>11}{"cpu µs/op":>11}'
    print(header)
    print('-' * len(header))
    for name, (ember_step, numpy_step) in WORKLOADS.items():
        for kind in ('NaiveEngine', 'ThreadedEnginePerDevice'):
            with config.override(MXNET_ENGINE_TYPE=kind):
                wall, cpu = measure(ember_step, lambda: nd.ones((2, 2)) * 0.5,
                                    lambda x: x.wait_to_read(), args.ops, args.runs)
            print(f'{name:<16}{kind:<26}{wall:>11.2f}{cpu:>11.2f}')
        wall, cpu = measure(numpy_step, lambda: np.full((2, 2), 0.5, np.float32),
                            lambda x: None, args.ops, args.runs)
        print(f'{name:<16}{"NumPy (no engine)":<26}{wall:>11.2f}{cpu:>11.2f}')


if __name__ == '__main__':
    main()
