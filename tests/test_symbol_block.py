"""SymbolBlock: graphs from mx.sym, from HybridBlock.export and from MXNet 1.9.1 itself."""

import numpy as np
import pytest

import ember as mx
from ember import autograd, gluon
from ember import ndarray as nd
from ember import symbol as sym
from ember.base import EmberError
from ember.gluon import nn
from data_files import MXNET_FIXTURES as FIXTURES



def array(*shape, seed=0):
    return nd.array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_imports_mxnet_export_and_reproduces_its_output():
    block = gluon.SymbolBlock.imports(str(FIXTURES / 'mlp-symbol.json'), ['data'],
                                      str(FIXTURES / 'mlp-0001.params'))
    assert sorted(block.collect_params()) == sorted(
        f'mlp_dense{i}_{kind}' for i in range(3) for kind in ('weight', 'bias'))
    out = block(nd.array(np.load(FIXTURES / 'mlp-input.npy')))
    np.testing.assert_allclose(out.asnumpy(), np.load(FIXTURES / 'mlp-output.npy'),
                               rtol=1e-5, atol=1e-6)


def _cnn():
    net = nn.HybridSequential(prefix='cnn_')
    with net.name_scope():
        net.add(nn.Conv2D(3, 3, padding=1), nn.BatchNorm(), nn.Activation('relu'),
                nn.Flatten(), nn.Dense(2))
    return net


def test_export_then_imports_round_trip(tmp_path):
    net = _cnn()
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = array(2, 1, 4, 4)
    with autograd.record():            # moves the BatchNorm statistics away from 0 and 1
        net(x)
    expected = net(x).asnumpy()
    symbol_file, params_file = net.export(str(tmp_path / 'cnn'), epoch=2)
    block = gluon.SymbolBlock.imports(symbol_file, 'data', params_file)
    np.testing.assert_allclose(block(x).asnumpy(), expected, rtol=1e-5, atol=1e-6)
    params = block.collect_params()
    assert params['cnn_batchnorm0_running_mean'].grad_req == 'null'
    np.testing.assert_array_equal(params['cnn_batchnorm0_running_mean'].data().asnumpy(),
                                  net.collect_params()['cnn_batchnorm0_running_mean']
                                  .data().asnumpy())


def test_graph_with_deferred_shapes_and_several_inputs_and_outputs():
    a, b = sym.var('a'), sym.var('b')
    fc = sym.FullyConnected(a, num_hidden=3, name='fc')
    block = gluon.SymbolBlock([fc, fc + b], [a, b])
    block.initialize(mx.init.One())
    first, second = block(array(2, 5), array(2, 3, seed=1))
    assert block.collect_params()['fc_weight'].shape == (3, 5)
    np.testing.assert_allclose(first.asnumpy(), np.tile(array(2, 5).asnumpy().sum(1,
                               keepdims=True), (1, 3)), rtol=1e-5)
    np.testing.assert_allclose(second.asnumpy(), first.asnumpy() + array(2, 3, seed=1)
                               .asnumpy(), rtol=1e-6)


def test_parameter_types_follow_the_inputs():
    data = sym.var('data', dtype='float64')
    block = gluon.SymbolBlock(sym.FullyConnected(data, num_hidden=2, name='fc'), data)
    assert block.collect_params()['fc_weight'].dtype == np.float64


def test_symbol_input_composes_the_graph():
    data = sym.var('data')
    block = gluon.SymbolBlock(sym.relu(sym.FullyConnected(data, num_hidden=2, name='fc')), data)
    out = block(sym.var('x') * 2)
    assert 'x' in out.list_arguments() and 'data' not in out.list_arguments()
    assert out.infer_shape(x=(4, 3))[1] == [(4, 2)]


def test_symbol_block_trains_and_shares_parameters_with_its_source():
    net = nn.Dense(2, in_units=3, prefix='d_')
    net.initialize(mx.init.One())
    data = sym.var('data')
    block = gluon.SymbolBlock(net(data), data, params=net.collect_params())
    assert block.collect_params()['d_weight'] is net.weight
    x = array(4, 3)
    with autograd.record():
        loss = block(x).sum()
    loss.backward()
    np.testing.assert_allclose(net.weight.grad().asnumpy(),
                               np.tile(x.asnumpy().sum(0), (2, 1)), rtol=1e-5)
    np.testing.assert_allclose(net.bias.grad().asnumpy(), [4.0, 4.0])


def test_imports_checks_missing_and_extra_parameters(tmp_path):
    net = _cnn()
    net.initialize()
    net.hybridize()
    net(array(1, 1, 4, 4))
    symbol_file, params_file = net.export(str(tmp_path / 'cnn'))
    other = nn.Dense(2, in_units=3, prefix='other_')
    other.initialize()
    other.hybridize()
    other(array(1, 3))
    other_symbol, other_params = other.export(str(tmp_path / 'other'))
    with pytest.raises(EmberError, match='no value for other_weight'):
        gluon.SymbolBlock.imports(other_symbol, ['data'], params_file)
    with pytest.raises(EmberError, match='unknown parameters cnn_conv0_weight'):
        gluon.SymbolBlock.imports(other_symbol, ['data'], params_file, allow_missing=True)
    block = gluon.SymbolBlock.imports(other_symbol, ['data'], params_file, ignore_extra=True,
                                      allow_missing=True)
    assert block.collect_params()['other_weight']._data is None


def test_inputs_must_be_variables():
    data = sym.var('data')
    with pytest.raises(EmberError, match='must be variables'):
        gluon.SymbolBlock(sym.relu(data), [sym.relu(data)])


def test_structural_names_drop_the_common_prefix(tmp_path):
    data = sym.var('data')
    two = gluon.SymbolBlock(sym.FullyConnected(data, num_hidden=2, name='fc'), data)
    assert sorted(two._collect_params_with_prefix()) == ['bias', 'weight']
    one = gluon.SymbolBlock(sym.FullyConnected(data, num_hidden=2, no_bias=True, name='fc'),
                            data)
    assert list(one._collect_params_with_prefix()) == ['weight']
    one.initialize()
    one(array(1, 3))
    one.save_parameters(str(tmp_path / 'one.params'))
    assert list(nd.load(str(tmp_path / 'one.params'))) == ['weight']
