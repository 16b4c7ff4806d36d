"""The symbolic graph IR, the mx.sym Symbol API, MXNet's JSON format and shape/type inference."""
import copy
import inspect
import json
import pickle
import warnings

import numpy as np
import pytest

from ember import sym
from ember.base import EmberError
from ember.op import registry
from ember.op.registry import ShapeError
from ember.passes import infer_shape as infer_shape_pass
from ember.passes import infer_type as infer_type_pass
from ember.passes.options import Options
from ember.symbol import AttrScope, NameManager, Prefix, graph as ir
from ember.symbol.infer import infer_shapes
from data_files import MXNET_FIXTURES

FIXTURE = MXNET_FIXTURES / 'mlp-symbol.json'
MLP_ARGS = ['data', 'mlp_dense0_weight', 'mlp_dense0_bias', 'mlp_dense1_weight',
            'mlp_dense1_bias', 'mlp_dense2_weight', 'mlp_dense2_bias']


def mlp():
    data = sym.var('data')
    net = sym.FullyConnected(data, num_hidden=16, name='fc1')
    net = sym.Activation(net, act_type='relu', name='relu1')
    net = sym.FullyConnected(net, num_hidden=4, name='fc2')
    return sym.SoftmaxOutput(net, name='softmax')


def conv_net():
    data = sym.var('data')
    net = sym.Convolution(data, kernel=(3, 3), num_filter=8, pad=(1, 1), name='conv1')
    net = sym.BatchNorm(net, name='bn1')
    net = sym.Activation(net, act_type='relu', name='relu1')
    net = sym.Pooling(net, kernel=(2, 2), stride=(2, 2), pool_type='max', name='pool1')
    net = sym.FullyConnected(sym.flatten(net, name='flat'), num_hidden=10, name='fc')
    return sym.SoftmaxOutput(net, name='softmax')


# ----------------------------------------------------------------------------------------------
# Building symbols

def test_operator_call_creates_missing_inputs_as_named_variables():
    net = mlp()
    assert net.list_arguments() == ['data', 'fc1_weight', 'fc1_bias', 'fc2_weight', 'fc2_bias',
                                    'softmax_label']
    assert net.list_outputs() == ['softmax_output']
    assert net.list_auxiliary_states() == []
    assert net.name == 'softmax' and repr(net) == '<Symbol softmax>'


def test_auxiliary_states_and_hidden_outputs_of_batchnorm():
    bn = sym.BatchNorm(sym.var('x'), name='bn')
    assert bn.list_arguments() == ['x', 'bn_gamma', 'bn_beta']
    assert bn.list_auxiliary_states() == ['bn_moving_mean', 'bn_moving_var']
    assert bn.list_inputs() == ['x', 'bn_gamma', 'bn_beta', 'bn_moving_mean', 'bn_moving_var']
    assert len(bn) == 1 and bn.list_outputs() == ['bn_output']
    # Hidden outputs are reachable for graph passes, by position or by name.
    assert bn[1].list_outputs() == ['bn_mean'] and bn['bn_var'].list_outputs() == ['bn_var']
    with pytest.raises(IndexError):
        bn[3]
    assert len(list(bn)) == 1
    assert sym.BatchNorm(sym.var('x'), output_mean_var=True, name='b2').list_outputs() == [
        'b2_output', 'b2_mean', 'b2_var']


def test_multi_output_operators_index_and_iterate():
    parts = sym.split(sym.var('x'), num_outputs=3, axis=1, name='sp')
    assert len(parts) == 3
    assert parts.list_outputs() == ['sp_output0', 'sp_output1', 'sp_output2']
    assert [p.list_outputs() for p in parts] == [['sp_output0'], ['sp_output1'], ['sp_output2']]
    assert parts['sp_output1'].list_outputs() == ['sp_output1']
    assert parts[1:].list_outputs() == ['sp_output1', 'sp_output2']
    assert parts[-1].list_outputs() == ['sp_output2']
    assert parts.name == 'sp' and parts[2].name == 'sp'
    with pytest.raises(ValueError, match='Cannot find output'):
        parts['nope']
    with pytest.raises(IndexError):
        parts[3]
    drop = sym.Dropout(sym.var('x'), p=0.5, name='drop')
    assert len(drop) == 1 and drop[1].list_outputs() == ['drop_mask']


def test_rnn_symbol_inputs_outputs_and_shapes():
    rnn = sym.RNN(sym.var('data'), state_size=4, num_layers=1, mode='lstm', state_outputs=True,
                  name='rnn')
    assert rnn.list_arguments() == ['data', 'rnn_parameters', 'rnn_state', 'rnn_state_cell']
    assert rnn.list_outputs() == ['rnn_output', 'rnn_state', 'rnn_state_cell']
    args, outs, aux = rnn.infer_shape(data=(5, 2, 3))
    assert args[2:] == [(1, 2, 4), (1, 2, 4)] and outs[0] == (5, 2, 4)
    assert args[1] == (4 * 4 * (3 + 4 + 2),)


def test_automatic_names_and_name_scopes():
    with NameManager():
        first = sym.FullyConnected(sym.var('x'), num_hidden=2)
        second = sym.FullyConnected(sym.var('x'), num_hidden=2)
        scaled = first * 2
        assert (first.name, second.name) == ('fullyconnected0', 'fullyconnected1')
        assert second.list_arguments() == ['x', 'fullyconnected1_weight', 'fullyconnected1_bias']
        assert scaled.name == '_mulscalar0'
        assert sym.concat(first, second).name == 'concat0'
    with Prefix('net_'):
        assert sym.relu(sym.var('x')).name == 'net_relu0'
        assert sym.relu(sym.var('x'), name='act').name == 'net_act'
        assert sym.var('v').name == 'v'          # variables keep their names, as in MXNet
    with NameManager():
        assert sym.FullyConnected(sym.var('x'), num_hidden=2).name == 'fullyconnected0'


def test_attribute_scopes_and_hidden_keys():
    with AttrScope(ctx_group='dev1', group='4'):
        with AttrScope(group='5'):
            fc = sym.FullyConnected(sym.var('x'), num_hidden=2, name='fc')
        plain = sym.var('y', attr={'group': '1', 'force_mirroring': 'True'}, lr_mult=1)
    assert fc.attr('ctx_group') == 'dev1' and fc.attr('__ctx_group__') == 'dev1'
    assert fc.attr('group') == '5'
    assert fc.list_attr() == {'num_hidden': '2', '__ctx_group__': 'dev1', 'group': '5'}
    # Automatic variables copy their operator's attributes (so lr_mult reaches the weights).
    assert fc.attr_dict()['fc_weight']['__ctx_group__'] == 'dev1'
    assert plain.attr('group') == '1' and plain.attr('lr_mult') == '1'
    assert plain.attr('force_mirroring') == 'True' and plain.attr('__force_mirroring__') == 'True'
    assert sym.var('z').attr('group') is None
    assert fc.attr('op_name') == 'FullyConnected' and fc.attr('name') == 'fc'
    with pytest.raises(ValueError):
        AttrScope(group=4)


def test_set_attr_reparses_operator_parameters_and_renames():
    fc = sym.FullyConnected(sym.var('x'), num_hidden=2, name='fc')
    fc._set_attr(num_hidden='5', name='dense', __mirror_stage__='1')
    assert fc.name == 'dense' and fc.attr('mirror_stage') == '1'
    assert fc.infer_shape(x=(1, 3))[1] == [(1, 5)]
    with pytest.raises(ValueError, match='string'):
        fc._set_attr(num_hidden=5)


def test_variable_attributes():
    w = sym.Variable('w', shape=(16, 0), lr_mult=2.0, wd_mult=0, dtype='float16', init='zeros',
                     stype='default', __layout__='NC')
    assert w.list_attr() == {'__shape__': '(16, 0)', '__lr_mult__': '2.0', '__wd_mult__': '0',
                             '__dtype__': '2', '__init__': 'zeros', '__storage_type__': '0',
                             '__layout__': 'NC'}
    assert w.list_outputs() == ['w'] and w.list_arguments() == ['w']
    with pytest.raises(ValueError, match='double underscores'):
        sym.var('v', layout='NC')
    with pytest.raises(TypeError):
        sym.var(3)


def test_variable_init_object_is_stored_as_its_json():
    from ember import initializer
    assert sym.var('w', init=initializer.Uniform(0.1)).attr('__init__') == \
        '["uniform", {"scale": 0.1}]'


def test_arithmetic_uses_the_operators_of_mx_nd():
    x, y = sym.var('x'), sym.var('y')
    cases = {
        x + y: 'broadcast_add', x - y: 'broadcast_sub', x * y: 'broadcast_mul',
        x / y: 'broadcast_div', x % y: 'broadcast_mod', x ** y: 'broadcast_power',
        x + 1: '_plus_scalar', 1 + x: '_plus_scalar', x - 1: '_minus_scalar',
        1 - x: '_rminus_scalar', 2 * x: '_mul_scalar', x / 2: '_div_scalar',
        2 / x: '_rdiv_scalar', x % 2: '_mod_scalar', 2 % x: '_rmod_scalar',
        x ** 2: '_power_scalar', 2 ** x: '_rpower_scalar', -x: 'negative', abs(x): 'abs',
        x == y: 'broadcast_equal', x != 1: '_not_equal_scalar', x > y: 'broadcast_greater',
        x >= 1: '_greater_equal_scalar', x < y: 'broadcast_lesser', 1 < x: '_greater_scalar',
        x <= 0: '_lesser_equal_scalar',
    }
    for result, op_name in cases.items():
        assert result.attr('op_name') == op_name
    assert (x + 2).list_attr() == {'scalar': '2'} and (x * 0.5).list_attr() == {'scalar': '0.5'}
    assert (x + y).infer_shape(x=(2, 3), y=(1, 3))[1] == [(2, 3)]
    with pytest.raises(TypeError):
        x + 'a'
    with pytest.raises(TypeError):
        bool(x)


def test_fluent_methods_and_helpers():
    x = sym.var('x')
    assert x.reshape((2, -1)).infer_shape(x=(4, 3))[1] == [(2, 6)]
    assert x.reshape(2, -1).list_attr() == {'shape': '(2, -1)'}
    assert x.reshape(shape=(-1,)).infer_shape(x=(4, 3))[1] == [(12,)]
    assert x.flatten().infer_shape(x=(2, 3, 4))[1] == [(2, 12)]
    assert x.sum(axis=1).infer_shape(x=(4, 3))[1] == [(4,)]
    assert x.astype('float16').infer_type(x='float32')[1] == [np.float16]
    assert x.transpose().infer_shape(x=(2, 3))[1] == [(3, 2)]
    z = sym.zeros((2, 3))
    assert z.infer_shape() == ([], [(2, 3)], []) and z.list_attr()['dtype'] == 'float32'
    assert sym.ones((2,), dtype='int32').infer_type()[1] == [np.int32]
    assert sym.full((2,), 7).list_attr()['value'] == '7.0'
    assert sym.arange(0, 6, 2).infer_shape()[1] == [(3,)]
    assert sym.maximum(x, sym.var('y')).attr('op_name') == 'broadcast_maximum'
    assert sym.minimum(3, x).attr('op_name') == '_minimum_scalar'
    assert sym.pow(2, x).attr('op_name') == '_rpower_scalar'
    assert sym.power(4, 0.5) == 2.0


def test_every_registered_operator_has_a_function():
    for name, op in registry.all_ops().items():
        fn = getattr(sym, name)
        assert callable(fn) and fn.__name__ == name
        if name.startswith('_'):
            assert getattr(sym._internal, name) is fn
    assert str(inspect.signature(sym.Activation)).startswith('(data=None, act_type=None, *, '
                                                             'name=None, attr=None')
    assert '*data' in str(inspect.signature(sym.Concat))


def test_hidden_backward_operators_build_symbols():
    g = sym._internal._backward_FullyConnected(sym.var('og'), sym.var('x'), sym.var('w'),
                                                num_hidden=4, name='bwd')
    assert g.list_outputs() == ['bwd_data_grad', 'bwd_weight_grad', 'bwd_bias_grad']
    assert g.infer_shape(og=(2, 4), x=(2, 3), w=(4, 3))[1] == [(2, 3), (4, 3), (4,)]


def test_operator_argument_errors():
    x = sym.var('x')
    with pytest.raises(TypeError, match='unknown argument'):
        sym.FullyConnected(x, num_hidden=2, bogus=1)
    with pytest.raises(TypeError, match='missing required'):
        sym.FullyConnected(x)
    with pytest.raises(TypeError, match='must be a Symbol'):
        sym.relu(np.ones(2))
    with pytest.raises(ValueError, match='group'):
        sym.relu(sym.Group([x, x]))
    with pytest.raises(TypeError, match='two values'):
        sym.Activation(x, 'relu', act_type='tanh')


def test_inputs_by_keyword_and_variadic_count():
    x, w = sym.var('x'), sym.var('w')
    fc = sym.FullyConnected(data=x, weight=w, no_bias=True, num_hidden=3, name='fc')
    assert fc.list_arguments() == ['x', 'w']
    cat = sym.concat(x, w, dim=0, name='cat')
    assert cat.list_attr() == {'dim': '0', 'num_args': '2'}
    assert cat.infer_shape(x=(2, 3), w=(4, 3))[1] == [(6, 3)]
    assert sym.Concat(*[x, w], name='c2').list_arguments() == ['x', 'w']


def test_gradient_rules_build_with_symbols():
    x, y = sym.var('x'), sym.var('y')
    op = registry.get('broadcast_mul')
    out = x * y
    grads = op.gradient(sym, {}, [x, y], [out], [sym.var('og')])
    group = sym.Group(grads)
    assert group.infer_shape(x=(2, 3), y=(1, 3), og=(2, 3))[1] == [(2, 3), (1, 3)]
    bn_op = registry.get('BatchNorm')
    bn = sym.BatchNorm(sym.var('d'), name='bn')
    inputs = list(bn.get_children())
    outputs = [bn[i] for i in range(3)]
    attrs = bn_op.parse_attrs({})
    bn_grads = bn_op.gradient(sym, attrs, inputs, outputs, [sym.var('og'), None, None])
    shapes = sym.Group([g for g in bn_grads if g is not None]).infer_shape(d=(2, 3, 4),
                                                                           og=(2, 3, 4))
    assert shapes[1][:3] == [(2, 3, 4), (3,), (3,)]


# ----------------------------------------------------------------------------------------------
# Structure: children, internals, composition, copies

def test_get_internals_and_children():
    net = mlp()
    internals = net.get_internals()
    assert internals.list_outputs() == [
        'data', 'fc1_weight', 'fc1_bias', 'fc1_output', 'relu1_output', 'fc2_weight',
        'fc2_bias', 'fc2_output', 'softmax_label', 'softmax_output']
    feature = internals['relu1_output']
    assert feature.list_arguments() == ['data', 'fc1_weight', 'fc1_bias']
    assert net.get_children().list_outputs() == ['fc2_output', 'softmax_label']
    assert sym.var('x').get_children() is None
    bn_internals = sym.BatchNorm(sym.var('x'), name='bn').get_internals().list_outputs()
    assert bn_internals[-3:] == ['bn_output', 'bn_mean', 'bn_var']


def test_compose_replaces_variables():
    body = sym.FullyConnected(sym.var('data'), num_hidden=3, name='fc')
    head = sym.relu(sym.var('x'), name='pre')
    composed = body(data=head)
    assert composed.list_arguments() == ['x', 'fc_weight', 'fc_bias']
    assert body.list_arguments() == ['data', 'fc_weight', 'fc_bias']     # unchanged
    positional = body(head, sym.var('w2'))
    assert positional.list_arguments() == ['x', 'w2', 'fc_bias']
    with pytest.raises(EmberError, match='match no variable'):
        body(nothing=head)
    with pytest.raises(TypeError):
        body(head, data=head)
    in_place = sym.relu(sym.var('a'), name='r')
    in_place._compose(a=sym.var('b'))
    assert in_place.list_arguments() == ['b']


def test_compose_keeps_shared_nodes_shared():
    x = sym.var('x')
    shared = sym.relu(x, name='shared')
    both = sym.Group([shared + 1, shared * 2])
    replaced = both(x=sym.var('y'))
    graph = replaced.to_graph()
    assert [n.name for n in graph.nodes].count('shared') == 1
    assert replaced.list_arguments() == ['y']


def test_copy_pickle_and_group():
    net = conv_net()
    for other in (copy.copy(net), copy.deepcopy(net), net.copy(), pickle.loads(pickle.dumps(net))):
        assert other.tojson() == net.tojson() and other is not net
    group = sym.Group([net, sym.var('extra')])
    assert group.name is None and len(group) == 2
    assert repr(group) == '<Symbol group [softmax, extra]>'
    with pytest.raises(TypeError):
        sym.Group([])
    assert hash(net) == hash(net) and {net: 1}[net] == 1


# ----------------------------------------------------------------------------------------------
# Shape and type inference

def test_infer_shape_mlp_positional_and_keyword():
    net = mlp()
    args, outs, aux = net.infer_shape(data=(5, 10))
    assert args == [(5, 10), (16, 10), (16,), (4, 16), (4,), (5,)]
    assert outs == [(5, 4)] and aux == []
    assert net.infer_shape((5, 10)) == (args, outs, aux)
    assert net.infer_shape((5, 10), None, None) == (args, outs, aux)


def test_infer_shape_conv_net_with_batchnorm_aux_shapes():
    args, outs, aux = conv_net().infer_shape(data=(2, 3, 8, 8))
    assert args[:5] == [(2, 3, 8, 8), (8, 3, 3, 3), (8,), (8,), (8,)]
    assert args[5] == (10, 8 * 4 * 4)
    assert outs == [(2, 10)] and aux == [(8,), (8,)]


def test_infer_shape_partial_and_incomplete():
    net = mlp()
    with pytest.warns(UserWarning, match='Cannot decide shape'):
        assert net.infer_shape() == (None, None, None)
    args, outs, aux = net.infer_shape_partial()
    assert args[0] is None and outs == [None]
    weight = sym.var('w', shape=(16, 0))
    partial = sym.FullyConnected(sym.var('x'), weight, num_hidden=16, no_bias=True)
    assert partial.infer_shape_partial()[0] == [None, (16, 0)]
    args, outs, _ = net.infer_shape_partial(data=(0, 10))
    assert args[1] == (16, 10) and outs == [(0, 4)]


def test_shapes_flow_backward_to_earlier_nodes():
    # `q` is known only after the later FullyConnected fills `w`: needs the backward sweep.
    w, q, data = sym.var('w'), sym.var('q'), sym.var('data')
    net = sym.Group([sym.elemwise_add(w, q, name='add'),
                     sym.FullyConnected(data, w, no_bias=True, num_hidden=3, name='fc')])
    args, outs, _ = net.infer_shape(data=(2, 5))
    assert dict(zip(net.list_arguments(), args)) == {'w': (3, 5), 'q': (3, 5), 'data': (2, 5)}


def test_partial_variable_shape_attribute_is_completed():
    w = sym.var('w', shape=(4, 0))
    fc = sym.FullyConnected(sym.var('x'), w, num_hidden=4, no_bias=True, name='fc')
    assert fc.infer_shape(x=(2, 7))[0] == [(2, 7), (4, 7)]
    zeros = sym.zeros((1, 0, 4), name='z')          # a begin state with unknown batch
    rnn = sym.RNN(sym.var('data'), sym.var('p'), zeros, state_size=4, num_layers=1, mode='gru',
                  name='g')
    assert rnn.infer_shape(data=(5, 2, 3))[1] == [(5, 2, 4)]


def test_infer_shape_errors_name_the_node_and_the_shapes():
    fc = sym.FullyConnected(sym.var('data'), num_hidden=3, name='fc')
    with pytest.raises(ShapeError, match=r"'fc'.*\(3, 4\)"):
        fc.infer_shape(data=(2, 5), fc_weight=(3, 4))
    add = sym.elemwise_add(sym.var('a'), sym.var('b'), name='add')
    with pytest.raises(ShapeError, match=r"'add'.*\(2, 5\).*\(3, 5\)"):
        add.infer_shape(a=(2, 5), b=(3, 5))
    with pytest.raises(EmberError, match='dta'):
        fc.infer_shape(dta=(2, 5))
    with pytest.raises(TypeError, match='tuple'):
        fc.infer_shape(data=5)
    with pytest.raises(ValueError):
        fc.infer_shape((2, 5), fc_bias=(3,))


def test_infer_type():
    net = conv_net()
    args, outs, aux = net.infer_type(data='float16')
    by_name = dict(zip(net.list_arguments(), args))
    # BatchNorm keeps its parameters and statistics in float32 for float16 data, as MXNet does.
    assert by_name.pop('bn1_gamma') == by_name.pop('bn1_beta') == np.float32
    assert set(by_name.values()) == {np.float16} and outs == [np.float16]
    assert aux == [np.float32] * 2
    assert net.infer_type(np.float64)[1] == [np.float64]
    with pytest.warns(UserWarning, match='Cannot decide type'):
        assert net.infer_type() == (None, None, None)
    assert net.infer_type_partial()[1] == [None]
    typed = sym.FullyConnected(sym.var('x', dtype='float64'), num_hidden=2, name='fc')
    assert typed.infer_type()[0] == [np.float64] * 3
    assert sym.var('i', __dtype__='4').infer_type()[1] == [np.int32]      # MXNet's type flag
    assert sym.var('u', __dtype__='-1').infer_type_partial()[1] == [None]
    with pytest.raises(ValueError, match='type flag 99'):
        sym.var('b', __dtype__='99').infer_type()
    mixed = sym.elemwise_add(sym.var('a', dtype='float16'), sym.var('b', dtype='float32'),
                             name='mix')
    with pytest.raises(ShapeError, match="'mix'.*float16.*float32"):
        mixed.infer_type()


def test_inference_passes_store_per_entry_results():
    graph = conv_net().to_graph()
    options = Options(shapes={'data': (2, 3, 8, 8)}, dtypes={'data': np.float32})
    shaped = infer_shape_pass.run(graph, options)
    typed = infer_type_pass.run(shaped, options)
    assert len(typed.attrs['shape']) == graph.num_entries == len(typed.attrs['dtype'])
    bn = [i for i, n in enumerate(graph.nodes) if n.name == 'bn1'][0]
    mean_entry = graph.entry_id(ir.Entry(bn, 1))
    assert typed.attrs['shape'][mean_entry] == (8,)
    assert typed.attrs['dtype'][mean_entry] == np.float32
    assert graph.attrs == {}          # passes return new graphs


# ----------------------------------------------------------------------------------------------
# JSON

def test_fixture_from_mxnet_loads_infers_and_saves_identically(tmp_path):
    net = sym.load(str(FIXTURE))
    assert net.list_arguments() == MLP_ARGS
    assert net.list_outputs() == ['mlp_dense2_fwd_output']
    assert net.list_auxiliary_states() == []
    args, outs, aux = net.infer_shape(data=(3, 8))
    assert args == [(3, 8), (16, 8), (16,), (16, 16), (16,), (4, 16), (4,)]
    assert outs == [(3, 4)] and aux == []
    assert net.infer_type(data='float32')[1] == [np.float32]
    assert net.attr_dict()['mlp_dense0_weight']['__lr_mult__'] == '1.0'
    text = FIXTURE.read_text()
    assert net.tojson() == text                       # byte for byte as MXNet wrote it
    out = tmp_path / 'again-symbol.json'
    net.save(str(out))
    assert json.loads(out.read_text()) == json.loads(text)


def test_json_round_trip_is_identical():
    for net in (mlp(), conv_net(), sym.split(sym.var('x'), num_outputs=2, name='s')):
        text = net.tojson()
        again = sym.load_json(text)
        assert again.tojson() == text and sym.fromjson(text).tojson() == text
        assert again.list_arguments() == net.list_arguments()
        assert again.list_auxiliary_states() == net.list_auxiliary_states()


def test_json_document_layout():
    doc = json.loads(conv_net().tojson())
    assert set(doc) == {'nodes', 'arg_nodes', 'node_row_ptr', 'heads', 'attrs'}
    assert doc['attrs'] == {'mxnet_version': ['int', 10901]}
    names = [n['name'] for n in doc['nodes']]
    bn = doc['nodes'][names.index('bn1')]
    assert bn['op'] == 'BatchNorm' and len(bn['inputs']) == 5
    assert all(isinstance(v, str) for n in doc['nodes'] for v in n.get('attrs', {}).values())
    assert doc['arg_nodes'] == [i for i, n in enumerate(doc['nodes']) if n['op'] == 'null']
    # BatchNorm has three outputs, every other node one.
    assert doc['node_row_ptr'][-1] == len(doc['nodes']) + 2
    assert doc['heads'] == [[len(doc['nodes']) - 1, 0, 0]]


def test_legacy_json_with_param_and_attr_keys():
    doc = {'nodes': [
        {'op': 'null', 'param': {}, 'name': 'data', 'inputs': [], 'backward_source_id': -1},
        {'op': 'null', 'param': {}, 'name': 'fc1_weight', 'inputs': [],
         'attr': {'lr_mult': '2'}},
        {'op': 'null', 'param': {}, 'name': 'fc1_bias', 'inputs': []},
        {'op': 'FullyConnected', 'param': {'no_bias': 'False', 'num_hidden': '4'},
         'name': 'fc1', 'inputs': [[0, 0], [1, 0], [2, 0]]},
        {'op': 'null', 'param': {}, 'name': 'bn_gamma', 'inputs': []},
        {'op': 'null', 'param': {}, 'name': 'bn_beta', 'inputs': []},
        {'op': 'BatchNorm', 'param': {'eps': '0.001', 'fix_gamma': 'True'}, 'name': 'bn',
         'inputs': [[3, 0], [4, 0], [5, 0]], 'attr': {'ctx_group': 'g1'}},
    ], 'arg_nodes': [0, 1, 2, 4, 5], 'heads': [[6, 0]]}
    net = sym.load_json(json.dumps(doc))
    assert net.list_arguments() == ['data', 'fc1_weight', 'fc1_bias', 'bn_gamma', 'bn_beta']
    assert net.list_auxiliary_states() == ['bn_moving_mean', 'bn_moving_var']
    assert net.attr_dict()['fc1_weight'] == {'__lr_mult__': '2'}
    assert net.attr('ctx_group') == 'g1'
    assert net.infer_shape(data=(2, 7))[2] == [(4,), (4,)]


@pytest.mark.parametrize('text, message', [
    ('not json', 'not valid JSON'),
    ('{"nodes": []}', '"heads"'),
    ('{"nodes": [{"op": "NoSuchOp", "name": "n", "inputs": []}], "heads": [[0, 0, 0]]}',
     'NoSuchOp'),
    ('{"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "relu", "name": "r", '
     '"inputs": [[2, 0, 0]]}], "heads": [[1, 0, 0]]}', 'does not come before'),
    ('{"nodes": [{"op": "null", "name": "x", "inputs": []}], "heads": [[0, 1, 0]]}',
     'output 1'),
])
def test_bad_json_is_rejected_with_a_reason(text, message):
    with pytest.raises(EmberError, match=message):
        sym.load_json(text)


def test_json_escapes_strings():
    x = sym.var('x', __note__='say "hi"\n\tnow\\')
    assert sym.load_json(x.tojson()).attr('__note__') == 'say "hi"\n\tnow\\'


# ----------------------------------------------------------------------------------------------
# The graph IR

def test_graph_conversion_and_helpers():
    net = conv_net()
    graph = net.to_graph()
    names = [n.name for n in graph.nodes]
    assert names.index('conv1_weight') < names.index('conv1') < names.index('bn1')
    assert graph.output_names() == net.list_outputs()
    assert [graph.nodes[i].name for i in graph.aux_nodes] == net.list_auxiliary_states()
    bn = names.index('bn1')
    assert graph.node_outputs(bn) == [ir.Entry(bn, 0), ir.Entry(bn, 1), ir.Entry(bn, 2)]
    assert graph.entry_id(ir.Entry(bn, 2)) == graph.node_row_ptr[bn] + 2
    users = ir.consumers(graph)
    assert users[names.index('data')] == [(names.index('conv1'), 0)]
    assert graph.nodes[bn].user_attrs == {} and graph.nodes[bn].attrs['eps'] == pytest.approx(
        1e-3)
    back = sym.Symbol.from_graph(graph)
    assert back.tojson() == net.tojson()
    hidden = sym.Symbol.from_graph(graph, [ir.Entry(bn, 1)])
    assert hidden.list_outputs() == ['bn1_mean']


def test_node_symbols_share_nodes():
    graph = conv_net().to_graph()
    per_node = sym.node_symbols(graph)
    bn = [i for i, n in enumerate(graph.nodes) if n.name == 'bn1'][0]
    assert per_node[bn].list_outputs() == ['bn1_output', 'bn1_mean', 'bn1_var']
    combined = sym.Group([per_node[bn][1], per_node[-1]])
    assert [n.name for n in combined.to_graph().nodes].count('bn1') == 1


def test_graph_rejects_bad_entries_and_prunes():
    x = ir.Node(None, 'x')
    relu = ir.make_node(registry.get('relu'), 'r', {}, [ir.Entry(0)])
    with pytest.raises(EmberError, match='topological'):
        ir.Graph([relu, x], [ir.Entry(0)])
    with pytest.raises(EmberError, match='output 1'):
        ir.Graph([x, relu], [ir.Entry(1, 1)])
    unused = ir.Node(None, 'unused')
    graph = ir.Graph([x, unused, ir.make_node(registry.get('relu'), 'r', {}, [ir.Entry(0)])],
                     [ir.Entry(2)])
    pruned = ir.prune(graph)
    assert [n.name for n in pruned.nodes] == ['x', 'r'] and pruned.outputs == (ir.Entry(1),)
    assert ir.prune(pruned) is pruned


def test_make_node_keeps_given_parameters_as_text():
    node = ir.make_node(registry.get('FullyConnected'), 'fc', {'num_hidden': 3}, [],
                        {'lr_mult': '2'})
    assert node.attr_text == {'num_hidden': '3', '__lr_mult__': '2'}
    assert node.attrs['no_bias'] is False and node.user_attrs == {'__lr_mult__': '2'}


def test_topo_order_handles_deep_graphs():
    net = sym.var('x')
    for _ in range(3000):          # deeper than Python's recursion limit
        net = sym.relu(net)
    assert len(net.to_graph().nodes) == 3001
    assert infer_shapes(net.to_graph(), {'x': (2,)})[-1] == (2,)


def test_no_warnings_for_complete_inference():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        mlp().infer_shape(data=(2, 3))
        mlp().infer_type(data='float32')


def test_to_graph_is_built_once_and_again_after_a_change():
    x = sym.var('x')
    net = sym.relu(sym.FullyConnected(x, num_hidden=4, name='fc'), name='act')
    graph = net.to_graph()
    assert net.to_graph() is graph and net.list_arguments() == ['x', 'fc_weight', 'fc_bias']
    fc = net.get_internals()['fc_output']
    fc._set_attr(name='dense')              # renames a node `net` shares
    assert net.to_graph() is not graph
    assert net.list_arguments() == ['x', 'fc_weight', 'fc_bias']
    assert [n.name for n in net.to_graph().nodes][-2:] == ['dense', 'act']
    y = sym.var('y')
    composed = sym.exp(x, name='e')
    before = composed.to_graph()
    composed._compose(x=y * 2)
    assert composed.to_graph() is not before and 'y' in composed.list_arguments()
