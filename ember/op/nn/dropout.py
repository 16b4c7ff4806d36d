"""Dropout: zero each element with probability p and scale the rest by 1 / (1 - p)."""
from __future__ import annotations

from ember.op.nn._common import normalize_axis, shape_param
from ember.op.registry import Param, ShapeError, p_bool, p_enum, p_float, p_optional, register

PARAMS = (
    Param('p', p_float, 0.5, 'Probability of dropping an element.'),
    Param('mode', p_enum('training', 'always'), 'training',
          'training: only while training; always: in prediction too.'),
    shape_param('axes', doc='Axes along which one draw is shared (variational dropout).'),
    Param('cudnn_off', p_optional(p_bool), False, 'Accepted for compatibility.'),
)


def _infer(attrs, in_shapes):
    data = in_shapes[0]
    if not 0 <= attrs['p'] <= 1:
        raise ShapeError(f'Dropout: p={attrs["p"]} must lie in [0, 1]')
    if data is not None:
        for axis in attrs['axes']:
            normalize_axis('Dropout', axis, len(data), 'axes entry')
    return list(in_shapes), [data, data]


def _draw_shape(attrs, shape):
    shared = {axis % len(shape) for axis in attrs['axes']}
    return tuple(1 if i in shared else n for i, n in enumerate(shape))


def _kernel(attrs, ins, outs, ctx):
    """Output 1 is the mask (0 or 1 / (1 - p)); outside training it is all ones."""
    x, (out, mask) = ins[0], outs
    keep = 1 - attrs['p']
    if attrs['p'] == 0 or not (ctx.is_train or attrs['mode'] == 'always'):
        mask.fill(1)
        out[...] = x
        return
    dtype = 'float64' if x.dtype.itemsize == 8 else 'float32'
    draws = ctx.random.generator.random(_draw_shape(attrs, x.shape), dtype=dtype)
    mask[...] = (draws < keep) / keep if keep > 0 else 0
    ctx.xp.multiply(x, mask, out=out)


def _backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, mask)."""
    ctx.xp.multiply(ins[0], ins[1], out=outs[0])


def _gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_Dropout(out_grads[0], outputs[1], **attrs)]


register('Dropout', _kernel, infer_shape=_infer, outputs=('output', 'mask'), visible_outputs=1,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]] * 2),
         params=PARAMS, gradient=_gradient, resources=('dropout',), random=True,
         inplace=((0, 0),),
         doc='Randomly zero elements while training, scaling the kept ones by 1 / (1 - p).')

register('_backward_Dropout', _backward_kernel, inputs=('out_grad', 'mask'),
         outputs=('data_grad',), params=PARAMS, inplace=((0, 0),))
