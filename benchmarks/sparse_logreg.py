"""Sparse logistic regression: time and memory per training step against the feature count.

    python benchmarks/sparse_logreg.py [--features 1e5,1e6,1e7] [--batch 1024] [--steps 50]

The model is ``sigmoid(dot(x, w))`` with x a csr batch and w a dense (features x 1) weight;
each step records ``LogisticRegressionOutput(dot(x, w), y)``, runs backward (the weight's
gradient is row_sparse: the columns the batch stores) and makes a lazy SGD update, which
steps only those rows. Labels come from a hidden weight, so the loss falls.

Two series, each at every feature count:

- ``density``: the csr has density --density (1e-5), so a row stores features * density
  entries: time and memory follow those entries (x10 per row from 1e5 to 1e6 features);
- ``fixed``: every row stores --per-row entries (10) whatever the feature count: time and
  memory stay flat while the features grow 100-fold.

Columns: stored entries per batch, milliseconds per step (median), microseconds per 1000
stored entries, the weight's size, the most memory a step took above what the process held
before the steps (Linux: VmHWM after resetting it, minus VmRSS), the training accuracy after
the steps, and, for contrast, the step time with a dense gradient buffer (``attach_grad()``),
whose every step writes all features.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ember import autograd, nd  # noqa: E402


def batch(rng, rows, features, per_row, hidden):
    """A csr batch with about `per_row` distinct columns a row, and its 0/1 labels."""
    columns = np.sort(rng.integers(0, features, (rows, max(per_row, 1))), axis=1)
    keep = np.ones(columns.shape, bool)
    keep[:, 1:] = np.diff(columns, axis=1) != 0
    counts = keep.sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = columns[keep]
    values = rng.uniform(0.5, 1.5, indices.size).astype(np.float32)
    x = nd.sparse.csr_matrix((values, indices, indptr), shape=(rows, features))
    score = np.add.reduceat(values * hidden[indices], indptr[:-1]) * (counts > 0)
    labels = (score > 0).astype(np.float32).reshape(-1, 1)
    return x, nd.array(labels), indices.size


def rss_kb(field):
    for line in Path('/proc/self/status').read_text().splitlines():
        if line.startswith(field + ':'):
            return int(line.split()[1])
    return 0


def reset_peak():
    """Start VmHWM over from the current RSS (Linux 4.0+); False where it cannot."""
    try:
        Path('/proc/self/clear_refs').write_text('5')
        return True
    except OSError:
        return False


def train(features, per_row, args, sparse_grad):
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal(features).astype(np.float32)
    batches = [batch(rng, args.batch, features, per_row, hidden) for _ in range(8)]
    w = nd.zeros((features, 1))
    w.attach_grad(stype='row_sparse' if sparse_grad else 'default')

    def step(k):
        x, y, _ = batches[k % len(batches)]
        with autograd.record():
            out = nd.LogisticRegressionOutput(nd.dot(x, w), y)
        out.backward()
        nd.sgd_update(w, w.grad, out=w, lr=args.lr, lazy_update=True)
        w.wait_to_read()
        return out
    for k in range(3):
        step(k)
    nd.waitall()
    before, tracked = rss_kb('VmRSS'), reset_peak()
    times = []
    for k in range(args.steps):
        start = time.perf_counter()
        step(k)
        times.append(time.perf_counter() - start)
    peak = rss_kb('VmHWM') - before if tracked else float('nan')
    nnz = int(np.mean([b[2] for b in batches]))
    right = [((nd.dot(x, w).asnumpy() > 0) == (y.asnumpy() > 0.5)).mean() for x, y, _ in batches]
    return 1e3 * float(np.median(times)), nnz, peak / 1024, float(np.mean(right))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--features', default='1e5,1e6,1e7')
    parser.add_argument('--batch', type=int, default=1024)
    parser.add_argument('--density', type=float, default=1e-5)
    parser.add_argument('--per-row', type=int, default=10)
    parser.add_argument('--steps', type=int, default=50)
    parser.add_argument('--lr', type=float, default=0.1)
    args = parser.parse_args()
    counts = [int(float(f)) for f in args.features.split(',')]
    print(f'{"series":8s} {"features":>10s} {"nnz/batch":>10s} {"ms/step":>9s} '
          f'{"us/1k nnz":>10s} {"weight MB":>10s} {"step MB":>8s} {"accuracy":>9s} '
          f'{"dense-grad ms":>14s}')
    for series in ('density', 'fixed'):
        for features in counts:
            per_row = max(int(round(features * args.density)), 1) if series == 'density' \
                else args.per_row
            ms, nnz, step_mb, accuracy = train(features, per_row, args, True)
            dense_ms = train(features, per_row, args, False)[0]
            print(f'{series:8s} {features:10d} {nnz:10d} {ms:9.2f} {1e6 * ms / nnz:10.1f} '
                  f'{features * 4 / 2**20:10.1f} {step_mb:8.1f} {accuracy:9.2f} '
                  f'{dense_ms:14.2f}')


if __name__ == '__main__':
    main()
