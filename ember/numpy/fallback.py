"""NumPy's functions that ``mx.np`` offers on host copies of its arrays (MXNet's
``mxnet.numpy.fallback``): they take and give ``mx.np`` arrays and record no gradient.
Functions that NumPy itself no longer has (``alltrue``, ``in1d``, the financial functions) are
written here.

>>> from ember import numpy as np
>>> np.isclose(np.array([1.0, 2.0]), np.array([1.0, 2.1]))
array([ True, False])
>>> round(float(np.npv(0.1, [-100, 60, 60])), 4)
4.1322
"""
from __future__ import annotations

import inspect

import numpy as onp

from ember.numpy import _op
from ember.numpy.multiarray import fallback

__all__ = ['allclose', 'alltrue', 'apply_along_axis', 'apply_over_axes', 'argpartition',
           'argwhere', 'array_equal', 'array_equiv', 'choose', 'compress', 'corrcoef',
           'correlate', 'count_nonzero', 'cov', 'digitize', 'divmod', 'extract', 'flatnonzero',
           'float_power', 'frexp', 'heaviside', 'histogram2d', 'histogram_bin_edges',
           'histogramdd', 'i0', 'in1d', 'interp', 'intersect1d', 'isclose', 'isin', 'ix_',
           'lexsort', 'min_scalar_type', 'mirr', 'modf', 'msort', 'nanargmax', 'nanargmin',
           'nancumprod', 'nancumsum', 'nanmax', 'nanmedian', 'nanmin', 'nanpercentile',
           'nanprod', 'nanquantile', 'ndim', 'npv', 'partition', 'piecewise', 'packbits',
           'poly', 'polyadd', 'polydiv', 'polyfit', 'polyint', 'polymul', 'polysub', 'positive',
           'ppmt', 'promote_types', 'ptp', 'pv', 'rate', 'real', 'result_type', 'rollaxis',
           'roots', 'searchsorted', 'select', 'setdiff1d', 'setxor1d', 'signbit', 'size',
           'sometrue', 'spacing', 'take_along_axis', 'trapz', 'tril_indices_from', 'trim_zeros',
           'triu_indices_from', 'union1d', 'unpackbits', 'unwrap', 'vander']

# Also in MXNet's module, though not in its __all__.
_MORE = ['nanstd', 'nansum', 'nanvar', 'pmt']


# ----------------------------------------------------------------------------------------------
# Functions NumPy removed: written from their definitions.

def _in1d(ar1, ar2, assume_unique=False, invert=False):
    return onp.isin(onp.ravel(ar1), ar2, assume_unique=assume_unique, invert=invert)


def _when(when):
    if isinstance(when, str):
        return {'end': 0, 'begin': 1}[when]
    return when


def _npv(rate, values):
    values = onp.atleast_1d(values)
    return onp.sum(values / (1 + rate) ** onp.arange(values.shape[-1]), axis=-1)


def _fv(rate, nper, pmt, pv, when='end'):
    when = _when(when)
    growth = (1 + rate) ** nper
    with onp.errstate(divide='ignore', invalid='ignore'):
        factor = onp.where(rate == 0, nper, (1 + rate * when) * (growth - 1) / onp.where(
            rate == 0, 1, rate))
    return -(pv * growth + pmt * factor)


def _pv(rate, nper, pmt, fv=0, when='end'):
    when = _when(when)
    growth = (1 + rate) ** nper
    with onp.errstate(divide='ignore', invalid='ignore'):
        factor = onp.where(rate == 0, nper, (1 + rate * when) * (growth - 1) / onp.where(
            rate == 0, 1, rate))
    return -(fv + pmt * factor) / growth


def _pmt(rate, nper, pv, fv=0, when='end'):
    when = _when(when)
    growth = (1 + rate) ** nper
    with onp.errstate(divide='ignore', invalid='ignore'):
        factor = onp.where(rate == 0, nper, (1 + rate * when) * (growth - 1) / onp.where(
            rate == 0, 1, rate))
    return -(fv + pv * growth) / factor


def _ppmt(rate, per, nper, pv, fv=0, when='end'):
    """The principal part of payment number `per`: the payment less its interest."""
    when = _when(when)
    total = _pmt(rate, nper, pv, fv, when)
    interest = _fv(rate, per - 1, total, pv, when) * rate
    interest = onp.where(when == 1, interest / (1 + rate), interest)
    interest = onp.where(onp.logical_and(when == 1, per == 1), 0, interest)
    return total - interest


def _rate(nper, pmt, pv, fv, when='end', guess=None, tol=None, maxiter=100):
    """The interest rate per period, by Newton's iteration from `guess`."""
    when = _when(when)
    rate, tol = (0.1 if guess is None else guess), (1e-6 if tol is None else tol)
    for _ in range(maxiter):
        growth, previous = (rate + 1) ** nper, (rate + 1) ** (nper - 1)
        value = fv + growth * pv + pmt * (growth - 1) * (rate * when + 1) / rate
        slope = (nper * previous * pv - pmt * (growth - 1) * (rate * when + 1) / rate ** 2
                 + nper * pmt * previous * (rate * when + 1) / rate
                 + pmt * (growth - 1) * when / rate)
        step = value / slope
        rate = rate - step
        if onp.all(onp.abs(step) < tol):
            return rate
    return onp.nan


def _mirr(values, finance_rate, reinvest_rate):
    values = onp.asarray(values, dtype=onp.float64)
    count = values.size
    gains, losses = values > 0, values < 0
    if not (gains.any() and losses.any()):
        return onp.nan
    numerator = onp.abs(_npv(reinvest_rate, values * gains))
    denominator = onp.abs(_npv(finance_rate, values * losses))
    return (numerator / denominator) ** (1 / (count - 1)) * (1 + reinvest_rate) - 1


def _msort(a):
    return onp.sort(a, axis=0)


_WRITTEN = {'alltrue': onp.all, 'sometrue': onp.any, 'pmt': _pmt, 'in1d': _in1d, 'npv': _npv,
            'pv': _pv, 'ppmt': _ppmt, 'rate': _rate, 'mirr': _mirr, 'msort': _msort,
            'trapz': getattr(onp, 'trapezoid', None)}

# Keywords of NumPy 1.x that NumPy 2 renamed (or that never had an effect and were removed).
_RENAMED = {'interpolation': 'method', 'normed': 'density'}
_NO_EFFECT = {'corrcoef': ('bias', 'ddof')}


def _with_old_keywords(name, function):
    def call(*args, **kwargs):
        for key in _NO_EFFECT.get(name, ()):
            kwargs.pop(key, None)
        for old, new in _RENAMED.items():
            if old in kwargs and new not in inspect.signature(function).parameters:
                continue
            if old in kwargs:
                kwargs[new] = kwargs.pop(old)
        return function(*args, **kwargs)
    return call


for _name in __all__ + _MORE:
    _function = getattr(onp, _name, None)
    if _function is None:
        _function = _WRITTEN[_name]
    globals()[_name] = fallback(_with_old_keywords(_name, _function), _name)

# Where mx.np has a function of its own (with gradients, on the engine), this module holds it.
for _name in __all__ + _MORE:
    _native = getattr(_op, _name, None)
    if _native is not None and getattr(_native, '__module__', '') == _op.__name__:
        globals()[_name] = _native
