"""DataParallelExecutorGroup: one executor per device, each running a slice of the batch.

The group allocates every argument array itself (data, label, parameters, gradients, auxiliary
states) and binds each device's executor over them with ``Symbol.bind``. Owning the arrays is
what lets a module share its parameters with another one (``shared_group``: bucketing, or a
reshape to a new batch size) without copying: the new executors are bound over the same
parameter, gradient and auxiliary arrays.

>>> import ember as mx
>>> from ember.io import DataDesc
>>> net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2, name='fc')
>>> group = DataParallelExecutorGroup(net, [mx.cpu(0), mx.cpu(1)], None,
...                                   [DataDesc('data', (6, 3))], None, ['fc_weight', 'fc_bias'],
...                                   for_training=False, inputs_need_grad=False)
>>> group.slices, [w.shape for w in group.param_arrays[0]]
([slice(0, 3, None), slice(3, 6, None)], [(2, 3), (2, 3)])
"""
from __future__ import annotations

import logging
from collections import OrderedDict

import numpy as np

from ember import executor as _executor  # noqa: F401  (attaches Symbol.bind)
from ember import ndarray as nd
from ember.base import EmberError
from ember.device import cpu
from ember.io import DataDesc

__all__ = ['DataParallelExecutorGroup', 'split_input_slice', 'DataDesc']

GRAD_REQS = ('write', 'add', 'null')


def split_input_slice(batch_size, work_load_list):
    """The slice of the batch each device takes, in proportion to its work load.

    >>> split_input_slice(10, [1, 1, 3])
    [slice(0, 2, None), slice(2, 4, None), slice(4, 10, None)]
    """
    total = float(sum(work_load_list))
    counts = [int(round(load * batch_size / total)) for load in work_load_list]
    counts[-1] += batch_size - sum(counts)
    slices, end = [], 0
    for count in counts:
        begin = min(end, batch_size)
        end = min(begin + count, batch_size)
        if begin >= end:
            raise ValueError(f'batch size {batch_size} split by work loads {work_load_list} '
                             f'leaves a device without examples; use fewer devices or a '
                             f'larger batch')
        slices.append(slice(begin, end))
    return slices


def batch_axes(descs):
    """The batch axis ('N' of the layout) of each DataDesc; -1 where there is none."""
    return [DataDesc.get_batch_axis(getattr(desc, 'layout', None)) for desc in descs]


def load_general(sources, targets, axes):
    """Copy each source array, sliced along its batch axis, into the arrays of each device.

    ``targets[i]`` is a list of ``(slice, array)`` per device for source ``i``.
    """
    for source, per_device, axis in zip(sources, targets, axes):
        for part, destination in per_device:
            _slice_of(source, part, axis).copyto(destination)


def _slice_of(array, part, axis):
    if axis < 0 or (part.start == 0 and part.stop == array.shape[axis]):
        return array
    if axis == 0:
        return array[part.start:part.stop]
    return nd.slice_axis(array, axis=axis, begin=part.start, end=part.stop)


def _merge_multi_context(outputs, axes):
    """One array per output: the devices' parts concatenated along the batch axis, on the
    first device (an output without batch axis is taken from the first device)."""
    merged = []
    for parts, axis in zip(outputs, axes):
        if axis < 0 or len(parts) == 1:
            merged.append(parts[0])
            continue
        first = parts[0].context
        merged.append(nd.concat(*[p.as_in_context(first) for p in parts], dim=axis))
    return merged


def grad_requests(arg_names, param_names, data_names, fixed_param_names, grad_req,
                  for_training, inputs_need_grad):
    """``{argument: 'write'|'add'|'null'}`` as MXNet decides it: parameters get `grad_req`
    (fixed ones 'null'), data gets it only with `inputs_need_grad`, labels never."""
    if not for_training:
        return {name: 'null' for name in arg_names}
    given = _given_grad_reqs(arg_names, grad_req)
    requests = {}
    for name in arg_names:
        if name in param_names:
            default = 'null' if name in fixed_param_names else given.get(name, 'write')
        elif name in data_names:
            default = given.get(name, 'write') if inputs_need_grad else 'null'
        else:
            default = 'null'
        requests[name] = default
    for name, request in requests.items():
        if request not in GRAD_REQS:
            raise ValueError(f'grad_req {request!r} for {name!r}: expected one of {GRAD_REQS}')
    return requests


def _given_grad_reqs(arg_names, grad_req):
    if isinstance(grad_req, str):
        return {name: grad_req for name in arg_names}
    if isinstance(grad_req, (list, tuple)):
        if len(grad_req) != len(arg_names):
            raise ValueError(f'grad_req list of {len(grad_req)} entries: expected one per '
                             f'argument ({len(arg_names)}: {arg_names})')
        return dict(zip(arg_names, grad_req))
    if isinstance(grad_req, dict):
        return dict(grad_req)
    raise TypeError(f'grad_req {grad_req!r}: expected a str, a list or a dict')


class DataParallelExecutorGroup:
    """Executors of `symbol` on `contexts`, each taking a slice of every batch.

    ``param_arrays``, ``grad_arrays`` and ``aux_arrays`` hold one list per parameter (auxiliary
    state) with that array on each device; ``data_arrays``/``label_arrays`` one list per
    input of ``(slice, array)`` pairs. ``grad_arrays`` entries are None for parameters that
    get no gradient.
    """

    def __init__(self, symbol, contexts, workload, data_shapes, label_shapes, param_names,
                 for_training, inputs_need_grad, shared_group=None, logger=logging,
                 fixed_param_names=None, grad_req='write', state_names=None, group2ctxs=None):
        self.symbol = symbol
        self.contexts = list(contexts)
        self.workload = list(workload) if workload is not None else [1] * len(self.contexts)
        if len(self.workload) != len(self.contexts):
            raise ValueError(f'work_load_list has {len(self.workload)} entries for '
                             f'{len(self.contexts)} contexts; give one per context')
        self.group2ctxs = _per_device_groups(group2ctxs, len(self.contexts))
        self.param_names = list(param_names)
        self.arg_names = symbol.list_arguments()
        self.aux_names = symbol.list_auxiliary_states()
        self.output_names = symbol.list_outputs()
        self.for_training = for_training
        self.inputs_need_grad = inputs_need_grad
        self.logger = logger
        self.fixed_param_names = list(fixed_param_names or [])
        self.state_names = list(state_names or [])
        self.data_names = [desc.name for desc in data_shapes]
        self.grad_req = grad_requests(self.arg_names, self.param_names, self.data_names,
                                      self.fixed_param_names, grad_req, for_training,
                                      inputs_need_grad)
        self.shared_group = shared_group
        self.output_layouts = [DataDesc.get_batch_axis(symbol[i].attr('__layout__'))
                               for i in range(len(self.output_names))]
        self.execs = []
        self.bind_exec(data_shapes, label_shapes, shared_group)

    # ------------------------------------------------------------------------------------------
    # Binding

    def decide_slices(self, data_shapes):
        """Set ``slices`` (the part of the batch each device takes) from the inputs' shapes;
        returns the batch axis of each input."""
        axes = batch_axes(data_shapes)
        sizes = {desc.name: desc.shape[axis] for desc, axis in zip(data_shapes, axes)
                 if axis >= 0}
        if len(set(sizes.values())) > 1:
            raise ValueError(f'inputs disagree on the batch size: {sizes}; every data input '
                             f'needs the same size along the N axis of its layout')
        self.batch_size = next(iter(sizes.values()), None)
        if self.batch_size is None:
            raise ValueError(f'no data input has a batch axis (layouts '
                             f'{[getattr(d, "layout", None) for d in data_shapes]})')
        self.slices = split_input_slice(self.batch_size, self.workload)
        return axes

    def bind_exec(self, data_shapes, label_shapes, shared_group=None, reshape=False):
        """Bind one executor per device for these input shapes. With `reshape` the new
        executors keep this group's parameter, gradient and auxiliary arrays."""
        self.data_shapes = list(data_shapes)
        self.label_shapes = list(label_shapes) if label_shapes else None
        self.data_layouts = self.decide_slices(self.data_shapes)
        self.label_layouts = batch_axes(self.label_shapes) if self.label_shapes else None
        self.label_names = [desc.name for desc in self.label_shapes or []]
        owner = self if reshape else shared_group
        self.execs = [self._bind_ith_exec(i, owner) for i in range(len(self.contexts))]
        self._collect_arrays()

    def reshape(self, data_shapes, label_shapes):
        """Rebind for new input shapes, keeping the parameters (no copy)."""
        if (_shapes(data_shapes) == _shapes(self.data_shapes)
                and _shapes(label_shapes) == _shapes(self.label_shapes)):
            return
        self.bind_exec(data_shapes, label_shapes, reshape=True)

    def _bind_ith_exec(self, i, shared):
        context = self.contexts[i]
        inputs = self._sliced_descs(self.data_shapes, self.data_layouts, i)
        if self.label_shapes:
            inputs += self._sliced_descs(self.label_shapes, self.label_layouts, i)
        arg_shapes, arg_types, aux_shapes, aux_types = self._infer(inputs)
        shared_exec = shared.execs[i] if shared is not None else None
        args = {name: self._argument(name, shape, dtype, context, shared_exec)
                for name, shape, dtype in zip(self.arg_names, arg_shapes, arg_types)}
        grads = {name: self._gradient(name, args[name], shared_exec)
                 for name in self.arg_names if self.grad_req[name] != 'null'}
        aux = {name: self._auxiliary(name, shape, dtype, context, shared_exec)
               for name, shape, dtype in zip(self.aux_names, aux_shapes, aux_types)}
        return self.symbol.bind(context, args, args_grad=grads or None, grad_req=self.grad_req,
                                aux_states=aux, group2ctx=self.group2ctxs[i])

    def _sliced_descs(self, descs, axes, i):
        part = self.slices[i]
        sliced = []
        for desc, axis in zip(descs, axes):
            shape = list(desc.shape)
            if axis >= 0:
                shape[axis] = part.stop - part.start
            sliced.append(DataDesc(desc.name, tuple(shape), getattr(desc, 'dtype', np.float32),
                                   getattr(desc, 'layout', 'NCHW')))
        return sliced

    def _infer(self, inputs):
        shapes = {desc.name: tuple(desc.shape) for desc in inputs}
        types = {desc.name: desc.dtype for desc in inputs}
        arg_shapes, _, aux_shapes = self.symbol.infer_shape(**shapes)
        if arg_shapes is None:
            raise EmberError(f'cannot bind {self.symbol.list_outputs()}: the shapes of some '
                             f'arguments do not follow from the inputs {shapes}; give the '
                             f'missing inputs in data_shapes or label_shapes')
        arg_types, _, aux_types = self.symbol.infer_type(**types)
        if arg_types is None:
            raise EmberError(f'cannot bind {self.symbol.list_outputs()}: the dtypes of some '
                             f'arguments do not follow from the inputs {types}')
        return arg_shapes, arg_types, aux_shapes, aux_types

    def _argument(self, name, shape, dtype, context, shared_exec):
        if shared_exec is not None and name in self.param_names:
            if name not in shared_exec.arg_dict:
                raise EmberError(f'parameter {name!r} is not in the shared module (it has '
                                 f'{sorted(shared_exec.arg_dict)}); modules that share '
                                 f'parameters need the same ones')
            array = shared_exec.arg_dict[name]
            _check_shared(name, array, shape)
            return array
        return nd.zeros(shape, ctx=context, dtype=dtype)

    def _gradient(self, name, argument, shared_exec):
        if shared_exec is not None and name in self.param_names:
            grad = shared_exec.grad_dict.get(name)
            if grad is not None:
                return grad
        return nd.zeros(argument.shape, ctx=argument.context, dtype=argument.dtype)

    def _auxiliary(self, name, shape, dtype, context, shared_exec):
        if shared_exec is not None:
            if name not in shared_exec.aux_dict:
                raise EmberError(f'auxiliary state {name!r} is not in the shared module (it '
                                 f'has {sorted(shared_exec.aux_dict)})')
            array = shared_exec.aux_dict[name]
            _check_shared(name, array, shape)
            return array
        return nd.zeros(shape, ctx=context, dtype=dtype)

    def _collect_arrays(self):
        execs = self.execs
        self.data_arrays = [[(part, e.arg_dict[name]) for part, e in zip(self.slices, execs)]
                            for name in self.data_names]
        self.label_arrays = ([[(part, e.arg_dict[name]) for part, e in zip(self.slices, execs)]
                              for name in self.label_names] if self.label_shapes else None)
        self.state_arrays = [[e.arg_dict[name] for e in execs] for name in self.state_names]
        self.param_arrays = [[e.arg_dict[name] for e in execs] for name in self.param_names]
        self.grad_arrays = [[e.grad_dict.get(name) for e in execs] if self.for_training
                            else [None] * len(execs) for name in self.param_names]
        self.aux_arrays = [[e.aux_dict[name] for e in execs] for name in self.aux_names]
        self.input_grad_arrays = ([[e.grad_dict[name] for e in execs]
                                   for name in self.data_names]
                                  if self.inputs_need_grad else None)

    # ------------------------------------------------------------------------------------------
    # Parameters

    def set_params(self, arg_params, aux_params, allow_extra=False):
        """Copy `arg_params` and `aux_params` (dicts of name -> NDArray) to every device."""
        for executor in self.execs:
            executor.copy_params_from(arg_params, aux_params, allow_extra_params=allow_extra)

    def get_params(self, arg_params, aux_params):
        """Write the average over devices of each parameter into `arg_params`/`aux_params`."""
        for names, blocks, target in ((self.param_names, self.param_arrays, arg_params),
                                      (self.aux_names, self.aux_arrays, aux_params)):
            for name, block in zip(names, blocks):
                average = _device_average(block)
                average.astype(target[name].dtype).copyto(target[name])

    # ------------------------------------------------------------------------------------------
    # Running

    def forward(self, data_batch, is_train=None):
        """Load the batch into each device's slice and run forward."""
        load_general(data_batch.data, self.data_arrays, self.data_layouts)
        if is_train is None:
            is_train = self.for_training
        if self.label_arrays is not None and data_batch.label:
            load_general(data_batch.label, self.label_arrays, self.label_layouts)
        for executor in self.execs:
            executor.forward(is_train=is_train)

    def backward(self, out_grads=None):
        """Backward on each device, with its slice of `out_grads` (None for loss outputs)."""
        if not self.for_training:
            raise EmberError('backward needs executors bound with for_training=True')
        out_grads = list(out_grads or [])
        for executor, part, context in zip(self.execs, self.slices, self.contexts):
            sliced = [_slice_of(grad, part, axis).as_in_context(context)
                      for grad, axis in zip(out_grads, self.output_layouts)]
            executor.backward(out_grads=sliced or None)

    def get_outputs(self, merge_multi_context=True, begin=0, end=None):
        """Outputs `begin`..`end`: merged over devices, or one list per output of per-device
        arrays."""
        end = len(self.output_names) if end is None else end
        outputs = [[executor.outputs[i] for executor in self.execs] for i in range(begin, end)]
        if merge_multi_context:
            return _merge_multi_context(outputs, self.output_layouts[begin:end])
        return outputs

    def get_output_shapes(self):
        """[(name, shape)] of the outputs for the whole batch."""
        inputs = self.data_shapes + (self.label_shapes or [])
        _, out_shapes, _ = self.symbol.infer_shape(**{d.name: tuple(d.shape) for d in inputs})
        return list(zip(self.output_names, out_shapes))

    def get_input_grads(self, merge_multi_context=True):
        """Gradients of the data inputs (bound with ``inputs_need_grad``)."""
        if not self.inputs_need_grad:
            raise EmberError('input gradients need a module bound with inputs_need_grad=True')
        if merge_multi_context:
            return _merge_multi_context(self.input_grad_arrays, self.data_layouts)
        return self.input_grad_arrays

    def get_states(self, merge_multi_context=True):
        """The state inputs (``state_names``) of each device."""
        if merge_multi_context:
            return _merge_multi_context(self.state_arrays, [0] * len(self.state_arrays))
        return self.state_arrays

    def set_states(self, states=None, value=None):
        """Set the state inputs from arrays (`states`, one list per state of per-device arrays)
        or to the number `value`."""
        if (states is None) == (value is None):
            raise ValueError('set_states: give exactly one of states and value')
        if states is not None:
            for sources, targets in zip(states, self.state_arrays):
                for source, target in zip(sources, targets):
                    source.copyto(target)
            return
        for targets in self.state_arrays:
            for target in targets:
                target[:] = value

    def update_metric(self, eval_metric, labels, pre_sliced=False):
        """Update `eval_metric` with each device's outputs and its slice of `labels`."""
        for i, (executor, part) in enumerate(zip(self.execs, self.slices)):
            if pre_sliced:
                sliced = labels[i]
            else:
                axes = self.label_layouts or [0] * len(labels)
                sliced = [_slice_of(label, part, axis) for label, axis in zip(labels, axes)]
            eval_metric.update_dict(OrderedDict(zip(self.label_names, sliced)),
                                    OrderedDict(zip(self.output_names, executor.outputs)))

    def install_monitor(self, monitor):
        """Let `monitor` watch every executor (``monitor.install(executor)``)."""
        for executor in self.execs:
            monitor.install(executor)


def _shapes(descs):
    return [tuple(desc.shape) for desc in descs or []]


def _device_average(block):
    total = block[0].copyto(cpu())
    for array in block[1:]:
        total += array.copyto(cpu())
    return total / len(block) if len(block) > 1 else total


def _check_shared(name, array, shape):
    if tuple(array.shape) != tuple(shape):
        raise EmberError(f'shared parameter {name!r} has shape {array.shape}, but this binding '
                         f'needs {tuple(shape)}; a shared module must have the same parameters')


def _per_device_groups(group2ctxs, num_devices):
    """MXNet's group2ctxs (a dict of group -> context or list of contexts, or a list of such
    dicts) as one ``group2ctx`` dict (or None) per device."""
    if group2ctxs is None:
        return [None] * num_devices
    if isinstance(group2ctxs, (list, tuple)):
        if len(group2ctxs) != num_devices:
            raise ValueError(f'group2ctxs has {len(group2ctxs)} entries for {num_devices} '
                             f'contexts; give one dict per context')
        return list(group2ctxs)
    per_device = [{} for _ in range(num_devices)]
    for group, contexts in group2ctxs.items():
        contexts = contexts if isinstance(contexts, (list, tuple)) else [contexts] * num_devices
        if len(contexts) != num_devices:
            raise ValueError(f'group2ctxs[{group!r}] has {len(contexts)} contexts for '
                             f'{num_devices} devices')
        for i, context in enumerate(contexts):
            per_device[i][group] = context
    return per_device
