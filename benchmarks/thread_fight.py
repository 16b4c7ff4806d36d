"""NumPy's OpenBLAS threads and oneDNN's OpenMP threads, interleaved: how the variables that
make them stop spinning change small operators and a whole network.

    PYTHONPATH=. python benchmarks/thread_fight.py [--rounds 3] [--repeat 200] [--batches 10]
                                                   [--settings NAME,NAME] [--no-network]
                                                   [--numpy-network] [--stat min]

After a call, OpenBLAS's helper threads spin for about 2**OPENBLAS_THREAD_TIMEOUT cycles (2**28,
~0.1 s, by default) and libgomp's for GOMP_SPINCOUNT iterations (300000 by default, unless
OMP_WAIT_POLICY says otherwise) before they sleep; a call into the other library meanwhile
finds its cores taken. Both variables are read once, when the library loads, so every setting
runs in its own child process. Ember sets OPENBLAS_THREAD_TIMEOUT and GOMP_SPINCOUNT itself when
they are unset (ember/__init__.py, ember/backend/native.py); 'library defaults' sets them to
the libraries' own defaults, which Ember then leaves alone; 'Ember (NumPy first)' is a program
that imports NumPy before Ember, too late for OPENBLAS_THREAD_TIMEOUT.

Per setting, the child times (milliseconds, median of `repeat` calls, or their minimum with
--stat min, which filters out other processes on a shared machine: a fight within the process
slows every call it touches, another process only some):
  gemm, conv, relu         each alone, back to back: a 256x256 float32 np.matmul (OpenBLAS),
                           a oneDNN 3x3 64->64 convolution on 1x14x14x64 NHWC, a oneDNN relu
                           on 1x56x56x64
  conv after gemm,         each call of a loop alternating conv and gemm
  gemm after conv
  pair                     one gemm + conv + gemm + relu round
and resnet50_v1 inference at batch 1, hybridized (img/s, from the median or fastest of
`batches`), with
--numpy-network also on the NumPy kernels alone (MXNET_MKLDNN_ENABLED=0, where only OpenBLAS's
spinning matters). `rounds` runs
the settings in turn that many times and reports each cell's median, since other processes on
a shared machine disturb single runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

LIBRARY_DEFAULTS = {'OPENBLAS_THREAD_TIMEOUT': '28', 'GOMP_SPINCOUNT': '300000'}
# name: (environment, whether the child imports NumPy before Ember); OPENBLAS_THREAD_TIMEOUT is
# 'timeout', GOMP_SPINCOUNT 'spin'
SETTINGS = {
    'library defaults': (LIBRARY_DEFAULTS, False),
    'timeout=4': (dict(LIBRARY_DEFAULTS, OPENBLAS_THREAD_TIMEOUT='4'), False),
    'spin=10000': (dict(LIBRARY_DEFAULTS, GOMP_SPINCOUNT='10000'), False),
    'Ember (unset)': ({}, False),
    'Ember (NumPy first)': ({}, True),
    'timeout=4 spin=0': ({'OPENBLAS_THREAD_TIMEOUT': '4', 'GOMP_SPINCOUNT': '0'}, False),
    'timeout=4 spin=1000': ({'OPENBLAS_THREAD_TIMEOUT': '4', 'GOMP_SPINCOUNT': '1000'}, False),
    'timeout=4 spin=10000': ({'OPENBLAS_THREAD_TIMEOUT': '4', 'GOMP_SPINCOUNT': '10000'}, False),
    'timeout=4 spin=100000': ({'OPENBLAS_THREAD_TIMEOUT': '4', 'GOMP_SPINCOUNT': '100000'},
                              False),
    'timeout=4 spin=300000': ({'OPENBLAS_THREAD_TIMEOUT': '4', 'GOMP_SPINCOUNT': '300000'},
                              False),
    'timeout=4 spin=3000000': ({'OPENBLAS_THREAD_TIMEOUT': '4', 'GOMP_SPINCOUNT': '3000000'},
                               False),
    'timeout=8 spin=10000': ({'OPENBLAS_THREAD_TIMEOUT': '8', 'GOMP_SPINCOUNT': '10000'}, False),
    'timeout=4 passive': ({'OPENBLAS_THREAD_TIMEOUT': '4', 'OMP_WAIT_POLICY': 'passive'}, False),
}
FOREIGN = ('OPENBLAS_THREAD_TIMEOUT', 'GOMP_SPINCOUNT', 'OMP_WAIT_POLICY')
COLUMNS = ('gemm', 'conv', 'relu', 'conv after gemm', 'gemm after conv', 'pair',
           'resnet50 b1', 'resnet50 np')


# ----------------------------------------------------------------------------------------------
# The child: one setting, loaded once.

STATISTIC = {'median': statistics.median, 'min': min}
_statistic = statistics.median


def child(repeat, batches, network, numpy_network):
    import ember as mx           # first: Ember sets OpenBLAS's variable before NumPy loads it
    import numpy as np
    from ember import engine
    from ember.backend import onednn
    if not onednn.available():
        sys.exit(f'oneDNN is not available: {onednn.status()}')
    onednn.set_num_threads(engine.kernel_threads())
    gemm, conv, relu = _operators(np, onednn)
    results = {}
    for name, fn in (('gemm', gemm), ('conv', conv), ('relu', relu)):
        _let_threads_sleep()
        results[name] = _alone(fn, repeat)
    _let_threads_sleep()
    results['conv after gemm'], results['gemm after conv'] = _alternating(conv, gemm, repeat)
    _let_threads_sleep()
    results['pair'] = _alone(lambda: (gemm(), conv(), gemm(), relu()), repeat)
    if network:
        results['resnet50 b1'] = _resnet50(mx, np, batches)
    if numpy_network:
        with mx.config.override(MXNET_MKLDNN_ENABLED=False):
            results['resnet50 np'] = _resnet50(mx, np, batches)
    print(json.dumps(results))


def _operators(np, onednn):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256), np.float32)
    b, c = a.copy(), np.empty_like(a)
    x = rng.standard_normal((1, 14, 14, 64), np.float32)
    w = rng.standard_normal((64, 3, 3, 64), np.float32)          # OHWI
    y = np.empty_like(x)
    md = onednn.MemoryDesc.of
    # NCHW dims over NHWC buffers: oneDNN sees the layout in the strides
    prim = onednn.convolution(md(np.moveaxis(x, -1, 1)), md(np.moveaxis(w, -1, 1)), None,
                              md(np.moveaxis(y, -1, 1)), (1, 1), (1, 1), (1, 1), (1, 1))
    big = rng.standard_normal((1, 56, 56, 64), np.float32)
    big_out = np.empty_like(big)
    relu = onednn.eltwise(md(big), md(big_out), 'relu')
    return (lambda: np.matmul(a, b, out=c),
            lambda: prim.run({onednn.ARG_SRC: np.moveaxis(x, -1, 1),
                              onednn.ARG_WEIGHTS: np.moveaxis(w, -1, 1),
                              onednn.ARG_DST: np.moveaxis(y, -1, 1)}),
            lambda: relu.run({onednn.ARG_SRC: big, onednn.ARG_DST: big_out}))


def _let_threads_sleep():
    # both pools spin at most ~0.1 s after their last call: 'alone' means after that
    time.sleep(0.3)


def _alone(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return _statistic(times) * 1e3


def _alternating(first, second, repeat):
    """ms of `first` right after `second`, and of `second` right after `first`."""
    first_times, second_times = [], []
    first(), second()
    for _ in range(repeat):
        start = time.perf_counter()
        first()
        middle = time.perf_counter()
        second()
        first_times.append(middle - start)
        second_times.append(time.perf_counter() - middle)
    return _statistic(first_times) * 1e3, _statistic(second_times) * 1e3


def _resnet50(mx, np, batches):
    net = mx.gluon.model_zoo.vision.get_model('resnet50_v1', classes=1000)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    data = mx.nd.array(np.random.default_rng(0).standard_normal((1, 3, 224, 224)))
    times = []
    for index in range(batches + 2):       # two warm-up batches
        start = time.perf_counter()
        with mx.autograd.predict_mode():
            net(data).wait_to_read()
        if index >= 2:
            times.append(time.perf_counter() - start)
    return 1.0 / _statistic(times)


# ----------------------------------------------------------------------------------------------
# The parent: every setting in its own process, in rounds.

def run_setting(setting, args):
    values, numpy_first = setting
    environ = {k: v for k, v in os.environ.items() if k not in FOREIGN}
    environ.update(values)
    argv = [sys.executable] + (['-c', NUMPY_FIRST] if numpy_first else [__file__])
    argv += ['--child', '--repeat', str(args.repeat), '--batches', str(args.batches),
             '--stat', args.stat]
    argv += ['--no-network'] if args.no_network else []
    argv += ['--numpy-network'] if args.numpy_network else []
    done = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f'child failed:\n{done.stderr[-3000:]}')
    return json.loads(done.stdout.strip().splitlines()[-1])


# the child, started after NumPy was imported (as a program that imports it before Ember)
NUMPY_FIRST = (f'import sys, runpy, numpy; sys.argv[0] = {__file__!r}; '
               f'runpy.run_path({__file__!r}, run_name="__main__")')


def print_table(names, cells, columns):
    width = max(len(n) for n in names) + 2
    print(f'\n{"setting":<{width}}' + ''.join(f'{c:>16}' for c in columns))
    print(f'{"":<{width}}' + ''.join(f'{"img/s" if c.startswith("resnet") else "ms":>16}'
                                     for c in columns))
    for name in names:
        row = cells[name]
        print(f'{name:<{width}}' + ''.join(f'{statistics.median(row[c]):>16.3f}'
                                           for c in columns))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--repeat', type=int, default=200)
    parser.add_argument('--batches', type=int, default=10)
    parser.add_argument('--settings', default=','.join(SETTINGS),
                        help='comma-separated names from: ' + ', '.join(SETTINGS))
    parser.add_argument('--no-network', action='store_true', help='skip resnet50_v1')
    parser.add_argument('--numpy-network', action='store_true',
                        help='also resnet50_v1 on the NumPy kernels alone')
    parser.add_argument('--stat', choices=sorted(STATISTIC), default='median',
                        help='statistic of the timed calls (min suits a shared machine)')
    parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    global _statistic
    _statistic = STATISTIC[args.stat]
    if args.child:
        child(args.repeat, args.batches, not args.no_network, args.numpy_network)
        return
    names = [n.strip() for n in args.settings.split(',') if n.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        parser.error(f'unknown settings {unknown}; choose from {", ".join(SETTINGS)}')
    columns = [c for c in COLUMNS if not (c == 'resnet50 b1' and args.no_network
                                          or c == 'resnet50 np' and not args.numpy_network)]
    cells = {name: {c: [] for c in columns} for name in names}
    print(f'{os.cpu_count()} CPUs; {args.rounds} rounds (median of rounds); {args.stat} of '
          f'{args.repeat} calls per operator cell, of {args.batches} batches per network cell',
          flush=True)
    for round_index in range(args.rounds):
        for name in names:
            result = run_setting(SETTINGS[name], args)
            for column in columns:
                cells[name][column].append(result[column])
            print(f'  round {round_index + 1} {name}: '
                  + ', '.join(f'{c} {result[c]:.3f}' for c in columns), flush=True)
    print_table(names, cells, columns)


if __name__ == '__main__':
    main()
