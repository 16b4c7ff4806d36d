"""Optimizer update operators against NumPy transcriptions of MXNet 1.x's update formulas."""
import numpy as np
import pytest

import ember.ndarray as nd
import ember.symbol as sym
import ember.executor  # noqa: F401  (gives Symbol its bind)
from ember import config
from ember.device import cpu
from ember.op import optimizer_ops, registry

RNG = np.random.default_rng(0)
SHAPE = (3, 5)


def clip(x, bound):
    return np.clip(x, -bound, bound) if bound >= 0 else x


def scaled(a, grad):
    return clip(a['rescale_grad'] * grad, a['clip_gradient'])


# Each reference takes float64 copies of the inputs and returns (new weight, new states).

def ref_sgd(a, w, g):
    return w - a['lr'] * (scaled(a, g) + a['wd'] * w), ()


def ref_sgd_mom(a, w, g, mom):
    mom = a['momentum'] * mom - a['lr'] * (scaled(a, g) + a['wd'] * w)
    return w + mom, (mom,)


def ref_nag(a, w, g, mom):
    grad = scaled(a, g) + a['wd'] * w
    mom = a['momentum'] * mom - a['lr'] * grad
    return w + a['momentum'] * mom - a['lr'] * grad, (mom,)


def ref_adam(a, w, g, mean, var):
    grad = clip(a['rescale_grad'] * g + a['wd'] * w, a['clip_gradient'])
    mean = a['beta1'] * mean + (1 - a['beta1']) * grad
    var = a['beta2'] * var + (1 - a['beta2']) * grad ** 2
    return w - a['lr'] * mean / (np.sqrt(var) + a['epsilon']), (mean, var)


def ref_adamw(a, w, g, mean, var, rescale):
    grad = clip(rescale[0] * g, a['clip_gradient'])
    mean = a['beta1'] * mean + (1 - a['beta1']) * grad
    var = a['beta2'] * var + (1 - a['beta2']) * grad ** 2
    step = a['lr'] * mean / (np.sqrt(var) + a['epsilon']) + a['wd'] * w
    return w - a['eta'] * step, (mean, var)


def ref_rmsprop(a, w, g, n):
    grad = clip(a['rescale_grad'] * g + a['wd'] * w, a['clip_gradient'])
    n = (1 - a['gamma1']) * grad ** 2 + a['gamma1'] * n
    return clip(w - a['lr'] * grad / np.sqrt(n + a['epsilon']), a['clip_weights']), (n,)


def ref_rmspropalex(a, w, g, n, g_avg, delta):
    grad = clip(a['rescale_grad'] * g + a['wd'] * w, a['clip_gradient'])
    n = (1 - a['gamma1']) * grad ** 2 + a['gamma1'] * n
    g_avg = (1 - a['gamma1']) * grad + a['gamma1'] * g_avg
    delta = a['gamma2'] * delta - a['lr'] * grad / np.sqrt(n - g_avg ** 2 + a['epsilon'])
    return clip(w + delta, a['clip_weights']), (n, g_avg, delta)


def ref_adagrad(a, w, g, history):
    grad = scaled(a, g)
    history = history + grad ** 2
    return w - a['lr'] * (grad / np.sqrt(history + a['epsilon']) + a['wd'] * w), (history,)


def ref_adadelta(a, w, g, acc_g, acc_delta):
    grad = scaled(a, g)
    acc_g = a['rho'] * acc_g + (1 - a['rho']) * grad ** 2
    delta = np.sqrt(acc_delta + a['epsilon']) / np.sqrt(acc_g + a['epsilon']) * grad
    acc_delta = a['rho'] * acc_delta + (1 - a['rho']) * delta ** 2
    return w - delta - a['wd'] * w, (acc_g, acc_delta)


def ref_ftrl(a, w, g, z, n):
    grad = scaled(a, g)
    z = z + grad - (np.sqrt(n + grad ** 2) - np.sqrt(n)) * w / a['lr']
    n = n + grad ** 2
    rate = (a['beta'] + np.sqrt(n)) / a['lr'] + a['wd']
    new_w = np.where(np.abs(z) > a['lamda1'], (np.sign(z) * a['lamda1'] - z) / rate, 0.0)
    return new_w, (z, n)


def ref_ftml(a, w, g, d, v, z):
    t = a['t']
    grad = clip(a['rescale_grad'] * g + a['wd'] * w, a['clip_grad'])
    v = a['beta2'] * v + (1 - a['beta2']) * grad ** 2
    d_t = (1 - a['beta1'] ** t) / a['lr'] * (np.sqrt(v / (1 - a['beta2'] ** t)) + a['epsilon'])
    z = a['beta1'] * z + (1 - a['beta1']) * grad - (d_t - a['beta1'] * d) * w
    return -z / d_t, (d_t, v, z)


def ref_signsgd(a, w, g):
    return w - a['lr'] * (np.sign(g) + a['wd'] * w), ()


def ref_signum(a, w, g, mom):
    mom = a['momentum'] * mom - (1 - a['momentum']) * (scaled(a, g) + a['wd'] * w)
    return w + a['lr'] * (np.sign(mom) - a['wd_lh'] * w), (mom,)


def ref_lamb_phase2(a, w, g, r1, r2):
    norm = r1[0]
    if a['lower_bound'] >= 0:
        norm = max(norm, a['lower_bound'])
    if a['upper_bound'] >= 0:
        norm = min(norm, a['upper_bound'])
    ratio = norm / r2[0] if norm != 0 and r2[0] != 0 else 1.0
    return w - a['lr'] * ratio * g, ()


def positive(shape=SHAPE):
    return RNG.uniform(0.1, 1.0, shape)


def signed(shape=SHAPE):
    return RNG.normal(0.0, 1.0, shape)


def one(value):
    return np.array([value])


COMMON = dict(lr=0.1, wd=0.01, rescale_grad=0.5, clip_gradient=0.3)
CASES = [
    ('sgd_update', ref_sgd, [], dict(COMMON)),
    ('sgd_update', ref_sgd, [], dict(lr=0.05)),
    ('sgd_mom_update', ref_sgd_mom, [signed], dict(COMMON, momentum=0.9)),
    ('sgd_mom_update', ref_sgd_mom, [signed], dict(lr=0.05, momentum=0.5)),
    ('nag_mom_update', ref_nag, [signed], dict(COMMON, momentum=0.9)),
    ('nag_mom_update', ref_nag, [signed], dict(lr=0.2, momentum=0.7, wd=0.1)),
    ('adam_update', ref_adam, [signed, positive], dict(COMMON, beta1=0.8, epsilon=1e-3)),
    ('adam_update', ref_adam, [signed, positive], dict(lr=0.01)),
    ('adamw_update', ref_adamw, [signed, positive, lambda: one(0.7)], dict(
        lr=0.01, eta=0.5, wd=0.1, clip_gradient=0.4)),
    ('rmsprop_update', ref_rmsprop, [positive], dict(COMMON, gamma1=0.9, clip_weights=0.8)),
    ('rmsprop_update', ref_rmsprop, [positive], dict(lr=0.01)),
    ('adagrad_update', ref_adagrad, [positive], dict(COMMON, epsilon=1e-3)),
    ('adadelta_update', ref_adadelta, [positive, positive], dict(
        rho=0.8, wd=0.01, rescale_grad=2.0, clip_gradient=0.5)),
    ('ftrl_update', ref_ftrl, [signed, positive], dict(COMMON, lamda1=0.5, beta=2.0)),
    ('ftml_update', ref_ftml, [positive, positive, signed], dict(
        lr=0.1, t=3, wd=0.01, rescale_grad=0.5, clip_grad=0.3)),
    ('signsgd_update', ref_signsgd, [], dict(lr=0.1, wd=0.2)),
    ('signum_update', ref_signum, [signed], dict(COMMON, momentum=0.8, wd_lh=0.05)),
    ('lamb_update_phase2', ref_lamb_phase2, [lambda: one(2.0), lambda: one(4.0)], dict(lr=0.1)),
    ('lamb_update_phase2', ref_lamb_phase2, [lambda: one(2.0), lambda: one(4.0)], dict(
        lr=0.1, lower_bound=3.0)),
    ('lamb_update_phase2', ref_lamb_phase2, [lambda: one(2.0), lambda: one(4.0)], dict(
        lr=0.1, upper_bound=1.0)),
    ('lamb_update_phase2', ref_lamb_phase2, [lambda: one(0.0), lambda: one(4.0)], dict(lr=0.1)),
]


def rmspropalex_states():
    g_avg = 0.1 * signed()
    return [g_avg ** 2 + positive(), g_avg, 0.1 * signed()]


CASES.append(('rmspropalex_update', ref_rmspropalex, rmspropalex_states, dict(
    COMMON, gamma1=0.9, gamma2=0.8, clip_weights=2.0)))


def run(name, arrays, attrs, out=None):
    """Run the kernel as the imperative layer would; out=None writes in place into the weight."""
    op = registry.get(name)
    parsed = op.parse_attrs(attrs)
    outs = [arrays[0] if out is None else out]
    op.kernel(parsed, arrays, outs, registry.KernelContext(cpu()))
    return parsed, outs[0]


def make_inputs(makers):
    states = makers() if callable(makers) else [make() for make in makers]
    return [signed(), 2 * signed()] + states


def run_nd(name, arrays, attrs):
    """Through mx.nd as an optimizer calls it: NDArrays, out=weight, states updated in place."""
    handles = [nd.array(a, dtype=a.dtype) for a in arrays]
    getattr(nd, name)(*handles, out=handles[0], **attrs)
    for array, handle in zip(arrays, handles):
        array[...] = handle.asnumpy()
    return registry.get(name).parse_attrs(attrs), arrays[0]


def run_sym(name, arrays, attrs):
    """Through mx.sym: a graph of the one operator, bound and run; the states it updates are
    the bound arrays."""
    names = [f'in{i}' for i in range(len(arrays))]
    out = getattr(sym, name)(*[sym.var(n) for n in names], **attrs)
    handles = {n: nd.array(a, dtype=a.dtype) for n, a in zip(names, arrays)}
    aux = out.list_auxiliary_states()
    executor = out.bind(cpu(), {n: h for n, h in handles.items() if n not in aux},
                        aux_states={n: handles[n] for n in aux})
    result = executor.forward()[0].asnumpy()
    for array, n in zip(arrays[1:], names[1:]):
        array[...] = handles[n].asnumpy()
    return registry.get(name).parse_attrs(attrs), result


@pytest.mark.parametrize('mode', ['in_place', 'new_output', 'ndarray', 'symbol'])
@pytest.mark.parametrize('name, reference, makers, attrs', CASES)
def test_update_matches_reference(name, reference, makers, attrs, mode):
    inputs = make_inputs(makers)
    arrays = [x.astype(np.float32) for x in inputs]
    before = [a.astype(np.float64) for a in arrays]
    if mode == 'ndarray':
        parsed, result = run_nd(name, arrays, attrs)
    elif mode == 'symbol':
        parsed, result = run_sym(name, arrays, attrs)
    else:
        out = None if mode == 'in_place' else np.zeros_like(arrays[0])
        parsed, result = run(name, arrays, attrs, out)
    expected, expected_states = reference(parsed, *before)
    np.testing.assert_allclose(result, expected, rtol=2e-5, atol=1e-6)
    op = registry.get(name)
    for index, state in zip(op.mutate, expected_states):
        np.testing.assert_allclose(arrays[index], state, rtol=2e-5, atol=1e-6)
    if mode == 'new_output':
        np.testing.assert_array_equal(arrays[0], inputs[0].astype(np.float32))


def test_lamb_phase1_matches_reference():
    w, g, mean, var = signed(), signed(), signed(), positive()
    arrays = [x.astype(np.float32) for x in (w, g, mean, var)]
    out = np.zeros_like(arrays[0])
    for bias_correction in (True, False):
        mean, var = arrays[2].astype(np.float64), arrays[3].astype(np.float64)
        attrs = dict(t=4, wd=0.01, rescale_grad=0.5, clip_gradient=0.3,
                     bias_correction=bias_correction, beta1=0.8)
        parsed, result = run('lamb_update_phase1', arrays, attrs, out)
        grad = clip(0.5 * arrays[1].astype(np.float64), 0.3)
        mean = 0.8 * mean + 0.2 * grad
        var = 0.999 * var + 0.001 * grad ** 2
        scale1, scale2 = (1 - 0.8 ** 4, 1 - 0.999 ** 4) if bias_correction else (1, 1)
        expected = (mean / scale1) / (np.sqrt(var / scale2) + 1e-6) + 0.01 * arrays[0]
        np.testing.assert_allclose(result, expected, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(arrays[2], mean, rtol=2e-5, atol=1e-7)
        np.testing.assert_allclose(arrays[3], var, rtol=2e-5, atol=1e-7)


MP_CASES = [
    ('mp_sgd_update', 'sgd_update', [], dict(COMMON)),
    ('mp_sgd_mom_update', 'sgd_mom_update', [signed], dict(COMMON, momentum=0.9)),
    ('mp_nag_mom_update', 'nag_mom_update', [signed], dict(COMMON, momentum=0.9)),
]


FORMS = {'kernel': run, 'ndarray': run_nd, 'symbol': run_sym}


@pytest.mark.parametrize('form', sorted(FORMS))
@pytest.mark.parametrize('mp_name, name, makers, attrs', MP_CASES)
def test_mixed_precision_updates_the_float32_master_copy(mp_name, name, makers, attrs, form):
    weight32 = signed().astype(np.float32)
    grad = signed().astype(np.float16)
    states = [make().astype(np.float32) for make in makers]
    weight = weight32.astype(np.float16)
    # The float32 form on copies of the master copy and states, with the gradient widened.
    expected_states = [s.copy() for s in states]
    _, expected32 = run(name, [weight32.copy(), grad.astype(np.float32)] + expected_states, attrs)
    arrays = [weight, grad] + states + [weight32]
    _, weight = FORMS[form](mp_name, arrays, attrs)
    weight32 = arrays[-1]
    np.testing.assert_array_equal(weight32, expected32)
    assert weight.dtype == np.float16
    np.testing.assert_array_equal(weight, expected32.astype(np.float16))
    for state, expected in zip(states, expected_states):
        np.testing.assert_array_equal(state, expected)


def test_mp_adamw_updates_the_float32_master_copy():
    weight32, grad = signed().astype(np.float32), signed().astype(np.float16)
    mean, var = signed().astype(np.float32), positive().astype(np.float32)
    scale = one(0.5).astype(np.float32)
    attrs = dict(lr=0.01, eta=0.5, wd=0.1)
    expected_mean, expected_var = mean.copy(), var.copy()
    _, expected32 = run('adamw_update', [weight32.copy(), grad.astype(np.float32),
                                         expected_mean, expected_var, scale], attrs)
    weight = weight32.astype(np.float16)
    run('mp_adamw_update', [weight, grad, mean, var, weight32, scale], attrs)
    np.testing.assert_array_equal(weight32, expected32)
    np.testing.assert_array_equal(weight, expected32.astype(np.float16))
    np.testing.assert_array_equal(mean, expected_mean)


@pytest.mark.parametrize('bad_scale', [np.nan, np.inf, 0.0])
def test_adamw_skips_the_update_when_the_loss_scale_overflowed(bad_scale):
    weight, grad, mean, var = (x.astype(np.float32) for x in (signed(), signed(), signed(),
                                                              positive()))
    before = [weight.copy(), mean.copy(), var.copy()]
    out = np.zeros_like(weight)
    _, result = run('adamw_update', [weight, grad, mean, var, one(bad_scale)],
                    dict(lr=0.1, eta=1.0), out)
    np.testing.assert_array_equal(result, before[0])
    np.testing.assert_array_equal(mean, before[1])
    np.testing.assert_array_equal(var, before[2])


MULTI_CASES = [
    ('multi_sgd_update', 'sgd_update', [], np.float32, {}),
    ('multi_sgd_mom_update', 'sgd_mom_update', ['mom'], np.float32, dict(momentum=0.9)),
    ('multi_mp_sgd_update', 'mp_sgd_update', ['weight32'], np.float16, {}),
    ('multi_mp_sgd_mom_update', 'mp_sgd_mom_update', ['mom', 'weight32'], np.float16,
     dict(momentum=0.9)),
]


def multi_inputs(state_names, dtype, shapes):
    """Per weight: weight, grad, then float32 states (the master copy matches the weight)."""
    groups = []
    for shape in shapes:
        weight32 = signed(shape).astype(np.float32)
        states = {'mom': signed(shape).astype(np.float32), 'weight32': weight32}
        groups.append([weight32.astype(dtype), signed(shape).astype(dtype)]
                      + [states[n].copy() for n in state_names])
    return groups


@pytest.mark.parametrize('parallel_size, block', [(200000, 1 << 17), (1, 1 << 17), (200000, 3),
                                                  (1, 2)],
                         ids=['one-thread', 'threads-split', 'blocks', 'threads-blocks'])
@pytest.mark.parametrize('multi, single, state_names, dtype, extra', MULTI_CASES)
@pytest.mark.parametrize('team', [True, False], ids=['openmp team', 'kernel pool'])
def test_multi_update_equals_single_updates(multi, single, state_names, dtype, extra,
                                            parallel_size, block, team, monkeypatch):
    # split: the kernel threads share the 20 elements, the cut falling inside a weight (or, on
    # the OpenMP team, each weight's elements); blocks: each range is updated a few elements at
    # a time, the last block of a weight shorter
    monkeypatch.setattr(optimizer_ops, '_UPDATE_BLOCK', block)
    monkeypatch.setattr(optimizer_ops, 'use_team', team)
    with config.override(MXNET_CPU_PARALLEL_SIZE=parallel_size):
        _check_multi_update(multi, single, state_names, dtype, extra)


def _check_multi_update(multi, single, state_names, dtype, extra):
    shapes, lrs, wds = [(4,), (2, 3), (5, 1, 2)], (0.1, 0.2, 0.05), (0.0, 0.01, 0.1)
    groups = multi_inputs(state_names, dtype, shapes)
    expected = [[a.copy() for a in group] for group in groups]
    common = dict(extra, rescale_grad=0.5, clip_gradient=0.4)
    for group, lr, wd in zip(expected, lrs, wds):
        run(single, group, dict(common, lr=lr, wd=wd))
    op = registry.get(multi)
    attrs = op.parse_attrs(dict(common, lrs=lrs, wds=wds, num_weights=3))
    flat = [a for group in groups for a in group]
    outs = [np.zeros_like(group[0]) for group in groups]
    op.kernel(attrs, flat, outs, registry.KernelContext(cpu()))
    for out, group, want in zip(outs, groups, expected):
        np.testing.assert_array_equal(out, want[0])
        for state, want_state in zip(group[2:], want[2:]):
            np.testing.assert_array_equal(state, want_state)
    assert list(op.mutate(attrs)) == [i for i in range(len(flat)) if i % len(groups[0]) >= 2]
    assert list(op.inplace(attrs)) == [(i * len(groups[0]), i) for i in range(3)]


def test_multi_inference_names_shapes_and_checks_counts():
    op = registry.get('multi_sgd_mom_update')
    attrs = op.parse_attrs(dict(lrs='(0.1, 0.2)', wds=[0, 0], num_weights=2))
    assert attrs['lrs'] == (0.1, 0.2)
    assert op.input_names(attrs) == ['weight_0', 'grad_0', 'mom_0', 'weight_1', 'grad_1', 'mom_1']
    ins, outs = op.infer_shape(attrs, [(2,), None, None, None, (3, 4), None])
    assert ins == [(2,)] * 3 + [(3, 4)] * 3 and outs == [(2,), (3, 4)]
    with pytest.raises(registry.ShapeError, match='6 in all'):
        op.infer_shape(attrs, [(2,)] * 5)
    bad = op.parse_attrs(dict(lrs=(0.1,), wds=(0, 0), num_weights=2))
    with pytest.raises(registry.ShapeError, match='lrs has 1 values'):
        op.infer_shape(bad, [(2,)] * 6)
    with pytest.raises(ValueError, match='lrs'):
        op.parse_attrs(dict(lrs='fast', wds=(0,)))


def test_mixed_precision_type_inference():
    op = registry.get('mp_sgd_mom_update')
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    ins, outs = op.infer_type({}, [f16, None, None, None])
    assert ins == [f16, f16, f32, f32] and outs == [f16]
    with pytest.raises(registry.ShapeError, match='must be float32, got float16'):
        op.infer_type({}, [f16, f16, f32, f16])
    multi = registry.get('multi_mp_sgd_update')
    attrs = multi.parse_attrs(dict(lrs=(1, 1), wds=(0, 0), num_weights=2))
    ins, outs = multi.infer_type(attrs, [f16, None, None, None, None, None])
    assert ins[:3] == [f16, f16, f32] and outs[0] == f16 and ins[5] == f32


def test_scalar_inputs_shape_inference():
    op = registry.get('adamw_update')
    ins, outs = op.infer_shape({}, [(2, 3), None, None, None, None])
    assert ins == [(2, 3)] * 4 + [(1,)] and outs == [(2, 3)]
    with pytest.raises(registry.ShapeError, match='one value'):
        op.infer_shape({}, [(2, 3), None, None, None, (2,)])


def test_declarations_follow_mxnet():
    defaults = {
        'sgd_mom_update': dict(momentum=0.0, wd=0.0, rescale_grad=1.0, clip_gradient=-1.0,
                               lazy_update=True),
        'adam_update': dict(beta1=0.9, beta2=0.999, epsilon=1e-8),
        'rmsprop_update': dict(gamma1=0.95, epsilon=1e-8, clip_weights=-1.0),
        'rmspropalex_update': dict(gamma1=0.95, gamma2=0.9),
        'adagrad_update': dict(epsilon=1e-7),
        'ftrl_update': dict(lamda1=0.01, beta=1.0),
        'signum_update': dict(wd_lh=0.0),
    }
    for name, expected in defaults.items():
        attrs = registry.get(name).parse_attrs({'lr': 0.1})
        assert {k: attrs[k] for k in expected} == expected, name
    assert registry.get('_sparse_adagrad_update') is registry.get('adagrad_update')
    assert registry.get('_adamw_update') is registry.get('adamw_update')
    with pytest.raises(TypeError, match="missing required argument 'lr'"):
        registry.get('sgd_update').parse_attrs({})
    for op in optimizer_ops.UPDATE_OPS:
        assert op.gradient is None, op.name
        single = not callable(op.inplace)
        if single and op.name != 'lamb_update_phase1':
            assert op.inplace == ((0, 0),), op.name


PRELOADED = {'multi_sgd_update': 'preloaded_multi_sgd_update',
             'multi_sgd_mom_update': 'preloaded_multi_sgd_mom_update',
             'multi_mp_sgd_update': 'preloaded_multi_mp_sgd_update',
             'multi_mp_sgd_mom_update': 'preloaded_multi_mp_sgd_mom_update'}


def _run_multi_form(form, name, flat, attrs, extra_inputs=()):
    """Run a multi-weight update through mx.nd (out= the weights) or mx.sym (bound and run);
    writes every updated array back into `flat` and returns the new weights."""
    arrays = list(flat) + list(extra_inputs)
    group = len(flat) // attrs['num_weights']
    if form == 'ndarray':
        handles = [nd.array(a, dtype=a.dtype) for a in arrays]
        weights = handles[:len(flat):group]
        getattr(nd, name)(*handles, out=weights, **attrs)
        for array, handle in zip(flat, handles):
            array[...] = handle.asnumpy()
        return [w.asnumpy() for w in weights]
    names = [f'in{i}' for i in range(len(arrays))]
    out = getattr(sym, name)(*[sym.var(n) for n in names], **attrs)
    handles = {n: nd.array(a, dtype=a.dtype) for n, a in zip(names, arrays)}
    aux = out.list_auxiliary_states()
    executor = out.bind(cpu(), {n: h for n, h in handles.items() if n not in aux},
                        aux_states={n: handles[n] for n in aux})
    results = [o.asnumpy() for o in executor.forward()]
    for index, array in enumerate(flat):
        if index % group >= 2:
            array[...] = handles[names[index]].asnumpy()
    return results


@pytest.mark.parametrize('preloaded', [False, True], ids=['', 'preloaded'])
@pytest.mark.parametrize('form', ['ndarray', 'symbol'])
@pytest.mark.parametrize('multi, single, state_names, dtype, extra', MULTI_CASES)
def test_multi_update_through_ndarray_and_symbol(multi, single, state_names, dtype, extra, form,
                                                 preloaded):
    shapes, lrs, wds = [(4,), (2, 3)], (0.1, 0.2), (0.0, 0.01)
    groups = multi_inputs(state_names, dtype, shapes)
    expected = [[a.copy() for a in group] for group in groups]
    for group, lr, wd in zip(expected, lrs, wds):
        run(single, group, dict(extra, lr=lr, wd=wd))
    flat = [a for group in groups for a in group]
    attrs = dict(extra, num_weights=2)
    if preloaded:
        tables = [np.array(lrs, dtype=np.float32), np.array(wds, dtype=np.float32)]
        weights = _run_multi_form(form, PRELOADED[multi], flat, attrs, tables)
    else:
        weights = _run_multi_form(form, multi, flat, dict(attrs, lrs=lrs, wds=wds))
    for weight, group in zip(weights, expected):
        np.testing.assert_allclose(weight, group[0], rtol=1e-6 if dtype == np.float32 else 1e-3)
    for group, want in zip(groups, expected):
        for state, want_state in zip(group[2:], want[2:]):
            np.testing.assert_allclose(state, want_state, rtol=1e-6)


def _awkward(shape, seed):
    """float32 values with zeros of both signs, NaN, infinities and very small and large
    magnitudes among ordinary ones."""
    rng = np.random.default_rng(seed)
    values = (rng.standard_normal(shape) * 10.0 ** rng.integers(-8, 8, shape)).astype(np.float32)
    flat = values.reshape(-1)
    flat[:6] = [0.0, -0.0, np.nan, np.inf, -np.inf, 3e38]
    return values


@pytest.mark.skipif(optimizer_ops._kernels is None, reason='ember._kernels is not built')
@pytest.mark.parametrize('attrs', [
    dict(lr=0.1, momentum=0.9, wd=1e-4),
    dict(lr=0.05, momentum=0.0, wd=0.0, rescale_grad=1 / 16),
    dict(lr=0.3, momentum=0.5, wd=0.01, rescale_grad=2.0, clip_gradient=0.25),
    dict(lr=1e-3, momentum=0.99, wd=0.1, clip_gradient=0.0),
    dict(lr=0.1, momentum=0.9, wd=1e-4, clip_gradient=1e-50),    # clips to +-0 in float32
])
@pytest.mark.parametrize('in_place', [True, False])
@pytest.mark.filterwarnings('ignore:overflow encountered', 'ignore:invalid value encountered')
def test_compiled_sgd_momentum_rounds_as_the_numpy_step(attrs, in_place, monkeypatch):
    """The one-pass C form of sgd_mom_update and multi_sgd_mom_update gives the NumPy step's
    bits, weight, momentum and output, however the elements are cut."""
    def update(name, compiled, params):
        if not compiled:
            monkeypatch.setattr(optimizer_ops, '_COMPILED', {})
        shapes = [(7, 9), (1000,), (4, 2)] if name.startswith('multi') else [(37, 29)]
        groups = [[_awkward(shape, seed + k) for k in range(3)]
                  for seed, shape in zip((1, 11, 21), shapes)]
        flat = [a for group in groups for a in group]
        outs = [g[0] if in_place else np.zeros_like(g[0]) for g in groups]
        op = registry.get(name)
        op.kernel(op.parse_attrs(params), flat, outs, registry.KernelContext(cpu()))
        monkeypatch.undo()
        return [a.tobytes() for a in flat + outs]

    multi = dict({k: v for k, v in attrs.items() if k not in ('lr', 'wd')},
                 lrs=(attrs['lr'], attrs['lr'] / 2, attrs['lr'] * 3),
                 wds=(attrs['wd'], 0.0, attrs['wd'] * 2), num_weights=3)
    assert update('sgd_mom_update', True, attrs) == update('sgd_mom_update', False, attrs)
    with config.override(MXNET_CPU_PARALLEL_SIZE=50):        # ranges cut inside a weight
        assert update('multi_sgd_mom_update', True, multi) == \
            update('multi_sgd_mom_update', False, multi)


@pytest.mark.skipif(optimizer_ops._kernels is None, reason='ember._kernels is not built')
def test_compiled_sgd_momentum_checks_its_arrays():
    w = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match='mom: expected 4 float32 values, got 3'):
        optimizer_ops._kernels.sgd_mom_update(w, w, np.zeros(3, np.float32), w, 0, 4,
                                              1.0, -1.0, 0.1, 0.0, 0.9)
    with pytest.raises(TypeError, match="grad: expected float32 values, got buffer format 'd'"):
        optimizer_ops._kernels.sgd_mom_update(w, np.zeros(4), w, w, 0, 4, 1.0, -1.0, 0.1, 0.0,
                                              0.9)
    with pytest.raises(ValueError, match=r'element range \[0, 5\): expected 0 <= lo <= hi <= 4'):
        optimizer_ops._kernels.sgd_mom_update(w, w, w.copy(), w, 0, 5, 1.0, -1.0, 0.1, 0.0, 0.9)
    with pytest.raises(ValueError, match='threads: expected 1 to 1024, got 0'):
        optimizer_ops._kernels.sgd_mom_update(w, w, w.copy(), w, 0, 4, 1.0, -1.0, 0.1, 0.0, 0.9,
                                              threads=0)


@pytest.mark.skipif(optimizer_ops._kernels is None or not optimizer_ops._kernels.openmp,
                    reason='ember._kernels is not built with OpenMP')
def test_multi_update_splits_the_large_weights_on_the_team(monkeypatch):
    real, asked = optimizer_ops._kernels, []

    class Recording:
        def __getattr__(self, name):
            function = getattr(real, name)
            if name != 'sgd_mom_update':
                return function

            def call(*args, **team):
                asked.append((args[0].size, team.get('threads', 1)))
                return function(*args, **team)
            return call
    monkeypatch.setattr(optimizer_ops, '_kernels', Recording())
    op = registry.get('multi_sgd_mom_update')
    attrs = op.parse_attrs(dict(lrs=(0.1, 0.1), wds=(0.0, 0.0), momentum=0.9, num_weights=2))
    sizes = (6, 100)
    flat = [np.ones(n, np.float32) for n in sizes for _ in range(3)]
    with config.override(MXNET_CPU_PARALLEL_SIZE=50, OMP_NUM_THREADS=2):
        op.kernel(attrs, flat, [np.zeros(n, np.float32) for n in sizes],
                  registry.KernelContext(cpu()))
    # one call per weight, the one past MXNET_CPU_PARALLEL_SIZE split over two team threads
    assert asked == [(6, 1), (100, 2)]


@pytest.mark.skipif(optimizer_ops._kernels is None, reason='ember._kernels is not built')
@pytest.mark.parametrize('threads', [2, 3])
def test_compiled_sgd_momentum_on_a_team_gives_one_call_results(threads):
    rng = np.random.default_rng(5)
    w, g, mom = (rng.standard_normal(1003).astype(np.float32) for _ in range(3))
    results = []
    for team in (1, threads):
        out, state = np.full_like(w, np.nan), mom.copy()
        optimizer_ops._kernels.sgd_mom_update(w, g, state, out, 3, 1001, 0.5, 0.4, 0.1, 0.001,
                                              0.9, threads=team)
        results.append((out.tobytes(), state.tobytes()))
    assert results[0] == results[1]
    assert np.isnan(np.frombuffer(results[1][0], np.float32)[[0, 1, 2, 1001, 1002]]).all()


LAMB_FORMS = [
    ('lamb_update_phase1', lambda: [signed(), signed(), signed(), positive()],
     dict(t=3, wd=0.01, rescale_grad=0.5, beta1=0.8)),
    ('mp_lamb_update_phase1', lambda: [signed().astype(np.float16), signed().astype(np.float16),
                                       signed(), positive(), signed()],
     dict(t=2, wd=0.1, bias_correction=False)),
    ('mp_lamb_update_phase2', lambda: [signed().astype(np.float16), signed(), one(2.0), one(1.5),
                                       signed()], dict(lr=0.1, lower_bound=0.5)),
]


@pytest.mark.parametrize('name, make, attrs', LAMB_FORMS, ids=[n for n, *_ in LAMB_FORMS])
def test_lamb_phases_agree_in_every_form(name, make, attrs):
    inputs = [x.astype(np.float32) if x.dtype == np.float64 else x for x in make()]
    results = {}
    for form in ('kernel', 'ndarray', 'symbol'):
        arrays = [x.copy() for x in inputs]
        out = np.zeros_like(arrays[0], dtype=np.float32 if name.endswith('phase1') else
                            arrays[0].dtype)
        if form == 'kernel':
            _, result = run(name, arrays, attrs, out)
        elif form == 'ndarray':
            handles = [nd.array(a, dtype=a.dtype) for a in arrays]
            result = getattr(nd, name)(*handles, **attrs).asnumpy()
            arrays = [h.asnumpy() for h in handles]
        else:
            _, result = run_sym(name, arrays, attrs)
        results[form] = [result] + arrays[2:]
    for form in ('ndarray', 'symbol'):
        for got, want in zip(results[form], results['kernel']):
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f'{name} {form}')


# The mx.nd and mx.sym functions these tests run by name, for `python -m ember api-coverage`.
EXERCISED_API = sorted({f'ember.{space}.{name}' for space in ('ndarray', 'symbol')
                        for name in [c[0] for c in CASES] + [c[0] for c in MP_CASES]
                        + [c[0] for c in MULTI_CASES] + list(PRELOADED.values())
                        + [c[0] for c in LAMB_FORMS]})
