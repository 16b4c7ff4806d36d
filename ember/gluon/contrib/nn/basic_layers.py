"""Extra layers of ``mx.gluon.contrib.nn``: concatenating containers, Identity, the pixel
shuffles that trade channels for resolution, SyncBatchNorm and SparseEmbedding.

>>> import ember as mx
>>> from ember.gluon.contrib.nn import HybridConcurrent, Identity
>>> net = HybridConcurrent(axis=1)
>>> net.add(Identity(), Identity())
>>> net(mx.nd.ones((2, 3))).shape
(2, 6)
"""
from __future__ import annotations

import warnings

from ember import ndarray
from ember.gluon.block import Block, HybridBlock
from ember.gluon.nn import BatchNorm, HybridSequential, Sequential
from ember.ndarray import concat

__all__ = ['Concurrent', 'HybridConcurrent', 'Identity', 'PixelShuffle1D', 'PixelShuffle2D',
           'PixelShuffle3D', 'SyncBatchNorm', 'SparseEmbedding']


class Concurrent(Sequential):
    """Every child sees the same input; their outputs are concatenated along `axis` (the
    imperative twin of :class:`HybridConcurrent`).

    >>> import ember as mx
    >>> net = Concurrent(axis=0)
    >>> net.add(Identity(), mx.gluon.nn.Lambda(lambda x: x * 2))
    >>> net(mx.nd.ones((1, 2))).asnumpy().tolist()
    [[1.0, 1.0], [2.0, 2.0]]
    """

    def __init__(self, axis=-1, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        self.axis = axis

    def forward(self, x):
        return concat(*[block(x) for block in self._children.values()], dim=self.axis)


class HybridConcurrent(HybridSequential):
    """Every child sees the same input; their outputs are concatenated along `axis`."""

    def __init__(self, axis=-1, prefix=None, params=None):
        super().__init__(prefix=prefix, params=params)
        self.axis = axis

    def hybrid_forward(self, F, x):
        outputs = [block(x) for block in self._children.values()]
        return F.concat(*outputs, dim=self.axis)


class Identity(HybridBlock):
    """Passes its input through (a branch of a HybridConcurrent that keeps the input)."""

    def hybrid_forward(self, F, x):
        return x


def _factors(factor, count, layer):
    factors = (int(factor),) * count if isinstance(factor, (int, float)) else \
        tuple(int(f) for f in factor)
    if len(factors) != count or min(factors) < 1:
        raise ValueError(f'{layer}: factor={factor!r}: expected a positive int or {count} of '
                         'them')
    return factors


class PixelShuffle1D(HybridBlock):
    """(N, f*C, W) -> (N, C, W*f): channels become width (sub-pixel upsampling).

    >>> import ember as mx
    >>> PixelShuffle1D(2)(mx.nd.arange(8).reshape((1, 4, 2))).asnumpy().tolist()
    [[[0.0, 2.0, 1.0, 3.0], [4.0, 6.0, 5.0, 7.0]]]
    """

    def __init__(self, factor):
        super().__init__()
        self._factor, = _factors(factor, 1, 'PixelShuffle1D')

    def hybrid_forward(self, F, x):
        x = F.reshape(x, (0, -4, -1, self._factor, 0))     # (N, C, f, W)
        x = F.transpose(x, (0, 1, 3, 2))                    # (N, C, W, f)
        return F.reshape(x, (0, 0, -3))

    def __repr__(self):
        return f'{type(self).__name__}({self._factor})'


class PixelShuffle2D(HybridBlock):
    """(N, f1*f2*C, H, W) -> (N, C, H*f1, W*f2).

    >>> import ember as mx
    >>> PixelShuffle2D((2, 3))(mx.nd.zeros((1, 12, 3, 5))).shape
    (1, 2, 6, 15)
    """

    def __init__(self, factor):
        super().__init__()
        self._factors = _factors(factor, 2, 'PixelShuffle2D')

    def hybrid_forward(self, F, x):
        f1, f2 = self._factors
        x = F.reshape(x, (0, -4, -1, f1 * f2, 0, 0))      # (N, C, f1*f2, H, W)
        x = F.reshape(x, (0, 0, -4, f1, f2, 0, 0))        # (N, C, f1, f2, H, W)
        x = F.transpose(x, (0, 1, 4, 2, 5, 3))            # (N, C, H, f1, W, f2)
        return F.reshape(x, (0, 0, -3, -3))

    def __repr__(self):
        return f'{type(self).__name__}({self._factors})'


class PixelShuffle3D(HybridBlock):
    """(N, f1*f2*f3*C, D, H, W) -> (N, C, D*f1, H*f2, W*f3).

    >>> import ember as mx
    >>> PixelShuffle3D(2)(mx.nd.zeros((1, 8, 1, 2, 3))).shape
    (1, 1, 2, 4, 6)
    """

    def __init__(self, factor):
        super().__init__()
        self._factors = _factors(factor, 3, 'PixelShuffle3D')

    def hybrid_forward(self, F, x):
        f1, f2, f3 = self._factors
        x = F.reshape(x, (0, -4, -1, f1 * f2 * f3, 0, 0, 0))  # (N, C, f1*f2*f3, D, H, W)
        x = F.swapaxes(x, 2, 3)                               # (N, C, D, f1*f2*f3, H, W)
        x = F.reshape(x, (0, 0, 0, -4, f1, f2 * f3, 0, 0))    # (N, C, D, f1, f2*f3, H, W)
        x = F.reshape(x, (0, 0, -3, 0, 0, 0))                 # (N, C, D*f1, f2*f3, H, W)
        x = F.swapaxes(x, 3, 4)                               # (N, C, D*f1, H, f2*f3, W)
        x = F.reshape(x, (0, 0, 0, 0, -4, f2, f3, 0))         # (N, C, D*f1, H, f2, f3, W)
        x = F.reshape(x, (0, 0, 0, -3, 0, 0))                 # (N, C, D*f1, H*f2, f3, W)
        x = F.swapaxes(x, 4, 5)                               # (N, C, D*f1, H*f2, W, f3)
        return F.reshape(x, (0, 0, 0, 0, -3))

    def __repr__(self):
        return f'{type(self).__name__}({self._factors})'


class SyncBatchNorm(BatchNorm):
    """BatchNorm whose statistics cover the whole batch when its parts are on several devices
    of this process (``net.initialize(ctx=[mx.cpu(0), mx.cpu(1)])`` and one part of the batch
    per device, as ``gluon.utils.split_and_load`` gives). `num_devices` defaults to the number
    of devices the parameters live on. The parts must run at once: Ember's default engine,
    ThreadedEnginePerDevice, runs each device on its own workers.

    >>> import ember as mx
    >>> bn = SyncBatchNorm(in_channels=2)
    >>> bn.initialize()
    >>> with mx.autograd.record():
    ...     y = bn(mx.nd.array([[1.0, 2.0], [3.0, 6.0]]))
    >>> y.asnumpy().round(3).tolist()
    [[-1.0, -1.0], [1.0, 1.0]]
    """

    def __init__(self, in_channels=0, num_devices=None, momentum=0.9, epsilon=1e-5, center=True,
                 scale=True, use_global_stats=False, beta_initializer='zeros',
                 gamma_initializer='ones', running_mean_initializer='zeros',
                 running_variance_initializer='ones', **kwargs):
        super().__init__(axis=1, momentum=momentum, epsilon=epsilon, center=center,
                         scale=scale, use_global_stats=use_global_stats,
                         beta_initializer=beta_initializer, gamma_initializer=gamma_initializer,
                         running_mean_initializer=running_mean_initializer,
                         running_variance_initializer=running_variance_initializer,
                         in_channels=in_channels, **kwargs)
        self._num_devices = num_devices

    def _devices(self):
        if self._num_devices is not None:
            return self._num_devices
        try:
            return len(self.gamma.list_ctx())
        except Exception:     # noqa: BLE001 - not initialized yet: one device
            warnings.warn('SyncBatchNorm: its parameters are not on any device yet; counting '
                          'one', stacklevel=3)
            return 1

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        attrs = {k: v for k, v in self._kwargs.items() if k != 'axis'}
        return F._contrib_SyncBatchNorm(x, gamma, beta, running_mean, running_var, name='fwd',
                                        ndev=self._devices(), key=self.prefix, **attrs)


class SparseEmbedding(Block):
    """An embedding for tables too large to update whole, as MXNet's: the weight is a
    row_sparse parameter that lives in a Trainer's store, a forward pass pulls the rows its
    indices name, and the gradient is row_sparse (those rows). Imperative only; create a
    Trainer with its parameters before the first forward pass.

    >>> import ember as mx
    >>> emb = SparseEmbedding(10, 2)
    >>> emb.initialize(mx.init.One())
    >>> trainer = mx.gluon.Trainer(emb.collect_params(), 'sgd', kvstore='local')
    >>> emb.weight.grad().stype, emb(mx.nd.array([[1, 7]])).shape
    ('row_sparse', (1, 2, 2))
    """

    def __init__(self, input_dim, output_dim, dtype='float32', weight_initializer=None,
                 **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {'input_dim': input_dim, 'output_dim': output_dim, 'dtype': dtype,
                        'sparse_grad': True}
        self.weight = self.params.get('weight', shape=(input_dim, output_dim),
                                      init=weight_initializer, dtype=dtype,
                                      grad_stype='row_sparse', stype='row_sparse')

    def forward(self, x):
        weight = self.weight.row_sparse_data(x)
        return ndarray.Embedding(x, weight, name='fwd', **self._kwargs)

    def __repr__(self):
        kw = self._kwargs
        return f"{type(self).__name__}({kw['input_dim']} -> {kw['output_dim']}, {kw['dtype']})"
