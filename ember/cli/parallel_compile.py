"""Compile a training script's graphs ahead of time, in parallel worker processes.

    python -m ember parallel-compile [--workers N] [--summary FILE] -- python train.py ...
    neuron_parallel_compile python train.py ...        (the same, as a console script)

First a trial run of the script with NEURON_EXTRACT_GRAPHS_ONLY=1: every graph it would
compile is recorded in the compile cache and returns zeros. A script that fails stops here
unless NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE=1, which compiles what it recorded
before failing. Then every recorded graph is compiled by a worker process (``--workers`` at
a time, default: the cores), each failed compilation tried NEURON_PARALLEL_COMPILE_MAX_RETRIES
more times; a progress bar goes to stderr, and one JSON line per graph (name, key, status,
attempts, seconds, error) to stdout (and to ``--summary`` as a JSON list); the trial run's own
output goes to stderr. The script's real
run afterwards loads every graph from the cache and compiles none. The exit status is 0 when
every graph compiled.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import shlex
import subprocess
import sys
import threading
import time

NAME = 'parallel-compile'

__all__ = ['add_arguments', 'run', 'console']


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--workers', type=int, default=None,
                        help='graphs compiled at once (default: the cores)')
    parser.add_argument('--summary', help='also write the per-graph summary to this JSON file')
    parser.add_argument('command', nargs=argparse.REMAINDER, help='the training command, '
                                                                  'after --')


def run(args) -> int:
    from ember import config
    from ember.executor import compile as compiling
    command = args.command[1:] if args.command[:1] == ['--'] else args.command
    if not command:
        print('parallel-compile: give the training command after --, e.g. '
              '`python -m ember parallel-compile -- python train.py`', file=sys.stderr)
        return 2
    store = compiling.store()
    if store is None:
        print('parallel-compile: NEURON_CC_FLAGS has --no_cache; the compiled graphs need a '
              'cache', file=sys.stderr)
        return 2
    print(f'parallel-compile: trial run of {shlex.join(command)} (graphs extracted, not '
          f'compiled)', file=sys.stderr)
    # the script's output goes to stderr: stdout carries only the summary
    trial = subprocess.run(command, env=config.child_environ(NEURON_EXTRACT_GRAPHS_ONLY='1'),
                           stdout=sys.stderr)
    if trial.returncode != 0:
        if not config.get('NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE'):
            print(f'parallel-compile: the training script failed (status {trial.returncode}); '
                  f'set NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE=1 to compile the graphs '
                  f'it recorded anyway', file=sys.stderr)
            return trial.returncode
        print(f'parallel-compile: the training script failed (status {trial.returncode}); '
              f'compiling what it recorded', file=sys.stderr)
    records = store.pending()
    workers = args.workers or config.cpu_count()
    results = _compile_all(records, workers, config.get('NEURON_PARALLEL_COMPILE_MAX_RETRIES'))
    for result in results:
        print(json.dumps(result))
    if args.summary:
        with open(args.summary, 'w') as out:
            json.dump(results, out, indent=2)
    failed = [r for r in results if r['status'] == 'failed']
    print(f'parallel-compile: {len(results) - len(failed)} of {len(results)} graphs compiled'
          + (f'; failed: {", ".join(r["graph"] for r in failed)}' if failed else ''),
          file=sys.stderr)
    return 1 if failed else 0


def _compile_all(records, workers, retries) -> list:
    bar = _Progress(len(records))
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        futures = [pool.submit(_compile_one, path, retries, bar) for path in records]
        return [future.result() for future in futures]


def _compile_one(path, retries, bar) -> dict:
    from ember import config
    from ember.compiler import extract
    record = extract.read(path.read_bytes())
    result = {'graph': record.name, 'key': record.digest, 'nodes': len(record.graph.nodes),
              'status': 'failed', 'attempts': 0, 'seconds': 0.0, 'error': None}
    started = time.perf_counter()
    for attempt in range(1 + retries):
        result['attempts'] = attempt + 1
        command = [sys.executable, '-m', 'ember.cli._compile_worker', str(path)]
        worker = subprocess.run(command + (['--retry'] if attempt else []), capture_output=True,
                                text=True, env=config.child_environ(
                                    NEURON_EXTRACT_GRAPHS_ONLY=None))
        if worker.returncode == 0:
            result['status'] = json.loads(worker.stdout.strip().splitlines()[-1])['status']
            result['error'] = None
            path.unlink(missing_ok=True)
            break
        result['error'] = _failure(worker)
        bar.note(f'{record.name}: attempt {attempt + 1} failed: {result["error"]}')
    result['seconds'] = round(time.perf_counter() - started, 3)
    bar.advance(result['status'] != 'failed')
    return result


def _failure(worker) -> str:
    if worker.returncode < 0:
        return f'killed by signal {-worker.returncode}'
    lines = worker.stderr.strip().splitlines()
    return lines[-1] if lines else f'exit status {worker.returncode}'


class _Progress:
    """A bar on stderr: redrawn in place on a terminal, one line per graph elsewhere."""

    def __init__(self, total):
        self.total, self.done, self.failed = total, 0, 0
        self._lock = threading.Lock()
        self._tty = sys.stderr.isatty()
        self._draw()

    def advance(self, ok):
        with self._lock:
            self.done += 1
            self.failed += not ok
            self._draw()

    def note(self, text):
        with self._lock:
            print(('\n' if self._tty else '') + f'parallel-compile: {text}', file=sys.stderr)

    def _draw(self):
        width = 30
        filled = width * self.done // max(1, self.total)
        line = (f'[{"#" * filled}{"." * (width - filled)}] {self.done}/{self.total} graphs'
                + (f', {self.failed} failed' if self.failed else ''))
        print(('\r' + line) if self._tty else line, end='' if self._tty else '\n',
              file=sys.stderr, flush=True)
        if self._tty and self.done == self.total:
            print(file=sys.stderr)


def console() -> int:
    """``neuron_parallel_compile COMMAND ...``: the console script."""
    from ember.cli import main
    argv = sys.argv[1:]
    return main(['parallel-compile'] + (argv if argv[:1] == ['--'] else ['--'] + argv))
