"""One table of operators: every differentiable operator that ``mx.nd`` exposes has a row.

Each row names an operator, its attributes, how to draw its inputs and, where cheap, a NumPy
reference for its forward output. The test runs the operator in float64 through ``mx.nd``,
compares the forward with the reference, and checks the gradient of a random linear functional
of the outputs, computed by ``mx.autograd``, against central finite differences. Output layers
whose backward is the gradient of a loss (SoftmaxOutput, the regressions, MakeLoss) and
BlockGrad are checked against their defined gradient instead.

Adding an operator means adding a row here (or an entry, with its reason, to SKIPPED):
``test_every_differentiable_operator_has_a_row`` fails otherwise.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import ember as mx
from ember.op import registry
from ember.test_utils import (assert_almost_equal, check_numeric_gradient,
                               check_symbolic_backward)

# ----------------------------------------------------------------------------------------------
# Input generators: each takes a numpy Generator and returns a float64 array.


def normal(*shape):
    return lambda rng: rng.standard_normal(shape)


def uniform(low, high, *shape):
    return lambda rng: rng.uniform(low, high, shape)


def away(*shape, gap=0.2, scale=1.0):
    """Random signs, magnitudes in [gap, 1] * scale: clear of kinks at zero."""
    return lambda rng: rng.choice([-1.0, 1.0], shape) * rng.uniform(gap, 1.0, shape) * scale


def positive(*shape, low=0.5, high=2.0):
    return uniform(low, high, *shape)


def distinct(*shape):
    """Values at least 0.2 apart, centred on zero: no ties for max, min, sort, maximum."""
    def draw(rng):
        size = math.prod(shape)
        ranks = rng.permutation(size).reshape(shape)
        return (ranks - size / 2) * 0.3 + rng.uniform(0, 0.1, shape)
    return draw


def off_integers(*shape):
    """Values 0.1 to 0.4 from the nearest integer: clear of the steps of floor, round, ..."""
    return lambda rng: (rng.integers(-3, 3, shape) + rng.uniform(0.1, 0.4, shape)
                        * rng.choice([-1.0, 1.0], shape))


def indices(high, *shape):
    return lambda rng: rng.integers(0, high, shape).astype(np.float64)


def const(values):
    return lambda rng: np.array(values, dtype=np.float64)


# ----------------------------------------------------------------------------------------------
# NumPy references


def full(reduction):
    """A reduction over every axis, shaped (1,) as MXNet 1.x returns it."""
    return lambda x: np.asarray(reduction(x)).reshape(1)


def erf(x):
    return np.vectorize(math.erf)(x)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def softmax(x, axis=-1, temperature=1.0):
    z = np.exp((x - x.max(axis=axis, keepdims=True)) / temperature)
    return z / z.sum(axis=axis, keepdims=True)


def one_hot(index, depth):
    return (index[..., None] == np.arange(depth)).astype(np.float64)


def conv(x, w, b=None, kernel=(), stride=(), dilate=(), pad=(), num_group=1, **_):
    """Direct N-D convolution, channel-first, one kernel tap at a time."""
    dims = len(kernel)
    stride, dilate, pad = stride or (1,) * dims, dilate or (1,) * dims, pad or (0,) * dims
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    size = [(xp.shape[2 + i] - dilate[i] * (kernel[i] - 1) - 1) // stride[i] + 1
            for i in range(dims)]
    groups, filters = num_group, w.shape[0]
    cin, fout = x.shape[1] // groups, filters // groups
    y = np.zeros((x.shape[0], filters) + tuple(size))
    for out in np.ndindex(*size):
        for tap in np.ndindex(*kernel):
            at = tuple(out[i] * stride[i] + tap[i] * dilate[i] for i in range(dims))
            patch = xp[(slice(None), slice(None)) + at]
            for g in range(groups):
                wg = w[(slice(g * fout, (g + 1) * fout), slice(None)) + tap]
                y[(slice(None), slice(g * fout, (g + 1) * fout)) + out] += \
                    patch[:, g * cin:(g + 1) * cin] @ wg.T
    if b is not None:
        y += b.reshape((1, -1) + (1,) * dims)
    return y


def deconv(x, w, b=None, kernel=(), stride=(), dilate=(), pad=(), adj=(), num_group=1, **_):
    """Transposed convolution: scatter every input position through every tap, then crop."""
    dims = len(kernel)
    stride, dilate = stride or (1,) * dims, dilate or (1,) * dims
    pad, adj = pad or (0,) * dims, adj or (0,) * dims
    size_in = x.shape[2:]
    extent = [(size_in[i] - 1) * stride[i] + dilate[i] * (kernel[i] - 1) + 1 + adj[i]
              for i in range(dims)]
    groups, cin = num_group, x.shape[1] // num_group
    fout = w.shape[1]
    y = np.zeros((x.shape[0], fout * groups) + tuple(extent))
    for pos in np.ndindex(*size_in):
        for tap in np.ndindex(*kernel):
            at = tuple(pos[i] * stride[i] + tap[i] * dilate[i] for i in range(dims))
            for g in range(groups):
                wg = w[(slice(g * cin, (g + 1) * cin), slice(None)) + tap]
                y[(slice(None), slice(g * fout, (g + 1) * fout)) + at] += \
                    x[(slice(None), slice(g * cin, (g + 1) * cin)) + pos] @ wg
    crop = tuple(slice(p, e - p) for p, e in zip(pad, extent))
    y = y[(slice(None), slice(None)) + crop]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * dims)
    return y


def pool(x, kernel=(), stride=(), pad=(), pool_type='max', global_pool=False,
         pooling_convention='valid', p_value=None, count_include_pad=None, **_):
    """Windows over the spatial dims of channel-first data."""
    dims = x.ndim - 2
    if global_pool:
        kernel, stride, pad = x.shape[2:], (1,) * dims, (0,) * dims
    stride, pad = stride or (1,) * dims, pad or (0,) * dims
    rounding = math.floor if pooling_convention == 'valid' else math.ceil
    size = [rounding((x.shape[2 + i] + 2 * pad[i] - kernel[i]) / stride[i]) + 1
            for i in range(dims)]
    fill = -np.inf if pool_type == 'max' else 0.0
    extra = [max(0, (size[i] - 1) * stride[i] + kernel[i] - x.shape[2 + i] - 2 * pad[i])
             for i in range(dims)]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p + e) for p, e in zip(pad, extra)],
                constant_values=fill)
    inside = np.pad(np.ones(x.shape[2:]), [(p, p + e) for p, e in zip(pad, extra)])
    y = np.zeros(x.shape[:2] + tuple(size))
    for out in np.ndindex(*size):
        window = tuple(slice(out[i] * stride[i], out[i] * stride[i] + kernel[i])
                       for i in range(dims))
        patch = xp[(slice(None), slice(None)) + window].reshape(x.shape[:2] + (-1,))
        if pool_type == 'max':
            value = patch.max(axis=-1)
        elif pool_type == 'sum':
            value = patch.sum(axis=-1)
        elif pool_type == 'lp':
            value = (np.abs(patch) ** p_value).sum(axis=-1) ** (1 / p_value)
        else:
            count = inside[window].sum() if count_include_pad is False else math.prod(kernel)
            value = patch.sum(axis=-1) / count
        y[(slice(None), slice(None)) + out] = value
    return y


def batch_norm(x, gamma, beta, mean, var, eps=1e-3, fix_gamma=True, axis=1, train=True, **_):
    axis = axis % x.ndim
    others = tuple(i for i in range(x.ndim) if i != axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    if train:
        mean, var = x.mean(axis=others), x.var(axis=others)
    scale = np.ones_like(gamma) if fix_gamma else gamma
    return ((x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
            * scale.reshape(shape) + beta.reshape(shape))


def layer_norm(x, gamma, beta, axis=-1, eps=1e-5):
    shape = [1] * x.ndim
    shape[axis] = -1
    mean, var = x.mean(axis=axis, keepdims=True), x.var(axis=axis, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape)


def instance_norm(x, gamma, beta, eps=1e-3):
    axes = tuple(range(2, x.ndim))
    channel = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma.reshape(channel) + beta.reshape(channel)


def lrn(x, alpha=1e-4, beta=0.75, knorm=2.0, nsize=3):
    half = nsize // 2
    padded = np.pad(x * x, [(0, 0), (half, half)] + [(0, 0)] * (x.ndim - 2))
    window = sum(padded[:, i:i + x.shape[1]] for i in range(nsize))
    return x * (knorm + alpha / nsize * window) ** -beta


def rnn(x, params, h, c=None, mode='rnn_tanh', state_size=2):
    """One unidirectional layer: (output, final h[, final c])."""
    gates = {'rnn_tanh': 1, 'rnn_relu': 1, 'lstm': 4, 'gru': 3}[mode]
    rows, width = gates * state_size, x.shape[2]
    wx = params[:rows * width].reshape(rows, width)
    wh = params[rows * width:rows * (width + state_size)].reshape(rows, state_size)
    bx, bh = np.split(params[rows * (width + state_size):], 2)
    h, c, outputs = h[0], None if c is None else c[0], []
    for step in x:
        xw, hw = step @ wx.T + bx, h @ wh.T + bh
        if mode == 'lstm':
            i, f, g, o = np.split(xw + hw, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
        elif mode == 'gru':
            (xr, xz, xn), (hr, hz, hn) = np.split(xw, 3, axis=1), np.split(hw, 3, axis=1)
            r, z = sigmoid(xr + hr), sigmoid(xz + hz)
            h = (1 - z) * np.tanh(xn + r * hn) + z * h
        else:
            h = np.tanh(xw + hw) if mode == 'rnn_tanh' else np.maximum(xw + hw, 0)
        outputs.append(h)
    states = [h[None]] + ([] if c is None else [c[None]])
    return [np.stack(outputs)] + states


def rnn_param_count(mode, width, hidden, layers=1, directions=1):
    gates = {'rnn_tanh': 1, 'rnn_relu': 1, 'lstm': 4, 'gru': 3}[mode]
    return sum(directions * gates * hidden * ((width if layer == 0 else directions * hidden)
                                              + hidden + 2) for layer in range(layers))


def topk_indices(x, k, axis=-1, ascending=False):
    order = np.argsort(x if ascending else -x, axis=axis, kind='stable')
    return np.take(order, np.arange(k), axis=axis)


def roi_pool(data, rois, pooled_size, spatial_scale):
    """MXNet's ROIPooling: rounded, scaled corners; bins of floor/ceil bounds; empty bins 0."""
    ph, pw = pooled_size
    out = np.zeros((len(rois), data.shape[1], ph, pw))
    height, width = data.shape[2:]
    for r, (batch, x1, y1, x2, y2) in enumerate(rois):
        x1, y1, x2, y2 = (int(round(v * spatial_scale)) for v in (x1, y1, x2, y2))
        bin_h, bin_w = max(y2 - y1 + 1, 1) / ph, max(x2 - x1 + 1, 1) / pw
        for i, j in np.ndindex(ph, pw):
            top = min(max(math.floor(i * bin_h) + y1, 0), height)
            bottom = min(max(math.ceil((i + 1) * bin_h) + y1, 0), height)
            left = min(max(math.floor(j * bin_w) + x1, 0), width)
            right = min(max(math.ceil((j + 1) * bin_w) + x1, 0), width)
            if bottom > top and right > left:
                region = data[int(batch), :, top:bottom, left:right]
                out[r, :, i, j] = region.reshape(data.shape[1], -1).max(axis=1)
    return out


def svm_grad(scores, label, margin=1.0, coefficient=1.0, linear=False):
    """MXNet's L1/L2-SVM gradient: the true class is pushed above +margin, others below -margin."""
    truth = np.arange(scores.shape[1]) == label.astype(int)[:, None]
    gap = np.where(truth, margin - scores, margin + scores)
    slope = (gap > 0) * (1.0 if linear else 2 * gap) * coefficient
    return np.where(truth, -slope, slope)


def scatter(data, index, shape):
    out = np.zeros(shape)
    out[tuple(index.astype(int))] = data
    return out


def sequence_steps(lengths, steps):
    """(T, N) mask of the steps inside each sequence."""
    return np.arange(steps)[:, None] < lengths[None, :]


def with_nan(*shape):
    def draw(rng):
        values = rng.standard_normal(shape)
        values.reshape(-1)[1] = np.nan
        return values
    return draw


# ----------------------------------------------------------------------------------------------
# The table


@dataclass(frozen=True)
class Case:
    op: str                              # the public mx.nd name
    inputs: tuple                        # one generator per input
    attrs: dict = field(default_factory=dict)
    ref: Callable | None = None          # NumPy forward of the inputs: an array or a list
    grad: tuple | None = None            # indices of inputs to differentiate (None: all)
    train: bool = False                  # run in training mode
    loss_grad: Callable | None = None    # the defined gradient of output layers and BlockGrad
    rtol: float = 1e-5
    atol: float = 1e-7
    tag: str = ''
    marks: tuple = ()

    @property
    def id(self):
        return f'{self.op}-{self.tag}' if self.tag else self.op


def unary(op, ref, draw=None, **kw):
    return Case(op, (draw or normal(2, 3),), ref=ref, **kw)


def binary(op, ref, lhs=None, rhs=None, **kw):
    return Case(op, (lhs or normal(2, 3), rhs or normal(2, 3)), ref=ref, **kw)


ELEMENTWISE = [
    unary('abs', np.abs, away(2, 3)),
    unary('negative', np.negative),
    unary('sign', np.sign, away(2, 3)),
    unary('sqrt', np.sqrt, positive(2, 3)),
    unary('rsqrt', lambda x: 1 / np.sqrt(x), positive(2, 3)),
    unary('cbrt', np.cbrt, away(2, 3)),
    unary('rcbrt', lambda x: 1 / np.cbrt(x), away(2, 3)),
    unary('square', np.square),
    unary('reciprocal', np.reciprocal, away(2, 3)),
    unary('exp', np.exp),
    unary('expm1', np.expm1),
    unary('log', np.log, positive(2, 3)),
    unary('log2', np.log2, positive(2, 3)),
    unary('log10', np.log10, positive(2, 3)),
    unary('log1p', np.log1p, uniform(-0.5, 2, 2, 3)),
    unary('floor', np.floor, off_integers(2, 3)),
    unary('ceil', np.ceil, off_integers(2, 3)),
    unary('round', np.round, off_integers(2, 3)),
    unary('rint', np.rint, off_integers(2, 3)),
    unary('trunc', np.trunc, off_integers(2, 3)),
    unary('fix', np.trunc, off_integers(2, 3)),   # np.fix is deprecated from NumPy 2.5
    unary('sin', np.sin),
    unary('cos', np.cos),
    unary('tan', np.tan, uniform(-1.2, 1.2, 2, 3)),
    unary('arcsin', np.arcsin, uniform(-0.8, 0.8, 2, 3)),
    unary('arccos', np.arccos, uniform(-0.8, 0.8, 2, 3)),
    unary('arctan', np.arctan),
    unary('sinh', np.sinh),
    unary('cosh', np.cosh),
    unary('tanh', np.tanh),
    unary('arcsinh', np.arcsinh),
    unary('arccosh', np.arccosh, uniform(1.2, 3, 2, 3)),
    unary('arctanh', np.arctanh, uniform(-0.8, 0.8, 2, 3)),
    unary('degrees', np.degrees),
    unary('radians', np.radians),
    unary('relu', lambda x: np.maximum(x, 0), away(2, 3)),
    unary('sigmoid', sigmoid),
    unary('softsign', lambda x: x / (1 + np.abs(x))),
    unary('log_sigmoid', lambda x: -np.log1p(np.exp(-x))),
    unary('mish', lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    unary('hard_sigmoid', lambda x: np.clip(0.2 * x + 0.5, 0, 1), away(2, 3, scale=4.0)),
    unary('hard_sigmoid', lambda x: np.clip(0.5 * x + 0.1, 0, 1), away(2, 3, scale=2.0),
          attrs=dict(alpha=0.5, beta=0.1), tag='alpha-beta'),
    unary('erf', erf),
    unary('erfinv', None, uniform(-0.8, 0.8, 2, 3)),
    unary('gamma', np.vectorize(math.gamma), uniform(0.5, 3, 2, 3)),
    unary('gammaln', np.vectorize(math.lgamma), uniform(0.5, 3, 2, 3)),
    unary('logical_not', lambda x: (x == 0).astype(np.float64), away(2, 3)),
    unary('smooth_l1', lambda x: np.where(np.abs(x) < 1, 0.5 * x * x, np.abs(x) - 0.5),
          uniform(-2, 2, 2, 3)),
    unary('smooth_l1', lambda x: np.where(np.abs(x) < 0.25, 2 * x * x, np.abs(x) - 0.125),
          uniform(-1, 1, 2, 3), attrs=dict(scalar=2.0), tag='sigma'),
    unary('clip', lambda x: np.clip(x, -0.5, 0.5), away(2, 3, gap=0.05),
          attrs=dict(a_min=-0.5, a_max=0.5)),
    unary('identity', lambda x: x),
    unary('zeros_like', np.zeros_like),
    unary('ones_like', np.ones_like),
    unary('Cast', lambda x: x, attrs=dict(dtype='float64')),
    unary('_plus_scalar', lambda x: x + 1.5, attrs=dict(scalar=1.5)),
    unary('_minus_scalar', lambda x: x - 1.5, attrs=dict(scalar=1.5)),
    unary('_rminus_scalar', lambda x: 1.5 - x, attrs=dict(scalar=1.5)),
    unary('_mul_scalar', lambda x: x * 1.5, attrs=dict(scalar=1.5)),
    unary('_div_scalar', lambda x: x / 1.5, attrs=dict(scalar=1.5)),
    unary('_rdiv_scalar', lambda x: 1.5 / x, away(2, 3), attrs=dict(scalar=1.5)),
    unary('_power_scalar', lambda x: x ** 3, attrs=dict(scalar=3.0)),
    unary('_rpower_scalar', lambda x: 1.5 ** x, attrs=dict(scalar=1.5)),
    unary('_mod_scalar', lambda x: np.mod(x, 0.7), uniform(0.1, 0.6, 2, 3),
          attrs=dict(scalar=0.7)),
    unary('_maximum_scalar', lambda x: np.maximum(x, 0.1), away(2, 3), attrs=dict(scalar=0.1)),
    unary('_minimum_scalar', lambda x: np.minimum(x, 0.1), away(2, 3), attrs=dict(scalar=0.1)),
    unary('_greater_scalar', lambda x: (x > 0.1).astype(float), away(2, 3),
          attrs=dict(scalar=0.1)),
]

BROADCAST = [
    binary('elemwise_add', np.add),
    binary('elemwise_sub', np.subtract),
    binary('elemwise_mul', np.multiply),
    binary('elemwise_div', np.divide, rhs=away(2, 3)),
    binary('broadcast_add', np.add, rhs=normal(1, 3)),
    binary('broadcast_sub', np.subtract, rhs=normal(2, 1)),
    binary('broadcast_mul', np.multiply, lhs=normal(2, 1, 3), rhs=normal(1, 4, 1)),
    binary('broadcast_div', np.divide, rhs=away(1, 3)),
    binary('broadcast_power', np.power, lhs=positive(2, 3), rhs=normal(1, 3)),
    binary('broadcast_mod', np.mod, lhs=uniform(0.1, 0.6, 2, 3), rhs=const([[0.7, 0.8, 0.9]])),
    binary('broadcast_maximum', np.maximum, lhs=distinct(2, 3), rhs=const([[0.05], [0.15]])),
    binary('broadcast_minimum', np.minimum, lhs=distinct(2, 3), rhs=const([[0.05], [0.15]])),
] + [
    binary(f'broadcast_{name}', (lambda fn: lambda a, b: fn(a, b).astype(float))(fn),
           lhs=distinct(2, 3), rhs=const([[0.05, 1.05, -0.95]]))
    for name, fn in [('equal', np.equal), ('not_equal', np.not_equal), ('greater', np.greater),
                     ('greater_equal', np.greater_equal), ('lesser', np.less),
                     ('lesser_equal', np.less_equal), ('logical_and', np.logical_and),
                     ('logical_or', np.logical_or), ('logical_xor', np.logical_xor)]
] + [
    Case('broadcast_to', (normal(2, 1),), dict(shape=(2, 3)),
         ref=lambda x: np.broadcast_to(x, (2, 3))),
    Case('broadcast_axis', (normal(2, 1, 1),), dict(axis=(1, 2), size=(3, 2)),
         ref=lambda x: np.broadcast_to(x, (2, 3, 2))),
    Case('broadcast_like', (normal(1, 3), normal(2, 3)),
         ref=lambda a, b: np.broadcast_to(a, b.shape)),
    Case('where', (const([[1, 0, 1], [0, 0, 1]]), normal(2, 3), normal(2, 3)),
         ref=lambda c, x, y: np.where(c != 0, x, y), grad=(1, 2)),
]

REDUCTIONS = [
    unary('sum', full(np.sum)),
    Case('sum', (normal(2, 3, 2),), dict(axis=1), ref=lambda x: x.sum(axis=1), tag='axis'),
    Case('sum', (normal(2, 3, 2),), dict(axis=(0, 2), keepdims=True),
         ref=lambda x: x.sum(axis=(0, 2), keepdims=True), tag='keepdims'),
    Case('sum', (normal(2, 3, 2),), dict(axis=1, exclude=True),
         ref=lambda x: x.sum(axis=(0, 2)), tag='exclude'),
    unary('mean', full(np.mean)),
    Case('mean', (normal(2, 3, 2),), dict(axis=-1), ref=lambda x: x.mean(axis=-1), tag='axis'),
    unary('prod', full(np.prod), away(2, 3, gap=0.5)),
    Case('prod', (away(2, 3, gap=0.5),), dict(axis=0), ref=lambda x: x.prod(axis=0),
         tag='axis'),
    unary('max', full(np.max), distinct(2, 3)),
    Case('max', (distinct(2, 3, 2),), dict(axis=1), ref=lambda x: x.max(axis=1), tag='axis'),
    unary('min', full(np.min), distinct(2, 3)),
    Case('min', (distinct(2, 3),), dict(axis=1, keepdims=True),
         ref=lambda x: x.min(axis=1, keepdims=True), tag='axis'),
    unary('norm', full(np.linalg.norm)),
    Case('norm', (away(2, 3),), dict(ord=1, axis=1), ref=lambda x: np.abs(x).sum(axis=1),
         tag='l1-axis'),
    Case('norm', (normal(2, 3, 2),), dict(axis=(1, 2), keepdims=True),
         ref=lambda x: np.sqrt((x * x).sum(axis=(1, 2), keepdims=True)), tag='l2-keepdims'),
    Case('moments', (normal(2, 3, 2),), dict(axes=(0, 2)),
         ref=lambda x: [x.mean(axis=(0, 2)), x.var(axis=(0, 2))]),
    Case('moments', (normal(2, 3),), dict(axes=(1,), keepdims=True),
         ref=lambda x: [x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)],
         tag='keepdims'),
    unary('nansum', lambda x: np.nansum(x).reshape(1), with_nan(2, 3)),
    Case('nansum', (with_nan(2, 3),), dict(axis=0), ref=lambda x: np.nansum(x, axis=0),
         tag='axis'),
    Case('nanprod', (with_nan(2, 3),), dict(axis=1), ref=lambda x: np.nanprod(x, axis=1)),
    unary('argmax', full(np.argmax), distinct(2, 3)),
    Case('argmax', (distinct(2, 3),), dict(axis=1), ref=lambda x: x.argmax(axis=1),
         tag='axis'),
    Case('argmin', (distinct(2, 3),), dict(axis=0), ref=lambda x: x.argmin(axis=0)),
    Case('argmax_channel', (distinct(3, 4),), ref=lambda x: x.argmax(axis=1)),
]

SHAPES = [
    Case('dot', (normal(2, 3), normal(3, 4)), ref=np.dot),
    Case('dot', (normal(3, 2), normal(4, 3)), dict(transpose_a=True, transpose_b=True),
         ref=lambda a, b: a.T @ b.T, tag='transposed'),
    Case('dot', (normal(2, 2, 3), normal(3, 2)), ref=np.dot, tag='3d'),
    Case('batch_dot', (normal(2, 2, 3), normal(2, 3, 4)), ref=np.matmul),
    Case('batch_dot', (normal(2, 3, 2), normal(2, 4, 3)),
         dict(transpose_a=True, transpose_b=True),
         ref=lambda a, b: np.swapaxes(a, 1, 2) @ np.swapaxes(b, 1, 2), tag='transposed'),
    Case('Reshape', (normal(2, 3, 2),), dict(shape=(0, -1)), ref=lambda x: x.reshape(2, 6)),
    Case('Reshape', (normal(2, 3, 2),), dict(shape=(-3, 0)), ref=lambda x: x.reshape(6, 2),
         tag='merge'),
    Case('Reshape', (normal(6, 2),), dict(shape=(-4, 2, 3, -2)),
         ref=lambda x: x.reshape(2, 3, 2), tag='split'),
    Case('reshape_like', (normal(2, 3), normal(3, 2)), ref=lambda a, b: a.reshape(3, 2)),
    Case('Flatten', (normal(2, 3, 2),), ref=lambda x: x.reshape(2, 6)),
    Case('transpose', (normal(2, 3, 4),), ref=lambda x: x.transpose()),
    Case('transpose', (normal(2, 3, 4),), dict(axes=(1, 0, 2)),
         ref=lambda x: x.transpose(1, 0, 2), tag='axes'),
    Case('SwapAxis', (normal(2, 3, 4),), dict(dim1=0, dim2=2),
         ref=lambda x: np.swapaxes(x, 0, 2)),
    Case('expand_dims', (normal(2, 3),), dict(axis=1), ref=lambda x: x[:, None]),
    Case('squeeze', (normal(2, 1, 3, 1),), ref=np.squeeze),
    Case('squeeze', (normal(2, 1, 3, 1),), dict(axis=1), ref=lambda x: x[:, 0], tag='axis'),
    Case('slice', (normal(3, 4),), dict(begin=(0, 1), end=(2, 3)), ref=lambda x: x[0:2, 1:3]),
    Case('slice', (normal(3, 5),), dict(begin=(None, 4), end=(None, 0), step=(2, -2)),
         ref=lambda x: x[::2, 4:0:-2], tag='step'),
    Case('slice_axis', (normal(3, 4),), dict(axis=1, begin=1, end=-1),
         ref=lambda x: x[:, 1:-1]),
    Case('Concat', (normal(2, 1), normal(2, 3)), dict(dim=1),
         ref=lambda a, b: np.concatenate([a, b], axis=1)),
    Case('stack', (normal(2, 3), normal(2, 3)), dict(axis=1),
         ref=lambda a, b: np.stack([a, b], axis=1)),
    Case('SliceChannel', (normal(2, 4),), dict(num_outputs=2),
         ref=lambda x: np.split(x, 2, axis=1)),
    Case('SliceChannel', (normal(3, 2),), dict(num_outputs=3, axis=0, squeeze_axis=True),
         ref=lambda x: [x[0], x[1], x[2]], tag='squeeze'),
    Case('tile', (normal(2, 3),), dict(reps=(2, 1, 2)), ref=lambda x: np.tile(x, (2, 1, 2))),
    Case('repeat', (normal(2, 3),), dict(repeats=2, axis=1), ref=lambda x: np.repeat(x, 2, 1)),
    Case('repeat', (normal(2, 3),), dict(repeats=2), ref=lambda x: np.repeat(x, 2),
         tag='flat'),
    Case('reverse', (normal(2, 3),), dict(axis=1), ref=lambda x: x[:, ::-1]),
    Case('take', (normal(4, 3), const([[0, 3], [3, 1]])),
         ref=lambda a, i: a[i.astype(int)], grad=(0,)),
    Case('take', (normal(2, 3), const([4, -1, 1])), dict(axis=1, mode='wrap'),
         ref=lambda a, i: np.take(a, i.astype(int), axis=1, mode='wrap'), grad=(0,),
         tag='wrap'),
    Case('pick', (normal(3, 4), const([0, 3, 3])),
         ref=lambda a, i: a[np.arange(3), i.astype(int)], grad=(0,)),
    Case('pick', (normal(3, 4), const([[0, 2, 1, 2]])), dict(axis=0, keepdims=True),
         ref=lambda a, i: np.take_along_axis(a, i.astype(int), 0), grad=(0,), tag='axis0'),
    Case('gather_nd', (normal(3, 4), const([[0, 2, 2], [1, 3, 3]])),
         ref=lambda a, i: a[tuple(i.astype(int))], grad=(0,)),
    Case('one_hot', (const([1, 0, 3]),), dict(depth=4),
         ref=lambda i: one_hot(i.astype(int), 4), grad=()),
    Case('Embedding', (const([[0, 2], [2, 3]]), normal(4, 3)), dict(input_dim=4, output_dim=3),
         ref=lambda i, w: w[i.astype(int)], grad=(1,)),
    Case('_contrib_SparseEmbedding', (const([[0, 2], [2, 3]]), normal(4, 3)),
         dict(input_dim=4, output_dim=3), ref=lambda i, w: w[i.astype(int)], grad=(1,)),
    Case('Pad', (normal(1, 2, 3, 3),), dict(mode='constant', pad_width=(0, 0, 0, 0, 1, 2, 2, 1),
                                            constant_value=0.5),
         ref=lambda x: np.pad(x, [(0, 0), (0, 0), (1, 2), (2, 1)], constant_values=0.5)),
    Case('Pad', (normal(1, 2, 3, 3),), dict(mode='edge', pad_width=(0, 0, 0, 0, 1, 2, 2, 1)),
         ref=lambda x: np.pad(x, [(0, 0), (0, 0), (1, 2), (2, 1)], mode='edge'), tag='edge'),
    Case('Pad', (normal(1, 1, 3, 4),), dict(mode='reflect', pad_width=(0, 0, 0, 0, 2, 1, 1, 2)),
         ref=lambda x: np.pad(x, [(0, 0), (0, 0), (2, 1), (1, 2)], mode='reflect'),
         tag='reflect'),
    Case('sort', (distinct(2, 4),), ref=lambda x: np.sort(x, axis=-1)),
    Case('sort', (distinct(3, 2),), dict(axis=0, is_ascend=False),
         ref=lambda x: -np.sort(-x, axis=0), tag='descending'),
    Case('argsort', (distinct(2, 4),), ref=lambda x: np.argsort(x, axis=-1)),
    Case('topk', (distinct(2, 4),), dict(k=2),
         ref=lambda x: topk_indices(x, 2)),
    Case('topk', (distinct(2, 4),), dict(k=2, ret_typ='value'),
         ref=lambda x: np.take_along_axis(x, topk_indices(x, 2), -1), tag='value'),
    Case('topk', (distinct(3, 2),), dict(k=2, axis=0, ret_typ='both', is_ascend=True),
         ref=lambda x: [np.take_along_axis(x, topk_indices(x, 2, 0, True), 0),
                        topk_indices(x, 2, 0, True)], tag='both'),
    Case('topk', (distinct(2, 4),), dict(k=1, ret_typ='mask'),
         ref=lambda x: (x == x.max(axis=-1, keepdims=True)).astype(float), tag='mask'),
    Case('add_n', (normal(2, 3), normal(2, 3), normal(2, 3)), ref=lambda *a: sum(a)),
    Case('ElementWiseSum', (normal(2, 3), normal(2, 3)), ref=np.add),
    Case('cast_storage', (normal(2, 3),), dict(stype='default'), ref=lambda x: x),
    Case('slice_like', (normal(3, 4), normal(2, 3)), ref=lambda a, b: a[:2, :3]),
    Case('slice_like', (normal(3, 4), normal(2, 2)), dict(axes=(1,)),
         ref=lambda a, b: a[:, :2], tag='axes'),
    Case('diag', (normal(3, 3),), dict(k=1), ref=lambda x: np.diag(x, 1)),
    Case('diag', (normal(3),), ref=np.diag, tag='vector'),
    Case('diag', (normal(2, 3, 3),), dict(axis1=1, axis2=2, k=-1),
         ref=lambda x: np.diagonal(x, -1, 1, 2), tag='planes'),
    Case('shape_array', (normal(2, 3),), ref=lambda x: np.array([2, 3]), grad=()),
    Case('size_array', (normal(2, 3),), ref=lambda x: np.array([6]), grad=()),
    Case('scatter_nd', (normal(3), const([[0, 1, 1], [2, 0, 2]])), dict(shape=(2, 3)),
         ref=lambda d, i: scatter(d, i, (2, 3)), grad=(0,)),
    Case('khatri_rao', (normal(2, 3), normal(3, 3)),
         ref=lambda a, b: np.einsum('ir,jr->ijr', a, b).reshape(6, 3)),
    Case('depth_to_space', (normal(1, 8, 2, 3),), dict(block_size=2),
         ref=lambda x: x.reshape(1, 2, 2, 2, 2, 3).transpose(0, 3, 4, 1, 5, 2).reshape(
             1, 2, 4, 6)),
    Case('space_to_depth', (normal(1, 2, 4, 6),), dict(block_size=2),
         ref=lambda x: x.reshape(1, 2, 2, 2, 3, 2).transpose(0, 3, 5, 1, 2, 4).reshape(
             1, 8, 2, 3)),
    Case('SequenceMask', (normal(4, 3, 2), const([2, 4, 1])),
         dict(use_sequence_length=True, value=-1.0),
         ref=lambda x, n: np.where(sequence_steps(n, 4)[..., None], x, -1.0), grad=(0,)),
    Case('SequenceMask', (normal(3, 2),), ref=lambda x: x, tag='no-length'),
    Case('SequenceLast', (normal(4, 3, 2), const([2, 4, 1])), dict(use_sequence_length=True),
         ref=lambda x, n: x[n.astype(int) - 1, np.arange(3)], grad=(0,)),
    Case('SequenceLast', (normal(2, 4, 3), const([3, 1])),
         dict(use_sequence_length=True, axis=1),
         ref=lambda x, n: x[np.arange(2), n.astype(int) - 1], grad=(0,), tag='axis1'),
    Case('SequenceReverse', (normal(4, 3), const([2, 4, 3])), dict(use_sequence_length=True),
         ref=lambda x, n: np.stack([np.concatenate([x[:k, j][::-1], x[k:, j]])
                                    for j, k in enumerate(n.astype(int))], axis=1),
         grad=(0,)),
    Case('SequenceReverse', (normal(3, 2, 2),), ref=lambda x: x[::-1], tag='no-length'),
]


def conv_case(tag, data, weight, bias=None, **attrs):
    inputs = (data, weight) + ((bias,) if bias is not None else ())
    return Case('Convolution', inputs, attrs, tag=tag,
                ref=lambda x, w, b=None: conv(x, w, b, **attrs))


def deconv_case(tag, data, weight, bias=None, **attrs):
    inputs = (data, weight) + ((bias,) if bias is not None else ())
    return Case('Deconvolution', inputs, attrs, tag=tag,
                ref=lambda x, w, b=None: deconv(x, w, b, **attrs))


def pool_case(tag, data, **attrs):
    draw = distinct(*data) if attrs.get('pool_type', 'max') == 'max' else normal(*data)
    return Case('Pooling', (draw,), attrs, tag=tag, ref=lambda x: pool(x, **attrs))


CONVOLUTION = [
    conv_case('1d', normal(2, 2, 5), normal(3, 2, 3), normal(3), kernel=(3,), num_filter=3),
    conv_case('2d-stride-pad', normal(1, 2, 5, 4), normal(2, 2, 3, 2), normal(2),
              kernel=(3, 2), stride=(2, 1), pad=(1, 1), num_filter=2),
    conv_case('2d-dilate-nobias', normal(1, 1, 5, 5), normal(2, 1, 2, 2), kernel=(2, 2),
              dilate=(2, 2), num_filter=2, no_bias=True),
    conv_case('2d-groups', normal(1, 4, 3, 3), normal(4, 2, 2, 2), normal(4), kernel=(2, 2),
              num_filter=4, num_group=2),
    conv_case('3d', normal(1, 1, 3, 3, 3), normal(2, 1, 2, 2, 2), normal(2),
              kernel=(2, 2, 2), pad=(1, 0, 0), num_filter=2),
    Case('Convolution', (normal(1, 4, 3, 2), normal(3, 2, 2, 2), normal(3)),
         dict(kernel=(2, 2), num_filter=3, layout='NHWC'), tag='2d-nhwc',
         ref=lambda x, w, b: conv(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), b,
                                  kernel=(2, 2)).transpose(0, 2, 3, 1)),
    deconv_case('1d', normal(1, 2, 3), normal(2, 2, 3), kernel=(3,), num_filter=2),
    deconv_case('2d-stride-pad-adj', normal(1, 2, 2, 3), normal(2, 1, 3, 3), normal(1),
                kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 0), num_filter=1,
                no_bias=False),
    deconv_case('2d-groups-dilate', normal(1, 2, 3, 3), normal(2, 1, 2, 2), kernel=(2, 2),
                dilate=(2, 1), num_filter=2, num_group=2),
    Case('FullyConnected', (normal(2, 3), normal(4, 3), normal(4)), dict(num_hidden=4),
         ref=lambda x, w, b: x @ w.T + b),
    Case('FullyConnected', (normal(2, 2, 3), normal(4, 3)),
         dict(num_hidden=4, no_bias=True, flatten=False), ref=lambda x, w: x @ w.T,
         tag='no-flatten'),
    Case('FullyConnected', (normal(2, 2, 2), normal(3, 4), normal(3)), dict(num_hidden=3),
         ref=lambda x, w, b: x.reshape(2, 4) @ w.T + b, tag='flatten'),
    pool_case('max-2d', (1, 2, 4, 4), kernel=(2, 2), stride=(2, 2)),
    pool_case('max-pad-full', (1, 1, 5, 4), kernel=(3, 2), stride=(2, 2), pad=(1, 0),
              pooling_convention='full'),
    pool_case('avg-2d-pad', (1, 2, 4, 3), kernel=(2, 2), pad=(1, 1), pool_type='avg'),
    pool_case('avg-exclude-pad', (1, 1, 3, 3), kernel=(2, 2), pad=(1, 1), pool_type='avg',
              count_include_pad=False),
    pool_case('sum-1d', (2, 2, 5), kernel=(2,), stride=(2,), pool_type='sum'),
    pool_case('lp-2d', (1, 2, 3, 3), kernel=(2, 2), pool_type='lp', p_value=2),
    pool_case('max-3d', (1, 1, 3, 3, 3), kernel=(2, 2, 2)),
    pool_case('global-avg', (2, 2, 3, 3), global_pool=True, pool_type='avg'),
    Case('Pooling', (distinct(1, 4, 4, 2),), dict(kernel=(2, 2), stride=(2, 2), layout='NHWC'),
         ref=lambda x: pool(x.transpose(0, 3, 1, 2), kernel=(2, 2), stride=(2, 2)).transpose(
             0, 2, 3, 1), tag='max-nhwc'),
    Case('UpSampling', (normal(1, 2, 2, 2),), dict(scale=2, sample_type='nearest'),
         ref=lambda x: x.repeat(2, axis=2).repeat(2, axis=3)),
    Case('UpSampling', (normal(1, 1, 2, 2), normal(1, 2, 4, 4)),
         dict(scale=2, sample_type='nearest', num_args=2),
         ref=lambda a, b: np.concatenate([a.repeat(2, 2).repeat(2, 3), b], axis=1),
         tag='concat'),
    Case('UpSampling', (normal(1, 2, 1, 1), normal(1, 2, 2, 2)),
         dict(scale=2, sample_type='nearest', num_args=2, multi_input_mode='sum'),
         ref=lambda a, b: a.repeat(2, 2).repeat(2, 3) + b, tag='sum'),
    Case('UpSampling', (normal(1, 2, 2, 3), normal(2, 1, 4, 4)),
         dict(scale=2, sample_type='bilinear', num_filter=2, num_args=2),
         ref=lambda x, w: deconv(x, w, kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_group=2),
         tag='bilinear'),
]

BN_INPUTS = (normal(3, 2, 2), positive(2), normal(2), normal(2), positive(2))
NORMALIZATION = [
    Case('BatchNorm', BN_INPUTS, dict(fix_gamma=False), train=True, grad=(0, 1, 2),
         ref=lambda *a: batch_norm(*a, fix_gamma=False), rtol=1e-4, tag='train'),
    Case('BatchNorm', BN_INPUTS, train=True, grad=(0, 1, 2),
         ref=lambda *a: batch_norm(*a), rtol=1e-4, tag='train-fix-gamma'),
    Case('BatchNorm', (normal(2, 3, 2), positive(2), normal(2), normal(2), positive(2)),
         dict(axis=-1, fix_gamma=False, eps=1e-2), train=True, grad=(0, 1, 2),
         ref=lambda *a: batch_norm(*a, axis=-1, fix_gamma=False, eps=1e-2), rtol=1e-4,
         tag='train-last-axis'),
    Case('BatchNorm', BN_INPUTS, dict(fix_gamma=False), grad=(0, 1, 2),
         ref=lambda *a: batch_norm(*a, fix_gamma=False, train=False), tag='predict'),
    Case('BatchNorm', BN_INPUTS, dict(fix_gamma=False, use_global_stats=True), train=True,
         grad=(0, 1, 2), ref=lambda *a: batch_norm(*a, fix_gamma=False, train=False),
         tag='global-stats'),
    Case('LayerNorm', (normal(2, 4), positive(4), normal(4)), ref=layer_norm, rtol=1e-4),
    Case('LayerNorm', (normal(2, 3, 2), positive(3), normal(3)), dict(axis=1),
         ref=lambda x, g, b: layer_norm(x, g, b, axis=1), rtol=1e-4, tag='axis1'),
    Case('InstanceNorm', (normal(2, 2, 3), positive(2), normal(2)), ref=instance_norm,
         rtol=1e-4),
    Case('L2Normalization', (normal(2, 3, 2),),
         ref=lambda x: x / np.sqrt((x * x).sum(axis=(1, 2), keepdims=True) + 1e-10)),
    Case('L2Normalization', (normal(2, 3, 2),), dict(mode='channel'),
         ref=lambda x: x / np.sqrt((x * x).sum(axis=1, keepdims=True) + 1e-10), tag='channel'),
    Case('L2Normalization', (normal(2, 2, 2, 2),), dict(mode='spatial', eps=0.1),
         ref=lambda x: x / np.sqrt((x * x).sum(axis=(2, 3), keepdims=True) + 0.1),
         tag='spatial'),
    Case('ROIPooling', (distinct(1, 2, 6, 6), const([[0, 0, 0, 4, 4], [0, 2, 1, 5, 5]])),
         dict(pooled_size=(2, 2), spatial_scale=1.0), grad=(0,),
         ref=lambda d, r: roi_pool(d, r, (2, 2), 1.0)),
    Case('ROIPooling', (distinct(2, 1, 4, 4), const([[1, 0, 0, 7, 7]])),
         dict(pooled_size=(3, 2), spatial_scale=0.5), grad=(0,),
         ref=lambda d, r: roi_pool(d, r, (3, 2), 0.5), tag='scaled'),
    Case('LRN', (normal(1, 4, 2, 2),), dict(nsize=3, alpha=0.5), ref=lambda x: lrn(
        x, alpha=0.5, nsize=3)),
    Case('softmax', (normal(2, 4),), ref=softmax),
    Case('softmax', (normal(3, 2),), dict(axis=0, temperature=2.0),
         ref=lambda x: softmax(x, 0, 2.0), tag='axis-temperature'),
    Case('softmax', (normal(2, 4), const([2, 3])), dict(use_length=True),
         ref=lambda x, n: np.where(np.arange(4) < n[:, None], softmax(
             np.where(np.arange(4) < n[:, None], x, -np.inf)), 0), grad=(0,), tag='length'),
    Case('log_softmax', (normal(2, 4),), ref=lambda x: np.log(softmax(x))),
    Case('log_softmax', (normal(3, 2),), dict(axis=0), ref=lambda x: np.log(softmax(x, 0)),
         tag='axis0'),
    Case('softmin', (normal(2, 4),), ref=lambda x: softmax(-x)),
]

ACTIVATIONS = [
    Case('Activation', (away(2, 3),), dict(act_type='relu'), ref=lambda x: np.maximum(x, 0),
         tag='relu'),
    Case('Activation', (normal(2, 3),), dict(act_type='sigmoid'), ref=sigmoid, tag='sigmoid'),
    Case('Activation', (normal(2, 3),), dict(act_type='tanh'), ref=np.tanh, tag='tanh'),
    Case('Activation', (normal(2, 3),), dict(act_type='softrelu'),
         ref=lambda x: np.log1p(np.exp(x)), tag='softrelu'),
    Case('Activation', (normal(2, 3),), dict(act_type='softsign'),
         ref=lambda x: x / (1 + np.abs(x)), tag='softsign'),
    Case('LeakyReLU', (away(2, 3),), ref=lambda x: np.where(x > 0, x, 0.25 * x), tag='leaky'),
    Case('LeakyReLU', (away(2, 3, 2), positive(3, low=0.1, high=0.5)), dict(act_type='prelu'),
         ref=lambda x, g: np.where(x > 0, x, g.reshape(1, 3, 1) * x), tag='prelu'),
    Case('LeakyReLU', (away(2, 3),), dict(act_type='elu', slope=0.7),
         ref=lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)), tag='elu'),
    Case('LeakyReLU', (away(2, 3),), dict(act_type='selu'),
         ref=lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772
                                                      * np.expm1(x)), tag='selu'),
    Case('LeakyReLU', (normal(2, 3),), dict(act_type='gelu'),
         ref=lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))), tag='gelu'),
    Case('LeakyReLU', (away(2, 3),), dict(act_type='rrelu'),
         ref=lambda x: np.where(x > 0, x, (0.125 + 0.334) / 2 * x), tag='rrelu-predict'),
    Case('Dropout', (normal(2, 3),), dict(p=0.5), ref=lambda x: x, tag='predict'),
]


def rnn_case(mode, tag='', width=3, hidden=2, layers=1, directions=1, ref=True, **attrs):
    count = rnn_param_count(mode, width, hidden, layers, directions)
    states = (layers * directions, 2, hidden)
    inputs = (normal(3, 2, width), uniform(-0.5, 0.5, count), normal(*states))
    inputs += (normal(*states),) if mode == 'lstm' else ()
    attrs = dict(mode=mode, state_size=hidden, num_layers=layers,
                 bidirectional=directions == 2, **attrs)
    def reference(x, params, h, c=None):
        outputs = rnn(x, params, h, c, mode, hidden)
        return outputs if attrs.get('state_outputs') else outputs[0]
    return Case('RNN', inputs, attrs, ref=reference if ref else None, tag=tag or mode,
                rtol=1e-4)


RECURRENT = [
    rnn_case('rnn_tanh'),
    rnn_case('rnn_relu', state_outputs=True),
    rnn_case('lstm', state_outputs=True),
    rnn_case('gru'),
    rnn_case('lstm', 'lstm-2-layers-bidirectional', width=2, layers=2, directions=2, ref=False),
    rnn_case('gru', 'gru-bidirectional-states', width=2, directions=2, ref=False,
             state_outputs=True),
]


def softmax_output_grad(x, label):
    return [softmax(x) - one_hot(label.astype(int), x.shape[-1]), None]


def regression_grad(forward, slope=lambda d: d):
    return lambda x, label: [slope(forward(x) - label) / (x.size // x.shape[0]), None]


# Output layers and BlockGrad: their backward is a defined gradient, not the forward's.
DEFINED_GRADIENTS = [
    Case('SoftmaxOutput', (normal(3, 4), const([0, 3, 1])), ref=lambda x, _: softmax(x),
         loss_grad=softmax_output_grad),
    Case('SoftmaxOutput', (normal(3, 4), const([0, 3, 1])), dict(grad_scale=2.0,
                                                                  normalization='batch'),
         ref=lambda x, _: softmax(x), tag='batch-normalized',
         loss_grad=lambda x, label: [2.0 / 3 * softmax_output_grad(x, label)[0], None]),
    Case('LinearRegressionOutput', (normal(2, 3), normal(2, 3)), ref=lambda x, _: x,
         loss_grad=regression_grad(lambda x: x)),
    Case('LogisticRegressionOutput', (normal(2, 3), uniform(0, 1, 2, 3)),
         ref=lambda x, _: sigmoid(x), loss_grad=regression_grad(sigmoid)),
    Case('MAERegressionOutput', (normal(2, 3), normal(2, 3)), ref=lambda x, _: x,
         loss_grad=regression_grad(lambda x: x, np.sign)),
    Case('MakeLoss', (normal(2, 3),), ref=lambda x: x, loss_grad=lambda x: [np.ones_like(x)]),
    Case('MakeLoss', (normal(2, 3),), dict(grad_scale=3.0, normalization='batch'),
         ref=lambda x: x, loss_grad=lambda x: [np.full_like(x, 1.5)], tag='batch'),
    Case('BlockGrad', (normal(2, 3),), ref=lambda x: x, loss_grad=lambda x: [np.zeros_like(x)]),
    Case('SVMOutput', (normal(3, 4), const([0, 3, 1])), ref=lambda x, _: x,
         loss_grad=lambda x, label: [svm_grad(x, label), None]),
    Case('SVMOutput', (normal(3, 4), const([2, 2, 0])),
         dict(use_linear=True, margin=0.5, regularization_coefficient=2.0), ref=lambda x, _: x,
         loss_grad=lambda x, label: [svm_grad(x, label, 0.5, 2.0, True), None], tag='linear'),
    Case('softmax_cross_entropy', (normal(3, 4), const([0, 3, 1])), grad=(0,),
         ref=lambda x, label: -np.log(softmax(x)[np.arange(3), label.astype(int)]).sum(
             keepdims=True)),
]


def spd(*shape):
    """Symmetric positive-definite matrices (..., n, n)."""
    def draw(rng):
        a = rng.standard_normal(shape)
        return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])
    return draw


def lower_triangular(*shape):
    def draw(rng):
        a = np.tril(rng.standard_normal(shape))
        return a + np.eye(shape[-1]) * (1.5 + np.sign(np.diagonal(a, 0, -2, -1))[..., None])
    return draw


def swap(x):
    return np.swapaxes(x, -1, -2)


def syevd(a):
    """Eigenvectors in rows, each with its entry of largest magnitude positive (MXNet's)."""
    values, vectors = np.linalg.eigh(a)
    rows = vectors.T
    return [rows * np.sign(rows[np.arange(len(rows)), np.abs(rows).argmax(1)])[:, None], values]


def upper_packed(a):
    """(n, 3) values as the strict upper triangles of 3x3 matrices, column by column."""
    out = np.zeros((len(a), 3, 3))
    out[:, [0, 0, 1], [1, 2, 2]] = a
    return out


def per_matrix(values):
    """MXNet's shape of one value per matrix: (1,) for a single matrix."""
    return np.asarray(values).reshape(np.shape(values) or (1,))


# potrf and syevd read the lower triangle but return MXNet's symmetric gradient, which finite
# differences of single entries cannot see: tests/test_mxnet_op_fixtures.py checks them
LINALG = [
    Case('linalg_gemm', (normal(2, 2, 3), normal(2, 3, 2), normal(2, 2, 2)),
         dict(alpha=0.5, beta=2.0), ref=lambda a, b, c: 0.5 * a @ b + 2 * c),
    Case('linalg_gemm2', (normal(2, 3), normal(4, 2)), dict(transpose_a=True, transpose_b=True),
         ref=lambda a, b: a.T @ b.T),
    Case('linalg_gemm2', (normal(2, 3, 2, 2), normal(2, 2, 2, 3)), dict(axis=1),
         ref=lambda a, b: np.einsum('aibj,ajbk->aibk', a, b), tag='axis'),
    Case('linalg_syrk', (normal(2, 3),), dict(alpha=2.0), ref=lambda a: 2 * a @ a.T),
    Case('linalg_trmm', (normal(3, 3), normal(3, 2)), ref=lambda a, b: np.tril(a) @ b),
    Case('linalg_trmm', (normal(3, 3), normal(2, 3)), dict(rightside=True, lower=False,
                                                            transpose=True),
         ref=lambda a, b: b @ np.triu(a).T, tag='right-upper'),
    Case('linalg_trsm', (lower_triangular(2, 3, 3), normal(2, 3, 2)), dict(alpha=2.0),
         ref=lambda a, b: np.linalg.solve(a, 2 * b)),
    Case('linalg_trsm', (lower_triangular(3, 3), normal(2, 3)),
         dict(rightside=True, transpose=True), ref=lambda a, b: b @ np.linalg.inv(a.T),
         tag='right-transpose'),
    Case('linalg_potrf', (spd(2, 3, 3),), ref=np.linalg.cholesky, grad=()),
    Case('linalg_potri', (lower_triangular(3, 3),), ref=lambda a: np.linalg.inv(a @ a.T)),
    Case('linalg_gelqf', (normal(2, 3),),
         ref=lambda a: [swap(np.linalg.qr(a.T)[0]), swap(np.linalg.qr(a.T)[1])], rtol=1e-4),
    Case('linalg_syevd', (spd(3, 3),), ref=syevd, grad=()),
    Case('linalg_inverse', (spd(2, 2, 2),), ref=np.linalg.inv),
    Case('linalg_det', (normal(2, 3, 3),), ref=np.linalg.det),
    Case('linalg_slogdet', (normal(3, 3),),
         ref=lambda a: [per_matrix(v) for v in np.linalg.slogdet(a)]),
    Case('linalg_sumlogdiag', (spd(2, 3, 3),),
         ref=lambda a: np.log(np.diagonal(a, 0, -2, -1)).sum(-1)),
    Case('linalg_extractdiag', (normal(2, 3, 3),), dict(offset=1),
         ref=lambda a: np.diagonal(a, 1, -2, -1)),
    Case('linalg_makediag', (normal(2, 3),), dict(offset=-1),
         ref=lambda a: np.stack([np.diag(v, -1) for v in a])),
    Case('linalg_extracttrian', (normal(3, 3),), ref=lambda a: a[np.tril_indices(3)]),
    Case('linalg_maketrian', (normal(2, 3),), dict(offset=1),
         ref=upper_packed),
]


def resize_rows(out_size, in_size, align_corners=True):
    """1-D linear interpolation weights (out_size, in_size), MXNet's BilinearResize2D."""
    dst = np.arange(out_size)
    if align_corners:
        src = dst * ((in_size - 1) / (out_size - 1))
    else:
        src = np.maximum((dst + 0.5) * in_size / out_size - 0.5, 0)
    low = np.minimum(np.floor(src).astype(int), in_size - 1)
    weights = np.zeros((out_size, in_size))
    np.add.at(weights, (dst, low), 1 - (src - low))
    np.add.at(weights, (dst, np.minimum(low + 1, in_size - 1)), src - low)
    return weights


def bins(out_size, in_size):
    """Adaptive average pooling's averaging weights (out_size, in_size)."""
    weights = np.zeros((out_size, in_size))
    for i in range(out_size):
        start, stop = i * in_size // out_size, -(-(i + 1) * in_size // out_size)
        weights[i, start:stop] = 1 / (stop - start)
    return weights


def heads_split(x, heads, parts):
    """(seq, batch, heads*parts*dim) -> parts arrays of (batch*heads, seq, dim)."""
    seq, batch, width = x.shape
    dim = width // (heads * parts)
    split = x.reshape(seq, batch, heads, parts, dim).transpose(3, 1, 2, 0, 4)
    return split.reshape(parts, batch * heads, seq, dim)


def heads_join(x, batch):
    """(batch*heads, seq, dim) -> (seq, batch, heads*dim)."""
    return x.reshape(batch, -1, *x.shape[1:]).transpose(2, 0, 1, 3).reshape(x.shape[1], batch,
                                                                             -1)


def index_copy(old, index, new):
    out = old.copy()
    out[index.astype(int)] = new
    return out


# gradientmultiplier and the straight-through estimators have defined gradients, not the
# forward's: tests/test_mxnet_op_fixtures.py checks them against MXNet
CONTRIB = [
    Case('_contrib_arange_like', (normal(2, 3),), dict(start=1, step=0.5, repeat=2),
         ref=lambda x: (1 + 0.5 * (np.arange(6) // 2)).reshape(2, 3)),
    Case('_contrib_index_array', (normal(2, 3),), ref=lambda x: np.stack(np.indices((2, 3)), -1),
         grad=()),
    Case('_contrib_index_copy', (normal(4, 2), const([3, 0]), normal(2, 2)), ref=index_copy,
         grad=(0, 2)),
    Case('_contrib_quadratic', (normal(2, 3),), dict(a=0.5, b=-1, c=2),
         ref=lambda x: 0.5 * x * x - x + 2),
    Case('_contrib_div_sqrt_dim', (normal(2, 4),), ref=lambda x: x / 2),
    Case('_contrib_gradientmultiplier', (normal(2, 3),), dict(scalar=-1), ref=lambda x: x,
         grad=()),
    Case('_contrib_round_ste', (off_integers(2, 3),), ref=np.round, grad=()),
    Case('_contrib_sign_ste', (away(2, 3),), ref=np.sign, grad=()),
    Case('_contrib_BilinearResize2D', (normal(1, 2, 3, 4),), dict(height=4, width=3),
         ref=lambda x: resize_rows(4, 3) @ x @ resize_rows(3, 4).T),
    Case('_contrib_BilinearResize2D', (normal(1, 1, 4, 3),),
         dict(height=3, width=5, align_corners=False),
         ref=lambda x: resize_rows(3, 4, False) @ x @ resize_rows(5, 3, False).T,
         tag='half-pixel'),
    Case('_contrib_BilinearResize2D', (normal(1, 1, 2, 3), normal(1, 1, 3, 2)), dict(mode='like'),
         ref=lambda x, like: resize_rows(3, 2) @ x @ resize_rows(2, 3).T, grad=(0,),
         tag='like'),
    Case('_contrib_AdaptiveAvgPooling2D', (normal(1, 2, 5, 4),), dict(output_size=(2, 3)),
         ref=lambda x: bins(2, 5) @ x @ bins(3, 4).T),
    Case('_contrib_interleaved_matmul_selfatt_qk', (normal(3, 2, 12),), dict(heads=2),
         ref=lambda x: (lambda q, k, v: q @ np.swapaxes(k, 1, 2) / np.sqrt(2))(
             *heads_split(x, 2, 3))),
    Case('_contrib_interleaved_matmul_selfatt_valatt', (normal(3, 2, 12), normal(4, 3, 3)),
         dict(heads=2), ref=lambda x, att: heads_join(att @ heads_split(x, 2, 3)[2], 2)),
    Case('_contrib_interleaved_matmul_encdec_qk', (normal(2, 2, 4), normal(3, 2, 8)),
         dict(heads=2), ref=lambda q, kv: heads_split(q, 2, 1)[0] @ np.swapaxes(
             heads_split(kv, 2, 2)[0], 1, 2) / np.sqrt(2)),
    Case('_contrib_interleaved_matmul_encdec_valatt', (normal(3, 2, 8), normal(4, 2, 3)),
         dict(heads=2), ref=lambda kv, att: heads_join(att @ heads_split(kv, 2, 2)[1], 2)),
    Case('_contrib_count_sketch', (normal(2, 3), const([[0, 3, 0]]), const([[1, -1, -1]])),
         dict(out_dim=4), ref=lambda x, h, s: np.stack([x[:, 0] - x[:, 2], 0 * x[:, 0],
                                                        0 * x[:, 0], -x[:, 1]], axis=1),
         grad=(0,)),
    Case('_contrib_SyncBatchNorm', BN_INPUTS, dict(fix_gamma=False, key='table'), train=True,
         grad=(0, 1, 2), rtol=1e-4, ref=lambda *a: batch_norm(*a, fix_gamma=False)),
    Case('_contrib_BatchNormWithReLU', BN_INPUTS, dict(fix_gamma=False), train=True,
         grad=(0, 1, 2), rtol=1e-4,
         ref=lambda *a: np.maximum(batch_norm(*a, fix_gamma=False), 0)),
]


def box_iou(a, b):
    low = np.maximum(a[:, None, :2], b[None, :, :2])
    high = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(high - low, 0, None).prod(-1)
    area = lambda x: (x[:, 2:] - x[:, :2]).prod(-1)
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def roi_align_1x1(data, rois):
    """ROIAlign with one bin and one sample: bilinear interpolation at each region's centre
    (regions are at least 1x1)."""
    out = []
    for batch, x1, y1, x2, y2 in rois:
        y, x = y1 + max(y2 - y1, 1) / 2, x1 + max(x2 - x1, 1) / 2
        top, left = int(y), int(x)
        fy, fx = y - top, x - left
        plane = data[int(batch)]
        out.append((1 - fy) * ((1 - fx) * plane[:, top, left] + fx * plane[:, top, left + 1])
                   + fy * ((1 - fx) * plane[:, top + 1, left] + fx * plane[:, top + 1, left + 1]))
    return np.array(out)[:, :, None, None]


# Boxes far from every threshold, so that finite differences keep the same decisions.
NMS_ROWS = [[0, 0.9, 0.1, 0.1, 0.5, 0.5], [0, 0.8, 0.12, 0.1, 0.52, 0.5],
            [1, 0.7, 0.6, 0.6, 0.9, 0.9], [0, 0.05, 0.6, 0.1, 0.9, 0.3]]

# box_iou, box_decode and MultiBoxPrior pass MXNet's zero gradient, not their derivative; greedy
# operators are in SKIPPED: tests/test_mxnet_op_fixtures.py checks them all against MXNet
DETECTION = [
    Case('_contrib_box_iou', (const([[0, 0, 1, 1], [0.5, 0.5, 2, 1.5]]),
                              const([[0, 0, 2, 2], [0.5, 0, 1, 1], [0.2, 0.3, 0.9, 1.2]])),
         ref=box_iou, grad=()),
    Case('_contrib_box_nms', (const(NMS_ROWS),), dict(overlap_thresh=0.5, valid_thresh=0.1),
         ref=lambda d: np.concatenate([d[[0, 2]], -np.ones((2, 6))])),
    Case('_contrib_box_decode', (normal(1, 3, 4), const([[[0.1, 0.2, 0.5, 0.6],
                                                         [0.3, 0.3, 0.4, 0.9],
                                                         [0, 0, 1, 1]]])),
         dict(format='corner', std0=0.5, std1=0.5),
         ref=lambda d, a: (lambda c, s: np.concatenate([
             d[..., :2] * 0.5 * s + c - np.exp(d[..., 2:]) * s / 2,
             d[..., :2] * 0.5 * s + c + np.exp(d[..., 2:]) * s / 2], -1))(
             (a[..., :2] + a[..., 2:]) / 2, a[..., 2:] - a[..., :2]), grad=()),
    Case('_contrib_MultiBoxPrior', (normal(1, 1, 1, 2),), dict(sizes=(0.5,), ratios=(1, 4)),
         ref=lambda x: np.array([[[0.125, 0.25, 0.375, 0.75], [0, 0.375, 0.5, 0.625],
                                  [0.625, 0.25, 0.875, 0.75], [0.5, 0.375, 1, 0.625]]]),
         rtol=1e-6, grad=()),
    Case('_contrib_ROIAlign', (normal(2, 2, 4, 4), const([[1, 0.5, 0.6, 2.3, 2.1],
                                                          [0, 1.1, 0.2, 2.0, 1.8]])),
         dict(pooled_size=(1, 1), spatial_scale=1.0, sample_ratio=1), ref=roi_align_1x1,
         grad=(0,)),
    Case('_contrib_RROIAlign', (normal(1, 2, 5, 5), const([[0, 2.3, 2.1, 2.2, 1.6, 35.0]])),
         dict(pooled_size=(1, 1), spatial_scale=1.0, sampling_ratio=1),
         ref=lambda d, r: roi_align_1x1(d, np.array([[0, 2.3 - 0.5, 2.1 - 0.5, 2.3 + 0.5,
                                                      2.1 + 0.5]])), grad=(0,)),
    Case('_contrib_DeformablePSROIPooling', (normal(1, 1, 4, 4), const([[0, 0, 0, 2, 2]]),
                                             const(np.zeros((1, 2, 1, 1)))),
         dict(spatial_scale=1.0, output_dim=1, group_size=1, pooled_size=1,
              sample_per_part=2, trans_std=0.1),
         ref=lambda d, r, t: d[:, :, :2, :2].mean(axis=(2, 3), keepdims=True), grad=(0,)),
    Case('_contrib_PSROIPooling', (normal(1, 4, 4, 4), const([[0, 0, 0, 2, 3]])),
         dict(spatial_scale=1.0, output_dim=1, pooled_size=2),
         ref=lambda d, r: np.array([[[[d[0, 0, :2, :2].mean(), d[0, 1, :2, 1:3].mean()],
                                      [d[0, 2, 2:4, :2].mean(), d[0, 3, 2:4, 1:3].mean()]]]]),
         grad=(0,)),
]


def sample_bilinear(data, grid):
    """BilinearSampler one point at a time: zeros outside the input."""
    n, c, h, w = data.shape
    out = np.zeros((n, c) + grid.shape[2:])
    for b, i, j in np.ndindex(n, *grid.shape[2:]):
        x, y = (grid[b, 0, i, j] + 1) * (w - 1) / 2, (grid[b, 1, i, j] + 1) * (h - 1) / 2
        for row in (math.floor(y), math.floor(y) + 1):
            for col in (math.floor(x), math.floor(x) + 1):
                if 0 <= row < h and 0 <= col < w:
                    out[b, :, i, j] += (1 - abs(y - row)) * (1 - abs(x - col)) * data[b, :, row,
                                                                                        col]
    return out


def affine_grid(theta, height, width):
    y, x = np.meshgrid(np.linspace(-1, 1, height), np.linspace(-1, 1, width), indexing='ij')
    base = np.stack([x.ravel(), y.ravel(), np.ones(x.size)])
    return (theta.reshape(-1, 2, 3) @ base).reshape(-1, 2, height, width)


def correlation(a, b, displacement):
    """Correlation with kernel 1, strides 1 and pad = max displacement."""
    pad = displacement
    a, b = (np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))) for x in (a, b))
    h, w = a.shape[2] - 2 * pad, a.shape[3] - 2 * pad
    out = []
    for dy in range(-displacement, displacement + 1):
        for dx in range(-displacement, displacement + 1):
            out.append((a[:, :, pad:pad + h, pad:pad + w]
                        * b[:, :, pad + dy:pad + dy + h, pad + dx:pad + dx + w]).mean(axis=1))
    return np.stack(out, axis=1)


SPATIAL = [
    Case('GridGenerator', (normal(2, 6),), dict(transform_type='affine', target_shape=(2, 3)),
         ref=lambda t: affine_grid(t, 2, 3)),
    Case('GridGenerator', (normal(1, 2, 2, 3),), dict(transform_type='warp'),
         ref=lambda f: f / np.array([1.0, 0.5]).reshape(1, 2, 1, 1)
         + affine_grid(np.array([1.0, 0, 0, 0, 1, 0]), 2, 3), tag='warp'),
    Case('BilinearSampler', (normal(1, 2, 3, 4), uniform(-1.1, 1.1, 1, 2, 2, 3)),
         ref=sample_bilinear),
    Case('SpatialTransformer', (normal(1, 1, 3, 3), const([[0.9, 0.1, 0.05, -0.1, 0.7, 0.13]])),
         dict(target_shape=(2, 2), transform_type='affine', sampler_type='bilinear'),
         ref=lambda d, t: sample_bilinear(d, affine_grid(t, 2, 2))),
    Case('Correlation', (normal(1, 2, 3, 4), normal(1, 2, 3, 4)),
         dict(max_displacement=1, pad_size=1), ref=lambda a, b: correlation(a, b, 1)),
    Case('Crop', (normal(1, 2, 4, 5),), dict(h_w=(2, 3), offset=(1, 1)),
         ref=lambda x: x[:, :, 1:3, 1:4]),
    Case('Crop', (normal(1, 1, 5, 4), normal(1, 1, 3, 2)), dict(num_args=2, center_crop=True),
         ref=lambda x, like: x[:, :, 1:4, 1:3], grad=(0,), tag='like'),
]


def group_norm(x, gamma, beta, groups, eps=1e-5):
    split = x.reshape(x.shape[0], groups, -1)
    normal = (split - split.mean(-1, keepdims=True)) / np.sqrt(split.var(-1, keepdims=True)
                                                               + eps)
    per_group = normal.reshape(x.shape[0], groups, x.shape[1] // groups, -1)
    return (per_group * gamma.reshape(1, -1, 1, 1)
            + beta.reshape(1, -1, 1, 1)).reshape(x.shape)


def zero_padded_pool(x, kernel, stride):
    """Pooling_v1's max: windows over zero padding up to whole windows ('full')."""
    rows = -(-(x.shape[2] - kernel) // stride) + 1
    cols = -(-(x.shape[3] - kernel) // stride) + 1
    padded = np.pad(x, ((0, 0), (0, 0), (0, (rows - 1) * stride + kernel - x.shape[2]),
                        (0, (cols - 1) * stride + kernel - x.shape[3])))
    return pool(padded, kernel=(kernel, kernel), stride=(stride, stride))


# IdentityAttachKLSparseReg's gradient is a penalty, not the forward's: tests/test_ops_contrib.py
LEGACY = [
    Case('Convolution_v1', (normal(1, 2, 4, 4), normal(2, 2, 3, 3), normal(2)),
         dict(kernel=(3, 3), num_filter=2, pad=(1, 1)),
         ref=lambda x, w, b: conv(x, w, b, kernel=(3, 3), pad=(1, 1))),
    Case('Pooling_v1', (distinct(1, 1, 5, 5),), dict(kernel=(2, 2), stride=(2, 2),
                                                     pooling_convention='full'),
         ref=lambda x: zero_padded_pool(x, 2, 2)),
    Case('Pooling_v1', (normal(1, 2, 4, 4),), dict(kernel=(2, 2), pool_type='avg'),
         ref=lambda x: pool(x, kernel=(2, 2), pool_type='avg'), tag='avg'),
    Case('BatchNorm_v1', BN_INPUTS, dict(fix_gamma=False), train=True, grad=(0, 1, 2),
         ref=lambda *a: batch_norm(*a, fix_gamma=False), rtol=1e-4),
    Case('choose_element_0index', (normal(3, 4), const([0, 3, 3])),
         ref=lambda a, i: a[np.arange(3), i.astype(int)], grad=(0,)),
    Case('SoftmaxActivation', (normal(2, 4),), ref=softmax),
    Case('SoftmaxActivation', (normal(2, 3, 2),), dict(mode='channel'),
         ref=lambda x: softmax(x, axis=1), tag='channel'),
    Case('GroupNorm', (normal(2, 4, 3), positive(2), normal(2)), dict(num_groups=2),
         ref=lambda x, g, b: group_norm(x, g, b, 2), rtol=1e-4),
]


def im2col(x, kernel):
    """Windows (stride 1, no padding) as columns: (N, C*kh*kw, windows)."""
    n, c, h, w = x.shape
    kh, kw = kernel
    cols = [x[:, :, i:i + h - kh + 1, j:j + w - kw + 1].reshape(n, c, -1)
            for i in range(kh) for j in range(kw)]
    return np.stack(cols, axis=2).reshape(n, c * kh * kw, -1)


NUMERIC = [
    binary('broadcast_hypot', np.hypot, lhs=away(2, 1), rhs=away(1, 3)),
    Case('cumsum', (normal(2, 3),), dict(axis=1), ref=lambda x: np.cumsum(x, axis=1)),
    Case('cumsum', (normal(2, 3),), ref=lambda x: np.cumsum(x), tag='flat'),
    Case('ravel_multi_index', (const([[1, 2], [3, 0]]),), dict(shape=(3, 4)),
         ref=lambda i: np.ravel_multi_index(i.astype(int), (3, 4)).astype(float), grad=()),
    Case('unravel_index', (const([7, 8]),), dict(shape=(3, 4)),
         ref=lambda i: np.stack(np.unravel_index(i.astype(int), (3, 4))).astype(float),
         grad=()),
    Case('im2col', (normal(1, 2, 3, 4),), dict(kernel=(2, 2)), ref=lambda x: im2col(x, (2, 2))),
    Case('col2im', (normal(1, 4, 9),), dict(output_size=(3, 4), kernel=(1, 2)),
         ref=lambda c: (np.pad(c.reshape(1, 2, 2, 3, 3)[:, :, 0], [(0, 0)] * 3 + [(0, 1)])
                        + np.pad(c.reshape(1, 2, 2, 3, 3)[:, :, 1], [(0, 0)] * 3 + [(1, 0)]))),
    Case('amp_cast', (normal(2, 3),), dict(dtype='float32'), ref=lambda x: x.astype(np.float32),
         grad=()),
    Case('amp_multicast', (normal(2), normal(3)), dict(num_outputs=2), ref=lambda a, b: [a, b]),
]


def pdf_of(dist, params):
    """A scipy density of samples (P..., draws) for parameters of shape (P...), given to
    scipy as params(*parameters)."""
    from scipy import stats

    def density(x, *values):
        law = getattr(stats, dist)
        args = params(*[v[..., None] for v in values])
        return law.pmf(x, *args) if dist in ('poisson', 'nbinom') else law.pdf(x, *args)
    return density


def dirichlet_pdf(x, alpha):
    from scipy import stats
    return np.array([stats.dirichlet.pdf(xi, ai) for xi, ai in zip(x, alpha)])


# The discrete densities' gradient for their samples is 0 (MXNet's), not a derivative
RANDOM = [
    Case('random_pdf_normal', (normal(2, 3), normal(2), positive(2)),
         ref=pdf_of('norm', lambda mu, sigma: (mu, sigma))),
    Case('random_pdf_uniform', (uniform(0.1, 0.9, 2, 2), uniform(-1, 0, 2), uniform(1, 2, 2)),
         ref=lambda x, low, high: 1 / (high - low)[:, None] + 0 * x),
    Case('random_pdf_gamma', (positive(2, 2), positive(2), positive(2)),
         ref=pdf_of('gamma', lambda a, rate: (a, 0, 1 / rate))),
    Case('random_pdf_exponential', (positive(3, 2), positive(3)), dict(is_log=True),
         ref=lambda x, lam: np.log(lam)[:, None] - lam[:, None] * x),
    Case('random_pdf_poisson', (indices(5, 2, 3), positive(2)),
         ref=pdf_of('poisson', lambda lam: (lam,)), grad=(1,)),
    Case('random_pdf_negative_binomial', (indices(5, 2, 2), positive(2, low=1, high=4),
                                          uniform(0.2, 0.8, 2)),
         ref=pdf_of('nbinom', lambda k, p: (k, p)), grad=(1, 2)),
    Case('random_pdf_generalized_negative_binomial', (indices(5, 2, 2), positive(2),
                                                      positive(2, low=0.2, high=1)),
         ref=pdf_of('nbinom', lambda mu, a: (1 / a, 1 / (1 + a * mu))), grad=(1, 2)),
    Case('random_pdf_dirichlet', (const([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]]), positive(2, 3)),
         ref=dirichlet_pdf),
]


def bilinear_read(plane, y, x, clamped):
    """plane (C, H, W) read at (y, x) arrays: DCN's clamped rule or DCNv2's zero border."""
    height, width = plane.shape[1:]
    if clamped:
        if not (0 <= y < height and 0 <= x < width):
            return np.zeros(plane.shape[0])
        y, x = min(y, height - 1), min(x, width - 1)
    elif not (-1 < y < height and -1 < x < width):
        return np.zeros(plane.shape[0])
    total = np.zeros(plane.shape[0])
    for row in (math.floor(y), math.floor(y) + 1):
        for col in (math.floor(x), math.floor(x) + 1):
            if 0 <= row < height and 0 <= col < width:
                total += (1 - abs(y - row)) * (1 - abs(x - col)) * plane[:, row, col]
    return total


def deformable_conv(x, offset, weight, mask=None, pad=1, clamped=True):
    """One deformable group, stride 1: every tap reads at its place plus its offset."""
    n, _, height, width = x.shape
    kh, kw = weight.shape[2:]
    out = np.zeros((n, weight.shape[0], height + 2 * pad - kh + 1, width + 2 * pad - kw + 1))
    for b, i, j in np.ndindex(n, *out.shape[2:]):
        for k, (ti, tj) in enumerate(np.ndindex(kh, kw)):
            y = i - pad + ti + offset[b, 2 * k, i, j]
            xx = j - pad + tj + offset[b, 2 * k + 1, i, j]
            value = bilinear_read(x[b], y, xx, clamped)
            if mask is not None:
                value = value * mask[b, k, i, j]
            out[b, :, i, j] += weight[:, :, ti, tj] @ value
    return out


def offsets(*shape):
    """Offsets whose reads land 0.1 to 0.4 past whole pixels: clear of bilinear kinks."""
    return lambda rng: rng.integers(-1, 2, shape) + rng.uniform(0.1, 0.4, shape)


DEFORMABLE = [
    Case('_contrib_DeformableConvolution', (normal(1, 2, 3, 3), offsets(1, 8, 4, 4),
                                            normal(2, 2, 2, 2)),
         dict(kernel=(2, 2), pad=(1, 1), num_filter=2, no_bias=True),
         ref=lambda x, o, w: deformable_conv(x, o, w)),
    Case('_contrib_ModulatedDeformableConvolution',
         (normal(1, 2, 3, 3), offsets(1, 8, 4, 4), positive(1, 4, 4, 4), normal(2, 2, 2, 2),
          normal(2)),
         dict(kernel=(2, 2), pad=(1, 1), num_filter=2),
         ref=lambda x, o, m, w, b: deformable_conv(x, o, w, m, pad=1, clamped=False)
         + b.reshape(1, -1, 1, 1)),
]


def lighting_offset(alpha):
    eigval = np.array([55.46, 4.794, 1.148])
    eigvec = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140],
                       [-0.5836, -0.6948, 0.4203]])
    return (eigvec * (np.array(alpha) * eigval)).sum(axis=1)


# mx.nd.image (images (H, W, C), tensors (C, H, W)); to_tensor and the random ones have no
# gradient, as in MXNet
IMAGE = [
    Case('_image_normalize', (normal(3, 4, 5),), dict(mean=(0.1, 0.2, 0.3), std=(0.5, 2, 4)),
         ref=lambda x: (x - np.array([0.1, 0.2, 0.3]).reshape(3, 1, 1))
         / np.array([0.5, 2, 4]).reshape(3, 1, 1)),
    Case('_image_crop', (normal(5, 6, 3),), dict(x=1, y=2, width=3, height=2),
         ref=lambda x: x[2:4, 1:4]),
    Case('_image_flip_left_right', (normal(3, 5, 2),), ref=lambda x: x[:, ::-1]),
    Case('_image_flip_top_bottom', (normal(2, 3, 5, 2),), ref=lambda x: x[:, ::-1]),
    Case('_image_adjust_lighting', (normal(3, 4, 3),), dict(alpha=(0.1, -0.2, 0.3)),
         ref=lambda x: x + lighting_offset((0.1, -0.2, 0.3)), rtol=1e-6),
    Case('_image_to_tensor', (uniform(0, 255, 4, 5, 3),), grad=(),
         ref=lambda x: x.transpose(2, 0, 1) / 255, rtol=1e-6),
    Case('_image_random_brightness', (uniform(0, 255, 3, 4, 3),),
         dict(min_factor=1.5, max_factor=1.5), grad=(), ref=lambda x: 1.5 * x),
]

CASES = (ELEMENTWISE + BROADCAST + REDUCTIONS + SHAPES + CONVOLUTION + NORMALIZATION
         + ACTIVATIONS + RECURRENT + DEFINED_GRADIENTS + IMAGE + LINALG + CONTRIB
         + DETECTION + SPATIAL + LEGACY + NUMERIC + RANDOM + DEFORMABLE)
# The mx.nd functions this table runs, for `python -m ember api-coverage`.
EXERCISED_API = [f'ember.ndarray.{case.op}' for case in CASES]

# Public differentiable operators without a row: name -> why. Every one has a row today.
SKIPPED: dict[str, str] = {
    'Custom': 'runs user code; tests/test_custom_op.py checks its gradients',
    'CTCLoss': 'tests/test_ctc.py checks it against enumerated alignments and finite differences',
    '_contrib_bipartite_matching': 'a greedy matching with a zero gradient: checked against '
                                   'MXNet in tests/test_mxnet_op_fixtures.py',
    '_contrib_MultiBoxTarget': 'greedy matching and mining with a zero gradient: checked '
                               'against MXNet in tests/test_mxnet_op_fixtures.py',
    '_contrib_MultiBoxDetection': 'greedy NMS with a zero gradient: checked against MXNet in '
                                  'tests/test_mxnet_op_fixtures.py',
    '_sample_multinomial': 'draws at random: tests/test_ops_contrib.py checks its draws and the '
                           'gradient of their log-probabilities',
    'IdentityAttachKLSparseReg': 'its gradient adds a sparseness penalty: '
                                 'tests/test_ops_contrib.py checks it',
    '_contrib_Proposal': 'RPN proposals (greedy NMS) with a zero gradient: checked against '
                         'MXNet in tests/test_mxnet_op_fixtures.py',
    '_contrib_MultiProposal': 'RPN proposals (greedy NMS) with a zero gradient: checked '
                              'against MXNet in tests/test_mxnet_op_fixtures.py',
    '_contrib_hawkesll': 'its gradient is that of the log likelihood only (MXNet\'s), not of '
                         'the states it also returns: checked against MXNet in '
                         'tests/test_mxnet_op_fixtures.py',
    '_contrib_box_encode': 'training targets with a zero gradient: checked against MXNet in '
                           'tests/test_mxnet_op_fixtures.py',
}


# ----------------------------------------------------------------------------------------------
# The test


def _as_list(result):
    return list(result) if isinstance(result, (list, tuple)) else [result]


def _function(case):
    op = getattr(mx.nd, case.op)
    return lambda *arrays: _as_list(op(*arrays, **case.attrs))


@pytest.fixture
def numpy_seed(request):
    """Seed NumPy's global generator (random projections) per row, and restore it."""
    state = np.random.get_state()
    np.random.seed(zlib.crc32(request.node.name.encode()))
    yield
    np.random.set_state(state)


def _mode(train):
    return mx.autograd.train_mode() if train else mx.autograd.predict_mode()


# Every backend runs the same table: the CPU, and the first GPU where there is one.
DEVICES = [mx.cpu(0)] + ([mx.gpu(0)] if mx.context.num_gpus() else [])


@pytest.fixture(params=DEVICES, ids=str)
def ctx(request):
    return request.param


def _check_forward(case, values, ctx):
    arrays = [mx.nd.array(v, ctx=ctx, dtype=np.float64) for v in values]
    with _mode(case.train):
        outputs = _function(case)(*arrays)
    expected = _as_list(case.ref(*values))
    assert len(outputs) == len(expected), f'{case.id}: {len(outputs)} outputs'
    for index, (got, want) in enumerate(zip(outputs, expected)):
        assert_almost_equal(got, np.asarray(want, dtype=np.float64), rtol=case.rtol,
                            atol=1e-10, names=(f'{case.id} output {index}', 'NumPy'))


def _check_gradient(case, values, ctx):
    if case.loss_grad is not None:
        out_grads = [np.random.normal(size=o.shape) for o in _as_list(case.ref(*values))]
        check_symbolic_backward(_function(case), values, out_grads, case.loss_grad(*values),
                                rtol=case.rtol, atol=case.atol, ctx=ctx, dtype=np.float64)
        return
    if case.grad == ():
        return
    check_numeric_gradient(_function(case), values, grad_nodes=case.grad, numeric_eps=1e-5,
                           rtol=case.rtol, atol=case.atol, use_forward_train=case.train,
                           ctx=ctx, dtype=np.float64)


@pytest.mark.parametrize('case', [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_operator(case, ctx, numpy_seed):
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    values = [draw(rng) for draw in case.inputs]
    if case.ref is not None:
        _check_forward(case, values, ctx)
    _check_gradient(case, values, ctx)


def test_row_ids_are_unique():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def _public_differentiable():
    """Canonical name -> public names of every operator with a gradient that mx.nd exposes
    (mx.nd.contrib's included)."""
    found = {}
    for name, op in registry.all_ops().items():
        public = not name.startswith('_') or name.startswith('_contrib_')
        if public and op.gradient is not None and hasattr(mx.nd, name):
            found.setdefault(op.name, []).append(name)
    return found


def test_every_differentiable_operator_has_a_row():
    covered = {registry.get(case.op).name for case in CASES}
    missing = {name: names for name, names in _public_differentiable().items()
               if name not in covered and name not in SKIPPED}
    assert not missing, f'operators without a row in the table (add one, or a reason to ' \
                        f'SKIPPED): {missing}'


def test_skip_list_names_uncovered_operators():
    covered = {registry.get(case.op).name for case in CASES}
    public = _public_differentiable()
    stale = [name for name in SKIPPED if name not in public or name in covered]
    assert not stale, f'SKIPPED lists operators that are covered or not public: {stale}'


# ----------------------------------------------------------------------------------------------
# Beyond the table: random masks and gradients of gradients.


def test_dropout_gradient_follows_its_mask_in_training():
    x = mx.nd.array(np.random.default_rng(1).uniform(0.5, 1.5, (4, 50)), dtype=np.float64)
    x.attach_grad()
    head = mx.nd.array(np.random.default_rng(2).normal(size=(4, 50)), dtype=np.float64)
    with mx.autograd.record(train_mode=True):
        y = mx.nd.Dropout(x, p=0.3)
    y.backward(head)
    scale = y.asnumpy() / x.asnumpy()           # the mask: 0 or 1 / (1 - p)
    kept = scale != 0
    assert 0.5 < kept.mean() < 0.9
    assert_almost_equal(scale[kept], np.full(kept.sum(), 1 / 0.7), rtol=1e-12, atol=0)
    assert_almost_equal(x.grad, head.asnumpy() * scale, rtol=1e-12, atol=0)


def test_rrelu_gradient_follows_its_random_slopes_in_training():
    x = mx.nd.array(-np.random.default_rng(3).uniform(0.5, 1.5, (3, 40)), dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record(train_mode=True):
        y = mx.nd.LeakyReLU(x, act_type='rrelu', lower_bound=0.1, upper_bound=0.4)
    y.backward(mx.nd.ones_like(y))
    slopes = y.asnumpy() / x.asnumpy()
    assert ((slopes >= 0.1) & (slopes <= 0.4)).all() and slopes.std() > 0
    assert_almost_equal(x.grad, slopes, rtol=1e-12, atol=0)


SECOND_DERIVATIVES = [
    ('sin', lambda F, x: F.sin(x), lambda x: -np.sin(x), ()),
    ('cube', lambda F, x: x * x * x, lambda x: 6 * x, ()),
    ('power', lambda F, x: x ** 3, lambda x: 6 * x, ()),
    ('log', lambda F, x: F.log(x + 2), lambda x: -1 / (x + 2) ** 2, ()),
    ('tanh', lambda F, x: F.tanh(x), lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2), ()),
    ('exp', lambda F, x: F.exp(x), np.exp, ()),
    ('sigmoid', lambda F, x: F.sigmoid(x),
     lambda x: sigmoid(x) * (1 - sigmoid(x)) * (1 - 2 * sigmoid(x)), ()),
]


@pytest.mark.parametrize('fn,second', [pytest.param(fn, second, id=name, marks=marks)
                                       for name, fn, second, marks in SECOND_DERIVATIVES])
def test_second_derivative(fn, second):
    values = np.linspace(-1.5, 1.5, 7)
    x = mx.nd.array(values, dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = fn(mx.nd, x)
        dy = mx.autograd.grad(y, x, create_graph=True)
    dy.backward(mx.nd.ones_like(dy))
    assert_almost_equal(x.grad, second(values), rtol=1e-10, atol=1e-12)


def test_third_derivative_of_cube():
    x = mx.nd.array([-1.0, 0.5, 2.0], dtype=np.float64)
    x.attach_grad()
    with mx.autograd.record():
        y = x * x * x
        dy = mx.autograd.grad(y, x, create_graph=True)
        d2y = mx.autograd.grad(dy, x, create_graph=True)
    d2y.backward(mx.nd.ones_like(d2y))
    assert_almost_equal(x.grad, np.full(3, 6.0), rtol=1e-12, atol=0)
