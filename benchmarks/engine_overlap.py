"""Independent operators overlapping on the engine's CPU workers.

    python benchmarks/engine_overlap.py [--size 1500] [--ops 4]

Pushes `ops` independent float64 matrix products (BLAS limited to one thread, so any speed-up
comes from the engine running operators at once: NumPy releases the GIL inside them) with 1 and
with 2 CPU worker threads, and prints the wall time of each and the speed-up.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from ember import config, engine


def run(workers, matrices):
    with config.override(MXNET_CPU_WORKER_NTHREADS=workers):
        eng = engine.get()
        outs = [None] * len(matrices)

        def product(i):
            outs[i] = matrices[i] @ matrices[i]

        start = time.perf_counter()
        for i in range(len(matrices)):
            eng.push(lambda i=i: product(i), reads=[eng.new_var()], writes=[eng.new_var()],
                     name='dot')
        eng.wait_all()
        return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', type=int, default=1500)
    parser.add_argument('--ops', type=int, default=4)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    matrices = [rng.standard_normal((args.size, args.size)) for _ in range(args.ops)]
    with threadpool_limits(limits=1, user_api='blas'):
        run(1, matrices[:1])                    # warm up BLAS and the workers
        times = {workers: run(workers, matrices) for workers in (1, 2)}
    print(f'{args.ops} products of {args.size}x{args.size} float64, BLAS on 1 thread, '
          f'{config.cpu_count()} cores')
    print(f'{"CPU workers":<14}{"seconds":>10}')
    for workers, seconds in times.items():
        print(f'{workers:<14}{seconds:>10.3f}')
    print(f'speed-up with 2 workers: {times[1] / times[2]:.2f}x')


if __name__ == '__main__':
    main()
