"""``mx.np``'s element-wise operators: unary functions, binary functions with NumPy's
broadcasting and the dtype rules of :mod:`ember.op.np_rules`, and their scalar forms.

Every operator is ``_npi_<name>`` (``_npi_<name>_scalar`` with a Python scalar operand, whose
``reverse`` puts the scalar first). A gradient is one backward operator per family that
evaluates the derivative in NumPy: ``_backward_npi_unary``, ``_backward_npi_binary`` and
``_backward_npi_binary_scalar``. Functions without a useful derivative (``floor``, comparisons)
pass zeros back, as MXNet does.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_npi_true_divide')
>>> op.infer_type({}, [np.dtype('int32'), np.dtype('int32')])[1]
[dtype('float32')]
"""
from __future__ import annotations

import math

import numpy as np

from ember.op.np_rules import (BOOL, FLOAT32, float_of, gradient_shapes, is_float, p_scalar,
                               promote,
                               promote_scalar, scalar_as, sum_to_shape, broadcast_all)
from ember.op.registry import (Param, ShapeError, p_bool, p_float, p_int, p_optional, p_str,
                               register)

__all__ = ['UNARY', 'BINARY']

_LN10, _LN2 = math.log(10.0), math.log(2.0)


# ----------------------------------------------------------------------------------------------
# Unary functions: name -> (output kind, derivative of y = f(x) as fn(xp, x, y), or None when
# the derivative is zero). Kinds: 'same' keeps the dtype (bool becomes float32), 'float' makes
# floats of integers, 'bool' gives bool, 'int' takes integers and bools only.

UNARY = {
    'negative': ('same', lambda xp, x, y: -xp.ones_like(x)),
    'positive': ('same', lambda xp, x, y: xp.ones_like(x)),
    'absolute': ('same', lambda xp, x, y: xp.sign(x)),
    'fabs': ('float', lambda xp, x, y: xp.sign(x)),
    'reciprocal': ('same', lambda xp, x, y: -y * y),
    'square': ('same', lambda xp, x, y: 2 * x),
    'sign': ('same', None),
    'rint': ('same', None),
    'ceil': ('same', None),
    'floor': ('same', None),
    'trunc': ('same', None),
    'fix': ('same', None),
    'sqrt': ('float', lambda xp, x, y: 0.5 / y),
    'cbrt': ('float', lambda xp, x, y: 1.0 / (3.0 * y * y)),
    'exp': ('float', lambda xp, x, y: y),
    'expm1': ('float', lambda xp, x, y: y + 1),
    'log': ('float', lambda xp, x, y: 1.0 / x),
    'log10': ('float', lambda xp, x, y: 1.0 / (x * _LN10)),
    'log2': ('float', lambda xp, x, y: 1.0 / (x * _LN2)),
    'log1p': ('float', lambda xp, x, y: 1.0 / (1.0 + x)),
    'sin': ('float', lambda xp, x, y: xp.cos(x)),
    'cos': ('float', lambda xp, x, y: -xp.sin(x)),
    'tan': ('float', lambda xp, x, y: 1.0 + y * y),
    'arcsin': ('float', lambda xp, x, y: 1.0 / xp.sqrt(1.0 - x * x)),
    'arccos': ('float', lambda xp, x, y: -1.0 / xp.sqrt(1.0 - x * x)),
    'arctan': ('float', lambda xp, x, y: 1.0 / (1.0 + x * x)),
    'sinh': ('float', lambda xp, x, y: xp.cosh(x)),
    'cosh': ('float', lambda xp, x, y: xp.sinh(x)),
    'tanh': ('float', lambda xp, x, y: 1.0 - y * y),
    'arcsinh': ('float', lambda xp, x, y: 1.0 / xp.sqrt(x * x + 1.0)),
    'arccosh': ('float', lambda xp, x, y: 1.0 / xp.sqrt(x * x - 1.0)),
    'arctanh': ('float', lambda xp, x, y: 1.0 / (1.0 - x * x)),
    'degrees': ('float', lambda xp, x, y: xp.full_like(x, 180.0 / math.pi)),
    'radians': ('float', lambda xp, x, y: xp.full_like(x, math.pi / 180.0)),
    'spacing': ('float', None),
    'i0': ('float', None),
    'logical_not': ('bool', None),
    'isnan': ('bool', None),
    'isinf': ('bool', None),
    'isfinite': ('bool', None),
    'isposinf': ('bool', None),
    'isneginf': ('bool', None),
    'signbit': ('bool', None),
    'invert': ('int', None),
}


def _unary_type(kind, name):
    def infer(attrs, in_dtypes):
        dtype = in_dtypes[0]
        if dtype is None:
            return list(in_dtypes), [None]
        if kind == 'float':
            out = float_of(dtype)
        elif kind == 'bool':
            out = BOOL
        elif kind == 'int':
            if dtype.kind not in 'biu':
                raise ShapeError(f'{name} takes integer or bool arrays, got {dtype}')
            out = dtype
        else:
            out = FLOAT32 if dtype.kind == 'b' and name != 'absolute' else dtype
        return list(in_dtypes), [out]
    return infer


def _numpy_function(xp, name):
    if name == 'i0':
        return lambda x, out: out.__setitem__(Ellipsis, xp.i0(x))
    return getattr(xp, name)


_ROUNDING = frozenset(['rint', 'ceil', 'floor', 'trunc', 'fix'])


def _unary_kernel(name, kind):
    def kernel(attrs, ins, outs, ctx):
        x, out = ins[0], outs[0]
        if name in _ROUNDING and x.dtype.kind in 'iub':
            out[...] = x        # integers are already rounded
            return
        if kind in ('float', 'same') and x.dtype != out.dtype:
            x = x.astype(out.dtype)
        with np.errstate(all='ignore'):
            _numpy_function(ctx.xp, name)(x, out=out)
    return kernel


def _zeros_gradient(F, attrs, ins, outs, og):
    return [F.zeros_like(x) for x in ins]


def _unary_gradient(name):
    def gradient(F, attrs, ins, outs, og):
        return [F._backward_npi_unary(og[0], ins[0], outs[0], func=name)]
    return gradient


def _backward_unary_kernel(attrs, ins, outs, ctx):
    og, x, y = ins
    dtype = float_of(og.dtype)
    derivative = UNARY[attrs['func']][1]
    with np.errstate(all='ignore'):
        slope = derivative(ctx.xp, x.astype(dtype, copy=False), y.astype(dtype, copy=False))
        outs[0][...] = og * slope


for _name, (_kind, _derivative) in UNARY.items():
    register(f'_npi_{_name}', _unary_kernel(_name, _kind), inputs=('x',),
             infer_type=_unary_type(_kind, _name),
             gradient=_unary_gradient(_name) if _derivative else _zeros_gradient,
             doc=f'``np.{_name}`` element by element.')

register('_backward_npi_unary', _backward_unary_kernel, inputs=('ograd', 'x', 'y'),
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[2]], lambda attrs, s: [s[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         params=(Param('func', p_str),),
         doc='Gradient of a unary ``mx.np`` function, from its input and output.')


# ----------------------------------------------------------------------------------------------
# Unary functions with parameters: around, clip, nan_to_num.

def _around_kernel(attrs, ins, outs, ctx):
    ctx.xp.around(ins[0], attrs['decimals'], out=outs[0])


register('_npi_around', _around_kernel, inputs=('x',), params=(Param('decimals', p_int, 0),),
         infer_type=_unary_type('same', 'around'), gradient=_zeros_gradient,
         doc='``np.around``: round half to even at `decimals` digits.')


def _clip_kernel(attrs, ins, outs, ctx):
    low, high = attrs['a_min'], attrs['a_max']
    x = ins[0]
    if x.dtype.kind in 'iub':
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
    ctx.xp.clip(x, low, high, out=outs[0])


def _clip_gradient(F, attrs, ins, outs, og):
    return [F._backward_npi_clip(og[0], ins[0], a_min=attrs['a_min'], a_max=attrs['a_max'])]


def _backward_clip_kernel(attrs, ins, outs, ctx):
    og, x = ins
    inside = ctx.xp.ones(x.shape, dtype=bool)
    if attrs['a_min'] is not None:
        inside &= x >= attrs['a_min']
    if attrs['a_max'] is not None:
        inside &= x <= attrs['a_max']
    outs[0][...] = og * inside


_CLIP = (Param('a_min', p_optional(p_float), None), Param('a_max', p_optional(p_float), None))
register('_npi_clip', _clip_kernel, inputs=('x',), params=_CLIP, gradient=_clip_gradient,
         doc='``np.clip`` with scalar bounds (None: unbounded on that side).')
register('_backward_npi_clip', _backward_clip_kernel, inputs=('ograd', 'x'), params=_CLIP,
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[1]], lambda attrs, s: [s[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='Gradient of ``_npi_clip``: passes where the input is inside the bounds.')


def _nan_to_num_kernel(attrs, ins, outs, ctx):
    x = ins[0]
    if not is_float(x.dtype):
        outs[0][...] = x
        return
    outs[0][...] = ctx.xp.nan_to_num(x, copy=True, nan=attrs['nan'], posinf=attrs['posinf'],
                                     neginf=attrs['neginf'])


def _backward_nan_to_num_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0] * ctx.xp.isfinite(ins[1])


_NAN_TO_NUM = (Param('nan', p_float, 0.0), Param('posinf', p_optional(p_float), None),
               Param('neginf', p_optional(p_float), None))
register('_npi_nan_to_num', _nan_to_num_kernel, inputs=('x',), params=_NAN_TO_NUM,
         gradient=lambda F, attrs, ins, outs, og: [F._backward_npi_nan_to_num(og[0], ins[0])],
         doc='``np.nan_to_num``: NaN and infinities replaced by finite numbers.')
register('_backward_npi_nan_to_num', _backward_nan_to_num_kernel, inputs=('ograd', 'x'),
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[1]], lambda attrs, s: [s[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         doc='Gradient of ``_npi_nan_to_num``: passes where the input is finite.')


# ----------------------------------------------------------------------------------------------
# Binary functions: name -> (dtype rule, derivatives (d/dx1, d/dx2) as fn(xp, a, b, y), or None
# for zero). Rules: 'arith' promotes; 'float' promotes to a float (true_divide, arctan2);
# 'bool' compares in the promoted dtype; 'int' takes integers and bools only.

def _power_rhs(xp, a, b, y):
    positive = a > 0
    return xp.where(positive, y * xp.log(xp.where(positive, a, 1)), 0)


BINARY = {
    'add': ('arith', (lambda xp, a, b, y: 1, lambda xp, a, b, y: 1)),
    'subtract': ('arith', (lambda xp, a, b, y: 1, lambda xp, a, b, y: -1)),
    'multiply': ('arith', (lambda xp, a, b, y: b, lambda xp, a, b, y: a)),
    'true_divide': ('float', (lambda xp, a, b, y: 1 / b, lambda xp, a, b, y: -y / b)),
    'mod': ('arith', (lambda xp, a, b, y: 1, lambda xp, a, b, y: -xp.floor(a / b))),
    'power': ('arith', (lambda xp, a, b, y: b * a ** (b - 1), _power_rhs)),
    'float_power': ('float', (lambda xp, a, b, y: b * a ** (b - 1), _power_rhs)),
    'maximum': ('arith', (lambda xp, a, b, y: a >= b, lambda xp, a, b, y: a < b)),
    'minimum': ('arith', (lambda xp, a, b, y: a <= b, lambda xp, a, b, y: a > b)),
    'fmax': ('arith', (lambda xp, a, b, y: (a >= b) | xp.isnan(b),
                       lambda xp, a, b, y: ~((a >= b) | xp.isnan(b)))),
    'fmin': ('arith', (lambda xp, a, b, y: (a <= b) | xp.isnan(b),
                       lambda xp, a, b, y: ~((a <= b) | xp.isnan(b)))),
    'arctan2': ('float', (lambda xp, a, b, y: b / (a * a + b * b),
                          lambda xp, a, b, y: -a / (a * a + b * b))),
    'hypot': ('float', (lambda xp, a, b, y: a / y, lambda xp, a, b, y: b / y)),
    'copysign': ('float', (lambda xp, a, b, y: xp.sign(a) * xp.where(xp.signbit(b), -1, 1),
                           lambda xp, a, b, y: 0)),
    'ldexp': ('float', (lambda xp, a, b, y: xp.exp2(b), lambda xp, a, b, y: y * _LN2)),
    'heaviside': ('float', (lambda xp, a, b, y: 0, lambda xp, a, b, y: a == 0)),
    'floor_divide': ('arith', None),
    'lcm': ('int', None),
    'gcd': ('int', None),
    'bitwise_and': ('int', None),
    'bitwise_or': ('int', None),
    'bitwise_xor': ('int', None),
    'equal': ('bool', None),
    'not_equal': ('bool', None),
    'greater': ('bool', None),
    'greater_equal': ('bool', None),
    'less': ('bool', None),
    'less_equal': ('bool', None),
    'logical_and': ('bool', None),
    'logical_or': ('bool', None),
    'logical_xor': ('bool', None),
}


def _compute_dtype(rule, name, dtype):
    """(dtype the function runs in, dtype of the result) from the promoted input dtype."""
    if rule == 'bool':
        return dtype, BOOL
    if rule == 'int':
        if dtype.kind not in 'biu':
            raise ShapeError(f'{name} takes integer or bool arrays, got {dtype}')
        return dtype, dtype
    if name == 'float_power':
        return np.dtype(np.float64), np.dtype(np.float64)    # as NumPy's, always
    if name == 'ldexp':
        dtype = float_of(dtype)
        return dtype, dtype
    if rule == 'float':
        dtype = float_of(dtype)
    elif name in ('add', 'multiply', 'maximum', 'minimum') or dtype.kind != 'b':
        return dtype, dtype
    else:
        dtype = FLOAT32     # subtracting or dividing bools: float32, as MXNet
    return dtype, dtype


def _binary_type(rule, name):
    def infer(attrs, in_dtypes):
        if any(d is None for d in in_dtypes):
            return list(in_dtypes), [None]
        return list(in_dtypes), [_compute_dtype(rule, name, promote(*in_dtypes))[1]]
    return infer


def _binary_shape(attrs, in_shapes):
    if any(s is None for s in in_shapes):
        return list(in_shapes), [None]
    return list(in_shapes), [broadcast_all(in_shapes)]


def _call(xp, name, a, b, out):
    with np.errstate(all='ignore'):
        getattr(xp, name)(a, b, out=out)


def _cast_operands(name, compute, a, b):
    """Both operands in the computing dtype (ldexp's exponent stays an integer)."""
    a = a.astype(compute, copy=False)
    if name == 'ldexp':
        return a, (b if np.asarray(b).dtype.kind in 'iu' else np.asarray(b).astype(np.int64))
    return a, (b.astype(compute, copy=False) if hasattr(b, 'astype') else b)


def _binary_kernel(name, rule):
    def kernel(attrs, ins, outs, ctx):
        compute = _compute_dtype(rule, name, promote(ins[0].dtype, ins[1].dtype))[0]
        a, b = _cast_operands(name, compute, ins[0], ins[1])
        _call(ctx.xp, name, a, b, outs[0])
    return kernel


def _binary_gradient(name):
    def gradient(F, attrs, ins, outs, og):
        return F._backward_npi_binary(og[0], ins[0], ins[1], outs[0], func=name)
    return gradient


def _backward_binary_kernel(attrs, ins, outs, ctx):
    og, a, b, y = ins
    xp, dtype = ctx.xp, float_of(og.dtype)
    a, b, y = (v.astype(dtype, copy=False) for v in (a, b, y))
    for out, derivative in zip(outs, BINARY[attrs['func']][1]):
        with np.errstate(all='ignore'):
            out[...] = sum_to_shape(xp, og * derivative(xp, a, b, y), out.shape)


for _name, (_rule, _derivatives) in BINARY.items():
    register(f'_npi_{_name}', _binary_kernel(_name, _rule), inputs=('x1', 'x2'),
             infer_shape=_binary_shape, infer_type=_binary_type(_rule, _name),
             gradient=_binary_gradient(_name) if _derivatives else _zeros_gradient,
             doc=f'``np.{_name}`` with broadcasting.')

register('_backward_npi_binary', _backward_binary_kernel, inputs=('ograd', 'x1', 'x2', 'y'),
         outputs=('x1_grad', 'x2_grad'),
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[3]],
                                     lambda attrs, s: [s[1], s[2]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1], dtypes[2]]),
         params=(Param('func', p_str),),
         doc='Gradients of a binary ``mx.np`` function for both inputs.')


# ----------------------------------------------------------------------------------------------
# With a Python scalar operand: the scalar keeps its Python type, which decides the dtype.

_SCALAR = (Param('scalar', p_scalar, doc='the scalar operand'),
           Param('reverse', p_bool, False, 'the scalar is the first operand'))


def _scalar_type(rule, name):
    def infer(attrs, in_dtypes):
        dtype = in_dtypes[0]
        if dtype is None:
            return list(in_dtypes), [None]
        return list(in_dtypes), [
            _compute_dtype(rule, name, promote_scalar(dtype, attrs['scalar']))[1]]
    return infer


def _operands(attrs, x, compute, name=''):
    scalar, x = scalar_as(attrs['scalar'], compute), x.astype(compute, copy=False)
    if name == 'ldexp':        # the exponent stays an integer
        if attrs['reverse']:
            return scalar, x.astype(np.int64)
        scalar = np.int64(attrs['scalar'])
    return (scalar, x) if attrs['reverse'] else (x, scalar)


def _scalar_kernel(name, rule):
    def kernel(attrs, ins, outs, ctx):
        compute = _compute_dtype(rule, name, promote_scalar(ins[0].dtype, attrs['scalar']))[0]
        a, b = _operands(attrs, ins[0], compute, name)
        _call(ctx.xp, name, a, b, outs[0])
    return kernel


def _scalar_gradient(name):
    def gradient(F, attrs, ins, outs, og):
        return [F._backward_npi_binary_scalar(og[0], ins[0], outs[0], func=name,
                                              scalar=attrs['scalar'],
                                              reverse=attrs['reverse'])]
    return gradient


def _backward_scalar_kernel(attrs, ins, outs, ctx):
    og, x, y = ins
    xp, dtype = ctx.xp, float_of(og.dtype)
    a, b = _operands(attrs, x, dtype, attrs['func'])
    which = 1 if attrs['reverse'] else 0
    with np.errstate(all='ignore'):
        slope = BINARY[attrs['func']][1][which](xp, a, b, y.astype(dtype, copy=False))
        outs[0][...] = og * slope


for _name, (_rule, _derivatives) in BINARY.items():
    register(f'_npi_{_name}_scalar', _scalar_kernel(_name, _rule), inputs=('x',),
             params=_SCALAR, infer_type=_scalar_type(_rule, _name),
             gradient=_scalar_gradient(_name) if _derivatives else _zeros_gradient,
             doc=f'``np.{_name}`` of an array and a Python scalar.')

register('_backward_npi_binary_scalar', _backward_scalar_kernel, inputs=('ograd', 'x', 'y'),
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[2]], lambda attrs, s: [s[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         params=(Param('func', p_str),) + _SCALAR,
         doc='Gradient of a binary ``mx.np`` function with a scalar operand.')
