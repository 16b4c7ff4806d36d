"""Operators whose behaviour the operator table and MXNet's fixtures cannot check alone: random
draws, penalties added to gradients, in-place resets, value-dependent shapes and errors."""
from __future__ import annotations

import numpy as np
import pytest

import ember as mx
from ember.base import EmberError
from ember.op.registry import ShapeError


# ----------------------------------------------------------------------------------------------
# Random draws with array parameters, shaped like an input, and multinomial.

def test_sample_normal_draws_per_parameter_element():
    mx.random.seed(3)
    draws = mx.nd.random.normal(mx.nd.array([0.0, 10.0]), mx.nd.array([1.0, 0.1]),
                                shape=4000).asnumpy()
    assert draws.shape == (2, 4000) and draws.dtype == np.float32
    assert abs(draws[0].mean()) < 0.1 and abs(draws[0].std() - 1) < 0.1
    assert abs(draws[1].mean() - 10) < 0.01 and abs(draws[1].std() - 0.1) < 0.01


@pytest.mark.parametrize('name,params,mean', [
    ('uniform', (2.0, 4.0), 3.0), ('gamma', (2.0, 3.0), 6.0), ('exponential', (0.5,), 2.0),
    ('poisson', (4.0,), 4.0), ('negative_binomial', (3.0, 0.6), 2.0),
    ('generalized_negative_binomial', (2.5, 0.3), 2.5)])
def test_sample_operators_have_the_right_mean(name, params, mean):
    mx.random.seed(5)
    arrays = [mx.nd.array([p]) for p in params]
    draws = getattr(mx.nd, f'sample_{name}')(*arrays, shape=20000).asnumpy()
    assert draws.shape == (1, 20000)
    assert abs(draws.mean() - mean) < 0.05 * mean


def test_random_functions_refuse_mixed_parameters():
    with pytest.raises(TypeError, match='all be NDArrays or all numbers'):
        mx.nd.random.normal(mx.nd.array([0.0]), 1.0)


def test_like_draws_take_the_shape_and_dtype_of_their_input():
    mx.random.seed(1)
    out = mx.nd.random.uniform_like(mx.nd.zeros((3, 2), dtype='float64'), low=5, high=6)
    assert out.shape == (3, 2) and out.dtype == np.float64
    assert ((out.asnumpy() >= 5) & (out.asnumpy() < 6)).all()
    assert mx.nd.random.poisson_like(mx.nd.zeros((4,)), lam=2).shape == (4,)


def test_randn_and_multinomial_in_mx_random():
    mx.random.seed(2)
    assert mx.random.randn(2, 3).shape == (2, 3)
    picks = mx.random.multinomial(mx.nd.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]),
                                  shape=5).asnumpy()
    assert picks.dtype == np.int32 and (picks == [[1] * 5, [0] * 5]).all()


def test_multinomial_log_probabilities_and_their_gradient():
    mx.random.seed(4)
    probs = mx.nd.array([[0.2, 0.3, 0.5]], dtype='float64')
    probs.attach_grad()
    with mx.autograd.record():
        picks, log_prob = mx.nd.random.multinomial(probs, shape=6, get_prob=True)
    log_prob.backward()
    chosen = picks.asnumpy()[0]
    np.testing.assert_allclose(log_prob.asnumpy()[0], np.log([0.2, 0.3, 0.5])[chosen],
                               rtol=1e-6)
    expected = np.bincount(chosen, minlength=3) / np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(probs.grad.asnumpy()[0], expected, rtol=1e-12)


def test_unique_zipfian_draws_are_distinct():
    mx.random.seed(7)
    samples, tries = mx.nd._internal._sample_unique_zipfian(range_max=20, shape=(3, 8))
    rows = samples.asnumpy()
    assert all(len(set(row)) == 8 for row in rows) and (rows < 20).all()
    assert (tries.asnumpy() >= 8).all()


def test_rand_zipfian_expected_counts():
    mx.random.seed(9)
    sampled, true_count, sampled_count = mx.nd.contrib.rand_zipfian(mx.nd.array([0, 4]), 5, 10)
    assert sampled.dtype == np.int64 and sampled.shape == (5,)
    log_range = np.log(11)
    np.testing.assert_allclose(true_count.asnumpy(),
                               np.log([2 / 1, 6 / 5]) / log_range * 5, rtol=1e-12)
    classes = sampled.asnumpy()
    np.testing.assert_allclose(sampled_count.asnumpy(),
                               np.log((classes + 2) / (classes + 1)) / log_range * 5,
                               rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# Penalties, resets and value-dependent shapes.

def test_kl_sparse_reg_updates_its_average_and_adds_the_penalty():
    data = mx.sym.var('data')
    net = mx.sym.IdentityAttachKLSparseReg(data, sparseness_target=0.2, penalty=0.5,
                                           momentum=0.9, name='kl')
    assert net.list_auxiliary_states() == ['kl_moving_avg']
    values = np.array([[0.1, 0.4], [0.3, 0.8]])
    exe = net.simple_bind(mx.cpu(), data=(2, 2), type_dict={'data': np.float64})
    exe.aux_dict['kl_moving_avg'][:] = 0.5
    exe.forward(is_train=True, data=mx.nd.array(values, dtype='float64'))
    np.testing.assert_allclose(exe.outputs[0].asnumpy(), values)
    head = np.ones((2, 2))
    exe.backward(mx.nd.array(head, dtype='float64'))
    average = 0.9 * 0.5 + 0.1 * values.mean(axis=0)
    np.testing.assert_allclose(exe.aux_dict['kl_moving_avg'].asnumpy(), average)
    penalty = 0.5 * (-0.2 / average + 0.8 / (1 - average))
    np.testing.assert_allclose(exe.grad_dict['data'].asnumpy(), head + penalty)


def test_reset_arrays_zeroes_in_place():
    a, b = mx.nd.ones((2, 3)), mx.nd.ones((4,), dtype='int32')
    assert mx.nd.reset_arrays(a, b, num_arrays=2) == []
    assert not a.asnumpy().any() and not b.asnumpy().any()


def test_boolean_mask_selects_rows_and_passes_their_gradient():
    data = mx.nd.array(np.arange(8.0).reshape(4, 2))
    data.attach_grad()
    with mx.autograd.record():
        picked = mx.nd.contrib.boolean_mask(data, mx.nd.array([0, 1, 0, 1]))
    picked.backward(mx.nd.ones_like(picked))
    assert picked.asnumpy().tolist() == [[2, 3], [6, 7]]
    assert data.grad.asnumpy()[:, 0].tolist() == [0, 1, 0, 1]


def test_concatenate_and_onehot_encode():
    joined = mx.nd.concatenate([mx.nd.ones((1, 2)), mx.nd.zeros((2, 2))])
    assert joined.asnumpy().tolist() == [[1, 1], [0, 0], [0, 0]]
    out = mx.nd.zeros((2, 3))
    mx.nd.onehot_encode(mx.nd.array([2, 0]), out)
    assert out.asnumpy().tolist() == [[0, 0, 1], [1, 0, 0]]


def test_gluon_group_norm_trains_hybridized():
    net = mx.gluon.nn.GroupNorm(num_groups=2)
    net.initialize()
    net.hybridize()
    x = mx.nd.array(np.random.default_rng(0).normal(size=(2, 4, 3)))
    with mx.autograd.record():
        y = net(x)
    y.backward(mx.nd.array(np.random.default_rng(1).normal(size=(2, 4, 3))))
    assert net.gamma.shape == (2,) and net.gamma.grad().shape == (2,)
    grouped = y.asnumpy().reshape(2, 2, -1)
    np.testing.assert_allclose(grouped.mean(-1), 0, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Errors name the operator, the value and what is accepted.

def test_linalg_refuses_integers():
    with pytest.raises(ShapeError, match='float32 and float64, got int32'):
        mx.nd.linalg.potrf(mx.nd.ones((2, 2), dtype='int32'))


def test_linalg_names_mismatched_matrices():
    with pytest.raises(ShapeError, match='op\\(A\\) has 3 columns and op\\(B\\) has 4 rows'):
        mx.nd.linalg.gemm2(mx.nd.ones((2, 3)), mx.nd.ones((4, 5)))


def test_potrf_of_an_indefinite_matrix_fails_at_the_wait():
    result = mx.nd.linalg.potrf(mx.nd.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(EmberError, match='not symmetric positive definite'):
        result.asnumpy()


def test_box_nms_names_a_short_row():
    with pytest.raises(ShapeError, match='at least 6 values per box'):
        mx.nd.contrib.box_nms(mx.nd.ones((3, 5)))


# ----------------------------------------------------------------------------------------------
# Multi-tensor optimizer updates against their formulas.

def _lamb(weight, grad, mean, var, lr, wd, t, beta1=0.9, beta2=0.999, eps=1e-6):
    mean = beta1 * mean + (1 - beta1) * grad
    var = beta2 * var + (1 - beta2) * grad * grad
    step = (mean / (1 - beta1 ** t)) / (np.sqrt(var / (1 - beta2 ** t)) + eps) + wd * weight
    ratio = np.linalg.norm(weight) / np.linalg.norm(step)
    return weight - lr * ratio * step, mean, var


def test_multi_lamb_update_follows_lamb():
    rng = np.random.default_rng(11)
    weights = [rng.normal(size=3), rng.normal(size=(2, 2))]
    grads = [rng.normal(size=3), rng.normal(size=(2, 2))]
    arrays = [[mx.nd.array(v) for v in group] for group in
              (weights, grads, [np.zeros(3), np.zeros((2, 2))], [np.zeros(3), np.zeros((2, 2))])]
    new = mx.nd.contrib.multi_lamb_update(*arrays, step_count=[1, 3], lrs=[0.1, 0.2],
                                          wds=[0.01, 0.0])
    for i, (lr, wd, t) in enumerate([(0.1, 0.01, 1), (0.2, 0.0, 3)]):
        weight, mean, var = _lamb(weights[i], grads[i], 0, 0, lr, wd, t)
        np.testing.assert_allclose(new[i].asnumpy(), weight, rtol=1e-5)
        np.testing.assert_allclose(arrays[2][i].asnumpy(), mean, rtol=1e-5)
        np.testing.assert_allclose(arrays[3][i].asnumpy(), var, rtol=1e-5)


def test_multi_adamw_update_skips_on_a_bad_scale_and_updates_otherwise():
    weights = [mx.nd.array([1.0, 2.0]), mx.nd.array([3.0])]
    grads = [mx.nd.array([0.5, -0.5]), mx.nd.array([1.0])]
    means, variances = [mx.nd.zeros(2), mx.nd.zeros(1)], [mx.nd.zeros(2), mx.nd.zeros(1)]
    skipped = mx.nd.contrib.multi_adamw_update(weights, grads, means, variances, float('nan'),
                                               lrs=[0.1, 0.2], wds=[0.01, 0.0], etas=[1, 0.5])
    assert skipped[0].asnumpy().tolist() == [1.0, 2.0]
    new = mx.nd.contrib.multi_adamw_update(weights, grads, means, variances, 1.0,
                                           lrs=[0.1, 0.2], wds=[0.01, 0.0], etas=[1, 0.5])
    mean, var = 0.1 * np.array([0.5, -0.5]), 0.001 * np.array([0.25, 0.25])
    expected = np.array([1, 2]) - (0.1 * mean / (np.sqrt(var) + 1e-8) + 0.01 * np.array([1, 2]))
    np.testing.assert_allclose(new[0].asnumpy(), expected, rtol=1e-5)


def test_mixed_precision_lamb_updates_the_master_copy():
    weight16 = mx.nd.array([1.0, 2.0], dtype='float16')
    grad16 = mx.nd.array([0.5, -0.5], dtype='float16')
    weight32, mean, var = mx.nd.array([1.0, 2.0]), mx.nd.zeros(2), mx.nd.zeros(2)
    step = mx.nd.mp_lamb_update_phase1(weight16, grad16, mean, var, weight32, t=1, wd=0.1)
    assert step.dtype == np.float32
    new = mx.nd.mp_lamb_update_phase2(weight16, step, mx.nd.array([2.0]), mx.nd.array([1.0]),
                                      weight32, lr=0.1)
    assert new.dtype == np.float16
    expected = np.array([1.0, 2.0]) - 0.1 * 2.0 * step.asnumpy()
    np.testing.assert_allclose(weight32.asnumpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(new.asnumpy(), expected, rtol=1e-3)


def test_group_adagrad_keeps_one_history_value_per_row():
    weight, grad = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.1, 0.2], [0.3, -0.4]])
    history = mx.nd.zeros((2, 1), dtype='float64')
    new = mx.nd.contrib.group_adagrad_update(mx.nd.array(weight, dtype='float64'),
                                             mx.nd.array(grad, dtype='float64'), history,
                                             lr=0.1, rescale_grad=2.0)
    g = 2 * grad
    expected_history = (g * g).mean(axis=1, keepdims=True)
    np.testing.assert_allclose(history.asnumpy(), expected_history)
    np.testing.assert_allclose(new.asnumpy(),
                               weight - 0.1 * g / np.sqrt(expected_history + 1e-5))


def test_dlpack_and_numpy_conversions():
    a = mx.nd.array([[1, 2], [3, 4]], dtype='int32')
    back = mx.nd.from_dlpack(mx.nd.to_dlpack_for_read(a))
    assert back.dtype == np.int32 and back.asnumpy().tolist() == [[1, 2], [3, 4]]
    assert mx.nd.from_dlpack(np.arange(3.0)).asnumpy().tolist() == [0, 1, 2]
    capsule = mx.nd.to_dlpack_for_write(a)
    assert type(capsule).__name__ == 'PyCapsule'
    converted = mx.nd.from_numpy(np.arange(4, dtype=np.int64).reshape(2, 2))
    assert converted.dtype == np.int64 and converted.shape == (2, 2)


def test_cached_op_in_mx_nd():
    op = mx.nd.CachedOp(mx.sym.relu(mx.sym.var('x')))
    assert op(mx.nd.array([-1.0, 2.0])).asnumpy().tolist() == [0.0, 2.0]


def test_sync_batch_norm_spans_the_devices_batches():
    rng = np.random.default_rng(5)
    halves = [rng.normal(size=(2, 3, 4)), rng.normal(size=(3, 3, 4))]
    heads = [rng.normal(size=h.shape) for h in halves]
    gamma = rng.uniform(0.5, 1.5, 3)
    outs, grads, moving = [], [], []
    with mx.autograd.record(train_mode=True):
        for i, half in enumerate(halves):
            device = mx.cpu(i)
            x = mx.nd.array(half, ctx=device, dtype='float64')
            x.attach_grad()
            stats = [mx.nd.zeros(3, ctx=device, dtype='float64'),
                     mx.nd.ones(3, ctx=device, dtype='float64')]
            y = mx.nd.contrib.SyncBatchNorm(
                x, mx.nd.array(gamma, ctx=device, dtype='float64'),
                mx.nd.zeros(3, ctx=device, dtype='float64'), *stats, fix_gamma=False,
                eps=1e-5, ndev=2, key='test_sync_bn')
            outs.append(y)
            grads.append(x)
            moving.append(stats)
    mx.autograd.backward(outs, [mx.nd.array(h, ctx=y.context, dtype='float64')
                                for h, y in zip(heads, outs)])
    whole = mx.nd.array(np.concatenate(halves), dtype='float64')
    whole.attach_grad()
    with mx.autograd.record(train_mode=True):
        y = mx.nd.BatchNorm(whole, mx.nd.array(gamma, dtype='float64'),
                            mx.nd.zeros(3, dtype='float64'), mx.nd.zeros(3, dtype='float64'),
                            mx.nd.ones(3, dtype='float64'), fix_gamma=False, eps=1e-5)
    y.backward(mx.nd.array(np.concatenate(heads), dtype='float64'))
    np.testing.assert_allclose(np.concatenate([o.asnumpy() for o in outs]), y.asnumpy(),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([x.grad.asnumpy() for x in grads]),
                               whole.grad.asnumpy(), rtol=1e-10, atol=1e-12)
    mean = np.concatenate(halves).mean(axis=(0, 2))
    np.testing.assert_allclose(moving[0][0].asnumpy(), 0.1 * mean, rtol=1e-10)
    np.testing.assert_allclose(moving[1][0].asnumpy(), 0.1 * mean, rtol=1e-10)


class _DeviceArray(np.ndarray):
    """An array of a pretend device: NumPy kernels must not see it."""

    def get(self):
        return np.array(self)


class _DeviceModule:
    ndarray = _DeviceArray

    @staticmethod
    def asarray(values):
        return np.array(values).view(_DeviceArray)


def test_numpy_kernels_run_through_the_host_on_other_devices():
    from ember.op import registry
    from ember.op.host import on_host
    seen = []

    def kernel(attrs, ins, outs, ctx):
        seen.append((type(ins[0]), ctx.xp))
        ins[1][...] += 1                       # an input updated in place
        outs[0][...] = ins[0] * 2

    x = np.arange(3.0).view(_DeviceArray)
    state = np.zeros(3).view(_DeviceArray)
    out = np.empty(3).view(_DeviceArray)
    on_host(kernel, mutate=(1,))({}, [x, state], [out],
                                 registry.KernelContext(None, xp=_DeviceModule))
    assert seen == [(np.ndarray, np)]
    assert out.tolist() == [0.0, 2.0, 4.0] and state.tolist() == [1.0, 1.0, 1.0]
