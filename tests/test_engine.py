"""The dependency engine: ordering, concurrency, errors, bulk, back-pressure, threads."""
import os
import threading
import time
import weakref

import numpy as np
import pytest

from ember import config, device, engine
from ember.base import EmberError
from ember.engine import core

KINDS = ('NaiveEngine', 'ThreadedEngine', 'ThreadedEnginePerDevice')
THREADED = KINDS[1:]
TIMEOUT = 10


@pytest.fixture(params=KINDS)
def eng(request):
    with config.override(MXNET_ENGINE_TYPE=request.param, MXNET_CPU_WORKER_NTHREADS=2):
        yield engine.get()


@pytest.fixture(params=THREADED)
def threaded(request):
    with config.override(MXNET_ENGINE_TYPE=request.param, MXNET_CPU_WORKER_NTHREADS=2):
        yield engine.get()


def test_get_builds_the_configured_kind(eng):
    assert type(eng).__name__ == config.get('MXNET_ENGINE_TYPE')
    assert engine.get() is eng


# ---------------------------------------------------------------------------------------------
# Ordering and concurrency

def test_operations_on_one_var_run_in_push_order(eng):
    var, log = eng.new_var(), []
    for i in range(40):
        if i % 3:
            eng.push(lambda i=i: log.append(('read', i)), reads=[var])
        else:
            eng.push(lambda i=i: (time.sleep(0.001 * (i % 2)), log.append(('write', i))),
                     writes=[var])
    eng.wait_for_var(var, write=True)
    writes = [i for kind, i in log if kind == 'write']
    assert writes == list(range(0, 40, 3))
    # every read sits between the writes pushed before and after it
    for position, (kind, i) in enumerate(log):
        if kind == 'read':
            before = [j for k, j in log[:position] if k == 'write']
            assert before == list(range(0, i, 3))
    assert var.version == len(writes)


def test_reads_of_a_var_run_concurrently(threaded):
    var = threaded.new_var()
    both_running = threading.Barrier(2, timeout=TIMEOUT)
    for _ in range(2):
        threaded.push(both_running.wait, reads=[var])
    threaded.wait_all()     # a broken barrier (reads one after the other) would raise here


def test_writes_of_a_var_run_alone(threaded):
    var, active, seen = threaded.new_var(), [0], []
    lock = threading.Lock()

    def write():
        with lock:
            active[0] += 1
            seen.append(active[0])
        time.sleep(0.002)
        with lock:
            active[0] -= 1

    for i in range(6):
        threaded.push(write, writes=[var])
        threaded.push(write, reads=[var])   # a read never overlaps a write either
    threaded.wait_all()
    assert seen == [1] * 12


def test_a_read_waits_for_the_write_pushed_before_it(eng):
    var, value = eng.new_var(), []
    eng.push(lambda: (time.sleep(0.01), value.append(1)), writes=[var])
    eng.push(lambda: value.append(len(value) + 1), reads=[var])
    eng.wait_all()
    assert value == [1, 2]


def test_a_write_waits_for_the_reads_pushed_before_it(eng):
    var, log = eng.new_var(), []
    eng.push(lambda: (time.sleep(0.01), log.append('read')), reads=[var])
    eng.push(lambda: log.append('write'), writes=[var])
    eng.wait_all()
    assert log == ['read', 'write']


def test_a_var_in_reads_and_writes_is_a_write_and_duplicates_count_once(eng):
    var, calls = eng.new_var(), []
    eng.push(lambda: calls.append(1), reads=[var, var], writes=[var, var])
    eng.wait_for_var(var)
    assert calls == [1] and var.version == 1


def test_wait_for_var_waits_for_pending_writes_only(threaded):
    var, release = threaded.new_var(), threading.Event()
    threaded.push(lambda: release.wait(TIMEOUT), reads=[var])
    threaded.wait_for_var(var)          # a running read does not hold up a read wait
    assert not release.is_set()
    done = []
    waiter = threading.Thread(target=lambda: (threaded.wait_for_var(var, write=True),
                                              done.append(release.is_set())))
    waiter.start()
    time.sleep(0.02)
    release.set()
    waiter.join(TIMEOUT)
    assert done == [True]


def test_settled_versions_wait_for_no_write(threaded):
    """None while one of the variables has a write running or queued (behind a read), else
    their versions; a queued read alone does not unsettle them."""
    first, second, release = threaded.new_var(), threaded.new_var(), threading.Event()
    assert threaded.settled_versions([first, second]) == (0, 0)
    threaded.push(lambda: release.wait(TIMEOUT), writes=[first])
    assert threaded.settled_versions([first, second]) is None       # a write running
    threaded.push(lambda: None, reads=[second])
    assert threaded.settled_versions([second]) == (0,)
    blocker = threading.Event()
    threaded.push(lambda: blocker.wait(TIMEOUT), reads=[second])
    threaded.push(lambda: None, writes=[second])                    # queued behind a read
    assert threaded.settled_versions([second]) is None
    release.set()
    blocker.set()
    threaded.wait_for_var(first)
    threaded.wait_for_var(second)
    assert threaded.settled_versions([first, second]) == (1, 1)


def test_finished_operations_release_what_their_functions_captured(eng):
    class Payload:
        pass
    payload = Payload()
    alive = weakref.ref(payload)
    eng.push(lambda captured=payload: None, writes=[eng.new_var()])
    del payload
    eng.wait_all()
    assert alive() is None


def test_push_rejects_values_that_are_not_vars(eng):
    with pytest.raises(TypeError, match='reads holds 3'):
        eng.push(lambda: None, reads=[3])
    with pytest.raises(TypeError, match='writes holds'):
        eng.push(lambda: None, writes=['x', eng.new_var()])


# ---------------------------------------------------------------------------------------------
# Pools

@config.override(MXNET_CPU_PRIORITY_NTHREADS=1)
def test_priority_pool_runs_the_highest_priority_first():
    eng, order = engine.get(), []
    started, release = threading.Event(), threading.Event()
    eng.push(lambda: (started.set(), release.wait(TIMEOUT)), writes=[eng.new_var()],
             priority=1)
    started.wait(TIMEOUT)
    for priority in (1, 5, 3, 2, 5):
        eng.push(lambda p=priority: order.append(p), writes=[eng.new_var()], priority=priority)
    release.set()
    eng.wait_all()
    assert order == [5, 5, 3, 2, 1]


@config.override(MXNET_GPU_WORKER_NTHREADS=1)     # a fresh engine
def test_pools_start_lazily_and_copies_run_on_copy_workers():
    eng = engine.get()
    names = {}

    def thread_name(tag):
        # the pools run concurrently: key by push, not by completion order
        return lambda: names.__setitem__(tag, threading.current_thread().name)

    assert not any(t.name.startswith('ember-gpu7') for t in threading.enumerate())
    eng.push(thread_name('gpu'), writes=[eng.new_var()], device=device.gpu(7))
    eng.push(thread_name('copy'), writes=[eng.new_var()], device=device.gpu(7),
             name='_copyto_gpu')
    eng.push(thread_name('pinned'), writes=[eng.new_var()], device=device.cpu_pinned(0))
    eng.wait_all()
    assert names['gpu'].startswith('ember-gpu7-')
    assert names['copy'].startswith('ember-gpu-copy7-')
    assert names['pinned'].startswith('ember-cpu0-')


@config.override(MXNET_ENGINE_TYPE='ThreadedEngine', MXNET_CPU_WORKER_NTHREADS=3)
def test_threaded_engine_shares_one_pool_across_devices():
    eng, names = engine.get(), set()
    for dev in (None, device.gpu(0), device.cpu(1)):
        eng.push(lambda: names.add(threading.current_thread().name), writes=[eng.new_var()],
                 device=dev)
    eng.wait_all()
    assert all(name.startswith('ember-worker-') for name in names)


# ---------------------------------------------------------------------------------------------
# Errors

def _fail(message='bad draw'):
    raise ValueError(message)


def test_failure_passes_to_dependent_writes_and_is_handled_once(eng):
    a, b, c = eng.new_var(), eng.new_var(), eng.new_var()
    product_ran = []
    eng.push(_fail, writes=[a], name='random_normal')
    eng.push(lambda: product_ran.append(1), reads=[a], writes=[b], name='dot')
    eng.push(lambda: None, reads=[c], writes=[c])
    with pytest.raises(EmberError, match='random_normal failed: ValueError: bad draw') as info:
        eng.wait_for_var(b)
    assert isinstance(info.value.__cause__, ValueError)
    assert product_ran == []                    # skipped, not run on a bad input
    eng.wait_for_var(b)                         # raised once
    # One failure, one record (as in MXNet): handling it through b handled it on a too.
    assert a.exception is None
    eng.wait_for_var(a)
    eng.wait_all()


def test_wait_all_raises_the_first_unhandled_failure_in_push_order_then_clears(eng):
    a, b, c = eng.new_var(), eng.new_var(), eng.new_var()
    eng.push(lambda: time.sleep(0.02) or _fail('first'), writes=[a])
    eng.push(lambda: _fail('second'), writes=[b])
    eng.push(lambda: None, reads=[a], writes=[c])
    with pytest.raises(EmberError, match='first'):
        eng.wait_all()
    assert a.exception is None and b.exception is None and c.exception is None
    eng.wait_all()
    eng.wait_for_var(c)


def test_wait_all_raises_what_a_wait_on_another_var_left_pending(eng):
    a, b, d = eng.new_var(), eng.new_var(), eng.new_var()
    eng.push(_fail, writes=[a])
    eng.push(lambda: None, reads=[a], writes=[b])
    eng.push(lambda: _fail('independent'), writes=[d])
    with pytest.raises(EmberError, match='bad draw'):
        eng.wait_for_var(b)
    eng.wait_for_var(b)
    assert isinstance(d.exception, ValueError)
    with pytest.raises(EmberError, match='independent'):
        eng.wait_all()
    eng.wait_all()


def test_a_write_to_a_failed_var_is_skipped_until_the_failure_is_handled(eng):
    a, calls = eng.new_var(), []
    eng.push(_fail, writes=[a])
    eng.push(lambda: calls.append('overwrite'), writes=[a])
    with pytest.raises(EmberError):
        eng.wait_for_var(a)
    eng.push(lambda: calls.append('after'), writes=[a])
    eng.wait_for_var(a)
    assert calls == ['after']


def test_workers_survive_failures_and_waiters_do_not_hang(threaded):
    vars_ = [threaded.new_var() for _ in range(20)]
    for var in vars_:
        threaded.push(_fail, writes=[var])
    for var in vars_:
        with pytest.raises(EmberError):
            threaded.wait_for_var(var)
    ran = []
    threaded.push(lambda: ran.append(1), writes=[threaded.new_var()])
    threaded.wait_all()
    assert ran == [1]


def test_base_exceptions_are_caught_too(eng):
    var = eng.new_var()

    def leave():
        raise SystemExit(3)

    eng.push(leave, writes=[var])
    with pytest.raises(EmberError, match='SystemExit'):
        eng.wait_for_var(var)


def _push_failing(eng, var):
    eng.push(_fail, writes=[var])           # the push site the error should name


@pytest.mark.parametrize('depth', [0, 5])
def test_stack_trace_depth_shows_where_the_failing_op_was_pushed(eng, depth):
    var = eng.new_var()
    with config.override(DMLC_LOG_STACK_TRACE_DEPTH=depth):
        _push_failing(eng, var)
    with pytest.raises(EmberError) as info:
        eng.wait_for_var(var)
    message = str(info.value)
    push_line = _push_failing.__code__.co_firstlineno + 1
    shown = f'{os.path.basename(__file__)}", line {push_line}, in _push_failing' in message
    assert shown == (depth > 0)
    assert ('eng.push(_fail, writes=[var])' in message) == (depth > 0)
    assert 'core.py' not in message               # engine frames are skipped


def test_wait_inside_an_operation_raises_instead_of_deadlocking(threaded):
    var, other, release = threaded.new_var(), threaded.new_var(), threading.Event()
    threaded.push(lambda: release.wait(TIMEOUT), writes=[other])
    threaded.push(lambda: threaded.wait_for_var(other), writes=[var])
    try:
        with pytest.raises(EmberError, match='inside an engine operation'):
            threaded.wait_for_var(var)
    finally:
        release.set()
    threaded.push(lambda: threaded.wait_all(), writes=[var])
    with pytest.raises(EmberError, match='wait_all was called inside'):
        threaded.wait_for_var(var)


def test_unhandled_failures_survive_a_reset_and_show_in_the_state_token():
    eng = engine.get()
    token = engine.state_token()
    eng.push(_fail, writes=[eng.new_var()])
    assert engine.state_token() != token
    with config.override(MXNET_ENGINE_TYPE='NaiveEngine'):
        with pytest.raises(EmberError, match='bad draw'):
            engine.get().wait_all()
    assert engine.state_token() == token


def test_state_token_is_stable_across_pushes_and_overrides():
    token = engine.state_token()
    eng = engine.get()
    eng.push(lambda: None, writes=[eng.new_var()])
    eng.wait_all()
    assert engine.state_token() == token
    with config.override(MXNET_CPU_WORKER_NTHREADS=3):
        assert engine.state_token() != token
        engine.get()
    assert engine.state_token() == token


# ---------------------------------------------------------------------------------------------
# Bulk

def test_bulk_groups_pushes_and_keeps_their_order(eng):
    var, log = eng.new_var(), []
    before = eng.stats()
    with engine.bulk(4):
        for i in range(10):
            eng.push(lambda i=i: log.append(i), reads=[eng.new_var()], writes=[var])
    eng.wait_all()
    after = eng.stats()
    assert log == list(range(10))
    assert after['pushes'] - before['pushes'] == 3          # 4 + 4 + 2
    assert after['operations'] - before['operations'] == 10
    assert var.version == 3


def test_bulk_flushes_on_wait_and_on_a_change_of_device(eng):
    var, log = eng.new_var(), []
    before = eng.stats()['pushes']
    with engine.bulk(100):
        eng.push(lambda: log.append('a'), writes=[var])
        eng.push(lambda: log.append('b'), writes=[var], device=device.cpu(1))
        eng.wait_for_var(var)
        assert log == ['a', 'b']
        eng.push(lambda: log.append('c'), writes=[var])
    eng.wait_all()
    assert log == ['a', 'b', 'c'] and eng.stats()['pushes'] - before == 3


def test_a_failure_in_a_bulk_segment_names_its_operation(eng):
    a, b, ran = eng.new_var(), eng.new_var(), []
    with engine.bulk(3):
        eng.push(lambda: ran.append(1), writes=[a], name='first')
        eng.push(_fail, writes=[a], name='second')
        eng.push(lambda: ran.append(3), writes=[b], name='third')
    with pytest.raises(EmberError, match='operator second failed'):
        eng.wait_for_var(b)
    assert ran == [1]           # the segment stops at the failure; its writes carry it
    eng.wait_all()


def test_set_bulk_size_returns_the_previous_size():
    assert engine.set_bulk_size(5) == 0
    assert engine.set_bulk_size(0) == 5
    with pytest.raises(ValueError, match='bulk size -1'):
        engine.set_bulk_size(-1)


# ---------------------------------------------------------------------------------------------
# Profiler hook

class _Recorder:
    def __init__(self):
        self.events = []

    def now_us(self):
        return time.perf_counter_ns() / 1000

    def operator_enabled(self, symbolic):
        return not symbolic

    def record_operator(self, name, dev, begin_us, end_us, symbolic):
        self.events.append((name, dev, end_us - begin_us >= 0, symbolic))


def test_operations_are_reported_to_the_profiler(eng, monkeypatch):
    recorder = _Recorder()
    monkeypatch.setattr(core, '_profiler', recorder)
    eng.push(lambda: None, writes=[eng.new_var()], name='relu', device=device.cpu(0))
    eng.push(lambda: None, writes=[eng.new_var()], name='graph_op', symbolic=True)
    with engine.bulk(2):
        eng.push(lambda: None, writes=[eng.new_var()], name='add')
        eng.push(lambda: None, writes=[eng.new_var()], name='mul')
    eng.wait_all()
    assert sorted(recorder.events) == [('bulk[add,mul]', device.cpu(0), True, False),
                                       ('relu', device.cpu(0), True, False)]


def test_operations_appear_in_the_profiler_trace(eng, tmp_path):
    import json
    from ember import profiler
    path = tmp_path / 'profile.json'
    profiler.set_config(profile_imperative=True, filename=str(path))
    try:
        profiler.set_state('run')
        eng.push(lambda: time.sleep(0.001), writes=[eng.new_var()], name='engine_test_op')
        eng.wait_all()
        profiler.set_state('stop')
        profiler.dump()
    finally:
        profiler.set_state('stop')
        profiler.set_config()
    spans = [e for e in json.loads(path.read_text())['traceEvents']
             if e.get('name') == 'engine_test_op']
    assert len(spans) == 1 and spans[0]['ph'] == 'X' and spans[0]['dur'] >= 1000


# ---------------------------------------------------------------------------------------------
# Back-pressure

@config.override(MXNET_ENGINE_MAX_INFLIGHT=3, MXNET_CPU_WORKER_NTHREADS=2)
def test_pushes_wait_while_too_many_operations_are_in_flight():
    eng, peak = engine.get(), 0
    for _ in range(12):
        eng.push(lambda: time.sleep(0.003), writes=[eng.new_var()])
        peak = max(peak, eng.stats()['inflight'])
    eng.wait_all()
    assert peak == 3


@config.override(MXNET_ENGINE_MAX_INFLIGHT=100, MXNET_CPU_WORKER_NTHREADS=2)
def test_pushes_do_not_wait_below_the_bound():
    eng, release = engine.get(), threading.Event()
    for _ in range(12):
        eng.push(lambda: release.wait(TIMEOUT), writes=[eng.new_var()])
    assert eng.stats()['inflight'] == 12
    release.set()
    eng.wait_all()


# ---------------------------------------------------------------------------------------------
# Threads of one operator

def _chunks(n):
    calls, lock = [], threading.Lock()

    def record(start, stop):
        with lock:
            calls.append((start, stop))
    engine.parallel_for(n, record)
    return sorted(calls)


@config.override(MXNET_CPU_PARALLEL_SIZE=1000, OMP_NUM_THREADS=3)
def test_parallel_for_splits_large_ranges_across_kernel_threads():
    assert engine.kernel_threads() == 3
    assert _chunks(999) == [(0, 999)]
    chunks = _chunks(100001)
    assert len(chunks) == 3
    assert chunks[0][0] == 0 and chunks[-1][1] == 100001
    assert all(stop == start for (_, stop), (start, _) in zip(chunks, chunks[1:]))
    x, out = np.arange(100001.0), np.empty(100001)
    engine.parallel_for(x.size, lambda a, b: np.multiply(x[a:b], 2.0, out=out[a:b]))
    np.testing.assert_array_equal(out, 2 * x)


@config.override(MXNET_CPU_PARALLEL_SIZE=10, OMP_NUM_THREADS=2)
def test_parallel_for_reraises_a_chunk_error():
    def fail_late(start, stop):
        if start > 0:
            raise ArithmeticError(f'chunk {start}')
    with pytest.raises(ArithmeticError, match='chunk 50'):
        engine.parallel_for(100, fail_late)


def test_omp_num_threads_limits_blas_while_the_engine_runs():
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [lib['num_threads'] for lib in threadpool_info() if lib['user_api'] == 'blas']
    before = blas_threads()
    with config.override(OMP_NUM_THREADS=1):
        engine.get()
        assert set(blas_threads()) <= {1}
    assert blas_threads() == before


def _worker_affinity():
    eng, seen = engine.get(), []
    eng.push(lambda: seen.append(os.sched_getaffinity(0)), writes=[eng.new_var()])
    eng.wait_all()
    return seen[0]


@pytest.mark.parametrize('offset', [0, 1])
def test_kmp_affinity_pins_each_worker_to_one_core(offset):
    cores = sorted(os.sched_getaffinity(0))
    with config.override(KMP_AFFINITY=f'granularity=fine,compact,1,{offset}'):
        assert _worker_affinity() == {cores[offset % len(cores)]}
    with config.override(KMP_AFFINITY='none'):
        assert _worker_affinity() == set(cores)
    assert os.sched_getaffinity(0) == set(cores)    # the test's own thread stays unpinned


@pytest.mark.skipif(config.cpu_count() < 2, reason='one core: nothing to share')
def test_a_pinned_worker_still_splits_its_kernels_over_the_process_cores():
    """Pinned to one core, an engine worker's own affinity is that core: its kernels must
    still take every core of the process, and the kernel pool it starts pins its helpers to
    the other cores, not to the worker's."""
    from ember.engine import threads
    cores = sorted(os.sched_getaffinity(0))
    threads.stop_kernel_pool()
    try:
        with config.override(KMP_AFFINITY='granularity=fine,compact,1,0', OMP_NUM_THREADS=None,
                             MXNET_CPU_WORKER_NTHREADS=1):
            eng, seen = engine.get(), []

            def probe():
                seen.append(engine.kernel_threads())
                pool = threads.kernel_pool()
                seen.append([os.sched_getaffinity(t.native_id) for t in pool._threads])
                seen.append(threads.team_cores(2))
            eng.push(probe, writes=[eng.new_var()])
            eng.wait_all()
    finally:
        threads.stop_kernel_pool()
    assert seen[0] == len(cores)
    assert seen[1] == [{cores[i]} for i in range(1, len(cores))]
    assert seen[2] == (cores[0], cores[1])


def test_independent_operators_overlap():
    from threadpoolctl import threadpool_limits
    a = np.random.default_rng(0).standard_normal((1500, 1500))
    spans = [None, None]

    def matmul(slot):
        begin = time.perf_counter()
        np.dot(a, a)
        spans[slot] = (begin, time.perf_counter())

    with threadpool_limits(limits=1, user_api='blas'), \
            config.override(MXNET_CPU_WORKER_NTHREADS=2):
        eng = engine.get()
        for slot in (0, 1):
            eng.push(lambda slot=slot: matmul(slot), reads=[eng.new_var()],
                     writes=[eng.new_var()])
        eng.wait_all()
    (begin0, end0), (begin1, end1) = spans
    assert begin0 < end1 and begin1 < end0


def test_an_inline_push_runs_on_the_pushing_thread_only_when_its_vars_are_free(threaded):
    where = []

    def record():
        where.append(threading.current_thread() is threading.main_thread())
    a, b = threaded.new_var(), threaded.new_var()
    threaded.push(record, [a], [b], device.cpu(0), inline=True)
    assert where == [True] and b.version == 1          # done before push returned
    gate = threading.Event()
    threaded.push(lambda: gate.wait(10), [], [a], device.cpu(0))
    threaded.push(record, [a], [b], device.cpu(0), inline=True)   # a is being written
    assert where == [True]
    gate.set()
    threaded.wait_for_var(b)
    assert where == [True, False]

    def fail():
        raise ValueError('inline failure')
    threaded.push(fail, [], [b], device.cpu(0), inline=True)
    with pytest.raises(EmberError, match='inline failure'):
        threaded.wait_for_var(b)                       # it surfaces where the user waits
    # an operation that pushes from a worker never runs there inline
    outer = threaded.new_var()
    threaded.push(lambda: threaded.push(record, [], [a], device.cpu(0), inline=True),
                  [], [outer], device.cpu(0))
    threaded.wait_for_var(outer)
    threaded.wait_for_var(a)
    assert where == [True, False, False]
