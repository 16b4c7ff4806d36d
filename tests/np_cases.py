"""The cases of the ``mx.np`` table test: every function of ``mx.np``, ``mx.np.linalg`` (and the
NumPy fallbacks) called on small arrays, with NumPy's function as the reference.

This module needs only NumPy, so ``tools/mxnet_np_reference.py`` can run the same calls under
MXNet 1.9.1 to record MXNet's dtypes and shapes (``tests/data/mxnet_np/``).

An argument is an :class:`Arr` (drawn per case from a seeded generator) or a plain value. A
case's reference is NumPy's function of the same name unless `ref` says otherwise; `grad`
names the arguments whose gradients are checked against finite differences (default: every
float array argument of a differentiable function; ``()`` for none).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Arr:
    """A random array argument: shape, dtype and how to draw it."""
    shape: tuple
    dtype: str = 'float32'
    kind: str = 'normal'
    low: float = -1.0
    high: float = 1.0

    def draw(self, rng, dtype=None):
        dtype = np.dtype(dtype or self.dtype)
        shape, size = self.shape, int(np.prod(self.shape))
        kind = self.kind
        if kind == 'normal':
            values = rng.standard_normal(shape)
        elif kind == 'uniform':
            values = rng.uniform(self.low, self.high, shape)
        elif kind == 'int':
            values = rng.integers(int(self.low), int(self.high), shape)
        elif kind == 'bool':
            values = rng.integers(0, 2, shape).astype(bool)
        elif kind == 'distinct':
            values = (rng.permutation(size).reshape(shape) - size / 2) * 0.37 + 0.05
        elif kind == 'away':
            values = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.3, 1.0, shape)
        elif kind == 'spd':
            m = rng.standard_normal(shape)
            values = m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])
        elif kind == 'wellcond':
            values = rng.standard_normal(shape) * 0.3 + np.eye(shape[-2], shape[-1]) * 2
        elif kind == 'offint':
            values = rng.integers(-3, 3, shape) + rng.uniform(0.1, 0.4, shape) * rng.choice(
                [-1.0, 1.0], shape)
        else:
            raise ValueError(kind)
        return np.asarray(values).astype(dtype)


def N(*shape, dtype='float32'):
    return Arr(shape, dtype)


def U(low, high, *shape, dtype='float32'):
    return Arr(shape, dtype, 'uniform', low, high)


def P(*shape, dtype='float32'):
    """Positive values in [0.5, 2)."""
    return U(0.5, 2.0, *shape, dtype=dtype)


def I(*shape, high=5, low=0, dtype='int32'):  # noqa: E743
    return Arr(shape, dtype, 'int', low, high)


def B(*shape):
    return Arr(shape, 'bool', 'bool')


def D(*shape, dtype='float32'):
    """Distinct values (no ties for sort, max, ...)."""
    return Arr(shape, dtype, 'distinct')


def W(*shape, dtype='float32'):
    """Values away from zero (no kink of abs, sign)."""
    return Arr(shape, dtype, 'away')


def SPD(n, *batch):
    return Arr(tuple(batch) + (n, n), 'float32', 'spd')


def M(*shape):
    """A well-conditioned matrix (near twice the identity)."""
    return Arr(shape, 'float32', 'wellcond')


def F(*shape):
    """Values 0.1-0.4 from the nearest integer (clear of rounding steps)."""
    return Arr(shape, 'float32', 'offint')


@dataclass(frozen=True)
class Case:
    name: str                        # 'sum', 'linalg.inv', ...
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    ref: Callable | None = None      # NumPy's function (default: the same name in numpy)
    grad: tuple | None = None        # argument positions to differentiate; () for none
    dtype: Any = None                # expected dtype name where MXNet's rule is not derived
    rtol: float = 1e-4
    tag: str = ''
    numpy_compare: bool = True       # compare values with the reference

    @property
    def id(self):
        return f'{self.name}-{self.tag}' if self.tag else self.name


def _numpy_attr(name):
    target = np
    for part in name.split('.'):
        target = getattr(target, part)
    return target


def reference(case):
    if case.ref is not None:
        return case.ref
    return _numpy_attr(case.name)


# ----------------------------------------------------------------------------------------------
# NumPy references for the functions NumPy lacks or defines differently

def svd_ref(a):
    return np.linalg.svd(a, full_matrices=False)


def np_trapz(*args, **kwargs):
    return np.trapezoid(*args, **kwargs)


def np_npv(rate, values):
    values = np.atleast_1d(values)
    return (values / (1 + rate) ** np.arange(values.shape[-1])).sum(axis=-1)


def annuity_present_value(rate, nper, pmt):
    """The value now of `nper` payments of `pmt` at the end of each period."""
    return -pmt * (1 - (1 + rate) ** -nper) / rate


def first_principal_payment(rate, per, nper, pv):
    """The principal part of the first of `nper` level payments repaying `pv`."""
    growth = (1 + rate) ** nper
    payment = -pv * rate * growth / (growth - 1)
    return payment + pv * rate


def modified_irr(values, finance_rate, reinvest_rate):
    """Gains carried forward at reinvest_rate against losses discounted at finance_rate."""
    n = len(values)
    gains = np.where(values > 0, values, 0) * (1 + reinvest_rate) ** np.arange(n - 1, -1, -1)
    losses = np.where(values < 0, values, 0) / (1 + finance_rate) ** np.arange(n)
    return (gains.sum() / -losses.sum()) ** (1 / (n - 1)) - 1


def split_ref(fn):
    return lambda *args, **kwargs: list(fn(*args, **kwargs))


UNARY_FLOAT = ['sin', 'cos', 'tan', 'arctan', 'sinh', 'cosh', 'tanh', 'arcsinh', 'exp',
               'expm1', 'degrees', 'radians', 'deg2rad', 'rad2deg', 'cbrt']
UNARY_POSITIVE = ['sqrt', 'log', 'log10', 'log2', 'log1p']
UNARY_SAME = ['negative', 'positive', 'square', 'absolute', 'abs', 'fabs']

CASES = []

for _name in UNARY_FLOAT:
    CASES.append(Case(_name, (N(2, 3),)))
    CASES.append(Case(_name, (I(2, 3),), tag='int'))
for _name in UNARY_POSITIVE:
    CASES.append(Case(_name, (P(2, 3),)))
    CASES.append(Case(_name, (I(2, 3, low=1),), tag='int'))
CASES += [
    Case('arcsin', (U(-0.9, 0.9, 2, 3),)),
    Case('arccos', (U(-0.9, 0.9, 2, 3),)),
    Case('arctanh', (U(-0.9, 0.9, 2, 3),)),
    Case('arccosh', (U(1.2, 3, 2, 3),)),
    Case('reciprocal', (W(2, 3),)),
    Case('reciprocal', (I(2, 3, low=1),), tag='int', grad=()),
]
for _name in UNARY_SAME:
    CASES.append(Case(_name, (W(2, 3),)))
    CASES.append(Case(_name, (I(2, 3, low=-4),), tag='int',
                      dtype='float32' if _name == 'fabs' else None))
CASES += [Case(_name, (F(2, 3),)) for _name in ('sign', 'rint', 'ceil', 'floor', 'trunc',
                                                 'fix')]
CASES += [Case(_name, (I(2, 3, low=-4),), tag='int', dtype='int32')
          for _name in ('sign', 'rint', 'ceil', 'floor', 'trunc', 'fix')]
CASES += [
    Case('around', (F(2, 3),), {'decimals': 1}),
    Case('round', (F(2, 3),)),
    Case('round_', (F(2, 3),), ref=np.round),
    Case('spacing', (N(2, 3),), grad=()),
    Case('i0', (N(2, 3),), grad=()),
    Case('signbit', (N(2, 3),), grad=()),
    Case('logical_not', (B(2, 3),)),
    Case('isnan', (Arr((2, 3), 'float32'),), grad=()),
    Case('isinf', (N(2, 3),), grad=()),
    Case('isfinite', (N(2, 3),), grad=()),
    Case('isposinf', (N(2, 3),), grad=()),
    Case('isneginf', (N(2, 3),), grad=()),
    Case('invert', (I(2, 3, low=-5),)),
    Case('bitwise_not', (I(2, 3, low=-5),)),
    Case('invert', (B(2, 3),), tag='bool'),
    Case('nan_to_num', (N(2, 3),)),
    Case('clip', (N(2, 3), -0.5, 0.5)),
    Case('clip', (I(2, 3), 1, 3), tag='int'),
]

BINARY_ARITH = ['add', 'subtract', 'multiply', 'maximum', 'minimum']
for _name in BINARY_ARITH:
    CASES.append(Case(_name, (D(2, 3), D(3))))
    CASES.append(Case(_name, (I(2, 3), I(2, 1)), tag='int'))
    CASES.append(Case(_name, (N(2, 3), 1.5), tag='scalar'))
    CASES.append(Case(_name, (2.5, N(3)), tag='rscalar'))
    CASES.append(Case(_name, (I(3), N(3)), tag='mixed'))
    CASES.append(Case(_name, (I(3), 2), tag='int-scalar'))
CASES += [
    Case('true_divide', (N(2, 3), W(3))),
    Case('divide', (N(2, 3), W(3))),
    Case('true_divide', (I(2, 3), I(3, low=1)), tag='int'),
    Case('divide', (N(3), 2.0), tag='scalar'),
    Case('divide', (2.0, W(3)), tag='rscalar'),
    Case('mod', (U(0.5, 3, 2, 3), U(0.7, 1.3, 3))),
    Case('remainder', (U(0.5, 3, 2, 3), U(0.7, 1.3, 3))),
    Case('mod', (I(2, 3, low=-6, high=6), I(3, low=1)), tag='int'),
    Case('mod', (U(0.5, 3, 3), 0.75), tag='scalar'),
    Case('floor_divide', (I(2, 3, low=-6, high=6), I(3, low=1)), tag='int'),
    Case('floor_divide', (U(0.1, 3, 3), 0.7), tag='scalar', grad=()),
    Case('power', (P(2, 3), N(3))),
    Case('power', (P(3), 2.0), tag='scalar'),
    Case('power', (2.0, N(3)), tag='rscalar'),
    Case('power', (I(3, low=1), I(3)), tag='int'),
    Case('float_power', (P(3), N(3)), dtype='float64'),
    Case('arctan2', (N(2, 3), W(3))),
    Case('hypot', (W(2, 3), W(3))),
    Case('copysign', (W(2, 3), W(3)), grad=(0,)),
    Case('ldexp', (N(3), I(3)), grad=(0,)),
    Case('heaviside', (W(3), N(3))),
    Case('lcm', (I(3, low=1, high=9), I(3, low=1, high=9))),
    Case('bitwise_and', (I(3, high=16), I(3, high=16))),
    Case('bitwise_or', (I(3, high=16), I(3, high=16))),
    Case('bitwise_xor', (I(3, high=16), I(3, high=16))),
    Case('bitwise_and', (B(3), B(3)), tag='bool'),
]
CASES += [
    Case('arctan2', (N(3), 0.5), tag='scalar'),
    Case('arctan2', (0.5, W(3)), tag='rscalar'),
    Case('hypot', (W(3), 2.0), tag='scalar'),
    Case('copysign', (W(3), -1.0), tag='scalar'),
    Case('float_power', (P(3), 1.5), tag='scalar', dtype='float64'),
    Case('ldexp', (N(3), 2), tag='scalar'),
    Case('heaviside', (W(3), 0.5), tag='scalar', grad=()),
    Case('fmax', (D(3), 0.1), tag='scalar'),
    Case('fmin', (D(3), 0.1), tag='scalar'),
    Case('gcd', (I(3, low=1, high=12), 4), tag='scalar'),
    Case('lcm', (I(3, low=1, high=12), 4), tag='scalar'),
    Case('bitwise_and', (I(3, high=16), 6), tag='scalar'),
    Case('bitwise_or', (I(3, high=16), 6), tag='scalar'),
    Case('bitwise_xor', (I(3, high=16), 6), tag='scalar'),
    Case('fmax', (D(2, 3), Arr((3,), 'float32', 'distinct'))),
    Case('fmin', (D(2, 3), D(3))),
    Case('gcd', (I(3, low=1, high=12), I(3, low=1, high=12))),
]
for _name in ('logical_and', 'logical_or', 'logical_xor'):
    CASES.append(Case(_name, (B(2, 3), B(3))))
    CASES.append(Case(_name, (N(3), 0.0), tag='scalar', grad=()))
for _name in ('equal', 'not_equal', 'greater', 'greater_equal', 'less', 'less_equal'):
    CASES.append(Case(_name, (I(2, 3), I(3))))
    CASES.append(Case(_name, (N(2, 3), 0.2), tag='scalar', grad=()))

# Creation
CASES += [
    Case('zeros', ((2, 3),)),
    Case('zeros', ((2, 0),), {'dtype': 'int32'}, tag='empty'),
    Case('ones', ((3,),)),
    Case('ones', ((),), {'dtype': 'bool'}, tag='scalar'),
    Case('full', ((2, 2), 7), dtype='float32'),
    Case('full', ((2,), True), tag='bool'),
    Case('full', ((2,), 2.5), {'dtype': 'float64'}, tag='float64'),
    Case('empty', ((2, 3),), numpy_compare=False),
    Case('eye', (3,)),
    Case('eye', (2, 3, 1), tag='offset'),
    Case('identity', (3,)),
    Case('arange', (5,), dtype='float32'),
    Case('arange', (1, 7, 2), {'dtype': 'int32'}, tag='int'),
    Case('arange', (0.0, 1.0, 0.25), tag='float'),
    Case('linspace', (0, 1, 5)),
    Case('linspace', (0, 1, 4), {'endpoint': False}, tag='open'),
    Case('logspace', (0, 2, 3)),
    Case('indices', ((2, 3),), dtype='int32'),
    Case('hanning', (5,)),
    Case('hamming', (5,)),
    Case('blackman', (5,)),
    Case('zeros_like', (N(2, 3),)),
    Case('ones_like', (I(2, 3),)),
    Case('full_like', (N(2, 3), 4.0)),
    Case('empty_like', (N(2, 3),), numpy_compare=False),
    Case('array', ([[1, 2], [3, 4]],), dtype='float32'),
    Case('copy', (N(2, 3),)),
    Case('asarray', (N(2, 3),)),
    Case('meshgrid', (N(3), N(2)), ref=lambda *a, **k: list(np.meshgrid(*a, **k))),
    Case('meshgrid', (N(3), N(2)), {'indexing': 'ij'}, tag='ij',
         ref=lambda *a, **k: list(np.meshgrid(*a, **k))),
    Case('tril', (N(3, 3),)),
    Case('triu', (N(3, 3), 1)),
    Case('diag', (N(3),)),
    Case('diag', (N(3, 3), -1), tag='matrix'),
    Case('diagflat', (N(2, 2),)),
    Case('diagonal', (N(2, 3, 3), 0, 1, 2)),
    Case('trace', (N(3, 3),)),
]

# Reductions
_R = N(2, 3, 4)
for _name in ('sum', 'prod', 'mean', 'std', 'var'):
    CASES.append(Case(_name, (_R,)))
    CASES.append(Case(_name, (_R,), {'axis': (0, 2), 'keepdims': True}, tag='axes'))
    CASES.append(Case(_name, (I(2, 3),), {'axis': 1}, tag='int',
                      dtype='int32' if _name in ('sum', 'prod') else 'float32'))
CASES += [
    Case('sum', (B(2, 3),), tag='bool', dtype='int64'),
    Case('sum', (N(2, 3),), {'dtype': 'float64'}, tag='dtype'),
    Case('prod', (Arr((2, 3), 'float32', 'uniform', 0.5, 1.5),), {'axis': 0}, tag='axis0'),
    Case('std', (N(3, 4),), {'ddof': 1, 'axis': 1}, tag='ddof'),
    Case('product', (P(2, 3),), ref=np.prod),
    Case('max', (D(2, 3, 4),), {'axis': 1}),
    Case('min', (D(2, 3, 4),), {'axis': -1, 'keepdims': True}),
    Case('amax', (D(2, 3),)),
    Case('amin', (D(2, 3),), {'axis': 0}),
    Case('max', (I(2, 3),), tag='int'),
    Case('ptp', (D(2, 3),), {'axis': 1}),
    Case('argmax', (D(2, 3),), grad=()),
    Case('argmax', (D(2, 3),), {'axis': 0}, tag='axis', grad=()),
    Case('argmin', (D(2, 3),), {'axis': 1}, grad=()),
    Case('all', (B(2, 3),), {'axis': 0}),
    Case('any', (B(2, 3),)),
    Case('alltrue', (B(2, 3),), ref=np.all, dtype='numpy', grad=()),
    Case('sometrue', (B(2, 3),), ref=np.any, dtype='numpy', grad=()),
    Case('cumsum', (N(2, 3),)),
    Case('cumsum', (N(2, 3),), {'axis': 1}, tag='axis'),
    Case('cumsum', (I(2, 3),), {'axis': 0}, tag='int', dtype='int32'),
    Case('average', (N(2, 3),), {'axis': 1}),
    Case('average', (N(2, 3), 0, N(2)), tag='weights', ref=lambda a, axis, w: np.average(
        a, axis, w)),
    Case('percentile', (N(2, 5), 30), grad=()),
    Case('percentile', (N(2, 5), (10, 50)), {'axis': 1}, tag='axis', grad=()),
    Case('quantile', (N(7,), 0.4), grad=()),
    Case('sum', (N(0, 3),), {'axis': 0}, tag='empty', grad=()),
    Case('sum', (Arr((), 'float32'),), tag='zero-dim'),
]

# Shapes and joining
CASES += [
    Case('reshape', (N(2, 3), (3, -1))),
    Case('reshape', (N(2, 3), (6,)), tag='flat'),
    Case('ravel', (N(2, 3),)),
    Case('expand_dims', (N(2, 3), 1)),
    Case('expand_dims', (N(2, 3), (0, 3)), tag='axes'),
    Case('squeeze', (N(1, 3, 1),)),
    Case('squeeze', (N(1, 3, 1), 2), tag='axis'),
    Case('atleast_1d', (N(),)),
    Case('atleast_2d', (N(3),)),
    Case('atleast_3d', (N(2, 3),)),
    Case('transpose', (N(2, 3, 4),)),
    Case('transpose', (N(2, 3, 4), (1, 0, 2)), tag='axes'),
    Case('swapaxes', (N(2, 3, 4), 0, 2)),
    Case('moveaxis', (N(2, 3, 4), 0, -1)),
    Case('rollaxis', (N(2, 3, 4), 2)),
    Case('broadcast_to', (N(3, 1), (2, 3, 4))),
    Case('broadcast_arrays', (N(3, 1), N(4)), ref=lambda *a: list(np.broadcast_arrays(*a))),
    Case('concatenate', ([N(2, 3), N(1, 3)],), grad=((0, 0), (0, 1))),
    Case('concatenate', ([N(2, 3), N(2, 2)], 1), tag='axis1', grad=((0, 0), (0, 1))),
    Case('concatenate', ([N(2, 3), N(4)], None), tag='flat', grad=((0, 0), (0, 1))),
    Case('stack', ([N(2, 3), N(2, 3)], 1), grad=((0, 0), (0, 1))),
    Case('vstack', ([N(3), N(2, 3)],), grad=((0, 0), (0, 1))),
    Case('row_stack', ([N(3), N(2, 3)],), ref=np.vstack, grad=((0, 0), (0, 1))),
    Case('hstack', ([N(2, 1), N(2, 3)],), grad=((0, 0), (0, 1))),
    Case('dstack', ([N(2, 3), N(2, 3)],), grad=((0, 0), (0, 1))),
    Case('column_stack', ([N(3), N(3, 2)],), grad=((0, 0), (0, 1))),
    Case('append', (N(2, 3), N(2, 3)), {'axis': 0}),
    Case('split', (N(6, 2), 3), ref=split_ref(np.split)),
    Case('split', (N(6, 2), (1, 4)), tag='indices', ref=split_ref(np.split)),
    Case('array_split', (N(7,), 3), ref=split_ref(np.array_split)),
    Case('hsplit', (N(2, 4), 2), ref=split_ref(np.hsplit)),
    Case('vsplit', (N(4, 2), 2), ref=split_ref(np.vsplit)),
    Case('dsplit', (N(2, 2, 4), 2), ref=split_ref(np.dsplit)),
    Case('flip', (N(2, 3),), {'axis': 1}),
    Case('flip', (N(2, 3),), tag='all'),
    Case('fliplr', (N(2, 3),)),
    Case('flipud', (N(2, 3),)),
    Case('roll', (N(2, 3), 1), {'axis': 1}),
    Case('roll', (N(2, 3), 4), tag='flat'),
    Case('rot90', (N(2, 3),)),
    Case('rot90', (N(2, 3, 2), 3, (1, 2)), tag='k3'),
    Case('tile', (N(2, 3), (2, 1))),
    Case('repeat', (N(2, 3), 2), {'axis': 0}),
    Case('repeat', (N(3), (1, 0, 2)), tag='counts'),
    Case('pad', (N(2, 3), ((1, 0), (2, 1)))),
    Case('pad', (N(2, 3), 1), {'mode': 'edge'}, tag='edge'),
    Case('pad', (N(2, 3), 2), {'mode': 'reflect'}, tag='reflect'),
    Case('pad', (N(4,), 2), {'mode': 'symmetric'}, tag='symmetric'),
    Case('pad', (N(4,), 2), {'mode': 'wrap'}, tag='wrap'),
    Case('pad', (N(4,), 1), {'mode': 'maximum'}, tag='maximum', grad=()),
    Case('pad', (N(2, 2), 1), {'constant_values': 3.0}, tag='value'),
    Case('take', (N(4, 3), I(5, high=4)), {'axis': 0}),
    Case('take', (N(4, 3), I(2, 2, high=12)), tag='flat'),
    Case('take_along_axis', (N(3, 4), I(3, 2, high=4), 1)),
    Case('where', (B(2, 3), N(2, 3), N(3))),
    Case('where', (B(2, 3), N(2, 3), 0.5), tag='scalar'),
    Case('where', (B(3), 1.0, 0.0), tag='scalars'),
    Case('where', (B(3), I(3), 0), tag='int'),
    Case('delete', (N(5,), 1)),
    Case('delete', (N(3, 4), (0, 2), 1), tag='axis'),
    Case('insert', (N(5,), 2, N(3))),
    Case('insert', (N(2, 3), 1, N(3), 0), tag='axis'),
    Case('resize', (N(2, 3), (4, 2))),
    Case('sort', (D(3, 4),)),
    Case('sort', (D(3, 4),), {'axis': 0}, tag='axis0'),
    Case('argsort', (D(3, 4),), grad=()),
    Case('msort', (D(3, 2),), ref=lambda a: np.sort(a, axis=0)),
    Case('diff', (N(5,),)),
    Case('diff', (N(3, 5),), {'n': 2, 'axis': 1}, tag='n2'),
    Case('ediff1d', (N(2, 3),)),
    Case('ediff1d', (N(4,),), {'to_begin': 0.5, 'to_end': -1.0}, tag='ends', grad=(0,)),
    Case('polyval', (N(3), N(4))),
    Case('nonzero', (I(2, 3, high=2),), ref=lambda a: list(np.nonzero(a))),
    Case('argwhere', (I(2, 3, high=2),)),
    Case('flatnonzero', (I(2, 3, high=2),)),
    Case('unique', (I(8, high=4),)),
    Case('unique', (I(8, high=4),), {'return_index': True, 'return_inverse': True,
                                      'return_counts': True}, tag='all',
         ref=lambda *a, **k: list(np.unique(*a, **k))),
    Case('bincount', (I(6, high=4),), dtype='int32'),
    Case('bincount', (I(6, high=4), N(6)), tag='weights', grad=()),
    Case('histogram', (N(20), 4), ref=lambda a, b: list(np.histogram(a, b)), grad=()),
    Case('unravel_index', (I(4, high=12), (3, 4)), ref=lambda *a: list(np.unravel_index(*a)),
         dtype='int32'),
    Case('diag_indices_from', (N(3, 3),), ref=lambda a: list(np.diag_indices_from(a)),
         grad=()),
    Case('shape', (N(2, 3),), grad=()),
    Case('size', (N(2, 3),), grad=()),
    Case('ndim', (N(2, 3),), grad=()),
    Case('may_share_memory', (N(2), N(2)), grad=()),
    Case('shares_memory', (N(2), N(2)), grad=()),
]

# Products and linear algebra
CASES += [
    Case('dot', (N(2, 3), N(3, 4))),
    Case('dot', (N(3), N(3)), tag='vectors'),
    Case('dot', (N(2, 3, 4), N(4, 2)), tag='nd'),
    Case('dot', (N(2, 3), 1.5), tag='scalar'),
    Case('matmul', (N(2, 3), N(3, 4))),
    Case('matmul', (N(2, 1, 2, 3), N(4, 3, 2)), tag='broadcast'),
    Case('matmul', (N(3), N(3, 2)), tag='vector'),
    Case('tensordot', (N(2, 3, 4), N(4, 3, 2)), {'axes': ([1, 2], [1, 0])}),
    Case('tensordot', (N(2, 3), N(3, 2)), {'axes': 1}, tag='int'),
    Case('inner', (N(2, 3), N(4, 3))),
    Case('outer', (N(3), N(2, 2))),
    Case('vdot', (N(2, 3), N(3, 2))),
    Case('einsum', ('ij,jk->ik', N(2, 3), N(3, 4)), grad=(1, 2)),
    Case('einsum', ('ii->i', N(3, 3)), tag='diagonal', grad=(1,)),
    Case('einsum', ('bij,bj->bi', N(2, 3, 4), N(2, 4)), tag='batch', grad=(1, 2)),
    Case('einsum', ('i,j', N(2), N(3)), tag='implicit', grad=(1, 2)),
    Case('einsum', ('...j,j', N(2, 3), N(3)), tag='ellipsis', grad=(1, 2)),
    Case('linalg.norm', (N(2, 3),)),
    Case('linalg.norm', (N(2, 3),), {'axis': 1}, tag='vector'),
    Case('linalg.norm', (W(3),), {'ord': 1}, tag='l1'),
    Case('linalg.norm', (N(4),), {'ord': 3}, tag='l3'),
    Case('linalg.norm', (D(2, 3),), {'ord': np.inf, 'axis': 1}, tag='inf'),
    Case('linalg.norm', (N(3, 3),), {'ord': 'nuc'}, tag='nuc', rtol=1e-3),
    Case('linalg.norm', (N(3, 3),), {'ord': 2}, tag='spectral', rtol=1e-3),
    Case('linalg.norm', (W(3, 3),), {'ord': 1}, tag='matrix-l1'),
    Case('linalg.inv', (M(3, 3),)),
    Case('linalg.inv', (M(2, 3, 3),), tag='batch'),
    Case('linalg.det', (M(3, 3),)),
    Case('linalg.slogdet', (M(2, 3, 3),), ref=lambda a: list(np.linalg.slogdet(a))),
    Case('linalg.solve', (M(3, 3), N(3))),
    Case('linalg.solve', (M(3, 3), N(3, 2)), tag='matrix'),
    Case('linalg.cholesky', (SPD(3),)),
    Case('linalg.eigh', (SPD(3),), ref=lambda a: list(np.linalg.eigh(a)), numpy_compare=False),
    Case('linalg.eigvalsh', (SPD(3),)),
    Case('linalg.eigvals', (SPD(3),), grad=(), numpy_compare=False),
    Case('linalg.eig', (SPD(3),), grad=(), numpy_compare=False),
    Case('linalg.svd', (M(3, 4),), ref=svd_ref, numpy_compare=False),
    Case('linalg.qr', (M(4, 3),), ref=lambda a: list(np.linalg.qr(a)), numpy_compare=False),
    Case('linalg.qr', (M(3, 4),), ref=lambda a: list(np.linalg.qr(a)), numpy_compare=False,
         tag='wide'),
    Case('linalg.pinv', (M(3, 2),)),
    Case('linalg.matrix_power', (M(3, 3), 3)),
    Case('linalg.matrix_power', (M(3, 3), -2), tag='negative'),
    Case('linalg.multi_dot', ([N(2, 3), N(3, 4), N(4)],), grad=((0, 0), (0, 1), (0, 2))),
    Case('linalg.tensorinv', (M(6, 6),), {'ind': 1}),
    Case('linalg.tensorsolve', (M(6, 6), N(6))),
    Case('linalg.lstsq', (M(4, 3), N(4)), {'rcond': None},
         ref=lambda a, b, rcond: list(np.linalg.lstsq(a, b, rcond=rcond)), grad=()),
    Case('linalg.matrix_rank', (M(3, 3),), grad=()),
    Case('linalg.cond', (M(3, 3),), grad=()),
]

# NumPy functions mx.np runs on host copies (MXNet's fallbacks): values only
CASES += [Case(name, args, kwargs, ref=ref, grad=(), dtype='numpy', tag=tag)
          for name, args, kwargs, ref, tag in [
    ('allclose', (N(3), N(3)), {}, None, ''),
    ('isclose', (N(3), N(3)), {}, None, ''),
    ('array_equal', (I(3), I(3)), {}, None, ''),
    ('array_equiv', (I(3), I(1, 3)), {}, None, ''),
    ('apply_along_axis', (np.sum, 1, N(2, 3)), {}, None, ''),
    ('apply_over_axes', (np.sum, N(2, 3), [0]), {}, None, ''),
    ('argpartition', (D(5), 2), {}, None, ''),
    ('partition', (D(5), 2), {}, None, ''),
    ('choose', (I(3, high=2), [N(3), N(3)]), {}, None, ''),
    ('compress', ([True, False, True], N(3)), {}, None, ''),
    ('corrcoef', (N(2, 4),), {}, None, ''),
    ('correlate', (N(4), N(2)), {}, None, ''),
    ('count_nonzero', (I(2, 3, high=2),), {}, None, ''),
    ('cov', (N(2, 4),), {}, None, ''),
    ('digitize', (N(4), np.array([-0.5, 0.0, 0.5])), {}, None, ''),
    ('extract', (B(4), N(4)), {}, None, ''),
    ('frexp', (P(3),), {}, lambda a: list(np.frexp(a)), ''),
    ('modf', (N(3),), {}, lambda a: list(np.modf(a)), ''),
    ('divmod', (U(0.5, 3, 3), U(0.5, 1, 3)), {}, lambda a, b: list(np.divmod(a, b)), ''),
    ('histogram2d', (N(6), N(6)), {'bins': 2}, lambda *a, **k: list(np.histogram2d(*a, **k)),
     ''),
    ('histogram_bin_edges', (N(6),), {'bins': 3}, None, ''),
    ('histogramdd', (N(6, 2),), {'bins': 2}, lambda *a, **k: [
        np.histogramdd(*a, **k)[0]] + list(np.histogramdd(*a, **k)[1]), ''),
    ('in1d', (I(4), I(3)), {}, lambda a, b: np.isin(a.ravel(), b), ''),
    ('isin', (I(4), I(3)), {}, None, ''),
    ('interp', (U(0, 1, 3), np.array([0., 1.]), np.array([1., 3.])), {}, None, ''),
    ('intersect1d', (I(5), I(5)), {}, None, ''),
    ('union1d', (I(5), I(5)), {}, None, ''),
    ('setdiff1d', (I(5), I(5)), {}, None, ''),
    ('setxor1d', (I(5), I(5)), {}, None, ''),
    ('ix_', ([0, 1], [1, 2]), {}, lambda *a: list(np.ix_(*a)), ''),
    ('lexsort', ((I(4), I(4)),), {}, None, ''),
    ('min_scalar_type', (10,), {}, None, ''),
    ('promote_types', ('int32', 'float16'), {}, None, ''),
    ('result_type', (I(2), 1.5), {}, None, ''),
    ('nanargmax', (D(4),), {}, None, ''),
    ('nanargmin', (D(4),), {}, None, ''),
    ('nancumprod', (P(4),), {}, None, ''),
    ('nancumsum', (N(4),), {}, None, ''),
    ('nanmax', (N(4),), {}, None, ''),
    ('nanmin', (N(4),), {}, None, ''),
    ('nanmedian', (N(5),), {}, None, ''),
    ('nanpercentile', (N(5), 40), {}, None, ''),
    ('nanprod', (P(4),), {}, None, ''),
    ('fallback.nansum', (N(4),), {}, np.nansum, ''),
    ('fallback.nanstd', (N(4),), {}, np.nanstd, ''),
    ('fallback.nanvar', (N(4),), {}, np.nanvar, ''),
    ('fallback.pmt', (0.1, 2, 100.0), {}, lambda r, n, pv: -pv * r * (1 + r) ** n / (
        (1 + r) ** n - 1), ''),
    ('nanquantile', (N(5), 0.4), {}, None, ''),
    ('piecewise', (N(4), [np.array([True, False, True, False])], [1.0, 0.0]), {}, None, ''),
    ('packbits', (I(8, high=2, dtype='uint8'),), {}, None, ''),
    ('unpackbits', (I(2, high=255, dtype='uint8'),), {}, None, ''),
    ('poly', (N(3),), {}, None, ''),
    ('polyadd', (N(3), N(2)), {}, None, ''),
    ('polysub', (N(3), N(2)), {}, None, ''),
    ('polymul', (N(3), N(2)), {}, None, ''),
    ('polydiv', (N(3), W(2)), {}, lambda a, b: list(np.polydiv(a, b)), ''),
    ('polyfit', (N(5), N(5), 1), {}, None, ''),
    ('polyint', (N(3),), {}, None, ''),
    ('roots', (W(3),), {}, None, ''),
    ('real', (N(3),), {}, None, ''),
    ('searchsorted', (np.array([0.1, 0.5, 0.9]), U(0, 1, 4)), {}, None, ''),
    ('select', ([B(3), B(3)], [N(3), N(3)]), {}, None, ''),
    ('trapz', (N(5),), {}, np_trapz, ''),
    ('tril_indices_from', (N(3, 3),), {}, lambda a: list(np.tril_indices_from(a)), ''),
    ('triu_indices_from', (N(3, 3),), {}, lambda a: list(np.triu_indices_from(a)), ''),
    ('trim_zeros', (np.array([0., 1., 2., 0.]),), {}, None, ''),
    ('unwrap', (N(5),), {}, None, ''),
    ('vander', (N(3),), {}, None, ''),
    ('npv', (0.1, np.array([-100., 60., 60.])), {}, np_npv, ''),
    ('pv', (0.05, 10, -100.), {}, annuity_present_value, ''),
    ('ppmt', (0.1, 1, 2, 100.), {}, first_principal_payment, ''),
    ('rate', (10, 0., -100., 200.), {}, lambda n, p, pv, fv: (fv / -pv) ** (1 / n) - 1, ''),
    ('mirr', (np.array([-100., 50., 70.]), 0.1, 0.1), {}, modified_irr, ''),
]]
