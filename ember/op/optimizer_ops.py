"""Optimizer update operators: MXNet 1.x's ``*_update`` kernels (src/operator/optimizer_op-inl.h).

Each operator takes the weight, its gradient and the optimizer's states, updates the states in
place (declared in ``mutate``) and writes the new weight into its output. Optimizers pass
``out=weight``, so the weight input and the output may share memory (``inplace``). None of them
has a gradient: they are applied outside autograd.

The shared arguments keep MXNet's names and meaning: ``rescale_grad`` multiplies the gradient
first, ``clip_gradient`` then clips it to ``[-c, c]`` (a negative value turns clipping off), and
``wd`` adds ``wd * weight`` as weight decay. The ``mp_`` forms update a float32 master copy of a
float16 weight (the last state) and write the rounded result into the weight; the ``multi_``
forms update several weights in one operation, with ``lrs`` and ``wds`` given per weight.

>>> import numpy as np
>>> from ember.op import registry, optimizer_ops
>>> from ember.device import cpu
>>> op = registry.get('sgd_mom_update')
>>> weight, grad, mom = np.ones(3, 'float32'), np.full(3, 0.5, 'float32'), np.zeros(3, 'float32')
>>> attrs = op.parse_attrs({'lr': 0.1, 'momentum': 0.9})
>>> op.kernel(attrs, [weight, grad, mom], [weight], registry.KernelContext(cpu()))
>>> weight, mom
(array([0.95, 0.95, 0.95], dtype=float32), array([-0.05, -0.05, -0.05], dtype=float32))
"""
from __future__ import annotations

import ast
import math
import numbers

import numpy as np

from ember import engine
from ember.backend import native
from ember.engine.threads import team_arguments
from ember.op.registry import (Param, ShapeError, p_bool, p_float, p_int, register,
                               same_shape, same_type)

__all__ = ['UPDATE_OPS']

# SGD with momentum in one pass: a leaf C module that setup.py builds where it can; without it
# (no C compiler) the NumPy steps run
_kernels = native.compiled_module('_kernels')


# ----------------------------------------------------------------------------------------------
# Arguments shared by the update operators.

def _p_floats(value):
    """A tuple of floats from a number, a sequence, or MXNet's '(0.1, 0.2)' text."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ValueError('a tuple of numbers such as (0.1, 0.2)') from None
    if isinstance(value, numbers.Number):
        value = (value,)
    if not isinstance(value, (tuple, list)):
        raise ValueError('a tuple of numbers such as (0.1, 0.2)')
    return tuple(p_float(v) for v in value)


LR = Param('lr', p_float, doc='Learning rate.')
WD = Param('wd', p_float, 0.0, 'Weight decay: adds wd * weight to the gradient.')
RESCALE = Param('rescale_grad', p_float, 1.0, 'Multiplies the gradient before clipping.')
CLIP = Param('clip_gradient', p_float, -1.0,
             'Clips the rescaled gradient to [-c, c]; a negative value turns clipping off.')
LAZY = Param('lazy_update', p_bool, True,
             'With a row_sparse gradient, update only the rows it stores '
             '(ember.op.sparse_optimizer); dense gradients update every row either way.')
MOMENTUM = Param('momentum', p_float, 0.0, 'Decay of the momentum state.')
CLIP_WEIGHTS = Param('clip_weights', p_float, -1.0,
                     'Clips the new weight to [-c, c]; a negative value turns clipping off.')
BETA1 = Param('beta1', p_float, 0.9, 'Decay of the first-moment estimate.')
BETA2 = Param('beta2', p_float, 0.999, 'Decay of the second-moment estimate.')


def _epsilon(default):
    return Param('epsilon', p_float, default, 'Added for numerical stability.')


def _multi_params(*extra):
    return (Param('lrs', _p_floats, doc='Learning rate of each weight.'),
            Param('wds', _p_floats, doc='Weight decay of each weight.'),
            *extra, RESCALE, CLIP,
            Param('num_weights', p_int, 1, 'Number of weights updated together.'))


# ----------------------------------------------------------------------------------------------
# Update steps: step(xp, attrs, weight, grad, *states) updates the states in place and returns
# the new weight. Every step reads the weight before anything is written to the output, so the
# output may be the weight itself.

def _clip(xp, values, bound):
    return xp.clip(values, -bound, bound) if bound >= 0 else values


def _rescaled(xp, attrs, grad):
    """clip(rescale_grad * grad): the gradient most updates start from."""
    return _clip(xp, attrs['rescale_grad'] * grad, attrs['clip_gradient'])


def _rescaled_decayed(xp, attrs, grad, weight):
    """clip(rescale_grad * grad + wd * weight): Adam and RMSProp decay before clipping."""
    decayed = attrs['rescale_grad'] * grad + attrs['wd'] * weight
    return _clip(xp, decayed, attrs['clip_gradient'])


def _sgd_step(xp, attrs, weight, grad):
    return (1 - attrs['lr'] * attrs['wd']) * weight - attrs['lr'] * _rescaled(xp, attrs, grad)


def _sgd_mom_step(xp, attrs, weight, grad, mom):
    lr = attrs['lr']
    # mom = momentum*mom - lr*wd*weight - lr*g, rounded in that order, in place: four
    # full-size temporaries fewer than the expression
    step = _rescaled(xp, attrs, grad)
    if step is grad:
        step = step * lr
    else:
        xp.multiply(step, lr, out=step)
    mom *= attrs['momentum']
    mom -= (lr * attrs['wd']) * weight
    mom -= step
    return weight + mom


def _compiled_sgd_mom(attrs, weight, grad, mom, out, lo, hi, **team):
    """_sgd_mom_step on the elements [lo, hi) of flat float32 arrays in one pass, bit for bit
    (``_kernels.sgd_mom_update``; `team`: its threads and cores keywords)."""
    clip = attrs['clip_gradient']
    _kernels.sgd_mom_update(weight, grad, mom, out, lo, hi, attrs['rescale_grad'],
                            clip if clip >= 0 else -1.0, attrs['lr'],
                            attrs['lr'] * attrs['wd'], attrs['momentum'], **team)


def _nag_mom_step(xp, attrs, weight, grad, mom):
    momentum = attrs['momentum']
    step = attrs['lr'] * (_rescaled(xp, attrs, grad) + attrs['wd'] * weight)
    mom[...] = momentum * mom - step
    # MXNet writes this as w - m' + (1 + momentum)(m' - step) with m' = momentum*mom: equal,
    # but adding the small terms before the weight rounds less in float16.
    return weight + (momentum * mom - step)


def _adam_step(xp, attrs, weight, grad, mean, var):
    beta1, beta2 = attrs['beta1'], attrs['beta2']
    g = _rescaled_decayed(xp, attrs, grad, weight)
    mean[...] = beta1 * mean + (1 - beta1) * g
    var[...] = beta2 * var + (1 - beta2) * g * g
    return weight - attrs['lr'] * mean / (xp.sqrt(var) + attrs['epsilon'])


def _loss_scale(rescale_grad):
    """The value of a one-element rescale_grad array, or None when the update must be skipped."""
    scale = float(rescale_grad.reshape(-1)[0])
    # A NaN, infinite or zero scale means the scaled loss overflowed: MXNet skips the step.
    return scale if math.isfinite(scale) and scale != 0 else None


def _adamw_step(xp, attrs, weight, grad, mean, var, rescale_grad):
    scale = _loss_scale(rescale_grad)
    if scale is None:
        return weight
    beta1, beta2 = attrs['beta1'], attrs['beta2']
    g = _clip(xp, scale * grad, attrs['clip_gradient'])
    mean[...] = beta1 * mean + (1 - beta1) * g
    var[...] = beta2 * var + (1 - beta2) * g * g
    adam = attrs['lr'] * mean / (xp.sqrt(var) + attrs['epsilon'])
    return weight - attrs['eta'] * (adam + attrs['wd'] * weight)


def _rmsprop_step(xp, attrs, weight, grad, n):
    gamma1 = attrs['gamma1']
    g = _rescaled_decayed(xp, attrs, grad, weight)
    n[...] = (1 - gamma1) * g * g + gamma1 * n
    new_weight = weight - attrs['lr'] * g / xp.sqrt(n + attrs['epsilon'])
    return _clip(xp, new_weight, attrs['clip_weights'])


def _rmspropalex_step(xp, attrs, weight, grad, n, g_avg, delta):
    gamma1 = attrs['gamma1']
    g = _rescaled_decayed(xp, attrs, grad, weight)
    n[...] = (1 - gamma1) * g * g + gamma1 * n
    g_avg[...] = (1 - gamma1) * g + gamma1 * g_avg
    delta[...] = (attrs['gamma2'] * delta
                  - attrs['lr'] * g / xp.sqrt(n - g_avg * g_avg + attrs['epsilon']))
    return _clip(xp, weight + delta, attrs['clip_weights'])


def _adagrad_step(xp, attrs, weight, grad, history):
    g = _rescaled(xp, attrs, grad)
    history += g * g
    return weight - attrs['lr'] * (g / xp.sqrt(history + attrs['epsilon']) + attrs['wd'] * weight)


def _adadelta_step(xp, attrs, weight, grad, acc_g, acc_delta):
    rho, epsilon = attrs['rho'], attrs['epsilon']
    g = _rescaled(xp, attrs, grad)
    acc_g[...] = rho * acc_g + (1 - rho) * g * g
    delta = xp.sqrt(acc_delta + epsilon) / xp.sqrt(acc_g + epsilon) * g
    acc_delta[...] = rho * acc_delta + (1 - rho) * delta * delta
    # MXNet 1.x's AdaDelta has no learning rate: the step size comes from the accumulators.
    return weight - (delta + attrs['wd'] * weight)


def _ftrl_step(xp, attrs, weight, grad, z, n):
    lr, lamda1 = attrs['lr'], attrs['lamda1']
    g = _rescaled(xp, attrs, grad)
    z += g - (xp.sqrt(n + g * g) - xp.sqrt(n)) * weight / lr
    n += g * g
    shrunk = (xp.sign(z) * lamda1 - z) / ((attrs['beta'] + xp.sqrt(n)) / lr + attrs['wd'])
    return shrunk * (xp.abs(z) > lamda1)


def _ftml_step(xp, attrs, weight, grad, d, v, z):
    beta1, beta2, t = attrs['beta1'], attrs['beta2'], attrs['t']
    decayed = attrs['rescale_grad'] * grad + attrs['wd'] * weight
    g = _clip(xp, decayed, attrs['clip_grad'])
    v[...] = beta2 * v + (1 - beta2) * g * g
    d_t = (1 - beta1 ** t) / attrs['lr'] * (xp.sqrt(v / (1 - beta2 ** t)) + attrs['epsilon'])
    z[...] = beta1 * z + (1 - beta1) * g - (d_t - beta1 * d) * weight
    d[...] = d_t
    return -z / d_t


def _signsgd_step(xp, attrs, weight, grad):
    # The sign ignores rescale_grad and clip_gradient, as MXNet's kernel does.
    return (1 - attrs['lr'] * attrs['wd']) * weight - attrs['lr'] * xp.sign(grad)


def _signum_step(xp, attrs, weight, grad, mom):
    momentum = attrs['momentum']
    mom[...] = (momentum * mom - (1 - momentum) * attrs['wd'] * weight
                - (1 - momentum) * _rescaled(xp, attrs, grad))
    return (1 - attrs['lr'] * attrs['wd_lh']) * weight + attrs['lr'] * xp.sign(mom)


def _lamb_phase2_step(xp, attrs, weight, g, r1, r2):
    weight_norm, g_norm = float(r1.reshape(-1)[0]), float(r2.reshape(-1)[0])
    if attrs['lower_bound'] >= 0:
        weight_norm = max(weight_norm, attrs['lower_bound'])
    if attrs['upper_bound'] >= 0:
        weight_norm = min(weight_norm, attrs['upper_bound'])
    ratio = 1.0 if weight_norm == 0 or g_norm == 0 else weight_norm / g_norm
    return weight - attrs['lr'] * ratio * g


def _lamb_phase1_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    weight, grad, mean, var = ins
    beta1, beta2, t = attrs['beta1'], attrs['beta2'], attrs['t']
    g = _rescaled(xp, attrs, grad)
    mean[...] = beta1 * mean + (1 - beta1) * g
    var[...] = beta2 * var + (1 - beta2) * g * g
    if attrs['bias_correction']:
        mean_hat, var_hat = mean / (1 - beta1 ** t), var / (1 - beta2 ** t)
    else:
        mean_hat, var_hat = mean, var
    outs[0][...] = mean_hat / (xp.sqrt(var_hat) + attrs['epsilon']) + attrs['wd'] * weight


def _master_copy(step, master=-1):
    """The step applied to the float32 master copy; `master` is its index among the inputs
    after weight and grad (default: the last)."""
    def mp_step(xp, attrs, weight, grad, *rest):
        rest = list(rest)
        weight32 = rest.pop(master)
        weight32[...] = step(xp, attrs, weight32, grad.astype(weight32.dtype), *rest)
        return weight32
    return mp_step


# ----------------------------------------------------------------------------------------------
# Kernels, shape and type inference.

# Steps with a compiled form, ``form(attrs, *flat_inputs, flat_out, lo, hi)``, for float32
# C-contiguous NumPy arrays: SGD with momentum took 24 ms of a 930 ms resnet50_v1 training step
# at batch 16 in NumPy's six passes over cache-sized blocks.
_COMPILED = {_sgd_mom_step: _compiled_sgd_mom} if _kernels is not None else {}


def _compiled_form(step, xp, arrays):
    """`step`'s compiled form where it has one and `arrays` suit it, else None."""
    form = _COMPILED.get(step)
    if form is None or xp is not np or not all(
            a.dtype == np.float32 and a.flags.c_contiguous for a in arrays):
        return None
    return form


# Whether the compiled forms split on the OpenMP team where the module has one (see
# ember/_team.h; tests turn it off to run the kernel-pool path).
use_team = True


def _teams():
    return use_team and _kernels is not None and _kernels.openmp


def _team_for(size):
    """The team keywords of a compiled form's call on `size` elements (split as
    ``parallel_for`` splits them)."""
    return team_arguments(None, size)


def _update_kernel(step):
    def kernel(attrs, ins, outs, ctx):
        form = _compiled_form(step, ctx.xp, (*ins, *outs))
        if form is not None:
            team = _team_for(outs[0].size) if _teams() else {}
            form(attrs, *(a.reshape(-1) for a in ins), outs[0].reshape(-1), 0, outs[0].size,
                 **team)
            return
        outs[0][...] = step(ctx.xp, attrs, *ins)
    return kernel


# Elements per block of a multi-weight update: the step's temporaries (several per block) stay
# in cache instead of going through memory. resnet50_v1's 25.6M weights with SGD and momentum
# on 2 threads: 53 ms with each thread's range as one block; blocks of 2^14 / 2^15 / 2^16 /
# 2^17 / 2^18 elements 67 / 45 / 31 / 28 / 38 ms (smaller blocks pay for the Python calls of
# two threads that take turns holding the GIL).
_UPDATE_BLOCK = 1 << 17


def _multi_kernel(step, group):
    def kernel(attrs, ins, outs, ctx):
        settings = [dict(attrs, lr=attrs['lrs'][i], wd=attrs['wds'][i])
                    for i in range(len(outs))]
        if ctx.xp is not np or not all(a.flags.c_contiguous for a in (*ins, *outs)):
            for i, out in enumerate(outs):
                out[...] = step(ctx.xp, settings[i], *ins[group * i: group * (i + 1)])
            return
        form = _compiled_form(step, np, (*ins, *outs))
        if form is not None and _teams():
            # each weight in one pass, the large ones split on the OpenMP team
            for i, out in enumerate(outs):
                form(settings[i], *(a.reshape(-1) for a in ins[group * i: group * (i + 1)]),
                     out.reshape(-1), 0, out.size, **_team_for(out.size))
            return
        # the steps are element-wise: the kernel threads share all weights' elements as one
        # range (one thread per weight would leave a thread idle beside the largest one)
        ends = np.cumsum([out.size for out in outs])

        def run(start, stop):
            first = int(np.searchsorted(ends, start, side='right'))
            for i in range(first, len(outs)):
                begin = int(ends[i - 1]) if i else 0
                if begin >= stop:
                    break
                lo, hi = max(start, begin) - begin, min(stop, int(ends[i])) - begin
                flat = [a.reshape(-1) for a in ins[group * i: group * (i + 1)]]
                out = outs[i].reshape(-1)
                if form is not None:            # one pass over the range
                    form(settings[i], *flat, out, lo, hi)
                    continue
                # block by block, so that the step's temporaries stay in cache
                for block in range(lo, hi, _UPDATE_BLOCK):
                    part = slice(block, min(hi, block + _UPDATE_BLOCK))
                    out[part] = step(np, settings[i], *(a[part] for a in flat))
        total = int(ends[-1]) if len(ends) else 0
        engine.parallel_for(total, run)
    return kernel


def _mp_type(attrs, in_dtypes):
    """Weight and gradient share a (float16) dtype; the states and master copy are float32."""
    low = [d for d in in_dtypes[:2] if d is not None]
    if len(low) == 2 and low[0] != low[1]:
        raise ShapeError(f'weight and grad must have the same dtype, got {low[0]} and {low[1]}')
    dtype = low[0] if low else None
    float32 = np.dtype(np.float32)
    for index, other in enumerate(in_dtypes[2:], start=2):
        if other is not None and other != float32:
            raise ShapeError(f'input {index} (a state or the master copy) must be float32, '
                             f'got {other}')
    return [dtype, dtype] + [float32] * (len(in_dtypes) - 2), [dtype]


def _with_scalars(num_tensors, infer_tensors=same_type):
    """Shape and type inference where inputs after the first num_tensors hold one value each."""
    def infer_shape(attrs, in_shapes):
        ins, outs = same_shape(attrs, in_shapes[:num_tensors])
        for index, shape in enumerate(in_shapes[num_tensors:], start=num_tensors):
            if shape is not None and int(np.prod(shape)) != 1:
                raise ShapeError(f'input {index} must hold one value, got shape {shape}')
        return ins + [s or (1,) for s in in_shapes[num_tensors:]], outs

    def infer_type(attrs, in_dtypes):
        ins, outs = infer_tensors(attrs, in_dtypes[:num_tensors])
        return ins + [d or outs[0] for d in in_dtypes[num_tensors:]], outs
    return infer_shape, infer_type


def _check_multi(attrs, num_inputs, group):
    count = attrs['num_weights']
    if num_inputs != group * count:
        raise ShapeError(f'got {num_inputs} inputs for num_weights={count}; expected '
                         f'{group} per weight, {group * count} in all')
    for name in ('lrs', 'wds'):
        if len(attrs[name]) != count:
            raise ShapeError(f'{name} has {len(attrs[name])} values; expected one per weight '
                             f'(num_weights={count})')


def _per_group(infer, group):
    """Apply a one-weight inference function to each group of inputs."""
    def infer_multi(attrs, in_values):
        _check_multi(attrs, len(in_values), group)
        ins, outs = [], []
        for start in range(0, len(in_values), group):
            group_ins, group_outs = infer(attrs, in_values[start:start + group])
            ins += group_ins
            outs += group_outs
        return ins, outs
    return infer_multi


UPDATE_OPS = []


def _declare(name, step, inputs, params, doc, infer_type=same_type, infer_shape=same_shape,
             aliases=(), mutate=None):
    """One weight update: inputs (weight, grad, *states), states updated in place."""
    if mutate is None:
        mutate = tuple(i for i in range(2, len(inputs)) if inputs[i] != 'rescale_grad')
    op = register(name, _update_kernel(step), inputs=tuple(inputs), params=tuple(params),
                  mutate=mutate, inplace=((0, 0),), infer_shape=infer_shape,
                  infer_type=infer_type, doc=doc, aliases=aliases, sliceable=True)
    UPDATE_OPS.append(op)
    return op


def _declare_multi(name, step, state_names, extra_params, doc, infer_type=same_type):
    """Several weights in one operation; inputs interleaved per weight as MXNet orders them."""
    names = ('weight', 'grad') + state_names
    group = len(names)

    def inputs(attrs):
        return [f'{n}_{i}' for i in range(attrs['num_weights']) for n in names]

    def outputs(attrs):
        return [f'output{i}' for i in range(attrs['num_weights'])]

    def mutate(attrs):
        return tuple(group * i + k for i in range(attrs['num_weights'])
                     for k in range(2, group))

    def inplace(attrs):
        return tuple((group * i, i) for i in range(attrs['num_weights']))

    op = register(name, _multi_kernel(step, group), inputs=inputs, outputs=outputs,
                  params=_multi_params(*extra_params), mutate=mutate, inplace=inplace,
                  infer_shape=_per_group(same_shape, group),
                  infer_type=_per_group(infer_type, group), doc=doc, sliceable=True)
    UPDATE_OPS.append(op)
    return op


# ----------------------------------------------------------------------------------------------
# Declarations.

_SGD = (LR, WD, RESCALE, CLIP, LAZY)
_SGD_MOM = (LR, MOMENTUM, WD, RESCALE, CLIP, LAZY)
_NAG = (LR, MOMENTUM, WD, RESCALE, CLIP)

_declare('sgd_update', _sgd_step, ('weight', 'grad'), _SGD,
         'weight = (1 - lr*wd)*weight - lr*clip(rescale_grad*grad)')
_declare('sgd_mom_update', _sgd_mom_step, ('weight', 'grad', 'mom'), _SGD_MOM,
         'mom = momentum*mom - lr*wd*weight - lr*clip(rescale_grad*grad); weight += mom')
_declare('mp_sgd_update', _master_copy(_sgd_step), ('weight', 'grad', 'weight32'), _SGD,
         'sgd_update on the float32 master copy weight32; weight gets it rounded',
         infer_type=_mp_type)
_declare('mp_sgd_mom_update', _master_copy(_sgd_mom_step),
         ('weight', 'grad', 'mom', 'weight32'), _SGD_MOM,
         'sgd_mom_update on the float32 master copy weight32; weight gets it rounded',
         infer_type=_mp_type)
_declare('nag_mom_update', _nag_mom_step, ('weight', 'grad', 'mom'), _NAG,
         'Nesterov momentum: g = lr*(clip(rescale_grad*grad) + wd*weight); '
         'mom = momentum*mom - g; weight += momentum*mom - g')
_declare('mp_nag_mom_update', _master_copy(_nag_mom_step),
         ('weight', 'grad', 'mom', 'weight32'), _NAG,
         'nag_mom_update on the float32 master copy weight32; weight gets it rounded',
         infer_type=_mp_type)
_declare('adam_update', _adam_step, ('weight', 'grad', 'mean', 'var'),
         (LR, BETA1, BETA2, _epsilon(1e-8), WD, RESCALE, CLIP, LAZY),
         'g = clip(rescale_grad*grad + wd*weight); mean = beta1*mean + (1-beta1)*g; '
         'var = beta2*var + (1-beta2)*g^2; weight -= lr*mean/(sqrt(var) + epsilon). '
         'Bias correction is folded into lr by the optimizer.')

_ADAMW_SHAPE, _ADAMW_TYPE = _with_scalars(4)
_MP_ADAMW_SHAPE, _MP_ADAMW_TYPE = _with_scalars(5, _mp_type)
_ADAMW = (LR, BETA1, BETA2, _epsilon(1e-8), WD,
          Param('eta', p_float, doc='Schedule multiplier of the whole step.'), CLIP)
_declare('adamw_update', _adamw_step, ('weight', 'grad', 'mean', 'var', 'rescale_grad'), _ADAMW,
         'Adam with decoupled weight decay: g = clip(rescale_grad*grad); mean, var as Adam; '
         'weight -= eta*(lr*mean/(sqrt(var) + epsilon) + wd*weight). rescale_grad is a '
         'one-element array; a NaN, infinite or zero value skips the update.',
         infer_shape=_ADAMW_SHAPE, infer_type=_ADAMW_TYPE,
         aliases=('_adamw_update', '_contrib_adamw_update'))
_declare('mp_adamw_update', _master_copy(_adamw_step, master=2),
         ('weight', 'grad', 'mean', 'var', 'weight32', 'rescale_grad'), _ADAMW,
         'adamw_update on the float32 master copy weight32; weight gets it rounded',
         infer_shape=_MP_ADAMW_SHAPE, infer_type=_MP_ADAMW_TYPE,
         aliases=('_mp_adamw_update', '_contrib_mp_adamw_update'))

_RMSPROP = (LR, Param('gamma1', p_float, 0.95, 'Decay of the squared-gradient average.'),
            _epsilon(1e-8), WD, RESCALE, CLIP, CLIP_WEIGHTS)
_declare('rmsprop_update', _rmsprop_step, ('weight', 'grad', 'n'), _RMSPROP,
         'g = clip(rescale_grad*grad + wd*weight); n = (1-gamma1)*g^2 + gamma1*n; '
         'weight = clip_weights(weight - lr*g/sqrt(n + epsilon))')
_declare('rmspropalex_update', _rmspropalex_step, ('weight', 'grad', 'n', 'g', 'delta'),
         _RMSPROP[:2] + (Param('gamma2', p_float, 0.9, 'Decay of the step (momentum).'),)
         + _RMSPROP[2:],
         "Graves' centred RMSProp: n and g average g^2 and g; "
         'delta = gamma2*delta - lr*g/sqrt(n - g^2 + epsilon); weight += delta')
_declare('adagrad_update', _adagrad_step, ('weight', 'grad', 'history'),
         (LR, _epsilon(1e-7), WD, RESCALE, CLIP),
         'g = clip(rescale_grad*grad); history += g^2; '
         'weight -= lr*(g/sqrt(history + epsilon) + wd*weight)',
         aliases=('_sparse_adagrad_update',))
_declare('adadelta_update', _adadelta_step, ('weight', 'grad', 'acc_g', 'acc_delta'),
         (Param('rho', p_float, 0.9, 'Decay of both accumulators.'), _epsilon(1e-5), WD,
          RESCALE, CLIP),
         'g = clip(rescale_grad*grad); acc_g = rho*acc_g + (1-rho)*g^2; '
         'delta = sqrt(acc_delta + epsilon)/sqrt(acc_g + epsilon)*g; '
         'acc_delta = rho*acc_delta + (1-rho)*delta^2; weight -= delta + wd*weight')
_declare('ftrl_update', _ftrl_step, ('weight', 'grad', 'z', 'n'),
         (LR, Param('lamda1', p_float, 0.01, 'L1 regularisation strength.'),
          Param('beta', p_float, 1.0, 'Added to sqrt(n) in the per-coordinate rate.'),
          WD, RESCALE, CLIP),
         'Follow the regularized leader (FTRL-proximal) with L1 strength lamda1')
_declare('ftml_update', _ftml_step, ('weight', 'grad', 'd', 'v', 'z'),
         (LR, Param('beta1', p_float, 0.6, 'Decay of z.'), BETA2, _epsilon(1e-8),
          Param('t', p_int, doc='Number of updates so far, this one included.'), WD, RESCALE,
          Param('clip_grad', p_float, -1.0, 'Clips the decayed gradient; negative: off.')),
         'Follow the moving leader')
_declare('signsgd_update', _signsgd_step, ('weight', 'grad'), (LR, WD, RESCALE, CLIP),
         'weight = (1 - lr*wd)*weight - lr*sign(grad)')
_declare('signum_update', _signum_step, ('weight', 'grad', 'mom'),
         (LR, MOMENTUM, WD, RESCALE, CLIP,
          Param('wd_lh', p_float, 0.0, 'Decoupled weight decay applied to the weight.')),
         'mom = momentum*mom - (1-momentum)*(wd*weight + clip(rescale_grad*grad)); '
         'weight = (1 - lr*wd_lh)*weight + lr*sign(mom)')

_LAMB1 = (BETA1, BETA2, _epsilon(1e-6),
          Param('t', p_int, doc='Number of updates so far, this one included.'),
          Param('bias_correction', p_bool, True, 'Divide the moments by 1 - beta^t.'),
          Param('wd', p_float, doc='Weight decay: adds wd * weight to the step.'),
          RESCALE, CLIP)
# Phase 1 writes a new array (the step direction), not the weight: no in-place pair.
UPDATE_OPS.append(register(
    'lamb_update_phase1', _lamb_phase1_kernel, inputs=('weight', 'grad', 'mean', 'var'),
    params=_LAMB1, mutate=(2, 3),
    doc='LAMB, first half: updates mean and var as Adam and returns the step direction '
        'g = mean_hat/(sqrt(var_hat) + epsilon) + wd*weight'))
_LAMB2_SHAPE, _LAMB2_TYPE = _with_scalars(2)
_declare('lamb_update_phase2', _lamb_phase2_step, ('weight', 'g', 'r1', 'r2'),
         (LR, Param('lower_bound', p_float, -1.0, 'Lower bound of r1; negative: none.'),
          Param('upper_bound', p_float, -1.0, 'Upper bound of r1; negative: none.')),
         'LAMB, second half: weight -= lr*(r1/r2)*g with r1 = |weight|, r2 = |g| (one-element '
         'arrays); the ratio is 1 where either norm is 0',
         infer_shape=_LAMB2_SHAPE, infer_type=_LAMB2_TYPE, mutate=())

_declare_multi('multi_sgd_update', _sgd_step, (), (),
               'sgd_update of num_weights weights: inputs weight_i, grad_i interleaved')
_declare_multi('multi_sgd_mom_update', _sgd_mom_step, ('mom',), (MOMENTUM,),
               'sgd_mom_update of num_weights weights: inputs weight_i, grad_i, mom_i')
_declare_multi('multi_mp_sgd_update', _master_copy(_sgd_step), ('weight32',), (),
               'mp_sgd_update of num_weights weights: inputs weight_i, grad_i, weight32_i',
               infer_type=_mp_type)
_declare_multi('multi_mp_sgd_mom_update', _master_copy(_sgd_mom_step), ('mom', 'weight32'),
               (MOMENTUM,),
               'mp_sgd_mom_update of num_weights weights: inputs weight_i, grad_i, mom_i, '
               'weight32_i', infer_type=_mp_type)
