"""The CUDA backend: CuPy arrays in raw device allocations, streams and events, copies between
devices, pinned host memory, the library checks and the math modes of the GEMMs.

Only this package imports CuPy. Buffers come straight from cudaMalloc rather than from CuPy's own
memory pool, because Ember's storage layer is the pool: a second pool underneath would keep
memory that ``empty_cache()`` and the reserve check believe they returned to the device. (The
temporaries that CuPy's own functions make inside a kernel stay in CuPy's pool, which orders
them by stream; ``release_library_cache`` empties it with Ember's.)

Streams (:class:`DeviceStream`) are created *blocking*: work a host thread queues on the legacy
default stream (a copy in ``asnumpy``) waits for them and they for it. Between streams Ember
orders work by events (:mod:`ember.engine.gpu`); :func:`fence` and :func:`await_fence` are the
events that keep a buffer's next user behind the kernels of its last one.
"""
from __future__ import annotations

import functools
import threading
import warnings

import numpy as np

from ember import config

__all__ = ['probe', 'CupyBackend', 'DeviceStream', 'DeviceEvent', 'DeviceGenerator', 'fence',
           'await_fence', 'version_warnings', 'gemm_compute_types', 'transfer', 'peer_matrix',
           'PinnedBackend']

_CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation

# The oldest CUDA runtime (12.0) and cuDNN (9.0) Ember's GPU code is written and tested for:
# older ones get a warning (MXNET_CUDA_LIB_CHECKING, MXNET_CUDNN_LIB_CHECKING).
MIN_CUDA = 12000
MIN_CUDNN = 90000


@functools.cache
def probe():
    """(cupy module or None, number of CUDA devices, why there is none). Never raises."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA install failing at import
        return None, 0, f'CuPy is not installed ({exc}); install cupy-cuda12x'
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError when there is no driver or no device
        return None, 0, f'no CUDA device ({exc})'
    if count == 0:
        return None, 0, 'no CUDA device'
    return cupy, count, ''


# ----------------------------------------------------------------------------------------------
# Streams and events. Every stream Ember makes is listed, so that a fence can reach them all.

_streams: list = []
_streams_lock = threading.Lock()


class DeviceEvent:
    """An event recorded on `stream`: ``done`` without blocking, ``synchronize()`` blocking."""

    __slots__ = ('_event', 'stream')

    def __init__(self, event, stream):
        self._event = event
        self.stream = stream

    @property
    def done(self) -> bool:
        return self._event.done

    def synchronize(self) -> None:
        self._event.synchronize()


class DeviceStream:
    """One CUDA stream of device `device_id`; ``activate()`` makes it (and its device) the
    calling thread's current ones, where CuPy launches kernels."""

    def __init__(self, cupy, device_id: int):
        self._cupy = cupy
        self.device_id = device_id
        with cupy.cuda.Device(device_id):
            self._stream = cupy.cuda.Stream(non_blocking=False)
            self._event_class = cupy.cuda.Event
        with _streams_lock:
            _streams.append(self)

    @property
    def raw(self):
        """The CuPy stream."""
        return self._stream

    def activate(self) -> None:
        self._cupy.cuda.Device(self.device_id).use()
        self._stream.use()

    def record(self) -> DeviceEvent:
        """An event after everything queued on this stream so far."""
        event = self._event_class(block=False, disable_timing=True, interprocess=False)
        event.record(self._stream)
        return DeviceEvent(event, self)

    def wait(self, event: DeviceEvent) -> None:
        """Work queued on this stream from now on starts after `event` (no host wait)."""
        self._stream.wait_event(event._event)

    def synchronize(self) -> None:
        self._stream.synchronize()

    def retire(self) -> None:
        """Leave the list that fences reach (its thread has stopped); work queued on it
        still finishes."""
        with _streams_lock:
            if self in _streams:
                _streams.remove(self)


def all_streams() -> tuple:
    with _streams_lock:
        return tuple(_streams)


def fence(streams=None) -> tuple:
    """Events after the work queued so far on every stream (`streams`, default all of
    Ember's): a buffer released now has had every kernel that uses it queued before them."""
    return tuple(stream.record() for stream in (all_streams() if streams is None else streams))


def await_fence(events, streams=None) -> None:
    """Make every stream (`streams`, default all) wait for the events of `events` that are not
    done yet, except its own: the next user of a buffer, on whichever stream it runs, starts
    after the last user's kernels. Nothing is queued once they are done."""
    pending = [event for event in events if not event.done]
    if not pending:
        return
    for stream in (all_streams() if streams is None else streams):
        for event in pending:
            if event.stream is not stream:
                stream.wait(event)


# ----------------------------------------------------------------------------------------------
# The device

def device_names() -> list:
    """The model name of every CUDA device (none without CuPy or a GPU)."""
    cupy, count, _ = probe()
    return [_name(cupy.cuda.runtime.getDeviceProperties(i)['name']) for i in range(count)]


def _name(raw):
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class CupyBackend:
    """Arrays of one CUDA device: ``xp`` is CuPy. Needs CuPy and a GPU (see ``probe``)."""

    kind = 'gpu'
    zeroed = False

    def __init__(self, cupy, device_id: int):
        self.xp = cupy
        self.device_id = device_id
        self._cuda_device = cupy.cuda.Device(device_id)
        self.oom_errors = (cupy.cuda.memory.OutOfMemoryError, MemoryError)
        check_libraries(cupy)
        apply_gemm_math(cupy)

    def alloc(self, nbytes: int):
        """A flat uint8 CuPy array of `nbytes` (cudaMalloc aligns to 256 bytes)."""
        cupy = self.xp
        with self._cuda_device:
            memory = self._malloc(nbytes)
            pointer = cupy.cuda.MemoryPointer(memory, 0)
            return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=pointer)

    def _malloc(self, nbytes):
        cupy = self.xp
        try:
            return cupy.cuda.memory.Memory(nbytes)
        except cupy.cuda.runtime.CUDARuntimeError as exc:
            if exc.status != _CUDA_ERROR_MEMORY_ALLOCATION:
                raise
            # the pool retries on OutOfMemoryError after releasing its cache
            raise cupy.cuda.memory.OutOfMemoryError(nbytes, self.total_memory()) from exc

    def total_memory(self) -> int:
        return self._mem_info()[1]

    def free_memory(self) -> int:
        return self._mem_info()[0]

    def compute_capability(self) -> int:
        """The CUDA compute capability as an int (8.6 gives 86)."""
        return int(self._cuda_device.compute_capability)

    def name(self) -> str:
        """The card's name, e.g. 'NVIDIA H200'."""
        return _name(self.xp.cuda.runtime.getDeviceProperties(self.device_id)['name'])

    def _mem_info(self):
        with self._cuda_device:
            return self.xp.cuda.runtime.memGetInfo()

    def synchronize(self) -> None:
        """Wait for every kernel queued on this device."""
        self._cuda_device.synchronize()

    def release_library_cache(self) -> None:
        """Return the blocks CuPy's own pool keeps for kernel temporaries."""
        with self._cuda_device:
            self.xp.get_default_memory_pool().free_all_blocks()

    # streams and fences (the storage pool and the engine)
    def new_stream(self) -> DeviceStream:
        return DeviceStream(self.xp, self.device_id)

    fence = staticmethod(fence)
    await_fence = staticmethod(await_fence)

    def make_generator(self, seed_sequence: np.random.SeedSequence):
        """A CuPy generator (XORWOW) seeded from `seed_sequence`, with the methods of NumPy's
        ``Generator`` that the operators call (see :class:`DeviceGenerator`)."""
        seed = int(seed_sequence.generate_state(1, np.uint64)[0] >> 1)  # fits a signed int64
        with self._cuda_device:
            return DeviceGenerator(self.xp, self.xp.random.Generator(self.xp.random.XORWOW(seed)),
                                   self.device_id)

    # host <-> device
    def write_from_host(self, raw, values: np.ndarray) -> None:
        """Copy the C-contiguous host array `values` (raw's shape and dtype) into `raw`."""
        with self._cuda_device:
            if raw.flags.c_contiguous:
                raw.set(values)
            else:
                raw[...] = self.xp.asarray(values)

    def to_host(self, raw) -> np.ndarray:
        with self._cuda_device:
            return raw.get()


class DeviceGenerator:
    """NumPy's ``Generator`` interface over a CuPy generator, drawing on the device.

    CuPy's ``Generator`` lacks some of NumPy's methods (``normal``, ``negative_binomial``,
    ``permutation``); they are built here from the ones it has, and every other method is
    CuPy's own."""

    def __init__(self, cupy, generator, device_id: int = 0):
        self._xp, self._gen, self._device_id = cupy, generator, device_id

    def __getattr__(self, name):
        return getattr(self._gen, name)

    def normal(self, loc=0.0, scale=1.0, size=None):
        return loc + scale * self._gen.standard_normal(size)

    def negative_binomial(self, n, p, size=None):
        """Failures before the n-th success: Poisson with a Gamma(n, (1-p)/p) mean."""
        if p == 1:
            return self._xp.zeros(size, dtype=np.int64)
        return self._gen.poisson(self._gen.gamma(n, (1 - p) / p, size))

    def permutation(self, n):
        return self._xp.argsort(self._gen.random(n))

    def snapshot(self):
        """A device copy of the generator's cuRAND states, which :meth:`restore` puts back."""
        bits = self._gen.bit_generator
        nbytes = bits._state_size() * bits._type_size()
        with self._xp.cuda.Device(self._device_id):
            copy = self._xp.cuda.memory.Memory(nbytes)
        self._copy(copy.ptr, bits.state(), nbytes)
        return copy, nbytes

    def restore(self, snapshot) -> None:
        copy, nbytes = snapshot
        self._copy(self._gen.bit_generator.state(), copy.ptr, nbytes)

    def _copy(self, dst, src, nbytes):
        # cudaMemcpy on the legacy stream: ordered after the blocking streams Ember launches on
        runtime = self._xp.cuda.runtime
        with self._xp.cuda.Device(self._device_id):
            runtime.memcpy(dst, src, nbytes, runtime.memcpyDeviceToDevice)


# ----------------------------------------------------------------------------------------------
# Pinned host memory (cpu_pinned)

class PinnedBackend:
    """Host arrays in page-locked memory (``cpu_pinned``), which the GPU's copy engines read
    and write without a staging copy. Like the CPU backend otherwise."""

    kind = 'cpu'
    zeroed = False
    oom_errors = (MemoryError,)

    def __init__(self, cupy, host):
        self._cupy = cupy
        self._host = host           # the plain host backend: memory figures
        self.xp = np

    def alloc(self, nbytes: int) -> np.ndarray:
        memory = self._cupy.cuda.alloc_pinned_memory(max(nbytes, 1))
        return np.frombuffer(memory, np.uint8, nbytes)

    def total_memory(self) -> int:
        return self._host.total_memory()

    def free_memory(self) -> int:
        return self._host.free_memory()

    def synchronize(self) -> None:
        """Host memory: nothing to wait for."""

    def make_generator(self, seed_sequence):
        return self._host.make_generator(seed_sequence)


# ----------------------------------------------------------------------------------------------
# Copies between devices (the _copyto operator on a GPU's copy worker)

def transfer(dst, src, p2p: bool) -> None:
    """Copy `src` into `dst` (same shape and dtype) where at least one is a CuPy array, on the
    calling thread's current stream. Host memory takes part only through blocking copies, so
    the host array may be reused when this returns. Between GPUs the copy goes peer to peer
    where `p2p` (``MXNET_ENABLE_GPU_P2P``) and the two devices allow it, else through host
    memory."""
    if isinstance(dst, np.ndarray):
        _to_host(dst, src)
    elif isinstance(src, np.ndarray):
        _from_host(dst, src)
    elif dst.device.id == src.device.id:
        dst[...] = src
    else:
        _between_devices(dst, src, p2p)


def _cupy_of(array):
    return probe()[0]


def _to_host(dst, src):
    cupy = _cupy_of(src)
    stream = cupy.cuda.get_current_stream()
    with src.device:
        if dst.flags.c_contiguous and src.flags.c_contiguous:
            src.get(stream=stream, out=dst)
        else:
            dst[...] = src.get(stream=stream)
    stream.synchronize()


def _from_host(dst, src):
    cupy = _cupy_of(dst)
    stream = cupy.cuda.get_current_stream()
    if dst.flags.c_contiguous and src.flags.c_contiguous:
        dst.set(src, stream=stream)
    else:
        dst[...] = cupy.asarray(src)
    stream.synchronize()         # a pinned source must outlive the copy


def _between_devices(dst, src, p2p):
    cupy = _cupy_of(dst)
    with src.device:
        src = cupy.ascontiguousarray(src)
    if p2p and peer_matrix()[dst.device.id][src.device.id]:
        _enable_peer(dst.device.id, src.device.id)
        if dst.flags.c_contiguous:
            stream = cupy.cuda.get_current_stream()
            cupy.cuda.runtime.memcpyPeerAsync(dst.data.ptr, dst.device.id, src.data.ptr,
                                              src.device.id, src.nbytes, stream.ptr)
            return
        dst[...] = src          # a kernel on dst's device reading src's memory over the link
        return
    host = np.empty(src.shape, src.dtype)
    _to_host(host, src)
    _from_host(dst, host)


@functools.cache
def peer_matrix() -> tuple:
    """Rows of 0/1: whether GPU i can read GPU j's memory directly (P2P); () without GPUs."""
    cupy, count, _ = probe()
    if cupy is None:
        return ()
    runtime = cupy.cuda.runtime
    return tuple(tuple(int(i != j and bool(runtime.deviceCanAccessPeer(i, j)))
                       for j in range(count)) for i in range(count))


_peers_enabled: set = set()
_peers_lock = threading.Lock()


def _enable_peer(device_id, peer_id):
    """Let kernels and copies of `device_id` reach `peer_id`'s memory (once per pair)."""
    with _peers_lock:
        if (device_id, peer_id) in _peers_enabled:
            return
        cupy = probe()[0]
        with cupy.cuda.Device(device_id):
            try:
                cupy.cuda.runtime.deviceEnablePeerAccess(peer_id)
            except cupy.cuda.runtime.CUDARuntimeError as exc:
                if 'PeerAccessAlreadyEnabled' not in str(exc):
                    raise
        _peers_enabled.add((device_id, peer_id))


# ----------------------------------------------------------------------------------------------
# Library checks (MXNET_CUDA_LIB_CHECKING, MXNET_CUDNN_LIB_CHECKING)

def _version_text(version: int, scale: int) -> str:
    major, rest = divmod(version, scale)
    return f'{major}.{rest // (scale // 100) if scale >= 1000 else rest}'


def version_warnings(cuda_runtime, cuda_driver, cudnn=None, cudnn_cudart=None) -> list:
    """Warnings about the CUDA and cuDNN versions found (CUDA as 12090 for 12.9, cuDNN as
    90100 for 9.1), each naming the versions; [] where all is well.

    >>> version_warnings(12090, 12080)[0]
    'the CUDA driver supports CUDA 12.8, older than the runtime CuPy uses (12.9): update the driver'
    >>> version_warnings(12090, 13000, 90100, 12090)
    []
    """
    found = []
    if cuda_runtime is not None and config.get('MXNET_CUDA_LIB_CHECKING'):
        if cuda_driver is not None and 0 < cuda_driver < cuda_runtime:
            found.append(f'the CUDA driver supports CUDA {_cuda(cuda_driver)}, older than the '
                         f'runtime CuPy uses ({_cuda(cuda_runtime)}): update the driver')
        if cuda_runtime < MIN_CUDA:
            found.append(f'CUDA runtime {_cuda(cuda_runtime)} is older than {_cuda(MIN_CUDA)}, '
                         'the oldest Ember is tested with')
    if cudnn is not None and config.get('MXNET_CUDNN_LIB_CHECKING'):
        if cudnn < MIN_CUDNN:
            found.append(f'cuDNN {_cudnn(cudnn)} is older than {_cudnn(MIN_CUDNN)}, which '
                         "Ember's cuDNN binding is written for")
        if cudnn_cudart is not None and cuda_runtime is not None \
                and cudnn_cudart // 1000 != cuda_runtime // 1000:
            found.append(f'cuDNN {_cudnn(cudnn)} was built for CUDA {_cuda(cudnn_cudart)}, '
                         f'but the runtime is CUDA {_cuda(cuda_runtime)}')
    return found


def _cuda(version):
    return f'{version // 1000}.{version % 1000 // 10}'


def _cudnn(version):
    return f'{version // 10000}.{version % 10000 // 100}.{version % 100}'


_checked = []


def check_libraries(cupy) -> list:
    """Warn once per process about the versions of the CUDA runtime, driver and cuDNN (see
    :func:`version_warnings`); returns the warnings."""
    if _checked:
        return _checked[0]
    runtime = cupy.cuda.runtime
    cuda_runtime = _or_none(runtime.runtimeGetVersion)
    driver = _or_none(runtime.driverGetVersion)
    from ember.backend import cudnn
    lib = cudnn.library()
    found = version_warnings(cuda_runtime, driver, lib.version() if lib else None,
                             lib.cudart_version() if lib else None)
    for text in found:
        warnings.warn(f'Ember GPU backend: {text}', RuntimeWarning, stacklevel=3)
    _checked.append(found)
    return found


def _or_none(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - no driver: nothing to compare
        return None


# ----------------------------------------------------------------------------------------------
# Tensor cores in cuBLAS (MXNET_CUDA_ALLOW_TENSOR_CORE, MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION)

def gemm_compute_types(allow_tensor_core: bool, allow_conversion: bool) -> dict:
    """CuPy's GEMM compute type per input dtype name: with tensor cores allowed, half and
    bfloat16 products use them (the default); float32 ones keep float32 arithmetic unless
    conversion is allowed too, then they may run on tensor cores in float16
    (``CUBLAS_COMPUTE_32F_FAST_16F``). Without tensor cores every product is pedantic.

    >>> gemm_compute_types(True, False)
    {'float16': 'default', 'float32': 'default'}
    >>> gemm_compute_types(True, True)['float32'], gemm_compute_types(False, True)['float16']
    ('fp16', 'pedantic')
    """
    if not allow_tensor_core:
        return {'float16': 'pedantic', 'float32': 'pedantic'}
    return {'float16': 'default', 'float32': 'fp16' if allow_conversion else 'default'}


_COMPUTE_TYPES = {'default': 'COMPUTE_TYPE_DEFAULT', 'pedantic': 'COMPUTE_TYPE_PEDANTIC',
                  'fp16': 'COMPUTE_TYPE_FP16'}


_tensor_core: list = []


def tensor_core_settings() -> tuple:
    """(MXNET_CUDA_ALLOW_TENSOR_CORE, MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION) as read when
    the first GPU started (the first can be set once per process, as in MXNet)."""
    if not _tensor_core:
        _tensor_core.append((config.get('MXNET_CUDA_ALLOW_TENSOR_CORE'),
                             config.get('MXNET_CUDA_TENSOR_OP_MATH_ALLOW_CONVERSION')))
    return _tensor_core[0]


def reset() -> None:
    """Read the tensor-core settings again at the next device start (a test's override)."""
    _tensor_core.clear()
    _checked.clear()


def apply_gemm_math(cupy) -> dict:
    """Set CuPy's GEMM compute types from the tensor-core settings."""
    from cupy._core import _routines_linalg as linalg
    types = gemm_compute_types(*tensor_core_settings())
    for dtype, kind in types.items():
        linalg.set_compute_type(np.dtype(dtype), getattr(linalg, _COMPUTE_TYPES[kind]))
    return types


# ----------------------------------------------------------------------------------------------
# Generated kernels (element-wise fusion)

_THREADS_PER_BLOCK = 256
_MAX_BLOCKS = 65535 * 8     # a grid-stride loop covers the rest


@functools.lru_cache(maxsize=None)
def compile_kernel(source: str, name: str):
    """The CuPy RawKernel of `source`'s function `name` (NVRTC compiles it at first launch)."""
    return probe()[0].RawKernel(source, name, options=('--std=c++14',))


_index_arrays: dict = {}


def _device_index_array(values, device_id):
    """A cached int64 device array of `values` (the shape and strides of a broadcast)."""
    key = (tuple(values), device_id)
    found = _index_arrays.get(key)
    if found is None:
        if len(_index_arrays) > 4096:
            _index_arrays.clear()
        found = _index_arrays[key] = probe()[0].asarray(np.array(values, np.int64))
    return found


def launch_elementwise(kernel, ins, outs, shape, strides=None) -> None:
    """Run a generated element-wise kernel (``ember.op.fused_cuda.FusedKernel``) over the
    output `shape`, on the current stream; `strides` (per input, over the output's dims) where
    the kernel broadcasts."""
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return
    function = compile_kernel(kernel.source, kernel.name)
    args = [np.int64(n)] + list(ins) + list(outs)
    if kernel.broadcast:
        device_id = outs[0].device.id
        flat = [s for row in strides for s in row]
        args += [_device_index_array(shape, device_id), _device_index_array(flat, device_id),
                 np.int32(len(shape))]
    blocks = min(-(-n // _THREADS_PER_BLOCK), _MAX_BLOCKS)
    function((blocks,), (_THREADS_PER_BLOCK,), tuple(args))
