"""The operator tuner (MXNET_USE_OPERATOR_TUNING, MXNET_ENABLE_OPERATOR_TUNING,
MXNET_USE_NUM_CORES_OPERATOR_TUNING), thread counts that never oversubscribe the cores, and
the native libraries' spin settings that Ember sets before they load.

Decisions are tested with injected measurements (no test depends on the clock); variables read
at start-up are tested in child processes.
"""
import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ember import config, engine
from ember.engine import threads
from ember.op import elemwise, fused, registry, tuning
from ember.op.registry import KernelContext

ROOT = Path(__file__).resolve().parents[1]


def make_tuner(dtypes=('float32',), cores=2, cost=None, split_ns=None, pool_threads=2):
    """A tuner whose measurements are injected: `cost` ns per element for every kernel, and a
    split of `split_ns` on a pool of `pool_threads`; it counts the kernels it measures."""
    measured = []

    def time_kernel(prepare):
        run = prepare(tuning.SAMPLE_SIZES[0])
        run()                          # the sample really runs the kernel
        measured.append(run)
        return cost

    def time_split():
        return split_ns, pool_threads
    tuner = tuning.Tuner(tuning.Settings(frozenset(dtypes), cores), time_kernel, time_split)
    tuner.measured = measured
    return tuner


# ----------------------------------------------------------------------------------------------
# The decision.

def test_splitting_pays_once_the_saved_work_exceeds_the_overhead():
    assert tuning.split_threshold(1.0, 20000.0, 2) == 40000.0
    assert not tuning.worth_splitting(40000, 1.0, 20000.0, 2)
    assert tuning.worth_splitting(40001, 1.0, 20000.0, 2)
    # a costlier kernel splits sooner; one core never splits
    assert tuning.split_threshold(10.0, 20000.0, 2) == 4000.0
    assert tuning.split_threshold(10.0, 20000.0, 1) == float('inf')
    assert not tuning.worth_splitting(10 ** 9, 10.0, 20000.0, 1)


def test_each_operator_and_dtype_is_measured_once():
    tuner = make_tuner(dtypes=('float32', 'float64'), cost=1.0, split_ns=20000.0)
    x = np.ones(100000, np.float32)

    def prepare(size):
        sample, out = x[:size].copy(), np.empty(size, np.float32)
        return lambda: np.exp(sample, out=out)
    assert tuner.should_split('exp', np.float32, 50000, prepare)
    assert not tuner.should_split('exp', np.float32, 30000, prepare)
    assert len(tuner.measured) == 1
    assert tuner.cost_ns('exp', np.float32) == 1.0
    tuner.should_split('exp', np.dtype('float64'), 50000, prepare)
    tuner.should_split('add', np.float32, 50000, prepare)
    assert len(tuner.measured) == 3


def test_dtypes_not_tuned_keep_the_size_threshold():
    tuner = make_tuner(dtypes=('float64',), cost=1000.0, split_ns=1.0)
    with config.override(MXNET_CPU_PARALLEL_SIZE=5000):
        assert not tuner.should_split('exp', np.float32, 4999, lambda size: None)
        assert tuner.should_split('exp', np.float32, 5000, lambda size: None)
    assert tuner.measured == []


def test_small_calls_and_nested_calls_never_split_nor_measure():
    tuner = make_tuner(cost=1e6, split_ns=1.0)
    assert not tuner.should_split('exp', np.float32, tuning.MIN_SIZE - 1, lambda size: None)
    with threads.serial_region():
        assert not tuner.should_split('exp', np.float32, 10 ** 7, lambda size: None)
    assert tuner.measured == []


def test_without_a_sample_an_unmeasured_operator_uses_the_size_threshold():
    tuner = make_tuner(cost=1e6, split_ns=1.0)
    with config.override(MXNET_CPU_PARALLEL_SIZE=10 ** 6):
        assert not tuner.should_split('exp', np.float32, 10 ** 5)
    assert tuner.measured == []


def test_the_overhead_scales_with_the_helpers_to_wake():
    tuner = make_tuner(cores=4, cost=1.0, split_ns=10000.0, pool_threads=2)
    assert tuner.overhead_ns() == 30000.0
    # 4 cores save 3/4 of the work: 30000 / 0.75 elements
    assert not tuner.should_split('exp', np.float32, 40000, lambda size: lambda: None)
    assert tuner.should_split('exp', np.float32, 40001, lambda size: lambda: None)


def test_a_pool_without_helpers_never_splits():
    tuner = make_tuner(cost=1e6, split_ns=0.0, pool_threads=1)
    assert not tuner.should_split('exp', np.float32, 10 ** 7, lambda size: lambda: None)


def test_recorded_measurements_replace_earlier_decisions():
    tuner = make_tuner(cost=1.0, split_ns=20000.0)
    assert not tuner.should_split('exp', np.float32, 30000, lambda size: lambda: None)
    tuner.record('exp', np.float32, 10.0)
    assert tuner.should_split('exp', np.float32, 30000)
    tuner.record_overhead(10 ** 9)
    assert not tuner.should_split('exp', np.float32, 30000)


def test_the_cost_is_the_slope_of_time_against_elements(monkeypatch):
    # a fake clock: a run of k elements takes 3000 ns of call overhead plus 2 ns per element
    clock = [0]
    monkeypatch.setattr(tuning.time, 'perf_counter_ns', lambda: clock[0])

    def prepare(size):
        def run():
            clock[0] += 3000 + 2 * size
        return run
    assert tuning.time_kernel_ns(prepare) == 2.0


def test_samples_are_fresh_copies_of_the_first_elements():
    x = np.arange(6.0).reshape(2, 3)
    sample = tuning.prefix_sample(x, (2, 3), 4)
    assert sample.tolist() == [0.0, 1.0, 2.0, 3.0] and not np.shares_memory(sample, x)
    assert tuning.prefix_sample(np.arange(3.0), (2, 3), 8).tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    assert tuning.prefix_sample(2.5, (2, 3), 4) == 2.5


# ----------------------------------------------------------------------------------------------
# Where kernels split.

def spy_on_splits(monkeypatch):
    """Chunks of each parallel_for call that split (one list per call)."""
    calls, real = [], engine.parallel_for

    def spy(n, fn, split=None):
        pieces, lock = [], threading.Lock()

        def record(start, stop):
            with lock:
                pieces.append((start, stop))
            fn(start, stop)
        real(n, record, split)
        calls.append(sorted(pieces))
    monkeypatch.setattr(engine, 'parallel_for', spy)
    return calls


@config.override(OMP_NUM_THREADS=2, MXNET_CPU_PARALLEL_SIZE=10 ** 9)
def test_elementwise_kernels_split_where_the_tuner_says(monkeypatch):
    monkeypatch.setattr(tuning, '_tuner', make_tuner(cost=10.0, split_ns=20000.0))
    calls = spy_on_splits(monkeypatch)
    x = np.linspace(-1, 1, 5000, dtype=np.float32)
    out = np.empty_like(x)
    elemwise.apply_ufunc(np.exp, (x,), out)           # threshold 4000 elements: splits
    assert calls == [[(0, 2500), (2500, 5000)]]
    np.testing.assert_allclose(out, np.exp(x))
    small = np.empty(3000, np.float32)
    elemwise.apply_ufunc(np.exp, (x[:3000],), small)  # below it: one call
    rows = np.empty((50, 100), np.float32)
    elemwise.apply_ufunc(np.add, (x.reshape(50, 100), x[:100]), rows)   # broadcasting
    assert len(calls) == 2 and len(calls[1]) == 2
    np.testing.assert_allclose(rows, x.reshape(50, 100) + x[:100])
    assert tuning.tuner().cost_ns('exp/1', np.float32) == 10.0
    assert tuning.tuner().cost_ns('add/2', np.float32) == 10.0


@config.override(OMP_NUM_THREADS=2)
def test_a_fused_chain_is_timed_on_samples_and_split_as_one(monkeypatch):
    tuner = make_tuner(cost=10.0, split_ns=20000.0)
    monkeypatch.setattr(tuning, '_tuner', tuner)
    calls = spy_on_splits(monkeypatch)
    chain = fused.chain_text(1, [('_mul_scalar', {'scalar': '2'}, ['i0']), ('relu', {}, ['s0'])],
                             [1])
    x = np.linspace(-1, 1, fused.BLOCK + 1000, dtype=np.float32)
    out = np.empty_like(x)
    registry.get('_FusedElemwise').kernel({'chain': chain}, [x], [out], KernelContext(None))
    np.testing.assert_allclose(out, np.maximum(2 * x, 0))
    assert len(tuner.measured) == 1
    assert tuner.cost_ns('_FusedElemwise[_mul_scalar,relu]', np.float32) == 10.0
    # one split for the chain; the steps inside its chunks run serially
    assert len(calls) == 1 and len(calls[0]) == 2


@config.override(OMP_NUM_THREADS=2, MXNET_CPU_PARALLEL_SIZE=10)
def test_work_nested_in_a_chunk_runs_serially():
    seen = []

    def chunk(start, stop):
        seen.append(threads.in_parallel_region())
        inner = []
        engine.parallel_for(100, lambda a, b: inner.append((a, b)))
        assert inner == [(0, 100)]
    engine.parallel_for(100, chunk)
    assert seen == [True, True] and not threads.in_parallel_region()


# ----------------------------------------------------------------------------------------------
# Threads per operator: never more than the cores, unless the user asks.

@pytest.mark.parametrize('settings, expected', [
    ({}, 8),
    ({'MXNET_CPU_WORKER_NTHREADS': 3}, 2),
    ({'MXNET_CPU_WORKER_NTHREADS': 16}, 1),
    ({'MXNET_CPU_WORKER_NTHREADS': 4, 'MXNET_ENGINE_TYPE': 'NaiveEngine'}, 8),
    ({'MXNET_CPU_WORKER_NTHREADS': 4, 'OMP_NUM_THREADS': 5}, 5),     # asked for: honoured
])
def test_kernel_threads_share_the_cores_among_the_workers(monkeypatch, settings, expected):
    monkeypatch.setattr(config, 'cpu_count', lambda: 8)
    defaults = {'OMP_NUM_THREADS': None, 'MXNET_CPU_WORKER_NTHREADS': None,
                'MXNET_ENGINE_TYPE': None}
    with config.override(**dict(defaults, **settings)):
        assert engine.kernel_threads() == expected


POOLS = [{'prefix': 'libopenblas', 'num_threads': 8}, {'prefix': 'libgomp', 'num_threads': 1}]
PTHREADS_OPENBLAS = [{'prefix': 'libscipy_openblas', 'num_threads': 8,
                      'internal_api': 'openblas', 'threading_layer': 'pthreads'}]


@pytest.mark.parametrize('timeout, omp, pools, expected', [
    (None, None, PTHREADS_OPENBLAS, {'libscipy_openblas': 1}),
    ('4', None, PTHREADS_OPENBLAS, None),
    # OpenBLAS reads OMP_NUM_THREADS too: at 2 on 2 cores its spinning threads took a
    # resnet50 training step from 1.0 to 1.6 s
    (None, 2, PTHREADS_OPENBLAS, {'libscipy_openblas': 1}),
    (None, 6, POOLS + PTHREADS_OPENBLAS,
     {'libopenblas': 6, 'libgomp': 6, 'libscipy_openblas': 1}),
    ('4', 2, PTHREADS_OPENBLAS, 2),
    (None, 1, PTHREADS_OPENBLAS, 1),
])
def test_an_openblas_that_spins_gets_one_thread(monkeypatch, timeout, omp, pools, expected):
    monkeypatch.setattr(config, 'cpu_count', lambda: 8)
    if timeout is None:
        monkeypatch.delenv('OPENBLAS_THREAD_TIMEOUT', raising=False)
    else:
        monkeypatch.setenv('OPENBLAS_THREAD_TIMEOUT', timeout)
    with config.override(OMP_NUM_THREADS=omp, MXNET_CPU_WORKER_NTHREADS=None,
                         MXNET_ENGINE_TYPE=None, MXNET_ENFORCE_DETERMINISM=None):
        assert threads.blas_limits(pools) == expected


@pytest.mark.parametrize('settings, expected', [
    ({}, None),                                              # one worker: all 8 cores
    ({'MXNET_CPU_WORKER_NTHREADS': 2}, {'libopenblas': 4}),  # lowered; smaller pools stay
    ({'MXNET_CPU_WORKER_NTHREADS': 2, 'OMP_NUM_THREADS': 6}, 6),
    ({'MXNET_ENFORCE_DETERMINISM': True}, 1),
])
def test_blas_pools_are_lowered_to_the_threads_of_one_operator(monkeypatch, settings,
                                                               expected):
    monkeypatch.setattr(config, 'cpu_count', lambda: 8)
    defaults = {'OMP_NUM_THREADS': None, 'MXNET_CPU_WORKER_NTHREADS': None,
                'MXNET_ENGINE_TYPE': None, 'MXNET_ENFORCE_DETERMINISM': None}
    with config.override(**dict(defaults, **settings)):
        assert threads.blas_limits(POOLS) == expected


# ----------------------------------------------------------------------------------------------
# Child processes: variables read at start-up, and native libraries' variables.

CHILD = r'''
import ctypes, json, logging, sys
mode = sys.argv[1]
if mode.startswith('numpy-first'):
    import numpy
if mode == 'gomp-first':
    ctypes.CDLL('libgomp.so.1', mode=ctypes.RTLD_GLOBAL)
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
import ember as mx
import numpy as np
from ember import engine
from ember.backend import native
from ember.op import tuning

libc = ctypes.CDLL(None)
libc.getenv.restype, libc.getenv.argtypes = ctypes.c_char_p, [ctypes.c_char_p]


def environment(name):
    value = libc.getenv(name.encode())
    return value.decode() if value is not None else None


facts = {'openblas_timeout': environment('OPENBLAS_THREAD_TIMEOUT')}
if mode == 'tuning':
    tuner = tuning.tuner()
    tuner.record_overhead(20000.0, pool_threads=2)
    for dtype in (np.float32, np.float64):
        tuner.record('kernel', dtype, 1.0)
    x = mx.nd.ones(70000, dtype='float32')
    (x * 2).wait_to_read()
    facts.update(
        dtypes=sorted(tuner.settings.dtypes), cores=tuner.settings.cores,
        measured=sorted(f'{name}:{dtype}' for name, dtype in tuner._costs if name != 'kernel'),
        split={str(size): [tuner.should_split('kernel', dtype, size)
                           for dtype in (np.float32, np.float64)]
               for size in (50000, 70000, 90000)})
elif mode.endswith('threads'):
    from threadpoolctl import threadpool_info
    engine.get()
    facts.update(kernel_threads=engine.kernel_threads(),
                 blas=[p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas'])
elif mode == 'winograd':
    from ember.op.nn.conv import compiled
    facts.update(gomp_spincount=environment('GOMP_SPINCOUNT'),
                 openmp=bool(compiled.MODULE and compiled.MODULE.openmp),
                 gomp_loaded=native._is_loaded('libgomp.so.1'))
else:
    native.onednn()
    facts['gomp_spincount'] = environment('GOMP_SPINCOUNT')
print(json.dumps(facts))
'''


def run_child(mode, **environ):
    env = config.child_environ(PYTHONPATH=str(ROOT), **environ)
    done = subprocess.run([sys.executable, '-c', CHILD, mode], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    facts['stderr'] = done.stderr
    return facts


TUNING_UNSET = {'MXNET_USE_OPERATOR_TUNING': None, 'MXNET_ENABLE_OPERATOR_TUNING': None,
                'MXNET_USE_NUM_CORES_OPERATOR_TUNING': None, 'OMP_NUM_THREADS': 2,
                'MXNET_CPU_PARALLEL_SIZE': 60000}


def test_tuning_zero_falls_back_to_the_size_threshold():
    facts = run_child('tuning', **dict(TUNING_UNSET, MXNET_USE_OPERATOR_TUNING='0'))
    assert facts['dtypes'] == [] and facts['measured'] == []
    assert facts['split'] == {'50000': [False, False], '70000': [True, True],
                              '90000': [True, True]}


def test_use_defaults_to_enable():
    facts = run_child('tuning', **dict(TUNING_UNSET, MXNET_ENABLE_OPERATOR_TUNING='0'))
    assert facts['dtypes'] == []


def test_a_dtype_list_tunes_only_those_dtypes():
    facts = run_child('tuning', **dict(TUNING_UNSET, MXNET_USE_OPERATOR_TUNING='float64'))
    assert facts['dtypes'] == ['float64']
    # float32 kept the threshold (60000) and measured nothing; float64 follows its cost:
    # 20000 ns over 1 ns per element saving half the work splits above 40000 elements
    assert facts['measured'] == []
    assert facts['split'] == {'50000': [False, True], '70000': [True, True],
                              '90000': [True, True]}


def test_all_dtypes_are_tuned_by_default_and_measured_on_first_use():
    facts = run_child('tuning', **TUNING_UNSET)
    assert set(facts['dtypes']) == set(config.TUNING_DTYPES) and facts['cores'] == 2
    assert facts['measured'] == ['multiply/1:float32']     # x * 2 on 70000 elements


@pytest.mark.parametrize('cores, split', [
    ('1', [False, False, False]),     # one core: never
    ('2', [True, True, True]),        # 20000 ns over 0.5 ns saved per element: above 40000
    ('4', [False, False, True]),      # 60000 ns over 0.75 ns: above 80000
])
def test_num_cores_changes_the_decision(cores, split):
    facts = run_child('tuning', **dict(TUNING_UNSET, MXNET_USE_NUM_CORES_OPERATOR_TUNING=cores))
    assert facts['cores'] == int(cores)
    assert [facts['split'][size][0] for size in ('50000', '70000', '90000')] == split


def test_engine_workers_share_the_cores_for_blas():
    cores = config.cpu_count()
    shared = run_child('threads', MXNET_CPU_WORKER_NTHREADS=2, OMP_NUM_THREADS=None)
    assert shared['kernel_threads'] == max(1, cores // 2)
    assert all(count <= max(1, cores // 2) for count in shared['blas'])
    alone = run_child('threads', MXNET_CPU_WORKER_NTHREADS=None, OMP_NUM_THREADS=None)
    assert alone['kernel_threads'] == cores       # every core, not MXNet's half


def _onednn_loads():
    from ember.backend import native
    return native.onednn() is not None


needs_onednn = pytest.mark.skipif(not _onednn_loads(), reason='oneDNN is not installed')
needs_native_defaults = pytest.mark.skipif(
    not hasattr(config, 'set_native_default'),
    reason='native variables are set through config.set_native_default, not there yet')
SPIN_UNSET = {'GOMP_SPINCOUNT': None, 'OMP_WAIT_POLICY': None, 'MXNET_LIBRARY_PATH': None}


@needs_onednn
@needs_native_defaults
def test_openmp_spinning_is_shortened_before_onednn_loads():
    facts = run_child('onednn', OMP_DISPLAY_ENV='verbose', **SPIN_UNSET)
    assert facts['gomp_spincount'] == '10000'
    # libgomp prints the settings it started with
    assert "GOMP_SPINCOUNT = '10000'" in facts['stderr']


@needs_onednn
@needs_native_defaults
@pytest.mark.parametrize('user, expected', [
    ({'GOMP_SPINCOUNT': '777'}, '777'),
    ({'OMP_WAIT_POLICY': 'passive'}, None),
])
def test_the_users_openmp_settings_are_kept(user, expected):
    facts = run_child('onednn', **dict(SPIN_UNSET, **user))
    assert facts['gomp_spincount'] == expected


@needs_onednn
@needs_native_defaults
def test_a_libgomp_loaded_earlier_is_left_alone():
    facts = run_child('gomp-first', **SPIN_UNSET)
    assert facts['gomp_spincount'] is None
    assert 'was loaded already' in facts['stderr']


@needs_native_defaults
def test_the_compiled_winograd_module_loads_libgomp_with_the_short_spin():
    """The Winograd module runs on libgomp too, and loads with Ember, before oneDNN."""
    facts = run_child('winograd', OMP_DISPLAY_ENV='verbose', **SPIN_UNSET)
    if not facts['openmp']:
        pytest.skip('ember._winograd is built without OpenMP')
    assert facts['gomp_loaded'] and facts['gomp_spincount'] == '10000'
    assert "GOMP_SPINCOUNT = '10000'" in facts['stderr']


@needs_native_defaults
def test_openblas_stops_spinning_when_ember_loads_numpy():
    assert run_child('onednn', OPENBLAS_THREAD_TIMEOUT=None)['openblas_timeout'] == '4'
    assert run_child('onednn', OPENBLAS_THREAD_TIMEOUT='9')['openblas_timeout'] == '9'


@needs_native_defaults
def test_numpy_imported_first_keeps_its_timeout_and_says_so():
    facts = run_child('numpy-first', OPENBLAS_THREAD_TIMEOUT=None)
    assert facts['openblas_timeout'] is None
    assert 'NumPy was imported before Ember' in facts['stderr']


@needs_native_defaults
@pytest.mark.skipif(config.cpu_count() < 2, reason='BLAS runs one thread on one core')
def test_a_spinning_openblas_runs_on_one_thread_while_the_engine_runs():
    spinning = run_child('numpy-first-threads', OPENBLAS_THREAD_TIMEOUT=None,
                         MXNET_CPU_WORKER_NTHREADS=None, OMP_NUM_THREADS=None)
    assert spinning['openblas_timeout'] is None and spinning['blas'] == [1]
    quiet = run_child('numpy-first-threads', OPENBLAS_THREAD_TIMEOUT='4',
                      MXNET_CPU_WORKER_NTHREADS=None, OMP_NUM_THREADS=None)
    assert quiet['blas'] == [config.cpu_count()]
    # OMP_NUM_THREADS, which OpenBLAS reads too, does not bring the spinning threads back
    asked = run_child('numpy-first-threads', OPENBLAS_THREAD_TIMEOUT=None,
                      MXNET_CPU_WORKER_NTHREADS=None, OMP_NUM_THREADS='2')
    assert asked['blas'] == [1] and asked['kernel_threads'] == 2
    asked_quiet = run_child('numpy-first-threads', OPENBLAS_THREAD_TIMEOUT='4',
                            MXNET_CPU_WORKER_NTHREADS=None, OMP_NUM_THREADS='2')
    assert asked_quiet['blas'] == [2]
