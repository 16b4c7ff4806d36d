"""The oneDNN library (libdnnl), loaded with ctypes from the onednn-cpu-gomp wheel.

``MXNET_LIBRARY_PATH`` names the exact file to load instead; a wrong path is an error at first
use. Without it the wheel's lib directory is searched; when the wheel is absent ``onednn()``
returns None and ``onednn_status()`` says why, so importing Ember never fails for lack of it.

Before the library loads (and with it libgomp, which reads its variables once, then),
``GOMP_SPINCOUNT`` gets Ember's value (``config.set_native_default``) unless the user set it or
``OMP_WAIT_POLICY``: after each primitive libgomp's threads would otherwise spin 300000
iterations on the cores that NumPy's OpenBLAS threads and Ember's kernel pool need next. The
compiled kernel modules run on libgomp too and load through :func:`compiled_module`, which
calls :func:`prepare_openmp` first; :func:`pause_openmp` ends the calling thread's OpenMP threads
before a fork.

>>> from ember.backend import native
>>> lib = native.onednn()
>>> (lib is None) == (native.dnnl_version() is None)
True
>>> isinstance(native.onednn_status(), str)
True
"""
from __future__ import annotations

import ctypes
import glob
import importlib
import importlib.metadata
import logging
import os
import site
import sys
import threading
from dataclasses import dataclass

from ember import config
from ember.base import EmberError

__all__ = ['onednn', 'onednn_status', 'dnnl_version', 'library_path', 'reset']

WHEEL = 'onednn-cpu-gomp'
_log = logging.getLogger(__name__)
_INSTALL_HINT = f'pip install {WHEEL}==2023.2.0 (the "onednn" extra of ember)'


class _DnnlVersion(ctypes.Structure):
    """dnnl_version_t of oneDNN 3.x."""
    _fields_ = [('major', ctypes.c_int), ('minor', ctypes.c_int), ('patch', ctypes.c_int),
                ('hash', ctypes.c_char_p), ('cpu_runtime', ctypes.c_uint),
                ('gpu_runtime', ctypes.c_uint)]


@dataclass(frozen=True)
class _Loaded:
    library: ctypes.CDLL | None
    path: str | None
    version: str | None
    status: str                    # what was loaded, or why nothing was
    is_error: bool = False         # the user's MXNET_LIBRARY_PATH is wrong: raise at use


_loaded: _Loaded | None = None
_lock = threading.Lock()


def onednn() -> ctypes.CDLL | None:
    """The loaded libdnnl, or None when oneDNN is not installed.

    Raises EmberError when MXNET_LIBRARY_PATH names a file that is missing or not oneDNN.
    """
    loaded = _state()
    if loaded.is_error:
        raise EmberError(loaded.status)
    return loaded.library


def onednn_status() -> str:
    """One line: which oneDNN is loaded from where, or why none is."""
    return _state().status


def dnnl_version() -> str | None:
    """The loaded oneDNN's version, e.g. '3.2.0 (commit 40112196...)', or None."""
    if onednn() is None:
        return None
    return _state().version


def library_path() -> str | None:
    """The path of the loaded library, or None."""
    return _state().path if onednn() is not None else None


def reset() -> None:
    """Forget the loaded library so the next use reads MXNET_LIBRARY_PATH again."""
    global _loaded
    with _lock:
        _loaded = None


def _state() -> _Loaded:
    global _loaded
    loaded = _loaded
    if loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = _load()
            loaded = _loaded
    return loaded


def _load() -> _Loaded:
    configured = config.get('MXNET_LIBRARY_PATH')
    if configured:
        return _load_configured(os.path.expanduser(configured))
    path = find_wheel_library()
    if path is None:
        return _Loaded(None, None, None, f'oneDNN is not installed: no libdnnl.so in the {WHEEL} '
                       f'wheel or under {", ".join(_lib_dirs())}; {_INSTALL_HINT}')
    try:
        library, version = _open(path)
    except (OSError, AttributeError) as exc:
        return _Loaded(None, None, None, f'oneDNN found at {path} but not loadable: {exc}')
    return _Loaded(library, path, version, f'oneDNN {version} from {path}')


def _load_configured(path: str) -> _Loaded:
    where = f'MXNET_LIBRARY_PATH={path!r}'
    if not os.path.isfile(path):
        return _error(f'{where}: no such file; expected the path of a oneDNN library '
                      f'(libdnnl.so), or leave it unset to use the installed {WHEEL} wheel')
    try:
        library, version = _open(path)
    except OSError as exc:
        return _error(f'{where}: cannot load it: {exc}')
    except AttributeError:
        return _error(f'{where}: not a oneDNN library (it has no dnnl_version function)')
    return _Loaded(library, path, version, f'oneDNN {version} from {path} (MXNET_LIBRARY_PATH)')


def _error(message: str) -> _Loaded:
    return _Loaded(None, None, None, message, is_error=True)


def _open(path: str):
    prepare_openmp()
    library = ctypes.CDLL(path)
    version_fn = library.dnnl_version  # AttributeError when the symbol is missing
    version_fn.restype = ctypes.POINTER(_DnnlVersion)
    version_fn.argtypes = []
    return library, _format_version(version_fn().contents)


def _format_version(version: _DnnlVersion) -> str:
    text = f'{version.major}.{version.minor}.{version.patch}'
    commit = (version.hash or b'').decode(errors='replace')
    return f'{text} (commit {commit})' if commit and commit != 'N/A' else text


def find_wheel_library() -> str | None:
    """The path of libdnnl.so from the installed wheel, or None."""
    for directory in _lib_dirs():
        found = sorted(glob.glob(os.path.join(directory, 'libdnnl.so*')), key=len)
        if found:
            return found[0]
    return None


def _lib_dirs() -> list[str]:
    """The wheel's own lib directory first, then the lib directories of this Python's sites."""
    dirs = _wheel_dirs()
    dirs += [os.path.join(prefix, 'lib') for prefix in (sys.prefix, sys.base_prefix)]
    sites = site.getsitepackages() + [site.getusersitepackages()]
    dirs += [os.path.dirname(os.path.dirname(path)) for path in sites]  # .../lib/pythonX.Y/site
    dirs.append(os.path.join(site.getuserbase(), 'lib'))
    return [d for d in dict.fromkeys(os.path.normpath(d) for d in dirs) if os.path.isdir(d)]


def _wheel_dirs() -> list[str]:
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return []
    libs = [f for f in dist.files or [] if f.name.startswith('libdnnl.so')]
    return [os.path.dirname(os.path.realpath(dist.locate_file(f))) for f in libs]


# ----------------------------------------------------------------------------------------------
# libgomp: its spinning, set before it loads, and its threads ended before a fork.

_LIBGOMP = 'libgomp.so.1'


def prepare_openmp() -> None:
    """Sets ``GOMP_SPINCOUNT`` (unless the user chose) before a library that runs on libgomp
    loads: oneDNN, or a compiled kernel module, whichever comes first."""
    if _is_loaded(_LIBGOMP):
        _log.debug('GOMP_SPINCOUNT: %s was loaded already, so it keeps the spin count it '
                   'started with', _LIBGOMP)
    elif config.set_native_default('GOMP_SPINCOUNT'):
        _log.debug('GOMP_SPINCOUNT set before loading libgomp')


def compiled_module(name: str):
    """The compiled module ``ember.<name>`` (built by setup.py where a C compiler is found), or
    None where it is not built; ``GOMP_SPINCOUNT`` is set first, since a module built with
    OpenMP loads libgomp."""
    prepare_openmp()
    try:
        module = importlib.import_module(f'ember.{name}')
    except ImportError:
        return None
    return _CappedAtFirstUse(module) if hasattr(module, 'use_instruction_set') else module


class _CappedAtFirstUse:
    """A compiled module with builds per instruction set, narrowed to ``ONEDNN_MAX_CPU_ISA`` at
    its first use rather than at import (a bad value raises where the kernels are asked for).
    After that its names are this object's own, so a lookup costs what a module's does."""

    def __init__(self, module):
        self.__dict__['_module'] = module

    def __getattr__(self, name):
        module = self.__dict__['_module']
        _cap_instruction_set(module)
        self.__dict__.update(vars(module))
        return getattr(module, name)


# The widest build of a compiled module that each ONEDNN_MAX_CPU_ISA value allows.
_BUILDS = ('baseline', 'avx2', 'avx512')


def _cap_instruction_set(module) -> None:
    """Narrow `module`'s build to ``ONEDNN_MAX_CPU_ISA``, as oneDNN narrows its own kernels."""
    isa = config.get('ONEDNN_MAX_CPU_ISA')
    cap = 'avx512' if isa.startswith('AVX512') or isa == 'ALL' else (
        'avx2' if isa.startswith('AVX2') else 'baseline')
    if _BUILDS.index(module.instruction_set()) > _BUILDS.index(cap):
        module.use_instruction_set(cap)


def pause_openmp() -> None:
    """End the threads of the calling thread's OpenMP team (GNU libgomp, where loaded), as
    before a fork: a child whose forking thread had a team would wait forever at its first
    parallel region for threads that fork did not copy. The next parallel region here starts
    them again."""
    try:
        library = ctypes.CDLL(_LIBGOMP, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        pause = library.omp_pause_resource_all      # OpenMP 5.0 (GCC 9 on)
    except (OSError, AttributeError):
        return                                      # not loaded, or too old to end its threads
    pause.argtypes, pause.restype = (ctypes.c_int,), ctypes.c_int
    pause(2)                                        # omp_pause_hard


def _is_loaded(soname: str) -> bool:
    """Whether the process has loaded `soname` already (RTLD_NOLOAD loads nothing)."""
    try:
        ctypes.CDLL(soname, mode=os.RTLD_NOLOAD)
    except OSError:
        return False
    return True


def signal_on_parent_death(sig) -> None:
    """Ask Linux to send `sig` to this process when its parent dies (``PR_SET_PDEATHSIG``);
    nothing elsewhere. Called in a child between fork and exec (``preexec_fn``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)            # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
