"""Peak memory of training with bf16 storage (XLA_USE_BF16=1) beside float32.

    python benchmarks/bf16_memory.py [--network resnet50_v1] [--batch 16] [--steps 3]
        [--threads N] [--json out.json]

Each mode runs in a fresh process: the Gluon model zoo network (hybridized, static_alloc),
softmax cross-entropy, SGD with momentum, `--steps` training steps on random data. Reported per
mode: the process's peak resident memory (ru_maxrss) and that peak less the memory the
process held before the network was built (Python, NumPy, oneDNN: the same in both modes),
the storage pool's peak, the largest scratch of full-precision copies one kernel call took
(bf16 storage only), seconds per step, and the final loss. Goal (issue #31): bf16
storage's peak at most 60% of float32's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = '''
import json, resource, sys, time
import numpy as np
import ember as mx
from ember import storage
from ember.op import precision

def rss_mb():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096 / 2**20

network, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = rss_mb()
net = mx.gluon.model_zoo.vision.get_model(network, classes=1000)
net.initialize(mx.init.Xavier())
net.hybridize(static_alloc=True, static_shape=True)
trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.01,
                                                         'momentum': 0.9, 'wd': 1e-4})
loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
rng = np.random.default_rng(0)
data = mx.nd.array(rng.standard_normal((batch, 3, 224, 224), dtype=np.float32))
label = mx.nd.array(rng.integers(0, 1000, batch).astype(np.float32))
times = []
for _ in range(steps):
    start = time.perf_counter()
    with mx.autograd.record():
        loss = loss_fn(net(data), label)
    loss.backward()
    trainer.step(batch)
    value = float(loss.mean().asscalar())
    times.append(time.perf_counter() - start)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({'peak_rss_mb': peak, 'base_rss_mb': base, 'peak_above_base_mb': peak - base,
                  'pool_peak_mb': storage.manager(mx.cpu()).stats()['peak'] / 2**20,
                  'scratch_mb': precision.scratch_bytes() / 2**20,
                  'step_s': min(times[1:] or times), 'loss': value,
                  'stored': str(net.collect_params()[list(net.collect_params().keys())[0]]
                                .data()._view.stored)}))
'''


def measure(args, bf16):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(args.threads),
               NEURON_CC_FLAGS='--no_cache')
    env.pop('XLA_USE_BF16', None)
    if bf16:
        env['XLA_USE_BF16'] = '1'
    child = subprocess.run([sys.executable, '-c', CHILD, args.network, str(args.batch),
                            str(args.steps)], env=env, capture_output=True, text=True,
                           timeout=args.timeout)
    if child.returncode != 0:
        raise SystemExit(f'{"bf16" if bf16 else "float32"} run failed:\n{child.stderr}')
    return json.loads(child.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--network', default='resnet50_v1')
    parser.add_argument('--batch', type=int, default=16)
    parser.add_argument('--steps', type=int, default=3)
    parser.add_argument('--threads', type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument('--timeout', type=int, default=1800)
    parser.add_argument('--json', help='write the measurements here too')
    args = parser.parse_args(argv)
    results = {'float32': measure(args, False), 'bf16 storage': measure(args, True)}
    f32 = results['float32']
    print(f'{args.network} training, batch {args.batch}, {args.steps} steps, '
          f'{args.threads} threads')
    print(f'{"mode":14} {"peak RSS MB":>12} {"above base":>11} {"pool peak":>10} '
          f'{"scratch":>8} {"s/step":>8} {"loss":>8}  stored')
    for mode, r in results.items():
        print(f'{mode:14} {r["peak_rss_mb"]:12.0f} {r["peak_above_base_mb"]:11.0f} '
              f'{r["pool_peak_mb"]:10.0f} {r["scratch_mb"]:8.0f} {r["step_s"]:8.2f} '
              f'{r["loss"]:8.3f}  {r["stored"]}')
    bf16 = results['bf16 storage']
    for what in ('peak_rss_mb', 'peak_above_base_mb'):
        ratio = bf16[what] / f32[what]
        print(f'bf16 / float32 {what}: {ratio:.0%} (goal <= 60%: '
              f'{"met" if ratio <= 0.6 else "not met"})')
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == '__main__':
    main()
