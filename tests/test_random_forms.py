"""Every public form of the random samplers draws from the right distribution.

One row per distribution, with its parameters under each spelling (``mx.nd.random.exponential``
takes a scale, ``random_exponential`` a rate) and its mean and variance. Each form — the
``mx.nd.random`` / ``mx.sym.random`` functions with numbers, with arrays or symbols, and
``_like``; the flat operators (``random_normal`` and its alias ``normal``, ``sample_normal``)
in ``mx.nd`` and ``mx.sym`` — draws a few thousand values from a seeded stream, whose mean and
variance must be the distribution's within a few standard errors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import ember as mx
from ember.op import registry

DRAWS = 4000


@dataclass(frozen=True)
class Law:
    name: str            # mx.nd.random.<name>
    api: dict            # its parameters there
    flat: dict           # the parameters of _random_<name>, _sample_<name> and *_like
    mean: float
    var: float
    sample: bool = True  # has a _sample_<name> operator (per-element parameters)
    like: bool = True    # has a _random_<name>_like operator


LAWS = [
    Law('uniform', dict(low=2.0, high=4.0), dict(low=2.0, high=4.0), 3.0, 4 / 12),
    Law('normal', dict(loc=1.0, scale=2.0), dict(loc=1.0, scale=2.0), 1.0, 4.0),
    Law('exponential', dict(scale=2.0), dict(lam=0.5), 2.0, 4.0),
    Law('gamma', dict(alpha=2.0, beta=3.0), dict(alpha=2.0, beta=3.0), 6.0, 18.0),
    Law('poisson', dict(lam=4.0), dict(lam=4.0), 4.0, 4.0),
    Law('negative_binomial', dict(k=3, p=0.6), dict(k=3, p=0.6), 2.0, 3 * 0.4 / 0.36),
    Law('generalized_negative_binomial', dict(mu=2.5, alpha=0.3), dict(mu=2.5, alpha=0.3),
        2.5, 2.5 + 0.3 * 2.5 ** 2),
    Law('randint', dict(low=0, high=10), dict(low=0, high=10), 4.5, 99 / 12, sample=False,
        like=False),
]
# sample_normal's parameters are called mu and sigma; the others keep their names
SAMPLE_NAMES = {'normal': ('mu', 'sigma')}


def _public(op_name):
    """Every public mx.nd / mx.sym name of the operator registered as `op_name`."""
    op = registry.get(op_name)
    return sorted(name for name, other in registry.all_ops().items()
                  if other is op and not name.startswith('_'))


def _check(law, values, label):
    values = np.asarray(values, dtype=np.float64).ravel()
    assert values.size == DRAWS, f'{label}: {values.size} draws'
    error = 5 * np.sqrt(law.var / DRAWS)
    assert abs(values.mean() - law.mean) < error, f'{label}: mean {values.mean()}'
    assert abs(values.var() / law.var - 1) < 0.15, f'{label}: variance {values.var()}'


def _run(symbol, **arrays):
    return symbol.bind(mx.cpu(), arrays).forward()[0].asnumpy()


def _forms(law):
    """(label, thunk returning draws) of every form of `law`."""
    sample = [np.array([v]) for v in law.flat.values()]
    forms = [(f'nd.random.{law.name}',
              lambda: getattr(mx.nd.random, law.name)(**law.api, shape=DRAWS)),
             (f'sym.random.{law.name}',
              lambda: _run(getattr(mx.sym.random, law.name)(**law.api, shape=DRAWS)))]
    for name in _public(f'_random_{law.name}'):
        forms += [(f'nd.{name}', lambda n=name: getattr(mx.nd, n)(**law.flat, shape=DRAWS)),
                  (f'sym.{name}',
                   lambda n=name: _run(getattr(mx.sym, n)(**law.flat, shape=DRAWS)))]
    if law.sample:
        names = SAMPLE_NAMES.get(law.name, tuple(law.flat))
        inputs = {n: mx.nd.array(v) for n, v in zip(names, sample)}
        for name in _public(f'_sample_{law.name}'):
            forms += [(f'nd.{name}', lambda n=name: getattr(mx.nd, n)(**inputs, shape=DRAWS)),
                      (f'sym.{name}', lambda n=name: _run(getattr(mx.sym, n)(
                          *[mx.sym.var(k) for k in names], shape=DRAWS), **inputs))]
        api = {k: mx.nd.array([v]) for k, v in law.api.items()}
        forms.append((f'sym.random.{law.name} of symbols', lambda: _run(
            getattr(mx.sym.random, law.name)(*[mx.sym.var(k) for k in api], shape=DRAWS),
            **api)))
    if law.like:
        zeros = mx.nd.zeros((DRAWS,))
        forms += [(f'nd.random.{law.name}_like',
                   lambda: getattr(mx.nd.random, f'{law.name}_like')(zeros, **law.flat)),
                  (f'sym.random.{law.name}_like', lambda: _run(
                      getattr(mx.sym.random, f'{law.name}_like')(mx.sym.var('x'), **law.flat),
                      x=zeros))]
    return forms


@pytest.mark.parametrize('law', LAWS, ids=lambda law: law.name)
def test_every_form_draws_from_its_distribution(law):
    mx.random.seed(11)
    for label, draw in _forms(law):
        values = draw()
        _check(law, values.asnumpy() if isinstance(values, mx.nd.NDArray) else values, label)


def test_randn_and_shuffle_symbols():
    mx.random.seed(12)
    law = Law('normal', {}, {}, 0.0, 1.0)
    _check(law, _run(mx.sym.random.randn(DRAWS // 10, 10)), 'sym.random.randn')
    data = mx.nd.array(np.arange(20.0).reshape(10, 2))
    shuffled = _run(mx.sym.random.shuffle(mx.sym.var('x')), x=data)
    assert sorted(shuffled[:, 0].tolist()) == list(range(0, 20, 2))
    assert (shuffled[:, 1] == shuffled[:, 0] + 1).all()     # rows move whole


@pytest.mark.parametrize('form', ['nd.sample_multinomial', 'sym.sample_multinomial',
                                  'sym.random.multinomial'])
def test_multinomial_forms_draw_the_row_probabilities(form):
    mx.random.seed(13)
    probs = mx.nd.array([[0.1, 0.6, 0.3], [0.5, 0.0, 0.5]])
    if form == 'nd.sample_multinomial':
        picks = mx.nd.sample_multinomial(probs, shape=DRAWS).asnumpy()
    else:
        fn = mx.sym.sample_multinomial if form == 'sym.sample_multinomial' \
            else mx.sym.random.multinomial
        picks = _run(fn(mx.sym.var('p'), shape=DRAWS, get_prob=False), p=probs)
    assert picks.shape == (2, DRAWS)
    for row, expected in zip(picks, probs.asnumpy()):
        frequencies = np.bincount(row.astype(int), minlength=3) / DRAWS
        np.testing.assert_allclose(frequencies, expected, atol=0.035)


def _exercised():
    names = {'ember.symbol.random.randn', 'ember.symbol.random.shuffle',
             'ember.ndarray.sample_multinomial', 'ember.symbol.sample_multinomial',
             'ember.symbol.random.multinomial'}
    for law in LAWS:
        for label, _ in _forms(law):
            space, _, rest = label.partition('.')
            names.add(f'ember.{"ndarray" if space == "nd" else "symbol"}.{rest.split()[0]}')
    return sorted(names)


# The samplers these tests run, for `python -m ember api-coverage`.
EXERCISED_API = _exercised()
