"""Operators beyond the core of each family (add_n, L2Normalization, moments, the losses,
slice_like, diag, scatter_nd, ROIPooling, the further random draws, ...) and those of
ember.op.sequence, through mx.nd: forward outputs against NumPy references (and MXNet's documented examples), gradients computed by mx.autograd against
central finite differences, shape errors, random draws and their parameter checks."""
import itertools

import numpy as np
import pytest

import ember as mx
from ember.base import EmberError
from ember.op import registry
from ember.op.registry import ShapeError

F64 = np.float64


def nd64(values):
    return mx.nd.array(np.asarray(values, F64), dtype=F64)


def as_list(result):
    return list(result) if isinstance(result, (list, tuple)) else [result]


def run(fn, values):
    return [o.asnumpy() for o in as_list(fn(*[nd64(v) for v in values]))]


def check_forward(fn, values, expected, rtol=1e-10, atol=1e-12):
    got = run(fn, values)
    expected = as_list(expected)
    assert len(got) == len(expected)
    for out, want in zip(got, expected):
        np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)


def check_gradient(fn, values, wrt=None, eps=1e-6, rtol=1e-6, atol=1e-8, seed=0):
    """mx.autograd's gradient of sum(head * fn(values)) against central differences."""
    values = [np.asarray(v, F64) for v in values]
    wrt = range(len(values)) if wrt is None else wrt
    inputs = [nd64(v) for v in values]
    for index in wrt:
        inputs[index].attach_grad()
    with mx.autograd.record():
        outputs = as_list(fn(*inputs))
    rng = np.random.default_rng(seed)
    heads = [rng.standard_normal(o.shape) for o in outputs]
    mx.autograd.backward(outputs, [nd64(h) for h in heads])

    def loss(shifted):
        return sum(float((o * h).sum()) for o, h in zip(run(fn, shifted), heads))
    for index in wrt:
        numeric = np.zeros_like(values[index])
        for pos in np.ndindex(*values[index].shape):
            plus, minus = [v.copy() for v in values], [v.copy() for v in values]
            plus[index][pos] += eps
            minus[index][pos] -= eps
            numeric[pos] = (loss(plus) - loss(minus)) / (2 * eps)
        np.testing.assert_allclose(inputs[index].grad.asnumpy(), numeric, rtol=rtol, atol=atol,
                                   err_msg=f'gradient of input {index}')


def normal(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


def distinct(*shape, seed=2):
    """Values 0.3 apart at least: no ties for maxima."""
    size = int(np.prod(shape))
    rng = np.random.default_rng(seed)
    return (rng.permutation(size).reshape(shape) - size / 2) * 0.3 + rng.uniform(0, 0.1, shape)


# ----------------------------------------------------------------------------------------------
# Sums, normalisation, moments

def test_add_n_and_its_alias():
    a, b, c = normal(2, 3, seed=1), normal(2, 3, seed=2), normal(2, 3, seed=3)
    check_forward(mx.nd.add_n, [a, b, c], a + b + c)
    check_forward(lambda *x: mx.nd.ElementWiseSum(*x, num_args=2), [a, b], a + b)
    check_forward(mx.nd.add_n, [a], a)
    check_gradient(mx.nd.add_n, [a, b, c])
    with pytest.raises(ShapeError):
        mx.nd.add_n(mx.nd.ones((2, 3)), mx.nd.ones((3, 2)))


def l2_reference(x, mode, eps):
    axes = {'instance': tuple(range(1, x.ndim)), 'channel': (1,),
            'spatial': tuple(range(2, x.ndim))}[mode]
    return x / np.sqrt((x * x).sum(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize('mode', ['instance', 'channel', 'spatial'])
def test_l2_normalization(mode):
    x = normal(2, 3, 4)
    fn = lambda d: mx.nd.L2Normalization(d, mode=mode, eps=1e-6)   # noqa: E731
    check_forward(fn, [x], l2_reference(x, mode, 1e-6))
    check_gradient(fn, [x])


def test_l2_normalization_default_mode_is_instance_and_has_one_visible_output():
    x = normal(3, 5)
    out = mx.nd.L2Normalization(nd64(x))
    assert isinstance(out, mx.nd.NDArray)
    np.testing.assert_allclose(np.linalg.norm(out.asnumpy(), axis=1), np.ones(3), rtol=1e-9)


@pytest.mark.parametrize('axes, keepdims', [((1,), False), ((0, 2), True), (None, False)])
def test_moments(axes, keepdims):
    x = normal(2, 3, 4)
    fn = lambda d: mx.nd.moments(d, axes=axes, keepdims=keepdims)   # noqa: E731
    check_forward(fn, [x], [x.mean(axis=axes, keepdims=keepdims).reshape(-1) if axes is None
                            else x.mean(axis=axes, keepdims=keepdims),
                            x.var(axis=axes, keepdims=keepdims).reshape(-1) if axes is None
                            else x.var(axis=axes, keepdims=keepdims)])
    check_gradient(fn, [x])


@pytest.mark.parametrize('name, reference, gap', [('nansum', np.nansum, 0.0),
                                                  ('nanprod', np.nanprod, 0.3)])
def test_nan_reductions(name, reference, gap):
    x = normal(3, 4)
    x = np.sign(x) * (np.abs(x) + gap)       # nanprod's gradient divides by x
    holes = x.copy()
    holes[0, 1] = holes[2, 3] = np.nan
    fn = getattr(mx.nd, name)
    check_forward(lambda d: fn(d, axis=1), [holes], reference(holes, axis=1))
    check_forward(lambda d: fn(d, axis=0, keepdims=True), [holes],
                  reference(holes, axis=0, keepdims=True))
    check_forward(fn, [holes], [reference(holes)])
    check_gradient(lambda d: fn(d, axis=1), [x])
    data = nd64(holes)
    data.attach_grad()
    with mx.autograd.record():
        out = fn(data, axis=1)
    out.backward()
    grad = data.grad.asnumpy()
    assert grad[0, 1] == 0 and grad[2, 3] == 0 and np.isfinite(grad).all()
    assert getattr(data, name)().shape == (1,)      # the fluent method


# ----------------------------------------------------------------------------------------------
# Losses

def log_softmax(x):
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def test_softmax_cross_entropy():
    x, label = normal(4, 5), np.array([0, 4, 2, 2])
    expected = -log_softmax(x)[np.arange(4), label].sum()
    check_forward(mx.nd.softmax_cross_entropy, [x, label], [[expected]])
    check_gradient(mx.nd.softmax_cross_entropy, [x, label], wrt=[0])
    with pytest.raises(ShapeError, match='label'):
        mx.nd.softmax_cross_entropy(mx.nd.ones((4, 5)), mx.nd.ones((3,)))


def svm_gradient(score, label, margin, coef, linear):
    grad = np.zeros_like(score)
    for row, col in itertools.product(range(score.shape[0]), range(score.shape[1])):
        s = score[row, col]
        if col == label[row]:
            grad[row, col] = -coef * (1.0 if linear else 2 * (margin - s)) * (margin > s)
        else:
            grad[row, col] = coef * (1.0 if linear else 2 * (margin + s)) * (margin > -s)
    return grad


@pytest.mark.parametrize('linear', [False, True])
def test_svm_output_is_identity_forward_and_hinge_gradient_backward(linear):
    score, label = normal(5, 3) * 2, np.array([0, 1, 2, 1, 0])
    data = nd64(score)
    data.attach_grad()
    with mx.autograd.record():
        out = mx.nd.SVMOutput(data, nd64(label), margin=1.5, regularization_coefficient=0.5,
                              use_linear=linear)
    out.backward(nd64(np.full((5, 3), 7.0)))        # the incoming gradient is ignored
    np.testing.assert_array_equal(out.asnumpy(), score)
    np.testing.assert_allclose(data.grad.asnumpy(),
                               svm_gradient(score, label, 1.5, 0.5, linear), rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# Shapes and layout

def test_slice_like():
    x = normal(3, 4, 5)
    check_forward(lambda d, s: mx.nd.slice_like(d, s), [x, np.zeros((2, 3, 4))], x[:2, :3, :4])
    check_forward(lambda d, s: mx.nd.slice_like(d, s, axes=(0, -1)), [x, np.zeros((2, 1, 3))],
                  x[:2, :, :3])
    check_gradient(lambda d, s: mx.nd.slice_like(d, s, axes=(1,)), [x, np.zeros((1, 2))],
                   wrt=[0])
    with pytest.raises(ShapeError, match='shorter'):
        mx.nd.slice_like(mx.nd.ones((2, 2)), mx.nd.ones((3, 2)))
    with pytest.raises(ShapeError, match='same number of dimensions'):
        mx.nd.slice_like(mx.nd.ones((2, 2)), mx.nd.ones((2,)))


@pytest.mark.parametrize('shape, attrs', [
    ((4,), {}), ((3,), {'k': 2}), ((3,), {'k': -1}), ((3, 4), {}), ((3, 4), {'k': 1}),
    ((4, 3), {'k': -2}), ((2, 3, 4), {'axis1': 1, 'axis2': 2}),
    ((2, 3, 4), {'k': 1, 'axis1': 2, 'axis2': 0}),
])
def test_diag(shape, attrs):
    x = normal(*shape)
    k = attrs.get('k', 0)
    expected = (np.diag(x, k) if x.ndim == 1 else
                np.diagonal(x, k, attrs.get('axis1', 0), attrs.get('axis2', 1)))
    fn = lambda d: mx.nd.diag(d, **attrs)   # noqa: E731
    check_forward(fn, [x], expected)
    check_gradient(fn, [x])


def test_diag_errors_and_fluent_method():
    with pytest.raises(ShapeError, match='no diagonal'):
        mx.nd.diag(mx.nd.ones((2, 3)), k=3)
    with pytest.raises(ShapeError, match='same axis'):
        mx.nd.diag(mx.nd.ones((2, 3)), axis1=1, axis2=-1)
    assert mx.nd.ones((3, 3)).diag().shape == (3,)


def test_shape_and_size_arrays():
    x = mx.nd.ones((2, 3, 4))
    shape, size = mx.nd.shape_array(x), mx.nd.size_array(x)
    assert shape.dtype == np.int64 and size.dtype == np.int64
    assert shape.asnumpy().tolist() == [2, 3, 4] and size.asnumpy().tolist() == [24]


def test_scatter_nd():
    data, index = normal(3, 2), np.array([[0, 2, 1], [1, 0, 3]])
    expected = np.zeros((3, 4, 2))
    expected[index[0], index[1]] = data
    fn = lambda d, i: mx.nd.scatter_nd(d, i, shape=(3, 4, 2))   # noqa: E731
    check_forward(fn, [data, index], expected)
    check_gradient(fn, [data, index], wrt=[0])
    with pytest.raises(ShapeError, match='need'):
        mx.nd.scatter_nd(mx.nd.ones((2,)), mx.nd.array(index), shape=(3, 4))


def test_argmax_channel_follows_mxnets_example():
    x = mx.nd.array([[0, 1, 2], [3, 4, 5]])
    assert mx.nd.argmax_channel(x).asnumpy().tolist() == [2, 2]
    y = distinct(2, 3, 4)
    np.testing.assert_array_equal(mx.nd.argmax_channel(nd64(y)).asnumpy(), y.argmax(axis=-1))


def test_depth_to_space_and_back_follow_mxnets_example():
    x = np.arange(24, dtype=F64).reshape(1, 4, 2, 3)
    expected = [[[[0, 6, 1, 7, 2, 8], [12, 18, 13, 19, 14, 20], [3, 9, 4, 10, 5, 11],
                  [15, 21, 16, 22, 17, 23]]]]
    check_forward(lambda d: mx.nd.depth_to_space(d, 2), [x], np.array(expected, F64))
    check_forward(lambda d: mx.nd.space_to_depth(d, block_size=2), [np.array(expected, F64)],
                  x)
    check_gradient(lambda d: mx.nd.depth_to_space(d, 2), [normal(1, 4, 1, 2)])
    check_gradient(lambda d: mx.nd.space_to_depth(d, 2), [normal(1, 1, 2, 4)])
    with pytest.raises(ShapeError, match='multiple'):
        mx.nd.depth_to_space(mx.nd.ones((1, 3, 2, 2)), 2)
    with pytest.raises(ShapeError, match='multiples'):
        mx.nd.space_to_depth(mx.nd.ones((1, 1, 3, 2)), 2)


def test_khatri_rao_follows_mxnets_example():
    a, b = np.array([[1, -1], [2, -3]], F64), np.array([[1, 4], [2, 5], [3, 6]], F64)
    expected = [[1, -4], [2, -5], [3, -6], [2, -12], [4, -15], [6, -18]]
    check_forward(mx.nd.khatri_rao, [a, b], np.array(expected, F64))
    check_gradient(mx.nd.khatri_rao, [normal(2, 3), normal(3, 3, seed=4), normal(2, 3, seed=5)])
    with pytest.raises(ShapeError, match='column'):
        mx.nd.khatri_rao(mx.nd.ones((2, 3)), mx.nd.ones((2, 2)))


# ----------------------------------------------------------------------------------------------
# ROIPooling

def test_roi_pooling_on_a_ramp():
    data = np.arange(64, dtype=F64).reshape(1, 1, 8, 8)
    rois = np.array([[0, 0, 0, 7, 7], [0, 2, 2, 5, 5], [0, 3, 1, 3, 6]], F64)
    out = run(lambda d, r: mx.nd.ROIPooling(d, r, pooled_size=(2, 2), spatial_scale=1.0),
              [data, rois])[0]
    # the maximum of a bin of a ramp is its bottom-right corner
    assert out[0, 0].tolist() == [[27, 31], [59, 63]]
    assert out[1, 0].tolist() == [[27, 29], [43, 45]]
    assert out[2, 0].tolist() == [[27, 27], [51, 51]]    # one column wide: both bins see it


def test_roi_pooling_scales_coordinates_and_clips_to_the_map():
    data = np.arange(16, dtype=F64).reshape(1, 1, 4, 4)
    rois = np.array([[0, 0, 0, 14, 14]], F64)         # 0.5 * 14 = 7: past the 4x4 map
    out = run(lambda d, r: mx.nd.ROIPooling(d, r, pooled_size=(1, 1), spatial_scale=0.5),
              [data, rois])[0]
    assert out.tolist() == [[[[15.0]]]]


def test_roi_pooling_gradient():
    data = distinct(2, 2, 6, 6)
    rois = np.array([[1, 0, 0, 5, 5], [0, 1, 2, 4, 5], [1, 2, 1, 3, 3]], F64)
    fn = lambda d, r: mx.nd.ROIPooling(d, r, pooled_size=(2, 3), spatial_scale=1.0)  # noqa: E731
    check_gradient(fn, [data, rois], wrt=[0], eps=1e-4)


# ----------------------------------------------------------------------------------------------
# Sequence operators

def lengths_of(lengths, batch, max_len):
    return [max_len] * batch if lengths is None else [int(n) for n in lengths]


def mask_reference(x, lengths, axis, value):
    out = x.copy()
    steps = np.moveaxis(out, axis, 0)
    for b, n in enumerate(lengths_of(lengths, steps.shape[1], steps.shape[0])):
        steps[n:, b] = value
    return out


def last_reference(x, lengths, axis):
    steps = np.moveaxis(x, axis, 0)
    return np.stack([steps[n - 1, b] for b, n in
                     enumerate(lengths_of(lengths, steps.shape[1], steps.shape[0]))])


def reverse_reference(x, lengths, axis):
    out = x.copy()
    steps, source = np.moveaxis(out, axis, 0), np.moveaxis(x, axis, 0)
    for b, n in enumerate(lengths_of(lengths, steps.shape[1], steps.shape[0])):
        steps[:n, b] = source[:n, b][::-1]
    return out


SEQUENCE_CASES = [(0, None), (0, [2, 4, 1]), (1, [3.7, 1, 4]), (1, None)]


def sequence_call(name, axis, lengths, **extra):
    if lengths is None:
        return lambda d: getattr(mx.nd, name)(d, axis=axis, **extra)
    return lambda d, n: getattr(mx.nd, name)(d, n, use_sequence_length=True, axis=axis,
                                             **extra)


def sequence_inputs(axis, lengths):
    x = normal(4, 3, 2) if axis == 0 else normal(3, 4, 2)
    return [x] if lengths is None else [x, np.array(lengths, F64)]


@pytest.mark.parametrize('axis, lengths', SEQUENCE_CASES)
def test_sequence_mask(axis, lengths):
    values = sequence_inputs(axis, lengths)
    fn = sequence_call('SequenceMask', axis, lengths, value=-2.5)
    check_forward(fn, values, mask_reference(values[0], lengths, axis, -2.5))
    check_gradient(fn, values, wrt=[0])


@pytest.mark.parametrize('axis, lengths', SEQUENCE_CASES)
def test_sequence_last(axis, lengths):
    values = sequence_inputs(axis, lengths)
    fn = sequence_call('SequenceLast', axis, lengths)
    check_forward(fn, values, last_reference(values[0], lengths, axis))
    check_gradient(fn, values, wrt=[0])


@pytest.mark.parametrize('axis, lengths', SEQUENCE_CASES)
def test_sequence_reverse(axis, lengths):
    values = sequence_inputs(axis, lengths)
    fn = sequence_call('SequenceReverse', axis, lengths)
    check_forward(fn, values, reverse_reference(values[0], lengths, axis))
    check_gradient(fn, values, wrt=[0])


def test_sequence_operators_check_their_inputs():
    with pytest.raises(ShapeError, match='sequence_length'):
        mx.nd.SequenceMask(mx.nd.ones((4, 3)), mx.nd.ones((4,)), use_sequence_length=True)
    with pytest.raises(ShapeError, match='axis=2'):
        mx.nd.SequenceLast(mx.nd.ones((4, 3, 2)), axis=2)
    out = mx.nd.SequenceLast(mx.nd.ones((4, 3)), mx.nd.array([1, 5, 2]),
                             use_sequence_length=True)
    with pytest.raises(EmberError, match=r'sequence_length\[1\]=5 is outside \[1, 4\]'):
        out.asnumpy()


def test_sequence_length_may_be_an_integer_array():
    x = mx.nd.array(np.arange(6).reshape(3, 2))
    lengths = mx.nd.array([1, 2], dtype='int32')
    out = mx.nd.SequenceMask(x, lengths, use_sequence_length=True)
    assert out.asnumpy().tolist() == [[0, 1], [0, 3], [0, 0]]


# ----------------------------------------------------------------------------------------------
# Random draws

def draw(name, **kwargs):
    return getattr(mx.nd, name)(shape=(20000,), **kwargs).asnumpy()


@pytest.mark.parametrize('name, kwargs, mean, var', [
    ('random_exponential', {'lam': 4.0}, 0.25, 0.0625),
    ('random_gamma', {'alpha': 3.0, 'beta': 0.5}, 1.5, 0.75),
    ('random_poisson', {'lam': 2.5}, 2.5, 2.5),
    ('random_negative_binomial', {'k': 3, 'p': 0.4}, 4.5, 11.25),
    ('random_generalized_negative_binomial', {'mu': 2.0, 'alpha': 0.5}, 2.0, 4.0),
    ('random_generalized_negative_binomial', {'mu': 2.0, 'alpha': 0.0}, 2.0, 2.0),
])
def test_random_draws_have_the_distributions_moments(name, kwargs, mean, var):
    values = draw(name, **kwargs)
    assert values.dtype == np.float32
    assert abs(values.mean() - mean) < 5 * np.sqrt(var / values.size)
    assert abs(values.var() - var) < 0.1 * var


def test_random_draws_follow_the_seed_and_dtype():
    mx.random.seed(11)
    first = mx.nd.random_gamma(alpha=2.0, shape=(5,), dtype='float64')
    mx.random.seed(11)
    second = mx.nd._random_gamma(alpha=2.0, shape=(5,), dtype='float64')
    assert first.dtype == np.float64
    np.testing.assert_array_equal(first.asnumpy(), second.asnumpy())
    assert mx.nd.random_poisson().shape == (1,)


@pytest.mark.parametrize('name, kwargs, message', [
    ('random_exponential', {'lam': 0.0}, 'lam=0.0 must be positive'),
    ('random_gamma', {'alpha': -1.0}, 'must be positive'),
    ('random_poisson', {'lam': -1.0}, 'non-negative'),
    ('random_negative_binomial', {'p': 1.5}, r'in \(0, 1\]'),
])
def test_bad_random_parameters_fail_at_the_wait(name, kwargs, message):
    out = getattr(mx.nd, name)(shape=(2,), **kwargs)
    with pytest.raises(EmberError, match=message):
        out.asnumpy()


def test_shuffle_permutes_the_first_axis():
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    mx.random.seed(3)
    first = mx.nd.shuffle(mx.nd.array(x)).asnumpy()
    mx.random.seed(3)
    second = mx.nd._shuffle(mx.nd.array(x)).asnumpy()
    np.testing.assert_array_equal(first, second)
    assert sorted(first[:, 0].tolist()) == x[:, 0].tolist()
    np.testing.assert_array_equal(first[:, 1:] - first[:, :1], x[:, 1:] - x[:, :1])
    assert not np.array_equal(first, x)


def test_registered_names():
    for name in ('add_n', 'ElementWiseSum', 'SequenceMask', 'SequenceLast', 'SequenceReverse',
                 '_random_exponential', 'random_exponential', '_shuffle', 'shuffle',
                 '_backward_SequenceLast', 'moments', 'khatri_rao'):
        registry.get(name)
    assert registry.get('shuffle').random and registry.get('_random_gamma').random
