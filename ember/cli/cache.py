"""Inspect and manage the compile cache: ls, explain, prune, clear.

    python -m ember cache ls [--json]
    python -m ember cache explain -- python train.py ...
    python -m ember cache prune --size 2G
    python -m ember cache clear

The cache is the one NEURON_CC_FLAGS (--cache_dir) and NEURON_COMPILE_CACHE_URL name, or
``--cache-dir``. ``ls`` lists the entries (graph, kind, size, age, loads); ``explain`` runs a
script with NEURON_EXTRACT_GRAPHS_ONLY (nothing is compiled, graphs return zeros) and, for each
graph it would compile that the cache lacks, says which parts of its key differ from the
nearest entry; ``prune`` evicts the least recently used entries down to a size; ``clear``
removes everything.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time

__all__ = ['add_arguments', 'run', 'explain_record']


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--cache-dir', help='the cache folder (default: from NEURON_CC_FLAGS '
                                            'and NEURON_COMPILE_CACHE_URL)')
    actions = parser.add_subparsers(dest='action', metavar='ACTION', required=True)
    listing = actions.add_parser('ls', help='list the entries')
    listing.add_argument('--json', action='store_true', help='one JSON object per entry')
    explain = actions.add_parser('explain', help="say why a script's graphs miss the cache")
    explain.add_argument('command', nargs=argparse.REMAINDER,
                         help='the script to run, after --')
    prune = actions.add_parser('prune', help='evict least recently used entries')
    prune.add_argument('--size', required=True, help='what may stay, e.g. 500M or 2G')
    actions.add_parser('clear', help='remove every entry')


def run(args) -> int:
    from ember import config
    from ember.executor import compile as compiling
    flags = config.get('NEURON_CC_FLAGS')
    root = args.cache_dir or compiling.cache_root(flags)
    store = compiling.Store(root)
    return {'ls': _ls, 'explain': _explain, 'prune': _prune, 'clear': _clear}[args.action](
        store, args)


def _ls(store, args) -> int:
    infos = sorted(store.entries(), key=lambda info: -info.last_used)
    if args.json:
        for info in infos:
            print(json.dumps({'digest': info.digest, 'kind': info.kind, 'size': info.size,
                              'created': info.created, 'last_used': info.last_used,
                              'hits': info.hits, 'name': _name(info)}))
        return 0
    print(f'{store.root}: {len(infos)} entries, {_size(sum(i.size for i in infos))}')
    if infos:
        print(f'{"entry":12}  {"kind":9}  {"size":>8}  {"age":>6}  {"used":>6}  {"loads":>5}  '
              f'graph')
    now = time.time()
    for info in infos:
        print(f'{info.digest[:12]}  {info.kind or "untrusted":9}  {_size(info.size):>8}  '
              f'{_age(now - info.created):>6}  {_age(now - info.last_used):>6}  '
              f'{info.hits:>5}  {_name(info)}')
    return 0


def _prune(store, args) -> int:
    from ember import config
    try:
        limit = config.parse_size(args.size)
    except ValueError as exc:
        print(f'ember cache prune: --size {args.size!r}: expected {exc}', file=sys.stderr)
        return 2
    before = store.total_bytes()
    removed = store.prune(limit)
    print(f'removed {len(removed)} entries: {_size(before)} -> {_size(store.total_bytes())}')
    return 0


def _clear(store, args) -> int:
    print(f'removed {store.clear()} entries from {store.root}')
    return 0


def _explain(store, args) -> int:
    from ember import config
    from ember.compiler import extract
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        print('ember cache explain: give the command after --, e.g. '
              '`ember cache explain -- python train.py`', file=sys.stderr)
        return 2
    before = set(store.pending())
    env = config.child_environ(NEURON_EXTRACT_GRAPHS_ONLY='1',
                               NEURON_CC_FLAGS=_with_cache_dir(store.root))
    child = subprocess.run(command, env=env)
    found = [path for path in store.pending() if path not in before]
    if child.returncode != 0:
        print(f'ember cache explain: {shlex.join(command)} exited with status '
              f'{child.returncode}; explaining the graphs it reached', file=sys.stderr)
    entries = [info for info in store.entries() if info.kind == 'artefact']
    for path in found:
        record = extract.read(path.read_bytes())
        for line in explain_record(record, entries):
            print(line)
        path.unlink(missing_ok=True)       # recorded to be explained, not compiled
    if not found:
        print('every graph the command compiles is in the cache')
    return 0


def _with_cache_dir(root) -> str:
    from ember import config
    words = list(config.get('NEURON_CC_FLAGS').words)
    words = [w for w in words if not w.startswith('--cache_dir')]
    return shlex.join(words + [f'--cache_dir={root}'])


def explain_record(record, entries) -> list:
    """Lines saying how the key of `record` (an extracted graph) differs from the nearest of
    `entries` (``EntryInfo`` of the cache's artefacts)."""
    from ember.compiler.key import PARTS, differences
    head = f'graph {record.name} ({record.digest[:12]}): not in the cache'
    if not entries:
        return [head + '; the cache holds no compiled graph']

    def closeness(info):
        parts = info.meta.get('key', {})
        same_graph = info.meta.get('info', {}).get('structure') == _structure(record)
        return (len(PARTS) - len(differences(parts, record.parts)), same_graph,
                info.last_used)
    nearest = max(entries, key=closeness)
    parts = nearest.meta.get('key', {})
    lines = [head + f'; nearest entry {nearest.digest[:12]} ({_name(nearest)}) differs in:']
    for part in differences(parts, record.parts):
        lines.append(f'  {part}: ' + _part_difference(part, record, nearest))
    return lines


def _structure(record):
    from ember.compiler.key import graph_parts
    return graph_parts(record.graph)[1]


def _part_difference(part, record, nearest) -> str:
    here, there = record.parts.get(part), nearest.meta.get('key', {}).get(part)
    if part == 'graph':
        info = nearest.meta.get('info', {})
        if info.get('structure') == _structure(record):
            return 'the same operators and attributes under other names'
        return (f'other operators or attributes ({len(record.graph.nodes)} nodes here, '
                f'{info.get("nodes", "?")} there)')
    if part == 'signature':
        return _dict_difference(record.signature, nearest.meta.get('info', {}).get(
            'signature', {}))
    if isinstance(here, dict) and isinstance(there, dict):
        return _dict_difference(here, there)
    return f'{here!r} here, {there!r} there'


def _dict_difference(here, there) -> str:
    changed = []
    for name in sorted(set(here) | set(there)):
        a, b = here.get(name), there.get(name)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            changed.append(f'{name} ({_dict_difference(a, b)})')
        else:
            changed.append(f'{name}: {a!r} here, {b!r} there')
    return '; '.join(changed[:6]) + ('; ...' if len(changed) > 6 else '')


def _name(info) -> str:
    return info.meta.get('info', {}).get('name') or '?'


def _size(nbytes) -> str:
    for unit in ('B', 'K', 'M', 'G'):
        if nbytes < 1024 or unit == 'G':
            return f'{nbytes:.0f}{unit}' if unit == 'B' else f'{nbytes:.1f}{unit}'
        nbytes /= 1024
    return str(nbytes)


def _age(seconds) -> str:
    for unit, size in (('d', 86400), ('h', 3600), ('m', 60)):
        if seconds >= size:
            return f'{seconds / size:.0f}{unit}'
    return f'{seconds:.0f}s'
