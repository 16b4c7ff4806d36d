"""GFLOP/s of every convolution algorithm on each ResNet-50 (v1) layer shape, NCHW and NHWC.

    PYTHONPATH=. python benchmarks/conv_algos.py [--batches 1 8 32] [--repeat 3]
        [--layers 3x3] [--algorithms gemm winograd4 onednn] [--layouts NHWC]
        [--budget-mb 16] [--stat min] [--end-to-end]

One row per layer shape and batch size; one column per algorithm and layout (the NumPy
algorithms of ember.op.nn.conv.algorithms, and oneDNN through Ember's provider, whose weight
reorder is redone on every call as in a kernel that cannot tell whether the weights changed;
'dnn+w' keeps it, as a weight version token would allow).
Each cell is the direct convolution's FLOPs over the time of one call (a warm-up, then the
median, or with --stat min the minimum, of `repeat` calls, the algorithms of a row taking
turns), with scratch from one reused buffer capped at --budget-mb, as the operator's
workspace. 'rule' names the algorithm that
MXNET_CUDNN_AUTOTUNE_DEFAULT=0 picks with oneDNN off and on. The summary weights each shape by
how often ResNet-50 uses it: milliseconds of all 53 convolutions per batch with each layout's
best NumPy algorithm per layer, with the rule's NumPy choice, and with oneDNN.

--end-to-end instead times hybridized resnet50_v1 inference: the NumPy provider alone
(MXNET_MKLDNN_ENABLED=0) with the subgraph pass's channel-last rewrite forced off (NCHW) and on
(NHWC), and oneDNN with the rule's algorithms and with measured ones (a 3x3 layer may then run
Winograd between oneDNN layers): images per second, median of `repeat` batches after two
warm-ups (the first measures the algorithms, with MXNET_CUDNN_AUTOTUNE_DEFAULT=1).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import engine
from ember.op import registry
from ember.op.nn import onednn_provider
from ember.op.nn.conv import algorithms
from ember.op.nn.conv.state import STATE
from ember.op.nn.conv.algorithms import ConvCall
from ember.op.nn.conv.convolution import problem_of

# (input channels, filters, input size, kernel, stride, uses in ResNet-50 v1)
LAYERS = [
    (3, 64, 224, 7, 2, 1),
    (64, 64, 56, 1, 1, 1), (64, 64, 56, 3, 1, 3), (64, 256, 56, 1, 1, 4), (256, 64, 56, 1, 1, 2),
    (256, 128, 56, 1, 2, 1), (128, 128, 28, 3, 1, 4), (128, 512, 28, 1, 1, 4),
    (256, 512, 56, 1, 2, 1), (512, 128, 28, 1, 1, 3),
    (512, 256, 28, 1, 2, 1), (256, 256, 14, 3, 1, 6), (256, 1024, 14, 1, 1, 6),
    (512, 1024, 28, 1, 2, 1), (1024, 256, 14, 1, 1, 5),
    (1024, 512, 14, 1, 2, 1), (512, 512, 7, 3, 1, 3), (512, 2048, 7, 1, 1, 3),
    (1024, 2048, 14, 1, 2, 1), (2048, 512, 7, 1, 1, 2),
]
NUMPY = ('gemm', 'winograd2', 'winograd4')


class ReusedScratch:
    """Scratch carved from one growing buffer, as the operator's temporary workspace does."""

    def __init__(self):
        self.buffer = np.empty(0, np.uint8)

    def __call__(self, specs):
        sizes = [int(np.prod(s)) * np.dtype(d).itemsize for s, d in specs]
        rounded = [(n + 63) // 64 * 64 for n in sizes]
        if self.buffer.nbytes < sum(rounded):
            self.buffer = np.empty(sum(rounded), np.uint8)
        arrays, start = [], 0
        for (shape, dtype), size, step in zip(specs, sizes, rounded):
            arrays.append(self.buffer[start:start + size].view(dtype).reshape(shape))
            start += step
        return arrays


class Layer:
    """One shape at one batch size, with its arrays in both layouts."""

    def __init__(self, batch, channels, filters, size, kernel, stride, uses):
        rng = np.random.default_rng(0)
        self.uses = uses
        self.label = f'{kernel}x{kernel} {channels}->{filters} s{stride} @{size}'
        pad = kernel // 2
        self.data = {'NCHW': rng.standard_normal((batch, channels, size, size), np.float32)}
        self.weight = {'NCHW': rng.standard_normal((filters, channels, kernel, kernel),
                                                   np.float32) * 0.05}
        self.data['NHWC'] = np.ascontiguousarray(self.data['NCHW'].transpose(0, 2, 3, 1))
        self.weight['NHWC'] = np.ascontiguousarray(self.weight['NCHW'].transpose(0, 2, 3, 1))
        self.weight_var = engine.get().new_var()   # stands for the weights' engine variable
        self.bias = rng.standard_normal(filters).astype(np.float32)
        op = registry.get('Convolution')
        self.attrs = {layout: op.parse_attrs(dict(kernel=(kernel, kernel),
                                                  stride=(stride, stride), pad=(pad, pad),
                                                  num_filter=filters, layout=layout))
                      for layout in ('NCHW', 'NHWC')}
        self.problem = {layout: problem_of(self.attrs[layout], self.data[layout])
                        for layout in ('NCHW', 'NHWC')}
        self.flops = self.problem['NCHW'].flops

    def runner(self, name, layout, budget, scratch):
        if name == 'onednn-kept':
            return self._onednn_kept(layout)
        problem, algorithm = self.problem[layout], algorithms.ALGORITHMS[name]
        if not algorithm.supports(problem):
            return None
        out = np.empty(_out_shape(problem), np.float32)
        call = ConvCall(self.attrs[layout], self.data[layout], self.weight[layout], self.bias,
                        out)
        threads = engine.kernel_threads()
        return lambda: algorithm.run(problem, call, budget, scratch, threads)

    def _onednn_kept(self, layout):
        """oneDNN with a weight version: its weight reorder is kept between calls."""
        out = np.empty(_out_shape(self.problem[layout]), np.float32)
        return lambda: onednn_provider.convolution_forward(
            self.attrs[layout], self.data[layout], self.weight[layout], self.bias, out,
            weight_version=((self.weight_var, 0),))


def _out_shape(problem):
    if problem.channel_last:
        return (problem.batch,) + problem.size_out + (problem.filters,)
    return (problem.batch, problem.filters) + problem.size_out


def interleaved(runners, repeat, stat):
    """Seconds per call of each runner: one warm-up each, then `repeat` rounds that call every
    runner once in turn (so that load from elsewhere hits all of them alike)."""
    for fn in runners.values():
        fn()
    times = {key: [] for key in runners}
    for _ in range(repeat):
        for key, fn in runners.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {key: stat(values) for key, values in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batches', type=int, nargs='+', default=[1, 8, 32])
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--layers', default='', help='only layers whose label contains this')
    parser.add_argument('--algorithms', nargs='+',
                        default=list(NUMPY) + ['onednn', 'onednn-kept'])
    parser.add_argument('--layouts', nargs='+', default=['NCHW', 'NHWC'])
    parser.add_argument('--budget-mb', type=int, default=16)
    parser.add_argument('--stat', choices=('median', 'min'), default='median')
    parser.add_argument('--end-to-end', action='store_true')
    args = parser.parse_args()
    if args.end_to_end:
        end_to_end(args.batches, args.repeat)
        return
    stat = {'median': statistics.median, 'min': min}[args.stat]
    columns = [(name, layout) for name in args.algorithms for layout in args.layouts
               if not name.startswith('onednn') or onednn_provider.enabled()]
    header = ['layer', 'batch'] + [f'{_short(n)} {l}' for n, l in columns] + ['rule off/on']
    print(' | '.join(f'{h:>12}' for h in header))
    for batch in args.batches:
        totals = {}
        for spec in LAYERS:
            layer = Layer(batch, *spec)
            if args.layers not in layer.label:
                continue
            row = [f'{layer.label:>12}', f'{batch:>12}']
            scratch = ReusedScratch()
            runners = {column: layer.runner(column[0], column[1], args.budget_mb << 20,
                                            scratch) for column in columns}
            times = interleaved({c: fn for c, fn in runners.items() if fn is not None},
                                args.repeat, stat)
            for name, layout in columns:
                t = times.get((name, layout))
                if t is None:
                    row.append(f'{"-":>12}')
                    continue
                totals[(name, layout)] = totals.get((name, layout), 0.0) + t * layer.uses
                _add_best(totals, layout, name, layer, t)
                row.append(f'{layer.flops / t / 1e9:>12.1f}')
            rules = '/'.join(algorithms.rule(layer.problem['NHWC'], on).name
                             for on in (False, True))
            row.append(f'{rules:>12}')
            print(' | '.join(row), flush=True)
        _summary(batch, totals, args.layouts)


def _short(name):
    return {'winograd2': 'wino2', 'winograd4': 'wino4', 'onednn-kept': 'dnn+w'}.get(
        name, name[:5])


def _add_best(totals, layout, name, layer, t):
    """Track the fastest NumPy algorithm per layer and the rule's NumPy choice."""
    if name.startswith('onednn'):
        return
    key = ('_best', layout, layer.label)
    totals[key] = min(totals.get(key, t), t)
    if algorithms.numpy_rule(layer.problem[layout]).name == name:
        totals[('rule numpy', layout)] = totals.get(('rule numpy', layout), 0.0) + t * layer.uses


_USES = {f'{k}x{k} {c}->{f} s{s} @{n}': u for c, f, n, k, s, u in LAYERS}


def _summary(batch, totals, layouts):
    print(f'-- batch {batch}: ms per batch for all ResNet-50 convolutions (img/s if the '
          f'convolutions were all)')
    for layout in layouts:
        totals[('best numpy', layout)] = sum(v * _USES[k[2]] for k, v in totals.items()
                                             if k[0] == '_best' and k[1] == layout)
    for label in ('best numpy', 'rule numpy', 'gemm', 'onednn', 'onednn-kept'):
        for layout in layouts:
            t = totals.get((label, layout))
            if t:
                print(f'   {label:>10} {layout}: {t * 1e3:8.1f} ms  ({batch / t:6.1f} img/s)')


def end_to_end(batches, repeat):
    """img/s of resnet50_v1 inference: the NumPy provider with NCHW and with NHWC activations
    (the subgraph pass's channel-last rewrite forced off and on), and oneDNN (NHWC) with the
    algorithms chosen by rule (MXNET_CUDNN_AUTOTUNE_DEFAULT=0) and by measurement (1)."""
    import ember as mx
    from ember import config
    from ember.passes import subgraph
    forced = subgraph.channel_last_pays
    rows = [('numpy', 'NCHW', '1'), ('numpy', 'NHWC', '1'), ('onednn', 'NHWC', '0'),
            ('onednn', 'NHWC', '1')]
    print(' | '.join(f'{h:>10}' for h in ['provider', 'layout', 'autotune']
                     + [f'batch {b}' for b in batches]))
    try:
        for provider, layout, tune in rows:
            subgraph.channel_last_pays = lambda layout=layout: layout == 'NHWC'
            STATE.choices.clear()
            with config.override(MXNET_MKLDNN_ENABLED=provider == 'onednn',
                                 MXNET_CUDNN_AUTOTUNE_DEFAULT=tune):
                if provider == 'onednn' and not onednn_provider.enabled():
                    continue
                speeds = [_images_per_second(mx, b, repeat) for b in batches]
            print(' | '.join([f'{provider:>10}', f'{layout:>10}', f'{tune:>10}']
                             + [f'{r:>10.2f}' for r in speeds]), flush=True)
    finally:
        subgraph.channel_last_pays = forced


def _images_per_second(mx, batch, repeat):
    net = mx.gluon.model_zoo.vision.get_model('resnet50_v1', classes=1000)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.random.uniform(shape=(batch, 3, 224, 224))
    for _ in range(2):
        net(x).wait_to_read()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        net(x).wait_to_read()
        times.append(time.perf_counter() - start)
    return batch / statistics.median(times)


if __name__ == '__main__':
    main()
