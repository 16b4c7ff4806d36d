"""ember.test_utils: comparisons, random data, gradient checks, configuration for a block."""
import numpy as np
import pytest

import ember as mx
from ember import config, device
from ember.base import ConfigError
from ember import test_utils as tu


def test_is_mx_test_utils():
    assert mx.test_utils is tu


# ----------------------------------------------------------------------------------------------
# Devices


def test_default_context_follows_the_current_device():
    assert tu.default_context() == device.current_device()
    with mx.cpu(3):
        assert tu.default_context() == mx.cpu(3)


def test_set_default_context_sets_this_threads_device():
    before = tu.default_context()
    try:
        tu.set_default_context(mx.cpu(2))
        assert tu.default_context() == mx.cpu(2) and mx.nd.ones((1,)).context == mx.cpu(2)
    finally:
        tu.set_default_context(before)
    with pytest.raises(TypeError, match='expected a device'):
        tu.set_default_context('cpu(0)')


# ----------------------------------------------------------------------------------------------
# Tolerances and comparisons


@pytest.mark.parametrize('dtype,rtol,atol', [(np.float16, 1e-2, 1e-1), (np.float32, 1e-4, 1e-3),
                                             (np.float64, 1e-5, 1e-20), (np.int32, 0, 0)])
def test_default_tolerances_follow_mxnet(dtype, rtol, atol):
    values = np.ones(2, dtype)
    assert tu.get_tols(values, values) == (rtol, atol)
    assert (tu.get_rtol(None, dtype), tu.get_atol(None, dtype)) == (rtol, atol)
    assert (tu.get_rtol(0.5, dtype), tu.get_atol(0.25, dtype)) == (0.5, 0.25)


def test_the_looser_dtype_sets_the_tolerance():
    assert tu.get_tols(np.ones(1, np.float16), np.ones(1, np.float64)) == (1e-2, 1e-1)
    assert tu.get_tols(mx.nd.ones((1,)), np.ones(1, np.float64)) == (1e-4, 1e-3)
    assert tu.get_tols(np.ones(1), np.ones(1), rtol=0.3) == (0.3, 1e-20)


def test_assert_almost_equal_uses_the_defaults_of_the_dtype():
    tu.assert_almost_equal(np.float32([1.0, 100.0]), np.float32([1.0009, 100.009]))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(np.float32([1.0]), np.float32([1.002]))
    tu.assert_almost_equal(np.float16([10.0]), np.float16([10.1]))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(np.int32([3]), np.int32([4]))


def test_assert_almost_equal_takes_ndarrays_and_explicit_tolerances():
    tu.assert_almost_equal(mx.nd.array([1, 2]), mx.nd.array([1, 2.5]), rtol=0, atol=0.5)
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(mx.nd.array([1, 2]), mx.nd.array([1, 2.5]), rtol=0, atol=0.4)


def test_failure_message_names_the_worst_element():
    got = np.array([[1.0, 2.0], [3.0, 4.0]])
    want = np.array([[1.0, 2.1], [3.0, 5.0]])
    with pytest.raises(AssertionError) as caught:
        tu.assert_almost_equal(got, want, rtol=0, atol=0.01, names=('ours', 'numpy'))
    message = str(caught.value)
    assert 'ours and numpy differ at (1, 1): 4.0 vs 5.0' in message
    assert '50.0% of 4 elements' in message


def test_shapes_must_match():
    with pytest.raises(AssertionError, match=r'a has shape \(2,\) but b has shape \(1, 2\)'):
        tu.assert_almost_equal(np.zeros(2), np.zeros((1, 2)))


def test_nan_is_equal_only_when_asked():
    values = np.array([1.0, np.nan])
    with pytest.raises(AssertionError):
        tu.assert_almost_equal(values, values)
    tu.assert_almost_equal(values, values, equal_nan=True)
    assert not tu.almost_equal(values, values) and tu.almost_equal(values, values,
                                                                   equal_nan=True)


def test_same_and_assert_allclose():
    assert tu.same(mx.nd.array([1, 2]), np.array([1.0, 2.0]))
    assert not tu.same(np.array([1, 2]), np.array([1, 3]))
    assert not tu.same(np.zeros(2), np.zeros(3))
    tu.assert_allclose(mx.nd.array([1.0]), [1.0 + 1e-8], rtol=1e-6)
    with pytest.raises(AssertionError):
        tu.assert_allclose(mx.nd.array([1.0]), [1.1])


# ----------------------------------------------------------------------------------------------
# Random data


def test_random_shapes_stay_in_their_ranges():
    np.random.seed(3)
    for _ in range(20):
        assert all(1 <= n <= 3 for n in tu.rand_shape_2d(3, 3))
        assert all(1 <= n <= 2 for n in tu.rand_shape_3d(2, 2, 2))
        shape = tu.rand_shape_nd(4, dim=2)
        assert len(shape) == 4 and all(1 <= n <= 2 for n in shape)
    zero_sized = {n for _ in range(50) for n in tu.rand_shape_nd(3, 1, allow_zero_size=True)}
    assert zero_sized == {0, 1}


def test_random_arrays_and_rand_ndarray():
    first, second = tu.random_arrays((2, 3), ())
    assert first.shape == (2, 3) and second.shape == () and first.dtype == np.float32
    assert tu.random_arrays((4,)).shape == (4,)
    array = tu.rand_ndarray((3, 2), dtype='float16', ctx=mx.cpu(1))
    assert (array.shape, array.dtype, array.context) == ((3, 2), np.float16, mx.cpu(1))
    csr = tu.rand_ndarray((20, 30), stype='csr', density=0.2, dtype='float64')
    assert csr.stype == 'csr' and csr.dtype == np.float64 and 60 < csr.data.shape[0] < 180
    rows = tu.rand_ndarray((40, 3), stype='row_sparse', density=0.5).indices.shape[0]
    assert 5 < rows < 35


def test_seeding_numpy_repeats_random_data():
    np.random.seed(11)
    first = tu.rand_ndarray((3,)).asnumpy()
    np.random.seed(11)
    assert np.array_equal(tu.rand_ndarray((3,)).asnumpy(), first)


@pytest.mark.parametrize('axis,keepdims', [(None, False), (1, False), ((0, 2), True),
                                           (-1, True), ([0], False)])
def test_np_reduce_matches_numpy(axis, keepdims):
    data = np.random.default_rng(0).normal(size=(2, 3, 4))
    numpy_axis = tuple(axis) if isinstance(axis, list) else axis
    expected = np.sum(data, axis=numpy_axis, keepdims=keepdims)
    np.testing.assert_allclose(tu.np_reduce(data, axis, keepdims, np.sum), expected)
    np.testing.assert_allclose(tu.np_reduce(data, axis, keepdims, np.max),
                               np.max(data, axis=numpy_axis, keepdims=keepdims))


# ----------------------------------------------------------------------------------------------
# Gradient checks


class WrongSquare(mx.autograd.Function):
    """x * x with a gradient that is 10% off."""

    def forward(self, x):
        self.save_for_backward(x)
        return x * x

    def backward(self, dy):
        x, = self.saved_tensors
        return dy * x * 2.2


def test_numeric_gradient_accepts_correct_gradients():
    rng = np.random.default_rng(0)
    tu.check_numeric_gradient(lambda x, w: mx.nd.dot(mx.nd.tanh(x), w),
                              [rng.normal(size=(2, 3)), rng.normal(size=(3, 2))],
                              numeric_eps=1e-6, rtol=1e-6, atol=1e-9, dtype=np.float64)
    tu.check_numeric_gradient(lambda x: [mx.nd.sin(x), x * x], {'x': rng.normal(size=4)})


def test_numeric_gradient_catches_a_wrong_gradient_and_names_the_argument():
    location = {'data': np.array([1.0, -2.0]), 'scale': np.array([3.0, 1.0])}
    with pytest.raises(AssertionError, match='NUMERICAL_data and BACKWARD_data'):
        tu.check_numeric_gradient(lambda data, scale: WrongSquare()(data) * scale, location,
                                  dtype=np.float64, numeric_eps=1e-6, rtol=1e-3)
    tu.check_numeric_gradient(lambda data, scale: WrongSquare()(data) * scale, location,
                              grad_nodes=['scale'], dtype=np.float64, numeric_eps=1e-6,
                              rtol=1e-6)


def test_numeric_gradient_passes_aux_states_without_differentiating_them():
    seen = []

    def scaled(x, factor):
        seen.append(factor.asnumpy().tolist())
        return x * factor
    tu.check_numeric_gradient(scaled, [np.array([1.0, 2.0])], aux_states=[np.array([3.0, 4.0])],
                              dtype=np.float64, numeric_eps=1e-6, rtol=1e-6)
    assert all(values == [3.0, 4.0] for values in seen) and len(seen) > 4


def test_numeric_gradient_runs_in_the_mode_asked_for():
    def dropped(x):
        return mx.nd.Dropout(x, p=0.5)
    tu.check_numeric_gradient(dropped, [np.ones(20)], use_forward_train=False)
    with pytest.raises(AssertionError):      # a fresh random mask at every evaluation
        tu.check_numeric_gradient(dropped, [np.ones(20)], use_forward_train=True)


def test_numeric_gradient_rejects_what_it_cannot_check():
    class FakeSymbol:
        def list_arguments(self):
            return ['data']

        def __call__(self, *args):
            return args
    with pytest.raises(TypeError, match='once mx.sym exists'):
        tu.check_numeric_gradient(FakeSymbol(), [np.ones(2)])
    with pytest.raises(TypeError, match='function of NDArrays'):
        tu.check_numeric_gradient(np.ones(2), [np.ones(2)])
    with pytest.raises(KeyError, match="'weight'"):
        tu.check_numeric_gradient(lambda data: data * 2, {'data': np.ones(2)},
                                  grad_nodes=['weight'])
    with pytest.raises(TypeError, match='NDArray or a list'):
        tu.check_numeric_gradient(lambda data: 3.0, [np.ones(2)])


def test_numeric_grad_of_a_host_function():
    grad = tu.numeric_grad(lambda v: [np.sin(v[0]) * v[1]], [np.array([0.3]), np.array([2.0])],
                           0, 1e-6)
    np.testing.assert_allclose(grad, [2.0 * np.cos(0.3)], rtol=1e-8)


def test_symbolic_forward():
    outputs = tu.check_symbolic_forward(lambda a, b: [a + b, a * b],
                                        [np.array([1.0, 2.0]), np.array([3.0, 4.0])],
                                        [np.array([4.0, 6.0]), np.array([3.0, 8.0])])
    assert [o.tolist() for o in outputs] == [[4.0, 6.0], [3.0, 8.0]]
    with pytest.raises(AssertionError, match='output1'):
        tu.check_symbolic_forward(lambda a, b: [a + b, a * b],
                                  [np.array([1.0]), np.array([3.0])],
                                  [np.array([4.0]), np.array([4.0])])


def test_symbolic_forward_runs_in_prediction_mode():
    tu.check_symbolic_forward(lambda x: mx.nd.Dropout(x, p=0.9), [np.ones(50)], [np.ones(50)])


def test_symbolic_backward_compares_gradients():
    location = {'a': np.array([2.0, 3.0]), 'b': np.array([5.0, 7.0])}
    head = [np.array([1.0, 10.0])]
    grads = tu.check_symbolic_backward(lambda a, b: a * b, location, head,
                                       {'a': np.array([5.0, 70.0]), 'b': np.array([2.0, 30.0])})
    assert [g.tolist() for g in grads] == [[5.0, 70.0], [2.0, 30.0]]
    with pytest.raises(AssertionError, match='BACKWARD_b'):
        tu.check_symbolic_backward(lambda a, b: a * b, location, head,
                                   {'b': np.array([2.0, 31.0])})


def test_symbolic_backward_with_grad_req_add_starts_from_the_old_gradient():
    np.random.seed(5)
    grads = tu.check_symbolic_backward(lambda x: x * 3, [np.array([1.0, 1.0])],
                                       [np.array([1.0, 2.0])], [np.array([3.0, 6.0])],
                                       grad_req='add', dtype=np.float64)
    assert not np.allclose(grads[0], [3.0, 6.0])      # the random start was added


# ----------------------------------------------------------------------------------------------
# Configuration, exceptions, retries


def test_environment_sets_a_variable_for_a_block():
    before = config.get('MXNET_CPU_PARALLEL_SIZE')
    with tu.environment('MXNET_CPU_PARALLEL_SIZE', '77'):
        assert config.get('MXNET_CPU_PARALLEL_SIZE') == 77
        with tu.environment({'MXNET_CPU_PARALLEL_SIZE': 5, 'MXNET_SAFE_ACCUMULATION': True}):
            assert config.get('MXNET_CPU_PARALLEL_SIZE') == 5
            assert config.get('MXNET_SAFE_ACCUMULATION') is True
        assert config.get('MXNET_CPU_PARALLEL_SIZE') == 77
    assert config.get('MXNET_CPU_PARALLEL_SIZE') == before


def test_environment_none_means_unset_and_errors_restore():
    with tu.environment('MXNET_CPU_PARALLEL_SIZE', 9):
        with tu.environment('MXNET_CPU_PARALLEL_SIZE', None):
            assert config.source('MXNET_CPU_PARALLEL_SIZE') == 'override'
            assert config.get('MXNET_CPU_PARALLEL_SIZE') == config.default_value(
                config.lookup('MXNET_CPU_PARALLEL_SIZE'))
    with pytest.raises(RuntimeError):
        with tu.environment('MXNET_SAFE_ACCUMULATION', '1'):
            raise RuntimeError('inside')
    assert config.source('MXNET_SAFE_ACCUMULATION') != 'override'


def test_environment_decorates_functions():
    @tu.environment({'MXNET_EXEC_NUM_TEMP': 4})
    def num_temp():
        return config.get('MXNET_EXEC_NUM_TEMP')
    assert num_temp() == 4 and num_temp() == 4


def test_environment_validates_like_the_configuration():
    with pytest.raises(ConfigError, match='MXNET_CPU_PARALLEL_SIZE'):
        tu.environment('MXNET_CPU_PARALLEL_SIZE', 'many')
    with pytest.raises(KeyError, match='did you mean'):
        tu.environment('MXNET_CPU_PARALEL_SIZE', '1')
    with pytest.raises(ConfigError, match='read once at start-up'):
        tu.environment('MXNET_PROFILER_AUTOSTART', '1')
    with pytest.raises(TypeError, match='name, value'):
        tu.environment('MXNET_CPU_PARALLEL_SIZE')


def test_assert_exception():
    tu.assert_exception(lambda: 1 / 0, ZeroDivisionError)
    tu.assert_exception(int, ValueError, 'seven')
    with pytest.raises(AssertionError, match='did not raise KeyError'):
        tu.assert_exception(lambda: None, KeyError)
    with pytest.raises(ZeroDivisionError):
        tu.assert_exception(lambda: 1 / 0, KeyError)


def test_retry_reruns_failed_assertions_only():
    calls = []

    @tu.retry(3)
    def fails_twice():
        calls.append(1)
        assert len(calls) == 3
        return 'done'
    assert fails_twice() == 'done' and len(calls) == 3

    @tu.retry(2)
    def always_fails():
        calls.append(1)
        assert False, 'still wrong'
    with pytest.raises(AssertionError, match='still wrong'):
        always_fails()

    @tu.retry(5)
    def broken():
        calls.append(1)
        raise KeyError('not an assertion')
    count = len(calls)
    with pytest.raises(KeyError):
        broken()
    assert len(calls) == count + 1
    with pytest.raises(ValueError, match='positive'):
        tu.retry(0)
