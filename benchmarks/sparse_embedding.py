"""A Gluon model with a 10-million-row embedding trained with row_sparse gradients.

    python benchmarks/sparse_embedding.py [--rows 10000000] [--width 64] [--batch 256]
                                          [--steps 20] [--optimizer sgd] [--hybridize]

The model is ``Embedding(rows, width, sparse_grad=True)`` -> ``Dense(1)`` on batches of
(batch, 8) indices, trained by ``gluon.Trainer`` with an L2 loss. The embedding's gradient is
row_sparse (the rows a batch names) and the update lazy, so a step costs the batch, not the
table: no dense gradient of the table is ever made. The program prints the milliseconds per
step (median), the table's size, the peak RSS of the whole process and of the steps alone
(VmHWM reset before them, Linux), and how many rows the last gradient stored.

``--optimizer adam`` keeps two states the size of the table (its memory shows in the peak);
SGD without momentum keeps none.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ember as mx  # noqa: E402
from ember import autograd, gluon, nd  # noqa: E402


def rss_mb(field):
    for line in Path('/proc/self/status').read_text().splitlines():
        if line.startswith(field + ':'):
            return int(line.split()[1]) / 1024
    return float('nan')


def reset_peak():
    try:
        Path('/proc/self/clear_refs').write_text('5')
        return True
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rows', type=int, default=10_000_000)
    parser.add_argument('--width', type=int, default=64)
    parser.add_argument('--batch', type=int, default=256)
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--optimizer', default='sgd')
    parser.add_argument('--hybridize', action='store_true')
    args = parser.parse_args()

    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Embedding(args.rows, args.width, sparse_grad=True), gluon.nn.Dense(1))
    start = time.perf_counter()
    net.initialize(mx.init.Uniform(0.01))
    if args.hybridize:
        net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), args.optimizer, {'learning_rate': 0.05})
    loss_fn = gluon.loss.L2Loss()
    rng = np.random.default_rng(0)
    batches = [(nd.array(rng.integers(0, args.rows, (args.batch, 8))),
                nd.array(rng.uniform(-1, 1, (args.batch, 1)))) for _ in range(8)]

    def step(k):
        x, y = batches[k % len(batches)]
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(args.batch)
        return loss
    first = step(0).mean().asscalar()
    nd.waitall()
    setup_s = time.perf_counter() - start
    before, tracked = rss_mb('VmRSS'), reset_peak()
    times = []
    for k in range(1, args.steps + 1):
        begin = time.perf_counter()
        loss = step(k)
        nd.waitall()
        times.append(time.perf_counter() - begin)
    steps_peak = rss_mb('VmHWM') if tracked else float('nan')
    grad = net[0].weight.grad()
    table_mb = args.rows * args.width * 4 / 2**20
    print(f'embedding {args.rows} x {args.width} ({table_mb:.0f} MB), batch {args.batch} x 8, '
          f'{args.optimizer}, {"hybridized" if args.hybridize else "imperative"}')
    print(f'  setup (initialise the table, first step): {setup_s:.1f} s')
    print(f'  ms per step (median of {args.steps}): {1e3 * float(np.median(times)):.2f}')
    print(f'  gradient: {grad.stype}, {grad.indices.shape[0]} rows stored of {args.rows}')
    print(f'  RSS before the steps: {before:.0f} MB; peak during them: {steps_peak:.0f} MB '
          f'(+{steps_peak - before:.0f} MB); a dense gradient would add {table_mb:.0f} MB')
    print(f'  peak RSS of the process: '
          f'{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB')
    print(f'  loss: {first:.4f} -> {loss.mean().asscalar():.4f}')


if __name__ == '__main__':
    main()
