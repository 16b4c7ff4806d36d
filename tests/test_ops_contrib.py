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


# ----------------------------------------------------------------------------------------------
# The backward operators MXNet's contrib namespaces list, against autograd of their forwards,
# through mx.nd.contrib and (bound) mx.sym.contrib.

def _both_forms(name, inputs, **attrs):
    """[mx.nd.contrib result, mx.sym.contrib result] of `name`, as lists of NumPy arrays."""
    def listed(result):
        return [r.asnumpy() for r in (result if isinstance(result, (list, tuple)) else [result])]
    nd_result = listed(getattr(mx.nd.contrib, name)(*inputs, **attrs))
    names = [f'in{i}' for i in range(len(inputs))]
    symbol = getattr(mx.sym.contrib, name)(*[mx.sym.var(n) for n in names], **attrs)
    executor = symbol.bind(mx.cpu(), dict(zip(names, inputs)))
    return [nd_result, listed(executor.forward())]


def _autograd(forward, inputs, head):
    for x in inputs:
        x.attach_grad()
    with mx.autograd.record():
        out = forward(*inputs)
    out.backward(head)
    return [x.grad.asnumpy() for x in inputs]


def test_backward_quadratic_and_gradientmultiplier_are_the_gradients():
    rng = np.random.default_rng(21)
    data = mx.nd.array(rng.normal(size=(2, 3)), dtype='float64')
    head = mx.nd.array(rng.normal(size=(2, 3)), dtype='float64')
    want = _autograd(lambda x: mx.nd.contrib.quadratic(x, a=0.5, b=-2, c=1), [data], head)[0]
    for got in _both_forms('backward_quadratic', [head, data], a=0.5, b=-2, c=1):
        np.testing.assert_allclose(got[0], want, rtol=1e-12)
    want = _autograd(lambda x: mx.nd.contrib.gradientmultiplier(x, scalar=-3), [data],
                     head)[0]
    for got in _both_forms('backward_gradientmultiplier', [head], scalar=-3):
        np.testing.assert_allclose(got[0], want, rtol=1e-12)


def test_backward_index_copy_splits_the_gradient():
    rng = np.random.default_rng(22)
    old, new = (mx.nd.array(rng.normal(size=s), dtype='float64') for s in ((4, 2), (2, 2)))
    index = mx.nd.array([3, 0], dtype='int64')
    head = mx.nd.array(rng.normal(size=(4, 2)), dtype='float64')
    want = _autograd(lambda o, n: mx.nd.contrib.index_copy(o, index, n), [old, new], head)
    for got in _both_forms('backward_index_copy', [head, index]):
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_backward_hawkesll_gives_the_log_likelihood_gradients():
    rng = np.random.default_rng(23)
    lda, alpha, beta = (mx.nd.array(rng.uniform(lo, hi, s)) for lo, hi, s in
                        ((0.5, 1, (3, 2)), (0.1, 0.5, (2,)), (0.5, 2, (2,))))
    state = mx.nd.array(rng.uniform(0, 1, (3, 2)))
    lags = mx.nd.array(rng.uniform(0.1, 1, (3, 5)))
    marks = mx.nd.array(rng.integers(0, 2, (3, 5)), dtype='int32')
    valid, max_time = mx.nd.array([5, 2, 0]), mx.nd.array([6.0, 3.0, 1.5])
    head = mx.nd.array(rng.normal(size=(3,)))
    for x in (lda, alpha, beta):
        x.attach_grad()
    with mx.autograd.record():
        loglik, _ = mx.nd.contrib.hawkesll(lda, alpha, beta, state, lags, marks, valid,
                                           max_time)
    loglik.backward(head)
    want = [x.grad.asnumpy() for x in (lda, alpha, beta)]
    inputs = [head, lda, alpha, beta, state, lags, marks, valid, max_time]
    for got in _both_forms('backward_hawkesll', inputs):
        for mine, theirs in zip(got, want):
            np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-7)


def test_contrib_update_forms_follow_the_plain_updates():
    rng = np.random.default_rng(24)
    weight, grad, mean = (rng.normal(size=(3, 2)).astype('float32') for _ in range(3))
    var = rng.uniform(0.1, 1, (3, 2)).astype('float32')
    args = dict(lr=0.1, eta=0.5, wd=0.01)
    reference = [mx.nd.array(a) for a in (weight, grad, mean, var)]
    want = mx.nd.adamw_update(*reference, mx.nd.array([0.5]), **args).asnumpy()
    arrays = [mx.nd.array(a) for a in (weight, grad, mean, var)]
    np.testing.assert_allclose(mx.nd.contrib.adamw_update(*arrays, 0.5, **args).asnumpy(), want,
                               rtol=1e-6)
    np.testing.assert_allclose(arrays[2].asnumpy(), reference[2].asnumpy(), rtol=1e-6)
    names = ['w', 'g', 'm', 'v']
    symbol = mx.sym.contrib.adamw_update(*[mx.sym.var(n) for n in names], 0.5, **args)
    aux = symbol.list_auxiliary_states()
    bound = dict(zip(names, [mx.nd.array(a) for a in (weight, grad, mean, var)]))
    out = symbol.bind(mx.cpu(), {n: a for n, a in bound.items() if n not in aux},
                      aux_states={n: bound[n] for n in aux}).forward()[0]
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-6)
    # mixed precision: float16 weights with float32 master copies follow the float32 step
    half = [mx.nd.array(weight, dtype='float16'), mx.nd.array(grad, dtype='float16'),
            mx.nd.array(mean), mx.nd.array(var), mx.nd.array(weight)]
    new = mx.nd.contrib.mp_adamw_update(*half, 0.5, **args)
    np.testing.assert_allclose(half[4].asnumpy(),
                               mx.nd.contrib.adamw_update(*[mx.nd.array(a) for a in (
                                   weight, np.float16(grad).astype('float32'), mean, var)],
                                   0.5, **args).asnumpy(), rtol=1e-6)
    assert new.dtype == np.float16
    names = ['w', 'g', 'm', 'v', 'w32']
    symbol = mx.sym.contrib.mp_adamw_update(*[mx.sym.var(n) for n in names], 0.5, **args)
    aux = symbol.list_auxiliary_states()
    half = [mx.nd.array(weight, dtype='float16'), mx.nd.array(grad, dtype='float16'),
            mx.nd.array(mean), mx.nd.array(var), mx.nd.array(weight)]
    bound = dict(zip(names, half))
    out = symbol.bind(mx.cpu(), {n: a for n, a in bound.items() if n not in aux},
                      aux_states={n: bound[n] for n in aux}).forward()[0]
    np.testing.assert_allclose(out.asnumpy(), new.asnumpy())


def test_multi_mixed_precision_updates_follow_the_float32_forms():
    rng = np.random.default_rng(25)
    weights = [rng.normal(size=s).astype('float32') for s in ((3,), (2, 2))]
    grads = [rng.normal(size=w.shape).astype('float16') for w in weights]
    for name, extra in (('adamw', dict(etas=[1.0, 0.5])), ('lamb', dict(step_count=[1, 2]))):
        plain = getattr(mx.nd.contrib, f'multi_{name}_update')
        mixed = getattr(mx.nd.contrib, f'multi_mp_{name}_update')
        states = lambda: ([mx.nd.zeros(w.shape) for w in weights],
                          [mx.nd.zeros(w.shape) for w in weights])
        scale = [1.0] if name == 'adamw' else []
        want = plain([mx.nd.array(w) for w in weights],
                     [mx.nd.array(g.astype('float32')) for g in grads], *states(), *scale,
                     lrs=[0.1, 0.2], wds=[0.0, 0.01], **extra)
        masters = [mx.nd.array(w) for w in weights]
        got = mixed([mx.nd.array(w, dtype='float16') for w in weights],
                    [mx.nd.array(g, dtype='float16') for g in grads], *states(), masters, *scale,
                    lrs=[0.1, 0.2], wds=[0.0, 0.01], **extra)
        for master, mine, theirs in zip(masters, got, want):
            np.testing.assert_allclose(master.asnumpy(), theirs.asnumpy(), rtol=1e-6)
            assert mine.dtype == np.float16


def test_symbolic_group_adagrad_and_zipfian_draws():
    weight, grad = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[0.1, 0.2], [0.3, -0.4]])
    history = mx.nd.zeros((2, 1), dtype='float64')
    want = mx.nd.contrib.group_adagrad_update(mx.nd.array(weight, dtype='float64'),
                                              mx.nd.array(grad, dtype='float64'),
                                              mx.nd.zeros((2, 1), dtype='float64'), lr=0.1)
    symbol = mx.sym.contrib.group_adagrad_update(mx.sym.var('w'), mx.sym.var('g'),
                                                 mx.sym.var('h'), lr=0.1)
    bound = {'w': mx.nd.array(weight, dtype='float64'), 'g': mx.nd.array(grad, dtype='float64'),
             'h': history}
    aux = symbol.list_auxiliary_states()
    out = symbol.bind(mx.cpu(), {n: a for n, a in bound.items() if n not in aux},
                      aux_states={n: bound[n] for n in aux}).forward()[0]
    np.testing.assert_allclose(out.asnumpy(), want.asnumpy(), rtol=1e-12)
    mx.random.seed(9)
    sampled, true_count, sampled_count = mx.sym.contrib.rand_zipfian(mx.sym.var('t'), 5, 10)
    outputs = mx.sym.Group([sampled, true_count, sampled_count]).bind(
        mx.cpu(), {'t': mx.nd.array([0, 4])}).forward()
    classes = outputs[0].asnumpy()
    assert outputs[0].dtype == np.int64 and ((classes >= 0) & (classes < 10)).all()
    log_range = np.log(11)
    np.testing.assert_allclose(outputs[1].asnumpy(), np.log([2, 6 / 5]) / log_range * 5,
                               rtol=1e-12)
    np.testing.assert_allclose(outputs[2].asnumpy(),
                               np.log((classes + 2) / (classes + 1)) / log_range * 5, rtol=1e-12)


def test_cond_in_both_namespaces():
    x = mx.nd.array([2.0, 3.0])
    assert mx.nd.contrib.cond(mx.nd.array([1]), lambda: x * 2, lambda: x - 1).asnumpy().tolist() \
        == [4.0, 6.0]
    assert mx.nd.contrib.cond(mx.nd.array([0]), lambda: x * 2, lambda: x - 1).asnumpy().tolist() \
        == [1.0, 2.0]
    p, a = mx.sym.var('p'), mx.sym.var('a')
    out = mx.sym.contrib.cond(p, lambda: a * 2, lambda: a - 1)
    for flag, want in ((1, [4.0, 6.0]), (0, [1.0, 2.0])):
        got = out.bind(mx.cpu(), {'p': mx.nd.array([flag]), 'a': x}).forward()[0]
        assert got.asnumpy().tolist() == want


# The functions the tests above call by name, for `python -m ember api-coverage`.
# ----------------------------------------------------------------------------------------------
# Graphs as csr matrices, and SparseEmbedding: values as MXNet 1.9.1 gives them.

def _graph(dtype='float64'):
    return mx.nd.sparse.csr_matrix((np.array([1, 2, 3], dtype=dtype), np.array([0, 2, 1]),
                                    np.array([0, 2, 2, 3])), shape=(3, 3))


def test_getnnz_counts_stored_entries_in_all_per_row_and_per_column():
    graph = _graph()
    total = mx.nd.contrib.getnnz(graph)
    assert total.dtype == np.int64 and total.asnumpy().tolist() == [3]
    assert mx.nd.contrib.getnnz(graph, axis=1).asnumpy().tolist() == [2, 0, 1]
    assert mx.nd.contrib.getnnz(graph, axis=0).asnumpy().tolist() == [1, 1, 1]
    assert mx.nd.contrib.getnnz(graph.tostype('default'), axis=1).asnumpy().tolist() == [2, 0, 1]
    sym = mx.sym.contrib.getnnz(mx.sym.var('g'), axis=1)
    assert sym.infer_shape(g=(3, 3))[1] == [(3,)]
    assert sym.bind(mx.cpu(), {'g': graph}).forward()[0].asnumpy().tolist() == [2, 0, 1]
    with pytest.raises(ShapeError, match='axis=2'):
        mx.nd.contrib.getnnz(graph, axis=2)


def test_edge_id_reads_stored_values_and_minus_one_elsewhere():
    u, v = mx.nd.array([0, 0, 2, 1]), mx.nd.array([2, 1, 1, 1])
    ids = mx.nd.contrib.edge_id(_graph(), u, v)
    assert ids.dtype == np.float64 and ids.asnumpy().tolist() == [2, -1, 3, -1]
    dense = mx.nd.contrib.edge_id(_graph().tostype('default'), u, v)
    assert dense.asnumpy().tolist() == [2, -1, 3, -1]
    sym = mx.sym.contrib.edge_id(mx.sym.var('g'), mx.sym.var('u'), mx.sym.var('v'))
    out = sym.bind(mx.cpu(), {'g': _graph(), 'u': u, 'v': v}).forward()[0]
    assert out.asnumpy().tolist() == [2, -1, 3, -1]
    with pytest.raises(ShapeError, match='one shape'):
        mx.nd.contrib.edge_id(_graph(), u, mx.nd.array([1, 2]))


def test_dgl_adjacency_keeps_the_structure_with_values_one():
    adjacency = mx.nd.contrib.dgl_adjacency(_graph('int64'))
    assert adjacency.stype == 'csr' and adjacency.dtype == np.float32
    assert adjacency.data.asnumpy().tolist() == [1, 1, 1]
    assert adjacency.indices.asnumpy().tolist() == [0, 2, 1]
    assert adjacency.indptr.asnumpy().tolist() == [0, 2, 2, 3]
    sym = mx.sym.contrib.dgl_adjacency(mx.sym.var('g'))
    assert sym.infer_type(g='int64')[1] == [np.float32]


def test_sparse_embedding_gives_a_row_sparse_weight_gradient():
    weight = mx.nd.array(np.arange(12.0).reshape(4, 3))
    weight.attach_grad(stype='row_sparse')
    with mx.autograd.record():
        rows = mx.nd.contrib.SparseEmbedding(mx.nd.array([0, 2, 2]), weight, input_dim=4,
                                             output_dim=3)
    rows.backward()
    assert rows.asnumpy().tolist() == [[0, 1, 2], [6, 7, 8], [6, 7, 8]]
    assert weight.grad.stype == 'row_sparse'
    assert weight.grad.indices.asnumpy().tolist() == [0, 2]
    assert weight.grad.asnumpy()[:, 0].tolist() == [1, 0, 2, 0]
    sym = mx.sym.contrib.SparseEmbedding(mx.sym.var('i'), mx.sym.var('w'), input_dim=4,
                                         output_dim=3)
    assert sym.infer_shape(i=(5,))[0] == [(5,), (4, 3)]


EXERCISED_API = [f'ember.{space}.contrib.backward_{name}' for space in ('ndarray', 'symbol')
                 for name in ('quadratic', 'gradientmultiplier', 'index_copy', 'hawkesll')] + [
    'ember.ndarray.contrib.multi_mp_adamw_update', 'ember.ndarray.contrib.multi_mp_lamb_update']
