"""Neural-network kernels on NumPy arrays: forward passes against straightforward NumPy
references, backward kernels (through each operator's gradient rule) against central finite
differences of the forward kernels, and shape inference with its errors."""
import math
from dataclasses import dataclass, field

import numpy as np
import pytest

import ember.op.nn  # noqa: F401  (registers the operators)
from ember import config
from ember.op import registry
from ember.op.registry import KernelContext, ShapeError
from tolerance import assert_sums_close


# ----------------------------------------------------------------------------------------------
# Running kernels directly.

class GarbageTemp:
    """A 'temp' resource whose buffers start as NaN bytes, to catch reads of unset scratch."""

    def __init__(self):
        self.requests = 0

    def get(self, shape, dtype='float32'):
        self.requests += 1
        return np.full(shape, 0xFF, np.uint8).view(dtype) if np.dtype(dtype) == np.uint8 \
            else np.full(shape, np.nan, dtype)


class SeededRandom:
    def __init__(self, seed):
        self.generator = np.random.default_rng(seed)


def infer(name, shapes, **kwargs):
    op = registry.get(name)
    return op.infer_shape(op.parse_attrs(kwargs), list(shapes))


def run(name, inputs, is_train=False, seed=0, temp=True, **kwargs):
    """Every output of operator `name` on NumPy `inputs` (aux inputs are updated in place)."""
    op = registry.get(name)
    attrs = op.parse_attrs(kwargs)
    _, out_shapes = op.infer_shape(attrs, [np.shape(a) for a in inputs])
    _, out_dtypes = op.infer_type(attrs, [a.dtype for a in inputs])
    outs = [np.full(s, np.nan, d) if np.dtype(d).kind == 'f' else np.zeros(s, d)
            for s, d in zip(out_shapes, out_dtypes)]
    ctx = KernelContext(device=None, is_train=is_train, xp=np,
                        temp=GarbageTemp() if temp and 'temp' in op.resources else None,
                        random=SeededRandom(seed) if {'random', 'dropout'} & set(op.resources)
                        else None)
    op.kernel(attrs, list(inputs), outs, ctx)
    return outs


def run1(name, inputs, **kwargs):
    return run(name, inputs, **kwargs)[0]


class EagerF:
    """`F` for gradient rules: runs registry kernels on NumPy arrays at once."""

    def __init__(self, is_train):
        self.is_train = is_train

    def __getattr__(self, name):
        op = registry.get(name)

        def call(*arrays, **kwargs):
            outs = run(name, [np.asarray(a) for a in arrays], is_train=self.is_train, **kwargs)
            visible = op.num_visible_outputs(op.parse_attrs(kwargs))
            return outs[0] if visible == 1 else outs[:visible]
        return call


# ----------------------------------------------------------------------------------------------
# Backward kernels against finite differences.

def uniform(low, high, shape):
    return lambda rng: rng.uniform(low, high, shape)


@dataclass
class Case:
    op: str
    attrs: dict
    inputs: list                 # shape: normal draws; None: inferred shape; callable(rng); array
    wrt: tuple = None            # inputs to differentiate (default: every drawn input)
    is_train: bool = False
    loss_outputs: tuple = None   # outputs entering the loss (default: the visible ones)
    name: str = ''
    rtol: float = 1e-4
    extra: dict = field(default_factory=dict)

    def __str__(self):
        return self.name or f'{self.op}-{self.attrs}'


def make_inputs(case, rng):
    shapes = [s if isinstance(s, tuple) else None for s in case.inputs]
    fixed = {i: spec(rng) if callable(spec) else spec for i, spec in enumerate(case.inputs)
             if not isinstance(spec, tuple) and spec is not None}
    for i, array in fixed.items():
        shapes[i] = np.shape(array)
    filled, _ = infer(case.op, shapes, **case.attrs)
    arrays = [np.asarray(fixed[i], np.float64) if i in fixed else rng.standard_normal(s)
              for i, s in enumerate(filled)]
    drawn = tuple(i for i, spec in enumerate(case.inputs) if not isinstance(spec, np.ndarray))
    return arrays, drawn


def forward_loss(case, arrays, heads):
    outs = run(case.op, [a.copy() for a in arrays], is_train=case.is_train, **case.attrs)
    return sum(float((outs[i] * head).sum()) for i, head in heads.items())


def numeric_gradient(case, arrays, heads, index, eps=1e-6):
    grad = np.zeros_like(arrays[index])
    for pos in np.ndindex(*arrays[index].shape):
        shifted = [a.copy() for a in arrays]
        shifted[index][pos] += eps
        up = forward_loss(case, shifted, heads)
        shifted[index][pos] -= 2 * eps
        grad[pos] = (up - forward_loss(case, shifted, heads)) / (2 * eps)
    return grad


N = np.array  # fixed (non-differentiated) inputs

GRADIENT_CASES = [
    Case('FullyConnected', dict(num_hidden=3), [(2, 2, 2), None, None], name='fc-flatten'),
    Case('FullyConnected', dict(num_hidden=2, flatten=False, no_bias=True), [(2, 3, 4), None],
         name='fc-noflatten'),
    Case('Convolution', dict(kernel=(3, 2), stride=(2, 1), pad=(1, 1), dilate=(1, 2),
                             num_filter=4, num_group=2), [(2, 4, 5, 5), None, None],
         name='conv2d-group'),
    Case('Convolution', dict(kernel=(3,), num_filter=2, pad=(1,)), [(2, 3, 5), None, None],
         name='conv1d'),
    Case('Convolution', dict(kernel=(1, 1), num_filter=3, no_bias=True), [(2, 2, 3, 3), None],
         name='conv-pointwise'),
    Case('Convolution', dict(kernel=(2, 2), num_filter=3, layout='NHWC', pad=(1, 0)),
         [(1, 4, 3, 2), None, None], name='conv-nhwc'),
    Case('Convolution', dict(kernel=(2, 2, 2), num_filter=2), [(1, 2, 3, 3, 3), None, None],
         name='conv3d'),
    Case('Deconvolution', dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1),
                               num_filter=4, num_group=2, no_bias=False),
         [(2, 2, 3, 3), None, None], name='deconv2d'),
    Case('Pooling', dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1)), [(2, 2, 5, 5)],
         name='pool-max'),
    Case('Pooling', dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='avg',
                         pooling_convention='full'), [(1, 2, 6, 5)], name='pool-avg-full'),
    Case('Pooling', dict(kernel=(2, 2), pad=(1, 1), pool_type='avg', count_include_pad=False),
         [(1, 1, 3, 4)], name='pool-avg-exclude-pad'),
    Case('Pooling', dict(kernel=(2,), stride=(2,), pool_type='sum'), [(2, 2, 6)],
         name='pool-sum-1d'),
    Case('Pooling', dict(kernel=(2, 2), pool_type='lp', p_value=2), [(1, 2, 3, 3)],
         name='pool-lp'),
    Case('Pooling', dict(global_pool=True, pool_type='max', layout='NHWC'), [(2, 3, 3, 2)],
         name='pool-global-nhwc'),
    Case('BatchNorm', dict(fix_gamma=False), [(3, 2, 2, 2), None, None, N([0.5, -1.]),
                                              N([2.0, 0.5])],
         wrt=(0, 1, 2), is_train=True, name='batchnorm-train'),
    Case('BatchNorm', dict(fix_gamma=True, axis=-1), [(4, 3), None, None, N([0.5, -1., 0.]),
                                                     N([2.0, 0.5, 1.0])],
         wrt=(0, 2), is_train=True, name='batchnorm-fixgamma-axis'),
    Case('BatchNorm', dict(fix_gamma=False), [(2, 3, 2), None, None, N([0.5, -1., 0.]),
                                              N([2.0, 0.5, 1.0])],
         wrt=(0, 1, 2), is_train=False, name='batchnorm-inference'),
    Case('_contrib_BatchNormWithReLU', dict(fix_gamma=False),
         [(3, 2, 2, 2), None, None, N([0.5, -1.]), N([2.0, 0.5])],
         wrt=(0, 1, 2), is_train=True, name='batchnorm-relu-train'),
    Case('_contrib_BatchNormWithReLU', dict(fix_gamma=False, axis=-1),
         [(2, 3, 2), None, None, N([0.5, -1.]), N([2.0, 0.5])],
         wrt=(0, 1, 2), is_train=False, name='batchnorm-relu-inference'),
    Case('LayerNorm', dict(axis=1), [(2, 4, 3), None, None], name='layernorm'),
    Case('InstanceNorm', dict(), [(2, 3, 4), None, None], name='instancenorm'),
    Case('LRN', dict(nsize=3, alpha=0.3, beta=0.75, knorm=1.5), [(2, 4, 2, 2)], name='lrn'),
    *[Case('Activation', dict(act_type=t), [(3, 4)], name=f'act-{t}')
      for t in ('relu', 'sigmoid', 'tanh', 'softrelu', 'softsign')],
    *[Case('LeakyReLU', dict(act_type=t), [(3, 4)], name=f'leaky-{t}')
      for t in ('leaky', 'elu', 'selu', 'gelu')],
    Case('LeakyReLU', dict(act_type='prelu'), [(3, 2, 2), (2,)], name='prelu'),
    Case('LeakyReLU', dict(act_type='prelu'), [(3, 2), (1,)], name='prelu-shared'),
    Case('LeakyReLU', dict(act_type='rrelu'), [(3, 4)], is_train=True, name='rrelu-train'),
    Case('softmax', dict(axis=1, temperature=2.0), [(2, 4, 3)], name='softmax'),
    Case('log_softmax', dict(), [(3, 5)], name='log_softmax'),
    Case('softmin', dict(axis=0), [(4, 2)], name='softmin'),
    Case('softmax', dict(use_length=True), [(3, 4), N([2, 4, 1])], name='softmax-length'),
    Case('log_softmax', dict(use_length=True, axis=0), [(4, 2), N([3, 1])],
         name='log_softmax-length'),
    Case('Dropout', dict(p=0.4), [(4, 5)], is_train=True, name='dropout-train'),
    Case('Dropout', dict(p=0.5, axes=(0,)), [(3, 4)], is_train=True, name='dropout-axes'),
    Case('Embedding', dict(input_dim=4, output_dim=3), [N([[0, 2], [2, 3]]), None],
         name='embedding'),
    Case('UpSampling', dict(scale=2, sample_type='nearest', num_args=2),
         [(1, 2, 2, 3), (1, 1, 4, 6)], name='upsampling-concat'),
    Case('UpSampling', dict(scale=2, sample_type='nearest', num_args=2,
                            multi_input_mode='sum'), [(1, 2, 2, 2), (1, 2, 4, 4)],
         name='upsampling-sum'),
    Case('UpSampling', dict(scale=2, sample_type='bilinear', num_args=2, num_filter=2),
         [(1, 2, 2, 3), None], name='upsampling-bilinear'),
    *[Case('Pad', dict(mode=m, pad_width=(0, 0, 0, 0, 2, 1, 1, 2), constant_value=0.5),
           [(1, 2, 3, 4)], name=f'pad-{m}') for m in ('constant', 'edge', 'reflect')],
    Case('smooth_l1', dict(scalar=1.5), [(4, 5)], name='smooth_l1'),
    Case('topk', dict(k=2, ret_typ='value', axis=1), [(3, 4)], name='topk-value'),
    Case('topk', dict(k=2, ret_typ='both', axis='None'), [(2, 3)], loss_outputs=(0,),
         name='topk-both-flat'),
    Case('sort', dict(axis=0, is_ascend=False), [(4, 3)], name='sort'),
    *[Case('RNN', dict(mode=m, state_size=3, num_layers=2, bidirectional=True,
                       state_outputs=True), [(3, 2, 2), None, None] + ([None] * (m == 'lstm')),
           name=f'rnn-{m}') for m in ('rnn_tanh', 'rnn_relu', 'lstm', 'gru')],
    Case('RNN', dict(mode='lstm', state_size=2, num_layers=1, state_outputs=True,
                     lstm_state_clip_min=-0.5, lstm_state_clip_max=0.5),
         [(3, 2, 2), None, None, None], name='rnn-lstm-clip'),
    Case('RNN', dict(mode='gru', state_size=2, num_layers=2, p=0.5, bidirectional=True,
                     use_sequence_length=True),
         [(4, 3, 2), None, None, N([4, 2, 1])], is_train=True, name='rnn-gru-length-dropout'),
    *[Case(name, {}, [uniform(0.2, 0.9, (2, 3))], name=name)
      for name in ('sin', 'cos', 'tan', 'arcsin', 'arccos', 'arctan', 'sinh', 'cosh', 'tanh',
                   'arcsinh', 'arctanh', 'degrees', 'radians', 'rcbrt', 'sigmoid', 'softsign',
                   'log_sigmoid', 'mish', 'erf', 'erfinv', 'gamma', 'gammaln')],
    Case('relu', {}, [(3, 3)], name='relu'),
    Case('arccosh', {}, [uniform(1.2, 3, (4,))], name='arccosh'),
    Case('hard_sigmoid', dict(alpha=0.3, beta=0.4), [uniform(-4, 4, (12,))],
         name='hard_sigmoid'),
]


@pytest.mark.parametrize('case', GRADIENT_CASES, ids=str)
def test_backward_matches_finite_differences(case):
    rng = np.random.default_rng(7)
    arrays, drawn = make_inputs(case, rng)
    op = registry.get(case.op)
    attrs = op.parse_attrs(case.attrs)
    outs = run(case.op, [a.copy() for a in arrays], is_train=case.is_train, **case.attrs)
    loss_outputs = case.loss_outputs or range(op.num_visible_outputs(attrs))
    heads = {i: rng.standard_normal(outs[i].shape) for i in loss_outputs}
    out_grads = [heads.get(i, np.zeros_like(out)) for i, out in enumerate(outs)]
    grads = op.gradient(EagerF(case.is_train), attrs, [a.copy() for a in arrays], outs,
                        out_grads)
    assert len(grads) == len(arrays)
    for index in case.wrt or drawn:
        expected = numeric_gradient(case, arrays, heads, index)
        assert grads[index] is not None, f'input {index} got no gradient'
        np.testing.assert_allclose(grads[index], expected, rtol=case.rtol, atol=1e-6,
                                   err_msg=f'gradient of input {index}')


# ----------------------------------------------------------------------------------------------
# Forward references.

RNG = np.random.default_rng(0)


def conv_reference(x, w, b, stride, pad, dilate, groups):
    nd = x.ndim - 2
    padded = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    size_out = [(padded.shape[2 + i] - dilate[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1
                for i in range(nd)]
    filters, per_group = w.shape[:2]
    per_out = filters // groups
    out = np.zeros((x.shape[0], filters, *size_out))
    for o in np.ndindex(*size_out):
        for k in np.ndindex(*w.shape[2:]):
            pos = tuple(o[i] * stride[i] + k[i] * dilate[i] for i in range(nd))
            patch = padded[(slice(None), slice(None)) + pos]
            for g in range(groups):
                fs = slice(g * per_out, (g + 1) * per_out)
                out[(slice(None), fs) + o] += (patch[:, g * per_group:(g + 1) * per_group]
                                               @ w[(fs, slice(None)) + k].T)
    return out + b.reshape((1, -1) + (1,) * nd)


def deconv_reference(x, w, stride, pad, dilate, adj, groups):
    nd = x.ndim - 2
    per_in, per_out = x.shape[1] // groups, w.shape[1]
    full = [stride[i] * (x.shape[2 + i] - 1) + dilate[i] * (w.shape[2 + i] - 1) + 1 + adj[i]
            for i in range(nd)]
    out = np.zeros((x.shape[0], per_out * groups, *full))
    for i in np.ndindex(*x.shape[2:]):
        for k in np.ndindex(*w.shape[2:]):
            pos = tuple(i[d] * stride[d] + k[d] * dilate[d] for d in range(nd))
            for g in range(groups):
                cs = slice(g * per_in, (g + 1) * per_in)
                contribution = x[(slice(None), cs) + i] @ w[(cs, slice(None)) + k]
                out[(slice(None), slice(g * per_out, (g + 1) * per_out)) + pos] += contribution
    return out[(slice(None), slice(None)) + tuple(slice(p, f - p) for p, f in zip(pad, full))]


@pytest.mark.parametrize('shape, kernel, stride, pad, dilate, groups', [
    ((2, 4, 7, 6), (3, 2), (2, 1), (1, 1), (1, 2), 2),
    ((1, 3, 8), (3,), (3,), (2,), (1,), 1),
    ((1, 2, 4, 3, 5), (2, 1, 3), (1, 2, 1), (0, 1, 1), (2, 1, 1), 1),
    ((2, 6, 5, 5), (1, 1), (1, 1), (0, 0), (1, 1), 3),
    ((2, 4, 5, 5), (3, 3), (1, 1), (1, 1), (1, 1), 4),
])
def test_convolution_matches_direct_loops(shape, kernel, stride, pad, dilate, groups):
    x = RNG.standard_normal(shape)
    filters = 2 * groups
    w = RNG.standard_normal((filters, shape[1] // groups) + kernel)
    b = RNG.standard_normal(filters)
    attrs = dict(kernel=kernel, stride=stride, pad=pad, dilate=dilate, num_filter=filters,
                 num_group=groups)
    expected = conv_reference(x, w, b, stride, pad, dilate, groups)
    np.testing.assert_allclose(run1('Convolution', [x, w, b], **attrs), expected, atol=1e-12)
    # no temp resource: fresh buffers give the same answer
    np.testing.assert_allclose(run1('Convolution', [x, w, b], temp=False, **attrs), expected,
                               atol=1e-12)
    if len(kernel) == 2:
        last = run1('Convolution', [x.transpose(0, 2, 3, 1).copy(),
                                    w.transpose(0, 2, 3, 1).copy(), b], layout='NHWC', **attrs)
        np.testing.assert_allclose(last.transpose(0, 3, 1, 2), expected, atol=1e-12)


def test_convolution_float32_pointwise_channel_last():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w = RNG.standard_normal((6, 1, 1, 5)).astype(np.float32)
    out = run1('Convolution', [x, w], kernel=(1, 1), num_filter=6, no_bias=True, layout='NHWC')
    assert out.dtype == np.float32
    assert_sums_close(out, x @ w[:, 0, 0].T, abs(x) @ abs(w[:, 0, 0]).T, terms=5)


@pytest.mark.parametrize('shape, kernel, stride, pad, dilate, adj, groups', [
    ((2, 4, 3, 3), (3, 3), (2, 2), (1, 1), (1, 1), (1, 0), 2),
    ((1, 2, 4), (4,), (3,), (0,), (1,), (2,), 1),
    ((1, 2, 3, 2), (2, 3), (1, 2), (1, 0), (2, 1), (0, 1), 1),
])
def test_deconvolution_matches_scatter_reference(shape, kernel, stride, pad, dilate, adj,
                                                 groups):
    x = RNG.standard_normal(shape)
    w = RNG.standard_normal((shape[1], 3) + kernel)
    out = run1('Deconvolution', [x, w], kernel=kernel, stride=stride, pad=pad, dilate=dilate,
               adj=adj, num_filter=3 * groups, num_group=groups)
    np.testing.assert_allclose(out, deconv_reference(x, w, stride, pad, dilate, adj, groups),
                               atol=1e-12)


def test_deconvolution_target_shape_sets_pad_and_adj():
    _, (out,) = infer('Deconvolution', [(1, 2, 5, 5), None], kernel=(4, 4), stride=(2, 2),
                      num_filter=3, target_shape=(10, 9))
    assert out == (1, 3, 10, 9)
    x, w = RNG.standard_normal((1, 2, 5, 5)), RNG.standard_normal((2, 3, 4, 4))
    # target 9 = 2*4 + 4 - 2*pad + adj leaves 3 to remove: pad 2, adj 1
    expected = deconv_reference(x, w, (2, 2), (1, 2), (1, 1), (0, 1), 1)
    got = run1('Deconvolution', [x, w], kernel=(4, 4), stride=(2, 2), num_filter=3,
               target_shape=(10, 9))
    np.testing.assert_allclose(got, expected, atol=1e-12)


def pool_reference(x, kernel, stride, pad, kind, convention='valid', include_pad=True, p=2):
    nd = x.ndim - 2
    sizes = x.shape[2:]
    if convention == 'valid':
        size_out = [(n + 2 * q - k) // s + 1 for n, q, k, s in zip(sizes, pad, kernel, stride)]
    else:
        size_out = [math.ceil((n + 2 * q - k) / s) + 1
                    for n, q, k, s in zip(sizes, pad, kernel, stride)]
    out = np.zeros(x.shape[:2] + tuple(size_out))
    for o in np.ndindex(*size_out):
        starts = [o[i] * stride[i] - pad[i] for i in range(nd)]
        ends = [min(starts[i] + kernel[i], sizes[i] + pad[i]) for i in range(nd)]
        count = math.prod(e - s for s, e in zip(starts, ends))
        lo = [max(s, 0) for s in starts]
        hi = [min(e, n) for e, n in zip(ends, sizes)]
        window = x[(slice(None), slice(None)) + tuple(slice(a, b) for a, b in zip(lo, hi))]
        window = window.reshape(x.shape[:2] + (-1,))
        if not include_pad:
            count = window.shape[-1]
        if kind == 'max':
            out[(slice(None), slice(None)) + o] = window.max(-1)
        elif kind == 'avg':
            out[(slice(None), slice(None)) + o] = window.sum(-1) / count
        elif kind == 'sum':
            out[(slice(None), slice(None)) + o] = window.sum(-1)
        else:
            out[(slice(None), slice(None)) + o] = (window ** p).sum(-1) ** (1 / p)
    return out


@pytest.mark.parametrize('kind, kernel, stride, pad, convention, include_pad', [
    ('max', (3, 3), (2, 2), (1, 1), 'valid', True),
    ('max', (2, 3), (2, 2), (0, 1), 'full', True),
    ('avg', (3, 3), (2, 2), (1, 1), 'full', True),
    ('avg', (3, 2), (1, 2), (1, 1), 'valid', False),
    ('sum', (2,), (1,), (1,), 'valid', True),
    ('lp', (2, 2), (1, 1), (0, 0), 'valid', True),
    ('avg', (2, 2, 2), (2, 1, 2), (0, 1, 1), 'full', True),
])
def test_pooling_matches_loops(kind, kernel, stride, pad, convention, include_pad):
    x = RNG.standard_normal((2, 3) + (7, 6, 5)[:len(kernel)])
    if kind == 'lp':
        x = np.abs(x)
    got = run1('Pooling', [x], kernel=kernel, stride=stride, pad=pad, pool_type=kind,
               pooling_convention=convention, count_include_pad=include_pad, p_value=2)
    expected = pool_reference(x, kernel, stride, pad, kind, convention, include_pad)
    np.testing.assert_allclose(got, expected, atol=1e-12)


@pytest.mark.parametrize('kind', ['max', 'avg', 'lp'])
@pytest.mark.parametrize('split', [False, True])
def test_channel_last_pooling_pads_channel_last_and_splits_the_samples(kind, split):
    # NumPy's pooling (oneDNN off, float32): channel-last data is padded in channel-last
    # scratch, and the samples may be split over the kernel threads; every case matches the
    # channel-first loops bit for bit
    x = np.abs(RNG.standard_normal((4, 3, 9, 8))).astype(np.float32)
    kwargs = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type=kind, p_value=2)
    expected = pool_reference(x.astype(np.float64), (3, 3), (2, 2), (1, 1), kind, 'valid',
                              True).astype(np.float32)
    with config.override(MXNET_MKLDNN_ENABLED=False,
                         MXNET_CPU_PARALLEL_SIZE=1 if split else 10 ** 9):
        got = run1('Pooling', [x.transpose(0, 2, 3, 1).copy()], layout='NHWC', **kwargs)
        first = run1('Pooling', [x], **kwargs)
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), expected, rtol=1e-6)
    np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), first)


def test_channel_last_padding_scratch_is_channel_last():
    from ember.op.nn import pooling
    from ember.op.nn._common import pool_window
    attrs = registry.get('Pooling').parse_attrs(dict(kernel=(3, 3), pad=(1, 1),
                                                     layout='NHWC'))
    x = np.zeros((2, 5, 5, 4), np.float32).transpose(0, 3, 1, 2)    # channel-first view
    window = pool_window(attrs, x.shape[2:])
    buffer = pooling._pad_buffer(attrs, x, window, KernelContext(None))
    assert buffer.shape == (2, 4, 7, 7) and buffer.strides[1] == 4     # channels innermost


def test_pooling_global_and_same():
    x = RNG.standard_normal((2, 3, 5, 4))
    np.testing.assert_allclose(run1('Pooling', [x], global_pool=True, pool_type='avg'),
                               x.mean(axis=(2, 3), keepdims=True))
    x1 = RNG.standard_normal((1, 2, 7))
    same = run1('Pooling', [x1], kernel=(3,), stride=(2,), pooling_convention='same')
    assert same.shape == (1, 2, 4)   # ceil(7 / 2)
    # total padding (4 - 1) * 2 + 3 - 7 = 2: one on each side
    padded = np.pad(x1, ((0, 0), (0, 0), (1, 1)), constant_values=-np.inf)
    np.testing.assert_allclose(same[..., 1], padded[..., 2:5].max(-1))


def test_reshape_view_is_a_view_or_none_and_rejects_other_sizes():
    from ember.op.nn._common import reshape_view
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    view = reshape_view(a, (-1, 4))
    assert view.shape == (6, 4) and np.shares_memory(view, a)
    view[0, 0] = 7
    assert a[0, 0, 0] == 7
    assert reshape_view(a.transpose(0, 2, 1), (-1, 3)) is None     # needs a copy
    assert reshape_view(a[:, ::2], (-1,)) is None
    assert np.shares_memory(reshape_view(a[:, :, ::2], (6, 2)), a)    # strides that merge
    with pytest.raises(ValueError, match='size'):
        reshape_view(a, (5, 5))
    with pytest.raises(ValueError):
        reshape_view(a.transpose(0, 2, 1), (-1, 5))


def test_fully_connected():
    x, w, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((5, 12)), RNG.standard_normal(5)
    np.testing.assert_allclose(run1('FullyConnected', [x, w, b], num_hidden=5),
                               x.reshape(2, 12) @ w.T + b)
    w2 = RNG.standard_normal((5, 4))
    np.testing.assert_allclose(run1('FullyConnected', [x, w2], num_hidden=5, flatten=False,
                                    no_bias=True), x @ w2.T)


def test_batchnorm_training_inference_and_moving_statistics():
    x = RNG.standard_normal((4, 3, 2, 2)) * 2 + 1
    gamma, beta = RNG.standard_normal(3), RNG.standard_normal(3)
    moving_mean, moving_var = np.zeros(3), np.ones(3)
    out, mean, invstd = run('BatchNorm', [x, gamma, beta, moving_mean, moving_var],
                            is_train=True, fix_gamma=False, momentum=0.75, eps=1e-3,
                            output_mean_var=True)
    batch_mean, batch_var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    shape = (1, 3, 1, 1)
    expected = (x - batch_mean.reshape(shape)) / np.sqrt(batch_var.reshape(shape) + 1e-3)
    np.testing.assert_allclose(out, expected * gamma.reshape(shape) + beta.reshape(shape))
    np.testing.assert_allclose(mean, batch_mean)
    np.testing.assert_allclose(invstd, 1 / np.sqrt(batch_var + 1e-3))
    np.testing.assert_allclose(moving_mean, 0.25 * batch_mean)
    np.testing.assert_allclose(moving_var, 0.75 + 0.25 * batch_var)
    # inference uses (and leaves) the moving statistics; fix_gamma ignores gamma
    before = moving_mean.copy()
    out = run1('BatchNorm', [x, gamma, beta, moving_mean, moving_var], eps=1e-3)
    expected = (x - before.reshape(shape)) / np.sqrt(moving_var.reshape(shape) + 1e-3)
    np.testing.assert_allclose(out, expected + beta.reshape(shape))
    np.testing.assert_array_equal(moving_mean, before)


def test_batchnorm_float16_keeps_float32_parameters():
    op = registry.get('BatchNorm')
    ins, outs = op.infer_type(op.parse_attrs({}), [np.dtype('float16')] + [None] * 4)
    assert ins[1:] == [np.dtype('float32')] * 4 and outs[0] == np.dtype('float16')
    x = RNG.standard_normal((4, 2)).astype(np.float16)
    params = [np.ones(2, np.float32), np.zeros(2, np.float32), np.zeros(2, np.float32),
              np.ones(2, np.float32)]
    out = run1('BatchNorm', [x] + params, is_train=True)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, (x - x.mean(0)) / np.sqrt(x.astype(np.float32).var(0)
                                                               + 1e-3), atol=2e-3)


def test_layer_and_instance_norm():
    x, gamma, beta = RNG.standard_normal((2, 3, 4)), RNG.standard_normal(4), RNG.standard_normal(4)
    out, mean, std = run('LayerNorm', [x, gamma, beta], output_mean_var=True)
    np.testing.assert_allclose(mean, x.mean(-1, keepdims=True))
    np.testing.assert_allclose(std, np.sqrt(x.var(-1, keepdims=True) + 1e-5))
    np.testing.assert_allclose(out, (x - mean) / std * gamma + beta)
    gamma3, beta3 = RNG.standard_normal(3), RNG.standard_normal(3)
    out = run1('InstanceNorm', [x, gamma3, beta3], eps=0.01)
    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 0.01)
    np.testing.assert_allclose(out, normed * gamma3[:, None] + beta3[:, None])


def test_float16_statistics_accumulate_in_float32():
    x = (RNG.standard_normal((2, 2048)) + 100).astype(np.float16)
    gamma, beta = np.ones(2048, np.float16), np.zeros(2048, np.float16)
    out = run1('LayerNorm', [x, gamma, beta])
    x32 = x.astype(np.float32)
    expected = (x32 - x32.mean(-1, keepdims=True)) / np.sqrt(x32.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.astype(np.float32), expected, atol=1e-2)


def test_safe_accumulation_widens_float32_reductions():
    from ember.op.nn._common import accumulation_dtype
    assert accumulation_dtype(np.float32) == np.float32
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        assert accumulation_dtype(np.float32) == np.float64
        x = np.full((1, 10**6), 1 + 2**-20, np.float32)
        x[0, 0] = 0
        mean = run('LayerNorm', [x, np.ones(10**6, np.float32), np.zeros(10**6, np.float32)],
                   output_mean_var=True)[1]
    assert mean.dtype == np.float32
    assert abs(float(mean[0, 0]) - (1 + 2**-20) * (1 - 1e-6)) < 1e-6


def test_lrn_matches_loop():
    x = RNG.standard_normal((2, 5, 2, 2))
    out = run1('LRN', [x], nsize=3, alpha=0.3, beta=0.75, knorm=2.0)
    expected = np.empty_like(x)
    for c in range(5):
        window = x[:, max(c - 1, 0):c + 2]
        expected[:, c] = x[:, c] / (2.0 + 0.3 / 3 * (window ** 2).sum(1)) ** 0.75
    np.testing.assert_allclose(out, expected)


def test_activations():
    x = np.linspace(-3, 3, 13)
    expected = {'relu': np.maximum(x, 0), 'sigmoid': 1 / (1 + np.exp(-x)), 'tanh': np.tanh(x),
                'softrelu': np.log1p(np.exp(x)), 'softsign': x / (1 + np.abs(x))}
    for act, value in expected.items():
        np.testing.assert_allclose(run1('Activation', [x], act_type=act), value, atol=1e-12)
    np.testing.assert_allclose(run1('LeakyReLU', [x], slope=0.1), np.where(x > 0, x, 0.1 * x))
    np.testing.assert_allclose(run1('LeakyReLU', [x], act_type='elu', slope=0.5),
                               np.where(x > 0, x, 0.5 * np.expm1(x)))
    gelu = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x]
    np.testing.assert_allclose(run1('LeakyReLU', [x], act_type='gelu'), gelu, atol=1e-12)
    selu = 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x))
    np.testing.assert_allclose(run1('LeakyReLU', [x], act_type='selu'), selu)
    # rrelu: the mean slope in prediction, random slopes within the bounds in training
    np.testing.assert_allclose(run1('LeakyReLU', [x], act_type='rrelu', lower_bound=0.1,
                                    upper_bound=0.3), np.where(x > 0, x, 0.2 * x))
    out, mask = run('LeakyReLU', [-np.ones(1000)], act_type='rrelu', is_train=True)
    assert 0.125 <= mask.min() and mask.max() <= 0.334 and mask.std() > 0.03
    np.testing.assert_allclose(out, -mask)


def test_softmax_family():
    x = RNG.standard_normal((3, 4)) * 5
    e = np.exp((x - x.max(1, keepdims=True)) / 2)
    np.testing.assert_allclose(run1('softmax', [x], temperature=2.0),
                               e / e.sum(1, keepdims=True))
    np.testing.assert_allclose(run1('log_softmax', [x]),
                               x - np.log(np.exp(x).sum(1, keepdims=True)))
    np.testing.assert_allclose(run1('softmin', [x], axis=0),
                               np.exp(-x) / np.exp(-x).sum(0, keepdims=True))
    masked = run1('softmax', [x, np.array([1, 4, 0])], use_length=True)
    np.testing.assert_allclose(masked[0], [1, 0, 0, 0])
    np.testing.assert_allclose(masked[1], np.exp(x[1]) / np.exp(x[1]).sum())
    np.testing.assert_array_equal(masked[2], 0)
    half = run1('softmax', [x.astype(np.float16)], dtype='float32')
    assert half.dtype == np.float32


def test_softmax_output_backward_is_softmax_minus_onehot():
    x, label = RNG.standard_normal((4, 3)), np.array([0., 2., 1., 2.])
    prob = run1('SoftmaxOutput', [x, label])
    np.testing.assert_allclose(prob, np.exp(x) / np.exp(x).sum(1, keepdims=True))
    onehot = np.eye(3)[label.astype(int)]
    f = EagerF(True)
    grad_of = registry.get('SoftmaxOutput').gradient

    def grad(**kw):
        attrs = registry.get('SoftmaxOutput').parse_attrs(kw)
        return grad_of(f, attrs, [x, label], [prob], [np.ones_like(prob)])[0]
    np.testing.assert_allclose(grad(), prob - onehot)
    np.testing.assert_allclose(grad(grad_scale=2, normalization='batch'), (prob - onehot) / 2)
    ignored = grad(use_ignore=True, ignore_label=2, normalization='valid')
    np.testing.assert_allclose(ignored, (prob - onehot) * (label != 2)[:, None] / 2)
    smooth = 0.3 * (1 - onehot) / 2 + 0.7 * onehot
    np.testing.assert_allclose(grad(smooth_alpha=0.3), prob - smooth)
    # multi_output: softmax over axis 1 with labels (N, spatial)
    x4, label4 = RNG.standard_normal((2, 3, 2)), np.array([[0., 2.], [1., 1.]])
    prob4 = run1('SoftmaxOutput', [x4, label4], multi_output=True)
    np.testing.assert_allclose(prob4.sum(1), 1)
    attrs = registry.get('SoftmaxOutput').parse_attrs({'multi_output': True})
    g4 = grad_of(f, attrs, [x4, label4], [prob4], [np.ones_like(prob4)])[0]
    np.testing.assert_allclose(g4, prob4 - np.eye(3)[label4.astype(int)].transpose(0, 2, 1))


def test_regression_outputs_and_make_loss():
    x, label = RNG.standard_normal((4, 2)), RNG.standard_normal((4, 2))
    f = EagerF(True)
    for name, forward, grad in [
            ('LinearRegressionOutput', x, x - label),
            ('LogisticRegressionOutput', 1 / (1 + np.exp(-x)), 1 / (1 + np.exp(-x)) - label),
            ('MAERegressionOutput', x, np.sign(x - label))]:
        op = registry.get(name)
        out = run1(name, [x, label])
        np.testing.assert_allclose(out, forward)
        got = op.gradient(f, op.parse_attrs({}), [x, label], [out], [np.ones_like(out)])[0]
        np.testing.assert_allclose(got, grad / 2)   # divided by the outputs per sample
    op = registry.get('MakeLoss')
    got = op.gradient(f, op.parse_attrs({'grad_scale': 3, 'normalization': 'batch'}), [x], [x],
                      [np.ones_like(x)])[0]
    np.testing.assert_allclose(got, np.full_like(x, 0.75))


def test_dropout_modes():
    x = np.ones((200, 50))
    out, mask = run('Dropout', [x], p=0.3, is_train=True)
    kept = out != 0
    assert abs(kept.mean() - 0.7) < 0.02
    np.testing.assert_allclose(out[kept], 1 / 0.7)
    np.testing.assert_array_equal(out, mask)
    out, mask = run('Dropout', [x], p=0.3)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(mask, 1)
    assert (run1('Dropout', [x], p=0.3, mode='always') == 0).any()
    shared = run1('Dropout', [x], p=0.5, axes=(1,), is_train=True)
    assert (shared == shared[:, :1]).all() and 0 < (shared[:, 0] == 0).mean() < 1
    np.testing.assert_array_equal(run1('Dropout', [x], p=1.0, is_train=True), 0)


def test_embedding_clips_indices():
    weight = RNG.standard_normal((4, 3))
    index = np.array([[0, 3], [5, -1]], dtype=np.float32)
    out = run1('Embedding', [index, weight], input_dim=4, output_dim=3)
    np.testing.assert_allclose(out, weight[[[0, 3], [3, 0]]])
    op = registry.get('Embedding')
    _, dtypes = op.infer_type(op.parse_attrs({'input_dim': 4, 'output_dim': 3,
                                              'dtype': 'float16'}), [np.dtype('int32'), None])
    assert dtypes == [np.dtype('float16')]


def test_upsampling_nearest_and_bilinear():
    x = RNG.standard_normal((1, 2, 2, 3))
    out = run1('UpSampling', [x], scale=2, sample_type='nearest', num_args=1)
    np.testing.assert_allclose(out, x.repeat(2, axis=2).repeat(2, axis=3))
    small, big = RNG.standard_normal((1, 1, 2, 2)), RNG.standard_normal((1, 1, 4, 4))
    summed = run1('UpSampling', [small, big], scale=2, sample_type='nearest', num_args=2,
                  multi_input_mode='sum')
    np.testing.assert_allclose(summed, small.repeat(2, 2).repeat(2, 3) + big)
    weight = np.zeros((2, 1, 4, 4))
    weight[:, :, 1:3, 1:3] = 1   # a box filter centred on each 2x2 output block
    bilinear = run1('UpSampling', [x, weight], scale=2, sample_type='bilinear', num_args=2,
                    num_filter=2)
    assert bilinear.shape == (1, 2, 4, 6)
    np.testing.assert_allclose(bilinear, out)


@pytest.mark.parametrize('mode', ['constant', 'edge', 'reflect'])
def test_pad_matches_numpy(mode):
    x = RNG.standard_normal((1, 2, 3, 4))
    width = (0, 0, 0, 0, 2, 1, 1, 3)
    out = run1('Pad', [x], mode=mode, pad_width=width, constant_value=1.5)
    kw = {'constant_values': 1.5} if mode == 'constant' else {}
    np.testing.assert_allclose(out, np.pad(x, [(0, 0), (0, 0), (2, 1), (1, 3)], mode=mode, **kw))


def test_smooth_l1():
    x = np.array([-2.0, -0.1, 0.0, 0.3, 1.0])
    sigma2 = 4.0
    expected = np.where(np.abs(x) < 1 / sigma2, 0.5 * sigma2 * x * x, np.abs(x) - 0.5 / sigma2)
    np.testing.assert_allclose(run1('smooth_l1', [x], scalar=2.0), expected)


def test_topk_sort_argsort():
    x = np.array([[3., 1., 4., 1.], [5., 9., 2., 6.]])
    value, indices = run('topk', [x], k=2, ret_typ='both')
    np.testing.assert_array_equal(value, [[4, 3], [9, 6]])
    np.testing.assert_array_equal(indices, [[2, 0], [1, 3]])
    assert indices.dtype == np.float32
    mask = run1('topk', [x], k=1, ret_typ='mask', is_ascend=True)
    np.testing.assert_array_equal(mask, [[0, 1, 0, 0], [0, 0, 1, 0]])
    flat = run1('topk', [x], k=3, axis='None', dtype='int32')  # MXNet's text for None
    np.testing.assert_array_equal(flat, [5, 7, 4])
    np.testing.assert_array_equal(run1('sort', [x], axis=0, is_ascend=False),
                                  -np.sort(-x, axis=0))
    np.testing.assert_array_equal(run1('argsort', [x]), [[1, 3, 0, 2], [2, 0, 3, 1]])
    np.testing.assert_array_equal(run1('argsort', [x], is_ascend=False),
                                  [[2, 0, 1, 3], [1, 3, 0, 2]])


def sigmoid(v):
    return 1 / (1 + np.exp(-v))


def lstm_reference(x, params, h, c, hidden):
    """One-layer unidirectional LSTM, sample by sample, with the packed layout."""
    size_in, rows = x.shape[2], 4 * hidden
    wx = params[:rows * size_in].reshape(rows, size_in)
    wh = params[rows * size_in:rows * (size_in + hidden)].reshape(rows, hidden)
    bias = params[rows * (size_in + hidden):]
    bx, bh = bias[:rows], bias[rows:]
    out = np.zeros(x.shape[:2] + (hidden,))
    for n in range(x.shape[1]):
        hn, cn = h[0, n], c[0, n]
        for t in range(x.shape[0]):
            a = wx @ x[t, n] + bx + wh @ hn + bh
            i, f, g, o = sigmoid(a[:hidden]), sigmoid(a[hidden:2 * hidden]), \
                np.tanh(a[2 * hidden:3 * hidden]), sigmoid(a[3 * hidden:])
            cn = f * cn + i * g
            hn = o * np.tanh(cn)
            out[t, n] = hn
    return out


def gru_reference_step(x, h, wx, wh, bx, bh, hidden):
    gx, gh = wx @ x + bx, wh @ h + bh
    r = sigmoid(gx[:hidden] + gh[:hidden])
    z = sigmoid(gx[hidden:2 * hidden] + gh[hidden:2 * hidden])
    n = np.tanh(gx[2 * hidden:] + r * gh[2 * hidden:])
    return (1 - z) * n + z * h


def test_rnn_lstm_matches_reference():
    x = RNG.standard_normal((4, 2, 3))
    shapes, _ = infer('RNN', [x.shape, None, None, None], mode='lstm', state_size=2,
                      num_layers=1)
    assert shapes[1] == (4 * 2 * (3 + 2 + 2),)
    params, h, c = (RNG.standard_normal(s) for s in shapes[1:])
    out, hy, cy = run('RNN', [x, params, h, c], mode='lstm', state_size=2, num_layers=1,
                      state_outputs=True)
    expected = lstm_reference(x, params, h, c, 2)
    np.testing.assert_allclose(out, expected)
    np.testing.assert_allclose(hy[0], expected[-1])


def test_rnn_gru_bidirectional_with_sequence_length():
    x, lengths = RNG.standard_normal((3, 2, 2)), np.array([3, 2])
    attrs = dict(mode='gru', state_size=2, num_layers=1, bidirectional=True,
                 use_sequence_length=True, state_outputs=True)
    shapes, out_shapes = infer('RNN', [x.shape, None, None, lengths.shape], **attrs)
    assert out_shapes == [(3, 2, 4), (2, 2, 2)]
    params, h = RNG.standard_normal(shapes[1]), RNG.standard_normal(shapes[2])
    out, hy = run('RNN', [x, params, h, lengths], **attrs)
    rows = 3 * 2
    chunks = np.split(params[:2 * rows * 4], [rows * 2, rows * 4, rows * 6])
    wx_f, wh_f, wx_b, wh_b = (m.reshape(rows, 2) for m in chunks)
    biases = params[2 * rows * 4:].reshape(4, rows)
    state = h[1, 1]   # reverse direction, sample 1 (length 2): starts at t = 1
    for t in (1, 0):
        state = gru_reference_step(x[t, 1], state, wx_b, wh_b, biases[2], biases[3], 2)
        np.testing.assert_allclose(out[t, 1, 2:], state)
    np.testing.assert_array_equal(out[2, 1], 0)
    np.testing.assert_allclose(hy[1, 1], state)
    forward = h[0, 1]
    for t in (0, 1):
        forward = gru_reference_step(x[t, 1], forward, wx_f, wh_f, biases[0], biases[1], 2)
    np.testing.assert_allclose(hy[0, 1], forward)


def test_elementwise_math_values():
    x = np.array([0.2, 0.5, 0.9])
    checks = {'erf': [math.erf(v) for v in x], 'gamma': [math.gamma(v) for v in x],
              'gammaln': [math.lgamma(v) for v in x], 'arctanh': np.arctanh(x),
              'rcbrt': x ** (-1 / 3), 'log_sigmoid': np.log(sigmoid(x)),
              'mish': x * np.tanh(np.log1p(np.exp(x))), 'degrees': np.degrees(x),
              'logical_not': [0, 0, 0]}
    for name, expected in checks.items():
        np.testing.assert_allclose(run1(name, [x]), expected, rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(run1('erf', [run1('erfinv', [x])]), x, rtol=1e-12)
    np.testing.assert_array_equal(run1('logical_not', [np.array([0., 2.])]), [1, 0])
    np.testing.assert_array_equal(run1('sin', [np.array([1, 2], np.int32)]), [0, 0])


# ----------------------------------------------------------------------------------------------
# Shape inference.

def test_inference_fills_parameter_shapes():
    assert infer('FullyConnected', [(8, 3, 4), None, None], num_hidden=5) == (
        [(8, 3, 4), (5, 12), (5,)], [(8, 5)])
    assert infer('Convolution', [(2, 6, 9, 9), None, None], kernel=(3, 3), num_filter=4,
                 num_group=2, stride=(2, 2)) == ([(2, 6, 9, 9), (4, 3, 3, 3), (4,)],
                                                 [(2, 4, 4, 4)])
    assert infer('Convolution', [(2, 9, 9, 6), None], kernel=(3, 3), num_filter=4,
                 no_bias=True, layout='NHWC')[0][1] == (4, 3, 3, 6)
    assert infer('Deconvolution', [(1, 4, 5, 5), None], kernel=(3, 3), stride=(2, 2),
                 num_filter=6, num_group=2) == ([(1, 4, 5, 5), (4, 3, 3, 3)], [(1, 6, 11, 11)])
    shapes, outs = infer('BatchNorm', [(2, 5, 3), None, None, None, None])
    assert shapes[1:] == [(5,)] * 4 and outs == [(2, 5, 3), (5,), (5,)]
    assert infer('Pooling', [(1, 1, 8, 8)], kernel=(3, 3), stride=(2, 2),
                 pooling_convention='full')[1] == [(1, 1, 4, 4)]
    assert infer('SoftmaxOutput', [(4, 10), None])[0][1] == (4,)
    assert infer('Embedding', [(2, 7), None], input_dim=50, output_dim=8) == (
        [(2, 7), (50, 8)], [(2, 7, 8)])


@pytest.mark.parametrize('name, shapes, attrs, message', [
    ('Convolution', [(1, 3, 8, 8), (8, 4, 3, 3), None], dict(kernel=(3, 3), num_filter=8),
     'Convolution: data has 3 channels, weight (8, 4, 3, 3) expects 4'),
    ('Convolution', [(1, 3, 8), None, None], dict(kernel=(3, 3), num_filter=8),
     'needs 4-D data'),
    ('Convolution', [(1, 4, 8, 8), None, None], dict(kernel=(3, 3), num_filter=6,
                                                     num_group=4), 'num_group=4'),
    ('Convolution', [(1, 2, 2, 2), None, None], dict(kernel=(5, 5), num_filter=1),
     'does not fit'),
    ('FullyConnected', [(2, 3, 4), (5, 10), None], dict(num_hidden=5),
     'has 12 input units, weight (5, 10) expects 10'),
    ('FullyConnected', [(2, 12), (5, 12), (4,)], dict(num_hidden=5),
     'bias has shape (4,), expected (5,)'),
    ('BatchNorm', [(2, 3), (4,), None, None, None], dict(), 'gamma has shape (4,)'),
    ('Pooling', [(1, 1, 4, 4)], dict(), 'set kernel or global_pool'),
    ('Pooling', [(1, 1, 4, 4)], dict(kernel=(2, 2), pool_type='lp'), 'needs p_value'),
    ('Pad', [(1, 2, 3)], dict(pad_width=(0, 0, 1, 1)), 'needs 6'),
    ('Deconvolution', [(1, 2, 3, 3), None], dict(kernel=(3, 3), num_filter=2, adj=(2, 2)),
     'adj (2, 2) must be smaller than stride'),
    ('topk', [(2, 3)], dict(k=4), 'k=4 exceeds'),
    ('RNN', [(3, 2, 4), None, None], dict(mode='gru', state_size=2, num_layers=1,
                                          projection_size=2), 'projection_size'),
])
def test_shape_errors_name_operator_and_shapes(name, shapes, attrs, message):
    with pytest.raises(ShapeError, match=re_escape(message)):
        infer(name, shapes, **attrs)


def re_escape(text):
    import re
    return re.escape(text)


def test_attributes_parse_from_mxnet_strings():
    op = registry.get('Convolution')
    attrs = op.parse_attrs({'kernel': '(3, 3)', 'stride': '(2,2)', 'num_filter': '16',
                            'no_bias': 'True', 'cudnn_tune': 'limited_workspace',
                            'workspace': '512', 'layout': 'None'})
    assert attrs['kernel'] == (3, 3) and attrs['no_bias'] is True and attrs['layout'] is None
    bn = registry.get('BatchNorm').parse_attrs({'fix_gamma': 'False', 'eps': '2e-05',
                                                'momentum': '0.9'})
    assert bn['fix_gamma'] is False and bn['eps'] == 2e-5
    assert registry.get('Softmax') is registry.get('SoftmaxOutput')
    softmax = registry.get('softmax').parse_attrs({'axis': '-1', 'temperature': 'None',
                                                   'dtype': 'None'})
    assert softmax['temperature'] is None and softmax['dtype'] is None


def test_every_backward_operator_is_checked():
    ours = {name for name, op in registry.all_ops().items()
            if op.kernel.__module__.startswith('ember.op.nn') and name.startswith('_backward_')}
    forward = {name[len('_backward_'):] for name in ours}
    checked_elsewhere = {'SoftmaxOutput', 'LinearRegressionOutput', 'LogisticRegressionOutput',
                         'MAERegressionOutput', 'MakeLoss',
                         'CTCLoss', 'ctc_loss',     # tests/test_ctc.py
                         'ROIPooling', 'softmax_cross_entropy', 'SVMOutput'}  # test_ops_extra.py
    checked = {case.op.removeprefix('_contrib_') for case in GRADIENT_CASES}
    assert forward - checked_elsewhere - checked == set()
