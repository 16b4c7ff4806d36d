"""Measure Ember against MXNet 1.9.1's public Python API, module by module.

The surface comes from ``tests/data/mxnet_1_9_1_api.json`` (written by ``tools/api_surface.py``
in MXNet's environment); names left out on purpose, each with its reason, from
``tests/data/mxnet_api_excluded.txt``. A name of module ``mxnet.X`` is looked up in ``ember.X``
and counts as working when it exists with the same kind and, for a class or function, accepts
MXNet's parameters (the same names, the required ones in the same order) and a test, doctest or
example uses it (``ember/cli/_exercised.py``); a module counts when it imports, a constant when
it has MXNet's value. ``ember api-coverage`` prints the table, ``--markdown`` writes
``docs/api_coverage.md`` and ``--check`` exits with status 1 when that page is stale. It reads
the repository's tests, so it runs from a checkout.
"""
from __future__ import annotations

import argparse
import ast
import fnmatch
import importlib
import inspect
import json
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

from ember.cli._exercised import in_this_package

NAME = 'api-coverage'
REPO = Path(__file__).resolve().parents[2]
SURFACE = REPO / 'tests' / 'data' / 'mxnet_1_9_1_api.json'
EXCLUDED = REPO / 'tests' / 'data' / 'mxnet_api_excluded.txt'
DEFAULT_PAGE = REPO / 'docs' / 'api_coverage.md'
GENERATOR = 'python -m ember api-coverage --markdown'

# What a name can be found to be; only WORKS counts.
WORKS, UNTESTED, DIFFERS, MISSING, EXCLUDED_, NOT_IMPLEMENTED, BROKEN = (
    'works', 'untested', 'differs', 'missing', 'excluded', 'not implemented', 'broken')
STATUSES = (WORKS, UNTESTED, DIFFERS, MISSING, NOT_IMPLEMENTED, BROKEN, EXCLUDED_)


@dataclass(frozen=True)
class Exclusion:
    pattern: str
    reason: str

    def covers(self, dotted: str) -> bool:
        """The pattern matches the name, or a module that contains it."""
        parts = dotted.split('.')
        return any(fnmatch.fnmatchcase('.'.join(parts[:cut]), self.pattern)
                   for cut in range(len(parts), 1, -1))


@dataclass(frozen=True)
class Finding:
    module: str
    name: str
    kind: str
    status: str
    detail: str = ''

    @property
    def dotted(self) -> str:
        return f'{self.module}.{self.name}'


def load_surface(path: Path = SURFACE) -> dict:
    if not path.exists():
        raise FileNotFoundError(f'{path} is missing: ember api-coverage reads the measured '
                                'surface from a checkout of the repository')
    return json.loads(path.read_text())


def load_exclusions(path: Path = EXCLUDED) -> list:
    """``pattern  reason`` per line (fnmatch over dotted names); ``#`` starts a comment."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith('#'):
            continue
        pattern, _, reason = text.partition(' ')
        if not reason.strip():
            raise ValueError(f'{path}:{number}: {pattern!r} has no reason')
        found.append(Exclusion(pattern, reason.strip()))
    return found


# ----------------------------------------------------------------------------------------------
# One module, one name.

def ember_module(mxnet_name: str):
    """Ember's counterpart of an MXNet module: (module or None, error text or '')."""
    dotted = 'ember' + mxnet_name[len('mxnet'):]
    if not in_this_package(dotted):
        return _module_attribute(dotted), ''
    try:
        return importlib.import_module(dotted), ''
    except ModuleNotFoundError as error:
        if error.name and dotted.startswith(error.name):
            return _module_attribute(dotted), ''
        return None, f'{type(error).__name__}: {error}'
    except Exception as error:   # noqa: BLE001 - reported as a broken module
        return None, f'{type(error).__name__}: {error}'


def _module_attribute(dotted: str):
    """A module reachable as an attribute though not importable by its name (``ember.nd``)."""
    parent, _, leaf = dotted.rpartition('.')
    if not in_this_package(parent):
        return None
    try:
        holder = importlib.import_module(parent)
    except Exception:   # noqa: BLE001 - its parent is missing too
        return None
    found = getattr(holder, leaf, None)
    return found if isinstance(found, types.ModuleType) else None


def kind_of(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return 'module'
    if inspect.isclass(obj):
        return 'class'
    if callable(obj):
        return 'function'
    return 'constant'


def signature_problem(expected: list, obj) -> str:
    """What keeps `obj` from taking MXNet's parameters `expected` ('' when it takes them)."""
    if expected == ['*args', '**kwargs']:
        return ''       # MXNet's signature says nothing (a ctypes structure, a builtin's init)
    if expected[:1] == ['handle']:
        return ''       # a constructor over a C handle (Symbol, NDArray): not how users make one
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        parameters = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return ''
    if inspect.isclass(obj) and parameters[:1] and parameters[0].name == 'self':
        parameters = parameters[1:]
    kinds = inspect.Parameter
    named = {p.name for p in parameters if p.kind in (kinds.POSITIONAL_OR_KEYWORD,
                                                       kinds.KEYWORD_ONLY)}
    var_positional = any(p.kind is kinds.VAR_POSITIONAL for p in parameters)
    var_keyword = any(p.kind is kinds.VAR_KEYWORD for p in parameters)
    for entry in expected:
        if entry == '*':
            continue
        if entry.startswith('**'):
            if not var_keyword:
                return f'takes no **{entry[2:]}'
        elif entry.startswith('*'):
            if not var_positional:
                return f'takes no *{entry[1:]}'
        elif entry.rstrip('=') not in named and not var_keyword:
            return f'has no parameter {entry.rstrip("=")!r}'
    return _order_problem(expected, parameters)


def _order_problem(expected: list, parameters: list) -> str:
    """MXNet's required positional parameters come first, in MXNet's order."""
    kinds = inspect.Parameter
    positional = []
    for parameter in parameters:
        if parameter.kind is kinds.VAR_POSITIONAL:
            positional.append(None)     # anything may come here
            break
        if parameter.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD):
            positional.append(parameter.name)
    for index, entry in enumerate(expected):
        if entry.startswith('*') or entry.endswith('='):
            break
        if index >= len(positional) or positional[index] is None:
            return '' if positional[-1:] == [None] else f'takes {entry!r} by keyword only'
        if positional[index] != entry:
            return f'takes {positional[index]!r} where MXNet takes {entry!r}'
    return ''


def raises_not_implemented(obj) -> bool:
    """The function (or a class's ``__init__``) does nothing but raise 'not implemented'."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    except (OSError, TypeError, SyntaxError):
        return False
    function = tree.body[0] if tree.body else None
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = [s for s in function.body if not (isinstance(s, ast.Expr) and
                                            isinstance(s.value, ast.Constant))]
    return bool(body) and all(isinstance(s, ast.Raise) and _says_not_implemented(s)
                              for s in body)


def _says_not_implemented(node: ast.Raise) -> bool:
    text = ast.unparse(node.exc) if node.exc is not None else ''
    return 'NotImplemented' in text or 'not implemented' in text.lower()


class Measure:
    """Findings for every name of the surface."""

    def __init__(self, surface: dict, exclusions: list, exercised):
        self.surface = surface['modules']
        self.version = surface.get('mxnet_version', '?')
        self.exclusions = exclusions
        self.exercised = exercised
        self.findings = []
        self.modules = {}
        for module in sorted(self.surface):
            self.findings += self.measure_module(module)

    def exclusion(self, dotted: str):
        return next((e for e in self.exclusions if e.covers(dotted)), None)

    def measure_module(self, module: str) -> list:
        entries = self.surface[module]['names']
        if self.exclusion(module):
            reason = self.exclusion(module).reason
            return [Finding(module, n, e['kind'], EXCLUDED_, reason) for n, e in entries.items()]
        ours, error = ember_module(module)
        self.modules[module] = ours
        if ours is None:
            status, detail = (BROKEN, error) if error else (MISSING, 'no such module')
            return [Finding(module, n, e['kind'], status, detail) for n, e in entries.items()]
        return [self.measure_name(module, ours, name, entry) for name, entry in entries.items()]

    def measure_name(self, module, ours, name, entry) -> Finding:
        kind = entry['kind']
        excluded = self.exclusion(f'{module}.{name}')
        if excluded:
            return Finding(module, name, kind, EXCLUDED_, excluded.reason)
        if not hasattr(ours, name):
            return Finding(module, name, kind, MISSING)
        status, detail = self.judge(entry, getattr(ours, name))
        return Finding(module, name, kind, status, detail)

    def judge(self, entry: dict, obj) -> tuple:
        kind, found = entry['kind'], kind_of(obj)
        if kind == 'module' or found == 'module':
            return (WORKS, '') if kind == found else (DIFFERS, f'is a {found}, not a {kind}')
        if kind == 'constant':
            return self.judge_constant(entry, obj)
        if kind == 'class' and found != 'class':
            return DIFFERS, f'is a {found}, not a class'
        if found == 'constant':
            return DIFFERS, f'is a constant, not a {kind}'
        if raises_not_implemented(obj):
            return NOT_IMPLEMENTED, 'raises not implemented'
        problem = signature_problem(entry['params'], obj) if 'params' in entry else ''
        if problem:
            return DIFFERS, problem
        return (WORKS, '') if obj in self.exercised else (UNTESTED, 'no test uses it')

    @staticmethod
    def judge_constant(entry: dict, obj) -> tuple:
        if 'value' in entry:
            value = list(obj) if isinstance(obj, tuple) else obj
            if value == entry['value'] or repr(obj) == entry['value']:
                return WORKS, ''
            return DIFFERS, f'is {obj!r}, MXNet has {entry["value"]!r}'
        if type(obj).__name__ != entry.get('type', type(obj).__name__):
            return DIFFERS, f'is a {type(obj).__name__}, MXNet has a {entry["type"]}'
        return WORKS, ''

    # ------------------------------------------------------------------------------------------

    def per_module(self) -> dict:
        """module -> {status: count}."""
        table = {}
        for finding in self.findings:
            counts = table.setdefault(finding.module, dict.fromkeys(STATUSES, 0))
            counts[finding.status] += 1
        return table

    def totals(self) -> dict:
        counts = dict.fromkeys(STATUSES, 0)
        for finding in self.findings:
            counts[finding.status] += 1
        return counts

    def star_gaps(self) -> dict:
        """module -> names that ``from mxnet.X import *`` brings and Ember has, but Ember's
        ``from ember.X import *`` does not bring."""
        gaps = {}
        for module, ours in self.modules.items():
            if ours is None:
                continue
            star = set(star_names(ours))
            lacking = [name for name in self.surface[module]['star']
                       if hasattr(ours, name) and name not in star
                       and not self.exclusion(f'{module}.{name}')]
            if lacking:
                gaps[module] = lacking
        return gaps


def star_names(module) -> list:
    """What ``from module import *`` binds."""
    declared = getattr(module, '__all__', None)
    if declared is not None:
        return list(declared)
    return [name for name in dir(module) if not name.startswith('_')]


def coverage(counts: dict) -> float:
    counted = sum(counts.values()) - counts[EXCLUDED_]
    return 100.0 * counts[WORKS] / counted if counted else 100.0


def measure(repo: Path = REPO) -> Measure:
    from ember.cli._exercised import Exercised
    surface = load_surface(repo / SURFACE.relative_to(REPO))
    exclusions = load_exclusions(repo / EXCLUDED.relative_to(REPO))
    return Measure(surface, exclusions, Exercised(repo))


# ----------------------------------------------------------------------------------------------
# Reports.

_COLUMNS = (WORKS, UNTESTED, DIFFERS, MISSING, EXCLUDED_)


def render_text(result: Measure) -> str:
    width = max(len(m) for m in result.surface)
    lines = [f"{'module':<{width}}  {'names':>5}  " +
             '  '.join(f'{c:>8}' for c in _COLUMNS) + '  coverage']
    for module, counts in result.per_module().items():
        lines.append(f'{module:<{width}}  {sum(counts.values()):>5}  ' +
                     '  '.join(f'{counts[c]:>8}' for c in _COLUMNS) +
                     f'  {coverage(counts):7.1f}%')
    totals = result.totals()
    lines.append(f"{'all':<{width}}  {sum(totals.values()):>5}  " +
                 '  '.join(f'{totals[c]:>8}' for c in _COLUMNS) +
                 f'  {coverage(totals):7.1f}%')
    return '\n'.join(lines)


_INTRO = """\
Every public name of every public module of MXNet {version} (measured in MXNet's own environment
by `tools/api_surface.py` into `tests/data/mxnet_1_9_1_api.json`), looked up in Ember: a name of
`mxnet.X` is looked for in `ember.X` (Ember also answers to `import ember as mx`).

A name **works** when it exists in Ember with the same kind and, for a class or function,
accepts MXNet's parameters (every name MXNet's signature has, the required ones in MXNet's
order) and a test, a doctest or an example under `examples/` uses it; a module works when it
imports, a constant when it has MXNet's value. **Untested** names exist but no test uses them;
**differs** means the kind or the signature is not MXNet's; names left out on purpose are
listed at the end with the reason for each (`tests/data/mxnet_api_excluded.txt`), and do not
count. Coverage is works / (names - excluded).
"""


def render_markdown(result: Measure) -> str:
    totals = result.totals()
    parts = [f'<!-- Generated by `{GENERATOR}`; do not edit. -->', '',
             f'# MXNet {result.version} API coverage', '',
             _INTRO.format(version=result.version),
             f'**{totals[WORKS]} of {sum(totals.values()) - totals[EXCLUDED_]} names work: '
             f'{coverage(totals):.1f}%** ({totals[EXCLUDED_]} excluded).', '',
             '## Per module', '',
             '| Module | Names | Works | Untested | Differs | Missing | Excluded | Coverage |',
             '|---|---:|---:|---:|---:|---:|---:|---:|']
    for module, counts in result.per_module().items():
        parts.append(f'| `{module}` | {sum(counts.values())} | ' +
                     ' | '.join(str(counts[c]) for c in _COLUMNS) +
                     f' | {coverage(counts):.1f}% |')
    parts += ['', '## Names that do not work yet', ''] + _gaps(result)
    parts += ['## Left out on purpose', '', '| Names | Reason |', '|---|---|']
    parts += [f'| `{e.pattern}` | {e.reason} |' for e in result.exclusions]
    parts.append('')
    return '\n'.join(parts)


def _gaps(result: Measure) -> list:
    by_module = {}
    for finding in result.findings:
        if finding.status not in (WORKS, EXCLUDED_):
            by_module.setdefault(finding.module, []).append(finding)
    lines = []
    for module, findings in by_module.items():
        lines.append(f'- `{module}`:')
        for status in STATUSES:
            chosen = [f for f in findings if f.status == status]
            if chosen:
                lines.append(f'  {status}: ' + ', '.join(_gap_text(f) for f in chosen))
    return lines + ['']


def _gap_text(finding: Finding) -> str:
    if finding.status == DIFFERS:
        return f'`{finding.name}` ({finding.detail})'
    return f'`{finding.name}`'


# ----------------------------------------------------------------------------------------------
# The command.

def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument('--markdown', nargs='?', const=DEFAULT_PAGE, type=Path, metavar='PATH',
                      help=f'write the coverage page (default {DEFAULT_PAGE})')
    what.add_argument('--check', nargs='?', const=DEFAULT_PAGE, type=Path, metavar='PATH',
                      help='exit with status 1 when the coverage page is stale')
    what.add_argument('--json', action='store_true', help='print every finding as JSON')


def run(args: argparse.Namespace) -> int:
    result = measure()
    if args.markdown is not None:
        args.markdown.write_text(render_markdown(result))
        print(f'wrote {args.markdown}')
        return 0
    if args.check is not None:
        return check_page(args.check, result)
    if args.json:
        print(json.dumps([f.__dict__ for f in result.findings], indent=1))
    else:
        print(render_text(result))
    return 0


def check_page(path: Path, result: Measure) -> int:
    """0 when `path` holds what ``--markdown`` would write, else 1 with a message."""
    current = path.read_text() if path.exists() else None
    if current == render_markdown(result):
        return 0
    state = 'is missing' if current is None else 'is stale'
    print(f'{path} {state}: regenerate it with `{GENERATOR}`', file=sys.stderr)
    return 1
