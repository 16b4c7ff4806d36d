"""Convolutions on a GPU: cuDNN's algorithms, one registration each, and CuPy's GEMMs.

Every algorithm of cuDNN's three passes is an :class:`~ember.op.nn.conv.algorithms.Algorithm`
with ``device='gpu'`` (``cudnn_<name>``: ``cudnn_implicit_precomp_gemm``, ``cudnn_winograd``,
``cudnn_fft_tiling``, ...), beside ``gpu_gemm`` (im2col + GEMM on CuPy,
:mod:`ember.op.nn.conv.generic`), which runs any problem and is all there is without cuDNN.
``MXNET_CUDNN_AUTOTUNE_DEFAULT`` (or ``cudnn_tune``) chooses as on the CPU
(:func:`~ember.op.nn.conv.algorithms.choose`):

- 0: cuDNN's own heuristic ranking, its first algorithm Ember has registered (the GEMM
  without cuDNN);
- 1: every algorithm whose workspace fits the operator's ``workspace`` attribute, timed on the
  call's own arrays (the stream synchronised around each run), the fastest remembered per
  problem;
- 2: every algorithm, whatever its workspace.

Unlike the CPU's algorithms, which work a few samples at a time, cuDNN's work the whole batch
at once, so their scratch is that of the whole batch. Under ``MXNET_ENFORCE_DETERMINISM`` the
algorithms whose sums are ordered by atomics are left out. Math: tensor cores as
``MXNET_CUDA_ALLOW_TENSOR_CORE`` and ``MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION`` say
(:func:`ember.backend.cudnn.math_type`), read when the device starts.

The weight gradient runs on the worker's auxiliary stream (``MXNET_GPU_WORKER_NSTREAMS=2``)
beside the data gradient, with a workspace of its own.
"""
from __future__ import annotations

import functools
import numpy as np

from ember import backend
from ember.backend import cudnn
from ember.base import prod
from ember.engine import gpu as engine_gpu
from ember.op.nn._common import channel_first, is_channel_last
from ember.op.nn.activation import ACTIVATIONS
from ember.op.nn.conv import algorithms, generic
from ember.op.nn.conv.algorithms import Algorithm, ConvCall, TuneMode

__all__ = ['forward', 'backward_data', 'backward_weights', 'gpu_rule']

_KIND = {'': 'forward', 'data': 'data', 'weight': 'weight'}
_CODES = {'': cudnn.FORWARD, 'data': cudnn.BACKWARD_DATA, 'weight': cudnn.BACKWARD_FILTER}


# ----------------------------------------------------------------------------------------------
# Geometry: the descriptors of a problem (contiguous arrays) or of a call's arrays

def _math(dtype):
    allow, conversion = _tensor_core_settings()
    return cudnn.math_type(dtype, allow, conversion)


def _tensor_core_settings():
    cupy = backend.probe()[0]
    return (True, False) if cupy is None else backend.gpu.tensor_core_settings()


def _shapes(problem):
    """(x, w, y) shapes of `problem` as stored (channel-last or not)."""
    per_group = problem.channels // problem.groups
    if problem.channel_last:
        return ((problem.batch,) + problem.size_in + (problem.channels,),
                (problem.filters,) + problem.kernel + (per_group,),
                (problem.batch,) + problem.size_out + (problem.filters,))
    return ((problem.batch, problem.channels) + problem.size_in,
            (problem.filters, per_group) + problem.kernel,
            (problem.batch, problem.filters) + problem.size_out)


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _geometry(problem, x_shape, x_strides, y_shape, y_strides):
    _, w_shape, _ = _shapes(problem)
    return cudnn.ConvGeometry(problem.dtype, x_shape, x_strides, w_shape, y_shape, y_strides,
                              problem.pad, problem.stride, problem.dilate, problem.groups,
                              problem.channel_last, _math(problem.dtype))


@functools.lru_cache(maxsize=1024)
def _problem_descriptors(problem):
    x_shape, _, y_shape = _shapes(problem)
    return cudnn.conv_descriptors(_geometry(problem, x_shape, _contiguous_strides(x_shape),
                                            y_shape, _contiguous_strides(y_shape)))


def _call_geometry(problem, x, y):
    """The geometry of arrays `x` (the data's shape) and `y` (the output's) as they are."""
    itemsize = x.dtype.itemsize
    return _geometry(problem, tuple(x.shape), tuple(s // itemsize for s in x.strides),
                     tuple(y.shape), tuple(s // itemsize for s in y.strides))


@functools.lru_cache(maxsize=4096)
def _call_workspace(geometry, kind, code):
    return cudnn.workspace_size(_cupy(), kind, cudnn.conv_descriptors(geometry), code)


def _cupy():
    return backend.probe()[0]


@functools.lru_cache(maxsize=4096)
def _workspace(problem, code):
    """Bytes of scratch of algorithm `code` on `problem`, or None where it cannot run it."""
    try:
        return cudnn.workspace_size(_cupy(), _KIND[problem.gradient],
                                    _problem_descriptors(problem), code)
    except cudnn.CudnnError as error:
        if error.not_supported:
            return None
        raise


def _cudnn_runs(problem):
    return (problem.device == 'gpu' and problem.dtype in cudnn.DATA_TYPES
            and cudnn.library() is not None and cudnn.usable(_cupy()))


# ----------------------------------------------------------------------------------------------
# The algorithms

def _cudnn_algorithm(gradient, name, code):
    def supports(problem):
        return _cudnn_runs(problem) and _workspace(problem, code) is not None

    def scratch(problem, batch):
        # the whole batch at once: cuDNN does not split it
        return _workspace(problem, code) or 0

    def run(problem, call, budget, alloc, threads):
        try:
            _RUNS[gradient](problem, call, code, alloc)
        except cudnn.CudnnError as error:
            if not error.not_supported:     # these arrays' strides, say: another runs them
                raise
            return False
        return True
    return Algorithm(f'cudnn_{name}', supports, scratch, run, device='gpu',
                     deterministic=(gradient, name) not in cudnn.NONDETERMINISTIC)


def _run_forward(problem, call, code, alloc):
    x, out, residual = call.x, call.out, call.residual
    weight = _packed_weight(call)
    accumulate = residual is not None and residual is out
    geometry = _call_geometry(problem, x, out)
    space = _space(geometry, 'forward', code, alloc)
    cudnn.convolution_forward(_cupy(), cudnn.conv_descriptors(geometry), problem.dtype, code,
                              x, weight, out, space, beta=1.0 if accumulate else 0.0)
    _epilogue(call, accumulate)


def _run_data(problem, call, code, alloc):
    dy, dx = call.x, call.out
    geometry = _call_geometry(problem, dx, dy)
    space = _space(geometry, 'data', code, alloc)
    cudnn.convolution_backward_data(_cupy(), cudnn.conv_descriptors(geometry), problem.dtype,
                                    code, _packed_weight(call), dy, dx, space)


def _run_weight(problem, call, code, alloc):
    dy, x, dw = call.x, call.weight, call.out
    xp = _cupy()
    target = dw if dw.flags.c_contiguous else xp.empty(dw.shape, dw.dtype)
    geometry = _call_geometry(problem, x, dy)
    space = _space(geometry, 'weight', code, alloc)
    cudnn.convolution_backward_filter(xp, cudnn.conv_descriptors(geometry), problem.dtype, code,
                                      x, dy, target, space)
    if target is not dw:
        dw[...] = target
    if call.bias is not None:
        axes = tuple(range(dy.ndim - 1)) if problem.channel_last else \
            (0,) + tuple(range(2, dy.ndim))
        call.bias[...] = dy.sum(axis=axes)


_RUNS = {'': _run_forward, 'data': _run_data, 'weight': _run_weight}


def _packed_weight(call):
    """The weight as cuDNN's filter descriptor needs it: scaled and packed."""
    weight = call.weight
    if call.weight_scale is not None:
        weight = weight * call.weight_scale.reshape((-1,) + (1,) * (weight.ndim - 1))
    return _cupy().ascontiguousarray(weight)


def _space(geometry, kind, code, alloc):
    nbytes = _call_workspace(geometry, kind, code)
    return alloc([((nbytes,), np.uint8)])[0] if nbytes else None


def _epilogue(call, accumulated):
    """Bias, a residual that is not the output itself, and the activation."""
    out, xp = call.out, _cupy()
    layout = call.attrs['layout']
    if call.bias is not None:
        generic.add_bias(channel_first(xp, out, layout), call.bias)
    if call.residual is not None and not accumulated:
        out += call.residual
    if call.act_type == 'relu':
        xp.maximum(out, 0, out=out)
    elif call.act_type is not None:
        out[...] = ACTIVATIONS[call.act_type][0](xp, out)


def _run_gemm(problem, call, budget, alloc, threads):
    ctx = call.ctx
    if problem.gradient == 'data':
        generic.backward_data(call.attrs, call.x, call.weight, call.out, ctx)
    elif problem.gradient == 'weight':
        generic.backward_weights(call.attrs, call.x, call.weight, call.out, call.bias, ctx)
    else:
        weight = call.weight
        if call.weight_scale is not None:
            weight = weight * call.weight_scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        generic.forward(call.attrs, call.x, weight, call.bias, call.out, ctx, call.residual,
                        call.act_type)
    return True


def _gpu_problem(problem):
    return problem.device == 'gpu'


def _register():
    for gradient, codes in _CODES.items():
        for name, code in codes.items():
            algorithms.register(_cudnn_algorithm(gradient, name, code), gradient)
        algorithms.register(Algorithm('gpu_gemm', _gpu_problem, lambda p, b: 0, _run_gemm,
                                      device='gpu'), gradient)


_register()


# ----------------------------------------------------------------------------------------------
# The rule (tuning mode 0): cuDNN's heuristic

@functools.lru_cache(maxsize=1024)
def _heuristic_choice(problem, deterministic):
    table = algorithms.table(problem)
    if not _cudnn_runs(problem):
        return 'gpu_gemm'
    codes = {code: name for name, code in _CODES[problem.gradient].items()}
    try:
        ranked = cudnn.heuristic_order(_cupy(), _KIND[problem.gradient],
                                       _problem_descriptors(problem))
    except cudnn.CudnnError:
        ranked = []
    for code, _, _ in ranked:
        algorithm = table.get(f'cudnn_{codes.get(code)}')
        if algorithm is not None and (algorithm.deterministic or not deterministic) \
                and algorithm.supports(problem):
            return algorithm.name
    return 'gpu_gemm'


def gpu_rule(problem, deterministic=False):
    """The algorithm of tuning mode 0 on a GPU: cuDNN's first choice that runs (a
    deterministic one where it must be), else the GEMM."""
    return algorithms.table(problem)[_heuristic_choice(problem, deterministic)]


algorithms.DEVICE_RULES['gpu'] = gpu_rule


# ----------------------------------------------------------------------------------------------
# The passes

class _GpuCalls:
    """Runs algorithms on one call's CuPy arrays, for the call and for measurement."""

    def __init__(self, call, problem, mode, ctx, fresh_workspace=False):
        self.call, self.ctx, self.problem, self.mode = call, ctx, problem, mode
        self.fresh_workspace = fresh_workspace
        self.measured = False
        self._trial_call = None

    def alloc(self, specs):
        xp = _cupy()
        if self.fresh_workspace or self.ctx.temp is None:
            return [xp.empty(shape, dtype) for shape, dtype in specs]
        return [self.ctx.temp.get(shape, dtype) for shape, dtype in specs]

    def run(self, algorithm, call=None):
        return algorithm.run(self.problem, call or self.call, 0, self.alloc, 1)

    def trial(self, algorithm):
        """Runs the pass alone (into a temporary where the output holds the residual) and
        waits for it, so that measurement times the device's work."""
        self.measured = True
        if self._trial_call is None:
            c = self.call
            aliased = c.residual is not None and c.residual is c.out
            out = _cupy().empty_like(c.out) if aliased else c.out
            self._trial_call = ConvCall(c.attrs, c.x, c.weight, c.bias, out,
                                        weight_scale=c.weight_scale, ctx=c.ctx)
        sync = _synchronize
        if not self.run(algorithm, self._trial_call):
            return False
        sync()

        def again():
            self.run(algorithm, self._trial_call)
            sync()
        return again

    def choose(self):
        algorithm = algorithms.choose(self.problem, self.mode,
                                      self.call.attrs['workspace'] << 20, False, self.trial,
                                      self.ctx.deterministic)
        if self.ctx.deterministic and not algorithm.deterministic:
            algorithm = gpu_rule(self.problem, deterministic=True)
        if self.measured and self.ctx.temp is not None and not self.fresh_workspace:
            self.ctx.temp.release()
        return algorithm

    def execute(self):
        algorithm = self.choose()
        if not self.run(algorithm):
            self.run(algorithms.table(self.problem)['gpu_gemm'])


def _synchronize():
    _cupy().cuda.get_current_stream().synchronize()


def forward(call, problem, mode):
    """Convolution's forward pass on CuPy arrays: `call` (a ConvCall with its ctx) of
    `problem` under tuning `mode` (see convolution.forward)."""
    _GpuCalls(call, problem, mode, call.ctx).execute()


def backward_data(call, problem, mode):
    """The data gradient: call.x the output gradient, call.out the data gradient."""
    _GpuCalls(call, problem, mode, call.ctx).execute()


def backward_weights(call, problem, mode):
    """The weight gradient (call.x the output gradient, call.weight the data, call.out the
    weight gradient, call.bias the bias gradient or None), on the auxiliary stream with a
    workspace of its own, beside the data gradient."""
    with engine_gpu.aux_stream():
        _GpuCalls(call, problem, mode, call.ctx, fresh_workspace=True).execute()
