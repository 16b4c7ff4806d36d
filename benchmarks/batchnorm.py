"""Milliseconds of training BatchNorm, forward and backward, on ResNet-50 (v1)'s shapes, per path.

    PYTHONPATH=. python benchmarks/batchnorm.py [--batch 16] [--repeat 5] [--threads N]

One row per BatchNorm shape of resnet50_v1 (NCHW float32, fix_gamma=False, training with the
batch statistics). Each cell is the minimum over `repeat` calls, after a warm-up, of one call
of the operator's kernel (the paths of a row take turns, so other load on the machine hits
them alike):

  numpy    the NumPy code (ember._kernels hidden; oneDNN off for the backward pass)
  C        ember._kernels: each channel read from memory once, channels split across threads
  dnn      oneDNN 3.2 on the same NCHW arrays (its ncsp kernel; the forward primitive is
           called directly, since the provider declines NCHW forward)
  dnn-nhwc oneDNN on channel-last arrays of the same shape, as a reference: a training graph
           would pay a reorder into and out of that layout besides

The last rows weigh each shape by how often ResNet-50 uses it: milliseconds per training step
of all 53 BatchNorms, forward and backward.
"""
from __future__ import annotations

import argparse
import contextlib
import time
from unittest import mock

import numpy as np

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import config, engine
from ember.backend import onednn
from ember.op import registry
from ember.op.nn import normalization, onednn_provider

# (channels, height = width, uses in resnet50_v1)
SHAPES = [(64, 112, 1), (64, 56, 6), (256, 56, 4), (128, 28, 8), (512, 28, 5), (256, 14, 12),
          (1024, 14, 7), (512, 7, 6), (2048, 7, 4)]
PATHS = ('numpy', 'C', 'dnn', 'dnn-nhwc')


class Call:
    """The arrays of one BatchNorm shape and a forward and backward call per path."""

    def __init__(self, batch, channels, size, rng):
        shape = (batch, channels, size, size)
        self.attrs = registry.get('BatchNorm').parse_attrs({'fix_gamma': False})
        self.x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32)
        self.dy = rng.standard_normal(shape).astype(np.float32)
        self.gamma = rng.uniform(0.5, 1.5, channels).astype(np.float32)
        self.beta = rng.standard_normal(channels).astype(np.float32)
        self.moving = [np.zeros(channels, np.float32), np.ones(channels, np.float32)]
        self.out = np.empty_like(self.x)
        self.stats = [np.empty(channels, np.float32), np.empty(channels, np.float32)]
        self.grads = [np.empty_like(self.x), np.empty_like(self.gamma),
                      np.empty_like(self.gamma)]
        # channel-last copies, seen as NCHW-shaped views with axis 3 as channels
        self.x_nhwc = np.ascontiguousarray(self.x.transpose(0, 2, 3, 1))
        self.dy_nhwc = np.ascontiguousarray(self.dy.transpose(0, 2, 3, 1))
        self.out_nhwc, self.dx_nhwc = np.empty_like(self.x_nhwc), np.empty_like(self.x_nhwc)

    def forward(self, path):
        if path == 'dnn':
            return self._dnn_forward()
        ins = [self.x, self.gamma, self.beta] + self.moving
        ctx = registry.KernelContext(None, is_train=True, safe_accumulation=False)
        if path == 'dnn-nhwc':
            attrs = {**self.attrs, 'axis': 3}
            ins[0] = self.x_nhwc
            assert normalization._onednn_bn(attrs, ins, [self.out_nhwc] + self.stats, ctx)
            return
        with _kernels_hidden(path == 'numpy'):
            registry.get('BatchNorm').kernel(self.attrs, ins, [self.out] + self.stats, ctx)

    def _dnn_forward(self):
        """oneDNN's NCHW training forward, as the provider would run it if it took NCHW."""
        var = np.empty_like(self.stats[1])
        key = ('bench_bn_train', self.x.shape, self.attrs['eps'])

        def build():
            desc = onednn.MemoryDesc.of
            return onednn.batch_norm_training(desc(self.x), desc(self.out), self.attrs['eps'],
                                              True)
        onednn.set_num_threads(engine.kernel_threads())
        arrays = {onednn.ARG_SRC: self.x, onednn.ARG_DST: self.out, onednn.ARG_SCALE: self.gamma,
                  onednn.ARG_SHIFT: self.beta, onednn.ARG_MEAN: self.stats[0],
                  onednn.ARG_VARIANCE: var}
        onednn.cached(key, build).run(arrays)

    def backward(self, path):
        if path == 'dnn-nhwc':
            attrs = {**self.attrs, 'axis': 3}
            assert onednn_provider.batch_norm_backward(
                attrs, self.dy_nhwc, self.x_nhwc, self.gamma, *self.stats, self.dx_nhwc,
                *self.grads[1:], True)
            return
        ins = [self.dy, self.x, self.gamma] + self.stats
        ctx = registry.KernelContext(None, is_train=True)
        with _kernels_hidden(path != 'C'), config.override(MXNET_MKLDNN_ENABLED=path != 'numpy'):
            registry.get('_backward_BatchNorm').kernel(self.attrs, ins, self.grads, ctx)


def _kernels_hidden(hide):
    """Hides ember._kernels from the BatchNorm code while active (when `hide`)."""
    return mock.patch.object(normalization, '_kernels', None) if hide \
        else contextlib.nullcontext()


def best_ms(fn, paths, repeat):
    """Minimum milliseconds per path over `repeat` rounds, the paths taking turns."""
    best = {path: float('inf') for path in paths}
    for path in paths:
        fn(path)                      # warm-up: builds primitives, touches pages
    for _ in range(repeat):
        for path in paths:
            start = time.perf_counter()
            fn(path)
            best[path] = min(best[path], (time.perf_counter() - start) * 1e3)
    return best


def available(path):
    if path == 'C':
        return normalization._kernels is not None
    return path == 'numpy' or onednn.available()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--repeat', type=int, default=5)
    args = parser.parse_args()
    paths = [path for path in PATHS if available(path)]
    rng = np.random.default_rng(0)
    print(f'BatchNorm training, resnet50_v1 shapes, batch {args.batch}, '
          f'{engine.kernel_threads()} kernel threads: ms per call (min of {args.repeat})')
    header = ' '.join(f'{p:>9}' for p in paths)
    print(f'{"shape (C, HxW) x uses":<24} | forward {header} | backward {header}')
    totals = {(d, p): 0.0 for d in ('fwd', 'bwd') for p in paths}
    for channels, size, uses in SHAPES:
        call = Call(args.batch, channels, size, rng)
        forward = best_ms(call.forward, paths, args.repeat)
        backward = best_ms(call.backward, paths, args.repeat)
        for path in paths:
            totals['fwd', path] += forward[path] * uses
            totals['bwd', path] += backward[path] * uses
        cells = (' '.join(f'{forward[p]:9.2f}' for p in paths),
                 ' '.join(f'{backward[p]:9.2f}' for p in paths))
        print(f'{f"({channels}, {size}x{size}) x {uses}":<24} | forward {cells[0]} | '
              f'backward {cells[1]}')
    for direction in ('fwd', 'bwd'):
        row = '  '.join(f'{p} {totals[direction, p]:7.1f}' for p in paths)
        print(f'per step, all 53 ({direction}): {row}')


if __name__ == '__main__':
    main()
