"""The profiler: operator, API, memory and user events in a Chrome trace, and aggregate tables.

The user's API is MXNet 1.x's ``mx.profiler``: :func:`set_config`, :func:`set_state`,
:func:`pause`, :func:`resume`, :func:`dump`, :func:`dumps`, :class:`Domain`, :class:`Task`,
:class:`Frame`, :class:`Event`, :class:`Counter` and :class:`Marker`. The output is Chrome trace
JSON (open it in chrome://tracing or Perfetto): operators appear under their device ('cpu/0'),
user objects under their domain, one row per thread.

Lower layers ask :func:`operator_enabled`, :func:`memory_enabled` or :func:`api_enabled` (one
boolean when the profiler is off) and then call :func:`record_operator`, :func:`record_counter`
or :func:`record_api`, with times from :func:`now_us`.

Which operators are recorded: when the last :func:`set_config` named ``profile_all``,
``profile_symbolic`` or ``profile_imperative``, those flags decide; otherwise (and under
``MXNET_PROFILER_AUTOSTART``) ``MXNET_PROFILER_MODE`` does, read at each check: '0' records
symbolic (graph) operators only, '1' all operators.

>>> import json, os, tempfile
>>> from ember import profiler
>>> path = os.path.join(tempfile.mkdtemp(), 'profile.json')
>>> profiler.set_config(profile_imperative=True, filename=path)
>>> profiler.set_state('run')
>>> profiler.operator_enabled(symbolic=False), profiler.operator_enabled(symbolic=True)
(True, False)
>>> with profiler.Task(profiler.Domain('demo'), 'step'):
...     pass
>>> profiler.set_state('stop')
>>> profiler.dump()
>>> sorted({e['ph'] for e in json.load(open(path))['traceEvents']})
['M', 'X']
>>> profiler.set_config()
"""
from ember.profiler.control import (autostart, dump, dump_profile, dumps, pause,
                                    profiler_set_config, profiler_set_state, reset, resume,
                                    set_config, set_state, state)
from ember.base import py_str  # noqa: F401  (a name of MXNet's mx.profiler)
from ember.profiler.events import now_us
from ember.profiler.objects import Counter, Domain, Event, Frame, Marker, Task
from ember.profiler.recorder import (api_enabled, memory_enabled, operator_enabled, record_api,
                                     record_counter, record_operator, recording)

__all__ = ['py_str', 'set_config', 'set_state', 'state', 'pause', 'resume', 'dump', 'dumps', 'reset',
           'profiler_set_config', 'profiler_set_state', 'dump_profile', 'autostart',
           'Domain', 'Task', 'Frame', 'Event', 'Counter', 'Marker',
           'operator_enabled', 'memory_enabled', 'api_enabled', 'recording',
           'record_operator', 'record_counter', 'record_api', 'now_us']
