"""Milliseconds of ResNet's two fused element-wise chains, NumPy blocks against ember._kernels.

    PYTHONPATH=. python benchmarks/fused_chains.py [--batch 16] [--repeat 7]

The chains that the fusion pass makes of every residual block of a training graph, on the
activation shapes of resnet50_v1's four stages (channel-last float32, as the training graph
runs them):

  forward   relu(a + b)                     broadcast_add, Activation(relu)
  backward  (a + b) * (y > 0)               elemwise_add, _backward_Activation(relu)

Each goes through the _FusedElemwise kernel, as the executor calls it, by two paths:

  numpy  the blocks: each step's NumPy kernel on 64K-element blocks (ember._kernels hidden)
  C      ember._kernels.add_relu / add_relu_grad, one pass over memory

Both split across the kernel threads as the operator tuner decides. A cell is the minimum over
`repeat` calls after a warm-up, the paths taking turns (other load on the machine hits them
alike); GB/s counts each array read or written once (3 arrays forward, 4 backward).
"""
from __future__ import annotations

import argparse
import time
from unittest import mock

import numpy as np

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import engine
from ember.op import fused, registry

# (height = width, channels): the output of each resnet50_v1 stage
SHAPES = [(56, 256), (28, 512), (14, 1024), (7, 2048)]
PATHS = ('numpy', 'C')
CHAINS = {
    'forward': fused.chain_text(2, [('broadcast_add', {}, ['i0', 'i1']),
                                    ('Activation', {'act_type': 'relu'}, ['s0'])], [1]),
    'backward': fused.chain_text(3, [('elemwise_add', {}, ['i0', 'i1']),
                                     ('_backward_Activation', {'act_type': 'relu'},
                                      ['s0', 'i2'])], [1]),
}


def call(chain, ins, out):
    """The _FusedElemwise kernel on one chain: ``run(path)``."""
    kernel = registry.get('_FusedElemwise').kernel
    ctx = registry.KernelContext(None)

    def run(path):
        kernels = None if path == 'numpy' else fused._kernels
        with mock.patch.object(fused, '_kernels', kernels):
            kernel({'chain': chain}, ins, [out], ctx)
    return run


def best_ms(fn, paths, repeat):
    """Minimum milliseconds per path over `repeat` rounds, the paths taking turns."""
    best = {path: float('inf') for path in paths}
    for path in paths:
        fn(path)                      # warm-up: the tuner's measurement, page faults
    for _ in range(repeat):
        for path in paths:
            start = time.perf_counter()
            fn(path)
            best[path] = min(best[path], (time.perf_counter() - start) * 1e3)
    return best


def cells(ms, arrays, size):
    numpy_ms, c_ms = ms['numpy'], ms['C']
    gbps = arrays * size * 4 / (c_ms * 1e6)
    return f'{numpy_ms:8.2f} {c_ms:8.2f} {numpy_ms / c_ms:6.2f}x {gbps:7.1f}'


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--repeat', type=int, default=7)
    args = parser.parse_args()
    if fused._kernels is None:
        raise SystemExit('ember._kernels is not built: python setup.py build_ext --inplace')
    rng = np.random.default_rng(0)
    print(f'Fused chains, resnet50_v1 stage outputs, batch {args.batch}, float32, '
          f'{engine.kernel_threads()} kernel threads: ms per call (min of {args.repeat}), '
          f'C in GB/s')
    columns = f'{"numpy":>8} {"C":>8} {"speed":>7} {"GB/s":>7}'
    print(f'{"":<20} | {"forward relu(a + b)":^33} | {"backward (a + b) * (y > 0)":^33}'.rstrip())
    print(f'{"shape (N, H, W, C)":<20} | {columns} | {columns}')
    for size, channels in SHAPES:
        shape = (args.batch, size, size, channels)
        a, b, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        out = np.empty_like(a)
        forward = best_ms(call(CHAINS['forward'], [a, b], out), PATHS, args.repeat)
        backward = best_ms(call(CHAINS['backward'], [a, b, y], out), PATHS, args.repeat)
        print(f'{str(shape):<20} | {cells(forward, 3, a.size)} | {cells(backward, 4, a.size)}')


if __name__ == '__main__':
    main()
