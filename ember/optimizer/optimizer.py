"""The optimizer base class, its registry and ``create`` (MXNet 1.x's ``mx.optimizer``).

An optimizer turns a gradient into a weight update. It keeps the schedule (learning rate, weight
decay, per-parameter multipliers, update counts); the per-weight states (momenta, moments) are
created by :meth:`Optimizer.create_state` and held by an :class:`~ember.optimizer.Updater`.

>>> import ember as mx
>>> sgd = mx.optimizer.create('SGD', learning_rate=0.1, momentum=0.9)
>>> type(sgd).__name__, sgd.learning_rate
('SGD', 0.1)
"""
from __future__ import annotations

import difflib
import warnings

import numpy as np

from ember import ndarray as nd

__all__ = ['Optimizer', 'register', 'create', 'NDabs']


class Optimizer:
    """The base class of every optimizer.

    ``rescale_grad`` multiplies the gradient first (Gluon's Trainer sets it to
    ``1/batch_size``); ``clip_gradient`` then clips it to ``[-c, c]``; ``wd`` is the L2 weight
    decay. The learning rate is ``learning_rate``, or ``lr_scheduler(num_update)`` when a
    scheduler is given (``learning_rate`` then overrides the scheduler's ``base_lr``; with
    neither, 0.01). ``param_dict`` maps indices to Gluon Parameters, whose ``lr_mult`` and
    ``wd_mult`` scale the rate and decay of each weight; without it ``param_idx2name`` with
    :meth:`set_lr_mult` / :meth:`set_wd_mult` do. ``multi_precision`` keeps a float32 master
    copy of float16 weights and updates that.

    >>> opt = Optimizer(learning_rate=0.5, wd=0.1, param_idx2name={0: 'fc_weight', 1: 'fc_bias'})
    >>> opt._get_lr(0), opt._get_wd(0), opt._get_wd(1)
    (0.5, 0.1, 0.0)
    """

    opt_registry: dict = {}

    def __init__(self, rescale_grad=1., param_idx2name=None, wd=0., clip_gradient=None,
                 learning_rate=None, lr_scheduler=None, sym=None, begin_num_update=0,
                 multi_precision=False, param_dict=None):
        self.rescale_grad = rescale_grad
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is None and learning_rate is None:
            learning_rate = 0.01
        self.lr = learning_rate
        if lr_scheduler is not None and learning_rate is not None:
            _override_scheduler_lr(lr_scheduler, learning_rate)
        self.wd = wd
        self.lr_mult, self.wd_mult = {}, {}
        self.begin_num_update = begin_num_update
        self.num_update = begin_num_update
        # Update counts per device id: each device's copy of a weight counts its own updates.
        self._all_index_update_counts = {0: {}}
        self._index_update_count = self._all_index_update_counts[0]
        self.clip_gradient = clip_gradient
        self.multi_precision = multi_precision
        # Weights one update() call may take as lists; 0 means one weight per call.
        self.aggregate_num = 0
        if param_idx2name is None:
            param_idx2name = {}
        if not isinstance(param_idx2name, dict):
            raise TypeError(f'param_idx2name: expected a dict index -> name, got '
                            f'{type(param_idx2name).__name__}')
        self.idx2name = param_idx2name.copy()
        self.sym_info = (sym.attr_dict(), sym.list_arguments()) if sym is not None else ()
        self.param_dict = param_dict if param_dict else {}
        self.set_lr_mult({})
        self.set_wd_mult({})

    # -- registry --------------------------------------------------------------------------------
    @staticmethod
    def register(klass):
        """Register an optimizer class under its lower-case class name (a decorator).

        >>> @Optimizer.register
        ... class Halving(Optimizer):
        ...     def update(self, index, weight, grad, state):
        ...         weight[:] *= 0.5
        >>> type(create('halving')).__name__
        'Halving'
        >>> del Optimizer.opt_registry['halving']
        """
        if not isinstance(klass, type):
            raise TypeError(f'register expects an Optimizer class, got {klass!r}')
        name = klass.__name__.lower()
        previous = Optimizer.opt_registry.get(name)
        if previous is not None and previous is not klass:
            warnings.warn(f'optimizer {klass.__module__}.{klass.__name__} replaces '
                          f'{previous.__module__}.{previous.__name__} registered as {name!r}')
        Optimizer.opt_registry[name] = klass
        return klass

    @staticmethod
    def create_optimizer(name, **kwargs):
        """An instance of the optimizer registered as ``name`` (any case).

        >>> type(Optimizer.create_optimizer('adam', learning_rate=0.1)).__name__
        'Adam'
        """
        if not isinstance(name, str):
            raise TypeError(f'optimizer name must be a str, got {type(name).__name__}')
        klass = Optimizer.opt_registry.get(name.lower())
        if klass is None:
            raise ValueError(_unknown_name_message(name))
        return klass(**kwargs)

    # -- learning rate ---------------------------------------------------------------------------
    @property
    def learning_rate(self):
        """The current learning rate (the scheduler's, for the current ``num_update``)."""
        if self.lr_scheduler is not None:
            return self.lr_scheduler(self.num_update)
        return self.lr

    def set_learning_rate(self, lr):
        """Set the learning rate; an optimizer driven by an ``lr_scheduler`` refuses.

        >>> opt = Optimizer(learning_rate=0.1)
        >>> opt.set_learning_rate(0.2)
        >>> opt.learning_rate
        0.2
        """
        if self.lr_scheduler is not None:
            # MXNet raises UserWarning here; programs catch it by that class.
            raise UserWarning('the learning rate comes from the lr_scheduler of this optimizer; '
                              'set_learning_rate works only for an optimizer without one')
        self.lr = lr

    def set_lr_scale(self, args_lrscale):
        """Removed in MXNet 1.x; use :meth:`set_lr_mult`."""
        raise DeprecationWarning('set_lr_scale was removed; use set_lr_mult')

    def set_lr_mult(self, args_lr_mult):
        """Per-parameter learning-rate multipliers, keyed by name (with ``sym``) or index.

        The symbol's ``__lr_mult__`` attributes come first; ``args_lr_mult`` overrides them.
        Multipliers of Gluon Parameters in ``param_dict`` take precedence over both.
        """
        self.lr_mult = self._symbol_mults('__lr_mult__')
        self.lr_mult.update(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        """Per-parameter weight-decay multipliers, keyed by name (with ``sym``) or index.

        Names from ``param_idx2name`` that end neither in ``_weight`` nor in ``_gamma``
        (biases, BatchNorm's beta) get no weight decay, as in MXNet.
        """
        self.wd_mult = {name: 0.0 for name in self.idx2name.values()
                        if not (name.endswith('_weight') or name.endswith('_gamma'))}
        self.wd_mult.update(self._symbol_mults('__wd_mult__'))
        self.wd_mult.update(args_wd_mult)

    def _symbol_mults(self, key):
        if not self.sym_info:
            return {}
        attrs, arg_names = self.sym_info
        return {name: float(attrs[name][key]) for name in arg_names
                if name in attrs and key in attrs[name]}

    # -- states and updates ----------------------------------------------------------------------
    def create_state(self, index, weight):
        """The state a weight's updates need (None, an NDArray or a tuple of them)."""
        return None

    def create_state_multi_precision(self, index, weight):
        """:meth:`create_state`, with a float32 master copy for float16 weights.

        With ``multi_precision`` the state of a float16 weight is ``(master copy, state of
        the master copy)``.
        """
        if self.multi_precision and weight.dtype == np.float16:
            master = weight.astype(np.float32)
            return (master, self.create_state(index, master))
        _warn_float16(self, weight)
        return self.create_state(index, weight)

    def update(self, index, weight, grad, state):
        """Update ``weight`` in place from ``grad`` and ``state`` (subclasses define it)."""
        raise NotImplementedError(f'{type(self).__name__} must define update(index, weight, '
                                  f'grad, state)')

    def update_multi_precision(self, index, weight, grad, state):
        """:meth:`update`, through the float32 master copy for float16 weights."""
        if self.multi_precision and weight.dtype == np.float16:
            master, inner_state = state
            self.update(index, master, grad.astype(np.float32), inner_state)
            nd.cast(master, dtype=weight.dtype, out=weight)
        else:
            self.update(index, weight, grad, state)

    # -- per-index schedule ----------------------------------------------------------------------
    def _set_current_context(self, device_id):
        """Count updates for the copies on device ``device_id`` from now on."""
        counts = self._all_index_update_counts.setdefault(device_id, {})
        self._index_update_count = counts

    def _update_count(self, index):
        """Count one more update of each index (an int, a name or a list of them)."""
        indices = index if isinstance(index, (list, tuple)) else [index]
        counts = self._index_update_count
        for idx in indices:
            counts[idx] = counts.get(idx, self.begin_num_update) + 1
            self.num_update = max(counts[idx], self.num_update)

    def _get_lrs(self, indices):
        """Learning rates of the weights ``indices``: the rate times each multiplier."""
        lr = self.learning_rate
        return [lr * self._multiplier(index, 'lr_mult', self.lr_mult) for index in indices]

    def _get_lr(self, index):
        return self._get_lrs([index])[0]

    def _get_wds(self, indices):
        """Weight decays of the weights ``indices``: ``wd`` times each multiplier."""
        return [self.wd * self._multiplier(index, 'wd_mult', self.wd_mult) for index in indices]

    def _get_wd(self, index):
        return self._get_wds([index])[0]

    def _multiplier(self, index, attribute, by_key):
        if index in self.param_dict:
            return getattr(self.param_dict[index], attribute)
        if index in by_key:
            return by_key[index]
        if index in self.idx2name:
            return by_key.get(self.idx2name[index], 1.0)
        return 1.0

    def _clip_kwargs(self):
        """clip_gradient for an update operator; MXNet passes it only when it is set (non-zero)."""
        return {'clip_gradient': self.clip_gradient} if self.clip_gradient else {}

    # -- copies ----------------------------------------------------------------------------------
    def __getstate__(self):
        state = self.__dict__.copy()
        # Parameters belong to the Trainer, which sets param_dict again.
        del state['param_dict']
        return state

    def __setstate__(self, state):
        self.__dict__ = state
        self.param_dict = {}


register = Optimizer.register
create = Optimizer.create_optimizer


def _override_scheduler_lr(lr_scheduler, learning_rate):
    if lr_scheduler.base_lr != learning_rate:
        warnings.warn(f'learning_rate={learning_rate!r} replaces the base_lr '
                      f'{lr_scheduler.base_lr!r} of the lr_scheduler')
        lr_scheduler.base_lr = learning_rate


def _unknown_name_message(name):
    known = sorted(Optimizer.opt_registry)
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.6)
    hint = f'; did you mean {close[0]!r}?' if close else ''
    return f'no optimizer named {name!r}: expected one of {", ".join(known)}{hint}'


def _warn_float16(optimizer, weight):
    if weight.dtype == np.float16 and not optimizer.multi_precision:
        warnings.warn(f'{type(optimizer).__name__} accumulates in float16, which can lose '
                      f'accuracy or slow convergence; pass multi_precision=True to keep a '
                      f'float32 master copy of the weights')


NDabs = nd.abs      # MXNet's name for mx.nd.abs in this module

