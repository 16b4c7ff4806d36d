"""The input pipeline side by side: images per second of Ember, MXNet 1.9.1 and PyTorch reading
the same RecordIO file of ImageNet-size JPEGs.

    python benchmarks/input_pipeline.py [--images 2000] [--batch-size 64] [--threads N]
        [--workers 0,1,2] [--frameworks ember,mxnet,torch] [--repeats 3] [--warmup 0]
        [--train] [--train-batch 32] [--train-batches 6] [--workdir DIR] [--quick]

First it makes the data set once under --workdir (default ~/.cache/ember-bench/input-pipeline):
--images JPEGs of ImageNet's sizes (short edge 300-420, aspect 1-1.5, quality 90, photo-like
content), listed and packed with ``python -m ember im2rec`` (JPEG quality 95, as im2rec does
by default). Then, each measurement a fresh process, repeats interleaved (median shown):

- ``ImageRecordIter``: Ember's and MXNet's, 224x224 random crop + random mirror + ImageNet
  mean/std, batch --batch-size, shuffled, ``preprocess_threads`` = --threads (default: the
  cores), images per second over one epoch, timed from making the iterator (worker start-up
  and prefetching included; --warmup N times from the end of the N-th batch instead);
- ``DataLoader`` with 0, 1 and 2 worker processes (--workers): Ember's
  ``ImageRecordDataset`` + ``transforms`` (RandomResizedCrop(224), RandomFlipLeftRight,
  ToTensor, Normalize), beside PyTorch's ``DataLoader`` over a Dataset that reads the same
  .rec and applies torchvision's transforms written with PIL and torch ops (the PyTorch
  environment has no torchvision; PIL is installed there for decoding:
  ``~/.cache/ember-bench/torch-2.13.0-cpu/bin/pip install pillow``).

The goal row checks issue #32: Ember's ImageRecordIter >= 1.2x MXNet's. ``--train`` adds
resnet50_v1 training (SGD with momentum, batch --train-batch) fed by Ember's ImageRecordIter
from the .rec, against the same training on one synthetic batch, alternated; goal: the .rec
costs at most 5% of the images per second (its warm-up is --warmup steps, at least one).
The decoding threads run at a lower priority than the training so that they take the cores
in its gaps; --decode-at-normal-priority measures them without that.
``--quick`` is --images 256 --repeats 1 --train-batches 3. Every process gets
OMP_NUM_THREADS = --threads.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENV_DIR = Path('~/.cache/ember-bench').expanduser()
PYTHONS = {'ember': sys.executable,
           'mxnet': str(ENV_DIR / 'mxnet-1.9.1' / 'bin' / 'python'),
           'torch': str(ENV_DIR / 'torch-2.13.0-cpu' / 'bin' / 'python')}
MEAN = (123.68, 116.28, 103.53)
STD = (58.395, 57.12, 57.375)
GOAL = 1.2
TRAIN_GOAL_LOSS = 0.05


# ----------------------------------------------------------------------------------------------
# The data set (Ember's process)

def photo_like(rng, height, width):
    """Smooth colour fields, edges and sensor-like noise: JPEG sizes near ImageNet's."""
    import numpy as np
    small = rng.integers(0, 256, (height // 16 + 2, width // 16 + 2, 3)).astype(np.float32)
    import cv2
    image = cv2.resize(small, (width, height), interpolation=cv2.INTER_CUBIC)
    image += rng.normal(0, 18, image.shape).astype(np.float32)
    for _ in range(6):
        y, x = rng.integers(0, height - 8), rng.integers(0, width - 8)
        image[y:y + rng.integers(8, height // 2), x:x + rng.integers(8, width // 2)] = \
            rng.integers(0, 256, 3)
    return np.clip(image, 0, 255).astype(np.uint8)


def make_dataset(workdir: Path, count: int) -> Path:
    """The .rec of `count` generated JPEGs under `workdir` (made once, then reused)."""
    prefix = workdir / f'images{count}'
    rec = prefix.with_suffix('.rec')
    if rec.exists() and prefix.with_suffix('.idx').exists():
        return rec
    import cv2
    import numpy as np
    rng = np.random.default_rng(32)
    folder = workdir / f'jpegs{count}' / 'all'
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for index in range(count):
        short = int(rng.integers(300, 421))
        long_edge = int(short * rng.uniform(1.0, 1.5))
        height, width = (short, long_edge) if rng.random() < 0.75 else (long_edge, short)
        cv2.imwrite(str(folder / f'{index:05d}.jpg'), photo_like(rng, height, width),
                    [cv2.IMWRITE_JPEG_QUALITY, 90])
    print(f'generated {count} JPEGs in {time.perf_counter() - started:.0f} s', file=sys.stderr)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for extra in (['--list', '--recursive', '--no-shuffle'],
                  ['--num-thread', str(os.cpu_count() or 1), '--no-progress']):
        subprocess.run([sys.executable, '-m', 'ember', 'im2rec', str(prefix),
                        str(folder.parent)] + extra, check=True, env=env, cwd=REPO)
    return rec


# ----------------------------------------------------------------------------------------------
# Runs (each in its own process, under its framework's interpreter)

def timed(make_batches, count_of, warmup):
    """(images, seconds) of one epoch of the iterable `make_batches()` makes: from its making
    (worker start-up and prefetching included), or from the end of `warmup` batches."""
    start = time.perf_counter()
    iterator = iter(make_batches())
    for _ in range(warmup):
        count_of(next(iterator))
    if warmup:
        start = time.perf_counter()
    images = 0
    for batch in iterator:
        images += count_of(batch)
    return images, time.perf_counter() - start


def run_record_iter(mx, args):
    def make():
        return mx.io.ImageRecordIter(
            path_imgrec=args.rec, path_imgidx=args.rec[:-4] + '.idx', data_shape=(3, 224, 224),
            batch_size=args.batch_size, shuffle=True, rand_crop=True, rand_mirror=True,
            mean_r=MEAN[0], mean_g=MEAN[1], mean_b=MEAN[2], std_r=STD[0], std_g=STD[1],
            std_b=STD[2], preprocess_threads=args.threads, round_batch=False)

    def count(batch):
        batch.data[0].wait_to_read()
        return batch.data[0].shape[0] - batch.pad
    return timed(make, count, args.warmup)


def run_ember_loader(args):
    import ember as mx
    from ember.gluon.data import DataLoader
    from ember.gluon.data.vision import ImageRecordDataset, transforms
    chain = transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomFlipLeftRight(),
        transforms.ToTensor(), transforms.Normalize([m / 255 for m in MEAN],
                                                    [s / 255 for s in STD])])
    dataset = ImageRecordDataset(args.rec).transform_first(chain)
    loader = DataLoader(dataset, args.batch_size, shuffle=True, last_batch='discard',
                        num_workers=args.workers)

    def count(batch):
        batch[0].wait_to_read()
        return batch[0].shape[0]
    result = timed(lambda: loader, count, args.warmup)
    loader.close()
    mx.nd.waitall()
    return result


def _records(rec):
    """The payloads (image bytes) of a .rec by its .idx: RecordIO parsed with the standard
    library, for the PyTorch run."""
    import struct
    with open(rec[:-4] + '.idx') as lines:
        offsets = [int(line.split('\t')[1]) for line in lines if line.strip()]
    fd = os.open(rec, os.O_RDONLY)

    def read(index):
        offset, parts = offsets[index], []
        while True:
            magic, word = struct.unpack('<II', os.pread(fd, 8, offset))
            length, flag = word & ((1 << 29) - 1), word >> 29
            parts.append(os.pread(fd, length, offset + 8))
            offset += 8 + (length + 3) // 4 * 4
            if flag in (0, 3):
                record = struct.pack('<I', magic).join(parts)
                flags = struct.unpack('<I', record[:4])[0]
                return record[24 + 4 * flags:]
    return len(offsets), read


def run_torch_loader(args):
    import io
    import math
    import random

    import numpy as np
    import torch
    from PIL import Image
    torch.set_num_threads(args.threads)
    count, read = _records(args.rec)
    mean = torch.tensor(MEAN).view(3, 1, 1) / 255
    std = torch.tensor(STD).view(3, 1, 1) / 255

    def random_resized_crop(image, size=224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
        """torchvision's RandomResizedCrop: ten tries at an area and log-uniform ratio."""
        width, height = image.size
        area = width * height
        for _ in range(10):
            target = area * random.uniform(*scale)
            aspect = math.exp(random.uniform(math.log(ratio[0]), math.log(ratio[1])))
            w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                x, y = random.randint(0, width - w), random.randint(0, height - h)
                return image.resize((size, size), Image.BILINEAR, box=(x, y, x + w, y + h))
        side = min(width, height)
        x, y = (width - side) // 2, (height - side) // 2
        return image.resize((size, size), Image.BILINEAR, box=(x, y, x + side, y + side))

    class Records(torch.utils.data.Dataset):
        def __len__(self):
            return count

        def __getitem__(self, index):
            image = Image.open(io.BytesIO(read(index))).convert('RGB')
            image = random_resized_crop(image)
            if random.random() < 0.5:
                image = image.transpose(Image.FLIP_LEFT_RIGHT)
            tensor = torch.from_numpy(np.asarray(image)).permute(2, 0, 1).contiguous()
            return tensor.float().div(255).sub_(mean).div_(std), 0

    loader = torch.utils.data.DataLoader(Records(), args.batch_size, shuffle=True,
                                         drop_last=True, num_workers=args.workers)
    return timed(lambda: loader, lambda batch: batch[0].shape[0], args.warmup)


def run_training(args):
    """(synthetic img/s, .rec img/s) lists of resnet50_v1 training steps, alternated."""
    import ember as mx
    from ember import autograd, gluon
    from ember.cli import bench
    from ember.io import image_record
    if args.decode_at_normal_priority:
        image_record._yield_to_compute = lambda: None
    network = bench.find_network('resnet-50')
    net = bench.prepare(network)
    trainer = gluon.Trainer(net.collect_params(), 'sgd', dict(bench.SGD_SETTINGS))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    synthetic = (bench.random_batch(network, args.train_batch),
                 mx.nd.array(range(args.train_batch)) % network.classes)
    it = mx.io.ImageRecordIter(
        path_imgrec=args.rec, path_imgidx=args.rec[:-4] + '.idx', data_shape=(3, 224, 224),
        batch_size=args.train_batch, shuffle=True, rand_crop=True, rand_mirror=True,
        mean_r=MEAN[0], mean_g=MEAN[1], mean_b=MEAN[2], std_r=STD[0], std_g=STD[1],
        std_b=STD[2], preprocess_threads=args.threads)

    def from_rec():
        try:
            batch = it.next()
        except StopIteration:
            it.reset()
            batch = it.next()
        return batch.data[0], batch.label[0]

    def steps(source, count):
        start = time.perf_counter()
        for _ in range(count):
            data, label = source()
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(args.train_batch)
            mx.nd.waitall()
        return args.train_batch * count / (time.perf_counter() - start)
    steps(lambda: synthetic, max(1, args.warmup))
    steps(from_rec, max(1, args.warmup))
    speeds = {'synthetic': [], 'rec': []}
    for _ in range(args.repeats):
        speeds['synthetic'].append(steps(lambda: synthetic, args.train_batches))
        speeds['rec'].append(steps(from_rec, args.train_batches))
    return speeds


def run_one(args):
    """The child side: one measurement, printed as a JSON line."""
    if args.run == 'record-iter':
        import importlib
        mx = importlib.import_module('mxnet' if args.framework == 'mxnet' else 'ember')
        images, seconds = run_record_iter(mx, args)
    elif args.run == 'loader' and args.framework == 'torch':
        images, seconds = run_torch_loader(args)
    elif args.run == 'loader':
        images, seconds = run_ember_loader(args)
    else:
        print(json.dumps(run_training(args)))
        return 0
    print(json.dumps({'images': images, 'seconds': seconds}))
    return 0


# ----------------------------------------------------------------------------------------------
# The parent side

def child(args, framework, run, workers=0, timeout=1800):
    """Images per second of one run (or training speeds), None with the reason on failure."""
    python = PYTHONS[framework]
    if not os.path.exists(python):
        return None, f'no {python} (benchmarks/peers/envs.py makes it)'
    command = [python, str(Path(__file__).resolve()), '--run', run, '--framework', framework,
               '--rec', str(args.rec), '--batch-size', str(args.batch_size), '--threads',
               str(args.threads), '--workers', str(workers), '--warmup', str(args.warmup),
               '--train-batch', str(args.train_batch), '--train-batches',
               str(args.train_batches), '--repeats', str(args.repeats)]
    if args.decode_at_normal_priority:
        command.append('--decode-at-normal-priority')
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               PYTHONPATH=str(REPO) if framework == 'ember' else '')
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=REPO)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ['?'])[-1]
        return None, last[:120]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if 'images' in result:
        return result['images'] / result['seconds'], ''
    return result, ''


def measure(args):
    rows = [('ImageRecordIter', 'record-iter', 0)] + [
        (f'DataLoader, {w} worker{"s" if w != 1 else ""}', 'loader', w) for w in args.workers]
    speeds = {(row[0], fw): [] for row in rows for fw in args.frameworks}
    notes = {}
    for repeat in range(args.repeats):
        for label, run, workers in rows:
            for framework in args.frameworks:
                if (run, framework) == ('record-iter', 'torch') or \
                        (run, framework) == ('loader', 'mxnet'):
                    continue
                speed, why = child(args, framework, run, workers)
                print(f'  repeat {repeat + 1}: {label:22s} {framework:6s} '
                      f'{speed if speed is None else round(speed, 1)} {why}', file=sys.stderr)
                if speed is None:
                    notes[(label, framework)] = why
                else:
                    speeds[(label, framework)].append(speed)
    return rows, speeds, notes


def render(args, rows, speeds, notes):
    frameworks = [fw for fw in ('ember', 'mxnet', 'torch') if fw in args.frameworks]
    titles = {'ember': 'Ember', 'mxnet': 'MXNet 1.9.1', 'torch': 'PyTorch 2.13'}
    lines = [f'{args.images} JPEGs, batch {args.batch_size}, {args.threads} threads, median of '
             f'{args.repeats}; images per second',
             f'{"pipeline":24s}' + ''.join(f'{titles[fw]:>14s}' for fw in frameworks)]
    for label, _, _ in rows:
        cells = []
        for framework in frameworks:
            values = speeds.get((label, framework), [])
            cells.append(f'{statistics.median(values):14.1f}' if values else f'{"-":>14s}')
        lines.append(f'{label:24s}' + ''.join(cells))
    ember = speeds.get(('ImageRecordIter', 'ember'), [])
    mxnet = speeds.get(('ImageRecordIter', 'mxnet'), [])
    if ember and mxnet:
        ratio = statistics.median(ember) / statistics.median(mxnet)
        verdict = 'met' if ratio >= GOAL else 'not met'
        lines.append(f'goal: Ember ImageRecordIter / MXNet = {ratio:.2f}x (>= {GOAL}x: '
                     f'{verdict})')
    for (label, framework), why in notes.items():
        lines.append(f'- {label}, {framework}: {why}')
    return '\n'.join(lines)


def training(args):
    result, why = child(args, 'ember', 'train', timeout=7200)
    if result is None:
        return f'training: failed: {why}'
    synthetic, rec = (statistics.median(result[k]) for k in ('synthetic', 'rec'))
    loss = 1 - rec / synthetic
    verdict = 'met' if loss <= TRAIN_GOAL_LOSS else 'not met'
    return (f'resnet50_v1 training, batch {args.train_batch}: synthetic {synthetic:.2f} img/s, '
            f'from the .rec {rec:.2f} img/s: {100 * loss:+.1f}% lost '
            f'(goal <= {100 * TRAIN_GOAL_LOSS:.0f}%: {verdict})')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=2000)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--threads', type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument('--workers', default='0,1,2')
    parser.add_argument('--frameworks', default='ember,mxnet,torch')
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--warmup', type=int, default=0)
    parser.add_argument('--train', action='store_true')
    parser.add_argument('--train-batch', type=int, default=32)
    parser.add_argument('--train-batches', type=int, default=6)
    parser.add_argument('--decode-at-normal-priority', action='store_true',
                        help="--train: keep ImageRecordIter's threads at the training's "
                             "priority (by default they yield to it)")
    parser.add_argument('--workdir', default=str(ENV_DIR / 'input-pipeline'))
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--run', help=argparse.SUPPRESS)
    parser.add_argument('--framework', help=argparse.SUPPRESS)
    parser.add_argument('--rec', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.images, args.repeats, args.train_batches = 256, 1, 3
    if args.run is None:
        args.workers = [int(w) for w in args.workers.split(',') if w.strip()]
        args.frameworks = [f.strip() for f in args.frameworks.split(',') if f.strip()]
    else:
        args.workers = int(args.workers)
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.run is not None:
        return run_one(args)
    workdir = Path(args.workdir).expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    args.rec = make_dataset(workdir, args.images)
    print(render(args, *measure(args)))
    if args.train:
        print(training(args))
    return 0


if __name__ == '__main__':
    sys.exit(main())
