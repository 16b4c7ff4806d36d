"""The GPU backend's logic on a simulated device (tests/fake_cuda.py), run everywhere: the
device pool's fences, worker and copy threads with their streams, ordering between streams by
events instead of host waits, the auxiliary stream, waits that surface device errors, the
per-device resources, the library checks and the math modes."""
import threading
import warnings

import numpy as np
import pytest

import ember as mx
from ember import config, device, engine, resource, storage
from ember.backend import cudnn, gpu as gpu_backend
from ember.engine import gpu as engine_gpu
from ember.engine.var import OperatorError
from ember.storage import DevicePool, Naive

from fake_cuda import FakeGpu, active_stream, installed

GPU0, GPU1 = device.gpu(0), device.gpu(1)


# ----------------------------------------------------------------------------------------------
# The device pool: a released buffer carries a fence; its next user's streams wait for it

def _pool(fake, reserve=0):
    return DevicePool(GPU0, fake, Naive(2 << 20), reserve)


def test_released_buffer_is_fenced_and_its_reuse_waits_on_other_streams():
    fake = FakeGpu()
    with installed():
        fake.fence = lambda: gpu_backend.fence(streams)
        fake.await_fence = lambda events: gpu_backend.await_fence(events, streams)
        streams = [fake.new_stream(), fake.new_stream()]
        pool = _pool(fake)
        pool.alloc(256).release()
        fence = [s.recorded[-1] for s in streams]       # one event on each stream
        assert all(len(s.recorded) == 1 for s in streams)
        pool.alloc(256)                                 # from the cache: the streams wait
        assert streams[0].waited == [fence[1]] and streams[1].waited == [fence[0]]
        assert pool.stats()['cache_hits'] == 1


def test_reuse_after_the_fence_passed_queues_no_wait():
    fake = FakeGpu()
    with installed():
        streams = [fake.new_stream(), fake.new_stream()]
        fake.fence = lambda: gpu_backend.fence(streams)
        fake.await_fence = lambda events: gpu_backend.await_fence(events, streams)
        pool = _pool(fake)
        pool.alloc(256).release()
        for stream in streams:
            stream.synchronize()                        # the kernels finished meanwhile
        pool.alloc(256)
        assert not any(s.waited for s in streams)


def test_dropped_device_handle_is_fenced_too():
    fake = FakeGpu()
    with installed():
        streams = [fake.new_stream()]
        fake.fence = lambda: gpu_backend.fence(streams)
        pool = _pool(fake)
        handle = pool.alloc(64)
        del handle                                      # garbage, not release()
        assert len(streams[0].recorded) == 1


def test_empty_cache_releases_the_library_cache():
    fake = FakeGpu()
    pool = _pool(fake)
    pool.empty_cache()
    assert fake.library_cache_releases == 1


def test_gpu_pool_follows_the_gpu_variables():
    with installed(MXNET_GPU_MEM_POOL_TYPE='Round', MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF=10,
                   MXNET_GPU_MEM_POOL_RESERVE=20):
        pool = storage.manager(GPU0)
        assert isinstance(pool, DevicePool) and pool.reserve == 20
        assert pool.alloc(1500).size == 2048            # a multiple of 2**10 past the cutoff
    with installed(MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE=1000):
        assert storage.manager(GPU0).alloc(1500).size == 2000


@pytest.mark.parametrize('reserve, cached', [(50, 0), (10, 256)])
def test_gpu_pool_keeps_the_reserve_free_by_releasing_its_cache(reserve, cached):
    with installed(MXNET_GPU_MEM_POOL_RESERVE=reserve) as (fake,):
        fake.capacity = 1000
        pool = storage.manager(GPU0)
        pool.alloc(256).release()
        kept = pool.alloc(400)      # 1000 - 256 - 400 bytes would stay free
        assert pool.stats()['cached'] == cached and kept.size == 400


def test_gpu_out_of_memory_names_asked_held_cached_and_free():
    fake = FakeGpu(capacity=1000)
    with installed():
        fake.new_stream()
        pool = _pool(fake)
        held = pool.alloc(600)
        pool.alloc(100).release()
        with pytest.raises(storage.OutOfMemoryError, match=(
                r'gpu\(0\): out of memory: asked for 700 bytes .* 600 bytes are held .* 100 '
                r'were cached .* 300 bytes are free')):
            pool.alloc(700)
        assert held.size == 600


# ----------------------------------------------------------------------------------------------
# Worker threads, copy threads and their streams

def _where(log, tag):
    """An engine function logging (thread name, active fake stream) under `tag`."""
    def fn():
        log[tag] = (threading.current_thread().name, active_stream())
    return fn


@pytest.mark.parametrize('workers, streams_each', [(1, 1), (3, 1), (2, 2)])
def test_each_gpu_worker_has_its_own_streams(workers, streams_each):
    with installed(MXNET_GPU_WORKER_NTHREADS=workers,
                   MXNET_GPU_WORKER_NSTREAMS=streams_each) as (fake,):
        eng, log, gate = engine.get(), {}, threading.Event()
        # independent ops that hold their worker until all have started: every thread runs one
        started = threading.Semaphore(0)

        def op(tag):
            def fn():
                _where(log, tag)()
                started.release()
                gate.wait(10)
            return fn
        for index in range(workers):
            eng.push(op(index), writes=[eng.new_var()], device=GPU0)
        for _ in range(workers):
            assert started.acquire(timeout=10)
        gate.set()
        eng.wait_all()
        threads = {name for name, _ in log.values()}
        assert len(threads) == workers and all(n.startswith('ember-gpu0-') for n in threads)
        assert len({stream for _, stream in log.values()}) == workers
        assert len(fake.streams) == workers * streams_each


def test_copies_run_on_copy_threads_with_their_own_streams():
    with installed(MXNET_GPU_COPY_NTHREADS=2) as (fake,):
        eng, log = engine.get(), {}
        eng.push(_where(log, 'compute'), writes=[eng.new_var()], device=GPU0)
        eng.push(_where(log, 'copy'), writes=[eng.new_var()], device=GPU0, copy=True)
        eng.wait_all()
        assert log['copy'][0].startswith('ember-gpu-copy0-')
        assert log['compute'][0].startswith('ember-gpu0-')
        assert log['copy'][1] is not log['compute'][1]


# ----------------------------------------------------------------------------------------------
# Ordering between streams by events

def test_a_read_on_another_stream_waits_for_the_writes_event_without_a_host_wait():
    with installed(2) as (gpu0, gpu1):
        eng, var = engine.get(), engine.get().new_var()
        eng.push(lambda: None, writes=[var], device=GPU0, name='producer')
        eng.push(lambda: None, reads=[var], writes=[eng.new_var()], device=GPU1)
        eng.wait_all()
        (written,) = gpu0.streams[0].recorded
        assert gpu1.streams[0].waited == [written]
        assert written.synchronized == 0                # no host synchronisation in between


def test_operations_on_one_stream_need_no_events_between_them():
    with installed(MXNET_GPU_WORKER_NTHREADS=1) as (fake,):
        eng, var = engine.get(), engine.get().new_var()
        for _ in range(3):
            eng.push(lambda: None, writes=[var], device=GPU0)
        eng.wait_all()
        assert fake.streams[0].waited == []


def test_a_write_waits_for_the_reads_queued_on_other_streams():
    with installed(2, MXNET_GPU_WORKER_NTHREADS=1) as (gpu0, gpu1):
        eng, var = engine.get(), engine.get().new_var()
        eng.push(lambda: None, writes=[var], device=GPU0)
        eng.push(lambda: None, reads=[var], writes=[eng.new_var()], device=GPU1)
        eng.push(lambda: None, writes=[var], device=GPU0)
        eng.wait_all()
        read_event = gpu1.streams[0].recorded[0]
        assert read_event in gpu0.streams[0].waited


def test_event_already_done_is_not_waited_for():
    with installed(2) as (gpu0, gpu1):
        eng, var = engine.get(), engine.get().new_var()
        eng.push(lambda: None, writes=[var], device=GPU0)
        eng.wait_for_var(var)                           # synchronises: the event is done
        eng.push(lambda: None, reads=[var], writes=[eng.new_var()], device=GPU1)
        eng.wait_all()
        assert gpu1.streams[0].waited == []


def test_waiting_on_a_var_synchronises_its_event_and_surfaces_a_device_error():
    with installed() as (fake,):
        eng, var = engine.get(), engine.get().new_var()
        eng.push(lambda: None, writes=[var], device=GPU0, name='good')
        eng.wait_for_var(var)
        assert fake.streams[0].recorded[-1].synchronized == 1

        def launch_bad_kernel():
            active_stream().fail_next_event = RuntimeError('an illegal memory access')
        eng.push(launch_bad_kernel, writes=[var], device=GPU0, name='bad_kernel')
        with pytest.raises(OperatorError, match='operator bad_kernel failed on the device: '
                                                'RuntimeError: an illegal memory access'):
            eng.wait_for_var(var)


def test_wait_all_synchronises_every_stream():
    with installed(MXNET_GPU_COPY_NTHREADS=1) as (fake,):
        eng = engine.get()
        eng.push(lambda: None, writes=[eng.new_var()], device=GPU0)
        eng.push(lambda: None, writes=[eng.new_var()], device=GPU0, copy=True)
        eng.wait_all()
        assert [s.synchronized for s in fake.streams] == [1, 1]


def test_naive_engine_runs_gpu_ops_on_the_callers_streams():
    with installed(MXNET_ENGINE_TYPE='NaiveEngine') as (fake,):
        eng, log = engine.get(), {}
        eng.push(_where(log, 'op'), writes=[eng.new_var()], device=GPU0)
        assert log['op'] == (threading.current_thread().name, fake.streams[0])


# ----------------------------------------------------------------------------------------------
# The auxiliary stream (MXNET_GPU_WORKER_NSTREAMS=2)

@pytest.mark.parametrize('count', [1, 2])
def test_aux_stream_is_joined_to_the_primary_by_events(count):
    with installed(MXNET_GPU_WORKER_NTHREADS=1, MXNET_GPU_WORKER_NSTREAMS=count) as (fake,):
        eng, seen = engine.get(), []

        def op():
            with engine_gpu.aux_stream():
                seen.append(active_stream())
            seen.append(active_stream())
        eng.push(op, writes=[eng.new_var()], device=GPU0)
        eng.wait_all()
        primary = fake.streams[0]
        if count == 1:
            assert seen == [primary, primary] and primary.waited == []
            return
        aux = fake.streams[1]
        assert seen == [aux, primary]
        assert aux.waited == [primary.recorded[0]]      # aux starts after the primary's work
        assert primary.waited == [aux.recorded[0]]      # and the primary goes on after aux's


# ----------------------------------------------------------------------------------------------
# Arrays on the simulated device end to end

def test_arrays_on_a_gpu_run_on_its_workers_and_copy_between_devices():
    with installed(2) as (gpu0, gpu1):
        a = mx.nd.array(np.arange(6, dtype=np.float32).reshape(2, 3), ctx=GPU0)
        b = (a * 2 + 1).copyto(GPU1)
        c = b.copyto(mx.cpu())
        np.testing.assert_array_equal(c.asnumpy(), np.arange(6).reshape(2, 3) * 2 + 1)
        assert isinstance(storage.manager(GPU0), DevicePool)
        assert gpu0.streams and gpu1.streams
        assert any(s.waited for s in gpu1.streams)      # the copy waited on gpu0's event


def test_device_kvstore_sums_and_broadcasts_across_two_gpus():
    with installed(2) as (gpu0, gpu1):
        kv = mx.kv.create('device')
        kv.init('w', mx.nd.zeros((2,), ctx=GPU0))
        outs = [mx.nd.zeros((2,), ctx=d) for d in (GPU0, GPU1)]
        kv.pushpull('w', [mx.nd.ones((2,), ctx=d) * (i + 1)
                          for i, d in enumerate((GPU0, GPU1))], out=outs)
        assert [o.asnumpy().tolist() for o in outs] == [[3.0, 3.0]] * 2
        assert [o.context for o in outs] == [GPU0, GPU1]
        kv.broadcast('b', mx.nd.ones((2,)) * 7, out=outs)
        assert [o.asnumpy().tolist() for o in outs] == [[7.0, 7.0]] * 2
        assert any(s.waited for s in gpu0.streams + gpu1.streams)   # events, not host waits


# ----------------------------------------------------------------------------------------------
# Resources per GPU

def test_gpu_resource_copies_follow_their_variables():
    with installed(MXNET_GPU_TEMP_COPY=3, MXNET_GPU_PARALLEL_RAND_COPY=2,
                   MXNET_GPU_CUDNN_DROPOUT_STATE_COPY=5):
        temps, streams = resource.copies(GPU0)
        assert (len(temps), len(streams)) == (3, 2)
        states = {id(resource.dropout_state(GPU0)) for _ in range(10)}
        assert len(states) == 5
        assert not states & {id(s) for s in streams}    # dropout draws from its own states
    # the CPU has no dropout states: dropout draws from the random streams
    assert resource.dropout_state(mx.cpu()) in resource.copies(mx.cpu())[1]


def _cycle_positions(dev):
    """Each random cycle of `dev`: its streams' states, the place in the cycle of the stream it
    hands out next and how many it has (taking that one)."""
    found = []
    for _, streams, take in resource.drawing_cycles(dev):
        states = [repr(s.state()) for s in streams]
        found.append((states, streams.index(take(dev)), len(streams)))
    return found


@pytest.mark.parametrize('on_gpu', [True, False])
def test_a_trial_run_leaves_random_and_dropout_streams_as_they_were(on_gpu):
    from ember import symbol as sym
    from ember.executor import pipeline, trial
    from ember.passes.options import Options
    graph = sym.Dropout(sym.var('x'), p=0.5).to_graph()
    with installed(MXNET_GPU_PARALLEL_RAND_COPY=2, MXNET_GPU_CUDNN_DROPOUT_STATE_COPY=3,
                   MXNET_CPU_PARALLEL_RAND_COPY=2):
        resource.reset()                                # the CPU's copies under the override
        dev = GPU0 if on_gpu else mx.cpu()
        options = Options({'x': (64, 64)}, {'x': np.dtype('float32')}, is_train=True,
                          device=dev)
        compiled = pipeline.compile_graph(graph, options.shapes, options.dtypes,
                                          is_train=True, device=dev)
        assert len(resource.drawing_cycles(dev)) == (2 if on_gpu else 1)
        before = _cycle_positions(dev)
        trial.run_on_zeros(compiled, options)
        after = _cycle_positions(dev)
        # the same states, and each cycle one on from the stream `before` took
        assert after == [(states, (index + 1) % count, count)
                         for states, index, count in before]


# ----------------------------------------------------------------------------------------------
# Library checks and math modes

@pytest.mark.parametrize('versions, overrides, expected', [
    ((12090, 13000, 92800, 12090), {}, []),
    ((12090, 12040, None, None), {}, ['CUDA driver supports CUDA 12.4, older than the runtime '
                                      'CuPy uses (12.9)']),
    ((12090, 12040, None, None), {'MXNET_CUDA_LIB_CHECKING': False}, []),
    ((11080, 12000, None, None), {}, ['CUDA runtime 11.8 is older than 12.0']),
    ((12090, 13000, 80902, 12090), {}, ['cuDNN 8.9.2 is older than 9.0.0']),
    ((12090, 13000, 80902, 11080), {'MXNET_CUDNN_LIB_CHECKING': False}, []),
    ((13000, 13000, 92800, 12090), {}, ['cuDNN 9.28.0 was built for CUDA 12.9, but the runtime '
                                        'is CUDA 13.0']),
])
def test_library_versions_are_checked(versions, overrides, expected):
    with config.override(**overrides):
        found = gpu_backend.version_warnings(*versions)
    assert len(found) == len(expected)
    for text, part in zip(found, expected):
        assert part in text


def test_tensor_core_variables_map_to_cublas_and_cudnn_math():
    assert gpu_backend.gemm_compute_types(False, False) == {'float16': 'pedantic',
                                                            'float32': 'pedantic'}
    assert gpu_backend.gemm_compute_types(True, True) == {'float16': 'default',
                                                          'float32': 'fp16'}
    assert cudnn.math_type('float16', True, False) == cudnn.TENSOR_OP_MATH
    assert cudnn.math_type('float32', True, True) == cudnn.TENSOR_OP_MATH_ALLOW_CONVERSION
    assert cudnn.math_type('float16', False, True) == cudnn.FMA_MATH


def test_the_gpu_variables_are_effective():
    for name in ('MXNET_GPU_WORKER_NTHREADS', 'MXNET_GPU_COPY_NTHREADS',
                 'MXNET_GPU_WORKER_NSTREAMS', 'MXNET_GPU_MEM_POOL_TYPE',
                 'MXNET_GPU_MEM_POOL_RESERVE', 'MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF',
                 'MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE', 'MXNET_GPU_TEMP_COPY',
                 'MXNET_GPU_PARALLEL_RAND_COPY', 'MXNET_GPU_CUDNN_DROPOUT_STATE_COPY',
                 'MXNET_CUDA_LIB_CHECKING', 'MXNET_CUDNN_LIB_CHECKING',
                 'MXNET_CUDA_ALLOW_TENSOR_CORE', 'MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION'):
        assert config.REGISTRY[name].effective, name
    # a machine with two GPUs has not been lent yet: the P2P copy itself awaits its check
    assert 'two GPUs' in config.REGISTRY['MXNET_ENABLE_GPU_P2P'].status


def _cupy_or_skip():
    return pytest.importorskip('cupy', reason='needs CuPy installed (no GPU needed)')


def test_library_check_reads_the_installed_versions_without_a_gpu():
    module = _cupy_or_skip()
    gpu_backend.reset()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            found = gpu_backend.check_libraries(module)
        assert [str(w.message) for w in caught] == [f'Ember GPU backend: {t}' for t in found]
        assert gpu_backend.check_libraries(module) is found      # once per process
        with config.override(MXNET_CUDA_LIB_CHECKING=False, MXNET_CUDNN_LIB_CHECKING=False):
            assert gpu_backend.check_libraries(module) == []
    finally:
        gpu_backend.reset()


def test_tensor_core_settings_set_cupys_gemm_compute_types():
    _cupy_or_skip()
    from cupy._core import _routines_linalg as linalg
    before = {d: linalg.get_compute_type(np.dtype(d)) for d in ('float16', 'float32')}
    try:
        with config.override(MXNET_CUDA_ALLOW_TENSOR_CORE=True,
                             MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION=True):
            gpu_backend.apply_gemm_math(None)
            assert linalg.get_compute_type(np.dtype('float32')) == linalg.COMPUTE_TYPE_FP16
        with config.override(MXNET_CUDA_ALLOW_TENSOR_CORE=False):
            gpu_backend.apply_gemm_math(None)
            assert linalg.get_compute_type(np.dtype('float16')) == linalg.COMPUTE_TYPE_PEDANTIC
    finally:
        for dtype, kind in before.items():
            linalg.set_compute_type(np.dtype(dtype), kind)
        gpu_backend.reset()


def test_cudnn_descriptors_give_embers_output_shapes():
    if cudnn.library() is None:
        pytest.skip(cudnn.status())
    from ember.op.nn.conv.convolution import problem_of
    from ember.op import registry
    cases = [((2, 3, 9, 9), dict(kernel=(3, 3), num_filter=4, stride=(2, 2), pad=(1, 1))),
             ((1, 4, 7, 7, 5), dict(kernel=(3, 3, 3), num_filter=2, dilate=(2, 1, 1))),
             ((2, 4, 11), dict(kernel=(3,), num_filter=6, num_group=2, pad=(2,))),
             ((2, 8, 8, 6), dict(kernel=(3, 3), num_filter=4, layout='NHWC', num_group=2))]
    for shape, params in cases:
        op = registry.get('Convolution')
        attrs = op.parse_attrs(params)
        problem = problem_of(attrs, np.empty(shape, np.float32))
        x_shape, _, y_shape = conv_cuda._shapes(problem)
        geometry = conv_cuda._geometry(problem, x_shape, conv_cuda._contiguous_strides(x_shape),
                                       y_shape, conv_cuda._contiguous_strides(y_shape))
        dims = cudnn.forward_output_dims(cudnn.conv_descriptors(geometry))
        out_shape = op.infer_shape(attrs, [shape, None, None])[1][0]
        assert y_shape == out_shape
        channel_first = out_shape if params.get('layout') != 'NHWC' else \
            (out_shape[0], out_shape[-1]) + out_shape[1:-1]
        if len(shape) == 3:                     # 1-D runs with a unit height
            channel_first = channel_first[:2] + (1,) + channel_first[2:]
        assert dims == channel_first, (shape, params)


def test_gpu_variables_read_at_start_up_take_effect(tmp_path):
    import subprocess
    import sys
    import os
    script = '''
import ember as mx, sys
sys.path.insert(0, 'tests')
from fake_cuda import FakeGpu
from ember import backend, engine, resource, storage
backend._backends[mx.gpu(0)] = fake = FakeGpu()
eng, seen = engine.get(), set()
import threading
for _ in range(12):
    eng.push(lambda: seen.add(threading.current_thread().name), writes=[eng.new_var()],
             device=mx.gpu(0), copy=True)
eng.wait_all()
pool = storage.manager(mx.gpu(0))
temps, streams = resource.copies(mx.gpu(0))
states = {id(resource.dropout_state(mx.gpu(0))) for _ in range(10)}
print(type(pool).__name__, pool.strategy, pool.reserve, len(temps), len(streams), len(states),
      len(fake.streams), sorted(seen)[-1])
'''
    env = config.child_environ(
        MXNET_GPU_COPY_NTHREADS='1', MXNET_GPU_WORKER_NSTREAMS='2',
        MXNET_GPU_MEM_POOL_TYPE='Round', MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF='12',
        MXNET_GPU_MEM_POOL_RESERVE='7', MXNET_GPU_TEMP_COPY='2',
        MXNET_GPU_PARALLEL_RAND_COPY='3', MXNET_GPU_CUDNN_DROPOUT_STATE_COPY='5')
    env['PYTHONPATH'] = os.getcwd()
    result = subprocess.run([sys.executable, '-c', script], env=env, capture_output=True,
                            text=True, timeout=120, cwd=os.getcwd())
    assert result.returncode == 0, result.stderr
    # one copy thread with its primary and auxiliary streams
    assert result.stdout.split() == ['DevicePool', 'Round(cutoff=12)', '7', '2', '3', '5', '2',
                                     'ember-gpu-copy0-0']


# ----------------------------------------------------------------------------------------------
# Convolution algorithms on a GPU (cuDNN's answers simulated)

from ember.op.nn.conv import algorithms, cuda as conv_cuda  # noqa: E402
from ember.op.nn.conv.algorithms import ConvProblem, TuneMode  # noqa: E402


def _conv_problem(gradient='', device='gpu'):
    return ConvProblem(channel_last=False, batch=32, channels=64, filters=64, groups=1,
                       kernel=(3, 3), stride=(1, 1), dilate=(1, 1), pad=(1, 1),
                       size_in=(56, 56), dtype='float32', gradient=gradient, device=device)


@pytest.fixture
def simulated_cudnn(monkeypatch):
    """cuDNN's workspace sizes and heuristic ranking from tables, per pass."""
    mib = 1 << 20
    sizes = {'': {'implicit_gemm': 0, 'implicit_precomp_gemm': mib, 'winograd': 200 * mib,
                  'fft': 3000 * mib},
             'data': {'algo_0': 0, 'algo_1': mib},
             'weight': {'algo_0': 0, 'algo_1': mib, 'algo_3': 0}}
    ranking = {'forward': ['winograd', 'implicit_precomp_gemm'],
               'data': ['algo_0', 'algo_1'], 'weight': ['algo_3', 'algo_1']}
    monkeypatch.setattr(conv_cuda, '_cudnn_runs', lambda problem: problem.device == 'gpu')

    def workspace(problem, code):
        names = {c: n for n, c in conv_cuda._CODES[problem.gradient].items()}
        return sizes[problem.gradient].get(names[code])
    monkeypatch.setattr(conv_cuda, '_workspace', workspace)

    def heuristic(cupy, kind, descriptors, count=8):
        codes = conv_cuda._CODES['' if kind == 'forward' else kind]
        return [(codes[name], 0, True) for name in ranking[kind]]
    monkeypatch.setattr(cudnn, 'heuristic_order', heuristic)
    monkeypatch.setattr(conv_cuda, '_problem_descriptors', lambda problem: None)
    monkeypatch.setattr(conv_cuda, '_cupy', lambda: None)
    conv_cuda._heuristic_choice.cache_clear()
    algorithms.STATE.choices.clear()
    yield sizes
    conv_cuda._heuristic_choice.cache_clear()
    algorithms.STATE.choices.clear()


def test_each_cudnn_algorithm_is_one_gpu_registration():
    for gradient, codes in conv_cuda._CODES.items():
        table = algorithms.table(_conv_problem(gradient))
        for name in codes:
            assert table[f'cudnn_{name}'].device == 'gpu'
        assert table['gpu_gemm'].device == 'gpu'
    assert not algorithms.table(_conv_problem())['cudnn_fft'].uses_onednn
    assert not algorithms.WEIGHT_GRADIENT_ALGORITHMS['cudnn_algo_0'].deterministic
    assert algorithms.WEIGHT_GRADIENT_ALGORITHMS['cudnn_algo_1'].deterministic


def test_cpu_problems_never_see_gpu_algorithms_and_back(simulated_cudnn):
    on_cpu = {a.name for a in algorithms.candidates(_conv_problem(device='cpu'), False)}
    on_gpu = {a.name for a in algorithms.candidates(_conv_problem(), False)}
    assert on_cpu and not any(n.startswith(('cudnn_', 'gpu_')) for n in on_cpu)
    assert on_gpu == {'cudnn_implicit_gemm', 'cudnn_implicit_precomp_gemm', 'cudnn_winograd',
                      'cudnn_fft', 'gpu_gemm'}


def _measured(problem, mode, workspace_mb, deterministic=False):
    timed = []
    speed = {'cudnn_fft': 1, 'cudnn_winograd': 2, 'cudnn_implicit_precomp_gemm': 3}

    def trial(algorithm):
        timed.append(algorithm.name)

        def again():
            import time
            time.sleep(speed.get(algorithm.name, 4) * 2e-3)
        return again
    chosen = algorithms.choose(problem, mode, workspace_mb << 20, False, trial, deterministic)
    return chosen.name, set(timed)


@pytest.mark.parametrize('mode, workspace_mb, chosen, excluded', [
    (TuneMode.OFF, 1024, 'cudnn_winograd', None),                   # cuDNN's heuristic
    (TuneMode.LIMITED_WORKSPACE, 1024, 'cudnn_winograd', 'cudnn_fft'),  # fft's 3 GB do not fit
    (TuneMode.LIMITED_WORKSPACE, 100, 'cudnn_implicit_precomp_gemm', 'cudnn_winograd'),
    (TuneMode.FASTEST, 100, 'cudnn_fft', None),                     # no workspace limit
])
def test_autotune_modes_choose_among_cudnn_algorithms(simulated_cudnn, mode, workspace_mb,
                                                      chosen, excluded):
    name, timed = _measured(_conv_problem(), mode, workspace_mb)
    assert name == chosen
    if mode == TuneMode.OFF:
        assert not timed
    if excluded:
        assert excluded not in timed


def test_determinism_keeps_the_rule_to_deterministic_algorithms(simulated_cudnn):
    problem = _conv_problem('weight')
    assert conv_cuda.gpu_rule(problem).name == 'cudnn_algo_3'       # nondeterministic
    assert conv_cuda.gpu_rule(problem, deterministic=True).name == 'cudnn_algo_1'


def test_without_cudnn_the_gpu_runs_the_gemm(monkeypatch):
    monkeypatch.setattr(cudnn, 'library', lambda: None)
    conv_cuda._heuristic_choice.cache_clear()
    try:
        assert conv_cuda.gpu_rule(_conv_problem()).name == 'gpu_gemm'
        assert [a.name for a in algorithms.candidates(_conv_problem('data'), False)] == \
            ['gpu_gemm']
    finally:
        conv_cuda._heuristic_choice.cache_clear()


# ----------------------------------------------------------------------------------------------
# P2P (MXNET_ENABLE_GPU_P2P)

def test_tree_links_of_gpus_follow_the_p2p_matrix(monkeypatch):
    from ember.kvstore import tree
    pairs = ((0, 1, 0, 0), (1, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0))
    monkeypatch.setattr(gpu_backend, 'peer_matrix', lambda: pairs)
    gpus = [device.gpu(i) for i in range(4)]
    assert tree.link_matrix(gpus).tolist() == [list(map(float, row)) for row in pairs]
    with config.override(MXNET_ENABLE_GPU_P2P=False):      # through the host: all alike
        assert tree.link_matrix(gpus).tolist() == [
            [0.0 if a == b else 1.0 for b in range(4)] for a in range(4)]


def test_copies_between_gpus_go_peer_to_peer_only_where_allowed(monkeypatch):
    calls = []
    monkeypatch.setattr(gpu_backend, 'transfer', lambda dst, src, p2p: calls.append(p2p))
    from ember import backend
    backend.copy_between(None, None)
    with config.override(MXNET_ENABLE_GPU_P2P=False):
        backend.copy_between(None, None)
    assert calls == [True, False]
