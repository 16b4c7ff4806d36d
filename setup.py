"""Builds the optional compiled modules; everything else is in pyproject.toml.

``ember._accel`` (shape arithmetic), ``ember._kernels`` (BatchNorm's CPU kernels, and the
residual add and relu chains of fused element-wise graphs) and
``ember._winograd`` (Winograd F(4x4, 3x3) convolution) are ``optional=True``: without a C
compiler the build skips them and Ember runs the Python and NumPy implementations. Build in place for development with ``python setup.py build_ext
--inplace`` (``pip install -e .`` builds them too).
"""
import sys

from setuptools import Extension, setup

# -ffp-contract=off: BatchNorm's output must round like NumPy's multiply then add (no FMA).
# No -march flags: the module must run on any CPU of its architecture.
KERNEL_FLAGS = [] if sys.platform == 'win32' else ['-O3', '-ffp-contract=off']
# Winograd's module writes its fused multiply-adds out (its fma()); -ffp-contract=off keeps the
# compiler from fusing others, which GCC 13 did differently from one code path to another, so
# that every build and path rounds alike. Its AVX-512 or AVX2 path is chosen at run time.
WINOGRAD_FLAGS = [] if sys.platform == 'win32' else ['-O3', '-ffp-contract=off']

setup(ext_modules=[
    Extension('ember._accel', sources=['ember/_accel.c'], optional=True),
    Extension('ember._kernels', sources=['ember/_kernels.c'], depends=['ember/_buffers.h'],
              optional=True, extra_compile_args=KERNEL_FLAGS),
    Extension('ember._winograd', sources=['ember/_winograd.c'], depends=['ember/_buffers.h'],
              optional=True, extra_compile_args=WINOGRAD_FLAGS),
])
