"""The ``ember`` command line (``python -m ember ...`` or the ``ember`` console script).

Each sub-command is one module in this package that defines

``add_arguments(parser)``
    add its options to an :class:`argparse.ArgumentParser`;
``run(args) -> int``
    do the work and return the exit status.

The command's name is the module's name with ``_`` turned into ``-`` (or the module's ``NAME``),
and its help line is the first line of the module's docstring. Adding a sub-command is adding a
file; a module elsewhere can be added with :func:`register`. Heavy imports belong inside
``run`` so that ``ember --help`` stays fast.

>>> 'env' in commands()
True
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from types import ModuleType

__all__ = ['main', 'register', 'commands', 'build_parser']

_registered: dict[str, str] = {}


def register(name: str, module: str) -> None:
    """Add the sub-command `name`, implemented by the module named `module` (imported lazily).

    >>> register('env', 'ember.cli.env')   # what discovery finds anyway
    >>> commands()['env']
    'ember.cli.env'
    """
    _registered[name] = module


def commands() -> dict[str, str]:
    """Sub-command name -> module name: the modules of this package, then registered ones."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith('_'):
            found[info.name.replace('_', '-')] = f'{__name__}.{info.name}'
    found.update(_registered)
    return found


def _load(module_name: str) -> ModuleType | Exception:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - one broken command must not break the others
        return exc


def _help_line(module: ModuleType) -> str:
    return (module.__doc__ or '').strip().split('\n')[0]


def build_parser() -> argparse.ArgumentParser:
    """The parser with every sub-command whose module defines ``add_arguments`` and ``run``."""
    parser = argparse.ArgumentParser(prog='ember', description='Ember command line.')
    sub = parser.add_subparsers(dest='command', metavar='COMMAND')
    for name, module_name in sorted(commands().items()):
        module = _load(module_name)
        if isinstance(module, Exception):
            broken = sub.add_parser(name, help=f'(unavailable: {module})')
            broken.set_defaults(_run=_unavailable(name, module))
            continue
        if not (hasattr(module, 'add_arguments') and hasattr(module, 'run')):
            continue
        name = getattr(module, 'NAME', name)
        command = sub.add_parser(name, help=_help_line(module), description=module.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def _unavailable(name: str, error: Exception):
    def run(args) -> int:
        print(f'ember {name}: cannot load the command: {error!r}', file=sys.stderr)
        return 2
    return run


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default ``sys.argv[1:]``), run the sub-command, return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, '_run', None) is None:
        parser.print_help()
        return 2
    return int(args._run(args) or 0)
