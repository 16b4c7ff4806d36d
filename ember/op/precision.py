"""Reduced precision: how arrays are stored under XLA_USE_BF16 / XLA_DOWNCAST_BF16, and how
float32 values are rounded to bfloat16, float16 or tf32 (to nearest-even, or stochastically
under ``NEURON_RT_STOCHASTIC_ROUNDING_EN``).

Storage. Under ``XLA_USE_BF16`` float32 and float64 arrays are stored as bfloat16 (under
``XLA_DOWNCAST_BF16`` float32 as bfloat16 and float64 as float32) while they keep their dtype
for the user: an array's view has a ``dtype`` and a ``stored`` dtype
(:func:`stored_dtype`). A kernel never sees the stored form: :func:`widened` gives it float32
(float64) copies of such arrays and rounds what it wrote back into storage, so every
operator computes and accumulates at full precision and only what is kept between operators
is narrow. The variables are read once, at the first array.

Stochastic rounding rounds a value up with the probability of its distance from the value
below, so that sums of many small steps keep their expected value where rounding to
nearest-even would stall. The random bits come from a counter-based hash of the seed
(``NEURON_RT_STOCHASTIC_ROUNDING_SEED``), a stream key and the element's index: whoever pushes
a kernel gives it the next key of its program order (:func:`keyed`), so a run rounds alike
whatever the number of threads. A kernel called outside a stream rounds to nearest-even.

>>> import numpy as np
>>> values = np.full(4, 256.5, np.float32)
>>> rounded(values, 'bf16').tolist()                 # to nearest-even: 256.5 -> 256
[256.0, 256.0, 256.0, 256.0]
>>> with keyed_stream(7):
...     sr = rounded(np.full(10000, 256.5, np.float32), 'bf16')
>>> sorted(set(sr.tolist())), bool(256.4 < sr.mean() < 256.6)
([256.0, 258.0], True)
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import zlib

import numpy as np

from ember import config
from ember.base import dtype_of

__all__ = ['stored_dtype', 'storage_map', 'rounded', 'round_into', 'widened',
           'keyed', 'keyed_stream', 'keyed_per_call', 'next_key', 'stochastic', 'rounding_seed',
           'involved', 'scratch_bytes', 'padded', 'PRECISIONS', 'BFLOAT16',
           'ROUNDED', 'WIDE']

BFLOAT16 = dtype_of('bfloat16')
FLOAT16, FLOAT32, FLOAT64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
PRECISIONS = ('bf16', 'fp16', 'tf32')
_LOW = {BFLOAT16: 'bf16', FLOAT16: 'fp16'}
ROUNDED = frozenset(_LOW)                # the dtypes a cast rounds to
WIDE = frozenset((FLOAT32, FLOAT64))     # ... from

# ----------------------------------------------------------------------------------------------
# Storage

_map: dict | None = None
_map_lock = threading.Lock()


def storage_map() -> dict:
    """Logical dtype -> stored dtype, from XLA_USE_BF16 and XLA_DOWNCAST_BF16 (read once)."""
    global _map
    if _map is None:
        with _map_lock:
            if _map is None:
                _map = _read_map()
    return _map


def _read_map() -> dict:
    if config.get('XLA_USE_BF16'):
        return {FLOAT32: BFLOAT16, FLOAT64: BFLOAT16}
    if config.get('XLA_DOWNCAST_BF16'):
        return {FLOAT32: BFLOAT16, FLOAT64: FLOAT32}
    return {}


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """How an array of `dtype` is stored (`dtype` itself unless bf16 storage maps it)."""
    found = (_map if _map is not None else storage_map()).get(dtype)
    return dtype if found is None else found


# ----------------------------------------------------------------------------------------------
# Streams of random bits

_keys = itertools.count(1)
_local = threading.local()


_rounding: tuple | None = None   # (stochastic, seed, involved), read once; overrides reset it


def _read_rounding() -> tuple:
    global _rounding
    chosen = config.get('NEURON_RT_STOCHASTIC_ROUNDING_EN')
    stochastic_now = bool(storage_map()) if chosen is None else chosen
    _rounding = (stochastic_now, config.get('NEURON_RT_STOCHASTIC_ROUNDING_SEED'),
                 stochastic_now or bool(storage_map()))
    return _rounding


def _forget_rounding() -> None:
    global _rounding
    _rounding = None


config.register_reset('rounding', _forget_rounding)


def stochastic() -> bool:
    """Whether casts round stochastically: NEURON_RT_STOCHASTIC_ROUNDING_EN, which when unset
    follows bf16 storage (XLA_USE_BF16, XLA_DOWNCAST_BF16). Read once, since every operator
    push asks (``config.override`` reads it again)."""
    return (_rounding or _read_rounding())[0]


def involved() -> bool:
    """Whether a kernel call may need :func:`widened` or a stream: some dtype is stored
    narrow, or rounding is stochastic (the check of every operator push)."""
    return (_rounding or _read_rounding())[2]


def rounding_seed() -> int:
    """NEURON_RT_STOCHASTIC_ROUNDING_SEED (read once, like :func:`stochastic`)."""
    return (_rounding or _read_rounding())[1]


def next_key() -> int:
    """The next stream key of the process, in the order of the calls."""
    return next(_keys)


class _Stream:
    __slots__ = ('key', 'seed', 'used')

    def __init__(self, key, seed):
        self.key, self.seed, self.used = key, seed, 0

    def draw(self) -> int:
        """A fresh 32-bit key for one rounding of this stream."""
        self.used += 1
        return _mix32(np.array([self.key & 0xFFFFFFFF, self.key >> 32, self.seed, self.used],
                               np.uint32))


class keyed_stream:
    """Roundings inside the block are stochastic, drawn from stream `key` (a context
    manager; the kernels a stream-keyed function calls round stochastically)."""

    def __init__(self, key, seed=None):
        self._stream = _Stream(int(key), rounding_seed() if seed is None else int(seed))

    def __enter__(self):
        self._saved = getattr(_local, 'stream', None)
        _local.stream = self._stream
        return self

    def __exit__(self, *exc):
        _local.stream = self._saved
        return False


def keyed(kernel, key):
    """`kernel` running inside stream `key` with the seed of now: its roundings are
    stochastic and reproducible."""
    seed = rounding_seed()

    def run(attrs, ins, outs, ctx):
        with keyed_stream(key, seed):
            kernel(attrs, ins, outs, ctx)
    return run


def keyed_per_call(kernel, name: str):
    """`kernel` with a stream of its own per call: keys from `name` (a graph node's) and the
    call's number, so a program's roundings do not depend on the order its nodes run in."""
    seed = rounding_seed()
    base = zlib.crc32(name.encode()) << 32
    calls = itertools.count()

    def run(attrs, ins, outs, ctx):
        with keyed_stream(base | (next(calls) & 0xFFFFFFFF), seed):
            kernel(attrs, ins, outs, ctx)
    return run


def _mix32(words: np.ndarray) -> int:
    """One 32-bit hash of a few 32-bit words."""
    h = np.uint32(0x811C9DC5)
    with np.errstate(over='ignore'):
        for word in words:
            h = _fmix32((h ^ word) * np.uint32(0x01000193))
    return int(h)


def _fmix32(z):
    with np.errstate(over='ignore'):
        z = z ^ (z >> np.uint32(16))
        z = z * np.uint32(0x85EBCA6B)
        z = z ^ (z >> np.uint32(13))
        z = z * np.uint32(0xC2B2AE35)
        return z ^ (z >> np.uint32(16))


_CHUNK = 1 << 20     # elements hashed at a time: bounds the scratch of a large cast


def _bits(key: int, start: int, count: int) -> np.ndarray:
    """32 random bits for elements start..start+count of a rounding with `key`."""
    index = np.arange(start, start + count, dtype=np.uint32)
    with np.errstate(over='ignore'):
        index *= np.uint32(0x9E3779B1)
        index += np.uint32(key)
    return _fmix32(index)


# ----------------------------------------------------------------------------------------------
# Rounding

_MANTISSA_DROP = {'bf16': 16, 'tf32': 13}    # low bits of a float32 the format drops
_LARGEST = {'bf16': 0x7F7F0000, 'tf32': 0x7F7FE000}


def rounded(values, precision: str, saturate: bool = False) -> np.ndarray:
    """Float32 `values` rounded to `precision` ('bf16', 'fp16', 'tf32'), as float32:
    stochastically inside a stream (:func:`keyed`), else to nearest-even. With `saturate`
    values past the format's range become its largest finite value instead of infinity."""
    if precision not in PRECISIONS:
        raise ValueError(f'precision {precision!r}: expected one of {", ".join(PRECISIONS)}')
    values = np.ascontiguousarray(values, dtype=np.float32)
    stream = getattr(_local, 'stream', None)
    key = None if stream is None else stream.draw()
    if precision == 'fp16':
        return _to_float16(values, key, saturate).astype(np.float32)
    return _truncated(values, _MANTISSA_DROP[precision], key, saturate, _LARGEST[precision])


def round_into(out, values) -> None:
    """Write float `values` into `out`, rounding where `out` is bfloat16 or float16 (see
    :func:`rounded`); other dtypes are plain copies. Works a chunk at a time: the scratch of a
    rounding stays small whatever the array's size."""
    precision = _LOW.get(out.dtype)
    if precision is None or type(out) is not np.ndarray:
        out[...] = values
        return
    values = np.asarray(values)
    stream = getattr(_local, 'stream', None)
    if stream is None or values.dtype not in (FLOAT32, FLOAT64):
        out[...] = values           # NumPy and ml_dtypes round to nearest-even
        return
    key = stream.draw()
    if values.shape != out.shape or not out.flags.c_contiguous:
        values = np.broadcast_to(values, out.shape)
        target = np.empty(out.shape, out.dtype)
        _round_chunks(target.reshape(-1), np.ascontiguousarray(values).reshape(-1),
                      precision, key)
        out[...] = target
        return
    _round_chunks(out.reshape(-1), np.ascontiguousarray(values).reshape(-1), precision, key)


def _round_chunks(flat_out, flat_values, precision, key):
    for start in range(0, flat_values.size, _CHUNK):
        part = flat_values[start:start + _CHUNK].astype(np.float32, copy=False)
        if precision == 'fp16':
            flat_out[start:start + _CHUNK] = _to_float16(part, key, False, start)
        else:
            wide = _truncated(part, 16, key, False, 0, start)
            flat_out[start:start + _CHUNK].view(np.uint16)[...] = \
                wide.view(np.uint32) >> np.uint32(16)


def _truncated(values, drop, key, saturate, largest, first=0):
    """Float32 values keeping their top 32 - `drop` bits: RNE without `key`, else the
    dropped bits plus random ones (of elements `first`, `first` + 1, ...) decide."""
    bits = np.ascontiguousarray(values, np.float32).reshape(-1).view(np.uint32)
    out = np.empty(bits.shape, np.uint32)
    low = np.uint32((1 << drop) - 1)
    keep = np.uint32(0xFFFFFFFF ^ ((1 << drop) - 1))
    with np.errstate(over='ignore'):
        for start in range(0, bits.size, _CHUNK):
            part = bits[start:start + _CHUNK]
            if key is None:
                up = low >> np.uint32(1)
                bump = up + ((part >> np.uint32(drop)) & np.uint32(1))
            else:
                bump = _bits(key, first + start, part.size) & low
            out[start:start + _CHUNK] = (part + bump) & keep
    result = out.view(np.float32).reshape(np.shape(values))
    nan = np.isnan(values)
    if nan.any():
        result[nan] = np.nan
    if saturate:
        over = np.isinf(result) & np.isfinite(values)
        result[over] = np.copysign(np.uint32(largest).view(np.float32), values[over])
    return result


def _to_float16(values, key, saturate, first=0):
    with np.errstate(over='ignore'):
        nearest = values.astype(np.float16)
    if key is not None:
        nearest = _stochastic_float16(values, nearest, key, first)
    if saturate:
        over = np.isinf(nearest) & np.isfinite(values)
        nearest[over] = np.copysign(np.float16(65504.0), values[over])
    return nearest


def _stochastic_float16(values, nearest, key, first=0):
    """Between the two float16 values around each value, the upper one with probability
    of the value's distance from the lower one."""
    wide = nearest.astype(np.float32)
    above = wide > values
    lower = np.where(above, np.nextafter(nearest, np.float16(-np.inf)), nearest)
    upper = np.where(above, nearest, np.nextafter(nearest, np.float16(np.inf)))
    with np.errstate(invalid='ignore', over='ignore'):
        span = upper.astype(np.float32) - lower.astype(np.float32)
        chance = (values - lower.astype(np.float32)) / span
    draw = np.concatenate([_bits(key, first + s, min(_CHUNK, values.size - s))
                           for s in range(0, values.size, _CHUNK)] or [np.zeros(0, np.uint32)])
    uniform = draw.reshape(values.shape).astype(np.float64) / 2.0 ** 32
    result = np.where(uniform < chance, upper, lower)
    # exact values, NaN and overflow keep what rounding to nearest gave
    keep = (wide == values) | ~np.isfinite(nearest) | ~np.isfinite(values)
    return np.where(keep, nearest, result)


# ----------------------------------------------------------------------------------------------
# Kernels over narrow storage

def widened(kernel, views_in, views_out, mutated=(), accumulates=False, workspace=None,
            sliceable=False):
    """`kernel` for arrays of which some are stored narrower than they read (`views_in`,
    `views_out`: their views, with ``dtype`` and ``stored``): it runs on copies at the read
    dtype, and what it wrote (outputs, and the inputs at `mutated` positions) is rounded
    back into storage. An `accumulates` kernel reads its outputs too (they start from their
    values). Returns `kernel` itself when no array is narrow.

    The copies go into `workspace` (bytes the memory plan set aside for this node, see
    :mod:`ember.passes.plan_memory`) when given and large enough, else into a scratch
    buffer of the calling thread, reused from call to call, so that the process holds one
    operator's full-precision arrays at a time. A `sliceable` kernel (element by element over
    arrays of equal size, see ``OpDef.sliceable``) runs on matching slices of its arrays
    (the k-th of n slices of each), so that its copies stay near :data:`SLICE_BYTES`."""
    wide_in = tuple(v.dtype if v.stored is not v.dtype else None for v in views_in)
    wide_out = tuple(v.dtype if v.stored is not v.dtype else None for v in views_out)
    if not any(wide_in) and not any(wide_out):
        return kernel
    written = tuple(i for i in mutated if wide_in[i] is not None)

    def run(attrs, ins, outs, ctx):
        count = _slices(ins, outs, wide_in, wide_out) if sliceable else 1
        if count == 1:
            whole(attrs, ins, outs, ctx)
            return
        flat_in = [x.reshape(-1) for x in ins]
        flat_out = [o.reshape(-1) for o in outs]
        for k in range(count):
            whole(attrs, [x[k * x.size // count:(k + 1) * x.size // count] for x in flat_in],
                  [o[k * o.size // count:(k + 1) * o.size // count] for o in flat_out], ctx)

    def whole(attrs, ins, outs, ctx):
        needed = sum(padded(x.size * d.itemsize) for x, d in zip(ins, wide_in) if d)
        needed += sum(padded(o.size * d.itemsize) for o, d in zip(outs, wide_out) if d)
        with _scratch(needed, workspace) as take:
            full_in = [x if d is None else take(x, d, True) for x, d in zip(ins, wide_in)]
            full_out = [o if d is None else take(o, d, accumulates)
                        for o, d in zip(outs, wide_out)]
            # a fresh memo: what a kernel keeps there refers to these arrays, which are the
            # scratch's (kept, they would hold every old scratch buffer alive)
            kernel(attrs, full_in, full_out, dataclasses.replace(ctx, memo={}))
            for out, full, d in zip(outs, full_out, wide_out):
                if d is not None:
                    round_into(out, full)
            for i in written:
                round_into(ins[i], full_in[i])
    return run


# Bytes of full-precision copies per slice of a sliceable kernel under bf16 storage: an
# aggregated SGD-with-momentum update of four of resnet50_v1's weights took a 52 MB scratch
# whole and takes at most this in slices.
SLICE_BYTES = 8 << 20


def _slices(ins, outs, wide_in, wide_out):
    """How many slices a sliceable kernel's call takes: its copies' bytes over SLICE_BYTES,
    at most the smallest array's size (every slice of every array holds an element), and 1
    unless every array is a contiguous host array (whose flat slices are views)."""
    arrays = (*ins, *outs)
    if not arrays or not all(type(a) is np.ndarray and a.flags.c_contiguous for a in arrays):
        return 1
    needed = sum(x.size * d.itemsize for x, d in zip(ins, wide_in) if d)
    needed += sum(o.size * d.itemsize for o, d in zip(outs, wide_out) if d)
    return max(1, min(-(-needed // SLICE_BYTES), min(a.size for a in arrays)))


def padded(nbytes):
    return -(-nbytes // 64) * 64


_largest_scratch = 0


def scratch_bytes() -> int:
    """The largest scratch a thread has held for the full-precision copies of one kernel
    call (the memory bf16 storage costs beyond the arrays themselves)."""
    return _largest_scratch


# Scratch bytes a thread keeps between calls: a larger call (an imperative operator on a
# whole batch, say) gets a buffer of its own, freed after it, so that one large call does
# not hold its copies' memory for the rest of the process.
KEPT_SCRATCH = 16 << 20


class _Scratch:
    """A thread's buffer for the full-precision copies of one kernel call: as large as the
    largest call so far needed (up to KEPT_SCRATCH), reused by every call."""

    def __init__(self, buffer=None):
        self.buffer = np.empty(0, np.uint8) if buffer is None else buffer
        self.used = 0
        self.busy = False

    def reserve(self, nbytes):
        global _largest_scratch
        if nbytes > self.buffer.size:
            self.buffer = np.empty(0, np.uint8)       # the old one goes before the new comes
            self.buffer = np.empty(nbytes, np.uint8)
            _largest_scratch = max(_largest_scratch, nbytes)
        self.used = 0

    def take(self, array, dtype, copy):
        nbytes = array.size * dtype.itemsize
        view = self.buffer[self.used:self.used + nbytes].view(dtype).reshape(array.shape)
        self.used += padded(nbytes)
        if copy:
            view[...] = array
        return view


@contextlib.contextmanager
def _scratch(needed, workspace=None):
    global _largest_scratch
    if workspace is not None and workspace.size >= needed:
        yield _Scratch(workspace).take      # the node's own bytes: no other call shares them
        return
    scratch = getattr(_local, 'scratch', None)
    if scratch is None:
        scratch = _local.scratch = _Scratch()
    if scratch.busy:            # a kernel inside a kernel: fresh arrays for the inner one
        yield lambda array, dtype, copy: array.astype(dtype) if copy else \
            np.empty(array.shape, dtype)
        return
    if needed > KEPT_SCRATCH:
        _largest_scratch = max(_largest_scratch, needed)
        scratch.busy = True
        try:
            yield _Scratch(np.empty(needed, np.uint8)).take
        finally:
            scratch.busy = False
        return
    scratch.busy = True
    try:
        scratch.reserve(needed)
        yield scratch.take
    finally:
        scratch.busy = False
