"""Start a training script on N MPI ranks (the mpich wheel's mpiexec), one rank per core group.

    python -m ember launch -n 4 [--hosts h1,h2] [--cores-per-rank K] train.py args...

Each rank runs `train.py` with ``DMLC_ROLE=worker``, ``DMLC_NUM_WORKER`` and ``DMLC_NUM_SERVER``
set, and with ``--cores-per-rank`` its own cores (``NEURON_RT_VISIBLE_CORES``: rank r on a host
takes cores r*K to r*K+K-1 of the launcher's). Its output lines come prefixed with ``[r]``. A
rank that raises stops every rank at once; the launcher then names the first rank that failed
and exits with its status. Ranks still running ``--kill-after`` seconds after a failure are
ended. Hosts are checked first: a name that does not resolve, or a host whose ssh port does not
answer, is an error naming it.
"""
from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

__all__ = ['find_mpiexec', 'plan_ranks', 'mpiexec_command', 'check_hosts', 'RankPlan']

SSH_PORT = 22
_LOCAL_NAMES = ('localhost', '127.0.0.1', '::1')


def add_arguments(parser):
    parser.add_argument('-n', '--num-ranks', type=int, required=True,
                        help='ranks to start (MPI processes)')
    parser.add_argument('--hosts', default=None,
                        help='comma-separated hosts; ranks fill them in order, evenly')
    parser.add_argument('--cores-per-rank', type=int, default=None,
                        help='consecutive cores each rank pins itself to')
    parser.add_argument('--kill-after', type=float, default=30.0,
                        help='seconds the other ranks get to stop after one fails')
    parser.add_argument('--host-timeout', type=float, default=5.0,
                        help="seconds to wait for a remote host's ssh port")
    parser.add_argument('script', help='the Python script every rank runs')
    parser.add_argument('args', nargs='...', help="the script's arguments")


def run(args) -> int:
    if args.num_ranks < 1:
        print(f'ember launch: -n {args.num_ranks}: expected at least 1 rank', file=sys.stderr)
        return 2
    try:
        hosts = check_hosts(_split_hosts(args.hosts), args.host_timeout)
        plans = plan_ranks(args.num_ranks, hosts, args.cores_per_rank, _local_cores())
        mpiexec = find_mpiexec()
    except LaunchError as exc:
        print(f'ember launch: {exc}', file=sys.stderr)
        return 2
    status_dir = tempfile.mkdtemp(prefix='ember-launch-')
    try:
        command = mpiexec_command(mpiexec, plans, status_dir, args.script, args.args)
        code, dead = _supervise(command, status_dir, args.kill_after)
        return _report(code, dead, status_dir, args.num_ranks)
    finally:
        shutil.rmtree(status_dir, ignore_errors=True)


class LaunchError(Exception):
    """Bad launch input: unknown hosts, cores that do not fit, no mpiexec."""


@dataclass(frozen=True)
class RankPlan:
    """Where one rank runs: its host (None: this machine) and cores (None: unpinned)."""

    rank: int
    host: str | None
    cores: tuple | None


def find_mpiexec() -> str:
    """The mpiexec that the mpich wheel installed beside this Python (its ``bin``)."""
    try:
        files = importlib.metadata.files('mpich') or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for entry in files:
        if entry.name == 'mpiexec':
            path = os.path.realpath(str(entry.locate()))
            if os.access(path, os.X_OK):
                return path
    beside = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    if os.access(beside, os.X_OK):
        return beside
    raise LaunchError("no mpiexec: install the mpich wheel (pip install 'ember[dist]'), "
                      "which puts mpiexec in this Python's bin directory")


def _split_hosts(text):
    if not text:
        return []
    hosts = [h.strip() for h in text.split(',')]
    if any(not h for h in hosts):
        raise LaunchError(f'--hosts {text!r}: an empty host name; expected h1,h2,...')
    return hosts


def check_hosts(hosts, timeout):
    """The hosts, each checked: its name resolves, and a remote host answers on ssh."""
    for host in hosts:
        try:
            addresses = {info[4][0] for info in socket.getaddrinfo(host, SSH_PORT)}
        except socket.gaierror as exc:
            raise LaunchError(f'host {host!r} does not resolve ({exc.strerror}); check the '
                              f'name in --hosts') from None
        if not _is_local(host, addresses):
            _check_ssh(host, timeout)
    return hosts


def _is_local(host, addresses):
    if host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn()):
        return True
    return bool(addresses) and all(a.startswith('127.') or a == '::1' for a in addresses)


def _host_is_local(host):
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, SSH_PORT)}
    except socket.gaierror:
        addresses = set()
    return _is_local(host, addresses)


def _check_ssh(host, timeout):
    try:
        with socket.create_connection((host, SSH_PORT), timeout=timeout):
            return
    except OSError as exc:
        raise LaunchError(f'host {host!r} is unreachable: its ssh port {SSH_PORT} did not '
                          f'answer within {timeout:g} s ({exc}); mpiexec starts ranks there '
                          f'over ssh') from None


def _local_cores():
    from ember import config
    return config.process_cores()


def plan_ranks(count, hosts, cores_per_rank, local_cores):
    """Each rank's host and cores: ranks fill the hosts in order (as evenly as they go), and
    the k-th rank on a host takes the k-th group of `cores_per_rank` cores.

    >>> [(p.host, p.cores) for p in plan_ranks(3, ['a', 'b'], 2, tuple(range(8)))]
    [('a', (0, 1)), ('a', (2, 3)), ('b', (0, 1))]
    """
    hosts = hosts or [None]
    per_host = -(-count // len(hosts))
    plans = []
    for rank in range(count):
        host, local = hosts[rank // per_host], rank % per_host
        cores = None
        if cores_per_rank is not None:
            cores = _cores_of(local, cores_per_rank, host, local_cores, per_host)
        plans.append(RankPlan(rank, host, cores))
    return plans


def _cores_of(local, per_rank, host, local_cores, per_host):
    if per_rank < 1:
        raise LaunchError(f'--cores-per-rank {per_rank}: expected at least 1')
    remote = host is not None and not _host_is_local(host)
    available = tuple(range(per_host * per_rank)) if remote else tuple(local_cores)
    if per_host * per_rank > len(available):
        raise LaunchError(f'--cores-per-rank {per_rank} for {per_host} ranks per host needs '
                          f'{per_host * per_rank} cores; this process may use '
                          f'{len(available)}')
    cores = available[local * per_rank:(local + 1) * per_rank]
    if cores != tuple(range(cores[0], cores[0] + per_rank)):
        raise LaunchError(f'cores {cores} of rank {local} are not consecutive; run the '
                          f'launcher on consecutive cores')
    return cores


def mpiexec_command(mpiexec, plans, status_dir, script, script_args):
    """mpiexec's argument list: one block per rank (its host and environment)."""
    command = [mpiexec]
    count = str(len(plans))
    for plan in plans:
        if plan.rank:
            command.append(':')
        command += ['-n', '1']
        if plan.host is not None:
            command += ['-host', plan.host]
        environment = {'DMLC_ROLE': 'worker', 'DMLC_NUM_WORKER': count,
                       'DMLC_NUM_SERVER': count}
        if plan.cores is not None:
            environment['NEURON_RT_VISIBLE_CORES'] = _cores_text(plan.cores)
        for name, value in environment.items():
            command += ['-env', name, value]
        command += [sys.executable, '-m', 'ember.cli._rank', status_dir, script] + list(
            script_args)
    return command


def _cores_text(cores):
    return str(cores[0]) if len(cores) == 1 else f'{cores[0]}-{cores[-1]}'


# ----------------------------------------------------------------------------------------------
# Running and reporting

def _supervise(command, status_dir, kill_after):
    """Run mpiexec, passing its output on; once a rank has failed, end the job if it outlives
    `kill_after`. Returns (mpiexec's status, the pids mpiexec reported dead with their codes)."""
    from ember import config
    from ember.backend import native
    # mpiexec gets SIGTERM when this launcher dies, however it dies (a SIGKILL from a test's
    # timeout included), so that it ends the ranks instead of leaving them running, holding
    # their cores' locks
    process = subprocess.Popen(command, env=config.child_environ(), start_new_session=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=functools.partial(native.signal_on_parent_death,
                                                            signal.SIGTERM))
    dead = {}
    pumps = [threading.Thread(target=_forward, args=(stream, target, dead), daemon=True)
             for stream, target in ((process.stdout, sys.stdout), (process.stderr, sys.stderr))]
    for pump in pumps:
        pump.start()
    failed_at = None
    try:
        while process.poll() is None:
            time.sleep(0.1)
            if failed_at is None and (_failures(status_dir) or dead):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > kill_after:
                _end(process)
                print(f'ember launch: ranks still ran {kill_after:g} s after a rank failed; '
                      f'ended them', file=sys.stderr)
    except KeyboardInterrupt:
        _end(process)
        raise
    for pump in pumps:
        pump.join(timeout=10)
    return process.returncode, dead


# mpiexec (hydra) names a process that died by its pid and exit code
_BAD_PID = re.compile(r'PID (\d+) RUNNING AT')
_BAD_CODE = re.compile(r'EXIT CODE: (\d+)')


def _forward(stream, target, dead):
    pid = None
    for raw in iter(stream.readline, b''):
        line = raw.decode(errors='replace')
        target.write(line)
        target.flush()
        found = _BAD_PID.search(line)
        if found:
            pid = int(found.group(1))
        code = _BAD_CODE.search(line)
        if code and pid is not None:
            dead[pid] = int(code.group(1))
            pid = None


def _end(process):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def read_statuses(status_dir):
    """{rank: (exit status, time it ended in ns)} from the ranks' status files."""
    return {rank: tuple(int(v) for v in words)
            for rank, words in _rank_files(status_dir, '.status').items() if len(words) == 2}


def _pids(status_dir):
    """{pid: rank} from the files the ranks wrote when they started."""
    return {int(words[0]): rank for rank, words in _rank_files(status_dir, '.pid').items()
            if words}


def _rank_files(status_dir, suffix):
    found = {}
    for name in os.listdir(status_dir):
        if name.startswith('rank-') and name.endswith(suffix):
            try:
                with open(os.path.join(status_dir, name)) as f:
                    found[int(name[5:-len(suffix)])] = f.read().split()
            except (OSError, ValueError):
                continue
    return found


def _failures(status_dir):
    return {rank: s for rank, s in read_statuses(status_dir).items() if s[0] != 0}


def _report(code, dead, status_dir, count):
    """Name the rank that failed first and return its status."""
    statuses = read_statuses(status_dir)
    failures = {rank: s for rank, s in statuses.items() if s[0] != 0}
    pids = _pids(status_dir)
    died = {pids[pid]: status for pid, status in dead.items() if pid in pids}
    if failures:
        first = min(failures, key=lambda rank: failures[rank][1])
        others = len(failures) - 1
        more = f' ({others} other rank{"s" if others > 1 else ""} failed after it)' \
            if others else ''
        print(f'ember launch: rank {first} failed first, with exit status '
              f'{failures[first][0]}{more}', file=sys.stderr)
        return failures[first][0]
    if died:
        rank = next(iter(died))     # mpiexec reports the first death first
        print(f'ember launch: rank {rank} died with exit code {died[rank]}'
              f'{_signal_text(died[rank])}; mpiexec stopped the others', file=sys.stderr)
        return died[rank]
    silent = sorted(set(range(count)) - set(statuses))
    if silent and (code != 0 or len(silent) < count):
        print(f'ember launch: rank{"s" if len(silent) > 1 else ""} '
              f'{", ".join(map(str, silent))} ended without reporting a status (killed, or '
              f'os._exit); mpiexec exited with {code}', file=sys.stderr)
        return code or 1
    return code


def _signal_text(code):
    try:
        return f' (killed by {signal.Signals(code).name})' if 0 < code < 64 else ''
    except ValueError:
        return ''
