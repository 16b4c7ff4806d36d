"""Imperative dispatch overhead: µs per operator on tiny arrays, per engine, beside NumPy.

    python benchmarks/dispatch.py [--ops N] [--runs R] [--workloads NAME ...]

Each row pushes N operators on 2x2 float32 arrays, then waits once; the figures are the median
and the slowest of R runs of (elapsed time / N). On tiny arrays the kernel is negligible, so
this is the cost of the Python path: argument handling, inference, allocation, the engine push,
the worker's run and completion. 'cpu µs' is the process CPU time per operator (every thread),
which is less sensitive than the wall time to other load on the machine. The NumPy row runs the
same expression on NumPy arrays (no engine, no asynchrony): the floor for a Python-level
runtime.

Each engine runs in its own process with ``MXNET_ENGINE_TYPE`` set in the environment, as a
user sets it: inside a ``config.override`` block every configuration read takes the slower
override path, which would be counted as dispatch cost.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

ENGINES = ('NaiveEngine', 'ThreadedEnginePerDevice')


def _workloads(nd):
    """name -> (ember step, numpy step); each takes and returns the running value."""
    return {
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
    """[(wall µs/op, cpu µs/op)] of `runs` runs of `ops` steps, after a warm-up run."""
    a, b = make(), make()
    _time(step, a, b, min(ops, 1000), wait)         # warm up: pools, threads, caches
    return [_time(step, a, b, ops, wait) for _ in range(runs)]


def _summary(results):
    walls, cpus = [r[0] for r in results], [r[1] for r in results]
    return statistics.median(walls), max(walls), statistics.median(cpus)


def run_engine(names, ops, runs):
    """In the child process: {workload: [(wall, cpu), ...]} on the configured engine."""
    from ember import ndarray as nd
    workloads = _workloads(nd)
    return {name: measure(workloads[name][0], lambda: nd.ones((2, 2)) * 0.5,
                          lambda x: x.wait_to_read(), ops, runs) for name in names}


def _engine_results(kind, names, ops, runs):
    from ember import config
    command = [sys.executable, __file__, '--child', '--ops', str(ops), '--runs', str(runs),
               '--workloads', *names]
    env = config.child_environ(MXNET_ENGINE_TYPE=kind)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _numpy_results(name, ops, runs):
    step = _workloads(None)[name][1]
    return measure(step, lambda: np.full((2, 2), 0.5, np.float32), lambda x: None, ops, runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--ops', type=int, default=20000)
    parser.add_argument('--runs', type=int, default=7)
    parser.add_argument('--workloads', nargs='+', default=list(_workloads(None)),
                        metavar='NAME', help='workloads to run (default: all)')
    parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_engine(args.workloads, args.ops, args.runs)))
        return
    by_engine = {kind: _engine_results(kind, args.workloads, args.ops, args.runs)
                 for kind in ENGINES}
    header = (f'{"workload":<16}{"engine":<26}{"wall µs/op":>11}{"slowest":>9}'
              f'{"cpu µs/op":>11}')
    print(header)
    print('-' * len(header))
    for name in args.workloads:
        rows = [(kind, by_engine[kind][name]) for kind in ENGINES]
        rows.append(('NumPy (no engine)', _numpy_results(name, args.ops, args.runs)))
        for kind, results in rows:
            wall, slowest, cpu = _summary(results)
            print(f'{name:<16}{kind:<26}{wall:>11.2f}{slowest:>9.2f}{cpu:>11.2f}')


if __name__ == '__main__':
    main()
