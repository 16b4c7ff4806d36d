"""``mx.np.ndarray`` beyond the function table: indexing (basic, advanced, boolean masks) and
assignment against NumPy, views, in-place operators, zero-dim and zero-size arrays, printing as
MXNet prints, conversions, NumPy's own functions on mx.np arrays, ufunc keywords, random
samplers, and mx.np code traced into graphs."""
from __future__ import annotations

import io
import pickle

import numpy as onp
import pytest

import ember as mx
from ember import numpy as np

BASE = onp.arange(24, dtype=onp.float32).reshape(2, 3, 4)

GET_KEYS = [
    1, -1, (1, 2), (1, 2, 3), (slice(None), 1), (Ellipsis, 1), (None, 0), (1, None, 2),
    slice(None, None, -1), (slice(None), slice(None, None, 2)), (slice(1, 1),),
    (0, slice(None), slice(3, 0, -2)), [1, 0], ([0, 1], [2, 0]), (slice(None), [0, 2]),
    (1, [0, 2], slice(1, 3)), ([[0], [1]], [0, 2]), BASE > 10, (1, BASE[0] > 5),
    (slice(None), onp.array([True, False, True])), (Ellipsis, onp.array([1, 3])),
    onp.array(1), (),
]


def _key_for_ember(key):
    if isinstance(key, onp.ndarray):
        return np.array(key, dtype=key.dtype)
    if isinstance(key, tuple):
        return tuple(_key_for_ember(k) for k in key)
    return key


@pytest.mark.parametrize('key', GET_KEYS, ids=[str(i) for i in range(len(GET_KEYS))])
def test_getitem_against_numpy(key):
    x = np.array(BASE, dtype=BASE.dtype)
    got = x[_key_for_ember(key)]
    want = BASE[key]
    assert isinstance(got, np.ndarray) and got.shape == want.shape and got.dtype == want.dtype
    onp.testing.assert_array_equal(got.asnumpy(), want)


@pytest.mark.parametrize('key', GET_KEYS[:-1], ids=[str(i) for i in range(len(GET_KEYS) - 1)])
def test_getitem_gradient_scatters_back(key):
    x = np.array(BASE, dtype=BASE.dtype)
    x.attach_grad()
    head = onp.random.default_rng(0).standard_normal(BASE[key].shape).astype(onp.float32)
    with mx.autograd.record():
        y = x[_key_for_ember(key)]
    y.backward(np.array(head))
    expected = onp.zeros_like(BASE)
    onp.add.at(expected, key, head)
    onp.testing.assert_allclose(x.grad.asnumpy(), expected)


SET_CASES = [
    (1, 5.0), ((0, 1), onp.arange(4, dtype=onp.float32)), ((slice(None), 2), -1.0),
    (Ellipsis, 0.5), ((1, slice(None), slice(None, None, 2)), onp.ones((3, 2), onp.float32)),
    (BASE > 20, 0.0), ([0, 1], 3.0), (([1, 0], [2, 1]), onp.float32(7)),
    ((0, onp.array([True, False, True])), onp.arange(4, dtype=onp.float32)),
    ((slice(None), 1), onp.arange(4, dtype=onp.float32)),
]


@pytest.mark.parametrize('key,value', SET_CASES, ids=[str(i) for i in range(len(SET_CASES))])
def test_setitem_against_numpy(key, value):
    x = np.array(BASE, dtype=BASE.dtype)
    want = BASE.copy()
    want[key] = value
    x[_key_for_ember(key)] = np.array(value) if isinstance(value, onp.ndarray) else value
    onp.testing.assert_array_equal(x.asnumpy(), want)


def test_setitem_records_gradients():
    x = np.arange(6.0).reshape(2, 3)
    x.attach_grad()
    with mx.autograd.record():
        z = x * 1
        z[0, 1] = 5.0
        z[1] += 1
        c = z[0] * 1
        z[0] = c * 2
        loss = (z * z).sum()
    loss.backward()
    values = onp.arange(6.0).reshape(2, 3)
    expected = onp.zeros((2, 3))
    expected[0] = 8 * values[0]         # z[0] = 2 x[0] (its second element set to 10)
    expected[0, 1] = 0
    expected[1] = 2 * (values[1] + 1)
    onp.testing.assert_allclose(x.grad.asnumpy(), expected)


def test_basic_slices_and_reshapes_are_views():
    x = np.zeros((4, 3))
    row, flat = x[2], x.reshape(-1)
    row[...] = 1
    flat[0] = 7
    assert x[2, 0] == 1 and x[0, 0] == 7
    column = x[:, 0]                   # not contiguous: a copy, as in MXNet
    column[...] = -1
    assert x[1, 0] == 0
    assert np.shares_memory(x, row) and not np.shares_memory(x[0], x[1])
    assert np.may_share_memory(x[0], x[1])


def test_in_place_operators_keep_the_array_and_its_dtype():
    x = np.ones((2, 2), dtype='int32')
    ident = id(x)
    x += 2
    x *= np.array([1, 2], dtype='int32')
    x //= 2
    assert id(x) == ident and x.dtype == onp.int32
    onp.testing.assert_array_equal(x.asnumpy(), [[1, 3], [1, 3]])
    with pytest.raises(TypeError, match='cannot cast'):
        x += 0.5
    y = np.ones(3)
    y -= np.arange(3)
    y /= 2
    y **= 2
    onp.testing.assert_allclose(y.asnumpy(), [0.25, 0.0, 0.25])


def test_zero_dim_and_zero_size_arrays():
    s = np.array(3.0)
    assert s.shape == () and s.ndim == 0 and s.size == 1
    assert (s * 2).shape == () and float(s + 1) == 4.0 and s.item() == 3.0
    assert np.sum(np.ones((2, 3))).shape == ()
    empty = np.zeros((0, 3))
    assert empty.sum(axis=0).shape == (3,) and empty.sum(axis=1).shape == (0,)
    assert (empty + np.ones(3)).shape == (0, 3) and empty.T.shape == (3, 0)
    assert np.concatenate([empty, np.ones((2, 3))]).shape == (2, 3)
    assert np.ones((2, 0)).reshape(0, 5).shape == (0, 5)
    with pytest.raises(ValueError):
        bool(np.ones(2))
    assert not bool(np.zeros(0)) and bool(np.ones(1))
    with pytest.raises(TypeError):
        len(s)


def test_printing_follows_mxnet():
    assert repr(np.array([1.0, 2.0])) == 'array([1., 2.])'
    assert repr(np.array([1, 2], dtype='int32')) == 'array([1, 2], dtype=int32)'
    assert repr(np.array([1.5], dtype='float64')) == 'array([1.5], dtype=float64)'
    assert repr(np.array(2.5)) == 'array(2.5)'
    assert repr(np.ones(2, dtype='bool')) == 'array([ True,  True])'
    assert repr(np.zeros((2, 0))) == 'array([], shape=(2, 0))'
    assert str(np.array([[1.0, 2.0]])) == '[[1. 2.]]'
    assert f'{np.array(0.5):.2f}' == '0.50'


def test_conversions():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    assert x.tolist() == [[1.0, 2.0], [3.0, 4.0]] and x[1, 0].item() == 3.0
    assert int(x[0, 1]) == 2 and [1, 2, 3][np.array(1, dtype='int64')] == 2
    with pytest.raises(TypeError):
        [1, 2][np.array(1.0)]
    legacy = x.as_nd_ndarray()
    assert type(legacy) is mx.nd.NDArray and legacy.as_np_ndarray() is not x
    legacy[0, 0] = 9
    assert x[0, 0] == 9                            # shared storage
    assert x.astype('float32', copy=False) is x and x.astype('int32').dtype == onp.int32
    with pytest.raises(TypeError, match='cast'):
        x.astype('int32', casting='safe')
    assert pickle.loads(pickle.dumps(x)).tolist() == x.tolist()
    assert type(x.copyto(mx.cpu())) is np.ndarray
    assert x.as_in_ctx(mx.cpu()) is x and x.ctx == mx.cpu()


def test_numpy_functions_on_mx_arrays():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    total = onp.sum(x)
    assert isinstance(total, np.ndarray) and float(total) == 10.0     # Ember's sum
    assert isinstance(onp.exp(x), np.ndarray)
    median = onp.median(x)                 # no Ember function: NumPy's on a host copy
    assert float(median) == 2.5
    assert isinstance(onp.cov(x), np.ndarray)
    onp.testing.assert_array_equal(onp.asarray(x), [[1, 2], [3, 4]])


def test_ufunc_keywords():
    x = np.array([1.0, 4.0])
    assert np.sqrt(x, dtype='float64').dtype == onp.float64
    out = np.zeros(2)
    assert np.add(x, 1, out=out) is out and out.tolist() == [2.0, 5.0]
    kept = np.full(2, -1.0)
    np.multiply(x, 2, where=x > 2, out=kept)
    assert kept.tolist() == [-1.0, 8.0]
    with pytest.raises(TypeError, match='invalid keyword'):
        np.sqrt(x, axis=0)
    with pytest.raises(TypeError, match='not understood'):
        np.sqrt(x, casting='sometimes')
    with pytest.raises(ValueError, match='out'):
        np.add(x, 1, out=np.zeros(3))


def test_errors_name_shapes_and_values():
    with pytest.raises(ValueError, match=r'\(2,\).*\(3,\)'):
        np.ones(2) + np.ones(3)
    with pytest.raises(ValueError, match='reshape'):
        np.ones(6).reshape(4, 2)
    with pytest.raises(ValueError, match='axis 3'):
        np.ones((2, 2)).sum(axis=3)
    with pytest.raises(ValueError, match='mode'):
        np.pad(np.ones(2), 1, mode='mirror')


def test_set_printoptions_and_genfromtxt(tmp_path):
    saved = onp.get_printoptions()
    try:
        np.set_printoptions(precision=2)
        assert str(np.array([1.23456])) == '[1.23]'
    finally:
        onp.set_printoptions(**saved)
    text = io.StringIO('1,2\n3,4')
    values = np.genfromtxt(text, delimiter=',')
    assert isinstance(values, np.ndarray) and values.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_legacy_operators_keep_mx_np_arrays():
    x = np.array([[-1.0, 2.0]])
    assert type(mx.nd.relu(x)) is np.ndarray
    assert type(mx.nd.relu(x.as_nd_ndarray())) is mx.nd.NDArray


def test_dtypes_and_constants_of_mx_np():
    assert np.float16 is onp.float16 and np.float32 is onp.float32 and np.float64 is onp.float64
    assert np.int8 is onp.int8 and np.int32 is onp.int32 and np.int64 is onp.int64
    assert np.uint8 is onp.uint8 and np.bool_ is onp.bool_ and np.bool is bool
    assert np.zeros(2, dtype=np.int8).dtype == onp.int8
    assert np.ones(1, dtype=np.bool_).dtype == onp.bool_
    assert np.finfo(np.float32).eps == onp.finfo(onp.float32).eps
    assert np.pi == onp.pi and np.e == onp.e and np.newaxis is None
    assert np.inf == np.PINF == -np.NINF and np.isnan(np.nan) and np.isnan(np.NAN)
    assert np.isnan(np.NaN) and np.PZERO == 0.0 and str(np.NZERO) == '-0.0'


# ----------------------------------------------------------------------------------------------
# Random samplers

# Samplers the tests below reach by name, for ``python -m ember api-coverage``.
EXERCISED_API = [f'ember.{space}.random.{name}'
                 for space in ('numpy', 'ndarray.numpy', 'symbol.numpy')
                 for name in ('uniform', 'normal', 'gamma', 'beta', 'chisquare', 'exponential',
                              'gumbel', 'logistic', 'lognormal', 'pareto', 'power', 'rayleigh',
                              'weibull', 'randint', 'rand', 'randn', 'choice', 'multinomial',
                              'shuffle', 'multivariate_normal')]

SAMPLERS = [
    ('uniform', (1.0, 3.0), 2.0, (2 / 12 ** 0.5)),
    ('normal', (1.0, 2.0), 1.0, 2.0),
    ('gamma', (2.0, 1.5), 3.0, 1.5 * 2 ** 0.5),
    ('beta', (2.0, 3.0), 0.4, (6 / (25 * 6)) ** 0.5),
    ('chisquare', (3.0,), 3.0, 6 ** 0.5),
    ('exponential', (2.0,), 2.0, 2.0),
    ('gumbel', (0.5, 2.0), 0.5 + 2 * 0.5772157, 2 * onp.pi / 6 ** 0.5),
    ('logistic', (0.5, 2.0), 0.5, 2 * onp.pi / 3 ** 0.5),
    ('lognormal', (0.1, 0.5), onp.exp(0.225), onp.sqrt((onp.exp(0.25) - 1) * onp.exp(0.45))),
    ('pareto', (5.0,), 0.25, (5 / (16 * 3)) ** 0.5),
    ('power', (3.0,), 0.75, (3 / 80) ** 0.5),
    ('rayleigh', (2.0,), 2 * (onp.pi / 2) ** 0.5, ((4 - onp.pi) / 2 * 4) ** 0.5),
    ('weibull', (2.0,), 0.8862269, (1 - onp.pi / 4) ** 0.5),
    ('randint', (0, 5), 2.0, 2 ** 0.5),
]


@pytest.mark.parametrize('name,params,mean,std', SAMPLERS, ids=[s[0] for s in SAMPLERS])
def test_sampler_moments(name, params, mean, std):
    mx.random.seed(11)
    draws = getattr(np.random, name)(*params, size=(20000,))
    assert draws.shape == (20000,)
    assert draws.dtype == (onp.int64 if name == 'randint' else onp.float32)
    values = draws.asnumpy().astype(onp.float64)
    assert abs(values.mean() - mean) < 5 * std / 20000 ** 0.5
    assert abs(values.std() - std) < 0.05 * std


def test_samplers_follow_the_seed_and_broadcast():
    mx.random.seed(3)
    first = np.random.normal(size=(2, 3))
    mx.random.seed(3)
    assert (np.random.normal(size=(2, 3)) == first).all()
    assert np.random.uniform(np.zeros((2, 1)), np.ones(3)).shape == (2, 3)
    assert np.random.normal(0.0, 1.0).shape == ()
    assert np.random.rand(2, 3).shape == (2, 3) and np.random.randn(4).dtype == onp.float32
    with pytest.raises(ValueError, match='broadcast'):
        np.random.normal(np.zeros(3), 1.0, size=(2,))


def test_choice_multinomial_shuffle_multivariate():
    mx.random.seed(5)
    picks = np.random.choice(4, size=(1000,), p=np.array([0.0, 0.5, 0.5, 0.0]))
    assert picks.dtype == onp.int64 and set(onp.unique(picks.asnumpy())) <= {1, 2}
    assert sorted(np.random.choice(5, 5, replace=False).tolist()) == [0, 1, 2, 3, 4]
    values = np.random.choice(np.array([10.0, 20.0]), size=3)
    assert set(values.tolist()) <= {10.0, 20.0}
    counts = np.random.multinomial(10, [0.2, 0.8], size=4)
    assert counts.shape == (4, 2) and (counts.sum(axis=1) == 10).all()
    x = np.arange(10.0)
    np.random.shuffle(x)
    assert sorted(x.tolist()) == list(range(10)) and x.tolist() != list(range(10))
    draws = np.random.multivariate_normal(np.array([1.0, -1.0]), np.eye(2) * 0.25, size=4000)
    onp.testing.assert_allclose(draws.asnumpy().mean(axis=0), [1.0, -1.0], atol=0.05)


PATHWISE = [('normal', {'loc': 0.3, 'scale': 1.5}), ('uniform', {'low': -1.0, 'high': 2.0}),
            ('exponential', {'scale': 1.5}), ('gumbel', {'loc': 0.2, 'scale': 0.7}),
            ('logistic', {'loc': 0.2, 'scale': 0.7}), ('lognormal', {'mean': 0.1, 'sigma': 0.4}),
            ('rayleigh', {'scale': 1.2}), ('weibull', {'a': 1.7}), ('pareto', {'a': 3.0}),
            ('power', {'a': 2.5}), ('gamma', {'shape': 2.0, 'scale': 1.3})]


@pytest.mark.parametrize('name,params', PATHWISE, ids=[p[0] for p in PATHWISE])
def test_pathwise_gradients_against_finite_differences(name, params):
    """With the seed fixed the draw is a function of the parameters: its gradient."""
    wanted = [k for k in params if not (name == 'gamma' and k == 'shape')]

    def draw(values):
        mx.random.seed(17)
        arrays = {k: np.array([v], dtype='float64') if k in wanted else v
                  for k, v in values.items()}
        return arrays, getattr(np.random, name)(size=(6,), **arrays)
    arrays, _ = draw(params)
    for array in arrays.values():
        if isinstance(array, np.ndarray):
            array.attach_grad()
    with mx.autograd.record():
        mx.random.seed(17)
        total = getattr(np.random, name)(size=(6,), **arrays).sum()
    total.backward()
    for key in wanted:
        step = 1e-3
        plus = dict(params, **{key: params[key] + step})
        minus = dict(params, **{key: params[key] - step})
        numeric = (float(draw(plus)[1].astype('float64').sum())
                   - float(draw(minus)[1].astype('float64').sum())) / (2 * step)
        assert abs(float(arrays[key].grad[0]) - numeric) < 2e-2 * max(1.0, abs(numeric)), key


@pytest.mark.parametrize('name,params,mean,std', SAMPLERS, ids=[s[0] for s in SAMPLERS])
def test_samplers_in_graphs(name, params, mean, std):
    from ember.executor.cached_op import CachedOp
    from ember.numpy import symbol as npsym
    mx.random.seed(13)
    x = npsym.var('x')
    graph = getattr(mx.sym.np.random, name)(*params, size=(20000,)) + x * 0
    draws = CachedOp(graph)(np.zeros(1, dtype='int64' if name == 'randint' else 'float32'))
    values = draws.asnumpy().astype(onp.float64)
    assert draws.shape == (20000,)
    assert abs(values.mean() - mean) < 5 * std / 20000 ** 0.5


def test_other_samplers_in_graphs():
    from ember.executor.cached_op import CachedOp
    from ember.numpy import symbol as npsym
    x, mean, cov = npsym.var('x'), npsym.var('mean'), npsym.var('cov')
    space = mx.sym.np.random
    graph = mx.sym.Group([space.rand(2, 4) + x * 0, space.randn(4) + x * 0,
                          space.choice(5, size=(3,)), space.multinomial(4, [0.5, 0.5], size=2),
                          space.shuffle(x), space.multivariate_normal(mean, cov, size=3)])
    outputs = CachedOp(graph)(np.arange(4.0), np.zeros(2), np.eye(2))
    assert [o.shape for o in outputs] == [(2, 4), (4,), (3,), (2, 2), (4,), (3, 2)]
    assert sorted(outputs[4].asnumpy().tolist()) == [0.0, 1.0, 2.0, 3.0]
    assert (outputs[3].asnumpy().sum(axis=1) == 4).all()


# ----------------------------------------------------------------------------------------------
# mx.np code traced into a graph

def test_np_symbols_run_like_arrays():
    from ember.numpy import symbol as npsym
    from ember.executor.cached_op import CachedOp
    x, y = npsym.var('x'), npsym.var('y')
    graph = (np.tanh(x @ y.T) * 2 - x[:, :1] + mx.sym.np.ones((2, 1))).sum(axis=1) ** 2
    a = np.random.uniform(size=(2, 3))
    b = np.random.uniform(size=(4, 3))
    expected = (np.tanh(a @ b.T) * 2 - a[:, :1] + np.ones((2, 1))).sum(axis=1) ** 2
    result = CachedOp(graph)(a, b)
    onp.testing.assert_allclose(result.asnumpy(), expected.asnumpy(), rtol=1e-5)


def test_numpy_op_fallback_operators():
    from ember import numpy_op_fallback as fallback_ops
    from ember.numpy import symbol as npsym
    internal = mx.nd.np._internal
    x = np.arange(6.0).reshape(2, 3)
    empty = internal.empty_like_fallback(x, dtype='int32', order='C', subok=False, shape=None)
    assert empty.shape == (2, 3) and empty.dtype == onp.int32
    assert internal.resize_fallback(x, new_shape=(4,)).tolist() == [0, 1, 2, 3]
    rows = internal.unravel_index_fallback(np.array([5, 1], dtype='int64'), shape=(2, 3))
    assert rows.tolist() == [[1, 0], [2, 1]]
    mx.random.seed(2)
    draws = internal.mvn_fallback(np.array([1.0, -1.0]), np.eye(2) * 0.01, size=(500,))
    assert draws.shape == (500, 2)
    onp.testing.assert_allclose(draws.asnumpy().mean(axis=0), [1.0, -1.0], atol=0.02)
    # In a graph (run by an engine worker, which Ember's custom operators refuse under the
    # threaded engines): the node and its shapes
    graph = mx.sym.np._internal.resize_fallback(npsym.var('a'), new_shape=(3, 2))
    assert graph.list_arguments() == ['a'] and graph.infer_shape(a=(2, 3))[1] == [(3, 2)]
    for prop in (fallback_ops.EmptyLikeProp, fallback_ops.ResizeProp,
                 fallback_ops.Unravel_indexProp, fallback_ops.MultivariateNormalProp):
        assert issubclass(prop, mx.operator.CustomOpProp)
    for op in (fallback_ops.EmptyLike, fallback_ops.Resize, fallback_ops.Unravel_index,
               fallback_ops.MultivariateNormal):
        assert issubclass(op, mx.operator.CustomOp)
    assert fallback_ops.np_array is mx.util.np_array and fallback_ops.use_np is mx.util.use_np

    class Twice(mx.operator.CustomOp):
        def forward(self, is_train, req, in_data, out_data, aux):
            self.assign(out_data[0], req[0], in_data[0] * 2)

    @fallback_ops.register('twice_for_test', symbolic=False)
    class TwiceProp(mx.operator.CustomOpProp):
        def create_operator(self, ctx, in_shapes, in_dtypes):
            return Twice()
    assert internal.twice_for_test(np.ones(2)).tolist() == [2.0, 2.0]
    assert not hasattr(mx.sym.np._internal, 'twice_for_test')
    with pytest.raises(ValueError, match='already'):
        fallback_ops.register('twice_for_test')(TwiceProp)
