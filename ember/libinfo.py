"""MXNet's ``mx.libinfo``: where this build's native libraries and C headers are.

Ember's native parts are its compiled modules (``ember/_*.so``, built by ``setup.py``) and the
oneDNN library it loads (``MXNET_LIBRARY_PATH`` names another one).

>>> from ember import libinfo
>>> all(path.endswith('.so') for path in libinfo.find_lib_path())
True
"""
from __future__ import annotations

import os
from pathlib import Path

from ember import config
from ember.backend import native

__all__ = ['find_lib_path', 'find_include_path', '__version__']

__version__ = '0.1.0'
PACKAGE = Path(__file__).resolve().parent


def find_lib_path(prefix='libmxnet') -> list:
    """The native libraries of this build. For the default prefix: the file
    ``MXNET_LIBRARY_PATH`` names, else Ember's compiled modules and the oneDNN it loads; for
    another prefix, the files ``<prefix>*.so`` beside them. Raises RuntimeError naming where
    it looked when there is none.

    >>> find_lib_path('libnothing')  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    RuntimeError: cannot find a native library 'libnothing'; looked in: ...
    """
    onednn = _loaded_onednn()
    if prefix == 'libmxnet':
        named = config.get('MXNET_LIBRARY_PATH')
        if named and os.path.isfile(named):
            return [os.path.abspath(named)]
        places = [PACKAGE]
        found = sorted(str(p) for p in PACKAGE.glob('_*.so')) + ([onednn] if onednn else [])
    else:
        places = [PACKAGE] + ([Path(onednn).parent] if onednn else [])
        found = sorted({str(p) for place in places for p in place.glob(f'{prefix}*.so*')})
    if not found:
        raise RuntimeError(f'cannot find a native library {prefix!r}; looked in: '
                           f'{", ".join(str(place) for place in places)}')
    return found


def _loaded_onednn():
    try:
        return native.library_path()
    except Exception:    # noqa: BLE001 - a bad MXNET_LIBRARY_PATH: no oneDNN to list
        return None


def find_include_path() -> str:
    """The directory of this build's C headers (those its compiled modules share)."""
    if not list(PACKAGE.glob('_*.h')):
        raise RuntimeError(f'no C headers in {PACKAGE}: this copy of Ember has no sources of '
                           'its compiled modules')
    return str(PACKAGE)
