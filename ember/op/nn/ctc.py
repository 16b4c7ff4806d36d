"""CTCLoss: connectionist temporal classification (Graves et al., 2006), as MXNet 1.x's.

Inputs, as MXNet's:

- ``data`` (T, N, C): unnormalized activations; the operator applies log-softmax over C.
  C counts the blank: with ``blank_label='first'`` channel 0 is the blank and the labels are
  1 .. C-1; with ``'last'`` channel C-1 is the blank and the labels are 0 .. C-2.
- ``label`` (N, L): each row a label sequence, padded at the end. Without ``label_lengths`` a
  row ends at its first padding value: 0 with ``blank_label='first'``, -1 with ``'last'``.
- ``data_lengths`` (N,), with ``use_data_lengths=True``: the steps of each sequence (else T).
- ``label_lengths`` (N,), with ``use_label_lengths=True``: the labels of each row.

The output (N,) is -log p(label | data). A label that no alignment of the given length can
produce (too long for its data) has probability 0: the loss is +inf and its gradient 0 (MXNet's
warp-ctc kernel returned a loss of 0 for such a row). The gradient with respect to ``data``
comes from the forward-backward algorithm in log space; the labels and lengths get none.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('CTCLoss')
>>> attrs = op.parse_attrs({'blank_label': 'last'})
>>> data = np.zeros((2, 1, 2))                 # two steps, uniform over {label 0, blank}
>>> out = np.empty(1)
>>> op.kernel(attrs, [data, np.array([[0.0]])], [out], registry.KernelContext(None))
>>> round(float(np.exp(-out[0])), 4)           # paths 00, 0-, -0 of four
0.75
"""
from __future__ import annotations

import numpy as np

from ember.base import EmberError
from ember.op.nn._common import accumulation_dtype, assign_shape, typed_like_first
from ember.op.registry import Param, ShapeError, p_bool, p_enum, register

PARAMS = (
    Param('use_data_lengths', p_bool, False, 'Take an input data_lengths (N,).'),
    Param('use_label_lengths', p_bool, False, 'Take an input label_lengths (N,); else a row '
          'ends at its first padding value (0 for blank first, -1 for blank last).'),
    Param('blank_label', p_enum('first', 'last'), 'first',
          'The blank is channel 0 (first) or channel C-1 (last).'),
)


def _input_names(attrs):
    names = ['data', 'label']
    if attrs['use_data_lengths']:
        names.append('data_lengths')
    if attrs['use_label_lengths']:
        names.append('label_lengths')
    return names


def _infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data, label = in_shapes[0], in_shapes[1]
    if data is None:
        return in_shapes, [None]
    if len(data) != 3:
        raise ShapeError(f'CTCLoss: data has shape {tuple(data)}; expected (sequence_length, '
                         'batch_size, alphabet_size)')
    batch = data[1]
    if label is None or len(label) != 2 or label[0] != batch:
        got = 'unknown' if label is None else tuple(label)
        raise ShapeError(f'CTCLoss: label has shape {got}; expected ({batch}, '
                         f'label_sequence_length) for data of shape {tuple(data)}')
    for index, name in enumerate(_input_names(attrs)[2:], start=2):
        assign_shape('CTCLoss', in_shapes, index, name, (batch,))
    return in_shapes, [(batch,)]


# ----------------------------------------------------------------------------------------------
# Labels and lengths.

def _blank(attrs, classes):
    return 0 if attrs['blank_label'] == 'first' else classes - 1


def _lengths(xp, attrs, ins):
    """(data lengths, label lengths) as int64 arrays of shape (N,)."""
    data, label, extra = ins[0], ins[1], list(ins[2:])
    steps, batch = data.shape[0], data.shape[1]
    if attrs['use_data_lengths']:
        data_lengths = extra.pop(0).astype(np.int64)
    else:
        data_lengths = xp.full((batch,), steps, dtype=np.int64)
    if attrs['use_label_lengths']:
        label_lengths = extra.pop(0).astype(np.int64)
    else:
        padding = 0 if attrs['blank_label'] == 'first' else -1
        is_pad = label.astype(np.int64) == padding
        label_lengths = xp.where(is_pad.any(axis=1), is_pad.argmax(axis=1), label.shape[1])
    _check_range('data_lengths', xp, data_lengths, 0, steps)
    _check_range('label_lengths', xp, label_lengths, 0, label.shape[1])
    return data_lengths, label_lengths


def _check_range(name, xp, values, low, high):
    bad = (values < low) | (values > high)
    if bool(bad.any()):
        index = int(xp.argmax(bad))
        raise EmberError(f'CTCLoss: {name}[{index}]={int(values[index])} is outside '
                         f'[{low}, {high}]')


def _check_labels(xp, attrs, labels, used, classes):
    blank = _blank(attrs, classes)
    low, high = (1, classes - 1) if blank == 0 else (0, classes - 2)
    bad = used & ((labels < low) | (labels > high))
    if bool(bad.any()):
        row, col = (int(i) for i in np.unravel_index(int(xp.argmax(bad)), bad.shape))
        raise EmberError(f'CTCLoss: label[{row}, {col}]={int(labels[row, col])} is not a '
                         f'label: with blank_label={attrs["blank_label"]!r} and {classes} '
                         f'classes the labels are {low} .. {high} (the blank is {blank})')


def _extended_labels(xp, attrs, label, label_lengths, classes):
    """(N, 2L+1) states: the labels with a blank before, between and after them (states past a
    row's end hold the blank; no alignment ends there, so they get no probability), and where a
    state may be entered from two states back (a label that differs from the one before it)."""
    labels = label.astype(np.int64)
    used = xp.arange(labels.shape[1])[None, :] < label_lengths[:, None]
    _check_labels(xp, attrs, labels, used, classes)
    blank = _blank(attrs, classes)
    states = xp.full((labels.shape[0], 2 * labels.shape[1] + 1), blank, dtype=np.int64)
    states[:, 1::2] = xp.where(used, labels, blank)
    skip = xp.zeros(states.shape, dtype=bool)
    skip[:, 2:] = (states[:, 2:] != blank) & (states[:, 2:] != states[:, :-2])
    return states, skip


# ----------------------------------------------------------------------------------------------
# The forward-backward algorithm in log space, vectorized over the batch and the states.

def _log_softmax(xp, data, dtype):
    x = data.astype(dtype)
    shifted = x - x.max(axis=2, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=2, keepdims=True))


def _shifted(xp, array, by):
    """`array` (N, S) moved `by` states to the right along S, -inf filling the start."""
    out = xp.full(array.shape, -np.inf, dtype=array.dtype)
    out[:, by:] = array[:, :-by]
    return out


def _alphas(xp, emit, skip, data_lengths):
    """alpha[t + 1, n, s]: log-probability of the prefixes of length t + 1 ending in state s;
    alpha[0] starts in state 0 before any step. A sequence stops changing past its length."""
    steps = emit.shape[0]
    alpha = xp.full((steps + 1,) + emit.shape[1:], -np.inf, dtype=emit.dtype)
    alpha[0, :, 0] = 0
    for t in range(steps):
        prev = alpha[t]
        total = xp.logaddexp(prev, _shifted(xp, prev, 1))
        total = xp.logaddexp(total, xp.where(skip, _shifted(xp, prev, 2), -np.inf))
        alpha[t + 1] = xp.where((t < data_lengths)[:, None], total + emit[t], prev)
    return alpha


def _final_states(xp, label_lengths, num_states):
    """(N, S) mask of the two states an alignment may end in: the last label, the blank after."""
    last = 2 * label_lengths
    states = xp.arange(num_states)[None, :]
    return (states == last[:, None]) | ((states == last[:, None] - 1) & (last[:, None] > 0))


def _log_likelihood(xp, alpha_end, final):
    masked = xp.where(final, alpha_end, -np.inf)
    top = masked.max(axis=1)
    feasible = xp.isfinite(top)
    safe_top = xp.where(feasible, top, 0)
    total = xp.exp(masked - safe_top[:, None]).sum(axis=1)
    return xp.where(feasible, safe_top + xp.log(xp.where(feasible, total, 1)), -np.inf)


def _betas(xp, emit, skip, data_lengths, final):
    """beta[t, n, s]: log-probability of emitting steps t+1 .. length-1 from state s at t."""
    steps = emit.shape[0]
    at_end = xp.where(final, 0.0, -np.inf).astype(emit.dtype)
    beta = xp.empty_like(emit)
    beta[steps - 1] = at_end
    skip_from = _shifted_left(xp, skip, 2, False)
    for t in range(steps - 2, -1, -1):
        ahead = beta[t + 1] + emit[t + 1]
        total = xp.logaddexp(ahead, _shifted_left(xp, ahead, 1, -np.inf))
        total = xp.logaddexp(total, xp.where(skip_from, _shifted_left(xp, ahead, 2, -np.inf),
                                             -np.inf))
        beta[t] = xp.where((t >= data_lengths - 1)[:, None], at_end, total)
    return beta


def _shifted_left(xp, array, by, fill):
    out = xp.full(array.shape, fill, dtype=array.dtype)
    out[:, :-by] = array[:, by:]
    return out


def _prepare(xp, attrs, ins, safe):
    """Log-probabilities (T, N, C), state emissions (T, N, S), states, skips and lengths."""
    data, label = ins[0], ins[1]
    dtype = accumulation_dtype(data.dtype, safe)
    data_lengths, label_lengths = _lengths(xp, attrs, ins)
    states, skip = _extended_labels(xp, attrs, label, label_lengths, data.shape[2])
    logp = _log_softmax(xp, data, dtype)
    index = xp.broadcast_to(states[None], (data.shape[0],) + states.shape)
    emit = xp.take_along_axis(logp, index, axis=2)
    return logp, emit, states, skip, data_lengths, label_lengths


def _kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    _, emit, states, skip, data_lengths, label_lengths = _prepare(
        xp, attrs, ins, ctx.safe_accumulation)
    alpha = _alphas(xp, emit, skip, data_lengths)
    final = _final_states(xp, label_lengths, states.shape[1])
    outs[0][...] = -_log_likelihood(xp, alpha[-1], final)


def _data_gradient(xp, attrs, ins, safe):
    """d loss / d data (T, N, C): softmax minus the posterior of each class at each step."""
    logp, emit, states, skip, data_lengths, label_lengths = _prepare(xp, attrs, ins, safe)
    final = _final_states(xp, label_lengths, states.shape[1])
    alpha = _alphas(xp, emit, skip, data_lengths)
    log_likelihood = _log_likelihood(xp, alpha[-1], final)
    feasible = xp.isfinite(log_likelihood)
    safe = xp.where(feasible, log_likelihood, 0)
    beta = _betas(xp, emit, skip, data_lengths, final)
    occupancy = xp.exp(alpha[1:] + beta - safe[None, :, None])
    posterior = xp.zeros(logp.shape, dtype=logp.dtype)
    rows = xp.arange(states.shape[0])
    for s in range(states.shape[1]):     # within one state each row adds to one class
        posterior[:, rows, states[:, s]] += occupancy[:, :, s]
    active = (xp.arange(logp.shape[0])[:, None] < data_lengths[None, :]) & feasible[None, :]
    return xp.where(active[:, :, None], xp.exp(logp) - posterior, 0)


def _backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, label, [data_lengths], [label_lengths]) -> data gradient."""
    head, rest = ins[0], ins[1:]
    grad = _data_gradient(ctx.xp, attrs, rest, ctx.safe_accumulation)
    outs[0][...] = grad * head.astype(grad.dtype)[None, :, None]


def _gradient(F, attrs, inputs, outputs, out_grads):
    grad = F._backward_CTCLoss(out_grads[0], *inputs, **attrs)
    return [grad] + [None] * (len(inputs) - 1)


register('CTCLoss', _kernel, infer_shape=_infer,
         infer_type=typed_like_first(free=(1, 2, 3)), inputs=_input_names,
         outputs=('output',), params=PARAMS, gradient=_gradient,
         aliases=('ctc_loss', '_contrib_CTCLoss', '_contrib_ctc_loss'),
         doc='Connectionist temporal classification loss -log p(label | data) of (T, N, C) '
             'activations and (N, L) padded labels; output (N,).')

register('_backward_CTCLoss', _backward_kernel,
         inputs=lambda attrs: ['out_grad'] + _input_names(attrs), outputs=('data_grad',),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         params=PARAMS, aliases=('_backward_ctc_loss',))
