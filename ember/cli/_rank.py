"""One rank of ``python -m ember launch``: runs the script as ``__main__`` and reports.

``python -m ember.cli._rank STATUS_DIR script args...`` (mpiexec runs it). The rank's output
lines get a ``[rank]`` prefix; its exit status and the time it ended go to
``STATUS_DIR/rank-<r>.status`` for the launcher. A script that raises, or exits with a non-zero
status, stops every rank at once (``MPI_Abort``), so none waits forever for it.
"""
from __future__ import annotations

import atexit
import os
import runpy
import signal
import sys
import threading
import time
import traceback


def main(argv):
    status_dir, script, script_args = argv[0], argv[1], argv[2:]
    from mpi4py import MPI
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    _write(status_dir, f'rank-{rank}.pid', f'{os.getpid()}\n')
    prefixes = _prefix_output(rank)
    atexit.register(_close, prefixes)     # registered first, so it runs after Ember's handlers
    _report_when_terminated(status_dir, rank, prefixes)
    code = _run_script(script, script_args)
    _write_status(status_dir, rank, code)
    if code != 0 and size > 1:
        print(f'ember launch: rank {rank} exited with status {code}; stopping every rank',
              file=sys.stderr)
        _close(prefixes)
        MPI.COMM_WORLD.Abort(code)
    return code


def _run_script(script, script_args):
    sys.argv = [script] + list(script_args)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name='__main__')
    except SystemExit as exc:
        return _exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - reported, then every rank stops
        traceback.print_exc()
        return 1
    return 0


def _exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _write_status(status_dir, rank, code):
    _write(status_dir, f'rank-{rank}.status', f'{code} {time.time_ns()}\n')


def _write(status_dir, name, text):
    path = os.path.join(status_dir, name)
    with open(path + '.tmp', 'w') as f:
        f.write(text)
    os.replace(path + '.tmp', path)


def _report_when_terminated(status_dir, rank, prefixes):
    def terminated(signum, frame):
        _write_status(status_dir, rank, 128 + signum)
        _close(prefixes)
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, terminated)


# ----------------------------------------------------------------------------------------------
# Output: every line of this process's stdout and stderr (Python's and the C libraries')
# goes through a pipe and out with the rank in front.

def _prefix_output(rank):
    prefix = f'[{rank}] '.encode()
    pumps = []
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        stream.flush()
        original = os.dup(fd)
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        pump = threading.Thread(target=_pump, args=(read_end, original, prefix), daemon=True)
        pump.start()
        pumps.append((fd, original, pump))
    sys.stdout.reconfigure(line_buffering=True)
    return pumps


def _pump(read_end, original, prefix):
    pending = b''
    while True:
        chunk = os.read(read_end, 65536)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b'\n')
        if lines:
            os.write(original, b''.join(prefix + line + b'\n' for line in lines))
    if pending:
        os.write(original, prefix + pending + b'\n')


def _close(pumps):
    """Send what is buffered through the pipes and wait until the pumps wrote it all."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    for fd, original, pump in pumps:
        os.dup2(original, fd)       # closes the pipe's last write end: the pump sees EOF
    for fd, original, pump in pumps:
        pump.join(timeout=5)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
