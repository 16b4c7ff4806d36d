"""Recurrent cells of ``mx.gluon.contrib.rnn``: variational dropout (one mask for every step)
and the LSTM with a projected state (LSTMP, Sak et al., 2014); ``dynamic_unroll``.

>>> import ember as mx
>>> cell = LSTMPCell(hidden_size=6, projection_size=2, input_size=3)
>>> cell.initialize()
>>> outputs, states = cell.unroll(4, mx.nd.ones((1, 4, 3)), merge_outputs=True)
>>> outputs.shape, [s.shape for s in states]
((1, 4, 2), [(1, 2), (1, 6)])
"""
from __future__ import annotations

from ember import ndarray as nd
from ember.gluon.rnn import BidirectionalCell, HybridRecurrentCell, ModifierCell
from ember.gluon.rnn.rnn_cell import (_format_sequence, _get_begin_state,
                                      _mask_sequence_variable_length)

# (dynamic_unroll stays out of the package's names, as in MXNet)
__all__ = ['VariationalDropoutCell', 'LSTMPCell']


class VariationalDropoutCell(ModifierCell):
    """Dropout on the inputs, states and outputs of `base_cell` with masks drawn once per
    sequence and used at every step (Gal and Ghahramani, 2016)."""

    def __init__(self, base_cell, drop_inputs=0., drop_states=0., drop_outputs=0.):
        if drop_states and isinstance(base_cell, BidirectionalCell):
            raise TypeError('BidirectionalCell cannot take variational state dropout; wrap the '
                            'cells underneath instead')
        super().__init__(base_cell)
        self.drop_inputs = drop_inputs
        self.drop_states = drop_states
        self.drop_outputs = drop_outputs
        self.reset()

    def _alias(self):
        return 'vardrop'

    def reset(self):
        super().reset()
        self.drop_inputs_mask = self.drop_states_mask = self.drop_outputs_mask = None

    def hybrid_forward(self, F, inputs, states):
        if self.drop_states and self.drop_states_mask is None:
            self.drop_states_mask = F.Dropout(F.ones_like(states[0]), p=self.drop_states)
        if self.drop_inputs and self.drop_inputs_mask is None:
            self.drop_inputs_mask = F.Dropout(F.ones_like(inputs), p=self.drop_inputs)
        if self.drop_states:
            states = [states[0] * self.drop_states_mask] + list(states[1:])
        if self.drop_inputs:
            inputs = inputs * self.drop_inputs_mask
        output, states = self.base_cell(inputs, states)
        if self.drop_outputs and self.drop_outputs_mask is None:
            self.drop_outputs_mask = F.Dropout(F.ones_like(output), p=self.drop_outputs)
        if self.drop_outputs:
            output = output * self.drop_outputs_mask
        return output, states

    def __repr__(self):
        return (f'{type(self).__name__}(p_out = {self.drop_outputs}, p_state = '
                f'{self.drop_states})')

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None,
               valid_length=None):
        if self.drop_states:
            return super().unroll(length, inputs, begin_state, layout, merge_outputs,
                                  valid_length=valid_length)
        # Without state dropout, the masks of a whole sequence are one Dropout each, shared
        # along the time axis.
        self.reset()
        inputs, axis, F, batch_size = _format_sequence(length, inputs, layout, True)
        states = _get_begin_state(self, F, begin_state, inputs, batch_size)
        if self.drop_inputs:
            inputs = F.Dropout(inputs, p=self.drop_inputs, axes=(axis,))
        outputs, states = self.base_cell.unroll(length, inputs, states, layout,
                                                merge_outputs=True, valid_length=valid_length)
        if self.drop_outputs:
            outputs = F.Dropout(outputs, p=self.drop_outputs, axes=(axis,))
        merge = (not isinstance(outputs, list)) if merge_outputs is None else merge_outputs
        outputs, _, _, _ = _format_sequence(length, outputs, layout, merge)
        if valid_length is not None:
            outputs = _mask_sequence_variable_length(F, outputs, length, valid_length, axis,
                                                     merge)
        return outputs, states


class LSTMPCell(HybridRecurrentCell):
    """LSTM whose hidden state is projected to `projection_size` units (the recurrent state
    and the output); states are ``[r, c]``."""

    def __init__(self, hidden_size, projection_size, i2h_weight_initializer=None,
                 h2h_weight_initializer=None, h2r_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros', input_size=0,
                 prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        self._hidden_size = hidden_size
        self._input_size = input_size
        self._projection_size = projection_size
        rows = 4 * hidden_size
        self.i2h_weight = self._param('i2h_weight', (rows, input_size), i2h_weight_initializer)
        self.h2h_weight = self._param('h2h_weight', (rows, projection_size),
                                      h2h_weight_initializer)
        self.h2r_weight = self._param('h2r_weight', (projection_size, hidden_size),
                                      h2r_weight_initializer)
        self.i2h_bias = self._param('i2h_bias', (rows,), i2h_bias_initializer)
        self.h2h_bias = self._param('h2h_bias', (rows,), h2h_bias_initializer)

    def _param(self, name, shape, init):
        return self.params.get(name, shape=shape, init=init, allow_deferred_init=True)

    def _alias(self):
        return 'lstmp'

    def state_info(self, batch_size=0):
        return [{'shape': (batch_size, self._projection_size), '__layout__': 'NC'},
                {'shape': (batch_size, self._hidden_size), '__layout__': 'NC'}]

    def infer_shape(self, inputs, *args):
        self.i2h_weight.shape = (4 * self._hidden_size, inputs.shape[-1])

    def __repr__(self):
        rows, columns = self.i2h_weight.shape
        return (f'{type(self).__name__}({columns or None} -> {rows} -> '
                f'{self.h2r_weight.shape[0]})')

    def hybrid_forward(self, F, inputs, states, i2h_weight, h2h_weight, h2r_weight, i2h_bias,
                       h2h_bias):
        prefix = f't{self._counter}_'
        i2h = F.FullyConnected(data=inputs, weight=i2h_weight, bias=i2h_bias,
                               num_hidden=self._hidden_size * 4, name=prefix + 'i2h')
        h2h = F.FullyConnected(data=states[0], weight=h2h_weight, bias=h2h_bias,
                               num_hidden=self._hidden_size * 4, name=prefix + 'h2h')
        gates = F.SliceChannel(F.elemwise_add(i2h, h2h), num_outputs=4, name=prefix + 'slice')
        in_gate = F.Activation(gates[0], act_type='sigmoid', name=prefix + 'i')
        forget_gate = F.Activation(gates[1], act_type='sigmoid', name=prefix + 'f')
        transform = F.Activation(gates[2], act_type='tanh', name=prefix + 'c')
        out_gate = F.Activation(gates[3], act_type='sigmoid', name=prefix + 'o')
        next_c = F.elemwise_add(F.elemwise_mul(forget_gate, states[1]),
                                F.elemwise_mul(in_gate, transform), name=prefix + 'state')
        hidden = F.elemwise_mul(out_gate, F.Activation(next_c, act_type='tanh'),
                                name=prefix + 'hidden')
        next_r = F.FullyConnected(data=hidden, num_hidden=self._projection_size,
                                  weight=h2r_weight, no_bias=True, name=prefix + 'out')
        return next_r, [next_r, next_c]


def dynamic_unroll(cell, inputs, begin_state, drop_inputs=0, drop_outputs=0, layout='TNC',
                   valid_length=None):
    """Run `cell` over NDArray `inputs` step by step (the length is the inputs' time axis):
    (outputs merged along the time axis, final states). With `valid_length`, each sequence's
    states stop at its last valid step and its later outputs are zero; dropout with one mask
    per sequence on the inputs and outputs."""
    if not isinstance(inputs, nd.NDArray):
        raise TypeError('dynamic_unroll runs imperatively: inputs must be an NDArray (use '
                        'cell.unroll in a hybridized block)')
    axis = layout.find('T')
    if drop_inputs:
        inputs = nd.Dropout(inputs, p=drop_inputs, axes=(axis,))
    steps = nd.split(inputs, num_outputs=inputs.shape[axis], axis=axis, squeeze_axis=True) \
        if inputs.shape[axis] > 1 else [inputs.reshape(
            tuple(d for i, d in enumerate(inputs.shape) if i != axis))]
    states, outputs = list(begin_state), []
    for index, step in enumerate(steps):
        output, new_states = cell(step, states)
        if valid_length is not None:
            alive = (valid_length > index).reshape((-1, 1))
            new_states = [nd.where(nd.broadcast_like(alive, new), new, old)
                          for new, old in zip(new_states, states)]
        outputs.append(output)
        states = new_states
    outputs = nd.stack(*outputs, axis=axis)
    if drop_outputs:
        outputs = nd.Dropout(outputs, p=drop_outputs, axes=(axis,))
    if valid_length is not None:
        outputs = nd.SequenceMask(outputs, sequence_length=valid_length,
                                  use_sequence_length=True, axis=axis)
    return outputs, states
