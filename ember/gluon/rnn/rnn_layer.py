"""Recurrent layers RNN, LSTM and GRU: whole sequences through the fused ``RNN`` operator.

Each layer keeps an i2h and an h2h weight and bias per layer and direction, named as in MXNet 1.x
(``l0_i2h_weight``, ``r0_h2h_bias``, ...), and packs them at each call into the operator's flat
parameter vector in MXNet's order: every weight (layer by layer, forward direction before
reverse, i2h before h2h), then every bias in the same order.

>>> import ember as mx
>>> layer = mx.gluon.rnn.LSTM(8, num_layers=2, bidirectional=True)
>>> layer.initialize()
>>> output, (h, c) = layer(mx.nd.ones((5, 3, 4)), layer.begin_state(batch_size=3))
>>> output.shape, h.shape, c.shape
((5, 3, 16), (4, 3, 8), (4, 3, 8))
>>> layer
LSTM(4 -> 8, TNC, num_layers=2, bidirectional)
"""
from __future__ import annotations

import numbers
import re

from ember import ndarray as nd
from ember.base import dtype_of
from ember.gluon.block import HybridBlock
from ember.gluon.rnn import rnn_cell

__all__ = ['RNN', 'LSTM', 'GRU']

_GATES = {'rnn_relu': 1, 'rnn_tanh': 1, 'lstm': 4, 'gru': 3}
# MXNet 1.x saved fused layers under the names of the cell stack they replaced
_PARAM_NAME = re.compile(r'(l|r)(\d+)_(i2h|h2h)_(weight|bias)\Z')


class _RNNLayer(HybridBlock):
    """What RNN, LSTM and GRU share; `mode` is the fused operator's mode."""

    def __init__(self, hidden_size, num_layers, layout, dropout, bidirectional, input_size,
                 i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer,
                 h2h_bias_initializer, mode, lstm_state_clip_min, lstm_state_clip_max,
                 lstm_state_clip_nan, dtype, use_sequence_length=False, **kwargs):
        super().__init__(**kwargs)
        _check_arguments(layout, num_layers, hidden_size, dropout)
        self._hidden_size = hidden_size
        self._num_layers = num_layers
        self._mode = mode
        self._layout = layout
        self._dropout = dropout
        self._dir = 2 if bidirectional else 1
        self._input_size = input_size
        self._initializers = dict(i2h_weight=i2h_weight_initializer,
                                  h2h_weight=h2h_weight_initializer,
                                  i2h_bias=i2h_bias_initializer, h2h_bias=h2h_bias_initializer)
        self._lstm_state_clip_min = lstm_state_clip_min
        self._lstm_state_clip_max = lstm_state_clip_max
        self._lstm_state_clip_nan = lstm_state_clip_nan
        self._dtype = dtype_of(dtype)
        self._use_sequence_length = use_sequence_length
        self._gates = _GATES[mode]
        self._register_all_params()

    def _register_all_params(self):
        rows, hidden = self._gates * self._hidden_size, self._hidden_size
        columns = self._input_size
        for layer in range(self._num_layers):
            for direction in ['l', 'r'][:self._dir]:
                name = f'{direction}{layer}_'
                self._register_param(name + 'i2h_weight', (rows, columns), 'i2h_weight')
                self._register_param(name + 'h2h_weight', (rows, hidden), 'h2h_weight')
                self._register_param(name + 'i2h_bias', (rows,), 'i2h_bias')
                self._register_param(name + 'h2h_bias', (rows,), 'h2h_bias')
            columns = hidden * self._dir

    def _register_param(self, name, shape, kind):
        param = self.params.get(name, shape=shape, init=self._initializers[kind],
                                allow_deferred_init=True, dtype=self._dtype)
        setattr(self, name, param)
        return param

    def __repr__(self):
        columns = self.l0_i2h_weight.shape[1]
        text = (f'{type(self).__name__}({columns or None} -> {self._hidden_size}, '
                f'{self._layout}')
        if self._num_layers != 1:
            text += f', num_layers={self._num_layers}'
        if self._dropout != 0:
            text += f', dropout={self._dropout}'
        if self._dir == 2:
            text += ', bidirectional'
        return text + ')'

    def _collect_params_with_prefix(self, prefix=''):
        # Parameter files use MXNet's names for the unfused cell stack, so that files saved
        # by MXNet load here and the other way round.
        if prefix:
            prefix += '.'
        bidirectional = self._dir == 2
        found = {prefix + _structural_name(key, bidirectional): param
                 for key, param in self._reg_params.items()}
        for name, child in self._children.items():
            found.update(child._collect_params_with_prefix(prefix + name))
        return found

    def state_info(self, batch_size=0):
        """Shape, layout and dtype of each begin state."""
        raise NotImplementedError(f'{type(self).__name__} must define state_info()')

    def _state(self, batch_size, size):
        return {'shape': (self._num_layers * self._dir, batch_size, size),
                '__layout__': 'LNC', 'dtype': self._dtype}

    def cast(self, dtype):
        super().cast(dtype)
        self._dtype = dtype_of(dtype)

    def begin_state(self, batch_size=0, func=nd.zeros, **kwargs):
        """Initial states made by ``func(name=..., shape=..., dtype=..., **kwargs)``.

        >>> import ember as mx
        >>> [s.shape for s in mx.gluon.rnn.GRU(5, num_layers=3).begin_state(batch_size=2)]
        [(3, 2, 5)]
        """
        states = []
        for i, info in enumerate(self.state_info(batch_size)):
            info = dict(info, **kwargs)
            states.append(func(name=f'{self.prefix}h0_{i}', **info))
        return states

    def _unfuse(self):
        """A HybridSequentialRNNCell of cells that share this layer's parameters."""
        if self._lstm_state_clip_min is not None or self._lstm_state_clip_max is not None:
            raise NotImplementedError(f'{self.name}: cannot unfuse a layer with state '
                                      f'clipping: no cell computes it')
        stack = rnn_cell.HybridSequentialRNNCell(prefix=self.prefix, params=self.params)
        with stack.name_scope():
            columns = self.l0_i2h_weight.shape[1]
            for layer in range(self._num_layers):
                stack.add(self._unfused_layer(layer, columns))
                if self._dropout > 0 and layer != self._num_layers - 1:
                    stack.add(rnn_cell.DropoutCell(self._dropout))
                columns = self._hidden_size * self._dir
        return stack

    def _unfused_layer(self, layer, columns):
        kwargs = {f'{kind}_initializer': self._initializers[kind]
                  for kind in ('i2h_weight', 'h2h_weight', 'i2h_bias', 'h2h_bias')}
        kwargs['input_size'] = columns
        if self._mode.startswith('rnn_'):
            kwargs['activation'] = self._mode[4:]
        make = {'rnn_relu': rnn_cell.RNNCell, 'rnn_tanh': rnn_cell.RNNCell,
                'lstm': rnn_cell.LSTMCell, 'gru': rnn_cell.GRUCell}[self._mode]
        if self._dir == 1:
            return make(self._hidden_size, prefix=f'l{layer}_', **kwargs)
        return rnn_cell.BidirectionalCell(make(self._hidden_size, prefix=f'l{layer}_', **kwargs),
                                          make(self._hidden_size, prefix=f'r{layer}_', **kwargs))

    def infer_shape(self, inputs, *args):
        columns = inputs.shape[2]
        rows = self._gates * self._hidden_size
        for direction in ['l', 'r'][:self._dir]:
            getattr(self, f'{direction}0_i2h_weight').shape = (rows, columns)

    def __call__(self, inputs, states=None, sequence_length=None):
        """Run the layer over a sequence.

        Without `states` the begin states are zeros and only the output is returned; with
        them, ``(output, new_states)``. `sequence_length` (N,) is required exactly when the
        layer was made with ``use_sequence_length=True``.
        """
        skip_states = states is None
        if skip_states:
            states = self._default_states(inputs)
        if _is_single_state(states):
            states = [states]
        args = [states]
        if self._use_sequence_length:
            if sequence_length is None:
                raise ValueError(f'{self.name} was made with use_sequence_length=True: '
                                 f'pass sequence_length')
            args.append(sequence_length)
        elif sequence_length is not None:
            raise ValueError(f'{self.name}: sequence_length given, but the layer was made '
                             f'without use_sequence_length=True')
        output, states = super().__call__(inputs, *args)
        return output if skip_states else (output, states)

    def _default_states(self, inputs):
        if isinstance(inputs, nd.NDArray):
            batch_size = inputs.shape[self._layout.find('N')]
            return self.begin_state(batch_size, ctx=inputs.context, dtype=inputs.dtype)
        from ember import symbol
        return self.begin_state(0, func=symbol.zeros)

    def hybrid_forward(self, F, inputs, states, sequence_length=None, **params):
        if F is nd:
            self._check_states(inputs, states)
        if self._layout == 'NTC':
            inputs = F.swapaxes(inputs, dim1=0, dim2=1)
        packed = F.concat(*[F.reshape(params[name], shape=(-1,))
                            for name in self._packed_order()], dim=0)
        extra = [sequence_length] if self._use_sequence_length else []
        result = F.RNN(inputs, packed, *states, *extra, **self._operator_attrs())
        outputs = result[0]
        states = [result[i] for i in range(1, 1 + len(self.state_info()))]
        if self._layout == 'NTC':
            outputs = F.swapaxes(outputs, dim1=0, dim2=1)
        return outputs, states

    def _packed_order(self):
        """Parameter names in the order of the fused operator's flat parameter vector."""
        return [f'{direction}{layer}_{gate}_{kind}'
                for kind in ('weight', 'bias')
                for layer in range(self._num_layers)
                for direction in ['l', 'r'][:self._dir]
                for gate in ('i2h', 'h2h')]

    def _operator_attrs(self):
        attrs = dict(state_size=self._hidden_size, num_layers=self._num_layers,
                     bidirectional=self._dir == 2, p=self._dropout, state_outputs=True,
                     mode=self._mode)
        if self._mode == 'lstm':
            attrs.update(lstm_state_clip_min=self._lstm_state_clip_min,
                         lstm_state_clip_max=self._lstm_state_clip_max,
                         lstm_state_clip_nan=self._lstm_state_clip_nan)
        if self._use_sequence_length:
            attrs['use_sequence_length'] = True
        return attrs

    def _check_states(self, inputs, states):
        batch_size = inputs.shape[self._layout.find('N')]
        infos = self.state_info(batch_size)
        if len(states) != len(infos):
            raise ValueError(f'{self.name} takes {len(infos)} begin state(s), '
                             f'got {len(states)}')
        for i, (state, info) in enumerate(zip(states, infos)):
            if state.shape != info['shape']:
                raise ValueError(f'{self.name}: begin state {i} has shape {state.shape}; '
                                 f'expected {info["shape"]} (layers * directions, batch, '
                                 f'units) for inputs of shape {inputs.shape} in layout '
                                 f'{self._layout}')


def _check_arguments(layout, num_layers, hidden_size, dropout):
    if layout not in ('TNC', 'NTC'):
        raise ValueError(f"layout={layout!r}: expected 'TNC' or 'NTC'")
    if not isinstance(num_layers, numbers.Integral) or num_layers < 1:
        raise ValueError(f'num_layers={num_layers!r}: expected a positive integer')
    if not isinstance(hidden_size, numbers.Integral) or hidden_size < 1:
        raise ValueError(f'hidden_size={hidden_size!r}: expected a positive integer')
    if not 0 <= dropout < 1:
        raise ValueError(f'dropout={dropout!r}: expected a probability in [0, 1)')


def _structural_name(key, bidirectional):
    match = _PARAM_NAME.match(key)
    direction, layer, gate, kind = match.groups()
    if bidirectional:
        return f'_unfused.{layer}.{direction}_cell.{gate}_{kind}'
    return f'_unfused.{layer}.{gate}_{kind}'


def _is_single_state(states):
    return not isinstance(states, (list, tuple))


class RNN(_RNNLayer):
    """Elman RNN layer: ``h_t = activation(W_i x_t + b_i + W_h h_{t-1} + b_h)`` per layer.

    Inputs are (T, N, C) for layout 'TNC' or (N, T, C) for 'NTC'; the output has
    ``hidden_size * directions`` features; the one state is (layers * directions, N, hidden).

    >>> import ember as mx
    >>> layer = mx.gluon.rnn.RNN(6, activation='tanh', layout='NTC', input_size=3)
    >>> layer.initialize()
    >>> layer(mx.nd.ones((2, 5, 3))).shape
    (2, 5, 6)
    """

    def __init__(self, hidden_size, num_layers=1, activation='relu', layout='TNC', dropout=0,
                 bidirectional=False, i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros', input_size=0,
                 dtype='float32', **kwargs):
        if activation not in ('relu', 'tanh'):
            raise ValueError(f"RNN: activation={activation!r}: expected 'relu' or 'tanh'")
        super().__init__(hidden_size, num_layers, layout, dropout, bidirectional, input_size,
                         i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer,
                         h2h_bias_initializer, 'rnn_' + activation, None, None, False, dtype,
                         **kwargs)

    def state_info(self, batch_size=0):
        return [self._state(batch_size, self._hidden_size)]


class LSTM(_RNNLayer):
    """Long short-term memory layer (gates i, f, c, o).

    States are ``[h, c]``, each (layers * directions, N, hidden). `state_clip_min`/`max`
    clip the cell state (NaN too when `state_clip_nan`). `projection_size` (LSTMP) is not
    supported: Ember's ``RNN`` operator has no projection.

    >>> import ember as mx
    >>> layer = mx.gluon.rnn.LSTM(4, input_size=3, prefix='lstm_')
    >>> sorted(layer.collect_params().keys())[:2]
    ['lstm_l0_h2h_bias', 'lstm_l0_h2h_weight']
    """

    def __init__(self, hidden_size, num_layers=1, layout='TNC', dropout=0, bidirectional=False,
                 input_size=0, i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros',
                 projection_size=None, h2r_weight_initializer=None, state_clip_min=None,
                 state_clip_max=None, state_clip_nan=False, dtype='float32', **kwargs):
        if projection_size:
            raise NotImplementedError(f'LSTM: projection_size={projection_size!r}: projected '
                                      f'LSTMs are not supported (the RNN operator has no '
                                      f'projection); leave projection_size=None')
        super().__init__(hidden_size, num_layers, layout, dropout, bidirectional, input_size,
                         i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer,
                         h2h_bias_initializer, 'lstm', state_clip_min, state_clip_max,
                         state_clip_nan, dtype, **kwargs)

    def state_info(self, batch_size=0):
        return [self._state(batch_size, self._hidden_size),
                self._state(batch_size, self._hidden_size)]


class GRU(_RNNLayer):
    """Gated recurrent unit layer (gates r, z, n; MXNet's and cuDNN's formula).

    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.

    >>> import ember as mx
    >>> layer = mx.gluon.rnn.GRU(4, input_size=3)
    >>> layer.l0_i2h_weight.shape, layer.l0_h2h_weight.shape
    ((12, 3), (12, 4))
    """

    def __init__(self, hidden_size, num_layers=1, layout='TNC', dropout=0, bidirectional=False,
                 input_size=0, i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros', dtype='float32',
                 **kwargs):
        super().__init__(hidden_size, num_layers, layout, dropout, bidirectional, input_size,
                         i2h_weight_initializer, h2h_weight_initializer, i2h_bias_initializer,
                         h2h_bias_initializer, 'gru', None, None, False, dtype, **kwargs)

    def state_info(self, batch_size=0):
        return [self._state(batch_size, self._hidden_size)]
