"""Activation layers: Activation, LeakyReLU, PReLU, ELU, SELU, GELU, Swish (MXNet 1.x).

>>> import ember as mx
>>> act = mx.gluon.nn.LeakyReLU(0.1)
>>> act(mx.nd.array([-1.0, 2.0])).asnumpy().tolist()
[-0.10000000149011612, 2.0]
"""
from __future__ import annotations

from ember import initializer
from ember.gluon.block import HybridBlock

__all__ = ['Activation', 'LeakyReLU', 'PReLU', 'ELU', 'SELU', 'GELU', 'Swish']


class Activation(HybridBlock):
    """An activation function by name: 'relu', 'sigmoid', 'tanh', 'softrelu' or 'softsign'.

    >>> import ember as mx
    >>> mx.gluon.nn.Activation('relu')(mx.nd.array([-1.0, 3.0])).asnumpy().tolist()
    [0.0, 3.0]
    """

    def __init__(self, activation, **kwargs):
        # Set before Block.__init__, which names the block after _alias().
        self._act_type = activation
        super().__init__(**kwargs)

    def _alias(self):
        return self._act_type

    def hybrid_forward(self, F, x):
        return F.Activation(x, act_type=self._act_type, name='fwd')

    def __repr__(self):
        return f'{type(self).__name__}({self._act_type})'


class LeakyReLU(HybridBlock):
    """``x`` for x >= 0 and ``alpha * x`` below."""

    def __init__(self, alpha, **kwargs):
        if alpha < 0:
            raise ValueError(f'LeakyReLU: alpha={alpha!r}: the slope must be >= 0')
        super().__init__(**kwargs)
        self._alpha = alpha

    def hybrid_forward(self, F, x):
        return F.LeakyReLU(x, act_type='leaky', slope=self._alpha, name='fwd')

    def __repr__(self):
        return f'{type(self).__name__}({self._alpha})'


class PReLU(HybridBlock):
    """LeakyReLU with a learned slope ``alpha`` (one per channel when in_channels > 1).

    >>> import ember as mx
    >>> act = mx.gluon.nn.PReLU()
    >>> act.initialize()
    >>> act(mx.nd.array([-4.0, 4.0])).asnumpy().tolist()
    [-1.0, 4.0]
    """

    def __init__(self, alpha_initializer=initializer.Constant(0.25), in_channels=1, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.alpha = self.params.get('alpha', shape=(in_channels,), init=alpha_initializer)

    def hybrid_forward(self, F, x, alpha):
        return F.LeakyReLU(x, alpha, act_type='prelu', name='fwd')


class ELU(HybridBlock):
    """``x`` for x > 0 and ``alpha * (exp(x) - 1)`` below."""

    def __init__(self, alpha=1.0, **kwargs):
        super().__init__(**kwargs)
        self._alpha = alpha

    def hybrid_forward(self, F, x):
        return F.LeakyReLU(x, act_type='elu', slope=self._alpha, name='fwd')


class SELU(HybridBlock):
    """Scaled ELU with the fixed constants of Klambauer et al. (2017)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def hybrid_forward(self, F, x):
        return F.LeakyReLU(x, act_type='selu', name='fwd')


class GELU(HybridBlock):
    """Gaussian error linear unit, ``x * Phi(x)``."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def hybrid_forward(self, F, x):
        return F.LeakyReLU(x, act_type='gelu', name='fwd')


class Swish(HybridBlock):
    """``x * sigmoid(beta * x)``."""

    def __init__(self, beta=1.0, **kwargs):
        super().__init__(**kwargs)
        self._beta = beta

    def hybrid_forward(self, F, x):
        return x * F.sigmoid(x * self._beta, name='fwd')
