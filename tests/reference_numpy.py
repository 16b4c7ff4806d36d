"""A NumPy reference of Gluon networks, independent of Ember's kernels, for the network tests.

`reference_of(block)` walks a Gluon block (its children, layer types and their attributes) and
builds the same network out of the plain NumPy layers below, holding copies of the block's
parameter values in float64. Each layer has `forward(x)` and `backward(dy)`: a hand-written
reverse mode that returns the gradient of the input and adds the gradients of the parameters
named in `wanted` to `grads` (keyed by the Gluon parameter name).

BatchNorm runs in inference mode (running statistics) and Dropout is the identity, so the
reference matches a network run under ``autograd.record(train_mode=False)``.

>>> import numpy as np
>>> conv = Conv(np.ones((1, 1, 2, 2)), None, stride=(1, 1), pad=(0, 0), name='w')
>>> conv.forward(np.arange(9.0).reshape(1, 1, 3, 3))[0, 0].tolist()
[[8.0, 12.0], [20.0, 24.0]]
>>> conv.backward(np.ones((1, 1, 2, 2)))[0, 0].tolist()
[[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]
"""
from __future__ import annotations

import numpy as np


class Layer:
    """A reference layer; `wanted` names the parameters whose gradients `grads` collects."""
    wanted = frozenset()
    grads = None

    def forward(self, x):
        raise NotImplementedError

    def backward(self, dy):
        raise NotImplementedError

    def children(self):
        return []

    def collect_gradients(self, wanted, grads):
        """Ask this layer and those inside it for the gradients of `wanted` into `grads`."""
        self.wanted, self.grads = frozenset(wanted), grads
        for child in self.children():
            child.collect_gradients(wanted, grads)

    def _add_grad(self, name, value):
        if name in self.wanted:
            self.grads[name] = self.grads.get(name, 0) + value


# ----------------------------------------------------------------------------------------------
# Sliding windows over (N, C, H, W): one strided slice per kernel tap.

def _pad(x, pad, fill):
    if not any(pad):
        return x
    (ph, pw), (n, c, h, w) = pad, x.shape
    padded = np.full((n, c, h + 2 * ph, w + 2 * pw), fill, x.dtype)
    padded[:, :, ph:ph + h, pw:pw + w] = x
    return padded


def _unpad(padded, pad):
    ph, pw = pad
    return padded[:, :, ph:padded.shape[2] - ph, pw:padded.shape[3] - pw]


def _out_size(size, kernel, stride, pad, dilate=1):
    return (size + 2 * pad - dilate * (kernel - 1) - 1) // stride + 1


def _taps(kernel, stride, dilate, out_hw):
    """(tap index, slice of the padded input that tap reads for every output position)."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilate, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i * kw + j, (slice(None), slice(None),
                               slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                               slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))


def _patches(padded, kernel, stride, dilate, out_hw):
    """(N, C, taps, OH, OW): the input under each kernel tap at each output position."""
    n, c = padded.shape[:2]
    cols = np.empty((n, c, kernel[0] * kernel[1]) + tuple(out_hw), padded.dtype)
    for tap, index in _taps(kernel, stride, dilate, out_hw):
        cols[:, :, tap] = padded[index]
    return cols


def _scatter_patches(dcols, padded_shape, kernel, stride, dilate, out_hw):
    """The inverse of _patches for gradients: add every tap's gradient back to its input."""
    dpadded = np.zeros(padded_shape, dcols.dtype)
    for tap, index in _taps(kernel, stride, dilate, out_hw):
        dpadded[index] += dcols[:, :, tap]
    return dpadded


# ----------------------------------------------------------------------------------------------
# Layers.

class Conv(Layer):
    """2-D cross-correlation of NCHW data with weight (F, C, KH, KW), one group."""

    def __init__(self, weight, bias, stride, pad, dilate=(1, 1), name='', bias_name=''):
        self.weight, self.bias = weight, bias
        self.stride, self.pad, self.dilate = tuple(stride), tuple(pad), tuple(dilate)
        self.name, self.bias_name = name, bias_name

    def _geometry(self, x):
        kernel = self.weight.shape[2:]
        out_hw = tuple(_out_size(s, k, st, p, d) for s, k, st, p, d in
                       zip(x.shape[2:], kernel, self.stride, self.pad, self.dilate))
        return kernel, out_hw

    def _columns(self, x):
        kernel, out_hw = self._geometry(x)
        cols = _patches(_pad(x, self.pad, 0.0), kernel, self.stride, self.dilate, out_hw)
        return cols.reshape(x.shape[0], -1, out_hw[0] * out_hw[1]), out_hw

    def forward(self, x):
        self.x = x
        cols, out_hw = self._columns(x)
        filters = self.weight.reshape(self.weight.shape[0], -1)
        y = np.matmul(filters, cols).reshape((x.shape[0], -1) + out_hw)
        if self.bias is not None:
            y += self.bias.reshape(1, -1, 1, 1)
        return y

    def backward(self, dy):
        x, weight = self.x, self.weight
        kernel, out_hw = self._geometry(x)
        dy_flat = dy.reshape(dy.shape[0], dy.shape[1], -1)
        if self.name in self.wanted:
            cols = self._columns(x)[0]
            self._add_grad(self.name, np.tensordot(dy_flat, cols, axes=([0, 2], [0, 2]))
                           .reshape(weight.shape))
        if self.bias is not None:
            self._add_grad(self.bias_name, dy.sum(axis=(0, 2, 3)))
        dcols = np.matmul(weight.reshape(weight.shape[0], -1).T, dy_flat)
        dcols = dcols.reshape((x.shape[0], x.shape[1], kernel[0] * kernel[1]) + out_hw)
        padded_shape = x.shape[:2] + tuple(s + 2 * p for s, p in zip(x.shape[2:], self.pad))
        dpadded = _scatter_patches(dcols, padded_shape, kernel, self.stride, self.dilate,
                                   out_hw)
        return _unpad(dpadded, self.pad)


class BatchNormInference(Layer):
    """(x - running_mean) / sqrt(running_var + eps) * gamma + beta over axis 1."""

    def __init__(self, gamma, beta, mean, var, eps, names=('', '')):
        self.gamma, self.beta = gamma, beta
        self.inv_std = 1.0 / np.sqrt(var + eps)
        self.mean = mean
        self.gamma_name, self.beta_name = names

    def forward(self, x):
        self.normalized = (x - _channel(self.mean)) * _channel(self.inv_std)
        return self.normalized * _channel(self.gamma) + _channel(self.beta)

    def backward(self, dy):
        self._add_grad(self.gamma_name, (dy * self.normalized).sum(axis=(0, 2, 3)))
        self._add_grad(self.beta_name, dy.sum(axis=(0, 2, 3)))
        return dy * _channel(self.gamma * self.inv_std)


def _channel(vector):
    return vector.reshape(1, -1, 1, 1)


class Relu(Layer):
    def forward(self, x):
        self.positive = x > 0
        return np.where(self.positive, x, 0.0)

    def backward(self, dy):
        return np.where(self.positive, dy, 0.0)


class Pool(Layer):
    """Max or average pooling with MXNet's 'valid' convention; average pooling divides by the
    window size (count_include_pad) or by the count of real inputs under the window."""

    def __init__(self, kind, kernel, stride, pad, count_include_pad=True):
        self.kind, self.kernel = kind, tuple(kernel)
        self.stride, self.pad = tuple(stride), tuple(pad)
        self.count_include_pad = count_include_pad

    def _out_hw(self, x):
        return tuple(_out_size(s, k, st, p) for s, k, st, p in
                     zip(x.shape[2:], self.kernel, self.stride, self.pad))

    def _divisor(self, x, out_hw):
        if self.count_include_pad:
            return float(self.kernel[0] * self.kernel[1])
        ones = _pad(np.ones((1, 1) + x.shape[2:]), self.pad, 0.0)
        return _patches(ones, self.kernel, self.stride, (1, 1), out_hw).sum(axis=2)

    def forward(self, x):
        self.x_shape, out_hw = x.shape, self._out_hw(x)
        fill = -np.inf if self.kind == 'max' else 0.0
        cols = _patches(_pad(x, self.pad, fill), self.kernel, self.stride, (1, 1), out_hw)
        if self.kind == 'max':
            self.argmax = cols.argmax(axis=2)    # the first maximum takes the gradient
            return np.take_along_axis(cols, self.argmax[:, :, None], axis=2)[:, :, 0]
        self.divisor = self._divisor(x, out_hw)
        return cols.sum(axis=2) / self.divisor

    def backward(self, dy):
        taps = self.kernel[0] * self.kernel[1]
        if self.kind == 'max':
            dcols = (self.argmax[:, :, None] == np.arange(taps)[:, None, None]) * dy[:, :, None]
        else:
            dcols = np.repeat((dy / self.divisor)[:, :, None], taps, axis=2)
        n, c, h, w = self.x_shape
        padded_shape = (n, c, h + 2 * self.pad[0], w + 2 * self.pad[1])
        dpadded = _scatter_patches(dcols, padded_shape, self.kernel, self.stride, (1, 1),
                                   dy.shape[2:])
        return _unpad(dpadded, self.pad)


class GlobalPool(Layer):
    def __init__(self, kind):
        self.kind = kind

    def forward(self, x):
        self.x = x
        if self.kind == 'max':
            return x.max(axis=(2, 3), keepdims=True)
        return x.mean(axis=(2, 3), keepdims=True)

    def backward(self, dy):
        x = self.x
        if self.kind == 'avg':
            return np.broadcast_to(dy / (x.shape[2] * x.shape[3]), x.shape).copy()
        flat = x.reshape(x.shape[0], x.shape[1], -1)
        first_max = (np.arange(flat.shape[2]) == flat.argmax(axis=2)[:, :, None])
        return (first_max * dy.reshape(dy.shape[0], dy.shape[1], 1)).reshape(x.shape)


class Dense(Layer):
    """y = flatten(x) @ weight.T + bias."""

    def __init__(self, weight, bias, names=('', '')):
        self.weight, self.bias = weight, bias
        self.weight_name, self.bias_name = names

    def forward(self, x):
        self.x_shape = x.shape
        self.x = x.reshape(x.shape[0], -1)
        y = self.x @ self.weight.T
        return y if self.bias is None else y + self.bias

    def backward(self, dy):
        self._add_grad(self.weight_name, dy.T @ self.x)
        if self.bias is not None:
            self._add_grad(self.bias_name, dy.sum(axis=0))
        return (dy @ self.weight).reshape(self.x_shape)


class Flatten(Layer):
    def forward(self, x):
        self.x_shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, dy):
        return dy.reshape(self.x_shape)


class Identity(Layer):
    def forward(self, x):
        return x

    def backward(self, dy):
        return dy


class Sequential(Layer):
    def __init__(self, layers):
        self.layers = list(layers)

    def children(self):
        return self.layers

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x

    def backward(self, dy):
        for layer in reversed(self.layers):
            dy = layer.backward(dy)
        return dy


class Concat(Layer):
    """Every branch sees the input; outputs are concatenated along `axis`."""

    def __init__(self, branches, axis):
        self.branches, self.axis = list(branches), axis

    def children(self):
        return self.branches

    def forward(self, x):
        outputs = [branch.forward(x) for branch in self.branches]
        self.sizes = [out.shape[self.axis] for out in outputs]
        return np.concatenate(outputs, axis=self.axis)

    def backward(self, dy):
        pieces = np.split(dy, np.cumsum(self.sizes)[:-1], axis=self.axis)
        return sum(branch.backward(piece) for branch, piece in zip(self.branches, pieces))


class Residual(Layer):
    """relu(body(x) + shortcut(x)), the shortcut being the identity or a projection."""

    def __init__(self, body, shortcut):
        self.body, self.shortcut, self.relu = body, shortcut, Relu()

    def children(self):
        return [self.body, self.shortcut]

    def forward(self, x):
        return self.relu.forward(self.body.forward(x) + self.shortcut.forward(x))

    def backward(self, dy):
        dsum = self.relu.backward(dy)
        return self.body.backward(dsum) + self.shortcut.backward(dsum)


# ----------------------------------------------------------------------------------------------
# Building the reference from a Gluon block.

def _value(param):
    return None if param is None else param.data().asnumpy().astype(np.float64)


def _name(param):
    return '' if param is None else param.name


def _with_activation(layer, act):
    return layer if act is None else Sequential([layer, reference_of(act)])


def _conv(block):
    kw = block._kwargs
    unsupported = {'num_group': 1, 'layout': 'NCHW'}
    for key, accepted in unsupported.items():
        if kw[key] != accepted:
            raise NotImplementedError(f'reference Conv: {key}={kw[key]!r}; only {accepted!r}')
    conv = Conv(_value(block.weight), _value(block.bias), kw['stride'], kw['pad'],
                kw['dilate'], name=_name(block.weight), bias_name=_name(block.bias))
    return _with_activation(conv, block.act)


def _batch_norm(block):
    kw = block._kwargs
    if kw['axis'] != 1:
        raise NotImplementedError(f"reference BatchNorm: axis={kw['axis']}; only 1")
    gamma = _value(block.gamma)
    if kw['fix_gamma']:
        gamma = np.ones_like(gamma)
    return BatchNormInference(gamma, _value(block.beta), _value(block.running_mean),
                              _value(block.running_var), kw['eps'],
                              names=(_name(block.gamma), _name(block.beta)))


def _activation(block):
    if block._act_type != 'relu':
        raise NotImplementedError(f'reference Activation: {block._act_type!r}; only relu')
    return Relu()


def _pooling(block):
    kw = block._kwargs
    if kw['global_pool']:
        return GlobalPool(kw['pool_type'])
    if kw['pooling_convention'] != 'valid' or kw['layout'] != 'NCHW':
        raise NotImplementedError(f'reference Pool: {kw}; only valid NCHW pooling')
    return Pool(kw['pool_type'], kw['kernel'], kw['stride'], kw['pad'],
                kw.get('count_include_pad', True))


def _dense(block):
    if not block._flatten:
        raise NotImplementedError('reference Dense: flatten=False')
    dense = Dense(_value(block.weight), _value(block.bias),
                  names=(_name(block.weight), _name(block.bias)))
    return _with_activation(dense, block.act)


def _children(block):
    return [reference_of(child) for child in block._children.values()]


def _residual(block):
    shortcut = Identity() if block.downsample is None else reference_of(block.downsample)
    return Residual(reference_of(block.body), shortcut)


def _features_then_output(block):
    return Sequential([reference_of(block.features), reference_of(block.output)])


def _builders():
    from ember.gluon import nn
    from ember.gluon.contrib.nn import HybridConcurrent
    from ember.gluon.model_zoo.vision import inception, resnet
    pools = (nn.MaxPool2D, nn.AvgPool2D, nn.GlobalAvgPool2D, nn.GlobalMaxPool2D)
    table = {
        nn.Conv2D: _conv, nn.BatchNorm: _batch_norm, nn.Activation: _activation,
        nn.Dense: _dense, nn.Flatten: lambda block: Flatten(),
        nn.Dropout: lambda block: Identity(),      # inference mode
        nn.HybridSequential: lambda block: Sequential(_children(block)),
        HybridConcurrent: lambda block: Concat(_children(block), block.axis),
        resnet.BottleneckV1: _residual, resnet.BasicBlockV1: _residual,
        resnet.ResNetV1: _features_then_output, inception.Inception3: _features_then_output,
    }
    table.update({pool: _pooling for pool in pools})
    return table


def reference_of(block):
    """The NumPy reference (a Layer) of a Gluon block whose parameters are initialized.

    >>> import ember as mx
    >>> net = mx.gluon.nn.HybridSequential()
    >>> net.add(mx.gluon.nn.Dense(2, in_units=3))
    >>> net.initialize(mx.init.One())
    >>> reference_of(net).forward(np.ones((1, 3))).tolist()
    [[3.0, 3.0]]
    """
    builder = _builders().get(type(block))
    if builder is None:
        raise NotImplementedError(f'no NumPy reference for a {type(block).__name__} block')
    return builder(block)
