"""What a compiled graph is keyed by: the parts of its cache key, and which part differs.

A key has seven parts: the canonical `graph` (operators, attributes as text, inputs, outputs,
names), the `signature` (input shapes and dtypes, which arguments get gradients, training or
inference, the kind of device), the `flags` (``CompilerFlags.key_text``: order, spacing and
repeated defaults of NEURON_CC_FLAGS do not change it), the `config` variables that change
what the passes produce, Ember's `version` (with a digest of the compiler's own code), the
kernel `providers` (oneDNN, the compiled kernels' instruction set, NumPy) and the `machine`
(CPU model and features, cores, GPU model). The digest of all seven names the entry; an entry
made on another machine or by another Ember has another digest, so it is never used
silently, and :func:`differences` says which parts two keys disagree on.

>>> from ember import symbol as sym
>>> import numpy as np
>>> g = sym.relu(sym.var('x')).to_graph()
>>> a = CacheKey.of(g, signature_parts({'x': (2,)}, {'x': np.float32}, {}, False, None))
>>> b = CacheKey.of(g, signature_parts({'x': (3,)}, {'x': np.float32}, {}, False, None))
>>> a.digest == b.digest, differences(a.parts, b.parts)
(False, ['signature'])
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ember import config

__all__ = ['CacheKey', 'graph_parts', 'signature_parts', 'differences', 'ARTEFACT_FORMAT',
           'PARTS']

# Bump when the artefact's layout changes: older entries then simply miss.
ARTEFACT_FORMAT = 1
PARTS = ('graph', 'signature', 'flags', 'config', 'version', 'providers', 'machine')

# CPU features that decide which kernels run (and so what measurement chose)
_CPU_FEATURES = ('sse4_1', 'avx', 'avx2', 'fma', 'f16c', 'avx512f', 'avx512bw', 'avx512vl',
                 'avx512_vnni', 'avx512_bf16', 'avx512_fp16', 'amx_tile', 'amx_bf16')


@dataclass(frozen=True)
class CacheKey:
    """The parts of a key (part name -> a JSON value) and their digest."""
    parts: dict
    digest: str
    info: dict          # what helps a person read the entry (name, node count): not keyed

    @classmethod
    def of(cls, graph, signature: dict, name: str = '') -> 'CacheKey':
        """The key of compiling `graph` (the traced, unoptimised graph) for `signature`
        (:func:`signature_parts`) under the configuration of now."""
        text, shape_digest = graph_parts(graph)
        parts = {'graph': _digest(text), 'signature': _digest(_canonical(signature)),
                 'flags': config.get('NEURON_CC_FLAGS').key_text(),
                 'config': _config_part(), 'version': _version_part(),
                 'providers': _providers(),
                 'machine': _machine(signature.get('device') == 'gpu')}
        info = {'name': name, 'nodes': len(graph.nodes), 'structure': shape_digest,
                'signature': signature}
        return cls(parts, _digest(_canonical(parts)), info)


def graph_parts(graph) -> tuple:
    """(canonical text of `graph`, digest of its structure without names)."""
    # attribute dictionaries as they are: the canonical JSON sorts their keys
    nodes = [[node.op.name if node.op is not None else 'null', node.name, node.attr_text,
              [[e.node, e.index] for e in node.inputs]] for node in graph.nodes]
    outputs = [[e.node, e.index] for e in graph.outputs]
    text = _canonical([nodes, outputs])
    unnamed = [[n[0], n[2] if n[0] != 'null' else [], n[3]] for n in nodes]
    return text, _digest(_canonical([unnamed, outputs]))


def signature_parts(shapes, dtypes, grad_req, is_train, device) -> dict:
    """What, besides the graph, a compilation is for: per input its shape and dtype, the
    gradient requests, training or not, and the kind of device (not its number)."""
    return {'shapes': {n: list(s) for n, s in sorted(shapes.items())},
            'dtypes': {n: np.dtype(d).name for n, d in sorted(dtypes.items())},
            'grad_req': dict(sorted(grad_req.items())), 'is_train': bool(is_train),
            'device': 'cpu' if device is None else device.device_type}


def differences(parts: dict, other: dict) -> list:
    """The names of the parts (in :data:`PARTS` order) on which two keys differ."""
    return [name for name in PARTS if parts.get(name) != other.get(name)]


# ----------------------------------------------------------------------------------------------

def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(',', ':'), default=str)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _config_part() -> dict:
    values = config.cache_key_values()
    values.pop('NEURON_CC_FLAGS', None)     # the flags part has the canonical form
    return {name: repr(value) for name, value in values.items()}


@functools.cache
def _version_part() -> dict:
    return {'ember': _ember_version(), 'format': ARTEFACT_FORMAT, 'code': _code_digest()}


def _ember_version() -> str:
    from importlib import metadata
    try:
        return metadata.version('ember')
    except metadata.PackageNotFoundError:
        return 'unknown'


def _code_digest() -> str:
    """A digest of the code that shapes a compiled graph (the passes, the pipeline, the
    compiler, the algorithm records): a changed Ember misses even at the same version."""
    root = Path(__file__).resolve().parents[1]
    files = sorted([*root.glob('passes/*.py'), *root.glob('compiler/*.py'),
                    root / 'executor' / 'pipeline.py', root / 'op' / 'nn' / 'conv' /
                    'algorithms.py', root / 'op' / 'precision.py'])
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _providers() -> dict:
    from ember.backend import native
    from ember.op.nn.conv import compiled
    build = getattr(compiled.MODULE, 'instruction_set', None)
    return {'onednn': native.dnnl_version() if config.get('MXNET_MKLDNN_ENABLED') else None,
            'compiled': None if build is None else build(),
            'numpy': np.__version__, 'isa_cap': config.get('ONEDNN_MAX_CPU_ISA')}


@functools.cache
def _machine(with_gpus: bool) -> dict:
    """The CPU (model, features, cores) and, for a graph on a GPU, the GPUs' models (a CPU
    graph does not depend on them: looking would load CuPy for nothing)."""
    model, flags = _cpu_info()
    machine = {'cpu': model, 'features': [f for f in _CPU_FEATURES if f in flags],
               'cores': config.cpu_count(), 'arch': platform.machine()}
    if with_gpus:
        from ember.backend import gpu
        machine['gpus'] = gpu.device_names()
    return machine


def _cpu_info() -> tuple:
    """(the CPU's model name, its feature flags) from /proc/cpuinfo's first processor."""
    model, flags = None, None
    try:
        lines = Path('/proc/cpuinfo').read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        label, _, value = line.partition(':')
        if label.strip() == 'model name' and model is None:
            model = value.strip()
        elif label.strip() == 'flags' and flags is None:
            flags = set(value.split())
    return model or platform.processor() or 'unknown', flags or set()


def host_name() -> str:
    return os.uname().nodename
