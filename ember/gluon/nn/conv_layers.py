"""Convolution, transposed convolution, pooling and padding layers (MXNet 1.x signatures).

>>> import ember as mx
>>> conv = mx.gluon.nn.Conv2D(16, kernel_size=3, in_channels=3)
>>> conv
Conv2D(3 -> 16, kernel_size=(3, 3), stride=(1, 1))
>>> conv.weight.shape
(16, 3, 3, 3)
"""
from __future__ import annotations

from numbers import Number

from ember.gluon.block import HybridBlock
from ember.gluon.nn.activations import Activation

__all__ = ['Conv1D', 'Conv2D', 'Conv3D', 'Conv1DTranspose', 'Conv2DTranspose',
           'Conv3DTranspose', 'MaxPool1D', 'MaxPool2D', 'MaxPool3D', 'AvgPool1D', 'AvgPool2D',
           'AvgPool3D', 'GlobalMaxPool1D', 'GlobalMaxPool2D', 'GlobalMaxPool3D',
           'GlobalAvgPool1D', 'GlobalAvgPool2D', 'GlobalAvgPool3D', 'ReflectionPad2D']


def _tuple(value, ndim, name):
    """An int repeated `ndim` times, or a sequence of `ndim` ints."""
    if isinstance(value, Number):
        return (int(value),) * ndim
    value = tuple(int(v) for v in value)
    if len(value) != ndim:
        raise ValueError(f'{name}={value}: expected a number or {ndim} ints')
    return value


def _check_layout(cls, layout, accepted):
    if layout not in accepted:
        raise ValueError(f'{cls}: layout={layout!r}: expected one of '
                         f'{", ".join(repr(a) for a in accepted)}')


def _weight_shape(op_name, layout, kernel, channels, in_channels, groups):
    """Shape of the weight: Convolution (out, in / groups, *kernel), Deconvolution
    (in, out / groups, *kernel); channel-last layouts put the channel axis last."""
    if op_name == 'Convolution':
        first, second = channels, in_channels // groups
    else:
        first, second = in_channels, channels // groups
    if layout.index('C') == len(layout) - 1:
        return (first,) + tuple(kernel) + (second,)
    return (first, second) + tuple(kernel)


class _Conv(HybridBlock):
    """Shared body of the convolution layers; `op_name` is Convolution or Deconvolution."""

    def __init__(self, channels, kernel_size, strides, padding, dilation, groups, layout,
                 in_channels=0, activation=None, use_bias=True, weight_initializer=None,
                 bias_initializer='zeros', op_name='Convolution', adj=None, prefix=None,
                 params=None):
        super().__init__(prefix=prefix, params=params)
        ndim = len(kernel_size)
        with self.name_scope():
            self._channels = channels
            self._in_channels = in_channels
            self._op_name = op_name
            self._kwargs = {
                'kernel': tuple(kernel_size), 'stride': _tuple(strides, ndim, 'strides'),
                'dilate': _tuple(dilation, ndim, 'dilation'),
                'pad': _tuple(padding, ndim, 'padding'), 'num_filter': channels,
                'num_group': groups, 'no_bias': not use_bias, 'layout': layout}
            if adj is not None:
                self._kwargs['adj'] = adj
            self.weight = self.params.get(
                'weight', init=weight_initializer, allow_deferred_init=True,
                shape=_weight_shape(op_name, layout, kernel_size, channels, in_channels, groups))
            self.bias = None
            if use_bias:
                self.bias = self.params.get('bias', shape=(channels,), init=bias_initializer,
                                            allow_deferred_init=True)
            self.act = None
            if activation is not None:
                self.act = Activation(activation, prefix=activation + '_')

    def _alias(self):
        return 'conv'

    def infer_shape(self, x, *args):
        layout = self._kwargs['layout']
        in_channels = x.shape[layout.index('C')]
        self.weight.shape = _weight_shape(self._op_name, layout, self._kwargs['kernel'],
                                          self._channels, in_channels,
                                          self._kwargs['num_group'])

    def hybrid_forward(self, F, x, weight, bias=None):
        op = getattr(F, self._op_name)
        if bias is None:
            out = op(x, weight, name='fwd', **self._kwargs)
        else:
            out = op(x, weight, bias, name='fwd', **self._kwargs)
        return self.act(out) if self.act is not None else out

    def __repr__(self):
        kw = self._kwargs
        ndim = len(kw['kernel'])
        shape = self.weight.shape
        parts = [f'{shape[1] or None} -> {shape[0]}', f"kernel_size={kw['kernel']}",
                 f"stride={kw['stride']}"]
        if kw['pad'] != (0,) * ndim:
            parts.append(f"padding={kw['pad']}")
        if kw['dilate'] != (1,) * ndim:
            parts.append(f"dilation={kw['dilate']}")
        if kw.get('adj', (0,) * ndim) != (0,) * ndim:
            parts.append(f"output_padding={kw['adj']}")
        if kw['num_group'] != 1:
            parts.append(f"groups={kw['num_group']}")
        if self.bias is None:
            parts.append('bias=False')
        if self.act is not None:
            parts.append(repr(self.act))
        return f'{type(self).__name__}({", ".join(parts)})'


class Conv1D(_Conv):
    """1-D convolution over NCW or NWC data."""

    def __init__(self, channels, kernel_size, strides=1, padding=0, dilation=1, groups=1,
                 layout='NCW', activation=None, use_bias=True, weight_initializer=None,
                 bias_initializer='zeros', in_channels=0, **kwargs):
        _check_layout('Conv1D', layout, ('NCW', 'NWC'))
        super().__init__(channels, _tuple(kernel_size, 1, 'kernel_size'), strides, padding,
                         dilation, groups, layout, in_channels, activation, use_bias,
                         weight_initializer, bias_initializer, **kwargs)


class Conv2D(_Conv):
    """2-D convolution over NCHW or NHWC data.

    >>> import ember as mx
    >>> conv = mx.gluon.nn.Conv2D(4, 3, padding=1)
    >>> conv.initialize()
    >>> conv(mx.nd.ones((1, 2, 5, 5))).shape
    (1, 4, 5, 5)
    """

    def __init__(self, channels, kernel_size, strides=(1, 1), padding=(0, 0),
                 dilation=(1, 1), groups=1, layout='NCHW', activation=None, use_bias=True,
                 weight_initializer=None, bias_initializer='zeros', in_channels=0, **kwargs):
        _check_layout('Conv2D', layout, ('NCHW', 'NHWC'))
        super().__init__(channels, _tuple(kernel_size, 2, 'kernel_size'), strides, padding,
                         dilation, groups, layout, in_channels, activation, use_bias,
                         weight_initializer, bias_initializer, **kwargs)


class Conv3D(_Conv):
    """3-D convolution over NCDHW or NDHWC data."""

    def __init__(self, channels, kernel_size, strides=(1, 1, 1), padding=(0, 0, 0),
                 dilation=(1, 1, 1), groups=1, layout='NCDHW', activation=None, use_bias=True,
                 weight_initializer=None, bias_initializer='zeros', in_channels=0, **kwargs):
        _check_layout('Conv3D', layout, ('NCDHW', 'NDHWC'))
        super().__init__(channels, _tuple(kernel_size, 3, 'kernel_size'), strides, padding,
                         dilation, groups, layout, in_channels, activation, use_bias,
                         weight_initializer, bias_initializer, **kwargs)


class Conv1DTranspose(_Conv):
    """1-D transposed convolution (deconvolution) over NCW data."""

    def __init__(self, channels, kernel_size, strides=1, padding=0, output_padding=0,
                 dilation=1, groups=1, layout='NCW', activation=None, use_bias=True,
                 weight_initializer=None, bias_initializer='zeros', in_channels=0, **kwargs):
        _check_layout('Conv1DTranspose', layout, ('NCW',))
        self.outpad = _tuple(output_padding, 1, 'output_padding')
        super().__init__(channels, _tuple(kernel_size, 1, 'kernel_size'), strides, padding,
                         dilation, groups, layout, in_channels, activation, use_bias,
                         weight_initializer, bias_initializer, op_name='Deconvolution',
                         adj=self.outpad, **kwargs)


class Conv2DTranspose(_Conv):
    """2-D transposed convolution (deconvolution) over NCHW or NHWC data.

    >>> import ember as mx
    >>> up = mx.gluon.nn.Conv2DTranspose(4, 2, strides=2)
    >>> up.initialize()
    >>> up(mx.nd.ones((1, 3, 5, 5))).shape, up.weight.shape
    ((1, 4, 10, 10), (3, 4, 2, 2))
    """

    def __init__(self, channels, kernel_size, strides=(1, 1), padding=(0, 0),
                 output_padding=(0, 0), dilation=(1, 1), groups=1, layout='NCHW',
                 activation=None, use_bias=True, weight_initializer=None,
                 bias_initializer='zeros', in_channels=0, **kwargs):
        _check_layout('Conv2DTranspose', layout, ('NCHW', 'NHWC'))
        self.outpad = _tuple(output_padding, 2, 'output_padding')
        super().__init__(channels, _tuple(kernel_size, 2, 'kernel_size'), strides, padding,
                         dilation, groups, layout, in_channels, activation, use_bias,
                         weight_initializer, bias_initializer, op_name='Deconvolution',
                         adj=self.outpad, **kwargs)


class Conv3DTranspose(_Conv):
    """3-D transposed convolution (deconvolution) over NCDHW or NDHWC data."""

    def __init__(self, channels, kernel_size, strides=(1, 1, 1), padding=(0, 0, 0),
                 output_padding=(0, 0, 0), dilation=(1, 1, 1), groups=1, layout='NCDHW',
                 activation=None, use_bias=True, weight_initializer=None,
                 bias_initializer='zeros', in_channels=0, **kwargs):
        _check_layout('Conv3DTranspose', layout, ('NCDHW', 'NDHWC'))
        self.outpad = _tuple(output_padding, 3, 'output_padding')
        super().__init__(channels, _tuple(kernel_size, 3, 'kernel_size'), strides, padding,
                         dilation, groups, layout, in_channels, activation, use_bias,
                         weight_initializer, bias_initializer, op_name='Deconvolution',
                         adj=self.outpad, **kwargs)


class _Pooling(HybridBlock):
    """Shared body of the pooling layers."""

    def __init__(self, pool_size, strides, padding, ceil_mode, global_pool, pool_type, layout,
                 count_include_pad=None, **kwargs):
        super().__init__(**kwargs)
        ndim = len(pool_size)
        strides = pool_size if strides is None else strides
        self._kwargs = {
            'kernel': tuple(pool_size), 'stride': _tuple(strides, ndim, 'strides'),
            'pad': _tuple(padding, ndim, 'padding'), 'global_pool': global_pool,
            'pool_type': pool_type, 'layout': layout,
            'pooling_convention': 'full' if ceil_mode else 'valid'}
        if count_include_pad is not None:
            self._kwargs['count_include_pad'] = count_include_pad

    def _alias(self):
        return 'pool'

    def hybrid_forward(self, F, x):
        return F.Pooling(x, name='fwd', **self._kwargs)

    def __repr__(self):
        kw = self._kwargs
        return (f"{type(self).__name__}(size={kw['kernel']}, stride={kw['stride']}, "
                f"padding={kw['pad']}, ceil_mode={kw['pooling_convention'] == 'full'}, "
                f"global_pool={kw['global_pool']}, pool_type={kw['pool_type']}, "
                f"layout={kw['layout']})")


class MaxPool1D(_Pooling):
    """Max pooling over windows of NCW or NWC data; strides default to pool_size."""

    def __init__(self, pool_size=2, strides=None, padding=0, layout='NCW', ceil_mode=False,
                 **kwargs):
        _check_layout('MaxPool1D', layout, ('NCW', 'NWC'))
        super().__init__(_tuple(pool_size, 1, 'pool_size'), strides, padding, ceil_mode,
                         False, 'max', layout, **kwargs)


class MaxPool2D(_Pooling):
    """Max pooling over windows of NCHW or NHWC data; strides default to pool_size.

    >>> import ember as mx
    >>> x = mx.nd.array([[[[1, 2], [3, 4]]]])
    >>> mx.gluon.nn.MaxPool2D()(x).asnumpy().tolist()
    [[[[4.0]]]]
    """

    def __init__(self, pool_size=(2, 2), strides=None, padding=0, layout='NCHW',
                 ceil_mode=False, **kwargs):
        _check_layout('MaxPool2D', layout, ('NCHW', 'NHWC'))
        super().__init__(_tuple(pool_size, 2, 'pool_size'), strides, padding, ceil_mode,
                         False, 'max', layout, **kwargs)


class MaxPool3D(_Pooling):
    """Max pooling over windows of NCDHW or NDHWC data; strides default to pool_size."""

    def __init__(self, pool_size=(2, 2, 2), strides=None, padding=0, ceil_mode=False,
                 layout='NCDHW', **kwargs):
        _check_layout('MaxPool3D', layout, ('NCDHW', 'NDHWC'))
        super().__init__(_tuple(pool_size, 3, 'pool_size'), strides, padding, ceil_mode,
                         False, 'max', layout, **kwargs)


class AvgPool1D(_Pooling):
    """Average pooling over windows of NCW or NWC data; strides default to pool_size."""

    def __init__(self, pool_size=2, strides=None, padding=0, layout='NCW', ceil_mode=False,
                 count_include_pad=True, **kwargs):
        _check_layout('AvgPool1D', layout, ('NCW', 'NWC'))
        super().__init__(_tuple(pool_size, 1, 'pool_size'), strides, padding, ceil_mode,
                         False, 'avg', layout, count_include_pad, **kwargs)


class AvgPool2D(_Pooling):
    """Average pooling over windows of NCHW or NHWC data; strides default to pool_size.

    >>> import ember as mx
    >>> x = mx.nd.array([[[[1, 2], [3, 4]]]])
    >>> mx.gluon.nn.AvgPool2D()(x).asnumpy().tolist()
    [[[[2.5]]]]
    """

    def __init__(self, pool_size=(2, 2), strides=None, padding=0, ceil_mode=False,
                 layout='NCHW', count_include_pad=True, **kwargs):
        _check_layout('AvgPool2D', layout, ('NCHW', 'NHWC'))
        super().__init__(_tuple(pool_size, 2, 'pool_size'), strides, padding, ceil_mode,
                         False, 'avg', layout, count_include_pad, **kwargs)


class AvgPool3D(_Pooling):
    """Average pooling over windows of NCDHW or NDHWC data; strides default to pool_size."""

    def __init__(self, pool_size=(2, 2, 2), strides=None, padding=0, ceil_mode=False,
                 layout='NCDHW', count_include_pad=True, **kwargs):
        _check_layout('AvgPool3D', layout, ('NCDHW', 'NDHWC'))
        super().__init__(_tuple(pool_size, 3, 'pool_size'), strides, padding, ceil_mode,
                         False, 'avg', layout, count_include_pad, **kwargs)


class _GlobalPooling(_Pooling):
    """Pooling over every spatial position: (N, C, *spatial) -> (N, C, 1, ...)."""
    _ndim = 0
    _pool_type = ''
    _layouts = ()

    def __init__(self, layout=None, **kwargs):
        layout = self._layouts[0] if layout is None else layout
        _check_layout(type(self).__name__, layout, self._layouts)
        super().__init__((1,) * self._ndim, None, 0, True, True, self._pool_type, layout,
                         **kwargs)


class GlobalMaxPool1D(_GlobalPooling):
    """Global max pooling over NCW or NWC data."""
    _ndim, _pool_type, _layouts = 1, 'max', ('NCW', 'NWC')


class GlobalMaxPool2D(_GlobalPooling):
    """Global max pooling over NCHW or NHWC data."""
    _ndim, _pool_type, _layouts = 2, 'max', ('NCHW', 'NHWC')


class GlobalMaxPool3D(_GlobalPooling):
    """Global max pooling over NCDHW or NDHWC data."""
    _ndim, _pool_type, _layouts = 3, 'max', ('NCDHW', 'NDHWC')


class GlobalAvgPool1D(_GlobalPooling):
    """Global average pooling over NCW or NWC data."""
    _ndim, _pool_type, _layouts = 1, 'avg', ('NCW', 'NWC')


class GlobalAvgPool2D(_GlobalPooling):
    """Global average pooling over NCHW or NHWC data.

    >>> import ember as mx
    >>> mx.gluon.nn.GlobalAvgPool2D()(mx.nd.ones((2, 3, 4, 4))).shape
    (2, 3, 1, 1)
    """
    _ndim, _pool_type, _layouts = 2, 'avg', ('NCHW', 'NHWC')


class GlobalAvgPool3D(_GlobalPooling):
    """Global average pooling over NCDHW or NDHWC data."""
    _ndim, _pool_type, _layouts = 3, 'avg', ('NCDHW', 'NDHWC')


class ReflectionPad2D(HybridBlock):
    """Pad the last two axes of NCHW data by reflection.

    `padding` is an int (every side) or MXNet's 8-tuple pad_width
    (before/after for each of the four axes).

    >>> import ember as mx
    >>> pad = mx.gluon.nn.ReflectionPad2D(1)
    >>> pad(mx.nd.ones((1, 1, 2, 2))).shape
    (1, 1, 4, 4)
    """

    def __init__(self, padding=0, **kwargs):
        super().__init__(**kwargs)
        if isinstance(padding, Number):
            padding = (0, 0, 0, 0, padding, padding, padding, padding)
        padding = tuple(int(p) for p in padding)
        if len(padding) != 8:
            raise ValueError(f'ReflectionPad2D: padding={padding}: expected an int or 8 ints')
        self._padding = padding

    def hybrid_forward(self, F, x):
        return F.pad(x, mode='reflect', pad_width=self._padding)
