"""SyncBatchNorm: batch normalisation whose training statistics span the batches of ``ndev``
devices (MXNet's ``_contrib_SyncBatchNorm``).

Each device's call adds its sums over the batch and spatial axes to a rendezvous named by
``key`` and waits for the other devices' calls; all of them then normalise with the global
mean and variance (the backward shares its sums the same way). The calls of the devices must
therefore run at the same time, as they do on the per-device workers of
ThreadedEnginePerDevice (MXNet's default); a call left waiting raises an error instead of
hanging. In prediction, or with ``use_global_stats``, it is BatchNorm with the moving
statistics. gamma's and beta's gradients are each device's own, as in MXNet (the trainer sums
them).

>>> from ember.op import registry
>>> op = registry.get('_contrib_SyncBatchNorm')
>>> op.infer_shape(op.parse_attrs({'key': 'bn'}), [(4, 3, 2), None, None, None, None])[1]
[(4, 3, 2), (3,), (3,)]
"""
from __future__ import annotations

import threading

import numpy as np

from ember import engine
from ember.base import EmberError
from ember.op.host import register
from ember.op.registry import REQUIRED, Param, ShapeError, p_bool, p_float, p_int, p_str

__all__ = ['allreduce']

_WAIT_SECONDS = 120.0


class _Rendezvous:
    """Sums contributions from `count` callers, round after round."""

    def __init__(self):
        self.condition = threading.Condition()
        self.parts = []
        self.round = 0
        self.results = {}


_rendezvous: dict = {}


def _check_engine(count):
    """Parts that cannot run at once would only time out: say so at once instead."""
    kind = type(engine.get()).__name__
    if kind != 'ThreadedEnginePerDevice' or not engine.in_worker():
        raise EmberError(f"SyncBatchNorm over {count} devices needs each device's part to run "
                         f'at the same time: MXNET_ENGINE_TYPE=ThreadedEnginePerDevice (it is '
                         f'{kind}), one device per part')
_lock = threading.Lock()


def allreduce(key, count, values, timeout=_WAIT_SECONDS):
    """The sum of `values` (a list of arrays) over the `count` callers of `key`."""
    if count == 1:
        return values
    _check_engine(count)
    with _lock:
        meeting = _rendezvous.setdefault(key, _Rendezvous())
    with meeting.condition:
        my_round = meeting.round
        meeting.parts.append(values)
        if len(meeting.parts) == count:
            meeting.results[my_round] = [sum(parts) for parts in zip(*meeting.parts)]
            meeting.parts, meeting.round = [], my_round + 1
            meeting.condition.notify_all()
        elif not meeting.condition.wait_for(lambda: meeting.round > my_round, timeout):
            meeting.parts.remove(values)
            raise EmberError(f'SyncBatchNorm key={key!r}: {len(meeting.parts) + 1} of {count} '
                             f'devices arrived; the devices\' calls must run at the same time '
                             f'(ThreadedEnginePerDevice)')
        result = meeting.results[my_round]
        # the last of the round to read it drops it
        meeting.results.setdefault(('read', my_round), 0)
        meeting.results[('read', my_round)] += 1
        if meeting.results[('read', my_round)] == count:
            del meeting.results[my_round], meeting.results[('read', my_round)]
    return result


_PARAMS = (Param('eps', p_float, 1e-3, 'Added to the variance.'),
           Param('momentum', p_float, 0.9, 'Decay of the moving statistics.'),
           Param('fix_gamma', p_bool, True, 'Use gamma = 1.'),
           Param('use_global_stats', p_bool, False, 'Normalise with the moving statistics.'),
           Param('output_mean_var', p_bool, False, 'Also return the batch mean and var.'),
           Param('ndev', p_int, 1, 'Devices whose batches the statistics span.'),
           Param('key', p_str, REQUIRED, 'Name shared by the devices\' calls of one layer.'))


def _shape(attrs, in_shapes):
    data = in_shapes[0]
    if data is None:
        return list(in_shapes), [None] * 3
    if len(data) < 2:
        raise ShapeError(f'data must have a channel axis (batch, channels, ...), got {data}')
    channels = (data[1],)
    return [data] + [channels] * 4, [data, channels, channels]


def _axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(values, x):
    return values.reshape((1, -1) + (1,) * (x.ndim - 2))


def _training(attrs, ctx):
    return ctx.is_train and not attrs['use_global_stats']


def _kernel(attrs, ins, outs, ctx):
    x, gamma, beta, moving_mean, moving_var = ins
    out, mean_out, var_out = outs
    scale = np.ones_like(gamma) if attrs['fix_gamma'] else gamma
    if _training(attrs, ctx):
        wide = x.astype(np.float64)
        count = x.size // x.shape[1]
        total, squares, number = allreduce(
            attrs['key'], attrs['ndev'],
            [wide.sum(axis=_axes(x)), (wide * wide).sum(axis=_axes(x)), np.array(count)])
        mean = total / number
        var = squares / number - mean * mean
        moving_mean[...] = attrs['momentum'] * moving_mean + (1 - attrs['momentum']) * mean
        moving_var[...] = attrs['momentum'] * moving_var + (1 - attrs['momentum']) * var
    else:
        mean, var = moving_mean, moving_var
    inverse = 1 / np.sqrt(var + attrs['eps'])
    out[...] = ((x - _per_channel(mean, x)) * _per_channel(inverse * scale, x)
                + _per_channel(beta, x))
    mean_out[...] = mean
    var_out[...] = var


def _backward(attrs, ins, outs, ctx):
    grad, x, gamma, mean, var = ins
    data_grad, gamma_grad, beta_grad = outs
    scale = np.ones_like(gamma) if attrs['fix_gamma'] else gamma
    inverse = 1 / np.sqrt(var.astype(np.float64) + attrs['eps'])
    normal = (x - _per_channel(mean, x)) * _per_channel(inverse, x)
    local = [grad.sum(axis=_axes(x)), (grad * normal).sum(axis=_axes(x))]
    gamma_grad[...] = 0 if attrs['fix_gamma'] else local[1]
    beta_grad[...] = local[0]
    if not _training(attrs, ctx):
        data_grad[...] = grad * _per_channel(inverse * scale, x)
        return
    count = x.size // x.shape[1]
    total_grad, total_normal, number = allreduce(attrs['key'] + '/backward', attrs['ndev'],
                                                 local + [np.array(count)])
    data_grad[...] = _per_channel(inverse * scale, x) * (
        grad - _per_channel(total_grad / number, x)
        - normal * _per_channel(total_normal / number, x))


def _gradient(F, attrs, ins, outs, og):
    grads = F._backward__contrib_SyncBatchNorm(og[0], ins[0], ins[1], outs[1], outs[2], **attrs)
    return list(grads) + [None, None]


register('_contrib_SyncBatchNorm', _kernel,
         inputs=('data', 'gamma', 'beta', 'moving_mean', 'moving_var'),
         outputs=('output', 'mean', 'var'),
         visible_outputs=lambda attrs: 3 if attrs['output_mean_var'] else 1,
         infer_shape=_shape, params=_PARAMS, mutate=(3, 4), aux=('moving_mean', 'moving_var'),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]] * 3),
         gradient=_gradient,
         doc='Batch normalisation with the statistics of the batches of ndev devices.')
register('_backward__contrib_SyncBatchNorm', _backward,
         inputs=('out_grad', 'data', 'gamma', 'mean', 'var'),
         outputs=('data_grad', 'gamma_grad', 'beta_grad'), params=_PARAMS,
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1], shapes[2], shapes[2]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[1]] * 3),
         doc='The gradients of SyncBatchNorm (the data\'s with the devices\' sums).')
