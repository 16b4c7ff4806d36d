"""User-defined profiling objects, as MXNet's: domains, tasks, frames, events, counters, markers.

Each records into the running profiler and does nothing while it is stopped or paused. A task
or frame appears in the trace under its domain's name and is counted in the aggregate table in
its domain's section.

>>> from ember import profiler
>>> domain = profiler.Domain('training')
>>> with domain.new_task('load batch'):
...     pass
>>> steps = domain.new_counter('steps', 0)
>>> steps += 1
>>> steps.value
1
"""
from __future__ import annotations

import numbers
import threading

from ember.profiler import recorder
from ember.profiler.events import now_us

__all__ = ['Domain', 'Task', 'Frame', 'Event', 'Counter', 'Marker']

# MXNet's marker scopes; Chrome knows global, process and thread.
MARKER_SCOPES = {'global': 'g', 'process': 'p', 'thread': 't', 'task': 't', 'marker': 't'}


def _check_name(kind, name) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f'{kind} name {name!r}: expected a non-empty string')
    return name


def _check_domain(kind, domain) -> 'Domain':
    if not isinstance(domain, Domain):
        raise TypeError(f'{kind} domain {domain!r}: expected a profiler.Domain')
    return domain


class Domain:
    """A named group of tasks, frames, counters and markers (a row group in the trace)."""

    def __init__(self, name):
        self.name = _check_name('Domain', name)

    def __str__(self):
        return self.name

    def __repr__(self):
        return f'Domain({self.name!r})'

    def new_task(self, name) -> 'Task':
        return Task(self, name)

    def new_frame(self, name) -> 'Frame':
        return Frame(self, name)

    def new_counter(self, name, value=None) -> 'Counter':
        return Counter(self, name, value)

    def new_marker(self, name) -> 'Marker':
        return Marker(self, name)


class _Span:
    """Something with a start and a stop, recorded as one complete event at stop()."""
    kind = ''

    def __init__(self, name, process, section):
        self.name = _check_name(self.kind, name)
        self._process = process
        self._section = section
        self._begin_us = None

    def start(self) -> None:
        if self._begin_us is not None:
            raise RuntimeError(f'{self.kind} {self.name!r} is already started; stop() it first')
        self._begin_us = now_us()

    def stop(self) -> None:
        if self._begin_us is None:
            raise RuntimeError(f'{self.kind} {self.name!r} is not started; call start() first')
        begin_us, self._begin_us = self._begin_us, None
        recorder.record_span(self.name, self.kind.lower(), self._process, begin_us, now_us(),
                             self._section)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def __str__(self):
        return self.name


class Task(_Span):
    """A piece of work in a domain, timed from start() to stop() (or as a ``with`` block)."""
    kind = 'Task'

    def __init__(self, domain, name):
        self.domain = _check_domain('Task', domain)
        super().__init__(name, domain.name, domain.name)


class Frame(_Span):
    """One iteration (a frame) in a domain, timed like a :class:`Task`."""
    kind = 'Frame'

    def __init__(self, domain, name):
        self.domain = _check_domain('Frame', domain)
        super().__init__(name, domain.name, domain.name)


class Event(_Span):
    """A named stretch of time outside any domain; counted in the 'event' section.

    >>> with Event('preprocess'):
    ...     pass
    """
    kind = 'Event'

    def __init__(self, name):
        super().__init__(name, 'events', 'event')


class Counter:
    """A named number in a domain; every change is a counter event in the trace."""

    def __init__(self, domain, name, value=None):
        self.domain = _check_domain('Counter', domain)
        self.name = _check_name('Counter', name)
        self._lock = threading.Lock()
        self._value = 0
        if value is not None:
            self.set_value(value)

    @property
    def value(self):
        """The current value (an Ember addition; MXNet counters are write-only)."""
        return self._value

    def set_value(self, value) -> None:
        value = _check_number(self.name, value)
        with self._lock:
            self._value = value
            self._record(value)

    def increment(self, delta=1) -> None:
        delta = _check_number(self.name, delta)
        with self._lock:
            self._value += delta
            self._record(self._value)

    def decrement(self, delta=1) -> None:
        self.increment(-_check_number(self.name, delta))

    def __iadd__(self, delta):
        self.increment(delta)
        return self

    def __isub__(self, delta):
        self.decrement(delta)
        return self

    def __str__(self):
        return self.name

    def _record(self, value) -> None:
        # Inside the lock: samples reach the trace in the order the value changed.
        recorder.record_sample(self.name, 'counter', self.domain.name, value, self.domain.name)


def _check_number(name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f'Counter {name!r} value {value!r}: expected an int or a float')
    # Plain Python numbers, so that NumPy scalars serialise as JSON numbers.
    return int(value) if isinstance(value, numbers.Integral) else float(value)


class Marker:
    """A named instant in a domain: ``mark()`` puts it in the trace."""

    def __init__(self, domain, name):
        self.domain = _check_domain('Marker', domain)
        self.name = _check_name('Marker', name)

    def mark(self, scope='process') -> None:
        """Record the instant; scope is 'global', 'process', 'thread', 'task' or 'marker'."""
        if scope not in MARKER_SCOPES:
            raise ValueError(f'Marker {self.name!r} scope {scope!r}: expected one of '
                             + ', '.join(map(repr, MARKER_SCOPES)))
        recorder.record_instant(self.name, 'marker', self.domain.name, MARKER_SCOPES[scope])

    def __str__(self):
        return self.name
