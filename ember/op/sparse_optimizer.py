"""Lazy updates: the optimizer operators with a row_sparse gradient (MXNet's sparse
``sgd_update``, ``sgd_mom_update``, ``adam_update``, ``ftrl_update`` and
``_sparse_adagrad_update``).

A lazy update touches only the rows the gradient stores: those rows of the weight and of its
states are gathered, stepped by the operator's own dense step and written back, so its cost
grows with the stored rows, not with the weight. Weight decay applies to those rows only.
``sgd_update``, ``sgd_mom_update`` and ``adam_update`` with ``lazy_update=False`` make the
standard update instead: every row, the missing gradient rows being zero. FTRL and AdaGrad
are always lazy with a row_sparse gradient (in MXNet 1.9.1 FTRL is lazy only when the weight
and states are row_sparse too, and falls back to the dense update otherwise).

The weight and states may be dense or row_sparse; a row_sparse one gains the gradient's rows
it lacks (as zeros) before they are stepped.

>>> import numpy as np
>>> from ember.op import registry, sparse
>>> from ember.device import cpu
>>> weight = np.ones((4, 2), 'float32')
>>> grad = sparse.from_dense(np.array([[0, 0], [1, 1], [0, 0], [0, 0]], 'float32'), 'row_sparse')
>>> op = registry.get('sgd_update')
>>> attrs = op.parse_attrs({'lr': 0.5, 'wd': 0.1})
>>> sparse.rule_of(op).kernel(attrs, [weight, grad], [weight], registry.KernelContext(cpu()))
>>> weight[:, 0].tolist()
[1.0, 0.44999998807907104, 1.0, 1.0]
"""
from __future__ import annotations

import numpy as np

from ember.backend import native
from ember.engine.threads import team_arguments
from ember.op import optimizer_ops as _updates
from ember.op import registry
from ember.op.sparse import (CSR_TYPE, DEFAULT, ROW_SPARSE, cast_into, is_parts,
                             storage_rule)

__all__ = ['LAZY_OPS']

# operator: (its dense step, whether lazy_update chooses between lazy and standard)
LAZY_OPS = {
    'sgd_update': (_updates._sgd_step, True),
    'sgd_mom_update': (_updates._sgd_mom_step, True),
    'adam_update': (_updates._adam_step, True),
    'ftrl_update': (_updates._ftrl_step, False),
    'adagrad_update': (_updates._adagrad_step, False),
}


# the operators ember._sparse.lazy_update runs, by its kind number
_COMPILED_KINDS = {'sgd_update': 0, 'sgd_mom_update': 1, 'adam_update': 2}
_compiled = native.compiled_module('_sparse')
# gradient values from which the rows are split over the team (a few hundred microseconds of
# work on one thread, the rows being far apart in memory; waking the team costs tens of
# microseconds, more on a busy machine)
_SPLIT_FROM = 1 << 17


def _infer(has_lazy_flag):
    def infer(attrs, stypes, shapes):
        weight, grad, *states = stypes
        if grad != ROW_SPARSE or CSR_TYPE in (weight, *states):
            return None
        if has_lazy_flag and not attrs['lazy_update'] and (weight, *states) != (
                DEFAULT,) * (1 + len(states)):
            return None       # a standard update of row_sparse weights: the fallback's
        return (weight,)
    return infer


def _compiled_step(name, attrs, targets, grad, xp):
    """Run the step in C (``ember._sparse.lazy_update``, the rows split over the team) where
    it has the operator and every array is float32 and contiguous; False otherwise."""
    kind = _COMPILED_KINDS.get(name)
    arrays = [target.values for target in targets] + [grad.data]
    if (kind is None or _compiled is None or xp is not np
            or not all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)):
        return False
    positions = xp.ascontiguousarray(targets[0].positions, dtype=np.int64)
    flat = [a.reshape(-1) for a in arrays]
    work = grad.data.size
    _compiled.lazy_update(kind, flat[0], flat[-1], positions, tuple(flat[1:-1]), attrs['lr'],
                          attrs['wd'], attrs['rescale_grad'], attrs['clip_gradient'],
                          attrs.get('momentum', 0.0), attrs.get('beta1', 0.0),
                          attrs.get('beta2', 0.0), attrs.get('epsilon', 0.0),
                          **(team_arguments(work >= _SPLIT_FROM, work)
                             if _compiled.openmp else {}))
    return True


def _kernel(step, has_lazy_flag, name):
    def kernel(attrs, ins, outs, ctx):
        weight, grad, *states = ins
        xp, out = ctx.xp, outs[0]
        if has_lazy_flag and not attrs['lazy_update']:
            out[...] = step(xp, attrs, weight, grad.to_dense(xp), *states)
            return
        if out is not weight:
            cast_into(weight, out, xp)      # the step reads the weight from out from now on
        rows = grad.indices
        targets = [_RowsOf(array, rows, xp) for array in (out, *states)]
        if _compiled_step(name, attrs, targets, grad, xp):
            return
        gathered = [target.gather() for target in targets]
        new_rows = step(xp, attrs, gathered[0], grad.data, *gathered[1:])
        for target, values in zip(targets[1:], gathered[1:]):
            target.scatter(values)          # the step updated the gathered states in place
        targets[0].scatter(new_rows)
    return kernel


class _RowsOf:
    """Rows `rows` (ascending) of a dense array or of row_sparse parts, to gather and write
    back; row_sparse parts first gain the rows they lack, as zeros."""

    def __init__(self, array, rows, xp):
        self.xp = xp
        if is_parts(array):
            self.values, self.positions = _holding(array, rows, xp)
        else:
            self.values, self.positions = array, rows

    def gather(self):
        return self.values[self.positions]

    def scatter(self, new):
        self.values[self.positions] = new


def _holding(parts, rows, xp):
    """(data, positions of `rows` in it) of row_sparse `parts` after adding missing rows."""
    stored = parts.indices
    position = xp.searchsorted(stored, rows)
    inside = position < stored.shape[0]
    if bool(inside.all()) and bool((stored[position] == rows).all()):
        return parts.data, position
    merged = xp.union1d(stored, rows)
    data = xp.zeros((merged.shape[0],) + parts.shape[1:], parts.dtype)
    data[xp.searchsorted(merged, stored)] = parts.data
    parts.set(data, merged)
    return data, xp.searchsorted(merged, rows)


for _name, (_step, _has_flag) in LAZY_OPS.items():
    registry.get(_name)       # declared in optimizer_ops
    storage_rule(_name, _infer(_has_flag), _kernel(_step, _has_flag, _name))
