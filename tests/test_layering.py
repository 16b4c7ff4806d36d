"""Each module imports only layers below it; only config reads the environment; only the backend
touches CuPy and native libraries."""
import ast
import re
from pathlib import Path

import pytest

EMBER = Path(__file__).resolve().parents[1] / 'ember'

# Lowest first: a module may import the layers before its own, and modules of its own package.
LAYERS = ['config',
          'cores',         # NEURON_RT_VISIBLE_CORES: pins the process at import; needs config
          'base',
          'accel',         # shape arithmetic of the hot path (compiled or Python); needs config
          'device', 'backend', 'profiler', 'storage', 'engine', 'resource', 'op', 'ndarray',
          'autograd',
          'initializer',   # mx.init: builds arrays with ndarray and random; gluon uses it
          'symbol', 'passes',
          'compiler',      # cache keys, the disk cache, artefacts, dumps: no executor inside
          'executor',
          'numpy',         # mx.np: NumPy's interface on ndarray, autograd and symbol
          'numpy_dispatch_protocol',   # decorators for NumPy's dispatch to mx.np
          'util',          # mx.util: the NumPy-semantics switches; GPUs and the environment
          'numpy_extension',   # mx.npx: MXNet's operators on mx.np arrays
          'lr_scheduler',  # plain schedules that optimizers hold
          'metric',        # evaluation metrics over arrays (NumPy only)
          'optimizer', 'kvstore',
          'io',            # mx.io iterators and RecordIO; only NDArrays below them
          'image',         # mx.image: NDArray-level decoding, augmenters, ImageIter (an io iter)
          'gluon',
          'callback',      # Module.fit's callbacks; BatchEndParam, re-exported by mx.model
          'module',
          'executor_manager',   # FeedForward-era data parallelism over executors
          'model']         # mx.model: checkpoints (re-exported from module) and BatchEndParam
RANK = {name: rank for rank, name in enumerate(LAYERS)}
# The public surface on top of every layer; it may import anything.
FACADES = {'__init__', '__main__', 'cli', 'context', 'nd', 'sym', 'test_utils', 'random', 'operator',
           'name', 'attribute', 'mod',
           'numpy_op_fallback',   # NumPy computations as custom operators (mx.operator)
           # MXNet's smaller modules (mx.runtime, mx.log, ...), each over the layers it reports on
           'error', 'runtime', 'libinfo', 'log', 'registry', 'misc',
           'rnn',           # mx.rnn: symbolic cells over mx.sym, checkpoints over mx.model
           'monitor', 'visualization', 'contrib'}


# Compiled C modules (setup.py): leaves that import nothing of Ember, so any layer may use them.
COMPILED = {path.stem for path in EMBER.glob('_*.c')}


def is_facade(top: str) -> bool:
    return top in FACADES


def sources():
    return sorted(EMBER.rglob('*.py'))


def dotted_name(path: Path) -> str:
    parts = list(path.relative_to(EMBER.parent).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def top_component(dotted: str) -> str:
    """'ember.op.registry' -> 'op'; 'ember' (the package itself) -> '__init__'."""
    parts = dotted.split('.')
    return parts[1] if len(parts) > 1 else '__init__'


def is_module(dotted: str) -> bool:
    relative = Path(*dotted.split('.')[1:]) if '.' in dotted else Path()
    return (EMBER / relative).with_suffix('.py').exists() or (EMBER / relative).is_dir()


def resolve_from(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module
    package = importer.split('.') if is_package else importer.split('.')[:-1]
    base = package[:len(package) - (node.level - 1)]
    return '.'.join(base + ([node.module] if node.module else []))


def imported_modules(source: str, importer: str, is_package: bool) -> set:
    """Every module that `source` imports, at any depth (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = resolve_from(node, importer, is_package)
            for alias in node.names:
                found.add(_from_target(module, alias.name))
    return found


def _from_target(module: str, name: str) -> str:
    """`from module import name`: the submodule `name` where there is one (or will be: a layer
    name), else `module` itself."""
    candidate = f'{module}.{name}'
    if not candidate.startswith('ember.'):
        return module
    if module == 'ember' and (name in RANK or is_facade(name) or name in COMPILED):
        return candidate
    return candidate if is_module(candidate) else module


def violations(source: str, importer: str, is_package: bool = False) -> list:
    own = top_component(importer)
    if is_facade(own) or own not in RANK:   # unplaced modules fail test_every_module_has_a_layer
        return []
    problems = []
    for target in sorted(imported_modules(source, importer, is_package)):
        if target != 'ember' and not target.startswith('ember.'):
            continue
        other = top_component(target)
        if other == own or other in COMPILED:
            continue
        if is_facade(other):
            problems.append(f'{importer} imports the facade {target}')
        elif other not in RANK:
            problems.append(f'{importer} imports {target}, which has no layer')
        elif RANK[other] >= RANK[own]:
            problems.append(f'{importer} ({own}) imports {target} ({other}), a higher layer')
    return problems


def test_every_module_has_a_layer():
    unplaced = sorted({dotted_name(p) for p in sources()
                       if not is_facade(top_component(dotted_name(p)))
                       and top_component(dotted_name(p)) not in RANK.keys() | COMPILED})
    assert not unplaced, f'give these a layer in tests/test_layering.py: {unplaced}'


def test_modules_import_only_lower_layers():
    problems = []
    for path in sources():
        problems += violations(path.read_text(), dotted_name(path), path.name == '__init__.py')
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('importer, code, bad', [
    ('ember.storage.pool', 'from ember.gluon import nn', True),
    ('ember.storage.pool', 'def f():\n    import ember.engine\n', True),
    ('ember.storage.pool', 'import ember', True),
    ('ember.storage.pool', 'from ember import nd', True),
    ('ember.storage.pool', 'from ember import cpu', True),
    ('ember.gluon.block', 'from ember import autograd, initializer', False),
    ('ember.storage.pool', 'from .. import op', True),
    ('ember.storage.pool', 'from ember import device, config', False),
    ('ember.storage.pool', 'from . import pool\nfrom .pool import x', False),
    ('ember.storage.pool', 'from ..base import EmberError', False),
    ('ember.base', 'from ember.config import ConfigError', False),
    ('ember.config', 'from ember.base import EmberError', True),
    ('ember.cli.env', 'from ember.gluon import nn', False),
])
def test_the_checker_itself(importer, code, bad):
    assert bool(violations(code, importer)) is bad


# ----------------------------------------------------------------------------------------------
# No import cycles inside a layer (the layers themselves are ordered above).

def layer_graph() -> dict:
    """Module -> the modules of its own layer that it imports, at any depth (function-level
    imports count: they only hide a cycle)."""
    graph = {}
    for path in sources():
        importer = dotted_name(path)
        own = top_component(importer)
        targets = imported_modules(path.read_text(), importer, path.name == '__init__.py')
        graph[importer] = {t for t in targets if t.startswith('ember.') and t != importer
                           and top_component(t) == own and is_module(t)}
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected groups of more than one module in `graph`, each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycles_between_modules_of_a_layer():
    graph = layer_graph()
    found = cycles(graph)
    lines = [f'  {module} imports {", ".join(sorted(graph[module] & set(group)))}'
             for group in found for module in group]
    assert not found, 'import cycles; a lower module must not import a higher one:\n' \
        + '\n'.join(lines)


def test_the_cycle_finder_itself():
    assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
    assert cycles({'a': {'b'}, 'b': set(), 'c': {'b'}}) == []
    assert cycles({'pkg': {'pkg.m'}, 'pkg.m': {'pkg'}}) == [['pkg', 'pkg.m']]


# ----------------------------------------------------------------------------------------------
# Environment, CuPy and native libraries.

# mx.util's own getenv/setenv (which ask config) are not environment reads
ENVIRONMENT_READS = re.compile(r'os\.environ|os\.getenv|(?<!def )(?<!util\.)\bgetenv\(|\bputenv\(|'
                               r'from os import .*\b(environ|getenv|putenv)\b')


def test_only_config_reads_the_environment():
    offenders = [f'{p.relative_to(EMBER.parent)}:{n}: {line.strip()}'
                 for p in sources() if p != EMBER / 'config.py'
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if ENVIRONMENT_READS.search(line)]
    assert not offenders, 'read configuration with config.get():\n' + '\n'.join(offenders)


NATIVE_LOADS = re.compile(r'CDLL|cdll\.|LoadLibrary|import_module\([\'"]cupy')


def imports_cupy(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        if any(n.split('.')[0] in ('cupy', 'cupyx') for n in names):
            return True
    return False


def test_only_the_backend_touches_cupy_and_native_libraries():
    offenders = []
    for path in sources():
        if top_component(dotted_name(path)) == 'backend':
            continue
        text = path.read_text()
        if imports_cupy(text) or NATIVE_LOADS.search(text):
            offenders.append(str(path.relative_to(EMBER.parent)))
    assert not offenders, f'move CuPy and native-library code into ember/backend/: {offenders}'


def test_the_cupy_check_sees_nested_imports():
    assert imports_cupy('def f():\n    import cupy as cp\n')
    assert imports_cupy('from cupyx.scipy import ndimage')
    assert not imports_cupy('import numpy as cupy_like')


@pytest.mark.parametrize('line, reads', [
    ("x = os.environ['A']", True), ("os.getenv('A')", True), ('from os import environ', True),
    ('from os import path, getenv', True), ('from os import path', False),
    ("config.get('A')", False),
])
def test_the_environment_check_itself(line, reads):
    assert bool(ENVIRONMENT_READS.search(line)) is reads
