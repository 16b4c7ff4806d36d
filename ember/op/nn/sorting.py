"""topk, sort and argsort along one axis (or the flattened array when axis is None).

Ties keep their original order (a stable sort), ascending or descending alike.
"""
from __future__ import annotations

import numpy as np

from ember.op.nn._common import normalize_axis
from ember.op.registry import Param, ShapeError, p_bool, p_dtype, p_enum, p_int, p_optional, \
    register

_INDEX_DTYPES = ('float16', 'float32', 'float64', 'int32', 'int64', 'uint8')


def _index_dtype(value):
    dtype = p_dtype(value)
    if dtype is None or dtype.name not in _INDEX_DTYPES:
        raise ValueError(', '.join(_INDEX_DTYPES))
    return dtype


_AXIS = Param('axis', p_optional(p_int), -1, 'None sorts the flattened array.')
_INDEX_DTYPE = Param('dtype', _index_dtype, np.dtype(np.float32), 'dtype of returned indices.')

TOPK_PARAMS = (
    _AXIS,
    Param('k', p_int, 1, 'Elements to keep; k < 1 keeps all.'),
    Param('ret_typ', p_enum('both', 'indices', 'mask', 'value'), 'indices',
          'value, indices, both (value and indices) or a 0/1 mask of the chosen positions.'),
    Param('is_ascend', p_bool, False, 'Choose the smallest instead of the largest.'),
    _INDEX_DTYPE,
)
SORT_PARAMS = (_AXIS, Param('is_ascend', p_bool, True))
ARGSORT_PARAMS = SORT_PARAMS + (_INDEX_DTYPE,)


def _flat_axis(name, attrs, shape):
    """(shape sorted along, axis) with axis None meaning the flattened array."""
    if attrs['axis'] is None:
        return (int(np.prod(shape)),), 0
    return tuple(shape), normalize_axis(name, attrs['axis'], len(shape))


def _keep(attrs, length):
    k = attrs.get('k', 0)
    return length if k < 1 else k


def order(xp, x, axis, ascending):
    """Stable argsort of `x` along `axis`, ascending or descending."""
    if ascending:
        return xp.argsort(x, axis=axis, kind='stable')
    keys = -x.astype(np.int64) if x.dtype.kind in 'ub' else -x
    return xp.argsort(keys, axis=axis, kind='stable')


def _chosen(attrs, xp, x):
    """(data as sorted along, axis, the first k indices in order)."""
    if attrs['axis'] is None:
        x, axis = x.reshape(-1), 0
    else:
        axis = attrs['axis'] % x.ndim
    indices = order(xp, x, axis, attrs['is_ascend'])
    k = _keep(attrs, x.shape[axis])
    return x, axis, xp.take(indices, xp.arange(k), axis=axis)


# ----------------------------------------------------------------------------------------------
# topk

def _topk_outputs(attrs):
    kind = attrs['ret_typ']
    return {'indices': ['indices'], 'mask': ['mask']}.get(kind, ['value', 'indices'])


def _topk_infer(attrs, in_shapes):
    data = in_shapes[0]
    count = len(_topk_outputs(attrs))
    if data is None:
        return list(in_shapes), [None] * count
    shape, axis = _flat_axis('topk', attrs, data)
    k = _keep(attrs, shape[axis])
    if k > shape[axis]:
        raise ShapeError(f'topk: k={k} exceeds the {shape[axis]} elements along axis '
                         f'{attrs["axis"]} of shape {tuple(data)}')
    if attrs['ret_typ'] == 'mask':
        return list(in_shapes), [tuple(data)]
    chosen = shape[:axis] + (k,) + shape[axis + 1:]
    return list(in_shapes), [chosen] * count


def _topk_type(attrs, in_dtypes):
    data, kind = in_dtypes[0], attrs['ret_typ']
    if kind == 'indices':
        return list(in_dtypes), [attrs['dtype']]
    if kind == 'mask':
        return list(in_dtypes), [data]
    return list(in_dtypes), [data, attrs['dtype']]


def _topk_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    x, axis, indices = _chosen(attrs, xp, ins[0])
    kind = attrs['ret_typ']
    if kind == 'mask':
        mask = xp.zeros(x.shape, outs[0].dtype)
        xp.put_along_axis(mask, indices, 1, axis=axis)
        outs[0][...] = mask.reshape(outs[0].shape)
    elif kind == 'indices':
        outs[0][...] = indices
    else:
        outs[0][...] = xp.take_along_axis(x, indices, axis=axis)
        outs[1][...] = indices


def _topk_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, indices): scatter the gradient of the chosen values."""
    xp, (dy, x, indices) = ctx.xp, ins
    grad = xp.zeros(x.shape if attrs['axis'] is not None else (x.size,), outs[0].dtype)
    axis = 0 if attrs['axis'] is None else attrs['axis'] % x.ndim
    xp.put_along_axis(grad, indices.astype(np.int64), dy, axis=axis)
    outs[0][...] = grad.reshape(outs[0].shape)


def _axis_kwarg(attrs):
    # 'None' (MXNet's text form) rather than None, which keyword parsing reads as "not given"
    return 'None' if attrs['axis'] is None else attrs['axis']


def _topk_gradient(F, attrs, inputs, outputs, out_grads):
    if attrs['ret_typ'] not in ('value', 'both'):
        return [None]
    kwargs = dict(attrs, axis=_axis_kwarg(attrs))
    return [F._backward_topk(out_grads[0], inputs[0], outputs[1], **kwargs)]


register('topk', _topk_kernel, infer_shape=_topk_infer, infer_type=_topk_type,
         outputs=_topk_outputs,
         visible_outputs=lambda attrs: 2 if attrs['ret_typ'] == 'both' else 1,
         params=TOPK_PARAMS, gradient=_topk_gradient,
         doc='The k largest (or smallest) elements along an axis: values, indices, both, or a '
             'mask.')

register('_backward_topk', _topk_backward_kernel, inputs=('out_grad', 'data', 'indices'),
         outputs=('data_grad',), params=TOPK_PARAMS,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]))


# ----------------------------------------------------------------------------------------------
# sort and argsort

def _sorted_shape(name):
    def infer(attrs, in_shapes):
        data = in_shapes[0]
        if data is None:
            return list(in_shapes), [None] * (2 if name == 'sort' else 1)
        shape, _ = _flat_axis(name, attrs, data)
        return list(in_shapes), [shape] * (2 if name == 'sort' else 1)
    return infer


def _sort_kernel(attrs, ins, outs, ctx):
    """Output 1 (hidden) holds the order, for the gradient."""
    x, axis, indices = _chosen(attrs, ctx.xp, ins[0])
    outs[0][...] = ctx.xp.take_along_axis(x, indices, axis=axis)
    outs[1][...] = indices


def _sort_gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_topk(out_grads[0], inputs[0], outputs[1], axis=_axis_kwarg(attrs), k=0,
                             ret_typ='value', is_ascend=attrs['is_ascend'])]


def _argsort_kernel(attrs, ins, outs, ctx):
    outs[0][...] = _chosen(attrs, ctx.xp, ins[0])[2]


register('sort', _sort_kernel, infer_shape=_sorted_shape('sort'), outputs=('output', 'indices'),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0], np.dtype(np.int64)]),
         visible_outputs=1, params=SORT_PARAMS, gradient=_sort_gradient,
         doc='Sorted copy along an axis (ascending unless is_ascend=False).')

register('argsort', _argsort_kernel, infer_shape=_sorted_shape('argsort'),
         infer_type=lambda attrs, dtypes: (list(dtypes), [attrs['dtype']]),
         params=ARGSORT_PARAMS, gradient=lambda F, attrs, ins, outs, og: [None],
         doc='Indices that sort the array along an axis.')
