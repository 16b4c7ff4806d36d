"""mx.optimizer against NumPy transcriptions of MXNet 1.x's update rules; Updater, aggregation,
multi-precision and saved states."""
import math
import pickle
import warnings

import numpy as np
import pytest

import ember as mx
from ember import config, engine, lr_scheduler
from ember.base import EmberError
from ember.ndarray import io as nd_io
from ember.optimizer import Optimizer, get_updater

RNG = np.random.default_rng(7)
SHAPE = (3, 4)
STEPS = 3


def clip(x, bound):
    return np.clip(x, -bound, bound) if bound else x


def rescaled(o, g):
    return clip(o['rescale_grad'] * g, o['clip_gradient'])


def decayed(o, g, w):
    return clip(o['rescale_grad'] * g + o['wd'] * w, o['clip_gradient'])


# Each reference takes the optimizer's kwargs `o`, the step number t (from 1), the weight, the
# gradient and its states (float64 NumPy arrays, updated in place) and returns the new weight.

def ref_sgd(o, t, w, g, mom=None):
    step = o['lr'] * (rescaled(o, g) + o['wd'] * w)
    if mom is None:
        return w - step
    mom[...] = o['momentum'] * mom - step
    return w + mom


def ref_nag(o, t, w, g, mom):
    step = o['lr'] * (rescaled(o, g) + o['wd'] * w)
    mom[...] = o['momentum'] * mom - step
    return w + o['momentum'] * mom - step


def ref_signum(o, t, w, g, mom):
    mom[...] = o['momentum'] * mom - (1 - o['momentum']) * (o['wd'] * w + rescaled(o, g))
    return (1 - o['lr'] * o['wd_lh']) * w + o['lr'] * np.sign(mom)


def ref_signsgd(o, t, w, g):
    return (1 - o['lr'] * o['wd']) * w - o['lr'] * np.sign(g)


def ref_adam(o, t, w, g, mean, var):
    g = decayed(o, g, w)
    mean[...] = o['beta1'] * mean + (1 - o['beta1']) * g
    var[...] = o['beta2'] * var + (1 - o['beta2']) * g * g
    lr = o['lr'] * math.sqrt(1 - o['beta2'] ** t) / (1 - o['beta1'] ** t)
    return w - lr * mean / (np.sqrt(var) + o['epsilon'])


def ref_adamw(o, t, w, g, mean, var):
    g = rescaled(o, g)
    mean[...] = o['beta1'] * mean + (1 - o['beta1']) * g
    var[...] = o['beta2'] * var + (1 - o['beta2']) * g * g
    eta = o['lr'] * math.sqrt(1 - o['beta2'] ** t) / (1 - o['beta1'] ** t)
    return w - eta * (mean / (np.sqrt(var) + o['epsilon']) + o['wd'] * w)


def ref_rmsprop(o, t, w, g, n):
    g = decayed(o, g, w)
    n[...] = (1 - o['gamma1']) * g * g + o['gamma1'] * n
    return clip(w - o['lr'] * g / np.sqrt(n + o['epsilon']), o['clip_weights'])


def ref_rmsprop_centered(o, t, w, g, n, avg, delta):
    g = decayed(o, g, w)
    n[...] = (1 - o['gamma1']) * g * g + o['gamma1'] * n
    avg[...] = (1 - o['gamma1']) * g + o['gamma1'] * avg
    delta[...] = o['gamma2'] * delta - o['lr'] * g / np.sqrt(n - avg * avg + o['epsilon'])
    return clip(w + delta, o['clip_weights'])


def ref_adagrad(o, t, w, g, history):
    g = rescaled(o, g)
    history += g * g
    return w - o['lr'] * (g / np.sqrt(history + o['eps']) + o['wd'] * w)


def ref_adadelta(o, t, w, g, acc_g, acc_delta):
    g = rescaled(o, g)
    acc_g[...] = o['rho'] * acc_g + (1 - o['rho']) * g * g
    delta = np.sqrt(acc_delta + o['epsilon']) / np.sqrt(acc_g + o['epsilon']) * g
    acc_delta[...] = o['rho'] * acc_delta + (1 - o['rho']) * delta * delta
    return w - (delta + o['wd'] * w)


def ref_ftrl(o, t, w, g, z, n):
    g = rescaled(o, g)
    z += g - (np.sqrt(n + g * g) - np.sqrt(n)) * w / o['lr']
    n += g * g
    return ((np.sign(z) * o['lamda1'] - z) / ((o['beta'] + np.sqrt(n)) / o['lr'] + o['wd'])
            * (np.abs(z) > o['lamda1']))


def ref_ftml(o, t, w, g, d, v, z):
    g = decayed(o, g, w)
    v[...] = o['beta2'] * v + (1 - o['beta2']) * g * g
    d_t = (1 - o['beta1'] ** t) / o['lr'] * (np.sqrt(v / (1 - o['beta2'] ** t)) + o['epsilon'])
    z[...] = o['beta1'] * z + (1 - o['beta1']) * g - (d_t - o['beta1'] * d) * w
    d[...] = d_t
    return -z / d_t


def ref_lamb(o, t, w, g, mean, var):
    g = rescaled(o, g)
    mean[...] = o['beta1'] * mean + (1 - o['beta1']) * g
    var[...] = o['beta2'] * var + (1 - o['beta2']) * g * g
    mean_hat = mean / (1 - o['beta1'] ** t)
    var_hat = var / (1 - o['beta2'] ** t)
    step = mean_hat / (np.sqrt(var_hat) + o['epsilon']) + o['wd'] * w
    r1 = min(max(np.linalg.norm(w), o['lower_bound']), o['upper_bound'])
    r2 = np.linalg.norm(step)
    return w - o['lr'] * (r1 / r2) * step


def ref_adamax(o, t, w, g, m, u):
    g = decayed(o, g, w)
    m[...] = o['beta1'] * m + (1 - o['beta1']) * g
    u[...] = np.maximum(o['beta2'] * u, np.abs(g))
    return w - o['lr'] / (1 - o['beta1'] ** t) * m / u


def nadam_reference():
    schedule = [1.0]        # the product of momenta, shared by all weights as in MXNet

    def ref_nadam(o, t, w, g, m, v):
        g = decayed(o, g, w)
        mu_t = o['beta1'] * (1 - 0.5 * 0.96 ** (t * o['schedule_decay']))
        mu_next = o['beta1'] * (1 - 0.5 * 0.96 ** ((t + 1) * o['schedule_decay']))
        schedule[0] *= mu_t
        m[...] = o['beta1'] * m + (1 - o['beta1']) * g
        v[...] = o['beta2'] * v + (1 - o['beta2']) * g * g
        m_bar = (1 - mu_t) * g / (1 - schedule[0]) + mu_next * m / (1 - schedule[0] * mu_next)
        return w - o['lr'] * m_bar / (np.sqrt(v / (1 - o['beta2'] ** t)) + o['epsilon'])
    return ref_nadam


COMMON = {'rescale_grad': 0.5, 'wd': 0.01, 'clip_gradient': 0.6}
# (name, optimizer kwargs, reference defaults not passed to the optimizer, reference, states)
CASES = [
    ('sgd', {'learning_rate': 0.1}, {}, ref_sgd, 0),
    ('sgd', {'learning_rate': 0.1, 'momentum': 0.9}, {}, ref_sgd, 1),
    ('nag', {'learning_rate': 0.1, 'momentum': 0.9}, {}, ref_nag, 1),
    ('signum', {'learning_rate': 0.01, 'momentum': 0.8, 'wd_lh': 0.05}, {}, ref_signum, 1),
    ('signum', {'learning_rate': 0.01, 'momentum': 0.0}, {}, ref_signsgd, 0),
    ('adam', {'learning_rate': 0.01, 'beta1': 0.8, 'beta2': 0.9, 'epsilon': 1e-6}, {},
     ref_adam, 2),
    ('adamw', {'learning_rate': 0.01, 'beta1': 0.8, 'beta2': 0.9, 'epsilon': 1e-6}, {},
     ref_adamw, 2),
    ('rmsprop', {'learning_rate': 0.01, 'gamma1': 0.8, 'epsilon': 1e-6, 'clip_weights': 1.2},
     {}, ref_rmsprop, 1),
    ('rmsprop', {'learning_rate': 0.01, 'gamma1': 0.8, 'gamma2': 0.7, 'epsilon': 1e-6,
                 'centered': True, 'clip_weights': 1.2}, {}, ref_rmsprop_centered, 3),
    ('adagrad', {'learning_rate': 0.1, 'eps': 1e-6}, {}, ref_adagrad, 1),
    ('adadelta', {'rho': 0.8, 'epsilon': 1e-4}, {}, ref_adadelta, 2),
    ('ftrl', {'learning_rate': 0.1, 'lamda1': 0.02, 'beta': 0.5}, {}, ref_ftrl, 2),
    ('ftml', {'learning_rate': 0.05, 'beta1': 0.6, 'beta2': 0.9, 'epsilon': 1e-6}, {},
     ref_ftml, 3),
    ('lamb', {'learning_rate': 0.01, 'beta1': 0.8, 'beta2': 0.9, 'epsilon': 1e-6,
              'lower_bound': 0.5, 'upper_bound': 1.5}, {}, ref_lamb, 2),
    ('adamax', {'learning_rate': 0.01, 'beta1': 0.8, 'beta2': 0.9}, {}, ref_adamax, 2),
    ('nadam', {'learning_rate': 0.01, 'beta1': 0.8, 'beta2': 0.9, 'epsilon': 1e-6},
     {'schedule_decay': 0.004}, None, 2),
]


def reference_options(kwargs, extra):
    o = dict(COMMON, **extra, **kwargs)
    o['lr'] = o.pop('learning_rate', None)
    return o


def case_id(case):
    name, kwargs = case[0], case[1]
    flags = [k for k in ('momentum', 'centered') if kwargs.get(k)]
    return '-'.join([name] + flags)


@pytest.mark.parametrize('case', CASES, ids=case_id)
def test_update_rule_matches_numpy(case):
    name, kwargs, extra, reference, num_states = case
    reference = reference or nadam_reference()
    opt = mx.optimizer.create(name, **COMMON, **kwargs)
    o = reference_options(kwargs, extra)
    weight = RNG.uniform(-1, 1, SHAPE)
    expected, states = weight.copy(), [np.zeros(SHAPE) for _ in range(num_states)]
    w = mx.nd.array(weight)
    state = opt.create_state(0, w)
    for t in range(1, STEPS + 1):
        grad = RNG.uniform(-3, 3, SHAPE)
        opt.update(0, w, mx.nd.array(grad), state)
        expected = reference(o, t, expected, grad, *states)
        np.testing.assert_allclose(w.asnumpy(), expected, rtol=2e-4, atol=1e-5,
                                   err_msg=f'{name} step {t}')


def test_create_is_case_insensitive_and_names_unknown_optimizers():
    assert type(mx.optimizer.create('AdaGrad')) is mx.optimizer.AdaGrad
    assert type(mx.optimizer.create('RMSPROP')) is mx.optimizer.RMSProp
    with pytest.raises(ValueError, match=r"'adamm'.*did you mean 'adam'"):
        mx.optimizer.create('adamm')


def test_register_adds_a_name_and_warns_on_replacement():
    class Twice(Optimizer):
        def update(self, index, weight, grad, state):
            weight[:] = weight * 2

    try:
        mx.optimizer.register(Twice)
        weight = mx.nd.ones((2,))
        get_updater(mx.optimizer.create('twice'))(0, mx.nd.ones((2,)), weight)
        assert weight.asnumpy().tolist() == [2.0, 2.0]
        with pytest.warns(UserWarning, match='replaces'):
            mx.optimizer.register(type('Twice', (Twice,), {}))
    finally:
        del Optimizer.opt_registry['twice']


def test_base_optimizer_requires_update():
    with pytest.raises(NotImplementedError, match='Optimizer must define update'):
        Optimizer().update(0, mx.nd.ones((1,)), mx.nd.ones((1,)), None)


# ----------------------------------------------------------------------------------------------
# Learning rate, multipliers, clipping and rescaling.

def test_lr_scheduler_drives_the_learning_rate():
    schedule = lr_scheduler.FactorScheduler(step=2, factor=0.5, base_lr=1.0)
    sgd = mx.optimizer.SGD(lr_scheduler=schedule)
    weight = mx.nd.zeros((1,))
    moves = []
    for _ in range(6):
        before = weight.asscalar()
        sgd.update(0, weight, mx.nd.ones((1,)), None)
        moves.append(before - weight.asscalar())
    assert moves == pytest.approx([1.0, 1.0, 0.5, 0.5, 0.25, 0.25])
    assert sgd.learning_rate == 0.25
    with pytest.raises(UserWarning, match='lr_scheduler'):
        sgd.set_learning_rate(0.1)


def test_learning_rate_overrides_the_schedulers_base_lr():
    schedule = lr_scheduler.FactorScheduler(step=10, base_lr=1.0)
    with pytest.warns(UserWarning, match='replaces the base_lr'):
        opt = mx.optimizer.SGD(learning_rate=0.3, lr_scheduler=schedule)
    assert opt.learning_rate == 0.3
    assert mx.optimizer.SGD().learning_rate == 0.01


def test_set_learning_rate():
    adam = mx.optimizer.Adam()
    assert adam.learning_rate == 0.001
    adam.set_learning_rate(0.5)
    assert adam.learning_rate == 0.5 and adam._get_lr(3) == 0.5


def test_clip_gradient_and_rescale_grad():
    sgd = mx.optimizer.SGD(learning_rate=1.0, rescale_grad=0.25, clip_gradient=0.5)
    weight = mx.nd.zeros((3,))
    sgd.update(0, weight, mx.nd.array([1.0, -8.0, 4.0]), None)
    np.testing.assert_allclose(weight.asnumpy(), [-0.25, 0.5, -0.5])


def test_param_dict_multipliers_take_precedence():
    class Param:
        def __init__(self, lr_mult, wd_mult):
            self.lr_mult, self.wd_mult = lr_mult, wd_mult

    opt = mx.optimizer.SGD(learning_rate=0.1, wd=0.01, param_dict={0: Param(2.0, 0.0)},
                           param_idx2name={1: 'fc_bias', 2: 'fc_weight'})
    opt.set_lr_mult({2: 3.0})
    assert opt._get_lrs([0, 1, 2]) == pytest.approx([0.2, 0.1, 0.3])
    # Names not ending in _weight or _gamma get no weight decay, as in MXNet.
    assert opt._get_wds([0, 1, 2]) == pytest.approx([0.0, 0.0, 0.01])
    opt.set_wd_mult({'fc_bias': 0.5})
    assert opt._get_wd(1) == pytest.approx(0.005)


def test_update_counts_are_per_index_and_per_device():
    opt = mx.optimizer.Adam(begin_num_update=5)
    opt._update_count([0, 1])
    opt._update_count(0)
    assert opt._index_update_count == {0: 7, 1: 6} and opt.num_update == 7
    opt._set_current_context(1)
    opt._update_count(0)
    assert opt._index_update_count == {0: 6}
    assert opt._all_index_update_counts[0] == {0: 7, 1: 6}


# ----------------------------------------------------------------------------------------------
# Multi-precision.

@pytest.mark.parametrize('name, kwargs', [
    ('sgd', {}), ('sgd', {'momentum': 0.5}), ('nag', {'momentum': 0.5}), ('adam', {}),
])
def test_multi_precision_keeps_a_float32_master_copy(name, kwargs):
    # Steps of 1e-4 are below float16's resolution at 1.0: only a float32 master copy adds up.
    lr = 1e-4 if name != 'adam' else 1e-4 * math.sqrt(1e-3) / 0.1
    opt = mx.optimizer.create(name, learning_rate=1e-4, multi_precision=True, **kwargs)
    plain = mx.optimizer.create(name, learning_rate=1e-4, **kwargs)
    weight = mx.nd.ones((4,), dtype='float16')
    unmixed = mx.nd.ones((4,), dtype='float16')
    updater, plain_updater = get_updater(opt), get_updater(plain)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for _ in range(20):
            updater(0, mx.nd.ones((4,), dtype='float16'), weight)
            plain_updater(0, mx.nd.ones((4,), dtype='float16'), unmixed)
    masters = [s for s in _flat(updater.states[0]) if s.dtype == np.float32]
    assert masters, 'no float32 state'
    master = next(s for s in masters if abs(s.asnumpy()[0] - 1) < 0.1)
    assert weight.dtype == np.float16
    assert master.asnumpy()[0] < 1 - 10 * lr
    np.testing.assert_allclose(weight.asnumpy(), master.asnumpy().astype(np.float16))
    assert unmixed.asnumpy()[0] == 1.0


def _flat(state):
    if isinstance(state, (tuple, list)):
        return [item for part in state for item in _flat(part)]
    return [] if state is None else [state]


def test_float16_without_multi_precision_warns():
    weight = mx.nd.ones((2,), dtype='float16')
    with pytest.warns(UserWarning, match='multi_precision=True'):
        mx.optimizer.SGD(momentum=0.9).create_state_multi_precision(0, weight)


# ----------------------------------------------------------------------------------------------
# Updater and aggregation.

def operations():
    return engine.get().stats()['operations']


def sgd_run(aggregation_size, steps=2):
    """Weights after `steps` Updater calls over 8 weights; engine operations of the last call."""
    with config.override(MXNET_OPTIMIZER_AGGREGATION_SIZE=aggregation_size):
        updater = get_updater(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.01))
    rng = np.random.default_rng(3)
    weights = [mx.nd.array(rng.uniform(-1, 1, (2, i + 1))) for i in range(8)]
    grads = [mx.nd.array(rng.uniform(-1, 1, (2, i + 1))) for i in range(8)]
    for _ in range(steps):
        mx.nd.waitall()
        before = operations()
        updater(list(range(8)), grads, weights)
        pushed = operations() - before
    return [w.asnumpy() for w in weights], pushed


def test_aggregation_size_sets_operations_per_update_not_results():
    results = {size: sgd_run(size) for size in (1, 4, 8)}
    assert {size: pushed for size, (_, pushed) in results.items()} == {1: 8, 4: 2, 8: 1}
    for size in (4, 8):
        for got, expected in zip(results[size][0], results[1][0]):
            np.testing.assert_array_equal(got, expected)


def test_aggregation_groups_weights_by_dtype():
    with config.override(MXNET_OPTIMIZER_AGGREGATION_SIZE=4):
        updater = get_updater(mx.optimizer.SGD(learning_rate=0.5))
    dtypes = ['float32', 'float64', 'float32', 'float64', 'float32']
    weights = [mx.nd.ones((2,), dtype=d) for d in dtypes]
    grads = [mx.nd.ones((2,), dtype=d) for d in dtypes]
    mx.nd.waitall()
    before = operations()
    updater(list(range(5)), grads, weights)
    assert operations() - before == 2
    for weight, dtype in zip(weights, dtypes):
        assert weight.dtype == np.dtype(dtype)
        assert weight.asnumpy().tolist() == [0.5, 0.5]


def test_updater_creates_state_once_and_matches_single_calls():
    single = get_updater(mx.optimizer.Adam(learning_rate=0.1))
    listed = get_updater(mx.optimizer.Adam(learning_rate=0.1))
    w_single = [mx.nd.ones((3,)) for _ in range(3)]
    w_listed = [mx.nd.ones((3,)) for _ in range(3)]
    grads = [mx.nd.array([1.0, -2.0, 3.0]) * (i + 1) for i in range(3)]
    for _ in range(2):
        for i in range(3):
            single(i, grads[i], w_single[i])
        listed([0, 1, 2], grads, w_listed)
    assert set(listed.states) == {0, 1, 2}
    first_state = listed.states[0]
    listed([0], [grads[0]], [w_listed[0]])
    assert listed.states[0] is first_state
    single(0, grads[0], w_single[0])
    for a, b in zip(w_single, w_listed):
        np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-6)


def test_updater_rejects_mismatched_lists():
    updater = get_updater(mx.optimizer.SGD())
    with pytest.raises(ValueError, match='2 indices, 1 gradients and 2 weights'):
        updater([0, 1], [mx.nd.ones((1,))], [mx.nd.ones((1,)), mx.nd.ones((1,))])


# ----------------------------------------------------------------------------------------------
# Saved states.

def train(updater, weights, steps, start):
    for step in range(start, start + steps):
        updater([0, 'bias'], [mx.nd.array([0.5, -1.0]) * step, mx.nd.array([0.25 * step])],
                weights)


def test_states_round_trip_continues_training_identically():
    schedule = lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    original = get_updater(mx.optimizer.Adam(learning_rate=0.1, lr_scheduler=schedule))
    weights = [mx.nd.array([1.0, 2.0]), mx.nd.array([0.5])]
    train(original, weights, 2, start=1)
    blob = original.get_states(dump_optimizer=True)
    saved = [w.copy() for w in weights]
    train(original, weights, 2, start=3)

    restored = get_updater(mx.optimizer.SGD())
    restored.set_states(blob)
    assert type(restored.optimizer) is mx.optimizer.Adam
    assert isinstance(restored.optimizer.lr_scheduler, lr_scheduler.FactorScheduler)
    train(restored, saved, 2, start=3)
    for got, expected in zip(saved, weights):
        np.testing.assert_allclose(got.asnumpy(), expected.asnumpy(), rtol=1e-6)


def test_states_without_optimizer_restore_states_and_update_counts():
    updater = get_updater(mx.optimizer.Adam(learning_rate=0.1))
    weights = [mx.nd.array([1.0, 2.0]), mx.nd.array([0.5])]
    train(updater, weights, 3, start=1)
    blob = updater.get_states()
    fresh = mx.optimizer.Adam(learning_rate=0.1)
    restored = get_updater(fresh)
    restored.set_states(blob)
    assert restored.optimizer is fresh
    assert fresh._all_index_update_counts[0] == {0: 3, 'bias': 3} and fresh.num_update == 3
    mean, var = restored.states[0]
    np.testing.assert_allclose(mean.asnumpy(), updater.states[0][0].asnumpy())
    np.testing.assert_allclose(var.asnumpy(), updater.states[0][1].asnumpy())
    assert isinstance(restored.states['bias'], tuple)


def test_states_are_an_mxnet_ndarray_list_with_named_states():
    updater = get_updater(mx.optimizer.SGD(momentum=0.9, multi_precision=True))
    updater([4, 5], [mx.nd.ones((2,), dtype='float16'), mx.nd.ones((2,))],
            [mx.nd.ones((2,), dtype='float16'), mx.nd.ones((2,))])
    arrays = nd_io.load_frombuffer(updater.get_states())
    names = sorted(name for name in arrays if not name.startswith('__'))
    assert names == ['4/0', '4/1', '5']
    assert arrays['4/1'].dtype == np.float32


def test_set_states_rejects_foreign_bytes():
    updater = get_updater(mx.optimizer.SGD())
    with pytest.raises(EmberError, match='not an MXNet NDArray list'):
        updater.set_states(pickle.dumps({0: None}))
    plain_list = nd_io.dumps({'w': np.ones(2, 'float32')})
    with pytest.raises(EmberError, match='without the updater header'):
        updater.set_states(plain_list)
