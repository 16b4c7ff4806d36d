"""Milliseconds of one momentum-SGD update over resnet50_v1's parameters (25.6M), the way
gluon.Trainer issues it: ``multi_sgd_mom_update`` on groups of 4 weights.

    PYTHONPATH=. python benchmarks/optimizer_update.py [--repeat 5] [--group 4]

Rows: the kernel threads sharing all weights' elements (MXNET_CPU_PARALLEL_SIZE at its
default), and one thread (MXNET_CPU_PARALLEL_SIZE above the parameter count). Best of
`repeat` updates after one warm-up.
"""
from __future__ import annotations

import argparse
import time

import ember as mx
from ember import config
from ember.gluon.model_zoo import vision


def _arrays():
    net = vision.get_model('resnet50_v1')
    net.initialize(mx.init.Xavier())
    net(mx.nd.ones((1, 3, 224, 224)))
    weights = [p.data() for p in net.collect_params().values()]
    grads = [mx.nd.ones(w.shape) * 0.01 for w in weights]
    states = [mx.nd.zeros(w.shape) for w in weights]
    mx.nd.waitall()
    return weights, grads, states


def _update(weights, grads, states, group):
    for start in range(0, len(weights), group):
        chunk = slice(start, start + group)
        args = [a for triple in zip(weights[chunk], grads[chunk], states[chunk]) for a in triple]
        count = len(args) // 3
        mx.nd.multi_sgd_mom_update(*args, out=weights[chunk], num_weights=count,
                                   lrs=[0.01] * count, wds=[1e-4] * count, momentum=0.9)
    mx.nd.waitall()


def _best(fn, repeat):
    fn()
    best = float('inf')
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--group', type=int, default=4)
    args = parser.parse_args()
    weights, grads, states = _arrays()
    size = sum(w.size for w in weights)
    print(f'multi_sgd_mom_update over {size / 1e6:.1f}M parameters, groups of {args.group}')
    print(f'{"threads":>28} | {"ms per update":>13}')
    rows = [('kernel threads share them', None), ('one thread', size + 1)]
    for label, parallel_size in rows:
        overrides = {} if parallel_size is None else {'MXNET_CPU_PARALLEL_SIZE': parallel_size}
        with config.override(**overrides):
            ms = _best(lambda: _update(weights, grads, states, args.group), args.repeat)
        print(f'{label:>28} | {ms:13.1f}')


if __name__ == '__main__':
    main()
