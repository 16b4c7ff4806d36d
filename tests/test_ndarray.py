"""NDArray: creation, views, arithmetic, indexing, devices, errors and the generated namespace."""
import inspect
import pickle

import numpy as np
import pytest

from ember import config, device, nd as nd_facade, random, storage
from ember import ndarray as nd
from ember.base import EmberError, MXNetError
from ember.ndarray import ndarray as ndmodule
from ember.op.registry import ShapeError

ENGINES = ['NaiveEngine', 'ThreadedEnginePerDevice']


# ----------------------------------------------------------------------------------------------
# Creation

def test_array_dtype_rules_follow_mxnet():
    assert nd.array([1, 2]).dtype == np.float32
    assert nd.array(np.arange(3, dtype='int64')).dtype == np.float32   # numpy source -> float32
    assert nd.array(np.arange(3), dtype='int64').dtype == np.int64
    source = nd.array([1, 2], dtype='float16')
    assert nd.array(source).dtype == np.float16                       # NDArray keeps its dtype
    assert nd.array(source, dtype='int32').asnumpy().tolist() == [1, 2]


def test_array_copies_its_source():
    source = np.arange(4, dtype='float32')
    a = nd.array(source)
    source[0] = 100
    b = nd.array(a)
    b[:] = 5
    assert a.asnumpy().tolist() == [0, 1, 2, 3]


def test_array_rejects_non_array_like():
    with pytest.raises(TypeError, match='array-like'):
        nd.array({'a': 1})


def test_creation_functions():
    assert nd.zeros((2, 3)).asnumpy().sum() == 0 and nd.zeros(5).shape == (5,)
    assert nd.ones((2,), dtype='int8').dtype == np.int8
    assert nd.full((2, 2), 3).asnumpy().tolist() == [[3, 3], [3, 3]]
    assert nd.empty((3, 4)).shape == (3, 4)
    assert nd.arange(3, repeat=2).asnumpy().tolist() == [0, 0, 1, 1, 2, 2]
    out = nd.zeros((2,))
    assert nd.ones((2,), out=out) is out and out.asnumpy().tolist() == [1, 1]
    assert nd.zeros((2,), ctx=device.cpu_pinned(0)).context == device.cpu_pinned(0)


def test_properties_and_repr():
    a = nd.array([[1, 2, 3], [4, 5, 6]])
    assert (a.shape, a.size, a.ndim, a.dtype, a.context, a.ctx, a.stype) == (
        (2, 3), 6, 2, np.float32, device.cpu(0), device.cpu(0), 'default')
    assert repr(a) == '\n[[1. 2. 3.]\n [4. 5. 6.]]\n<NDArray 2x3 @cpu(0)>'
    assert a.T.shape == (3, 2)
    with pytest.raises(ValueError, match='2-D'):
        nd.ones((2, 3, 4)).T


def test_reading_values():
    a = nd.array([[1.5, 2], [3, 4]])
    values = a.asnumpy()
    values[0, 0] = 9                      # a copy
    assert a.asnumpy()[0, 0] == 1.5
    assert nd.array([7]).asscalar() == 7 and isinstance(nd.array([7]).asscalar(), np.float32)
    with pytest.raises(ValueError, match='one element'):
        a.asscalar()
    assert np.asarray(a, dtype='int32').tolist() == [[1, 2], [3, 4]]
    assert len(a) == 2 and [row.shape for row in a] == [(2,), (2,)]
    assert bool(nd.array([1])) and not bool(nd.array([0]))
    with pytest.raises(ValueError, match='ambiguous'):
        bool(a)


def test_pickle_round_trip():
    a = nd.array([[1, 2], [3, 4]], dtype='int32')
    b = pickle.loads(pickle.dumps(a))
    assert b.dtype == np.int32 and b.asnumpy().tolist() == [[1, 2], [3, 4]]


# ----------------------------------------------------------------------------------------------
# Arithmetic

def test_arithmetic_matches_numpy_with_broadcasting_and_scalars():
    x = np.arange(1, 7, dtype='float32').reshape(2, 3)
    y = np.array([0.5, 2, 4], dtype='float32')
    a, b = nd.array(x), nd.array(y)
    cases = [(a + b, x + y), (a - b, x - y), (a * b, x * y), (a / b, x / y), (a ** b, x ** y),
             (a % b, np.mod(x, y)), (a + 2, x + 2), (2 + a, 2 + x), (a - 2, x - 2),
             (2 - a, 2 - x), (a * 3, x * 3), (3 * a, 3 * x), (a / 4, x / 4), (4 / a, 4 / x),
             (a ** 2, x ** 2), (2 ** a, 2 ** x), (a % 4, x % 4), (7 % a, 7 % x), (-a, -x),
             (abs(-a), x), (a > 3, x > 3), (a >= b, x >= y), (a < b, x < y), (a <= 2, x <= 2),
             (a == 2, x == 2), (a != b, x != y), (np.float32(2) * a, 2 * x)]
    for result, expected in cases:
        assert isinstance(result, nd.NDArray)
        np.testing.assert_allclose(result.asnumpy(), np.asarray(expected, dtype='float32'),
                                   rtol=1e-6)


def test_unsupported_operand_types_raise_type_error():
    with pytest.raises(TypeError):
        nd.ones(2) + 'a'
    with pytest.raises(TypeError):
        np.ones(2) + nd.ones(2)
    assert (nd.ones(2) == None) is False  # noqa: E711


def test_inplace_operators_write_the_same_storage():
    a = nd.array([1, 2, 3])
    handle, var = a.handle, a._var
    row_view = a[0:2]
    a += 1
    a *= nd.array([2, 2, 2])
    a -= 1
    a /= 2
    a **= 2
    assert a.handle is handle and a._var is var
    assert a.asnumpy().tolist() == [2.25, 6.25, 12.25]
    assert row_view.asnumpy().tolist() == [2.25, 6.25]
    with pytest.raises(ShapeError, match='out='):
        a += nd.ones((2, 3))


def test_mixed_dtypes_raise_at_the_call():
    with pytest.raises(ShapeError, match='dtype'):
        nd.ones(2) + nd.ones(2, dtype='int32')


# ----------------------------------------------------------------------------------------------
# Views and indexing

def test_contiguous_indexing_returns_views_sharing_storage_and_variable():
    a = nd.arange(24).reshape(2, 3, 4)
    for view in (a[1], a[0:1], a[1, 1:3], a[1, 2], a[...], a[None, 1], a.reshape(6, 4)):
        assert view.handle is a.handle and view._var is a._var
    row = a[1]
    row[:] = -1
    assert a.asnumpy()[1].tolist() == [[-1] * 4] * 3
    assert a[1, 2].shape == (4,) and a[1, 2, 3].shape == (1,) and a[0, 1, 2].asscalar() == 6


def test_other_indexing_copies():
    a = nd.arange(48).reshape(4, 3, 4)
    x = a.asnumpy()
    for key in [(slice(None), 1), (slice(None, None, 2),), (Ellipsis, 1), (1, slice(None), 2),
                (slice(None, None, -1),), (slice(None), None, slice(1, 3))]:
        result = a[key]
        assert result.handle is not a.handle, key
        np.testing.assert_array_equal(result.asnumpy(), x[key].reshape(result.shape))
        assert result.shape == (x[key].shape or (1,)), key


def test_index_arrays_copy_with_numpy_rules():
    a = nd.arange(12).reshape(3, 4)
    x = a.asnumpy()
    np.testing.assert_array_equal(a[nd.array([2, 0])].asnumpy(), x[[2, 0]])
    np.testing.assert_array_equal(a[[0, 2], [1, 3]].asnumpy(), x[[0, 2], [1, 3]])
    np.testing.assert_array_equal(a[:, np.array([3, 1])].asnumpy(), x[:, [3, 1]])


def test_index_errors():
    a = nd.ones((2, 3))
    with pytest.raises(IndexError, match='out of bounds'):
        a[2]
    with pytest.raises(IndexError, match='too many'):
        a[0, 0, 0]
    with pytest.raises(IndexError):
        a['x']


def test_setitem():
    a = nd.zeros((3, 4))
    a[0] = 1                                         # scalar into a view region
    a[1, 1:3] = nd.array([5, 6])                     # array
    a[:, 3] = nd.array([7, 8, 9])                    # non-contiguous column
    a[2, :2] = np.array([[3]])                       # broadcast, extra leading axis
    a[::2, 0] = -1                                   # strided
    a[[1, 2], [0, 1]] = 4                            # index arrays
    expected = np.zeros((3, 4), dtype='float32')
    expected[0] = 1
    expected[1, 1:3] = [5, 6]
    expected[:, 3] = [7, 8, 9]
    expected[2, :2] = 3
    expected[::2, 0] = -1
    expected[[1, 2], [0, 1]] = 4
    np.testing.assert_array_equal(a.asnumpy(), expected)
    a[:] = np.arange(4)                              # whole array from the host, broadcast
    assert a.asnumpy().tolist() == [[0, 1, 2, 3]] * 3
    a[:] = nd.ones((3, 4), dtype='int32')            # converted to a's dtype
    assert a.asnumpy().sum() == 12 and a.dtype == np.float32
    with pytest.raises(ShapeError):
        a[0] = nd.ones(3)


def test_setitem_from_host_copies_the_value_first():
    a = nd.zeros(3)
    source = np.array([1, 2, 3], dtype='float32')
    a[:] = source
    source[:] = 0
    assert a.asnumpy().tolist() == [1, 2, 3]


# ----------------------------------------------------------------------------------------------
# Copies, dtypes and devices

def test_copy_copyto_astype_as_in_context():
    a = nd.array([1.5, 2.5])
    b = a.copy()
    b += 1
    assert a.asnumpy().tolist() == [1.5, 2.5]
    target = nd.zeros(2)
    assert a.copyto(target) is target and target.asnumpy().tolist() == [1.5, 2.5]
    with pytest.raises(ValueError, match='shape'):
        a.copyto(nd.zeros(3))
    pinned = a.copyto(device.cpu_pinned(0))
    assert pinned.context == device.cpu_pinned(0) and pinned.asnumpy().tolist() == [1.5, 2.5]
    assert a.as_in_context(device.cpu(0)) is a
    assert a.as_in_context(device.cpu(1)).context == device.cpu(1)
    assert a.astype('int32').asnumpy().tolist() == [1, 2]
    assert a.astype('float32', copy=False) is a and a.astype('float32') is not a
    with pytest.raises(EmberError, match='different devices'):
        a + pinned


def test_moveaxis_and_fluent_methods():
    a = nd.arange(24).reshape(2, 3, 4)
    assert nd.moveaxis(a, 2, 0).shape == (4, 2, 3)
    assert a.sum(axis=1).shape == (2, 4) and a.max().asscalar() == 23
    assert a.flatten().shape == (2, 12) and a.expand_dims(0).shape == (1, 2, 3, 4)
    np.testing.assert_array_equal(a.clip(2, 5).asnumpy(), np.clip(a.asnumpy(), 2, 5))
    assert [piece.shape for piece in a.split(num_outputs=2, axis=2)] == [(2, 3, 2)] * 2


# ----------------------------------------------------------------------------------------------
# Engine integration

@pytest.mark.parametrize('kind', ENGINES)
def test_errors_surface_at_wait_once(kind):
    with config.override(MXNET_ENGINE_TYPE=kind):
        a = nd.random.normal(0, -1, shape=(2, 2))     # fails in the kernel, not here
        b = nd.dot(a, a)                               # skipped: its input carries the error
        with pytest.raises(MXNetError, match='scale=-1.0 must be non-negative'):
            b.wait_to_read()
        b.wait_to_read()                               # handled: no second raise
        a.wait_to_read()                               # the same failure, already handled
        nd.waitall()                                   # nothing pending


@pytest.mark.parametrize('kind', ENGINES)
def test_waitall_raises_an_unobserved_error_once(kind):
    with config.override(MXNET_ENGINE_TYPE=kind):
        nd.random.uniform(1, 0, shape=(2,)) + 1
        with pytest.raises(EmberError, match='low=1.0 must be <= high=0.0'):
            nd.waitall()
        nd.waitall()


@pytest.mark.parametrize('kind', ENGINES)
def test_results_are_the_same_on_every_engine(kind):
    with config.override(MXNET_ENGINE_TYPE=kind):
        a = nd.array(np.arange(6, dtype='float32').reshape(2, 3))
        for _ in range(50):
            a = a * 1.5 - a / 3
            a[0] += 1
        result = a.asnumpy()
    x = np.arange(6, dtype='float32').reshape(2, 3)
    for _ in range(50):
        x = x * 1.5 - x / 3
        x[0] += 1
    np.testing.assert_allclose(result, x, rtol=1e-5)


def test_storage_returns_to_the_pool():
    pool = storage.manager(device.cpu(0))
    nd.waitall()
    before = pool.stats()['in_use']
    arrays = [nd.ones((256,)) * 2 for _ in range(8)]
    assert pool.stats()['in_use'] > before
    del arrays
    nd.waitall()
    assert pool.stats()['in_use'] == before


def test_waits_on_views_and_reads_order_after_writes():
    a = nd.zeros((100, 100))
    for _ in range(20):
        a += 1
    assert a[3].asnumpy().sum() == 2000


# ----------------------------------------------------------------------------------------------
# The generated namespace

def test_generated_functions_bind_inputs_and_parameters_like_mxnet():
    a, b = nd.array([[1, 2], [3, 4]]), nd.array([[1, 0], [0, 1]])
    assert nd.dot(lhs=a, rhs=b).asnumpy().tolist() == [[1, 2], [3, 4]]
    assert nd.dot(a, b, True).asnumpy().tolist() == [[1, 3], [2, 4]]    # transpose_a
    assert nd.sum(a, 1).asnumpy().tolist() == [3, 7]
    assert str(inspect.signature(nd.transpose)) == \
        '(data=None, axes=None, *, out=None, name=None, **kwargs)'
    assert str(inspect.signature(nd.concat)) == \
        '(*data, dim=None, out=None, name=None, **kwargs)'        # num_args is filled in
    assert nd.concat(a, b).shape == (2, 4) and nd.concat([a, b], dim=0).shape == (4, 2)
    assert nd.sum_axis is not nd.sum and nd.sum_axis(a, axis=0).asnumpy().tolist() == [4, 6]
    out = nd.zeros((2, 2))
    assert nd.broadcast_add(a, b, out=out) is out and out.asnumpy().tolist() == [[2, 2], [3, 5]]


def test_generated_signatures_share_their_parameters():
    # each distinct (name, kind) is one object across the ~2000 generated functions: every
    # object of theirs is one more for each full garbage collection to scan
    relu, transpose = inspect.signature(nd.relu), inspect.signature(nd.transpose)
    assert relu.parameters['data'] is transpose.parameters['data']
    assert inspect.signature(nd.sigmoid) is relu       # and identical signatures one object
    from ember import symbol
    assert relu.parameters["kwargs"] is inspect.signature(symbol.relu).parameters["kwargs"]
    assert str(relu) == '(data=None, *, out=None, name=None, **kwargs)'


def test_generated_function_errors_name_the_operator():
    with pytest.raises(TypeError, match="sum: unknown argument 'axes'"):
        nd.sum(nd.ones(2), axes=1)
    with pytest.raises(TypeError, match="dot: input 'rhs' must be an NDArray"):
        nd.dot(nd.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(TypeError, match="missing required argument 'a_min'"):
        nd.clip(nd.ones(2))
    with pytest.raises(ValueError, match='transpose_a'):
        nd.dot(nd.ones((2, 2)), nd.ones((2, 2)), transpose_a='maybe')


def test_internal_namespace_facades_and_random():
    assert nd._internal._plus_scalar(nd.ones(2), scalar=2).asnumpy().tolist() == [3, 3]
    assert nd_facade.NDArray is nd.NDArray and nd_facade.dot is nd.dot
    assert nd_facade.random.uniform is nd.random.uniform
    random.seed(11)
    first = random.normal(shape=(3,)).asnumpy()
    random.seed(11)
    assert (random.normal(shape=(3,)).asnumpy() == first).all()
    with pytest.raises(TypeError, match='all be NDArrays or all numbers'):
        nd.random.uniform(nd.zeros(1), 1)


class _Recording:
    recording, training = True, False


def test_record_hook_sees_every_operator(monkeypatch):
    seen = []
    a = nd.ones((2, 3))
    monkeypatch.setattr(ndmodule, '_ag_state', _Recording())
    monkeypatch.setattr(ndmodule, '_record_hook',
                        lambda op, attrs, ins, outs: seen.append((op.name, len(ins), len(outs))))
    _ = (a + 1) * a
    _ = a.reshape(3, 2)
    _ = nd.split(a, num_outputs=3)
    assert seen == [('_plus_scalar', 1, 1), ('broadcast_mul', 2, 1), ('Reshape', 1, 1),
                    ('SliceChannel', 1, 3)]


def test_zeros_on_fresh_memory_need_no_fill():
    from ember import engine
    storage.manager(device.cpu()).empty_cache()
    before = engine.get().stats()['pushes']
    fresh = nd_facade.zeros((300, 300))          # straight from the system: no fill pushed
    assert fresh._handle.zeroed and engine.get().stats()['pushes'] == before
    assert fresh.asnumpy().sum() == 0
    dirty = nd_facade.ones((500, 500))
    dirty.wait_to_read()
    del dirty                               # its buffer goes back to the pool's cache
    reused = nd_facade.zeros((500, 500))
    assert not reused._handle.zeroed
    assert np.count_nonzero(reused.asnumpy()) == 0
