"""ember.test_utils: comparisons, random data, gradient checks, configuration for a block."""
from pathlib import Path

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
    assert tu.get_tols(values, values, None, None) == (rtol, atol)
    assert (tu.get_rtol(None, dtype), tu.get_atol(None, dtype)) == (rtol, atol)
    assert (tu.get_rtol(0.5, dtype), tu.get_atol(0.25, dtype)) == (0.5, 0.25)


def test_the_looser_dtype_sets_the_tolerance():
    assert tu.get_tols(np.ones(1, np.float16), np.ones(1, np.float64), None, None) == (1e-2, 1e-1)
    assert tu.get_tols(mx.nd.ones((1,)), np.ones(1, np.float64), None, None) == (1e-4, 1e-3)
    assert tu.get_tols(np.ones(1), np.ones(1), rtol=0.3, atol=None) == (0.3, 1e-20)
    assert tu.get_tols(np.ones(1, np.float32), np.ones(1), {np.float32: 0.2}, None) == (
        0.2, 1e-3)


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


def test_shapes_broadcast_unless_asked_not_to():
    tu.assert_almost_equal(np.zeros(2), np.zeros((1, 2)))
    with pytest.raises(AssertionError, match=r'a.shape = \(2,\) and b.shape = \(1, 2\)'):
        tu.assert_almost_equal(np.zeros(2), np.zeros((1, 2)), use_broadcast=False)
    with pytest.raises(AssertionError, match=r'a has shape \(2,\) but b has shape \(3,\)'):
        tu.assert_almost_equal(np.zeros(2), np.zeros(3))


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
    with pytest.raises(TypeError, match='a Symbol or a function of NDArrays'):
        tu.check_numeric_gradient(np.ones(2), [np.ones(2)])
    with pytest.raises(KeyError, match="'weight'"):
        tu.check_numeric_gradient(lambda data: data * 2, {'data': np.ones(2)},
                                  grad_nodes=['weight'])
    with pytest.raises(TypeError, match='NDArray or a list'):
        tu.check_numeric_gradient(lambda data: 3.0, [np.ones(2)])


def test_numeric_grad_of_an_executor_sums_its_first_output():
    x, w = mx.sym.var('x'), mx.sym.var('w')
    executor = (mx.sym.sin(x) * w).simple_bind(mx.cpu(), x=(1,), w=(1,), grad_req='null',
                                                type_dict={'x': 'float64', 'w': 'float64'})
    grads = tu.numeric_grad(executor, {'x': np.array([0.3]), 'w': np.array([2.0])}, eps=1e-6,
                            dtype=np.float64)
    np.testing.assert_allclose(grads['x'], [2.0 * np.cos(0.3)], rtol=1e-8)
    np.testing.assert_allclose(grads['w'], [np.sin(0.3)], rtol=1e-8)
    assert executor.arg_dict['x'].asnumpy().tolist() == [0.3]     # put back


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


# ----------------------------------------------------------------------------------------------
# Symbols through executors, as MXNet's tests use them


def test_symbol_checks_bind_and_compare():
    x, w = mx.sym.var('x'), mx.sym.var('w')
    y = mx.sym.FullyConnected(x, weight=w, num_hidden=2, no_bias=True, name='fc')
    data, weight = np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, 0.0, 1.0], [0.5, 0.5, 0.5]])
    outputs = tu.check_symbolic_forward(y, [data, weight], [data @ weight.T])
    assert isinstance(outputs[0], mx.nd.NDArray)
    tu.check_symbolic_forward(y, {'x': data, 'w': weight}, {'fc_output': data @ weight.T})
    head = np.array([[1.0, -2.0]])
    grads = tu.check_symbolic_backward(y, [data, weight], [head],
                                       {'x': head @ weight, 'w': head.T @ data})
    assert sorted(grads) == ['w', 'x']
    tu.check_symbolic_backward(y, [data, weight], [head], [head @ weight, head.T @ data],
                               grad_req={'x': 'add', 'w': 'null'})
    tu.check_numeric_gradient(mx.sym.tanh(y), [data, weight], numeric_eps=1e-6, rtol=1e-5,
                              dtype=np.float64)
    tu.check_numeric_gradient(y, {'x': data, 'w': weight}, grad_nodes={'w': 'add'},
                              numeric_eps=1e-6, rtol=1e-5, dtype=np.float64)
    with pytest.raises(ValueError, match=r"names \['x'\], but the symbol has \['x', 'w'\]"):
        tu.check_symbolic_forward(y, {'x': data}, [data])


def test_symbol_gradient_check_catches_a_wrong_rule_and_aux_states_stay():
    data = mx.sym.var('data')
    net = mx.sym.BatchNorm(data, fix_gamma=False, name='bn')
    rng = np.random.default_rng(1)
    location = [rng.normal(size=(4, 2)), rng.uniform(0.5, 1.5, 2), rng.normal(size=2)]
    tu.check_numeric_gradient(net, location, aux_states=[np.zeros(2), np.ones(2)],
                              numeric_eps=1e-5, rtol=1e-3, atol=1e-6, dtype=np.float64)
    with pytest.raises(AssertionError, match='NUMERICAL_data and BACKWARD_data'):
        tu.check_numeric_gradient(mx.sym.BlockGrad(data) * data, [np.array([2.0, 3.0])],
                                  dtype=np.float64, numeric_eps=1e-6)


def test_simple_forward_and_same_symbol_structure():
    a, b = mx.sym.var('a'), mx.sym.var('b')
    out = tu.simple_forward(mx.sym.Group([a + b, a * b]), a=np.array([2.0]), b=np.array([3.0]))
    assert [o.tolist() for o in out] == [[5.0], [6.0]]
    assert tu.same_symbol_structure(a + b, b + a)
    assert not tu.same_symbol_structure(a + b, a * b)


def test_check_consistency_across_devices_and_dtypes():
    net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=3, name='fc')
    entries = [{'ctx': mx.cpu(0), 'data': (2, 4), 'type_dict': {'data': np.float64}},
               {'ctx': mx.cpu(1), 'data': (2, 4), 'type_dict': {'data': np.float32}}]
    truth = tu.check_consistency(net, entries, rtol=1e-4, atol=1e-4)
    assert truth['fc_output'].dtype == np.float64 and 'fc_weight' in truth
    wrong = dict(truth, fc_output=truth['fc_output'] + 1)
    with pytest.raises(AssertionError, match='fc_output'):
        tu.check_consistency(net, entries, ground_truth=wrong, grad_req='null')


def test_check_speed_times_forward_and_backward():
    net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=3)
    assert tu.check_speed(net, N=2, data=(2, 4)) > 0
    assert tu.check_speed(net, location={'data': np.ones((2, 4))}, N=2, typ='forward') > 0
    with pytest.raises(ValueError, match="typ='backward'"):
        tu.check_speed(net, N=1, typ='backward', data=(2, 4))


def test_hybridize_consistency_of_a_block():
    def builder(prefix):
        net = mx.gluon.nn.HybridSequential(prefix=prefix)
        with net.name_scope():
            net.add(mx.gluon.nn.Dense(3, activation='tanh'), mx.gluon.nn.Dense(2))
        return net
    data = [mx.nd.array(np.random.default_rng(2).normal(size=(4, 5)))]
    tu.check_gluon_hybridize_consistency(builder, data)

    def doubled(prefix):
        return mx.gluon.nn.Lambda(lambda x: x * 2, prefix=prefix)
    tu.check_gluon_hybridize_consistency(doubled, data, numpy_func=lambda x: 2 * x,
                                         test_grad=False)
    with pytest.raises(AssertionError):
        tu.check_gluon_hybridize_consistency(doubled, data, numpy_func=lambda x: 3 * x,
                                             test_grad=False)


def test_compare_optimizer_with_itself_and_another():
    sgd = mx.optimizer.SGD(learning_rate=0.1, momentum=0.9)
    tu.compare_optimizer(sgd, mx.optimizer.SGD(learning_rate=0.1, momentum=0.9), (3, 4),
                         np.float32)
    with pytest.raises(AssertionError):
        tu.compare_optimizer(mx.optimizer.SGD(learning_rate=0.1),
                             mx.optimizer.SGD(learning_rate=0.2), (3,), np.float32)
    tu.compare_optimizer(mx.optimizer.SGD(learning_rate=0.1),
                         mx.optimizer.SGD(learning_rate=0.1), [(2,), (3,)], np.float32,
                         ntensors=2)


# ----------------------------------------------------------------------------------------------
# Comparisons and data MXNet's tests use


def test_error_rate_comparison_and_nan_ignoring():
    tu.assert_almost_equal_with_err(np.arange(10.0), np.r_[np.arange(9.0), 99.0], etol=0.2)
    with pytest.raises(AssertionError, match='more than etol=0.05'):
        tu.assert_almost_equal_with_err(np.arange(10.0), np.r_[np.arange(9.0), 99.0], etol=0.05)
    with pytest.raises(AssertionError):
        tu.assert_almost_equal_with_err(np.ones(2), np.zeros(2))
    assert tu.get_etol() == 0 and tu.get_etol(0.3) == 0.3
    tu.assert_almost_equal_ignore_nan(np.array([np.nan, 1.0]), np.array([5.0, 1.0]))
    with pytest.raises(AssertionError):
        tu.assert_almost_equal_ignore_nan(np.array([np.nan, 1.0]), np.array([5.0, 2.0]))


def test_tolerance_tables_and_effective_dtype():
    assert tu.default_rtols()[np.dtype(np.float32)] == 1e-4
    assert tu.default_atols()[np.dtype(np.float16)] == 1e-1
    assert tu.default_dtype() is np.float32
    assert tu.effective_dtype(mx.nd.ones((1,), dtype='float16')) == np.float16
    assert tu.get_tolerance(np.ones(1, np.float32), {np.float32: 0.5}, tu.default_rtols()) == 0.5
    assert tu.default_numeric_eps()[np.dtype(np.float64)] == 2.0 ** -14


def test_shape_checks_locations_and_tuples():
    tu.checkShapes(np.zeros((2, 3)), np.ones((2, 3)))
    with pytest.raises(AssertionError, match=r'\(2,\) and b.shape = \(3,\)'):
        tu.checkShapes(np.zeros(2), np.zeros(3))
    a, b = np.array([[1.0, 2.0]]), np.array([[1.0, 2.5]])
    assert tu.locationError(a, b, (0, 1), ('got', 'want')) == (
        'Location of error: (0, 1), got=2.00000000, want=2.50000000')
    tu.compare_ndarray_tuple((mx.nd.ones(2), (np.zeros(1), None)), (np.ones(2), (np.zeros(1), 1)))
    with pytest.raises(AssertionError):
        tu.compare_ndarray_tuple((np.ones(2),), (np.zeros(2),))


def test_same_array_tells_views_from_copies():
    x = mx.nd.arange(6).reshape((2, 3))
    assert tu.same_array(x, x[1:]) is False      # a different region of the same buffer
    assert tu.same_array(x, x.reshape((3, 2))) and not tu.same_array(x, x.copy())
    assert x.asnumpy().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_collapse_sum_like_sums_broadcast_axes():
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(tu.collapse_sum_like(a, (1, 4)), a.sum(axis=(0, 1))[None])
    assert tu.collapse_sum_like(np.ones((0, 3)), (3,)).tolist() == [0.0, 0.0, 0.0]


def test_random_helpers():
    np.random.seed(4)
    arrays = tu.random_uniform_arrays((3,), (2, 2), low=2, high=3, dtype=np.float64)
    assert [a.dtype for a in arrays] == [np.float64] * 2 and all((a >= 2).all() for a in arrays)
    with pytest.raises(TypeError, match='scale'):
        tu.random_uniform_arrays((2,), scale=1)
    assert sorted(tu.random_sample(list(range(5)), 5)) == list(range(5))
    with pytest.raises(ValueError, match='k=6'):
        tu.random_sample([1, 2], 6)
    x, y = tu.rand_coord_2d(0, 3, 10, 12)
    assert 0 <= x < 3 and 10 <= y < 12


def test_elementwise_helpers_and_large_tensor_builders():
    np.testing.assert_array_equal(tu.assign_each(np.array([1.0, 4.0]), np.sqrt), [1.0, 2.0])
    np.testing.assert_array_equal(tu.assign_each2(np.array([1.0]), np.array([2.0]),
                                                  lambda a, b: a * b), [2.0])
    with pytest.raises(ValueError, match='shapes'):
        tu.assign_each2(np.ones(1), np.ones(2), max)
    assert tu.create_vector(3).asnumpy().tolist() == [0, 1, 2]
    assert tu.create_2d_tensor(2, 2).asnumpy().tolist() == [[0, 0], [1, 1]]
    assert tu.get_identity_mat(2).asnumpy().tolist() == [[1, 0], [0, 1]]
    assert tu.get_identity_mat_batch(2).shape == (2, 2, 2)


def test_matrices_have_the_eigenvalues_promised():
    np.random.seed(6)
    general = tu.new_matrix_with_real_eigvals_nd((2, 3, 3))
    assert general.shape == (2, 3, 3)
    assert np.allclose(np.linalg.eigvals(tu.new_matrix_with_real_eigvals_2d(3)).imag, 0)
    symmetric = tu.new_sym_matrix_with_real_eigvals_nd((2, 4, 4))
    assert np.allclose(symmetric, np.swapaxes(symmetric, -1, -2))
    assert np.all(np.abs(np.linalg.eigvalsh(tu.new_sym_matrix_with_real_eigvals_2d(3))) <= 10)


def test_dummy_iter_repeats_the_first_batch():
    real = mx.io.NDArrayIter(np.arange(6.0).reshape(3, 2), np.arange(3.0), batch_size=1)
    it = tu.DummyIter(real)
    assert it.provide_data == real.provide_data and it.batch_size == 1
    assert all(next(it).label[0].asnumpy().tolist() == [0.0] for _ in range(5))


# ----------------------------------------------------------------------------------------------
# Files and data sets, fetched from file:// URLs (no network)


def _gzipped_idx(path, header, payload):
    import gzip
    import struct
    with gzip.open(path, 'wb') as out:
        out.write(struct.pack(f'>{len(header)}I', *header) + payload)


def test_download_and_archives(tmp_path, monkeypatch):
    import bz2
    import zipfile
    source = tmp_path / 'source.txt'
    source.write_text('hello')
    target = tu.download(source.as_uri(), dirname=str(tmp_path / 'out'))
    assert Path(target).read_text() == 'hello'
    source.write_text('changed')
    assert Path(tu.download(source.as_uri(), dirname=str(tmp_path / 'out'))).read_text() == 'hello'
    tu.download(source.as_uri(), dirname=str(tmp_path / 'out'), overwrite=True)
    assert Path(target).read_text() == 'changed'
    with pytest.raises(OSError):
        tu.download((tmp_path / 'missing').as_uri(), dirname=str(tmp_path), retries=1)
    with zipfile.ZipFile(tmp_path / 'pack.zip', 'w') as archive:
        archive.writestr('inside.txt', 'zipped')
    tu.get_zip_data(str(tmp_path / 'z'), (tmp_path / 'pack.zip').as_uri(), 'pack.zip')
    assert (tmp_path / 'z' / 'inside.txt').read_text() == 'zipped'
    (tmp_path / 'data.bz2').write_bytes(bz2.compress(b'unzipped'))
    tu.get_bz2_data(str(tmp_path / 'b'), 'data', (tmp_path / 'data.bz2').as_uri(), 'data.bz2')
    assert (tmp_path / 'b' / 'data').read_bytes() == b'unzipped'
    assert not (tmp_path / 'b' / 'data.bz2').exists()
    (tmp_path / 'm-symbol.json').write_text('{}')
    (tmp_path / 'm-0000.params').write_text('')
    prefix, epoch = tu.download_model('m', str(tmp_path / 'models'), {'m': {
        'symbol': (tmp_path / 'm-symbol.json').as_uri(),
        'params': (tmp_path / 'm-0000.params').as_uri()}})
    assert (Path(prefix + '-symbol.json').read_text(), epoch) == ('{}', 0)
    assert tu.download_model('unknown', str(tmp_path), {}) == (None, 0)


def test_mnist_and_cifar_files_found_in_place(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for prefix, count in (('train', 3), ('t10k', 2)):
        _gzipped_idx(f'{prefix}-labels-idx1-ubyte.gz', (2049, count), bytes(range(count)))
        _gzipped_idx(f'{prefix}-images-idx3-ubyte.gz', (2051, count, 28, 28),
                     bytes([255] * (count * 784)))
    mnist = tu.get_mnist()
    assert mnist['train_data'].shape == (3, 1, 28, 28) and mnist['test_label'].tolist() == [0, 1]
    assert mnist['train_data'].max() == 1.0
    (tmp_path / 'data' / 'cifar').mkdir(parents=True)
    for name in ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte',
                 't10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte', 'mnist.pkl.gz',
                 'cifar/train.rec', 'cifar/test.rec', 'cifar/train.lst', 'cifar/test.lst'):
        (tmp_path / 'data' / name).write_text('')
    tu.get_mnist_ubyte()
    tu.get_mnist_pkl()
    tu.get_cifar10()       # every file is there: nothing is fetched


# ----------------------------------------------------------------------------------------------
# Random generators and the process


def test_generator_statistics():
    np.random.seed(8)
    buckets, probs = tu.gen_buckets_probs_with_ppf(lambda q: q, 5)
    assert len(buckets) == 5 and probs == [0.2] * 5

    def uniform(n):
        return np.random.uniform(size=n)
    p, observed, expected = tu.chi_square_check(uniform, buckets, probs, nsamples=5000)
    assert p > 1e-4 and observed.sum() == 5000 and expected.tolist() == [1000] * 5
    assert len(tu.verify_generator(uniform, buckets, probs, nsamples=2000, nrepeat=3)) == 3
    with pytest.raises(AssertionError, match='generator test fails'):
        tu.verify_generator(lambda n: np.random.uniform(size=n) ** 2, buckets, probs,
                            nsamples=5000, nrepeat=2)
    coin = tu.chi_square_check(lambda n: np.random.randint(0, 2, n), [0, 1], [0.5, 0.5], 2000)
    assert coin[1].sum() == 2000
    assert tu.mean_check(lambda n: np.random.normal(1.0, 2.0, n), 1.0, 2.0, nsamples=20000)
    assert not tu.mean_check(lambda n: np.random.normal(1.5, 2.0, n), 1.0, 2.0, nsamples=20000)
    assert tu.var_check(lambda n: np.random.normal(0.0, 2.0, n), 2.0, nsamples=20000)
    assert not tu.var_check(lambda n: np.random.normal(0.0, 3.0, n), 2.0, nsamples=20000)


def test_process_facts():
    assert list(tu.list_gpus()) == list(range(mx.context.num_gpus()))
    assert tu.is_aarch64_run() == (__import__('platform').machine() == 'aarch64')
    assert tu.has_tvm_ops() is False and tu.is_op_runnable() is True
    assert tu.Features is mx.runtime.Features and tu.array is mx.nd.array
    assert tu.current_context() == mx.cpu() and tu.Context is mx.Context
    assert tu.Symbol is mx.sym.Symbol


def test_discard_stderr_silences_native_writes(capfd):
    import os
    with tu.discard_stderr():
        os.write(2, b'hidden\n')
    os.write(2, b'shown\n')
    assert capfd.readouterr().err == 'shown\n'


def test_the_guides_examples_run():
    """Every example in docs/*.md runs (this guide's among them)."""
    import doctest
    guides = sorted((Path(__file__).resolve().parents[1] / 'docs').glob('*.md'))
    attempted = 0
    for guide in guides:
        result = doctest.testfile(str(guide), module_relative=False,
                                  optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, guide.name
        attempted += result.attempted
    assert attempted > 20


# ----------------------------------------------------------------------------------------------
# Sparse arrays, MNIST, im2rec and the environment

def test_sparse_helpers():
    np.random.seed(3)
    rows = tu.create_sparse_array_zd((6, 2), 'row_sparse', 0.9, rsp_indices=[4, 1],
                                     data_init=3.0)
    assert rows.indices.asnumpy().tolist() == [1, 4] and rows.data.asnumpy().tolist() == [
        [3.0, 3.0]] * 2
    assert tu.create_sparse_array_zd((6, 2), 'row_sparse', 0.9).indices.shape == (0,)
    array, (indptr, indices, data) = tu.rand_sparse_ndarray((4, 5), 'csr', density=0.5,
                                                            modifier_func=lambda v: v + 10)
    assert array.stype == 'csr' and (data.asnumpy() >= 10).all()
    import scipy.sparse
    matrix = scipy.sparse.random(3, 8, 0.6, format='csr', random_state=1)
    dense = matrix.toarray()
    tu.shuffle_csr_column_indices(matrix)
    assert not all((np.diff(matrix.indices[a:b]) > 0).all()
                   for a, b in zip(matrix.indptr[:-1], matrix.indptr[1:]))
    np.testing.assert_array_equal(matrix.toarray(), dense)


def test_mnist_iterator_reads_data_folder(tmp_path, monkeypatch):
    from data_files import IMAGE_FIXTURES
    (tmp_path / 'data').mkdir()
    for prefix in ('train', 't10k'):
        for kind in ('images-idx3', 'labels-idx1'):
            source = IMAGE_FIXTURES / 'mnist' / f'{kind}-ubyte'
            (tmp_path / 'data' / f'{prefix}-{kind}-ubyte').write_bytes(source.read_bytes())
    monkeypatch.chdir(tmp_path)
    train, val = tu.get_mnist_iterator(4, (1, 28, 28))
    assert next(iter(val)).data[0].shape == (4, 1, 28, 28)
    val.reset()
    labels = {kind: np.concatenate([b.label[0].asnumpy() for b in it])
              for kind, it in (('train', train), ('val', val))}
    assert labels['train'].size == labels['val'].size == 8      # the short last batch dropped
    flat, _ = tu.get_mnist_iterator(5, (784,))
    assert next(iter(flat)).data[0].shape == (5, 784)


def test_im2rec_path_runs_as_a_script(tmp_path):
    import subprocess
    import sys
    from data_files import IMAGE_FIXTURES
    path = tu.get_im2rec_path()
    repo = str(Path(__file__).resolve().parents[1])
    result = subprocess.run([sys.executable, path, str(tmp_path / 'files'),
                             str(IMAGE_FIXTURES / 'images'), '--list', '--recursive',
                             '--no-shuffle'], capture_output=True, timeout=120,
                            env=config.child_environ(PYTHONPATH=repo))
    assert result.returncode == 0, result.stderr.decode()
    assert (tmp_path / 'files.lst').read_bytes() == (IMAGE_FIXTURES / 'im2rec.lst').read_bytes()
    with config.override(MXNET_HOME=str(tmp_path)):
        assert tu.get_im2rec_path() == path         # no tools/im2rec.py under it


def test_environment_helpers_and_np_symbol():
    assert tu.getenv is mx.util.getenv and tu.setenv is mx.util.setenv
    try:
        tu.setenv('CD_JOB', '1')
        assert tu.is_cd_run()
        tu.setenv('CD_JOB', None)
        assert not tu.is_cd_run()
    finally:
        tu.setenv('CD_JOB', None)
    assert isinstance(mx.np_symbol.zeros((2,)), tu.np_symbol)
    assert tu.use_np is mx.util.use_np
