"""The symbolic recurrent cells of MXNet 1.x's ``mx.rnn``: each call of a cell adds one time
step to a Symbol graph; ``unroll`` adds a whole sequence.

Parameters are Symbol variables held by an :class:`RNNParams` (named ``<prefix><name>``), so
cells that share one share weights. Gated cells keep their gates stacked in one weight (``i2h``
and ``h2h``); ``unpack_weights`` splits them per gate (``i2h_f_weight``) and ``pack_weights``
joins them again, which is how checkpoints store them (:mod:`ember.rnn.rnn`).

>>> import ember as mx
>>> cell = mx.rnn.LSTMCell(4, prefix='lstm_')
>>> outputs, states = cell.unroll(3, mx.sym.var('data'), merge_outputs=True)
>>> outputs.infer_shape(data=(2, 3, 5))[1]
[(2, 3, 4)]
>>> sorted(cell.params._params)
['lstm_h2h_bias', 'lstm_h2h_weight', 'lstm_i2h_bias', 'lstm_i2h_weight']
"""
from __future__ import annotations

import functools

from ember import initializer as init
from ember import ndarray
from ember import symbol
from ember.base import EmberError, numeric_types, string_types

__all__ = ['RNNParams', 'BaseRNNCell', 'RNNCell', 'LSTMCell', 'GRUCell', 'FusedRNNCell',
           'SequentialRNNCell', 'DropoutCell', 'ModifierCell', 'ZoneoutCell', 'ResidualCell',
           'BidirectionalCell', 'BaseConvRNNCell', 'ConvRNNCell', 'ConvLSTMCell', 'ConvGRUCell',
           'numeric_types', 'string_types']

_GATES = {'rnn_relu': ('',), 'rnn_tanh': ('',), 'lstm': ('_i', '_f', '_c', '_o'),
          'gru': ('_r', '_z', '_o')}


def _states_of(cells, attribute):
    return sum((getattr(cell, attribute) for cell in cells), [])


def _unpack_all(cells, args):
    for cell in cells:
        args = cell.unpack_weights(args)
    return args


def _pack_all(cells, args):
    for cell in cells:
        args = cell.pack_weights(args)
    return args


def _normalize_sequence(length, inputs, layout, merge, in_layout=None):
    """`inputs` as one Symbol along the time axis of `layout` (`merge` True) or a list of
    `length` steps (False; None keeps what it is); and that axis."""
    if inputs is None:
        raise EmberError('unroll: inputs=None: create the input variables (mx.sym.var) and '
                         'pass them')
    axis = layout.find('T')
    in_axis = in_layout.find('T') if in_layout is not None else axis
    if isinstance(inputs, symbol.Symbol):
        if merge is False:
            if len(inputs.list_outputs()) != 1:
                raise EmberError('unroll: a grouped symbol as input; pass list(inputs)')
            inputs = list(symbol.split(inputs, axis=in_axis, num_outputs=length,
                                       squeeze_axis=1))
    else:
        if length is not None and len(inputs) != length:
            raise EmberError(f'unroll: {len(inputs)} inputs for length {length}')
        if merge is True:
            inputs = symbol.Concat(*[symbol.expand_dims(i, axis=axis) for i in inputs],
                                   dim=axis)
            in_axis = axis
    if isinstance(inputs, symbol.Symbol) and axis != in_axis:
        inputs = symbol.swapaxes(inputs, dim1=axis, dim2=in_axis)
    return inputs, axis


class RNNParams:
    """Symbol variables of a cell by name, created on first use with `prefix` before the name.

    >>> params = RNNParams('enc_')
    >>> params.get('i2h_weight').name, params.get('i2h_weight') is params.get('i2h_weight')
    ('enc_i2h_weight', True)
    """

    def __init__(self, prefix=''):
        self._prefix = prefix
        self._params = {}

    def get(self, name, **kwargs):
        name = self._prefix + name
        if name not in self._params:
            self._params[name] = symbol.Variable(name, **kwargs)
        return self._params[name]


class BaseRNNCell:
    """A cell: ``cell(inputs, states) -> (output, new_states)`` adds one step."""

    def __init__(self, prefix='', params=None):
        self._own_params = params is None
        self._params = RNNParams(prefix) if params is None else params
        self._prefix = prefix
        self._modified = False
        self.reset()

    def reset(self):
        """Start naming steps and begin states from 0 again (``unroll`` does)."""
        self._init_counter = -1
        self._counter = -1
        for cell in getattr(self, '_cells', ()):
            cell.reset()

    def __call__(self, inputs, states):
        raise TypeError(f'{type(self).__name__} defines no single step; use a concrete cell')

    @property
    def params(self):
        """The parameter holder (after this, the cell no longer owns it alone)."""
        self._own_params = False
        return self._params

    @property
    def state_info(self):
        """Per state: {'shape': ..., '__layout__': ...} (0 for the batch size)."""
        raise TypeError(f'{type(self).__name__} has no states of its own')

    @property
    def state_shape(self):
        return [info['shape'] for info in self.state_info]

    @property
    def _gate_names(self):
        return ()

    def begin_state(self, func=symbol.zeros, **kwargs):
        """Initial states made by `func` (``symbol.zeros``, or ``symbol.var`` to feed them),
        named ``<prefix>begin_state_<n>``."""
        self._check_not_modified()
        states = []
        for info in self.state_info:
            self._init_counter += 1
            if info is not None:
                kwargs.update(info)
            states.append(func(name=f'{self._prefix}begin_state_{self._init_counter}',
                               **kwargs))
        return states

    def _check_not_modified(self):
        if self._modified:
            raise EmberError('this cell is wrapped by a modifier cell (ZoneoutCell, '
                             'ResidualCell): call the modifier instead')

    def unpack_weights(self, args):
        """`args` (name -> NDArray) with each stacked i2h/h2h weight and bias split per gate."""
        args = args.copy()
        hidden = getattr(self, '_num_hidden', None)
        for group in ('i2h', 'h2h') if self._gate_names else ():
            weight = args.pop(f'{self._prefix}{group}_weight')
            bias = args.pop(f'{self._prefix}{group}_bias')
            for j, gate in enumerate(self._gate_names):
                rows = slice(j * hidden, (j + 1) * hidden)
                args[f'{self._prefix}{group}{gate}_weight'] = weight[rows].copy()
                args[f'{self._prefix}{group}{gate}_bias'] = bias[rows].copy()
        return args

    def pack_weights(self, args):
        """The inverse of :meth:`unpack_weights`."""
        args = args.copy()
        for group in ('i2h', 'h2h') if self._gate_names else ():
            for kind in ('weight', 'bias'):
                pieces = [args.pop(f'{self._prefix}{group}{gate}_{kind}')
                          for gate in self._gate_names]
                args[f'{self._prefix}{group}_{kind}'] = ndarray.concat(*pieces, dim=0)
        return args

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None):
        """Add `length` steps over `inputs` (a Symbol with a time axis in `layout`, or a list
        of per-step Symbols). Returns (outputs, final states); outputs are one Symbol with
        `merge_outputs`, a list without, and as given when it is None."""
        self.reset()
        inputs, _ = _normalize_sequence(length, inputs, layout, False)
        states = self.begin_state() if begin_state is None else begin_state
        outputs = []
        for step in range(length):
            output, states = self(inputs[step], states)
            outputs.append(output)
        outputs, _ = _normalize_sequence(length, outputs, layout, merge_outputs)
        return outputs, states

    def _get_activation(self, inputs, activation, **kwargs):
        if isinstance(activation, str):
            return symbol.Activation(inputs, act_type=activation, **kwargs)
        return activation(inputs, **kwargs)


# Symbols of one shape combine element-wise, as MXNet's ``+`` and ``*`` between symbols do:
# a begin state of shape (0, H) then learns its batch from the other side.
def _add(a, b):
    return symbol.elemwise_add(a, b)


def _mul(a, b):
    return symbol.elemwise_mul(a, b)


def _linear_state(num_hidden):
    return {'shape': (0, num_hidden), '__layout__': 'NC'}


class RNNCell(BaseRNNCell):
    """Elman cell: ``h = activation(W_i x + b_i + W_h h + b_h)``."""

    def __init__(self, num_hidden, activation='tanh', prefix='rnn_', params=None):
        super().__init__(prefix=prefix, params=params)
        self._num_hidden = num_hidden
        self._activation = activation
        self._iW, self._iB = self.params.get('i2h_weight'), self.params.get('i2h_bias')
        self._hW, self._hB = self.params.get('h2h_weight'), self.params.get('h2h_bias')

    @property
    def state_info(self):
        return [_linear_state(self._num_hidden)]

    @property
    def _gate_names(self):
        return ('',)

    def __call__(self, inputs, states):
        self._counter += 1
        name = f'{self._prefix}t{self._counter}_'
        i2h = symbol.FullyConnected(inputs, weight=self._iW, bias=self._iB,
                                    num_hidden=self._num_hidden, name=f'{name}i2h')
        h2h = symbol.FullyConnected(states[0], weight=self._hW, bias=self._hB,
                                    num_hidden=self._num_hidden, name=f'{name}h2h')
        output = self._get_activation(_add(i2h, h2h), self._activation, name=f'{name}out')
        return output, [output]


class LSTMCell(BaseRNNCell):
    """Long short-term memory cell; gates i, f, c, o stacked in that order. The input bias
    starts with `forget_bias` on the forget gate (``init.LSTMBias``)."""

    def __init__(self, num_hidden, prefix='lstm_', params=None, forget_bias=1.0):
        super().__init__(prefix=prefix, params=params)
        self._num_hidden = num_hidden
        self._iW = self.params.get('i2h_weight')
        self._hW = self.params.get('h2h_weight')
        self._iB = self.params.get('i2h_bias', init=init.LSTMBias(forget_bias=forget_bias))
        self._hB = self.params.get('h2h_bias')

    @property
    def state_info(self):
        return [_linear_state(self._num_hidden), _linear_state(self._num_hidden)]

    @property
    def _gate_names(self):
        return ['_i', '_f', '_c', '_o']

    def __call__(self, inputs, states):
        self._counter += 1
        name = f'{self._prefix}t{self._counter}_'
        gates = _add(symbol.FullyConnected(inputs, weight=self._iW, bias=self._iB,
                                           num_hidden=self._num_hidden * 4, name=f'{name}i2h'),
                     symbol.FullyConnected(states[0], weight=self._hW, bias=self._hB,
                                           num_hidden=self._num_hidden * 4, name=f'{name}h2h'))
        parts = symbol.SliceChannel(gates, num_outputs=4, name=f'{name}slice')
        in_gate = symbol.Activation(parts[0], act_type='sigmoid', name=f'{name}i')
        forget_gate = symbol.Activation(parts[1], act_type='sigmoid', name=f'{name}f')
        transform = symbol.Activation(parts[2], act_type='tanh', name=f'{name}c')
        out_gate = symbol.Activation(parts[3], act_type='sigmoid', name=f'{name}o')
        next_c = symbol.elemwise_add(_mul(forget_gate, states[1]), _mul(in_gate, transform),
                                     name=f'{name}state')
        next_h = symbol.elemwise_mul(out_gate, symbol.Activation(next_c, act_type='tanh'),
                                     name=f'{name}out')
        return next_h, [next_h, next_c]


class GRUCell(BaseRNNCell):
    """Gated recurrent unit in cuDNN's form: ``n = tanh(W_n x + r * (U_n h))``; gates r, z, n
    (named _r, _z, _o)."""

    def __init__(self, num_hidden, prefix='gru_', params=None):
        super().__init__(prefix=prefix, params=params)
        self._num_hidden = num_hidden
        self._iW, self._iB = self.params.get('i2h_weight'), self.params.get('i2h_bias')
        self._hW, self._hB = self.params.get('h2h_weight'), self.params.get('h2h_bias')

    @property
    def state_info(self):
        return [_linear_state(self._num_hidden)]

    @property
    def _gate_names(self):
        return ['_r', '_z', '_o']

    def __call__(self, inputs, states):
        self._counter += 1
        name = f'{self._prefix}t{self._counter}_'
        previous = states[0]
        i2h = symbol.FullyConnected(inputs, weight=self._iW, bias=self._iB,
                                    num_hidden=self._num_hidden * 3, name=f'{name}_i2h')
        h2h = symbol.FullyConnected(previous, weight=self._hW, bias=self._hB,
                                    num_hidden=self._num_hidden * 3, name=f'{name}_h2h')
        i2h_r, i2h_z, i2h = symbol.SliceChannel(i2h, num_outputs=3, name=f'{name}_i2h_slice')
        h2h_r, h2h_z, h2h = symbol.SliceChannel(h2h, num_outputs=3, name=f'{name}_h2h_slice')
        reset = symbol.Activation(_add(i2h_r, h2h_r), act_type='sigmoid', name=f'{name}_r_act')
        update = symbol.Activation(_add(i2h_z, h2h_z), act_type='sigmoid', name=f'{name}_z_act')
        candidate = symbol.Activation(_add(i2h, _mul(reset, h2h)), act_type='tanh',
                                      name=f'{name}_h_act')
        next_h = symbol.elemwise_add(_mul(1.0 - update, candidate), _mul(update, previous),
                                     name=f'{name}out')
        return next_h, [next_h]


class FusedRNNCell(BaseRNNCell):
    """Every layer and step of an RNN in one ``RNN`` operator, over one packed parameter
    vector (``<prefix>parameters``, initialized per gate by ``init.FusedRNN``). It unrolls
    only; :meth:`unfuse` gives the equivalent stack of stepping cells."""

    def __init__(self, num_hidden, num_layers=1, mode='lstm', bidirectional=False, dropout=0.,
                 get_next_state=False, forget_bias=1.0, prefix=None, params=None):
        if mode not in _GATES:
            raise ValueError(f'FusedRNNCell: mode={mode!r}: expected one of {sorted(_GATES)}')
        super().__init__(prefix=f'{mode}_' if prefix is None else prefix, params=params)
        self._num_hidden = num_hidden
        self._num_layers = num_layers
        self._mode = mode
        self._bidirectional = bidirectional
        self._dropout = dropout
        self._get_next_state = get_next_state
        self._directions = ['l', 'r'] if bidirectional else ['l']
        self._parameter = self.params.get('parameters', init=init.FusedRNN(
            None, num_hidden, num_layers, mode, bidirectional, forget_bias))

    @property
    def state_info(self):
        shape = ((self._bidirectional + 1) * self._num_layers, 0, self._num_hidden)
        return [{'shape': shape, '__layout__': 'LNC'}
                for _ in range(2 if self._mode == 'lstm' else 1)]

    @property
    def _gate_names(self):
        return list(_GATES[self._mode])

    def _pieces(self, size):
        return init.fused_rnn_pieces(size, self._num_hidden, self._num_layers, self._mode,
                                     self._bidirectional)

    def unpack_weights(self, args):
        """The packed vector split into per-gate weights and biases, MXNet's names."""
        args = args.copy()
        flat = args.pop(self._parameter.name)
        for name, start, shape in self._pieces(flat.size):
            size = int(functools.reduce(lambda a, b: a * b, shape, 1))
            args[self._prefix + name] = flat[start:start + size].reshape(shape).copy()
        return args

    def pack_weights(self, args):
        """The per-gate pieces (of :meth:`unpack_weights`) joined into the packed vector."""
        args = args.copy()
        first = args[f'{self._prefix}l0_i2h{self._gate_names[0]}_weight']
        gates, hidden, directions = len(self._gate_names), self._num_hidden, \
            len(self._directions)
        size = ((first.shape[1] + hidden + 2) * hidden * gates * directions +
                (self._num_layers - 1) * gates * hidden * (hidden + directions * hidden + 2) *
                directions)
        pieces = [args.pop(self._prefix + name).reshape((-1,))
                  for name, _, _ in self._pieces(size)]
        args[self._parameter.name] = ndarray.concat(*pieces, dim=0)
        return args

    def __call__(self, inputs, states):
        raise TypeError('FusedRNNCell runs whole sequences: call unroll (or unfuse() for a '
                        'cell that steps)')

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None):
        self.reset()
        inputs, axis = _normalize_sequence(length, inputs, layout, True)
        if axis not in (0, 1):
            raise EmberError(f'FusedRNNCell: layout {layout!r}: expected NTC or TNC')
        if axis == 1:
            inputs = symbol.swapaxes(inputs, dim1=0, dim2=1)
        states = self.begin_state() if begin_state is None else begin_state
        named = {'state': states[0]}
        if self._mode == 'lstm':
            named['state_cell'] = states[1]
        rnn = symbol.RNN(data=inputs, parameters=self._parameter, state_size=self._num_hidden,
                         num_layers=self._num_layers, bidirectional=self._bidirectional,
                         p=self._dropout, state_outputs=self._get_next_state, mode=self._mode,
                         name=self._prefix + 'rnn', **named)
        outputs, states = (rnn[0], [rnn[i] for i in range(1, len(named) + 1)]) \
            if self._get_next_state else (rnn, [])
        for state in states:
            state._set_attr(__layout__='LNC')
        if axis == 1:
            outputs = symbol.swapaxes(outputs, dim1=0, dim2=1)
        outputs, _ = _normalize_sequence(length, outputs, layout, merge_outputs)
        return outputs, states

    def unfuse(self):
        """The same network as a :class:`SequentialRNNCell` of stepping cells (their weights
        named as :meth:`unpack_weights` names the pieces)."""
        def make(cell_prefix):
            if self._mode in ('rnn_relu', 'rnn_tanh'):
                return RNNCell(self._num_hidden, activation=self._mode[4:], prefix=cell_prefix)
            return {'lstm': LSTMCell, 'gru': GRUCell}[self._mode](self._num_hidden,
                                                                 prefix=cell_prefix)
        stack = SequentialRNNCell()
        for layer in range(self._num_layers):
            if self._bidirectional:
                stack.add(BidirectionalCell(make(f'{self._prefix}l{layer}_'),
                                            make(f'{self._prefix}r{layer}_'),
                                            output_prefix=f'{self._prefix}bi_l{layer}_'))
            else:
                stack.add(make(f'{self._prefix}l{layer}_'))
            if self._dropout > 0 and layer != self._num_layers - 1:
                stack.add(DropoutCell(self._dropout, prefix=f'{self._prefix}_dropout{layer}_'))
        return stack


class SequentialRNNCell(BaseRNNCell):
    """Cells stacked: each one's output is the next one's input."""

    def __init__(self, params=None):
        super().__init__(prefix='', params=params)
        self._override_cell_params = params is not None
        self._cells = []

    def add(self, cell):
        """Append `cell` to the stack (its parameters join this cell's)."""
        self._cells.append(cell)
        if self._override_cell_params:
            if not cell._own_params:
                raise EmberError('give params to the SequentialRNNCell or to its cells, not '
                                 'both')
            cell.params._params.update(self.params._params)
        self.params._params.update(cell.params._params)

    @property
    def state_info(self):
        return _states_of(self._cells, 'state_info')

    def begin_state(self, **kwargs):
        self._check_not_modified()
        return sum((cell.begin_state(**kwargs) for cell in self._cells), [])

    def unpack_weights(self, args):
        return _unpack_all(self._cells, args)

    def pack_weights(self, args):
        return _pack_all(self._cells, args)

    def __call__(self, inputs, states):
        self._counter += 1
        next_states, start = [], 0
        for cell in self._cells:
            if isinstance(cell, BidirectionalCell):
                raise TypeError('a SequentialRNNCell holding a BidirectionalCell cannot step; '
                                'use unroll')
            count = len(cell.state_info)
            inputs, state = cell(inputs, states[start:start + count])
            start += count
            next_states += state
        return inputs, next_states

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None):
        self.reset()
        states = self.begin_state() if begin_state is None else begin_state
        next_states, start = [], 0
        for index, cell in enumerate(self._cells):
            count = len(cell.state_info)
            last = index == len(self._cells) - 1
            inputs, cell_states = cell.unroll(length, inputs=inputs,
                                              begin_state=states[start:start + count],
                                              layout=layout,
                                              merge_outputs=merge_outputs if last else None)
            start += count
            next_states += cell_states
        return inputs, next_states


class DropoutCell(BaseRNNCell):
    """Dropout on the input of each step (probability `dropout`); no states."""

    def __init__(self, dropout, prefix='dropout_', params=None):
        super().__init__(prefix, params)
        if not isinstance(dropout, numeric_types):
            raise TypeError(f'DropoutCell: dropout={dropout!r}: expected a number')
        self.dropout = dropout

    @property
    def state_info(self):
        return []

    def __call__(self, inputs, states):
        if self.dropout > 0:
            inputs = symbol.Dropout(data=inputs, p=self.dropout)
        return inputs, states

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None):
        self.reset()
        inputs, _ = _normalize_sequence(length, inputs, layout, merge_outputs)
        if isinstance(inputs, symbol.Symbol):
            return self(inputs, [])
        return super().unroll(length, inputs, begin_state=begin_state, layout=layout,
                              merge_outputs=merge_outputs)


class ModifierCell(BaseRNNCell):
    """Base of cells that wrap another (`base_cell`, which must then not be called itself)."""

    def __init__(self, base_cell):
        super().__init__()
        base_cell._modified = True
        self.base_cell = base_cell

    @property
    def params(self):
        self._own_params = False
        return self.base_cell.params

    @property
    def state_info(self):
        return self.base_cell.state_info

    def begin_state(self, init_sym=symbol.zeros, **kwargs):
        self._check_not_modified()
        self.base_cell._modified = False
        try:
            return self.base_cell.begin_state(init_sym, **kwargs)
        finally:
            self.base_cell._modified = True

    def unpack_weights(self, args):
        return self.base_cell.unpack_weights(args)

    def pack_weights(self, args):
        return self.base_cell.pack_weights(args)

    def __call__(self, inputs, states):
        raise TypeError(f'{type(self).__name__} defines no step; subclasses of ModifierCell do')


class ZoneoutCell(ModifierCell):
    """Zoneout: while training, each output and state element keeps its previous value with
    probability `zoneout_outputs` / `zoneout_states`."""

    def __init__(self, base_cell, zoneout_outputs=0., zoneout_states=0.):
        if isinstance(base_cell, (FusedRNNCell, BidirectionalCell)):
            raise TypeError(f'ZoneoutCell cannot wrap a {type(base_cell).__name__}, which does '
                            'not step; wrap the cells underneath (unfuse() a FusedRNNCell)')
        super().__init__(base_cell)
        self.zoneout_outputs = zoneout_outputs
        self.zoneout_states = zoneout_states
        self.prev_output = None

    def reset(self):
        super().reset()
        self.prev_output = None

    def __call__(self, inputs, states):
        next_output, next_states = self.base_cell(inputs, states)

        def keep_new(p, like):
            return symbol.Dropout(symbol.ones_like(like), p=p)
        previous = (self.prev_output if self.prev_output is not None
                    else symbol.zeros_like(next_output))
        output = next_output if self.zoneout_outputs == 0 else symbol.where(
            keep_new(self.zoneout_outputs, next_output), next_output, previous)
        if self.zoneout_states != 0:
            next_states = [symbol.where(keep_new(self.zoneout_states, new), new, old)
                           for new, old in zip(next_states, states)]
        self.prev_output = output
        return output, next_states


class ResidualCell(ModifierCell):
    """The base cell's output plus its input (Wu et al., 2016)."""

    def __call__(self, inputs, states):
        output, states = self.base_cell(inputs, states)
        return symbol.elemwise_add(output, inputs, name=f'{output.name}_plus_residual'), states

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None):
        self.reset()
        self.base_cell._modified = False
        try:
            outputs, states = self.base_cell.unroll(length, inputs=inputs,
                                                    begin_state=begin_state, layout=layout,
                                                    merge_outputs=merge_outputs)
        finally:
            self.base_cell._modified = True
        if merge_outputs is None:
            merge_outputs = isinstance(outputs, symbol.Symbol)
        inputs, _ = _normalize_sequence(length, inputs, layout, merge_outputs)
        if merge_outputs:
            return symbol.elemwise_add(outputs, inputs,
                                       name=f'{outputs.name}_plus_residual'), states
        return [symbol.elemwise_add(out, x, name=f'{out.name}_plus_residual')
                for out, x in zip(outputs, inputs)], states


class BidirectionalCell(BaseRNNCell):
    """`l_cell` over the sequence and `r_cell` over it reversed, their outputs concatenated
    (named with `output_prefix`). It unrolls only."""

    def __init__(self, l_cell, r_cell, params=None, output_prefix='bi_'):
        super().__init__('', params=params)
        self._output_prefix = output_prefix
        self._override_cell_params = params is not None
        for cell in (l_cell, r_cell):
            if self._override_cell_params:
                if not cell._own_params:
                    raise EmberError('give params to the BidirectionalCell or to its cells, '
                                     'not both')
                cell.params._params.update(self.params._params)
        for cell in (l_cell, r_cell):
            self.params._params.update(cell.params._params)
        self._cells = [l_cell, r_cell]

    def unpack_weights(self, args):
        return _unpack_all(self._cells, args)

    def pack_weights(self, args):
        return _pack_all(self._cells, args)

    def __call__(self, inputs, states):
        raise TypeError('BidirectionalCell runs whole sequences: call unroll')

    @property
    def state_info(self):
        return _states_of(self._cells, 'state_info')

    def begin_state(self, **kwargs):
        self._check_not_modified()
        return sum((cell.begin_state(**kwargs) for cell in self._cells), [])

    def unroll(self, length, inputs, begin_state=None, layout='NTC', merge_outputs=None):
        self.reset()
        inputs, axis = _normalize_sequence(length, inputs, layout, False)
        states = self.begin_state() if begin_state is None else begin_state
        l_cell, r_cell = self._cells
        split = len(l_cell.state_info)
        l_outputs, l_states = l_cell.unroll(length, inputs=inputs, begin_state=states[:split],
                                            layout=layout, merge_outputs=merge_outputs)
        r_outputs, r_states = r_cell.unroll(length, inputs=list(reversed(inputs)),
                                            begin_state=states[split:], layout=layout,
                                            merge_outputs=merge_outputs)
        if merge_outputs is None:
            merge_outputs = (isinstance(l_outputs, symbol.Symbol) and
                             isinstance(r_outputs, symbol.Symbol))
            if not merge_outputs:
                l_outputs = self._steps(l_outputs, axis, length)
                r_outputs = self._steps(r_outputs, axis, length)
        if merge_outputs:
            outputs = symbol.Concat(l_outputs, symbol.reverse(r_outputs, axis=axis), dim=2,
                                    name=f'{self._output_prefix}out')
        else:
            outputs = [symbol.Concat(left, right, dim=1, name=f'{self._output_prefix}t{i}')
                       for i, (left, right) in enumerate(zip(l_outputs,
                                                             reversed(r_outputs)))]
        return outputs, [l_states, r_states]

    @staticmethod
    def _steps(outputs, axis, length):
        if isinstance(outputs, symbol.Symbol):
            return list(symbol.SliceChannel(outputs, axis=axis, num_outputs=length,
                                            squeeze_axis=1))
        return outputs


class BaseConvRNNCell(BaseRNNCell):
    """Base of the convolutional cells: i2h and h2h are convolutions (h2h keeps the spatial
    size: odd kernels, padded); states are shaped like the i2h convolution's output."""

    def __init__(self, input_shape, num_hidden, h2h_kernel, h2h_dilate, i2h_kernel, i2h_stride,
                 i2h_pad, i2h_dilate, i2h_weight_initializer, h2h_weight_initializer,
                 i2h_bias_initializer, h2h_bias_initializer, activation, prefix='', params=None,
                 conv_layout='NCHW'):
        super().__init__(prefix=prefix, params=params)
        if h2h_kernel[0] % 2 == 0 or h2h_kernel[1] % 2 == 0:
            raise ValueError(f'h2h_kernel={h2h_kernel}: expected odd sizes, which keep the '
                             'state\'s size')
        self._h2h_kernel, self._h2h_dilate = h2h_kernel, h2h_dilate
        self._h2h_pad = tuple(d * (k - 1) // 2 for d, k in zip(h2h_dilate, h2h_kernel))
        self._i2h_kernel, self._i2h_stride = i2h_kernel, i2h_stride
        self._i2h_pad, self._i2h_dilate = i2h_pad, i2h_dilate
        self._num_hidden = num_hidden
        self._input_shape = input_shape
        self._conv_layout = conv_layout
        self._activation = activation
        probe = symbol.Convolution(symbol.Variable('data'), num_filter=num_hidden,
                                   kernel=i2h_kernel, stride=i2h_stride, pad=i2h_pad,
                                   dilate=i2h_dilate, layout=conv_layout)
        self._state_shape = (0,) + tuple(probe.infer_shape(data=input_shape)[1][0][1:])
        self._iW = self.params.get('i2h_weight', init=i2h_weight_initializer)
        self._hW = self.params.get('h2h_weight', init=h2h_weight_initializer)
        self._iB = self.params.get('i2h_bias', init=i2h_bias_initializer)
        self._hB = self.params.get('h2h_bias', init=h2h_bias_initializer)

    @property
    def _num_gates(self):
        return len(self._gate_names)

    @property
    def state_info(self):
        return [{'shape': self._state_shape, '__layout__': self._conv_layout}
                for _ in range(self._num_states)]

    _num_states = 2

    def _conv_forward(self, inputs, states, name):
        filters = self._num_hidden * self._num_gates
        i2h = symbol.Convolution(inputs, weight=self._iW, bias=self._iB, num_filter=filters,
                                 kernel=self._i2h_kernel, stride=self._i2h_stride,
                                 pad=self._i2h_pad, dilate=self._i2h_dilate,
                                 layout=self._conv_layout, name=f'{name}i2h')
        h2h = symbol.Convolution(states[0], weight=self._hW, bias=self._hB, num_filter=filters,
                                 kernel=self._h2h_kernel, dilate=self._h2h_dilate,
                                 pad=self._h2h_pad, stride=(1, 1), layout=self._conv_layout,
                                 name=f'{name}h2h')
        return i2h, h2h

    def __call__(self, inputs, states):
        raise TypeError('BaseConvRNNCell defines no step; use ConvRNNCell, ConvLSTMCell or '
                        'ConvGRUCell')


_LEAKY = functools.partial(symbol.LeakyReLU, act_type='leaky', slope=0.2)


class ConvRNNCell(BaseConvRNNCell):
    """Convolutional Elman cell."""
    _num_states = 1

    def __init__(self, input_shape, num_hidden, h2h_kernel=(3, 3), h2h_dilate=(1, 1),
                 i2h_kernel=(3, 3), i2h_stride=(1, 1), i2h_pad=(1, 1), i2h_dilate=(1, 1),
                 i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros', activation=_LEAKY,
                 prefix='ConvRNN_', params=None, conv_layout='NCHW'):
        super().__init__(input_shape, num_hidden, h2h_kernel, h2h_dilate, i2h_kernel,
                         i2h_stride, i2h_pad, i2h_dilate, i2h_weight_initializer,
                         h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer,
                         activation, prefix, params, conv_layout)

    @property
    def _gate_names(self):
        return ('',)

    def __call__(self, inputs, states):
        self._counter += 1
        name = f'{self._prefix}t{self._counter}_'
        i2h, h2h = self._conv_forward(inputs, states, name)
        output = self._get_activation(_add(i2h, h2h), self._activation, name=f'{name}out')
        return output, [output]


class ConvLSTMCell(BaseConvRNNCell):
    """Convolutional LSTM cell (Shi et al., 2015); `activation` for the transform and cell."""

    def __init__(self, input_shape, num_hidden, h2h_kernel=(3, 3), h2h_dilate=(1, 1),
                 i2h_kernel=(3, 3), i2h_stride=(1, 1), i2h_pad=(1, 1), i2h_dilate=(1, 1),
                 i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros', activation=_LEAKY,
                 prefix='ConvLSTM_', params=None, conv_layout='NCHW'):
        super().__init__(input_shape, num_hidden, h2h_kernel, h2h_dilate, i2h_kernel,
                         i2h_stride, i2h_pad, i2h_dilate, i2h_weight_initializer,
                         h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer,
                         activation, prefix, params, conv_layout)

    @property
    def _gate_names(self):
        return ['_i', '_f', '_c', '_o']

    def __call__(self, inputs, states):
        self._counter += 1
        name = f'{self._prefix}t{self._counter}_'
        i2h, h2h = self._conv_forward(inputs, states, name)
        parts = symbol.SliceChannel(_add(i2h, h2h), num_outputs=4,
                                    axis=self._conv_layout.find('C'), name=f'{name}slice')
        in_gate = symbol.Activation(parts[0], act_type='sigmoid', name=f'{name}i')
        forget_gate = symbol.Activation(parts[1], act_type='sigmoid', name=f'{name}f')
        transform = self._get_activation(parts[2], self._activation, name=f'{name}c')
        out_gate = symbol.Activation(parts[3], act_type='sigmoid', name=f'{name}o')
        next_c = symbol.elemwise_add(_mul(forget_gate, states[1]), _mul(in_gate, transform),
                                     name=f'{name}state')
        next_h = symbol.elemwise_mul(out_gate, self._get_activation(next_c, self._activation),
                                     name=f'{name}out')
        return next_h, [next_h, next_c]


class ConvGRUCell(BaseConvRNNCell):
    """Convolutional GRU cell; `activation` for the candidate state."""
    _num_states = 1

    def __init__(self, input_shape, num_hidden, h2h_kernel=(3, 3), h2h_dilate=(1, 1),
                 i2h_kernel=(3, 3), i2h_stride=(1, 1), i2h_pad=(1, 1), i2h_dilate=(1, 1),
                 i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros', activation=_LEAKY,
                 prefix='ConvGRU_', params=None, conv_layout='NCHW'):
        super().__init__(input_shape, num_hidden, h2h_kernel, h2h_dilate, i2h_kernel,
                         i2h_stride, i2h_pad, i2h_dilate, i2h_weight_initializer,
                         h2h_weight_initializer, i2h_bias_initializer, h2h_bias_initializer,
                         activation, prefix, params, conv_layout)

    @property
    def _gate_names(self):
        return ['_r', '_z', '_o']

    def __call__(self, inputs, states):
        self._counter += 1
        name = f'{self._prefix}t{self._counter}_'
        i2h, h2h = self._conv_forward(inputs, states, name)
        i2h_r, i2h_z, i2h = symbol.SliceChannel(i2h, num_outputs=3, name=f'{name}_i2h_slice')
        h2h_r, h2h_z, h2h = symbol.SliceChannel(h2h, num_outputs=3, name=f'{name}_h2h_slice')
        reset = symbol.Activation(_add(i2h_r, h2h_r), act_type='sigmoid', name=f'{name}_r_act')
        update = symbol.Activation(_add(i2h_z, h2h_z), act_type='sigmoid', name=f'{name}_z_act')
        candidate = self._get_activation(_add(i2h, _mul(reset, h2h)), self._activation,
                                         name=f'{name}_h_act')
        next_h = symbol.elemwise_add(_mul(1.0 - update, candidate), _mul(update, states[0]),
                                     name=f'{name}out')
        return next_h, [next_h]

