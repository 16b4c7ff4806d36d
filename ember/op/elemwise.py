"""Element-wise operators: arithmetic, comparison and unary math, with and without broadcasting.

Kernels write into ``out`` with ufuncs. On the CPU an array is split into chunks that
``engine.parallel_for`` runs on the kernel threads (NumPy releases the GIL inside ufuncs) when
the operator tuner (:mod:`ember.op.tuning`) says it pays.

MXNet's rules kept here: a scalar is cast to the array's dtype before the operation
(``int32 + 1.5`` adds 1), comparisons return 0/1 in the input dtype, and ``mod`` follows Python's
sign convention with ``x mod 0 == 0``.

>>> import numpy as np
>>> from ember.op import registry
>>> x, out = np.array([1., 2.], np.float32), np.empty(2, np.float32)
>>> op = registry.get('_plus_scalar')
>>> op.kernel({'scalar': 1.0}, [x], [out], registry.KernelContext(None))
>>> out
array([2., 3.], dtype=float32)
"""
from __future__ import annotations

import math

import numpy as np

from ember import accel, config, engine
from ember.op import tuning
from ember.op.registry import (
    NUM_ARGS, Param, ShapeError, elemwise_shape, p_float, register, same_shape, variadic_names)

__all__ = ['apply_ufunc', 'broadcast_shapes', 'scalar_for']

SCALAR = (Param('scalar', p_float, doc='the scalar operand'),)


# ----------------------------------------------------------------------------------------------
# Running a ufunc, split across threads when the array is large.

def apply_ufunc(ufunc, args, out, **kw):
    """``ufunc(*args, out=out)``, split by ``parallel_for`` where the operator tuner says it
    pays (``MXNET_CPU_PARALLEL_SIZE`` elements for dtypes it does not tune).

    Array arguments either have ``out``'s shape or broadcast to it; scalars pass through.
    """
    if type(out) is not np.ndarray or not _worth_splitting(ufunc, args, out, kw):
        ufunc(*args, out=out, **kw)
    elif all(_same_shape_or_scalar(a, out.shape) for a in args):
        _split_flat(ufunc, args, out, kw)
    else:
        _split_rows(ufunc, args, out, kw)


def _worth_splitting(ufunc, args, out, kw):
    size = out.size
    if size < tuning.MIN_SIZE and size < config.get('MXNET_CPU_PARALLEL_SIZE'):
        return False        # small for either rule: the common case stays cheap

    def prepare(sample_size):
        sample = [tuning.prefix_sample(a, out.shape, sample_size) for a in args]
        sample_out = np.empty(sample_size, out.dtype)
        return lambda: ufunc(*sample, out=sample_out, **kw)
    arrays = 0
    for arg in args:
        if isinstance(arg, np.ndarray):
            arrays += 1
    return tuning.should_split(_tuned_name(ufunc, arrays), out.dtype, size, prepare)


_TUNED_NAMES: dict = {}      # (kernel, array operands) -> the tuner's name
_NAMED: dict = {}            # base name -> the kernel that has it


def _tuned_name(ufunc, arrays):
    """The tuner's name of a kernel called with `arrays` array operands: 'add/2', 'add/1'
    (with a scalar). A kernel whose name another kernel already has gets its identity too."""
    name = _TUNED_NAMES.get((ufunc, arrays))
    if name is None:
        base = getattr(ufunc, '__name__', None) or getattr(getattr(ufunc, 'fn', None),
                                                           '__name__', None)
        base = base or type(ufunc).__name__
        if _NAMED.setdefault(base, ufunc) is not ufunc:
            base = f'{base}@{id(ufunc):x}'
        name = _TUNED_NAMES[(ufunc, arrays)] = f'{base}/{arrays}'
    return name


def _same_shape_or_scalar(arg, shape):
    return not isinstance(arg, np.ndarray) or arg.shape == shape


def _split_flat(ufunc, args, out, kw):
    flat_out = out.reshape(-1)
    flat_args = [a.reshape(-1) if isinstance(a, np.ndarray) else a for a in args]

    def chunk(start, stop):
        parts = [a[start:stop] if isinstance(a, np.ndarray) else a for a in flat_args]
        ufunc(*parts, out=flat_out[start:stop], **kw)
    engine.parallel_for(out.size, chunk, split=True)


def _split_rows(ufunc, args, out, kw):
    # broadcasting inputs cannot be flattened: split along the output's first axis, giving each
    # chunk the rows whose first element falls in its element range
    rows, row_size = out.shape[0], out.size // out.shape[0]
    args = [a.reshape((1,) * (out.ndim - a.ndim) + a.shape) if isinstance(a, np.ndarray)
            else a for a in args]

    def chunk(start, stop):
        first, last = -(-start // row_size), -(-stop // row_size)
        if first >= last:
            return
        parts = [a[first:last] if isinstance(a, np.ndarray) and a.shape[0] == rows > 1 else a
                 for a in args]
        ufunc(*parts, out=out[first:last], **kw)
    engine.parallel_for(out.size, chunk, split=True)


def scalar_for(dtype, value):
    """The scalar operand as MXNet uses it: cast to the array's dtype first."""
    if dtype.kind in 'fc':
        return value   # a Python float stays weak: NumPy computes in the array's dtype
    if dtype.kind == 'b':
        return bool(value)
    # C-style conversion: truncate toward zero, wrap around on overflow
    return np.array(math.trunc(value)).astype(dtype)[()]


# ----------------------------------------------------------------------------------------------
# Shapes.

def broadcast_shapes(lhs, rhs):
    """NumPy broadcasting of two shapes; raises ShapeError naming both."""
    try:
        return accel.broadcast_shape(lhs, rhs)
    except ValueError as exc:
        raise ShapeError(str(exc)) from None


_broadcast_shape = elemwise_shape(lambda attrs, lhs, rhs: broadcast_shapes(lhs, rhs))


# ----------------------------------------------------------------------------------------------
# Kernels.

def _binary_kernel(ufunc, quiet=False):
    def kernel(attrs, ins, outs, ctx):
        if quiet:
            with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
                apply_ufunc(ufunc, ins, outs[0])
        else:
            apply_ufunc(ufunc, ins, outs[0])
    return kernel


def _scalar_kernel(ufunc, reflected=False, quiet=False):
    def kernel(attrs, ins, outs, ctx):
        x = ins[0]
        scalar = scalar_for(x.dtype, attrs['scalar'])
        args = (scalar, x) if reflected else (x, scalar)
        if quiet:
            with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
                apply_ufunc(ufunc, args, outs[0])
        else:
            apply_ufunc(ufunc, args, outs[0])
    return kernel


def _mod(lhs, rhs, out):
    """MXNet's mod: Python's sign convention, and 0 where the divisor is 0."""
    with np.errstate(divide='ignore', invalid='ignore'):
        np.mod(lhs, rhs, out=out)
    if np.ndim(rhs) == 0:
        if rhs == 0:
            out[...] = 0
    else:
        np.copyto(out, 0, where=np.broadcast_to(rhs == 0, out.shape))


def _mod_kernel(reflected=False, scalar=False):
    def kernel(attrs, ins, outs, ctx):
        x = ins[0]
        if scalar:
            value = scalar_for(x.dtype, attrs['scalar'])
            args = (value, x) if reflected else (x, value)
        else:
            args = ins
        _mod(args[0], args[1], outs[0])
    return kernel


# ----------------------------------------------------------------------------------------------
# Gradients. `F` is the nd or sym namespace; `r` reduces a broadcast gradient to an input's shape.

def _r(F, grad, like):
    return F._reduce_to_shape(grad, like)


def _zeros_grad(F, attrs, ins, outs, og):
    return [F.zeros_like(x) for x in ins]


_BROADCAST_GRADIENTS = {
    'add': lambda F, a, b, out, og: [_r(F, og, a), _r(F, og, b)],
    'sub': lambda F, a, b, out, og: [_r(F, og, a), _r(F, -og, b)],
    'mul': lambda F, a, b, out, og: [_r(F, og * b, a), _r(F, og * a, b)],
    'div': lambda F, a, b, out, og: [_r(F, og / b, a), _r(F, -og * out / b, b)],
    'mod': lambda F, a, b, out, og: [_r(F, og, a), _r(F, -og * F.floor(a / b), b)],
    'power': lambda F, a, b, out, og: [_r(F, og * b * a ** (b - 1), a),
                                       _r(F, og * out * F.log(a), b)],
    'maximum': lambda F, a, b, out, og: [_r(F, og * (a >= b), a), _r(F, og * (a < b), b)],
    'minimum': lambda F, a, b, out, og: [_r(F, og * (a <= b), a), _r(F, og * (a > b), b)],
}


def _broadcast_gradient(kind):
    rule = _BROADCAST_GRADIENTS[kind]
    return lambda F, attrs, ins, outs, og: rule(F, ins[0], ins[1], outs[0], og[0])


# ----------------------------------------------------------------------------------------------
# Binary operators: same-shape (elemwise_*) and broadcasting (broadcast_*).

_BINARY = {
    # kind: (ufunc, quiet about division by zero)
    'add': (np.add, False), 'sub': (np.subtract, False), 'mul': (np.multiply, False),
    'div': (np.true_divide, True), 'power': (np.power, True),
    'maximum': (np.maximum, False), 'minimum': (np.minimum, False),
}

_ELEMWISE_ALIASES = {
    'add': ('_plus', '_add', '_Plus'), 'sub': ('_minus', '_sub', '_Minus'),
    'mul': ('_mul', '_Mul'), 'div': ('_div', '_Div'),
}

for _kind in ('add', 'sub', 'mul', 'div'):
    _ufunc, _quiet = _BINARY[_kind]
    register(f'elemwise_{_kind}', _binary_kernel(_ufunc, _quiet), inputs=('lhs', 'rhs'),
             infer_shape=same_shape, gradient=_broadcast_gradient(_kind), elemwise=True,
             inplace=((0, 0), (1, 0)), aliases=_ELEMWISE_ALIASES[_kind],
             doc=f'Element-wise {_kind} of two arrays of the same shape.')

for _kind, (_ufunc, _quiet) in _BINARY.items():
    register(f'broadcast_{_kind}', _binary_kernel(_ufunc, _quiet), inputs=('lhs', 'rhs'),
             infer_shape=_broadcast_shape, gradient=_broadcast_gradient(_kind), elemwise=True,
             aliases={'add': ('broadcast_plus',), 'sub': ('broadcast_minus',)}.get(_kind, ()),
             doc=f'Element-wise {_kind} with NumPy broadcasting.')

register('broadcast_mod', _mod_kernel(), inputs=('lhs', 'rhs'), infer_shape=_broadcast_shape,
         gradient=_broadcast_gradient('mod'), elemwise=True,
         doc='Element-wise modulo with broadcasting (sign of the divisor; x mod 0 is 0).')

_COMPARISONS = {
    'equal': np.equal, 'not_equal': np.not_equal, 'greater': np.greater,
    'greater_equal': np.greater_equal, 'lesser': np.less, 'lesser_equal': np.less_equal,
    'logical_and': np.logical_and, 'logical_or': np.logical_or, 'logical_xor': np.logical_xor,
}

for _kind, _ufunc in _COMPARISONS.items():
    register(f'broadcast_{_kind}', _binary_kernel(_ufunc), inputs=('lhs', 'rhs'),
             infer_shape=_broadcast_shape, gradient=_zeros_grad, elemwise=True,
             doc=f'1 where `lhs {_kind} rhs`, else 0, in the inputs\' dtype (broadcasting).')


# ----------------------------------------------------------------------------------------------
# Scalar operators.

def _scalar_grad(rule):
    return lambda F, attrs, ins, outs, og: [rule(F, ins[0], attrs['scalar'], outs[0], og[0])]


_SCALAR_OPS = {
    # name: (ufunc, reflected, quiet, gradient rule, MXNet's legacy alias)
    '_plus_scalar': (np.add, False, False, lambda F, x, s, out, og: og, '_PlusScalar'),
    '_minus_scalar': (np.subtract, False, False, lambda F, x, s, out, og: og, '_MinusScalar'),
    '_rminus_scalar': (np.subtract, True, False, lambda F, x, s, out, og: -og,
                       '_RMinusScalar'),
    '_mul_scalar': (np.multiply, False, False, lambda F, x, s, out, og: og * s, '_MulScalar'),
    '_div_scalar': (np.true_divide, False, True, lambda F, x, s, out, og: og / s,
                    '_DivScalar'),
    '_rdiv_scalar': (np.true_divide, True, True, lambda F, x, s, out, og: -og * out / x,
                     '_RDivScalar'),
    '_power_scalar': (np.power, False, True,
                      lambda F, x, s, out, og: og * s * x ** (s - 1), '_PowerScalar'),
    '_rpower_scalar': (np.power, True, True,
                       lambda F, x, s, out, og: og * out * math.log(s), '_RPowerScalar'),
    '_maximum_scalar': (np.maximum, False, False, lambda F, x, s, out, og: og * (x >= s),
                        '_MaximumScalar'),
    '_minimum_scalar': (np.minimum, False, False, lambda F, x, s, out, og: og * (x <= s),
                        '_MinimumScalar'),
}

for _name, (_ufunc, _reflected, _quiet, _rule, _alias) in _SCALAR_OPS.items():
    register(_name, _scalar_kernel(_ufunc, _reflected, _quiet), params=SCALAR,
             gradient=_scalar_grad(_rule), elemwise=True, inplace=((0, 0),), aliases=(_alias,),
             doc=f'{_name[1:-7]} of an array and a scalar'
                 f'{" (scalar on the left)" if _reflected else ""}.')

register('_mod_scalar', _mod_kernel(scalar=True), params=SCALAR, elemwise=True,
         gradient=_scalar_grad(lambda F, x, s, out, og: og), inplace=((0, 0),),
         aliases=('_ModScalar',), doc='x mod scalar (sign of the divisor; x mod 0 is 0).')
register('_rmod_scalar', _mod_kernel(reflected=True, scalar=True), params=SCALAR,
         elemwise=True, inplace=((0, 0),), aliases=('_RModScalar',),
         gradient=_scalar_grad(lambda F, x, s, out, og: -og * F.floor(s / x)),
         doc='scalar mod x (sign of the divisor; mod 0 is 0).')

_SCALAR_COMPARISONS = {
    '_equal_scalar': (np.equal, '_EqualScalar'),
    '_not_equal_scalar': (np.not_equal, '_NotEqualScalar'),
    '_greater_scalar': (np.greater, '_GreaterScalar'),
    '_greater_equal_scalar': (np.greater_equal, '_GreaterEqualScalar'),
    '_lesser_scalar': (np.less, '_LesserScalar'),
    '_lesser_equal_scalar': (np.less_equal, '_LesserEqualScalar'),
    '_logical_and_scalar': (np.logical_and, '_LogicalAndScalar'),
    '_logical_or_scalar': (np.logical_or, '_LogicalOrScalar'),
    '_logical_xor_scalar': (np.logical_xor, '_LogicalXorScalar'),
}

for _name, (_ufunc, _alias) in _SCALAR_COMPARISONS.items():
    register(_name, _scalar_kernel(_ufunc), params=SCALAR, gradient=_zeros_grad,
             elemwise=True, inplace=((0, 0),), aliases=(_alias,),
             doc=f'1 where `x {_name[1:-7]} scalar`, else 0, in the input dtype.')


# ----------------------------------------------------------------------------------------------
# Unary operators.

def _unary_kernel(ufunc, quiet):
    def kernel(attrs, ins, outs, ctx):
        if quiet:
            with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
                apply_ufunc(ufunc, ins, outs[0], casting='unsafe')
        else:
            apply_ufunc(ufunc, ins, outs[0], casting='unsafe')
    return kernel


def _rsqrt(x, out, casting='unsafe'):
    np.sqrt(x, out=out, casting=casting)
    np.reciprocal(out, out=out, casting=casting)


def _fix(x, out, casting='unsafe'):
    np.trunc(x, out=out, casting=casting)


def _round_half_away(x, out, casting='unsafe'):
    # MXNet's round rounds halves away from zero (C's round), unlike NumPy's half-to-even
    np.copysign(np.floor(np.abs(x) + 0.5), x, out=out, casting=casting)


_UNARY = {
    # name: (ufunc, quiet, gradient rule(F, x, out, og))
    'negative': (np.negative, False, lambda F, x, out, og: -og),
    'abs': (np.abs, False, lambda F, x, out, og: og * F.sign(x)),
    'sign': (np.sign, False, lambda F, x, out, og: F.zeros_like(x)),
    'sqrt': (np.sqrt, True, lambda F, x, out, og: og / (out * 2)),
    'rsqrt': (_rsqrt, True, lambda F, x, out, og: og * out ** 3 * -0.5),
    'cbrt': (np.cbrt, False, lambda F, x, out, og: og / (F.square(out) * 3)),
    'square': (np.square, False, lambda F, x, out, og: og * x * 2),
    'reciprocal': (np.reciprocal, True, lambda F, x, out, og: -og * F.square(out)),
    'exp': (np.exp, True, lambda F, x, out, og: og * out),
    'expm1': (np.expm1, True, lambda F, x, out, og: og * (out + 1)),
    'log': (np.log, True, lambda F, x, out, og: og / x),
    'log2': (np.log2, True, lambda F, x, out, og: og / (x * math.log(2))),
    'log10': (np.log10, True, lambda F, x, out, og: og / (x * math.log(10))),
    'log1p': (np.log1p, True, lambda F, x, out, og: og / (x + 1)),
    'floor': (np.floor, False, lambda F, x, out, og: F.zeros_like(x)),
    'ceil': (np.ceil, False, lambda F, x, out, og: F.zeros_like(x)),
    'round': (_round_half_away, False, lambda F, x, out, og: F.zeros_like(x)),
    'rint': (np.rint, False, lambda F, x, out, og: F.zeros_like(x)),
    'trunc': (np.trunc, False, lambda F, x, out, og: F.zeros_like(x)),
    'fix': (_fix, False, lambda F, x, out, og: F.zeros_like(x)),
}


def _unary_grad(rule):
    return lambda F, attrs, ins, outs, og: [rule(F, ins[0], outs[0], og[0])]


for _name, (_ufunc, _quiet, _rule) in _UNARY.items():
    register(_name, _unary_kernel(_ufunc, _quiet), gradient=_unary_grad(_rule), elemwise=True,
             inplace=((0, 0),), doc=f'Element-wise {_name}.')


# ----------------------------------------------------------------------------------------------
# Copies and constants shaped like an input.

def _copy_kernel(attrs, ins, outs, ctx):
    if outs[0] is not ins[0]:
        ctx.xp.copyto(outs[0], ins[0])


def _fill_kernel(value):
    def kernel(attrs, ins, outs, ctx):
        outs[0].fill(value)
    return kernel


register('_copy', _copy_kernel, gradient=lambda F, attrs, ins, outs, og: [og[0]],
         aliases=('identity',), inplace=((0, 0),), elemwise=True, doc='A copy of the input.')
register('BlockGrad', _copy_kernel, gradient=_zeros_grad, aliases=('stop_gradient',),
         inplace=((0, 0),), doc='The input, passing no gradient back.')
register('zeros_like', _fill_kernel(0), gradient=_zeros_grad,
         doc='Zeros of the input\'s shape and dtype.')
register('ones_like', _fill_kernel(1), gradient=_zeros_grad,
         doc='Ones of the input\'s shape and dtype.')


# ----------------------------------------------------------------------------------------------
# Reducing a broadcast gradient back to an input's shape.

def _reduced_axes(from_shape, to_shape):
    """Axes of `from_shape` to sum so that the result reshapes to `to_shape`."""
    lead = len(from_shape) - len(to_shape)
    padded = (1,) * lead + tuple(to_shape)
    return tuple(i for i, (a, b) in enumerate(zip(from_shape, padded)) if b == 1 and a != 1
                 or i < lead)


def _reduce_to_shape_kernel(attrs, ins, outs, ctx):
    data, out = ins[0], outs[0]
    axes = _reduced_axes(data.shape, out.shape)
    if axes:
        ctx.xp.sum(data, axis=axes, out=out.reshape([1 if i in axes else d for i, d
                                                     in enumerate(data.shape)]),
                   keepdims=True)
    else:
        out[...] = data.reshape(out.shape)


def _reduce_to_shape_infer(attrs, in_shapes):
    data, like = in_shapes
    if data is not None and like is not None:
        broadcast_shapes(data, like)
    return list(in_shapes), [like]


register('_reduce_to_shape', _reduce_to_shape_kernel, inputs=('data', 'like'),
         infer_shape=_reduce_to_shape_infer,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
         gradient=lambda F, attrs, ins, outs, og: [F.broadcast_like(og[0], ins[0]),
                                                   F.zeros_like(ins[1])],
         doc='Sum `data` over the axes along which `like` was broadcast, giving `like`\'s '
             'shape (the gradient of a broadcasting operator).')


# ----------------------------------------------------------------------------------------------
# add_n / ElementWiseSum

def _add_n_kernel(attrs, ins, outs, ctx):
    xp, out = ctx.xp, outs[0]
    if len(ins) == 1:
        if out is not ins[0]:
            out[...] = ins[0]
        return
    xp.add(ins[0], ins[1], out=out)
    for extra in ins[2:]:
        xp.add(out, extra, out=out)


register('add_n', _add_n_kernel, inputs=variadic_names, infer_shape=same_shape,
         variadic='num_args', params=(NUM_ARGS,), inplace=((0, 0),),
         aliases=('ElementWiseSum',),
         gradient=lambda F, attrs, ins, outs, og: [og[0]] * len(ins),
         doc='The element-wise sum of any number of arrays of one shape.')
