"""Special functions (erf, erfinv, gamma, gammaln, digamma) on backend arrays.

NumPy has none of them. SciPy's are used when it is installed; otherwise the standard
library's, applied element-wise, and Newton steps for erfinv. Other backends compute on the host.
"""
from __future__ import annotations

import math

import numpy as np

_SQRT_PI = math.sqrt(math.pi)


def _scipy_special():
    try:
        from scipy import special
    except ImportError:
        return None
    return special


def _vectorize(fn):
    """A NumPy function (float64 results) from a scalar one."""
    ufunc = np.frompyfunc(fn, 1, 1)

    def apply(x):
        with np.errstate(all='ignore'):  # inf and nan are the intended results at poles
            return ufunc(x.astype(np.float64)).astype(np.float64)
    return apply


def _scalar_gamma(value):
    try:
        return math.gamma(value)
    except (ValueError, OverflowError):
        # C's tgamma: +-inf at zero and on overflow, nan at the negative poles
        if value == 0:
            return math.copysign(math.inf, value)
        return math.nan if value < 0 and value == int(value) else math.inf


def _scalar_lgamma(value):
    try:
        return math.lgamma(value)
    except (ValueError, OverflowError):
        return math.inf


def _on_host(numpy_fn):
    """Run a NumPy implementation for any backend, casting back to the input's float dtype."""
    def apply(xp, x):
        host = x if xp is np else x.get()
        result = numpy_fn(np.asarray(host, dtype=_float_of(host.dtype)))
        result = result.astype(_float_of(host.dtype), copy=False)
        return result if xp is np else xp.asarray(result)
    return apply


def _float_of(dtype):
    dtype = np.dtype(dtype)
    return dtype if dtype.kind == 'f' else np.dtype(np.float64)


def _numpy_erf(x):
    special = _scipy_special()
    return special.erf(x) if special is not None else _vectorize(math.erf)(x)


def _numpy_gamma(x):
    special = _scipy_special()
    return special.gamma(x) if special is not None else _vectorize(_scalar_gamma)(x)


def _numpy_gammaln(x):
    special = _scipy_special()
    if special is not None:
        return special.gammaln(x)
    return _vectorize(_scalar_lgamma)(x)


def _numpy_erfinv(y):
    special = _scipy_special()
    if special is not None:
        return special.erfinv(y)
    y64 = y.astype(np.float64)
    with np.errstate(divide='ignore', invalid='ignore'):
        # Winitzki's closed form (relative error ~2e-3), then Newton steps on erf
        log_term = np.log1p(-y64 * y64)
        first = 2 / (math.pi * 0.147) + log_term / 2
        x = np.sign(y64) * np.sqrt(np.sqrt(first * first - log_term / 0.147) - first)
        for _ in range(4):
            step = (_numpy_erf(x) - y64) / (2 / _SQRT_PI * np.exp(-x * x))
            x = np.where(np.isfinite(step), x - step, x)
    return x


def _numpy_digamma(x):
    special = _scipy_special()
    if special is not None:
        return special.psi(x)
    x = x.astype(np.float64)
    with np.errstate(divide='ignore', invalid='ignore'):
        reflect = x < 0.5
        # psi(x) = psi(1 - x) - pi / tan(pi x) for small x, then recurrence up to x >= 6
        z = np.where(reflect, 1 - x, x)
        shift = np.zeros_like(z)
        while np.any(z < 6):
            small = z < 6
            shift -= np.where(small, 1 / z, 0)
            z = np.where(small, z + 1, z)
        inv2 = 1 / (z * z)
        series = np.log(z) - 0.5 / z - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (
            1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
        result = series + shift
        return np.where(reflect, result - math.pi / np.tan(math.pi * x), result)


erf = _on_host(_numpy_erf)
erfinv = _on_host(_numpy_erfinv)
gamma = _on_host(_numpy_gamma)
gammaln = _on_host(_numpy_gammaln)
digamma = _on_host(_numpy_digamma)
