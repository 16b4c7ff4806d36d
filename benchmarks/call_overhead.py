"""What a convolution call costs outside its kernel, and the oneDNN paths that replaced slow ones.

    PYTHONPATH=. python benchmarks/call_overhead.py [--calls 20000]

Three tables, each side by side in one run (OMP_NUM_THREADS=2 on the 2-core machine):

1. A tiny convolution (1x1, 8 channels, 4x4 NHWC, relu, a kept weight) called through each
   layer of the stack: ``convolution.forward`` (algorithm choice included), the provider's
   ``convolution_forward``, ``Primitive.run`` and oneDNN's ``primitive_execute`` alone.
   Microseconds per call, the best of five blocks of calls; the differences are Python.
2. Transposes: NumPy's strided copy against ``onednn_provider.transpose`` (a oneDNN
   reorder), milliseconds per call, best of 20.
3. alexnet's first layer (11x11, stride 4, 3 channels, NHWC, batch 1; oneDNN runs it as a
   GEMM): relu as the primitive's eltwise post-op against relu as an eltwise primitive after
   it (what the provider builds), milliseconds per call, best of 30.
"""
from __future__ import annotations

import argparse
import time
import timeit

import numpy as np

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import engine
from ember.backend import onednn
from ember.backend.onednn import ARG_BIAS, ARG_DST, ARG_SRC, ARG_WEIGHTS, MemoryDesc, PostOp
from ember.op import registry
from ember.op.nn import onednn_provider
from ember.op.nn.conv import convolution
from ember.op.registry import KernelContext


def per_call(fn, calls, blocks=5):
    """Seconds per call: the best of `blocks` blocks of calls (a shared host slows some)."""
    for _ in range(min(200, calls)):
        fn()
    each = max(1, calls // blocks)
    times = []
    for _ in range(blocks):
        start = time.perf_counter()
        for _ in range(each):
            fn()
        times.append((time.perf_counter() - start) / each)
    return min(times)


def best(fn, repeat):
    """Seconds of the fastest of `repeat` calls after a warm-up."""
    fn()
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def call_layers(calls):
    rng = np.random.default_rng(0)
    attrs = registry.get('Convolution').parse_attrs(dict(kernel=(1, 1), num_filter=8,
                                                         layout='NHWC'))
    x = rng.standard_normal((1, 4, 4, 8), np.float32)
    w = rng.standard_normal((8, 1, 1, 8), np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    out = np.empty((1, 4, 4, 8), np.float32)
    ctx, token = KernelContext(None), ((engine.get().new_var(), 0),)
    onednn.clear_cache()
    rows = [('convolution.forward', lambda: convolution.forward(
        attrs, x, w, b, out, ctx, None, 'relu', None, token))]
    rows.append(('provider.convolution_forward', lambda: onednn_provider.convolution_forward(
        attrs, x, w, b, out, None, 'relu', token)))
    rows[-1][1]()
    primitive = next(p for p in onednn._cache.entries.values() if p is not None)
    arrays = {ARG_SRC: x.transpose(0, 3, 1, 2), ARG_WEIGHTS: w.transpose(0, 3, 1, 2),
              ARG_DST: out.transpose(0, 3, 1, 2), ARG_BIAS: b}
    versions = {ARG_WEIGHTS: (token, None)}
    library = onednn._lib()
    stream = library.stream()
    rows.append(('Primitive.run', lambda: primitive.run(arrays, None, versions)))
    rows.append(('primitive_execute', lambda: library.primitive_execute(
        primitive.handle, stream, len(primitive.args), primitive.args)))
    print(f'{"1x1 8-channel convolution, through":<32} | {"us per call":>11}')
    for name, fn in rows:
        print(f'{name:<32} | {per_call(fn, calls) * 1e6:>11.1f}')


def transposes():
    print(f'\n{"transpose":<32} | {"NumPy ms":>9} | {"oneDNN ms":>9}')
    rng = np.random.default_rng(1)
    for shape, axes in (((1, 3, 224, 224), (0, 2, 3, 1)), ((32, 3, 224, 224), (0, 2, 3, 1)),
                        ((8, 7, 7, 2048), (0, 3, 1, 2)), ((512, 512), (1, 0))):
        x = rng.standard_normal(shape, np.float32)
        view = x.transpose(axes)
        out = np.empty(view.shape, np.float32)

        def numpy_copy():
            out[...] = view
        assert onednn_provider.transpose(view, out)
        label = f'{shape} {axes}'
        print(f'{label:<32} | {best(numpy_copy, 20) * 1e3:>9.3f} | '
              f'{best(lambda: onednn_provider.transpose(view, out), 20) * 1e3:>9.3f}')


def gemm_activation():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 224, 224, 3), np.float32).transpose(0, 3, 1, 2)
    w = rng.standard_normal((64, 3, 11, 11), np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    y = np.empty((1, 55, 55, 64), np.float32).transpose(0, 3, 1, 2)
    x_md, y_md = MemoryDesc.channel_last(x.shape), MemoryDesc.channel_last(y.shape)

    def build(post_ops):
        return onednn.convolution(x_md, MemoryDesc.of(w), MemoryDesc.of(b), y_md, (4, 4),
                                  (1, 1), (2, 2), (2, 2), post_ops, activations_as_given=True)
    arrays = {ARG_SRC: x, ARG_WEIGHTS: w, ARG_BIAS: b, ARG_DST: y}
    fused = build((PostOp.activation('relu', 0.0),))
    plain = build(())
    after = onednn.eltwise(y_md, y_md, 'relu', 0.0)

    def separate():
        plain.run(arrays)
        after.run({ARG_SRC: y, ARG_DST: y})
    print(f'\n{"11x11/4 3->64 NHWC b1, relu":<32} | {"ms":>9} | implementation')
    print(f'{"as a post-op":<32} | {best(lambda: fused.run(arrays), 30) * 1e3:>9.3f} | '
          f'{fused.implementation}')
    print(f'{"as an eltwise after":<32} | {best(separate, 30) * 1e3:>9.3f} | '
          f'{plain.implementation} + {after.implementation}')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--calls', type=int, default=20000)
    args = parser.parse_args()
    if not onednn_provider.enabled():
        raise SystemExit('oneDNN is not available: these tables measure its paths')
    onednn.set_num_threads(engine.kernel_threads())
    call_layers(args.calls)
    transposes()
    gemm_activation()


if __name__ == '__main__':
    main()
