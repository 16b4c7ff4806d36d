"""Data-parallel scaling: training img/s of 1 rank on one core against 2 ranks on one core each.

    python benchmarks/scaling.py                          # resnet50_v1, batch 16 per rank
    python benchmarks/scaling.py --ranks 1,2,4 --steps 10
    python benchmarks/scaling.py --network resnet18_v1 --image-size 64 --steps 2   # a check

Every configuration runs through ``python -m ember launch -n R --cores-per-rank K`` (each rank
pinned to its own K cores, ``NEURON_RT_VISIBLE_CORES``), training the model-zoo network on
random images with SGD (momentum) and a ``dist_sync`` store, ``--batch`` images per rank;
one rank trains with no store at all. The Trainer hands the gradients to the store last
parameter first, so its buckets (``BUCKET_CAP_MB``) are reduced while backward computes the
rest. Each rank times ``--steps`` steps after ``--warmup`` ones; the table gives the total
img/s, the speedup over one rank and the scaling efficiency. ``--update-on-kvstore`` picks
where the optimizer runs (the default lets Ember decide: on the store, each rank updating
the keys it serves). Goal: 2 ranks reach at least 1.8x one rank's img/s.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(args):
    import numpy as np
    import ember as mx
    from mpi4py import MPI
    ranks = MPI.COMM_WORLD.Get_size()
    kvstore = 'dist_sync' if ranks > 1 else None
    net = mx.gluon.model_zoo.vision.get_model(args.network, classes=1000)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    update = {'none': None, 'on': True, 'off': False}[args.update_on_kvstore]
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd',
                               {'learning_rate': 0.01, 'momentum': 0.9}, kvstore=kvstore,
                               update_on_kvstore=update)
    loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.RandomState(MPI.COMM_WORLD.Get_rank())
    images = mx.nd.array(rng.rand(args.batch, 3, args.image_size, args.image_size))
    labels = mx.nd.array(rng.randint(0, 1000, args.batch))

    def step():
        with mx.autograd.record():
            value = loss(net(images), labels)
        value.backward()
        trainer.step(args.batch * ranks)
        mx.nd.waitall()
    for _ in range(args.warmup):
        step()
    MPI.COMM_WORLD.Barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    seconds = time.perf_counter() - start
    slowest = MPI.COMM_WORLD.allreduce(seconds, op=MPI.MAX)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print('RESULT ' + json.dumps({'ranks': ranks, 'seconds': slowest,
                                      'images': args.batch * ranks * args.steps,
                                      'update_on_kvstore': trainer._update_on_kvstore}),
              flush=True)


def run_configuration(args, ranks):
    command = [sys.executable, '-m', 'ember', 'launch', '-n', str(ranks),
               '--cores-per-rank', str(args.cores_per_rank), __file__, '--worker',
               '--network', args.network, '--batch', str(args.batch), '--image-size',
               str(args.image_size), '--steps', str(args.steps), '--warmup', str(args.warmup),
               '--update-on-kvstore', args.update_on_kvstore]
    environ = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=environ)
    for line in done.stdout.splitlines():
        if 'RESULT ' in line:
            return json.loads(line.split('RESULT ', 1)[1])
    sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
    raise SystemExit(f'{ranks} ranks failed (exit status {done.returncode})')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--network', default='resnet50_v1')
    parser.add_argument('--ranks', default='1,2', help='rank counts to compare')
    parser.add_argument('--cores-per-rank', type=int, default=1)
    parser.add_argument('--batch', type=int, default=16, help='images per rank and step')
    parser.add_argument('--image-size', type=int, default=224)
    parser.add_argument('--steps', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=2)
    parser.add_argument('--update-on-kvstore', choices=('none', 'on', 'off'), default='none')
    parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    print(f'{args.network}, batch {args.batch} per rank, {args.cores_per_rank} core(s) per '
          f'rank, {args.image_size}px, {args.steps} steps')
    print(f'{"ranks":>5} | {"img/s":>8} | {"speedup":>7} | {"efficiency":>10} | '
          f'update_on_kvstore')
    base = None
    for ranks in (int(r) for r in args.ranks.split(',')):
        found = run_configuration(args, ranks)
        rate = found['images'] / found['seconds']
        base = base or rate / ranks
        print(f'{ranks:>5} | {rate:8.2f} | {rate / base:7.2f} | '
              f'{rate / base / ranks:10.0%} | {found["update_on_kvstore"]}')


if __name__ == '__main__':
    main()
