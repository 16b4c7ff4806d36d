"""MXNET_ENFORCE_DETERMINISM: every operator gives bit-identical results across runs and
thread counts.

A small network (convolution, batch norm, pooling, dropout, fully connected, log-softmax, pick,
norm and sum) runs forward and backward in child processes that differ only in
MXNET_CPU_WORKER_NTHREADS and OMP_NUM_THREADS (both read once at start-up, hence the
processes). Element-wise kernels are split across the kernel threads from 1000 elements on
(MXNET_CPU_PARALLEL_SIZE), and a GEMM large enough for BLAS to use its threads is included.
Every output and gradient must be byte-for-byte the same.

The number of engine workers and the element-wise splits leave results unchanged, but OpenBLAS
gives different bits for one GEMM with 1 and with 2 threads (even for 16-row blocks of it), so
with MXNET_ENFORCE_DETERMINISM the engine pins BLAS to one thread instead of following
OMP_NUM_THREADS (`test_pinning_blas_to_one_thread_is_enough` shows that this suffices).
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ember import config

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import hashlib, json
import numpy as np
import sys
import ember as mx
from ember import config, engine

if 'pin-blas' in sys.argv:
    # after the engine applied OMP_NUM_THREADS to BLAS: what the engine should do itself
    from threadpoolctl import threadpool_limits
    engine.get()
    pinned = threadpool_limits(1, user_api='blas')
mx.random.seed(7)
rng = np.random.default_rng(0)


def param(*shape):
    array = mx.nd.array(rng.standard_normal(shape) * 0.1)
    array.attach_grad()
    return array


x = mx.nd.array(rng.standard_normal((16, 3, 16, 16)))
label = mx.nd.array(rng.integers(0, 10, 16))
w1, b1, gamma, beta = param(8, 3, 3, 3), param(8), param(8), param(8)
w2, b2 = param(10, 8 * 8 * 8), param(10)
moving_mean, moving_var = mx.nd.zeros(8), mx.nd.ones(8)
with mx.autograd.record():
    h = mx.nd.Convolution(x, w1, b1, kernel=(3, 3), pad=(1, 1), num_filter=8)
    h = mx.nd.BatchNorm(h, gamma, beta, moving_mean, moving_var, fix_gamma=False)
    h = mx.nd.Pooling(mx.nd.relu(h), kernel=(2, 2), stride=(2, 2))
    h = mx.nd.Dropout(h, p=0.2)
    logits = mx.nd.FullyConnected(h, w2, b2, num_hidden=10)
    picked = mx.nd.pick(mx.nd.log_softmax(logits), label)
    loss = -picked.mean() + 1e-3 * (mx.nd.norm(w1) + mx.nd.sum(w2 * w2))
loss.backward()
a = mx.nd.array(rng.standard_normal((300, 200)))
b = mx.nd.array(rng.standard_normal((200, 250)))
product = mx.nd.dot(a, b)
results = [loss, logits, moving_mean, moving_var, product, mx.nd.sum(product, axis=0),
           mx.nd.softmax(product), mx.nd.exp(product * 1e-3).mean()]
results += [p.grad for p in (w1, b1, gamma, beta, w2, b2)]
digest = hashlib.sha256(b''.join(r.asnumpy().tobytes() for r in results)).hexdigest()
from threadpoolctl import threadpool_info
print(json.dumps({
    'digest': digest,
    'workers': config.get('MXNET_CPU_WORKER_NTHREADS'),
    'kernel_threads': engine.kernel_threads(),
    'blas_threads': sorted({pool['num_threads'] for pool in threadpool_info()
                            if pool['user_api'] == 'blas'}),
}))
'''


def run_network(workers, threads, determinism=True, pin_blas=False):
    environ = config.child_environ(MXNET_ENFORCE_DETERMINISM=determinism,
                                   MXNET_CPU_WORKER_NTHREADS=workers, OMP_NUM_THREADS=threads,
                                   MXNET_CPU_PARALLEL_SIZE=1000, MXNET_USE_OPERATOR_TUNING='0',
                                   MXNET_ENGINE_TYPE=None,
                                   PYTHONPATH=str(ROOT))
    argv = [sys.executable, '-c', CHILD] + (['pin-blas'] if pin_blas else [])
    done = subprocess.run(argv, env=environ, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope='module')
def single_threaded():
    return run_network(workers=1, threads=1)


def test_children_use_the_thread_counts_asked_for(single_threaded):
    wide = run_network(workers=3, threads=3)
    assert (single_threaded['workers'], single_threaded['kernel_threads']) == (1, 1)
    assert (wide['workers'], wide['kernel_threads']) == (3, 3)


def test_results_repeat_bit_for_bit_across_runs(single_threaded):
    assert run_network(workers=1, threads=1)['digest'] == single_threaded['digest']


def test_results_do_not_depend_on_the_engine_workers(single_threaded):
    assert run_network(workers=3, threads=1)['digest'] == single_threaded['digest']


@pytest.mark.skipif(config.cpu_count() < 2, reason='BLAS runs one thread on one core')
@pytest.mark.parametrize('workers,threads', [(1, 2), (2, 4)])
def test_results_do_not_depend_on_the_kernel_and_blas_threads(single_threaded, workers,
                                                                threads):
    assert run_network(workers, threads)['digest'] == single_threaded['digest']


def test_pinning_blas_to_one_thread_is_enough(single_threaded):
    pinned = run_network(workers=2, threads=4, pin_blas=True)
    assert pinned['kernel_threads'] == 4 and pinned['blas_threads'] in ([], [1])
    assert pinned['digest'] == single_threaded['digest']
