"""One measurement of Ember or MXNet 1.9.1 on a Gluon model zoo network, as one JSON line.

    python benchmarks/peers/gluon_runner.py --framework ember|mxnet --network resnet50_v1
        --batch 8 [--mode inference|train] [--warmup 2] [--batches 10] [--min-seconds 0]
        [--device cpu|gpu]

The same file runs both frameworks, `import ember as mx` or `import mxnet as mx`, so the code
they run is the same: get_model(name, classes=1000), Xavier initialization,
hybridize(static_alloc=True, static_shape=True), random input. Inference runs the forward
pass in predict mode and waits for the output; training runs forward, softmax cross-entropy,
backward and a gluon Trainer SGD step with momentum, then waits for everything.

After `warmup` untimed batches (the first also finishes deferred initialization and builds
the static graph) it times batches until `batches` are done and `min-seconds` have passed;
img/s is batch * timed batches / elapsed. peak_rss_mb is this process's ru_maxrss. Ember is
imported from the repository (benchmarks/compare.py puts it on PYTHONPATH); MXNet from the
interpreter's site-packages (its own virtual environment).
"""
from __future__ import annotations

import argparse
import importlib
import json
import platform
import resource
import sys
import time

SIZES = {'inceptionv3': 299}   # input height and width; 224 for the others
CLASSES = 1000


def input_size(network):
    return SIZES.get(network, 224)


def build(mx, network, ctx=None):
    net = mx.gluon.model_zoo.vision.get_model(network, classes=CLASSES)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def random_batch(mx, network, batch, ctx=None):
    import numpy as np
    rng = np.random.default_rng(0)
    size = input_size(network)
    data = mx.nd.array(rng.standard_normal((batch, 3, size, size), dtype=np.float32), ctx=ctx)
    label = mx.nd.array(rng.integers(0, CLASSES, batch).astype(np.float32), ctx=ctx)
    return data, label


def inference_step(mx, net, data):
    def step():
        with mx.autograd.predict_mode():
            net(data).wait_to_read()
    return step


def training_step(mx, net, data, label):
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd',
                               {'learning_rate': 0.01, 'momentum': 0.9, 'wd': 1e-4})
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with mx.autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(data.shape[0])
        mx.nd.waitall()
    return step


def timed_rate(step, batch, warmup, batches, min_seconds):
    """(img/s, timed batches, elapsed seconds) after `warmup` untimed steps."""
    for _ in range(warmup):
        step()
    done, start = 0, time.perf_counter()
    while done < batches or time.perf_counter() - start < min_seconds:
        step()
        done += 1
    elapsed = time.perf_counter() - start
    return batch * done / elapsed, done, elapsed


def peak_rss_mb():
    # Linux reports ru_maxrss in KiB.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def versions(mx):
    import numpy as np
    return {'framework': mx.__version__, 'numpy': np.__version__,
            'python': platform.python_version()}


def measure(args):
    mx = importlib.import_module(args.framework)
    ctx = mx.gpu(0) if args.device == 'gpu' else mx.cpu()
    net = build(mx, args.network, ctx)
    data, label = random_batch(mx, args.network, args.batch, ctx)
    if args.mode == 'inference':
        step = inference_step(mx, net, data)
    else:
        step = training_step(mx, net, data, label)
    start = time.perf_counter()
    rate, done, elapsed = timed_rate(step, args.batch, args.warmup, args.batches,
                                     args.min_seconds)
    warmup_s = time.perf_counter() - start - elapsed
    return {'img_per_s': rate, 'timed_batches': done, 'elapsed_s': elapsed,
            'warmup_s': warmup_s, 'peak_rss_mb': peak_rss_mb(), 'versions': versions(mx)}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--framework', choices=('ember', 'mxnet'), required=True)
    parser.add_argument('--network', required=True)
    parser.add_argument('--batch', type=int, required=True)
    parser.add_argument('--mode', choices=('inference', 'train'), default='inference')
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--batches', type=int, default=10)
    parser.add_argument('--min-seconds', type=float, default=0.0)
    parser.add_argument('--device', choices=('cpu', 'gpu'), default='cpu')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    record = {'framework': args.framework, 'network': args.network, 'batch': args.batch,
              'mode': args.mode}
    record.update(measure(args))
    sys.stdout.write(json.dumps(record) + '\n')


if __name__ == '__main__':
    main()
