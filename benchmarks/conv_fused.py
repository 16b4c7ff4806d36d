"""Milliseconds per call of resnet's 3x3 layers at batch 1 (NHWC, float32), per way of running
them: oneDNN, and Winograd F(4x4) with its weights transformed once, on every call into
scratch, or on every call fused into each thread's own cache-sized scratch.

    PYTHONPATH=. python benchmarks/conv_fused.py [--layers 40] [--repeat 5]

Each shape runs as `layers` layers with weights of their own, called in turn, as a network
calls them: their weights come from memory, not the cache. The weights are OIHW arrays seen as
OHWI and scaled per filter (a folded BatchNorm), as the graph passes them; each layer keeps its
own kernel context, so that its calls after the first run again what the first worked out,
and all share one kept workspace for their scratch, as in the executor. Columns, the best of
`repeat` passes over the layers, the ways taking turns, per layer:

- ``onednn``: oneDNN's convolution, its reordered weights kept (as a weight token allows);
- ``kept``: ``winograd4`` with the transformed weights kept (4x the weights);
- ``scratch``: ``winograd4`` transforming all the weights into scratch on every call, then
  multiplying (a layer past the kept budget before the fused path);
- ``fused``: ``winograd4_fused``, each thread transforming the weights of the filters it
  takes as it goes.

The last two columns: what the fused call saves against oneDNN, and how much memory each
layer keeps with ``kept`` (``fused`` and ``scratch`` keep none; oneDNN keeps the weights' size).
"""
from __future__ import annotations

import argparse

import numpy as np

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import engine
from ember.op import registry
from ember.op.nn.conv import convolution, kept, tuning, winograd, winograd_compiled
from ember.op.registry import KernelContext

# this directory is first on the path
from conv_line import best_times, choosing, patched  # noqa: E402

# (channels = filters, size): resnet's 3x3 layers
SHAPES = [(64, 56), (128, 28), (256, 14), (512, 7)]


class Token:
    """Stands for a weight's engine variable: the algorithms keep what they derive."""


class Workspace:
    """A buffer kept and grown to the largest request, as the executor's temp space (without
    one each call would allocate, and fault in, its scratch afresh)."""

    def __init__(self):
        self.buffer = np.zeros(0, np.uint8)

    def get(self, shape, dtype):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self.buffer.size < nbytes:
            self.buffer = np.zeros(nbytes, np.uint8)
        return self.buffer[:nbytes].view(dtype).reshape(shape)

    def release(self):
        pass


def forced(name, attrs, layers, versioned=True):
    """One pass over `layers` with algorithm `name` chosen; each layer's context kept."""
    workspace = Workspace()                         # one per operator, as the executor's
    contexts = [KernelContext(None, temp=workspace) for _ in layers]

    def run():
        with choosing(name):
            for (x, w, scale, bias, out, token), ctx in zip(layers, contexts):
                convolution.forward(attrs, x, w, bias, out, ctx, act_type='relu',
                                    weight_scale=scale,
                                    weight_version=token if versioned else None)
    return run


def unfused(run):
    """`run` with the fused path turned off: all the weights transformed into scratch."""
    def scratch():
        with patched(winograd_compiled, '_fused_plans', lambda *args, **kwargs: None):
            run()
    return scratch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--layers', type=int, default=40)
    parser.add_argument('--repeat', type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f'kernel threads: {engine.kernel_threads()}; batch 1; ms per layer, {args.layers} '
          f'layers in turn, best of {args.repeat} passes')
    print(f'{"layer":>16} {"onednn":>8} {"kept":>8} {"scratch":>8} {"fused":>8} '
          f'{"onednn/fused":>12} {"kept MB":>8}')
    for channels, size in SHAPES:
        attrs = registry.get('Convolution').parse_attrs(
            dict(kernel=(3, 3), pad=(1, 1), num_filter=channels, layout='NHWC'))
        layers = []
        for _ in range(args.layers):
            w = (rng.standard_normal((channels, channels, 3, 3)) * 0.05).astype(np.float32)
            layers.append((rng.standard_normal((1, size, size, channels)).astype(np.float32),
                           w.transpose(0, 2, 3, 1),
                           rng.uniform(0.5, 1.5, channels).astype(np.float32),
                           rng.standard_normal(channels).astype(np.float32),
                           np.empty((1, size, size, channels), np.float32),
                           ((Token(), 0),)))
        passes = {'onednn': forced('onednn', attrs, layers),
                  'kept': forced('winograd4', attrs, layers),
                  'scratch': unfused(forced('winograd4', attrs, layers, versioned=False)),
                  'fused': forced('winograd4_fused', attrs, layers)}
        with tuning.tuned(kept_budget=1 << 40):    # every layer keeps its own
            best = {name: seconds * 1e3 / args.layers
                    for name, seconds in best_times(passes, args.repeat).items()}
        for *_, token in layers:
            kept.discard_others(token)
        kept_bytes = winograd.kept_weight_bytes(convolution.problem_of(attrs, layers[0][0]), 4)
        print(f'{f"{channels}->{channels} @{size}":>16} {best["onednn"]:8.3f} '
              f'{best["kept"]:8.3f} {best["scratch"]:8.3f} {best["fused"]:8.3f} '
              f'{best["onednn"] / best["fused"]:11.2f}x {kept_bytes / 2**20:8.1f}')


if __name__ == '__main__':
    main()
