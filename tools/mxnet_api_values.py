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


def _estimator(mx, loss=None, lr=0.5):
    """A Dense(2) classifier of 24 fixed examples, its Estimator and data loader."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 4)).astype('float32')
    y = (x[:, 0] > 0).astype('float32')
    loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(x, y), batch_size=8)
    net = mx.gluon.nn.Dense(2)
    net.initialize(mx.init.Constant(0.1))
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': lr})
    estimator = mx.gluon.contrib.estimator.Estimator(
        net, loss or mx.gluon.loss.SoftmaxCrossEntropyLoss(), trainer=trainer)
    return estimator, loader


def _log_of(estimator):
    """Route the estimator's log into a list of lines, with durations masked."""
    import io
    import re
    stream = io.StringIO()
    estimator.logger.handlers[0].stream = stream
    return lambda: [re.sub(r'\d+(\.\d+)?s\b', '?s', line)
                    for line in stream.getvalue().splitlines()]


def estimator_fit(mx):
    """fit for two epochs with validation, logging every two batches."""
    estimator, loader = _estimator(mx)
    lines = _log_of(estimator)
    handler = mx.gluon.contrib.estimator.LoggingHandler(log_interval=2,
                                                         metrics=estimator.train_metrics)
    estimator.fit(loader, val_data=loader, epochs=2, event_handlers=[handler])
    return [lines(), [list(m.get()) for m in estimator.train_metrics + estimator.val_metrics]]


def estimator_handlers(mx):
    """fit with checkpoints (the best kept) and early stopping on validation accuracy."""
    import os
    import tempfile
    contrib = mx.gluon.contrib.estimator
    estimator, loader = _estimator(mx, lr=2.0)
    lines = _log_of(estimator)
    accuracy = estimator.val_metrics[0]
    with tempfile.TemporaryDirectory() as folder:
        checkpoints = contrib.CheckpointHandler(folder, 'net', monitor=accuracy, save_best=True,
                                                mode='max', max_checkpoints=2, verbose=1)
        stopping = contrib.EarlyStoppingHandler(accuracy, patience=1, mode='max')
        estimator.fit(loader, val_data=loader, epochs=8,
                      event_handlers=[checkpoints, stopping, contrib.MetricHandler(
                          estimator.train_metrics), contrib.ValidationHandler(
                          loader, estimator.evaluate), contrib.GradientUpdateHandler()])
        files = sorted(os.listdir(folder))
    # MXNet 1.9.1 logs the new best as the old one and the batch count as the epoch in its
    # "improved" lines; Ember logs what they say, so those lines are left out
    masked = [line.replace(folder, '<dir>') for line in lines() if 'improve' not in line]
    return [masked, files, stopping.stopped_epoch, float(stopping.best)]


def estimator_batches(mx):
    """fit for 5 batches (across epochs), then evaluate with a custom batch processor."""
    contrib = mx.gluon.contrib.estimator

    class Doubled(contrib.BatchProcessor):
        def evaluate_batch(self, estimator, val_batch, batch_axis=0):
            data, label, pred, loss = super().evaluate_batch(estimator, val_batch, batch_axis)
            return data, label, [2 * p for p in pred], loss

    estimator, loader = _estimator(mx)
    estimator.logger.setLevel('ERROR')
    estimator.fit(loader, batches=5)
    trained = [list(m.get()) for m in estimator.train_metrics]
    estimator.batch_processor = Doubled()
    estimator.evaluate(loader)
    return [trained, [list(m.get()) for m in estimator.val_metrics],
            estimator.net.weight.data().asnumpy().tolist()]


IMAGES = ROOT / 'tests' / 'data' / 'image-mxnet' / 'images'


def _float_image(mx, shape):
    return mx.nd.array(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 17)


def image_rotations(mx):
    """imrotate of one image and of a batch (one angle each), zoomed in and out."""
    one = _float_image(mx, (2, 5, 7))
    batch = _float_image(mx, (2, 1, 4, 6))
    angles = mx.nd.array([30.0, -45.0])
    transforms = mx.gluon.data.vision.transforms
    results = [mx.image.imrotate(one, 20).asnumpy(),
               mx.image.imrotate(batch, angles).asnumpy(),
               mx.image.imrotate(batch, angles, zoom_in=True).asnumpy(),
               mx.image.imrotate(batch, 90, zoom_out=True).asnumpy(),
               transforms.Rotate(-60, zoom_out=True)(one).asnumpy()]
    np.random.seed(4)
    results.append(mx.image.random_rotate(batch, (-30, 50)).asnumpy())
    randomly = transforms.RandomRotation((-20, 40), zoom_in=True, rotate_with_proba=0.6)
    results += [randomly(one).asnumpy() for _ in range(4)]
    return [r.tolist() for r in results]


def _boxes():
    return np.array([[0, 0.1, 0.2, 0.5, 0.7], [1, 0.4, 0.1, 0.9, 0.6],
                     [2, 0.05, 0.5, 0.3, 0.95]])


def detection_augmenters(mx):
    """Each detection augmenter on a 30 x 40 image and three boxes, after random.seed."""
    import random
    det = mx.image.det
    image = mx.nd.array(np.arange(30 * 40 * 3).reshape(30, 40, 3) % 251, dtype='uint8')
    augmenters = [det.DetHorizontalFlipAug(0.7), det.DetRandomCropAug(0.3),
                  det.DetRandomPadAug(pad_val=(10, 20, 30)),
                  det.DetRandomSelectAug([det.DetRandomCropAug(), det.DetRandomPadAug()], 0.2),
                  det.CreateMultiRandCropAugmenter([0.1, 0.5], area_range=[(0.1, 1.0),
                                                                            (0.3, 0.9)]),
                  det.DetBorrowAug(mx.image.ForceResizeAug((20, 16), interp=1))]
    random.seed(7)
    np.random.seed(7)
    out = []
    for aug in augmenters:
        for _ in range(3):
            src, label = aug(image, _boxes())
            pixels = src.asnumpy().astype(np.float64)
            out.append([list(src.shape), float(pixels.sum()), np.round(label, 5).tolist()])
    return [out, [json.loads(a) if isinstance(a, str) else a
                  for a in (aug.dumps() for aug in augmenters)]]


def image_crops(mx):
    """random_crop, random_size_crop, RandomOrderAug and copyMakeBorder's positional options
    on a 30 x 40 image, after seeding Python's and NumPy's generators."""
    import random
    image = mx.nd.array(np.arange(30 * 40 * 3).reshape(30, 40, 3) % 251, dtype='uint8')
    random.seed(5)
    np.random.seed(5)
    out = []
    for _ in range(3):
        crop, box = mx.image.random_crop(image, (16, 12), interp=1)
        out.append([float(crop.asnumpy().astype(np.float64).sum()), list(box)])
        crop, box = mx.image.random_size_crop(image, (20, 20), (0.2, 0.9), (0.5, 2.0),
                                              interp=1)
        out.append([float(crop.asnumpy().astype(np.float64).sum()), list(box)])
    order = mx.image.RandomOrderAug([mx.image.BrightnessJitterAug(0.5),
                                     mx.image.ContrastJitterAug(0.5)])
    floats = image.astype('float32')
    out.append(float(order(floats).asnumpy().astype(np.float64).sum()))
    padded = mx.image.image.copyMakeBorder(image, 1, 2, 3, 0, 0, 9.0)
    out.append([list(padded.shape), padded.asnumpy()[0, :5, 0].tolist()])
    return out


def detection_iter(mx):
    """ImageDetIter over six images with one to three boxes each: two epochs of batches of 4
    with mirroring, cropping and padding drawn after random.seed (nearest resizing)."""
    import random
    boxes = _boxes()
    names = ['cat/a.png', 'cat/b.png', 'cat/c.png', 'dog/d.png', 'dog/e.png', 'dog/f.png']
    imglist = [[[2, 5] + boxes[:1 + i % 3].ravel().tolist(), name]
               for i, name in enumerate(names)]
    random.seed(3)
    it = mx.image.ImageDetIter(4, (3, 24, 24), imglist=imglist, path_root=str(IMAGES),
                               rand_mirror=True, rand_crop=0.5, rand_pad=0.5, inter_method=0)
    shapes = [list(it.provide_data[0][1]), list(it.provide_label[0][1])]
    batches = []
    for _ in range(2):
        for batch in it:
            data = batch.data[0].asnumpy().astype(np.float64)
            batches.append([batch.pad, data.sum(axis=(2, 3)).round(2).tolist(),
                            np.round(batch.label[0].asnumpy(), 5).tolist()])
        it.reset()
    return [shapes, batches]


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
    'estimator fit': estimator_fit,
    'estimator handlers': estimator_handlers,
    'estimator batches': estimator_batches,
    'image rotations': image_rotations,
    'image detection augmenters': detection_augmenters,
    'image detection iter': detection_iter,
    'image crops': image_crops,
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
