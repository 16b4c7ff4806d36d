"""All-reduce throughput, 1 KB to 256 MB on 2 and 4 ranks: Ember's KVStore beside a raw mpi4py
Allreduce of the same buffers and beside torch.distributed (gloo) from the peers' PyTorch.

    python benchmarks/allreduce.py                       # ranks 2,4; 1K..256M
    python benchmarks/allreduce.py --ranks 2 --sizes 1K,1M,64M --seconds 1

Ember and raw MPI run in the same ranks (``python -m ember launch``), taking turns call by
call, so that the machine's drift (four ranks on two cores) hits both alike. Each call all-reduces ``--arrays`` arrays of the size (fewer
past 256 MB in all), as a training step all-reduces several gradients: Ember with one
``kv.pushpull(keys, arrays)`` on a ``dist_sync`` store (no optimizer: the path a Trainer takes
with ``update_on_kvstore=False``), then a wait for the arrays; MPI with one
``comm.Allreduce(IN_PLACE, array)`` per array. gloo runs in the
PyTorch 2.13 CPU environment of ``benchmarks/peers/envs.py`` (``torch.distributed``,
``all_reduce`` of a float32 tensor), ranks on this machine over loopback. Each cell is the
median time of as many calls as fit in ``--seconds`` (at least ``--min-calls``), reported as
bus bandwidth per array: bytes x 2 (n - 1) / n / time, in GB/s. Goal: Ember >= 90% of MPI from 1 MB,
and ahead of gloo.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_ENV = Path.home() / '.cache' / 'ember-bench' / 'torch-2.13.0-cpu' / 'bin' / 'python'
UNITS = {'K': 1024, 'M': 1024 ** 2, 'G': 1024 ** 3}


def parse_size(text):
    text = text.strip().upper().rstrip('B')
    if text[-1] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def size_text(nbytes):
    for unit in ('G', 'M', 'K'):
        if nbytes >= UNITS[unit] and nbytes % UNITS[unit] == 0:
            return f'{nbytes // UNITS[unit]}{unit}'
    return str(nbytes)


def default_sizes():
    return [1024 * 4 ** k for k in range(10)]       # 1K, 4K, ..., 256M


def timed(calls, seconds, min_calls, agree=lambda count: count):
    """Median seconds of one call of each of `calls`, taking turns call by call (so that the
    machine's drift hits each alike): warm up once, run `min_calls` rounds, then as many more
    as fill `seconds`; `agree` makes every rank take the same count (rank 0's)."""
    for call in calls:
        call()
    times = [[] for _ in calls]

    def one_round():
        for call, kept in zip(calls, times):
            start = time.perf_counter()
            call()
            kept.append(time.perf_counter() - start)
    for _ in range(min_calls):
        one_round()
    per_round = sum(sorted(kept)[len(kept) // 2] for kept in times)
    for _ in range(agree(int(seconds / max(per_round, 1e-6)))):
        one_round()
    return [sorted(kept)[len(kept) // 2] for kept in times]


def bus_bandwidth(nbytes, ranks, seconds):
    return nbytes * 2 * (ranks - 1) / ranks / seconds / 1e9


# ----------------------------------------------------------------------------------------------
# Inside the ranks

def arrays_for(nbytes, most):
    """Arrays per call: several, as a training step all-reduces several gradients, up to
    256 MB in all."""
    return max(1, min(most, (256 * UNITS['M']) // nbytes))


def ember_and_mpi_worker(args):
    import numpy as np
    import ember as mx
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    kv = mx.kv.create('dist_sync')

    def agree(count):
        return comm.bcast(count, root=0)
    rows = []
    for index, nbytes in enumerate(args.sizes):
        count, many = nbytes // 4, arrays_for(nbytes, args.arrays)
        keys = [f'{index}-{k}' for k in range(many)]
        arrays = [mx.nd.ones((count,)) for _ in keys]
        kv.init(keys, [mx.nd.zeros((count,)) for _ in keys])
        raws = [np.ones(count, np.float32) for _ in keys]

        def ember_call():
            kv.pushpull(keys, arrays)
            for array in arrays:
                array.wait_to_read()

        def mpi_call():
            for raw in raws:
                comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM)
        comm.Barrier()
        ember_time, mpi_time = (t / many for t in timed(
            [ember_call, mpi_call], args.seconds * 2, args.min_calls, agree))
        times = comm.gather((ember_time, mpi_time), root=0)
        if comm.rank == 0:
            rows.append({'bytes': nbytes, 'arrays': many, 'ember': max(t[0] for t in times),
                         'mpi': max(t[1] for t in times)})
    if comm.rank == 0:
        print('RESULT ' + json.dumps(rows), flush=True)


def gloo_worker(args):
    import torch
    import torch.distributed as dist
    os.environ['MASTER_ADDR'], os.environ['MASTER_PORT'] = '127.0.0.1', str(args.port)
    dist.init_process_group('gloo', rank=args.rank, world_size=args.world)
    torch.set_num_threads(1)

    def agree(count):
        shared = [count]
        dist.broadcast_object_list(shared, src=0)
        return shared[0]
    rows = []
    for nbytes in args.sizes:
        many = arrays_for(nbytes, args.arrays)
        tensors = [torch.ones(nbytes // 4, dtype=torch.float32) for _ in range(many)]

        def call():
            for tensor in tensors:
                dist.all_reduce(tensor)
        dist.barrier()
        seconds = timed([call], args.seconds, args.min_calls, agree)[0] / many
        gathered = [None] * args.world
        dist.all_gather_object(gathered, seconds)
        rows.append({'bytes': nbytes, 'gloo': max(gathered)})
    if args.rank == 0:
        print('RESULT ' + json.dumps(rows), flush=True)
    dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# The driver

def common_arguments(args):
    return ['--sizes', ','.join(size_text(s) for s in args.sizes), '--seconds',
            str(args.seconds), '--min-calls', str(args.min_calls), '--arrays', str(args.arrays)]


def run_ember_and_mpi(args, ranks):
    command = [sys.executable, '-m', 'ember', 'launch', '-n', str(ranks)]
    if args.cores_per_rank:
        command += ['--cores-per-rank', str(args.cores_per_rank)]
    command += [__file__, '--worker', 'ember'] + common_arguments(args)
    return _result(subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                                  env=_environ()))


def run_gloo(args, ranks):
    if not TORCH_ENV.exists():
        return None
    port = _free_port()
    processes = [subprocess.Popen([str(TORCH_ENV), __file__, '--worker', 'gloo', '--rank',
                                   str(r), '--world', str(ranks), '--port', str(port)]
                                  + common_arguments(args), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=ROOT)
                 for r in range(ranks)]
    outputs = [p.communicate() for p in processes]
    found = _result(subprocess.CompletedProcess([], processes[0].returncode, *outputs[0]))
    return found


def _environ():
    environ = dict(os.environ)
    environ['PYTHONPATH'] = str(ROOT)
    return environ


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _result(done):
    for line in done.stdout.splitlines():
        if 'RESULT ' in line:
            return json.loads(line.split('RESULT ', 1)[1])
    sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
    raise SystemExit(f'a worker failed (exit status {done.returncode})')


def table(ranks, ember_rows, gloo_rows):
    gloo = {row['bytes']: row['gloo'] for row in gloo_rows or []}
    print(f'\n{ranks} ranks: bus bandwidth in GB/s (median time per array in ms)')
    print(f'{"size":>6} | {"ember":>16} | {"mpi4py":>16} | {"gloo":>16} | {"ember/mpi":>9} | '
          f'{"ember/gloo":>10}')
    for row in ember_rows:
        nbytes = row['bytes']
        cells = [row['ember'], row['mpi'], gloo.get(nbytes)]
        texts = [f'{bus_bandwidth(nbytes, ranks, t):7.3f} ({t * 1e3:6.2f})' if t else
                 f'{"-":>16}' for t in cells]
        ratio_mpi = row['mpi'] / row['ember']
        ratio_gloo = f'{gloo[nbytes] / row["ember"]:10.2f}' if nbytes in gloo else f'{"-":>10}'
        print(f'{size_text(nbytes):>6} | {texts[0]} | {texts[1]} | {texts[2]} | '
              f'{ratio_mpi:9.2f} | {ratio_gloo}')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--ranks', default='2,4', help='rank counts, e.g. 2,4')
    parser.add_argument('--sizes', default=','.join(size_text(s) for s in default_sizes()),
                        help='array sizes in bytes (1K, 4M, ...)')
    parser.add_argument('--seconds', type=float, default=0.5, help='time per cell')
    parser.add_argument('--min-calls', type=int, default=5, help='calls per cell at least')
    parser.add_argument('--arrays', type=int, default=4,
                        help='arrays all-reduced per call (fewer past 256 MB in all)')
    parser.add_argument('--cores-per-rank', type=int, default=None,
                        help='pin each Ember/MPI rank to this many cores')
    parser.add_argument('--no-gloo', action='store_true', help='skip torch.distributed')
    parser.add_argument('--worker', choices=('ember', 'gloo'), help=argparse.SUPPRESS)
    parser.add_argument('--rank', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--world', type=int, help=argparse.SUPPRESS)
    parser.add_argument('--port', type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.sizes = [parse_size(s) for s in args.sizes.split(',')]
    if args.worker == 'ember':
        return ember_and_mpi_worker(args)
    if args.worker == 'gloo':
        return gloo_worker(args)
    for ranks in (int(r) for r in args.ranks.split(',')):
        ember_rows = run_ember_and_mpi(args, ranks)
        gloo_rows = None if args.no_gloo else run_gloo(args, ranks)
        table(ranks, ember_rows, gloo_rows)
        if gloo_rows is None and not args.no_gloo:
            print(f'(gloo skipped: no PyTorch environment at {TORCH_ENV})')


if __name__ == '__main__':
    main()
