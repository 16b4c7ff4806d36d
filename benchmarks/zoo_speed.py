"""Images per second of the performance guide's networks, for inference and for training.

    PYTHONPATH=. python benchmarks/zoo_speed.py [--networks resnet50_v1,inceptionv3]
        [--batch-sizes 1,8,32] [--modes inference,training] [--warmup 2] [--batches 10]
        [--cell-seconds 60] [--budget 1800] [--hybridize] [--gpu] [--quick]

Networks come from Ember's model zoo with random weights: alexnet, vgg16, inceptionbn,
inceptionv3, resnet50_v1 and resnet152_v1 (the columns of the guide's tables, "Some Tips for
Improving Performance"), on 224x224 images (299x299 for inceptionv3). Inference runs the
forward pass in prediction mode, as benchmark_score.py does; training runs forward, softmax
cross-entropy, backward and an SGD step with momentum under ``autograd.record()``.

Each cell runs `warmup` untimed batches (the first also finishes the deferred parameter
initialization), then timed batches until `batches` are done or `cell-seconds` have passed
(at least one); a cell reports batch / the median step time. Cells left when the whole run
has used `budget` seconds print '-'.
``--quick`` is ``--warmup 1 --batches 3 --cell-seconds 20``.

The tables are printed as in the guide: one row per batch size, one column per network.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ember as mx
from ember import autograd, config, gluon

NETWORKS = {                      # zoo name: (column title, input size)
    'alexnet': ('Alexnet', 224),
    'vgg16': ('VGG 16', 224),
    'inceptionbn': ('Inception-BN', 224),
    'inceptionv3': ('Inception-v3', 299),
    'resnet50_v1': ('Resnet 50', 224),
    'resnet152_v1': ('Resnet 152', 224),
}
CLASSES = 1000


def build(name, device, hybridize):
    net = mx.gluon.model_zoo.vision.get_model(name, classes=CLASSES)
    net.initialize(mx.init.Xavier(), ctx=device)
    if hybridize:
        net.hybridize(static_alloc=True, static_shape=True)
    return net


def inference_step(net, data):
    def step():
        with autograd.predict_mode():
            net(data).wait_to_read()
    return step


def training_step(net, data, label):
    trainer = gluon.Trainer(net.collect_params(), 'sgd',
                            {'learning_rate': 0.01, 'momentum': 0.9, 'wd': 1e-4})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(data.shape[0])
        mx.nd.waitall()
    return step


def images_per_second(step, batch, warmup, batches, cell_seconds):
    """batch / the median time of one step: the median shrugs off the odd step slowed by
    another process on a shared machine."""
    for _ in range(warmup):
        step()
    times, start = [], time.perf_counter()
    while len(times) < batches and time.perf_counter() - start <= cell_seconds:
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return batch / statistics.median(times)


def measure(net, name, mode, batch, device, args):
    size = NETWORKS[name][1]
    rng = np.random.default_rng(0)
    data = mx.nd.array(rng.standard_normal((batch, 3, size, size)), ctx=device)
    if mode == 'inference':
        step = inference_step(net, data)
    else:
        label = mx.nd.array(rng.integers(0, CLASSES, batch), ctx=device)
        step = training_step(net, data, label)
    return images_per_second(step, batch, args.warmup, args.batches, args.cell_seconds)


def run_table(mode, args, device, deadline):
    """{(batch, network): img/s or None when the budget ran out}, printing each cell."""
    results = {}
    for name in args.networks:
        net = build(name, device, args.hybridize) if time.perf_counter() < deadline else None
        for batch in args.batch_sizes:
            if time.perf_counter() > deadline:
                results[batch, name] = None
                continue
            results[batch, name] = measure(net, name, mode, batch, device, args)
            print(f'  {mode:<9} {name:<13} batch {batch:>3}: '
                  f'{results[batch, name]:8.2f} img/s', flush=True)
    return results


def print_table(title, results, args):
    titles = [NETWORKS[name][0] for name in args.networks]
    print(f'\n{title}\n')
    print('| Batch | ' + ' | '.join(titles) + ' |')
    print('|-------|' + '|'.join('-' * (len(t) + 2) for t in titles) + '|')
    for batch in args.batch_sizes:
        cells = [results[batch, name] for name in args.networks]
        text = [f'{c:.2f}' if c is not None else '-' for c in cells]
        print(f'| {batch:<5} | ' + ' | '.join(f'{t:<{len(h)}}' for t, h in zip(text, titles))
              + ' |')


def _names(text):
    names = [n.strip() for n in text.split(',') if n.strip()]
    unknown = [n for n in names if n not in NETWORKS]
    if unknown:
        raise argparse.ArgumentTypeError(f'unknown networks {unknown}; choose from '
                                         f'{", ".join(NETWORKS)}')
    return names


def _ints(text):
    return [int(v) for v in text.split(',') if v.strip()]


def _modes(text):
    modes = [m.strip() for m in text.split(',') if m.strip()]
    if not set(modes) <= {'inference', 'training'}:
        raise argparse.ArgumentTypeError(f'modes {modes}: expected inference and/or training')
    return modes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--networks', type=_names, default=list(NETWORKS))
    parser.add_argument('--batch-sizes', type=_ints, default=[1, 8, 32])
    parser.add_argument('--modes', type=_modes, default=['inference', 'training'])
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--batches', type=int, default=10)
    parser.add_argument('--cell-seconds', type=float, default=60.0)
    parser.add_argument('--budget', type=float, default=1800.0,
                        help='seconds for the whole run; later cells print -')
    parser.add_argument('--hybridize', action='store_true')
    parser.add_argument('--gpu', action='store_true', help='run on mx.gpu(0)')
    parser.add_argument('--quick', action='store_true')
    args = parser.parse_args(argv)
    if args.quick:
        args.warmup, args.batches, args.cell_seconds = 1, 3, 20.0
    return args


def main(argv=None):
    args = parse_args(argv)
    device = mx.gpu(0) if args.gpu else mx.cpu()
    print(f'Ember on {device}, {config.cpu_count()} CPU cores, engine '
          f'{config.get("MXNET_ENGINE_TYPE")}, float32, '
          f'{"hybridized" if args.hybridize else "imperative"}; warm-up {args.warmup}, '
          f'up to {args.batches} timed batches or {args.cell_seconds:g} s per cell')
    deadline = time.perf_counter() + args.budget
    tables = {mode: run_table(mode, args, device, deadline) for mode in args.modes}
    for mode, results in tables.items():
        print_table(f'{mode.capitalize()} (images per second):', results, args)


if __name__ == '__main__':
    main()
