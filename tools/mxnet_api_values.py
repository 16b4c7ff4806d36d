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
}


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
