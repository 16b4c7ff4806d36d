"""Convolution algorithms, each one registration with its facts, and the choice between them
per layer. These are the CPU's; a GPU's (cuDNN's algorithms, CuPy's GEMMs) register from
:mod:`ember.op.nn.conv.cuda` with ``device='gpu'``, and a problem chooses among the algorithms
of its own device.

Algorithms of the forward pass (:data:`ALGORITHMS`):

``onednn``
    oneDNN's convolution (``MXNET_MKLDNN_ENABLED`` and the library present; float32), with the
    residual as a sum post-op and the activation as an eltwise post-op.
``gemm``
    im2col and one GEMM per group (NCHW or NHWC, any dims, groups, stride, dilation); a 1x1
    stride-1 convolution is the GEMM alone (:mod:`ember.op.nn.conv.gemm`).
``winograd2``, ``winograd4``
    Winograd F(2x2, 3x3) and F(4x4, 3x3) (3x3, stride 1, no dilation, one group); F(4x4) of
    float32 data compiled, its transformed weights kept per weight token
    (:mod:`ember.op.nn.conv.winograd`).
``winograd4_fused``
    the compiled F(4x4) keeping nothing: each kernel thread transforms the weights of the
    filters it takes as it goes (a layer with few tiles, as at batch 1).
``pointwise``
    1x1 convolutions of channel-last float32 data on the compiled products
    (:mod:`ember.op.nn.conv.pointwise`).
``winograd_line``
    1 x r and r x 1 kernels of channel-last float32 data: the 1-D Winograd F(m, r) on the same
    compiled products (:mod:`ember.op.nn.conv.line`).

A problem's ``gradient``, 'data' or 'weight', makes it the gradient of its convolution
(training's backward pass) with respect to its data or its weight, chosen the same way among
:data:`DATA_GRADIENT_ALGORITHMS` or :data:`WEIGHT_GRADIENT_ALGORITHMS`: oneDNN's backward
primitives, the generic GEMMs (:mod:`ember.op.nn.conv.generic`), the compiled Winograd
F(4x4) for 3x3 stride-1 layers, the compiled sums of 1x1 layers' weight gradients
(``pointwise``), and for strided 1x1 layers' data gradients ``onednn_spread``: oneDNN's
stride-1 data gradient over the output pixels, spread out with the zeros between by the
compiled ``ember._kernels.spread`` (conv_gradients.py).

Everything the operator and the choice need to know about an algorithm is a field of its
:class:`Algorithm` record (whether it reads the weight as given, where it keeps what it derives
from it, whether its run can be replayed, ...): a new algorithm is one :func:`register` call.

The tuning mode (:class:`TuneMode`, ``MXNET_CUDNN_AUTOTUNE_DEFAULT`` or the operator's
``cudnn_tune``) picks one per problem:

``OFF`` ('0'), the rule (:func:`rule`): oneDNN whenever it runs; else the NumPy rule
    (:func:`numpy_rule`).
``LIMITED_WORKSPACE`` ('1'), measurement: every candidate (:func:`candidates`) whose scratch
    for one sample fits the ``workspace`` attribute (MB) and whose memory kept between calls
    is within :func:`_kept_limit` runs on the call's own inputs (:func:`measure`), once per
    problem (:class:`ConvProblem`); the fastest (:func:`fastest`: the incumbent, oneDNN,
    unless beaten by ``TUNING.switch_margin``) is remembered in ``STATE.choices``. When
    nothing fits, the algorithm with the least scratch runs.
``FASTEST`` ('2'), measurement as in 1 without the workspace and kept-memory limits.

Problems under ``TUNING.measure_min_flops`` take the rule (too short to time), and so do
calls under ``MXNET_ENFORCE_DETERMINISM``: timing noise must not change the bits of a result.

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
import enum
import functools
import time
from dataclasses import dataclass
from typing import Callable

from ember.backend import native
from ember.base import prod
from ember.engine.threads import team_arguments
from ember.op.nn import onednn_provider
from ember.op.nn._common import make_window
from ember.op.nn.conv import gemm, generic, line, pointwise, tuning, winograd, winograd_compiled
from ember.op.nn.conv.kept import kept_budget
from ember.op.nn.conv.state import LINE, ONEDNN, PACKED, STATE, TRANSFORMED

# the compiled spread of onednn_spread (None without a C compiler)
_kernels = native.compiled_module('_kernels')

__all__ = ['ConvProblem', 'ConvCall', 'Algorithm', 'TuneMode', 'register', 'ALGORITHMS',
           'DEVICE_RULES',
           'DATA_GRADIENT_ALGORITHMS', 'WEIGHT_GRADIENT_ALGORITHMS', 'table', 'candidates',
           'rule', 'numpy_rule', 'choose', 'choose_past_budget', 'measure', 'fastest']


class TuneMode(enum.StrEnum):
    """How an algorithm is chosen: ``MXNET_CUDNN_AUTOTUNE_DEFAULT``'s values (equal to its
    text, '0', '1' or '2'); the lower-case names are the operator's ``cudnn_tune``.

    >>> TuneMode.OFF == '0', TuneMode('2').name
    (True, 'FASTEST')
    """
    OFF = '0'                   # the rule
    LIMITED_WORKSPACE = '1'     # measured, within the workspace and kept-memory limits
    FASTEST = '2'               # measured, without limits


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
    # where the arrays are: 'cpu' (NumPy) or 'gpu' (CuPy)
    device: str = 'cpu'

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
    # an algorithm that takes the raw weight applies it, the others get the contiguous
    # product (Algorithm.takes_raw_weight)
    weight_scale: object = None
    # the kernel's context (its temp space), for algorithms that allocate their own scratch
    ctx: object = None


def _never(problem) -> bool:
    return False


def _always(problem) -> bool:
    return True


def _nothing(problem) -> int:
    return 0


def _no_scratch(problem, batch) -> int:
    return 0


@dataclass(frozen=True)
class Algorithm:
    """One way to run a convolution or one of its gradients, with every fact about it that
    the operator and the choice read. ``run(problem, call, budget, alloc, threads)`` returns
    False where it declines (nothing written), else True or, where `prepared`, possibly a
    prepared call (``run(weight_version) -> bool``) that replays it on the same arrays;
    ``scratch(problem, batch)`` is its scratch in bytes for `batch` samples."""
    name: str
    supports: Callable
    scratch: Callable
    run: Callable
    # bytes it keeps between calls of an inference layer (transformed weights), beyond the
    # copy of the weights every algorithm may keep
    kept: Callable = _nothing
    # runs only where oneDNN is on (MXNET_MKLDNN_ENABLED and the library present)
    uses_onednn: bool = False
    # (problem) -> whether it reads the weight as the call gives it (any strides, the scale
    # apart); else it is handed a scaled, contiguous copy (kept per weight token)
    takes_raw_weight: Callable = _never
    # where it keeps what it derives from the weight (a store of STATE.kept, or ONEDNN):
    # measurement discards the other algorithms' once it has chosen this one
    kept_store: str | None = None
    # (problem, weight token) -> whether its kept weights find room in the budget; past it
    # the choice is measured again against the rule (choose_past_budget). None: unbudgeted
    has_room: Callable | None = None
    # its kernel threads are capped by MXNET_CPU_NNPACK_NTHREADS (the Winograd kernels)
    nnpack_threads: bool = False
    # not measured where oneDNN runs the problem (it never won there: conv_algos.py)
    dominated_by_onednn: bool = False
    # the others must beat it by the switch margin to be chosen over it
    incumbent: bool = False
    # its run may return a prepared call to replay
    prepared: bool = False
    # the device kind whose arrays it runs on ('cpu' or 'gpu')
    device: str = 'cpu'
    # the same inputs give the same bits on every run (MXNET_ENFORCE_DETERMINISM)
    deterministic: bool = True


ALGORITHMS: dict = {}
DATA_GRADIENT_ALGORITHMS: dict = {}
WEIGHT_GRADIENT_ALGORITHMS: dict = {}
_TABLES = {'': ALGORITHMS, 'data': DATA_GRADIENT_ALGORITHMS,
           'weight': WEIGHT_GRADIENT_ALGORITHMS}


def register(algorithm: Algorithm, gradient: str = '') -> Algorithm:
    """Adds `algorithm` to the table of the forward pass ('') or of a gradient ('data',
    'weight'); a name already there is an error."""
    entries = _TABLES[gradient]
    if algorithm.name in entries:
        raise ValueError(f'convolution algorithm {algorithm.name!r} is already registered '
                         f'for {gradient or "the forward pass"}')
    entries[algorithm.name] = algorithm
    return algorithm


def table(problem) -> dict:
    """Name -> algorithm of the table `problem` chooses from (its gradient's, or forward's)."""
    return _TABLES[problem.gradient]


# ----------------------------------------------------------------------------------------------
# The forward pass

def _onednn_supports(problem):
    return problem.dtype == 'float32' and len(problem.kernel) in (1, 2, 3)


def _run_onednn(problem, call, budget, alloc, threads):
    return onednn_provider.convolution_forward(call.attrs, call.x, call.weight, call.bias,
                                               call.out, call.residual, call.act_type,
                                               call.weight_version, call.weight_scale)


def _run_gemm(problem, call, budget, alloc, threads):
    # packed weights (kept per token, else made for the call outside the workspace)
    packed = pointwise.packed_weights(call.weight, call.weight_scale, call.weight_version) \
        if gemm.packs(problem) else None
    gemm.gemm(call.x, call.weight, call.bias, call.out, problem.window, problem.groups,
              problem.channel_last, call.residual, call.act_type, budget, alloc, threads,
              packed)
    return True


def _winograd(m):
    def run(problem, call, budget, alloc, threads):
        # True, or the compiled call prepared to run again
        return winograd.winograd(call.x, call.weight, call.bias, call.out, problem.window,
                                 problem.channel_last, m, call.residual, call.act_type,
                                 budget, alloc, threads, call.weight_version,
                                 call.weight_scale) or True

    def compiled(problem):
        return winograd.compiled(problem, m)

    def has_room(problem, weight_version):
        return not compiled(problem) or winograd.can_keep(problem, weight_version)
    return Algorithm(f'winograd{m}', winograd.supports,
                     lambda problem, batch: winograd.scratch_bytes(problem, batch, m), run,
                     lambda problem: winograd.kept_weight_bytes(problem, m),
                     takes_raw_weight=compiled, nnpack_threads=True, prepared=m == 4,
                     kept_store=TRANSFORMED if m == 4 else None,
                     has_room=has_room if m == 4 else None, dominated_by_onednn=m == 2)


def _compiled4(problem):
    return winograd.compiled(problem, 4)


def _run_fused(problem, call, budget, alloc, threads):
    # the compiled call prepared to run again, True, or False where it declines (arrays the
    # compiled path does not take)
    done = winograd.winograd(call.x, call.weight, call.bias, call.out, problem.window,
                             problem.channel_last, 4, call.residual, call.act_type, budget,
                             alloc, threads, call.weight_version, call.weight_scale,
                             fused=True)
    return True if done is None else done


def _run_pointwise(problem, call, budget, alloc, threads):
    pointwise.convolve(call.x, call.weight, call.bias, call.out, problem.stride, call.residual,
                       call.act_type, alloc, threads, call.weight_version, call.weight_scale)
    return True


def _run_line(problem, call, budget, alloc, threads):
    axis = 1 if problem.kernel[1] == 1 else 2
    # True, or the compiled call prepared to run again
    return line.convolve(call.x, call.weight, call.bias, call.out, axis,
                         problem.pad[axis - 1], call.residual, call.act_type, alloc, threads,
                         call.weight_version, call.weight_scale) or True


register(Algorithm('onednn', _onednn_supports, _no_scratch, _run_onednn, uses_onednn=True,
                   takes_raw_weight=_always, kept_store=ONEDNN, incumbent=True,
                   prepared=True))
register(Algorithm('gemm', _always, gemm.gemm_scratch, _run_gemm, takes_raw_weight=gemm.packs,
                   kept_store=PACKED))
register(_winograd(2))
register(_winograd(4))
register(Algorithm('winograd4_fused', winograd.fuses, winograd.fused_scratch_bytes, _run_fused,
                   takes_raw_weight=_compiled4, nnpack_threads=True, prepared=True))
register(Algorithm('pointwise', pointwise.supports, pointwise.scratch_bytes, _run_pointwise,
                   takes_raw_weight=_always, kept_store=PACKED))
register(Algorithm('winograd_line', line.supports, line.scratch_bytes, _run_line,
                   line.kept_bytes, takes_raw_weight=_always, kept_store=LINE,
                   nnpack_threads=True, prepared=True))


# ----------------------------------------------------------------------------------------------
# The data gradient: ConvCall's x is the output gradient, out the data gradient.

def _run_onednn_data(problem, call, budget, alloc, threads):
    return onednn_provider.convolution_backward_data(call.attrs, call.x, call.weight, call.out)


def _run_generic_data(problem, call, budget, alloc, threads):
    generic.backward_data(call.attrs, call.x, call.weight, call.out, call.ctx)
    return True


def _run_winograd_data(problem, call, budget, alloc, threads):
    winograd_compiled.data_gradient(call.x, call.weight, call.out, problem.window,
                                    problem.channel_last, budget, alloc, threads)
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
    # as part of its GEMM; the stride-1 one over the output pixels and the spread take less
    # (conv_gradients.py)
    dy, dx = call.x, call.out
    (compact,) = alloc([(dy.shape[:-1] + dx.shape[-1:], dx.dtype)])
    unstrided = dict(call.attrs, stride=(1,) * len(problem.stride))
    if not onednn_provider.convolution_backward_data(unstrided, dy, call.weight, compact):
        return False
    _kernels.spread(compact, dx, *problem.stride, **team_arguments(split=threads > 1))
    return True


register(Algorithm('onednn', _onednn_supports, _no_scratch, _run_onednn_data,
                   uses_onednn=True, takes_raw_weight=_always, incumbent=True), 'data')
register(Algorithm('gemm', _always, _no_scratch, _run_generic_data, takes_raw_weight=_always),
         'data')
register(Algorithm('winograd4', winograd.supports_data_gradient, winograd.gradient_scratch_bytes,
                   _run_winograd_data, takes_raw_weight=_always, nnpack_threads=True), 'data')
register(Algorithm('onednn_spread', _supports_spread, _spread_scratch, _run_spread_data,
                   uses_onednn=True, takes_raw_weight=_always), 'data')


# ----------------------------------------------------------------------------------------------
# The weight gradient: ConvCall's x is the output gradient, weight the data, out the weight
# gradient and bias the bias gradient (None without a bias).

def _run_onednn_weight(problem, call, budget, alloc, threads):
    return onednn_provider.convolution_backward_weights(call.attrs, call.x, call.weight,
                                                        call.out, call.bias)


def _run_generic_weight(problem, call, budget, alloc, threads):
    generic.backward_weights(call.attrs, call.x, call.weight, call.out, call.bias, call.ctx)
    return True


def _run_winograd_weight(problem, call, budget, alloc, threads):
    winograd_compiled.weight_gradient(call.x, call.weight, call.out, problem.window,
                                      problem.channel_last, budget, alloc, threads)
    if call.bias is not None:
        axes = (0, 1, 2) if problem.channel_last else (0, 2, 3)
        call.bias[...] = call.x.sum(axis=axes)
    return True


def _run_pointwise_weight(problem, call, budget, alloc, threads):
    pointwise.weight_gradient(call.x, call.weight, call.out, call.bias, alloc, threads)
    return True


register(Algorithm('onednn', _onednn_supports, _no_scratch, _run_onednn_weight,
                   uses_onednn=True, takes_raw_weight=_always, incumbent=True), 'weight')
register(Algorithm('gemm', _always, _no_scratch, _run_generic_weight, takes_raw_weight=_always),
         'weight')
register(Algorithm('winograd4', winograd.supports_weight_gradient,
                   winograd_compiled.weight_gradient_scratch_bytes, _run_winograd_weight,
                   takes_raw_weight=_always, nnpack_threads=True), 'weight')
register(Algorithm('pointwise', pointwise.supports_weight_gradient,
                   pointwise.weight_gradient_scratch_bytes, _run_pointwise_weight,
                   takes_raw_weight=_always), 'weight')


# ----------------------------------------------------------------------------------------------
# The rule

def candidates(problem, onednn):
    """The algorithms of the problem's device that can run `problem` (oneDNN's only when
    `onednn` is on; those `dominated_by_onednn` only where oneDNN does not run it)."""
    dominated = onednn and _onednn_supports(problem)
    return [a for a in table(problem).values()
            if a.device == problem.device
            and (onednn or not a.uses_onednn) and not (dominated and a.dominated_by_onednn)
            and a.supports(problem)]


# device kind -> the rule of tuning mode OFF for its problems (the CPU's is below)
DEVICE_RULES: dict = {}


def rule(problem, onednn):
    """The algorithm of tuning mode OFF: on another device that device's rule
    (:data:`DEVICE_RULES`); on the CPU oneDNN where it runs (the fastest, or within a few
    per cent, on every ResNet-50 layer with NHWC data: conv_algos.py), else
    :func:`numpy_rule`."""
    if problem.device != 'cpu':
        return DEVICE_RULES[problem.device](problem)
    if onednn and _onednn_supports(problem):
        return table(problem)['onednn']
    return numpy_rule(problem)


def numpy_rule(problem):
    """The algorithm of the rule without oneDNN: the compiled products for 1x1 channel-last
    float32 layers ('pointwise') and for their 1 x r and r x 1 layers ('winograd_line');
    Winograd F(2x2, 3x3) where it has enough tiles to amortise its weight transform
    (``TUNING.winograd2_min_tiles``), channels to amortise its tile transforms and
    transformed weights small enough to leave scratch for the tiles
    (``TUNING.winograd2_max_weight_bytes``); im2col + GEMM everywhere else (and for every
    gradient) (conv_algos.py, conv_line.py)."""
    if problem.gradient:
        return table(problem)['gemm']
    if pointwise.supports(problem):
        return ALGORITHMS['pointwise']
    if line.supports(problem):
        return ALGORITHMS['winograd_line']
    t = tuning.TUNING
    if (winograd.supports(problem) and min(problem.channels, problem.filters) >= 32
            and _tiles(problem, 2) >= t.winograd2_min_tiles
            and 16 * problem.channels * problem.filters * problem.dtype_size
            <= t.winograd2_max_weight_bytes):
        return ALGORITHMS['winograd2']
    return ALGORITHMS['gemm']


def _tiles(problem, m):
    return problem.batch * prod(-(-o // m) for o in problem.size_out)


# ----------------------------------------------------------------------------------------------
# Measurement and the cache of choices (STATE.choices)

def measure(problem, algorithms, trial) -> dict:
    """Seconds per call of each algorithm: ``trial(algorithm)`` runs it once on the call's
    inputs (False when it declines; else True, or a function that runs it again as the node's
    later calls would: its prepared call's replay); a warm-up each, then the best of rounds
    that take turns (``TUNING.measure_rounds`` and ``measure_max_rounds``), each running it
    again."""
    t = tuning.TUNING
    again = {}
    for algorithm in algorithms:
        done = trial(algorithm)
        if done:
            again[algorithm] = done if callable(done) else functools.partial(trial, algorithm)
    seconds = {algorithm.name: float('inf') for algorithm in again}
    began, rounds = time.perf_counter(), 0
    while again and (rounds < t.measure_rounds or (
            rounds < t.measure_max_rounds and time.perf_counter() - began < t.measure_seconds)):
        for algorithm, run in again.items():
            start = time.perf_counter()
            run()
            seconds[algorithm.name] = min(seconds[algorithm.name], time.perf_counter() - start)
        rounds += 1
    return seconds


def choose(problem, mode, workspace_limit, onednn, trial, deterministic=False):
    """The algorithm for `problem` under tuning `mode` (a :class:`TuneMode`, or its text),
    with `workspace_limit` bytes (mode LIMITED_WORKSPACE); `trial(algorithm)` runs a
    candidate for :func:`measure`."""
    if mode == TuneMode.OFF or deterministic \
            or problem.flops < tuning.TUNING.measure_min_flops:
        return rule(problem, onednn)
    # the kept-memory limit grows with the budget (_kept_limit)
    limits = (workspace_limit, kept_budget()) if mode == TuneMode.LIMITED_WORKSPACE else None
    key = (problem, mode, limits, onednn)
    name = STATE.choices.get(key)
    if name is None:
        name = _measured_choice(problem, mode, workspace_limit, onednn, trial)
        STATE.choices.remember(key, name)
    return table(problem)[name]


def choose_past_budget(problem, algorithm, onednn, trial):
    """For an inference layer that measurement gave `algorithm` but whose kept weights find
    no room in the budget: `algorithm` transforming its weights on every call, or the rule's
    algorithm, whichever `trial` measures faster (remembered per problem). Few tiles do not
    pay for the transform (compare.py resnet152_v1:1)."""
    key = (problem, algorithm.name, 'past the kept budget', onednn)
    name = STATE.choices.get(key)
    if name is None:
        other = rule(problem, onednn)
        seconds = measure(problem, [algorithm, other], trial)
        name = min(seconds, key=seconds.get) if seconds else other.name
        STATE.choices.remember(key, name)
    return table(problem)[name]


def _measured_choice(problem, mode, workspace_limit, onednn, trial):
    able = candidates(problem, onednn)
    fitting = [a for a in able if mode == TuneMode.FASTEST
               or (a.scratch(problem, 1) <= workspace_limit
                   and a.kept(problem) <= _kept_limit(problem))]
    if not fitting:
        return min(able, key=lambda a: a.scratch(problem, 1)).name
    seconds = measure(problem, fitting, trial)
    if not seconds:
        return (numpy_rule(problem) if problem.device == 'cpu' else rule(problem, onednn)).name
    t = tuning.TUNING
    incumbent = next((a.name for a in fitting if a.incumbent), None)
    return fastest(seconds, t.gradient_switch_margin if problem.gradient else t.switch_margin,
                   incumbent)


def _kept_limit(problem) -> int:
    """``TUNING.kept_always``, ``TUNING.kept_per_output`` outputs of `problem`, or the
    process-wide budget where a large graph has raised it past ``TUNING.kept_budget``."""
    t = tuning.TUNING
    output = problem.batch * problem.filters * prod(problem.size_out) * problem.dtype_size
    budget = kept_budget()
    return max(t.kept_always, t.kept_per_output * output,
               budget if budget > t.kept_budget else 0)


def fastest(seconds: dict, margin: float, incumbent: str | None = None) -> str:
    """The name of the fastest measured algorithm, the `incumbent` unless another beats it by
    `margin` (a fraction of the incumbent's time).

    >>> fastest({'onednn': 1.0, 'gemm': 0.95}, 0.1, 'onednn')
    'onednn'
    >>> fastest({'onednn': 1.0, 'gemm': 0.8}, 0.1, 'onednn')
    'gemm'
    >>> fastest({'onednn': 1.0, 'gemm': 0.95}, 0.0, 'onednn')
    'gemm'
    """
    best = min(seconds, key=seconds.get)
    if incumbent in seconds and seconds[best] > seconds[incumbent] * (1 - margin):
        return incumbent
    return best
