"""The user's controls, as MXNet 1.x's ``mx.profiler``: configure, run, pause, dump, summarise.

>>> import os, tempfile
>>> from ember import profiler
>>> path = os.path.join(tempfile.mkdtemp(), 'trace.json')
>>> profiler.set_config(profile_all=True, aggregate_stats=True, filename=path)
>>> profiler.set_state('run')
>>> profiler.record_operator('dot', 'cpu/0', 0.0, 1500.0, symbolic=False)
>>> profiler.set_state('stop')
>>> profiler.dump()
>>> import json; [e['name'] for e in json.load(open(path))['traceEvents'] if e['ph'] == 'X']
['dot']
>>> print(profiler.dumps(reset=True).splitlines()[-1])
dot    1    1.5000    1.5000    1.5000    1.5000
>>> profiler.set_config()   # back to the defaults
"""
from __future__ import annotations

import atexit
import difflib
import os
import threading
import warnings

from ember import config
from ember.profiler import recorder
from ember.profiler.aggregate import FORMATS, SORT_KEYS
from ember.profiler.trace import TraceFile

__all__ = ['set_config', 'set_state', 'state', 'pause', 'resume', 'dump', 'dumps',
           'profiler_set_config', 'profiler_set_state', 'dump_profile', 'autostart']

STATES = ('run', 'stop')
# MXNet keys that Ember accepts and has no use for: there is no periodic dump thread and no
# parameter-server process to profile.
_UNUSED_KEYS = ('dump_period', 'profile_process')
_KNOWN_KEYS = ('profile_all', 'profile_symbolic', 'profile_imperative', 'profile_memory',
               'profile_api', 'filename', 'continuous_dump', 'aggregate_stats') + _UNUSED_KEYS

_dump_lock = threading.RLock()      # one dump at a time: they share the trace so far
_trace = TraceFile()
_dumps_written = 0


def set_config(profile_all=None, profile_symbolic=None, profile_imperative=None,
               profile_memory=None, profile_api=None, filename='profile.json',
               continuous_dump=False, aggregate_stats=False, **ignored) -> None:
    """Configure the profiler; each call replaces the whole configuration, as in MXNet.

    Operators: when any of ``profile_all``, ``profile_symbolic`` or ``profile_imperative`` is
    given, they decide which kinds are recorded; when none is, ``MXNET_PROFILER_MODE`` decides
    ('0' symbolic operators only, '1' all). ``profile_all`` also turns on memory and API events.
    ``aggregate_stats`` keeps the per-name statistics that :func:`dumps` prints. MXNet keys Ember
    does not use (``dump_period``, ``profile_process``) and unknown keys are ignored with a
    warning.

    >>> set_config(profile_imperative=True, filename='ops.json')
    >>> set_config()
    """
    flags = {name: _flag(name, value) for name, value in (
        ('profile_all', profile_all), ('profile_symbolic', profile_symbolic),
        ('profile_imperative', profile_imperative), ('profile_memory', profile_memory),
        ('profile_api', profile_api), ('continuous_dump', continuous_dump),
        ('aggregate_stats', aggregate_stats))}
    if not _this_process(ignored.pop('profile_process', 'worker')):
        return
    _warn_ignored(ignored)
    everything = bool(flags['profile_all'])
    said = any(flags[k] is not None for k in ('profile_all', 'profile_symbolic',
                                              'profile_imperative'))
    recorder.configure(recorder.Settings(
        symbolic=everything or bool(flags['profile_symbolic']) if said else None,
        imperative=everything or bool(flags['profile_imperative']) if said else None,
        memory=everything or bool(flags['profile_memory']),
        api=everything or bool(flags['profile_api']),
        filename=_filename(filename),
        continuous_dump=bool(flags['continuous_dump']),
        aggregate_stats=bool(flags['aggregate_stats'])))


def set_state(state='stop', profile_process='worker') -> None:
    """Start ('run') or stop ('stop') recording. A new run starts unpaused.

    Stopping with ``continuous_dump`` writes the file with everything recorded so far.

    >>> set_state('running')
    Traceback (most recent call last):
    ...
    ValueError: profiler state 'running': expected 'run' or 'stop'; did you mean 'run'?
    """
    if state not in STATES:
        raise ValueError(f"profiler state {state!r}: expected 'run' or 'stop'"
                         + _suggest(state, STATES))
    if not _this_process(profile_process):
        return
    if state == 'run':
        if recorder.settings().follows_mode:
            config.get('MXNET_PROFILER_MODE')   # a bad value fails here, not in a worker
        recorder.set_running(True)
        return
    was_running = recorder.running()
    recorder.set_running(False)
    if was_running and recorder.settings().continuous_dump:
        dump(finished=False)


def state() -> str:
    """'run' while the profiler runs (paused or not), else 'stop'.

    >>> state()
    'stop'
    """
    return 'run' if recorder.running() else 'stop'


def pause(profile_process='worker') -> None:
    """Stop recording events until :func:`resume`, without ending the run."""
    if _this_process(profile_process):
        recorder.set_paused(True)


def resume(profile_process='worker') -> None:
    """Record events again after :func:`pause`."""
    if _this_process(profile_process):
        recorder.set_paused(False)


def dump(finished=True, profile_process='worker') -> None:
    """Write the trace so far to the configured file (atomically replacing it).

    Each dump appends the events recorded since the previous one to those already written, so
    the file always holds the whole trace. ``finished=True`` ends the trace: the next dump
    starts a new one.
    """
    global _dumps_written
    if not _this_process(profile_process):
        return
    with _dump_lock:
        records, process_ids, thread_names = recorder.take_records()
        _trace.add(records, process_ids, thread_names)
        _trace.write(recorder.settings().filename)
        _dumps_written += 1
        if finished:
            _trace.clear()


def dumps(reset=False, format='table', sort_by='total', ascending=False) -> str:
    """The aggregate statistics (kept with ``aggregate_stats=True``) as a table or JSON.

    Per section (operators, API calls, each domain) and name: count, total, minimum, maximum
    and average time in milliseconds, sorted by `sort_by`; counters give their values.
    Process-wide totals that other layers register (:func:`register_totals`: the graph
    compiler's compiles, cache hits and loads) come first.
    ``reset=True`` clears the statistics after reading them.
    """
    if format not in FORMATS:
        raise ValueError(f'dumps format {format!r}: expected ' + _either(FORMATS)
                         + _suggest(format, FORMATS))
    if sort_by not in SORT_KEYS:
        raise ValueError(f'dumps sort_by {sort_by!r}: expected ' + _either(SORT_KEYS)
                         + _suggest(sort_by, SORT_KEYS))
    if not isinstance(ascending, bool):
        raise ValueError(f'dumps ascending={ascending!r}: expected True or False')
    stats = recorder.aggregates(reset=bool(reset))
    totals = recorder.totals()
    if format == 'json':
        return stats.as_json(sort_by, ascending, totals)
    return stats.table(sort_by, ascending, totals)


# ----------------------------------------------------------------------------------------------
# MXNet's deprecated spellings.

def profiler_set_config(mode='symbolic', filename='profile.json') -> None:
    """Deprecated: ``set_config(profile_<mode>=True, filename=filename)``."""
    modes = ('symbolic', 'imperative', 'all')
    warnings.warn('profiler.profiler_set_config() is deprecated; use profiler.set_config()',
                  DeprecationWarning, stacklevel=2)
    if mode not in modes:
        raise ValueError(f'profiler mode {mode!r}: expected ' + _either(modes)
                         + _suggest(mode, modes))
    set_config(**{f'profile_{mode}': True}, filename=filename)


def profiler_set_state(state='stop') -> None:
    """Deprecated: :func:`set_state`."""
    warnings.warn('profiler.profiler_set_state() is deprecated; use profiler.set_state()',
                  DeprecationWarning, stacklevel=2)
    set_state(state)


def dump_profile() -> None:
    """Deprecated: :func:`dump`."""
    warnings.warn('profiler.dump_profile() is deprecated; use profiler.dump()',
                  DeprecationWarning, stacklevel=2)
    dump(True)


# ----------------------------------------------------------------------------------------------
# MXNET_PROFILER_AUTOSTART.

_autostarted = False


def autostart() -> bool:
    """Start profiling when ``MXNET_PROFILER_AUTOSTART`` is set; True when it started.

    Operators are recorded as ``MXNET_PROFILER_MODE`` says. At exit the profiler stops and
    writes ``profile.json`` in the directory that was current at start-up. Called once by
    ``import ember``; later calls do nothing.
    """
    global _autostarted
    if _autostarted or not config.get('MXNET_PROFILER_AUTOSTART'):
        return False
    config.get('MXNET_PROFILER_MODE')
    set_config(filename=os.path.abspath('profile.json'))
    set_state('run')
    _autostarted = True
    atexit.register(_finish_autostart)
    return True


def _finish_autostart() -> None:
    if recorder.running():
        set_state('stop')
    # A trace the program already dumped is not overwritten by an empty one.
    if recorder.pending() or _dumps_written == 0:
        dump(finished=True)


def reset() -> None:
    """Stop, forget configuration, events, statistics and the trace written so far."""
    global _dumps_written
    with _dump_lock:
        recorder.reset()
        _trace.clear()
        _dumps_written = 0


# ----------------------------------------------------------------------------------------------
# Validation.

def _flag(name, value):
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ValueError(f'set_config {name}={value!r}: expected True or False')


def _filename(filename) -> str:
    try:
        path = os.fspath(filename)
    except TypeError:
        raise ValueError(f'set_config filename={filename!r}: expected a path') from None
    if not isinstance(path, str) or not path:
        raise ValueError(f'set_config filename={filename!r}: expected a non-empty path')
    return path


def _warn_ignored(ignored) -> None:
    for key, value in ignored.items():
        if key in _UNUSED_KEYS:
            message = f'set_config {key}={value!r} has no effect in Ember; ignored'
        else:
            message = (f'set_config {key}={value!r} is not a profiler setting; ignored'
                       + _suggest(key, _KNOWN_KEYS))
        warnings.warn(message, UserWarning, stacklevel=3)


def _this_process(profile_process) -> bool:
    """Whether a control call is for this process; 'server' calls do nothing, with a warning."""
    if profile_process == 'worker':
        return True
    if profile_process == 'server':
        warnings.warn("profile_process='server' has no effect: Ember runs no parameter "
                      'server processes', UserWarning, stacklevel=3)
        return False
    raise ValueError(f"profile_process={profile_process!r}: expected 'worker' or 'server'")


def _either(choices) -> str:
    quoted = [repr(c) for c in choices]
    return ', '.join(quoted[:-1]) + ' or ' + quoted[-1]


def _suggest(value, choices) -> str:
    close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.5)
    return f'; did you mean {close[0]!r}?' if close else ''
