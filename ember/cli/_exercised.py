"""Which of Ember's objects the tests use: the evidence behind ``ember api-coverage``.

A name works when a test uses it. The tests' sources are read, not run: every dotted name
rooted at an import of Ember (``mx.gluon.contrib.nn.Concurrent``, ``from ember.test_utils import
retry``, ``nn = mx.gluon.nn`` then ``nn.Dense``) is resolved to the object it names. Doctest
examples in Ember's docstrings and in ``docs/*.md`` count (the suite runs them), and so do the
examples under ``examples/``, where ``mxnet`` is Ember. A table-driven test that reaches its
functions by name says which it runs in a module-level ``EXERCISED_API``: a list of objects or
dotted names.
"""
from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import sys
import types
from pathlib import Path

ROOTS = {'ember': 'ember', 'mxnet': 'ember'}
HOOK = 'EXERCISED_API'


class _References(ast.NodeVisitor):
    """Dotted names used in one source, with import aliases resolved to Ember's names."""

    def __init__(self, aliases=None):
        self.aliases = dict(aliases or {})
        self.found = set()

    def visit_Import(self, node):
        for alias in node.names:
            root = alias.name.split('.')[0]
            if root in ROOTS:
                if alias.asname:
                    self.aliases[alias.asname] = _ember_name(alias.name)
                else:
                    self.aliases[root] = ROOTS[root]
                self.found.add(_ember_name(alias.name))

    def visit_ImportFrom(self, node):
        if node.level or not node.module or node.module.split('.')[0] not in ROOTS:
            return
        module = _ember_name(node.module)
        for alias in node.names:
            if alias.name != '*':
                self.aliases[alias.asname or alias.name] = f'{module}.{alias.name}'
                self.found.add(f'{module}.{alias.name}')

    def visit_Assign(self, node):
        self.generic_visit(node)
        target = self.dotted(node.value)
        if target and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            self.aliases[node.targets[0].id] = target

    def visit_Attribute(self, node):
        name = self.dotted(node)
        if name:
            self.found.add(name)
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in self.aliases:
            self.found.add(self.aliases[node.id])

    def dotted(self, node):
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return '.'.join([self.aliases[node.id]] + parts[::-1])


def _ember_name(dotted: str) -> str:
    root, _, rest = dotted.partition('.')
    return ROOTS[root] + ('.' + rest if rest else '')


def references_in(source: str, aliases=None) -> set:
    """The Ember names that `source` uses.

    >>> sorted(references_in('import ember as mx\\nnn = mx.gluon.nn\\nnn.Dense(2)'))
    ['ember', 'ember.gluon', 'ember.gluon.nn', 'ember.gluon.nn.Dense']
    """
    visitor = _References(aliases)
    try:
        visitor.visit(ast.parse(source))
    except SyntaxError:
        return set()
    return visitor.found


def docstring_references(path: Path, module_name: str) -> set:
    """Names used by the doctest examples of one Ember source file; a bare name there is the
    module's own global."""
    try:
        tree = ast.parse(path.read_text())
    except SyntaxError:
        return set()
    aliases = {node.name: f'{module_name}.{node.name}' for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    found = set()
    parser = doctest.DocTestParser()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=True)
            if text and '>>>' in text:
                code = '\n'.join(example.source for example in parser.get_examples(text))
                found |= references_in(code, aliases)
    return found


def _doctest_code(text: str) -> str:
    return '\n'.join(example.source for example in doctest.DocTestParser().get_examples(text))


def module_name_of(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root.parent).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def hooked_names(path: Path) -> list:
    """`EXERCISED_API` of a test module that defines one (the module is imported for it)."""
    tree = ast.parse(path.read_text())
    if not any(isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == HOOK for t in node.targets) for node in tree.body):
        return []
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    module = sys.modules.get(path.stem)
    if module is None or getattr(module, '__file__', None) != str(path):
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
    return list(getattr(module, HOOK))


PACKAGE = Path(__file__).resolve().parents[1]


def in_this_package(dotted: str) -> bool:
    """Whether `dotted` (and each package above it) is a module of this copy of Ember: an
    editable install of another checkout can make ``ember.x`` importable from elsewhere."""
    parts = dotted.split('.')
    for cut in range(2, len(parts) + 1):
        try:
            spec = importlib.util.find_spec('.'.join(parts[:cut]))
        except (ImportError, ValueError):
            return True         # let the import say what is wrong (or a module made in code)
        if spec is None:
            return True
        origin = spec.origin or next(iter(spec.submodule_search_locations or []), '')
        if origin and not Path(origin).resolve().is_relative_to(PACKAGE):
            return False
    return True


def resolve(dotted: str):
    """The object a dotted name of Ember names, or None. Attributes first: a facade module
    such as ``ember.nd`` forwards every name (``__path__`` too) to its package, and importing
    ``ember.nd.random`` would load a second copy of ``ember.ndarray.random``."""
    parts = dotted.split('.')
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        return None
    for index, part in enumerate(parts[1:], 2):
        try:
            obj = getattr(obj, part)
            continue
        except Exception:   # noqa: BLE001 - a submodule not imported yet, or no such name
            pass
        prefix = '.'.join(parts[:index])
        if not (isinstance(obj, types.ModuleType) and '__path__' in vars(obj)
                and in_this_package(prefix)):
            return None
        try:
            obj = importlib.import_module(prefix)
        except Exception:   # noqa: BLE001 - a broken module is reported where it is measured
            return None
    return obj


class Exercised:
    """The objects that the tests, doctests and examples of a repository use."""

    def __init__(self, repo: Path):
        self.repo = repo
        self.objects = {}
        names = set()
        for path in sorted((repo / 'tests').rglob('*.py')):
            names |= references_in(path.read_text())
            self.objects.update((id(obj), obj) for obj in self._hook_objects(path))
        for path in sorted((repo / 'examples').glob('*.py')):
            names |= references_in(path.read_text())
        for path in sorted((repo / 'docs').glob('*.md')):      # tests run their examples
            names |= references_in(_doctest_code(path.read_text()))
        package = repo / 'ember'
        for path in sorted(package.rglob('*.py')):
            names |= docstring_references(path, module_name_of(path, package))
        for name in sorted(names):
            obj = resolve(name)
            if obj is not None:
                self.objects[id(obj)] = obj

    def _hook_objects(self, path):
        for item in hooked_names(path):
            obj = resolve(item) if isinstance(item, str) else item
            if obj is not None:
                yield obj

    def __contains__(self, obj) -> bool:
        return id(obj) in self.objects
