"""One measurement of PyTorch (eager or torch.compile) on a network, as one JSON line.

    python benchmarks/peers/torch_runner.py --network resnet50_v1 --batch 8
        [--compile] [--mode inference|train] [--warmup 2] [--batches 10] [--min-seconds 0]
        [--device cpu|gpu] [--tf32]

The networks are torch_models.py's hand-written equivalents of the Gluon model zoo ones,
with PyTorch's default initialization and random input. Inference runs in eval mode under
torch.no_grad(); training runs forward, cross-entropy, backward and torch.optim.SGD with
momentum 0.9 and weight decay 1e-4 (the Gluon Trainer's settings in gluon_runner.py).
``--compile`` wraps the model in torch.compile; the warm-up batches pay for the compilation.

Timing and peak_rss_mb are as in gluon_runner.py. Runs in the PyTorch virtual environment.
``--device gpu`` runs on cuda:0 with cuDNN's autotuner on (Ember's default tunes too), each step
synchronised (as Ember's steps wait for their results), float32 without TF32 unless ``--tf32``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402  (beside this file, not installed)

SIZES = {'inceptionv3': 299}
CLASSES = torch_models.CLASSES


def _no_sync():
    pass


def inference_step(model, data, sync=_no_sync):
    model.eval()

    def step():
        with torch.no_grad():
            model(data)
        sync()
    return step


def training_step(model, data, label, sync=_no_sync):
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(data), label).backward()
        optimizer.step()
        sync()
    return step


def _on_device(args):
    """(torch device, step synchronisation) for --device."""
    if args.device != 'gpu':
        return torch.device('cpu'), _no_sync
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    return torch.device('cuda:0'), torch.cuda.synchronize


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
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(args):
    torch.manual_seed(0)
    device, sync = _on_device(args)
    model = torch_models.build(args.network).to(device)
    size = SIZES.get(args.network, 224)
    data = torch.randn(args.batch, 3, size, size).to(device)
    label = torch.randint(0, CLASSES, (args.batch,)).to(device)
    runnable = torch.compile(model) if args.compile else model
    if args.mode == 'inference':
        step = inference_step(runnable, data, sync)
    else:
        step = training_step(runnable, data, label, sync)
    start = time.perf_counter()
    rate, done, elapsed = timed_rate(step, args.batch, args.warmup, args.batches,
                                     args.min_seconds)
    warmup_s = time.perf_counter() - start - elapsed
    return {'img_per_s': rate, 'timed_batches': done, 'elapsed_s': elapsed,
            'warmup_s': warmup_s, 'peak_rss_mb': peak_rss_mb(),
            'versions': {'framework': torch.__version__, 'threads': torch.get_num_threads(),
                         'python': platform.python_version(),
                         'device': torch.cuda.get_device_name(0) if device.type == 'cuda'
                         else 'cpu'}}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--network', choices=sorted(torch_models.NETWORKS), required=True)
    parser.add_argument('--batch', type=int, required=True)
    parser.add_argument('--compile', action='store_true')
    parser.add_argument('--mode', choices=('inference', 'train'), default='inference')
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--batches', type=int, default=10)
    parser.add_argument('--min-seconds', type=float, default=0.0)
    parser.add_argument('--device', choices=('cpu', 'gpu'), default='cpu')
    parser.add_argument('--tf32', action='store_true')
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    record = {'framework': 'torch-compile' if args.compile else 'torch',
              'network': args.network, 'batch': args.batch, 'mode': args.mode}
    record.update(measure(args))
    sys.stdout.write(json.dumps(record) + '\n')


if __name__ == '__main__':
    main()
