"""MXNet 1.x binary NDArray list files: ``mx.nd.save``, ``mx.nd.load`` and ``.params`` files.

The format: a list header (magic ``0x112``), the array
records (magic ``0xF993FAC9``, storage type, shape, device, dtype flag, raw little-endian data
in C order), then the names, none for a list. Ember writes the same bytes MXNet 1.9 writes, so
checkpoints move both ways.

Two levels:

- NumPy: :func:`save_arrays`, :func:`load_arrays`, :func:`dumps`, :func:`loads`.
- NDArray, as MXNet's ``mx.nd``: :func:`save`, :func:`load`, :func:`load_frombuffer`. On a
  CPU device the dense values are read from the file straight into the new NDArrays' storage
  (through :func:`load_arrays`' `allocate`), and ``load_parameters`` makes those arrays the
  data of parameters that had none: a checkpoint's bytes are copied once, from the file.

dtype flags are mshadow's: 0 float32, 1 float64, 2 float16, 3 uint8, 4 int32, 5 int8, 6 int64,
7 bool (as MXNet 1.9 writes it) and 12 bfloat16. bfloat16 is an Ember extension here: MXNet
1.x writes it only from its bfloat16 builds, and Ember stores ``ml_dtypes.bfloat16`` arrays
under mshadow's flag for it.

An array record with ``ndim == 0`` is MXNet's "none" array (no data follows); it loads as
``None`` and ``None`` saves as one. MXNet 1.x has no 0-d arrays, so a 0-d array cannot be
saved (reshape it to ``(1,)``). MXNet's NumPy-shape records (``npx.set_np()``, magic
``0xF993FACA``) are rejected with a clear error.

Sparse records (storage type 1 row_sparse, 2 csr) hold, after the storage type, the shape of
the stored values, then the shape, device and dtype flag as dense records do, then per
auxiliary array (row_sparse: indices; csr: indptr, indices) its dtype flag and shape, then
the values and the auxiliary arrays. At the NumPy level they are :class:`SparseRecord`; at the
NDArray level ``CSRNDArray`` and ``RowSparseNDArray``. Their parts are checked when loaded
(index ranges and order, indptr), like a dense record's sizes.

Loading never executes anything from the file (no pickle) and checks every size against the
bytes left in the file before allocating, so a corrupt or hostile file raises
:class:`~ember.base.EmberError` naming the file, the offset and what was wrong.

>>> import numpy as np
>>> blob = dumps({'w': np.arange(3, dtype='float32')})
>>> len(blob)
85
>>> loads(blob)
{'w': array([0., 1., 2.], dtype=float32)}
"""
from __future__ import annotations

import io
import os
import struct
import sys
from dataclasses import dataclass

import numpy as np

from ember.base import EmberError, dtype_of, prod
from ember.device import current_device
from ember.ndarray.creation import array, empty
from ember.ndarray.ndarray import NDArray
from ember.op import sparse as _sparse

__all__ = ['save_arrays', 'load_arrays', 'dumps', 'loads', 'save', 'load', 'load_frombuffer',
           'SparseRecord']

LIST_MAGIC = 0x112
ARRAY_MAGIC = 0xF993FAC9        # version 2, MXNet 1.x legacy shapes
NP_SHAPE_MAGIC = 0xF993FACA     # version 3, written under npx.set_np()
V1_MAGIC = 0xF993FAC8           # version 1, before MXNet 1.0
MAX_NDIM = 32
CPU_TYPE_ID = 1
DEVICE_TYPES = {1: 'cpu', 2: 'gpu', 3: 'cpu_pinned', 5: 'cpu_shared'}
SPARSE_TYPES = {1: 'row_sparse', 2: 'csr'}
SPARSE_NUMBERS = {name: number for number, name in SPARSE_TYPES.items()}
FLAG_NAMES = {0: 'float32', 1: 'float64', 2: 'float16', 3: 'uint8', 4: 'int32', 5: 'int8',
              6: 'int64', 7: 'bool', 12: 'bfloat16'}
NAME_FLAGS = {name: flag for flag, name in FLAG_NAMES.items()}
_SMALLEST_RECORD = 12           # magic, storage type and ndim of a none array
_BIG_ENDIAN_HOST = sys.byteorder != 'little'



@dataclass(frozen=True)
class SparseRecord:
    """A sparse array at the NumPy level: `stype` 'row_sparse' (rows `indices` hold `data`)
    or 'csr' (`data`, `indices`, `indptr` of a matrix), of dense shape `shape`.

    >>> rec = SparseRecord('row_sparse', (4, 2), np.ones((1, 2), 'float32'), np.array([3]))
    >>> loads(dumps([rec]))[0].dense()[3].tolist()
    [1.0, 1.0]
    """
    stype: str
    shape: tuple
    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray | None = None

    def aux(self) -> tuple:
        """The auxiliary arrays in MXNet's order (csr: indptr, indices)."""
        if self.stype == 'csr':
            return (self.indptr, self.indices)
        return (self.indices,)

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape, self.data.dtype)
        if self.stype == 'csr':
            rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
            out[rows, self.indices] = self.data
        else:
            out[self.indices] = self.data
        return out


# ----------------------------------------------------------------------------------------------
# NumPy level.

def save_arrays(path_or_file, data) -> None:
    """Write NumPy arrays in MXNet's list format.

    ``data`` is an array, a list of arrays or a dict ``name -> array`` (kept in order); an entry
    may be ``None`` (MXNet's none array). ``path_or_file`` is a path or a binary file object.

    >>> import io, numpy as np
    >>> buf = io.BytesIO()
    >>> save_arrays(buf, [np.ones((2, 2), 'float16')])
    >>> load_arrays(io.BytesIO(buf.getvalue()))[0].dtype
    dtype('float16')
    """
    names, arrays = _split_entries(data)
    _save(path_or_file, names, arrays, [(CPU_TYPE_ID, 0)] * len(arrays))


def load_arrays(path_or_file, allocate=None) -> list | dict:
    """Read a list file: a list of NumPy arrays, or a dict when the file names them.
    `allocate(shape, dtype)`, where given, may return ``(array, bytes)`` for a dense array:
    the file's bytes are read into `bytes` (a writable uint8 view of the array's memory) and
    `array` stands in the result; None reads into a NumPy array as without it.

    >>> import io, numpy as np
    >>> buf = io.BytesIO()
    >>> save_arrays(buf, {'b': np.array([1.5, -2.0])})
    >>> load_arrays(io.BytesIO(buf.getvalue()))
    {'b': array([ 1.5, -2. ])}
    """
    if _is_path(path_or_file):
        with open(path_or_file, 'rb') as stream:
            return _Reader(stream, os.fspath(path_or_file), allocate).read_file()
    return _Reader(path_or_file, _stream_name(path_or_file), allocate).read_file()


def dumps(data) -> bytes:
    """The bytes :func:`save_arrays` writes for ``data``.

    >>> dumps([]).hex(' ', 8)
    '1201000000000000 0000000000000000 0000000000000000 0000000000000000'
    """
    buf = io.BytesIO()
    save_arrays(buf, data)
    return buf.getvalue()


def loads(buf, allocate=None) -> list | dict:
    """Read a list file from bytes (or a bytearray or memoryview); `allocate` as for
    :func:`load_arrays`.

    >>> import numpy as np
    >>> loads(dumps([np.array([[1, 2, 3]], 'uint8')]))
    [array([[1, 2, 3]], dtype=uint8)]
    """
    return _Reader(io.BytesIO(buf), '<bytes>', allocate).read_file()


# ----------------------------------------------------------------------------------------------
# NDArray level (MXNet's mx.nd.save / mx.nd.load).

def save(fname, data) -> None:
    """Save an NDArray, a list of NDArrays or a dict ``str -> NDArray`` (``mx.nd.save``).

    The file records each array's device as MXNet does; :func:`load` ignores it.

    >>> import io
    >>> from ember.ndarray import array
    >>> buf = io.BytesIO()
    >>> save(buf, {'w': array([1, 2])})
    >>> load_frombuffer(buf.getvalue())['w'].asnumpy()
    array([1., 2.], dtype=float32)
    """
    names, values = _ndarray_entries(data)
    arrays = [None if value is None else _host_record(value) for value in values]
    _save(fname, names, arrays, [_device_record(value) for value in values])


def _host_record(array):
    """A dense NDArray's values, or a sparse one's SparseRecord."""
    if array.stype == 'default':
        return array.asnumpy()
    parts = {'data': array.data.asnumpy(), 'indices': array.indices.asnumpy()}
    if array.stype == 'csr':
        parts['indptr'] = array.indptr.asnumpy()
    return SparseRecord(array.stype, tuple(array.shape), **parts)


def _ndarray_entries(data):
    """(names, NDArrays) with the checks and errors of MXNet's mx.nd.save."""
    accepted = 'save accepts an NDArray, a dict str -> NDArray or a list of NDArrays'
    if isinstance(data, NDArray):
        data = [data]
    if isinstance(data, dict):
        names, values = list(data), list(data.values())
        if any(not isinstance(name, str) for name in names):
            raise TypeError(f'{accepted}; got a key of type {_type_names(names, str)}')
    elif isinstance(data, (list, tuple)):
        names, values = [], list(data)
    else:
        raise ValueError(f'{accepted}; got {type(data).__name__}')
    bad = [value for value in values if value is not None and not isinstance(value, NDArray)]
    if bad:
        raise TypeError(f'{accepted}; got an element of type {type(bad[0]).__name__}')
    return names, values


def load(fname) -> list | dict:
    """Load a list file as NDArrays on the current device (``mx.nd.load``).

    Returns a list, or a dict when the file names its arrays (``.params`` files do).

    >>> import io, numpy as np
    >>> buf = io.BytesIO(dumps([np.arange(4, dtype='int32')]))
    >>> load(buf)[0].asnumpy()
    array([0, 1, 2, 3], dtype=int32)
    """
    device = current_device()
    return _to_ndarrays(load_arrays(fname, _allocator(device)), device)


def load_frombuffer(buf) -> list | dict:
    """Load NDArrays from the bytes of a list file (``mx.nd.load_frombuffer``).

    >>> import numpy as np
    >>> load_frombuffer(dumps({'x': np.zeros(2, 'float64')}))['x'].asnumpy().dtype
    dtype('float64')
    """
    device = current_device()
    return _to_ndarrays(loads(buf, _allocator(device)), device)


def _allocator(device):
    """Dense arrays read straight into new NDArrays on `device` where their storage is host
    memory of the file's dtype: a second copy of every value (and its page faults) saved.
    Elsewhere (a GPU, bf16 storage) the values are read into NumPy and copied."""
    if device.device_type != 'cpu':
        return None
    narrow = set()      # dtypes stored otherwise here (bf16 storage): read as NumPy

    def allocate(shape, dtype):
        if dtype in narrow:
            return None
        result = empty(shape, device, dtype)
        raw = result._data()
        if type(raw) is not np.ndarray or raw.dtype != dtype or not raw.flags.c_contiguous:
            narrow.add(dtype)
            return None
        return result, raw.reshape(-1).view(np.uint8)
    return allocate


def _to_ndarrays(loaded, device):
    from ember.ndarray import sparse

    def convert(value):
        if isinstance(value, NDArray):
            return value
        if isinstance(value, SparseRecord):
            make = sparse.csr_matrix if value.stype == 'csr' else sparse.row_sparse_array
            parts = (value.data, value.indices) + ((value.indptr,) if value.indptr is not None
                                                   else ())
            return make(parts, shape=value.shape, ctx=device, dtype=value.data.dtype)
        return None if value is None else array(value, ctx=device, dtype=value.dtype)
    if isinstance(loaded, dict):
        return {name: convert(value) for name, value in loaded.items()}
    return [convert(value) for value in loaded]


def _device_record(value):
    device = getattr(value, 'context', None)
    if device is None:
        return CPU_TYPE_ID, 0
    return device.device_typeid, device.device_id


# ----------------------------------------------------------------------------------------------
# Writing.

def _split_entries(data):
    """(names, arrays) from an array, a list of arrays or a dict name -> array."""
    if data is None or isinstance(data, np.ndarray):
        return [], [data]
    if isinstance(data, dict):
        names = list(data)
        if any(not isinstance(name, str) for name in names):
            raise TypeError('array names must be str; got a key of type '
                            f'{_type_names(names, str)}')
        return names, list(data.values())
    if isinstance(data, (list, tuple)):
        return [], list(data)
    raise TypeError('expected a NumPy array, a list of arrays or a dict str -> array; got '
                    f'{type(data).__name__}')


def _type_names(items, expected):
    return next(type(item).__name__ for item in items if not isinstance(item, expected))


def _prepare(position, value):
    """(dtype flag, C-contiguous native array) to write, None for a none array, or for a
    sparse record (flag, values, storage type, shape, aux arrays)."""
    if value is None:
        return None
    if isinstance(value, SparseRecord):
        flag, data = _prepare(position, value.data)
        aux = tuple(np.ascontiguousarray(a, dtype=np.int64) for a in value.aux())
        return flag, data, value.stype, tuple(value.shape), aux
    if not isinstance(value, np.ndarray):
        raise TypeError(f'entry {position}: expected a NumPy array or None; got '
                        f'{type(value).__name__}')
    flag = NAME_FLAGS.get(value.dtype.name)
    if flag is None or value.dtype.fields is not None:
        raise EmberError(f'entry {position}: dtype {value.dtype} cannot be stored in an MXNet '
                         f'list file; supported: {", ".join(NAME_FLAGS)}')
    if value.ndim == 0:
        raise EmberError(f'entry {position}: a 0-d array cannot be stored (MXNet 1.x reads '
                         'ndim 0 as a none array); reshape it to (1,)')
    if value.ndim > MAX_NDIM:
        raise EmberError(f'entry {position}: {value.ndim} dimensions; at most {MAX_NDIM} fit')
    return flag, np.ascontiguousarray(value, dtype=dtype_of(value.dtype.name))


def _save(path_or_file, names, arrays, devices):
    labels = names or range(len(arrays))
    prepared = [_prepare(label, value) for label, value in zip(labels, arrays)]
    encoded = [name.encode('utf-8') for name in names]
    if _is_path(path_or_file):
        with open(path_or_file, 'wb') as stream:
            _write(stream, prepared, devices, encoded)
    else:
        _write(path_or_file, prepared, devices, encoded)


def _write(stream, prepared, devices, encoded_names):
    stream.write(struct.pack('<QQQ', LIST_MAGIC, 0, len(prepared)))
    for item, device in zip(prepared, devices):
        _write_array(stream, item, device)
    stream.write(struct.pack('<Q', len(encoded_names)))
    for name in encoded_names:
        stream.write(struct.pack('<Q', len(name)))
        stream.write(name)


def _write_array(stream, item, device):
    if item is None:
        stream.write(struct.pack('<IiI', ARRAY_MAGIC, 0, 0))
        return
    if len(item) == 5:
        _write_sparse(stream, item, device)
        return
    flag, array = item
    stream.write(struct.pack(f'<IiI{array.ndim}q', ARRAY_MAGIC, 0, array.ndim, *array.shape))
    stream.write(struct.pack('<iii', device[0], device[1], flag))
    if _BIG_ENDIAN_HOST:
        array = array.byteswap()
    if array.size:
        stream.write(memoryview(array.reshape(-1).view(np.uint8)))


def _write_sparse(stream, item, device):
    flag, data, stype, shape, aux = item
    stream.write(struct.pack('<Ii', ARRAY_MAGIC, SPARSE_NUMBERS[stype]))
    for dims in (data.shape, shape):
        stream.write(struct.pack(f'<I{len(dims)}q', len(dims), *dims))
    stream.write(struct.pack('<iii', device[0], device[1], flag))
    for part in aux:
        stream.write(struct.pack(f'<iI{part.ndim}q', NAME_FLAGS['int64'], part.ndim,
                                 *part.shape))
    for part in (data, *aux):
        if _BIG_ENDIAN_HOST:
            part = part.byteswap()
        if part.size:
            stream.write(memoryview(part.reshape(-1).view(np.uint8)))


# ----------------------------------------------------------------------------------------------
# Reading.

def _is_path(target):
    return isinstance(target, (str, bytes, os.PathLike))


def _stream_name(stream):
    name = getattr(stream, 'name', None)
    return name if isinstance(name, str) else '<stream>'


def _bytes_left(stream):
    """Bytes from the current position to the end, or None for a stream that cannot seek."""
    seekable = getattr(stream, 'seekable', None)
    if seekable is None or not seekable():
        return None
    position = stream.tell()
    end = stream.seek(0, io.SEEK_END)
    stream.seek(position)
    return end - position


class _Reader:
    """Reads one list file, checking every size against the bytes left before it allocates."""

    def __init__(self, stream, name, allocate=None):
        self.name = name
        self.allocate = allocate    # load_arrays' hook for dense arrays
        self.offset = 0
        self.left = _bytes_left(stream)
        if self.left is None:
            # A pipe or socket: its length is only known once read, and it is bounded by it.
            stream = io.BytesIO(stream.read())
            self.left = len(stream.getbuffer())
        self.stream = stream

    def error(self, what, offset=None):
        at = self.offset if offset is None else offset
        return EmberError(f'{self.name}: offset {at}: {what}')

    def need(self, nbytes, what):
        if nbytes > self.left:
            raise self.error(f'truncated file: {what} needs {nbytes} bytes, {self.left} left')

    def take(self, nbytes, what):
        self.need(nbytes, what)
        data = self.stream.read(nbytes)
        if len(data) != nbytes:
            raise self.error(f'{what}: the file ended early (did it change while reading?)')
        self.offset += nbytes
        self.left -= nbytes
        return data

    def unpack(self, fmt, what):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))

    def read_file(self):
        magic, = self.unpack('<Q', 'list magic')
        if magic != LIST_MAGIC:
            raise self.error(f'not an MXNet NDArray list file: magic {magic:#x}, expected '
                             f'{LIST_MAGIC:#x}', offset=0)
        self.unpack('<Q', 'reserved field')     # MXNet writes 0 and never checks it
        arrays = [self.read_array(index) for index in range(self.read_count())]
        names = self.read_names(len(arrays))
        if self.left:
            raise self.error(f'{self.left} unexpected bytes after the end of the list')
        return dict(zip(names, arrays)) if names else arrays

    def read_count(self):
        count, = self.unpack('<Q', 'array count')
        if count * _SMALLEST_RECORD > self.left:
            raise self.error(f'the file claims {count} arrays but only {self.left} bytes follow',
                             offset=self.offset - 8)
        return count

    def read_array(self, index):
        start = self.offset
        magic, storage, ndim = self.unpack('<IiI', f'array {index} header')
        self.check_array_magic(index, magic, start)
        if storage in SPARSE_TYPES:
            return self.read_sparse(index, SPARSE_TYPES[storage], ndim)
        if storage != 0:
            raise self.error(f'array {index}: unknown storage type {storage}, expected 0 '
                             '(dense), 1 (row_sparse) or 2 (csr)', offset=start + 4)
        if ndim > MAX_NDIM:
            raise self.error(f'array {index}: ndim {ndim} is impossible; at most {MAX_NDIM}',
                             offset=start + 8)
        if ndim == 0:
            return None
        return self.read_dense(index, self.read_shape(index, ndim))

    def check_array_magic(self, index, magic, start):
        if magic == ARRAY_MAGIC:
            return
        if magic == NP_SHAPE_MAGIC:
            what = "MXNet's NumPy-shape format (written under npx.set_np()), not supported"
        elif magic == V1_MAGIC:
            what = "MXNet's pre-1.0 array format, not supported"
        else:
            what = 'not an array record'
        raise self.error(f'array {index}: magic {magic:#x}: {what}; expected '
                         f'{ARRAY_MAGIC:#x}', offset=start)

    def read_sparse(self, index, stype, stored_ndim):
        """A sparse record after its storage type (`stored_ndim`: the values' ndim)."""
        what = f'array {index} ({stype})'
        stored = self.read_shape(index, self.checked_ndim(index, stored_ndim))
        ndim, = self.unpack('<I', f'{what} ndim')
        shape = self.read_shape(index, self.checked_ndim(index, ndim))
        device_type, _, flag = self.unpack('<iii', f'{what} device and dtype')
        if device_type not in DEVICE_TYPES or flag not in FLAG_NAMES:
            raise self.error(f'{what}: unknown device type {device_type} or dtype flag {flag}')
        aux_shapes = [self.read_aux_header(what, k) for k in range(2 if stype == 'csr' else 1)]
        data = self.read_dense_data(index, stored, dtype_of(FLAG_NAMES[flag]))
        aux = [self.read_dense_data(index, dims, np.dtype(np.int64)) for dims in aux_shapes]
        return self.checked_record(what, stype, shape, data, aux)

    def read_aux_header(self, what, k):
        flag, ndim = self.unpack('<iI', f'{what} auxiliary array {k} header')
        if flag != NAME_FLAGS['int64'] or ndim != 1:
            raise self.error(f'{what}: auxiliary array {k} has dtype flag {flag} and ndim '
                             f'{ndim}; expected int64 (6) indices of ndim 1')
        return self.read_shape(k, 1)

    def read_dense_data(self, index, shape, dtype):
        nbytes = prod(shape) * dtype.itemsize
        self.need(nbytes, f'array {index} data ({dtype.name}, shape {shape})')
        return self.read_data(index, shape, dtype, nbytes)

    def checked_ndim(self, index, ndim):
        if not 0 < ndim <= MAX_NDIM:
            raise self.error(f'array {index}: ndim {ndim} is impossible for a sparse array')
        return ndim

    def checked_record(self, what, stype, shape, data, aux):
        try:
            if stype == 'csr':
                _sparse.check_csr(what, shape, data, aux[1], aux[0])
                return SparseRecord(stype, shape, data, aux[1], aux[0])
            _sparse.check_row_sparse(what, shape, data, aux[0])
        except EmberError as exc:
            raise self.error(str(exc)) from None
        return SparseRecord(stype, shape, data, aux[0])

    def read_shape(self, index, ndim):
        start = self.offset
        shape = self.unpack(f'<{ndim}q', f'array {index} shape')
        if any(dim < 0 for dim in shape):
            raise self.error(f'array {index}: shape {shape} has a negative dimension',
                             offset=start)
        return shape

    def read_dense(self, index, shape):
        start = self.offset
        device_type, _, flag = self.unpack('<iii', f'array {index} device and dtype')
        if device_type not in DEVICE_TYPES:
            raise self.error(f'array {index}: unknown device type {device_type}, expected one '
                             f'of {DEVICE_TYPES}', offset=start)
        if flag not in FLAG_NAMES:
            raise self.error(f'array {index}: unknown dtype flag {flag}, expected one of '
                             f'{FLAG_NAMES}', offset=start + 8)
        dtype = dtype_of(FLAG_NAMES[flag])
        if prod(dim for dim in shape if dim) * dtype.itemsize > sys.maxsize:
            # Even an empty array cannot have such a shape in NumPy.
            raise self.error(f'array {index}: shape {shape} of {dtype.name} is impossible',
                             offset=start - 8 * len(shape))
        nbytes = prod(shape) * dtype.itemsize
        self.need(nbytes, f'array {index} data ({dtype.name}, shape {shape})')
        made = None
        if self.allocate is not None and nbytes and dtype.name != 'bool' \
                and not _BIG_ENDIAN_HOST:
            made = self.allocate(shape, dtype)
        if made is None:
            return self.read_data(index, shape, dtype, nbytes)
        result, target = made
        self.read_into(target, f'array {index} data')
        return result

    def read_data(self, index, shape, dtype, nbytes):
        if dtype.name == 'bool':
            # Bytes other than 0 and 1 are not valid NumPy booleans.
            raw = np.frombuffer(self.take(nbytes, f'array {index} data'), np.uint8)
            return (raw != 0).reshape(shape)
        array = np.empty(shape, dtype)
        if nbytes:
            self.read_into(array.reshape(-1).view(np.uint8), f'array {index} data')
        return array.byteswap() if _BIG_ENDIAN_HOST else array

    def read_into(self, target, what):
        readinto = getattr(self.stream, 'readinto', None)
        if readinto is None:
            target[:] = np.frombuffer(self.take(len(target), what), np.uint8)
            return
        got = readinto(memoryview(target))
        if got != len(target):
            raise self.error(f'{what}: the file ended early (did it change while reading?)')
        self.offset += got
        self.left -= got

    def read_names(self, count):
        start = self.offset
        name_count, = self.unpack('<Q', 'name count')
        if name_count not in (0, count):
            expected = f'0 or {count}' if count else '0'
            raise self.error(f'{name_count} names for {count} arrays; expected {expected}',
                             offset=start)
        names = [self.read_name(index) for index in range(name_count)]
        if len(set(names)) != len(names):
            duplicate = next(name for name in names if names.count(name) > 1)
            raise self.error(f'name {duplicate!r} appears more than once', offset=start)
        return names

    def read_name(self, index):
        length, = self.unpack('<Q', f'name {index} length')
        start = self.offset
        raw = self.take(length, f'name {index}')
        try:
            return raw.decode('utf-8')
        except UnicodeDecodeError as exc:
            raise self.error(f'name {index} is not valid UTF-8 ({exc.reason})',
                             offset=start) from None
