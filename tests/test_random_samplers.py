"""mx.random's samplers draw from the distributions they name: first two moments within a
few standard errors (test_utils.mean_check / var_check), and shuffle permutes."""
import math

import numpy as np
import pytest

import ember as mx
from ember.test_utils import mean_check, var_check

N = 20000


def _draw(sampler, **params):
    return lambda n: sampler(shape=(n,), dtype='float64', **params).asnumpy()


# (sampler, parameters, mean, standard deviation)
CASES = [
    (mx.random.exponential, {'scale': 2.0}, 2.0, 2.0),
    (mx.random.gamma, {'alpha': 3.0, 'beta': 0.5}, 1.5, math.sqrt(3.0) * 0.5),
    (mx.random.poisson, {'lam': 4.0}, 4.0, 2.0),
    # failures before the k-th success
    (mx.random.negative_binomial, {'k': 5, 'p': 0.4}, 5 * 0.6 / 0.4,
     math.sqrt(5 * 0.6) / 0.4),
    # mean mu, variance mu + alpha * mu^2
    (mx.random.generalized_negative_binomial, {'mu': 3.0, 'alpha': 0.5}, 3.0,
     math.sqrt(3.0 + 0.5 * 9.0)),
]


@pytest.mark.parametrize('sampler, params, mean, std', CASES,
                         ids=[case[0].__name__ for case in CASES])
def test_moments(sampler, params, mean, std):
    mx.random.seed(11)
    draw = _draw(sampler, **params)
    assert mean_check(draw, mean, std, nsamples=N)
    assert var_check(lambda n: draw(n) - mean, std, nsamples=N)


def test_shuffle_permutes_the_first_axis():
    mx.random.seed(2)
    data = mx.nd.arange(20).reshape((10, 2))
    shuffled = mx.random.shuffle(data).asnumpy()
    assert sorted(shuffled[:, 0].tolist()) == list(range(0, 20, 2))
    np.testing.assert_array_equal(shuffled[:, 1], shuffled[:, 0] + 1)
    assert shuffled[:, 0].tolist() != list(range(0, 20, 2))
