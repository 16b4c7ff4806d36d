"""The profiler: configuration, recording rules, Chrome trace output, aggregates, user objects."""
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from ember import config, device, profiler

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_profiler():
    profiler.reset()
    yield
    profiler.reset()


@pytest.fixture
def trace_path(tmp_path):
    return tmp_path / 'trace.json'


def load(path):
    with open(path, encoding='utf-8') as stream:
        return json.load(stream)


def complete_events(trace):
    return [e for e in trace['traceEvents'] if e['ph'] == 'X']


def names_of_processes(trace):
    return {e['pid']: e['args']['name'] for e in trace['traceEvents']
            if e['ph'] == 'M' and e['name'] == 'process_name'}


def run_with(path, **config_kwargs):
    profiler.set_config(filename=str(path), **config_kwargs)
    profiler.set_state('run')


# ----------------------------------------------------------------------------------------------
# Configuration and state.

@pytest.mark.parametrize('kwargs, message', [
    ({'profile_all': 'yes'}, "profile_all='yes': expected True or False"),
    ({'profile_memory': 2}, 'profile_memory=2: expected True or False'),
    ({'aggregate_stats': None, 'continuous_dump': 0.5}, 'continuous_dump=0.5'),
    ({'filename': ''}, 'expected a non-empty path'),
    ({'filename': 42}, 'filename=42: expected a path'),
])
def test_set_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message.replace('(', r'\(')):
        profiler.set_config(**kwargs)


def test_set_config_accepts_mxnet_spellings_of_booleans(trace_path):
    profiler.set_config(profile_imperative=1, profile_symbolic=0, filename=trace_path)
    profiler.set_state('run')
    assert profiler.operator_enabled(False) and not profiler.operator_enabled(True)


def test_set_config_warns_about_unknown_and_unused_keys():
    with pytest.warns(UserWarning, match="profile_al=True is not a profiler setting.*"
                                         "did you mean 'profile_all'"):
        profiler.set_config(profile_al=True)
    with pytest.warns(UserWarning, match='dump_period=1.0 has no effect'):
        profiler.set_config(dump_period=1.0)


def test_server_process_calls_change_nothing():
    with pytest.warns(UserWarning, match='no parameter server'):
        profiler.set_state('run', profile_process='server')
    assert profiler.state() == 'stop'
    with pytest.warns(UserWarning, match='no parameter server'):
        profiler.set_config(profile_api=True, profile_process='server')
    profiler.set_state('run')
    assert not profiler.api_enabled()
    with pytest.raises(ValueError, match="profile_process='client': expected 'worker'"):
        profiler.pause(profile_process='client')


def test_set_state_validates_and_reports_state():
    with pytest.raises(ValueError, match="profiler state 'start': expected 'run' or 'stop'"):
        profiler.set_state('start')
    with pytest.raises(ValueError, match="did you mean 'stop'"):
        profiler.set_state('Stop')
    assert profiler.state() == 'stop'
    profiler.set_state('run')
    assert profiler.state() == 'run' and profiler.recording()
    profiler.pause()
    assert profiler.state() == 'run' and not profiler.recording()
    profiler.set_state('stop')
    assert profiler.state() == 'stop' and not profiler.recording()


def test_nothing_is_recorded_while_stopped(trace_path):
    profiler.set_config(profile_all=True, aggregate_stats=True, filename=trace_path)
    assert not (profiler.operator_enabled(True) or profiler.operator_enabled(False)
                or profiler.memory_enabled() or profiler.api_enabled())
    profiler.record_operator('dot', device.cpu(), 0.0, 1.0, symbolic=True)
    profiler.record_counter('pool', 10)
    profiler.record_api('invoke', 0.0, 1.0)
    with profiler.Task(profiler.Domain('d'), 't'):
        pass
    profiler.dump()
    assert load(trace_path)['traceEvents'] == []
    assert 'No statistics' in profiler.dumps()


# ----------------------------------------------------------------------------------------------
# Which operators are recorded.

@pytest.mark.parametrize('kwargs, mode, symbolic, imperative', [
    ({}, '0', True, False),                                   # MODE decides
    ({}, '1', True, True),
    ({'profile_memory': True}, '0', True, False),             # memory says nothing of operators
    ({'profile_all': True}, '0', True, True),                 # explicit flags win over MODE
    ({'profile_symbolic': True}, '1', True, False),
    ({'profile_imperative': True}, '0', False, True),
    ({'profile_all': False}, '1', False, False),
    ({'profile_symbolic': True, 'profile_imperative': True}, '0', True, True),
])
def test_operator_kinds_follow_flags_or_mode(trace_path, kwargs, mode, symbolic, imperative):
    with config.override(MXNET_PROFILER_MODE=mode):
        run_with(trace_path, **kwargs)
        assert profiler.operator_enabled(True) is symbolic
        assert profiler.operator_enabled(False) is imperative
        profiler.record_operator('graph_op', device.cpu(), 0.0, 1.0, symbolic=True)
        profiler.record_operator('eager_op', device.cpu(), 0.0, 1.0, symbolic=False)
        profiler.dump()
    recorded = {e['name'] for e in complete_events(load(trace_path))}
    expected = {'graph_op'} if symbolic else set()
    assert recorded == expected | ({'eager_op'} if imperative else set())


def test_mode_is_read_at_each_check(trace_path):
    run_with(trace_path)
    with config.override(MXNET_PROFILER_MODE='0'):
        assert not profiler.operator_enabled(False)
    with config.override(MXNET_PROFILER_MODE='1'):
        assert profiler.operator_enabled(False)


def test_memory_and_api_flags(trace_path):
    run_with(trace_path, profile_symbolic=True)
    assert not profiler.memory_enabled() and not profiler.api_enabled()
    run_with(trace_path, profile_memory=True)
    assert profiler.memory_enabled() and not profiler.api_enabled()
    run_with(trace_path, profile_api=True)
    assert profiler.api_enabled() and not profiler.memory_enabled()
    run_with(trace_path, profile_all=True)
    assert profiler.api_enabled() and profiler.memory_enabled()


# ----------------------------------------------------------------------------------------------
# Chrome trace output.

def test_chrome_trace_structure(trace_path):
    run_with(trace_path, profile_all=True)
    profiler.record_operator('dot', device.cpu(0), 100.0, 350.5, symbolic=False,
                             args={'shape': (2, 3)})
    profiler.record_operator('relu', device.gpu(1), 400.0, 410.0, symbolic=True)
    profiler.set_state('stop')
    profiler.dump()
    trace = load(trace_path)
    assert set(trace) == {'traceEvents', 'displayTimeUnit'}
    assert trace['displayTimeUnit'] == 'ms'
    dot, relu = complete_events(trace)
    assert (dot['name'], dot['cat'], dot['ts'], dot['dur']) == ('dot', 'operator', 100.0, 250.5)
    assert dot['args'] == {'shape': [2, 3]}
    assert (relu['ts'], relu['dur']) == (400.0, 10.0)
    processes = names_of_processes(trace)
    assert processes[dot['pid']] == 'cpu/0' and processes[relu['pid']] == 'gpu/1'
    assert dot['tid'] == relu['tid']
    threads = [e for e in trace['traceEvents'] if e['name'] == 'thread_name']
    assert {(e['pid'], e['tid'], e['args']['name']) for e in threads} == {
        (dot['pid'], dot['tid'], threading.current_thread().name),
        (relu['pid'], relu['tid'], threading.current_thread().name)}


def test_events_from_many_threads(trace_path):
    # operators only: with memory on (profile_all), a buffer of an earlier test that the
    # collector frees in the window adds a 'memory' process
    run_with(trace_path, profile_imperative=True, aggregate_stats=True)
    per_thread, workers = 200, 4
    all_started = threading.Barrier(workers)

    def work(index):
        all_started.wait()
        for step in range(per_thread):
            profiler.record_operator(f'op{index}', device.cpu(index % 2), step, step + 1.0,
                                     symbolic=False)

    threads = [threading.Thread(target=work, args=(i,), name=f'worker-{i}')
               for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    profiler.dump()
    trace = load(trace_path)
    events = complete_events(trace)
    assert len(events) == per_thread * workers
    tids = {e['name']: {x['tid'] for x in events if x['name'] == e['name']} for e in events}
    assert all(len(t) == 1 for t in tids.values())            # one thread per op name
    assert len({next(iter(t)) for t in tids.values()}) == workers
    assert all(isinstance(e['tid'], int) and e['tid'] < 16 for e in events)  # small ids
    thread_names = {e['args']['name'] for e in trace['traceEvents']
                    if e['name'] == 'thread_name'}
    assert thread_names == {f'worker-{i}' for i in range(workers)}
    assert set(names_of_processes(trace).values()) == {'cpu/0', 'cpu/1'}
    stats = json.loads(profiler.dumps(format='json'))['Time']['operator']
    assert {name: s['Total Count'] for name, s in stats.items()} == {
        f'op{i}': per_thread for i in range(workers)}


def test_threads_that_reuse_an_ident_get_their_own_tid(trace_path):
    run_with(trace_path, profile_all=True)
    for index in range(3):   # one after the other: the OS may hand out the same ident
        thread = threading.Thread(target=profiler.record_operator, name=f'short-{index}',
                                  args=('op', 'cpu/0', 0.0, 1.0, True))
        thread.start()
        thread.join()
    profiler.dump()
    trace = load(trace_path)
    assert len({e['tid'] for e in complete_events(trace)}) == 3
    assert {e['args']['name'] for e in trace['traceEvents'] if e['name'] == 'thread_name'} == {
        'short-0', 'short-1', 'short-2'}


def test_dump_is_atomic_and_leaves_no_temporary_files(tmp_path, trace_path):
    run_with(trace_path, profile_all=True)
    stop = threading.Event()
    failures = []

    def read_repeatedly():
        while not stop.is_set():
            if trace_path.exists():
                try:
                    load(trace_path)
                except ValueError as exc:
                    failures.append(exc)

    reader = threading.Thread(target=read_repeatedly)
    reader.start()
    try:
        for step in range(60):
            profiler.record_operator('x' * 200, device.cpu(), step, step + 1.0, symbolic=True)
            profiler.dump(finished=False)
    finally:
        stop.set()
        reader.join()
    assert failures == []
    assert len(complete_events(load(trace_path))) == 60
    assert os.listdir(tmp_path) == ['trace.json']


def test_failed_dump_keeps_the_previous_file(tmp_path, trace_path, monkeypatch):
    run_with(trace_path, profile_all=True)
    profiler.record_operator('first', device.cpu(), 0.0, 1.0, symbolic=True)
    profiler.dump(finished=False)

    def broken_replace(source, target):
        raise OSError('disk full')

    monkeypatch.setattr(os, 'replace', broken_replace)
    profiler.record_operator('second', device.cpu(), 1.0, 2.0, symbolic=True)
    with pytest.raises(OSError, match='disk full'):
        profiler.dump(finished=False)
    monkeypatch.undo()
    assert [e['name'] for e in complete_events(load(trace_path))] == ['first']
    assert os.listdir(tmp_path) == ['trace.json']


def test_dump_into_missing_directory_names_it(tmp_path):
    missing = tmp_path / 'no' / 'such'
    profiler.set_config(filename=str(missing / 'p.json'))
    with pytest.raises(FileNotFoundError, match="directory .*no/such' does not exist"):
        profiler.dump()


def test_continuous_dump_appends_and_writes_at_stop(trace_path):
    run_with(trace_path, profile_all=True, continuous_dump=True)
    profiler.record_operator('a', device.cpu(), 0.0, 1.0, symbolic=True)
    profiler.dump(finished=False)
    assert [e['name'] for e in complete_events(load(trace_path))] == ['a']
    profiler.record_operator('b', device.cpu(), 1.0, 2.0, symbolic=True)
    profiler.set_state('stop')          # writes without an explicit dump
    assert [e['name'] for e in complete_events(load(trace_path))] == ['a', 'b']
    profiler.dump(finished=True)
    assert [e['name'] for e in complete_events(load(trace_path))] == ['a', 'b']
    profiler.set_state('run')           # a finished trace is not continued
    profiler.record_operator('c', device.cpu(), 2.0, 3.0, symbolic=True)
    profiler.dump()
    assert [e['name'] for e in complete_events(load(trace_path))] == ['c']


def test_stop_without_continuous_dump_writes_nothing(trace_path):
    run_with(trace_path, profile_all=True)
    profiler.record_operator('a', device.cpu(), 0.0, 1.0, symbolic=True)
    profiler.set_state('stop')
    assert not trace_path.exists()
    profiler.dump()
    assert [e['name'] for e in complete_events(load(trace_path))] == ['a']


def test_pause_and_resume(trace_path):
    run_with(trace_path, profile_all=True, aggregate_stats=True)
    profiler.record_operator('before', device.cpu(), 0.0, 1.0, symbolic=True)
    profiler.pause()
    assert not profiler.operator_enabled(True) and not profiler.memory_enabled()
    profiler.record_operator('paused', device.cpu(), 1.0, 2.0, symbolic=True)
    profiler.record_counter('pool', 5)
    profiler.Marker(profiler.Domain('d'), 'm').mark()
    profiler.resume()
    profiler.record_operator('after', device.cpu(), 2.0, 3.0, symbolic=True)
    profiler.dump()
    trace = load(trace_path)
    assert [e['name'] for e in trace['traceEvents'] if e['ph'] != 'M'] == ['before', 'after']
    assert 'paused' not in profiler.dumps()


def test_a_new_run_starts_unpaused(trace_path):
    run_with(trace_path, profile_all=True)
    profiler.pause()
    profiler.set_state('stop')
    profiler.set_state('run')
    assert profiler.recording()


# ----------------------------------------------------------------------------------------------
# Aggregate statistics.

def inject(durations_us):
    for name, durations in durations_us.items():
        for begin, dur in enumerate(durations):
            profiler.record_operator(name, device.cpu(), begin * 1e4, begin * 1e4 + dur,
                                     symbolic=True)


DURATIONS = {'dot': [1000.0, 3000.0, 2000.0], 'relu': [500.0], 'add': [4000.0, 100.0]}


def test_aggregate_json_is_computed_from_the_events(trace_path):
    run_with(trace_path, profile_all=True, aggregate_stats=True)
    inject(DURATIONS)
    stats = json.loads(profiler.dumps(format='json'))
    assert stats['Unit'] == {'Time': 'ms', 'Counter': 'value'}
    rows = stats['Time']['operator']
    for name, durations in DURATIONS.items():
        ms = [d / 1000.0 for d in durations]
        assert rows[name] == pytest.approx({'Total Count': len(ms), 'Total': sum(ms),
                                            'Min': min(ms), 'Max': max(ms),
                                            'Avg': sum(ms) / len(ms)})


def test_aggregate_table_rows(trace_path):
    run_with(trace_path, profile_all=True, aggregate_stats=True)
    inject(DURATIONS)
    lines = profiler.dumps().splitlines()
    assert lines[0] == 'Profile Statistics:'
    header = lines.index('operator')
    assert lines[header + 2].split()[:3] == ['Name', 'Total', 'Count']
    rows = [line.split() for line in lines[header + 4:]]
    assert rows == [['dot', '3', '6.0000', '1.0000', '3.0000', '2.0000'],
                    ['add', '2', '4.1000', '0.1000', '4.0000', '2.0500'],
                    ['relu', '1', '0.5000', '0.5000', '0.5000', '0.5000']]


@pytest.mark.parametrize('sort_by, ascending, order', [
    ('total', False, ['dot', 'add', 'relu']),
    ('total', True, ['relu', 'add', 'dot']),
    ('count', False, ['dot', 'add', 'relu']),
    ('min', False, ['dot', 'relu', 'add']),
    ('max', True, ['relu', 'dot', 'add']),
    ('avg', False, ['add', 'dot', 'relu']),
])
def test_aggregate_sorting(trace_path, sort_by, ascending, order):
    run_with(trace_path, profile_all=True, aggregate_stats=True)
    inject(DURATIONS)
    stats = json.loads(profiler.dumps(format='json', sort_by=sort_by, ascending=ascending))
    assert list(stats['Time']['operator']) == order
    table = profiler.dumps(sort_by=sort_by, ascending=ascending).splitlines()
    start = table.index('operator') + 4
    assert [line.split()[0] for line in table[start:start + 3]] == order


def test_aggregate_reset(trace_path):
    run_with(trace_path, profile_all=True, aggregate_stats=True)
    inject({'dot': [1000.0]})
    first = json.loads(profiler.dumps(reset=True, format='json'))
    assert first['Time']['operator']['dot']['Total Count'] == 1
    assert json.loads(profiler.dumps(format='json'))['Time'] == {}
    inject({'dot': [2000.0]})
    again = json.loads(profiler.dumps(format='json'))['Time']['operator']['dot']
    assert again['Total Count'] == 1 and again['Total'] == pytest.approx(2.0)


def test_no_statistics_without_aggregate_stats(trace_path):
    run_with(trace_path, profile_all=True)
    inject({'dot': [1000.0]})
    assert json.loads(profiler.dumps(format='json'))['Time'] == {}
    assert 'aggregate_stats=True' in profiler.dumps()


@pytest.mark.parametrize('kwargs, message', [
    ({'format': 'csv'}, "dumps format 'csv': expected 'table' or 'json'"),
    ({'sort_by': 'mean'}, "dumps sort_by 'mean': expected 'total', 'avg', 'min', 'max' or "
                          "'count'"),
    ({'sort_by': 'totl'}, "did you mean 'total'"),
    ({'ascending': 'yes'}, "ascending='yes': expected True or False"),
])
def test_dumps_validates_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        profiler.dumps(**kwargs)


# ----------------------------------------------------------------------------------------------
# Domains, tasks, frames, events, counters, markers.

def test_task_frame_and_event(trace_path):
    run_with(trace_path, aggregate_stats=True)
    domain = profiler.Domain('train')
    task = profiler.Task(domain, 'load')
    task.start()
    task.stop()
    with domain.new_frame('iteration'):
        pass
    with profiler.Event('outside'):
        pass
    profiler.dump()
    trace = load(trace_path)
    processes = names_of_processes(trace)
    spans = {e['name']: (e['cat'], processes[e['pid']], e['dur'] >= 0)
             for e in complete_events(trace)}
    assert spans == {'load': ('task', 'train', True), 'iteration': ('frame', 'train', True),
                     'outside': ('event', 'events', True)}
    stats = json.loads(profiler.dumps(format='json'))['Time']
    assert set(stats) == {'train', 'event'}
    assert set(stats['train']) == {'load', 'iteration'}


def test_span_misuse_is_an_error():
    task = profiler.Task(profiler.Domain('d'), 'job')
    with pytest.raises(RuntimeError, match="Task 'job' is not started"):
        task.stop()
    task.start()
    with pytest.raises(RuntimeError, match="Task 'job' is already started"):
        task.start()
    with pytest.raises(TypeError, match="Frame domain 'd': expected a profiler.Domain"):
        profiler.Frame('d', 'f')
    with pytest.raises(ValueError, match="Event name '': expected a non-empty string"):
        profiler.Event('')


def test_counter_changes_are_counter_events(trace_path):
    run_with(trace_path, aggregate_stats=True)
    domain = profiler.Domain('data')
    counter = profiler.Counter(domain, 'queue', value=5)
    counter.increment(3)
    counter.decrement()
    counter += 10
    counter -= 2
    counter.set_value(1)
    assert counter.value == 1
    profiler.dump()
    trace = load(trace_path)
    samples = [e for e in trace['traceEvents'] if e['ph'] == 'C']
    assert [e['args']['queue'] for e in samples] == [5, 8, 7, 17, 15, 1]
    assert {names_of_processes(trace)[e['pid']] for e in samples} == {'data'}
    stats = json.loads(profiler.dumps(format='json'))['Counter']['data']['queue']
    assert stats == pytest.approx({'Total Count': 6, 'Min': 1, 'Max': 17, 'Avg': 53 / 6})
    with pytest.raises(TypeError, match="Counter 'queue' value 'x'"):
        counter.set_value('x')


def test_marker_scopes(trace_path):
    run_with(trace_path)
    marker = profiler.Domain('d').new_marker('checkpoint')
    for scope in ('global', 'process', 'thread', 'task', 'marker'):
        marker.mark(scope)
    marker.mark()
    with pytest.raises(ValueError, match="scope 'everywhere': expected one of 'global'"):
        marker.mark('everywhere')
    profiler.dump()
    instants = [e for e in load(trace_path)['traceEvents'] if e['ph'] == 'i']
    assert [e['s'] for e in instants] == ['g', 'p', 't', 't', 't', 'p']
    assert {(e['name'], e['cat']) for e in instants} == {('checkpoint', 'marker')}


def test_memory_counters(trace_path):
    run_with(trace_path, profile_memory=True, aggregate_stats=True)
    profiler.record_counter('cpu/0 pool bytes', 4096, device.cpu(0))
    profiler.record_counter('cpu/0 pool bytes', 1024, device.cpu(0))
    profiler.record_counter('host bytes', 7)
    profiler.dump()
    trace = load(trace_path)
    samples = [e for e in trace['traceEvents'] if e['ph'] == 'C']
    processes = names_of_processes(trace)
    assert [(e['name'], e['cat'], processes[e['pid']], e['args']) for e in samples] == [
        ('cpu/0 pool bytes', 'memory', 'cpu/0', {'cpu/0 pool bytes': 4096}),
        ('cpu/0 pool bytes', 'memory', 'cpu/0', {'cpu/0 pool bytes': 1024}),
        ('host bytes', 'memory', 'memory', {'host bytes': 7})]
    stats = json.loads(profiler.dumps(format='json'))['Counter']['memory']
    assert stats['cpu/0 pool bytes'] == {'Total Count': 2, 'Min': 1024, 'Max': 4096,
                                         'Avg': 2560.0}


def test_api_events(trace_path):
    run_with(trace_path, profile_api=True, aggregate_stats=True)
    profiler.record_api('invoke', 10.0, 15.0)
    profiler.dump()
    (event,) = complete_events(load(trace_path))
    assert (event['name'], event['cat'], event['dur']) == ('invoke', 'api', 5.0)
    assert 'invoke' in json.loads(profiler.dumps(format='json'))['Time']['api']


# ----------------------------------------------------------------------------------------------
# MXNet's deprecated spellings.

def test_legacy_aliases(trace_path):
    with pytest.warns(DeprecationWarning, match='profiler_set_config'):
        profiler.profiler_set_config(mode='all', filename=str(trace_path))
    with pytest.warns(DeprecationWarning, match='profiler_set_state'):
        profiler.profiler_set_state('run')
    assert profiler.operator_enabled(False) and profiler.memory_enabled()
    profiler.record_operator('dot', device.cpu(), 0.0, 1.0, symbolic=False)
    with pytest.warns(DeprecationWarning, match='dump_profile'):
        profiler.dump_profile()
    assert [e['name'] for e in complete_events(load(trace_path))] == ['dot']
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="did you mean"):
        profiler.profiler_set_config(mode='symbolc')


# ----------------------------------------------------------------------------------------------
# MXNET_PROFILER_AUTOSTART (read at start-up: a fresh process each).

PROGRAM = textwrap.dedent("""
    from ember import profiler
    profiler.autostart()
    print(profiler.state())
    profiler.record_operator('graph_dot', 'cpu/0', 0.0, 5.0, symbolic=True)
    profiler.record_operator('eager_dot', 'cpu/0', 5.0, 9.0, symbolic=False)
""")


def run_program(cwd, **env_vars):
    env = {k: v for k, v in os.environ.items() if not k.startswith('MXNET_PROFILER')}
    env.update(env_vars, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, '-c', PROGRAM], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize('mode, expected', [('1', ['graph_dot', 'eager_dot']),
                                            ('0', ['graph_dot'])])
def test_autostart_writes_profile_json_at_exit(tmp_path, mode, expected):
    result = run_program(tmp_path, MXNET_PROFILER_AUTOSTART='1', MXNET_PROFILER_MODE=mode)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['run']
    assert os.listdir(tmp_path) == ['profile.json']
    trace = load(tmp_path / 'profile.json')
    assert [e['name'] for e in complete_events(trace)] == expected


def test_no_autostart_without_the_variable(tmp_path):
    result = run_program(tmp_path, MXNET_PROFILER_MODE='1')
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ['stop']
    assert os.listdir(tmp_path) == []


def test_autostart_rejects_a_bad_mode(tmp_path):
    result = run_program(tmp_path, MXNET_PROFILER_AUTOSTART='1', MXNET_PROFILER_MODE='2')
    assert result.returncode != 0
    assert "MXNET_PROFILER_MODE='2': expected '0' or '1'" in result.stderr
    assert os.listdir(tmp_path) == []


def test_autostart_keeps_a_trace_the_program_dumped(tmp_path):
    program = PROGRAM + "profiler.set_state('stop'); profiler.dump()\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith('MXNET_PROFILER')}
    env.update(MXNET_PROFILER_AUTOSTART='1', MXNET_PROFILER_MODE='1', PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, '-c', program], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    names = [e['name'] for e in complete_events(load(tmp_path / 'profile.json'))]
    assert names == ['graph_dot', 'eager_dot']

