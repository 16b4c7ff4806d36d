"""Milliseconds of a training convolution's three passes on ResNet-50 (v1)'s 3x3 layers, per
algorithm, and of the weight gradient of its 1x1 layers.

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

A second table takes the weight and bias gradients of resnet50_v1's stride-1 1x1 layers,
channel-last as the training graph runs them (dy and x in NHWC, OHWI weights):

  dnn+b   oneDNN's backward-weights primitive summing the bias gradient itself
  dnn     the provider as it runs: the primitive without the bias, NumPy's column sums after
  sums    the compiled sums of ember._winograd.pointwise_gradient, the bias summed in the same
          pass (pointwise.weight_gradient)
"""
from __future__ import annotations

import argparse

import numpy as np
from batchnorm import best_ms      # benchmarks/ is the script's folder

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import engine
from ember.backend import onednn
from ember.op import registry
from ember.op.nn import onednn_provider
from ember.op.nn.conv import compiled, pointwise, winograd, winograd_compiled
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
        ('forward', 'wino'): lambda: winograd.winograd(x, w, None, out, window, False, 4,
                                                       threads=threads),
        ('data', 'dnn'): lambda: onednn_provider.convolution_backward_data(attrs, dy, w, dx),
        ('data', 'wino'): lambda: winograd_compiled.data_gradient(dy, w, dx, window, False,
                                                                  threads=threads),
        ('weight', 'dnn'): lambda: onednn_provider.convolution_backward_weights(attrs, dy, x,
                                                                                dw),
        ('weight', 'wino'): lambda: winograd_compiled.weight_gradient(dy, x, dw, window, False,
                                                                      threads=threads),
    }


# (input channels, filters, height = width, uses in resnet50_v1; all with a bias)
POINTWISE = [(64, 64, 56, 1), (64, 256, 56, 3), (256, 64, 56, 2), (128, 512, 28, 4),
             (512, 128, 28, 3), (256, 1024, 14, 6), (1024, 256, 14, 5), (512, 2048, 7, 3),
             (2048, 512, 7, 2)]


def _pointwise_calls(batch, channels, filters, size, threads):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, size, size, channels)).astype(np.float32)
    dy = rng.standard_normal((batch, size, size, filters)).astype(np.float32)
    dw, db = np.empty((filters, 1, 1, channels), np.float32), np.empty(filters, np.float32)
    attrs = registry.get('Convolution').parse_attrs(
        {'kernel': (1, 1), 'num_filter': filters, 'layout': 'NHWC'})
    key = ('conv_bwd_weights_with_bias', filters, channels, size)

    def dnn_with_bias():
        # the primitive as oneDNN builds it with a bias gradient, bypassing the provider's
        # split (which sums the bias in NumPy)
        x_md, dy_md = (onednn.MemoryDesc.of(np.moveaxis(a, -1, 1)) for a in (x, dy))
        w = np.moveaxis(dw, -1, 1)
        primitive = onednn.cached(key, lambda: onednn.convolution_backward_weights(
            x_md, onednn.MemoryDesc.of(w), onednn.MemoryDesc.of(db), dy_md, (1, 1), (1, 1),
            (0, 0), (0, 0), activations_as_given=True))
        primitive.run({onednn.ARG_SRC: np.moveaxis(x, -1, 1),
                       onednn.ARG_DIFF_DST: np.moveaxis(dy, -1, 1),
                       onednn.ARG_DIFF_WEIGHTS: w, onednn.ARG_DIFF_BIAS: db})
    return {
        'dnn+b': dnn_with_bias,
        'dnn': lambda: onednn_provider.convolution_backward_weights(attrs, dy, x, dw, db),
        'sums': lambda: pointwise.weight_gradient(dy, x, dw, db,
                                                  threads=threads),
    }


def pointwise_table(batch, repeat, threads) -> None:
    print(f'\nresnet50_v1 1x1 stride-1 layers, weight and bias gradients, batch {batch}, NHWC '
          f'float32; ms per call (best of {repeat})\n')
    names = ('dnn+b', 'dnn', 'sums')
    print('| channels | filters | size | ' + ' | '.join(names) + ' |')
    print('|' + '---|' * (3 + len(names)))
    totals, flops = dict.fromkeys(names, 0.0), 0
    for channels, filters, size, uses in POINTWISE:
        calls = _pointwise_calls(batch, channels, filters, size, threads)
        row = best_ms(lambda name: calls[name](), list(names), repeat)
        for name in names:
            totals[name] += uses * row[name]
        flops += uses * 2 * batch * channels * filters * size * size
        print(f'| {channels} | {filters} | {size} | '
              + ' | '.join(f'{row[name]:.2f}' for name in names) + ' |')
    print('| per step | | | ' + ' | '.join(f'{ms:.0f}' for ms in totals.values()) + ' |')
    print('| GFLOP/s | | | ' + ' | '.join(f'{flops / ms / 1e6:.0f}' for ms in totals.values())
          + ' |')


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--threads', type=int, default=None,
                        help='kernel threads (default: the engine\'s)')
    args = parser.parse_args(argv)
    if compiled.MODULE is None or not onednn_provider.enabled():
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
    pointwise_table(args.batch, args.repeat, threads)


if __name__ == '__main__':
    main()
