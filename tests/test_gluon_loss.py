"""Gluon losses: per-sample values against NumPy formulas, and gradients through autograd
against central differences of the same formulas."""
import numpy as np
import pytest

import ember as mx
from ember.gluon import loss as gloss

RNG = np.random.default_rng(11)
N, C = 4, 5


def rand(*shape):
    return RNG.standard_normal(shape)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def log_softmax(x, axis=-1):
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


def per_sample_sum(values):
    return values.reshape(values.shape[0], -1).sum(axis=1)


def per_sample_mean(loss):
    return loss.reshape(loss.shape[0], -1).mean(1)


def softplus(x):
    return np.logaddexp(0, x)


# Each case: (loss factory, extra inputs after the prediction, NumPy reference of the
# per-sample loss as a function of (pred, *extra)[, the prediction when not PRED]).
PRED = rand(N, C)
TARGET = rand(N, C)
PROBS = sigmoid(rand(N, C))
BINARY = (RNG.random((N, C)) > 0.5).astype(np.float64)
SIGNED = BINARY * 2 - 1
CLASSES = np.array([0, 3, 4, 1], np.float64)
DIST = np.exp(log_softmax(rand(N, C)))
HUBER_TARGET = PRED + np.array([[-2.0, -0.5, 0.3, 1.5, 0.0]] * N) + rand(N, C) * 0.05

CASES = {
    'L2': (lambda: gloss.L2Loss(), [TARGET],
           lambda p, y: per_sample_mean(0.5 * (p - y) ** 2)),
    'L2-weighted': (lambda: gloss.L2Loss(weight=3.0), [TARGET],
                    lambda p, y: per_sample_mean(1.5 * (p - y) ** 2)),
    'L1': (lambda: gloss.L1Loss(), [TARGET], lambda p, y: per_sample_mean(np.abs(p - y))),
    'SigmoidBCE': (lambda: gloss.SigmoidBCELoss(), [PROBS],
                   lambda p, y: per_sample_mean(-(y * np.log(sigmoid(p))
                                                  + (1 - y) * np.log(1 - sigmoid(p))))),
    'SigmoidBCE-pos-weight': (
        lambda: gloss.SigmoidBinaryCrossEntropyLoss(), [BINARY, None, np.full((1, C), 3.0)],
        lambda p, y, _, w: per_sample_mean(-(w * y * np.log(sigmoid(p))
                                             + (1 - y) * np.log(1 - sigmoid(p))))),
    'SigmoidBCE-from-sigmoid': (
        lambda: gloss.SigmoidBCELoss(from_sigmoid=True), [BINARY],
        lambda p, y: per_sample_mean(-(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))),
        sigmoid(PRED)),
    'SoftmaxCE-sparse': (lambda: gloss.SoftmaxCrossEntropyLoss(), [CLASSES],
                         lambda p, y: -log_softmax(p)[np.arange(N), y.astype(int)]),
    'SoftmaxCE-dense': (lambda: gloss.SoftmaxCELoss(sparse_label=False), [DIST],
                        lambda p, y: -(log_softmax(p) * y).sum(1)),
    'SoftmaxCE-from-logits': (lambda: gloss.SoftmaxCELoss(from_logits=True), [CLASSES],
                              lambda p, y: -p[np.arange(N), y.astype(int)]),
    'KLDiv': (lambda: gloss.KLDivLoss(from_logits=False), [DIST],
              # summed per sample, as MXNet 1.9.1 does
              lambda p, y: per_sample_sum(y * (np.log(y + 1e-12) - log_softmax(p)))),
    'Huber': (lambda: gloss.HuberLoss(rho=1.0), [HUBER_TARGET],
              lambda p, y: per_sample_mean(np.where(np.abs(p - y) > 1, np.abs(p - y) - 0.5,
                                                    0.5 * (p - y) ** 2))),
    'Hinge': (lambda: gloss.HingeLoss(), [SIGNED],
              lambda p, y: per_sample_mean(np.maximum(0, 1 - p * y))),
    'SquaredHinge': (lambda: gloss.SquaredHingeLoss(margin=2), [SIGNED],
                     lambda p, y: per_sample_mean(np.maximum(0, 2 - p * y) ** 2)),
    'Logistic-signed': (lambda: gloss.LogisticLoss(), [SIGNED],
                        lambda p, y: per_sample_mean(softplus(-p * y))),
    'Logistic-binary': (lambda: gloss.LogisticLoss(label_format='binary'), [BINARY],
                        lambda p, y: per_sample_mean(softplus(-p * (2 * y - 1)))),
    'Triplet': (lambda: gloss.TripletLoss(margin=1), [TARGET, PRED + 0.3 * rand(N, C)],
                lambda p, pos, neg: np.maximum(
                    0, ((pos - p) ** 2).sum(1) - ((neg - p) ** 2).sum(1) + 1)),
    'PoissonNLL': (lambda: gloss.PoissonNLLLoss(), [np.abs(TARGET) * 3],
                   lambda p, y: np.array([(np.exp(p) - y * p).mean()])),
}


def to_nd(value):
    return None if value is None else mx.nd.array(value.astype(np.float32))


def prediction(case):
    return case[3] if len(case) > 3 else PRED


def reference(case, pred):
    return case[2](pred, *case[1])


@pytest.mark.parametrize('name', sorted(CASES))
def test_loss_value(name):
    case = CASES[name]
    pred = prediction(case)
    out = case[0]()(to_nd(pred), *[to_nd(e) for e in case[1]])
    np.testing.assert_allclose(out.asnumpy(), reference(case, pred), rtol=1e-4, atol=1e-5)


def numeric_gradient(fn, x, eps=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        grad[index] = (fn(x + step).sum() - fn(x - step).sum()) / (2 * eps)
    return grad


@pytest.mark.parametrize('name', sorted(CASES))
def test_loss_gradient(name):
    case = CASES[name]
    pred = prediction(case)
    data = to_nd(pred)
    data.attach_grad()
    with mx.autograd.record():
        out = case[0]()(data, *[to_nd(e) for e in case[1]])
    out.backward()
    expected = numeric_gradient(lambda p: reference(case, p), pred)
    np.testing.assert_allclose(data.grad.asnumpy(), expected, rtol=1e-3, atol=1e-4)


def test_sample_weight_broadcasts_per_sample():
    weights = np.array([[1.0], [0.0], [2.0], [0.5]])
    out = gloss.L1Loss()(to_nd(PRED), to_nd(TARGET), to_nd(weights))
    expected = per_sample_mean(np.abs(PRED - TARGET) * weights)
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-5)


def test_label_is_reshaped_like_prediction():
    pred, label = rand(N, 1), rand(N)
    out = gloss.L2Loss()(to_nd(pred), to_nd(label))
    np.testing.assert_allclose(out.asnumpy(), 0.5 * (pred[:, 0] - label) ** 2, rtol=1e-5)


def test_batch_axis_keeps_that_axis():
    pred, label = rand(3, 6, 2), rand(3, 6, 2)
    out = gloss.L1Loss(batch_axis=1)(to_nd(pred), to_nd(label))
    assert out.shape == (6,)
    np.testing.assert_allclose(out.asnumpy(), np.abs(pred - label).mean((0, 2)), rtol=1e-5)


def test_softmax_ce_on_other_axis():
    pred, label = rand(2, 3, 4), np.array([[0, 1, 2, 0], [2, 2, 1, 0]], np.float64)
    out = gloss.SoftmaxCELoss(axis=1)(to_nd(pred), to_nd(label))
    picked = np.take_along_axis(log_softmax(pred, 1), label.astype(int)[:, None], 1)
    np.testing.assert_allclose(out.asnumpy(), -picked.reshape(2, -1).mean(1), rtol=1e-5)


def test_cosine_embedding_loss():
    a, b = rand(N, C), rand(N, C)
    label = np.array([1, -1, 1, -1], np.float64)
    out = gloss.CosineEmbeddingLoss(margin=0.1)(to_nd(a), to_nd(b), to_nd(label))
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    expected = np.where(label == 1, 1 - cos, np.maximum(0, cos - 0.1))
    assert out.shape == (N, 1)
    np.testing.assert_allclose(out.asnumpy()[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_loss_prefix_and_repr():
    loss = gloss.SoftmaxCrossEntropyLoss(prefix='ce_')
    assert loss.prefix == 'ce_'
    assert repr(gloss.L2Loss()) == 'L2Loss(batch_axis=0, w=1.0)'
    assert gloss.SoftmaxCELoss is gloss.SoftmaxCrossEntropyLoss
    assert gloss.SigmoidBCELoss is gloss.SigmoidBinaryCrossEntropyLoss


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match='label_format'):
        gloss.LogisticLoss(label_format='probability')
    with pytest.raises(TypeError, match='weight'):
        gloss.L1Loss(weight='heavy')(to_nd(PRED), to_nd(TARGET))


def test_apply_weighting():
    loss = mx.nd.array([[1.0, 2.0], [3.0, 4.0]])
    out = gloss.Loss._apply_weighting(mx.nd, loss, 2.0, mx.nd.array([[1.0], [0.5]]))
    np.testing.assert_allclose(out.asnumpy(), [[2.0, 4.0], [3.0, 4.0]])


def test_loss_gradient_reaches_layer_weights():
    net = mx.gluon.nn.Dense(C, in_units=C)
    net.initialize(mx.init.Zero())
    with mx.autograd.record():
        loss = gloss.SoftmaxCELoss()(net(to_nd(PRED)), to_nd(CLASSES))
    loss.backward()
    dlogits = np.full((N, C), 1 / C)
    dlogits[np.arange(N), CLASSES.astype(int)] -= 1
    np.testing.assert_allclose(net.weight.grad().asnumpy(), dlogits.T @ PRED, rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_allclose(net.bias.grad().asnumpy(), dlogits.sum(0), atol=1e-5)


def ctc_reference(logits, label):
    """-log p(label | logits) for one sequence, blank = the last class."""
    logp = log_softmax(logits)
    blank = logits.shape[1] - 1
    ext = [blank]
    for symbol in label:
        ext += [symbol, blank]
    alpha = np.full(len(ext), -np.inf)
    alpha[0] = logp[0, blank]
    alpha[1] = logp[0, ext[1]]
    for t in range(1, len(logits)):
        previous = alpha.copy()
        for s in range(len(ext)):
            total = previous[s]
            if s >= 1:
                total = np.logaddexp(total, previous[s - 1])
            if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                total = np.logaddexp(total, previous[s - 2])
            alpha[s] = total + logp[t, ext[s]]
    return -np.logaddexp(alpha[-1], alpha[-2])


@pytest.mark.skipif('CTCLoss' not in mx.op.registry.all_ops(),
                    reason='the CTCLoss operator is not declared yet')
@pytest.mark.parametrize('layout', ['NTC', 'TNC'])
def test_ctc_loss_matches_forward_algorithm(layout):
    logits = rand(2, 6, 4)
    labels = [[0, 1, 1], [2]]
    padded = np.array([[0, 1, 1], [2, -1, -1]], np.float64)
    pred = logits if layout == 'NTC' else logits.transpose(1, 0, 2)
    out = gloss.CTCLoss(layout=layout)(to_nd(pred), to_nd(padded))
    expected = [ctc_reference(logits[i], labels[i]) for i in range(2)]
    np.testing.assert_allclose(out.asnumpy(), expected, rtol=1e-4)
    lengths = gloss.CTCLoss()(to_nd(logits), to_nd(np.array([[0, 1, 1], [2, 0, 0]])),
                              None, to_nd(np.array([3, 1])))
    np.testing.assert_allclose(lengths.asnumpy(), expected, rtol=1e-4)
