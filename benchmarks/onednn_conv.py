"""GFLOP/s of ResNet-50's convolution shapes: oneDNN (through Ember's provider) against the NumPy
kernel, then how OpenBLAS's and oneDNN's thread pools slow each other down when interleaved.

    PYTHONPATH=. python benchmarks/onednn_conv.py [--batches 8 32] [--repeat 5] [--no-numpy]
                                                  [--no-fight]

Columns: 'onednn nhwc' runs on NHWC buffers (oneDNN's own activation layout for these shapes:
only the weights are reordered into its blocked layout, on every call); 'nhwc kept w' the same
with a weight_version, so the reordered weights are kept (inference); 'onednn nchw' on NCHW
buffers (activations reordered in and out too); 'numpy' is the registered NumPy kernel (im2col
+ GEMM, NCHW).

The second part times a convolution and a GEMM (np.matmul, OpenBLAS) alone and interleaved, in
child processes with the environment variables that change how the two pools wait:
OPENBLAS_THREAD_TIMEOUT (OpenBLAS's spin before sleeping, read when NumPy loads),
OMP_WAIT_POLICY and GOMP_SPINCOUNT (libgomp's, read when oneDNN loads).
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import config, engine
from ember.backend import onednn
from ember.op import registry
from ember.op.nn import onednn_provider
from ember.op.registry import KernelContext

# (input channels, filters, spatial size, kernel, stride): the notes' ResNet-50 shapes
SHAPES = [(64, 256, 56, 1, 1), (64, 64, 56, 3, 1), (128, 128, 28, 3, 1), (1024, 256, 14, 1, 1),
          (512, 512, 7, 3, 1), (3, 64, 224, 7, 2)]


class ReusedTemp:
    """A 'temp' resource that keeps its buffer, as the engine's workspace does."""

    def __init__(self):
        self.buffer = np.empty(0, np.uint8)

    def get(self, shape, dtype=np.uint8):
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self.buffer.nbytes < nbytes:
            self.buffer = np.empty(nbytes, np.uint8)
        return self.buffer[:nbytes].view(dtype).reshape(shape)


STATISTIC = {'median': statistics.median, 'min': min}
_statistic = statistics.median


def seconds_per_call(fn, repeat):
    """Seconds per call: the median of `repeat` timed calls after a warm-up (or their
    minimum, with --stat min, on a machine that other work shares)."""
    fn()                                    # build and warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return _statistic(times)


class Case:
    """One convolution shape at one batch size, with its arrays in both layouts."""

    def __init__(self, batch, channels, filters, size, kernel, stride):
        rng = np.random.default_rng(0)
        pad = kernel // 2
        self.out_size = (size + 2 * pad - kernel) // stride + 1
        self.label = f'{kernel}x{kernel} {channels}->{filters} s{stride} @{size}'
        self.flops = 2 * batch * filters * channels * kernel * kernel * self.out_size ** 2
        self.kwargs = dict(kernel=(kernel, kernel), stride=(stride, stride), pad=(pad, pad),
                           num_filter=filters, no_bias=True)
        self.nchw = rng.standard_normal((batch, channels, size, size), np.float32)
        self.nhwc = np.ascontiguousarray(self.nchw.transpose(0, 2, 3, 1))
        self.weight = rng.standard_normal((filters, channels, kernel, kernel), np.float32)
        self.weight_nhwc = np.ascontiguousarray(self.weight.transpose(0, 2, 3, 1))
        self.weight_var = engine.get().new_var()   # stands for the weights' engine variable
        shape = (batch, filters, self.out_size, self.out_size)
        self.out_nchw = np.empty(shape, np.float32)
        self.out_nhwc = np.empty((batch, self.out_size, self.out_size, filters), np.float32)

    def attrs(self, layout):
        return registry.get('Convolution').parse_attrs(dict(self.kwargs, layout=layout))

    def onednn_call(self, layout, keep_weights=False):
        attrs = self.attrs(layout)
        data, weight, out = ((self.nhwc, self.weight_nhwc, self.out_nhwc) if layout == 'NHWC'
                             else (self.nchw, self.weight, self.out_nchw))
        version = ((self.weight_var, 0),) if keep_weights else None

        def call():
            if not onednn_provider.convolution_forward(attrs, data, weight, None, out,
                                                       weight_version=version):
                raise RuntimeError(f'oneDNN declined {self.label}')
        return call

    def numpy_call(self):
        op, attrs = registry.get('Convolution'), self.attrs('NCHW')
        ctx = KernelContext(device=None, xp=np, temp=ReusedTemp())

        def call():
            with config.override(MXNET_MKLDNN_ENABLED=False):
                op.kernel(attrs, [self.nchw, self.weight], [self.out_nchw], ctx)
        return call

    def implementation(self):
        """oneDNN's name for the kernel it runs on the NHWC buffers."""
        md = onednn.MemoryDesc.of
        x, y = np.moveaxis(self.nhwc, -1, 1), np.moveaxis(self.out_nhwc, -1, 1)
        w = np.moveaxis(self.weight_nhwc, -1, 1)
        stride, pad = self.kwargs['stride'], self.kwargs['pad']
        return onednn.convolution(md(x), md(w), None, md(y), stride, (1, 1), pad,
                                  pad).implementation


def measure_shapes(batches, repeat, with_numpy):
    columns = ['nhwc kept w', 'onednn nhwc', 'onednn nchw'] + (['numpy'] if with_numpy else [])
    print(f'\nConvolution GFLOP/s, {engine.kernel_threads()} threads, {_statistic.__name__} of '
          f'{repeat} ({onednn.status()})')
    header = f'{"shape":<24}{"batch":>6}' + ''.join(f'{c:>13}' for c in columns)
    print(header + '  implementation')
    for batch in batches:
        totals = dict.fromkeys(columns, 0.0)
        flops = 0
        for shape in SHAPES:
            case = Case(batch, *shape)
            calls = {'nhwc kept w': case.onednn_call('NHWC', keep_weights=True),
                     'onednn nhwc': case.onednn_call('NHWC'),
                     'onednn nchw': case.onednn_call('NCHW')}
            if with_numpy:
                calls['numpy'] = case.numpy_call()
            times = {name: seconds_per_call(call, repeat) for name, call in calls.items()}
            # OpenBLAS's threads spin ~0.1 s after a GEMM and would slow the next shape's
            # oneDNN calls (the thread-pool fight measured below)
            time.sleep(0.3)
            flops += case.flops
            for name in columns:
                totals[name] += times[name]
            rates = ''.join(f'{case.flops / times[c] / 1e9:>13.1f}' for c in columns)
            print(f'{case.label:<24}{batch:>6}{rates}  {case.implementation()}', flush=True)
            del case, calls
        rates = ''.join(f'{flops / totals[c] / 1e9:>13.1f}' for c in columns)
        print(f'{"FLOP-weighted":<24}{batch:>6}{rates}', flush=True)


# ----------------------------------------------------------------------------------------------
# Thread pools: a convolution and a GEMM, alone and interleaved.

PAIRS = {'large': ((8, 64, 64, 56, 3, 1), 1024), 'small': ((1, 64, 64, 14, 3, 1), 128)}


def fight(repeat):
    """Print one line per pair size and GEMM library: ms of the convolution and the GEMM,
    alone and interleaved."""
    for name, (conv_shape, gemm_size) in PAIRS.items():
        conv = Case(*conv_shape).onednn_call('NHWC')
        for library, gemm in gemms(gemm_size).items():
            conv_alone = seconds_per_call(conv, repeat)
            gemm_alone = seconds_per_call(gemm, repeat)
            conv_after, gemm_after = interleaved(conv, gemm, repeat)
            print(f'  {name:<6}{library:<7} conv {conv_alone * 1e3:7.3f} ms alone '
                  f'{conv_after * 1e3:7.3f} after GEMM ({conv_after / conv_alone:5.1f}x)   '
                  f'GEMM {gemm_alone * 1e3:7.3f} ms alone {gemm_after * 1e3:7.3f} after conv '
                  f'({gemm_after / gemm_alone:5.1f}x)', flush=True)


def gemms(size):
    """A square GEMM through NumPy (OpenBLAS) and through oneDNN's inner product (the
    FullyConnected provider), which shares the convolution's OpenMP pool."""
    a = np.random.default_rng(1).standard_normal((size, size), np.float32)
    b, c = a.copy(), np.empty_like(a)
    attrs = registry.get('FullyConnected').parse_attrs({'num_hidden': size, 'no_bias': True})

    def numpy_gemm():
        np.matmul(a, b.T, out=c)

    def onednn_gemm():
        onednn_provider.fully_connected_forward(attrs, a, b, None, c)
    return {'numpy': numpy_gemm, 'onednn': onednn_gemm}


def interleaved(conv, gemm, repeat):
    conv_times, gemm_times = [], []
    conv()
    gemm()
    for _ in range(repeat):
        start = time.perf_counter()
        conv()
        middle = time.perf_counter()
        gemm()
        end = time.perf_counter()
        conv_times.append(middle - start)
        gemm_times.append(end - middle)
    return _statistic(conv_times), _statistic(gemm_times)


SETTINGS = [('default', {}),
            ('OPENBLAS_THREAD_TIMEOUT=4', {'OPENBLAS_THREAD_TIMEOUT': '4'}),
            ('OMP_WAIT_POLICY=passive', {'OMP_WAIT_POLICY': 'passive'}),
            ('GOMP_SPINCOUNT=10000', {'GOMP_SPINCOUNT': '10000'}),
            ('OPENBLAS_THREAD_TIMEOUT=4 GOMP_SPINCOUNT=10000',
             {'OPENBLAS_THREAD_TIMEOUT': '4', 'GOMP_SPINCOUNT': '10000'}),
            ('OPENBLAS_THREAD_TIMEOUT=4 OMP_WAIT_POLICY=passive',
             {'OPENBLAS_THREAD_TIMEOUT': '4', 'OMP_WAIT_POLICY': 'passive'})]


def measure_fight(repeat):
    print('\nconvolution (oneDNN, OpenMP) and GEMM (NumPy, OpenBLAS), alone and interleaved')
    for label, values in SETTINGS:
        print(f'{label}:', flush=True)
        environ = config.child_environ(**values)
        subprocess.run([sys.executable, __file__, '--fight-child', '--repeat', str(repeat),
                        '--stat', _statistic.__name__], env=environ, check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batches', type=int, nargs='*', default=[8, 32],
                        help='batch sizes of the convolution table (none: skip it)')
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--no-numpy', action='store_true', help='skip the NumPy kernel')
    parser.add_argument('--no-fight', action='store_true', help='skip the thread-pool part')
    parser.add_argument('--stat', choices=sorted(STATISTIC), default='median',
                        help='statistic of the timed calls (min suits a shared machine)')
    parser.add_argument('--fight-child', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    global _statistic
    _statistic = STATISTIC[args.stat]
    if not onednn.available():
        sys.exit(f'oneDNN is not available: {onednn.status()}')
    if args.fight_child:
        fight(max(args.repeat, 20))
        return
    if args.batches:
        measure_shapes(args.batches, args.repeat, not args.no_numpy)
    if not args.no_fight:
        measure_fight(args.repeat)


if __name__ == '__main__':
    main()
