"""More of MXNet 1.x's optimizer updates: the preloaded multi-weight SGD forms (learning rates
and weight decays as arrays), multi-tensor AdamW and LAMB, mixed-precision LAMB, and the LARS
learning rates. The update arithmetic is the single-weight steps' of
:mod:`ember.op.optimizer_ops`; only the grouping of inputs is new here.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('multi_lars')
>>> out = np.empty(2, np.float32)
>>> op.kernel(op.parse_attrs({'eta': 0.001, 'eps': 1e-8}),
...           [np.array([0.1, 0.2], np.float32), np.array([4., 0.], np.float32),
...            np.ones(2, np.float32), np.full(2, 0.01, np.float32)], [out],
...           registry.KernelContext(None))
>>> [round(float(v), 7) for v in out]
[0.0001961, 0.2]
"""
from __future__ import annotations

import numpy as np

from ember.op.optimizer_ops import (BETA1, BETA2, CLIP, MOMENTUM, RESCALE, _adamw_step,
                                    _lamb_phase1_kernel, _lamb_phase2_step, _master_copy,
                                    _p_floats, _sgd_mom_step, _sgd_step)
from ember.op.host import register
from ember.op.registry import (REQUIRED, KernelContext, Param, ShapeError, p_bool, p_float, p_int,
                               same_shape)

__all__ = []


def _grouped_inputs(names, count_param, extra=()):
    def inputs(attrs):
        return [f'{n}_{i}' for i in range(attrs[count_param]) for n in names] + list(extra)
    return inputs


def _weights_out(count_param):
    return lambda attrs: [f'output{i}' for i in range(attrs[count_param])]


def _group_infer(group, count_param, extra):
    """Shapes (dtypes) per group: every tensor of a group like its weight; the extra inputs
    (learning rates, a rescale value) as they are."""
    def infer(attrs, values):
        count = attrs[count_param]
        if len(values) != group * count + extra:
            raise ShapeError(f'got {len(values)} inputs for {count_param}={count}; expected '
                             f'{group} per weight and {extra} more')
        ins, outs = [], []
        for i in range(count):
            part = values[group * i: group * (i + 1)]
            first = next((v for v in part if v is not None), None)
            ins += [v if v is not None else first for v in part]
            outs.append(part[0] if part[0] is not None else first)
        return ins + list(values[group * count:]), outs
    return infer


def _mp_group_type(group, count_param, extra):
    """Mixed precision: weight and grad low precision, the states and master copy float32."""
    def infer(attrs, dtypes):
        count = attrs[count_param]
        float32 = np.dtype(np.float32)
        ins, outs = [], []
        for i in range(count):
            part = dtypes[group * i: group * (i + 1)]
            low = part[0] or part[1]
            ins += [low, low] + [float32] * (group - 2)
            outs.append(low)
        return ins + [d or float32 for d in dtypes[group * count:]], outs
    return infer


def _inplace(group, count_param):
    return lambda attrs: tuple((group * i, i) for i in range(attrs[count_param]))


def _mutated(group, count_param):
    return lambda attrs: tuple(group * i + k for i in range(attrs[count_param])
                               for k in range(2, group))


# ----------------------------------------------------------------------------------------------
# preloaded_multi_*: SGD with the learning rates and weight decays as the last two inputs.

_PRELOADED = (RESCALE, CLIP, Param('num_weights', p_int, 1, 'Weights updated together.'))


def _preloaded(name, step, state_names, extra_params, mixed):
    names = ('weight', 'grad') + state_names
    group = len(names)

    def kernel(attrs, ins, outs, ctx):
        lrs, wds = ins[-2].reshape(-1), ins[-1].reshape(-1)
        for i, out in enumerate(outs):
            settings = dict(attrs, lr=float(lrs[i]), wd=float(wds[i]))
            out[...] = step(ctx.xp, settings, *ins[group * i: group * (i + 1)])

    typing = _mp_group_type(group, 'num_weights', 2) if mixed else \
        _group_infer(group, 'num_weights', 2)
    register(name, kernel, inputs=_grouped_inputs(names, 'num_weights', ('lrs', 'wds')),
             outputs=_weights_out('num_weights'), variadic=None,
             params=extra_params + _PRELOADED, mutate=_mutated(group, 'num_weights'),
             inplace=_inplace(group, 'num_weights'),
             infer_shape=_group_infer(group, 'num_weights', 2), infer_type=typing,
             doc=f'{name[len("preloaded_"):]} with the learning rates and weight decays given '
                 f'as the arrays lrs and wds (the last two inputs).')


_preloaded('preloaded_multi_sgd_update', _sgd_step, (), (), False)
_preloaded('preloaded_multi_sgd_mom_update', _sgd_mom_step, ('mom',), (MOMENTUM,), False)
_preloaded('preloaded_multi_mp_sgd_update', _master_copy(_sgd_step), ('weight32',), (), True)
_preloaded('preloaded_multi_mp_sgd_mom_update', _master_copy(_sgd_mom_step),
           ('mom', 'weight32'), (MOMENTUM,), True)


# ----------------------------------------------------------------------------------------------
# _multi_adamw_update and _multi_mp_adamw_update (behind mx.nd.contrib.multi_adamw_update).

_ADAMW = (Param('lrs', _p_floats, REQUIRED, 'Learning rate of each weight.'),
          Param('wds', _p_floats, REQUIRED, 'Weight decay of each weight.'),
          Param('etas', _p_floats, REQUIRED, 'Schedule multiplier of each weight.'),
          BETA1, BETA2, Param('epsilon', p_float, 1e-8, 'Added for numerical stability.'),
          CLIP, Param('num_weights', p_int, 1, 'Weights updated together.'))


def _multi_adamw(name, step, names, mixed):
    group = len(names)

    def kernel(attrs, ins, outs, ctx):
        rescale = ins[-1]
        for i, out in enumerate(outs):
            settings = dict(attrs, lr=attrs['lrs'][i], wd=attrs['wds'][i], eta=attrs['etas'][i])
            out[...] = step(ctx.xp, settings, *ins[group * i: group * (i + 1)], rescale)

    typing = _mp_group_type(group, 'num_weights', 1) if mixed else \
        _group_infer(group, 'num_weights', 1)
    register(name, kernel, inputs=_grouped_inputs(names, 'num_weights', ('rescale_grad',)),
             outputs=_weights_out('num_weights'), params=_ADAMW,
             mutate=_mutated(group, 'num_weights'), inplace=_inplace(group, 'num_weights'),
             infer_shape=_group_infer(group, 'num_weights', 1), infer_type=typing,
             doc='adamw_update of num_weights weights; rescale_grad is a one-element array '
                 '(a NaN, infinite or zero value skips the update).')


def _mp_adamw_step(xp, attrs, weight, grad, mean, var, weight32, rescale):
    weight32[...] = _adamw_step(xp, attrs, weight32, grad.astype(weight32.dtype), mean, var,
                                rescale)
    return weight32


_multi_adamw('_multi_adamw_update', _adamw_step, ('weight', 'grad', 'mean', 'var'), False)
_multi_adamw('_multi_mp_adamw_update', _mp_adamw_step,
             ('weight', 'grad', 'mean', 'var', 'weight32'), True)


# ----------------------------------------------------------------------------------------------
# _multi_lamb_update and _multi_mp_lamb_update (behind mx.nd.contrib.multi_lamb_update).

_LAMB = (Param('learning_rates', _p_floats, REQUIRED, 'Learning rate of each tensor.'),
         Param('wds', _p_floats, REQUIRED, 'Weight decay of each tensor.'),
         Param('step_count', _p_floats, REQUIRED, 'Update count of each tensor (this one '
                                                  'included).'),
         BETA1, BETA2, Param('epsilon', p_float, 1e-6, 'Added for numerical stability.'),
         RESCALE, Param('lower_bound', p_float, -1.0, 'Least weight norm (negative: none).'),
         Param('upper_bound', p_float, -1.0, 'Largest weight norm (negative: none).'), CLIP,
         Param('bias_correction', p_bool, True, 'Divide the moments by 1 - beta^t.'),
         Param('num_tensors', p_int, 1, 'Tensors updated together.'))


def _lamb_step(xp, attrs, weight, grad, mean, var):
    direction = xp.empty_like(weight)
    _lamb_phase1_kernel(attrs, [weight, grad, mean, var], [direction],
                        KernelContext(None, xp=xp))
    weight_norm = xp.sqrt((weight.astype(np.float64) ** 2).sum()).reshape(1)
    step_norm = xp.sqrt((direction.astype(np.float64) ** 2).sum()).reshape(1)
    return _lamb_phase2_step(xp, attrs, weight, direction, weight_norm, step_norm)


def _multi_lamb(name, names, mixed):
    group = len(names)

    def kernel(attrs, ins, outs, ctx):
        for i, out in enumerate(outs):
            settings = dict(attrs, lr=attrs['learning_rates'][i], wd=attrs['wds'][i],
                            t=attrs['step_count'][i])
            part = ins[group * i: group * (i + 1)]
            if mixed:
                weight32 = part[4]
                weight32[...] = _lamb_step(ctx.xp, settings, weight32,
                                           part[1].astype(weight32.dtype), part[2], part[3])
                out[...] = weight32
            else:
                out[...] = _lamb_step(ctx.xp, settings, *part)

    typing = _mp_group_type(group, 'num_tensors', 0) if mixed else \
        _group_infer(group, 'num_tensors', 0)
    register(name, kernel, inputs=_grouped_inputs(names, 'num_tensors'),
             outputs=_weights_out('num_tensors'), params=_LAMB,
             mutate=_mutated(group, 'num_tensors'), inplace=_inplace(group, 'num_tensors'),
             infer_shape=_group_infer(group, 'num_tensors', 0), infer_type=typing,
             doc='LAMB of num_tensors tensors: Adam moments, then a step scaled by the ratio '
                 'of the weight\'s norm to the step\'s.')


_multi_lamb('_multi_lamb_update', ('weight', 'grad', 'mean', 'var'), False)
_multi_lamb('_multi_mp_lamb_update', ('weight', 'grad', 'mean', 'var', 'weight32'), True)


# ----------------------------------------------------------------------------------------------
# mp_lamb_update_phase1 / phase2: LAMB's halves on a float32 master copy.

_LAMB1 = (BETA1, BETA2, Param('epsilon', p_float, 1e-6, 'Added for numerical stability.'),
          Param('t', p_int, REQUIRED, 'Number of updates so far, this one included.'),
          Param('bias_correction', p_bool, True, 'Divide the moments by 1 - beta^t.'),
          Param('wd', p_float, REQUIRED, 'Weight decay: adds wd * weight to the step.'),
          RESCALE, CLIP)


def _mp_lamb1_kernel(attrs, ins, outs, ctx):
    weight, grad, mean, var, weight32 = ins
    _lamb_phase1_kernel(attrs, [weight32, grad.astype(np.float32), mean, var], outs, ctx)


def _mp_lamb2_kernel(attrs, ins, outs, ctx):
    weight, g, r1, r2, weight32 = ins
    weight32[...] = _lamb_phase2_step(ctx.xp, attrs, weight32, g, r1, r2)
    outs[0][...] = weight32


_FLOAT32 = np.dtype(np.float32)


def _phase1_type(attrs, dtypes):
    """weight and grad low precision; mean, var, the master copy and the output float32."""
    low = dtypes[0] or dtypes[1]
    return [low, low, _FLOAT32, _FLOAT32, _FLOAT32], [_FLOAT32]


def _phase2_type(attrs, dtypes):
    """The weight (and the output) low precision; g, r1, r2 and the master copy float32."""
    return [dtypes[0]] + [_FLOAT32] * 4, [dtypes[0]]


register('mp_lamb_update_phase1', _mp_lamb1_kernel,
         inputs=('weight', 'grad', 'mean', 'var', 'weight32'), params=_LAMB1, mutate=(2, 3),
         infer_shape=same_shape, infer_type=_phase1_type,
         doc='LAMB\'s first half on the float32 master copy weight32: updates mean and var, '
             'returns the (float32) step direction.')
register('mp_lamb_update_phase2', _mp_lamb2_kernel,
         inputs=('weight', 'g', 'r1', 'r2', 'weight32'), mutate=(4,), inplace=((0, 0),),
         params=(Param('lr', p_float, REQUIRED, 'Learning rate.'),
                 Param('lower_bound', p_float, -1.0, 'Least r1 (negative: none).'),
                 Param('upper_bound', p_float, -1.0, 'Largest r1 (negative: none).')),
         infer_shape=lambda attrs, shapes: (
             [shapes[0], shapes[0], (1,), (1,), shapes[0]], [shapes[0]]),
         infer_type=_phase2_type,
         doc='LAMB\'s second half on the float32 master copy weight32 (updated in place); '
             'the weight gets it rounded.')


# ----------------------------------------------------------------------------------------------
# multi_lars: the layer-wise learning rates of LARS.

def _lars_kernel(attrs, ins, outs, ctx):
    lrs, weight_sq, grad_sq, wds = ins
    weight_norm = np.sqrt(weight_sq)
    grad_norm = np.sqrt(grad_sq) * attrs['rescale_grad']
    with np.errstate(divide='ignore', invalid='ignore'):
        scaled = lrs * attrs['eta'] * weight_norm / (grad_norm + wds * weight_norm
                                                     + attrs['eps'])
    outs[0][...] = np.where((weight_norm > 0) & (grad_norm > 0), scaled, lrs)


register('multi_lars', _lars_kernel, inputs=('lrs', 'weights_sum_sq', 'grads_sum_sq', 'wds'),
         infer_shape=same_shape,
         params=(Param('eta', p_float, REQUIRED, 'The LARS coefficient.'),
                 Param('eps', p_float, REQUIRED, 'Added to the denominator.'), RESCALE),
         doc='LARS learning rates: lr * eta * |w| / (|g| * rescale_grad + wd * |w| + eps) per '
             'layer, lr itself where either norm is 0 (norms from their squared sums).')


# ----------------------------------------------------------------------------------------------
# Group AdaGrad: one accumulated squared gradient per row.

def _group_adagrad_kernel(attrs, ins, outs, ctx):
    weight, grad, history = ins
    g = grad * attrs['rescale_grad']
    if attrs['clip_gradient'] >= 0:
        g = np.clip(g, -attrs['clip_gradient'], attrs['clip_gradient'])
    rows = g.reshape(len(g), -1)
    history[...] += (rows * rows).mean(axis=1).reshape(history.shape)
    scale = np.sqrt(history.reshape(len(g), *([1] * (g.ndim - 1))) + attrs['epsilon'])
    outs[0][...] = weight - attrs['lr'] * g / scale


def _group_adagrad_shape(attrs, in_shapes):
    weight = in_shapes[0] or in_shapes[1]
    if weight is None:
        return list(in_shapes), [None]
    history = in_shapes[2] or (weight[0], 1)
    if history[0] != weight[0] or int(np.prod(history)) != weight[0]:
        raise ShapeError(f'history must hold one value per row of weight {weight}, got '
                         f'{history}')
    return [weight, weight, history], [weight]


register('_contrib_group_adagrad_update', _group_adagrad_kernel,
         inputs=('weight', 'grad', 'history'), mutate=(2,), inplace=((0, 0),),
         infer_shape=_group_adagrad_shape,
         params=(Param('lr', p_float, REQUIRED, 'Learning rate.'), RESCALE, CLIP,
                 Param('epsilon', p_float, 1e-5, 'Added for numerical stability.')),
         doc='Group AdaGrad: history += mean(g^2) over each row; weight -= lr * g / '
             'sqrt(history + epsilon), with g = clip(rescale_grad * grad).')
