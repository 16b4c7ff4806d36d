"""The API Ember adds, against the values MXNet 1.9.1 computes with the same recipes
(``tools/mxnet_api_values.py`` ran them in MXNet's environment; here they run on Ember)."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

import ember as mx
from ember.cli import _exercised

REPO = Path(__file__).resolve().parents[1]
DATA = json.loads((REPO / 'tests' / 'data' / 'mxnet-1.9.1' / 'api_values.json').read_text())


def _recipes():
    spec = importlib.util.spec_from_file_location('mxnet_api_values',
                                                  REPO / 'tools' / 'mxnet_api_values.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECIPES = _recipes()
CASES = RECIPES.CASES
# Every recipe takes the framework as `mx`: here that is Ember; the model zoo's functions are
# called by name (for `python -m ember api-coverage`, which counts the names a test uses).
EXERCISED_API = sorted(_exercised.references_in(
    (REPO / 'tools' / 'mxnet_api_values.py').read_text(), aliases={'mx': 'ember'})) + [
    f'ember.gluon.model_zoo.vision.{name}' for name in RECIPES.ZOO_MODELS + [
        'get_resnet', 'get_vgg', 'get_mobilenet', 'get_mobilenet_v2', 'get_model',
        'squeezenet.get_squeezenet', 'densenet.get_densenet']]


def test_every_recipe_has_mxnets_value():
    assert DATA['mxnet_version'] == '1.9.1'
    assert sorted(DATA['values']) == sorted(CASES)


def assert_same(ours, theirs, where):
    """Nested lists alike: numbers within float32 tolerance, anything else equal."""
    if isinstance(theirs, list):
        assert isinstance(ours, (list, tuple)) and len(ours) == len(theirs), where
        if theirs and all(isinstance(v, (int, float)) for v in theirs):
            np.testing.assert_allclose(np.array(ours, dtype=np.float64), theirs, rtol=1e-5,
                                       atol=1e-6, err_msg=where)
            return
        for index, (mine, other) in enumerate(zip(ours, theirs)):
            assert_same(mine, other, f'{where}[{index}]')
    elif isinstance(theirs, float):
        assert ours == pytest.approx(theirs, rel=1e-5, abs=1e-6), where
    else:
        assert ours == theirs, where


@pytest.mark.parametrize('name', sorted(CASES))
def test_ember_computes_what_mxnet_computes(name):
    ours = json.loads(json.dumps(CASES[name](mx)))      # tuples become lists, as in the file
    assert_same(ours, DATA['values'][name], name)


# ----------------------------------------------------------------------------------------------
# What MXNet itself cannot show


def test_dcasgd_with_momentum_accumulates_the_compensated_steps():
    # (MXNet 1.9.1's DCASGD fails with momentum: it tests the truth value of an array.)
    opt = mx.optimizer.DCASGD(learning_rate=0.1, momentum=0.5, lamda=1.0)
    weight = mx.nd.array([1.0, 2.0])
    momentum, previous = opt.create_state(0, weight)
    grad = mx.nd.array([1.0, -1.0])
    opt.update(0, weight, grad, (momentum, previous))
    np.testing.assert_allclose(weight.asnumpy(), [0.9, 2.1], rtol=1e-6)
    opt.update(0, weight, grad, (momentum, previous))
    # w - w_previous = (-0.1, 0.1): step = -0.1 * (g + g*g*(w - w_prev)); mom = 0.5*mom + step
    step = -0.1 * (np.array([1.0, -1.0]) + np.array([-0.1, 0.1]))
    np.testing.assert_allclose(weight.asnumpy(), np.array([0.9, 2.1]) + 0.5 * np.array(
        [-0.1, 0.1]) + step, rtol=1e-6)


def test_sgld_steps_half_the_gradient_plus_noise_of_variance_lr():
    mx.random.seed(3)
    opt = mx.optimizer.SGLD(learning_rate=0.04)
    weight = mx.nd.zeros((20000,))
    opt.update(0, weight, mx.nd.ones((20000,)), opt.create_state(0, weight))
    values = weight.asnumpy()
    assert abs(values.mean() - (-0.02)) < 4 * 0.2 / np.sqrt(values.size)
    assert abs(values.std() - 0.2) < 0.01


def test_lars_leaves_biases_and_norm_parameters_at_the_global_rate():
    opt = mx.optimizer.LARS(learning_rate=0.1, eta=0.01, param_idx2name={0: 'fc_bias'})
    weight = mx.nd.ones((2,))
    opt.update(0, weight, mx.nd.ones((2,)), opt.create_state(0, weight))
    np.testing.assert_allclose(weight.asnumpy(), [0.9, 0.9], rtol=1e-6)
    assert opt._get_wd(0) == 0.0          # weight decay applies to *_weight only


def test_metrics_by_name_and_their_errors():
    for name, kind in (('f1', mx.metric.F1), ('mcc', mx.metric.MCC), ('pcc', mx.metric.PCC),
                       ('pearsonr', mx.metric.PearsonCorrelation),
                       ('nll_loss', mx.metric.NegativeLogLikelihood),
                       ('torch', mx.metric.Torch), ('caffe', mx.metric.Caffe)):
        assert isinstance(mx.metric.create(name), kind)
    with pytest.raises(ValueError, match='binary classification'):
        mx.metric.F1().update([mx.nd.array([0, 1, 2])], [mx.nd.ones((3, 3))])
    with pytest.raises(ValueError, match="average='mean'"):
        mx.metric.MCC(average='mean')
    torch = mx.metric.Torch()
    torch.update(None, [mx.nd.array([1.0, 3.0])])
    assert torch.get() == ('torch', 2.0)
    f1 = mx.metric.F1()
    f1.update([mx.nd.array([1, 1])], [mx.nd.array([[0.1, 0.9], [0.9, 0.1]])])
    f1.reset_local()
    assert np.isnan(f1.get()[1]) and f1.get_global()[1] == pytest.approx(2 / 3)
    mx.metric.register(mx.metric.Caffe, 'caffe_again')
    assert isinstance(mx.metric.create('caffe_again'), mx.metric.Caffe)


def test_optimizer_module_names_are_mxnets():
    assert mx.optimizer.NDabs is mx.nd.abs
    assert isinstance(mx.optimizer.create('groupadagrad'), mx.optimizer.contrib.GroupAdaGrad)
    with pytest.raises(ValueError, match='warmup_strategy'):
        mx.optimizer.LBSGD(warmup_strategy='cosine')
    with pytest.raises(ValueError, match='2-D weights'):
        mx.optimizer.contrib.GroupAdaGrad().create_state(0, mx.nd.ones((3,)))


def test_init_load_and_fused_layout_errors(tmp_path):
    assert mx.init.load is mx.nd.load and mx.init.NDArray is mx.nd.NDArray
    mx.nd.save(str(tmp_path / 'p.params'), {'arg:w': mx.nd.ones((2,))})
    assert mx.init.load(str(tmp_path / 'p.params'))['arg:w'].shape == (2,)
    with pytest.raises(ValueError, match='do not fit'):
        mx.init.FusedRNN(None, 2, 1, 'lstm')._init_weight(mx.init.InitDesc('p'), np.zeros(41))
