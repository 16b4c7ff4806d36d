"""``_bn_apply``: BatchNorm's output recomputed from the statistics it used.

A training BatchNorm updates its moving statistics, so running it a second time (as
:mod:`~ember.passes.mirror` recomputes nodes in the backward pass) would update them twice. This
hidden operator instead takes the mean and inverse standard deviation the BatchNorm node gave as
its hidden outputs 1 and 2 and applies them with the function BatchNorm's kernel ends with
(``normalization._normalize``; its compiled kernel repeats the same float operations), so the
recomputed output is bit-identical to the forward one.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_bn_apply')
>>> attrs = op.parse_attrs({'fix_gamma': False})
>>> x = np.array([[1., 3.], [3., 5.]], np.float32)
>>> gamma, beta = np.float32([2, 1]), np.float32([0, 1])
>>> mean, invstd = np.float32([2, 4]), np.float32([1, 1])
>>> out = [np.empty_like(x)]
>>> op.kernel(attrs, [x, gamma, beta, mean, invstd], out, registry.KernelContext(None))
>>> out[0]
array([[-2.,  0.],
       [ 2.,  2.]], dtype=float32)
"""
from __future__ import annotations

from ember.op.nn._common import normalize_axis, outputs_of
from ember.op.nn.normalization import BN_PARAMS, _normalize, _param_dtype
from ember.op.registry import register


def _apply_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None]
    channels = (data[normalize_axis('_bn_apply', attrs['axis'], len(data))],)
    return [tuple(data)] + [s if s is not None else channels for s in in_shapes[1:]], [data]


def _apply_type(attrs, in_dtypes):
    data = in_dtypes[0]
    param = _param_dtype(data)
    return [data] + [d if d is not None else param for d in in_dtypes[1:]], [data]


def _apply_kernel(attrs, ins, outs, ctx):
    """The last step of BatchNorm's kernel, with its mean and invstd given."""
    x, gamma, beta, mean, invstd = ins
    _normalize(attrs, x, gamma, beta, mean, invstd, outs[0])


def _apply_gradient(F, attrs, inputs, outputs, out_grads):
    """BatchNorm's backward with the statistics taken as given (``use_global_stats``), always
    with a gamma (ones under fix_gamma) so that sum(dy * xhat) comes back for invstd too."""
    data, gamma, _, mean, invstd = inputs
    scale = F.ones_like(gamma) if attrs['fix_gamma'] else gamma
    given = {**attrs, 'use_global_stats': True, 'fix_gamma': False}
    data_grad, xhat_grad, beta_grad = outputs_of(
        F._backward_BatchNorm(out_grads[0], data, scale, mean, invstd, **given), 3)
    gamma_grad = F.zeros_like(gamma) if attrs['fix_gamma'] else xhat_grad
    # out = x * scale * invstd + beta - mean * scale * invstd, channel by channel
    mean_grad = F.negative(beta_grad * scale * invstd)
    invstd_grad = xhat_grad * scale / invstd
    return [data_grad, gamma_grad, beta_grad, mean_grad, invstd_grad]


register('_bn_apply', _apply_kernel, infer_shape=_apply_infer, infer_type=_apply_type,
         inputs=('data', 'gamma', 'beta', 'mean', 'invstd'), outputs=('output',),
         params=BN_PARAMS, gradient=_apply_gradient,
         doc="BatchNorm's output from given batch statistics (mean, 1/sqrt(var + eps)).")
