"""What the profiler records: one immutable record per trace event, and the clock it uses."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

COMPLETE, COUNTER, INSTANT = 'X', 'C', 'i'


@dataclass(frozen=True, slots=True)
class Record:
    """One Chrome trace event before it is given its small process and thread ids."""
    phase: str                  # COMPLETE, COUNTER or INSTANT
    name: str
    category: str               # Chrome's 'cat': operator, api, task, frame, event, counter, ...
    process: str                # the trace row group: a device ('cpu/0') or a domain name
    thread: int                 # small id of the thread that recorded it (Chrome tid)
    ts_us: float
    dur_us: float = 0.0
    args: Mapping[str, Any] | None = None
    scope: str = ''             # instant events: 'g' global, 'p' process, 't' thread


def now_us() -> float:
    """Microseconds on the profiler's clock (``time.perf_counter``); pass these to the recorder.

    >>> now_us() <= now_us()
    True
    """
    return time.perf_counter_ns() / 1000.0


def device_label(device, fallback: str) -> str:
    """'cpu/0' for ``cpu(0)``; a string passes through; None gives `fallback`."""
    if device is None:
        return fallback
    if isinstance(device, str):
        return device
    return f'{device.device_type}/{device.device_id}'
