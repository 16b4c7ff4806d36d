"""Milliseconds of a training convolution's three passes on ResNet-50 (v1)'s 3x3 layers, per
algorithm.

    PYTHONPATH=. python benchmarks/conv_gradients.py [--batch 16] [--repeat 5] [--threads N]

One row per 3x3 stride-1 shape of resnet50_v1 (NCHW float32, padding 1, as a training graph
holds them), one column pair per pass: forward, data gradient, weight gradient. Each cell is
the minimum over `repeat` calls, after a warm-up, of the algorithm alone on the same arrays
(the algorithms of a row take turns, so other load on the machine hits them alike):

  dnn   oneDNN 3.2's primitive (forward, backward-data, backward-weights)
  wino  the compiled Winograd F(4x4, 3x3) (ember._winograd): the forward convolution with
        the weights transformed on every call (training has no weight version), the data
        gradient as the convolution of the output gradient with the weights flipped, the
        weight gradient as sums over tiles in the Winograd domain; channel-first data goes
        through channel-last copies, included in the time

The last rows weigh each shape by how often ResNet-50 uses it: milliseconds per training step
of its 16 3x3 layers, and GFLOP/s of the direct convolution's work.
"""
from __future__ import annotations

import argparse

import numpy as np
from batchnorm import best_ms      # benchmarks/ is the script's folder

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import engine
from ember.backend import onednn
from ember.op import registry
from ember.op.nn import conv_winograd, onednn_provider
from ember.op.nn._common import make_window

# (channels = filters, height = width, uses in resnet50_v1)
SHAPES = [(64, 56, 3), (128, 28, 4), (256, 14, 6), (512, 7, 3)]
PASSES = ('forward', 'data', 'weight')


def _calls(batch, channels, size, threads):
    """{(pass, algorithm): fn} on fresh arrays of one shape."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, channels, size, size)).astype(np.float32)
    w = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    out, dx, dw = np.empty_like(x), np.empty_like(x), np.empty_like(w)
    attrs = registry.get('Convolution').parse_attrs(
        {'kernel': (3, 3), 'pad': (1, 1), 'num_filter': channels, 'no_bias': True})
    window = make_window((3, 3), (1, 1), (1, 1), (1, 1), (size, size), (size, size))
    return {
        ('forward', 'dnn'): lambda: onednn_provider.convolution_forward(attrs, x, w, None, out),
        ('forward', 'wino'): lambda: conv_winograd.winograd(x, w, None, out, window, False, 4,
                                                            threads=threads),
        ('data', 'dnn'): lambda: onednn_provider.convolution_backward_data(attrs, dy, w, dx),
        ('data', 'wino'): lambda: conv_winograd.data_gradient(dy, w, dx, window, False,
                                                              threads=threads),
        ('weight', 'dnn'): lambda: onednn_provider.convolution_backward_weights(attrs, dy, x,
                                                                                dw),
        ('weight', 'wino'): lambda: conv_winograd.weight_gradient(dy, x, dw, window, False,
                                                                  threads=threads),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--threads', type=int, default=None,
                        help='kernel threads (default: the engine\'s)')
    args = parser.parse_args(argv)
    if conv_winograd._winograd is None or not onednn_provider.enabled():
        raise SystemExit('needs ember._winograd (python setup.py build_ext --inplace) and '
                         'oneDNN (pip install onednn-cpu-gomp)')
    threads = args.threads or engine.kernel_threads()
    onednn.set_num_threads(threads)
    print(f'resnet50_v1 3x3 layers, batch {args.batch}, NCHW float32, {threads} threads; '
          f'ms per call (best of {args.repeat})\n')
    header = ['channels', 'size'] + [f'{p} {a}' for p in PASSES for a in ('dnn', 'wino')]
    print('| ' + ' | '.join(header) + ' |')
    print('|' + '---|' * len(header))
    totals = {key: 0.0 for key in ((p, a) for p in PASSES for a in ('dnn', 'wino'))}
    flops = 0
    for channels, size, uses in SHAPES:
        calls = _calls(args.batch, channels, size, threads)
        row = best_ms(lambda key: calls[key](), list(calls), args.repeat)
        for key, ms in row.items():
            totals[key] += uses * ms
        flops += uses * 2 * args.batch * channels * channels * 9 * size * size
        print(f'| {channels} | {size} | ' + ' | '.join(f'{row[key]:.1f}' for key in totals)
              + ' |')
    print('| per step | | ' + ' | '.join(f'{ms:.0f}' for ms in totals.values()) + ' |')
    print('| GFLOP/s | | ' + ' | '.join(f'{flops / ms / 1e6:.0f}' for ms in totals.values())
          + ' |')


if __name__ == '__main__':
    main()
