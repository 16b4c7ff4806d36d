"""Ember beside MXNet 1.9.1 and PyTorch 2.13 CPU: images per second and peak memory, interleaved.

    python benchmarks/compare.py [--networks resnet50_v1,alexnet] [--batch-sizes 1,8,32]
        [--cells resnet50_v1:8,alexnet:1] [--frameworks ember,mxnet,torch,torch-compile]
        [--repeats 3] [--warmup 2] [--batches 10] [--min-seconds 3] [--quick]
        [--train | --train-only] [--json out.json] [--env-dir ~/.cache/ember-bench]
        [--torch-wheel PATH] [--setup-only] [--ember-env NAME=VALUE ...] [--threads 2]
        [--quiet-wait 60] [--quiet-threshold 0.15] [--timeout 900] [--compile-timeout 600]

Every measurement is a fresh process (benchmarks/peers/*_runner.py) printing one JSON line:
img/s (batch * timed batches / elapsed, after the warm-up batches) and the process's peak RSS.
Ember and MXNet run the same Gluon model zoo code (gluon_runner.py, hybridized with
static_alloc); PyTorch runs hand-written equivalents (torch_models.py) eagerly under
torch.no_grad() and through torch.compile. The order is interleaved, for repeat in 1..R, for
each (network, batch), for each framework, so drift on the machine hits all of them alike;
each cell reports the median of the repeats.

MXNet 1.9.1 (with numpy 1.23.5) and PyTorch 2.13.0 CPU live in virtual environments under
--env-dir, created on first use (PyTorch from a local wheel file, see peers/envs.py). Ember
runs from this repository with the current interpreter. Every runner gets
OMP_NUM_THREADS=--threads (default: the cores this process may use), without which MXNet uses
half the cores. ``--ember-env NAME=VALUE`` sets a variable for Ember's runs only (e.g.
MXNET_MKLDNN_ENABLED=0: the MXNET_* names mean the same to MXNet itself).

Other processes matter more than usual: OpenMP threads spin at barriers, so with another
process busy on one of two cores a 2-thread run slows down several times, not by half. Before
each run the script waits up to --quiet-wait seconds for the machine to go quiet, records the
share of the CPUs that others used during the run, and marks such runs '*' in the tables.

A run that fails prints '-' with the reason; one that passes its time limit is not tried
again for that cell. The goal column checks issue #5's goal: Ember >= 1.25x MXNet's
img/s with a peak RSS no higher than MXNet's. ``--train`` adds the training row (resnet50_v1,
batch 16, SGD with momentum on synthetic data). ``--quick`` is ``--warmup 1 --batches 3
--min-seconds 1``.

``--device gpu`` runs Ember on mx.gpu(0) beside PyTorch eager on the same card (cuda:0, each
step synchronised as Ember's waits do, float32 without TF32 on either side unless
``--ember-env MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION=1`` and ``--torch-tf32``); the goal
is then issue #34's, Ember >= 0.9x PyTorch eager's img/s. ``--torch-python PATH`` runs
PyTorch with an interpreter that has it (on a GPU machine, a CUDA build), instead of the
environment made from a CPU wheel.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PEERS = REPO / 'benchmarks' / 'peers'
sys.path.insert(0, str(PEERS))
import envs  # noqa: E402  (benchmarks/peers/envs.py)

FRAMEWORKS = ('ember', 'mxnet', 'torch', 'torch-compile')
TITLES = {'ember': 'Ember', 'mxnet': 'MXNet 1.9.1', 'torch': 'PyTorch eager',
          'torch-compile': 'torch.compile'}
NETWORKS = ('alexnet', 'vgg16', 'inceptionv3', 'resnet50_v1', 'resnet152_v1')
TRAIN_NETWORK, TRAIN_BATCH = 'resnet50_v1', 16
GOAL_SPEEDUP = 1.25
GPU_GOAL_SPEEDUP = 0.9      # issue #34: Ember on a GPU against PyTorch eager on the same card


@dataclass(frozen=True)
class Cell:
    """One row of the comparison: a network at a batch size, inference or training."""
    network: str
    batch: int
    mode: str = 'inference'

    def label(self):
        return f'{self.network}, batch {self.batch}, {self.mode}'


@dataclass(frozen=True)
class Outcome:
    """The median of one framework's runs on one cell, or why there is none."""
    img_per_s: float | None
    peak_rss_mb: float | None
    runs: tuple = ()
    others_loads: tuple = ()
    error: str | None = None
    busy: bool = False       # no quiet run: the medians come from runs others slowed down


# ---- running one process ---------------------------------------------------------------------

def runner_argv(framework, cell, args):
    """The command line of one measurement."""
    common = ['--network', cell.network, '--batch', str(cell.batch), '--mode', cell.mode,
              '--warmup', str(args.warmup), '--batches', str(args.batches),
              '--min-seconds', str(args.min_seconds), '--device', args.device]
    if framework in ('ember', 'mxnet'):
        python = sys.executable if framework == 'ember' else envs.MXNET_ENV.python(args.env_dir)
        return [str(python), str(PEERS / 'gluon_runner.py'), '--framework', framework] + common
    torch_python = args.torch_python or args.torch_env.python(args.env_dir)
    flags = ['--compile'] if framework == 'torch-compile' else []
    flags += ['--tf32'] if args.torch_tf32 else []
    return [str(torch_python), str(PEERS / 'torch_runner.py')] + flags + common


def runner_env(framework, args):
    """The child's environment: ours, with the thread count; Ember also gets the repository
    on its path and the --ember-env variables, the peers get no PYTHONPATH at all."""
    env = dict(os.environ)
    env['OMP_NUM_THREADS'] = str(args.threads)
    env.pop('PYTHONPATH', None)
    if framework == 'ember':
        env['PYTHONPATH'] = str(REPO)
        env.update(args.ember_env)
    return env


def run_process(argv, env, timeout):
    """(stdout, stderr, None) or (stdout, stderr, reason) when it failed or ran too long.
    The child gets its own process group so a timeout also ends its workers."""
    child = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        return out, err, f'timed out after {timeout:g} s'
    if child.returncode != 0:
        return out, err, f'exit {child.returncode}: {last_line(err)}'
    return out, err, None


def last_line(text, width=200):
    """The last non-blank line, its middle cut out when long: the end names the cause."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return '(no output)'
    line = lines[-1]
    return line if len(line) <= width else f'{line[:60]} ... {line[-(width - 65):]}'


def measure(framework, cell, args):
    """The runner's JSON record, or {'error': reason}; both carry 'others_load', the share of
    the machine's CPUs that other processes used while it ran."""
    timeout = args.compile_timeout if framework == 'torch-compile' else args.timeout
    with LoadMeter() as meter:
        out, err, failure = run_process(runner_argv(framework, cell, args),
                                        runner_env(framework, args), timeout)
    record = parse_record(out, err, failure)
    record['others_load'] = meter.others_load
    return record


def parse_record(out, err, failure):
    if failure:
        return {'error': failure, 'stderr_tail': err[-3000:]}
    records = [line for line in out.splitlines() if line.startswith('{')]
    if not records:
        return {'error': f'no JSON line in the output: {last_line(out + err)}'}
    return json.loads(records[-1])


# ---- other processes on the machine -----------------------------------------------------------
# OpenMP threads spin at barriers: with another process busy on one of two cores, a 2-thread
# run slows down several times, not by half. So each run records how much of the machine
# others used, and waits (up to --quiet-wait seconds) for a quiet machine before it starts.

def busy_cpu_seconds():
    """CPU seconds that every process together has used since boot, or None off Linux."""
    try:
        with open('/proc/stat') as stat:
            fields = [int(value) for value in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf('SC_CLK_TCK')


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class LoadMeter:
    """Measures, around a child process, the CPU share used by everything but that child."""

    def __enter__(self):
        self.busy, self.own = busy_cpu_seconds(), children_cpu_seconds()
        self.start = time.perf_counter()
        self.others_load = None
        return self

    def __exit__(self, *exc):
        busy = busy_cpu_seconds()
        wall = time.perf_counter() - self.start
        if busy is not None and self.busy is not None and wall > 0:
            others = busy - self.busy - (children_cpu_seconds() - self.own)
            self.others_load = max(0.0, others / (wall * os.cpu_count()))
        return False


def machine_load(seconds=1.0):
    """The share of all CPUs in use over the next `seconds`, or None off Linux."""
    before = busy_cpu_seconds()
    time.sleep(seconds)
    after = busy_cpu_seconds()
    if before is None or after is None:
        return None
    return (after - before) / (seconds * os.cpu_count())


def wait_for_quiet(threshold, max_wait):
    """Sleeps until the machine's load falls below `threshold`, at most `max_wait` seconds;
    returns the last load seen."""
    deadline = time.perf_counter() + max_wait
    load = machine_load()
    while load is not None and load >= threshold and time.perf_counter() < deadline:
        load = machine_load()
    return load


# ---- the interleaved schedule ------------------------------------------------------------------

def cells_of(args):
    cells = []
    if args.cells:
        cells = [Cell(net, batch) for net, batch in args.cells]
    elif not args.train_only:
        cells = [Cell(net, batch) for net in args.networks for batch in args.batch_sizes]
    if args.train or args.train_only:
        cells.append(Cell(TRAIN_NETWORK, args.train_batch, 'train'))
    return cells


def frameworks_for(cell, frameworks):
    # Training is measured eagerly in PyTorch: compiling the backward pass on two cores takes
    # longer than the whole comparison.
    if cell.mode == 'train':
        return [f for f in frameworks if f != 'torch-compile']
    return list(frameworks)


def run_all(cells, args):
    """[(repeat, cell, framework, record)], interleaved; a (framework, cell) that ran past
    its time limit once is not tried again (a crash is cheap to retry)."""
    results, failed = [], set()
    for repeat in range(1, args.repeats + 1):
        for cell in cells:
            for framework in frameworks_for(cell, args.frameworks):
                if (framework, cell) in failed:
                    continue
                for record in attempts(framework, cell, args):
                    results.append((repeat, cell, framework, record))
                    print(progress_line(repeat, args.repeats, cell, framework, record),
                          flush=True)
                if record.get('error', '').startswith('timed out'):
                    failed.add((framework, cell))
    return results


def attempts(framework, cell, args):
    """Yields the records of one measurement: again, up to --busy-retries times, while
    other processes were busy during it."""
    for _ in range(1 + args.busy_retries):
        if args.quiet_wait > 0:
            wait_for_quiet(args.quiet_threshold, args.quiet_wait)
        start = time.perf_counter()
        record = measure(framework, cell, args)
        record['process_s'] = time.perf_counter() - start
        yield record
        if 'error' in record or not was_busy(record, args.quiet_threshold):
            return


def was_busy(record, threshold):
    load = record.get('others_load')
    return load is not None and load >= threshold


def progress_line(repeat, repeats, cell, framework, record):
    head = f'  [{repeat}/{repeats}] {cell.label():<36} {framework:<14}'
    if 'error' in record:
        return f'{head} - ({record["error"]})'
    return (f'{head} {record["img_per_s"]:8.2f} img/s  {record["peak_rss_mb"]:7.0f} MB  '
            f'({record["process_s"]:.0f} s; others used {fmt(record["others_load"], ".0%")} '
            'of the CPUs)')


def summarize(results, cells, frameworks, threshold):
    """{(cell, framework): Outcome}: medians over the quiet runs, or over all the runs that
    worked when none was quiet (Outcome.busy)."""
    summary = {}
    for cell in cells:
        for framework in frameworks_for(cell, frameworks):
            records = [r for _, c, f, r in results if c == cell and f == framework]
            good = [r for r in records if 'error' not in r]
            errors = [r['error'] for r in records if 'error' in r]
            if not good:
                summary[cell, framework] = Outcome(None, None, error=errors[0] if errors
                                                   else 'not run')
                continue
            quiet = [r for r in good if not was_busy(r, threshold)]
            chosen = quiet or good
            rates = tuple(r['img_per_s'] for r in good)
            loads = tuple(r['others_load'] for r in good)
            summary[cell, framework] = Outcome(
                statistics.median(r['img_per_s'] for r in chosen),
                statistics.median(r['peak_rss_mb'] for r in chosen), rates, loads,
                errors[0] if errors else None, busy=not quiet)
    return summary


# ---- the tables ------------------------------------------------------------------------------

def ratio(ember, other):
    """Ember's img/s over `other`'s (two Outcomes), or None when either has none."""
    if ember is None or other is None or not ember.img_per_s or not other.img_per_s:
        return None
    return ember.img_per_s / other.img_per_s


def goal_verdict(ember, mxnet):
    """Issue #5's goal for one cell: 'yes', 'no (...)' or '-' when either side is missing.

    >>> goal_verdict(Outcome(20.0, 700.0), Outcome(15.0, 750.0))
    'yes'
    >>> goal_verdict(Outcome(16.0, 800.0), Outcome(15.0, 750.0))
    'no (speed 1.07x, RSS 800 > 750 MB)'
    """
    if ember is None or mxnet is None or ember.img_per_s is None or mxnet.img_per_s is None:
        return '-'
    misses = []
    if ember.img_per_s < GOAL_SPEEDUP * mxnet.img_per_s:
        misses.append(f'speed {ember.img_per_s / mxnet.img_per_s:.2f}x')
    if ember.peak_rss_mb > mxnet.peak_rss_mb:
        misses.append(f'RSS {ember.peak_rss_mb:.0f} > {mxnet.peak_rss_mb:.0f} MB')
    verdict = 'yes' if not misses else f'no ({", ".join(misses)})'
    return verdict + (' *' if ember.busy or mxnet.busy else '')


def fmt(value, spec='.2f', suffix=''):
    return '-' if value is None else f'{value:{spec}}{suffix}'


def runs_text(outcome, threshold):
    """The rates of the runs, '*' marking those during which others were busy.

    >>> runs_text(Outcome(14.0, 600.0, (13.9, 14.0), (0.02, 0.4)), threshold=0.15)
    '13.90 14.00*'
    """
    marks = ['*' if load is not None and load >= threshold else ''
             for load in outcome.others_loads]
    text = ' '.join(f'{rate:.2f}{mark}' for rate, mark in zip(outcome.runs, marks))
    return f'{text} - {outcome.error}'.strip() if outcome.error else text


def ratio_text(ember, other):
    """Ember / other as '1.23x', '*' when either median comes from busy runs."""
    value = ratio(ember, other)
    if value is None:
        return '-'
    return f'{value:.2f}x' + ('*' if ember.busy or other.busy else '')


def rate_text(outcome):
    """The median img/s, '*' when it comes from runs that others slowed down."""
    if outcome is None or outcome.img_per_s is None:
        return '-'
    return f'{outcome.img_per_s:.2f}' + ('*' if outcome.busy else '')


def cell_table(cell, summary, frameworks, threshold):
    """The lines of one cell's table: one row per framework."""
    ember = summary.get((cell, 'ember'))
    lines = [f'{cell.label()}: median of the quiet runs (of all runs where none was quiet)', '',
             '| framework      |   img/s | Ember / it | peak RSS MB | runs |',
             '|----------------|--------:|-----------:|------------:|------|']
    for framework in frameworks_for(cell, frameworks):
        outcome = summary[cell, framework]
        speedup = ratio_text(ember, outcome) if framework != 'ember' else '-'
        runs = runs_text(outcome, threshold)
        lines.append(f'| {TITLES[framework]:<14} | {rate_text(outcome):>7} | '
                     f'{speedup:>10} | {fmt(outcome.peak_rss_mb, ".0f"):>11} '
                     f'| {runs} |')
    if 'mxnet' in frameworks:
        verdict = goal_verdict(ember, summary.get((cell, 'mxnet')))
        lines += ['', f'goal (Ember >= {GOAL_SPEEDUP}x MXNet img/s, RSS <= MXNet): {verdict}',
                  '']
    else:
        verdict = gpu_goal_verdict(ember, summary.get((cell, 'torch')))
        lines += ['', f'goal (Ember >= {GPU_GOAL_SPEEDUP}x PyTorch eager img/s): {verdict}', '']
    return lines


def gpu_goal_verdict(ember, torch):
    """Issue #34's goal for one cell: Ember >= 0.9x PyTorch eager's img/s.

    >>> gpu_goal_verdict(Outcome(95.0, 900.0), Outcome(100.0, 2000.0))
    'yes'
    >>> gpu_goal_verdict(Outcome(80.0, 900.0), Outcome(100.0, 2000.0))
    'no (0.80x)'
    """
    value = ratio(ember, torch)
    if value is None:
        return '-'
    return 'yes' if value >= GPU_GOAL_SPEEDUP else f'no ({value:.2f}x)'


def summary_table(cells, summary, frameworks):
    """One row per cell: img/s of each framework, Ember's ratios, peak RSS and the goal."""
    shown = [f for f in FRAMEWORKS if f in frameworks]
    others = [f for f in shown if f != 'ember']
    head = (['network', 'batch', 'mode'] + [f'{f} img/s' for f in shown]
            + [f'Ember/{f}' for f in others] + [f'{f} RSS MB' for f in shown] + ['goal'])
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '|'.join('---' for _ in head) + '|']
    for cell in cells:
        get = summary.get
        rates = [rate_text(get((cell, f))) for f in shown]
        ratios = [ratio_text(get((cell, 'ember')), get((cell, f))) for f in others]
        rss = [fmt(getattr(get((cell, f)), 'peak_rss_mb', None), '.0f') for f in shown]
        verdict = goal_verdict(get((cell, 'ember')), get((cell, 'mxnet'))) \
            if 'mxnet' in frameworks else gpu_goal_verdict(get((cell, 'ember')),
                                                            get((cell, 'torch')))
        row = [cell.network, str(cell.batch), cell.mode] + rates + ratios + rss + [verdict]
        lines.append('| ' + ' | '.join(row) + ' |')
    return lines


# ---- setup, options and the main program ---------------------------------------------------

def prepare_envs(args):
    """Create the virtual environments the chosen frameworks need; {name: seconds spent}."""
    spent = {}
    if 'mxnet' in args.frameworks:
        spent['mxnet'] = envs.create(envs.MXNET_ENV, args.env_dir)
    if {'torch', 'torch-compile'} & set(args.frameworks) and not args.torch_python:
        spent['torch'] = envs.create(args.torch_env, args.env_dir)
    return spent


def git_revision():
    try:
        head = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                               cwd=REPO, text=True, capture_output=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return 'unknown'
    return head + ('+changes' if dirty else '')


def _choices(allowed, what):
    def parse(text):
        names = [name.strip() for name in text.split(',') if name.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f'{what} {unknown or text!r}: choose from '
                                             f'{", ".join(allowed)}')
        return names
    return parse


def _ints(text):
    values = [int(value) for value in text.split(',') if value.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f'batch sizes {text!r}: expected positive integers, '
                                         'e.g. 1,8,32')
    return values


def _cells(text):
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(','))):
        network, _, batch = item.partition(':')
        if network not in NETWORKS or not batch.isdigit() or int(batch) < 1:
            raise argparse.ArgumentTypeError(
                f'--cells item {item!r}: expected NETWORK:BATCH with NETWORK one of '
                f'{", ".join(NETWORKS)}, e.g. resnet50_v1:8,alexnet:1')
        pairs.append((network, int(batch)))
    return pairs


def _assignment(text):
    name, sep, value = text.partition('=')
    if not sep or not name:
        raise argparse.ArgumentTypeError(f'--ember-env {text!r}: expected NAME=VALUE, e.g. '
                                         'MXNET_MKLDNN_ENABLED=0')
    return name, value


class _HelpFormatter(argparse.RawDescriptionHelpFormatter,
                     argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and each option's default."""


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    add = parser.add_argument
    add('--networks', type=_choices(NETWORKS, 'networks'), default=list(NETWORKS),
        help='comma-separated, of ' + ','.join(NETWORKS))
    add('--batch-sizes', type=_ints, default=[1, 8, 32], help='comma-separated')
    add('--cells', type=_cells, default=None,
        help='NETWORK:BATCH,... instead of every network at every batch size')
    add('--frameworks', type=_choices(FRAMEWORKS, 'frameworks'), default=list(FRAMEWORKS),
        help='comma-separated, of ' + ','.join(FRAMEWORKS))
    add('--repeats', type=int, default=3, help='processes per framework and cell (median)')
    add('--warmup', type=int, default=2, help='untimed batches per process')
    add('--batches', type=int, default=10, help='timed batches per process, at least')
    add('--min-seconds', type=float, default=3.0, help='timed seconds per process, at least')
    add('--quick', action='store_true', help='--warmup 1 --batches 3 --min-seconds 1')
    add('--train', action='store_true', help=f'add {TRAIN_NETWORK} training, batch '
                                             f'{TRAIN_BATCH}')
    add('--train-only', action='store_true', help='only the training row')
    add('--json', type=Path, default=None, help='write every run and the medians here')
    add('--env-dir', type=Path, default=envs.DEFAULT_ENV_DIR,
        help='where the MXNet and PyTorch virtual environments live')
    add('--torch-wheel', default=None,
        help='local torch 2.13.0 CPU wheel; None: looked for in ' + ', '.join(envs.WHEEL_PLACES))
    add('--setup-only', action='store_true', help='create the environments and stop')
    add('--device', choices=('cpu', 'gpu'), default='cpu',
        help='gpu: Ember on mx.gpu(0), PyTorch on cuda:0 (no MXNet)')
    add('--torch-python', default=None,
        help='an interpreter with PyTorch to run it with (no environment is made)')
    add('--torch-tf32', action='store_true', help='let PyTorch use TF32 on a GPU')
    add('--train-batch', type=int, default=TRAIN_BATCH, help='batch of the training row')
    add('--threads', type=int, default=len(os.sched_getaffinity(0)),
        help='OMP_NUM_THREADS of every runner')
    add('--ember-env', type=_assignment, action='append', default=[],
        help='NAME=VALUE for the Ember runs only (repeatable)')
    add('--quiet-wait', type=float, default=60.0,
        help='seconds to wait, before each run, for other processes to go quiet; 0: never')
    add('--quiet-threshold', type=float, default=0.15,
        help='share of all CPUs used by others that counts as busy')
    add('--busy-retries', type=int, default=2,
        help='extra runs of a measurement during which others were busy')
    add('--timeout', type=float, default=900.0, help='seconds per process')
    add('--compile-timeout', type=float, default=600.0,
        help='seconds per torch.compile process (compilation included)')
    return parser


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    if args.quick:
        args.warmup, args.batches, args.min_seconds = 1, 3, 1.0
    if args.repeats < 1:
        raise SystemExit(f'--repeats {args.repeats}: expected at least 1 (3 for a median)')
    args.ember_env = dict(args.ember_env)
    args.env_dir = args.env_dir.expanduser()
    if args.device == 'gpu':
        if 'mxnet' in args.frameworks:
            args.frameworks = [f for f in args.frameworks if f != 'mxnet']
    needs_torch = {'torch', 'torch-compile'} & set(args.frameworks)
    args.torch_env = envs.torch_env(args.torch_wheel or envs.find_torch_wheel()) \
        if needs_torch and not args.torch_python else None
    return args


def print_header(args, setup_seconds):
    print(f'{platform.processor() or platform.machine()}, {os.cpu_count()} cores, '
          f'OMP_NUM_THREADS={args.threads}; Ember {git_revision()} on Python '
          f'{platform.python_version()}; environments in {args.env_dir}')
    for name, seconds in setup_seconds.items():
        print(f'  {name} environment: ' + (f'created in {seconds:.0f} s' if seconds
                                           else 'ready'))
    print(f'warm-up {args.warmup}, timed >= {args.batches} batches and >= '
          f'{args.min_seconds:g} s per process, {args.repeats} repeats interleaved'
          + (f'; Ember only: {args.ember_env}' if args.ember_env else ''), flush=True)


def write_json(path, args, results, summary, setup_seconds):
    payload = {
        'options': {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                    if k != 'torch_env'},
        'ember_revision': git_revision(), 'environment_setup_s': setup_seconds,
        'runs': [{'repeat': repeat, **asdict(cell), 'framework': framework, **record}
                 for repeat, cell, framework, record in results],
        'medians': [{**asdict(cell), 'framework': framework, **asdict(outcome),
                     'goal': goal_verdict(summary.get((cell, 'ember')),
                                          summary.get((cell, 'mxnet')))
                     if framework == 'ember' else None}
                    for (cell, framework), outcome in summary.items()],
    }
    path.write_text(json.dumps(payload, indent=1) + '\n')


def main(argv=None):
    args = parse_args(argv)
    setup_seconds = prepare_envs(args)
    print_header(args, setup_seconds)
    if args.setup_only:
        return
    cells = cells_of(args)
    results = run_all(cells, args)
    summary = summarize(results, cells, args.frameworks, args.quiet_threshold)
    print()
    for cell in cells:
        print('\n'.join(cell_table(cell, summary, args.frameworks, args.quiet_threshold)))
    print(f'* other processes used >= {args.quiet_threshold:.0%} of the CPUs during that run, '
          'or during every run of that median (OpenMP runs slow down several times then)\n')
    print('\n'.join(summary_table(cells, summary, args.frameworks)))
    if args.json:
        write_json(args.json, args, results, summary, setup_seconds)
        print(f'\nwrote {args.json}')


if __name__ == '__main__':
    main()
