"""Aggregate statistics: per section and name, how often, how long (or what values) in total.

Durations come in microseconds and are shown in milliseconds; counter samples are shown as they
were recorded.

>>> stats = Aggregates()
>>> stats.add_time('operator', 'dot', 1000.0)
>>> stats.add_time('operator', 'dot', 3000.0)
>>> print(stats.table())  # doctest: +NORMALIZE_WHITESPACE
Profile Statistics:
    Note the difference in units for different entries.
<BLANKLINE>
operator
=================
Name  Total Count  Time (ms)  Min Time (ms)  Max Time (ms)  Avg Time (ms)
----  -----------  ---------  -------------  -------------  -------------
dot             2     4.0000         1.0000         3.0000         2.0000
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

SORT_KEYS = ('total', 'avg', 'min', 'max', 'count')
FORMATS = ('table', 'json')
TIME_HEADERS = ('Total Count', 'Time (ms)', 'Min Time (ms)', 'Max Time (ms)', 'Avg Time (ms)')
VALUE_HEADERS = ('Total Count', 'Min Value', 'Max Value', 'Avg Value')


@dataclass
class Stat:
    """Count, sum, minimum and maximum of one name's samples."""
    count: int = 0
    total: float = 0.0
    min: float = math.inf
    max: float = -math.inf

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.min = min(self.min, value)
        self.max = max(self.max, value)

    @property
    def avg(self) -> float:
        return self.total / self.count

    def sort_key(self, sort_by: str) -> float:
        return getattr(self, sort_by)


class Aggregates:
    """Statistics of durations and of counter values; the caller serialises access."""

    def __init__(self):
        self.times: dict[tuple[str, str], Stat] = {}
        self.values: dict[tuple[str, str], Stat] = {}

    def add_time(self, section: str, name: str, dur_us: float) -> None:
        _stat(self.times, section, name).add(dur_us)

    def add_value(self, section: str, name: str, value: float) -> None:
        _stat(self.values, section, name).add(value)

    def clear(self) -> None:
        self.times.clear()
        self.values.clear()

    def copy(self) -> Aggregates:
        other = Aggregates()
        other.times = {k: Stat(s.count, s.total, s.min, s.max) for k, s in self.times.items()}
        other.values = {k: Stat(s.count, s.total, s.min, s.max) for k, s in self.values.items()}
        return other

    def table(self, sort_by: str = 'total', ascending: bool = False, totals=None) -> str:
        """MXNet's console table: one block per section, rows sorted by `sort_by`; first the
        process-wide `totals` (section -> {name: value}), e.g. the graph compiler's."""
        lines = ['Profile Statistics:', '\tNote the difference in units for different entries.']
        for section, values in sorted((totals or {}).items()):
            lines += _block(section, ('Value',), [[name, _number(value)]
                                                  for name, value in values.items()])
        for section, rows in _sections(self.values, sort_by, ascending):
            lines += _block(section, VALUE_HEADERS, [_value_cells(n, s) for n, s in rows])
        for section, rows in _sections(self.times, sort_by, ascending):
            lines += _block(section, TIME_HEADERS, [_time_cells(n, s) for n, s in rows])
        if not self.times and not self.values:
            lines += ['', 'No statistics: call set_config(aggregate_stats=True) and profile.']
        return '\n'.join(lines)

    def as_json(self, sort_by: str = 'total', ascending: bool = False, totals=None) -> str:
        """The same numbers as the table: {"Time": {section: {name: {...}}}, "Counter": ...,
        "Totals": {section: {name: value}}}."""
        return json.dumps({
            'Time': _json_sections(self.times, sort_by, ascending, _time_entry),
            'Counter': _json_sections(self.values, sort_by, ascending, _value_entry),
            'Totals': dict(totals or {}),
            'Unit': {'Time': 'ms', 'Counter': 'value'},
        }, indent=4)


def _stat(stats, section, name):
    key = (section, name)
    stat = stats.get(key)
    if stat is None:
        stat = stats[key] = Stat()
    return stat


def _sections(stats, sort_by, ascending):
    """[(section, [(name, stat), ...])] with sections by name and rows by `sort_by`."""
    grouped: dict[str, list] = {}
    for (section, name), stat in stats.items():
        grouped.setdefault(section, []).append((name, stat))
    result = []
    for section in sorted(grouped):
        # Ties keep a stable, readable order: by name.
        rows = sorted(grouped[section], key=lambda row: row[0])
        rows.sort(key=lambda row: row[1].sort_key(sort_by), reverse=not ascending)
        result.append((section, rows))
    return result


def _block(section, headers, rows):
    width = max([len('Name')] + [len(row[0]) for row in rows])
    widths = [width] + [len(h) for h in headers]
    lines = ['', section, '=================']
    lines.append(_row(['Name', *headers], widths))
    lines.append(_row(['-' * len(c) for c in ['Name', *headers]], widths))
    lines += [_row(cells, widths) for cells in rows]
    return lines


def _row(cells, widths):
    first = cells[0].ljust(widths[0])
    rest = [cell.rjust(w) for cell, w in zip(cells[1:], widths[1:])]
    return '    '.join([first, *rest])


def _number(value):
    return f'{value:.4f}' if isinstance(value, float) else str(value)


def _time_cells(name, stat):
    times = (stat.total, stat.min, stat.max, stat.avg)
    return [name, str(stat.count), *(f'{t / 1000.0:.4f}' for t in times)]


def _value_cells(name, stat):
    return [name, str(stat.count), *(f'{v:.4f}' for v in (stat.min, stat.max, stat.avg))]


def _time_entry(stat):
    return {'Total Count': stat.count, 'Total': stat.total / 1000.0, 'Min': stat.min / 1000.0,
            'Max': stat.max / 1000.0, 'Avg': stat.avg / 1000.0}


def _value_entry(stat):
    return {'Total Count': stat.count, 'Min': stat.min, 'Max': stat.max, 'Avg': stat.avg}


def _json_sections(stats, sort_by, ascending, entry):
    return {section: {name: entry(stat) for name, stat in rows}
            for section, rows in _sections(stats, sort_by, ascending)}
