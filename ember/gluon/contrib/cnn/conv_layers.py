"""Deformable convolution layers: a plain convolution of the input predicts, per output pixel,
where each kernel tap samples (two offsets per tap and deformable group; the modulated form
adds a weight per tap, a sigmoid times 2), and the deformable convolution operator samples
there. The offset convolution starts at zero, so a fresh layer computes the plain convolution.

>>> import ember as mx
>>> layer = DeformableConvolution(4, kernel_size=3, padding=1)
>>> layer.initialize()
>>> layer(mx.nd.ones((1, 2, 5, 5))).shape
(1, 4, 5, 5)
>>> layer.offset_weight.shape
(18, 2, 3, 3)
"""
from __future__ import annotations

from numbers import Number

from ember.gluon.block import HybridBlock
from ember.gluon.nn.activations import Activation

__all__ = ['DeformableConvolution', 'ModulatedDeformableConvolution']


def _pair(value, name):
    if isinstance(value, Number):
        return (int(value),) * 2
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f'{name}={value}: deformable convolutions are 2-D; expected an int '
                         f'or a pair')
    return value


class _Deformable(HybridBlock):
    """The shared body; `taps_per_group` offsets (and masks) per kernel tap and group."""

    _operator = None
    _taps = 2

    def __init__(self, channels, kernel_size=(1, 1), strides=(1, 1), padding=(0, 0),
                 dilation=(1, 1), groups=1, num_deformable_group=1, layout='NCHW',
                 use_bias=True, in_channels=0, activation=None, weight_initializer=None,
                 bias_initializer='zeros', offset_weight_initializer='zeros',
                 offset_bias_initializer='zeros', offset_use_bias=True, op_name=None, adj=None,
                 prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        if layout != 'NCHW':
            raise ValueError(f"layout={layout!r}: the deformable convolutions take 'NCHW'")
        kernel = _pair(kernel_size, 'kernel_size')
        shared = {'kernel': kernel, 'stride': _pair(strides, 'strides'),
                  'dilate': _pair(dilation, 'dilation'), 'pad': _pair(padding, 'padding'),
                  'num_group': groups, 'layout': layout}
        self._channels, self._in_channels = channels, in_channels
        self._offset_channels = self._taps * kernel[0] * kernel[1] * num_deformable_group
        self._kwargs_offset = dict(shared, num_filter=self._offset_channels,
                                   no_bias=not offset_use_bias)
        self._kwargs_deformable_conv = dict(shared, num_filter=channels, no_bias=not use_bias,
                                            num_deformable_group=num_deformable_group)
        with self.name_scope():
            self.offset_weight = self.params.get(
                'offset_weight', shape=(self._offset_channels, in_channels // groups) + kernel,
                init=offset_weight_initializer, allow_deferred_init=True)
            self.offset_bias = (self.params.get('offset_bias', shape=(self._offset_channels,),
                                                init=offset_bias_initializer,
                                                allow_deferred_init=True)
                                if offset_use_bias else None)
            self.deformable_conv_weight = self.params.get(
                'deformable_conv_weight', shape=(channels, in_channels // groups) + kernel,
                init=weight_initializer, allow_deferred_init=True)
            self.deformable_conv_bias = (self.params.get('deformable_conv_bias',
                                                         shape=(channels,),
                                                         init=bias_initializer,
                                                         allow_deferred_init=True)
                                         if use_bias else None)
            self.act = Activation(activation, prefix=activation + '_') if activation else None

    def _alias(self):
        return 'deformable_conv'

    def infer_shape(self, x, *args):
        per_group = x.shape[1] // self._kwargs_offset['num_group']
        kernel = self._kwargs_offset['kernel']
        self.offset_weight.shape = (self._offset_channels, per_group) + kernel
        self.deformable_conv_weight.shape = (self._channels, per_group) + kernel

    def _offsets(self, F, x, offset_weight, offset_bias):
        inputs = [x, offset_weight] + ([offset_bias] if offset_bias is not None else [])
        return F.Convolution(*inputs, **self._kwargs_offset)

    def _finish(self, out):
        return self.act(out) if self.act is not None else out

    def __repr__(self):
        kw = self._kwargs_deformable_conv
        shape = self.deformable_conv_weight.shape
        parts = [f'{shape[1] or None} -> {shape[0]}', f"kernel_size={kw['kernel']}",
                 f"stride={kw['stride']}"]
        if kw['pad'] != (0, 0):
            parts.append(f"padding={kw['pad']}")
        if kw['dilate'] != (1, 1):
            parts.append(f"dilation={kw['dilate']}")
        if kw['num_group'] != 1:
            parts.append(f"groups={kw['num_group']}")
        if self.deformable_conv_bias is None:
            parts.append('bias=False')
        if self.act is not None:
            parts.append(repr(self.act))
        return f"{type(self).__name__}({', '.join(parts)})"


class DeformableConvolution(_Deformable):
    """2-D deformable convolution (Dai et al., 2017): learned offsets per kernel tap."""

    def hybrid_forward(self, F, x, offset_weight, deformable_conv_weight, offset_bias=None,
                       deformable_conv_bias=None):
        offset = self._offsets(F, x, offset_weight, offset_bias)
        extra = {} if deformable_conv_bias is None else {'bias': deformable_conv_bias}
        return self._finish(F.contrib.DeformableConvolution(
            data=x, offset=offset, weight=deformable_conv_weight, name='fwd', **extra,
            **self._kwargs_deformable_conv))


class ModulatedDeformableConvolution(_Deformable):
    """2-D modulated deformable convolution (v2, Zhu et al., 2018): offsets and a weight in
    (0, 2) per kernel tap."""

    _taps = 3

    def hybrid_forward(self, F, x, offset_weight, deformable_conv_weight, offset_bias=None,
                       deformable_conv_bias=None):
        predicted = self._offsets(F, x, offset_weight, offset_bias)
        split = self._offset_channels * 2 // 3
        offset = F.slice_axis(predicted, axis=1, begin=0, end=split)
        mask = F.sigmoid(F.slice_axis(predicted, axis=1, begin=split, end=None)) * 2
        extra = {} if deformable_conv_bias is None else {'bias': deformable_conv_bias}
        return self._finish(F.contrib.ModulatedDeformableConvolution(
            data=x, offset=offset, mask=mask, weight=deformable_conv_weight, name='fwd',
            **extra, **self._kwargs_deformable_conv))
