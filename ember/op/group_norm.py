"""GroupNorm: normalisation over groups of channels (MXNet 1.x: one gamma and one beta per
group, not per channel).

The channels of data (N, C, ...) split into ``num_groups`` groups; each (sample, group) is
normalised by its own mean and standard deviation. The hidden outputs are those statistics,
shaped (N, num_groups); ``output_mean_var`` makes them visible.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('GroupNorm')
>>> attrs = op.parse_attrs({'num_groups': 2})
>>> op.infer_shape(attrs, [(4, 6, 3), None, None])
([(4, 6, 3), (2,), (2,)], [(4, 6, 3), (4, 2), (4, 2)])
"""
from __future__ import annotations

import numpy as np

from ember.op.host import register
from ember.op.registry import Param, ShapeError, p_bool, p_float, p_int

__all__ = []

_PARAMS = (Param('num_groups', p_int, 1, 'Groups the channels split into.'),
           Param('eps', p_float, 1e-5, 'Added to the variance.'),
           Param('output_mean_var', p_bool, False, 'Also return the mean and the std.'))


def _shape(attrs, in_shapes):
    data = in_shapes[0]
    groups = attrs['num_groups']
    if data is None:
        return list(in_shapes), [None] * 3
    if len(data) < 2 or groups < 1 or data[1] % groups:
        raise ShapeError(f'data {data} must have channels (axis 1) divisible by num_groups='
                         f'{groups}')
    stats = (data[0], groups)
    return [data, (groups,), (groups,)], [data, stats, stats]


def _type(attrs, in_dtypes):
    dtype = next((d for d in in_dtypes if d is not None), None)
    return [dtype] * 3, [dtype] * 3


def _grouped(x, groups):
    """(N, C, ...) -> (N, groups, C/groups * spatial)."""
    return x.reshape(x.shape[0], groups, -1)


def _per_group(values, x):
    """(groups,) -> broadcastable against (N, groups, channels per group, spatial)."""
    return values.reshape(1, -1, 1, 1)


def _kernel(attrs, ins, outs, ctx):
    data, gamma, beta = ins
    out, mean, std = outs
    groups = attrs['num_groups']
    flat = _grouped(data, groups)
    mean[...] = flat.mean(axis=-1)
    std[...] = np.sqrt(flat.var(axis=-1) + attrs['eps'])
    normal = (flat - mean[..., None]) / std[..., None]
    split = normal.reshape(data.shape[0], groups, data.shape[1] // groups, -1)
    out[...] = (split * _per_group(gamma, split) + _per_group(beta, split)).reshape(data.shape)


def _backward(attrs, ins, outs, ctx):
    grad, data, gamma, mean, std = ins
    data_grad, gamma_grad, beta_grad = outs
    groups = attrs['num_groups']
    per_group = (data.shape[0], groups, data.shape[1] // groups, -1)
    normal = ((_grouped(data, groups) - mean[..., None]) / std[..., None]).reshape(per_group)
    g = grad.reshape(per_group)
    gamma_grad[...] = (g * normal).sum(axis=(0, 2, 3))
    beta_grad[...] = g.sum(axis=(0, 2, 3))
    scaled = _grouped((g * _per_group(gamma, g)).reshape(data.shape), groups)
    normal = normal.reshape(scaled.shape)
    data_grad[...] = ((scaled - scaled.mean(axis=-1, keepdims=True)
                       - normal * (scaled * normal).mean(axis=-1, keepdims=True))
                      / std[..., None]).reshape(data.shape)


register('GroupNorm', _kernel, inputs=('data', 'gamma', 'beta'),
         outputs=('output', 'mean', 'std'),
         visible_outputs=lambda attrs: 3 if attrs['output_mean_var'] else 1,
         infer_shape=_shape, infer_type=_type, params=_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: list(F._backward_GroupNorm(
             og[0], ins[0], ins[1], outs[1], outs[2], **attrs)),
         doc='Group normalisation: each group of channels of each sample normalised, then '
             'scaled and shifted by its group\'s gamma and beta.')
register('_backward_GroupNorm', _backward, inputs=('out_grad', 'data', 'gamma', 'mean', 'std'),
         outputs=('data_grad', 'gamma_grad', 'beta_grad'), params=_PARAMS,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1], shapes[2], shapes[2]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]] * 3),
         doc='The gradients of GroupNorm.')
