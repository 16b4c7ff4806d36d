"""Control flow (foreach, while_loop, cond): imperatively, as symbols bound by the executor,
and inside hybridized Gluon blocks, with gradients through the loops."""
from __future__ import annotations

import numpy as np
import pytest

import ember as mx
from ember.gluon import nn


def _grads(fn, *values):
    """fn(*NDArrays) under autograd: (outputs, gradients of sum(out * head) per input)."""
    arrays = [mx.nd.array(v, dtype='float64') for v in values]
    for a in arrays:
        a.attach_grad()
    with mx.autograd.record():
        outs = fn(*arrays)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    heads = [mx.nd.array(np.arange(o.size).reshape(o.shape) % 3 + 1.0, dtype='float64')
             for o in outs]
    mx.autograd.backward(list(outs), heads)
    return [o.asnumpy() for o in outs], [a.grad.asnumpy() for a in arrays], \
        [h.asnumpy() for h in heads]


def _bound(fn, values):
    """fn(*Symbols) bound by the executor: (outputs, gradients for the same heads)."""
    names = [f'in{i}' for i in range(len(values))]
    outs = fn(*[mx.sym.var(n) for n in names])
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    group = mx.sym.Group(list(outs))
    args = {n: mx.nd.array(v, dtype='float64') for n, v in zip(names, values)}
    grads = {n: mx.nd.zeros(np.shape(v), dtype='float64') for n, v in zip(names, values)}
    exe = group.bind(mx.cpu(), args, args_grad=grads)
    results = [o.asnumpy() for o in exe.forward(is_train=True)]
    exe.backward([mx.nd.array(np.arange(r.size).reshape(r.shape) % 3 + 1.0, dtype='float64')
                  for r in results])
    return results, [grads[n].asnumpy() for n in names]


def rnn_step(F, x, h, w):
    new = F.tanh(F.dot(x, w) + h)
    return new * 2, new


def rnn_foreach(F, data, init, w):
    return F.contrib.foreach(lambda x, h: rnn_step(F, x, h, w), data, init)


RNG = np.random.default_rng(0)
DATA, INIT, WEIGHT = RNG.normal(size=(4, 2, 3)), RNG.normal(size=(2, 5)), RNG.normal(size=(3, 5))


def test_foreach_imperative_matches_numpy():
    outs, grads, heads = _grads(lambda d, h, w: list(rnn_foreach(mx.nd, d, h, w)), DATA, INIT,
                                WEIGHT)
    h, steps = INIT, []
    for x in DATA:
        h = np.tanh(x @ WEIGHT + h)
        steps.append(2 * h)
    np.testing.assert_allclose(outs[0], np.stack(steps), rtol=1e-12)
    np.testing.assert_allclose(outs[1], h, rtol=1e-12)


def test_foreach_symbol_matches_imperative_with_gradients():
    want, want_grads, _ = _grads(lambda d, h, w: list(rnn_foreach(mx.nd, d, h, w)), DATA,
                                 INIT, WEIGHT)
    got, got_grads = _bound(lambda d, h, w: list(rnn_foreach(mx.sym, d, h, w)),
                            [DATA, INIT, WEIGHT])
    for g, w in zip(got + got_grads, want + want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_foreach_cuts_outer_computations_out_of_the_body():
    data, bias = mx.sym.var('data'), mx.sym.var('bias')
    doubled = bias * 2
    outs, _ = mx.sym.contrib.foreach(lambda x, s: (x + doubled, s), data, mx.sym.var('s'))
    body = outs.to_graph().nodes[-1].attrs['subgraph'].graph
    inside = [n.op.name for n in body.nodes if n.op is not None]
    assert len(inside) == 1 and '_mul_scalar' not in inside     # bias * 2 runs once, outside
    assert set(outs.list_arguments()) == {'data', 's', 'bias'}


def test_while_loop_imperative_and_symbolic_agree():
    def cond(i, s):
        return i < 3

    def func(i, s):
        return [s * s], [i + 1, s * 1.5]

    loop = (np.array([0.0]), np.array([0.7]))
    nd_out, nd_grads, _ = _grads(
        lambda i, s: sum([list(x) if isinstance(x, list) else [x] for x in
                          mx.nd.contrib.while_loop(cond, func, [i, s], max_iterations=5)], []),
        *loop)
    sym_out, sym_grads = _bound(
        lambda i, s: sum([list(x) if isinstance(x, list) else [x] for x in
                          mx.sym.contrib.while_loop(cond, func, [i, s], max_iterations=5)],
                         []), list(loop))
    np.testing.assert_allclose(nd_out[0].ravel(), [0.49, 0.49 * 2.25, 0.49 * 2.25 ** 2, 0, 0])
    for g, w in zip(sym_out + sym_grads[1:], nd_out + nd_grads[1:]):
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize('sign', [1.0, -1.0])
def test_cond_runs_the_branch_taken_and_its_gradient(sign):
    values = sign * np.array([0.5, 2.0])

    def fn(F, a):
        return F.contrib.cond(F.sum(a) > 0, lambda: a * a, lambda: a * 3)

    want, want_grads, _ = _grads(lambda a: fn(mx.nd, a), values)
    got, got_grads = _bound(lambda a: fn(mx.sym, a), [values])
    expected = values * values if sign > 0 else values * 3
    np.testing.assert_allclose(got[0], expected)
    np.testing.assert_allclose(got_grads[0], want_grads[0])


class Recurrent(mx.gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = nn.Dense(4, in_units=3)

    def hybrid_forward(self, F, data, state):
        def step(x, h):
            new = F.tanh(self.dense(x) + h)
            return new, new
        outs, last = F.contrib.foreach(step, data, state)
        return outs.sum() + last.sum()


def test_hybridized_foreach_trains_like_the_imperative_block():
    results = []
    for hybridize in (False, True):
        net = Recurrent()
        net.initialize(mx.init.Xavier(rnd_type='gaussian'))
        for param, value in zip(net.collect_params().values(), (RNG_W, RNG_B)):
            param.set_data(mx.nd.array(value))
        if hybridize:
            net.hybridize()
        with mx.autograd.record():
            loss = net(mx.nd.array(SEQ), mx.nd.zeros((2, 4)))
        loss.backward()
        results.append([loss.asnumpy()] + [p.grad().asnumpy()
                                           for p in net.collect_params().values()])
    for eager, hybrid in zip(*results):
        np.testing.assert_allclose(hybrid, eager, rtol=1e-5, atol=1e-6)


RNG_W = np.random.default_rng(1).normal(size=(4, 3)) * 0.5
RNG_B = np.random.default_rng(2).normal(size=(4,)) * 0.1
SEQ = np.random.default_rng(3).normal(size=(5, 2, 3))


class DropoutLoop(mx.gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.scale = self.params.get('scale', shape=(1,), init=mx.init.One())

    def hybrid_forward(self, F, data, scale):
        outs, _ = F.contrib.foreach(
            lambda x, s: (F.Dropout(F.broadcast_mul(x, scale), p=0.5), s), data,
            F.zeros((1,)))
        return outs


def test_dropout_inside_a_hybridized_loop_keeps_its_masks_for_backward():
    net = DropoutLoop()
    net.initialize()
    net.hybridize()
    data = mx.nd.array(np.random.default_rng(4).uniform(1, 2, size=(6, 8)))
    with mx.autograd.record():
        out = net(data)
    out.backward(mx.nd.ones_like(out))
    kept = out.asnumpy()
    assert 0 < (kept == 0).mean() < 1
    # out = mask * x * scale / (1 - p) with scale 1: d sum(out) / d scale = sum(out)
    np.testing.assert_allclose(net.scale.grad().asnumpy(), [kept.sum()], rtol=1e-5)


def test_nested_foreach():
    def outer(F, data):
        def row(r, acc):
            inner, total = F.contrib.foreach(lambda x, s: (x * 2, s + x), r,
                                             F.zeros((1,), dtype='float64'))
            return inner, acc + total
        return list(F.contrib.foreach(row, data, F.zeros((1,), dtype='float64')))

    values = np.arange(6.0).reshape(2, 3)
    want, want_grads, _ = _grads(lambda d: outer(mx.nd, d), values)
    got, got_grads = _bound(lambda d: outer(mx.sym, d), [values])
    np.testing.assert_allclose(got[0], want[0])
    np.testing.assert_allclose(got[1], [15.0])
    np.testing.assert_allclose(got_grads[0], want_grads[0])


class Halving(mx.gluon.HybridBlock):
    """Halves its input while its sum exceeds a bound (at most 6 times), then doubles it back
    where the result went negative."""

    def hybrid_forward(self, F, x):
        _, (steps, value) = F.contrib.while_loop(
            lambda i, v: F.sum(v) > 1.0, lambda i, v: ([], [i + 1, v * 0.5]),
            [F.zeros((1,)), x], max_iterations=6)
        return F.contrib.cond(F.sum(value) < 0, lambda: value * 2, lambda: value + steps)


@pytest.mark.parametrize('values', [[3.0, 5.0], [-2.0, 0.5]])
def test_while_loop_and_cond_hybridize(values):
    results = []
    for hybridize in (False, True):
        net = Halving()
        if hybridize:
            net.hybridize()
        x = mx.nd.array(values)
        x.attach_grad()
        with mx.autograd.record():
            y = net(x)
        y.backward(mx.nd.ones_like(y))
        results.append((y.asnumpy(), x.grad.asnumpy()))
    np.testing.assert_allclose(results[1][0], results[0][0])
    np.testing.assert_allclose(results[1][1], results[0][1])


def test_symbol_files_holding_control_flow_say_they_cannot_load():
    outs, _ = mx.sym.contrib.foreach(lambda x, s: (x + s, s), mx.sym.var('d'), mx.sym.var('s'))
    with pytest.raises(mx.base.EmberError, match='cannot be loaded yet'):
        mx.sym.load_json(outs.tojson())
