"""The packed parameter layout of the RNN operator (MXNet's, which is cuDNN's): first every
weight, layer by layer and direction by direction (input-to-hidden (G*H, in), then
hidden-to-hidden (G*H, H)), then every bias in the same order. The NumPy kernel
(:mod:`ember.op.nn.rnn`) and the oneDNN provider both read parameters through it.

>>> dims = Dims(layers=1, directions=1, input_size=3, hidden=2, gates=4)
>>> param_count(dims), [w.shape for w in unpack(np.zeros(param_count(dims)), dims)[0]]
(56, [(8, 3), (8, 2), (8,), (8,)])
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np  # noqa: F401  (the doctest's)

__all__ = ['Dims', 'dims_of', 'param_count', 'unpack']

_GATES = {'rnn_relu': 1, 'rnn_tanh': 1, 'lstm': 4, 'gru': 3}


@dataclass(frozen=True)
class Dims:
    """Layers, directions, input and hidden sizes, and gates per cell of an RNN."""
    layers: int
    directions: int
    input_size: int
    hidden: int
    gates: int

    def layer_input(self, layer):
        return self.input_size if layer == 0 else self.directions * self.hidden


def dims_of(attrs, input_size) -> Dims:
    """The dimensions of an RNN operator's `attrs` over inputs of `input_size` features."""
    return Dims(attrs['num_layers'], 2 if attrs['bidirectional'] else 1, input_size,
                attrs['state_size'], _GATES[attrs['mode']])


def param_count(dims: Dims) -> int:
    """Length of the packed parameter vector."""
    rows = dims.gates * dims.hidden
    return sum(dims.directions * rows * (dims.layer_input(layer) + dims.hidden + 2)
               for layer in range(dims.layers))


def unpack(flat, dims):
    """(wx, wh, bx, bh) views of `flat` for every layer * directions + direction."""
    rows, offset, weights = dims.gates * dims.hidden, 0, []
    for layer in range(dims.layers):
        for _ in range(dims.directions):
            width = dims.layer_input(layer)
            wx = flat[offset:offset + rows * width].reshape(rows, width)
            offset += rows * width
            wh = flat[offset:offset + rows * dims.hidden].reshape(rows, dims.hidden)
            offset += rows * dims.hidden
            weights.append([wx, wh])
    for entry in weights:
        entry += [flat[offset:offset + rows], flat[offset + rows:offset + 2 * rows]]
        offset += 2 * rows
    return weights
