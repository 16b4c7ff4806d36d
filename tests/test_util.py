"""``mx.util``: the NumPy-semantics switches and decorators, ufunc keyword checks, the
environment and the GPUs, as MXNet 1.9.1's module has them."""
from __future__ import annotations

import ctypes

import pytest

import ember as mx
from ember import backend, util
from ember import numpy as np


@pytest.fixture(autouse=True)
def semantics_off():
    yield
    util.reset_np()


def test_switches_and_scopes():
    assert not util.is_np_shape() and not util.is_np_array()
    with util.np_shape():
        assert util.is_np_shape() and not util.is_np_array()
        with util.np_array():
            assert util.is_np_array()
            with pytest.raises(ValueError, match='reset_np'):
                util.set_np_shape(False)
        assert not util.is_np_array()
    assert not util.is_np_shape()
    with pytest.raises(ValueError, match='shape semantics'):
        util.set_np(shape=False, array=True)
    with util.np_array():      # as MXNet's scope, without shape semantics too
        assert util.is_np_array() and not util.is_np_shape()
    assert util.set_np_shape(True) is False and util.set_np_shape(True) is True
    util.set_np()
    assert util.is_np_array() and mx.npx.is_np_array() and mx.is_np_array()
    util.reset_np()
    assert not util.is_np_shape()


def test_use_np_decorates_functions_and_classes():
    @util.use_np
    def inside():
        return util.is_np_shape(), util.is_np_array()
    assert inside() == (True, True) and not util.is_np_array()

    @util.use_np_shape
    class Scalar:
        def __init__(self):
            self.seen = util.is_np_shape()

        @property
        def shape_on(self):
            return util.is_np_shape()

        @staticmethod
        def static():
            return util.is_np_shape()
    scalar = Scalar()
    assert scalar.seen and scalar.shape_on and Scalar.static()
    assert not util.is_np_shape()

    @util.use_np_array
    def array_only():
        return util.is_np_array()
    with util.np_shape():
        assert array_only()
    with pytest.raises(TypeError, match='decorates'):
        util.use_np(3)


def test_ufunc_keywords():
    legal = [('where', None), ('casting', 'same_kind'), ('order', 'C'), ('dtype', 'int8'),
             ('dtype', 'float16'), ('subok', True)]
    illegal = [('casting', 'never'), ('order', 1), ('dtype', 'complex64'), ('subok', 'yes'),
               ('axis', 0)]
    assert all(util.np_ufunc_legal_option(k, v) for k, v in legal)
    assert not any(util.np_ufunc_legal_option(k, v) for k, v in illegal)

    @util.wrap_np_unary_func
    def double(x, out=None):
        return np.multiply(x, 2, out=out)

    @util.wrap_np_binary_func
    def plus(x1, x2, out=None):
        return np.add(x1, x2, out=out)
    x = np.array([1.0, 2.0])
    assert double(x, dtype='float64').dtype == 'float64'
    assert plus(x, x, casting='same_kind').tolist() == [2.0, 4.0]
    out = np.zeros(2)
    assert plus(x, 1, out=out) is out and out.tolist() == [2.0, 3.0]
    kept = np.full(2, 9.0)
    double(x, where=x > 1, out=kept)
    assert kept.tolist() == [9.0, 4.0]
    with pytest.raises(TypeError, match='invalid keyword'):
        double(x, axis=0)
    with pytest.raises(TypeError, match='not understood'):
        plus(x, x, casting='never')


def test_environment():
    name = 'UTIL_TEST_SETTING'
    assert util.getenv(name) is None
    util.setenv(name, 'value one')
    try:
        assert util.getenv(name) == 'value one'
    finally:
        util.setenv(name, None)
    assert util.getenv(name) is None
    with pytest.raises(mx.config.ConfigError, match='MXNET_ENGINE_TYPE'):
        util.setenv('MXNET_ENGINE_TYPE', 'NoSuchEngine')
    assert util.getenv('MXNET_ENGINE_TYPE') != 'NoSuchEngine'
    with pytest.raises(TypeError, match='string'):
        util.setenv(name, 3)


def test_gpus_and_helpers():
    assert util.get_gpu_count() == backend.num_gpus()
    with pytest.raises(ValueError, match='GPU'):
        util.get_cuda_compute_capability(mx.cpu())
    if util.get_gpu_count() == 0:
        with pytest.raises(mx.base.EmberError, match='no GPU 0'):
            util.get_gpu_memory(0)
    else:
        free, total = util.get_gpu_memory(0)
        assert 0 < free <= total
        assert util.get_cuda_compute_capability(mx.gpu(0)) >= 30
    text = util.c_str('abc')
    assert isinstance(text, ctypes.c_char_p) and util.py_str(text.value) == 'abc'

    @util.set_module('mxnet.numpy')
    def named():
        return None
    assert named.__module__ == 'mxnet.numpy'
