"""Run a Python script written for MXNet 1.x, with ``import mxnet`` giving Ember.

``ember run script.py [args...]`` runs `script.py` as ``__main__`` (``sys.argv`` is the script
and its arguments) after making every ``mxnet`` module name an alias of Ember's module of the
same name: ``import mxnet as mx``, ``from mxnet import gluon`` and ``import mxnet.gluon.nn``
all give Ember's modules, unchanged.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.util
import runpy
import sys

NAME = 'run'


class MXNetAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``mxnet`` and ``mxnet.*`` as Ember's modules of the same names.

    >>> finder = MXNetAlias()
    >>> finder.find_spec('mxnet.gluon', None).name, finder.find_spec('numpy', None)
    ('mxnet.gluon', None)
    """

    def find_spec(self, fullname, path, target=None):
        if fullname != 'mxnet' and not fullname.startswith('mxnet.'):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module('ember' + spec.name[len('mxnet'):])

    def exec_module(self, module):
        """Ember's module is imported already."""


def install() -> MXNetAlias:
    """Put the alias first on ``sys.meta_path`` (once); returns it."""
    for finder in sys.meta_path:
        if isinstance(finder, MXNetAlias):
            return finder
    finder = MXNetAlias()
    sys.meta_path.insert(0, finder)
    return finder


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('script', help='the Python file to run')
    parser.add_argument('args', nargs=argparse.REMAINDER, help="the script's arguments")


def run(args: argparse.Namespace) -> int:
    install()
    sys.argv = [args.script] + list(args.args)
    try:
        runpy.run_path(args.script, run_name='__main__')
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0
