"""Chrome trace JSON (chrome://tracing, Perfetto): encoding records and writing the file.

The file is replaced atomically (written beside it, then ``os.replace``), so a reader sees either
the previous complete trace or the new one, never a partial file.

>>> import json
>>> from ember.profiler.events import Record
>>> trace = TraceFile()
>>> trace.add([Record('X', 'dot', 'operator', 'cpu/0', 77, 10.0, 5.0)],
...           {'cpu/0': 0}, {77: 'MainThread'})
>>> events = json.loads(trace.text())['traceEvents']
>>> [(e['ph'], e['name']) for e in events]
[('M', 'process_name'), ('M', 'thread_name'), ('X', 'dot')]
"""
from __future__ import annotations

import json
import os
import tempfile

from ember.profiler.events import COMPLETE, INSTANT, Record


def encode(record: Record, pid: int, tid: int) -> dict:
    """The Chrome event of one record; times in microseconds, to the nanosecond."""
    event = {'name': record.name, 'cat': record.category, 'ph': record.phase,
             'ts': round(record.ts_us, 3), 'pid': pid, 'tid': tid}
    if record.phase == COMPLETE:
        event['dur'] = round(record.dur_us, 3)
    elif record.phase == INSTANT:
        event['s'] = record.scope
    if record.args:
        event['args'] = dict(record.args)
    return event


def process_name(label: str, pid: int) -> dict:
    return {'name': 'process_name', 'ph': 'M', 'pid': pid, 'args': {'name': label}}


def thread_name(name: str, pid: int, tid: int) -> dict:
    return {'name': 'thread_name', 'ph': 'M', 'pid': pid, 'tid': tid, 'args': {'name': name}}


class TraceFile:
    """The events of one trace so far, kept encoded so that each rewrite only joins text."""

    def __init__(self):
        self.lines: list[str] = []
        self.processes: dict[int, str] = {}             # pid -> label
        self.threads: dict[tuple[int, int], str] = {}   # (pid, tid) -> thread name

    def add(self, records, process_ids, thread_names) -> None:
        """Append `records`, naming each process and thread the first time it appears."""
        for record in records:
            pid = process_ids[record.process]
            self.processes.setdefault(pid, record.process)
            self.threads.setdefault((pid, record.thread), thread_names[record.thread])
            self.lines.append(json.dumps(encode(record, pid, record.thread), default=str))

    def text(self) -> str:
        metadata = [process_name(label, pid) for pid, label in sorted(self.processes.items())]
        metadata += [thread_name(name, pid, tid)
                     for (pid, tid), name in sorted(self.threads.items())]
        lines = [json.dumps(event) for event in metadata] + self.lines
        return ('{"traceEvents": [\n' + ',\n'.join(lines) + '\n],\n'
                '"displayTimeUnit": "ms"}\n')

    def write(self, filename) -> None:
        write_atomic(filename, self.text())

    def clear(self) -> None:
        self.lines.clear()
        self.processes.clear()
        self.threads.clear()


def write_atomic(filename, text: str) -> None:
    """Replace `filename` with `text` in one step; no temporary file is left on failure."""
    path = os.path.abspath(os.fspath(filename))
    directory, base = os.path.split(path)
    try:
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=f'.{base}.', suffix='.tmp')
    except FileNotFoundError:
        raise FileNotFoundError(f'profiler output {os.fspath(filename)!r}: directory '
                                f'{directory!r} does not exist; create it or choose another '
                                'filename with set_config(filename=...)') from None
    try:
        with os.fdopen(fd, 'w', encoding='utf-8') as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)  # mkstemp makes 0600; a trace is an ordinary file
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
