"""Engine variables, operator records and the errors raised at wait time.

A :class:`Var` stands for one piece of mutable state (an array's storage, a random stream).
Its fields are guarded by the lock of the engine that schedules it; a var outlives engine
resets because every engine leaves its vars idle when it stops.
"""
from __future__ import annotations

import os
import sys
import traceback

from ember.base import EmberError

__all__ = ['Var', 'OperatorError']

# Modes of an entry in a var's queue.
READ, WRITE, WAIT_READ, WAIT_WRITE = 0, 1, 2, 3

_ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class OperatorError(EmberError):
    """An operator failed on a worker; raised by the wait that observes the failure."""


class Var:
    """A versioned variable: reads of it run concurrently, writes alone, in push order.

    >>> from ember import engine
    >>> var = engine.get().new_var()
    >>> var.version, var.exception
    (0, None)
    """

    __slots__ = ('queue', 'readers', 'writing', 'version', 'failure', 'carries_errors', 'gpu',
                 '__weakref__')

    def __init__(self, carries_errors=True):
        # (op, mode) entries waiting for access, in push order; made at the first wait, since
        # most vars are written once and read after that write finished
        self.queue = None
        self.readers = 0        # granted reads not yet finished
        self.writing = False    # a write has been granted and has not finished
        self.version = 0        # number of finished writes
        self.failure = None     # the Failure this var carries (shared with its source)
        # A resource (workspace, random stream) only orders its users: one user's failure
        # must not skip every later operator that happens to draw the same copy.
        self.carries_errors = carries_errors
        # the device events of the var's last write and reads (ember.engine.gpu.VarEvents),
        # None until an operation on a GPU stream touches it
        self.gpu = None

    @property
    def exception(self):
        """The pending error of the operation that last failed on this var, else None."""
        failure = self.failure
        return None if failure is None else failure.error

    def __repr__(self):
        return f'<Var v{self.version} at {id(self):#x}>'


class Op:
    """One engine push: the function, its vars and where it runs."""

    __slots__ = ('fn', 'reads', 'writes', 'pool', 'device', 'priority', 'name', 'symbolic',
                 'stack', 'seq', 'wait')

    def __init__(self, fn, reads, writes, pool, device, priority, name, symbolic, stack):
        self.fn = fn
        self.reads = reads
        self.writes = writes
        self.pool = pool
        self.device = device
        self.priority = priority
        self.name = name
        self.symbolic = symbolic
        self.stack = stack
        self.seq = 0            # push number, orders failures for wait_all
        self.wait = 0           # vars not yet granted

    def label(self):
        return self.name or getattr(self.fn, '__name__', 'operator')


class Failure:
    """An operation's error, shared by every var it reaches; handling it once handles it all.

    MXNet keeps one exception pointer per failure and clears it through whichever var is waited
    on; `error` becomes None in the same way.
    """

    __slots__ = ('error', 'seq', 'name', 'stack')

    # Failures registered and not yet handled, in the whole process. While it is zero no var
    # can carry a pending error, so an operation skips checking its vars. Changed only with an
    # engine lock held (registration, take).
    pending = 0

    def __init__(self, error, op):
        self.error = error
        self.seq = op.seq
        self.name = op.label()
        self.stack = op.stack
        segment = op.fn
        if isinstance(segment, Segment) and segment.failed_at is not None:
            self.name = segment.names[segment.failed_at]
            self.stack = segment.stacks[segment.failed_at]

    def take(self):
        """Mark handled and return the error (the caller holds the engine lock)."""
        error, self.error = self.error, None
        if error is not None:
            Failure.pending -= 1
        return error

    def message(self, error):
        text = f'operator {self.name} failed: {type(error).__name__}: {error}'
        if self.stack:
            frames = ''.join(traceback.format_list(self.stack)).rstrip()
            text += f'\nIt was pushed from (most recent call last):\n{frames}'
        return text


class Segment:
    """The functions of a bulk segment, run in order as one engine operation."""

    __slots__ = ('fns', 'names', 'stacks', 'failed_at')

    def __init__(self, fns, names, stacks):
        self.fns = fns
        self.names = names
        self.stacks = stacks
        self.failed_at = None

    def __call__(self):
        for index, fn in enumerate(self.fns):
            try:
                fn()
            except BaseException:
                self.failed_at = index
                raise


def push_site(depth):
    """The `depth` innermost frames that called into the engine, outermost first."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_ENGINE_DIR):
        frame = frame.f_back
    stack = traceback.StackSummary.extract(traceback.walk_stack(frame), limit=depth,
                                           lookup_lines=False)
    stack.reverse()
    return stack


def raise_failure(failure, error):
    """Raise `error`, taken from `failure`, as an OperatorError chained to it."""
    raise OperatorError(failure.message(error)) from error


def first_failure(vars_):
    """The pending failure carried by any of `vars_`, else None."""
    for var in vars_:
        failure = var.failure
        if failure is not None and failure.error is not None:
            return failure
    return None
