"""Convolution algorithms on the CPU and the choice between them per layer.

Algorithms (each declares which problems it supports and the scratch it needs):

``onednn``
    oneDNN's convolution (``MXNET_MKLDNN_ENABLED`` and the library present; float32), with the
    residual as a sum post-op and the activation as an eltwise post-op.
``gemm``
    im2col and one GEMM per group (NCHW or NHWC, any dims, groups, stride, dilation); a 1x1
    stride-1 convolution is the GEMM alone.
``winograd2``, ``winograd4``
    Winograd F(2x2, 3x3) and F(4x4, 3x3) (3x3, stride 1, no dilation, one group); F(4x4) of
    channel-last float32 data compiled (``ember._winograd``), its transformed weights kept
    per weight version.
``pointwise``
    1x1 convolutions (any stride, no padding, one group) of channel-last float32 data on the
    compiled register blocks of the Winograd products, with the weights packed in panels
    (kept per weight version) and bias, residual and relu applied as the outputs are stored
    (:func:`ember.op.nn.conv_winograd.pointwise`).
``winograd_line``
    1 x r and r x 1 kernels (r 3, 5 or 7; stride 1, one group, no padding across) of
    channel-last float32 data: the 1-D Winograd F(m, r) along the kernel's axis on the same
    compiled products, m + r - 1 products per m outputs instead of m r (m 4 or 6,
    :func:`ember.op.nn.conv_winograd.line`), its transformed weights kept per weight
    version. Measurement finds it (inceptionv3's 1x7 and 7x1 layers: 2.2x oneDNN at batch 8).

``MXNET_CUDNN_AUTOTUNE_DEFAULT`` picks one per call:

0, the rule (:func:`rule`): oneDNN whenever it runs (measured fastest, or within a few per
    cent, on every ResNet-50 layer with NHWC data); else the NumPy rule: ``pointwise`` for the
    1x1 layers it supports, ``winograd_line`` for the 1 x r and r x 1 ones, Winograd F(2x2, 3x3)
    for 3x3 stride-1 layers with at least 32 input and output channels, at least
    ``WINOGRAD_MIN_TILES`` 2x2 output tiles in the batch and transformed weights of at most
    ``WINOGRAD_MAX_WEIGHT_BYTES``; im2col + GEMM for everything else (1x1 as one GEMM).
1, measurement: every supported algorithm (but NumPy's F(2x2) where oneDNN runs the layer,
    ``_DOMINATED``) whose scratch for one sample fits the ``workspace``
    attribute (MB), and whose memory kept between calls (Winograd's transformed weights) is at
    most ``KEPT_ALWAYS``, ``KEPT_PER_OUTPUT`` times the output's bytes, or the process-wide
    budget where a large graph has raised it (:func:`_kept_limit`), runs on the call's
    own inputs (a warm-up each, then each one's best of rounds that take turns, more rounds
    for fast layers: ``MEASURE_ROUNDS``), once per
    problem (shape, layout, dtype, groups, window; :class:`ConvProblem`); the fastest
    (:func:`fastest`: oneDNN unless beaten by ``SWITCH_MARGIN``, a gradient's by
    ``GRADIENT_SWITCH_MARGIN``) is kept in a process-wide
    cache (:func:`clear_choices` empties it). When nothing fits, the algorithm with the least
    scratch runs.
2, measurement as in 1 without the workspace and kept-memory filters.

A problem's ``gradient``, 'data' or 'weight', makes it the gradient of its convolution
(training's backward pass) with respect to its data or its weight, chosen the same way among
:data:`DATA_GRADIENT_ALGORITHMS` or :data:`WEIGHT_GRADIENT_ALGORITHMS`: oneDNN's backward
primitive, NumPy's GEMMs (with col2im or im2col), and the compiled Winograd F(4x4, 3x3) for
3x3 stride-1 layers (:func:`ember.op.nn.conv_winograd.data_gradient`, the forward convolution
of the output gradient with the weights flipped; :func:`~ember.op.nn.conv_winograd.
weight_gradient`, the sums over tiles in the Winograd domain), and for the weight gradient of
1x1 stride-1 channel-last float32 layers ``pointwise``, the same compiled sums over the rows of
dy and x with the bias gradient summed on the way
(:func:`~ember.op.nn.conv_winograd.pointwise_weight_gradient`); for the data gradient of
strided 1x1 channel-last float32 layers ``onednn_spread``, oneDNN's stride-1 data gradient
over the output pixels (a GEMM with no zeros in it) spread out with the zeros between by the
compiled ``ember._kernels.spread`` (resnet50_v1's six such layers at batch 16: 0.7-2 ms
faster each than oneDNN's strided primitive). The rule takes oneDNN, else
NumPy (and NumPy for weight gradients under determinism: oneDNN's sums depend on its thread
count); measurement finds Winograd where it pays (ResNet's 3x3 layers up to 256 channels at
batch 16: 2-3x oneDNN for the data gradient, 1.8-2.4x for the weight gradient).

Problems under ``MEASURE_MIN_FLOPS`` take the rule (too short to time), and so do calls under
``MXNET_ENFORCE_DETERMINISM``: timing noise must not change the bits of a result.

The NumPy algorithms split their output over the operator's kernel threads, each part with
single-threaded GEMMs (:mod:`ember.op.nn.conv_common`); Winograd over at most
``MXNET_CPU_NNPACK_NTHREADS`` of them; every one on a single thread under determinism.

>>> p = ConvProblem(channel_last=True, batch=8, channels=64, filters=64, groups=1,
...                 kernel=(3, 3), stride=(1, 1), dilate=(1, 1), pad=(1, 1),
...                 size_in=(56, 56), dtype='float32')
>>> rule(p, onednn=False).name, rule(p, onednn=True).name
('winograd2', 'onednn')
>>> sorted(a.name for a in candidates(p, onednn=False))
['gemm', 'winograd2', 'winograd4']
"""
from __future__ import annotations

import dataclasses
import functools
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ember.backend import native
from ember.base import prod
from ember.engine.threads import team_arguments
from ember.op.nn import conv_gemm, conv_winograd
from ember.op.nn._common import make_window

# the compiled spread of onednn_spread (None without a C compiler)
_kernels = native.compiled_module('_kernels')

__all__ = ['ConvProblem', 'ConvCall', 'Algorithm', 'ALGORITHMS', 'DATA_GRADIENT_ALGORITHMS',
           'WEIGHT_GRADIENT_ALGORITHMS',
           'candidates', 'rule', 'numpy_rule',
           'choose', 'choose_past_budget', 'measure', 'fastest', 'clear_choices', 'choices',
           'MEASURE_MIN_FLOPS']

# Below this many FLOPs a call is too short to time reliably; the rule decides.
MEASURE_MIN_FLOPS = 2_000_000


@dataclass(frozen=True)
class ConvProblem:
    """Everything about a convolution call that may change which algorithm is fastest."""
    channel_last: bool
    batch: int
    channels: int
    filters: int
    groups: int
    kernel: tuple
    stride: tuple
    dilate: tuple
    pad: tuple
    size_in: tuple
    dtype: str
    # '' for the convolution itself, else the gradient of it with respect to its 'data' or
    # its 'weight'
    gradient: str = ''

    def __hash__(self):
        # worked out once: the choices are looked up by problem on every call
        return self._hash

    @functools.cached_property
    def _hash(self):
        return hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))

    @functools.cached_property
    def window(self):
        size_out = tuple((n + 2 * p - (d * (k - 1) + 1)) // s + 1 for n, p, k, d, s in
                         zip(self.size_in, self.pad, self.kernel, self.dilate, self.stride))
        return make_window(self.kernel, self.stride, self.dilate, self.pad, self.size_in,
                           size_out)

    @property
    def size_out(self):
        return self.window.size_out

    @property
    def dtype_size(self):
        return 8 if self.dtype == 'float64' else (2 if self.dtype == 'float16' else 4)

    @functools.cached_property
    def flops(self):
        """Multiply-adds times two of the direct convolution."""
        return (2 * self.batch * self.filters * (self.channels // self.groups)
                * prod(self.kernel) * prod(self.size_out))


@dataclass
class ConvCall:
    """The arrays of one call: ``out = act(conv(x, weight) + bias + residual)``; x, weight
    and out are NCHW/OIHW or (channel-last problems) NHWC/OHWI; `attrs` are Convolution's."""
    attrs: dict
    x: object
    weight: object
    bias: object
    out: object
    residual: object = None
    act_type: str | None = None
    # ((engine variable, version), ...) of the weight's inputs in inference (None: they may
    # change any time): lets an algorithm keep work derived from the weight between calls
    weight_version: object = None
    # per output channel (a BatchNorm folded in): the weight used is weight * weight_scale;
    # oneDNN and the compiled Winograd take it this way (and any strides), the other
    # algorithms get the contiguous product (convolution.py)
    weight_scale: object = None
    # the kernel's context (its temp space), for algorithms that allocate their own scratch
    ctx: object = None


@dataclass(frozen=True)
class Algorithm:
    """``run(problem, call, budget, alloc, threads) -> bool`` (False: declined, nothing
    written); ``scratch(problem, batch)`` is its scratch in bytes for `batch` samples."""
    name: str
    supports: Callable
    scratch: Callable
    run: Callable
    # bytes it keeps between calls of an inference layer (transformed weights), beyond the
    # copy of the weights every algorithm may keep
    kept: Callable = lambda problem: 0
    # runs only where oneDNN is on (MXNET_MKLDNN_ENABLED and the library present)
    uses_onednn: bool = False


def _run_gemm(problem, call, budget, alloc, threads):
    # packed weights (kept per token, else made for the call outside the workspace)
    packed = conv_winograd.packed_weights(call.weight, call.weight_scale, call.weight_version) \
        if conv_gemm.packs(problem) else None
    conv_gemm.gemm(call.x, call.weight, call.bias, call.out, problem.window, problem.groups,
                   problem.channel_last, call.residual, call.act_type, budget, alloc, threads,
                   packed)
    return True


def _winograd(m):
    def run(problem, call, budget, alloc, threads):
        # True, or the compiled call prepared to run again (conv_winograd.Prepared)
        return conv_winograd.winograd(call.x, call.weight, call.bias, call.out,
                                      problem.window, problem.channel_last, m, call.residual,
                                      call.act_type, budget, alloc, threads,
                                      call.weight_version, call.weight_scale) or True
    return Algorithm(f'winograd{m}', conv_winograd.supports,
                     lambda problem, batch: conv_winograd.scratch_bytes(problem, batch, m), run,
                     lambda problem: conv_winograd.kept_weight_bytes(problem, m))


def _run_fused(problem, call, budget, alloc, threads):
    # the compiled call prepared to run again (conv_winograd.Prepared), True, or False where
    # it declines (arrays the compiled path does not take)
    done = conv_winograd.winograd(call.x, call.weight, call.bias, call.out, problem.window,
                                  problem.channel_last, 4, call.residual, call.act_type,
                                  budget, alloc, threads, call.weight_version,
                                  call.weight_scale, fused=True)
    return True if done is None else done


def _run_onednn(problem, call, budget, alloc, threads):
    from ember.op.nn import onednn_provider
    return onednn_provider.convolution_forward(call.attrs, call.x, call.weight, call.bias,
                                               call.out, call.residual, call.act_type,
                                               call.weight_version, call.weight_scale)


def _run_pointwise(problem, call, budget, alloc, threads):
    conv_winograd.pointwise(call.x, call.weight, call.bias, call.out, problem.stride,
                            call.residual, call.act_type, alloc, threads, call.weight_version,
                            call.weight_scale)
    return True


def _run_line(problem, call, budget, alloc, threads):
    axis = 1 if problem.kernel[1] == 1 else 2
    # True, or the compiled call prepared to run again (conv_winograd.Prepared)
    return conv_winograd.line(call.x, call.weight, call.bias, call.out, axis,
                              problem.pad[axis - 1], call.residual, call.act_type, alloc,
                              threads, call.weight_version, call.weight_scale) or True


def _onednn_supports(problem):
    return problem.dtype == 'float32' and len(problem.kernel) in (1, 2, 3)


ALGORITHMS = {a.name: a for a in (
    Algorithm('onednn', _onednn_supports, lambda problem, batch: 0, _run_onednn,
              uses_onednn=True),
    Algorithm('gemm', lambda problem: True, conv_gemm.gemm_scratch, _run_gemm),
    _winograd(2),
    _winograd(4),
    # F(4x4) keeping nothing: each kernel thread transforms the weights of the filters it
    # takes as it goes (a layer with few tiles, as at batch 1)
    Algorithm('winograd4_fused', conv_winograd.fuses, conv_winograd.fused_scratch_bytes,
              _run_fused),
    Algorithm('pointwise', conv_winograd.supports_pointwise,
              conv_winograd.pointwise_forward_scratch_bytes, _run_pointwise),
    Algorithm('winograd_line', conv_winograd.supports_line, conv_winograd.line_scratch_bytes,
              _run_line, conv_winograd.line_kept_bytes),
)}


# The data gradient: ConvCall's x is the output gradient, out the data gradient.

def _run_onednn_data(problem, call, budget, alloc, threads):
    from ember.op.nn import onednn_provider
    return onednn_provider.convolution_backward_data(call.attrs, call.x, call.weight, call.out)


def _run_numpy_data(problem, call, budget, alloc, threads):
    from ember.op.nn import convolution    # imports this module
    convolution.numpy_backward_data(call.attrs, call.x, call.weight, call.out, call.ctx)
    return True


def _run_winograd_data(problem, call, budget, alloc, threads):
    conv_winograd.data_gradient(call.x, call.weight, call.out, problem.window,
                                problem.channel_last, budget, alloc, threads)
    return True


# The weight gradient: ConvCall's x is the output gradient, weight the data, out the weight
# gradient and bias the bias gradient (None without a bias).

def _run_onednn_weight(problem, call, budget, alloc, threads):
    from ember.op.nn import onednn_provider
    return onednn_provider.convolution_backward_weights(call.attrs, call.x, call.weight,
                                                        call.out, call.bias)


def _run_numpy_weight(problem, call, budget, alloc, threads):
    from ember.op.nn import convolution    # imports this module
    convolution.numpy_backward_weights(call.attrs, call.x, call.weight, call.out, call.bias,
                                       call.ctx)
    return True


def _run_winograd_weight(problem, call, budget, alloc, threads):
    conv_winograd.weight_gradient(call.x, call.weight, call.out, problem.window,
                                  problem.channel_last, budget, alloc, threads)
    if call.bias is not None:
        axes = (0, 1, 2) if problem.channel_last else (0, 2, 3)
        call.bias[...] = call.x.sum(axis=axes)
    return True


def _supports_spread(problem):
    """A strided 1x1 convolution's data gradient (unpadded, undilated, one group, 2-D) of
    channel-last float32 data, where the compiled spread is built."""
    return (_kernels is not None and problem.gradient == 'data' and problem.channel_last
            and _onednn_supports(problem) and problem.groups == 1 and len(problem.kernel) == 2
            and all(k == 1 for k in problem.kernel) and all(d == 1 for d in problem.dilate)
            and not any(problem.pad) and any(s != 1 for s in problem.stride))


def _spread_scratch(problem, batch):
    """The stride-1 gradient over the output pixels."""
    return batch * prod(problem.size_out) * problem.channels * problem.dtype_size


def _run_spread_data(problem, call, budget, alloc, threads):
    # oneDNN's strided data gradient computes and writes the zeros between the output pixels
    # as part of its GEMM: resnet50_v1's 256 -> 128 layer at 56x56, batch 16, took 3.9 ms,
    # the stride-1 one over the 28x28 output pixels 1.7 and the spread 1.1
    from ember.op.nn import onednn_provider
    dy, dx = call.x, call.out
    (compact,) = alloc([(dy.shape[:-1] + dx.shape[-1:], dx.dtype)])
    unstrided = dict(call.attrs, stride=(1,) * len(problem.stride))
    if not onednn_provider.convolution_backward_data(unstrided, dy, call.weight, compact):
        return False
    _kernels.spread(compact, dx, *problem.stride, **team_arguments(split=threads > 1))
    return True


DATA_GRADIENT_ALGORITHMS = {a.name: a for a in (
    Algorithm('onednn', _onednn_supports, lambda problem, batch: 0, _run_onednn_data,
              uses_onednn=True),
    Algorithm('gemm', lambda problem: True, lambda problem, batch: 0, _run_numpy_data),
    Algorithm('winograd4', conv_winograd.supports_data_gradient,
              conv_winograd.gradient_scratch_bytes, _run_winograd_data),
    Algorithm('onednn_spread', _supports_spread, _spread_scratch, _run_spread_data,
              uses_onednn=True),
)}


def _run_pointwise_weight(problem, call, budget, alloc, threads):
    conv_winograd.pointwise_weight_gradient(call.x, call.weight, call.out, call.bias, alloc,
                                            threads)
    return True


WEIGHT_GRADIENT_ALGORITHMS = {a.name: a for a in (
    Algorithm('onednn', _onednn_supports, lambda problem, batch: 0, _run_onednn_weight,
              uses_onednn=True),
    Algorithm('gemm', lambda problem: True, lambda problem, batch: 0, _run_numpy_weight),
    Algorithm('winograd4', conv_winograd.supports_weight_gradient,
              conv_winograd.weight_gradient_scratch_bytes, _run_winograd_weight),
    Algorithm('pointwise', conv_winograd.supports_pointwise_gradient,
              conv_winograd.pointwise_scratch_bytes, _run_pointwise_weight),
)}

_TABLES = {'': ALGORITHMS, 'data': DATA_GRADIENT_ALGORITHMS,
           'weight': WEIGHT_GRADIENT_ALGORITHMS}


def _table(problem) -> dict:
    return _TABLES[problem.gradient]


def candidates(problem, onednn):
    """The algorithms that can run `problem` (oneDNN only when `onednn` is on; NumPy's
    Winograd F(2x2) only where oneDNN does not run it, see ``_DOMINATED``)."""
    dominated = _DOMINATED if onednn and _onednn_supports(problem) else ()
    return [a for a in _table(problem).values()
            if (onednn or not a.uses_onednn) and a.name not in dominated
            and a.supports(problem)]


# Measured where oneDNN runs, NumPy's F(2x2) never won: oneDNN or the compiled F(4x4) was
# faster on every layer of resnet50_v1, resnet152_v1, vgg16, inceptionv3 and alexnet at batch
# 1, 8 and 32. Its trials were most of the first batch's measuring: leaving it out took
# vgg16's first batch at batch 8 from 7.6 to 5.3 s, resnet50_v1's at batch 1 from 0.72 to
# 0.63 s (and 17 MB of scratch for the 512-channel layers at 7x7).
_DOMINATED = ('winograd2',)


def rule(problem, onednn):
    """The algorithm of ``MXNET_CUDNN_AUTOTUNE_DEFAULT=0`` (see the module docstring)."""
    if onednn and _onednn_supports(problem):
        return _table(problem)['onednn']
    return numpy_rule(problem)


def numpy_rule(problem):
    """The NumPy algorithm of the rule: the compiled products for 1x1 channel-last float32
    layers ('pointwise', twice OpenBLAS's GEMM where OpenBLAS runs AVX2 kernels) and for
    their 1 x r and r x 1 layers ('winograd_line', 2.5-3.5x im2col + GEMM on inceptionv3's);
    Winograd F(2x2, 3x3) where it has enough tiles to amortise its weight transform, channels to
    amortise its tile transforms and transformed weights small enough to leave scratch for
    the tiles; im2col + GEMM everywhere else (and for every gradient)."""
    if problem.gradient:
        return _table(problem)['gemm']
    if conv_winograd.supports_pointwise(problem):
        return ALGORITHMS['pointwise']
    if conv_winograd.supports_line(problem):
        return ALGORITHMS['winograd_line']
    if (conv_winograd.supports(problem) and min(problem.channels, problem.filters) >= 32
            and _tiles(problem, 2) >= WINOGRAD_MIN_TILES
            and 16 * problem.channels * problem.filters * problem.dtype_size
            <= WINOGRAD_MAX_WEIGHT_BYTES):
        return ALGORITHMS['winograd2']
    return ALGORITHMS['gemm']


# From benchmarks/conv_algos.py on a 2-core Zen 3 (NHWC, 2 threads): F(2x2) beats im2col +
# GEMM by 1.1-1.4x from 196 2x2 tiles in the batch on (28x28 at batch 1), and loses at 49
# (14x14 at batch 1); F(4x4) in NumPy is never clearly ahead of F(2x2). 512x512 weights
# transformed (16 MB) leave no room for tiles in a 16 MB workspace. (The compiled F(4x4),
# ember._winograd, beats oneDNN from batch 1-4 up: measurement finds it; the rule, which
# needs no timing, stays with oneDNN where oneDNN runs.)
WINOGRAD_MIN_TILES = 100
WINOGRAD_MAX_WEIGHT_BYTES = 8 << 20


def _tiles(problem, m):
    return problem.batch * prod(-(-o // m) for o in problem.size_out)


# ----------------------------------------------------------------------------------------------
# Measurement and the cache of choices

_CHOICES: dict = {}
_choices_lock = threading.Lock()
_generation = 0         # see generation()


def choices() -> dict:
    """A copy of the cache: (problem, mode, workspace limit, oneDNN on) -> algorithm name."""
    with _choices_lock:
        return dict(_CHOICES)


def clear_choices() -> None:
    """Forget every measured choice (the next call of each problem measures again)."""
    global _generation
    with _choices_lock:
        _CHOICES.clear()
        _generation += 1


def generation() -> int:
    """A number that changes whenever the choices are forgotten (:func:`clear_choices`): a
    caller that remembers a choice remembers this number with it."""
    return _generation


# Measurement times the candidates in turns, a round being one call of each, and keeps each
# one's best: at least MEASURE_ROUNDS rounds, and more, up to MEASURE_MAX_ROUNDS, while all
# rounds so far took under MEASURE_SECONDS. Small layers are where a single slow call (another
# process, a page fault, threads waking) decides the choice: on a 2-core Zen 4 resnet50_v1 at
# batch 1 ran 14.9-22.0 img/s from process to process with a warm-up and the best of two runs
# in a row per candidate.
MEASURE_ROUNDS = 2
MEASURE_MAX_ROUNDS = 10
MEASURE_SECONDS = 0.05


def measure(problem, algorithms, trial) -> dict:
    """Seconds per call of each algorithm: ``trial(algorithm)`` runs it once on the call's
    inputs (False when it declines; else True, or a function that runs it again as the node's
    later calls would: its prepared call's replay); a warm-up each, then the best of rounds
    that take turns (see ``MEASURE_ROUNDS``), each running it again."""
    again = {}
    for algorithm in algorithms:
        done = trial(algorithm)
        if done:
            again[algorithm] = done if callable(done) else functools.partial(trial, algorithm)
    seconds = {algorithm.name: float('inf') for algorithm in again}
    began, rounds = time.perf_counter(), 0
    while again and (rounds < MEASURE_ROUNDS or (
            rounds < MEASURE_MAX_ROUNDS and time.perf_counter() - began < MEASURE_SECONDS)):
        for algorithm, run in again.items():
            start = time.perf_counter()
            run()
            seconds[algorithm.name] = min(seconds[algorithm.name], time.perf_counter() - start)
        rounds += 1
    return seconds


def choose(problem, mode, workspace_limit, onednn, trial, deterministic=False):
    """The algorithm for `problem` under ``MXNET_CUDNN_AUTOTUNE_DEFAULT`` = `mode` ('0', '1' or
    '2'), with `workspace_limit` bytes (mode 1); `trial(algorithm)` runs a candidate for
    :func:`measure`."""
    if mode == '0' or deterministic or problem.flops < MEASURE_MIN_FLOPS:
        return rule(problem, onednn)
    # the kept-memory limit grows with the budget (_kept_limit)
    key = (problem, mode,
           (workspace_limit, conv_winograd.kept_budget()) if mode == '1' else None, onednn)
    name = _CHOICES.get(key)
    if name is None:
        name = _measured_choice(problem, mode, workspace_limit, onednn, trial)
        with _choices_lock:
            _CHOICES[key] = name
    return _table(problem)[name]


def choose_past_budget(problem, onednn, trial):
    """For an inference layer that measurement gave Winograd F(4x4) but whose transformed
    weights find no room in ``conv_winograd.kept_budget()``: Winograd transforming its weights
    on every call, or the rule's algorithm, whichever `trial` measures faster (cached per
    problem). Few tiles do not pay for the transform: resnet152_v1 at batch 1 ran 5.8 img/s
    with the transform in every call past the budget and 6.7 with oneDNN throughout."""
    key = (problem, 'past the kept budget', onednn)
    name = _CHOICES.get(key)
    if name is None:
        other = rule(problem, onednn)
        seconds = measure(problem, [ALGORITHMS['winograd4'], other], trial)
        name = min(seconds, key=seconds.get) if seconds else other.name
        with _choices_lock:
            _CHOICES[key] = name
    return ALGORITHMS[name]


def _measured_choice(problem, mode, workspace_limit, onednn, trial):
    able = candidates(problem, onednn)
    fitting = [a for a in able if mode == '2' or (a.scratch(problem, 1) <= workspace_limit
                                                  and a.kept(problem) <= _kept_limit(problem))]
    if not fitting:
        return min(able, key=lambda a: a.scratch(problem, 1)).name
    seconds = measure(problem, fitting, trial)
    if not seconds:
        return numpy_rule(problem).name
    return fastest(seconds, GRADIENT_SWITCH_MARGIN if problem.gradient else SWITCH_MARGIN)


# Mode 1 measures an algorithm that keeps memory between calls (Winograd's transformed
# weights, 4x the weights in F(4x4)) only where that memory is at most KEPT_ALWAYS bytes, or
# at most KEPT_PER_OUTPUT times the bytes of one call's output. Beyond both the layer is large
# in weights and small in space: little time to save for much memory. On resnet50_v1 at
# batch 8 the last stage's three 512-channel layers would keep 113 MB (RSS 525 MB against
# MXNet's 463) to save 7 of 290 ms; the 256-channel layers keep 9.4 MB each, which at batch 8
# (1.6 MB outputs) saves about 1.5 ms a layer. At batch 1 it saved about 0.06 ms a layer in
# resnet152_v1, whose first eight such layers then raised its RSS by 50-65 MB, to MXNet's.
KEPT_ALWAYS = 8 << 20
KEPT_PER_OUTPUT = 8


def _kept_limit(problem) -> int:
    """KEPT_ALWAYS, KEPT_PER_OUTPUT outputs of `problem`, or the process-wide
    ``conv_winograd.kept_budget()`` where that has grown past ``KEPT_BUDGET`` with a large
    graph (vgg16's 512-channel layers at batch 1 keep 38 MB each and save 3-4 of 7 ms)."""
    output = problem.batch * problem.filters * prod(problem.size_out) * problem.dtype_size
    budget = conv_winograd.kept_budget()
    return max(KEPT_ALWAYS, KEPT_PER_OUTPUT * output,
               budget if budget > conv_winograd.KEPT_BUDGET else 0)


# A NumPy algorithm must beat oneDNN by this fraction to be chosen over it: timed alone it
# does not pay for the switches between oneDNN's OpenMP threads and the kernel threads that it
# brings into a network (resnet50_v1 at batch 8: 19.6 img/s with the plainly fastest
# algorithms, 20.2 with oneDNN throughout).
SWITCH_MARGIN = 0.1

# A gradient's measured algorithms take no margin: its compiled ones (Winograd, the pointwise
# sums) run on oneDNN's OpenMP team, and in a training step they gained more than measurement
# showed. resnet50_v1 at batch 16: the 256-channel 3x3 weight gradient ran 6.2-7.4 ms a call
# in Winograd, 8.2-8.4 in oneDNN, but timed 7.5-8.3 against 8.1-9.3 in measurement, and
# oneDNN kept it in 5 processes of 14 under the margin; the 1024 -> 256 1x1 one ran 3.95-4.27
# against 4.49-4.57 ms in the pointwise sums and stayed on oneDNN.
GRADIENT_SWITCH_MARGIN = 0.0


def fastest(seconds: dict, margin: float = SWITCH_MARGIN) -> str:
    """The name of the fastest measured algorithm, oneDNN unless another beats it by
    `margin` (a fraction of oneDNN's time).

    >>> fastest({'onednn': 1.0, 'gemm': 0.95}), fastest({'onednn': 1.0, 'gemm': 0.8})
    ('onednn', 'gemm')
    >>> fastest({'onednn': 1.0, 'gemm': 0.95}, margin=0.0)
    'gemm'
    """
    best = min(seconds, key=seconds.get)
    if 'onednn' in seconds and seconds[best] > seconds['onednn'] * (1 - margin):
        return 'onednn'
    return best
