"""``mx.sym.contrib``: the operators registered as ``_contrib_*`` and MXNet's hand-written
contrib functions.

>>> import ember.symbol as sym
>>> sym.contrib.box_iou(sym.var('a'), sym.var('b')).infer_shape(a=(4, 4), b=(3, 4))[1]
[(4, 3)]
"""
import math as _math

from ember.op import frontend as _frontend
from ember.op import registry as _registry
from ember.symbol import random as _random
from ember.symbol.random import uniform  # noqa: F401  (MXNet's contrib module has it)
from ember.symbol.control_flow import cond, foreach, while_loop  # noqa: F401
from ember.symbol.register import make_function as _make_function
from ember.symbol.symbol import Symbol as _Symbol, create as _create


def _call(op_name, inputs, **params):
    return _create(_registry.get(op_name), op_name.lstrip('_').lower(), list(inputs),
                   params=params)


def rand_zipfian(true_classes, num_sampled, range_max):
    """Symbols of `num_sampled` log-uniform (Zipfian) draws over [0, range_max), the expected
    counts of true_classes and those of the draws (see mx.nd.contrib.rand_zipfian)."""
    log_range = _math.log(range_max + 1)
    draws = _random.uniform(0, log_range, shape=(num_sampled,), dtype='float64')
    sampled = _call('_mod_scalar', [_call('Cast', [_call('expm1', [draws])], dtype='int64')],
                    scalar=range_max)
    return (sampled,
            _expected_count(_call('Cast', [true_classes], dtype='float64'), log_range,
                            num_sampled),
            _expected_count(_call('Cast', [sampled], dtype='float64'), log_range, num_sampled))


def _expected_count(classes, log_range, num_sampled):
    ratio = _call('broadcast_div', [_call('_plus_scalar', [classes], scalar=2.0),
                                    _call('_plus_scalar', [classes], scalar=1.0)])
    return _call('_mul_scalar', [_call('log', [ratio])], scalar=num_sampled / log_range)


def _rescale_symbol(rescale_grad):
    if isinstance(rescale_grad, _Symbol):
        return rescale_grad
    return _call('_full', [], shape=(1,), value=float(rescale_grad))


def adamw_update(weight, grad, mean, var, rescale_grad, lr, eta, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, wd=0, clip_gradient=-1, out=None, name=None, **kwargs):
    """AdamW's step as a graph node (see mx.nd.contrib.adamw_update); rescale_grad is a
    number or a one-element symbol."""
    return _call('_adamw_update', [weight, grad, mean, var, _rescale_symbol(rescale_grad)],
                 lr=lr, eta=eta, beta1=beta1, beta2=beta2, epsilon=epsilon, wd=wd,
                 clip_gradient=clip_gradient, **kwargs)


def mp_adamw_update(weight, grad, mean, var, weight32, rescale_grad, lr, eta, beta1=0.9,
                    beta2=0.999, epsilon=1e-8, wd=0, clip_gradient=-1, out=None, name=None,
                    **kwargs):
    """adamw_update on the float32 master copy `weight32`, as a graph node."""
    return _call('_mp_adamw_update', [weight, grad, mean, var, weight32,
                                      _rescale_symbol(rescale_grad)],
                 lr=lr, eta=eta, beta1=beta1, beta2=beta2, epsilon=epsilon, wd=wd,
                 clip_gradient=clip_gradient, **kwargs)


_generator = _frontend.Submodule(globals(), ('_contrib_',), _make_function, __name__)


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ = sorted(_generator.names() + ['rand_zipfian', 'foreach', 'while_loop', 'cond',
                                        'adamw_update', 'mp_adamw_update'])
