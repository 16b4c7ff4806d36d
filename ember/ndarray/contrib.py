"""``mx.nd.contrib``: the operators registered as ``_contrib_*`` and MXNet's hand-written
contrib functions.

>>> import ember.ndarray as nd
>>> nd.contrib.arange_like(nd.zeros((2, 3)), axis=1).asnumpy().tolist()
[0.0, 1.0, 2.0]
>>> nd.contrib.boolean_mask(nd.array([[1, 2], [3, 4], [5, 6]]), nd.array([0, 1, 1]))
<BLANKLINE>
[[3. 4.]
 [5. 6.]]
<NDArray 2x2 @cpu(0)>
"""
from __future__ import annotations

import math as _math

import numpy as _np

from ember.op import frontend as _frontend
from ember.op import registry as _registry
from ember.device import current_context  # noqa: F401  (MXNet's contrib module has it)
from ember.ndarray import random as _random
from ember.ndarray.random import uniform  # noqa: F401  (so does mx.nd.contrib)
from ember.ndarray.creation import array as _array
from ember.ndarray.ndarray import NDArray as _NDArray, invoke as _invoke
from ember.ndarray.register import make_function as _make_function


def _call(name, inputs, **attrs):
    op = _registry.get(name)
    outputs = _invoke(op, list(inputs), op.parse_attrs(attrs))
    return outputs[0] if len(outputs) == 1 else outputs


def isinf(data):
    """1 where `data` is +inf or -inf, else 0 (in data's dtype)."""
    return _call('_equal_scalar', [_call('abs', [data])], scalar=_math.inf)


def isnan(data):
    """1 where `data` is NaN, else 0 (in data's dtype)."""
    return _call('broadcast_not_equal', [data, data])


def isfinite(data):
    """1 where `data` is neither infinite nor NaN, else 0 (in data's dtype)."""
    not_nan = _call('broadcast_equal', [data, data])
    finite = _call('_not_equal_scalar', [_call('abs', [data])], scalar=_math.inf)
    return _call('broadcast_logical_and', [not_nan, finite])


def boolean_mask(data=None, index=None, axis=0, out=None, name=None, **kwargs):
    """The slices of `data` along `axis` where `index` (1-D, one entry per slice) is non-zero.

    The result's shape depends on the values of `index`, so the call waits for them; the
    selection is a ``take``, whose gradient flows back to the selected slices.
    """
    if kwargs:
        raise TypeError(f'boolean_mask: unknown arguments {sorted(kwargs)}; it accepts data, '
                        f'index, axis')
    if not isinstance(data, _NDArray) or not isinstance(index, _NDArray):
        raise TypeError('boolean_mask: data and index must be NDArrays')
    if index.ndim != 1 or index.shape[0] != data.shape[axis]:
        raise ValueError(f'boolean_mask: index must be 1-D with one entry per slice of data '
                         f'along axis {axis} ({data.shape[axis]}), got shape {index.shape}')
    positions = _array(_np.flatnonzero(index.asnumpy()), ctx=data.context, dtype='int64')
    take = _registry.get('take')
    return _invoke(take, [data, positions], take.parse_attrs({'axis': axis}),
                   out=None if out is None else [out])[0]


def rand_zipfian(true_classes, num_sampled, range_max, ctx=None):
    """Draw `num_sampled` classes from the log-uniform (Zipfian) distribution over
    [0, range_max), with replacement, for sampled softmax: returns (sampled classes (int64),
    expected counts of true_classes, expected counts of the sampled classes)."""
    device = true_classes.context if ctx is None else ctx
    log_range = _math.log(range_max + 1)
    draws = _random.uniform(0, log_range, shape=(num_sampled,), dtype='float64', ctx=device)
    sampled = _call('_mod_scalar', [_call('Cast', [_call('expm1', [draws])], dtype='int64')],
                    scalar=range_max)
    return (sampled, _expected_count(_call('Cast', [true_classes.as_in_context(device)],
                                           dtype='float64'), log_range, num_sampled),
            _expected_count(_call('Cast', [sampled], dtype='float64'), log_range, num_sampled))


def _expected_count(classes, log_range, num_sampled):
    """num_sampled * P(class) under the log-uniform distribution: log((c+2)/(c+1))/log_range."""
    ratio = _call('broadcast_div', [_call('_plus_scalar', [classes], scalar=2.0),
                                    _call('_plus_scalar', [classes], scalar=1.0)])
    return _call('_mul_scalar', [_call('log', [ratio])], scalar=num_sampled / log_range)


def _listed(value, what):
    """(list of arrays, whether a single array was given)."""
    if isinstance(value, _NDArray):
        return [value], True
    if isinstance(value, (list, tuple)) and all(isinstance(v, _NDArray) for v in value):
        return list(value), False
    raise TypeError(f'{what} must be an NDArray or a list of NDArrays, got '
                    f'{type(value).__name__}')


def _stack(items):
    return _call('stack', list(items), axis=0, num_args=len(items))


def foreach(body, data, init_states):
    """Run `body(data slice, states) -> (outputs, new states)` over the first axis of `data`
    (imperatively, one call per step, recorded by autograd); returns (the outputs stacked
    along a new first axis, the final states), shaped as body and init_states give them.

    >>> import ember.ndarray as nd
    >>> outs, final = nd.contrib.foreach(lambda x, s: (x + s, x + s), nd.array([1, 2, 3]),
    ...                                  nd.array([10]))
    >>> outs.asnumpy().ravel().tolist(), final.asnumpy().tolist()
    ([11.0, 13.0, 16.0], [16.0])
    """
    data_list, single_data = _listed(data, 'data')
    states, single_state = _listed(init_states, 'init_states')
    steps, single_out = [], True
    for step in range(data_list[0].shape[0]):
        slices = [x[step] for x in data_list]
        outs, new_states = body(slices[0] if single_data else slices,
                                states[0] if single_state else states)
        outs, single_out = _listed(outs, 'the outputs of body')
        states, _ = _listed(new_states, 'the states body returns')
        steps.append(outs)
    stacked = [_stack(items) for items in zip(*steps)]
    return (stacked[0] if single_out and stacked else stacked), \
        (states[0] if single_state else states)


def while_loop(cond, func, loop_vars, max_iterations=None):
    """Run `func(*loop_vars) -> (outputs, new loop_vars)` while `cond(*loop_vars)` holds (at
    most `max_iterations` times); returns (the outputs stacked, padded with zeros to
    max_iterations when given, and the final loop variables)."""
    loop, single_var = _listed(loop_vars, 'loop_vars')
    steps, single_out = [], False
    while (max_iterations is None or len(steps) < max_iterations) and \
            bool(_as_scalar(cond(*loop))):
        outs, new_vars = func(*loop)
        outs, single_out = ([], False) if outs is None or (isinstance(outs, (list, tuple))
                                                           and not outs) else \
            _listed(outs, 'the outputs of func')
        loop, _ = _listed(new_vars, 'the loop variables func returns')
        steps.append(outs)
    stacked = [_padded(_stack(items), max_iterations) for items in zip(*steps)]
    return (stacked[0] if single_out and stacked else stacked), \
        (loop[0] if single_var else loop)


def _as_scalar(value):
    return value.asnumpy().reshape(-1)[0] if isinstance(value, _NDArray) else value


def _padded(stacked, length):
    if length is None or stacked.shape[0] == length:
        return stacked
    pad = _call('_zeros', [], shape=(length - stacked.shape[0],) + stacked.shape[1:],
                dtype=stacked.dtype, ctx=stacked.context)
    return _call('Concat', [stacked, pad], dim=0, num_args=2)


def cond(pred, then_func, else_func):
    """`then_func()` if `pred` (a one-element NDArray) is non-zero, else `else_func()`."""
    return then_func() if bool(_as_scalar(pred)) else else_func()


def _rescale_array(rescale_grad, device):
    if isinstance(rescale_grad, _NDArray):
        return rescale_grad
    return _array([rescale_grad], ctx=device)


def _grouped(*lists):
    return [x for group in zip(*lists) for x in group]


def _outputs(op_name, inputs, out, **attrs):
    op = _registry.get(op_name)
    return _invoke(op, inputs, op.parse_attrs(attrs), out=None if out is None else list(out))


def adamw_update(weight, grad, mean, var, rescale_grad, lr, eta, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, wd=0, clip_gradient=-1, out=None, name=None, **kwargs):
    """AdamW's step on `weight` (in `out`, else a new array); `mean` and `var` are updated in
    place. rescale_grad is a number or a one-element NDArray; a NaN, infinite or zero value
    skips the step (a loss scaler's overflow)."""
    inputs = [weight, grad, mean, var, _rescale_array(rescale_grad, weight.context)]
    return _outputs('_adamw_update', inputs, None if out is None else [out], lr=lr, eta=eta,
                    beta1=beta1, beta2=beta2, epsilon=epsilon, wd=wd,
                    clip_gradient=clip_gradient, **kwargs)[0]


def mp_adamw_update(weight, grad, mean, var, weight32, rescale_grad, lr, eta, beta1=0.9,
                    beta2=0.999, epsilon=1e-8, wd=0, clip_gradient=-1, out=None, name=None,
                    **kwargs):
    """adamw_update on the float32 master copy `weight32` of a (float16) weight."""
    inputs = [weight, grad, mean, var, weight32, _rescale_array(rescale_grad, weight.context)]
    return _outputs('_mp_adamw_update', inputs, None if out is None else [out], lr=lr, eta=eta,
                    beta1=beta1, beta2=beta2, epsilon=epsilon, wd=wd,
                    clip_gradient=clip_gradient, **kwargs)[0]


def multi_adamw_update(weights, grads, mean, var, rescale_grad, lrs, wds, etas, out=None,
                       name=None, size=0, **kwargs):
    """AdamW on lists of weights (with their gradients and moments); rescale_grad is a number
    or a one-element NDArray. Returns the new weights (written into `out` when given)."""
    size = size or len(weights)
    inputs = _grouped(weights, grads, mean, var) + [_rescale_array(rescale_grad,
                                                                   weights[0].context)]
    return _outputs('_multi_adamw_update', inputs, out, num_weights=size, lrs=lrs, wds=wds,
                    etas=etas, **kwargs)


def multi_mp_adamw_update(weights, grads, mean, var, weights32, rescale_grad, lrs, wds, etas,
                          out=None, name=None, size=0, **kwargs):
    """multi_adamw_update on float32 master copies of (float16) weights."""
    size = size or len(weights)
    inputs = _grouped(weights, grads, mean, var, weights32) + [
        _rescale_array(rescale_grad, weights[0].context)]
    return _outputs('_multi_mp_adamw_update', inputs, out, num_weights=size, lrs=lrs, wds=wds,
                    etas=etas, **kwargs)


def multi_lamb_update(weights, grads, mean, var, step_count, lrs, wds, out=None,
                      num_tensors=0, **kwargs):
    """LAMB on lists of weights (with their gradients and moments); step_count, lrs and wds
    hold one value per weight. Returns the new weights (written into `out` when given)."""
    return _outputs('_multi_lamb_update', _grouped(weights, grads, mean, var), out,
                    num_tensors=num_tensors or len(weights), step_count=step_count,
                    learning_rates=lrs, wds=wds, **kwargs)


def multi_mp_lamb_update(weights, grads, mean, var, weights32, step_count, lrs, wds, out=None,
                         num_tensors=0, **kwargs):
    """multi_lamb_update on float32 master copies of (float16) weights."""
    return _outputs('_multi_mp_lamb_update', _grouped(weights, grads, mean, var, weights32),
                    out, num_tensors=num_tensors or len(weights), step_count=step_count,
                    learning_rates=lrs, wds=wds, **kwargs)


_generator = _frontend.Submodule(globals(), ('_contrib_',), _make_function, __name__)


def __getattr__(name):
    return _generator.getattr(name)


_generator.populate()
__all__ = sorted(_generator.names() + ['isinf', 'isnan', 'isfinite', 'boolean_mask',
                                        'rand_zipfian', 'foreach', 'while_loop', 'cond',
                                        'adamw_update', 'mp_adamw_update',
                                        'multi_adamw_update', 'multi_mp_adamw_update',
                                        'multi_lamb_update', 'multi_mp_lamb_update'])
