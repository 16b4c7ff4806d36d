"""NEURON_DUMP_HLO_SNAPSHOT around an executor's runs (files: :mod:`ember.compiler.snapshot`).

``1``                    every execution: inputs copied to host memory before it runs, then
                         inputs and outputs written to a snapshot
``ON_NRT_ERROR``         inputs copied on the device before each run; a snapshot only of an
                         execution that fails or gives a NaN or an infinity
``ON_NRT_ERROR_CPU``     the same with the inputs copied to host memory
``ON_NRT_ERROR_HYBRID``  the same with both copies

With NEURON_NC0_ONLY_SNAPSHOT only executions on device 0 are watched, and only in a process
whose NEURON_RT_VISIBLE_CORES (as ``python -m ember launch`` gives each rank) include core 0. A watched execution
waits for its outputs (so that its failure or its values are known before it returns): turn
snapshots on to debug, not to train fast. Snapshots go into the working directory as
``ember_snapshot_<graph>_<digest>_<pid>_<n>_<forward|backward>.npz``.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os

import numpy as np

from ember import config, cores
from ember.compiler import debug, snapshot

__all__ = ['watch']

_log = logging.getLogger('ember.compiler')
_numbers = itertools.count()
_HOST = ('1', 'ON_NRT_ERROR_CPU', 'ON_NRT_ERROR_HYBRID')
_DEVICE = ('ON_NRT_ERROR', 'ON_NRT_ERROR_HYBRID')


def watch(executor, compiled, part, is_train):
    """A context around one run of `compiled` (`part` 'forward' or 'backward')."""
    mode = config.get('NEURON_DUMP_HLO_SNAPSHOT')
    if mode == '0' or (config.get('NEURON_NC0_ONLY_SNAPSHOT') and not _on_core_zero(executor)):
        return contextlib.nullcontext()
    return _watched(executor, compiled, part, is_train, mode)


def _on_core_zero(executor) -> bool:
    """Device 0, in a process whose cores (NEURON_RT_VISIBLE_CORES, which `ember launch`
    gives each rank) include core 0: one rank of a distributed run, one device of it."""
    held = cores.held()
    return executor._ctx.device_id == 0 and (not held or 0 in held)


@contextlib.contextmanager
def _watched(executor, compiled, part, is_train, mode):
    inputs = _inputs(executor, compiled, part)
    host = {n: a.asnumpy() for n, a in inputs.items()} if mode in _HOST else None
    kept = {n: a.copy() for n, a in inputs.items()} if mode in _DEVICE else None
    error, values = None, {}
    try:
        yield
        values = {n: a.asnumpy() for n, a in _outputs(executor, compiled, part).items()}
    except Exception as exc:  # noqa: BLE001 - written down, then raised again
        error = exc
    if mode == '1' or error is not None or not all(_finite(v) for v in values.values()):
        device = {n: a.asnumpy() for n, a in kept.items()} if kept is not None else {}
        _write(executor, compiled, part, is_train, host if host is not None else device,
               values, device if mode == 'ON_NRT_ERROR_HYBRID' else {}, error)
    if error is not None:
        raise error


def _inputs(executor, compiled, part):
    arrays = {**executor.arg_dict, **executor.aux_dict}
    if part == 'backward':
        arrays.update({f'out_grad[{i}]': a for i, a in compiled.head_grads.items()})
    return arrays


def _outputs(executor, compiled, part):
    if part == 'forward':
        return dict(zip(executor._symbol.list_outputs(), compiled.outputs))
    return {name: grad for name, grad in executor.grad_dict.items() if grad is not None}


def _finite(value):
    return value.dtype.kind not in 'fV' or bool(np.isfinite(value.astype(np.float64)).all())


def _write(executor, compiled, part, is_train, inputs, outputs, device_inputs, error):
    digest = compiled.digest or '0' * 12
    name = (f'{debug.file_prefix(executor._name, digest).replace("ember_", "ember_snapshot_", 1)}'
            f'_{os.getpid()}_{next(_numbers)}_{part}.npz')
    meta = {'graph': executor._symbol.tojson(), 'part': part, 'is_train': is_train,
            'grad_req': executor._grad_req, 'device': str(executor._ctx),
            'flags': list(config.get('NEURON_CC_FLAGS').words), 'digest': compiled.digest,
            'name': executor._name,
            'error': None if error is None else f'{type(error).__name__}: {error}'}
    snapshot.write(name, meta, inputs, outputs, device_inputs)
    (_log.info if error is None else _log.warning)('NEURON_DUMP_HLO_SNAPSHOT: wrote %s%s', name,
                 '' if error is None else f' (the execution failed: {error})')
