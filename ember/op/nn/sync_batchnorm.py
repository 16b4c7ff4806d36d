"""SyncBatchNorm (MXNet's ``_contrib_SyncBatchNorm``): batch normalisation whose statistics
are those of the whole batch, spread over ``ndev`` devices of one process.

Each device's operator adds up its part (per channel: the sum, the sum of squares, the count)
and meets the others at a rendezvous named by ``key``; every device then normalises with the
same mean and variance, and the backward pass meets again for the sums its data gradient
needs. The parts must run at the same time: on ``ThreadedEnginePerDevice`` each device has its
own workers, so the operators pushed one device after another meet. A rendezvous that cannot
fill (an engine that runs one operator at a time) raises instead of waiting.
"""
from __future__ import annotations

import threading

import numpy as np

from ember import engine
from ember.base import EmberError
from ember.op.nn._common import accumulation_dtype, outputs_of
from ember.op.nn.normalization import (_backward_type, _bn_infer, _grads_like, _other_axes,
                                       _params_typed, _update_moving)
from ember.op.registry import Param, p_bool, p_float, p_int, p_str, register

PARAMS = (
    Param('eps', p_float, 1e-3, 'Added to the variance before the square root.'),
    Param('momentum', p_float, 0.9, 'Decay of the moving statistics.'),
    Param('fix_gamma', p_bool, True, 'Use a scale of 1 and give gamma no gradient.'),
    Param('use_global_stats', p_bool, False, 'Normalise with the moving statistics in '
          'training too.'),
    Param('output_mean_var', p_bool, False, 'Also output the mean and inverse std used.'),
    Param('ndev', p_int, 1, 'How many devices hold parts of the batch.'),
    Param('key', p_str, '', 'Names the layer: its parts on every device share it.'),
)

# Seconds a part waits for the others before the rendezvous gives up.
WAIT_SECONDS = 60.0


class Rendezvous:
    """Rounds of ``size`` contributions: ``exchange(rank, value)`` returns every contribution
    of the caller's round, ordered by the contributors' ranks.

    >>> meeting = Rendezvous(1)
    >>> meeting.exchange(0, 'only')
    ['only']
    """

    def __init__(self, size):
        self.size = size
        self.condition = threading.Condition()
        self.round = 0
        self.pending = {}
        self.finished = {}      # round -> [contributions, readers left]

    def exchange(self, rank, value, timeout=WAIT_SECONDS):
        with self.condition:
            my_round = self.round
            if rank in self.pending:
                raise EmberError(f'SyncBatchNorm: the part of device {rank} arrived twice in '
                                 'one round; give each device its own part of the batch')
            self.pending[rank] = value
            if len(self.pending) == self.size:
                self.finished[my_round] = [[self.pending[r] for r in sorted(self.pending)],
                                           self.size]
                self.pending, self.round = {}, self.round + 1
                self.condition.notify_all()
            elif not self.condition.wait_for(lambda: my_round in self.finished, timeout):
                del self.pending[rank]
                raise EmberError(f'SyncBatchNorm: {len(self.pending) + 1} of {self.size} '
                                 f'devices reached the rendezvous in {timeout:.0f} s')
            entry = self.finished[my_round]
            entry[1] -= 1
            if entry[1] == 0:
                del self.finished[my_round]
            return entry[0]


_rendezvous: dict = {}
_rendezvous_lock = threading.Lock()


def rendezvous(key, phase, size) -> Rendezvous:
    with _rendezvous_lock:
        found = _rendezvous.get((key, phase))
        if found is None or found.size != size:
            found = _rendezvous[(key, phase)] = Rendezvous(size)
        return found


def _check_engine(attrs):
    """Parts that cannot run at once would wait for ever: say so at once instead."""
    if attrs['ndev'] <= 1:
        return
    kind = type(engine.get()).__name__
    if kind != 'ThreadedEnginePerDevice' or not engine.in_worker():
        raise EmberError(f"SyncBatchNorm over {attrs['ndev']} devices needs each device's part "
                         f'to run at the same time: MXNET_ENGINE_TYPE=ThreadedEnginePerDevice '
                         f'(it is {kind}), one device per part')


def _exchange(attrs, ctx, phase, parts):
    """The sums of `parts` (arrays) over every device's contribution."""
    if attrs['ndev'] <= 1:
        return parts
    _check_engine(attrs)
    host = [np.asarray(part.get() if hasattr(part, 'get') else part) for part in parts]
    meeting = rendezvous(attrs['key'], phase, attrs['ndev'])
    found = meeting.exchange(ctx.device.device_id, host)
    return [ctx.xp.asarray(sum(values[i] for values in found)) for i in range(len(parts))]


def _shape_for(x, values):
    shape = [1] * x.ndim
    shape[1] = -1
    return values.reshape(shape)


def _forward_kernel(attrs, ins, outs, ctx):
    x, gamma, beta, moving_mean, moving_var = ins
    axes = _other_axes(x.ndim, 1)
    acc = accumulation_dtype(x.dtype, ctx.safe_accumulation)
    if ctx.is_train and not attrs['use_global_stats']:
        count = np.array([x.size // x.shape[1]], dtype=np.float64)
        total, squares, count = _exchange(attrs, ctx, 'forward', [
            x.sum(axis=axes, dtype=acc), (x.astype(acc) ** 2).sum(axis=axes), count])
        mean = total / count
        var = squares / count - mean * mean
        _update_moving(attrs, moving_mean, moving_var, mean, var)
    else:
        mean, var = moving_mean.astype(acc), moving_var.astype(acc)
    invstd = 1 / ctx.xp.sqrt(var + attrs['eps'])
    scale = ctx.xp.ones_like(invstd) if attrs['fix_gamma'] else gamma.astype(acc)
    xhat = (x - _shape_for(x, mean)) * _shape_for(x, invstd)
    outs[0][...] = xhat * _shape_for(x, scale) + _shape_for(x, beta.astype(acc))
    outs[1][...] = mean
    outs[2][...] = invstd


def _backward_kernel(attrs, ins, outs, ctx):
    """(out_grad, data, gamma, mean, invstd) -> data, gamma and beta gradients; the data
    gradient uses the sums over every device, gamma's and beta's are this device's."""
    dy, x, gamma, mean, invstd = ins
    axes = _other_axes(x.ndim, 1)
    acc = accumulation_dtype(x.dtype, ctx.safe_accumulation)
    xhat = (x.astype(acc) - _shape_for(x, mean)) * _shape_for(x, invstd)
    dy = dy.astype(acc)
    local_dy, local_both = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
    scale = ctx.xp.ones_like(invstd) if attrs['fix_gamma'] else gamma.astype(acc)
    if ctx.is_train and not attrs['use_global_stats']:
        count = np.array([x.size // x.shape[1]], dtype=np.float64)
        sum_dy, sum_both, count = _exchange(attrs, ctx, 'backward',
                                            [local_dy, local_both, count])
        dx = (dy - _shape_for(x, sum_dy / count) - xhat * _shape_for(x, sum_both / count))
        outs[0][...] = dx * _shape_for(x, scale * invstd)
    else:
        outs[0][...] = dy * _shape_for(x, scale * invstd)
    outs[1][...] = 0 if attrs['fix_gamma'] else local_both
    outs[2][...] = local_dy


def _gradient(F, attrs, inputs, outputs, out_grads):
    grads = F._backward_SyncBatchNorm(out_grads[0], inputs[0], inputs[1], outputs[1],
                                      outputs[2], **attrs)
    return outputs_of(grads, 3) + [None, None]


def _infer(attrs, in_shapes):
    return _bn_infer(dict(attrs, axis=1), in_shapes)


register('_contrib_SyncBatchNorm', _forward_kernel, infer_shape=_infer,
         infer_type=_params_typed(4, 3),
         inputs=('data', 'gamma', 'beta', 'moving_mean', 'moving_var'),
         outputs=('output', 'mean', 'var'),
         visible_outputs=lambda attrs: 3 if attrs['output_mean_var'] else 1,
         params=PARAMS, gradient=_gradient, mutate=(3, 4), aux=('moving_mean', 'moving_var'),
         doc='Batch normalisation over the channel axis 1 with the statistics of the whole '
             'batch, whose parts are on `ndev` devices (`key` names the layer).')

register('_backward_SyncBatchNorm', _backward_kernel,
         infer_shape=_grads_like((1, 2, 2)), infer_type=_backward_type(3),
         inputs=('out_grad', 'data', 'gamma', 'mean', 'invstd'),
         outputs=('data_grad', 'gamma_grad', 'beta_grad'), params=PARAMS)
