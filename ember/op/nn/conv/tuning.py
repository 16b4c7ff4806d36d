"""The convolution subsystem's tuning values: one frozen record, read where they apply.

Each value is a measured trade-off, not a setting: the comment says why it is what it is and
names the benchmark that shows it (its figures are in ``benchmarks/README.md``). Tests and
benchmarks that need another value replace the record for a while (:func:`tuned`); the code
reads ``tuning.TUNING`` at each use, so the replacement applies everywhere at once.

>>> from ember.op.nn.conv import tuning
>>> with tuning.tuned(pointwise_depth=32):
...     tuning.TUNING.pointwise_depth
32
>>> tuning.TUNING.pointwise_depth
256
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

__all__ = ['ConvTuning', 'TUNING', 'tuned']


# eq=False: hashed by identity, so that a cache keyed by the record sees a replaced one as new
@dataclass(frozen=True, eq=False)
class ConvTuning:
    # -- choosing an algorithm (algorithms.py) ------------------------------------------------
    # Below this many FLOPs a call is too short to time reliably; the rule decides.
    measure_min_flops: int = 2_000_000
    # Candidates are timed in rounds (one call each), each keeping its best: at least this
    # many rounds, up to measure_max_rounds while all took under measure_seconds; one slow call
    # decides a small layer's choice otherwise (conv_algos.py --end-to-end).
    measure_rounds: int = 2
    measure_max_rounds: int = 10
    measure_seconds: float = 0.05
    # A NumPy or compiled algorithm must beat oneDNN by this fraction of its time: timed alone
    # it does not pay for switching thread pools in a network (compare.py resnet50_v1:8).
    switch_margin: float = 0.1
    # Gradients take no margin: their compiled algorithms run on oneDNN's OpenMP team, and in
    # a training step gain more than measurement shows (compare.py --train, conv_gradients.py).
    gradient_switch_margin: float = 0.0
    # Measurement (tuning mode 1) tries an algorithm that keeps memory between calls only where
    # that is at most kept_always bytes or kept_per_output times one output: past both a layer
    # is large in weights and small in space, little time for much memory (compare.py RSS).
    kept_always: int = 8 << 20
    kept_per_output: int = 8
    # The NumPy rule takes Winograd F(2x2) from this many 2x2 output tiles in the batch (it loses
    # to im2col + GEMM below), with transformed weights of at most winograd2_max_weight_bytes
    # (leaving room for tiles in the workspace) (conv_algos.py).
    winograd2_min_tiles: int = 100
    winograd2_max_weight_bytes: int = 8 << 20

    # -- kept weights (kept.py) ---------------------------------------------------------------
    # Bytes of transformed and packed weights all inference layers may keep; past it a layer
    # transforms into scratch on every call. Peak RSS against speed (compare.py resnet152_v1:8).
    kept_budget: int = 96 << 20
    # ... or this share of the variables of the largest graph a convolution ran in, where more:
    # a model whose dense layers hold most of its weights has room (compare.py vgg16:1).
    kept_share: float = 0.4

    # -- the operator (convolution.py) --------------------------------------------------------
    # The most scratch (MB) one call lowers a batch in, whatever its workspace attribute: a
    # whole batch's patches take gigabytes, and each temp space keeps its largest buffer.
    workspace_cap_mb: int = 16

    # -- the epilogue (common.py) -------------------------------------------------------------
    # Elements one finishing block (bias, residual, activation) touches: a few stay in L2.
    epilogue_block: int = 1 << 16

    # -- im2col + GEMM (gemm.py) --------------------------------------------------------------
    # Channel-last data with fewer channels is lowered channel-first (runs along image rows,
    # not runs of 3 channels) where the compiled gather does not run (conv_algos.py).
    narrow_channels: int = 16
    # Patch rows a part gathers before the compiled products multiply them: about a core's L2,
    # so that they are still in cache (conv_algos.py, resnet50_v1's first layer).
    packed_patch_bytes: int = 1 << 20
    # Output rows per part under which the parts share a GEMM's filters, not its rows
    # (conv_algos.py, late layers at batch 1).
    few_rows: int = 128

    # -- 1x1 kernels (pointwise.py) -----------------------------------------------------------
    # Rows per chunk a thread takes (they stay in L2 while each pair of filter panels passes),
    # and channels per block (a pair of panels of 256 channels is 32 KB, in L1) (conv_algos.py).
    pointwise_forward_chunk: int = 96
    pointwise_depth: int = 256
    # The weight gradient's rows per chunk: dy's stay in L2 while every block of filters reads
    # them, x's in L1; filters <= 128 take twice as many (conv_gradients.py, 1x1 table).
    pointwise_chunk_rows: int = 64
    # Rows below which a second thread does not pay for its own copy of the sums.
    pointwise_min_rows: int = 256
    # Each thread's (F, C) sums stay within about twice a core's L2; past it oneDNN is faster
    # (conv_gradients.py, 1x1 table).
    pointwise_sums_bytes: int = 2 << 20

    # -- compiled Winograd F(4x4, 3x3) (winograd_compiled.py) ---------------------------------
    # The weight gradient's chunk of transformed tiles per thread: it stays in L3 while the sums
    # run over it, and the sums go through memory once a chunk (conv_gradients.py).
    gradient_chunk_bytes: int = 4 << 20
    # The gradients' transformed weights or sums must fit L3 with their chunks; past this
    # oneDNN is faster (conv_gradients.py, 512 channels).
    gradient_sums_bytes: int = 16 << 20
    # Channel-first data goes through channel-last copies of at most this (or half the
    # workspace): larger ones grow every temp space, smaller ones cost calls
    # (conv_gradients.py, NCHW).
    copy_bytes: int = 16 << 20
    # A thread's own transformed weights when it transforms them fused: two panels of 256
    # channels stay in its L2 (conv_fused.py).
    own_u_bytes: int = 5 << 18
    # Transformed weights up to this stay in L3 between chunks, so chunks can be short
    # (short_chunk tiles: one AVX-512 register block of 12 rows) and stay in L2; larger ones come
    # from memory every chunk, which must be long_chunk tiles to pay (conv_algos.py 3x3).
    cached_weight_bytes: int = 16 << 20
    short_chunk: int = 12
    long_chunk: int = 48
    # Where the threads share a chunk's filters, one chunk holds all of a call's tiles (so the
    # weights are read once) up to this many bytes a thread (conv_fused.py, batch 1).
    shared_chunk_bytes: int = 3 << 19
    # Tiles per thread from which the threads share the tiles; with fewer they share each
    # chunk's filters (conv_fused.py).
    min_tiles_per_part: int = 32
    # Groups of filters per chunk and thread when they share the filters: more lets a late
    # thread leave less to wait on, but narrows the products (conv_fused.py).
    groups_per_thread: int = 2

    # -- 1-D Winograd (line.py) ---------------------------------------------------------------
    # F(6, r) runs where it needs fewer products along a line than F(4, r) and the call has at
    # least this many of its tiles: with fewer its larger weights outweigh them (conv_line.py).
    line_wide_min_tiles: int = 128
    # A chunk's transformed tiles and products per thread stay in L2 beside the weight panels
    # that pass over them (conv_line.py).
    line_chunk_bytes: int = 384 << 10


TUNING = ConvTuning()


@contextlib.contextmanager
def tuned(**values):
    """The subsystem runs with these fields of :class:`ConvTuning` replaced inside the block
    (for tests and benchmarks; not thread-safe against other replacements)."""
    global TUNING
    before = TUNING
    TUNING = dataclasses.replace(before, **values)
    try:
        yield TUNING
    finally:
        TUNING = before
