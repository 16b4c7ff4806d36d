"""Write tests/data/kvstore/mxnet-kvstore.npz: what MXNet 1.9.1's KVStore returns.

Run with MXNet 1.9.1's Python (OMP_NUM_THREADS=2 ~/.cache/ember-bench/mxnet-1.9.1/bin/python
tools/mxnet_kvstore_fixtures.py). Each case stores its inputs and MXNet's pulled outputs, so the
tests replay the inputs through Ember and compare.
"""
import os
import sys

import mxnet as mx
import numpy as np

OUT = os.path.join(os.path.dirname(__file__), '..', 'tests', 'data', 'kvstore',
                   'mxnet-kvstore.npz')


def compressed_pushes(name, shape, threshold, devices, steps, seed):
    """'device' store, 2-bit compression: push `devices` random arrays per step, pull."""
    rng = np.random.RandomState(seed)
    kv = mx.kv.create('device')
    kv.set_gradient_compression({'type': '2bit', 'threshold': threshold})
    kv.init(0, mx.nd.zeros(shape))
    pushed = rng.uniform(-1, 1, size=(steps, devices) + shape).astype(np.float32)
    pulled = []
    for step in range(steps):
        kv.push(0, [mx.nd.array(pushed[step, d], ctx=mx.cpu(d)) for d in range(devices)])
        out = mx.nd.zeros(shape)
        kv.pull(0, out=out)
        pulled.append(out.asnumpy())
    return {f'{name}_pushed': pushed, f'{name}_pulled': np.stack(pulled),
            f'{name}_threshold': np.float32(threshold)}


def sgd_on_store(seed):
    """'local' store with SGD (momentum, wd, rescale): push two devices' gradients, pull."""
    rng = np.random.RandomState(seed)
    kv = mx.kv.create('local')
    weight = rng.uniform(-1, 1, size=(4, 5)).astype(np.float32)
    kv.init('w', mx.nd.array(weight))
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.01,
                                      rescale_grad=0.5))
    grads = rng.uniform(-1, 1, size=(3, 2, 4, 5)).astype(np.float32)
    pulled = []
    for step in range(3):
        kv.push('w', [mx.nd.array(grads[step, d], ctx=mx.cpu(d)) for d in range(2)])
        out = mx.nd.zeros((4, 5))
        kv.pull('w', out=out)
        pulled.append(out.asnumpy())
    return {'sgd_weight': weight, 'sgd_grads': grads, 'sgd_pulled': np.stack(pulled)}


def main():
    cases = {}
    cases.update(compressed_pushes('two', (3, 7), 0.5, 2, 4, 0))
    cases.update(compressed_pushes('one', (37,), 0.3, 1, 3, 1))
    cases.update(sgd_on_store(2))
    np.savez(OUT, **cases)
    print('wrote', os.path.normpath(OUT), sorted(cases), file=sys.stderr)


if __name__ == '__main__':
    main()
