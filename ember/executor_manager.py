"""``mx.executor_manager``: MXNet 1.x's oldest data-parallel training helper (``FeedForward``'s
before ``mx.mod``): a batch split over devices, one executor per device.

:class:`DataParallelExecutorGroup` binds `sym` once per device for its slice of the batch
(parameters get gradients, data and labels do not); :class:`DataParallelExecutorManager` sizes
the slices from a work-load list and, given ``sym_gen``, keeps one group per bucket key, all
sharing the default group's parameter arrays.

>>> import ember as mx
>>> net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2, name='fc')
>>> net = mx.sym.LinearRegressionOutput(net, name='out')
>>> it = mx.io.NDArrayIter(mx.nd.ones((4, 3)), mx.nd.zeros((4, 2)), batch_size=4,
...                        label_name='out_label')
>>> args = net.list_arguments()
>>> manager = DataParallelExecutorManager(net, [mx.cpu(0), mx.cpu(1)], it, args,
...                                       ['fc_weight', 'fc_bias'], [])
>>> manager.slices
[slice(0, 2, None), slice(2, 4, None)]
>>> manager.set_params({'fc_weight': mx.nd.ones((2, 3)), 'fc_bias': mx.nd.zeros(2)}, {})
>>> manager.load_data_batch(next(iter(it)))
>>> manager.forward()
>>> manager.curr_execgrp.train_execs[1].outputs[0].asnumpy().tolist()
[[3.0, 3.0], [3.0, 3.0]]
"""
from __future__ import annotations

import logging

import numpy as np

from ember import ndarray as nd
from ember.base import mx_real_t
from ember.device import cpu
from ember.io import DataDesc

__all__ = ['DataParallelExecutorGroup', 'DataParallelExecutorManager', 'DataDesc', 'cpu',
           'mx_real_t']


def _split_input_slice(batch_size, work_load_list):
    """Slices of a batch in proportion to each device's work load; none may be empty."""
    total = sum(work_load_list)
    counts = [round(load * batch_size / total) for load in work_load_list]
    counts[-1] += max(0, batch_size - sum(counts))
    slices, end = [], 0
    for count in counts:
        begin = min(end, batch_size)
        end = min(begin + count, batch_size)
        if begin >= end:
            raise ValueError(f'work_load_list {work_load_list} splits a batch of {batch_size} '
                             f'into too many slices: some would be empty')
        slices.append(slice(int(begin), int(end)))
    return slices


def _check_arguments(sym):
    """Refuse a symbol naming two arguments (or two auxiliary states) alike."""
    for kind, names in (('argument', sym.list_arguments()),
                        ('auxiliary state', sym.list_auxiliary_states())):
        seen = set()
        for name in names:
            if name in seen:
                raise ValueError(f'{kind} name {name!r} appears twice in {names}; give the '
                                 f'layers distinct names')
            seen.add(name)


def _load(sources, targets):
    """Copy each source array into its target: one array, or (slice, array) per device."""
    for source, target in zip(sources, targets):
        if isinstance(target, nd.NDArray):
            source.copyto(target)
            continue
        if target[-1][0].stop != source.shape[0]:
            raise ValueError(f'batch size {source.shape[0]} does not match the bound '
                             f'{target[-1][0].stop}')
        for part, array in target:
            source[part].copyto(array)


def _bind_exec(sym, ctx, input_shapes, param_names, input_types, base_exec=None,
               shared_data_arrays=None):
    """An executor of `sym` on `ctx`: gradients for the parameters; parameter arrays (and
    gradients) taken from `base_exec` when given; data arrays reused from
    `shared_data_arrays` (by name) where they are large enough."""
    arg_shapes, _, aux_shapes = sym.infer_shape(**input_shapes)
    arg_types, _, aux_types = sym.infer_type(**input_types)
    names = sym.list_arguments()
    need_grad = set(names) - set(input_shapes)
    args, grads = [], {}
    for name, shape, dtype in zip(names, arg_shapes, arg_types):
        if name in param_names:
            if base_exec is None:
                array = nd.zeros(shape, ctx, dtype=dtype)
                if name in need_grad:
                    grads[name] = nd.zeros(shape, ctx, dtype=dtype)
            else:
                array = base_exec.arg_dict[name]
                if name in need_grad:
                    grads[name] = base_exec.grad_dict[name]
        else:
            array = _data_array(name, shape, dtype, ctx, shared_data_arrays)
        args.append(array)
    aux = ([nd.zeros(s, ctx, dtype=t) for s, t in zip(aux_shapes, aux_types)]
           if base_exec is None else list(base_exec.aux_arrays))
    grad_req = {name: 'write' if name in need_grad else 'null' for name in names}
    return sym.bind(ctx, args, args_grad=grads, grad_req=grad_req, aux_states=aux,
                    shared_exec=base_exec)


def _data_array(name, shape, dtype, ctx, shared):
    if shared is None:
        return nd.zeros(shape, ctx, dtype=dtype)
    found = shared.get(name)
    size = int(np.prod(shape))
    if found is not None and found.size >= size:    # the front of the larger array
        return found.reshape(-1)[:size].reshape(shape)
    shared[name] = nd.zeros(shape, ctx, dtype=dtype)
    return shared[name]


class DataParallelExecutorGroup:
    """`sym` bound on every device of `ctx` for its slice of `train_data`'s batches."""

    def __init__(self, sym, arg_names, param_names, ctx, slices, train_data,
                 shared_group=None):
        _check_arguments(sym)
        self.shared_data_arrays = ([{} for _ in ctx] if shared_group is None
                                   else shared_group.shared_data_arrays)
        descs = list(train_data.provide_data) + list(train_data.provide_label)
        self.data_names = [d[0] for d in train_data.provide_data]
        self.label_names = [d[0] for d in train_data.provide_label]
        self.aux_names = sym.list_auxiliary_states()
        self.param_idx = [i for i, name in enumerate(arg_names) if name in param_names]
        self.param_names = [arg_names[i] for i in self.param_idx]
        types = {d[0]: d.dtype if isinstance(d, DataDesc) else mx_real_t for d in descs}
        self.train_execs = []
        for i, device in enumerate(ctx):
            shapes = {d[0]: (slices[i].stop - slices[i].start,) + tuple(d[1][1:]) for d in descs}
            base = None if shared_group is None else shared_group.train_execs[i]
            self.train_execs.append(_bind_exec(sym, device, shapes, self.param_names, types,
                                               base, self.shared_data_arrays[i]))
        self.data_arrays = [[(slices[i], e.arg_dict[name]) for i, e in enumerate(self.train_execs)]
                            for name in self.data_names]
        self.label_arrays = [[(slices[i], e.arg_dict[name])
                              for i, e in enumerate(self.train_execs)]
                             for name in self.label_names]
        self.param_arrays = [[e.arg_arrays[i] for e in self.train_execs] for i in self.param_idx]
        self.grad_arrays = [[e.grad_arrays[i] for e in self.train_execs] for i in self.param_idx]
        self.aux_arrays = [[e.aux_arrays[i] for e in self.train_execs]
                           for i in range(len(self.aux_names))]
        self.slices = slices

    def load_data_batch(self, data_batch):
        """Copy the batch's data and labels into every device's slice."""
        _load(data_batch.data, self.data_arrays)
        _load(data_batch.label, self.label_arrays)

    def forward(self, is_train=False):
        for executor in self.train_execs:
            executor.forward(is_train=is_train)

    def backward(self):
        for executor in self.train_execs:
            executor.backward()

    def update_metric(self, metric, labels, pre_sliced=False):
        """Update `metric` with each device's outputs and its part of `labels`."""
        for i, (executor, part) in enumerate(zip(self.train_execs, self.slices)):
            sliced = labels[i] if pre_sliced else [label[part] for label in labels]
            metric.update(sliced, executor.outputs)


class DataParallelExecutorManager:
    """Training over the devices of `ctx`, each with its share (by `work_load_list`) of
    `train_data`'s batches; with `sym_gen`, one executor group per bucket key."""

    def __init__(self, symbol, ctx, train_data, arg_names, param_names, aux_names,
                 work_load_list=None, logger=None, sym_gen=None):
        logger = logger or logging
        logger.info('Start training with %s', ctx)
        if work_load_list is None:
            work_load_list = [1] * len(ctx)
        if not isinstance(work_load_list, list) or len(work_load_list) != len(ctx):
            raise ValueError(f'work_load_list {work_load_list!r}: expected a list of one load '
                             f'per device ({len(ctx)})')
        self.slices = _split_input_slice(train_data.batch_size, work_load_list)
        self.arg_names, self.param_names, self.aux_names = arg_names, param_names, aux_names
        self.ctx = ctx
        self.symbol = symbol
        self.sym_gen = sym_gen
        self.execgrp = DataParallelExecutorGroup(symbol, arg_names, param_names, ctx,
                                                 self.slices, train_data)
        self.curr_execgrp = None    # the group of the batch loaded last
        if sym_gen is not None:
            self.execgrp_bucket = {train_data.default_bucket_key: self.execgrp}

    def install_monitor(self, monitor):
        if self.sym_gen is not None:
            raise ValueError('install_monitor: a bucketing manager (sym_gen) cannot be '
                             'monitored; use mx.mod.BucketingModule')
        for executor in self.execgrp.train_execs:
            monitor.install(executor)

    def set_params(self, arg_params, aux_params):
        """Copy the parameters into every device's executor."""
        for executor in self.execgrp.train_execs:
            executor.copy_params_from(arg_params, aux_params)

    def copy_to(self, arg_params, aux_params):
        """Write the devices' mean of each parameter into `arg_params` / `aux_params`."""
        for names, blocks, target in ((self.param_names, self.param_arrays, arg_params),
                                      (self.aux_names, self.aux_arrays, aux_params)):
            for name, block in zip(names, blocks):
                mean = sum(w.copyto(cpu()) for w in block) / len(block)
                mean.astype(target[name].dtype).copyto(target[name])

    @property
    def param_arrays(self):
        return self.execgrp.param_arrays

    @property
    def grad_arrays(self):
        return self.execgrp.grad_arrays

    @property
    def aux_arrays(self):
        return self.execgrp.aux_arrays

    def load_data_batch(self, data_batch):
        """Load a batch into the group of its bucket (bound the first time it is seen)."""
        self.curr_execgrp = self.execgrp
        if self.sym_gen is not None:
            key = data_batch.bucket_key
            if key not in self.execgrp_bucket:
                self.execgrp_bucket[key] = DataParallelExecutorGroup(
                    self.sym_gen(key), self.arg_names, self.param_names, self.ctx, self.slices,
                    data_batch, shared_group=self.execgrp)
            self.curr_execgrp = self.execgrp_bucket[key]
        self.curr_execgrp.load_data_batch(data_batch)

    def forward(self, is_train=False):
        self.curr_execgrp.forward(is_train=is_train)

    def backward(self):
        self.curr_execgrp.backward()

    def update_metric(self, metric, labels, pre_sliced=False):
        self.curr_execgrp.update_metric(metric, labels, pre_sliced)
