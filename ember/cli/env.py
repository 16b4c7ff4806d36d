"""Show every configuration variable: value, source and whether it is effective in this build.

``ember env`` prints a table grouped by section, ``--json`` the same as JSON, ``--markdown``
writes the reference page ``docs/env_vars.md`` from the declarations in ``ember/config.py`` and
``--check`` exits with status 1 when that page is stale. The exit status is also 1 when a
variable holds a value Ember rejects.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from ember import config

NAME = 'env'
DEFAULT_PAGE = Path(__file__).resolve().parents[2] / 'docs' / 'env_vars.md'
GENERATOR = 'python -m ember env --markdown'

_TITLES = {'gpu': 'GPU', 'kvstore': 'KVStore', 'memonger': 'Memonger (mirroring)',
           'bf16 casting': 'bf16 casting', 'python interface': 'Python interface'}
_READ_WORDS = {'live': 'each use', 'startup': 'start-up'}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument('--json', action='store_true', help='print the variables as JSON')
    what.add_argument('--markdown', nargs='?', const=DEFAULT_PAGE, type=Path, metavar='PATH',
                      help=f'write the reference page (default {DEFAULT_PAGE})')
    what.add_argument('--check', nargs='?', const=DEFAULT_PAGE, type=Path, metavar='PATH',
                      help='exit with status 1 when the reference page is stale')


def run(args: argparse.Namespace) -> int:
    if args.markdown is not None:
        args.markdown.write_text(render_markdown())
        print(f'wrote {args.markdown}')
        return 0
    if args.check is not None:
        return check_page(args.check)
    rows = [describe(var) for var in config.REGISTRY.values()]
    if args.json:
        print(json.dumps({'variables': rows, 'unknown': _unknown()}, indent=1))
    else:
        print(render_text(rows))
    return 1 if any('error' in row for row in rows) else 0


def check_page(path: Path) -> int:
    """0 when `path` holds exactly what ``--markdown`` would write, else 1 with a message."""
    current = path.read_text() if path.exists() else None
    if current == render_markdown():
        return 0
    state = 'is missing' if current is None else 'is stale'
    print(f'{path} {state}: regenerate it with `{GENERATOR}`', file=sys.stderr)
    return 1


# ----------------------------------------------------------------------------------------------
# One variable.

def format_value(var: config.Var, value) -> str:
    """A parsed value written back as the text the environment would hold.

    >>> format_value(config.lookup('MXNET_EXEC_ENABLE_INPLACE'), True)
    '1'
    >>> format_value(config.lookup('MXNET_ENABLE_OPERATOR_TUNING'), ('float32', 'float16'))
    'float32,float16'
    """
    if value is None:
        return 'unset'
    if isinstance(value, bool):
        return '1' if value else '0'
    if var.kind == 'tuning':
        return ','.join(value) if value else '0'
    if var.kind == 'flags':
        return shlex.join(value.words) if value.words else '(none)'
    if var.kind == 'cores':
        return ','.join(str(core) for core in value)
    if var.kind == 'affinity':
        return value['raw']
    return str(value)


def default_text(var: config.Var) -> str:
    """How the default is described: the declaration's words, else the value as text."""
    if var.default_doc:
        return var.default_doc
    return format_value(var, var.default)


def _json_safe(value):
    if isinstance(value, config.CompilerFlags):
        return list(value.words)
    if isinstance(value, tuple):
        return list(value)
    return value


def describe(var: config.Var) -> dict:
    """The declaration and the current value of `var` as a JSON-ready dict."""
    row = {'name': var.name, 'section': var.section, 'kind': var.kind,
           'source': _source_text(var), 'default': default_text(var),
           'accepts': var.accepts, 'read': var.read, 'cache_key': var.cache_key,
           'owner': var.owner, 'status': _status_text(var), 'effective': var.effective,
           'aliases': list(var.aliases), 'extension': var.extension, 'doc': var.doc}
    try:
        value = config.get(var.name)
    except config.ConfigError as exc:
        row.update(value=None, text='INVALID', error=str(exc))
    else:
        row.update(value=_json_safe(value), text=format_value(var, value))
    return row


def _source_text(var: config.Var) -> str:
    where = config.source(var.name)
    if where == 'environment':
        return config.raw_value(var.name)[1]   # names the alias when the value came from one
    return where


def _unknown() -> list[dict]:
    return [{'name': name, 'did_you_mean': config.closest_name(name)}
            for name in config.unknown_names()]


def sections() -> dict[str, list[config.Var]]:
    """Declarations grouped by section, sections in the order of their first declaration."""
    grouped: dict[str, list[config.Var]] = {}
    for var in config.REGISTRY.values():
        grouped.setdefault(var.section, []).append(var)
    return grouped


def _title(section: str) -> str:
    return _TITLES.get(section, section[:1].upper() + section[1:])


# ----------------------------------------------------------------------------------------------
# Text table.

def render_text(rows: list[dict]) -> str:
    """The table that ``ember env`` prints: per section, name, value, source and status."""
    names = {row['name']: _name_text(row) for row in rows}
    name_width = max(len(name) for name in names.values())
    value_width = min(32, max(len(row['text']) for row in rows))
    by_section: dict[str, list[dict]] = {}
    for row in rows:
        by_section.setdefault(row['section'], []).append(row)
    lines = [f'{len(rows)} configuration variables; value, where it comes from, and whether '
             'it is effective in this build', '']
    for section, members in by_section.items():
        lines.append(_title(section))
        for row in members:
            lines.append(f"  {names[row['name']]:<{name_width}}  {row['text']:<{value_width}}  "
                         f"{row['source']:<11}  {row['status']}")
            if 'error' in row:
                lines.append(f"    error: {row['error']}")
        lines.append('')
    lines.extend(_native_lines())
    lines.extend(_unknown_lines())
    return '\n'.join(lines).rstrip('\n')


def _name_text(row: dict) -> str:
    """A variable's name with its other names, as the table shows it.

    >>> _name_text({'name': 'NNVM_EXEC_MATCH_RANGE', 'aliases': ['MXNET_EXEC_MATCH_RANGE']})
    'NNVM_EXEC_MATCH_RANGE (also MXNET_EXEC_MATCH_RANGE)'
    """
    if not row['aliases']:
        return row['name']
    return f"{row['name']} (also {', '.join(row['aliases'])})"


def _native_lines() -> list[str]:
    """The other libraries' variables Ember sets before they load, and their values now."""
    lines = ['Set by Ember for native libraries (unless you set them)']
    for default in config.NATIVE_DEFAULTS:
        now = config.native_value(default.name)
        lines.append(f'  {default.name} = {now if now is not None else "(unset yet)"}   '
                     f'Ember sets {default.value} for {default.library}: {default.why}')
    return lines + ['']


def _unknown_lines() -> list[str]:
    unknown = _unknown()
    if not unknown:
        return []
    lines = ['Unknown (ignored)']
    for entry in unknown:
        hint = f"  did you mean {entry['did_you_mean']}?" if entry['did_you_mean'] else ''
        lines.append(f"  {entry['name']}{hint}")
    return lines


# ----------------------------------------------------------------------------------------------
# The reference page.

_INTRO = """\
Ember reads its settings from environment variables. Each one is declared once in
`ember/config.py`; this page is generated from those declarations, so edit them, not this page.
`python -m ember env` prints the values in effect in a process and where each comes from.

How values are read:

- An empty value is the same as leaving the variable unset.
- Integers and numbers must be written whole (`12`, `0.5`, `1e-3`); `12abc` is rejected.
- Switches accept `0`, `1`, `true` or `false`, in any case.
- Named choices must be written exactly; a near miss is rejected with a suggestion.
- A rejected value raises `ConfigError` naming the variable, the value and what is accepted,
  when the subsystem that owns the variable reads it; importing Ember never fails on it.
- A name with an Ember prefix (`MXNET_`, `NNVM_`, `DMLC_`, `NEURON_`, `XLA_`) that is not
  declared here draws one warning, with the closest declared name.

Columns: **Read** is *each use* when a change applies at the next use, or *start-up* when the
owning subsystem reads it once (set it before starting the process). **Cache key** marks the
variables that change what the graph compiler produces, so they enter the compile-cache key.
**Status** says whether the variable has its effect in this build of Ember.
"""

_HEADER = ('| Variable | Type | Default | Accepted values | Read | Cache key | Owner | Status '
           '| What it does |\n|---|---|---|---|---|---|---|---|---|')


def _cell(text: str) -> str:
    return text.replace('|', '\\|').replace('\n', ' ')


def _code(text: str) -> str:
    return f'`{text}`' if text else ''


def _name_cell(var: config.Var) -> str:
    cell = _code(var.name)
    if var.aliases:
        cell += ' (also ' + ', '.join(_code(a) for a in var.aliases) + ')'
    if var.extension:
        cell += ' *extension*'
    return cell


def _status_text(var: config.Var) -> str:
    if var.effective and var.name in config.SIMULATED_GPU_ONLY:
        return 'effective (on a simulated GPU; no GPU has run it yet)'
    return var.status


def _status_cell(var: config.Var) -> str:
    if var.effective:
        return _status_text(var)
    return 'not yet: ' + var.status.removeprefix(config.NOT_YET)


def _default_cell(var: config.Var) -> str:
    if var.default_doc:
        return var.default_doc
    if var.default is None:
        return 'unset'
    return _code(format_value(var, var.default))


def _table_row(var: config.Var) -> str:
    cells = [_name_cell(var), var.kind, _default_cell(var), var.accepts,
             _READ_WORDS.get(var.read, var.read), 'yes' if var.cache_key else '', var.owner,
             _status_cell(var), var.doc]
    return '| ' + ' | '.join(_cell(c) for c in cells) + ' |'


def _summary() -> str:
    variables = list(config.REGISTRY.values())
    extensions = sum(var.extension for var in variables)
    effective = sum(var.effective for var in variables)
    return (f'{len(variables)} variables ({len(variables) - extensions} from the MXNet and '
            f'Neuron documentation, {extensions} Ember extensions), {effective} effective in '
            f'this build; {len(config.ALIASES)} alias'
            f'{"" if len(config.ALIASES) == 1 else "es"} of older names.')


def render_markdown() -> str:
    """The reference page: one table per section, generated from the declarations."""
    parts = [f'<!-- Generated by `{GENERATOR}` from ember/config.py; do not edit. -->',
             '', '# Environment variables', '', _INTRO, _summary(), '']
    for section, members in sections().items():
        parts += [f'## {_title(section)}', '', _HEADER]
        parts += [_table_row(var) for var in members]
        parts.append('')
    parts += ['## Set by Ember for native libraries', '',
              'Variables of other libraries, put into the environment before the library '
              'loads unless you set them (or a variable they give way to).', '',
              '| Variable | Ember sets | Library | Why | Gives way to |',
              '|---|---|---|---|---|']
    parts += [f'| `{d.name}` | `{d.value}` | {d.library} | {d.why} | '
              f'{", ".join(f"`{y}`" for y in d.yields_to) or "-"} |'
              for d in config.NATIVE_DEFAULTS]
    parts.append('')
    return '\n'.join(parts)
