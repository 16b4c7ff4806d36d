"""Convolutional recurrent cells of ``mx.gluon.contrib.rnn``: RNN, LSTM and GRU cells whose
input-to-state and state-to-state maps are 1-D, 2-D or 3-D convolutions (Shi et al., 2015).

The input's shape without the batch (``input_shape``, e.g. (C, H, W)) fixes the states'
shape; the state-to-state kernels are odd and padded so that the states keep their size.

>>> import ember as mx
>>> cell = Conv2DLSTMCell((3, 8, 8), hidden_channels=4, i2h_kernel=(3, 3), h2h_kernel=(3, 3),
...                       i2h_pad=(1, 1))
>>> cell.state_info(batch_size=2)[0]['shape']
(2, 4, 8, 8)
"""
from __future__ import annotations

from math import floor

from ember.base import numeric_types
from ember.gluon.rnn import HybridRecurrentCell

__all__ = ['Conv1DRNNCell', 'Conv2DRNNCell', 'Conv3DRNNCell', 'Conv1DLSTMCell',
           'Conv2DLSTMCell', 'Conv3DLSTMCell', 'Conv1DGRUCell', 'Conv2DGRUCell',
           'Conv3DGRUCell']


def _conv_out_size(dimensions, kernels, paddings, dilations):
    return tuple(int(floor(x + 2 * p - d * (k - 1) - 1) + 1) if x else 0
                 for x, k, p, d in zip(dimensions, kernels, paddings, dilations))


def _per_axis(spec, dims, name):
    if isinstance(spec, numeric_types):
        return (int(spec),) * dims
    if len(spec) != dims:
        raise ValueError(f'{name}={spec!r}: expected an int or {dims} ints for a {dims}-D '
                         'convolution')
    return tuple(spec)


class _BaseConvRNNCell(HybridRecurrentCell):
    """Parameters and convolutions shared by the convolutional cells."""
    _gate_names = ('',)

    def __init__(self, input_shape, hidden_channels, i2h_kernel, h2h_kernel, i2h_pad,
                 i2h_dilate, h2h_dilate, i2h_weight_initializer, h2h_weight_initializer,
                 i2h_bias_initializer, h2h_bias_initializer, dims, conv_layout, activation,
                 prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        self._hidden_channels = hidden_channels
        self._input_shape = tuple(input_shape)
        self._conv_layout = conv_layout
        self._activation = activation
        self._i2h_kernel = _per_axis(i2h_kernel, dims, 'i2h_kernel')
        self._i2h_pad = _per_axis(i2h_pad, dims, 'i2h_pad')
        self._i2h_dilate = _per_axis(i2h_dilate, dims, 'i2h_dilate')
        self._h2h_kernel = _per_axis(h2h_kernel, dims, 'h2h_kernel')
        self._h2h_dilate = _per_axis(h2h_dilate, dims, 'h2h_dilate')
        self._stride = (1,) * dims
        if any(k % 2 == 0 for k in self._h2h_kernel):
            raise ValueError(f'h2h_kernel={h2h_kernel!r}: expected odd sizes, which keep the '
                             'state\'s size')
        self._h2h_pad = tuple(d * (k - 1) // 2 for d, k in zip(self._h2h_dilate,
                                                               self._h2h_kernel))
        i2h_shape, h2h_shape = self._decide_shapes()
        gates = hidden_channels * len(self._gate_names)
        self.i2h_weight = self._param('i2h_weight', i2h_shape, i2h_weight_initializer)
        self.h2h_weight = self._param('h2h_weight', h2h_shape, h2h_weight_initializer)
        self.i2h_bias = self._param('i2h_bias', (gates,), i2h_bias_initializer)
        self.h2h_bias = self._param('h2h_bias', (gates,), h2h_bias_initializer)

    def _param(self, name, shape, init):
        return self.params.get(name, shape=shape, init=init, allow_deferred_init=True)

    def _decide_shapes(self):
        """(i2h weight shape, h2h weight shape); sets the channel axis and the state shape."""
        self._channel_axis = self._conv_layout.find('C')
        channels_first = self._channel_axis == 1
        in_channels = self._input_shape[self._channel_axis - 1]
        spatial = self._input_shape[1:] if channels_first else self._input_shape[:-1]
        out = _conv_out_size(spatial, self._i2h_kernel, self._i2h_pad, self._i2h_dilate)
        gates = self._hidden_channels * len(self._gate_names)
        if channels_first:
            self._state_shape = (self._hidden_channels,) + out
            return ((gates, in_channels) + self._i2h_kernel,
                    (gates, self._hidden_channels) + self._h2h_kernel)
        self._state_shape = out + (self._hidden_channels,)
        return ((gates,) + self._i2h_kernel + (in_channels,),
                (gates,) + self._h2h_kernel + (self._hidden_channels,))

    def state_info(self, batch_size=0):
        return [{'shape': (batch_size,) + self._state_shape, '__layout__': self._conv_layout}
                for _ in range(self._num_states)]

    _num_states = 1

    def _conv_forward(self, F, inputs, states, i2h_weight, h2h_weight, i2h_bias, h2h_bias,
                      prefix):
        filters = self._hidden_channels * len(self._gate_names)
        i2h = F.Convolution(data=inputs, num_filter=filters, kernel=self._i2h_kernel,
                            stride=self._stride, pad=self._i2h_pad, dilate=self._i2h_dilate,
                            weight=i2h_weight, bias=i2h_bias, layout=self._conv_layout,
                            name=prefix + 'i2h')
        h2h = F.Convolution(data=states[0], num_filter=filters, kernel=self._h2h_kernel,
                            dilate=self._h2h_dilate, pad=self._h2h_pad, stride=self._stride,
                            weight=h2h_weight, bias=h2h_bias, layout=self._conv_layout,
                            name=prefix + 'h2h')
        return i2h, h2h

    def __repr__(self):
        shape = self.i2h_weight.shape
        in_channels = shape[1 if self._channel_axis == 1 else -1]
        activation = f', {self._activation}' if self._activation is not None else ''
        return (f'{type(self).__name__}({in_channels or None} -> {shape[0]}{activation}, '
                f'{self._conv_layout})')


class _ConvRNNCell(_BaseConvRNNCell):
    def _alias(self):
        return 'conv_rnn'

    def hybrid_forward(self, F, inputs, states, i2h_weight, h2h_weight, i2h_bias, h2h_bias):
        prefix = f't{self._counter}_'
        i2h, h2h = self._conv_forward(F, inputs, states, i2h_weight, h2h_weight, i2h_bias,
                                      h2h_bias, prefix)
        output = self._get_activation(F, F.elemwise_add(i2h, h2h), self._activation,
                                      name=prefix + 'out')
        return output, [output]


class _ConvLSTMCell(_BaseConvRNNCell):
    _gate_names = ('_i', '_f', '_c', '_o')
    _num_states = 2

    def _alias(self):
        return 'conv_lstm'

    def hybrid_forward(self, F, inputs, states, i2h_weight, h2h_weight, i2h_bias, h2h_bias):
        prefix = f't{self._counter}_'
        i2h, h2h = self._conv_forward(F, inputs, states, i2h_weight, h2h_weight, i2h_bias,
                                      h2h_bias, prefix)
        gates = F.SliceChannel(F.elemwise_add(i2h, h2h), num_outputs=4,
                               axis=self._channel_axis, name=prefix + 'slice')
        in_gate = F.Activation(gates[0], act_type='sigmoid', name=prefix + 'i')
        forget_gate = F.Activation(gates[1], act_type='sigmoid', name=prefix + 'f')
        transform = self._get_activation(F, gates[2], self._activation, name=prefix + 'c')
        out_gate = F.Activation(gates[3], act_type='sigmoid', name=prefix + 'o')
        next_c = F.elemwise_add(F.elemwise_mul(forget_gate, states[1]),
                                F.elemwise_mul(in_gate, transform), name=prefix + 'state')
        next_h = F.elemwise_mul(out_gate, self._get_activation(F, next_c, self._activation),
                                name=prefix + 'out')
        return next_h, [next_h, next_c]


class _ConvGRUCell(_BaseConvRNNCell):
    _gate_names = ('_r', '_z', '_o')

    def _alias(self):
        return 'conv_gru'

    def hybrid_forward(self, F, inputs, states, i2h_weight, h2h_weight, i2h_bias, h2h_bias):
        prefix = f't{self._counter}_'
        i2h, h2h = self._conv_forward(F, inputs, states, i2h_weight, h2h_weight, i2h_bias,
                                      h2h_bias, prefix)
        axis = self._channel_axis
        i2h_r, i2h_z, i2h = F.SliceChannel(i2h, num_outputs=3, axis=axis,
                                           name=prefix + 'i2h_slice')
        h2h_r, h2h_z, h2h = F.SliceChannel(h2h, num_outputs=3, axis=axis,
                                           name=prefix + 'h2h_slice')
        reset = F.Activation(F.elemwise_add(i2h_r, h2h_r), act_type='sigmoid',
                             name=prefix + 'r_act')
        update = F.Activation(F.elemwise_add(i2h_z, h2h_z), act_type='sigmoid',
                              name=prefix + 'z_act')
        candidate = self._get_activation(F, F.elemwise_add(i2h, F.elemwise_mul(reset, h2h)),
                                         self._activation, name=prefix + 'h_act')
        next_h = F.elemwise_add(F.elemwise_mul(1 - update, candidate),
                                F.elemwise_mul(update, states[0]), name=prefix + 'out')
        return next_h, [next_h]


_LAYOUTS = {1: 'NCW', 2: 'NCHW', 3: 'NCDHW'}


def _cell_class(base, dims, name, doc):
    """One public cell: `base` for `dims`-D convolutions with MXNet's defaults."""
    def __init__(self, input_shape, hidden_channels, i2h_kernel, h2h_kernel,
                 i2h_pad=(0,) * dims, i2h_dilate=(1,) * dims, h2h_dilate=(1,) * dims,
                 i2h_weight_initializer=None, h2h_weight_initializer=None,
                 i2h_bias_initializer='zeros', h2h_bias_initializer='zeros',
                 conv_layout=_LAYOUTS[dims], activation='tanh', prefix=None, params=None):
        base.__init__(self, input_shape, hidden_channels, i2h_kernel, h2h_kernel, i2h_pad,
                      i2h_dilate, h2h_dilate, i2h_weight_initializer, h2h_weight_initializer,
                      i2h_bias_initializer, h2h_bias_initializer, dims, conv_layout,
                      activation, prefix, params)
    return type(name, (base,), {'__init__': __init__, '__doc__': doc,
                                '__module__': __name__})


Conv1DRNNCell = _cell_class(_ConvRNNCell, 1, 'Conv1DRNNCell', '1-D convolutional RNN cell.')
Conv2DRNNCell = _cell_class(_ConvRNNCell, 2, 'Conv2DRNNCell', '2-D convolutional RNN cell.')
Conv3DRNNCell = _cell_class(_ConvRNNCell, 3, 'Conv3DRNNCell', '3-D convolutional RNN cell.')
Conv1DLSTMCell = _cell_class(_ConvLSTMCell, 1, 'Conv1DLSTMCell', '1-D convolutional LSTM cell.')
Conv2DLSTMCell = _cell_class(_ConvLSTMCell, 2, 'Conv2DLSTMCell', '2-D convolutional LSTM cell.')
Conv3DLSTMCell = _cell_class(_ConvLSTMCell, 3, 'Conv3DLSTMCell', '3-D convolutional LSTM cell.')
Conv1DGRUCell = _cell_class(_ConvGRUCell, 1, 'Conv1DGRUCell', '1-D convolutional GRU cell.')
Conv2DGRUCell = _cell_class(_ConvGRUCell, 2, 'Conv2DGRUCell', '2-D convolutional GRU cell.')
Conv3DGRUCell = _cell_class(_ConvGRUCell, 3, 'Conv3DGRUCell', '3-D convolutional GRU cell.')
