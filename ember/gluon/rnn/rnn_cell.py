"""Recurrent cells: one time step of RNN, LSTM and GRU, and cells that combine other cells.

A cell maps ``(input, states) -> (output, new_states)`` for one step; ``unroll`` runs it over a
sequence. Equations, gate order and parameter names follow MXNet 1.x (LSTM gates i, f, c, o;
GRU gates r, z, n with the reset gate applied to the projected hidden state).

>>> import ember as mx
>>> cell = mx.gluon.rnn.LSTMCell(4, input_size=3)
>>> cell.initialize()
>>> outputs, states = cell.unroll(5, mx.nd.ones((2, 5, 3)), merge_outputs=True)
>>> outputs.shape, [s.shape for s in states]
((2, 5, 4), [(2, 4), (2, 4)])
"""
from __future__ import annotations

import numbers

from ember import ndarray as nd
from ember.base import prod
from ember.gluon.block import Block, HybridBlock
from ember.gluon.nn.activations import LeakyReLU

__all__ = ['RecurrentCell', 'HybridRecurrentCell', 'RNNCell', 'LSTMCell', 'GRUCell',
           'SequentialRNNCell', 'HybridSequentialRNNCell', 'DropoutCell', 'ModifierCell',
           'ZoneoutCell', 'ResidualCell', 'BidirectionalCell']


# ----------------------------------------------------------------------------------------------
# Sequence helpers shared by the cells (MXNet's private helpers of the same names).

def _is_tensor(x):
    return isinstance(x, nd.NDArray) or _is_symbol(x)


def _is_symbol(x):
    return type(x).__name__ == 'Symbol' and type(x).__module__.startswith('ember.symbol')


def _namespace_of(x):
    """``mx.nd`` for arrays, ``mx.sym`` for symbols (which exist only when tracing)."""
    if isinstance(x, nd.NDArray):
        return nd
    from ember import symbol
    return symbol


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _cells_state_info(cells, batch_size):
    return sum([c.state_info(batch_size) for c in cells], [])


def _cells_begin_state(cells, **kwargs):
    return sum([c.begin_state(**kwargs) for c in cells], [])


def _get_begin_state(cell, F, begin_state, inputs, batch_size):
    """The given begin states, or zeros on the inputs' device (and of their dtype)."""
    if begin_state is not None:
        return begin_state
    if F is not nd:
        return cell.begin_state(func=F.zeros, batch_size=batch_size)
    first = inputs if isinstance(inputs, nd.NDArray) else inputs[0]
    with first.context:
        return cell.begin_state(func=F.zeros, batch_size=batch_size, dtype=first.dtype)


def _format_sequence(length, inputs, layout, merge, in_layout=None):
    """Inputs as one tensor (merge=True), a list of steps (merge=False) or as given (None).

    Returns (inputs, time axis, F, batch size); the batch size is 0 for symbols.
    """
    if inputs is None:
        raise ValueError('unroll needs inputs: a tensor or a list of one tensor per step')
    axis, batch_axis = layout.find('T'), layout.find('N')
    in_axis = in_layout.find('T') if in_layout is not None else axis
    batch_size = 0
    if _is_tensor(inputs):
        F = _namespace_of(inputs)
        if F is nd:
            batch_size = inputs.shape[batch_axis]
        if merge is False:
            inputs = _split_steps(F, inputs, length, in_axis)
    else:
        if length is not None and len(inputs) != length:
            raise ValueError(f'unroll: length={length} but {len(inputs)} input steps given')
        F = _namespace_of(inputs[0])
        if F is nd:
            batch_size = inputs[0].shape[0]
        if merge is True:
            inputs = F.stack(*inputs, axis=axis)
            in_axis = axis
    if _is_tensor(inputs) and axis != in_axis:
        inputs = F.swapaxes(inputs, dim1=axis, dim2=in_axis)
    return inputs, axis, F, batch_size


def _split_steps(F, inputs, length, axis):
    if F is nd:
        if length is not None and length != inputs.shape[axis]:
            raise ValueError(f'unroll: length={length} but the inputs have '
                             f'{inputs.shape[axis]} steps on axis {axis}')
        length = inputs.shape[axis]
    steps = F.split(inputs, axis=axis, num_outputs=length, squeeze_axis=True)
    if F is not nd and length > 1:
        return list(steps)      # a Symbol group: one symbol per step
    return _as_list(steps)


def _mask_sequence_variable_length(F, data, length, valid_length, time_axis, merge):
    """Zero the steps at or after each sequence's valid length."""
    if not _is_tensor(data):
        data = F.stack(*data, axis=time_axis)
    outputs = F.SequenceMask(data, sequence_length=valid_length, use_sequence_length=True,
                             axis=time_axis)
    if not merge:
        outputs = _as_list(F.split(outputs, num_outputs=length, axis=time_axis,
                                   squeeze_axis=True))
    return outputs


def _reverse_sequences(sequences, unroll_step, valid_length=None):
    """Steps in reverse order; with valid_length, each sequence reversed within its length."""
    if valid_length is None:
        return list(reversed(sequences))
    F = _namespace_of(sequences[0])
    reversed_steps = F.SequenceReverse(F.stack(*sequences, axis=0),
                                       sequence_length=valid_length, use_sequence_length=True)
    return _as_list(F.split(reversed_steps, axis=0, num_outputs=unroll_step,
                            squeeze_axis=True))


# ----------------------------------------------------------------------------------------------

class RecurrentCell(Block):
    """Base class of recurrent cells: ``cell(input, states) -> (output, new_states)``."""

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        self._modified = False
        self.reset()

    def reset(self):
        """Reset the step counters before the cell is used on another sequence."""
        self._init_counter = -1
        self._counter = -1
        for cell in self._children.values():
            cell.reset()

    def state_info(self, batch_size=0):
        """Shape and layout of each state, as a list of dicts."""
        raise NotImplementedError(f'{type(self).__name__} must define state_info()')

    def begin_state(self, batch_size=0, func=nd.zeros, **kwargs):
        """Initial states made by ``func(name=..., shape=..., **kwargs)`` (zeros by default).

        >>> import ember as mx
        >>> [s.shape for s in mx.gluon.rnn.LSTMCell(3).begin_state(batch_size=2)]
        [(2, 3), (2, 3)]
        """
        self._check_unmodified()
        states = []
        for info in self.state_info(batch_size):
            self._init_counter += 1
            info = dict(info or {}, **kwargs)
            states.append(func(name=f'{self._prefix}begin_state_{self._init_counter}', **info))
        return states

    def _check_unmodified(self):
        if self._modified:
            raise RuntimeError(f'{self.name} is wrapped by a modifier cell (such as ZoneoutCell); '
                               f'call the modifier cell instead of the base cell')

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None,
               valid_length=None):
        """Run the cell over `length` steps.

        `inputs` is one tensor with layout `layout` or a list of per-step (N, C) tensors.
        Returns (outputs, states): outputs merged into one tensor when `merge_outputs` is True,
        a list of steps when False, and in the form of `inputs` when None. With `valid_length`
        (N,), outputs past each sequence's length are zero and the states are those of its last
        valid step.
        """
        self.reset()
        inputs, axis, F, batch_size = _format_sequence(length, inputs, layout, False)
        states = _get_begin_state(self, F, begin_state, inputs, batch_size)
        outputs, all_states = [], []
        for step in range(length):
            output, states = self(inputs[step], states)
            outputs.append(output)
            if valid_length is not None:
                all_states.append(states)
        if valid_length is not None:
            states = [F.SequenceLast(F.stack(*per_step, axis=0), sequence_length=valid_length,
                                     use_sequence_length=True, axis=0)
                      for per_step in zip(*all_states)]
            outputs = _mask_sequence_variable_length(F, outputs, length, valid_length, axis,
                                                     True)
        outputs, _, _, _ = _format_sequence(length, outputs, layout, merge_outputs)
        return outputs, states

    def _get_activation(self, F, inputs, activation, **kwargs):
        """Apply an activation given by name, as a LeakyReLU block, or as a callable."""
        named = {'tanh': F.tanh, 'relu': F.relu, 'sigmoid': F.sigmoid,
                 'softsign': F.softsign}.get(activation)
        if named is not None:
            return named(inputs, **kwargs)
        if isinstance(activation, str):
            return F.Activation(inputs, act_type=activation, **kwargs)
        if isinstance(activation, LeakyReLU):
            return F.LeakyReLU(inputs, act_type='leaky', slope=activation._alpha, **kwargs)
        return activation(inputs)

    def forward(self, inputs, states):
        self._counter += 1
        return super().forward(inputs, states)


class HybridRecurrentCell(RecurrentCell, HybridBlock):
    """A recurrent cell written as ``hybrid_forward(F, inputs, states, **params)``."""

    def hybrid_forward(self, F, x, *args, **kwargs):
        raise NotImplementedError(f'{type(self).__name__} must define hybrid_forward()')


class _GatedCell(HybridRecurrentCell):
    """Shared parameters of RNN, LSTM and GRU cells: i2h/h2h weights and biases per gate."""
    _num_gates = 1
    _num_states = 1

    def __init__(self, hidden_size, i2h_weight_initializer, h2h_weight_initializer,
                 i2h_bias_initializer, h2h_bias_initializer, input_size, prefix, params):
        super().__init__(prefix=prefix, params=params)
        self._hidden_size = hidden_size
        self._input_size = input_size
        rows = self._num_gates * hidden_size
        self.i2h_weight = self._param('i2h_weight', (rows, input_size), i2h_weight_initializer)
        self.h2h_weight = self._param('h2h_weight', (rows, hidden_size), h2h_weight_initializer)
        self.i2h_bias = self._param('i2h_bias', (rows,), i2h_bias_initializer)
        self.h2h_bias = self._param('h2h_bias', (rows,), h2h_bias_initializer)

    def _param(self, name, shape, init):
        return self.params.get(name, shape=shape, init=init, allow_deferred_init=True)

    def state_info(self, batch_size=0):
        return [{'shape': (batch_size, self._hidden_size), '__layout__': 'NC'}
                for _ in range(self._num_states)]

    def infer_shape(self, inputs, *args):
        self.i2h_weight.shape = (self._num_gates * self._hidden_size, prod(inputs.shape[1:]))

    def _projections(self, F, inputs, hidden, i2h_weight, h2h_weight, i2h_bias, h2h_bias):
        """(W_i x + b_i, W_h h + b_h) for all gates at once."""
        prefix = f't{self._counter}_'
        units = self._num_gates * self._hidden_size
        i2h = F.FullyConnected(data=inputs, weight=i2h_weight, bias=i2h_bias,
                               num_hidden=units, name=prefix + 'i2h')
        h2h = F.FullyConnected(data=hidden, weight=h2h_weight, bias=h2h_bias,
                               num_hidden=units, name=prefix + 'h2h')
        return i2h, h2h

    def __repr__(self):
        # MXNet prints all gates' rows: LSTMCell(None -> 400, tanh) for 100 hidden units
        rows, columns = self.i2h_weight.shape
        return f'{type(self).__name__}({columns or None} -> {rows}, {self._activation})'


class RNNCell(_GatedCell):
    """Elman cell: ``h' = activation(W_i x + b_i + W_h h + b_h)``.

    >>> import ember as mx
    >>> cell = mx.gluon.rnn.RNNCell(2, input_size=3, prefix='rnn_')
    >>> sorted(cell.collect_params().keys())
    ['rnn_h2h_bias', 'rnn_h2h_weight', 'rnn_i2h_bias', 'rnn_i2h_weight']
    """

    def __init__(self, hidden_size, activation='tanh', i2h_weight_initializer=None,
                 h2h_weight_initializer=None, i2h_bias_initializer='zeros',
                 h2h_bias_initializer='zeros', input_size=0, prefix=None, params=None):
        super().__init__(hidden_size, i2h_weight_initializer, h2h_weight_initializer,
                         i2h_bias_initializer, h2h_bias_initializer, input_size, prefix, params)
        self._activation = activation

    def _alias(self):
        return 'rnn'

    def hybrid_forward(self, F, inputs, states, i2h_weight, h2h_weight, i2h_bias, h2h_bias):
        prefix = f't{self._counter}_'
        i2h, h2h = self._projections(F, inputs, states[0], i2h_weight, h2h_weight, i2h_bias,
                                     h2h_bias)
        total = F.elemwise_add(i2h, h2h, name=prefix + 'plus0')
        output = self._get_activation(F, total, self._activation, name=prefix + 'out')
        return output, [output]


class LSTMCell(_GatedCell):
    """Long short-term memory cell; gates i, f, c, o in that order in the weights.

    ``c' = f * c + i * g``, ``h' = o * tanh(c')`` with i, f, o through `recurrent_activation`
    and g through `activation`. States are ``[h, c]``.

    >>> import ember as mx
    >>> cell = mx.gluon.rnn.LSTMCell(2, input_size=3)
    >>> cell.i2h_weight.shape, len(cell.state_info())
    ((8, 3), 2)
    """
    _num_gates = 4
    _num_states = 2

    def __init__(self, hidden_size, i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros', input_size=0,
                 prefix=None, params=None, activation='tanh', recurrent_activation='sigmoid'):
        super().__init__(hidden_size, i2h_weight_initializer, h2h_weight_initializer,
                         i2h_bias_initializer, h2h_bias_initializer, input_size, prefix, params)
        self._activation = activation
        self._recurrent_activation = recurrent_activation

    def _alias(self):
        return 'lstm'

    def hybrid_forward(self, F, inputs, states, i2h_weight, h2h_weight, i2h_bias, h2h_bias):
        prefix = f't{self._counter}_'
        i2h, h2h = self._projections(F, inputs, states[0], i2h_weight, h2h_weight, i2h_bias,
                                     h2h_bias)
        gates = F.SliceChannel(F.elemwise_add(i2h, h2h, name=prefix + 'plus0'), num_outputs=4,
                               name=prefix + 'slice')
        gate = self._recurrent_activation
        in_gate = self._get_activation(F, gates[0], gate, name=prefix + 'i')
        forget_gate = self._get_activation(F, gates[1], gate, name=prefix + 'f')
        in_transform = self._get_activation(F, gates[2], self._activation, name=prefix + 'c')
        out_gate = self._get_activation(F, gates[3], gate, name=prefix + 'o')
        next_c = F.elemwise_add(F.elemwise_mul(forget_gate, states[1], name=prefix + 'mul0'),
                                F.elemwise_mul(in_gate, in_transform, name=prefix + 'mul1'),
                                name=prefix + 'state')
        squashed = self._get_activation(F, next_c, self._activation,
                                        name=prefix + 'activation0')
        next_h = F.elemwise_mul(out_gate, squashed, name=prefix + 'out')
        return next_h, [next_h, next_c]


class GRUCell(_GatedCell):
    """Gated recurrent unit (Cho et al. 2014, as cuDNN and MXNet compute it); gates r, z, n.

    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``.

    >>> import ember as mx
    >>> mx.gluon.rnn.GRUCell(2, input_size=3).h2h_weight.shape
    (6, 2)
    """
    _num_gates = 3

    def __init__(self, hidden_size, i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros', input_size=0,
                 prefix=None, params=None, activation='tanh', recurrent_activation='sigmoid'):
        super().__init__(hidden_size, i2h_weight_initializer, h2h_weight_initializer,
                         i2h_bias_initializer, h2h_bias_initializer, input_size, prefix, params)
        self._activation = activation
        self._recurrent_activation = recurrent_activation

    def _alias(self):
        return 'gru'

    def hybrid_forward(self, F, inputs, states, i2h_weight, h2h_weight, i2h_bias, h2h_bias):
        prefix = f't{self._counter}_'
        prev_h = states[0]
        i2h, h2h = self._projections(F, inputs, prev_h, i2h_weight, h2h_weight, i2h_bias,
                                     h2h_bias)
        i2h_r, i2h_z, i2h_n = F.SliceChannel(i2h, num_outputs=3, name=prefix + 'i2h_slice')
        h2h_r, h2h_z, h2h_n = F.SliceChannel(h2h, num_outputs=3, name=prefix + 'h2h_slice')
        gate = self._recurrent_activation
        reset_gate = self._get_activation(F, F.elemwise_add(i2h_r, h2h_r), gate,
                                          name=prefix + 'r_act')
        update_gate = self._get_activation(F, F.elemwise_add(i2h_z, h2h_z), gate,
                                           name=prefix + 'z_act')
        candidate = self._get_activation(
            F, F.elemwise_add(i2h_n, F.elemwise_mul(reset_gate, h2h_n)), self._activation,
            name=prefix + 'h_act')
        keep = F.elemwise_sub(F.ones_like(update_gate, name=prefix + 'ones_like0'), update_gate)
        next_h = F.elemwise_add(F.elemwise_mul(keep, candidate),
                                F.elemwise_mul(update_gate, prev_h), name=prefix + 'out')
        return next_h, [next_h]


# ----------------------------------------------------------------------------------------------
# Containers

class _StackMixin:
    """What SequentialRNNCell and HybridSequentialRNNCell share: the list of cells."""

    def add(self, cell):
        """Append a cell to the stack."""
        self.register_child(cell)

    def state_info(self, batch_size=0):
        return _cells_state_info(self._children.values(), batch_size)

    def begin_state(self, **kwargs):
        self._check_unmodified()
        return _cells_begin_state(self._children.values(), **kwargs)

    def __getitem__(self, i):
        return self._children[str(i)]

    def __len__(self):
        return len(self._children)

    def __repr__(self):
        lines = [f'({i}): {_indent(repr(c))}' for i, c in enumerate(self._children.values())]
        return f'{type(self).__name__}(\n' + '\n'.join(lines) + '\n)'

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None,
               valid_length=None):
        self.reset()
        inputs, _, F, batch_size = _format_sequence(length, inputs, layout, None)
        begin_state = _get_begin_state(self, F, begin_state, inputs, batch_size)
        cells = list(self._children.values())
        next_states, start = [], 0
        for i, cell in enumerate(cells):
            count = len(cell.state_info())
            merge = None if i < len(cells) - 1 else merge_outputs
            inputs, states = cell.unroll(length, inputs=inputs,
                                         begin_state=begin_state[start:start + count],
                                         layout=layout, merge_outputs=merge,
                                         valid_length=valid_length)
            start += count
            next_states.extend(states)
        return inputs, next_states

    def _step(self, inputs, states):
        """One step through every cell; states are the cells' states concatenated."""
        next_states, start = [], 0
        for cell in self._children.values():
            if isinstance(cell, BidirectionalCell):
                raise TypeError(f'{self.name}: a BidirectionalCell cannot be stepped; '
                                f'use unroll()')
            count = len(cell.state_info())
            inputs, state = cell(inputs, states[start:start + count])
            start += count
            next_states.extend(state)
        return inputs, next_states


def _indent(text):
    return text.replace('\n', '\n  ')


class SequentialRNNCell(_StackMixin, RecurrentCell):
    """Cells stacked one on top of the other.

    >>> import ember as mx
    >>> stack = mx.gluon.rnn.SequentialRNNCell()
    >>> stack.add(mx.gluon.rnn.LSTMCell(4, input_size=3))
    >>> stack.add(mx.gluon.rnn.GRUCell(2, input_size=4))
    >>> stack.initialize()
    >>> out, states = stack(mx.nd.ones((5, 3)), stack.begin_state(batch_size=5))
    >>> out.shape, len(states)
    ((5, 2), 3)
    """

    def __call__(self, inputs, states):
        self._counter += 1
        return self._step(inputs, states)

    def hybrid_forward(self, *args, **kwargs):
        raise NotImplementedError('SequentialRNNCell is not hybrid; use HybridSequentialRNNCell')


class HybridSequentialRNNCell(_StackMixin, HybridRecurrentCell):
    """Hybridizable cells stacked one on top of the other."""

    def __call__(self, inputs, states):
        self._counter += 1
        return self._step(inputs, states)

    def hybrid_forward(self, F, inputs, states):
        return self._step(inputs, states)


class DropoutCell(HybridRecurrentCell):
    """Dropout on the input of each step (at training time); it has no states.

    >>> import ember as mx
    >>> cell = mx.gluon.rnn.DropoutCell(0.5)
    >>> out, states = cell(mx.nd.ones((2, 3)), [])
    >>> out.asnumpy().tolist(), states
    ([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], [])
    """

    def __init__(self, rate, axes=(), prefix=None, params=None):
        super().__init__(prefix, params)
        if not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
            raise ValueError(f'DropoutCell: rate={rate!r}: expected a number in [0, 1)')
        self._rate = rate
        self._axes = axes

    def __repr__(self):
        return f'DropoutCell(rate={self._rate}, axes={self._axes})'

    def state_info(self, batch_size=0):
        return []

    def _alias(self):
        return 'dropout'

    def hybrid_forward(self, F, inputs, states):
        if self._rate > 0:
            inputs = F.Dropout(data=inputs, p=self._rate, axes=self._axes,
                               name=f't{self._counter}_fwd')
        return inputs, states

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None,
               valid_length=None):
        self.reset()
        inputs, _, F, _ = _format_sequence(length, inputs, layout, merge_outputs)
        if _is_tensor(inputs):
            return self.hybrid_forward(F, inputs, begin_state or [])
        return super().unroll(length, inputs, begin_state=begin_state, layout=layout,
                              merge_outputs=merge_outputs, valid_length=None)


class ModifierCell(HybridRecurrentCell):
    """Base class of cells that wrap another cell and change what it computes."""

    def __init__(self, base_cell):
        if base_cell._modified:
            raise RuntimeError(f'{base_cell.name} is already wrapped by a modifier cell')
        base_cell._modified = True
        super().__init__(prefix=base_cell.prefix + self._alias(), params=None)
        self.base_cell = base_cell

    @property
    def params(self):
        return self.base_cell.params

    def state_info(self, batch_size=0):
        return self.base_cell.state_info(batch_size)

    def begin_state(self, func=nd.zeros, **kwargs):
        self._check_unmodified()
        self.base_cell._modified = False
        try:
            return self.base_cell.begin_state(func=func, **kwargs)
        finally:
            self.base_cell._modified = True

    def hybrid_forward(self, F, inputs, states):
        raise NotImplementedError(f'{type(self).__name__} must define hybrid_forward()')

    def __repr__(self):
        return f'{type(self).__name__}({self.base_cell!r})'


class ZoneoutCell(ModifierCell):
    """Zoneout (Krueger et al. 2016): at training time each unit keeps its previous value
    with probability `zoneout_outputs` (outputs) or `zoneout_states` (states).

    >>> import ember as mx
    >>> cell = mx.gluon.rnn.ZoneoutCell(mx.gluon.rnn.RNNCell(3, input_size=2), 0.5, 0.5)
    >>> cell.initialize()
    >>> cell.unroll(4, mx.nd.ones((1, 4, 2)), merge_outputs=True)[0].shape
    (1, 4, 3)
    """

    def __init__(self, base_cell, zoneout_outputs=0., zoneout_states=0.):
        if isinstance(base_cell, BidirectionalCell):
            raise TypeError('ZoneoutCell cannot wrap a BidirectionalCell; wrap each direction')
        super().__init__(base_cell)
        self.zoneout_outputs = zoneout_outputs
        self.zoneout_states = zoneout_states
        self._prev_output = None

    def _alias(self):
        return 'zoneout'

    def reset(self):
        super().reset()
        self._prev_output = None

    def hybrid_forward(self, F, inputs, states):
        next_output, next_states = self.base_cell(inputs, states)
        prev_output = self._prev_output
        if prev_output is None:
            prev_output = F.zeros_like(next_output)
        output = _zoneout(F, self.zoneout_outputs, next_output, prev_output)
        states = [_zoneout(F, self.zoneout_states, new, old)
                  for new, old in zip(next_states, states)]
        self._prev_output = output
        return output, states


def _zoneout(F, rate, new, old):
    """`new` where a dropout mask of ones survives, else `old` (identity outside training)."""
    if rate == 0:
        return new
    return F.where(F.Dropout(F.ones_like(new), p=rate), new, old)


class ResidualCell(ModifierCell):
    """Adds each step's input to the wrapped cell's output (Wu et al. 2016).

    >>> import ember as mx
    >>> cell = mx.gluon.rnn.ResidualCell(mx.gluon.rnn.GRUCell(3, input_size=3))
    >>> cell.initialize()
    >>> cell(mx.nd.ones((2, 3)), cell.begin_state(batch_size=2))[0].shape
    (2, 3)
    """

    def _alias(self):
        return 'residual'

    def hybrid_forward(self, F, inputs, states):
        output, states = self.base_cell(inputs, states)
        return F.elemwise_add(output, inputs, name=f't{self._counter}_fwd'), states

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None,
               valid_length=None):
        self.reset()
        self.base_cell._modified = False
        try:
            outputs, states = self.base_cell.unroll(
                length, inputs=inputs, begin_state=begin_state, layout=layout,
                merge_outputs=merge_outputs, valid_length=valid_length)
        finally:
            self.base_cell._modified = True
        if merge_outputs is None:
            merge_outputs = _is_tensor(outputs)
        inputs, axis, F, _ = _format_sequence(length, inputs, layout, merge_outputs)
        if valid_length is not None:
            inputs = _mask_sequence_variable_length(F, inputs, length, valid_length, axis,
                                                    merge_outputs)
        if merge_outputs:
            return F.elemwise_add(outputs, inputs), states
        return [F.elemwise_add(o, i) for o, i in zip(outputs, inputs)], states


class BidirectionalCell(HybridRecurrentCell):
    """Runs `l_cell` forward and `r_cell` backward in time and concatenates their outputs.

    It can only be unrolled, not stepped. States are l_cell's followed by r_cell's.

    >>> import ember as mx
    >>> cell = mx.gluon.rnn.BidirectionalCell(mx.gluon.rnn.LSTMCell(3, input_size=2),
    ...                                       mx.gluon.rnn.LSTMCell(3, input_size=2))
    >>> cell.initialize()
    >>> out, states = cell.unroll(4, mx.nd.ones((5, 4, 2)), merge_outputs=True)
    >>> out.shape, len(states)
    ((5, 4, 6), 4)
    """

    def __init__(self, l_cell, r_cell, output_prefix='bi_'):
        super().__init__(prefix='', params=None)
        self.register_child(l_cell, 'l_cell')
        self.register_child(r_cell, 'r_cell')
        self._output_prefix = output_prefix

    def __call__(self, inputs, states):
        raise NotImplementedError('BidirectionalCell cannot be stepped; use unroll()')

    def __repr__(self):
        l_cell, r_cell = self._children.values()
        return (f'BidirectionalCell(\n  forward: {_indent(repr(l_cell))}\n'
                f'  backward: {_indent(repr(r_cell))}\n)')

    def state_info(self, batch_size=0):
        return _cells_state_info(self._children.values(), batch_size)

    def begin_state(self, **kwargs):
        self._check_unmodified()
        return _cells_begin_state(self._children.values(), **kwargs)

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None,
               valid_length=None):
        self.reset()
        inputs, axis, F, batch_size = _format_sequence(length, inputs, layout, False)
        reversed_inputs = _reverse_sequences(inputs, length, valid_length)
        states = _get_begin_state(self, F, begin_state, inputs, batch_size)
        l_cell, r_cell = self._children.values()
        split = len(l_cell.state_info(batch_size))
        l_outputs, l_states = l_cell.unroll(length, inputs=inputs, begin_state=states[:split],
                                            layout=layout, merge_outputs=merge_outputs,
                                            valid_length=valid_length)
        r_outputs, r_states = r_cell.unroll(length, inputs=reversed_inputs,
                                            begin_state=states[split:], layout=layout,
                                            merge_outputs=False, valid_length=valid_length)
        r_outputs = _reverse_sequences(r_outputs, length, valid_length)
        if merge_outputs is None:
            merge_outputs = _is_tensor(l_outputs)
            l_outputs, _, _, _ = _format_sequence(None, l_outputs, layout, merge_outputs)
        outputs = self._join(F, l_outputs, r_outputs, axis, merge_outputs)
        if valid_length is not None:
            outputs = _mask_sequence_variable_length(F, outputs, length, valid_length, axis,
                                                     merge_outputs)
        return outputs, l_states + r_states

    def _join(self, F, l_outputs, r_outputs, axis, merge):
        if merge:
            r_merged = F.stack(*r_outputs, axis=axis)
            return F.concat(l_outputs, r_merged, dim=2, name=f'{self._output_prefix}out')
        return [F.concat(l_o, r_o, dim=1, name=f'{self._output_prefix}t{i}')
                for i, (l_o, r_o) in enumerate(zip(l_outputs, r_outputs))]
