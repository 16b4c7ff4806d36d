"""Element-wise math beyond ember/op/elemwise.py: trigonometric and hyperbolic functions,
activations (relu, sigmoid, softsign, hard_sigmoid, log_sigmoid, mish), erf, erfinv, gamma,
gammaln, rcbrt, degrees, radians and logical_not.

Kernels have the ufunc signature ``f(x, out, casting)`` so that ``elemwise.apply_ufunc`` splits
large arrays across the kernel threads; gradients are written with ``F``.
"""
from __future__ import annotations

import math

import numpy as np

from ember.op.elemwise import apply_ufunc
from ember.op.nn import _special
from ember.op.nn.activation import sigmoid, softrelu, softsign
from ember.op.registry import Param, p_float, register


class _composite:
    """A ufunc-like callable (x, out, casting) from fn(xp, x) -> array."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x, out, casting='unsafe'):
        out[...] = self.fn(np, x)


def _relu(x, out, casting='unsafe'):
    np.maximum(x, 0, out=out, casting=casting)


def _log_sigmoid(xp, x):
    return -softrelu(xp, -x)


def _mish(xp, x):
    return x * xp.tanh(softrelu(xp, x))


def _mish_grad(F, x, out, og):
    smooth = F.tanh(F.Activation(x, act_type='softrelu'))
    return og * (smooth + x * F.sigmoid(x) * (1 - F.square(smooth)))


def _logical_not(x, out, casting='unsafe'):
    np.equal(x, 0, out=out, casting=casting)


def _zero_grad(F, x, out, og):
    return F.zeros_like(x)


_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)

_UNARY = {
    # name: (kernel f(x, out, casting), gradient rule(F, x, out, og))
    'sin': (np.sin, lambda F, x, out, og: og * F.cos(x)),
    'cos': (np.cos, lambda F, x, out, og: -og * F.sin(x)),
    'tan': (np.tan, lambda F, x, out, og: og * (F.square(out) + 1)),
    'arcsin': (np.arcsin, lambda F, x, out, og: og / F.sqrt(1 - F.square(x))),
    'arccos': (np.arccos, lambda F, x, out, og: -og / F.sqrt(1 - F.square(x))),
    'arctan': (np.arctan, lambda F, x, out, og: og / (F.square(x) + 1)),
    'sinh': (np.sinh, lambda F, x, out, og: og * F.cosh(x)),
    'cosh': (np.cosh, lambda F, x, out, og: og * F.sinh(x)),
    'tanh': (np.tanh, lambda F, x, out, og: og * (1 - F.square(out))),
    'arcsinh': (np.arcsinh, lambda F, x, out, og: og / F.sqrt(F.square(x) + 1)),
    'arccosh': (np.arccosh, lambda F, x, out, og: og / F.sqrt(F.square(x) - 1)),
    'arctanh': (np.arctanh, lambda F, x, out, og: og / (1 - F.square(x))),
    'degrees': (np.degrees, lambda F, x, out, og: og * (180 / math.pi)),
    'radians': (np.radians, lambda F, x, out, og: og * (math.pi / 180)),
    'rcbrt': (_composite(lambda xp, x: 1 / xp.cbrt(x)),
              lambda F, x, out, og: og * F.square(F.square(out)) * (-1 / 3)),
    'relu': (_relu, lambda F, x, out, og: og * (out > 0)),
    'sigmoid': (_composite(sigmoid), lambda F, x, out, og: og * out * (1 - out)),
    'softsign': (_composite(softsign),
                 lambda F, x, out, og: og / F.square(F.abs(x) + 1)),
    'log_sigmoid': (_composite(_log_sigmoid), lambda F, x, out, og: og * (1 - F.exp(out))),
    'mish': (_composite(_mish), _mish_grad),
    'erf': (_composite(_special.erf),
            lambda F, x, out, og: og * F.exp(-F.square(x)) * _TWO_OVER_SQRT_PI),
    'erfinv': (_composite(_special.erfinv),
               lambda F, x, out, og: og * F.exp(F.square(out)) / _TWO_OVER_SQRT_PI),
    'gamma': (_composite(_special.gamma), lambda F, x, out, og: og * out * F._digamma(x)),
    'gammaln': (_composite(_special.gammaln), lambda F, x, out, og: og * F._digamma(x)),
    'logical_not': (_logical_not, _zero_grad),
}


def _unary_kernel(ufunc):
    def kernel(attrs, ins, outs, ctx):
        with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
            if isinstance(ufunc, _composite) and ctx.xp is not np:
                outs[0][...] = ufunc.fn(ctx.xp, ins[0])
            else:
                apply_ufunc(ufunc, ins, outs[0], casting='unsafe')
    return kernel


def _unary_gradient(rule):
    return lambda F, attrs, ins, outs, og: [rule(F, ins[0], outs[0], og[0])]


for _name, (_ufunc, _rule) in _UNARY.items():
    register(_name, _unary_kernel(_ufunc), gradient=_unary_gradient(_rule), elemwise=True,
             inplace=((0, 0),), doc=f'Element-wise {_name}.')

register('_digamma', _unary_kernel(_composite(_special.digamma)), elemwise=True,
         inplace=((0, 0),), doc='The digamma function (the gradient of gammaln).')


# ----------------------------------------------------------------------------------------------
# hard_sigmoid: clip(alpha x + beta, 0, 1).

HARD_SIGMOID_PARAMS = (Param('alpha', p_float, 0.2), Param('beta', p_float, 0.5))


def _hard_sigmoid_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.clip(attrs['alpha'] * ins[0] + attrs['beta'], 0, 1)


def _hard_sigmoid_gradient(F, attrs, inputs, outputs, out_grads):
    out = outputs[0]
    return [out_grads[0] * ((out > 0) * (out < 1)) * attrs['alpha']]


register('hard_sigmoid', _hard_sigmoid_kernel, params=HARD_SIGMOID_PARAMS,
         gradient=_hard_sigmoid_gradient, elemwise=True, inplace=((0, 0),),
         doc='clip(alpha * x + beta, 0, 1).')
