"""Bulk execution: consecutive pushes of one thread grouped into fewer engine operations.

Inside ``bulk(n)`` a push is held in the thread's segment; the segment becomes one engine
operation (the functions in push order, the union of their vars) when it holds ``n``
operations, when a push for another device, priority or engine arrives, when the thread waits,
and when the block ends. One failing function stops the rest of its segment, and every var the
segment writes carries the failure (as in MXNet).
"""
from __future__ import annotations

import contextlib
import threading

from ember.engine.var import Segment

__all__ = ['bulk', 'set_bulk_size', 'flush']


class _Segment(threading.local):
    size = 0
    engine = None
    key = None

    def __init__(self):
        self.fns, self.names, self.stacks = [], [], []
        self.reads, self.writes = {}, {}


_segment = _Segment()
_lock = threading.Lock()
# Threads with a bulk size above 1: while zero, push skips the thread-local lookup.
active_threads = 0


def set_bulk_size(size: int) -> int:
    """Set this thread's bulk size (0 or 1: no bulking); flush and return the previous one."""
    global active_threads
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f'bulk size {size!r}: expected an integer >= 0')
    flush()
    previous = _segment.size
    with _lock:
        active_threads += (size > 1) - (previous > 1)
    _segment.size = size
    return previous


@contextlib.contextmanager
def bulk(size: int):
    """Group the pushes of this block into engine operations of up to `size` operations.

    >>> from ember import engine
    >>> eng = engine.get()
    >>> var = eng.new_var()
    >>> before = eng.stats()['pushes']
    >>> with engine.bulk(4):
    ...     for _ in range(8):
    ...         eng.push(lambda: None, writes=[var])
    >>> eng.wait_all()
    >>> eng.stats()['pushes'] - before
    2
    """
    previous = set_bulk_size(size)
    try:
        yield
    finally:
        set_bulk_size(previous)


def append(engine, fn, reads, writes, device, priority, name, symbolic, copy, stack) -> bool:
    """Hold the push in this thread's segment; False when this thread is not bulking."""
    seg = _segment
    if seg.size <= 1:
        return False
    key = (device, priority, symbolic, copy)
    if seg.fns and (seg.engine is not engine or seg.key != key):
        flush()
    seg.engine, seg.key = engine, key
    seg.fns.append(fn)
    seg.names.append(name or getattr(fn, '__name__', 'operator'))
    seg.stacks.append(stack)
    for var in reads:
        seg.reads[var] = None
    for var in writes:
        seg.writes[var] = None
    if len(seg.fns) >= seg.size:
        flush()
    return True


def flush() -> None:
    """Push this thread's held operations as one engine operation."""
    seg = _segment
    if not seg.fns:
        return
    fns, names, stacks = seg.fns, seg.names, seg.stacks
    writes = tuple(seg.writes)
    reads = tuple(var for var in seg.reads if var not in seg.writes)
    engine, (device, priority, symbolic, copy) = seg.engine, seg.key
    # Reset before submitting: a synchronous engine may run functions that push again.
    seg.fns, seg.names, seg.stacks = [], [], []
    seg.reads, seg.writes = {}, {}
    seg.engine = seg.key = None
    if len(fns) == 1:
        engine.submit(fns[0], reads, writes, device, priority, names[0], symbolic, copy,
                      stacks[0], 1)
        return
    segment = Segment(tuple(fns), tuple(names), tuple(stacks))
    engine.submit(segment, reads, writes, device, priority, 'bulk[' + ','.join(names) + ']',
                  symbolic, copy, None, len(fns))
