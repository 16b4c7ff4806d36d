"""The recorder: the profiler's state, the cheap checks lower layers make, and the event buffer.

Every check starts with one module-level boolean, ``_recording`` (running and not paused), so a
program that never profiles pays one global lookup per operator.

Which operators are recorded
----------------------------
The last :func:`set_config` decides when it named any of ``profile_all``, ``profile_symbolic``
or ``profile_imperative``: symbolic (graph) operators are recorded when ``profile_all`` or
``profile_symbolic`` is true, imperative ones when ``profile_all`` or ``profile_imperative`` is.
When it named none of them (or was never called, as under ``MXNET_PROFILER_AUTOSTART``),
``MXNET_PROFILER_MODE`` decides at each check: '0' symbolic operators only, '1' all operators.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ember import config
from ember.profiler.aggregate import Aggregates
from ember.profiler.events import COMPLETE, COUNTER, INSTANT, Record, device_label, now_us


@dataclass(frozen=True)
class Settings:
    """One profiler configuration (each set_config call replaces the whole of it)."""
    symbolic: bool | None = None        # None: MXNET_PROFILER_MODE decides
    imperative: bool | None = None
    memory: bool = False
    api: bool = False
    filename: str = 'profile.json'
    continuous_dump: bool = False
    aggregate_stats: bool = False

    @property
    def follows_mode(self) -> bool:
        return self.symbolic is None


_lock = threading.Lock()
_recording = False          # running and not paused: the hot-path check
_running = False
_paused = False
_settings = Settings()
_records: list[Record] = []
_aggregates = Aggregates()
_process_ids: dict[str, int] = {}   # process label -> Chrome pid
_thread_names: dict[int, str] = {}  # Chrome tid -> thread name


class _ThreadId(threading.local):
    """The small Chrome tid of the calling thread. Per thread object rather than keyed by
    threading.get_ident(), which a new thread may reuse after an old one exits."""
    tid = None


_thread_id = _ThreadId()


# ----------------------------------------------------------------------------------------------
# Cheap checks for lower layers.

def operator_enabled(symbolic: bool) -> bool:
    """Whether an operator of this kind (graph: True, imperative: False) is recorded now.

    >>> operator_enabled(True)   # the profiler is not running
    False
    """
    if not _recording:
        return False
    wanted = _settings.symbolic if symbolic else _settings.imperative
    if wanted is None:
        return symbolic or config.get('MXNET_PROFILER_MODE') == '1'
    return wanted


def memory_enabled() -> bool:
    """Whether memory counters (storage pool usage) are recorded now."""
    return _recording and _settings.memory


def api_enabled() -> bool:
    """Whether API calls (profile_api) are recorded now."""
    return _recording and _settings.api


def recording() -> bool:
    """Whether the profiler is running and not paused."""
    return _recording


# ----------------------------------------------------------------------------------------------
# Recording. Every function records on the calling thread and drops the event when the profiler
# is not recording, so a check-then-record race with stop() or pause() loses nothing but that
# event.

def record_operator(name: str, device, begin_us: float, end_us: float, symbolic: bool,
                    args=None) -> None:
    """One operator run from `begin_us` to `end_us` (:func:`now_us` clock) on `device`."""
    if not operator_enabled(symbolic):
        return
    record_span(name, 'operator', device_label(device, 'cpu/0'), begin_us, end_us, 'operator',
                args)


def record_api(name: str, begin_us: float, end_us: float, args=None) -> None:
    """One API call (the NDArray layer's entry points) when profile_api is on."""
    if api_enabled():
        record_span(name, 'api', 'api', begin_us, end_us, 'api', args)


def record_counter(name: str, value, device=None) -> None:
    """One sample of a memory counter, on the row of `device` ('memory' when None)."""
    if memory_enabled():
        record_sample(name, 'memory', device_label(device, 'memory'), value, 'memory')


def record_span(name, category, process, begin_us, end_us, section, args=None) -> None:
    """A complete event; `section` is the aggregate table it is counted in."""
    if _recording:
        record = Record(COMPLETE, name, category, process, _current_tid(), begin_us,
                        end_us - begin_us, args)
        _append(record, section, record.dur_us, _aggregates.add_time)


def record_sample(name, category, process, value, section) -> None:
    """A counter event: the counter `name` now has `value`."""
    if _recording:
        record = Record(COUNTER, name, category, process, _current_tid(), now_us(),
                        args={name: value})
        _append(record, section, value, _aggregates.add_value)


def record_instant(name, category, process, scope) -> None:
    """An instant event (a marker); `scope` is Chrome's 'g', 'p' or 't'."""
    if _recording:
        record = Record(INSTANT, name, category, process, _current_tid(), now_us(),
                        scope=scope)
        _append(record, None, None, None)


def _current_tid() -> int:
    tid = _thread_id.tid
    if tid is None:
        with _lock:
            tid = _thread_id.tid = len(_thread_names)
            _thread_names[tid] = threading.current_thread().name
    return tid


def _append(record, section, amount, aggregate) -> None:
    with _lock:
        if record.process not in _process_ids:
            _process_ids[record.process] = len(_process_ids)
        _records.append(record)
        if section is not None and _settings.aggregate_stats:
            aggregate(section, record.name, amount)


# ----------------------------------------------------------------------------------------------
# State changes (the public control functions are in control.py).

def settings() -> Settings:
    return _settings


def configure(new: Settings) -> None:
    global _settings
    with _lock:
        _settings = new


def set_running(running: bool) -> None:
    global _running, _paused, _recording
    with _lock:
        _running, _paused = running, False
        _recording = running


def set_paused(paused: bool) -> None:
    global _paused, _recording
    with _lock:
        _paused = paused
        _recording = _running and not paused


def running() -> bool:
    return _running


def paused() -> bool:
    return _paused


def take_records() -> tuple[list[Record], dict[str, int], dict[int, str]]:
    """The records so far (the buffer starts empty again), process ids and thread names."""
    global _records
    with _lock:
        records, _records = _records, []
        return records, dict(_process_ids), dict(_thread_names)


def pending() -> int:
    """How many records wait for the next dump."""
    return len(_records)


def aggregates(reset: bool = False) -> Aggregates:
    """A copy of the statistics; `reset` clears them."""
    with _lock:
        snapshot = _aggregates.copy()
        if reset:
            _aggregates.clear()
    return snapshot


_totals: dict = {}      # section -> function returning {name: number}


def register_totals(section: str, values) -> None:
    """Show `values()` (name -> number, counted since the process started) as the block
    `section` of the aggregate table whenever some value is not zero."""
    _totals[section] = values


def totals() -> dict:
    """The registered totals that are not all zero: section -> {name: number}."""
    found = {section: values() for section, values in _totals.items()}
    return {section: values for section, values in found.items() if any(values.values())}


def reset() -> None:
    """Stop, and forget the configuration, the records, the statistics and the ids."""
    global _settings
    set_running(False)
    with _lock:
        _settings = Settings()
        _records.clear()
        _aggregates.clear()
        _process_ids.clear()
