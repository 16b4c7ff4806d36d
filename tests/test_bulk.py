"""Bulk segmentation: which operators run as one engine push, under each variable."""
import pytest

import ember as mx
from ember import config
from ember.passes import bulk, gradient
from ember.passes.options import Options


def mlp():
    net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=8, name='fc1')
    net = mx.sym.Activation(net, act_type='relu', name='relu1')
    net = mx.sym.FullyConnected(net, num_hidden=3, name='fc2')
    return mx.sym.SoftmaxOutput(net, name='sm')


def sizes(graph, backward):
    return [len(s.nodes) for s in graph.attrs['segments'] if s.backward == backward]


def covered(graph):
    return [p for s in graph.attrs['segments'] for p in s.nodes]


def operators(graph):
    return [p for p, node in enumerate(graph.nodes) if node.op is not None]


def test_inference_graph_is_one_segment_unless_turned_off():
    graph = mlp().to_graph()
    segments = bulk.run(graph).attrs['segments']
    assert [s.name for s in segments] == ['bulk[FullyConnected,Activation,FullyConnected,'
                                          'SoftmaxOutput]']
    with config.override(MXNET_EXEC_BULK_EXEC_INFERENCE=False):
        single = bulk.run(graph).attrs['segments']
    assert [s.name for s in single] == ['FullyConnected', 'Activation', 'FullyConnected',
                                        'SoftmaxOutput']
    assert covered(bulk.run(graph)) == operators(graph)


def test_training_graph_segments_forward_and_backward_apart():
    graph = gradient.with_gradients(mlp().to_graph())
    forward = graph.attrs['gradient'].num_forward_nodes
    with config.override(MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN=3):
        segmented = bulk.run(graph)
    assert sizes(segmented, False) == [3, 1] and sizes(segmented, True) == [3, 2]
    for segment in segmented.attrs['segments']:
        assert all((p >= forward) == segment.backward for p in segment.nodes)
    assert covered(segmented) == operators(graph)


def test_forward_and_backward_sizes_have_their_own_variables():
    graph = gradient.with_gradients(mlp().to_graph())
    with config.override(MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD=4,
                         MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD=2):
        segmented = bulk.run(graph)
    assert sizes(segmented, False) == [4] and sizes(segmented, True) == [2, 2, 1]


@pytest.mark.parametrize('overrides', [{'MXNET_EXEC_BULK_EXEC_TRAIN': False},
                                       {'MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN': 0},
                                       {'MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN': 1}])
def test_training_bulk_off_runs_one_operator_per_segment(overrides):
    graph = gradient.with_gradients(mlp().to_graph())
    with config.override(**overrides):
        segments = bulk.run(graph).attrs['segments']
    assert all(len(s.nodes) == 1 for s in segments)
    assert len(segments) == len(operators(graph))


def test_the_rule_follows_the_graph_not_the_training_flag():
    # as in MXNet: a forward pass in training mode without gradients bulks as inference
    graph = mlp().to_graph()
    with config.override(MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN=3):
        assert sizes(bulk.run(graph, Options(is_train=True)), False) == [4]
        assert sizes(bulk.run(gradient.with_gradients(graph)), False) == [3, 1]
    with config.override(MXNET_EXEC_BULK_EXEC_INFERENCE=False):
        assert sizes(bulk.run(graph, Options(is_train=True)), False) == [1, 1, 1, 1]
