"""The per-device backends and the oneDNN loader."""
import os
import subprocess
import sys

import numpy as np
import pytest

from ember import backend, config, device
from ember.backend import cpu
from ember.backend import gpu as gpu_backend
from ember.backend import native
from ember.base import EmberError

HAS_GPU = backend.num_gpus() > 0
WHEEL_LIBRARY = native.find_wheel_library()


@pytest.mark.parametrize('dev', [device.cpu(), device.cpu(1), device.cpu_pinned()])
def test_host_devices_use_numpy(dev):
    be = backend.for_device(dev)
    assert be.xp is np
    assert backend.for_device(dev) is be


@pytest.mark.parametrize('nbytes', [0, 1, 63, 64, 65, 1000, 3 * 2**20 + 5])
def test_host_alloc_is_flat_uint8_and_aligned(nbytes):
    buf = backend.for_device(device.cpu()).alloc(nbytes)
    assert buf.dtype == np.uint8 and buf.shape == (nbytes,)
    assert buf.ctypes.data % 64 == 0
    buf[:] = 7  # writable across its whole length
    assert int(buf.sum()) == 7 * nbytes


@pytest.mark.parametrize('nbytes', [2**21 - 1, 2**21, 4 * 2**20 + 5, 33 * 2**20])
def test_large_host_buffers_start_on_a_huge_page(nbytes):
    """From 2 MiB a buffer starts on a 2 MiB boundary, so transparent huge pages can cover it
    whole (below, 64-byte alignment only); it still reads as zeros."""
    buf = backend.for_device(device.cpu()).alloc(nbytes)
    assert buf.shape == (nbytes,) and not buf.any()
    alignment = cpu.HUGE_PAGE if nbytes >= cpu.HUGE_PAGE else 64
    assert buf.ctypes.data % alignment == 0


def test_host_memory_figures_match_the_system():
    be = backend.for_device(device.cpu())
    physical = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    assert abs(be.total_memory() - physical) <= 1024  # MemTotal is in kB
    assert 0 < be.free_memory() <= be.total_memory()
    assert be.synchronize() is None


def test_host_generator_is_seeded_pcg64():
    be = backend.for_device(device.cpu())
    first = be.make_generator(np.random.SeedSequence(5))
    again = be.make_generator(np.random.SeedSequence(5))
    other = be.make_generator(np.random.SeedSequence(6))
    assert isinstance(first.bit_generator, np.random.PCG64)
    draws = first.random(4)
    assert np.array_equal(draws, again.random(4))
    assert not np.array_equal(draws, other.random(4))


def test_num_gpus_is_a_count():
    count = backend.num_gpus()
    assert isinstance(count, int) and count >= 0


@pytest.mark.skipif(HAS_GPU, reason='this machine has a GPU')
def test_gpu_without_backend_is_a_clear_error():
    with pytest.raises(EmberError, match=r'gpu\(0\): no GPU backend: (CuPy|no CUDA)'):
        backend.for_device(device.gpu(0))


def test_probe_without_cupy_reports_why(monkeypatch):
    monkeypatch.setitem(sys.modules, 'cupy', None)  # makes `import cupy` fail
    cupy, count, why = gpu_backend.probe.__wrapped__()
    assert (cupy, count) == (None, 0)
    assert 'CuPy is not installed' in why


@pytest.mark.skipif(not HAS_GPU, reason='needs CuPy and a CUDA device')
def test_gpu_backend_allocates_device_memory():
    be = backend.for_device(device.gpu(0))
    buf = be.alloc(1000)
    assert be.xp.__name__ == 'cupy' and buf.dtype == np.uint8 and buf.shape == (1000,)
    assert buf.data.ptr % 256 == 0
    assert 0 < be.free_memory() <= be.total_memory()
    gen = be.make_generator(np.random.SeedSequence(1))
    again = be.make_generator(np.random.SeedSequence(1))
    assert bool((gen.random(3) == again.random(3)).all())
    with pytest.raises(be.oom_errors):
        be.alloc(be.total_memory() * 2)
    with pytest.raises(EmberError, match='no such GPU'):
        backend.for_device(device.gpu(backend.num_gpus()))


# ----------------------------------------------------------------------------------------------
# oneDNN

def test_library_path_to_missing_file_is_a_clear_error(tmp_path):
    missing = str(tmp_path / 'libdnnl.so')
    with config.override(MXNET_LIBRARY_PATH=missing):
        with pytest.raises(EmberError, match='MXNET_LIBRARY_PATH') as info:
            native.onednn()
        assert missing in str(info.value) and 'no such file' in str(info.value)
        assert missing in native.onednn_status()
        with pytest.raises(EmberError):
            native.dnnl_version()


def test_library_path_to_a_non_library_is_a_clear_error(tmp_path):
    junk = tmp_path / 'libdnnl.so'
    junk.write_bytes(b'not a shared library')
    with config.override(MXNET_LIBRARY_PATH=str(junk)):
        with pytest.raises(EmberError, match=r"MXNET_LIBRARY_PATH=.*cannot load it"):
            native.onednn()


@pytest.mark.skipif(WHEEL_LIBRARY is None, reason='onednn-cpu-gomp is not installed')
def test_library_path_to_libdnnl_loads_it():
    with config.override(MXNET_LIBRARY_PATH=WHEEL_LIBRARY):
        assert native.onednn() is not None
        assert native.dnnl_version().startswith('3.')
        assert native.library_path() == WHEEL_LIBRARY
        assert 'MXNET_LIBRARY_PATH' in native.onednn_status()


@pytest.mark.skipif(WHEEL_LIBRARY is None, reason='onednn-cpu-gomp is not installed')
def test_installed_wheel_is_found_without_configuration():
    assert native.onednn() is native.onednn()  # loaded once, then cached
    assert native.dnnl_version().startswith('3.')
    assert native.library_path() == WHEEL_LIBRARY
    assert WHEEL_LIBRARY in native.onednn_status()


def test_missing_wheel_gives_none_and_a_reason(monkeypatch):
    monkeypatch.setattr(native, 'find_wheel_library', lambda: None)
    native.reset()
    try:
        assert native.onednn() is None
        assert native.dnnl_version() is None and native.library_path() is None
        assert 'not installed' in native.onednn_status()
    finally:
        monkeypatch.undo()
        native.reset()


def test_library_path_is_read_from_the_environment_at_start_up(tmp_path):
    missing = str(tmp_path / 'nowhere.so')
    code = 'from ember.backend import native; print(native.onednn_status())'
    env = dict(os.environ, MXNET_LIBRARY_PATH=missing)
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                         check=True).stdout
    assert f'MXNET_LIBRARY_PATH={missing!r}: no such file' in out


def _resident_mb():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='glibc malloc_trim')
def test_returning_free_heap_gives_freed_holes_back():
    from ember.backend.cpu import return_free_heap
    # 100 KB blocks sit below malloc's mmap threshold, on the heap; freeing every other one
    # leaves holes the heap cannot shrink over, which only a trim returns
    pairs = [(np.ones(25_000, np.float32), np.ones(25_000, np.float32)) for _ in range(1000)]
    kept = [b for _, b in pairs]
    del pairs
    before = _resident_mb()
    assert return_free_heap()
    assert _resident_mb() < before - 50
    del kept


def test_binding_returns_the_heap_it_used(monkeypatch):
    from ember import symbol as sym
    from ember.executor import executor
    calls = []
    monkeypatch.setattr(executor, 'return_free_heap', lambda: calls.append(1))
    net = sym.FullyConnected(sym.var('x'), num_hidden=2, name='fc')
    net.simple_bind(device.cpu(), x=(1, 3)).forward()
    assert calls == [1]


_ISA_SCRIPT = '''
import numpy as np
from ember.backend import onednn
from ember.op.nn.conv import compiled
md = onednn.MemoryDesc.of
data, weight, out = (np.ones(s, np.float32) for s in [(1, 64, 14, 14), (64, 64, 3, 3),
                                                     (1, 64, 14, 14)])
conv = onednn.convolution(md(data), md(weight), None, md(out), (1, 1), (1, 1), (1, 1), (1, 1), ())
print(compiled.MODULE.instruction_set(), conv.implementation)
'''


def widest_builds():
    """The instruction sets of ember._winograd's builds that this CPU runs, widest first."""
    from ember.op.nn.conv import compiled
    module = compiled.MODULE
    if module is None:
        pytest.skip('ember._winograd is not built')
    before, runs = module.instruction_set(), []
    for name in ('avx512', 'avx2', 'baseline'):
        try:
            module.use_instruction_set(name)
        except ValueError:
            continue
        runs.append(name)
    module.use_instruction_set(before)
    return runs


@pytest.mark.skipif(WHEEL_LIBRARY is None, reason='oneDNN (onednn-cpu-gomp) is not installed')
@pytest.mark.parametrize('isa, build', [('AVX2', 'avx2'), ('SSE41', 'baseline'),
                                        ('ALL', None)])
def test_max_cpu_isa_narrows_onednn_and_the_compiled_kernels(isa, build):
    runs = widest_builds()
    if build is not None and build not in runs:
        pytest.skip(f'this CPU does not run the {build} build')
    env = config.child_environ(ONEDNN_MAX_CPU_ISA=isa)
    out = subprocess.run([sys.executable, '-c', _ISA_SCRIPT], env=env, capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    assert out[0] == (build or runs[0])
    if isa != 'ALL':
        assert 'avx512' not in out[1], out        # oneDNN read the cap as well
        assert isa != 'SSE41' or 'avx' not in out[1], out


def test_max_cpu_isa_rejects_what_onednn_would_ignore():
    env = config.child_environ(ONEDNN_MAX_CPU_ISA=None)
    env['ONEDNN_MAX_CPU_ISA'] = 'avx3'
    code = 'from ember.op.nn.conv import compiled; compiled.MODULE.instruction_set()'
    done = subprocess.run([sys.executable, '-c', code], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "ONEDNN_MAX_CPU_ISA='avx3': expected 'SSE41'" in done.stderr
