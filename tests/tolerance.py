"""Tolerances for float32 results of long sums, whatever order a kernel sums in.

oneDNN and Ember's compiled kernels pick their summation order by CPU (vector width, blocking,
threads), so a float32 sum of n terms can differ between machines by rounding errors that grow
with the magnitude of its terms, not of its result: a sum that cancels to 1e-3 from terms of
size 1 carries errors of order 1e-7 * (sum of |terms|). A fixed absolute tolerance that one CPU
meets can fail on another. These helpers scale the tolerance by the terms instead.

Rounding errors of either sign add up like a random walk, so the error of any order stays within
a few sqrt(n) * eps * sum|terms|: the bound below takes twice that, against each result's own
error, which still fails on any wrong term (an error of order |term|).
"""
import numpy as np

EPS32 = float(np.finfo(np.float32).eps)


def sum_tolerance(magnitude, terms, eps=EPS32):
    """Elementwise tolerance of a sum of `terms` terms whose absolute values add to `magnitude`."""
    return 2.0 * eps * np.sqrt(terms) * np.asarray(magnitude, dtype=np.float64)


def assert_sums_close(actual, expected, magnitude, terms, rtol=1e-5, eps=EPS32):
    """`actual` and `expected` agree within sum_tolerance (plus `rtol` of `expected`).

    `magnitude` is the sum of absolute terms of each element: for a bilinear operator such as a
    convolution or a matrix product, the operator applied to the absolute values of its inputs.
    """
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    allowed = sum_tolerance(magnitude, terms, eps) + rtol * np.abs(expected)
    error = np.abs(actual - expected)
    bad = ~(error <= allowed)
    if bad.any():
        where = tuple(int(i) for i in np.unravel_index(
            int(np.argmax(np.where(bad, error - allowed, -np.inf))), error.shape))
        raise AssertionError(
            f'{int(bad.sum())} of {error.size} elements differ by more than the sum tolerance '
            f'({terms} terms); worst at {where}: {float(actual[where])} against '
            f'{float(expected[where])}, allowed {allowed[where]:.3g} '
            f'(sum of |terms| {np.broadcast_to(magnitude, error.shape)[where]:.3g})')
