"""Builds the optional compiled accelerator ``ember._accel``; everything else is in pyproject.toml.

``optional=True``: without a C compiler the build skips the extension and Ember runs the
pure-Python implementation in ember/accel.py. Build in place for development with
``python setup.py build_ext --inplace`` (``pip install -e .`` builds it too).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension('ember._accel', sources=['ember/_accel.c'], optional=True)])
