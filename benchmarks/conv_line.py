"""Milliseconds of inceptionv3's 1 x r and r x 1 convolutions (NHWC, float32) per algorithm.

    PYTHONPATH=. python benchmarks/conv_line.py [--batches 1 8 32] [--repeat 9]

One row per layer shape and batch size. Columns, each the best of `repeat` calls after a
warm-up, the algorithms of a row taking turns, with bias and relu as in ``_sg_conv``:

- ``onednn``: oneDNN's convolution through Ember's provider, its reordered weights kept (as a
  weight token allows in inference);
- ``gemm``: im2col and a GEMM on the compiled products (conv.gemm, packed weights kept);
- ``line``: the 1-D Winograd F(m, r) (``line.convolve``) with the tile size it picks
  (``m`` column), transformed weights kept;
- ``F(4)``: the same with 4 outputs a tile forced, where it picked 6.

The last line weights each shape by how often inceptionv3 uses it: milliseconds per batch of
its 34 such layers (twelve shapes) with oneDNN throughout and with ``line`` throughout.
"""
from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import engine
from ember.op import registry
from ember.op.nn.conv import algorithms, convolution, line, tuning
from ember.op.registry import KernelContext

# (input channels, filters, size, kernel, uses in inceptionv3)
LAYERS = [
    (128, 128, 17, (1, 7), 2), (128, 128, 17, (7, 1), 2), (128, 192, 17, (1, 7), 1),
    (128, 192, 17, (7, 1), 1), (160, 160, 17, (1, 7), 4), (160, 160, 17, (7, 1), 4),
    (160, 192, 17, (1, 7), 2), (160, 192, 17, (7, 1), 2), (192, 192, 17, (1, 7), 4),
    (192, 192, 17, (7, 1), 4), (384, 384, 8, (1, 3), 4), (384, 384, 8, (3, 1), 4),
]


class Token:
    """Stands for the weight's engine variable: the algorithms keep what they derive."""


def layer_arrays(channels, filters, size, kernel, batch, rng):
    x = rng.standard_normal((batch, size, size, channels)).astype(np.float32)
    w = (rng.standard_normal((filters,) + kernel + (channels,)) * 0.05).astype(np.float32)
    bias = rng.standard_normal(filters).astype(np.float32)
    return x, w, bias, np.empty((batch, size, size, filters), np.float32)


def best_times(calls, repeat):
    """Each call's best of `repeat` runs after a warm-up, the calls taking turns."""
    for call in calls.values():
        call()
    best = dict.fromkeys(calls, float('inf'))
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


@contextlib.contextmanager
def patched(module, name, value):
    """`module.name` set to `value` for the block (the algorithm chosen, a threshold)."""
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def choosing(name):
    """algorithms.choose answering algorithm `name` for the block."""
    algorithm = algorithms.ALGORITHMS[name]
    return patched(algorithms, 'choose', lambda *args, **kwargs: algorithm)


def forced(name, attrs, x, w, bias, out, token):
    def call():
        with choosing(name):
            convolution.forward(attrs, x, w, bias, out, KernelContext(None), act_type='relu',
                                weight_version=token)
    return call


def with_four_outputs(call):
    def four():
        with tuning.tuned(line_wide_min_tiles=1 << 62):
            call()
    return four


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--batches', type=int, nargs='+', default=[1, 8, 32])
    parser.add_argument('--repeat', type=int, default=9)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f'kernel threads: {engine.kernel_threads()}; ms per call, best of {args.repeat}')
    print(f'{"layer":>24} {"batch":>5} {"onednn":>8} {"gemm":>8} {"line":>8} {"m":>2} '
          f'{"F(4)":>8} {"onednn/line":>11}')
    totals = {}
    for batch in args.batches:
        whole = {'onednn': 0.0, 'line': 0.0}
        for channels, filters, size, kernel, uses in LAYERS:
            pad = (kernel[0] // 2, kernel[1] // 2)
            attrs = registry.get('Convolution').parse_attrs(
                dict(kernel=kernel, pad=pad, num_filter=filters, layout='NHWC'))
            x, w, bias, out = layer_arrays(channels, filters, size, kernel, batch, rng)
            calls = {name: forced(name, attrs, x, w, bias, out, ((Token(), 0),))
                     for name in ('onednn', 'gemm', 'winograd_line')}
            axis = 1 if kernel[1] == 1 else 2
            m = line.outputs(kernel[axis - 1], size, batch * size)
            if m != 4:
                calls['F(4)'] = with_four_outputs(
                    forced('winograd_line', attrs, x, w, bias, out, ((Token(), 0),)))
            best = {name: seconds * 1e3 for name, seconds in best_times(calls, args.repeat).items()}
            whole['onednn'] += uses * best['onednn']
            whole['line'] += uses * best['winograd_line']
            four = f'{best["F(4)"]:8.3f}' if 'F(4)' in best else f'{"":>8}'
            shape = f'{channels}->{filters} {kernel[0]}x{kernel[1]} @{size}'
            print(f'{shape:>24} {batch:5d} {best["onednn"]:8.3f} {best["gemm"]:8.3f} '
                  f'{best["winograd_line"]:8.3f} {m:2d} {four} '
                  f'{best["onednn"] / best["winograd_line"]:10.2f}x')
        totals[batch] = whole
    for batch, whole in totals.items():
        print(f'batch {batch}: inceptionv3\'s 34 such layers {whole["onednn"]:.2f} ms with oneDNN, '
              f'{whole["line"]:.2f} with line ({whole["onednn"] / whole["line"]:.2f}x)')


if __name__ == '__main__':
    main()
