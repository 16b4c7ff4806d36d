"""The record of a graph extracted under NEURON_EXTRACT_GRAPHS_ONLY: everything a worker of
``python -m ember parallel-compile`` needs to compile it in another process.

A record holds the traced graph, the signature it is compiled for (shapes, dtypes, gradient
requests, mode, device kind), the parts of its key (the worker checks that its own
configuration gives the same key) and the files of the Python modules that registered the
Custom operators it calls (the worker imports them first).

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.compiler.key import CacheKey, signature_parts
>>> g = sym.relu(sym.var('x')).to_graph()
>>> key = CacheKey.of(g, signature_parts({'x': (2,)}, {'x': np.float32}, {}, False, None),
...                   'relu')
>>> again = read(record(g, key))
>>> again.name, again.signature['shapes'], again.digest == key.digest
('relu', {'x': [2]}, True)
"""
from __future__ import annotations

import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

from ember.base import EmberError
from ember.compiler import artefact as artefacts

__all__ = ['Record', 'record', 'read', 'import_modules']


@dataclass(frozen=True)
class Record:
    name: str
    digest: str
    parts: dict
    signature: dict
    graph: object
    modules: tuple          # files of the modules that registered the graph's Custom ops


def record(graph, key) -> bytes:
    """The bytes of the record of `graph` under `key` (a :class:`CacheKey`)."""
    entry = Record(key.info.get('name', ''), key.digest, key.parts, key.info['signature'],
                   graph, _custom_modules(graph))
    return artefacts.dumps(entry)


def read(data: bytes) -> Record:
    """A record from its bytes."""
    return artefacts.loads(data, Record)


def _custom_modules(graph) -> tuple:
    from ember.op import custom
    files = []
    for node in graph.nodes:
        if node.op is None or node.op.name != 'Custom':
            continue
        cls = custom.prop_class(node.attrs['op_type'])
        module = sys.modules.get(cls.__module__)
        if cls.__module__ == '__main__' or module is None:
            raise EmberError(f'Custom operator {node.attrs["op_type"]!r} is registered by the '
                             f'script itself: define it in a module the script imports, so '
                             f'that parallel-compile workers can import it too')
        files.append(inspect.getfile(module))
    return tuple(dict.fromkeys(files))


def import_modules(files) -> None:
    """Import the modules (by file) that register a record's Custom operators."""
    for path in files:
        name = Path(path).stem
        if name in sys.modules:
            continue
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
