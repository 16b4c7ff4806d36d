"""MXNet's ``mx.runtime``: which features this Ember has, found out when asked.

MXNet reports the options its library was compiled with. Ember is Python over optional native
parts, so each feature is checked in the running process: ``MKLDNN`` is on when oneDNN loads
(and ``MXNET_MKLDNN_ENABLED`` allows it), ``CUDA`` when CuPy sees a GPU, ``BLAS_*`` and
``LAPACK`` name NumPy's libraries, ``CPU_*`` are the instruction sets of this CPU (Ember's
kernels choose theirs when they run), ``DIST_KVSTORE`` and ``MPI`` need mpi4py. Features
Ember has no counterpart of (cuDNN, NCCL, TensorRT, TVM operators, Caffe, jemalloc) are off.

>>> import ember as mx
>>> features = mx.runtime.Features()
>>> features.is_enabled('PROFILER'), features.is_enabled('TVM_OP')
(True, False)
>>> features['PROFILER']
✔ PROFILER
>>> features.is_enabled('cuda') == (mx.context.num_gpus() > 0)
True
"""
from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import numpy as np

from ember import backend, config
from ember.backend import onednn
from ember.base import EmberError

__all__ = ['Feature', 'Features', 'feature_list']

# MXNet 1.9.1's features, in its order; Ember adds MPI at the end.
NAMES = ('CUDA', 'CUDNN', 'NCCL', 'CUDA_RTC', 'TENSORRT', 'CPU_SSE', 'CPU_SSE2', 'CPU_SSE3',
         'CPU_SSE4_1', 'CPU_SSE4_2', 'CPU_SSE4A', 'CPU_AVX', 'CPU_AVX2', 'OPENMP', 'SSE',
         'F16C', 'JEMALLOC', 'BLAS_OPEN', 'BLAS_ATLAS', 'BLAS_MKL', 'BLAS_APPLE', 'LAPACK',
         'MKLDNN', 'OPENCV', 'CAFFE', 'PROFILER', 'DIST_KVSTORE', 'CXX14', 'INT64_TENSOR_SIZE',
         'SIGNAL_HANDLER', 'DEBUG', 'TVM_OP', 'MPI')

# /proc/cpuinfo flag of each instruction-set feature (SSE3 is 'pni' there).
CPU_FLAGS = {'CPU_SSE': 'sse', 'CPU_SSE2': 'sse2', 'CPU_SSE3': 'pni', 'CPU_SSE4_1': 'sse4_1',
             'CPU_SSE4_2': 'sse4_2', 'CPU_SSE4A': 'sse4a', 'CPU_AVX': 'avx',
             'CPU_AVX2': 'avx2', 'SSE': 'sse', 'F16C': 'f16c'}
# NumPy's names of the same sets, where /proc/cpuinfo is missing (SSE4A has none).
NUMPY_CPU_NAMES = {'sse': 'SSE', 'sse2': 'SSE2', 'pni': 'SSE3', 'sse4_1': 'SSE41',
                   'sse4_2': 'SSE42', 'avx': 'AVX', 'avx2': 'AVX2', 'f16c': 'F16C'}


class Feature:
    """One feature: ``name`` and whether it is ``enabled``."""

    def __init__(self, name, enabled):
        self.name = name
        self.enabled = bool(enabled)

    def __repr__(self):
        return f'{"✔" if self.enabled else "✖"} {self.name}'


def cpu_flags() -> set:
    """The instruction-set flags of this CPU, as /proc/cpuinfo names them."""
    info = Path('/proc/cpuinfo')
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith('flags'):
                return set(line.split(':', 1)[1].split())
    return _numpy_cpu_flags()


def _numpy_cpu_flags() -> set:
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as found
    except ImportError:
        return set()
    return {flag for flag, name in NUMPY_CPU_NAMES.items() if found.get(name)}


def numpy_libraries() -> dict:
    """The names of NumPy's BLAS and LAPACK ('' when unknown), lower case."""
    try:
        deps = np.show_config(mode='dicts').get('Build Dependencies', {})
    except (TypeError, ValueError):     # an older NumPy prints instead
        return {'blas': '', 'lapack': ''}
    return {kind: str(deps.get(kind, {}).get('name', '')).lower() for kind in ('blas', 'lapack')}


def _installed(module: str) -> bool:
    """Whether `module` imports; Ember's own modules only from this copy of Ember."""
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:
        return False
    if spec is None:
        return False
    if not module.startswith('ember.'):
        return True
    origin = Path(spec.origin or next(iter(spec.submodule_search_locations or []), ''))
    return origin.resolve().is_relative_to(Path(__file__).resolve().parent)


def _openmp() -> bool:
    """A compiled module of Ember (built with OpenMP) or oneDNN (on libgomp) loads."""
    kernels = backend.native.compiled_module('_kernels')
    return kernels is not None or onednn.available()


def _blas(libraries, *names) -> bool:
    return any(name in libraries['blas'] for name in names)


def detect() -> dict:
    """Feature name -> whether this process has it."""
    flags, libraries = cpu_flags(), numpy_libraries()
    found = {name: flag in flags for name, flag in CPU_FLAGS.items()}
    found.update(
        CUDA=backend.num_gpus() > 0, CUDNN=False, NCCL=False, CUDA_RTC=False, TENSORRT=False,
        OPENMP=_openmp(), JEMALLOC=False,
        BLAS_OPEN=_blas(libraries, 'openblas'), BLAS_ATLAS=_blas(libraries, 'atlas'),
        BLAS_MKL=_blas(libraries, 'mkl'), BLAS_APPLE=_blas(libraries, 'accelerate'),
        LAPACK=bool(libraries['lapack']),
        MKLDNN=onednn.available() and config.get('MXNET_MKLDNN_ENABLED'),
        OPENCV=_installed('cv2'), CAFFE=False, PROFILER=True,
        DIST_KVSTORE=_installed('mpi4py') and _installed('ember.kvstore'),
        CXX14=False, INT64_TENSOR_SIZE=True, SIGNAL_HANDLER=False, DEBUG=False, TVM_OP=False,
        MPI=_installed('mpi4py'))
    return {name: found[name] for name in NAMES}


def feature_list() -> list:
    """Every feature, as :class:`Feature` objects, in MXNet's order."""
    return [Feature(name, enabled) for name, enabled in detect().items()]


class Features(collections.OrderedDict):
    """Feature name -> :class:`Feature`, checked when created."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self:
            self.update((feature.name, feature) for feature in feature_list())

    def __repr__(self):
        return str(list(self.values()))

    def is_enabled(self, feature_name) -> bool:
        """Whether feature `feature_name` (any case) is on; an unknown name raises."""
        name = feature_name.upper()
        if name not in self:
            raise EmberError(f'Feature {feature_name!r} is unknown; known features are: '
                             f'{", ".join(self)}')
        return self[name].enabled
