"""The graph executor's measured goals: planned memory, mirroring, and hybridized dispatch.

    PYTHONPATH=. python benchmarks/graph_bench.py [--sections memory,rss,mirror,speed,mlp]
        [--speed-batch 16] [--speed-size 224] [--warmup 1] [--steps 5] [--mlp-calls 2000]

1. Inference, resnet50_v1 at batch 32: the memory planner's arena beside the sum of every
   planned intermediate output (goal: at most 1/3), with ``NNVM_EXEC_MATCH_RANGE=0`` and
   ``MXNET_EXEC_ENABLE_INPLACE=0`` beside it; then the peak resident memory of a process that
   binds the network and runs inference (``OMP_NUM_THREADS=2``), beside MXNet 1.9.1's 721 MB
   measured on the same machine.
2. Training, resnet50_v1 at batch 16 (with a SoftmaxOutput loss): the forward+backward
   arena with ``MXNET_BACKWARD_DO_MIRROR`` on and off (goal: at least 30% less), and the
   median time of one executor training step (forward + backward) with and without mirroring
   (goal: mirroring keeps at least 90% of the speed), the two settings alternating step by
   step; ``--speed-batch`` and ``--speed-size`` make the steps cheaper on a machine with few
   cores.
3. An MLP of 16 x (Dense(64) + relu) on batch 4: the operators of its traced graph (the issue
   speaks of 68; the count printed is Ember's), and the
   median latency of one call hybridized and imperative (goal: hybridized at most 1/3 of
   imperative and at most MXNet 1.9.1's 510 µs).

The planner's figures come from :func:`ember.executor.pipeline.compile_graph` (the same passes
``bind`` runs); ``config.override`` is entered only around compiling and binding, since inside
it every configuration read takes the slower override path.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

import ember as mx
import ember.executor  # noqa: F401  (attaches Symbol.bind / simple_bind)
from ember import config
from ember.executor import pipeline

MXNET_RSS_MB = 721            # MXNet 1.9.1, resnet50_v1 inference at batch 32, OMP_NUM_THREADS=2
MXNET_MLP_US = 510            # MXNet 1.9.1, the 16-layer MLP hybridized, per call
MB = 2 ** 20
SECTIONS = ('memory', 'rss', 'mirror', 'speed', 'mlp')


# -- graphs --------------------------------------------------------------------------------------

def resnet_symbol(loss=False):
    """resnet50_v1 traced into a Symbol (with a SoftmaxOutput head when `loss`)."""
    net = mx.gluon.model_zoo.vision.get_model('resnet50_v1')
    out = net(mx.sym.var('data'))
    if loss:
        out = mx.sym.SoftmaxOutput(out, mx.sym.var('softmax_label'), name='softmax')
    return out


def input_shapes(sym, batch, size):
    """Every input's shape and dtype (float32), by name."""
    given = {'data': (batch, 3, size, size)}
    if 'softmax_label' in sym.list_arguments():
        given['softmax_label'] = (batch,)
    arg_shapes, _, aux_shapes = sym.infer_shape(**given)
    names = sym.list_arguments() + sym.list_auxiliary_states()
    shapes = dict(zip(names, arg_shapes + aux_shapes))
    return shapes, {name: np.float32 for name in shapes}


def parameter_grads(sym):
    """grad_req of a training bind: every parameter 'write', the data and label 'null'."""
    return {name: 'null' if name in ('data', 'softmax_label') else 'write'
            for name in sym.list_arguments()}


def operator_count(graph):
    return sum(1 for node in graph.nodes if node.op is not None)


def random_params(shapes):
    """Values for every input but the data and label, as bind gives them to the passes (the
    inference fusions fold BatchNorm only into parameters with values)."""
    rng = np.random.default_rng(0)
    return {name: (1.0 + rng.random(shape, np.float32)) if name.endswith('var')
            else rng.standard_normal(shape, np.float32) * 0.05
            for name, shape in shapes.items() if name not in ('data', 'softmax_label')}


def plan_of(sym, batch, size, grad_req=None, **overrides):
    """(memory plan, compiled graph) of `sym` under the configuration `overrides`."""
    shapes, dtypes = input_shapes(sym, batch, size)
    with config.override(**overrides):
        graph = pipeline.compile_graph(sym.to_graph(), shapes, dtypes, grad_req=grad_req,
                                       params=random_params(shapes))
    return graph.attrs['memory_plan'], graph


# -- 1. inference memory -------------------------------------------------------------------------

def memory_section():
    sym = resnet_symbol()
    rows = [('planner on (defaults)', {}),
            ('NNVM_EXEC_MATCH_RANGE=0', {'NNVM_EXEC_MATCH_RANGE': 0}),
            ('MXNET_EXEC_ENABLE_INPLACE=0', {'MXNET_EXEC_ENABLE_INPLACE': False}),
            ('both off', {'NNVM_EXEC_MATCH_RANGE': 0, 'MXNET_EXEC_ENABLE_INPLACE': False}),
            # Without BatchNorm folding and fusion, in-place activations have work to do.
            ('MXNET_SUBGRAPH_BACKEND=NONE', {'MXNET_SUBGRAPH_BACKEND': 'NONE'}),
            ('  and MXNET_EXEC_ENABLE_INPLACE=0',
             {'MXNET_SUBGRAPH_BACKEND': 'NONE', 'MXNET_EXEC_ENABLE_INPLACE': False})]
    print('\n1a. Inference resnet50_v1, batch 32, 224x224: planned arena vs the sum of all '
          'planned intermediate outputs (goal: at most 1/3)')
    print(f'{"configuration":<34} {"operators":>9} {"outputs MB":>11} {"planned MB":>11} '
          f'{"planned/outputs":>16}  goal')
    for label, overrides in rows:
        plan, graph = plan_of(sym, 32, 224, **overrides)
        ratio = plan.planned_bytes / plan.entry_bytes
        print(f'{label:<34} {operator_count(graph):>9} {plan.entry_bytes / MB:>11.1f} '
              f'{plan.planned_bytes / MB:>11.1f} {ratio:>16.3f}  '
              f'{"met" if ratio <= 1 / 3 else "-"}')


# -- 1b. peak RSS in a child process -------------------------------------------------------------

def peak_rss_kib():
    """This process's peak resident memory in KiB: VmHWM, which starts afresh at exec.
    ru_maxrss would not do: Linux carries over the pre-exec high-water mark, which after a
    fork is the parent's whole resident set."""
    try:
        with open('/proc/self/status') as status:
            for line in status:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def rss_child(mode, batch, runs):
    """The child: import (and, for 'bind', bind resnet50_v1 and run inference); print the
    process's peak RSS in KiB (Linux ru_maxrss) and the arena it planned."""
    planned, after_bind_kib = 0, 0
    if mode == 'bind':
        sym = resnet_symbol()
        shapes, _ = input_shapes(sym, batch, 224)
        exe = sym.simple_bind(mx.cpu(), grad_req='null', data=shapes['data'])
        rng = np.random.default_rng(0)
        for name, array in exe.arg_dict.items():
            array[:] = rng.standard_normal(array.shape, np.float32) * 0.05
        for name, array in exe.aux_dict.items():
            array[:] = 1.0 if name.endswith('var') else 0.0
        mx.nd.waitall()
        after_bind_kib = peak_rss_kib()
        for _ in range(runs):
            exe.forward(is_train=False)[0].wait_to_read()
        planned = exe._last.graph.attrs['memory_plan'].planned_bytes
    mx.nd.waitall()
    peak_kib = peak_rss_kib()
    print(f'RSS {peak_kib} {after_bind_kib} {planned}')


def run_rss_child(mode, batch, runs):
    command = [sys.executable, os.path.abspath(__file__), '--rss-child', mode,
               '--rss-batch', str(batch), '--rss-runs', str(runs)]
    env = config.child_environ(OMP_NUM_THREADS=2)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f'RSS child ({mode}) failed:\n{done.stderr[-3000:]}')
    line = [ln for ln in done.stdout.splitlines() if ln.startswith('RSS ')][-1]
    peak_kib, after_bind_kib, planned = map(int, line.split()[1:])
    return (peak_kib * 1024 / MB, after_bind_kib * 1024 / MB, planned / MB,
            time.perf_counter() - start)


def rss_section(batch=32, runs=3):
    print(f'\n1b. Peak RSS of a process (OMP_NUM_THREADS=2): resnet50_v1 simple_bind + '
          f'{runs} inference forwards at batch {batch}')
    print(f'{"process":<42} {"peak RSS MB":>12} {"after bind MB":>14} {"arena MB":>9} '
          f'{"wall s":>7}')
    for label, mode in (('import ember only (baseline)', 'import'),
                        ('bind + inference', 'bind')):
        rss, after_bind, planned, wall = run_rss_child(mode, batch, runs)
        bound = f'{after_bind:.0f}' if mode == 'bind' else '-'
        print(f'{label:<42} {rss:>12.0f} {bound:>14} {planned:>9.1f} {wall:>7.1f}')
        if mode == 'bind':
            print(f'{"MXNet 1.9.1 (same machine, reported)":<42} {MXNET_RSS_MB:>12}')
            print(f'Ember / MXNet peak RSS: {rss / MXNET_RSS_MB:.2f}')


# -- 2. training: mirroring ----------------------------------------------------------------------

def mirror_section():
    sym = resnet_symbol(loss=True)
    req = parameter_grads(sym)
    print('\n2a. Training resnet50_v1, batch 16, 224x224 (forward+backward graph): '
          'MXNET_BACKWARD_DO_MIRROR (goal: at least 30% less)')
    print(f'{"MXNET_BACKWARD_DO_MIRROR":<26} {"operators":>9} {"outputs MB":>11} '
          f'{"planned MB":>11}')
    planned = {}
    for mirror in (False, True):
        plan, graph = plan_of(sym, 16, 224, grad_req=req, MXNET_BACKWARD_DO_MIRROR=mirror)
        planned[mirror] = plan.planned_bytes
        print(f'{int(mirror):<26} {operator_count(graph):>9} {plan.entry_bytes / MB:>11.1f} '
              f'{plan.planned_bytes / MB:>11.1f}')
    saved = 1 - planned[True] / planned[False]
    print(f'mirroring saves {saved:.1%} of the arena  goal >= 30%: '
          f'{"met" if saved >= 0.30 else "not met"}')


def training_executor(sym, batch, size, mirror):
    """A bound training executor with random weights (bound, so compiled, under `mirror`)."""
    shapes, _ = input_shapes(sym, batch, size)
    with config.override(MXNET_BACKWARD_DO_MIRROR=mirror):
        exe = sym.simple_bind(mx.cpu(), grad_req=parameter_grads(sym), data=shapes['data'],
                              softmax_label=shapes['softmax_label'])
    rng = np.random.default_rng(0)
    for name, array in exe.arg_dict.items():
        if name == 'softmax_label':
            array[:] = rng.integers(0, 1000, array.shape).astype(np.float32)
        else:
            array[:] = rng.standard_normal(array.shape, np.float32) * 0.05
    for name, array in exe.aux_dict.items():
        array[:] = 1.0 if name.endswith('var') else 0.0
    return exe


def one_step(exe):
    """Wall seconds of forward(is_train) + backward, waited for."""
    begin = time.perf_counter()
    exe.forward(is_train=True)
    exe.backward()
    mx.nd.waitall()
    return time.perf_counter() - begin


def speed_section(batch, size, warmup, steps):
    sym = resnet_symbol(loss=True)
    print(f'\n2b. Training step speed, resnet50_v1 batch {batch}, {size}x{size}: executor '
          f'forward+backward, median of {steps} after {warmup} warm-up (goal: mirroring at '
          f'least 90% of the speed)')
    exes = {m: training_executor(sym, batch, size, m) for m in (False, True)}
    times = {m: [] for m in exes}
    for k in range(warmup + steps):
        # The settings alternate step by step, so a change of load on a shared machine
        # hits both.
        for mirror, exe in exes.items():
            seconds = one_step(exe)
            if k >= warmup:
                times[mirror].append(seconds)
    print(f'{"MXNET_BACKWARD_DO_MIRROR":<26} {"arena MB":>9} {"median s":>9} {"min s":>7} '
          f'{"img/s":>7}  steps s')
    medians = {m: statistics.median(t) for m, t in times.items()}
    fastest = {m: min(t) for m, t in times.items()}
    for mirror, exe in exes.items():
        arena = exe._compiled[True].graph.attrs['memory_plan'].planned_bytes / MB
        print(f'{int(mirror):<26} {arena:>9.1f} {medians[mirror]:>9.3f} '
              f'{fastest[mirror]:>7.3f} {batch / medians[mirror]:>7.2f}  '
              f'{", ".join(f"{t:.3f}" for t in times[mirror])}')
    ratio = medians[False] / medians[True]
    print(f'speed with mirroring / without: {ratio:.1%} by the medians, '
          f'{fastest[False] / fastest[True]:.1%} by the fastest steps;  goal >= 90% '
          f'(medians): {"met" if ratio >= 0.90 else "not met"}')


# -- 3. the MLP ----------------------------------------------------------------------------------

def mlp(layers=16, units=64):
    net = mx.gluon.nn.HybridSequential(prefix='mlp_')
    with net.name_scope():
        for _ in range(layers):
            net.add(mx.gluon.nn.Dense(units))
            net.add(mx.gluon.nn.Activation('relu'))
    net.initialize(mx.init.Xavier())
    return net


def call_us(net, x, calls):
    """Median µs of one call that waits for its result, after warm-up calls."""
    for _ in range(max(20, calls // 20)):
        net(x).wait_to_read()
    times = []
    for _ in range(calls):
        begin = time.perf_counter()
        net(x).wait_to_read()
        times.append(time.perf_counter() - begin)
    return statistics.median(times) * 1e6, min(times) * 1e6


def mlp_section(calls):
    x = mx.nd.array(np.random.default_rng(0).standard_normal((4, 64), np.float32))
    imperative = mlp()
    hybrid = mlp()
    hybrid.hybridize(static_alloc=True, static_shape=True)
    traced = hybrid(mx.sym.var('data')).to_graph()
    ops = operator_count(traced)
    imp_us, imp_min = call_us(imperative, x, calls)
    hyb_us, hyb_min = call_us(hybrid, x, calls)
    ran_graph = hybrid._cached_op is not None
    print(f'\n3. MLP 16 x (Dense(64) + relu), batch 4: {ops} operators in the traced graph '
          f'({len(traced.nodes)} nodes with the variables); median of {calls} calls, each '
          f'waiting for its result')
    print(f'{"mode":<26} {"median µs":>10} {"min µs":>8}')
    print(f'{"imperative":<26} {imp_us:>10.0f} {imp_min:>8.0f}')
    print(f'{"hybridized":<26} {hyb_us:>10.0f} {hyb_min:>8.0f}'
          f'{"" if ran_graph else "   (no cached graph ran!)"}')
    print(f'{"MXNet 1.9.1 hybridized":<26} {MXNET_MLP_US:>10}')
    ratio = hyb_us / imp_us
    print(f'hybridized / imperative: {ratio:.2f}  goal <= 0.33: '
          f'{"met" if ratio <= 1 / 3 else "not met"};  hybridized <= {MXNET_MLP_US} µs: '
          f'{"met" if hyb_us <= MXNET_MLP_US else "not met"}')


# ------------------------------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sections', default=','.join(SECTIONS))
    parser.add_argument('--speed-batch', type=int, default=16)
    parser.add_argument('--speed-size', type=int, default=224)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--steps', type=int, default=5)
    parser.add_argument('--mlp-calls', type=int, default=2000)
    parser.add_argument('--rss-child', choices=('import', 'bind'), help=argparse.SUPPRESS)
    parser.add_argument('--rss-batch', type=int, default=32, help=argparse.SUPPRESS)
    parser.add_argument('--rss-runs', type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        rss_child(args.rss_child, args.rss_batch, args.rss_runs)
        return
    sections = args.sections.split(',')
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f'--sections: unknown {unknown}; accepted: {", ".join(SECTIONS)}')
    print(f'graph_bench: {os.cpu_count()} cores, load average '
          f'{", ".join(f"{v:.2f}" for v in os.getloadavg())}')
    if 'memory' in sections:
        memory_section()
    if 'rss' in sections:
        rss_section()
    if 'mirror' in sections:
        mirror_section()
    if 'speed' in sections:
        speed_section(args.speed_batch, args.speed_size, args.warmup, args.steps)
    if 'mlp' in sections:
        mlp_section(args.mlp_calls)
    print(f'\nload average at the end: {", ".join(f"{v:.2f}" for v in os.getloadavg())}')


if __name__ == '__main__':
    main()
