"""Cold versus warm compile cache: time from ``net(x)`` to the first result in a fresh process,
Ember beside torch.compile.

    python benchmarks/compile_cache.py [--cells resnet50_v1:8,inceptionv3:1] [--repeats 1]
        [--frameworks ember,torch-compile] [--steady 5] [--threads N]
        [--env-dir ~/.cache/ember-bench] [--timeout 1800] [--json out.json]

Every measurement is a fresh process that builds the network, takes its parameters from a
file (saved once beforehand: initialisation is not what is timed), and times its first call
and then `--steady` more (the median is the steady batch). Ember runs the Gluon model zoo
network hybridized with static_alloc; 'cold' has an empty compile cache (NEURON_CC_FLAGS
--cache_dir), 'warm' the cache the cold run filled. torch.compile runs benchmarks/peers/
torch_models.py's equivalent in the PyTorch environment, 'cold' with an empty inductor cache
(TORCHINDUCTOR_CACHE_DIR), 'warm' with the cache its cold run filled. The warm Ember run also
reports how many graphs it compiled (goal: none) and loaded.

Goals (issue #31): Ember's warm first call at most 20% of its cold one, and at most 2x a
steady batch.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / 'benchmarks' / 'peers'
SIZES = {'inceptionv3': 299}

EMBER_SETUP = '''
import sys
import numpy as np
import ember as mx
network, path, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
mx.random.seed(0)
net = mx.gluon.model_zoo.vision.get_model(network, classes=1000)
net.initialize(mx.init.Xavier())
net(mx.nd.zeros((1, 3, size, size))).wait_to_read()       # imperative: nothing compiled
net.save_parameters(path)
'''

EMBER_CHILD = '''
import json, statistics, sys, time
import numpy as np
import ember as mx
from ember import compiler
network, batch, path, size, steady = (sys.argv[1], int(sys.argv[2]), sys.argv[3],
                                      int(sys.argv[4]), int(sys.argv[5]))
net = mx.gluon.model_zoo.vision.get_model(network, classes=1000)
net.load_parameters(path)
net.hybridize(static_alloc=True, static_shape=True)
x = mx.nd.array(np.random.default_rng(0).standard_normal((batch, 3, size, size),
                                                          dtype=np.float32))
x.wait_to_read()
start = time.perf_counter()
net(x).wait_to_read()
first = time.perf_counter() - start
times = []
for _ in range(steady):
    start = time.perf_counter()
    net(x).wait_to_read()
    times.append(time.perf_counter() - start)
counts = compiler.counters()
print(json.dumps({'first': first, 'steady': statistics.median(times),
                  'compiles': counts['compiles'], 'loads': counts['loads'],
                  'compile_seconds': counts['compile seconds']}))
'''

TORCH_CHILD = '''
import json, statistics, sys, time
sys.path.insert(0, sys.argv[6])
import torch
import torch_models
network, batch, size, steady = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = torch_models.build(network).eval()
torch.save(model.state_dict(), sys.argv[5]) if sys.argv[7] == 'save' else \\
    model.load_state_dict(torch.load(sys.argv[5]))
compiled = torch.compile(model)
x = torch.randn(batch, 3, size, size)
with torch.no_grad():
    start = time.perf_counter()
    compiled(x)
    first = time.perf_counter() - start
    times = []
    for _ in range(steady):
        start = time.perf_counter()
        compiled(x)
        times.append(time.perf_counter() - start)
print(json.dumps({'first': first, 'steady': statistics.median(times)}))
'''


def run(command, env, timeout):
    started = time.perf_counter()
    child = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if child.returncode != 0:
        return {'error': (child.stderr.strip().splitlines() or ['?'])[-1][:200]}
    result = json.loads(child.stdout.strip().splitlines()[-1])
    result['process_s'] = time.perf_counter() - started
    return result


def ember_cells(args, network, batch, folder):
    size = SIZES.get(network, 224)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(args.threads))
    params = folder / f'{network}.params'
    if not params.exists():
        subprocess.run([sys.executable, '-c', EMBER_SETUP, network, str(params), str(size)],
                       env=env, check=True, timeout=args.timeout)
    cache = Path(tempfile.mkdtemp(prefix='ember-cache-', dir=folder))
    env['NEURON_CC_FLAGS'] = f'--cache_dir={cache}'
    command = [sys.executable, '-c', EMBER_CHILD, network, str(batch), str(params), str(size),
               str(args.steady)]
    return run(command, env, args.timeout), run(command, env, args.timeout)


def torch_cells(args, network, batch, folder):
    size = SIZES.get(network, 224)
    python = Path(args.env_dir).expanduser() / 'torch-2.13.0-cpu' / 'bin' / 'python'
    if not python.exists():
        return ({'error': f'no PyTorch environment at {python}'},) * 2
    cache = Path(tempfile.mkdtemp(prefix='inductor-', dir=folder))
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               TORCHINDUCTOR_CACHE_DIR=str(cache))
    weights = folder / f'{network}.pt'
    base = [str(python), '-c', TORCH_CHILD, network, str(batch), str(size), str(args.steady),
            str(weights), str(PEERS)]
    cold = run(base + ['save'], env, args.timeout)
    return cold, run(base + ['load'], env, args.timeout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cells', default='resnet50_v1:8,inceptionv3:1')
    parser.add_argument('--frameworks', default='ember,torch-compile')
    parser.add_argument('--repeats', type=int, default=1)
    parser.add_argument('--steady', type=int, default=5)
    parser.add_argument('--threads', type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument('--env-dir', default='~/.cache/ember-bench')
    parser.add_argument('--timeout', type=int, default=1800)
    parser.add_argument('--json', help='write every measurement here too')
    args = parser.parse_args(argv)
    cells = [(c.split(':')[0], int(c.split(':')[1])) for c in args.cells.split(',')]
    frameworks = args.frameworks.split(',')
    measure = {'ember': ember_cells, 'torch-compile': torch_cells}
    results = []
    with tempfile.TemporaryDirectory(prefix='compile-cache-bench-') as scratch:
        for _ in range(args.repeats):
            for network, batch in cells:
                for framework in frameworks:
                    cold, warm = measure[framework](args, network, batch, Path(scratch))
                    results.append({'network': network, 'batch': batch,
                                    'framework': framework, 'cold': cold, 'warm': warm})
                    print(f'  {network}:{batch} {framework}: cold {cold} warm {warm}',
                          file=sys.stderr)
    print_table(results, cells, frameworks, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


def _median(rows, which, field):
    values = [r[which][field] for r in rows if field in r[which]]
    return statistics.median(values) if values else None


def print_table(results, cells, frameworks, args):
    print(f'first call in a fresh process, cold vs warm cache ({args.threads} threads, median of '
          f'{args.repeats}); steady: median of {args.steady} later calls')
    print(f'{"cell":16} {"framework":14} {"cold s":>8} {"warm s":>8} {"warm/cold":>9} '
          f'{"steady s":>9} {"warm/steady":>11} {"compiled":>8}  goal')
    for network, batch in cells:
        for framework in frameworks:
            rows = [r for r in results if (r['network'], r['batch'], r['framework'])
                    == (network, batch, framework)]
            cold, warm = _median(rows, 'cold', 'first'), _median(rows, 'warm', 'first')
            steady = _median(rows, 'warm', 'steady')
            if cold is None or warm is None:
                error = rows[0]['cold'].get('error') or rows[0]['warm'].get('error')
                print(f'{network + ":" + str(batch):16} {framework:14} -  ({error})')
                continue
            compiled = _median(rows, 'warm', 'compiles')
            goal = ''
            if framework == 'ember':
                met = warm <= 0.2 * cold and warm <= 2 * steady
                goal = 'met' if met else 'not met'
            print(f'{network + ":" + str(batch):16} {framework:14} {cold:8.2f} {warm:8.2f} '
                  f'{warm / cold:9.0%} {steady:9.3f} {warm / steady:11.1f} '
                  f'{"-" if compiled is None else int(compiled):>8}  {goal}')


if __name__ == '__main__':
    main()
