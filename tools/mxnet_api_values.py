"""Values that MXNet 1.9.1 computes with the API that Ember adds, for Ember's tests to match.

    OMP_NUM_THREADS=2 ~/.cache/ember-bench/mxnet-1.9.1/bin/python tools/mxnet_api_values.py \
        [--out tests/data/mxnet-1.9.1/api_values.json]

The program is the recipe: each entry of ``CASES`` builds its inputs from fixed numbers, runs
MXNet, and records the result as lists. ``tests/test_api_values.py`` runs the same recipes on
Ember (``import ember as mx``) and compares.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / 'tests' / 'data' / 'mxnet-1.9.1' / 'api_values.json'


def _batches():
    """Two batches of binary predictions and labels."""
    preds = [np.array([[0.3, 0.7], [0.9, 0.1], [0.4, 0.6], [0.2, 0.8]]),
             np.array([[0.6, 0.4], [0.1, 0.9], [0.7, 0.3]])]
    labels = [np.array([1, 0, 0, 1]), np.array([1, 1, 0])]
    return labels, preds


def metric_value(mx, name, **kwargs):
    metric = mx.metric.create(name, **kwargs)
    labels, preds = _batches()
    for label, pred in zip(labels, preds):
        metric.update([mx.nd.array(label)], [mx.nd.array(pred)])
    return [float(metric.get()[1]), float(metric.get_global()[1])]


def pcc_value(mx):
    metric = mx.metric.PCC()
    metric.update([mx.nd.array([0, 1, 2, 2, 1])], [mx.nd.array([0, 2, 2, 1, 1])])
    metric.update([mx.nd.array([2, 0, 3])], [mx.nd.array([[0.1, 0.2, 0.7, 0.0],
                                                          [0.8, 0.1, 0.1, 0.0],
                                                          [0.1, 0.1, 0.1, 0.7]])])
    return float(metric.get()[1])


def pearson_value(mx, average):
    metric = mx.metric.PearsonCorrelation(average=average)
    metric.update([mx.nd.array([[1.0, 0.0], [0.5, 1.0]])], [mx.nd.array([[0.8, 0.1],
                                                                         [0.4, 0.7]])])
    metric.update([mx.nd.array([0.2, 0.9, 0.4])], [mx.nd.array([0.1, 1.0, 0.3])])
    return float(metric.get()[1])


def optimizer_steps(mx, name, steps=3, shape=(3, 2), **kwargs):
    """The weight after `steps` updates from fixed weights and gradients."""
    opt = mx.optimizer.create(name, **kwargs)
    weight = mx.nd.array(np.linspace(-1.0, 1.5, int(np.prod(shape))).reshape(shape))
    state = opt.create_state_multi_precision(0, weight)
    for step in range(steps):
        grad = mx.nd.array(np.cos(np.arange(weight.size) + step).reshape(shape))
        opt.update_multi_precision(0, weight, grad, state)
    return weight.asnumpy().tolist()


def sdml_value(mx):
    x1 = mx.nd.array([[0.1, 0.2, 0.3], [1.0, 0.5, -0.5], [0.0, -1.0, 0.4]])
    x2 = mx.nd.array([[0.2, 0.1, 0.3], [0.9, 0.6, -0.4], [0.3, -0.8, 0.2]])
    return mx.gluon.loss.SDMLLoss(smoothing_parameter=0.2)(x1, x2).asnumpy().tolist()


def pixel_shuffle(mx, layer, factor, shape):
    block = getattr(mx.gluon.contrib.nn, layer)(factor)
    return block(mx.nd.arange(int(np.prod(shape))).reshape(shape)).asnumpy().tolist()


def fused_rnn_init(mx, mode, bidirectional, layers, size):
    init = mx.init.FusedRNN(mx.init.Constant(0.25), num_hidden=2, num_layers=layers, mode=mode,
                            bidirectional=bidirectional, forget_bias=1.5)
    params = mx.nd.zeros((size,))
    init._init_weight(mx.init.InitDesc('parameters', global_init=mx.init.One()), params)
    return params.asnumpy().tolist()


def _filled(shape, salt):
    """Fixed values in [-0.5, 0.5] for an array of `shape`."""
    size = int(np.prod(shape))
    return (np.sin(np.arange(size) * 0.7 + salt) * 0.5).reshape(shape)


def run_symbol(mx, outputs, shapes):
    """Bind `outputs` with fixed values for every argument and run it forward."""
    group = mx.sym.Group(outputs) if isinstance(outputs, list) else outputs
    executor = group.simple_bind(mx.cpu(), grad_req='null', **shapes)
    for index, (name, array) in enumerate(sorted(executor.arg_dict.items())):
        array[:] = _filled(array.shape, index)
    executor.forward(is_train=False)
    return [out.asnumpy().tolist() for out in executor.outputs]


def rnn_unroll(mx, make_cell, layout='NTC', length=3, shape=(2, 3, 4), merge=True):
    cell = make_cell(mx)
    outputs, states = cell.unroll(length, mx.sym.var('data'), layout=layout,
                                  merge_outputs=merge)
    outputs = outputs if isinstance(outputs, list) else [outputs]
    flat_states = [s for group in states for s in (group if isinstance(group, list) else [group])]
    return run_symbol(mx, outputs + flat_states, {'data': shape})


def fused_unpacked(mx):
    cell = mx.rnn.FusedRNNCell(2, num_layers=2, mode='gru', bidirectional=True, prefix='f_')
    packed = {'f_parameters': mx.nd.array(_filled((168,), 1.0))}
    pieces = cell.unpack_weights(packed)
    again = cell.pack_weights(pieces)['f_parameters']
    return [sorted(pieces), pieces['f_r1_h2h_z_weight'].asnumpy().tolist(),
            again.asnumpy().tolist()]


def sentences(mx):
    encoded, vocab = mx.rnn.encode_sentences([['the', 'cat'], ['a', 'cat', 'sat']],
                                             invalid_label=0, start_label=0)
    # one unknown word: MXNet gives the unknown token a new id at each unknown word
    more, vocab = mx.rnn.encode_sentences([['the', 'dog']], vocab=dict(vocab), start_label=5,
                                          unknown_token='<unk>')
    return [encoded, sorted(vocab.items()), more]


def _small_cnn(mx):
    data = mx.sym.var('data')
    conv = mx.sym.Convolution(data, num_filter=4, kernel=(3, 3), stride=(2, 2), name='conv')
    act = mx.sym.Activation(mx.sym.BatchNorm(conv, name='bn'), act_type='relu', name='relu')
    pool = mx.sym.Pooling(act, kernel=(2, 2), pool_type='max', name='pool')
    fc = mx.sym.FullyConnected(mx.sym.flatten(pool, name='flat'), num_hidden=3, name='fc')
    return mx.sym.SoftmaxOutput(fc, name='softmax')


def summary_lines(mx):
    import contextlib
    import io
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        mx.viz.print_summary(_small_cnn(mx), shape={'data': (2, 3, 9, 9)}, line_length=80)
    return text.getvalue().splitlines()


class _Recorder:
    """Stands in for graphviz.Digraph: records the calls plot_network makes."""

    def __init__(self, name=None, format=None):
        self.calls = [['digraph', name, format]]

    def node(self, name, label, **attrs):
        self.calls.append(['node', name, label, sorted(attrs.items())])

    def edge(self, tail_name, head_name, **attrs):
        self.calls.append(['edge', tail_name, head_name, sorted(attrs.items())])


def plot_calls(mx):
    import types
    fake = types.ModuleType('graphviz')
    fake.Digraph = _Recorder
    saved = sys.modules.get('graphviz')
    sys.modules['graphviz'] = fake
    try:
        dot = mx.viz.plot_network(_small_cnn(mx), title='cnn', shape={'data': (2, 3, 9, 9)},
                                  node_attrs={'fontsize': '10'})
    finally:
        if saved is None:
            del sys.modules['graphviz']
        else:
            sys.modules['graphviz'] = saved
    return [[str(part) for part in call] for call in dot.calls]


def gluon_cell(mx, make_cell, shape, length=3, layout='NTC', valid_length=None):
    """Outputs and states of a Gluon cell unrolled over fixed inputs with fixed parameters
    (dropout inactive: not training)."""
    cell = make_cell(mx)
    cell.initialize()
    inputs = mx.nd.array(_filled(shape, 0.3))
    cell.unroll(length, inputs, layout=layout, merge_outputs=True)      # fix the shapes
    for index, (name, param) in enumerate(sorted(cell.collect_params().items())):
        param.set_data(mx.nd.array(_filled(param.shape, index)))
    lengths = None if valid_length is None else mx.nd.array(valid_length)
    outputs, states = cell.unroll(length, inputs, layout=layout, merge_outputs=True,
                                  valid_length=lengths)
    return [outputs.asnumpy().tolist()] + [s.asnumpy().tolist() for s in states]


def dynamic(mx):
    cell = mx.gluon.rnn.GRUCell(3, input_size=2, prefix='d_')
    cell.initialize()
    for index, (name, param) in enumerate(sorted(cell.collect_params().items())):
        param.set_data(mx.nd.array(_filled(param.shape, index)))
    inputs = mx.nd.array(_filled((4, 2, 2), 0.5))
    outputs, states = mx.gluon.contrib.rnn.rnn_cell.dynamic_unroll(
        cell, inputs, cell.begin_state(batch_size=2), valid_length=mx.nd.array([4, 2]))
    return [outputs.asnumpy().tolist()] + [s.asnumpy().tolist() for s in states]


def _contrib_rnn(mx):
    return mx.gluon.contrib.rnn


ZOO_MODELS = ['alexnet', 'densenet121', 'densenet161', 'densenet169', 'densenet201',
              'inception_v3', 'mobilenet0_25', 'mobilenet0_5', 'mobilenet0_75', 'mobilenet1_0',
              'mobilenet_v2_0_25', 'mobilenet_v2_0_5', 'mobilenet_v2_0_75', 'mobilenet_v2_1_0',
              'resnet101_v1', 'resnet101_v2', 'resnet152_v1', 'resnet152_v2', 'resnet18_v1',
              'resnet18_v2', 'resnet34_v1', 'resnet34_v2', 'resnet50_v1', 'resnet50_v2',
              'squeezenet1_0', 'squeezenet1_1', 'vgg11', 'vgg11_bn', 'vgg13', 'vgg13_bn', 'vgg16',
              'vgg16_bn', 'vgg19', 'vgg19_bn']


def zoo_layout(mx, build):
    """A model's parameters, by name and shape (0 where the shape waits for data): their
    count and a SHA-1 of the sorted list."""
    import hashlib
    net = build(mx.gluon.model_zoo.vision)
    params = sorted((name, tuple(p.shape or ())) for name, p in net.collect_params().items())
    return [len(params), hashlib.sha1(repr(params).encode()).hexdigest()]


ZOO_CASES = {f'model_zoo {name}': (lambda name: lambda mx: zoo_layout(
    mx, lambda vision: getattr(vision, name)(prefix='net_')))(name) for name in ZOO_MODELS}
ZOO_CASES.update({
    'model_zoo get_resnet': lambda mx: zoo_layout(
        mx, lambda vision: vision.get_resnet(2, 34, prefix='net_')),
    'model_zoo get_vgg': lambda mx: zoo_layout(
        mx, lambda vision: vision.get_vgg(13, batch_norm=True, prefix='net_')),
    'model_zoo get_mobilenet': lambda mx: zoo_layout(
        mx, lambda vision: vision.get_mobilenet(0.75, prefix='net_')),
    'model_zoo get_mobilenet_v2': lambda mx: zoo_layout(
        mx, lambda vision: vision.get_mobilenet_v2(0.5, prefix='net_')),
    'model_zoo get_squeezenet': lambda mx: zoo_layout(
        mx, lambda vision: vision.squeezenet.get_squeezenet('1.1', prefix='net_')),
    'model_zoo get_densenet': lambda mx: zoo_layout(
        mx, lambda vision: vision.densenet.get_densenet(169, prefix='net_')),
    'model_zoo get_model': lambda mx: zoo_layout(
        mx, lambda vision: vision.get_model('resnet50_v2', classes=10, prefix='net_')),
})


CASES = {
    'metric f1 macro': lambda mx: metric_value(mx, 'f1'),
    'metric f1 micro': lambda mx: metric_value(mx, 'f1', average='micro'),
    'metric mcc macro': lambda mx: metric_value(mx, 'mcc'),
    'metric mcc micro': lambda mx: metric_value(mx, 'mcc', average='micro'),
    'metric nll': lambda mx: metric_value(mx, 'nll_loss'),
    'metric pcc': pcc_value,
    'metric pearsonr macro': lambda mx: pearson_value(mx, 'macro'),
    'metric pearsonr micro': lambda mx: pearson_value(mx, 'micro'),
    'optimizer lars': lambda mx: optimizer_steps(mx, 'lars', learning_rate=0.1, momentum=0.9,
                                                 eta=0.01, wd=0.01),
    'optimizer lars plain': lambda mx: optimizer_steps(mx, 'lars', learning_rate=0.2,
                                                       eta=0.5, eps=0.1),
    'optimizer lbsgd linear': lambda mx: optimizer_steps(
        mx, 'lbsgd', steps=6, learning_rate=0.1, momentum=0.5, batch_scale=2,
        warmup_epochs=1, updates_per_epoch=4),
    'optimizer lbsgd lars': lambda mx: optimizer_steps(
        mx, 'lbsgd', steps=4, learning_rate=0.1, batch_scale=2, warmup_strategy='lars',
        wd=0.001),
    # (MXNet's DCASGD with momentum fails: it tests the momentum array's truth value.)
    'optimizer dcasgd': lambda mx: optimizer_steps(mx, 'dcasgd', learning_rate=0.1, lamda=0.5,
                                                   wd=0.01),
    'optimizer dcasgd plain': lambda mx: optimizer_steps(mx, 'dcasgd', learning_rate=0.1,
                                                         clip_gradient=0.5),
    'optimizer test': lambda mx: optimizer_steps(mx, 'test', rescale_grad=0.5),
    'optimizer groupadagrad': lambda mx: optimizer_steps(mx, 'groupadagrad',
                                                         learning_rate=0.3),
    'loss sdml': sdml_value,
    'pixelshuffle 1d': lambda mx: pixel_shuffle(mx, 'PixelShuffle1D', 3, (1, 6, 2)),
    'pixelshuffle 2d': lambda mx: pixel_shuffle(mx, 'PixelShuffle2D', (2, 3), (1, 12, 2, 1)),
    'pixelshuffle 3d': lambda mx: pixel_shuffle(mx, 'PixelShuffle3D', (1, 2, 2), (1, 8, 1, 2, 1)),
    'init fusedrnn lstm': lambda mx: fused_rnn_init(mx, 'lstm', False, 1, 40),
    'init fusedrnn gru bidirectional': lambda mx: fused_rnn_init(mx, 'gru', True, 2, 168),
    'init fusedrnn tanh': lambda mx: fused_rnn_init(mx, 'rnn_tanh', False, 2, 26),
    'rnn lstm': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.LSTMCell(3, prefix='l_')),
    'rnn gru tnc': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.GRUCell(3, prefix='g_'),
                                         layout='TNC', merge=False, shape=(3, 2, 4)),
    'rnn relu': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.RNNCell(3, activation='relu')),
    'rnn fused lstm': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.FusedRNNCell(
        3, num_layers=2, mode='lstm', get_next_state=True, prefix='fl_'), layout='TNC',
        shape=(3, 2, 4)),
    'rnn fused gru bidirectional': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.FusedRNNCell(
        2, mode='gru', bidirectional=True, get_next_state=True, prefix='fg_')),
    'rnn unfused gru bidirectional': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.FusedRNNCell(
        2, mode='gru', bidirectional=True, prefix='fg_').unfuse()),
    'rnn bidirectional': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.BidirectionalCell(
        mx.rnn.LSTMCell(2, prefix='bl_'), mx.rnn.GRUCell(2, prefix='br_'))),
    'rnn stack residual': lambda mx: rnn_unroll(mx, _residual_stack),
    'rnn conv lstm': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.ConvLSTMCell(
        (2, 1, 3, 3), 2, prefix='cl_'), shape=(2, 3, 1, 3, 3)),
    'rnn conv gru': lambda mx: rnn_unroll(mx, lambda mx: mx.rnn.ConvGRUCell(
        (2, 1, 3, 3), 2, i2h_kernel=(1, 1), i2h_pad=(0, 0), prefix='cg_'),
        shape=(2, 3, 1, 3, 3)),
    'rnn fused unpack': fused_unpacked,
    'rnn encode sentences': sentences,
    'viz print_summary': summary_lines,
    'viz plot_network': plot_calls,
    **ZOO_CASES,
    'gluon contrib conv1d rnn': lambda mx: gluon_cell(mx, lambda mx: _contrib_rnn(
        mx).Conv1DRNNCell((2, 5), 3, 3, 3, i2h_pad=1, prefix='c1_'), (2, 3, 2, 5)),
    'gluon contrib conv2d lstm': lambda mx: gluon_cell(mx, lambda mx: _contrib_rnn(
        mx).Conv2DLSTMCell((2, 4, 4), 2, (3, 3), (3, 3), i2h_pad=(1, 1), prefix='c2_'),
        (2, 3, 2, 4, 4)),
    # (MXNet's CPU convolution takes no NHWC data: channels-first only here)
    'gluon contrib conv2d gru': lambda mx: gluon_cell(mx, lambda mx: _contrib_rnn(
        mx).Conv2DGRUCell((2, 4, 4), 2, (1, 1), (3, 3), prefix='c3_'), (2, 3, 2, 4, 4)),
    'gluon contrib conv3d gru': lambda mx: gluon_cell(mx, lambda mx: _contrib_rnn(
        mx).Conv3DGRUCell((1, 2, 3, 3), 2, 3, 1, i2h_pad=1, prefix='c4_'),
        (1, 3, 1, 2, 3, 3)),
    'gluon contrib lstmp': lambda mx: gluon_cell(mx, lambda mx: _contrib_rnn(
        mx).LSTMPCell(5, 3, input_size=4, prefix='p_'), (2, 3, 4),
        valid_length=[3, 1]),
    'gluon contrib variational dropout': lambda mx: gluon_cell(mx, lambda mx: _contrib_rnn(
        mx).VariationalDropoutCell(mx.gluon.rnn.LSTMCell(3, prefix='v_'), 0.3, 0.0, 0.5),
        (2, 3, 4)),
    'gluon contrib dynamic unroll': dynamic,
}


def _residual_stack(mx):
    stack = mx.rnn.SequentialRNNCell()
    stack.add(mx.rnn.LSTMCell(4, prefix='s0_'))
    stack.add(mx.rnn.ResidualCell(mx.rnn.GRUCell(4, prefix='s1_')))
    stack.add(mx.rnn.ZoneoutCell(mx.rnn.RNNCell(4, prefix='s2_'), 0.0, 0.0))
    return stack


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--out', type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    import mxnet as mx
    values = {name: case(mx) for name, case in CASES.items()}
    args.out.write_text(json.dumps({'mxnet_version': mx.__version__, 'values': values},
                                   indent=1) + '\n')
    print(f'{len(values)} values -> {args.out}', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
