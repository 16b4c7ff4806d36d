"""A training step's compiled element-wise kernels split on the OpenMP team against the kernel
pool, side by side in one process.

    python benchmarks/kernel_team.py [--network resnet-50] [--batch 16] [--steps 8]

BatchNorm's channel-last row splits, the residual add+relu chains and the momentum-SGD update
(``ember._kernels``) split their work either on the calling thread's OpenMP team, the libgomp
threads oneDNN's convolutions run on (the default, where the module is built with OpenMP), or
on Ember's kernel pool through ``engine.parallel_for``. The two take turns step by step in one
training loop (so the machine's drift hits both alike), and the table gives, per path, the
median step and each operator's milliseconds per step (its kernel's wall time, the engine's
worker measuring it). The results are the same bits either way.
"""
from __future__ import annotations

import argparse
import collections
import time

import numpy as np

import ember as mx
from ember import autograd, gluon
from ember.cli import bench
from ember.op import fused, optimizer_ops, registry
from ember.op.nn import normalization

OPERATORS = ('BatchNorm', '_contrib_BatchNormWithReLU', '_sg_bn_add_relu', '_backward_BatchNorm',
             '_backward_BatchNormWithReLU', '_FusedElemwise', 'multi_sgd_mom_update')
PATHS = ('pool', 'team')


def use(path):
    team = path == 'team'
    normalization.use_team = fused.use_team = optimizer_ops.use_team = team


def timed_kernels(totals, current):
    """Wraps the operators' kernels to add their wall time to totals[(path, name)]."""
    for name in OPERATORS:
        op = registry.get(name)

        def timed(attrs, ins, outs, ctx, kernel=op.kernel, name=name):
            start = time.perf_counter()
            kernel(attrs, ins, outs, ctx)
            totals[(current[0], name)] += time.perf_counter() - start
        object.__setattr__(op, 'kernel', timed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--network', default='resnet-50')
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--steps', type=int, default=8, help='timed steps per path')
    args = parser.parse_args()
    if not (normalization._kernels is not None and normalization._kernels.openmp):
        raise SystemExit('ember._kernels is not built with OpenMP: there is no team to compare')

    totals, current = collections.defaultdict(float), ['pool']
    timed_kernels(totals, current)
    network = bench.find_network(args.network)
    net = bench.prepare(network)
    data = bench.random_batch(network, args.batch)
    label = mx.nd.array(np.random.default_rng(0).integers(0, network.classes, args.batch))
    trainer = gluon.Trainer(net.collect_params(), 'sgd', dict(bench.SGD_SETTINGS))
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()

    def step():
        with autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(args.batch)
        mx.nd.waitall()

    for path in PATHS * 2:              # warm-up: measurement of the algorithms, then both paths
        use(path)
        step()
    totals.clear()
    steps = {path: [] for path in PATHS}
    for index in range(args.steps):
        for path in PATHS if index % 2 == 0 else PATHS[::-1]:
            use(path)
            current[0] = path
            start = time.perf_counter()
            step()
            steps[path].append(time.perf_counter() - start)
    use('team')

    print(f'{args.network} training, batch {args.batch}, {args.steps} steps per path taking '
          f'turns: ms per step')
    print(f'| {"":30} | ' + ' | '.join(f'{path:>8}' for path in PATHS) + ' |')
    print('|' + '---|' * (len(PATHS) + 1))
    print(f'| {"step (median)":30} | ' + ' | '.join(
        f'{np.median(steps[path]) * 1e3:8.1f}' for path in PATHS) + ' |')
    for name in OPERATORS:
        print(f'| {name:30} | ' + ' | '.join(
            f'{totals[(path, name)] / args.steps * 1e3:8.1f}' for path in PATHS) + ' |')
    print(f'| {"these operators":30} | ' + ' | '.join(
        f'{sum(totals[(path, n)] for n in OPERATORS) / args.steps * 1e3:8.1f}'
        for path in PATHS) + ' |')


if __name__ == '__main__':
    main()
