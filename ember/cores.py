"""The cores this process may use: ``NEURON_RT_VISIBLE_CORES`` pins the process and locks them.

:func:`claim` runs when the engine is first built, before any of its thread pools exists (a bad
value raises there, at the first operation). With the variable set it takes an exclusive lock
on one file per core in ``MXNET_CORE_LOCK_DIR``, pins every thread of the process to those cores and records them as the process's cores
(``config.process_cores``), so the engine's kernel threads, OpenMP and BLAS are sized to them.

The locks are ``flock`` locks: the kernel drops them when the process ends however it ends, so a
crashed process never leaves a core blocked, and the files left behind mean nothing. A process
whose cores overlap a live holder's fails with an error naming that holder. A process started
by the holder (a data-loader worker, ``multiprocessing`` with spawn) shares the holder's cores
instead, since it inherits the variable with the work.

On a GPU machine the same numbers would name GPUs; the GPU backend does not map them yet.
"""
from __future__ import annotations

import errno
import fcntl
import os
import sys

from ember import config

__all__ = ['claim', 'held', 'CoreBusyError', 'lock_path']


class CoreBusyError(config.ConfigError):
    """Another live process holds a core that ``NEURON_RT_VISIBLE_CORES`` asks for."""


_held: dict = {}        # core -> open file object whose flock we hold


def held() -> tuple:
    """The cores this process holds locks on (empty without ``NEURON_RT_VISIBLE_CORES``)."""
    return tuple(sorted(_held))


def lock_path(core: int) -> str:
    """The lock file of `core` in ``MXNET_CORE_LOCK_DIR``."""
    return os.path.join(config.get('MXNET_CORE_LOCK_DIR'), f'core-{core}.lock')


def claim() -> tuple:
    """Lock, pin and record the cores of ``NEURON_RT_VISIBLE_CORES``; return them (or ())."""
    cores = config.get('NEURON_RT_VISIBLE_CORES')
    if cores is None or _held:
        return held()
    _check_available(cores)
    _lock_all(cores)
    _pin_process(cores)
    config.restrict_process_cores(cores)
    return cores


def _check_available(cores):
    available = config.process_cores()
    missing = [core for core in cores if core not in available]
    if missing:
        raise config.ConfigError(
            f'NEURON_RT_VISIBLE_CORES={_text(cores)}: core {missing[0]} is not available to '
            f'this process, which may run on {_text(available)}')


def _lock_all(cores):
    directory = config.get('MXNET_CORE_LOCK_DIR')
    _make_shared_dir(directory)
    try:
        for core in cores:
            _lock_one(core)
    except BaseException:
        release()
        raise


def _make_shared_dir(directory):
    if os.path.isdir(directory):
        return
    os.makedirs(directory, exist_ok=True)
    try:
        os.chmod(directory, 0o1777)     # every user's processes share the machine's cores
    except OSError:
        pass


def _lock_one(core):
    path = lock_path(core)
    stream = open(os.open(path, os.O_RDWR | os.O_CREAT, 0o666), 'r+')
    try:
        os.fchmod(stream.fileno(), 0o666)   # past the umask: other users lock it too
    except OSError:
        pass
    try:
        fcntl.flock(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder(stream)
        stream.close()
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        if holder and _is_ancestor(holder[0]):
            return      # our parent holds it: we work for it, on its cores
        raise CoreBusyError(_busy_message(core, holder)) from None
    stream.seek(0)
    stream.truncate()
    stream.write(f'{os.getpid()} {_command_line()}\n')
    stream.flush()
    _held[core] = stream


def _holder(stream):
    """(pid, command line) that the holder wrote into the lock file, or None."""
    stream.seek(0)
    pid, _, command = stream.read().strip().partition(' ')
    return (int(pid), command) if pid.isdigit() else None


def _busy_message(core, holder):
    who = (f'process {holder[0]} ({holder[1]})' if holder else 'another process')
    return (f'NEURON_RT_VISIBLE_CORES={_text(config.get("NEURON_RT_VISIBLE_CORES"))}: core '
            f'{core} is held by {who}; give this process other cores, or wait until that '
            f'process ends (its lock ends with it)')


def _is_ancestor(pid):
    current = os.getppid()
    while current > 1:
        if current == pid:
            return True
        current = _parent_of(current)
    return False


def _parent_of(pid):
    try:
        with open(f'/proc/{pid}/stat') as stat:
            # the command may hold spaces and parentheses: the fields follow the last ')'
            return int(stat.read().rpartition(')')[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _command_line():
    return ' '.join([os.path.basename(sys.executable)] + sys.argv)[:200]


def _pin_process(cores):
    """Pin every thread: Linux keeps an affinity per thread, and libraries loaded before Ember
    (NumPy's OpenBLAS) may already have started theirs."""
    try:
        threads = [int(tid) for tid in os.listdir('/proc/self/task')]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:
            pass        # a thread that ended meanwhile


def release() -> None:
    """Drop every core lock (the process keeps its pinning)."""
    for stream in _held.values():
        stream.close()
    _held.clear()


def _text(cores):
    cores = tuple(cores)
    if len(cores) > 1 and cores == tuple(range(cores[0], cores[-1] + 1)):
        return f'{cores[0]}-{cores[-1]}'
    return ','.join(map(str, cores))
