"""Builds the optional compiled modules; everything else is in pyproject.toml.

``ember._accel`` (shape arithmetic), ``ember._kernels`` (BatchNorm's CPU kernels, and the
residual add and relu chains of fused element-wise graphs),
``ember._winograd`` (Winograd F(4x4, 3x3) convolution) and ``ember._sparse`` (csr x dense,
csr^T x dense, retain and the lazy optimizer updates) are ``optional=True``: without a C
compiler the build skips them and Ember runs the Python and NumPy implementations. Build in place for development with ``python setup.py build_ext
--inplace`` (``pip install -e .`` builds them too).
"""
import os
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -ffp-contract=off: BatchNorm's output must round like NumPy's multiply then add (no FMA).
# No -march flags: the module must run on any CPU of its architecture.
KERNEL_FLAGS = [] if sys.platform == 'win32' else ['-O3', '-ffp-contract=off']
# Winograd's module writes its fused multiply-adds out (its fma()); -ffp-contract=off keeps the
# compiler from fusing others, which GCC 13 did differently from one code path to another, so
# that every build and path rounds alike. Its AVX-512 or AVX2 path is chosen at run time.
WINOGRAD_FLAGS = [] if sys.platform == 'win32' else ['-O3', '-ffp-contract=off']

# The sparse kernels' Adam step takes square roots of sums of squares: without errno to set
# for a negative one, sqrtf is one instruction and the step vectorises (it rounds the same).
SPARSE_FLAGS = KERNEL_FLAGS + ([] if sys.platform == 'win32' else ['-fno-math-errno'])

# ember._winograd and ember._kernels run their parts on the calling thread's OpenMP team, the
# threads of oneDNN's kernels (onednn-cpu-gomp runs on GNU libgomp; see ember/_team.h): where
# the compiler has no OpenMP they are built without, and their parts run on Ember's kernel
# threads.
OPENMP_FLAGS = ['-fopenmp']
OPENMP_TEST = '#include <omp.h>\nint team(void) { return omp_get_max_threads(); }\n'


class BuildExt(build_ext):
    """build_ext that adds OpenMP to the kernel modules where the compiler builds it."""

    def build_extension(self, ext):
        if ext.name in ('ember._kernels', 'ember._winograd', 'ember._sparse') \
                and self._has_openmp():
            ext.extra_compile_args = list(ext.extra_compile_args or []) + OPENMP_FLAGS
            ext.extra_link_args = list(ext.extra_link_args or []) + OPENMP_FLAGS
        super().build_extension(ext)

    def _has_openmp(self):
        if sys.platform == 'win32':
            return False
        with tempfile.TemporaryDirectory() as folder:
            source = os.path.join(folder, 'team.c')
            with open(source, 'w') as file:
                file.write(OPENMP_TEST)
            try:
                objects = self.compiler.compile([source], output_dir=folder,
                                                extra_postargs=OPENMP_FLAGS)
                self.compiler.link_shared_object(objects, os.path.join(folder, 'team.so'),
                                                 extra_postargs=OPENMP_FLAGS)
            except Exception:       # noqa: BLE001 - any failure: build without OpenMP
                return False
        return True


setup(cmdclass={'build_ext': BuildExt}, ext_modules=[
    Extension('ember._accel', sources=['ember/_accel.c'], optional=True),
    Extension('ember._kernels', sources=['ember/_kernels.c'],
              depends=['ember/_buffers.h', 'ember/_team.h'],
              optional=True, extra_compile_args=KERNEL_FLAGS),
    Extension('ember._winograd', sources=['ember/_winograd.c'],
              depends=['ember/_buffers.h', 'ember/_team.h', 'ember/_builds.h'],
              optional=True, extra_compile_args=WINOGRAD_FLAGS),
    Extension('ember._sparse', sources=['ember/_sparse.c'],
              depends=['ember/_buffers.h', 'ember/_team.h', 'ember/_builds.h'],
              optional=True, extra_compile_args=SPARSE_FLAGS),
])
