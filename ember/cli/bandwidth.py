"""Measure a KVStore's communication time and bandwidth for a network's gradients.

    python -m ember bandwidth --network resnet50_v1 --kvstore dist_sync -n 2

Like MXNet's tools/bandwidth: the store gets one key per parameter of the network (shapes from
the model zoo), and each batch pushes every gradient and pulls the result, as a Trainer does
(``pushpull``, last parameter first; ``--separate`` pushes all, then pulls all, as MXNet's
tool does). It prints, per batch after a warm-up one, the seconds and the bandwidth per
device in GB/s (the all-reduce convention: bytes x 2 (n - 1) / n over the time, n devices in
all), and the relative error of the result against the exact sum. With ``-n`` above 1 it
starts itself on that many ranks through ``python -m ember launch``.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

__all__ = ['measure', 'parameter_shapes']


def add_arguments(parser):
    parser.add_argument('--network', default='resnet50_v1',
                        help='a model-zoo network name (resnet50_v1, vgg16, ...)')
    parser.add_argument('--kvstore', '--kv-store', dest='kvstore', default='device',
                        help='the store type (local, device, dist_sync, ...)')
    parser.add_argument('-n', '--num-ranks', type=int, default=1,
                        help='MPI ranks (started through python -m ember launch)')
    parser.add_argument('--cores-per-rank', type=int, default=None,
                        help='cores each rank pins itself to')
    parser.add_argument('--devices', type=int, default=1,
                        help='CPU contexts per rank holding a copy of each gradient')
    parser.add_argument('--num-batches', type=int, default=5, help='measured batches')
    parser.add_argument('--image-shape', default='3,224,224', help='input image shape')
    parser.add_argument('--num-classes', type=int, default=1000, help='output classes')
    parser.add_argument('--optimizer', default=None,
                        help='an optimizer for the store (default: none, pure reduction)')
    parser.add_argument('--gc-type', default='none', help="gradient compression ('2bit')")
    parser.add_argument('--separate', action='store_true',
                        help='push every key, then pull every key (MXNet\'s tool)')
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)


def run(args) -> int:
    if args.num_ranks > 1 and not args.worker:
        return _launch(args)
    return measure(args)


def _launch(args):
    command = [sys.executable, '-m', 'ember', 'launch', '-n', str(args.num_ranks)]
    if args.cores_per_rank:
        command += ['--cores-per-rank', str(args.cores_per_rank)]
    command += [__file__] + _forwarded(args) + ['--worker']
    from ember import config
    return subprocess.run(command, env=config.child_environ()).returncode


def _forwarded(args):
    words = ['--network', args.network, '--kvstore', args.kvstore, '--devices',
             str(args.devices), '--num-batches', str(args.num_batches), '--image-shape',
             args.image_shape, '--num-classes', str(args.num_classes), '--gc-type',
             args.gc_type, '-n', str(args.num_ranks)]
    if args.optimizer:
        words += ['--optimizer', args.optimizer]
    if args.separate:
        words.append('--separate')
    return words


def parameter_shapes(network, image_shape, num_classes):
    """The shapes of `network`'s learnable parameters, in the model's order."""
    import ember as mx
    net = mx.gluon.model_zoo.vision.get_model(network, classes=num_classes)
    symbol = net(mx.sym.var('data'))
    arg_shapes, _, _ = symbol.infer_shape(data=(1,) + tuple(image_shape))
    return [shape for name, shape in zip(symbol.list_arguments(), arg_shapes)
            if name != 'data']


def measure(args) -> int:
    import numpy as np
    import ember as mx
    image_shape = tuple(int(s) for s in args.image_shape.split(','))
    shapes = parameter_shapes(args.network, image_shape, args.num_classes)
    kv = mx.kv.create(args.kvstore)
    if args.gc_type != 'none':
        kv.set_gradient_compression({'type': args.gc_type})
    if args.optimizer:
        kv.set_optimizer(mx.optimizer.create(args.optimizer))
    devices = [mx.cpu(i) for i in range(args.devices)]
    keys = list(range(len(shapes)))
    megabytes = sum(int(np.prod(s)) for s in shapes) * 4 / 1e6
    _say(kv, f'{args.network}: {len(shapes)} arrays, {megabytes:.1f} MB; store '
             f'{kv.type!r}, {kv.num_workers} rank(s) x {len(devices)} device(s)')
    kv.init(keys, [mx.nd.zeros(s) for s in shapes])
    rng = np.random.RandomState(kv.rank)
    values = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    grads = [[mx.nd.array(v, ctx=d) for d in devices] for v in values]
    outs = [[mx.nd.zeros(s, ctx=d) for d in devices] for s in shapes]
    participants = kv.num_workers * len(devices)
    expected = _exact_sums(kv, values, len(devices)) if not args.optimizer else None
    times = []
    for batch in range(args.num_batches + 1):
        elapsed = _one_batch(kv, keys, grads, outs, args.separate)
        if batch == 0:
            continue        # warm-up
        times.append(elapsed)
        error = _error(outs, expected)
        _say(kv, f'iter {batch}, {elapsed:.4f} sec, '
                 f'{_bandwidth(megabytes, participants, elapsed)} per device, error {error}')
    mean = sum(times) / len(times)
    _say(kv, f'communication per batch: {mean:.4f} s, '
             f'{_bandwidth(megabytes, participants, mean)} per device')
    return 0


def _one_batch(kv, keys, grads, outs, separate):
    start = time.perf_counter()
    order = keys[::-1]
    if separate:
        for key in order:
            kv.push(key, grads[key])
        for key in order:
            kv.pull(key, out=outs[key])
    else:
        kv.pushpull(order, [grads[k] for k in order], out=[outs[k] for k in order])
    for per_device in outs:
        for out in per_device:
            out.wait_to_read()
    return time.perf_counter() - start


def _exact_sums(kv, values, devices):
    import numpy as np
    total = [np.zeros_like(v, dtype=np.float64) for v in values]
    for rank in range(kv.num_workers):
        rng = np.random.RandomState(rank)
        for t, v in zip(total, values):
            t += rng.uniform(-1, 1, v.shape).astype(np.float32) * devices
    return total


def _error(outs, expected):
    if expected is None:
        return 'n/a'
    import numpy as np
    difference = sum(float(np.abs(o[0].asnumpy() - e).sum()) for o, e in zip(outs, expected))
    scale = sum(float(np.abs(e).sum()) for e in expected)
    return f'{difference / scale:.2e}'


def _bandwidth(megabytes, participants, seconds):
    if participants < 2:
        return 'n/a GB/s (one device: nothing to reduce)'
    gigabytes = megabytes / 1e3 * 2 * (participants - 1) / participants
    return f'{gigabytes / seconds:.3f} GB/s'


def _say(kv, text):
    if kv.rank == 0:
        print(text, flush=True)


if __name__ == '__main__':
    parser = argparse.ArgumentParser(prog='ember bandwidth')
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
