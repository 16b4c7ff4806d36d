"""mx.init: fan and scale arithmetic, dispatch by name, the registry, and seeded random draws."""
import json
import math

import numpy as np
import pytest

import ember.ndarray as nd
from ember import initializer as init
from ember import random as mx_random
from ember.initializer import InitDesc


@pytest.mark.parametrize('shape, fans', [
    ((10, 20), (20, 10)),
    ((64, 32, 3, 3), (32 * 9, 64 * 9)),
    ((8, 4, 2, 3, 5), (4 * 30, 8 * 30)),
])
def test_fan_in_and_fan_out(shape, fans):
    assert init.fan_in_out(shape) == fans


@pytest.mark.parametrize('factor_type, factor', [('avg', (288 + 576) / 2), ('in', 288),
                                                 ('out', 576)])
def test_xavier_scale_for_each_factor_type(factor_type, factor):
    assert init.xavier_scale((64, 32, 3, 3), factor_type, 3) == pytest.approx(
        math.sqrt(3 / factor))
    msra = init.MSRAPrelu(factor_type, slope=0.5)
    assert msra.magnitude == pytest.approx(2 / 1.25) and msra.rnd_type == 'gaussian'


def test_xavier_rejects_vectors_and_bad_choices():
    with pytest.raises(ValueError, match=r'fc_weight of shape \(5,\)'):
        init.Xavier()(InitDesc('fc_weight'), np.zeros(5))
    with pytest.raises(ValueError, match="factor_type='mean'"):
        init.Xavier(factor_type='mean')
    with pytest.raises(ValueError, match="rnd_type='normal'"):
        init.Xavier(rnd_type='normal')


@pytest.mark.parametrize('name, value', [
    ('fc1_bias', 0.0), ('bn_gamma', 1.0), ('bn_beta', 0.0), ('bn_moving_mean', 0.0),
    ('bn_moving_var', 1.0), ('quant_min', 0.0), ('quant_max', 1.0),
])
def test_dispatch_by_name_suffix(name, value):
    arr = np.full((2, 3), 7.0, dtype=np.float32)
    init.Constant(5.0)(InitDesc(name), arr)
    assert (arr == value).all()


def test_weight_names_get_the_initializers_own_pattern():
    arr = np.zeros((2, 2))
    init.Constant(3.0)(InitDesc('conv0_weight'), arr)
    assert (arr == 3.0).all()
    with pytest.raises(ValueError, match='Unknown initialization pattern for mystery'):
        init.Constant(3.0)(InitDesc('mystery'), arr)


def test_init_attribute_overrides_the_name():
    desc = InitDesc('fc_bias', {'__init__': init.One().dumps()})
    arr = np.zeros(4)
    init.Zero()(desc, arr)
    assert (arr == 1.0).all()
    assert desc.global_init is not None
    desc = InitDesc('fc_weight', {'__init__': init.Constant(2.0)})
    init.Zero()(desc, arr)
    assert (arr == 2.0).all()


def test_legacy_string_names_warn_and_dispatch():
    arr = np.ones(6)
    with pytest.warns(DeprecationWarning, match='InitDesc'):
        init.Zero()('stn_loc_bias', arr)
    assert arr.tolist() == [1.0, 0, 0, 0, 1.0, 0]
    with pytest.warns(DeprecationWarning):
        init.One()('bn_moving_var', arr)
    assert (arr == 1.0).all()


def test_bilinear_matches_mxnet_loop():
    shape = (2, 1, 4, 5)
    arr = np.zeros(shape, dtype=np.float32)
    init.Bilinear()(InitDesc('up_weight'), arr)
    f = math.ceil(shape[3] / 2.0)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    expected = np.zeros(int(np.prod(shape)), dtype=np.float32)
    for i in range(expected.size):
        x, y = i % shape[3], (i // shape[3]) % shape[2]
        expected[i] = (1 - abs(x / f - c)) * (1 - abs(y / f - c))
    np.testing.assert_allclose(arr, expected.reshape(shape), rtol=1e-6)


def test_lstm_bias_sets_the_forget_gate():
    arr = np.ones(8)
    init.LSTMBias(forget_bias=2.5)(InitDesc('lstm_i2h_bias', {'__init__': init.LSTMBias(2.5)}),
                                   arr)
    assert arr.tolist() == [0, 0, 2.5, 2.5, 0, 0, 0, 0]


def test_mixed_uses_the_first_matching_pattern():
    mixed = init.Mixed(['conv', '.*'], [init.Constant(4.0), 'one'])
    conv, dense, bias = np.zeros(2), np.zeros(2), np.ones(2)
    mixed(InitDesc('conv0_weight'), conv)
    mixed(InitDesc('dense0_weight'), dense)
    # The chosen initializer still dispatches on the name: a bias gets zeros.
    mixed(InitDesc('conv0_bias'), bias)
    assert conv.tolist() == [4.0, 4.0] and dense.tolist() == [1.0, 1.0]
    assert bias.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match='did not match any pattern'):
        init.Mixed(['.*bias'], [init.Zero()])(InitDesc('fc_weight'), dense)


def test_load_copies_values_and_checks_shapes():
    loaded = init.Load({'arg:w_weight': np.arange(3.0), 'aux:bn_moving_var': np.ones(2)})
    weight = np.zeros(3)
    loaded(InitDesc('w_weight'), weight)
    assert weight.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match='shape mismatch'):
        loaded(InitDesc('bn_moving_var'), np.zeros(3))
    with pytest.raises(ValueError, match='no default initializer'):
        loaded(InitDesc('other_weight'), weight)


def test_registry_create_and_dumps_round_trip():
    xavier = init.Xavier(rnd_type='gaussian', factor_type='in', magnitude=2)
    assert json.loads(xavier.dumps()) == ['xavier', {'rnd_type': 'gaussian', 'factor_type': 'in',
                                                     'magnitude': 2}]
    copy = init.create(xavier.dumps())
    assert (copy.rnd_type, copy.factor_type, copy.magnitude) == ('gaussian', 'in', 2.0)
    assert json.loads(init.MSRAPrelu(slope=0.1).dumps()) == [
        'msraprelu', {'factor_type': 'avg', 'slope': 0.1}]
    assert json.loads(init.Constant(np.array([1.0, 2.0])).dumps()) == [
        'constant', {'value': [1.0, 2.0]}]
    for name, klass in [('zeros', init.Zero), ('Zero', init.Zero), ('ones', init.One),
                        ('uniform', init.Uniform), ('normal', init.Normal),
                        ('msraprelu', init.MSRAPrelu), ('orthogonal', init.Orthogonal)]:
        assert isinstance(init.create(name), klass)
    instance = init.Uniform()
    assert init.create(instance) is instance
    with pytest.raises(ValueError, match="did you mean 'xavier'"):
        init.create('xavir')


@init.register
class _Halves(init.Initializer):
    def _init_weight(self, _, arr):
        arr[:] = 0.5


def test_registering_a_custom_initializer():
    arr = np.zeros(2)
    init.create('_halves')(InitDesc('x_weight'), arr)
    assert arr.tolist() == [0.5, 0.5]


# ----------------------------------------------------------------------------------------------
# On NDArrays, drawing from Ember's random streams.


@pytest.mark.parametrize('factor_type', ['avg', 'in', 'out'])
def test_xavier_uniform_fills_within_its_bound(factor_type):
    shape = (16, 8, 3, 3)
    weight = nd.zeros(shape)
    init.Xavier(factor_type=factor_type, magnitude=3)(InitDesc('conv_weight'), weight)
    values = weight.asnumpy()
    bound = init.xavier_scale(shape, factor_type, 3)
    assert np.abs(values).max() <= bound
    # 1152 uniform draws reach well past 90% of the bound and spread like uniform values.
    assert np.abs(values).max() > 0.9 * bound
    assert values.std() == pytest.approx(bound / math.sqrt(3), rel=0.1)


def test_gaussian_initializers_have_the_requested_deviation():
    weight = nd.zeros((64, 100))
    init.Xavier(rnd_type='gaussian', factor_type='in', magnitude=2)(InitDesc('fc_weight'), weight)
    assert weight.asnumpy().std() == pytest.approx(math.sqrt(2 / 100), rel=0.05)
    init.Normal(sigma=0.5)(InitDesc('fc_weight'), weight)
    assert weight.asnumpy().std() == pytest.approx(0.5, rel=0.05)
    assert abs(weight.asnumpy().mean()) < 0.05


def test_random_initializers_are_reproducible_under_seed():
    def draw(initializer, shape, seed):
        mx_random.seed(seed)
        arr = nd.zeros(shape)
        initializer(InitDesc('layer_weight'), arr)
        return arr.asnumpy()

    for initializer in (init.Uniform(0.1), init.Normal(0.1), init.Xavier(), init.MSRAPrelu(),
                        init.Orthogonal()):
        first = draw(initializer, (6, 4), 11)
        np.testing.assert_array_equal(first, draw(initializer, (6, 4), 11))
        assert not np.array_equal(first, draw(initializer, (6, 4), 12))


def test_uniform_keeps_the_arrays_dtype():
    weight = nd.zeros((50,), dtype='float16')
    init.Uniform(0.2)(InitDesc('w_weight'), weight)
    values = weight.asnumpy()
    assert values.dtype == np.float16
    assert np.abs(values).max() <= 0.2 and np.unique(values).size > 10


def test_orthogonal_rows_are_orthogonal():
    weight = nd.zeros((4, 2, 5))
    init.Orthogonal(scale=2.0)(InitDesc('rnn_weight'), weight)
    rows = weight.asnumpy().reshape(4, 10)
    np.testing.assert_allclose(rows @ rows.T, 4.0 * np.eye(4), atol=1e-4)


def test_constant_and_bias_on_ndarrays():
    weight, bias = nd.zeros((2, 3)), nd.ones((3,))
    init.Constant(nd.array([1.0, 2.0, 3.0]))(InitDesc('fc_weight'), weight)
    init.Constant(5.0)(InitDesc('fc_bias'), bias)
    assert weight.asnumpy().tolist() == [[1.0, 2.0, 3.0]] * 2
    assert bias.asnumpy().tolist() == [0.0, 0.0, 0.0]
