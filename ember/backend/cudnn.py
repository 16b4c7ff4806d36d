"""cuDNN 9, loaded with ctypes: convolutions (forward, data and weight gradients) on CuPy
arrays, and the library's version for the start-up check.

CuPy 14 dropped its cuDNN module, so Ember binds the library itself, as it binds oneDNN
(``backend/onednn.py``): the ``nvidia-cudnn-cu12`` or ``-cu13`` wheel's ``libcudnn.so.9``, or one
on the loader's path. Without it ``library()`` is None and the convolutions run on CuPy's GEMMs.

Descriptors take the arrays' own strides, so channel-last (NHWC) data and views run without a
copy; a descriptor bundle is made once per geometry (:func:`conv_descriptors`). A handle is made
per thread and device and set to the thread's current stream at each call.

>>> lib = library()
>>> lib is None or lib.version() >= 8000
True
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
import site
import sys
import threading
from dataclasses import dataclass

from ember.base import EmberError

__all__ = ['library', 'status', 'Library', 'ConvGeometry', 'conv_descriptors', 'FORWARD',
           'BACKWARD_DATA', 'BACKWARD_FILTER', 'NONDETERMINISTIC', 'math_type',
           'convolution_forward', 'convolution_backward_data', 'convolution_backward_filter',
           'workspace_size', 'heuristic_order', 'CudnnError']

_c = ctypes
_ptr, _int, _size = _c.c_void_p, _c.c_int, _c.c_size_t

# cudnnDataType_t of the dtypes Ember runs through cuDNN
DATA_TYPES = {'float32': 0, 'float64': 1, 'float16': 2, 'bfloat16': 9}
_NCHW, _NHWC = 0, 1
_CROSS_CORRELATION = 1
# cudnnMathType_t
DEFAULT_MATH, TENSOR_OP_MATH, TENSOR_OP_MATH_ALLOW_CONVERSION, FMA_MATH = 0, 1, 2, 3

# The algorithms of each pass (cudnnConvolution*Algo_t), by Ember's name for them.
FORWARD = {'implicit_gemm': 0, 'implicit_precomp_gemm': 1, 'gemm': 2, 'direct': 3, 'fft': 4,
           'fft_tiling': 5, 'winograd': 6, 'winograd_nonfused': 7}
BACKWARD_DATA = {'algo_0': 0, 'algo_1': 1, 'fft': 2, 'fft_tiling': 3, 'winograd': 4,
                 'winograd_nonfused': 5}
BACKWARD_FILTER = {'algo_0': 0, 'algo_1': 1, 'fft': 2, 'algo_3': 3,
                   'winograd_nonfused': 5, 'fft_tiling': 6}
# those whose sums are ordered by atomics: other runs, other bits (MXNET_ENFORCE_DETERMINISM)
NONDETERMINISTIC = {('data', 'algo_0'), ('weight', 'algo_0'), ('weight', 'algo_3')}

_NOT_SUPPORTED = 9      # CUDNN_STATUS_NOT_SUPPORTED (cuDNN 8); cuDNN 9 uses 3000 and up


def math_type(dtype: str, allow_tensor_core: bool, allow_conversion: bool) -> int:
    """The cudnnMathType_t of a convolution: no tensor cores (FMA) unless allowed; float32
    keeps float32 arithmetic (FMA, no TF32) unless conversion is allowed too.

    >>> math_type('float16', True, False), math_type('float32', True, False)
    (1, 3)
    >>> math_type('float32', True, True), math_type('float16', False, True)
    (2, 3)
    """
    if not allow_tensor_core:
        return FMA_MATH
    if dtype in ('float32', 'float64'):
        return TENSOR_OP_MATH_ALLOW_CONVERSION if allow_conversion and dtype == 'float32' \
            else FMA_MATH
    return TENSOR_OP_MATH


# ----------------------------------------------------------------------------------------------
# Loading

class AlgoPerf(ctypes.Structure):
    """cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (the three share one layout)."""
    _fields_ = [('algo', _int), ('status', _int), ('time', _c.c_float), ('memory', _size),
                ('determinism', _int), ('mathType', _int), ('reserved', _int * 3)]


_HEURISTICS = {'forward': 'cudnnGetConvolutionForwardAlgorithm_v7',
               'data': 'cudnnGetConvolutionBackwardDataAlgorithm_v7',
               'weight': 'cudnnGetConvolutionBackwardFilterAlgorithm_v7'}
_PERF_ARGS = [_ptr, _ptr, _ptr, _ptr, _ptr, _int, _c.POINTER(_int), _c.POINTER(AlgoPerf)]

_SIGNATURES = {
    **{name: (_int, _PERF_ARGS) for name in _HEURISTICS.values()},
    'cudnnGetVersion': (_size, []),
    'cudnnGetCudartVersion': (_size, []),
    'cudnnGetErrorString': (_c.c_char_p, [_int]),
    'cudnnCreate': (_int, [_c.POINTER(_ptr)]),
    'cudnnSetStream': (_int, [_ptr, _ptr]),
    'cudnnCreateTensorDescriptor': (_int, [_c.POINTER(_ptr)]),
    'cudnnSetTensorNdDescriptor': (_int, [_ptr, _int, _int, _c.POINTER(_int),
                                          _c.POINTER(_int)]),
    'cudnnDestroyTensorDescriptor': (_int, [_ptr]),
    'cudnnCreateFilterDescriptor': (_int, [_c.POINTER(_ptr)]),
    'cudnnSetFilterNdDescriptor': (_int, [_ptr, _int, _int, _int, _c.POINTER(_int)]),
    'cudnnDestroyFilterDescriptor': (_int, [_ptr]),
    'cudnnCreateConvolutionDescriptor': (_int, [_c.POINTER(_ptr)]),
    'cudnnSetConvolutionNdDescriptor': (_int, [_ptr, _int, _c.POINTER(_int), _c.POINTER(_int),
                                               _c.POINTER(_int), _int, _int]),
    'cudnnSetConvolutionGroupCount': (_int, [_ptr, _int]),
    'cudnnSetConvolutionMathType': (_int, [_ptr, _int]),
    'cudnnDestroyConvolutionDescriptor': (_int, [_ptr]),
    'cudnnGetConvolutionNdForwardOutputDim': (_int, [_ptr, _ptr, _ptr, _int, _c.POINTER(_int)]),
    'cudnnGetConvolutionForwardWorkspaceSize': (_int, [_ptr, _ptr, _ptr, _ptr, _ptr, _int,
                                                       _c.POINTER(_size)]),
    'cudnnGetConvolutionBackwardDataWorkspaceSize': (_int, [_ptr, _ptr, _ptr, _ptr, _ptr, _int,
                                                            _c.POINTER(_size)]),
    'cudnnGetConvolutionBackwardFilterWorkspaceSize': (_int, [_ptr, _ptr, _ptr, _ptr, _ptr,
                                                              _int, _c.POINTER(_size)]),
    'cudnnConvolutionForward': (_int, [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _int, _ptr,
                                       _size, _ptr, _ptr, _ptr]),
    'cudnnConvolutionBackwardData': (_int, [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _int,
                                            _ptr, _size, _ptr, _ptr, _ptr]),
    'cudnnConvolutionBackwardFilter': (_int, [_ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _ptr, _int,
                                              _ptr, _size, _ptr, _ptr, _ptr]),
}


class Library:
    """The loaded libcudnn: its typed functions as attributes, calls checked by :meth:`call`."""

    def __init__(self, cdll, path):
        self.path = path
        self._cdll = cdll
        for name, (restype, argtypes) in _SIGNATURES.items():
            function = getattr(cdll, name)
            function.restype, function.argtypes = restype, argtypes
            setattr(self, name, function)

    def version(self) -> int:
        """cuDNN's version as major * 10000 + minor * 100 + patch (9.1.0 is 90100)."""
        return int(self.cudnnGetVersion())

    def cudart_version(self) -> int:
        """The CUDA runtime version cuDNN was built for (12.9 is 12090)."""
        return int(self.cudnnGetCudartVersion())

    def call(self, name, *args):
        """Call `name`; a status other than success raises an EmberError naming it."""
        code = getattr(self, name)(*args)
        if code != 0:
            text = self.cudnnGetErrorString(code).decode(errors='replace')
            raise CudnnError(code, f'cuDNN {name} failed: {text} (status {code})')


class CudnnError(EmberError):
    """A cuDNN call returned an error status."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code

    @property
    def not_supported(self) -> bool:
        return self.code == _NOT_SUPPORTED or 3000 <= self.code < 4000


_loaded: list = []
_load_lock = threading.Lock()


def library() -> Library | None:
    """The loaded cuDNN, or None where none is found (:func:`status` says why)."""
    if not _loaded:
        with _load_lock:
            if not _loaded:
                _loaded.append(_load())
    return _loaded[0][0]


def status() -> str:
    """One line: which cuDNN is loaded from where, or why none is."""
    library()
    return _loaded[0][1]


def _load():
    _preload_dependencies()
    tried = []
    for candidate in _candidates():
        try:
            cdll = ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
            lib = Library(cdll, candidate)
        except (OSError, AttributeError) as exc:
            tried.append(f'{candidate}: {exc}')
            continue
        return lib, f'cuDNN {lib.version()} from {candidate}'
    return None, ('cuDNN not found (install nvidia-cudnn-cu12 or -cu13); tried '
                  + '; '.join(tried[-3:]))


def _candidates():
    """The soname first (already loaded, or on the loader's path), then the nvidia wheels'
    lib directories of every site directory."""
    yield 'libcudnn.so.9'
    yield from _wheel_libraries('cudnn', 'libcudnn.so.9')


def _wheel_libraries(package, filename):
    roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
    seen = set()
    for root in roots:
        for pattern in (f'nvidia/{package}/lib/{filename}', f'nvidia/cu1*/lib/{filename}'):
            for path in sorted(glob.glob(os.path.join(root, pattern))):
                if path not in seen:
                    seen.add(path)
                    yield path


def _preload_dependencies():
    """cuDNN's engines open cuBLASLt and NVRTC by name when a convolution first runs; where
    those come from nvidia wheels (not on the loader's path), load them first, globally."""
    for package, filename in (('cublas', 'libcublasLt.so.*'), ('cuda_nvrtc', 'libnvrtc.so.*')):
        for path in _wheel_libraries(package, filename):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue


_usable: dict = {}


def usable(cupy) -> bool:
    """Whether cuDNN is loaded and makes a handle on the current device (once per device;
    a failure is warned about once and the convolutions run on CuPy's GEMMs)."""
    if library() is None:
        return False
    device = cupy.cuda.Device().id
    found = _usable.get(device)
    if found is None:
        try:
            _handle(cupy)
            found = True
        except CudnnError as error:
            import warnings
            warnings.warn(f'Ember GPU backend: cuDNN cannot start on gpu({device}) ({error}); '
                          'convolutions run on CuPy\'s GEMMs', RuntimeWarning, stacklevel=2)
            found = False
        _usable[device] = found
    return found


# ----------------------------------------------------------------------------------------------
# Descriptors

def _ints(values):
    return (_int * len(values))(*values)


class _Descriptor:
    """A cuDNN descriptor, destroyed with this object."""

    def __init__(self, lib, kind):
        self.handle = _ptr()
        lib.call(f'cudnnCreate{kind}Descriptor', _c.byref(self.handle))
        # kept here: at interpreter exit the module's globals may be gone before this object
        self._destroy = getattr(lib, f'cudnnDestroy{kind}Descriptor')

    def __del__(self):
        if self.handle:
            self._destroy(self.handle)
            self.handle = None


def tensor_descriptor(lib, dtype, dims, strides):
    """A tensor of `dims` (N, C, *spatial) with element `strides` in the same order."""
    desc = _Descriptor(lib, 'Tensor')
    lib.call('cudnnSetTensorNdDescriptor', desc.handle, DATA_TYPES[dtype], len(dims),
             _ints(dims), _ints(strides))
    return desc


def filter_descriptor(lib, dtype, dims, channel_last):
    """Filters of `dims` (K, C/groups, *kernel), stored KCRS or (channel_last) KRSC."""
    desc = _Descriptor(lib, 'Filter')
    lib.call('cudnnSetFilterNdDescriptor', desc.handle, DATA_TYPES[dtype],
             _NHWC if channel_last else _NCHW, len(dims), _ints(dims))
    return desc


def convolution_descriptor(lib, pad, stride, dilate, groups, dtype, math):
    desc = _Descriptor(lib, 'Convolution')
    compute = DATA_TYPES['float64' if dtype == 'float64' else 'float32']
    lib.call('cudnnSetConvolutionNdDescriptor', desc.handle, len(pad), _ints(pad),
             _ints(stride), _ints(dilate), _CROSS_CORRELATION, compute)
    lib.call('cudnnSetConvolutionGroupCount', desc.handle, groups)
    lib.call('cudnnSetConvolutionMathType', desc.handle, math)
    return desc


@dataclass(frozen=True)
class ConvGeometry:
    """Everything a convolution's descriptors depend on. Shapes and strides are of the arrays
    as stored ((N, C, *spatial), or channel-last (N, *spatial, C)); 1-D problems get a unit
    height, since cuDNN needs two spatial dims."""
    dtype: str
    x_shape: tuple
    x_strides: tuple        # in elements
    w_shape: tuple
    y_shape: tuple
    y_strides: tuple
    pad: tuple
    stride: tuple
    dilate: tuple
    groups: int
    channel_last: bool
    math: int


@dataclass(frozen=True)
class ConvDescriptors:
    x: object
    w: object
    y: object
    conv: object
    ndim: int       # of the tensors as cuDNN sees them: 4 or 5


@functools.lru_cache(maxsize=512)
def conv_descriptors(geometry: ConvGeometry) -> ConvDescriptors:
    """The descriptors of `geometry` (made once per geometry)."""
    lib = library()
    g = geometry
    x_dims, x_strides = _channel_first(g.x_shape, g.x_strides, g.channel_last)
    y_dims, y_strides = _channel_first(g.y_shape, g.y_strides, g.channel_last)
    w_dims, _ = _channel_first(g.w_shape, g.w_shape, g.channel_last)
    pad, stride, dilate = g.pad, g.stride, g.dilate
    if len(pad) == 1:       # 1-D: a unit height in front
        x_dims, x_strides = _unit_height(x_dims, x_strides)
        y_dims, y_strides = _unit_height(y_dims, y_strides)
        w_dims = w_dims[:2] + (1,) + w_dims[2:]
        pad, stride, dilate = (0,) + pad, (1,) + stride, (1,) + dilate
    return ConvDescriptors(tensor_descriptor(lib, g.dtype, x_dims, x_strides),
                           filter_descriptor(lib, g.dtype, w_dims, g.channel_last),
                           tensor_descriptor(lib, g.dtype, y_dims, y_strides),
                           convolution_descriptor(lib, pad, stride, dilate, g.groups, g.dtype,
                                                  g.math), len(x_dims))


def _channel_first(shape, strides, channel_last):
    """(N, C, *spatial) dims and strides of an array stored as `shape` / `strides`."""
    if not channel_last:
        return tuple(shape), tuple(strides)
    order = (0, len(shape) - 1) + tuple(range(1, len(shape) - 1))
    return tuple(shape[i] for i in order), tuple(strides[i] for i in order)


def _unit_height(dims, strides):
    return dims[:2] + (1,) + dims[2:], strides[:2] + (strides[2] * dims[2],) + strides[2:]


def forward_output_dims(descriptors: ConvDescriptors) -> tuple:
    """cuDNN's (N, C, *spatial) output of the descriptors' convolution (a check of them)."""
    dims = (_int * descriptors.ndim)()
    library().call('cudnnGetConvolutionNdForwardOutputDim', descriptors.conv.handle,
                   descriptors.x.handle, descriptors.w.handle, descriptors.ndim, dims)
    return tuple(dims)


# ----------------------------------------------------------------------------------------------
# Handles: one per thread and device, on the thread's current stream at each call

_local = threading.local()


def _handle(cupy):
    handles = getattr(_local, 'handles', None)
    if handles is None:
        handles = _local.handles = {}
    device = cupy.cuda.Device().id
    handle = handles.get(device)
    if handle is None:
        handle = _ptr()
        library().call('cudnnCreate', _c.byref(handle))
        handles[device] = handle
    library().call('cudnnSetStream', handle, _ptr(cupy.cuda.get_current_stream().ptr))
    return handle


def _scalars(dtype):
    kind = _c.c_double if dtype == 'float64' else _c.c_float
    return kind(1.0), kind(0.0)


def _address(array):
    return _ptr(array.data.ptr)


def workspace_size(cupy, kind, descriptors, algo) -> int:
    """Bytes of scratch algorithm `algo` needs for pass `kind` ('forward', 'data',
    'weight'); raises CudnnError (``not_supported``) where it cannot run the problem."""
    size = _size()
    name = {'forward': 'cudnnGetConvolutionForwardWorkspaceSize',
            'data': 'cudnnGetConvolutionBackwardDataWorkspaceSize',
            'weight': 'cudnnGetConvolutionBackwardFilterWorkspaceSize'}[kind]
    library().call(name, _handle(cupy), *(a.handle for a in _pass_arguments(kind, descriptors)),
                   algo, _c.byref(size))
    return int(size.value)


def _pass_arguments(kind, descriptors):
    """The descriptors of pass `kind` in the order cuDNN's calls for it take them."""
    d = descriptors
    if kind == 'forward':
        return d.x, d.w, d.conv, d.y
    if kind == 'data':
        return d.w, d.y, d.conv, d.x
    return d.x, d.y, d.conv, d.w


def heuristic_order(cupy, kind, descriptors, count=8) -> list:
    """cuDNN's own ranking of the algorithms of pass `kind` for the descriptors, best first:
    (algorithm code, workspace bytes, deterministic) of those it says can run."""
    found, results = _int(), (AlgoPerf * count)()
    library().call(_HEURISTICS[kind], _handle(cupy),
                   *(a.handle for a in _pass_arguments(kind, descriptors)), count,
                   _c.byref(found), results)
    return [(r.algo, int(r.memory), r.determinism == 1) for r in results[:found.value]
            if r.status == 0]


def _workspace(workspace):
    if workspace is None:
        return _ptr(), 0
    return _address(workspace), workspace.nbytes


def convolution_forward(cupy, descriptors, dtype, algo, x, w, y, workspace, beta=0.0):
    """y = conv(x, w) (+ beta * y) with algorithm `algo` and scratch `workspace`."""
    one, _ = _scalars(dtype)
    keep = (_c.c_double if dtype == 'float64' else _c.c_float)(beta)
    d = descriptors
    space, size = _workspace(workspace)
    library().call('cudnnConvolutionForward', _handle(cupy), _c.byref(one), d.x.handle,
                   _address(x), d.w.handle, _address(w), d.conv.handle, algo, space, size,
                   _c.byref(keep), d.y.handle, _address(y))


def convolution_backward_data(cupy, descriptors, dtype, algo, w, dy, dx, workspace):
    one, zero = _scalars(dtype)
    d = descriptors
    space, size = _workspace(workspace)
    library().call('cudnnConvolutionBackwardData', _handle(cupy), _c.byref(one), d.w.handle,
                   _address(w), d.y.handle, _address(dy), d.conv.handle, algo, space, size,
                   _c.byref(zero), d.x.handle, _address(dx))


def convolution_backward_filter(cupy, descriptors, dtype, algo, x, dy, dw, workspace):
    one, zero = _scalars(dtype)
    d = descriptors
    space, size = _workspace(workspace)
    library().call('cudnnConvolutionBackwardFilter', _handle(cupy), _c.byref(one), d.x.handle,
                   _address(x), d.y.handle, _address(dy), d.conv.handle, algo, space, size,
                   _c.byref(zero), d.w.handle, _address(dw))
