"""RNN: multi-layer, optionally bidirectional vanilla (relu/tanh), LSTM and GRU recurrences.

Parameters use MXNet's (cuDNN's) packed layout: first every weight, layer by layer and
direction by direction (input-to-hidden (G*H, in), then hidden-to-hidden (G*H, H)), then every
bias in the same order (input bias (G*H,), hidden bias (G*H,)). Gates are ordered i, f, g, o
for LSTM and r, z, n for GRU, with n = tanh(x W_n + b_in + r * (h R_n + b_hn)).
States are (layers * directions, N, H), indexed layer * directions + direction. Dropout with
probability p applies between layers while training; its masks are a hidden output.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.op.nn import onednn_provider
from ember.op.nn._common import assign_shape, outputs_of, typed_like_first
from ember.op.nn.activation import sigmoid
from ember.op.nn.rnn_layout import dims_of, param_count, unpack
from ember.op.registry import (
    REQUIRED, Param, ShapeError, p_bool, p_enum, p_float, p_int, p_optional, register)

__all__ = ['param_count']

PARAMS = (
    Param('state_size', p_int, REQUIRED, 'Hidden units H.'),
    Param('num_layers', p_int, REQUIRED),
    Param('bidirectional', p_bool, False),
    Param('mode', p_enum('rnn_relu', 'rnn_tanh', 'lstm', 'gru'), REQUIRED),
    Param('p', p_float, 0.0, 'Dropout probability between layers while training.'),
    Param('state_outputs', p_bool, False, 'Also output the final states.'),
    Param('projection_size', p_optional(p_int), None, 'LSTM projection (not supported).'),
    Param('lstm_state_clip_min', p_optional(p_float), None),
    Param('lstm_state_clip_max', p_optional(p_float), None),
    Param('lstm_state_clip_nan', p_bool, False, 'Clip NaN cell states to the bounds too.'),
    Param('use_sequence_length', p_bool, False,
          'Take a sequence_length input (N,): steps past it leave states unchanged and '
          'output zeros.'),
)

# ----------------------------------------------------------------------------------------------
# Cells. forward(xp, xw, h, c, wh, bh) -> (h', c', cache), with xw = x W^T + b_x precomputed for
# the whole sequence; backward(xp, dh', dc', h, c, cache) -> (d xw, d of h W_h^T + b_h, the
# rest of dh, dc).

class _Vanilla:
    def __init__(self, mode):
        self.tanh = mode == 'rnn_tanh'

    def forward(self, xp, xw, h, c, wh, bh):
        pre = xw + h @ wh.T + bh
        out = xp.tanh(pre) if self.tanh else xp.maximum(pre, 0)
        return out, None, out

    def backward(self, xp, dh, dc, h, c, out):
        dpre = dh * (1 - out * out) if self.tanh else dh * (out > 0)
        return dpre, dpre, 0, None


class _LSTM:
    def __init__(self, low, high, clip_nan):
        self.low, self.high, self.clip_nan = low, high, clip_nan

    def forward(self, xp, xw, h, c, wh, bh):
        i, f, g, o = xp.split(xw + h @ wh.T + bh, 4, axis=1)
        i, f, g, o = sigmoid(xp, i), sigmoid(xp, f), xp.tanh(g), sigmoid(xp, o)
        raw = f * c + i * g
        cell, inside = self._clip(xp, raw)
        squashed = xp.tanh(cell)
        return o * squashed, cell, (i, f, g, o, squashed, inside)

    def _clip(self, xp, raw):
        if self.low is None and self.high is None:
            return raw, None
        low = -np.inf if self.low is None else self.low
        high = np.inf if self.high is None else self.high
        clipped = xp.fmax(xp.fmin(raw, high), low) if self.clip_nan else xp.clip(raw, low, high)
        return clipped, (raw >= low) & (raw <= high)

    def backward(self, xp, dh, dc, h, c, cache):
        i, f, g, o, squashed, inside = cache
        dcell = dc + dh * o * (1 - squashed * squashed)
        if inside is not None:
            dcell = dcell * inside
        dpre = xp.concatenate([dcell * g * i * (1 - i), dcell * c * f * (1 - f),
                               dcell * i * (1 - g * g), dh * squashed * o * (1 - o)], axis=1)
        return dpre, dpre, 0, dcell * f


class _GRU:
    def forward(self, xp, xw, h, c, wh, bh):
        xr, xz, xn = xp.split(xw, 3, axis=1)
        hr, hz, hn = xp.split(h @ wh.T + bh, 3, axis=1)
        r, z = sigmoid(xp, xr + hr), sigmoid(xp, xz + hz)
        n = xp.tanh(xn + r * hn)
        return (1 - z) * n + z * h, None, (r, z, n, hn)

    def backward(self, xp, dh, dc, h, c, cache):
        r, z, n, hn = cache
        dn_pre = dh * (1 - z) * (1 - n * n)
        dr_pre = dn_pre * hn * r * (1 - r)
        dz_pre = dh * (h - n) * z * (1 - z)
        dxw = xp.concatenate([dr_pre, dz_pre, dn_pre], axis=1)
        dgh = xp.concatenate([dr_pre, dz_pre, dn_pre * r], axis=1)
        return dxw, dgh, dh * z, None


def _cell(attrs):
    mode = attrs['mode']
    if mode == 'lstm':
        return _LSTM(attrs['lstm_state_clip_min'], attrs['lstm_state_clip_max'],
                     attrs['lstm_state_clip_nan'])
    return _GRU() if mode == 'gru' else _Vanilla(mode)


# ----------------------------------------------------------------------------------------------
# Scans over time.

def _steps(length, reverse):
    return range(length - 1, -1, -1) if reverse else range(length)


def _scan(cell, xp, xw, wh, bh, h, c, valid, reverse):
    """Run one direction of one layer: (outputs (T, N, H), final h, final c, caches)."""
    out = xp.empty(xw.shape[:2] + h.shape[-1:], xw.dtype)
    caches = [None] * xw.shape[0]
    for t in _steps(xw.shape[0], reverse):
        h_new, c_new, cache = cell.forward(xp, xw[t], h, c, wh, bh)
        caches[t] = (h, c, cache)
        if valid is not None:  # past a sequence's end: output 0, keep the state
            keep = valid[t][:, None]
            out[t] = xp.where(keep, h_new, 0)
            h_new = xp.where(keep, h_new, h)
            c_new = None if c is None else xp.where(keep, c_new, c)
        else:
            out[t] = h_new
        h, c = h_new, c_new
    return out, h, c, caches


def _scan_backward(cell, xp, dout, dh, dc, wh, caches, valid, reverse, dwh, dbh):
    """Back through one direction of one layer: (d xw (T, N, G*H), d h0, d c0)."""
    dxw = None
    for t in reversed(_steps(dout.shape[0], reverse)):
        h, c, cache = caches[t]
        dh_new, dc_new, carry_h, carry_c = dout[t] + dh, dc, 0, 0
        if valid is not None:
            keep = valid[t][:, None]
            dh_new, carry_h = xp.where(keep, dh_new, 0), xp.where(keep, 0, dh)
            if dc is not None:
                dc_new, carry_c = xp.where(keep, dc, 0), xp.where(keep, 0, dc)
        dxw_t, dgh, dh_rest, dc_prev = cell.backward(xp, dh_new, dc_new, h, c, cache)
        if dxw is None:
            dxw = xp.empty(dout.shape[:2] + dxw_t.shape[-1:], dxw_t.dtype)
        dxw[t] = dxw_t
        dwh += dgh.T @ h
        dbh += dgh.sum(axis=0)
        dh = dgh @ wh + dh_rest + carry_h
        dc = None if dc_prev is None else dc_prev + carry_c
    return dxw, dh, dc


@dataclass
class _Inputs:
    data: object
    params: object
    state: object
    state_cell: object = None
    lengths: object = None


def _split_inputs(attrs, arrays):
    names = _input_names(attrs)
    named = dict(zip(names, arrays))
    return _Inputs(named['data'], named['parameters'], named['state'],
                   named.get('state_cell'), named.get('sequence_length'))


def _run(attrs, xp, given, masks):
    """The whole forward pass: (output, hy list, cy list, what backward needs)."""
    x = given.data
    dims, cell = dims_of(attrs, x.shape[2]), _cell(attrs)
    weights = unpack(given.params, dims)
    steps, batch = x.shape[:2]
    valid = None
    if given.lengths is not None:
        valid = xp.arange(steps)[:, None] < given.lengths.astype(np.int64)[None, :]
    layer_in, hy, cy, inputs, caches = x, [], [], [], []
    for layer in range(dims.layers):
        if layer > 0 and masks is not None:
            layer_in = layer_in * masks[layer - 1]
        inputs.append(layer_in)
        outputs = []
        for direction in range(dims.directions):
            k = layer * dims.directions + direction
            wx, wh, bx, bh = weights[k]
            xw = (layer_in.reshape(steps * batch, -1) @ wx.T + bx).reshape(steps, batch, -1)
            c0 = None if given.state_cell is None else given.state_cell[k]
            out, h, c, cache = _scan(cell, xp, xw, wh, bh, given.state[k], c0, valid,
                                     direction == 1)
            outputs.append(out)
            hy.append(h)
            cy.append(c)
            caches.append(cache)
        layer_in = outputs[0] if len(outputs) == 1 else xp.concatenate(outputs, axis=2)
    return layer_in, hy, cy, (dims, cell, weights, valid, inputs, caches)


def _has_mask(attrs):
    return attrs['p'] > 0 and attrs['num_layers'] > 1


# ----------------------------------------------------------------------------------------------
# Declarations.

def _input_names(attrs):
    names = ['data', 'parameters', 'state']
    names += ['state_cell'] if attrs['mode'] == 'lstm' else []
    return names + (['sequence_length'] if attrs['use_sequence_length'] else [])


def _output_names(attrs):
    names = ['output', 'state'] + (['state_cell'] if attrs['mode'] == 'lstm' else [])
    return names + (['dropout_mask'] if _has_mask(attrs) else [])


def _num_states(attrs):
    return 2 if attrs['mode'] == 'lstm' else 1


def _infer(attrs, in_shapes):
    in_shapes = list(in_shapes)
    if attrs['projection_size'] is not None:
        raise ShapeError('RNN: projection_size is not supported (MXNet supports it with '
                         'cuDNN only)')
    data = in_shapes[0]
    if data is None:
        return in_shapes, [None] * len(_output_names(attrs))
    if len(data) != 3:
        raise ShapeError(f'RNN: data has shape {tuple(data)}; expected (T, N, input_size)')
    steps, batch, width = data
    dims = dims_of(attrs, width)
    states = (dims.layers * dims.directions, batch, dims.hidden)
    names = _input_names(attrs)
    assign_shape('RNN', in_shapes, 1, 'parameters', (param_count(dims),))
    for name, shape in (('state', states), ('state_cell', states), ('sequence_length', (batch,))):
        if name in names:
            assign_shape('RNN', in_shapes, names.index(name), name, shape)
    out = (steps, batch, dims.directions * dims.hidden)
    outs = [out] + [states] * _num_states(attrs)
    if _has_mask(attrs):
        outs.append((dims.layers - 1,) + out)
    return in_shapes, outs


def _infer_type(attrs, in_dtypes):
    free = (len(in_dtypes) - 1,) if attrs['use_sequence_length'] else ()
    ins, outs = typed_like_first(free)(attrs, in_dtypes)
    return ins, outs * len(_output_names(attrs))


def _kernel(attrs, ins, outs, ctx):
    xp, given = ctx.xp, _split_inputs(attrs, ins)
    masks = outs[-1] if _has_mask(attrs) else None
    if masks is not None:
        if ctx.is_train:
            keep = 1 - attrs['p']
            draws = ctx.random.generator.random(masks.shape, dtype=_draw_dtype(masks.dtype))
            masks[...] = (draws < keep) / keep if keep > 0 else 0
        else:
            masks.fill(1)
    if (masks is None or not ctx.is_train) and onednn_provider.rnn_forward(
            attrs, given.data, given.params, given.state, given.state_cell,
            *outs[:1 + _num_states(attrs)]):
        return
    output, hy, cy, _ = _run(attrs, xp, given, masks)
    outs[0][...] = output
    outs[1][...] = xp.stack(hy)
    if attrs['mode'] == 'lstm':
        outs[2][...] = xp.stack(cy)


def _draw_dtype(dtype):
    return 'float64' if dtype.itemsize == 8 else 'float32'


def _backward_input_names(attrs):
    grads = ['out_grad', 'state_grad'] + (['state_cell_grad'] if attrs['mode'] == 'lstm' else [])
    return grads + _input_names(attrs) + (['dropout_mask'] if _has_mask(attrs) else [])


def _backward_output_names(attrs):
    return [f'{name}_grad' for name in _input_names(attrs) if name != 'sequence_length']


def _backward_kernel(attrs, ins, outs, ctx):
    """Inputs: gradients of output and states, the forward inputs, the dropout masks."""
    xp, count = ctx.xp, 1 + _num_states(attrs)
    dout, dhy = ins[0], ins[1]
    dcy = ins[2] if attrs['mode'] == 'lstm' else None
    forward_inputs = ins[count:count + len(_input_names(attrs))]
    masks = ins[-1] if _has_mask(attrs) else None
    given = _split_inputs(attrs, forward_inputs)
    _, _, _, (dims, cell, weights, valid, inputs, caches) = _run(attrs, xp, given, masks)
    outs[1].fill(0)
    dweights = unpack(outs[1], dims)
    for layer in reversed(range(dims.layers)):
        dlayer_in = xp.zeros(inputs[layer].shape, inputs[layer].dtype)
        for direction in range(dims.directions):
            k = layer * dims.directions + direction
            hidden = slice(direction * dims.hidden, (direction + 1) * dims.hidden)
            dwx, dwh, dbx, dbh = dweights[k]
            dxw, dh0, dc0 = _scan_backward(
                cell, xp, dout[:, :, hidden], dhy[k], None if dcy is None else dcy[k],
                weights[k][1], caches[k], valid, direction == 1, dwh, dbh)
            outs[2][k] = dh0
            if dcy is not None:
                outs[3][k] = dc0
            rows = dxw.reshape(-1, dxw.shape[-1])
            dwx += rows.T @ inputs[layer].reshape(rows.shape[0], -1)
            dbx += rows.sum(axis=0)
            dlayer_in += (rows @ weights[k][0]).reshape(dlayer_in.shape)
        if layer > 0 and masks is not None:
            dlayer_in = dlayer_in * masks[layer - 1]
        dout = dlayer_in
    outs[0][...] = dout


def _backward_infer(attrs, in_shapes):
    names = _backward_input_names(attrs)
    shapes = dict(zip(names, in_shapes))
    return list(in_shapes), [shapes[name[:-5]] for name in _backward_output_names(attrs)]


def _backward_type(attrs, in_dtypes):
    dtypes = dict(zip(_backward_input_names(attrs), in_dtypes))
    return list(in_dtypes), [dtypes[name[:-5]] for name in _backward_output_names(attrs)]


def _gradient(F, attrs, inputs, outputs, out_grads):
    states = _num_states(attrs)
    grads = [g if g is not None else F.zeros_like(out)
             for g, out in zip(out_grads[:1 + states], outputs[:1 + states])]
    masks = [outputs[-1]] if _has_mask(attrs) else []
    result = F._backward_RNN(*grads, *inputs, *masks, **attrs)
    count = len(_backward_output_names(attrs))
    return outputs_of(result, count) + ([None] if attrs['use_sequence_length'] else [])


register('RNN', _kernel, infer_shape=_infer, infer_type=_infer_type, inputs=_input_names,
         outputs=_output_names,
         visible_outputs=lambda attrs: 1 + _num_states(attrs) if attrs['state_outputs'] else 1,
         params=PARAMS, gradient=_gradient, resources=('random',), random=True,
         doc='Fused recurrent layers over data (T, N, input_size) with packed parameters.')

register('_backward_RNN', _backward_kernel, infer_shape=_backward_infer,
         infer_type=_backward_type, inputs=_backward_input_names,
         outputs=_backward_output_names, params=PARAMS)
