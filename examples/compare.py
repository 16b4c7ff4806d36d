"""Run every example under MXNet 1.9.1 and under Ember, and compare what they print.

    python examples/compare.py [--mxnet-python PATH] [--all] [--record] [NAME ...]

Each ``examples/*.py`` (this file and names starting with ``_`` aside) runs twice: with
MXNet's Python (the environment ``benchmarks/peers/envs.py`` builds, by default
``~/.cache/ember-bench/mxnet-1.9.1/bin/python``) and as ``python -m ember run`` (``import
mxnet`` gives Ember). Their standard outputs are compared line by line; the table shows the
lines that differ side by side (``--all``: every line), and a summary per example. The exit
status is 1 when some example prints differently or fails. ``--record`` also writes MXNet's
output to ``tests/data/mxnet-1.9.1/examples/<name>.out``, which ``tests/test_examples.py``
compares Ember's with.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RECORDED = REPO / 'tests' / 'data' / 'mxnet-1.9.1' / 'examples'
DEFAULT_MXNET = Path('~/.cache/ember-bench/mxnet-1.9.1/bin/python').expanduser()
TIMEOUT = 600
WIDTH = 60


def examples(names=()):
    """The example programs, by name (all of them when `names` is empty)."""
    found = sorted(p for p in HERE.glob('*.py')
                   if p.name != 'compare.py' and not p.name.startswith('_'))
    if names:
        found = [p for p in found if p.stem in names or p.name in names]
    return found


def environment():
    """The environment of the runs: two OpenMP threads (MXNet's advice for its tests), and
    Ember importable from this checkout."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get('OMP_NUM_THREADS', '2'))
    env['PYTHONPATH'] = str(REPO) + os.pathsep + env.get('PYTHONPATH', '')
    return env


def run(command, cwd):
    """(exit status, stdout lines, stderr, seconds) of `command`."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True,
                              text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return 124, [], f'timed out after {TIMEOUT} s', time.perf_counter() - start
    return (done.returncode, done.stdout.splitlines(), done.stderr,
            time.perf_counter() - start)


def side_by_side(left, right, show_all):
    """Rows (mark, line number, MXNet's line, Ember's line) of the lines to show."""
    rows = []
    for number in range(max(len(left), len(right))):
        ours = right[number] if number < len(right) else '(missing)'
        theirs = left[number] if number < len(left) else '(missing)'
        if theirs != ours or show_all:
            rows.append(('=' if theirs == ours else '!', number + 1, theirs, ours))
    return rows


def _cut(text):
    return text if len(text) <= WIDTH else text[:WIDTH - 3] + '...'


def report(path, mxnet, ember, show_all):
    """Print the comparison of one example; True when both printed the same."""
    same = mxnet[0] == 0 and ember[0] == 0 and mxnet[1] == ember[1]
    print(f'\n{path.name}: MXNet exit {mxnet[0]} in {mxnet[3]:.1f} s, Ember exit {ember[0]} '
          f'in {ember[3]:.1f} s: {"same output" if same else "DIFFERENT"} '
          f'({len(mxnet[1])} lines from MXNet, {len(ember[1])} from Ember)')
    rows = side_by_side(mxnet[1], ember[1], show_all)
    if rows:
        print(f'  {"":1} {"line":>4}  {"MXNet 1.9.1":<{WIDTH}}  Ember')
        for mark, number, theirs, ours in rows:
            print(f'  {mark} {number:>4}  {_cut(theirs):<{WIDTH}}  {_cut(ours)}')
    for name, result in (('MXNet', mxnet), ('Ember', ember)):
        if result[0] != 0:
            print(f'  {name} failed:\n' + '\n'.join('    ' + line for line in
                                                     result[2].strip().splitlines()[-8:]))
    return same


def record(path, lines):
    RECORDED.mkdir(parents=True, exist_ok=True)
    (RECORDED / f'{path.stem}.out').write_text('\n'.join(lines) + '\n')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('names', nargs='*', help='examples to run (default: all)')
    parser.add_argument('--mxnet-python', type=Path, default=DEFAULT_MXNET,
                        help=f'the Python of an MXNet 1.9.1 environment ({DEFAULT_MXNET})')
    parser.add_argument('--all', action='store_true', help='show every line, not only those '
                        'that differ')
    parser.add_argument('--record', action='store_true', help="write MXNet's outputs where "
                        'tests/test_examples.py reads them')
    args = parser.parse_args(argv)
    if not args.mxnet_python.exists():
        print(f'{args.mxnet_python} is missing: build it with python benchmarks/peers/envs.py',
              file=sys.stderr)
        return 2
    results = []
    for path in examples(args.names):
        mxnet = run([str(args.mxnet_python), str(path)], cwd=REPO)
        ember = run([sys.executable, '-m', 'ember', 'run', str(path)], cwd=REPO)
        if args.record and mxnet[0] == 0:
            record(path, mxnet[1])
        results.append((path.name, report(path, mxnet, ember, args.all)))
    print('\n' + '\n'.join(f'{"same" if same else "DIFFERENT":>9}  {name}'
                           for name, same in results))
    return 0 if all(same for _, same in results) else 1


if __name__ == '__main__':
    sys.exit(main())
