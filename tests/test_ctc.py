"""CTCLoss against a brute-force sum over every alignment, and its gradient against finite
differences."""
import itertools

import numpy as np
import pytest

import ember as mx
from ember import autograd
from ember.base import EmberError
from ember.op import registry
from ember.op.registry import ShapeError


def log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def collapse(path, blank):
    """CTC's many-to-one map: merge repeated symbols, then drop blanks."""
    merged = [symbol for i, symbol in enumerate(path) if i == 0 or symbol != path[i - 1]]
    return [symbol for symbol in merged if symbol != blank]


def brute_force_loss(logits, label, blank):
    """-log of the summed probability of every path over `logits` (T, C) that collapses to
    `label` (inf when none does)."""
    logp = log_softmax(logits)
    steps = range(len(logits))
    total = sum(np.exp(sum(logp[t, k] for t, k in zip(steps, path)))
                for path in itertools.product(range(logits.shape[1]), repeat=len(logits))
                if collapse(path, blank) == list(label))
    return -np.log(total) if total > 0 else np.inf


def ctc(data, label, data_lengths=None, label_lengths=None, blank_label='first'):
    inputs = [mx.nd.array(data, dtype=data.dtype), mx.nd.array(label)]
    inputs += [mx.nd.array(x) for x in (data_lengths, label_lengths) if x is not None]
    return mx.nd.CTCLoss(*inputs, use_data_lengths=data_lengths is not None,
                         use_label_lengths=label_lengths is not None, blank_label=blank_label)


def random_data(steps, batch, classes, seed=0):
    return np.random.default_rng(seed).normal(0, 1.5, (steps, batch, classes))


# Rows of labels in the alphabet 1..3 ('first': blank 0) or 0..2 ('last': blank 3), with a
# repeated label (needs a blank between), an empty row, and a row as long as the steps allow.
SEQUENCES = [[1, 2], [2, 2], [], [1, 3, 1], [3]]


def _padded(sequences, blank_label, width=3):
    pad = shift = 0 if blank_label == 'first' else -1
    return np.array([[s + shift for s in seq] + [pad] * (width - len(seq))
                     for seq in sequences], np.float64)


@pytest.mark.parametrize('blank_label', ['first', 'last'])
def test_loss_is_the_sum_over_all_alignments(blank_label):
    steps, classes = 5, 4
    data = random_data(steps, len(SEQUENCES), classes)
    label = _padded(SEQUENCES, blank_label)
    blank = 0 if blank_label == 'first' else classes - 1
    out = ctc(data, label, blank_label=blank_label).asnumpy()
    shift = 0 if blank_label == 'first' else -1
    expected = [brute_force_loss(data[:, n], [s + shift for s in seq], blank)
                for n, seq in enumerate(SEQUENCES)]
    np.testing.assert_allclose(out, expected, rtol=1e-10)


def test_lengths_select_the_steps_and_labels_used():
    steps, classes = 6, 4
    data = random_data(steps, 4, classes, seed=1)
    # label lengths cut the rows (whatever follows, even a valid label, is ignored)
    label = np.array([[1, 2, 3], [2, 2, 1], [3, 1, 2], [1, 1, 1]], np.float64)
    label_lengths = np.array([2, 2, 0, 3])
    data_lengths = np.array([6, 3, 1, 5])
    out = ctc(data, label, data_lengths, label_lengths).asnumpy()
    expected = [brute_force_loss(data[:t, n], label[n, :k].astype(int), 0)
                for n, (t, k) in enumerate(zip(data_lengths, label_lengths))]
    np.testing.assert_allclose(out, expected, rtol=1e-10)


def test_label_no_alignment_can_produce_has_infinite_loss_and_zero_gradient():
    data = mx.nd.array(random_data(4, 2, 3))
    label = mx.nd.array([[1, 1, 1], [1, 2, 0]])       # 1-1-1 needs five steps; 1 2 fits
    data.attach_grad()
    with autograd.record():
        loss = mx.nd.CTCLoss(data, label)
    loss.backward()
    values = loss.asnumpy()
    assert values[0] == np.inf and np.isfinite(values[1])
    grad = data.grad.asnumpy()
    assert not grad[:, 0].any() and grad[:, 1].any()


def _numeric_gradient(fn, data, eps=1e-6):
    grad = np.zeros_like(data)
    for index in np.ndindex(*data.shape):
        step = np.zeros_like(data)
        step[index] = eps
        grad[index] = (fn(data + step) - fn(data - step)) / (2 * eps)
    return grad


@pytest.mark.parametrize('blank_label', ['first', 'last'])
def test_gradient_matches_finite_differences(blank_label):
    steps, classes = 5, 4
    data = random_data(steps, 3, classes, seed=2)
    sequences = [[1, 2], [3, 3], [2]]
    label = _padded(sequences, blank_label)
    data_lengths = np.array([5, 5, 3])
    label_lengths = np.array([len(s) for s in sequences])
    head = np.array([0.5, -1.0, 2.0])

    x = mx.nd.array(data, dtype='float64')
    x.attach_grad()
    with autograd.record():
        loss = mx.nd.CTCLoss(x, mx.nd.array(label), mx.nd.array(data_lengths),
                             mx.nd.array(label_lengths), use_data_lengths=True,
                             use_label_lengths=True, blank_label=blank_label)
    loss.backward(mx.nd.array(head, dtype='float64'))

    def weighted_loss(values):
        return float((ctc(values, label, data_lengths, label_lengths, blank_label).asnumpy()
                      * head).sum())
    expected = _numeric_gradient(weighted_loss, data)
    grad = x.grad.asnumpy()
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-7)
    assert not grad[3:, 2].any(), 'steps past a sequence length get no gradient'


def test_float32_matches_float64():
    data = random_data(7, 2, 5, seed=3)
    label = np.array([[1, 4, 4, 2], [3, 0, 0, 0]], np.float64)
    out32 = ctc(data.astype(np.float32), label)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32.asnumpy(), ctc(data, label).asnumpy(), rtol=1e-5)


def test_aliases_are_the_same_operator():
    op = registry.get('CTCLoss')
    for alias in ('ctc_loss', '_contrib_CTCLoss', '_contrib_ctc_loss'):
        assert registry.get(alias) is op
    assert registry.get('_backward_ctc_loss') is registry.get('_backward_CTCLoss')
    data, label = random_data(4, 2, 3), np.array([[1, 2], [2, 0]], np.float64)
    np.testing.assert_array_equal(
        mx.nd.ctc_loss(mx.nd.array(data), mx.nd.array(label)).asnumpy(),
        ctc(data.astype(np.float32), label).asnumpy())


def test_inputs_follow_the_length_flags():
    op = registry.get('CTCLoss')
    names = op.input_names(op.parse_attrs({'use_label_lengths': True}))
    assert names == ['data', 'label', 'label_lengths']
    attrs = op.parse_attrs({'use_data_lengths': True, 'use_label_lengths': True})
    assert op.infer_shape(attrs, [(5, 2, 4), (2, 3), None, None]) == (
        [(5, 2, 4), (2, 3), (2,), (2,)], [(2,)])


@pytest.mark.parametrize('data_shape,label_shape', [((5, 2, 4), (3, 3)), ((5, 8), (2, 3))])
def test_bad_shapes_raise_at_the_call(data_shape, label_shape):
    with pytest.raises(ShapeError, match='CTCLoss'):
        mx.nd.CTCLoss(mx.nd.zeros(data_shape), mx.nd.zeros(label_shape))


@pytest.mark.parametrize('blank_label,label,message', [
    ('first', [[1, 4]], r'label\[0, 1\]=4 is not a label.*1 \.\. 3 \(the blank is 0\)'),
    ('last', [[3, -1]], r'label\[0, 0\]=3 is not a label.*0 \.\. 2 \(the blank is 3\)'),
])
def test_labels_outside_the_alphabet_are_rejected(blank_label, label, message):
    out = ctc(random_data(4, 1, 4).astype(np.float32), np.array(label, np.float64),
              blank_label=blank_label)
    with pytest.raises(EmberError, match=message):
        out.asnumpy()


def test_lengths_longer_than_the_data_are_rejected():
    out = ctc(random_data(4, 1, 4).astype(np.float32), np.array([[1, 2]], np.float64),
              data_lengths=np.array([5]))
    with pytest.raises(EmberError, match=r'data_lengths\[0\]=5 is outside \[0, 4\]'):
        out.asnumpy()


def test_every_form_gives_the_loss():
    data, label = random_data(4, 2, 3, seed=5), np.array([[1, 2], [2, 0]], np.float64)
    expected = ctc(data, label).asnumpy()
    arrays = [mx.nd.array(data, dtype=data.dtype), mx.nd.array(label)]
    for fn in (mx.nd.contrib.CTCLoss, mx.nd.contrib.ctc_loss):
        np.testing.assert_allclose(fn(*arrays).asnumpy(), expected, rtol=1e-12)
    for fn in (mx.sym.CTCLoss, mx.sym.ctc_loss, mx.sym.contrib.CTCLoss, mx.sym.contrib.ctc_loss):
        loss = fn(mx.sym.var('data'), mx.sym.var('label'))
        executor = loss.bind(mx.cpu(), {'data': arrays[0], 'label': arrays[1]})
        np.testing.assert_allclose(executor.forward()[0].asnumpy(), expected, rtol=1e-12)
