"""The basic operator families (elemwise, reduce, matrix, indexing, dot, init, random) against
NumPy references.

Forward results are compared with NumPy; gradient rules are checked against central finite
differences by calling each operator's ``gradient`` with ``F = mx.nd`` directly.
"""
import math

import numpy as np
import pytest

from ember import config, engine
from ember import ndarray as nd
from ember.base import EmberError
from ember.op import elemwise, registry
from ember.op.registry import ShapeError

RNG = np.random.default_rng(0)


def values(shape, dtype='float32', low=-2.0, high=2.0):
    return RNG.uniform(low, high, size=shape).astype(dtype)


def run(name, *inputs, **attrs):
    return getattr(nd, name)(*[nd.array(x, dtype=x.dtype) for x in inputs], **attrs)


# ----------------------------------------------------------------------------------------------
# Element-wise

def mxnet_round(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


UNARY = [
    ('negative', np.negative, (-2, 2)), ('abs', np.abs, (-2, 2)), ('sign', np.sign, (-2, 2)),
    ('sqrt', np.sqrt, (0.1, 4)), ('rsqrt', lambda x: 1 / np.sqrt(x), (0.1, 4)),
    ('cbrt', np.cbrt, (-2, 2)), ('square', np.square, (-2, 2)),
    ('reciprocal', np.reciprocal, (0.5, 2)), ('exp', np.exp, (-2, 2)),
    ('expm1', np.expm1, (-2, 2)), ('log', np.log, (0.1, 4)), ('log2', np.log2, (0.1, 4)),
    ('log10', np.log10, (0.1, 4)), ('log1p', np.log1p, (-0.5, 2)),
    ('floor', np.floor, (-3, 3)), ('ceil', np.ceil, (-3, 3)), ('round', mxnet_round, (-3, 3)),
    ('rint', np.rint, (-3, 3)), ('trunc', np.trunc, (-3, 3)), ('fix', np.trunc, (-3, 3)),
]


@pytest.mark.parametrize('name,reference,bounds', UNARY, ids=[u[0] for u in UNARY])
def test_unary_matches_numpy(name, reference, bounds):
    x = values((3, 4), low=bounds[0], high=bounds[1])
    np.testing.assert_allclose(run(name, x).asnumpy(), reference(x), rtol=1e-5, atol=1e-6)


def test_round_takes_halves_away_from_zero():
    assert nd.round(nd.array([0.5, 1.5, -0.5, 2.5])).asnumpy().tolist() == [1, 2, -1, 3]


BINARY = [('add', np.add), ('sub', np.subtract), ('mul', np.multiply),
          ('div', np.true_divide), ('maximum', np.maximum), ('minimum', np.minimum)]


@pytest.mark.parametrize('kind,reference', BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize('lhs_shape,rhs_shape', [((2, 3), (2, 3)), ((2, 1, 4), (3, 1)),
                                                 ((4,), (2, 3, 4))])
def test_broadcast_binary_matches_numpy(kind, reference, lhs_shape, rhs_shape):
    a, b = values(lhs_shape), values(rhs_shape, low=0.5)
    result = run(f'broadcast_{kind}', a, b)
    np.testing.assert_allclose(result.asnumpy(), reference(a, b), rtol=1e-6)
    assert result.dtype == np.float32


def test_power_and_mod_broadcast():
    a, b = values((2, 3), low=0.5), values((3,), low=-2, high=2)
    np.testing.assert_allclose(run('broadcast_power', a, b).asnumpy(), a ** b, rtol=1e-5)
    np.testing.assert_allclose(run('broadcast_mod', a, b).asnumpy(), np.mod(a, b), rtol=1e-5)


def test_mod_follows_the_divisor_sign_and_gives_zero_for_zero():
    a = nd.array([5, -5, 5, -5, 3])
    b = nd.array([3, 3, -3, -3, 0])
    assert (a % b).asnumpy().tolist() == [2, 1, -1, -2, 0]
    assert (a % 0).asnumpy().tolist() == [0] * 5
    assert (7 % nd.array([4, -4])).asnumpy().tolist() == [3, -1]


def test_elemwise_ops_require_equal_shapes_and_dtypes():
    with pytest.raises(ShapeError, match='elemwise_add'):
        nd.elemwise_add(nd.ones((2, 3)), nd.ones((3, 2)))
    with pytest.raises(ShapeError, match='dtype'):
        nd.elemwise_add(nd.ones((2,)), nd.ones((2,), dtype='int32'))
    with pytest.raises(ShapeError, match=r'broadcast_add.*\(2, 3\).*\(4,\)'):
        nd.broadcast_add(nd.ones((2, 3)), nd.ones((4,)))


@pytest.mark.parametrize('dtype', ['float32', 'float64', 'float16', 'int32', 'int64', 'uint8'])
def test_arithmetic_keeps_the_dtype(dtype):
    x = np.arange(1, 7, dtype=dtype).reshape(2, 3)
    a = nd.array(x, dtype=dtype)
    for result, expected in [(a + a, x + x), (a * 2, x * 2), (a - 1, x - 1),
                             (nd.maximum(a, 3), np.maximum(x, 3))]:
        assert result.dtype == np.dtype(dtype).type
        np.testing.assert_array_equal(result.asnumpy(), expected)


def test_scalar_is_cast_to_the_array_dtype_first():
    a = nd.array([1, 2, 3], dtype='int32')
    assert (a + 1.7).asnumpy().tolist() == [2, 3, 4]       # 1.7 -> 1, as MXNet's DType(1.7)
    assert (a * -1.5).asnumpy().tolist() == [-1, -2, -3]
    assert (nd.array([250], dtype='uint8') + 10).asnumpy().tolist() == [4]   # wraps


SCALAR = [('_plus_scalar', lambda x, s: x + s), ('_minus_scalar', lambda x, s: x - s),
          ('_rminus_scalar', lambda x, s: s - x), ('_mul_scalar', lambda x, s: x * s),
          ('_div_scalar', lambda x, s: x / s), ('_rdiv_scalar', lambda x, s: s / x),
          ('_power_scalar', lambda x, s: x ** s), ('_rpower_scalar', lambda x, s: s ** x),
          ('_maximum_scalar', np.maximum), ('_minimum_scalar', np.minimum),
          ('_mod_scalar', np.mod), ('_rmod_scalar', lambda x, s: np.mod(s, x))]


@pytest.mark.parametrize('name,reference', SCALAR, ids=[s[0] for s in SCALAR])
def test_scalar_ops_match_numpy(name, reference):
    x = values((2, 3), low=0.5, high=3)
    np.testing.assert_allclose(run(name, x, scalar=1.5).asnumpy(), reference(x, 1.5),
                               rtol=1e-5)


COMPARISONS = [('equal', np.equal), ('not_equal', np.not_equal), ('greater', np.greater),
               ('greater_equal', np.greater_equal), ('lesser', np.less),
               ('lesser_equal', np.less_equal)]


@pytest.mark.parametrize('kind,reference', COMPARISONS, ids=[c[0] for c in COMPARISONS])
def test_comparisons_return_zero_one_in_the_input_dtype(kind, reference):
    a = np.array([[1, 2, 3], [3, 2, 1]], dtype='float32')
    b = np.array([2, 2, 2], dtype='float32')
    result = run(f'broadcast_{kind}', a, b)
    assert result.dtype == np.float32
    np.testing.assert_array_equal(result.asnumpy(), reference(a, b).astype('float32'))
    scalar = run(f'_{kind}_scalar', a.astype('int32'), scalar=2)
    assert scalar.dtype == np.int32
    np.testing.assert_array_equal(scalar.asnumpy(), reference(a, 2).astype('int32'))


def test_large_elementwise_ops_split_across_threads(monkeypatch):
    calls = []
    real = engine.parallel_for

    def spy(n, fn, split=None):
        pieces = []
        real(n, lambda start, stop: (pieces.append((start, stop)), fn(start, stop)), split)
        calls.append(sorted(pieces))
    monkeypatch.setattr(engine, 'parallel_for', spy)
    x = values((40, 50))
    # the size threshold, as for dtypes the operator tuner does not tune
    with config.override(MXNET_CPU_PARALLEL_SIZE=2000, OMP_NUM_THREADS=4,
                         MXNET_USE_OPERATOR_TUNING='0'):
        big = (nd.array(x) + 1).asnumpy()
        broadcast = (nd.array(x) * nd.array(x[0])).asnumpy()
        assert len(calls) == 2
        assert all(len(pieces) == 4 for pieces in calls)
        assert calls[0][0][0] == 0 and calls[0][-1][1] == 2000
        small = (nd.array(x[:10]) + 1).asnumpy()    # 500 elements: one call, no split
        assert len(calls) == 2
    np.testing.assert_allclose(big, x + 1)
    np.testing.assert_allclose(broadcast, x * x[0])
    np.testing.assert_allclose(small, x[:10] + 1)


# ----------------------------------------------------------------------------------------------
# Reductions

@pytest.mark.parametrize('name', ['sum', 'mean', 'max', 'min', 'prod'])
@pytest.mark.parametrize('axis,keepdims,exclude', [
    (None, False, False), (1, False, False), ((0, 2), True, False), (-1, False, False),
    (1, False, True), ((), False, False)])
def test_reductions_match_numpy(name, axis, keepdims, exclude):
    x = values((2, 3, 4), 'float64', low=0.5, high=1.5)
    result = run(name, x, axis=axis, keepdims=keepdims, exclude=exclude).asnumpy()
    axes = None if axis in (None, ()) else (axis if isinstance(axis, tuple) else (axis,))
    if exclude and axes is not None:
        axes = tuple(i for i in range(3) if i not in [a % 3 for a in axes])
    expected = getattr(np, name)(x, axis=axes, keepdims=keepdims)
    np.testing.assert_allclose(result, np.reshape(expected, result.shape), rtol=1e-12)
    if np.ndim(expected) == 0 and not keepdims:
        assert result.shape == (1,)    # MXNet 1.x: no 0-d results


def test_reduction_axis_errors_raise_at_the_call():
    with pytest.raises(ShapeError, match='sum.*axis 3 is out of bounds'):
        nd.sum(nd.ones((2, 3)), axis=3)


def test_argmax_argmin_give_float_indices():
    x = np.array([[1, 5, 2], [7, 0, 3]], dtype='float32')
    assert run('argmax', x, axis=1).asnumpy().tolist() == [1, 0]
    assert run('argmin', x, axis=0, keepdims=True).asnumpy().tolist() == [[0, 1, 0]]
    assert run('argmax', x).asnumpy().tolist() == [3]
    assert run('argmax', x, axis=1).dtype == np.float32


def test_norm():
    x = values((3, 4), 'float64')
    np.testing.assert_allclose(run('norm', x).asnumpy(), [np.linalg.norm(x)])
    np.testing.assert_allclose(run('norm', x, ord=1, axis=1).asnumpy(), np.abs(x).sum(1))
    assert run('norm', x, axis=0, keepdims=True).shape == (1, 4)


def test_safe_accumulation_widens_float16_sums():
    x = nd.ones((70000,), dtype='float16')
    assert np.isinf(nd.mean(x).asscalar())        # the float16 sum overflows
    with config.override(MXNET_SAFE_ACCUMULATION=True):
        assert nd.mean(x).asscalar() == 1.0


# ----------------------------------------------------------------------------------------------
# dot, batch_dot

@pytest.mark.parametrize('lhs,rhs,ta,tb', [
    ((2, 3), (3, 4), False, False), ((3, 2), (3, 4), True, False),
    ((2, 3), (4, 3), False, True), ((3, 2), (4, 3), True, True),
    ((2, 3, 4), (4, 5), False, False), ((2, 3), (3, 4, 5), False, False),
    ((4, 2, 3), (4, 5), True, False), ((3,), (3, 4), False, False), ((3,), (3,), False, False)])
def test_dot_follows_mxnet(lhs, rhs, ta, tb):
    a, b = values(lhs, 'float64'), values(rhs, 'float64')
    left = a.reshape(a.shape[0], -1).T if ta else a.reshape(-1, a.shape[-1])
    right = b.reshape(-1, b.shape[-1]).T if tb else b.reshape(b.shape[0], -1)
    kept_l = () if a.ndim == 1 else (a.shape[1:] if ta else a.shape[:-1])
    kept_r = () if b.ndim == 1 else (b.shape[:-1] if tb else b.shape[1:])
    expected = (left.reshape(-1, left.shape[-1]) @ right).reshape(kept_l + kept_r or (1,))
    result = run('dot', a, b, transpose_a=ta, transpose_b=tb)
    np.testing.assert_allclose(result.asnumpy(), expected, rtol=1e-12)


def test_dot_shape_error_names_op_and_shapes():
    with pytest.raises(ShapeError, match=r'dot.*\(2, 3\) X \(4, 5\)'):
        nd.dot(nd.ones((2, 3)), nd.ones((4, 5)))


def test_batch_dot():
    a, b = values((5, 2, 3), 'float64'), values((5, 4, 3), 'float64')
    np.testing.assert_allclose(run('batch_dot', a, b, transpose_b=True).asnumpy(),
                               a @ b.swapaxes(1, 2), rtol=1e-12)
    with pytest.raises(ShapeError, match='batch_dot'):
        nd.batch_dot(nd.ones((5, 2, 3)), nd.ones((5, 2, 3)))


# ----------------------------------------------------------------------------------------------
# Reshape and layout

RESHAPES = [  # MXNet's documented examples of the special codes
    ((2, 3, 4), (4, 0, 2), False, (4, 3, 2)), ((2, 3, 4), (2, 0, 0), False, (2, 3, 4)),
    ((2, 3, 4), (6, 1, -1), False, (6, 1, 4)), ((2, 3, 4), (3, -1, 8), False, (3, 1, 8)),
    ((2, 3, 4), (-1,), False, (24,)), ((2, 3, 4), (-2,), False, (2, 3, 4)),
    ((2, 3, 4), (2, -2), False, (2, 3, 4)), ((2, 3, 4), (-2, 1, 1), False, (2, 3, 4, 1, 1)),
    ((2, 3, 4), (-3, 4), False, (6, 4)), ((2, 3, 4, 5), (-3, -3), False, (6, 20)),
    ((2, 3, 4), (0, -3), False, (2, 12)), ((2, 3, 4), (-3, -2), False, (6, 4)),
    ((2, 3, 4), (-4, 1, 2, -2), False, (1, 2, 3, 4)),
    ((2, 3, 4), (2, -4, -1, 3, -2), False, (2, 1, 3, 4)),
    ((10, 5, 4), (-1, 0), False, (40, 5)), ((10, 5, 4), (-1, 0), True, (50, 4)),
]


@pytest.mark.parametrize('shape,codes,reverse,expected', RESHAPES)
def test_reshape_special_codes(shape, codes, reverse, expected):
    x = np.arange(np.prod(shape), dtype='float32').reshape(shape)
    result = run('reshape', x, shape=codes, reverse=reverse)
    assert result.shape == expected
    np.testing.assert_array_equal(result.asnumpy().ravel(), x.ravel())
    assert nd.array(x).reshape(codes, reverse=reverse).shape == expected


def test_reshape_errors_raise_at_the_call():
    with pytest.raises(ShapeError, match='Reshape'):
        nd.reshape(nd.ones((2, 3)), shape=(4, -1))
    with pytest.raises(ShapeError, match='reshape'):
        nd.ones((2, 3)).reshape(5)


LAYOUT = [
    ('transpose', {}, lambda x: x.T), ('transpose', {'axes': (1, 0, 2)},
                                       lambda x: x.transpose(1, 0, 2)),
    ('swapaxes', {'dim1': 0, 'dim2': 2}, lambda x: x.swapaxes(0, 2)),
    ('flip', {'axis': (1,)}, lambda x: x[:, ::-1]),
    ('expand_dims', {'axis': -1}, lambda x: x[..., None]),
    ('Flatten', {}, lambda x: x.reshape(2, -1)),
    ('tile', {'reps': (2, 1, 3)}, lambda x: np.tile(x, (2, 1, 3))),
    ('repeat', {'repeats': 2, 'axis': 1}, lambda x: np.repeat(x, 2, axis=1)),
    ('repeat', {'repeats': 2}, lambda x: np.repeat(x, 2)),
    ('slice', {'begin': (0, 1), 'end': (2, None)}, lambda x: x[0:2, 1:]),
    ('slice', {'begin': (None, None, 3), 'end': (None, None, 0), 'step': (1, -1, -2)},
     lambda x: x[:, ::-1, 3:0:-2]),
    ('slice_axis', {'axis': -1, 'begin': 1, 'end': -1}, lambda x: x[..., 1:-1]),
    ('clip', {'a_min': -0.5, 'a_max': 0.5}, lambda x: np.clip(x, -0.5, 0.5)),
    ('broadcast_axis', {'axis': 1, 'size': 3}, None),
]


@pytest.mark.parametrize('name,attrs,reference', LAYOUT, ids=[f'{n}-{i}' for i, (n, _, __) in
                                                              enumerate(LAYOUT)])
def test_layout_ops_match_numpy(name, attrs, reference):
    x = values((2, 3, 4))
    if reference is None:   # broadcast_axis needs an axis of length 1
        x, reference = x[:, :1], (lambda v: np.broadcast_to(v, (2, 3, 4)))
    np.testing.assert_array_equal(run(name, x, **attrs).asnumpy(), reference(x))


def test_squeeze_and_broadcast_to():
    x = values((2, 1, 3, 1))
    assert run('squeeze', x).shape == (2, 3)
    assert run('squeeze', x, axis=1).shape == (2, 3, 1)
    with pytest.raises(ShapeError, match='squeeze'):
        run('squeeze', x, axis=0)
    np.testing.assert_array_equal(run('broadcast_to', x, shape=(0, 4, 0, 2)).asnumpy(),
                                  np.broadcast_to(x, (2, 4, 3, 2)))
    assert nd.broadcast_like(nd.ones((1, 3)), nd.ones((2, 3))).shape == (2, 3)


def test_slice_selecting_nothing_raises():
    with pytest.raises(ShapeError, match='slice.*selects nothing'):
        nd.slice(nd.ones((3, 3)), begin=(2,), end=(1,))


def test_concat_stack_split():
    a, b = values((2, 3)), values((2, 5))
    np.testing.assert_array_equal(nd.concat(nd.array(a), nd.array(b), dim=1).asnumpy(),
                                  np.concatenate([a, b], 1))
    with pytest.raises(ShapeError, match='Concat'):
        nd.concat(nd.array(a), nd.array(b), dim=0)
    stacked = nd.stack(nd.array(a), nd.array(a * 2), axis=1)
    np.testing.assert_array_equal(stacked.asnumpy(), np.stack([a, a * 2], 1))
    pieces = nd.split(nd.array(b), num_outputs=5, axis=1, squeeze_axis=True)
    assert len(pieces) == 5 and pieces[2].shape == (2,)
    np.testing.assert_array_equal(pieces[2].asnumpy(), b[:, 2])
    assert nd.split(nd.array(a), num_outputs=1, axis=0).shape == (2, 3)
    with pytest.raises(ShapeError, match='num_outputs=2 does not divide'):
        nd.split(nd.array(a), num_outputs=2, axis=1)


def test_where_with_full_and_row_conditions():
    x, y = values((3, 2)), values((3, 2))
    cond = np.array([[1, 0], [0, 1], [1, 1]], dtype='float32')
    np.testing.assert_array_equal(run('where', cond, x, y).asnumpy(), np.where(cond, x, y))
    rows = np.array([1, 0, 1], dtype='float32')
    np.testing.assert_array_equal(run('where', rows, x, y).asnumpy(),
                                  np.where(rows[:, None] != 0, x, y))


def test_cast_take_pick_one_hot_gather():
    x = values((3, 4))
    assert run('cast', x, dtype='int32').dtype == np.int32
    index = np.array([[0, 3], [5, -1]], dtype='float32')
    np.testing.assert_array_equal(run('take', x, index, axis=1).asnumpy(),
                                  np.take(x, np.clip(index, 0, 3).astype(int), axis=1))
    np.testing.assert_array_equal(run('take', x, index, mode='wrap').asnumpy(),
                                  np.take(x, index.astype(int) % 3, axis=0))
    picked = run('pick', x, np.array([0, 3, 1], dtype='float32'), axis=1)
    np.testing.assert_array_equal(picked.asnumpy(), x[[0, 1, 2], [0, 3, 1]])
    hot = run('one_hot', np.array([1, 0, 5], dtype='float32'), depth=3)
    assert hot.asnumpy().tolist() == [[0, 1, 0], [1, 0, 0], [0, 0, 0]]
    where = np.array([[0, 2], [1, 3]], dtype='float32')
    np.testing.assert_array_equal(run('gather_nd', x, where).asnumpy(), x[[0, 2], [1, 3]])


# ----------------------------------------------------------------------------------------------
# Creation and random operators

def test_creation_ops():
    assert nd.zeros((2, 3)).asnumpy().tolist() == [[0] * 3] * 2
    assert nd.ones(4, dtype='int64').dtype == np.int64
    assert nd.full((2,), 7.5).asnumpy().tolist() == [7.5, 7.5]
    np.testing.assert_allclose(nd.arange(1, 2, 0.25).asnumpy(), [1, 1.25, 1.5, 1.75])
    assert nd.arange(4).asnumpy().tolist() == [0, 1, 2, 3]
    assert nd.arange(5, 1, -2, dtype='int32').asnumpy().tolist() == [5, 3]
    with pytest.raises(ShapeError, match='step cannot be 0'):
        nd.arange(0, 1, 0)


def test_random_draws_are_seeded_and_in_range():
    from ember import random
    random.seed(3)
    u = nd.random.uniform(2, 5, shape=(1000,)).asnumpy()
    random.seed(3)
    assert (nd.random.uniform(2, 5, shape=(1000,)).asnumpy() == u).all()
    assert u.min() >= 2 and u.max() < 5 and u.dtype == np.float32
    n = nd.random.normal(1, 2, shape=(4000,), dtype='float64').asnumpy()
    assert abs(n.mean() - 1) < 0.2 and abs(n.std() - 2) < 0.2
    r = nd.random.randint(-3, 3, shape=(500,)).asnumpy()
    assert r.dtype == np.int32 and r.min() == -3 and r.max() == 2
    assert nd.random.uniform().shape == (1,)


@pytest.mark.parametrize('draw', [lambda: nd.random.uniform(-1, 1, shape=(3, 700)),
                                  lambda: nd.random.normal(0, 2, shape=(3, 700)),
                                  lambda: nd.random.randint(-5, 9, shape=(3, 700))])
def test_large_draws_go_in_pieces_with_the_values_of_one_draw(draw, monkeypatch):
    import tracemalloc
    from ember import random
    from ember.op import random as random_ops
    random.seed(11)
    whole = draw().asnumpy()
    monkeypatch.setattr(random_ops, '_DRAW_CHUNK', 256)      # pieces of 256 and a last one of 52
    random.seed(11)
    tracemalloc.start()
    pieces = draw().asnumpy()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_array_equal(pieces, whole)
    # one draw of the whole output would hold 2100 float64 or int64 values (16.8 kB)
    assert peak < 2100 * 8

def test_random_parameters_are_checked_in_the_kernel():
    bad = nd.random.uniform(2, 1, shape=(2,))     # no error at the call
    with pytest.raises(EmberError, match='low=2.0 must be <= high=1.0'):
        bad.wait_to_read()


# ----------------------------------------------------------------------------------------------
# Gradient rules against finite differences (F = mx.nd, called directly).

GRADIENTS = [
    ('broadcast_add', [(2, 3), (3,)], {}), ('broadcast_sub', [(2, 1), (1, 3)], {}),
    ('broadcast_mul', [(2, 3), (2, 1)], {}), ('broadcast_div', [(2, 3), (3,)], {}),
    ('broadcast_power', [(2, 3), (3,)], {}), ('broadcast_maximum', [(2, 3), (3,)], {}),
    ('broadcast_minimum', [(2, 3), (2, 3)], {}), ('elemwise_mul', [(2, 3), (2, 3)], {}),
    ('elemwise_div', [(2, 3), (2, 3)], {}),
    ('_rdiv_scalar', [(2, 3)], {'scalar': 2.0}), ('_power_scalar', [(2, 3)], {'scalar': 3.0}),
    ('_rpower_scalar', [(2, 3)], {'scalar': 2.0}), ('_rminus_scalar', [(3,)], {'scalar': 1}),
    ('sqrt', [(2, 3)], {}), ('rsqrt', [(2, 3)], {}), ('exp', [(2, 3)], {}),
    ('log', [(2, 3)], {}), ('square', [(2, 3)], {}), ('reciprocal', [(2, 3)], {}),
    ('abs', [(2, 3)], {}), ('cbrt', [(2, 3)], {}), ('log1p', [(3,)], {}),
    ('sum', [(2, 3, 4)], {'axis': 1}), ('mean', [(2, 3, 4)], {'axis': (0, 2)}),
    ('sum', [(2, 3, 4)], {'axis': 1, 'exclude': True, 'keepdims': True}),
    ('max', [(2, 3)], {'axis': 1}), ('min', [(2, 3)], {}), ('prod', [(2, 3)], {'axis': 0}),
    ('norm', [(2, 3)], {}), ('norm', [(2, 3)], {'ord': 1, 'axis': 1}),
    ('dot', [(2, 3), (3, 4)], {}), ('dot', [(3, 2), (4, 3)],
                                    {'transpose_a': True, 'transpose_b': True}),
    ('dot', [(2, 3, 4), (4, 2)], {}), ('dot', [(3,), (3, 2)], {}),
    ('batch_dot', [(2, 3, 4), (2, 5, 4)], {'transpose_b': True}),
    ('batch_dot', [(2, 4, 3), (2, 4, 5)], {'transpose_a': True}),
    ('reshape', [(2, 3, 4)], {'shape': (-1, 4)}), ('transpose', [(2, 3, 4)], {'axes': (2, 0, 1)}),
    ('Flatten', [(2, 3, 4)], {}), ('expand_dims', [(2, 3)], {'axis': 1}),
    ('slice', [(3, 4)], {'begin': (1, None), 'end': (3, None), 'step': (1, 2)}),
    ('slice_axis', [(3, 4)], {'axis': 1, 'begin': 1, 'end': 3}),
    ('concat', [(2, 3), (2, 2)], {'dim': 1}), ('stack', [(2, 3), (2, 3)], {'axis': 1}),
    ('split', [(2, 4)], {'num_outputs': 2, 'axis': 1}),
    ('clip', [(2, 3)], {'a_min': -0.5, 'a_max': 0.5}), ('swapaxes', [(2, 3)], {'dim2': 1}),
    ('flip', [(2, 3)], {'axis': (1,)}), ('tile', [(2, 3)], {'reps': (2, 2)}),
    ('repeat', [(2, 3)], {'repeats': 2, 'axis': 0}), ('broadcast_to', [(1, 3)],
                                                      {'shape': (2, 3)}),
    ('_slice_assign', [(3, 4), (2, 4)], {'begin': (1,), 'end': (3,)}),
]


def _numeric_grad(fn, inputs, head, index, eps=1e-6):
    grad = np.zeros_like(inputs[index])
    flat = inputs[index].reshape(-1)
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + eps
        plus = (fn(inputs) * head).sum()
        flat[i] = saved - eps
        minus = (fn(inputs) * head).sum()
        flat[i] = saved
        grad.reshape(-1)[i] = (plus - minus) / (2 * eps)
    return grad


@pytest.mark.parametrize('name,shapes,attrs', GRADIENTS,
                         ids=[f'{g[0]}-{i}' for i, g in enumerate(GRADIENTS)])
def test_gradient_rules_match_finite_differences(name, shapes, attrs):
    op = registry.get(name)
    inputs = [RNG.uniform(0.5, 1.5, size=s) * RNG.choice([-1, 1], size=s)
              if name not in ('sqrt', 'rsqrt', 'log', 'broadcast_power', 'cbrt', 'log1p',
                              '_power_scalar')
              else RNG.uniform(0.5, 1.5, size=s) for s in shapes]

    def forward(arrays):
        result = getattr(nd, name)(*[nd.array(a, dtype='float64') for a in arrays], **attrs)
        result = result[0] if isinstance(result, list) else result
        return result.asnumpy()
    head = RNG.uniform(-1, 1, size=forward(inputs).shape)
    nd_inputs = [nd.array(a, dtype='float64') for a in inputs]
    outputs = getattr(nd, name)(*nd_inputs, **attrs)
    outputs = outputs if isinstance(outputs, list) else [outputs]
    heads = [nd.array(head, dtype='float64')] + [nd.zeros(o.shape, dtype='float64')
                                                 for o in outputs[1:]]
    parsed = op.parse_attrs(dict(attrs, **({'num_args': len(inputs)} if op.variadic else {})))
    grads = op.gradient(nd, parsed, nd_inputs, outputs, heads)
    for index, grad in enumerate(grads):
        if name == '_slice_assign' and index == 1:
            continue
        expected = _numeric_grad(forward, inputs, head, index)
        np.testing.assert_allclose(grad.asnumpy(), expected, rtol=1e-5, atol=1e-7,
                                   err_msg=f'{name}: gradient of input {index}')


def test_every_basic_family_operator_declares_a_gradient_or_none_on_purpose():
    no_gradient = {'_zeros', '_ones', '_full', '_arange', '_random_uniform', '_random_normal',
                   '_random_randint', '_split_like', '_backward_tile', '_backward_repeat',
                   '_backward_take', '_backward_pick', '_backward_gather_nd', '_backward_dot',
                   '_advanced_index_backward', '_backward_diag', '_backward_slice_like',
                   '_backward_khatri_rao', '_random_exponential', '_random_gamma',
                   '_random_poisson', '_random_negative_binomial',
                   '_random_generalized_negative_binomial', '_shuffle'}
    families = ('ember.op.elemwise', 'ember.op.reduce', 'ember.op.matrix', 'ember.op.indexing',
                'ember.op.dot', 'ember.op.init', 'ember.op.random')
    for name, op in registry.all_ops().items():
        if op.kernel.__module__ in families and op.name not in no_gradient:
            assert op.gradient is not None, name


def test_apply_ufunc_with_scalars_and_math_module():
    out = np.empty(3)
    elemwise.apply_ufunc(np.add, (np.arange(3.0), 2), out)
    assert out.tolist() == [2, 3, 4] and math.isclose(out.sum(), 9)
