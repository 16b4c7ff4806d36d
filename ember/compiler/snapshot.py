"""Snapshot files of NEURON_DUMP_HLO_SNAPSHOT: a graph execution's graph, inputs and outputs,
replayed by ``python -m ember replay FILE``.

A snapshot is one ``.npz`` file: ``__meta__`` (JSON: the symbol's MXNet JSON, forward or
backward, the mode, the gradient requests, the device, the flags, the error if the execution
failed), and arrays ``in/<name>`` (inputs as kept on the host), ``dev/<name>`` (inputs as kept
on the device, ON_NRT_ERROR and ON_NRT_ERROR_HYBRID) and ``out/<name>`` (outputs, or the
gradients of a backward). Arrays NumPy cannot save natively (bfloat16) are saved as float32
and their dtype noted.

>>> import numpy as np, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), 's.npz')
>>> write(path, {'part': 'forward'}, {'x': np.ones(2, np.float32)}, {'y': np.zeros(2)})
>>> shot = read(path)
>>> shot.meta['part'], shot.inputs['x'].tolist(), shot.outputs['y'].tolist()
('forward', [1.0, 1.0], [0.0, 0.0])
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ember.base import dtype_of

__all__ = ['Snapshot', 'write', 'read']

_GROUPS = {'in': 'inputs', 'out': 'outputs', 'dev': 'device_inputs'}


@dataclass(frozen=True)
class Snapshot:
    meta: dict
    inputs: dict
    outputs: dict
    device_inputs: dict


def write(path, meta, inputs, outputs, device_inputs=None) -> None:
    """Save a snapshot: `meta` (JSON-able) and name -> NumPy array per group."""
    arrays, dtypes = {}, {}
    groups = {'in': inputs, 'out': outputs, 'dev': device_inputs or {}}
    for prefix, values in groups.items():
        for name, value in values.items():
            value = np.asarray(value)
            if value.dtype.kind == 'V' or value.dtype.name == 'bfloat16':
                dtypes[f'{prefix}/{name}'] = value.dtype.name
                value = value.astype(np.float32)
            arrays[f'{prefix}/{name}'] = value
    text = json.dumps({**meta, 'saved_dtypes': dtypes}, default=str)
    with open(path, 'wb') as out:
        np.savez(out, __meta__=np.array(text), **arrays)


def read(path) -> Snapshot:
    """A snapshot from its file."""
    with np.load(path, allow_pickle=False) as data:
        meta = json.loads(str(data['__meta__']))
        groups = {field: {} for field in _GROUPS.values()}
        for key in data.files:
            prefix, _, name = key.partition('/')
            if prefix not in _GROUPS:
                continue
            value = data[key]
            saved = meta.get('saved_dtypes', {}).get(key)
            if saved is not None:
                value = value.astype(dtype_of(saved))
            groups[_GROUPS[prefix]][name] = value
    return Snapshot(meta, groups['inputs'], groups['outputs'], groups['device_inputs'])
