"""The gradient pass: the backward graph built from the registry's gradient rules with mx.sym."""
import numpy as np
import pytest

import ember as mx
import ember.executor  # noqa: F401  (attaches Symbol.bind)
from ember import autograd
from ember.base import EmberError
from ember.passes import gradient, infer_shape, infer_type
from ember.passes.options import Options


def ops(graph, start=0):
    return [node.op.name for node in graph.nodes[start:] if node.op is not None]


def test_outputs_are_forward_outputs_then_one_gradient_per_argument():
    x, w = mx.sym.var('x'), mx.sym.var('w')
    net = mx.sym.FullyConnected(x, w, num_hidden=2, no_bias=True, name='fc')
    full = gradient.with_gradients(infer_shape.run(net.to_graph(), Options(shapes={'x': (3, 4)})),
                                   ['w', 'x'])
    info = full.attrs['gradient']
    assert info.wrt == ('w', 'x') and info.grad_req == ('write', 'write')
    assert full.output_names() == ['fc_output', 'fc_backward_fullyconnected_weight_grad',
                                   'fc_backward_fullyconnected_data_grad']
    assert [n.name for n in full.nodes[:info.num_forward_nodes]] == ['x', 'w', 'fc']
    head = full.nodes[[n.name for n in full.nodes].index('fc_output_head_grad')]
    assert head.attr_text['__shape__'] == '(3, 2)'
    assert info.head_grads == ((0, 'fc_output_head_grad'),)
    assert full.attrs['num_forward_outputs'] == 1


def test_null_arguments_and_auxiliary_states_get_no_gradient():
    net = mx.sym.BatchNorm(mx.sym.var('x'), name='bn')
    full = gradient.with_gradients(net.to_graph(), grad_req={'x': 'write', 'bn_gamma': 'null',
                                                             'bn_beta': 'add'})
    assert full.attrs['gradient'].wrt == ('x', 'bn_beta')
    assert full.attrs['gradient'].grad_req == ('write', 'add')
    with pytest.raises(EmberError, match=r"\['bn_moving_mean'\] are not arguments"):
        gradient.with_gradients(net.to_graph(), ['bn_moving_mean'])


def test_contributions_are_summed_and_unused_arguments_get_zeros():
    x, unused = mx.sym.var('x'), mx.sym.var('unused')
    twice = mx.sym.Group([x * x, unused * 0])
    full = gradient.with_gradients(twice.to_graph(), ['x'])
    assert 'elemwise_add' in ops(full)
    three = gradient.with_gradients(mx.sym.Group([x + x + x]).to_graph(), ['x'])
    assert 'add_n' in ops(three)
    lonely = gradient.with_gradients(mx.sym.Group([x * 2, unused]).to_graph(), ['unused'])
    assert lonely.output_names()[-1] == 'unused_head_grad'     # the output's head gradient
    alone = gradient.with_gradients(mx.sym.exp(x).to_graph(), ['x'])
    dead = gradient.with_gradients(mx.sym.Group([mx.sym.exp(x), unused]).to_graph(),
                                   ['x', 'unused'])
    assert ops(dead)[-1] == ops(alone)[-1]


def test_zero_gradient_for_an_argument_no_output_depends_on_through_an_operator():
    x, label = mx.sym.var('x'), mx.sym.var('label')
    full = gradient.with_gradients(mx.sym.SoftmaxOutput(x, label, name='sm').to_graph())
    assert full.output_names()[-1] == 'label_zero_grad_output'


def test_only_the_needed_rules_are_applied():
    a, b, c = mx.sym.var('a'), mx.sym.var('b'), mx.sym.var('c')
    net = a * b + mx.sym.shuffle(c)          # shuffle has no gradient
    full = gradient.with_gradients(net.to_graph(), ['a'])
    forward = full.attrs['gradient'].num_forward_nodes
    assert 'shuffle' not in ops(full, forward)
    with pytest.raises(EmberError, match=r"'shuffle\d*' \(_shuffle\) has no gradient"):
        gradient.with_gradients(net.to_graph(), ['c'])


def test_gradients_match_autograd():
    x, y = mx.sym.var('x'), mx.sym.var('y')
    net = mx.sym.sin(x) * y + mx.sym.exp(x * y) / 3 + x * x
    values = {'x': np.array([0.1, -0.5, 0.7], np.float32),
              'y': np.array([1.5, 0.3, -0.2], np.float32)}
    head = np.array([1.0, -2.0, 0.5], np.float32)
    exe = net.simple_bind(mx.cpu(), x=(3,), y=(3,))
    exe.forward(is_train=True, **{k: mx.nd.array(v) for k, v in values.items()})
    exe.backward(mx.nd.array(head))
    arrays = {k: mx.nd.array(v) for k, v in values.items()}
    for array in arrays.values():
        array.attach_grad()
    with autograd.record():
        out = (mx.nd.sin(arrays['x']) * arrays['y'] + mx.nd.exp(arrays['x'] * arrays['y']) / 3
               + arrays['x'] * arrays['x'])
    out.backward(mx.nd.array(head))
    for name, array in arrays.items():
        np.testing.assert_allclose(exe.grad_dict[name].asnumpy(), array.grad.asnumpy(),
                                   rtol=1e-5, err_msg=name)


def test_shapes_and_dtypes_of_the_backward_graph_are_inferred():
    net = mx.sym.FullyConnected(mx.sym.var('x'), num_hidden=5, name='fc')
    options = Options(shapes={'x': (2, 3)}, dtypes={'x': 'float16'})
    graph = infer_type.run(infer_shape.run(net.to_graph(), options), options)
    full = gradient.with_gradients(graph)
    shapes = infer_shape.run(full, Options(shapes={'x': (2, 3)})).attrs['shape']
    dtypes = infer_type.run(full, Options(dtypes={'x': 'float16'})).attrs['dtype']
    grads = full.outputs[1:]
    assert [shapes[full.entry_id(e)] for e in grads] == [(2, 3), (5, 3), (5,)]
    assert {dtypes[full.entry_id(e)].name for e in grads} == {'float16'}


def test_same_shape_reductions_are_dropped_when_shapes_are_known():
    a, b, bias = mx.sym.var('a'), mx.sym.var('b'), mx.sym.var('bias')
    net = mx.sym.broadcast_add(mx.sym.broadcast_add(a, b), bias, name='out')
    shapes = {'a': (2, 3), 'b': (2, 3), 'bias': (1, 3)}
    graph = gradient.with_gradients(infer_shape.run(net.to_graph(), Options(shapes=shapes)))
    reductions = [n for n in graph.nodes if n.op is not None and n.op.name == '_reduce_to_shape']
    # a and b have the output's shape: their gradients are the head gradient itself;
    # the broadcast bias still sums over the batch
    assert [graph.nodes[n.inputs[1].node].name for n in reductions] == ['bias']
    forward = {graph.entry_id(e) for e in graph.outputs[1:]}
    assert len(forward) == 2              # a's and b's gradient are one entry
    unshaped = gradient.with_gradients(net.to_graph())
    assert sum(n.op is not None and n.op.name == '_reduce_to_shape'
               for n in unshaped.nodes) == 4
