"""Basic layers: containers, Dense, Dropout, normalization, Embedding, Flatten, lambdas.

Parameter names, prefixes and reprs follow MXNet 1.x. Layers whose parameter shapes depend on
the input (``Dense(10)`` without ``in_units``) fill them in ``infer_shape`` at the first call.

>>> import ember as mx
>>> net = mx.gluon.nn.HybridSequential(prefix='net_')
>>> with net.name_scope():
...     net.add(mx.gluon.nn.Dense(4, activation='relu'), mx.gluon.nn.Dense(2))
>>> net.initialize(mx.init.One())
>>> net(mx.nd.ones((1, 3))).asnumpy().tolist()
[[12.0, 12.0]]
>>> sorted(net.collect_params().keys())
['net_dense0_bias', 'net_dense0_weight', 'net_dense1_bias', 'net_dense1_weight']
"""
from __future__ import annotations

import warnings

import numpy as np

from ember import ndarray as nd
from ember.base import prod
from ember.gluon.block import Block, HybridBlock
from ember.gluon.nn.activations import Activation

__all__ = ['Sequential', 'HybridSequential', 'Dense', 'Dropout', 'Embedding', 'BatchNorm',
           'BatchNormReLU', 'InstanceNorm', 'LayerNorm', 'GroupNorm', 'Flatten', 'Lambda',
           'HybridLambda']


def _indent(text, spaces=2):
    return text.replace('\n', '\n' + ' ' * spaces)


def _children_repr(block):
    lines = [f'  ({key}): {_indent(repr(child))}' for key, child in block._children.items()]
    return f'{type(block).__name__}(\n' + '\n'.join(lines) + '\n)'


def _sub_container(container, key):
    """`container[key]`: one child, or a new container of the same type for a slice."""
    layers = list(container._children.values())[key]
    if not isinstance(layers, list):
        return layers
    net = type(container)(prefix=container.prefix)
    with net.name_scope():
        net.add(*layers)
    return net


class Sequential(Block):
    """Children run one after the other.

    >>> import ember as mx
    >>> net = mx.gluon.nn.Sequential()
    >>> net.add(mx.gluon.nn.Dense(3, in_units=2), mx.gluon.nn.Dense(1, in_units=3))
    >>> len(net), type(net[1]).__name__, len(net[:1])
    (2, 'Dense', 1)
    """

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)

    def add(self, *blocks):
        """Append blocks, in order."""
        for block in blocks:
            self.register_child(block)

    def forward(self, x, *args):
        for block in self._children.values():
            x = block(x, *args)
            args = []
            if isinstance(x, (tuple, list)):
                args, x = x[1:], x[0]
        return tuple([x] + list(args)) if args else x

    def __repr__(self):
        return _children_repr(self)

    def __getitem__(self, key):
        return _sub_container(self, key)

    def __len__(self):
        return len(self._children)

    def hybridize(self, active=True, **kwargs):
        if self._children and all(isinstance(c, HybridBlock) for c in self._children.values()):
            warnings.warn(f"All children of this Sequential layer '{self.prefix}' are "
                          f'HybridBlocks. Consider using HybridSequential for the best '
                          f'performance.', stacklevel=2)
        super().hybridize(active, **kwargs)


class HybridSequential(HybridBlock):
    """Hybridizable children run one after the other; a tuple output feeds the next child's
    arguments.

    >>> import ember as mx
    >>> net = mx.gluon.nn.HybridSequential()
    >>> net.add(mx.gluon.nn.Dense(3, in_units=2))
    >>> net
    HybridSequential(
      (0): Dense(2 -> 3, linear)
    )
    """

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)

    def add(self, *blocks):
        """Append blocks, in order."""
        for block in blocks:
            self.register_child(block)

    def hybrid_forward(self, F, x, *args):
        for block in self._children.values():
            x = block(x, *args)
            args = []
            if isinstance(x, (tuple, list)):
                args, x = x[1:], x[0]
        return tuple([x] + list(args)) if args else x

    def __repr__(self):
        return _children_repr(self)

    def __getitem__(self, key):
        return _sub_container(self, key)

    def __len__(self):
        return len(self._children)


class Dense(HybridBlock):
    """A fully connected layer: ``activation(dot(x, weight.T) + bias)``.

    `weight` has shape (units, in_units); in_units=0 infers it from the first input (all
    axes but the first when `flatten`, else the last axis).

    >>> import ember as mx
    >>> layer = mx.gluon.nn.Dense(10, activation='relu')
    >>> layer.initialize()
    >>> layer(mx.nd.ones((4, 7))).shape, layer.weight.shape
    ((4, 10), (10, 7))
    >>> layer
    Dense(7 -> 10, Activation(relu))
    """

    def __init__(self, units, activation=None, use_bias=True, flatten=True, dtype='float32',
                 weight_initializer=None, bias_initializer='zeros', in_units=0, **kwargs):
        super().__init__(**kwargs)
        self._flatten = flatten
        with self.name_scope():
            self._units = units
            self._in_units = in_units
            self.weight = self.params.get('weight', shape=(units, in_units),
                                          init=weight_initializer, dtype=dtype,
                                          allow_deferred_init=True)
            self.bias = None
            if use_bias:
                self.bias = self.params.get('bias', shape=(units,), init=bias_initializer,
                                            dtype=dtype, allow_deferred_init=True)
            self.act = None
            if activation is not None:
                self.act = Activation(activation, prefix=activation + '_')

    def infer_shape(self, x, *args):
        in_units = prod(x.shape[1:]) if self._flatten else x.shape[-1]
        self.weight.shape = (self._units, in_units)

    def hybrid_forward(self, F, x, weight, bias=None):
        if bias is None:
            out = F.FullyConnected(x, weight, no_bias=True, num_hidden=self._units,
                                   flatten=self._flatten, name='fwd')
        else:
            out = F.FullyConnected(x, weight, bias, num_hidden=self._units,
                                   flatten=self._flatten, name='fwd')
        return self.act(out) if self.act is not None else out

    def __repr__(self):
        out_units, in_units = self.weight.shape
        act = self.act if self.act is not None else 'linear'
        return f'{type(self).__name__}({in_units or None} -> {out_units}, {act})'


class Dropout(HybridBlock):
    """Zero each element with probability `rate` in training (scaling the rest by
    1 / (1 - rate)); the identity in prediction. `axes` share one mask along those axes.

    >>> import ember as mx
    >>> mx.gluon.nn.Dropout(0.5)(mx.nd.ones((2,))).asnumpy().tolist()
    [1.0, 1.0]
    """

    def __init__(self, rate, axes=(), **kwargs):
        super().__init__(**kwargs)
        if not 0 <= rate < 1:
            raise ValueError(f'Dropout: rate={rate!r}: expected 0 <= rate < 1')
        self._rate = rate
        self._axes = tuple(axes)

    def hybrid_forward(self, F, x):
        if self._rate > 0:
            return F.Dropout(x, p=self._rate, axes=self._axes, name='fwd')
        return F.identity(x)

    def __repr__(self):
        return f'{type(self).__name__}(p = {self._rate}, axes={self._axes})'


def _channel_param(block, name, in_channels, init, trainable):
    """A per-channel parameter of a normalization layer."""
    return block.params.get(name, grad_req='write' if trainable else 'null',
                            shape=(in_channels,), init=init, allow_deferred_init=True,
                            differentiable=trainable)


class BatchNorm(HybridBlock):
    """Batch normalization over `axis` (the channels).

    In training (inside ``autograd.record()``) the operator normalizes with the batch
    statistics and updates ``running_mean`` / ``running_var`` with `momentum`; in prediction
    it uses the running statistics. Those two are parameters with ``grad_req='null'``.

    >>> import ember as mx
    >>> bn = mx.gluon.nn.BatchNorm(in_channels=3)
    >>> sorted(p.split('_', 1)[1] for p in bn.collect_params())
    ['beta', 'gamma', 'running_mean', 'running_var']
    """

    def __init__(self, axis=1, momentum=0.9, epsilon=1e-5, center=True, scale=True,
                 use_global_stats=False, beta_initializer='zeros', gamma_initializer='ones',
                 running_mean_initializer='zeros', running_variance_initializer='ones',
                 in_channels=0, **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {'axis': axis, 'eps': epsilon, 'momentum': momentum,
                        'fix_gamma': not scale, 'use_global_stats': use_global_stats}
        if in_channels != 0:
            self.in_channels = in_channels
        self.gamma = _channel_param(self, 'gamma', in_channels, gamma_initializer, scale)
        self.beta = _channel_param(self, 'beta', in_channels, beta_initializer, center)
        self.running_mean = _channel_param(self, 'running_mean', in_channels,
                                           running_mean_initializer, False)
        self.running_var = _channel_param(self, 'running_var', in_channels,
                                          running_variance_initializer, False)

    def cast(self, dtype):
        # Statistics stay in float32 under float16 data, as cuDNN and MXNet require.
        if np.dtype(dtype).name == 'float16':
            dtype = 'float32'
        super().cast(dtype)

    def infer_shape(self, x, *args):
        channels = x.shape[self._kwargs['axis']]
        for param in (self.gamma, self.beta, self.running_mean, self.running_var):
            param.shape = (channels,)

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        return F.BatchNorm(x, gamma, beta, running_mean, running_var, name='fwd',
                           **self._kwargs)

    def __repr__(self):
        content = ', '.join(f'{k}={v!r}' for k, v in self._kwargs.items())
        channels = self.gamma.shape[0] if self.gamma.shape else 0
        return f'{type(self).__name__}({content}, in_channels={channels or None})'


class BatchNormReLU(BatchNorm):
    """BatchNorm followed by relu, as one operator (MXNet's ``BatchNormWithReLU``).

    >>> import ember as mx
    >>> layer = BatchNormReLU(in_channels=1)
    >>> layer.initialize()
    >>> with mx.autograd.record():
    ...     out = layer(mx.nd.array([[-1.0], [1.0]]))
    >>> out.asnumpy().round(3).ravel().tolist()
    [0.0, 1.0]
    """

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        return F._contrib_BatchNormWithReLU(x, gamma, beta, running_mean, running_var,
                                            name='fwd', **self._kwargs)


class InstanceNorm(HybridBlock):
    """Normalize each sample and channel over the remaining axes (`axis` is the channels).

    >>> import ember as mx
    >>> norm = mx.gluon.nn.InstanceNorm()
    >>> norm.initialize()
    >>> norm(mx.nd.array([[[1.0, 3.0]]])).asnumpy().round(3).tolist()
    [[[-1.0, 1.0]]]
    """

    def __init__(self, axis=1, epsilon=1e-5, center=True, scale=False,
                 beta_initializer='zeros', gamma_initializer='ones', in_channels=0, **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {'eps': epsilon, 'axis': axis, 'center': center, 'scale': scale}
        self._axis = axis
        self._epsilon = epsilon
        self.gamma = _channel_param(self, 'gamma', in_channels, gamma_initializer, scale)
        self.beta = _channel_param(self, 'beta', in_channels, beta_initializer, center)

    def infer_shape(self, x, *args):
        channels = x.shape[self._axis]
        self.gamma.shape = (channels,)
        self.beta.shape = (channels,)

    def hybrid_forward(self, F, x, gamma, beta):
        if self._axis == 1:
            return F.InstanceNorm(x, gamma, beta, eps=self._epsilon, name='fwd')
        x = F.swapaxes(x, dim1=1, dim2=self._axis)
        out = F.InstanceNorm(x, gamma, beta, eps=self._epsilon, name='fwd')
        return F.swapaxes(out, dim1=1, dim2=self._axis)

    def __repr__(self):
        content = ', '.join(f'{k}={v!r}' for k, v in self._kwargs.items())
        return f'{type(self).__name__}({content}, in_channels={self.gamma.shape[0]})'


class LayerNorm(HybridBlock):
    """Normalize each sample over `axis` (the last by default), then scale and shift.

    >>> import ember as mx
    >>> norm = mx.gluon.nn.LayerNorm()
    >>> norm.initialize()
    >>> norm(mx.nd.array([[1.0, 3.0]])).asnumpy().round(3).tolist()
    [[-1.0, 1.0]]
    """

    def __init__(self, axis=-1, epsilon=1e-5, center=True, scale=True,
                 beta_initializer='zeros', gamma_initializer='ones', in_channels=0, **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {'eps': epsilon, 'axis': axis, 'center': center, 'scale': scale}
        self._axis = axis
        self._epsilon = epsilon
        self.gamma = _channel_param(self, 'gamma', in_channels, gamma_initializer, scale)
        self.beta = _channel_param(self, 'beta', in_channels, beta_initializer, center)

    def infer_shape(self, x, *args):
        channels = x.shape[self._axis]
        self.gamma.shape = (channels,)
        self.beta.shape = (channels,)

    def hybrid_forward(self, F, x, gamma, beta):
        return F.LayerNorm(x, gamma, beta, axis=self._axis, eps=self._epsilon)

    def __repr__(self):
        content = ', '.join(f'{k}={v!r}' for k, v in self._kwargs.items())
        return f'{type(self).__name__}({content}, in_channels={self.gamma.shape[0]})'


class GroupNorm(HybridBlock):
    """Normalize each sample over groups of channels (axis 1), then scale and shift each
    group (MXNet 1.x: one gamma and one beta per group).

    >>> import ember as mx
    >>> norm = mx.gluon.nn.GroupNorm(num_groups=2)
    >>> norm.initialize()
    >>> norm(mx.nd.array([[[1.0], [3.0], [5.0], [9.0]]])).asnumpy().round(3).ravel().tolist()
    [-1.0, 1.0, -1.0, 1.0]
    """

    def __init__(self, num_groups=1, epsilon=1e-5, center=True, scale=True,
                 beta_initializer='zeros', gamma_initializer='ones', **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {'eps': epsilon, 'num_groups': num_groups, 'center': center,
                        'scale': scale}
        self._num_groups = num_groups
        self._epsilon = epsilon
        self.gamma = _channel_param(self, 'gamma', num_groups, gamma_initializer, scale)
        self.beta = _channel_param(self, 'beta', num_groups, beta_initializer, center)

    def hybrid_forward(self, F, x, gamma, beta):
        return F.GroupNorm(x, gamma, beta, num_groups=self._num_groups, eps=self._epsilon)

    def __repr__(self):
        content = ', '.join(f'{k}={v!r}' for k, v in self._kwargs.items())
        return f'{type(self).__name__}({content})'


class Embedding(HybridBlock):
    """Rows of `weight` (input_dim, output_dim) picked by integer indices.

    >>> import ember as mx
    >>> emb = mx.gluon.nn.Embedding(5, 2)
    >>> emb.initialize(mx.init.One())
    >>> emb(mx.nd.array([[0, 4]])).shape
    (1, 2, 2)
    """

    def __init__(self, input_dim, output_dim, dtype='float32', weight_initializer=None,
                 sparse_grad=False, **kwargs):
        super().__init__(**kwargs)
        grad_stype = 'row_sparse' if sparse_grad else 'default'
        self._kwargs = {'input_dim': input_dim, 'output_dim': output_dim, 'dtype': dtype,
                        'sparse_grad': sparse_grad}
        self.weight = self.params.get('weight', shape=(input_dim, output_dim),
                                      init=weight_initializer, dtype=dtype,
                                      allow_deferred_init=True, grad_stype=grad_stype)

    def hybrid_forward(self, F, x, weight):
        return F.Embedding(x, weight, input_dim=self._kwargs['input_dim'],
                           output_dim=self._kwargs['output_dim'], dtype=self._kwargs['dtype'],
                           sparse_grad=self._kwargs['sparse_grad'], name='fwd')

    def __repr__(self):
        kw = self._kwargs
        return (f"{type(self).__name__}({kw['input_dim']} -> {kw['output_dim']}, "
                f"{kw['dtype']})")


class Flatten(HybridBlock):
    """Reshape (N, ...) to (N, rest).

    >>> import ember as mx
    >>> mx.gluon.nn.Flatten()(mx.nd.ones((2, 3, 4))).shape
    (2, 12)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def hybrid_forward(self, F, x):
        return F.Flatten(x)

    def __repr__(self):
        return type(self).__name__


def _function_name(function):
    return getattr(function, '__name__', type(function).__name__)


class Lambda(Block):
    """Wrap a function of NDArrays, or the name of an ``mx.nd`` operator, as a Block.

    >>> import ember as mx
    >>> mx.gluon.nn.Lambda('square')(mx.nd.array([3.0])).asnumpy().tolist()
    [9.0]
    """

    def __init__(self, function, prefix=None):
        super().__init__(prefix=prefix)
        if isinstance(function, str):
            if not hasattr(nd, function):
                raise ValueError(f'Lambda: function {function!r} is not an operator of mx.nd')
            self._func_impl = getattr(nd, function)
        elif callable(function):
            self._func_impl = function
        else:
            raise ValueError(f'Lambda: function={function!r} of type '
                             f'{type(function).__name__}: expected a callable or the name of '
                             f'an mx.nd operator')

    def forward(self, *args):
        return self._func_impl(*args)

    def __repr__(self):
        return f'{type(self).__name__}({_function_name(self._func_impl)})'


class HybridLambda(HybridBlock):
    """Wrap ``function(F, x, *args)``, or the name of an operator of ``F``, as a HybridBlock.

    >>> import ember as mx
    >>> block = mx.gluon.nn.HybridLambda(lambda F, x: F.relu(x) * 2)
    >>> block(mx.nd.array([-1.0, 1.0])).asnumpy().tolist()
    [0.0, 2.0]
    """

    def __init__(self, function, prefix=None):
        super().__init__(prefix=prefix)
        if isinstance(function, str):
            if not hasattr(nd, function):
                raise ValueError(f'HybridLambda: function {function!r} is not an operator '
                                 f'of mx.nd')
            self._func = lambda F, *args: getattr(F, function)(*args)
            self._func_name = function
        elif callable(function):
            self._func = function
            self._func_name = _function_name(function)
        else:
            raise ValueError(f'HybridLambda: function={function!r} of type '
                             f'{type(function).__name__}: expected a callable or the name of '
                             f'an operator')

    def hybrid_forward(self, F, x, *args):
        return self._func(F, x, *args)

    def __repr__(self):
        return f'{type(self).__name__}({self._func_name})'
