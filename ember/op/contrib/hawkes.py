"""hawkesll: the log likelihood of multivariate Hawkes processes with exponential kernels.

Each process k of sample i has the intensity lda[i, k] + alpha[k] * beta[k] * s_k(t), where
the state s_k decays as exp(-beta[k] t) and jumps by 1 at each of its events. Events come as
left-aligned ragged rows of interarrival times (``lags``) and process ids (``marks``), the
first ``valid_length`` of each row counting; the observation window is (0, max_time]. The
outputs are the log likelihood per sample and the states at max_time. The recursion runs over
the events, vectorised over the samples; the gradients (for lda, alpha and beta, of the log
likelihood only, as in MXNet) are carried forward with it.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_contrib_hawkesll')
>>> ll, state = np.empty(1), np.empty((1, 1))
>>> op.kernel({}, [np.ones((1, 1)), np.zeros(1), np.ones(1), np.zeros((1, 1)), np.ones((1, 1)),
...                np.zeros((1, 1)), np.ones(1), np.full(1, 2.0)], [ll, state],
...           registry.KernelContext(None))
>>> ll                                      # one event of a Poisson process of rate 1 in 2
array([-2.])
"""
from __future__ import annotations

import numpy as np

from ember.op.host import register
from ember.op.registry import ShapeError

__all__ = ['log_likelihood']

_INPUTS = ('lda', 'alpha', 'beta', 'state', 'lags', 'marks', 'valid_length', 'max_time')


def log_likelihood(lda, alpha, beta, state, lags, marks, valid_length, max_time):
    """(log likelihood (N,), final states (N, K), and d ll_i / d lda, alpha, beta per sample
    i, each (N, K))."""
    lda, alpha, beta = (np.asarray(v, np.float64) for v in (lda, alpha, beta))
    n, k = lda.shape
    rows = np.arange(n)
    s = np.asarray(state, np.float64).copy()
    s_beta = np.zeros((n, k))                  # d s / d beta (each state, its own beta)
    last = np.zeros((n, k))
    t = np.zeros(n)
    ll = np.zeros(n)
    g_lda, g_alpha, g_beta = np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k))
    marks = np.asarray(marks).astype(np.int64)
    for step in range(lags.shape[1]):
        live = step < np.asarray(valid_length)
        c = marks[:, step]
        t = t + np.where(live, lags[:, step], 0)
        d = t - last[rows, c]
        a, b, sc, dsc = alpha[c], beta[c], s[rows, c], s_beta[rows, c]
        ed = np.exp(-b * d)
        lam = lda[rows, c] + a * b * sc * ed
        ll += np.where(live, np.log(lam) - lda[rows, c] * d - a * sc * (1 - ed), 0)
        dlam_db = a * sc * ed - a * b * sc * d * ed + a * b * ed * dsc
        dcomp_db = a * (dsc * (1 - ed) + sc * d * ed)
        np.add.at(g_lda, (rows[live], c[live]), (1 / lam - d)[live])
        np.add.at(g_alpha, (rows[live], c[live]), (b * sc * ed / lam - sc * (1 - ed))[live])
        np.add.at(g_beta, (rows[live], c[live]), (dlam_db / lam - dcomp_db)[live])
        s[rows[live], c[live]] = (1 + sc * ed)[live]
        s_beta[rows[live], c[live]] = (dsc * ed - sc * d * ed)[live]
        last[rows[live], c[live]] = t[live]
    d = np.asarray(max_time, np.float64)[:, None] - last
    ed = np.exp(-beta * d)
    ll -= (lda * d + alpha * s * (1 - ed)).sum(axis=1)
    g_lda -= d
    g_alpha -= s * (1 - ed)
    g_beta -= alpha * (s_beta * (1 - ed) + s * d * ed)
    return ll, ed * s, g_lda, g_alpha, g_beta


def _shape(attrs, in_shapes):
    lda = in_shapes[0]
    lags = in_shapes[4]
    if lda is None or lags is None:
        return list(in_shapes), [None, None]
    n, k = lda
    if len(lags) != 2 or lags[0] != n:
        raise ShapeError(f'lags must be (samples, events) with {n} samples, got {lags}')
    return [lda, (k,), (k,), (n, k), lags, lags, (n,), (n,)], [(n,), (n, k)]


def _type(attrs, dtypes):
    dtype = dtypes[0]
    marks = dtypes[5] or np.dtype(np.int32)
    return [dtype, dtype, dtype, dtype, dtype, marks, dtype, dtype], [dtype, dtype]


def _kernel(attrs, ins, outs, ctx):
    ll, state = log_likelihood(*ins)[:2]
    outs[0][...] = ll
    outs[1][...] = state


def _backward(attrs, ins, outs, ctx):
    grad = np.asarray(ins[0], np.float64)[:, None]
    _, _, g_lda, g_alpha, g_beta = log_likelihood(*ins[1:])
    outs[0][...] = g_lda * grad
    # alpha and beta are shared by the samples: their gradients sum the samples' weighted ones
    outs[1][...] = (g_alpha * grad).sum(axis=0)
    outs[2][...] = (g_beta * grad).sum(axis=0)
    for out in outs[3:]:
        out[...] = 0


register('_contrib_hawkesll', _kernel, inputs=_INPUTS, outputs=('output', 'state'),
         infer_shape=_shape, infer_type=_type,
         gradient=lambda F, attrs, ins, outs, og: list(F._contrib_backward_hawkesll(og[0], *ins)),
         doc='The log likelihood of Hawkes processes (background intensities lda, branching '
             'ratios alpha, decays beta) for ragged event sequences, and the final states.')
register('_contrib_backward_hawkesll', _backward, inputs=('out_grad',) + _INPUTS,
         outputs=tuple(f'{n}_grad' for n in _INPUTS),
         infer_shape=lambda attrs, shapes: (list(shapes), list(shapes[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='The gradients of hawkesll for lda, alpha and beta (of the log likelihood).')
