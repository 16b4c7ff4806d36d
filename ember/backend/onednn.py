"""oneDNN 3.x through ctypes: engine and streams, memory descriptors by strides, primitives with
the reorders between the caller's plain buffers and the layouts oneDNN chooses, and a bounded
cache of built primitives.

A primitive is built once per shape and layout (``MXNET_MKLDNN_CACHE_NUM`` bounds how many stay
cached, least recently used first out) and then run on NumPy arrays: ``run({ARG_SRC: x, ...})``
binds the arrays' memory, reorders inputs into the chosen layouts in a per-thread workspace, runs
the primitive and reorders the outputs back. Every failing call raises :class:`OneDNNError`
naming the C function and oneDNN's status.

>>> import numpy as np, pytest
>>> from ember.backend import onednn
>>> if not onednn.available():
...     pytest.skip('oneDNN is not installed')
>>> x = np.array([[-1.0, 2.0]], np.float32)
>>> y = np.empty_like(x)
>>> relu = onednn.eltwise(onednn.MemoryDesc.of(x), onednn.MemoryDesc.of(y), 'relu')
>>> plan = relu.run({onednn.ARG_SRC: x, onednn.ARG_DST: y})
>>> y.tolist()
[[0.0, 2.0]]
"""
from __future__ import annotations

import collections
import ctypes
import threading
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ember import accel, config
from ember.backend import native
from ember.base import EmberError

__all__ = ['available', 'status', 'set_num_threads', 'num_threads', 'OneDNNError', 'MemoryDesc',
           'Plan', 'PostOp', 'Primitive', 'has_plain_strides', 'convolution', 'inner_product',
           'pooling', 'batch_norm', 'eltwise', 'softmax', 'lrn', 'reorder', 'cached', 'cache_size',
           'clear_cache', 'reset', 'ARG_SRC', 'ARG_DST', 'ARG_WEIGHTS', 'ARG_BIAS', 'ARG_MEAN',
           'ARG_VARIANCE', 'ARG_SCALE', 'ARG_SHIFT', 'ARG_WORKSPACE', 'ARG_DIFF_SRC',
           'ARG_DIFF_DST', 'ARG_DIFF_WEIGHTS', 'ARG_DIFF_BIAS', 'ARG_DIFF_SCALE', 'ARG_DIFF_SHIFT',
           'ELTWISE_ALGORITHMS', 'POOLING_ALGORITHMS', 'UNIMPLEMENTED',
           'convolution_backward_data', 'convolution_backward_weights',
           'inner_product_backward_data', 'inner_product_backward_weights', 'pooling_training',
           'pooling_backward', 'batch_norm_training', 'batch_norm_backward', 'eltwise_backward',
           'softmax_backward', 'rnn_forward', 'RNN_CELLS', 'ARG_SRC_ITER', 'ARG_SRC_ITER_C',
           'ARG_WEIGHTS_ITER', 'ARG_DST_ITER', 'ARG_DST_ITER_C']

# Values from dnnl_types.h / dnnl_common_types.h of oneDNN 3.2.
_F32 = 3                       # dnnl_f32
_FORMAT_ANY = 1                # dnnl_format_tag_any
_CPU = 1                       # dnnl_cpu
_IN_ORDER = 1                  # dnnl_stream_in_order
_FORWARD_TRAINING, _FORWARD_INFERENCE = 64, 96
_BACKWARD, _BACKWARD_DATA = 128, 160
_CONVOLUTION_DIRECT = 1
_SCRATCHPAD_USER = 1           # dnnl_scratchpad_mode_user
_QUERY_IMPL_INFO = 8           # dnnl_query_impl_info_str
_QUERY_SCRATCHPAD_MD = 136
_QUERY_EXEC_ARG_MD = 255
_MAX_DIMS = 12                 # DNNL_MAX_NDIMS

ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS = 1, 17, 33, 41
ARG_MEAN, ARG_VARIANCE, ARG_SCALE, ARG_SHIFT = 49, 50, 51, 52
ARG_WORKSPACE = 64
ARG_DIFF_SRC, ARG_DIFF_DST, ARG_DIFF_WEIGHTS, ARG_DIFF_BIAS = 129, 145, 161, 169
ARG_DIFF_SCALE, ARG_DIFF_SHIFT = 255, 256
# recurrent layers: SRC/DST/WEIGHTS above are their LAYER arguments
ARG_SRC_ITER, ARG_SRC_ITER_C, ARG_DST_ITER, ARG_DST_ITER_C, ARG_WEIGHTS_ITER = 2, 3, 18, 19, 34
_ARG_SCRATCHPAD = 80
_ARG_ATTR_SCALES = 4096         # DNNL_ARG_ATTR_SCALES, or-ed with the argument it scales

ELTWISE_ALGORITHMS = {'relu': 0x20, 'tanh': 0x21, 'elu': 0x22, 'square': 0x23, 'abs': 0x24,
                      'sqrt': 0x25, 'linear': 0x26, 'soft_relu': 0x27, 'logistic': 0x29,
                      'exp': 0x2a, 'gelu_tanh': 0x2b, 'swish': 0x2c, 'log': 0x2d,
                      'gelu_erf': 0x31, 'relu_use_dst_for_bwd': 0x100,
                      'tanh_use_dst_for_bwd': 0x101, 'elu_use_dst_for_bwd': 0x102,
                      'logistic_use_dst_for_bwd': 0x104}
POOLING_ALGORITHMS = {'max': 0x1ff, 'avg_include_padding': 0x2ff,
                      'avg_exclude_padding': 0x3ff}
_LRN_ACROSS_CHANNELS = 0xaff
_SOFTMAX = {False: 0x30000, True: 0x30001}         # accurate, log
_USE_GLOBAL_STATS, _USE_SCALE, _USE_SHIFT, _FUSE_RELU = 0x1, 0x2, 0x4, 0x8
_RNN_DIRECTIONS = {1: 1, 2: 3}      # directions -> left2right, bidirectional_concat
# recurrent cells -> gates; 'lbr_gru' is the GRU of cuDNN and MXNet (reset after the product)
RNN_CELLS = {'rnn_relu': 1, 'rnn_tanh': 1, 'lstm': 4, 'lbr_gru': 3}

_STATUS = {1: 'out_of_memory', 2: 'invalid_arguments', 3: 'unimplemented',
           4: 'last_impl_reached', 5: 'runtime_error', 6: 'not_required'}
UNIMPLEMENTED = 3

_ALIGN = 64


class OneDNNError(EmberError):
    """A oneDNN call failed; ``call`` names the C function, ``status`` is its dnnl_status_t."""

    def __init__(self, call: str, status: int):
        self.call, self.status = call, status
        why = _STATUS.get(status, 'unknown status')
        hint = ('; oneDNN has no implementation for these shapes, layouts or parameters'
                if status == UNIMPLEMENTED else '')
        super().__init__(f'oneDNN call {call} failed: {why} (dnnl_status_t {status}){hint}')


# ----------------------------------------------------------------------------------------------
# The C functions, each with its argument types: without them ctypes would pass Python floats
# as doubles to the functions that take float, and the values would come out wrong.

_p, _h, _i, _u, _f = ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_int, \
    ctypes.c_uint, ctypes.c_float
_dims = ctypes.POINTER(ctypes.c_int64)
_Dims = ctypes.c_int64 * _MAX_DIMS


class _ExecArg(ctypes.Structure):
    """dnnl_exec_arg_t."""
    _fields_ = [('arg', ctypes.c_int), ('memory', ctypes.c_void_p)]


# name -> argument types; all return dnnl_status_t.
_STATUS_FUNCTIONS = {
    'dnnl_engine_create': (_p, _i, ctypes.c_size_t),
    'dnnl_engine_destroy': (_h,),
    'dnnl_stream_create': (_p, _h, _u),
    'dnnl_stream_destroy': (_h,),
    'dnnl_memory_desc_create_with_strides': (_p, _i, _dims, _i, _dims),
    'dnnl_memory_desc_create_with_tag': (_p, _i, _dims, _i, _i),
    'dnnl_memory_desc_destroy': (_h,),
    'dnnl_memory_create': (_p, _h, _h, _h),
    'dnnl_memory_set_data_handle': (_h, _h),
    'dnnl_memory_destroy': (_h,),
    'dnnl_primitive_attr_create': (_p,),
    'dnnl_primitive_attr_destroy': (_h,),
    'dnnl_primitive_attr_set_scratchpad_mode': (_h, _i),
    'dnnl_primitive_attr_set_post_ops': (_h, _h),
    'dnnl_primitive_attr_set_scales_mask': (_h, _i, _i),
    'dnnl_post_ops_create': (_p,),
    'dnnl_post_ops_destroy': (_h,),
    'dnnl_post_ops_append_sum': (_h, _f, ctypes.c_int32, _i),
    'dnnl_post_ops_append_eltwise': (_h, _i, _f, _f),
    'dnnl_primitive_desc_query': (_h, _i, _i, _h),
    'dnnl_primitive_desc_destroy': (_h,),
    'dnnl_primitive_create': (_p, _h),
    'dnnl_primitive_execute': (_h, _h, _i, ctypes.POINTER(_ExecArg)),
    'dnnl_primitive_destroy': (_h,),
    'dnnl_reorder_primitive_desc_create': (_p, _h, _h, _h, _h, _h),
    'dnnl_convolution_forward_primitive_desc_create': (
        _p, _h, _i, _i, _h, _h, _h, _h, _dims, _dims, _dims, _dims, _h),
    'dnnl_inner_product_forward_primitive_desc_create': (_p, _h, _i, _h, _h, _h, _h, _h),
    'dnnl_pooling_forward_primitive_desc_create': (
        _p, _h, _i, _i, _h, _h, _dims, _dims, _dims, _dims, _dims, _h),
    'dnnl_batch_normalization_forward_primitive_desc_create': (_p, _h, _i, _h, _h, _f, _u, _h),
    'dnnl_eltwise_forward_primitive_desc_create': (_p, _h, _i, _i, _h, _h, _f, _f, _h),
    'dnnl_softmax_forward_primitive_desc_create': (_p, _h, _i, _i, _h, _h, _i, _h),
    'dnnl_lrn_forward_primitive_desc_create': (
        _p, _h, _i, _i, _h, _h, ctypes.c_int64, _f, _f, _f, _h),
    'dnnl_convolution_backward_data_primitive_desc_create': (
        _p, _h, _i, _h, _h, _h, _dims, _dims, _dims, _dims, _h, _h),
    'dnnl_convolution_backward_weights_primitive_desc_create': (
        _p, _h, _i, _h, _h, _h, _h, _dims, _dims, _dims, _dims, _h, _h),
    'dnnl_inner_product_backward_data_primitive_desc_create': (_p, _h, _h, _h, _h, _h, _h),
    'dnnl_inner_product_backward_weights_primitive_desc_create': (
        _p, _h, _h, _h, _h, _h, _h, _h),
    'dnnl_pooling_backward_primitive_desc_create': (
        _p, _h, _i, _h, _h, _dims, _dims, _dims, _dims, _dims, _h, _h),
    'dnnl_batch_normalization_backward_primitive_desc_create': (
        _p, _h, _i, _h, _h, _h, _f, _u, _h, _h),
    'dnnl_eltwise_backward_primitive_desc_create': (_p, _h, _i, _h, _h, _h, _f, _f, _h, _h),
    'dnnl_softmax_backward_primitive_desc_create': (_p, _h, _i, _h, _h, _h, _i, _h, _h),
    'dnnl_vanilla_rnn_forward_primitive_desc_create': (
        _p, _h, _i, _i, _i) + (_h,) * 7 + (_u, _f, _f, _h),
    'dnnl_lstm_forward_primitive_desc_create': (_p, _h, _i, _i) + (_h,) * 11 + (_u, _h),
    'dnnl_lbr_gru_forward_primitive_desc_create': (_p, _h, _i, _i) + (_h,) * 7 + (_u, _h),
}

# name -> (result type, argument types)
_OTHER_FUNCTIONS = {
    'dnnl_memory_desc_get_size': (ctypes.c_size_t, (_h,)),
    'dnnl_memory_desc_equal': (ctypes.c_int, (_h, _h)),
    'dnnl_primitive_desc_query_md': (ctypes.c_void_p, (_h, _i, _i)),
}


def _check(result, func, args):
    if result != 0:
        raise OneDNNError(func.__name__, result)
    return result


class _Library:
    """The C functions of one loaded libdnnl, its CPU engine, per-thread streams, and the
    libgomp thread control it links against."""

    def __init__(self, cdll: ctypes.CDLL):
        self.cdll = cdll
        for name, argtypes in _STATUS_FUNCTIONS.items():
            fn = _function(cdll, name)
            fn.argtypes, fn.restype, fn.errcheck = argtypes, ctypes.c_int, _check
            setattr(self, name[5:], fn)
        for name, (restype, argtypes) in _OTHER_FUNCTIONS.items():
            fn = _function(cdll, name)
            fn.argtypes, fn.restype = argtypes, restype
            setattr(self, name[5:], fn)
        self.omp_set_num_threads = _optional(cdll, 'omp_set_num_threads', (ctypes.c_int,))
        self.omp_get_max_threads = _optional(cdll, 'omp_get_max_threads', (), ctypes.c_int)
        self.engine = self.new_handle(self.engine_create, _CPU, 0)
        self.threads = threading.local()

    @staticmethod
    def new_handle(create, *args) -> int:
        handle = ctypes.c_void_p()
        create(ctypes.byref(handle), *args)
        return handle.value

    def stream(self) -> int:
        """This thread's stream (in-order CPU streams are cheap; one per thread avoids
        sharing one across the engine's workers)."""
        stream = getattr(self.threads, 'stream', None)
        if stream is None:
            stream = self.new_handle(self.stream_create, self.engine, _IN_ORDER)
            self.threads.stream = stream
        return stream


def _function(cdll, name):
    try:
        return getattr(cdll, name)
    except AttributeError:
        raise EmberError(f'{native.onednn_status()}: the library has no {name}; Ember needs '
                         f'the oneDNN 3.x C API (onednn-cpu-gomp 2023.x)') from None


def _optional(cdll, name, argtypes, restype=None):
    """An OpenMP function of the library's dependencies (libgomp for the gomp wheel; a
    library built on TBB or threadpools has none)."""
    try:
        fn = getattr(cdll, name)
    except AttributeError:
        return None
    fn.argtypes, fn.restype = argtypes, restype
    return fn


_library: _Library | None = None
_library_lock = threading.Lock()


def _lib() -> _Library:
    """The bound library; rebuilt when the backend loaded a different one (after a reset)."""
    cdll = native.onednn()
    if cdll is None:
        raise EmberError(f'oneDNN is not available: {native.onednn_status()}')
    library = _library
    if library is None or library.cdll is not cdll:
        library = _bind(cdll)
    return library


def _bind(cdll) -> _Library:
    global _library
    with _library_lock:
        if _library is None or _library.cdll is not cdll:
            _cache.clear()
            _library = _Library(cdll)
        return _library


def available() -> bool:
    """Whether oneDNN is installed and loads. Raises EmberError when ``MXNET_LIBRARY_PATH``
    names a file that is missing or not oneDNN (a configuration error, not a missing library).

    >>> isinstance(available(), bool)
    True
    """
    return native.onednn() is not None


def status() -> str:
    """One line: the loaded oneDNN and where from, or why none is loaded."""
    return native.onednn_status()


def set_num_threads(count: int) -> None:
    """OpenMP threads of the oneDNN kernels that the calling thread runs.

    OpenMP keeps this count per calling thread, so each engine worker sets its own. The
    current count is read back first (others, e.g. threadpoolctl, may change it too); a call
    that changes nothing costs well under a microsecond.
    """
    library = _lib()
    if library.omp_set_num_threads is not None and library.omp_get_max_threads() != count:
        library.omp_set_num_threads(count)


def num_threads() -> int | None:
    """The OpenMP threads the calling thread's next oneDNN kernel uses (None when the
    library does not run on OpenMP)."""
    library = _lib()
    if library.omp_get_max_threads is None:
        return None
    return library.omp_get_max_threads()


def reset() -> None:
    """Drop the bound library, its engine and every cached primitive."""
    global _library
    with _library_lock:
        _cache.clear()
        _library = None


config.register_reset('backend', reset)


# ----------------------------------------------------------------------------------------------
# Memory descriptors.

class MemoryDesc:
    """A float32 memory descriptor: plain (dims and element strides of a NumPy array) or
    'any' (the primitive chooses). Owns its handle unless it belongs to a primitive
    descriptor (``owner`` keeps that alive)."""

    __slots__ = ('handle', 'dims', 'strides', 'owner', '__weakref__')

    def __init__(self, handle: int, dims: tuple, strides: tuple | None, owner=None):
        self.handle, self.dims, self.strides, self.owner = handle, dims, strides, owner
        if owner is None:
            _release(self, _lib().memory_desc_destroy, handle)

    @classmethod
    def plain(cls, dims, strides) -> MemoryDesc:
        """A descriptor of dims with strides counted in elements."""
        library = _lib()
        handle = library.new_handle(library.memory_desc_create_with_strides, len(dims),
                                    _dims_of(dims), _F32, _dims_of(strides))
        return cls(handle, tuple(dims), tuple(strides))

    @classmethod
    def of(cls, array: np.ndarray, dims=None) -> MemoryDesc:
        """The descriptor of a float32 NumPy array (or view), by its shape and strides."""
        if array.dtype != np.float32:
            raise EmberError(f'oneDNN memory: dtype {array.dtype} is not supported; '
                             f'expected float32')
        return cls.plain(array.shape if dims is None else dims, _element_strides(array))

    @classmethod
    def channel_last(cls, dims) -> MemoryDesc:
        """A dense descriptor of dims (N, C, *spatial) with the channels innermost."""
        return cls.plain(dims, channel_last_strides(dims))

    @classmethod
    def any(cls, dims) -> MemoryDesc:
        """A descriptor that lets the primitive choose its layout."""
        library = _lib()
        handle = library.new_handle(library.memory_desc_create_with_tag, len(dims),
                                    _dims_of(dims), _F32, _FORMAT_ANY)
        return cls(handle, tuple(dims), None)

    @property
    def nbytes(self) -> int:
        """Bytes a buffer of this layout needs (blocked layouts pad)."""
        return _lib().memory_desc_get_size(self.handle)

    def __eq__(self, other) -> bool:
        if not isinstance(other, MemoryDesc):
            return NotImplemented
        return bool(_lib().memory_desc_equal(self.handle, other.handle))

    __hash__ = None

    def __repr__(self):
        layout = 'any' if self.strides is None and self.owner is None else self.strides
        return f'MemoryDesc(dims={self.dims}, strides={layout})'


def channel_last_strides(dims) -> tuple:
    """Element strides of dense dims (N, C, *spatial) with the channels innermost."""
    strides, step = [0] * len(dims), 1
    for axis in [1] + list(range(len(dims) - 1, 1, -1)) + [0]:
        strides[axis] = step
        step *= dims[axis]
    return tuple(strides)


def _element_strides(array) -> tuple:
    """The strides of a float32 array in elements. A dim of size 1 may carry any stride in
    NumPy (even 0): it gets the one a dense layout would give it, so that the descriptor
    matches oneDNN's own dense layouts (RNN weights must be exactly 'ldigo', and a batch of
    one would otherwise be reordered into the very layout it has)."""
    strides = [s // 4 for s in array.strides]
    for axis in range(array.ndim - 1, -1, -1):       # inner dims first
        if array.shape[axis] == 1:
            inner = [strides[j] * array.shape[j] for j in range(axis + 1, array.ndim)]
            strides[axis] = max(inner, default=1)
    return tuple(strides)


def _dims_of(values) -> _Dims:
    dims = _Dims()
    for i, value in enumerate(values):
        dims[i] = value
    return dims


def has_plain_strides(array) -> bool:
    """Whether oneDNN can describe the array: a non-empty float32 NumPy array (not a GPU one)
    with positive, element-aligned strides (NumPy views may have zero or negative ones)."""
    if not isinstance(array, np.ndarray) or array.dtype != np.float32 or array.size == 0:
        return False
    return array.flags.c_contiguous or all(
        s > 0 and s % 4 == 0 for s, n in zip(array.strides, array.shape) if n > 1)


# ----------------------------------------------------------------------------------------------
# Primitives.

@dataclass(frozen=True)
class PostOp:
    """One post-op of a primitive: ('sum', scale) adds the destination's previous contents,
    ('eltwise', algorithm, alpha, beta) applies an element-wise function."""
    kind: str
    algorithm: str = ''
    alpha: float = 0.0
    beta: float = 0.0
    scale: float = 1.0

    @staticmethod
    def sum(scale: float = 1.0) -> PostOp:
        return PostOp('sum', scale=scale)

    @staticmethod
    def activation(algorithm: str, alpha: float = 0.0, beta: float = 0.0) -> PostOp:
        if algorithm not in ELTWISE_ALGORITHMS:
            raise EmberError(f'oneDNN post-op: unknown eltwise algorithm {algorithm!r}; '
                             f'expected one of {", ".join(ELTWISE_ALGORITHMS)}')
        return PostOp('eltwise', algorithm, alpha, beta)


class _Attr:
    """A primitive attribute: user-managed scratchpad (thread-safe with per-thread workspaces)
    and the post-ops."""

    def __init__(self, library: _Library, post_ops=()):
        self.library = library
        self.handle = library.new_handle(library.primitive_attr_create)
        _release(self, library.primitive_attr_destroy, self.handle)
        library.primitive_attr_set_scratchpad_mode(self.handle, _SCRATCHPAD_USER)
        if post_ops:
            self._set_post_ops(post_ops)

    def _set_post_ops(self, post_ops):
        library = self.library
        chain = library.new_handle(library.post_ops_create)
        try:
            for op in post_ops:
                if op.kind == 'sum':
                    library.post_ops_append_sum(chain, op.scale, 0, 0)
                else:
                    library.post_ops_append_eltwise(chain, ELTWISE_ALGORITHMS[op.algorithm],
                                                    op.alpha, op.beta)
            library.primitive_attr_set_post_ops(self.handle, chain)
        finally:
            library.post_ops_destroy(chain)


@dataclass(eq=False)
class _Binding:
    """One execution argument: the caller's layout, the primitive's, and the reorders between
    them (None where the layouts match)."""
    arg: int
    user_md: MemoryDesc
    inner_md: MemoryDesc
    inner_memory: int              # the memory object the primitive executes on
    user_memory: int | None        # a second object on the caller's buffer, when reordering
    reorder: int | None            # user -> inner (inputs) or inner -> user (outputs)
    offset: int = 0                # where the inner buffer sits in the workspace
    is_output: bool = False
    owned: object = None           # the primitive's _Handles, which own what is made later

    def __post_init__(self):
        # caller's address -> the kept copy this input last ran on (_Kept.stage)
        self.kept: dict = {}
        # scaled dimensions -> the reorder that scales as it copies (_ScaledReorder), or None
        # where oneDNN has none for these layouts
        self.scaled: dict = {}
        # the reorder's two arguments never change: only their memory's data handles do
        source, target = self.user_memory, self.inner_memory
        if self.is_output:
            source, target = target, source
        self.reorder_args = (_ExecArg * 2)(_ExecArg(ARG_SRC, source), _ExecArg(ARG_DST, target))


class Primitive:
    """A built primitive that runs on the caller's arrays. ``inputs`` and ``outputs`` map
    argument ids to the caller's descriptors (None: the primitive's own layout, e.g. a
    workspace); ``accumulate`` is the descriptor of the array a sum post-op adds (copied into
    the destination before the run). ``hints`` are forward primitive descriptors a backward
    one was made from, kept until it goes. ``then``, None or an element-wise primitive that
    the caller runs in place on ARG_DST after this one (an activation taken out of the
    post-ops where they are slow)."""

    then: Primitive | None = None

    def __init__(self, pd: int, inputs: dict, outputs: dict, accumulate: MemoryDesc | None = None,
                 hints: tuple = ()):
        library = _lib()
        self.library, self.pd = library, pd
        # owns the handles; descriptors queried from pd refer to it, not to the primitive, so
        # an evicted primitive is freed at once rather than by the cycle collector
        self._owned = _Handles(library, pd, hints)
        self.handle = self._own(library.new_handle(library.primitive_create, pd), 'primitive')
        self.lock = threading.Lock()
        # the Plan whose data handles are set now (a dead reference: none)
        self._last = _NO_PLAN
        self.bindings = [self._bind(arg, md, False) for arg, md in inputs.items()]
        self.outputs = [self._bind(arg, md, True) for arg, md in outputs.items()]
        self.accumulate = self._accumulate(accumulate) if accumulate is not None else None
        if self.accumulate is not None:
            self._dst = next(b for b in self.outputs if b.arg == ARG_DST)
            # an addend at the destination's address is already in place when the destination
            # is written as it is laid out, not reordered
            self._accumulate_in_place = (self._dst.reorder is None
                                         and self.accumulate.user_md == self._dst.user_md)
        self.scratch = self._scratchpad()
        self.workspace_bytes = self._place_buffers()
        memories = [b.inner_memory for b in self.bindings + self.outputs]
        ids = [b.arg for b in self.bindings + self.outputs]
        if self.scratch is not None:
            memories.append(self.scratch.inner_memory)
            ids.append(_ARG_SCRATCHPAD)
        self.args = (_ExecArg * len(ids))(*[_ExecArg(a, m) for a, m in zip(ids, memories)])

    @property
    def implementation(self) -> str:
        """oneDNN's name of the chosen implementation, e.g. 'brgconv:avx2'."""
        return _implementation(self.library, self.pd)

    def inner_md(self, arg: int) -> MemoryDesc:
        """The layout the primitive chose for argument `arg` (owned by the primitive)."""
        handle = self.library.primitive_desc_query_md(self.pd, _QUERY_EXEC_ARG_MD, arg)
        if not handle:
            raise EmberError(f'oneDNN primitive {self.implementation}: no argument {arg}')
        return MemoryDesc(handle, (), None, owner=self._owned)

    @property
    def reorders(self) -> dict:
        """Argument id -> whether its data is reordered between the caller's layout and the
        primitive's."""
        return {b.arg: b.reorder is not None for b in self.bindings + self.outputs}

    def run(self, arrays: dict, accumulate: np.ndarray | None = None,
            versions: dict | None = None, plan: Plan | None = None) -> Plan | None:
        """Execute on `arrays` (argument id -> float32 array laid out as described at build
        time); `accumulate` is what a sum post-op adds to. `versions` maps input argument ids
        to ``(token, scale)``: such an input's reordered copy is kept and reused while its
        address and token, ``((engine variable, version), ...)`` of what it is made from,
        stay the same (weights in inference); `scale`, None or float32 factors shaped like
        the input's leading dimensions (a folded BatchNorm's, per output channel), multiplies
        the input as it is reordered (or first, where oneDNN cannot scale the reorder or the
        input is not reordered).

        Returns a :class:`Plan` of this run where a later run on the same arrays can set the
        same data handles and execute (no reorder of an input or an addend each run), else
        None. Passed back with the same `arrays` and `accumulate`, a plan still current runs
        without working the bindings out again; a graph node's replay does this
        (onednn_provider.Prepared)."""
        library = self.library
        stream = library.stream()
        with self.lock:
            # the workspace holds only reordered arguments and the scratchpad
            base = _workspace(self.workspace_bytes) if self.workspace_bytes else 0
            if plan is not None and plan.base == base and plan.current(versions):
                if self._last() is not plan:
                    set_handle = library.memory_set_data_handle
                    for memory, address in plan.handles:
                        set_handle(memory, address)
                    self._last = weakref.ref(plan)
                self._execute(stream)
                return plan
            self._last = _NO_PLAN
            replayable = True       # every handle this run sets holds for the next one
            handles = []            # (memory, address) this run sets
            kept = []               # (binding, kept copy) of the inputs staged from copies
            prepared = []           # arrays made for this run, alive until it ends
            for binding in self.bindings:
                address = accel.data_address(arrays[binding.arg])
                token, scale = versions.get(binding.arg, _UNVERSIONED) if versions \
                    else _UNVERSIONED
                if token is not None and binding.reorder is not None:
                    _kept.stage(library, stream, binding, arrays[binding.arg], token, scale)
                    copy = binding.kept[address]
                    kept.append((binding, weakref.ref(copy)))
                    handles.append((binding.inner_memory, copy.address))
                    continue
                if scale is not None:
                    # the primitive reads the input as it is laid out: nothing to keep, but
                    # it must read the scaled array, not the caller's
                    prepared.append(_scaled(arrays[binding.arg], scale))
                    address = accel.data_address(prepared[-1])
                    replayable = False
                if binding.reorder is not None:
                    replayable = False
                _stage_in(library, stream, binding, address, base)
                handles.append((binding.inner_memory, address))
            for binding in self.outputs:
                address = accel.data_address(arrays[binding.arg])
                _bind_out(library, binding, address, base)
                if binding.reorder is None:
                    handles.append((binding.inner_memory, address))
                else:
                    handles += [(binding.user_memory, address),
                                (binding.inner_memory, base + binding.offset)]
            if self.accumulate is not None:
                replayable = self._stage_accumulate(stream, accumulate, arrays, base) \
                    and replayable
            if self.scratch is not None:
                library.memory_set_data_handle(self.scratch.inner_memory,
                                               base + self.scratch.offset)
                handles.append((self.scratch.inner_memory, base + self.scratch.offset))
            self._execute(stream)
            if not replayable:
                return None
            plan = Plan(base, tuple(kept), tuple(handles))
            self._last = weakref.ref(plan)
            return plan

    def _execute(self, stream):
        library = self.library
        library.primitive_execute(self.handle, stream, len(self.args), self.args)
        for binding in self.outputs:
            if binding.reorder is not None:
                _execute_reorder(library, stream, binding)

    # -- building ------------------------------------------------------------------------

    def _own(self, handle: int, kind: str) -> int:
        self._owned.handles.append((kind, handle))
        return handle

    def _memory(self, md: MemoryDesc) -> int:
        library = self.library
        return self._own(library.new_handle(library.memory_create, md.handle, library.engine,
                                            None), 'memory')

    def _bind(self, arg: int, user_md: MemoryDesc | None, is_output: bool) -> _Binding:
        inner = self.inner_md(arg)
        inner_memory = self._memory(inner)
        if user_md is None or inner == user_md:
            return _Binding(arg, inner if user_md is None else user_md, inner, inner_memory,
                            None, None)
        source, target = (inner, user_md) if is_output else (user_md, inner)
        return _Binding(arg, user_md, inner, inner_memory, self._memory(user_md),
                        self._reorder(source, target), is_output=is_output,
                        owned=self._owned)

    def _accumulate(self, user_md: MemoryDesc) -> _Binding:
        """How the sum post-op's addend reaches the destination buffer, in its layout."""
        dst = next(b for b in self.outputs if b.arg == ARG_DST)
        return _Binding(ARG_DST, user_md, dst.inner_md, dst.inner_memory,
                        self._memory(user_md), self._reorder(user_md, dst.inner_md))

    def _reorder(self, source: MemoryDesc, target: MemoryDesc) -> int:
        library = self.library
        pd = library.new_handle(library.reorder_primitive_desc_create, source.handle,
                                library.engine, target.handle, library.engine, None)
        try:
            return self._own(library.new_handle(library.primitive_create, pd), 'primitive')
        finally:
            library.primitive_desc_destroy(pd)

    def _scratchpad(self) -> _Binding | None:
        handle = self.library.primitive_desc_query_md(self.pd, _QUERY_SCRATCHPAD_MD, 0)
        md = MemoryDesc(handle, (), None, owner=self._owned) if handle else None
        if md is None or md.nbytes == 0:
            return None
        return _Binding(_ARG_SCRATCHPAD, md, md, self._memory(md), None, None)

    def _place_buffers(self) -> int:
        """Offsets in the workspace of every reordered argument and the scratchpad."""
        staged = [b for b in self.bindings + self.outputs if b.reorder is not None]
        total = 0
        for binding in staged + ([self.scratch] if self.scratch is not None else []):
            binding.offset = total
            total += _round_up(binding.inner_md.nbytes)
        return total

    def _stage_accumulate(self, stream, addend, arrays, base) -> bool:
        """Puts the addend of the sum post-op into the destination; whether it was there."""
        staged, dst = self.accumulate, self._dst
        target = (accel.data_address(arrays[ARG_DST]) if dst.reorder is None
                  else base + dst.offset)
        source = accel.data_address(addend)
        if source == target and self._accumulate_in_place:
            return True     # the addend already is the destination (an in-place residual add)
        self.library.memory_set_data_handle(staged.user_memory, source)
        _execute_reorder(self.library, stream, staged)
        return False


def _implementation(library, pd) -> str:
    text = ctypes.c_char_p()
    library.primitive_desc_query(pd, _QUERY_IMPL_INFO, 0, ctypes.byref(text))
    return text.value.decode()


class _Handles:
    """A primitive descriptor and the primitives and memory objects made from it, destroyed
    together when the last reference goes."""

    def __init__(self, library: _Library, pd: int, hints: tuple = ()):
        self.handles: list = []            # (kind, handle)
        _release(self, _destroy_all, library, pd, self.handles, tuple(hints))


def _destroy_all(library, pd, handles, hints=()):
    for kind, handle in reversed(handles):
        getattr(library, f'{kind}_destroy')(handle)
    library.primitive_desc_destroy(pd)
    for hint in hints:          # after the descriptor that was made from them
        library.primitive_desc_destroy(hint)


def _release(owner, destroy, *args) -> None:
    """Calls ``destroy(*args)`` when `owner` goes, but not at interpreter exit: the engine's
    exit handler still runs the operators queued then (a script may end without waiting for
    its last updates), and weakref.finalize's own exit handler, registered after the engine's,
    would run first and destroy the primitives they use (a segmentation fault)."""
    weakref.finalize(owner, destroy, *args).atexit = False


def _stage_in(library, stream, binding, address, base):
    if binding.reorder is None:
        library.memory_set_data_handle(binding.inner_memory, address)
        return
    library.memory_set_data_handle(binding.user_memory, address)
    library.memory_set_data_handle(binding.inner_memory, base + binding.offset)
    _execute_reorder(library, stream, binding)


class _Copy:
    """A kept reordered copy: weak references to the engine variables it is made from, their
    versions, its layout, its buffer and the aligned address in it, and the bindings that
    find it by the caller's address without a search (:meth:`_Kept.stage`)."""

    __slots__ = ('source', 'variables', 'versions', 'layout', 'buffer', 'address', 'users',
                 '__weakref__')

    def __init__(self, source, variables, layout):
        self.source = source                    # the caller's address
        self.variables = tuple(weakref.ref(v) for v in variables)
        self.versions = None
        self.layout = layout
        self.buffer = np.empty(layout.nbytes + _ALIGN, np.uint8)
        base = accel.data_address(self.buffer)
        self.address = -base % _ALIGN + base
        self.users = weakref.WeakSet()

    def made_from(self, token) -> bool:
        """Whether `token` names this copy's variables at the versions it was made from."""
        made = self.versions
        if made is None or len(token) != len(made):
            return False
        for ref, (var, version), made_version in zip(self.variables, token, made):
            if ref() is not var or version != made_version:
                return False
        return True

    def alive(self) -> bool:
        return all(ref() is not None for ref in self.variables)

    def forget(self) -> None:
        """Out of the bindings' shortcuts: the buffer goes with the last reference."""
        for binding in list(self.users):
            if binding.kept.get(self.source) is self:
                del binding.kept[self.source]


class _Kept:
    """Reordered copies of inputs the caller says are unchanged (weights in inference), for
    the whole process: the caller's address -> its :class:`_Copy` per layout and variables.
    Primitives are shared by layers of one shape and a layer may use several (a measured
    algorithm's trial runs without the residual), so copies are kept per array and layout,
    not per primitive. A binding remembers the copy it last used per address: while that
    copy is current, staging it is a dictionary lookup (about 1 us, against 8 for the
    search, which compares layouts through oneDNN)."""

    def __init__(self):
        self.copies: dict = {}
        self.lock = threading.Lock()

    def stage(self, library, stream, binding, array, token, scale=None):
        """Point the primitive's input at the kept copy of `array`, reordering it again only
        when `token`, ``((engine variable, version), ...)``, is not the one the copy was made
        from. `scale`, when given, multiplies the array as it is reordered (factors over its
        first dimensions: the weight scaled by a folded BatchNorm)."""
        address = accel.data_address(array)
        copy = binding.kept.get(address)
        if copy is not None and copy.made_from(token):
            library.memory_set_data_handle(binding.inner_memory, copy.address)
            return
        variables = tuple(var for var, _ in token)
        versions = tuple(version for _, version in token)
        with self.lock:
            copy = next((c for c in self.copies.get(address, ()) if c.layout == binding.inner_md
                         and tuple(r() for r in c.variables) == variables), None)
            if copy is None:
                self._drop_dead()
                copy = _Copy(address, variables, binding.inner_md)
                self.copies.setdefault(address, []).append(copy)
            fresh = copy.versions != versions
            copy.versions = versions
            binding.kept[address] = copy
            copy.users.add(binding)
            library.memory_set_data_handle(binding.inner_memory, copy.address)
            if fresh:
                self._reorder(library, stream, binding, array, address, scale)

    @staticmethod
    def _reorder(library, stream, binding, array, address, scale):
        scaled = None if scale is None else _ScaledReorder.of(library, binding, scale.ndim)
        source = _scaled(array, scale) if scale is not None and scaled is None else None
        library.memory_set_data_handle(
            binding.user_memory, address if source is None else accel.data_address(source))
        if scaled is None:
            _execute_reorder(library, stream, binding)
            return
        scale = np.ascontiguousarray(scale, np.float32)
        library.memory_set_data_handle(scaled.scale_memory, accel.data_address(scale))
        library.primitive_execute(scaled.handle, stream, 3, scaled.args)

    def _drop_dead(self):
        """Copies of arrays whose variables are gone make room first."""
        self._keep_only(lambda copy: copy.alive())

    def discard(self, token):
        """Forget the copies made from the variables of `token` (their layer runs another
        algorithm)."""
        variables = tuple(var for var, _ in token)
        with self.lock:
            self._keep_only(lambda copy: tuple(r() for r in copy.variables) != variables)

    def _keep_only(self, keep):
        for address in list(self.copies):
            kept = []
            for copy in self.copies[address]:
                if keep(copy):
                    kept.append(copy)
                else:
                    copy.forget()
            if kept:
                self.copies[address] = kept
            else:
                del self.copies[address]

    def nbytes(self) -> int:
        with self.lock:
            return sum(c.buffer.nbytes for copies in self.copies.values() for c in copies)

    def clear(self):
        with self.lock:
            self._keep_only(lambda copy: False)


_kept = _Kept()
_UNVERSIONED = (None, None)     # (token, scale) of an input without a kept copy


def _scaled(array, scale):
    """`array` times `scale`, whose dimensions are the array's first ones."""
    factors = scale.astype(np.float32, copy=False)
    return np.multiply(array, factors.reshape(scale.shape + (1,) * (array.ndim - scale.ndim)))


class _ScaledReorder:
    """A binding's reorder that multiplies its source by factors over the source's first
    `dims` dimensions as it copies (oneDNN's source scales): a weight scaled by a folded
    BatchNorm is read once into its kept copy, with no scaled temporary first."""

    __slots__ = ('handle', 'scale_memory', 'args')

    def __init__(self, library, binding, dims):
        attr = library.new_handle(library.primitive_attr_create)
        try:
            library.primitive_attr_set_scales_mask(attr, ARG_SRC, (1 << dims) - 1)
            pd = library.new_handle(library.reorder_primitive_desc_create,
                                    binding.user_md.handle, library.engine,
                                    binding.inner_md.handle, library.engine, attr)
        finally:
            library.primitive_attr_destroy(attr)
        owned = binding.owned.handles
        try:
            self.handle = library.new_handle(library.primitive_create, pd)
            owned.append(('primitive', self.handle))
        finally:
            library.primitive_desc_destroy(pd)
        count = 1
        for extent in binding.user_md.dims[:dims]:
            count *= extent
        scale_md = MemoryDesc.plain((count,), (1,))
        self.scale_memory = library.new_handle(library.memory_create, scale_md.handle,
                                               library.engine, None)
        owned.append(('memory', self.scale_memory))
        self.args = (_ExecArg * 3)(_ExecArg(ARG_SRC, binding.user_memory),
                                   _ExecArg(ARG_DST, binding.inner_memory),
                                   _ExecArg(_ARG_ATTR_SCALES | ARG_SRC, self.scale_memory))

    @staticmethod
    def of(library, binding, dims):
        """The binding's scaled reorder over `dims` leading dimensions, made on first use;
        None where oneDNN has none for its layouts."""
        if dims not in binding.scaled:
            try:
                binding.scaled[dims] = _ScaledReorder(library, binding, dims)
            except OneDNNError:
                binding.scaled[dims] = None
        return binding.scaled[dims]


class Plan:
    """The data handles one run of a primitive set (Primitive.run returns it): the same arrays
    run again by setting them and executing, as long as the thread's workspace is where it
    was and the kept copies it read still hold the versions asked for."""

    __slots__ = ('base', 'kept', 'handles', '__weakref__')

    def __init__(self, base: int, kept: tuple, handles: tuple):
        self.base = base            # the workspace address the run used
        self.kept = kept            # ((binding, weak reference to its kept copy), ...)
        self.handles = handles      # ((memory, address), ...) in the order the run set them

    def current(self, versions) -> bool:
        """Whether each kept copy still holds what `versions` (as Primitive.run takes it)
        asks of its argument."""
        for binding, ref in self.kept:
            copy = ref()
            arg = binding.arg
            # a copy forgotten since (its layer runs another algorithm) is no binding's
            if copy is None or binding.kept.get(copy.source) is not copy or versions is None \
                    or arg not in versions or not copy.made_from(versions[arg][0]):
                return False
        return True


def _no_plan():
    return None


_NO_PLAN = _no_plan         # stands for a dead weak reference: Primitive._last() is None


def kept_bytes() -> int:
    """Bytes held by reordered copies kept between calls (oneDNN's layouts of weights)."""
    return _kept.nbytes()


def discard_kept(token) -> None:
    """Forget the reordered copies made from the engine variables of `token`,
    ``((variable, version), ...)``, as when their layer runs another algorithm."""
    _kept.discard(token)


def _bind_out(library, binding, address, base):
    if binding.reorder is None:
        library.memory_set_data_handle(binding.inner_memory, address)
        return
    library.memory_set_data_handle(binding.user_memory, address)
    library.memory_set_data_handle(binding.inner_memory, base + binding.offset)


def _execute_reorder(library, stream, binding):
    library.primitive_execute(binding.reorder, stream, 2, binding.reorder_args)


def _round_up(nbytes: int) -> int:
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


_workspaces = threading.local()


def _workspace(nbytes: int) -> int:
    """The address of this thread's workspace of at least `nbytes`, 64-byte aligned; it grows
    and is reused, so reordered copies and scratchpads cost no allocation per call."""
    if getattr(_workspaces, 'nbytes', -1) < nbytes:
        buffer = np.empty(max(nbytes, 1) + _ALIGN, np.uint8)
        base = accel.data_address(buffer)
        _workspaces.buffer, _workspaces.nbytes = buffer, max(nbytes, 1)
        _workspaces.address = (base + _ALIGN - 1) // _ALIGN * _ALIGN
    return _workspaces.address


# ----------------------------------------------------------------------------------------------
# Builders: each returns a Primitive that runs on buffers described by the given descriptors.

def _create_pd(create, *args, attr: _Attr) -> int:
    library = _lib()
    return library.new_handle(create, library.engine, *args, attr.handle)


def _user_or_any(md: MemoryDesc, choose: bool) -> MemoryDesc:
    return MemoryDesc.any(md.dims) if choose else md


def convolution(src: MemoryDesc, weights: MemoryDesc, bias: MemoryDesc | None, dst: MemoryDesc,
                strides, dilates, pad_before, pad_after, post_ops=(), accumulate=None,
                choose_layouts: bool = True, activations_as_given: bool = False) -> Primitive:
    """Forward-inference convolution. Weights are (F, C, *k) or grouped (G, F/G, C/G, *k);
    `dilates` counts like MXNet (1 = dense). With `choose_layouts` oneDNN picks the layouts of
    src, weights and dst (its fast kernels want blocked weights) and the data is reordered;
    `activations_as_given` keeps src and dst as they are where oneDNN implements that (its
    kernels run as fast on channel-last activations, and the stem's blocked output would need
    a scratch copy as large as the output, 100 MB for resnet50 at batch 32); `accumulate`
    describes the addend of a sum post-op."""
    library = _lib()
    attr = _Attr(library, post_ops)
    mds = [_user_or_any(md, choose_layouts) for md in (src, weights, dst)]

    def create(src_md, dst_md):
        return _create_pd(library.convolution_forward_primitive_desc_create, _FORWARD_INFERENCE,
                          _CONVOLUTION_DIRECT, src_md.handle, mds[1].handle,
                          bias.handle if bias is not None else None, dst_md.handle,
                          _dims_of(strides), _dims_of([d - 1 for d in dilates]),
                          _dims_of(pad_before), _dims_of(pad_after), attr=attr)
    pd = None
    if activations_as_given:
        try:
            pd = create(src, dst)
        except OneDNNError as exc:
            if exc.status != UNIMPLEMENTED:
                raise
        if pd is not None and choose_layouts and _implementation(library, pd).startswith('ref'):
            # only the reference kernel takes these layouts (channel-first src with
            # channel-last dst: 2.3 s for alexnet's first layer): reordering is ~1000x faster
            library.primitive_desc_destroy(pd)
            pd = None
    if pd is None:
        pd = create(mds[0], mds[2])
    inputs = {ARG_SRC: src, ARG_WEIGHTS: weights}
    if bias is not None:
        inputs[ARG_BIAS] = bias
    return Primitive(pd, inputs, {ARG_DST: dst}, accumulate)


def inner_product(src: MemoryDesc, weights: MemoryDesc, bias: MemoryDesc | None,
                  dst: MemoryDesc, post_ops=(), choose_layouts: bool = False,
                  choose_weights: bool = False) -> Primitive:
    """Forward-inference inner product: dst (N, H) = src (N, K) weights (H, K)^T + bias. With
    `choose_layouts` oneDNN picks every layout, with `choose_weights` the weights' alone (its
    blocked weights run the brgemm kernel; on plain ones it falls back to a GEMM)."""
    library = _lib()
    attr = _Attr(library, post_ops)
    mds = [_user_or_any(md, choose_layouts or (choose_weights and md is weights))
           for md in (src, weights, dst)]
    pd = _create_pd(library.inner_product_forward_primitive_desc_create, _FORWARD_INFERENCE,
                    mds[0].handle, mds[1].handle, bias.handle if bias is not None else None,
                    mds[2].handle, attr=attr)
    inputs = {ARG_SRC: src, ARG_WEIGHTS: weights}
    if bias is not None:
        inputs[ARG_BIAS] = bias
    return Primitive(pd, inputs, {ARG_DST: dst})


def pooling(src: MemoryDesc, dst: MemoryDesc, algorithm: str, kernel, strides, pad_before,
            pad_after, channel_last: bool = False) -> Primitive:
    """Forward-inference pooling ('max', 'avg_include_padding', 'avg_exclude_padding').
    With `channel_last` it runs on channel-last copies of src and dst (oneDNN's kernels for
    plain channel-first data are several times slower than the reorders)."""
    inner_src, inner_dst = _pooling_layouts(src, dst, channel_last)
    pd = _pooling_pd(_FORWARD_INFERENCE, inner_src, inner_dst, algorithm, kernel, strides,
                     pad_before, pad_after)
    return Primitive(pd, {ARG_SRC: src}, {ARG_DST: dst})


def _pooling_layouts(src, dst, channel_last) -> tuple:
    if not channel_last:
        return src, dst
    return MemoryDesc.channel_last(src.dims), MemoryDesc.channel_last(dst.dims)


def _pooling_pd(prop_kind, src, dst, algorithm, kernel, strides, pad_before, pad_after) -> int:
    library = _lib()
    return _create_pd(library.pooling_forward_primitive_desc_create, prop_kind,
                      POOLING_ALGORITHMS[algorithm], src.handle, dst.handle, _dims_of(strides),
                      _dims_of(kernel), _dims_of([0] * len(kernel)), _dims_of(pad_before),
                      _dims_of(pad_after), attr=_Attr(library))


def batch_norm(src: MemoryDesc, dst: MemoryDesc, epsilon: float, use_scale: bool,
               fuse_relu: bool = False) -> Primitive:
    """Batch normalisation with given mean and variance (global statistics), a shift and,
    with `use_scale`, a scale; `fuse_relu` applies relu to the result."""
    library = _lib()
    flags = _USE_GLOBAL_STATS | _USE_SHIFT | (_USE_SCALE if use_scale else 0) \
        | (_FUSE_RELU if fuse_relu else 0)
    pd = _create_pd(library.batch_normalization_forward_primitive_desc_create,
                    _FORWARD_INFERENCE, src.handle, dst.handle, epsilon, flags,
                    attr=_Attr(library))
    channel = MemoryDesc.plain((src.dims[1],), (1,))
    inputs = {ARG_SRC: src, ARG_MEAN: channel, ARG_VARIANCE: channel, ARG_SHIFT: channel}
    if use_scale:
        inputs[ARG_SCALE] = channel
    return Primitive(pd, inputs, {ARG_DST: dst})


def eltwise(src: MemoryDesc, dst: MemoryDesc, algorithm: str, alpha: float = 0.0,
            beta: float = 0.0) -> Primitive:
    """An element-wise function (see ELTWISE_ALGORITHMS; alpha and beta as oneDNN defines)."""
    library = _lib()
    if algorithm not in ELTWISE_ALGORITHMS:
        raise EmberError(f'oneDNN eltwise: unknown algorithm {algorithm!r}; expected one of '
                         f'{", ".join(ELTWISE_ALGORITHMS)}')
    pd = _create_pd(library.eltwise_forward_primitive_desc_create, _FORWARD_INFERENCE,
                    ELTWISE_ALGORITHMS[algorithm], src.handle, dst.handle, alpha, beta,
                    attr=_Attr(library))
    return Primitive(pd, {ARG_SRC: src}, {ARG_DST: dst})


def softmax(src: MemoryDesc, dst: MemoryDesc, axis: int, log: bool = False) -> Primitive:
    """softmax (or log-softmax) along `axis`."""
    library = _lib()
    pd = _create_pd(library.softmax_forward_primitive_desc_create, _FORWARD_INFERENCE,
                    _SOFTMAX[log], src.handle, dst.handle, axis, attr=_Attr(library))
    return Primitive(pd, {ARG_SRC: src}, {ARG_DST: dst})


def lrn(src: MemoryDesc, dst: MemoryDesc, size: int, alpha: float, beta: float,
        k: float) -> Primitive:
    """Local response normalisation across channels:
    dst = src * (k + alpha / size * sum of src^2 over `size` channels) ** -beta."""
    library = _lib()
    pd = _create_pd(library.lrn_forward_primitive_desc_create, _FORWARD_INFERENCE,
                    _LRN_ACROSS_CHANNELS, src.handle, dst.handle, size, alpha, beta, k,
                    attr=_Attr(library))
    return Primitive(pd, {ARG_SRC: src}, {ARG_DST: dst})


def reorder(src: MemoryDesc, dst: MemoryDesc) -> Primitive:
    """A copy between two layouts of the same dims (run with ARG_SRC and ARG_DST)."""
    library = _lib()
    attr = _Attr(library)       # named: a temporary would be destroyed before the call
    pd = library.new_handle(library.reorder_primitive_desc_create, src.handle, library.engine,
                            dst.handle, library.engine, attr.handle)
    return Primitive(pd, {ARG_SRC: src}, {ARG_DST: dst})


# ----------------------------------------------------------------------------------------------
# Training builders: the forward pass that keeps what the backward one reads, and backward
# primitives, each made with a forward-training descriptor as its hint (kept alive with it).

def _with_hint(make_hint: Callable[[], int], make: Callable[[int], int]) -> tuple:
    """(backward pd, hint pd); the hint is destroyed when the backward pd cannot be made."""
    hint = make_hint()
    try:
        return make(hint), hint
    except BaseException:
        _lib().primitive_desc_destroy(hint)
        raise


def _conv_geometry(strides, dilates, pad_before, pad_after) -> tuple:
    return (_dims_of(strides), _dims_of([d - 1 for d in dilates]), _dims_of(pad_before),
            _dims_of(pad_after))


def _conv_hint(src: MemoryDesc, weights: MemoryDesc, bias: MemoryDesc | None, dst: MemoryDesc,
               geometry) -> int:
    library = _lib()
    return _create_pd(library.convolution_forward_primitive_desc_create, _FORWARD_TRAINING,
                      _CONVOLUTION_DIRECT, src.handle, weights.handle,
                      bias.handle if bias is not None else None, dst.handle, *geometry,
                      attr=_Attr(library))


def _gradient_pd(first: MemoryDesc, second: MemoryDesc, choose: bool, as_given: bool,
                 hint_of: Callable, create: Callable) -> tuple:
    """(pd, hint) of a convolution gradient whose two activation arguments are `first` and
    `second`: ``hint_of(a, b)`` makes the forward hint and ``create(a, b, hint)`` the pd for
    their descriptors a and b. With `as_given` the activations are first kept as they are;
    where oneDNN implements that layout not at all or only by its reference kernel (and
    `choose` lets it pick), oneDNN chooses them as it does without."""
    def make(given):
        a, b = (first, second) if given else [_user_or_any(md, choose) for md in (first, second)]
        return _with_hint(lambda: hint_of(a, b), lambda hint: create(a, b, hint))
    if as_given:
        try:
            pd, hint = make(True)
        except OneDNNError as exc:
            if exc.status != UNIMPLEMENTED:
                raise
        else:
            library = _lib()
            if not (choose and _implementation(library, pd).startswith('ref')):
                return pd, hint
            library.primitive_desc_destroy(pd)
            library.primitive_desc_destroy(hint)
    return make(False)


def convolution_backward_data(diff_src: MemoryDesc, weights: MemoryDesc, diff_dst: MemoryDesc,
                              strides, dilates, pad_before, pad_after,
                              choose_layouts: bool = True,
                              activations_as_given: bool = False) -> Primitive:
    """The data gradient of a convolution (geometry as :func:`convolution`): run with
    ARG_WEIGHTS and ARG_DIFF_DST, writes ARG_DIFF_SRC. `activations_as_given` keeps diff_src
    and diff_dst as they are where oneDNN implements that, as :func:`convolution` does."""
    library = _lib()
    geometry = _conv_geometry(strides, dilates, pad_before, pad_after)
    w = _user_or_any(weights, choose_layouts)
    pd, hint = _gradient_pd(
        diff_src, diff_dst, choose_layouts, activations_as_given,
        lambda src, dst: _conv_hint(src, w, None, dst, geometry),
        lambda src, dst, hint: _create_pd(
            library.convolution_backward_data_primitive_desc_create, _CONVOLUTION_DIRECT,
            src.handle, w.handle, dst.handle, *geometry, hint, attr=_Attr(library)))
    return Primitive(pd, {ARG_WEIGHTS: weights, ARG_DIFF_DST: diff_dst},
                     {ARG_DIFF_SRC: diff_src}, hints=(hint,))


def convolution_backward_weights(src: MemoryDesc, diff_weights: MemoryDesc,
                                 diff_bias: MemoryDesc | None, diff_dst: MemoryDesc, strides,
                                 dilates, pad_before, pad_after,
                                 choose_layouts: bool = True,
                                 activations_as_given: bool = False) -> Primitive:
    """The weight (and bias) gradient of a convolution: run with ARG_SRC and ARG_DIFF_DST,
    writes ARG_DIFF_WEIGHTS (and ARG_DIFF_BIAS). `activations_as_given` keeps src and
    diff_dst as they are where oneDNN implements that, as :func:`convolution` does."""
    library = _lib()
    dw = _user_or_any(diff_weights, choose_layouts)
    db = diff_bias.handle if diff_bias is not None else None
    geometry = _conv_geometry(strides, dilates, pad_before, pad_after)
    pd, hint = _gradient_pd(
        src, diff_dst, choose_layouts, activations_as_given,
        lambda x, dy: _conv_hint(x, dw, diff_bias, dy, geometry),
        lambda x, dy, hint: _create_pd(
            library.convolution_backward_weights_primitive_desc_create, _CONVOLUTION_DIRECT,
            x.handle, dw.handle, db, dy.handle, *geometry, hint, attr=_Attr(library)))
    outputs = {ARG_DIFF_WEIGHTS: diff_weights}
    if diff_bias is not None:
        outputs[ARG_DIFF_BIAS] = diff_bias
    return Primitive(pd, {ARG_SRC: src, ARG_DIFF_DST: diff_dst}, outputs, hints=(hint,))


def _inner_product_hint(src, weights, bias, dst) -> int:
    library = _lib()
    return _create_pd(library.inner_product_forward_primitive_desc_create, _FORWARD_TRAINING,
                      src.handle, weights.handle, bias.handle if bias is not None else None,
                      dst.handle, attr=_Attr(library))


def inner_product_backward_data(diff_src: MemoryDesc, weights: MemoryDesc,
                                diff_dst: MemoryDesc) -> Primitive:
    """diff_src (N, K) = diff_dst (N, H) weights (H, K)."""
    library = _lib()
    pd, hint = _with_hint(
        lambda: _inner_product_hint(diff_src, weights, None, diff_dst),
        lambda hint: _create_pd(library.inner_product_backward_data_primitive_desc_create,
                                diff_src.handle, weights.handle, diff_dst.handle, hint,
                                attr=_Attr(library)))
    return Primitive(pd, {ARG_WEIGHTS: weights, ARG_DIFF_DST: diff_dst},
                     {ARG_DIFF_SRC: diff_src}, hints=(hint,))


def inner_product_backward_weights(src: MemoryDesc, diff_weights: MemoryDesc,
                                   diff_bias: MemoryDesc | None,
                                   diff_dst: MemoryDesc) -> Primitive:
    """diff_weights (H, K) = diff_dst^T src, diff_bias (H,) = diff_dst summed over rows."""
    library = _lib()
    db = diff_bias.handle if diff_bias is not None else None
    pd, hint = _with_hint(
        lambda: _inner_product_hint(src, diff_weights, diff_bias, diff_dst),
        lambda hint: _create_pd(library.inner_product_backward_weights_primitive_desc_create,
                                src.handle, diff_weights.handle, db, diff_dst.handle, hint,
                                attr=_Attr(library)))
    outputs = {ARG_DIFF_WEIGHTS: diff_weights}
    if diff_bias is not None:
        outputs[ARG_DIFF_BIAS] = diff_bias
    return Primitive(pd, {ARG_SRC: src, ARG_DIFF_DST: diff_dst}, outputs, hints=(hint,))


def pooling_training(src: MemoryDesc, dst: MemoryDesc, algorithm: str, kernel, strides,
                     pad_before, pad_after, channel_last: bool = False) -> Primitive:
    """Forward-training pooling: max pooling also writes ARG_WORKSPACE (where each maximum
    came from, in a layout of oneDNN's: pass a buffer of ``inner_md(ARG_WORKSPACE).nbytes``).
    `channel_last` as in :func:`pooling`."""
    inner_src, inner_dst = _pooling_layouts(src, dst, channel_last)
    pd = _pooling_pd(_FORWARD_TRAINING, inner_src, inner_dst, algorithm, kernel, strides,
                     pad_before, pad_after)
    outputs = {ARG_DST: dst}
    if algorithm == 'max':
        outputs[ARG_WORKSPACE] = None
    return Primitive(pd, {ARG_SRC: src}, outputs)


def pooling_backward(diff_src: MemoryDesc, diff_dst: MemoryDesc, algorithm: str, kernel,
                     strides, pad_before, pad_after, channel_last: bool = False) -> Primitive:
    """The data gradient of pooling; max pooling reads the ARG_WORKSPACE of
    :func:`pooling_training` with the same `channel_last`."""
    library = _lib()
    inner_src, inner_dst = _pooling_layouts(diff_src, diff_dst, channel_last)
    geometry = (_dims_of(strides), _dims_of(kernel), _dims_of([0] * len(kernel)),
                _dims_of(pad_before), _dims_of(pad_after))
    pd, hint = _with_hint(
        lambda: _pooling_pd(_FORWARD_TRAINING, inner_src, inner_dst, algorithm, kernel, strides,
                            pad_before, pad_after),
        lambda hint: _create_pd(library.pooling_backward_primitive_desc_create,
                                POOLING_ALGORITHMS[algorithm], inner_src.handle,
                                inner_dst.handle, *geometry, hint, attr=_Attr(library)))
    inputs = {ARG_DIFF_DST: diff_dst}
    if algorithm == 'max':
        inputs[ARG_WORKSPACE] = None
    return Primitive(pd, inputs, {ARG_DIFF_SRC: diff_src}, hints=(hint,))


def _bn_flags(use_scale: bool, global_stats: bool) -> int:
    return _USE_SHIFT | (_USE_SCALE if use_scale else 0) | (_USE_GLOBAL_STATS if global_stats
                                                            else 0)


def _bn_hint(src, dst, epsilon, flags) -> int:
    library = _lib()
    return _create_pd(library.batch_normalization_forward_primitive_desc_create,
                      _FORWARD_TRAINING, src.handle, dst.handle, epsilon, flags,
                      attr=_Attr(library))


def batch_norm_training(src: MemoryDesc, dst: MemoryDesc, epsilon: float,
                        use_scale: bool) -> Primitive:
    """Batch normalisation with the batch's statistics: reads ARG_SRC, ARG_SHIFT (and
    ARG_SCALE), writes ARG_DST and the per-channel ARG_MEAN and (biased) ARG_VARIANCE."""
    pd = _bn_hint(src, dst, epsilon, _bn_flags(use_scale, False))
    channel = MemoryDesc.plain((src.dims[1],), (1,))
    inputs = {ARG_SRC: src, ARG_SHIFT: channel}
    if use_scale:
        inputs[ARG_SCALE] = channel
    return Primitive(pd, inputs, {ARG_DST: dst, ARG_MEAN: channel, ARG_VARIANCE: channel})


def batch_norm_backward(diff_src: MemoryDesc, diff_dst: MemoryDesc, src: MemoryDesc,
                        epsilon: float, use_scale: bool, global_stats: bool) -> Primitive:
    """Gradients of batch normalisation: reads ARG_SRC, ARG_MEAN, ARG_VARIANCE, ARG_DIFF_DST
    (and ARG_SCALE), writes ARG_DIFF_SRC, ARG_DIFF_SHIFT (and ARG_DIFF_SCALE). With
    `global_stats` the statistics are constants, else the batch's own."""
    library = _lib()
    flags = _bn_flags(use_scale, global_stats)
    pd, hint = _with_hint(
        lambda: _bn_hint(src, diff_dst, epsilon, flags),
        lambda hint: _create_pd(
            library.batch_normalization_backward_primitive_desc_create, _BACKWARD,
            diff_src.handle, diff_dst.handle, src.handle, epsilon, flags, hint,
            attr=_Attr(library)))
    channel = MemoryDesc.plain((src.dims[1],), (1,))
    inputs = {ARG_SRC: src, ARG_MEAN: channel, ARG_VARIANCE: channel, ARG_DIFF_DST: diff_dst}
    outputs = {ARG_DIFF_SRC: diff_src, ARG_DIFF_SHIFT: channel}
    if use_scale:
        inputs[ARG_SCALE] = channel
        outputs[ARG_DIFF_SCALE] = channel
    return Primitive(pd, inputs, outputs, hints=(hint,))


def eltwise_backward(diff_src: MemoryDesc, diff_dst: MemoryDesc, data: MemoryDesc,
                     algorithm: str, alpha: float = 0.0, beta: float = 0.0) -> Primitive:
    """The gradient of an element-wise function: reads ARG_DIFF_DST and the forward's input
    (ARG_SRC) or, for the ``*_use_dst_for_bwd`` algorithms, its output (ARG_DST)."""
    library = _lib()
    if algorithm not in ELTWISE_ALGORITHMS:
        raise EmberError(f'oneDNN eltwise: unknown algorithm {algorithm!r}; expected one of '
                         f'{", ".join(ELTWISE_ALGORITHMS)}')
    kind = ELTWISE_ALGORITHMS[algorithm]
    pd, hint = _with_hint(
        lambda: _create_pd(library.eltwise_forward_primitive_desc_create, _FORWARD_TRAINING,
                           kind, data.handle, data.handle, alpha, beta, attr=_Attr(library)),
        lambda hint: _create_pd(library.eltwise_backward_primitive_desc_create, kind,
                                diff_src.handle, diff_dst.handle, data.handle, alpha, beta,
                                hint, attr=_Attr(library)))
    data_arg = ARG_DST if algorithm.endswith('_use_dst_for_bwd') else ARG_SRC
    return Primitive(pd, {ARG_DIFF_DST: diff_dst, data_arg: data}, {ARG_DIFF_SRC: diff_src},
                     hints=(hint,))


def softmax_backward(diff_src: MemoryDesc, diff_dst: MemoryDesc, dst: MemoryDesc, axis: int,
                     log: bool = False) -> Primitive:
    """The gradient of softmax (log-softmax) along `axis` from its output ARG_DST."""
    library = _lib()
    pd, hint = _with_hint(
        lambda: _create_pd(library.softmax_forward_primitive_desc_create, _FORWARD_TRAINING,
                           _SOFTMAX[log], dst.handle, dst.handle, axis, attr=_Attr(library)),
        lambda hint: _create_pd(library.softmax_backward_primitive_desc_create, _SOFTMAX[log],
                                diff_src.handle, diff_dst.handle, dst.handle, axis, hint,
                                attr=_Attr(library)))
    return Primitive(pd, {ARG_DIFF_DST: diff_dst, ARG_DST: dst}, {ARG_DIFF_SRC: diff_src},
                     hints=(hint,))


def rnn_forward(cell: str, src_layer: MemoryDesc, src_iter: MemoryDesc,
                src_iter_c: MemoryDesc | None, weights_layer: MemoryDesc,
                weights_iter: MemoryDesc, bias: MemoryDesc, dst_layer: MemoryDesc,
                dst_iter: MemoryDesc, dst_iter_c: MemoryDesc | None) -> Primitive:
    """Forward-inference recurrent layers (one cell of RNN_CELLS; src_iter_c and dst_iter_c
    for 'lstm' only). Descriptors in oneDNN's order: src_layer (T, N, C), states
    (L, D, N, H), weights_layer (L, D, C, G, H), weights_iter (L, D, H, G, H), bias
    (L, D, G, H) with G + 1 gates for 'lbr_gru', dst_layer (T, N, D * H). D = 2 concatenates
    the directions' outputs."""
    library = _lib()
    direction = _RNN_DIRECTIONS[src_iter.dims[1]]
    common = (src_layer.handle, src_iter.handle)
    tail = (bias.handle, dst_layer.handle, dst_iter.handle)
    attr = _Attr(library)
    if cell == 'lstm':
        pd = _create_pd(library.lstm_forward_primitive_desc_create, _FORWARD_INFERENCE,
                        direction, *common, src_iter_c.handle, weights_layer.handle,
                        weights_iter.handle, None, None, *tail, dst_iter_c.handle, 0, attr=attr)
    elif cell == 'lbr_gru':
        pd = _create_pd(library.lbr_gru_forward_primitive_desc_create, _FORWARD_INFERENCE,
                        direction, *common, weights_layer.handle, weights_iter.handle, *tail, 0,
                        attr=attr)
    else:
        activation = ELTWISE_ALGORITHMS['relu' if cell == 'rnn_relu' else 'tanh']
        pd = _create_pd(library.vanilla_rnn_forward_primitive_desc_create, _FORWARD_INFERENCE,
                        activation, direction, *common, weights_layer.handle,
                        weights_iter.handle, *tail, 0, 0.0, 0.0, attr=attr)
    inputs = {ARG_SRC: src_layer, ARG_SRC_ITER: src_iter, ARG_WEIGHTS: weights_layer,
              ARG_WEIGHTS_ITER: weights_iter, ARG_BIAS: bias}
    outputs = {ARG_DST: dst_layer, ARG_DST_ITER: dst_iter}
    if cell == 'lstm':
        inputs[ARG_SRC_ITER_C], outputs[ARG_DST_ITER_C] = src_iter_c, dst_iter_c
    return Primitive(pd, inputs, outputs)


# ----------------------------------------------------------------------------------------------
# The primitive cache.

class _Cache:
    """Built primitives by key, least recently used evicted beyond MXNET_MKLDNN_CACHE_NUM
    (-1: unbounded, 0: nothing kept). A key whose build oneDNN cannot implement is cached as
    None, so it is not retried on every call."""

    def __init__(self):
        self.entries: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key, build: Callable[[], Primitive]) -> Primitive | None:
        with self.lock:
            if key in self.entries:
                self.entries.move_to_end(key)
                return self.entries[key]
        value = _build_or_none(build)
        limit = config.get('MXNET_MKLDNN_CACHE_NUM')
        with self.lock:
            self.entries[key] = value
            self.entries.move_to_end(key)
            while limit >= 0 and len(self.entries) > limit:
                self.entries.popitem(last=False)
        return value

    def clear(self):
        with self.lock:
            self.entries.clear()


def _build_or_none(build):
    try:
        return build()
    except OneDNNError as exc:
        if exc.status == UNIMPLEMENTED:
            return None
        raise


_cache = _Cache()


def cached(key, build: Callable[[], Primitive]) -> Primitive | None:
    """The primitive cached under `key`, built with `build()` on a miss; None when oneDNN has
    no implementation for it (the caller falls back)."""
    return _cache.get(key, build)


def cache_size() -> int:
    """How many primitives (and remembered unimplemented cases) are cached."""
    return len(_cache.entries)


def clear_cache() -> None:
    """Drop every cached primitive and kept reordered copy."""
    _cache.clear()
    _kept.clear()
