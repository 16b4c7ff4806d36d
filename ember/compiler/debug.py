"""NEURON_FRAMEWORK_DEBUG: each graph the compiler compiles or loads, written into the
working directory as five files named ``ember_<graph>_<digest>``:

``.json``            the compiled graph in MXNet's JSON format (``mx.sym.load`` reads it)
``.txt``             the same graph as text, one node per line with its shapes and dtypes
``.memory.txt``      the memory plan: the arena, each buffer's offset and size, its entries
``.algorithms.json`` the algorithm chosen for each measured convolution problem
``.flags.json``      NEURON_CC_FLAGS as given and canonical, and the parts of the cache key

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.executor import pipeline
>>> g = pipeline.compile_graph(sym.relu(sym.var('x'), name='r').to_graph(), {'x': (2,)},
...                            {'x': np.float32})
>>> print(graph_text(g))
%0 = x -> (2,) float32
%1 = relu(%0) name=r -> (2,) float32
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path

from ember.passes.plan_memory import EXTERNAL
from ember.symbol import json_io

__all__ = ['dump', 'graph_text', 'memory_text', 'file_prefix']

_log = logging.getLogger('ember.compiler')


def file_prefix(name: str, digest: str) -> str:
    """``ember_<graph name as a file name>_<first 12 digits of the digest>``."""
    safe = re.sub(r'[^A-Za-z0-9_.-]+', '_', name)[:60] or 'graph'
    return f'ember_{safe}_{digest[:12]}'


def dump(graph, key, choices, flags, directory='.') -> list:
    """Write the five files of compiled `graph` (its :class:`CacheKey` `key`, measured
    `choices` in ``Choices.export`` form, `flags` the CompilerFlags) into `directory`;
    returns their paths."""
    prefix = Path(directory) / file_prefix(key.info.get('name', ''), key.digest)
    texts = {
        '.json': _graph_json(graph),
        '.txt': graph_text(graph) + '\n',
        '.memory.txt': memory_text(graph) + '\n',
        '.algorithms.json': json.dumps([{'problem': _readable(k), 'algorithm': name}
                                        for k, name in choices], indent=2),
        '.flags.json': json.dumps({'NEURON_CC_FLAGS': list(flags.words),
                                   'canonical': flags.key_text(), 'digest': key.digest,
                                   'key': key.parts}, indent=2, default=str),
    }
    paths = []
    for suffix, text in texts.items():
        path = prefix.with_name(prefix.name + suffix)
        path.write_text(text)
        paths.append(path)
    _log.info('NEURON_FRAMEWORK_DEBUG: wrote %s.*', prefix)
    return paths


def _graph_json(graph) -> str:
    try:
        return json_io.dumps(graph.replace(attrs={}))
    except Exception as exc:  # noqa: BLE001 - a dump must not fail the compilation
        return json.dumps({'error': f'not representable as MXNet JSON: {exc}'})


def graph_text(graph) -> str:
    """One line per node: ``%i = op(%inputs) attributes -> shapes dtypes``."""
    shapes, dtypes = graph.attrs.get('shape'), graph.attrs.get('dtype')
    lines = []
    for position, node in enumerate(graph.nodes):
        outs = range(graph.node_row_ptr[position], graph.node_row_ptr[position + 1])
        described = ', '.join(_entry_text(shapes, dtypes, eid) for eid in outs)
        if node.op is None:
            lines.append(f'%{position} = {node.name} -> {described}')
            continue
        inputs = ', '.join(f'%{e.node}' + (f'.{e.index}' if e.index else '')
                           for e in node.inputs)
        attrs = ' '.join(f'{k}={v}' for k, v in sorted(node.attr_text.items()))
        lines.append(f'%{position} = {node.op.name}({inputs}) name={node.name}'
                     + (f' {attrs}' if attrs else '') + f' -> {described}')
    return '\n'.join(lines)


def _entry_text(shapes, dtypes, eid):
    shape = tuple(shapes[eid]) if shapes is not None else '?'
    dtype = getattr(dtypes[eid], 'name', dtypes[eid]) if dtypes is not None else '?'
    return f'{shape} {dtype}'


def memory_text(graph) -> str:
    """The memory plan: the arena's size, then per buffer its offset, size and entries."""
    plan = graph.attrs.get('memory_plan')
    if plan is None:
        return 'no memory plan'
    names = [name for node in graph.nodes for name in node.output_names()]
    lines = [f'arena {plan.planned_bytes} bytes (every entry apart: {plan.entry_bytes}), '
             f'match range {plan.match_range}, colours {plan.colours}']
    users = {}
    for eid, sid in enumerate(plan.storage):
        users.setdefault(sid, []).append(names[eid] if eid < len(names) else str(eid))
    for sid, (offset, size) in enumerate(zip(plan.offsets, plan.sizes)):
        lines.append(f'buffer {sid}: offset {offset}, {size} bytes: '
                     + ', '.join(users.get(sid, [])))
    lines.append('outside the arena: ' + ', '.join(users.get(EXTERNAL, [])))
    return '\n'.join(lines)


def _readable(plain_key):
    """A choice's key (``Choices.export`` form) as nested lists and dicts of its fields."""
    if isinstance(plain_key, list) and plain_key and plain_key[0] == 'tuple':
        return [_readable(v) for v in plain_key[1]]
    if isinstance(plain_key, list) and plain_key and plain_key[0] in ('dataclass', 'enum'):
        content = plain_key[3]
        if isinstance(content, dict):
            return {k: _readable(v) for k, v in content.items()}
        return content
    return plain_key
