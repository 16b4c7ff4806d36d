"""Output layers of MXNet's symbolic training: SoftmaxOutput, the regression outputs and
MakeLoss. Their backward pass is the gradient of the loss they stand for, not of their forward
output (SoftmaxOutput's is softmax - onehot(label)), and ignores the incoming gradient."""
from __future__ import annotations

import numpy as np

from ember.base import prod
from ember.op.nn._common import accumulation_dtype, assign_shape, typed_like_first
from ember.op.nn.activation import sigmoid
from ember.op.nn.softmax import softmax_of
from ember.op.registry import Param, ShapeError, like_input, p_bool, p_enum, p_float, register

_NORMALIZATION = p_enum('null', 'batch', 'valid')

SOFTMAX_OUTPUT_PARAMS = (
    Param('grad_scale', p_float, 1.0),
    Param('ignore_label', p_float, -1.0),
    Param('multi_output', p_bool, False, 'Softmax over axis 1 of (N, C, ...) data, with one '
          'label per position.'),
    Param('use_ignore', p_bool, False, 'Give rows labelled ignore_label no gradient.'),
    Param('preserve_shape', p_bool, False, 'Softmax over the last axis, keeping the shape.'),
    Param('normalization', _NORMALIZATION, 'null',
          'Divide the gradient by 1 (null), the batch size or the count of valid labels.'),
    Param('out_grad', p_bool, False, 'Multiply by the incoming gradient.'),
    Param('smooth_alpha', p_float, 0.0, 'Label smoothing: spread this much of the target '
          'probability over the other classes.'),
)


def _label_shape(attrs, data):
    if attrs['multi_output']:
        return (data[0],) + tuple(data[2:])
    if attrs['preserve_shape'] or len(data) == 2:
        return tuple(data[:-1])
    return (data[0],)


def _softmax_output_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None]
    label, expected = in_shapes[1], _label_shape(attrs, data)
    # probability labels (the shape of data), and (N, prod(spatial)) for multi_output, also fit
    accepted = label is not None and (tuple(label) == tuple(data) or (
        attrs['multi_output'] and tuple(label) == (data[0], prod(data[2:]))))
    if not accepted:
        assign_shape('SoftmaxOutput', in_shapes, 1, 'label', expected)
    return in_shapes, [tuple(data)]


def _class_view(attrs, array):
    """(array as rows or (N, C, rest), class axis) of SoftmaxOutput data."""
    if attrs['multi_output']:
        return array.reshape(array.shape[0], array.shape[1], -1), 1
    if attrs['preserve_shape'] or array.ndim == 2:
        return array, array.ndim - 1
    return array.reshape(array.shape[0], -1), 1


def _softmax_output_kernel(attrs, ins, outs, ctx):
    x, axis = _class_view(attrs, ins[0])
    outs[0][...] = softmax_of(ctx.xp, x, axis, safe=ctx.safe_accumulation).reshape(outs[0].shape)


def _softmax_output_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (head_grad, output, label): (softmax - target) * grad_scale / normalizer."""
    xp, (dy, out, label) = ctx.xp, ins
    prob, axis = _class_view(attrs, out)
    if label.shape == out.shape:
        grad, valid = prob - label.reshape(prob.shape), None
    else:
        grad, valid = _minus_target(xp, attrs, prob, axis, label)
    grad = grad * (attrs['grad_scale'] / _normalizer(attrs, label, valid, out.shape[0]))
    if attrs['out_grad']:
        grad = grad * dy.reshape(grad.shape)
    outs[0][...] = grad.reshape(outs[0].shape)


def _minus_target(xp, attrs, prob, axis, label):
    classes = prob.shape[axis]
    index = label.reshape(prob.shape[:axis] + prob.shape[axis + 1:]).astype(xp.int64)
    hot = xp.expand_dims(index, axis) == xp.arange(classes).reshape(
        (-1,) + (1,) * (prob.ndim - axis - 1))
    alpha = attrs['smooth_alpha']
    target = hot * (1 - alpha) + ~hot * (alpha / max(classes - 1, 1)) if alpha else hot
    grad = prob - target
    valid = None
    if attrs['use_ignore']:
        valid = index != int(attrs['ignore_label'])
        grad = grad * xp.expand_dims(valid, axis)
    return grad, valid


def _normalizer(attrs, label, valid, batch):
    kind = attrs['normalization']
    if kind == 'batch':
        return batch if attrs['multi_output'] else label.size
    if kind == 'valid':
        return max(int(valid.sum()) if valid is not None else label.size, 1)
    return 1


def _softmax_output_gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_SoftmaxOutput(out_grads[0], outputs[0], inputs[1], **attrs), None]


register('SoftmaxOutput', _softmax_output_kernel, infer_shape=_softmax_output_infer,
         infer_type=typed_like_first(free=(1,)), inputs=('data', 'label'),
         params=SOFTMAX_OUTPUT_PARAMS, gradient=_softmax_output_gradient, aliases=('Softmax',),
         doc='Softmax forward; backward is the cross-entropy gradient softmax - onehot(label).')

register('_backward_SoftmaxOutput', _softmax_output_backward_kernel,
         inputs=('head_grad', 'output', 'label'), outputs=('data_grad',),
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
         params=SOFTMAX_OUTPUT_PARAMS)


# ----------------------------------------------------------------------------------------------
# Regression outputs: forward is the identity (or sigmoid), backward the loss gradient.

REGRESSION_PARAMS = (Param('grad_scale', p_float, 1.0),)

_REGRESSIONS = {
    'LinearRegressionOutput': (None, lambda xp, diff: diff),
    'LogisticRegressionOutput': (sigmoid, lambda xp, diff: diff),
    'MAERegressionOutput': (None, lambda xp, diff: xp.sign(diff)),
}


def _regression_infer(name):
    def infer(attrs, in_shapes):
        in_shapes = list(in_shapes)
        data, label = in_shapes
        if data is None:
            return in_shapes, [None]
        flat_label = label is not None and len(label) == 1 and tuple(data) == (label[0], 1)
        if not flat_label:
            assign_shape(name, in_shapes, 1, 'label', data)
        return in_shapes, [tuple(data)]
    return infer


def _regression_kernel(name):
    forward = _REGRESSIONS[name][0]

    def kernel(attrs, ins, outs, ctx):
        outs[0][...] = ins[0] if forward is None else forward(ctx.xp, ins[0])
    return kernel


def _regression_backward_kernel(name):
    slope = _REGRESSIONS[name][1]

    def kernel(attrs, ins, outs, ctx):
        """Inputs (out_grad, output, label); scaled by grad_scale / outputs per sample."""
        out, label = ins[1], ins[2]
        per_sample = out.size // out.shape[0] if out.ndim else 1
        diff = out - label.reshape(out.shape)
        outs[0][...] = slope(ctx.xp, diff) * (attrs['grad_scale'] / per_sample)
    return kernel


def _register_regression(name):
    backward = f'_backward_{name}'

    def gradient(F, attrs, inputs, outputs, out_grads):
        return [getattr(F, backward)(out_grads[0], outputs[0], inputs[1], **attrs), None]
    register(name, _regression_kernel(name), infer_shape=_regression_infer(name),
             infer_type=typed_like_first(free=(1,)), inputs=('data', 'label'),
             params=REGRESSION_PARAMS, gradient=gradient,
             doc=f'{name}: the gradient of its loss with respect to the data.')
    register(backward, _regression_backward_kernel(name),
             inputs=('head_grad', 'output', 'label'), outputs=('data_grad',),
             infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
             infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]),
             params=REGRESSION_PARAMS)


for _name in _REGRESSIONS:
    _register_regression(_name)


# ----------------------------------------------------------------------------------------------
# MakeLoss: marks its input as a loss; the gradient is grad_scale over the normaliser.

MAKE_LOSS_PARAMS = (
    Param('grad_scale', p_float, 1.0),
    Param('valid_thresh', p_float, 0.0, "normalization='valid' counts entries above this."),
    Param('normalization', _NORMALIZATION, 'null'),
)


def _make_loss_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ins[0]


def _make_loss_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data)."""
    data, kind = ins[1], attrs['normalization']
    if kind == 'batch':
        divisor = data.shape[0] if data.ndim else 1
    elif kind == 'valid':
        divisor = max(int((data > attrs['valid_thresh']).sum()), 1)
    else:
        divisor = 1
    outs[0].fill(attrs['grad_scale'] / divisor)


def _make_loss_gradient(F, attrs, inputs, outputs, out_grads):
    return [F._backward_MakeLoss(out_grads[0], inputs[0], **attrs)]


register('MakeLoss', _make_loss_kernel, params=MAKE_LOSS_PARAMS, gradient=_make_loss_gradient,
         aliases=('make_loss',),
         doc='Identity forward; backward ignores the incoming gradient and yields grad_scale '
             'divided by the normaliser.')

register('_backward_MakeLoss', _make_loss_backward_kernel, inputs=('out_grad', 'data'),
         outputs=('data_grad',), params=MAKE_LOSS_PARAMS,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]]))


# ----------------------------------------------------------------------------------------------
# softmax_cross_entropy

def _sce_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [(1,)]
    if len(data) != 2:
        raise ShapeError(f'softmax_cross_entropy: data must be (batch, classes), got shape '
                         f'{tuple(data)}')
    assign_shape('softmax_cross_entropy', in_shapes, 1, 'label', (data[0],))
    return in_shapes, [(1,)]


def _log_probabilities(xp, x, safe):
    wide = x.astype(accumulation_dtype(x.dtype, safe), copy=False)
    shifted = wide - wide.max(axis=1, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))


def _class_index(xp, label, classes):
    index = label.astype(np.int64)
    return xp.clip(index, 0, classes - 1)


def _sce_kernel(attrs, ins, outs, ctx):
    xp, (data, label) = ctx.xp, ins
    log_prob = _log_probabilities(xp, data, ctx.safe_accumulation)
    index = _class_index(xp, label, data.shape[1])
    outs[0][...] = -log_prob[xp.arange(data.shape[0]), index].sum()


def _sce_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, data, label): (softmax(data) - onehot(label)) * out_grad."""
    xp, (grad, data, label) = ctx.xp, ins
    prob = xp.exp(_log_probabilities(xp, data, ctx.safe_accumulation))
    prob[xp.arange(data.shape[0]), _class_index(xp, label, data.shape[1])] -= 1
    outs[0][...] = prob * grad.reshape(())


register('softmax_cross_entropy', _sce_kernel, inputs=('data', 'label'), infer_shape=_sce_infer,
         infer_type=typed_like_first(free=(1,)),
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_softmax_cross_entropy(og[0], ins[0], ins[1]), None],
         doc='Sum over the batch of -log(softmax(data)[label]); shape (1,).')
register('_backward_softmax_cross_entropy', _sce_backward_kernel,
         inputs=('out_grad', 'data', 'label'), outputs=('data_grad',),
         infer_shape=like_input(1), infer_type=like_input(1))


# ----------------------------------------------------------------------------------------------
# SVMOutput

SVM_PARAMS = (
    Param('margin', p_float, 1.0, 'the margin of the hinge loss'),
    Param('regularization_coefficient', p_float, 1.0, 'scales the gradient'),
    Param('use_linear', p_bool, False, 'L1-SVM (hinge) instead of L2-SVM (squared hinge)'),
)


def _svm_infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None]
    assign_shape('SVMOutput', in_shapes, 1, 'label', (data[0],))
    return in_shapes, [tuple(data)]


def _svm_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, output, label); MXNet's L1/L2-SVM gradient, ignoring out_grad."""
    xp, score, label = ctx.xp, ins[1], ins[2]
    rows = score.reshape(score.shape[0], -1)
    margin, scale = attrs['margin'], attrs['regularization_coefficient']
    truth = xp.arange(rows.shape[1])[None, :] == label.astype(np.int64).reshape(-1, 1)
    signed = xp.where(truth, -rows, rows)       # the true class must score above the margin
    active = (margin + signed) > 0
    if attrs['use_linear']:
        grad = active * scale
    else:
        grad = active * 2 * (margin + signed) * scale
    outs[0][...] = xp.where(truth, -grad, grad).reshape(outs[0].shape)


def _identity_kernel(attrs, ins, outs, ctx):
    if outs[0] is not ins[0]:
        outs[0][...] = ins[0]


register('SVMOutput', _identity_kernel,
         inputs=('data', 'label'), infer_shape=_svm_infer,
         infer_type=typed_like_first(free=(1,)), params=SVM_PARAMS,
         gradient=lambda F, attrs, ins, outs, og: [
             F._backward_SVMOutput(og[0], outs[0], ins[1], **attrs), None],
         doc='Identity forward; backward is the gradient of the (squared) hinge loss of the '
             'scores against the labels, ignoring the incoming gradient.')
register('_backward_SVMOutput', _svm_backward_kernel, inputs=('out_grad', 'output', 'label'),
         outputs=('data_grad',), params=SVM_PARAMS, infer_shape=like_input(1),
         infer_type=like_input(1))
