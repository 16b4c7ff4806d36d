"""The ranks of a distributed store over MPI (mpi4py): ordered collectives and failures.

:func:`world` starts MPI once per process (a single rank when the program was not started by
``mpiexec``). Every collective of the distributed stores runs in an engine operation that
writes the world's variable, so collectives run one at a time and in the order the program
asked for them, which is the same order on every rank: that is what keeps them matched.

Each collective starts with an *agreement*: a non-blocking barrier, polled with short sleeps so
that a rank waiting for a slower one does not spin on a core its own computation needs (waited
inside MPI when the collective runs on the thread that pushed it), then a small all-reduce of
what every rank is about to do (operation, key, element count, dtype, shape). Ranks that
disagree (another key, another shape, or a rank that is exiting) all raise the same error
naming the ranks and what each was doing, instead of hanging or summing garbage.

An exception that reaches the top of a rank stops every rank (``MPI_Abort``) after printing
which rank failed, and at exit each rank agrees with the others that it is finishing, so a
rank that ends while others still wait for it is reported too.
"""
from __future__ import annotations

import atexit
import sys
import threading
import time
import zlib
from dataclasses import dataclass

import numpy as np

from ember import config, engine
from ember.base import EmberError
from ember.device import cpu

__all__ = ['world', 'World', 'Step', 'DisagreementError', 'mpi_module']

_PRIORITY = 1           # comm operations run on the engine's priority pool, off the compute pool
_SPIN_SECONDS = 2e-4    # poll without sleeping this long: a collective of ready ranks is quick
_SLEEP_FIRST, _SLEEP_MOST = 2e-5, 5e-4

OPS = ('init', 'push', 'pull', 'allreduce', 'barrier', 'set_optimizer', 'exit', 'broadcast')


class DisagreementError(EmberError):
    """Ranks reached a collective doing different things (key, shape, operation)."""


@dataclass(frozen=True)
class Step:
    """What a rank is about to do in a collective: compared across ranks before it runs."""

    op: str
    key: object = None
    size: int = 0
    dtype: str = ''
    shape: tuple = ()
    problem: str = ''       # why this rank cannot take part: every rank then raises it

    def signature(self):
        words = [OPS.index(self.op), _crc(repr(self.key)), self.size, _crc(self.dtype),
                 _crc(repr(tuple(self.shape))), _crc(self.problem)]
        return np.array(words, dtype=np.int64)

    def describe(self):
        if self.op == 'exit':
            return 'exiting'
        if self.op in ('barrier', 'set_optimizer'):
            return self.op
        text = f'{self.op} of key {self.key!r} (shape {tuple(self.shape)}, {self.dtype})'
        return f'{text}, but {self.problem}' if self.problem else text


def _crc(text):
    return zlib.crc32(text.encode())


def mpi_module():
    """mpi4py's MPI (importing it starts MPI), or an error naming the missing extra."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise EmberError(f'the distributed stores need mpi4py and an MPI library '
                         f"(pip install 'ember[dist]', which brings mpi4py and the mpich "
                         f'wheel): {exc}') from None
    return MPI


class World:
    """This process's view of the ranks: rank, size, communicators and the ordering var."""

    def __init__(self, MPI):
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD.Dup()        # collectives of the stores
        self.p2p = MPI.COMM_WORLD.Dup()         # dist_async: requests to the servers
        self.replies = MPI.COMM_WORLD.Dup()     # and their answers
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        # orders the collectives; errors surface through the arrays each one writes
        self.var = engine.get().new_var(carries_errors=False)
        self.closing = []                       # callbacks before the exit agreement
        self.closed = []                        # and after it
        self._host = cpu(0)                     # where the collectives run

    # -- running collectives in order ---------------------------------------------------------
    def push(self, step, fn, reads=(), writes=(), name='kvstore_collective', inline=False):
        """Run ``fn()`` after all ranks agree on `step`, in push order with every other
        collective of this process; with `inline`, on this thread now when nothing it uses
        is pending (see ``Engine.push``)."""
        def run():
            # on the thread that pushed it (inline) nothing else would use this thread while
            # it waits: wait for the agreement inside MPI, which progresses it without pause;
            # an engine worker polls instead, sleeping, to leave the core to computation. Four
            # ranks on two cores: 1.5 ms for a 1 MB all-reduce agreed by polling, 1.0 ms
            # waiting inside MPI (the raw all-reduce 0.7 ms)
            self.agree(step, blocking=not engine.in_worker())
            fn()
        engine.get().push(run, list(reads), [self.var] + list(writes), self._host, _PRIORITY,
                          name, inline=inline)

    def call(self, step, fn=lambda: None):
        """:meth:`push`, then wait for it (raising its error)."""
        box = []
        done = engine.get().new_var()
        self.push(step, lambda: box.append(fn()), writes=[done], name=f'kvstore_{step.op}')
        engine.get().wait_for_var(done)
        return box[0] if box else None

    # -- agreement --------------------------------------------------------------------------
    def agree(self, step, blocking=False):
        """Check that every rank is about to do `step`; raise the same error on every rank
        where they differ. `blocking`: wait inside MPI (which progresses it without pause)
        rather than poll with sleeps (:meth:`wait`)."""
        found = _signatures.get(step)
        if found is None:
            mine = step.signature()
            both = np.concatenate([mine, -mine])
            if len(_signatures) >= 256:
                _signatures.clear()
            found = _signatures[step] = (both, both.tobytes())
        both, words = found
        extremes = np.empty_like(both)
        # Every rank first waits for the others in a non-blocking barrier (`blocking`: inside
        # MPI, which progresses it without pause; else polling with sleeps, leaving the core
        # to computation), then all-reduces the words in a blocking call. Each rank makes
        # the same calls (a blocking collective never matches a non-blocking one), and the
        # last collective before the data is a blocking one: after a non-blocking all-reduce
        # MPICH's next 64 MB all-reduce took 106 ms instead of 81 (4 ranks on 2 cores).
        barrier = self.comm.Ibarrier()
        if blocking:
            barrier.Wait()
        else:
            self.wait(barrier)
        self.comm.Allreduce(both, extremes, op=self.MPI.MAX)
        # the maxima of the words and of their negations are this rank's own words only where
        # every rank's maximum is its minimum: where all ranks sent the same words
        if extremes.tobytes() == words:
            return
        described = self.comm.allgather(step.describe())
        raise DisagreementError(_disagreement(described, self.rank))

    def wait(self, request):
        """Complete a non-blocking request: poll briefly, then sleep between polls."""
        deadline = time.perf_counter() + _SPIN_SECONDS
        while not request.Test():
            if time.perf_counter() > deadline:
                break
        delay = _SLEEP_FIRST
        while not request.Test():
            time.sleep(delay)
            delay = min(_SLEEP_MOST, delay * 2)

    # -- lifetime ---------------------------------------------------------------------------
    def finish(self):
        """Agree with every rank that this one is exiting (at interpreter exit)."""
        for callback in self.closing:
            callback()
        self.call(Step('exit'))
        for callback in self.closed:
            callback()

    def abort(self, status=1):
        _flush_streams()
        self.MPI.COMM_WORLD.Abort(status)


# Step -> (the words an agreement all-reduces, their bytes) (a training loop agrees on the
# same steps)
_signatures = {}


def _disagreement(described, rank):
    groups = {}
    for other, text in enumerate(described):
        groups.setdefault(text, []).append(other)
    parts = [f'rank{"s" if len(ranks) > 1 else ""} {", ".join(map(str, ranks))}: {text}'
             for text, ranks in groups.items()]
    advice = ('' if any(', but ' in text for text in described) else
              '; every rank must init, push and pull the same keys with the same shapes in '
              'the same order')
    return (f'the ranks disagree on the next collective ({"; ".join(parts)}){advice} (this '
            f'is rank {rank})')


_world = None
_lock = threading.Lock()


def world():
    """The process's :class:`World`, started on first use."""
    global _world
    with _lock:
        if _world is None:
            _world = _start()
        return _world


def _start():
    MPI = mpi_module()
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise EmberError('the MPI library gives this process threading level '
                         f'{MPI.Query_thread()}; the distributed stores need '
                         'MPI_THREAD_MULTIPLE (mpi4py asks for it by default)')
    started = World(MPI)
    _check_launch(started)
    _install_failure_hooks(started)
    return started


def _check_launch(started):
    role = config.get('DMLC_ROLE')
    if role != 'worker':
        raise EmberError(f"DMLC_ROLE={role!r}: Ember's distributed stores run every MPI rank "
                         f"as a worker that also serves a share of the keys; start workers "
                         f"only (python -m ember launch)")
    for name in ('DMLC_NUM_WORKER', 'DMLC_NUM_SERVER'):
        expected = config.get(name)
        if expected is not None and expected != started.size:
            raise EmberError(f'{name}={expected}, but MPI started {started.size} rank'
                             f'{"s" if started.size != 1 else ""}; every rank is a worker '
                             f'and a server, so both must equal the number of ranks')


def _install_failure_hooks(started):
    previous = sys.excepthook

    def stop_all_ranks(kind, value, trace):
        previous(kind, value, trace)
        print(f'ember: rank {started.rank} of {started.size} failed ({kind.__name__}); '
              f'stopping every rank', file=sys.stderr)
        started.abort(1)

    if started.size > 1:
        sys.excepthook = stop_all_ranks
    atexit.register(_finish_at_exit, started)


def _finish_at_exit(started):
    try:
        started.finish()
    except Exception as exc:    # noqa: BLE001 - the last word of a rank: say it and stop all
        print(f'ember: rank {started.rank} of {started.size}: {exc}', file=sys.stderr)
        started.abort(1)


def _flush_streams():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
