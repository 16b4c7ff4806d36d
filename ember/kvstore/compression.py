"""2-bit gradient compression with error feedback, bit for bit as MXNet 1.x defines it.

Each element of the gradient is added to its residual (what compression left out before). A
residual of at least the threshold sends +threshold and keeps the rest; one of at most
-threshold sends -threshold; anything between sends 0 and stays in the residual. Sixteen codes
pack into one float32 word: element j of a block sits in byte j // 4 of the word, at bits
``6 - 2 * (j % 4)``, ``11`` for +threshold and ``10`` for -threshold.

>>> import numpy as np
>>> gc = GradientCompression({'type': '2bit', 'threshold': 0.5})
>>> residual = np.zeros(3, np.float32)
>>> packed = gc.quantize(np.array([0.7, -0.2, -0.6], np.float32), residual)
>>> gc.dequantize(packed, 3).tolist(), [round(float(r), 2) for r in residual]
([0.5, 0.0, -0.5], [0.2, -0.2, -0.1])
"""
from __future__ import annotations

import numpy as np

from ember.base import EmberError

__all__ = ['GradientCompression', 'parse_params', 'TYPES']

TYPES = ('2bit', 'none')
_PARAMS = ('type', 'threshold')
_VALUES_PER_WORD = 16
_SHIFTS = np.array([6, 4, 2, 0], np.uint8)     # bits of element j % 4 within its byte
_POSITIVE, _NEGATIVE = 3, 2                     # codes 0b11 and 0b10


def parse_params(params):
    """(type, threshold) from a dict like ``{'type': '2bit', 'threshold': 0.5}``."""
    if not isinstance(params, dict):
        raise TypeError(f'gradient compression params: expected a dict such as '
                        f"{{'type': '2bit', 'threshold': 0.5}}, got {type(params).__name__}")
    unknown = sorted(set(params) - set(_PARAMS))
    if unknown:
        raise ValueError(f'gradient compression params: unknown {unknown[0]!r}; accepted: '
                         f'{", ".join(_PARAMS)}')
    if 'type' not in params:
        raise ValueError("gradient compression params: 'type' is required ('2bit' or 'none')")
    kind = str(params['type'])
    if kind not in TYPES:
        raise ValueError(f'gradient compression type {kind!r}: expected one of '
                         f'{", ".join(map(repr, TYPES))}')
    threshold = float(params.get('threshold', 0.5))
    if not threshold > 0:
        raise ValueError(f'gradient compression threshold {threshold}: must be greater than 0')
    return kind, threshold


class GradientCompression:
    """The 2-bit quantizer: :meth:`quantize` updates the residual and returns packed words,
    :meth:`dequantize` turns packed words back into values."""

    def __init__(self, params):
        self.type, self.threshold = parse_params(params)
        if self.type != '2bit':
            raise EmberError(f'GradientCompression: type {self.type!r} compresses nothing')
        self._threshold = np.float32(self.threshold)

    def __repr__(self):
        return f"GradientCompression({{'type': '2bit', 'threshold': {self.threshold}}})"

    @staticmethod
    def compressed_size(size):
        """float32 words that hold `size` elements."""
        return -(-size // _VALUES_PER_WORD)

    def quantize(self, grad, residual):
        """Codes of ``residual + grad`` as float32 words; `residual` keeps what was not sent.

        Both are float32 arrays of one size; `residual` is updated in place.
        """
        flat = residual.reshape(-1)
        flat += grad.reshape(-1)
        positive = flat >= self._threshold
        negative = flat <= -self._threshold
        flat -= (positive.astype(np.float32) - negative.astype(np.float32)) * self._threshold
        codes = positive.astype(np.uint8) * _POSITIVE + negative.astype(np.uint8) * _NEGATIVE
        return _pack(codes)

    def dequantize(self, packed, size):
        """`size` float32 values from the packed words: +threshold, -threshold or 0."""
        codes = _unpack(packed, size)
        values = np.zeros(size, np.float32)
        values[codes == _POSITIVE] = self._threshold
        values[codes == _NEGATIVE] = -self._threshold
        return values


def _pack(codes):
    padded = np.zeros(GradientCompression.compressed_size(codes.size) * _VALUES_PER_WORD,
                      np.uint8)
    padded[:codes.size] = codes
    quads = padded.reshape(-1, 4) << _SHIFTS
    packed_bytes = np.bitwise_or.reduce(quads, axis=1).astype(np.uint8)
    return packed_bytes.view(np.float32)


def _unpack(packed, size):
    packed_bytes = np.ascontiguousarray(packed, np.float32).view(np.uint8)
    codes = (packed_bytes[:, None] >> _SHIFTS) & 3
    return codes.reshape(-1)[:size]
