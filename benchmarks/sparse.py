"""Sparse kernels side by side: Ember, MXNet 1.9.1, SciPy/NumPy and PyTorch 2.13 on the same
data, in milliseconds per call.

    python benchmarks/sparse.py [--rounds 3] [--repeat 20] [--scale 1.0] [--only dot,retain]

Workloads (``--scale`` multiplies the row counts; 0.05 checks the program quickly):

- ``dot``:    csr (8192 x 100000, density 1e-3) times a dense (100000 x 64) weight.
- ``dot_T``:  the csr's transpose times a dense (8192 x 64) gradient, the gradient of that
              weight: Ember and MXNet give a row_sparse result, SciPy and PyTorch a dense one.
- ``retain``: the rows of a row_sparse (1M x 64, 100000 rows stored) listed in 20000 indices
              (PyTorch and NumPy: the same selection on the (indices, values) pair).
- ``adam``:   one lazy Adam step of a dense (1M x 64) weight with a row_sparse gradient of
              8192 rows (PyTorch: SparseAdam with a sparse COO gradient; NumPy: the same
              gather, step and scatter).

Each framework runs in its own process (MXNet and PyTorch in their environments under
``~/.cache/ember-bench``, built by ``benchmarks/peers/envs.py``) with OMP_NUM_THREADS set to
the cores, and makes the data from the same seed with NumPy; a process times each workload
as the median of --repeat calls after one warm-up. The processes run in --rounds interleaved
rounds (Ember, MXNet, SciPy, PyTorch, Ember, MXNet, ...), so that a slow spell of the machine
falls on every framework alike rather than on whichever ran then. The table gives each
framework's median over the rounds; the MXNet/Ember column is the ratio of those medians
(the goal is 1.0 or more) and "spread" the lowest and highest ratio of a single round.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ENV_DIR = Path('~/.cache/ember-bench').expanduser()
PYTHONS = {'ember': sys.executable, 'scipy': sys.executable,
           'mxnet': str(ENV_DIR / 'mxnet-1.9.1' / 'bin' / 'python'),
           'torch': str(ENV_DIR / 'torch-2.13.0-cpu' / 'bin' / 'python')}
WORKLOADS = ('dot', 'dot_T', 'retain', 'adam')


# ----------------------------------------------------------------------------------------------
# Data, the same in every process (NumPy only).

def csr_parts(rows, cols, density, seed):
    """(data, indices, indptr) of a random csr with about density * cols entries a row."""
    rng = np.random.RandomState(seed)
    per_row = rng.binomial(cols, density, rows)
    indptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)
    indices = np.empty(indptr[-1], np.int64)
    for row in range(rows):
        indices[indptr[row]:indptr[row + 1]] = np.sort(rng.choice(cols, per_row[row],
                                                                  replace=False))
    return rng.uniform(-1, 1, indptr[-1]).astype(np.float32), indices, indptr


def problem(scale):
    batch = max(int(8192 * scale), 64)
    table = max(int(1_000_000 * scale), 10_000)
    rng = np.random.RandomState(1)
    stored = np.sort(rng.choice(table, max(int(100_000 * scale), 100), replace=False))
    return {
        'csr': csr_parts(batch, 100_000, 1e-3, 0) + ((batch, 100_000),),
        'weight': rng.uniform(-1, 1, (100_000, 64)).astype(np.float32),
        'out_grad': rng.uniform(-1, 1, (batch, 64)).astype(np.float32),
        'rsp': (rng.uniform(-1, 1, (stored.size, 64)).astype(np.float32), stored,
                (table, 64)),
        'wanted': np.sort(rng.choice(table, max(int(20_000 * scale), 20), replace=False)),
        'grad_rows': np.sort(rng.choice(table, batch, replace=False)),
        'grad_values': rng.uniform(-1, 1, (batch, 64)).astype(np.float32),
        'table': table,
    }


def median_ms(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


# ----------------------------------------------------------------------------------------------
# Runners: each returns {workload: ms}.

def run_mx(mx, data, repeat, only):
    """Ember and MXNet share the code: the same API."""
    nd = mx.nd
    values, indices, indptr, shape = data['csr']
    x = nd.sparse.csr_matrix((values, indices, indptr), shape=shape)
    weight, out_grad = nd.array(data['weight']), nd.array(data['out_grad'])
    rsp = nd.sparse.row_sparse_array(data['rsp'][:2], shape=data['rsp'][2])
    wanted = nd.array(data['wanted'], dtype='int64')
    table = nd.zeros((data['table'], 64))
    mean, var = nd.zeros(table.shape), nd.zeros(table.shape)
    grad = nd.sparse.row_sparse_array((data['grad_values'], data['grad_rows']),
                                      shape=table.shape)
    nd.waitall()
    calls = {
        'dot': lambda: nd.dot(x, weight).wait_to_read(),
        'dot_T': lambda: nd.dot(x, out_grad, transpose_a=True).wait_to_read(),
        'retain': lambda: nd.sparse.retain(rsp, wanted).wait_to_read(),
        'adam': lambda: (nd.adam_update(table, grad, mean, var, out=table, lr=0.01,
                                        lazy_update=True), table.wait_to_read()),
    }
    return {name: median_ms(calls[name], repeat) for name in only}


def run_scipy(data, repeat, only):
    import scipy.sparse
    values, indices, indptr, shape = data['csr']
    x = scipy.sparse.csr_matrix((values, indices, indptr), shape=shape)
    stored_values, stored, _ = data['rsp']
    wanted = data['wanted']
    table = np.zeros((data['table'], 64), np.float32)
    mean, var = np.zeros_like(table), np.zeros_like(table)
    rows, grad = data['grad_rows'], data['grad_values']

    def retain():
        keep = np.isin(stored, wanted, assume_unique=True)
        return stored[keep], stored_values[keep]

    def adam():
        g = grad
        mean[rows] = 0.9 * mean[rows] + 0.1 * g
        var[rows] = 0.999 * var[rows] + 0.001 * g * g
        table[rows] -= 0.01 * mean[rows] / (np.sqrt(var[rows]) + 1e-8)
    calls = {'dot': lambda: x @ data['weight'], 'dot_T': lambda: x.T @ data['out_grad'],
             'retain': retain, 'adam': adam}
    return {name: median_ms(calls[name], repeat) for name in only}


def run_torch(data, repeat, only):
    import torch
    values, indices, indptr, shape = data['csr']
    x = torch.sparse_csr_tensor(torch.from_numpy(indptr), torch.from_numpy(indices),
                                torch.from_numpy(values), size=shape)
    x_t = x.to_sparse_coo().t().to_sparse_csr()      # made once, as MXNet's csr.T is free
    weight, out_grad = torch.from_numpy(data['weight']), torch.from_numpy(data['out_grad'])
    stored_values, stored, _ = (torch.from_numpy(a) if isinstance(a, np.ndarray) else a
                                for a in data['rsp'])
    wanted = torch.from_numpy(data['wanted'])
    table = torch.nn.Parameter(torch.zeros(data['table'], 64))
    optimizer = torch.optim.SparseAdam([table], lr=0.01)
    grad = torch.sparse_coo_tensor(torch.from_numpy(data['grad_rows'])[None],
                                   torch.from_numpy(data['grad_values']),
                                   (data['table'], 64)).coalesce()

    def retain():
        keep = torch.isin(stored, wanted)
        return stored[keep], stored_values[keep]

    def adam():
        table.grad = grad
        optimizer.step()
    calls = {'dot': lambda: x @ weight, 'dot_T': lambda: x_t @ out_grad, 'retain': retain,
             'adam': adam}
    with torch.no_grad():
        return {name: median_ms(calls[name], repeat) for name in only}


def runner(kind, repeat, scale, only):
    data = problem(scale)
    if kind == 'ember':
        sys.path.insert(0, str(ROOT))
        import ember
        return run_mx(ember, data, repeat, only)
    if kind == 'mxnet':
        import mxnet
        return run_mx(mxnet, data, repeat, only)
    if kind == 'torch':
        return run_torch(data, repeat, only)
    return run_scipy(data, repeat, only)


# ----------------------------------------------------------------------------------------------
# Driver.

FRAMEWORKS = ('ember', 'mxnet', 'scipy', 'torch')


def measure(kind, args):
    python = PYTHONS[kind]
    if not Path(python).exists():
        return None, f'{python} not found (benchmarks/peers/envs.py builds it)'
    env = dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count()))
    command = [python, __file__, '--runner', kind, '--repeat', str(args.repeat), '--scale',
               str(args.scale), '--only', ','.join(args.only)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return None, done.stderr.strip().splitlines()[-1] if done.stderr else 'failed'
    return json.loads(done.stdout.strip().splitlines()[-1]), None


def interleaved_rounds(args):
    """{framework: [one {workload: ms} per round]}: the frameworks in turn, `args.rounds`
    times; one that fails is reported once and left out of the later rounds."""
    rounds = {kind: [] for kind in FRAMEWORKS}
    failed = set()
    for _ in range(args.rounds):
        for kind in FRAMEWORKS:
            if kind in failed:
                continue
            result, problem_text = measure(kind, args)
            if problem_text:
                print(f'{kind}: {problem_text}')
                failed.add(kind)
            else:
                rounds[kind].append(result)
    return rounds


def summary_row(rounds, name):
    """(median ms of each framework, or nan; lowest and highest MXNet/Ember ratio of a
    round) for workload `name`."""
    medians = [float(np.median([r[name] for r in rounds[k]])) if rounds[k] else float('nan')
               for k in FRAMEWORKS]
    ratios = [m[name] / e[name] for e, m in zip(rounds['ember'], rounds['mxnet'])]
    spread = (min(ratios), max(ratios)) if ratios else (float('nan'), float('nan'))
    return medians, spread


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--repeat', type=int, default=20)
    parser.add_argument('--scale', type=float, default=1.0)
    parser.add_argument('--only', default=','.join(WORKLOADS))
    parser.add_argument('--runner', choices=sorted(PYTHONS))
    args = parser.parse_args()
    args.only = [w for w in args.only.split(',') if w]
    if args.runner:
        print(json.dumps(runner(args.runner, args.repeat, args.scale, args.only)))
        return
    if args.rounds < 1:
        parser.error(f'--rounds {args.rounds}: expected 1 or more')
    rounds = interleaved_rounds(args)
    print(f'\n{"workload":10s} {"Ember":>9s} {"MXNet":>9s} {"SciPy/NumPy":>12s} '
          f'{"PyTorch":>9s} {"MXNet/Ember":>12s} {"spread":>13s}   (ms per call, median of '
          f'{args.rounds} rounds)')
    for name in args.only:
        row, (low, high) = summary_row(rounds, name)
        print(f'{name:10s} {row[0]:9.3f} {row[1]:9.3f} {row[2]:12.3f} {row[3]:9.3f} '
              f'{row[1] / row[0]:11.2f}x {low:6.2f}-{high:.2f}x')


if __name__ == '__main__':
    main()
