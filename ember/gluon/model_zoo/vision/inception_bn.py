"""Inception-BN, from "Batch Normalization: Accelerating Deep Network Training by Reducing
Internal Covariate Shift" (Ioffe and Szegedy, 2015): the ImageNet network of MXNet's
``example/image-classification/symbols/inception-bn.py`` as a Gluon HybridBlock. Takes 224x224
images.

Each convolution has a bias and is followed by batch norm (epsilon 1e-5 + 1e-10, momentum 0.9,
learned scale) and ReLU, as in the symbolic original. There are no published Gluon weights.
"""
from __future__ import annotations

from ember.device import cpu
from ember.gluon import nn
from ember.gluon.block import HybridBlock
from ember.gluon.model_zoo.model_store import get_model_file
from ember.gluon.contrib.nn import HybridConcurrent

__all__ = ['InceptionBN', 'inception_bn']

_BN_EPSILON = 1e-10 + 1e-5
_BN_MOMENTUM = 0.9


def _conv_factory(channels, kernel_size, strides=1, padding=0):
    out = nn.HybridSequential(prefix='')
    out.add(nn.Conv2D(channels, kernel_size, strides, padding))
    out.add(nn.BatchNorm(epsilon=_BN_EPSILON, momentum=_BN_MOMENTUM))
    out.add(nn.Activation('relu'))
    return out


def _chain(*blocks):
    out = nn.HybridSequential(prefix='')
    out.add(*blocks)
    return out


def _factory_a(num_1x1, num_3x3red, num_3x3, num_d3x3red, num_d3x3, pool, proj, prefix):
    """Inception module: 1x1 | 1x1, 3x3 | 1x1, 3x3, 3x3 | 3x3/1 `pool` ('avg' or 'max'), 1x1."""
    out = HybridConcurrent(axis=1, prefix=prefix)
    with out.name_scope():
        out.add(_conv_factory(num_1x1, 1))
        out.add(_chain(_conv_factory(num_3x3red, 1), _conv_factory(num_3x3, 3, padding=1)))
        out.add(_chain(_conv_factory(num_d3x3red, 1), _conv_factory(num_d3x3, 3, padding=1),
                       _conv_factory(num_d3x3, 3, padding=1)))
        pool_layer = nn.AvgPool2D if pool == 'avg' else nn.MaxPool2D
        out.add(_chain(pool_layer(pool_size=3, strides=1, padding=1), _conv_factory(proj, 1)))
    return out


def _factory_b(num_3x3red, num_3x3, num_d3x3red, num_d3x3, prefix):
    """Reduction module (stride 2): 1x1, 3x3/2 | 1x1, 3x3, 3x3/2 | 3x3/2 max-pool."""
    out = HybridConcurrent(axis=1, prefix=prefix)
    with out.name_scope():
        out.add(_chain(_conv_factory(num_3x3red, 1),
                       _conv_factory(num_3x3, 3, strides=2, padding=1)))
        out.add(_chain(_conv_factory(num_d3x3red, 1), _conv_factory(num_d3x3, 3, padding=1),
                       _conv_factory(num_d3x3, 3, strides=2, padding=1)))
        out.add(nn.MaxPool2D(pool_size=3, strides=2, padding=1))
    return out


class InceptionBN(HybridBlock):
    """Inception-BN with `classes` outputs.

    >>> net = InceptionBN(classes=10)
    >>> len(net.features), net.output
    (17, Dense(None -> 10, linear))
    """

    def __init__(self, classes=1000, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential(prefix='')
            features = self.features
            features.add(_conv_factory(64, 7, strides=2, padding=3))
            features.add(nn.MaxPool2D(pool_size=3, strides=2))
            features.add(_conv_factory(64, 1))
            features.add(_conv_factory(192, 3, padding=1))
            features.add(nn.MaxPool2D(pool_size=3, strides=2))
            features.add(_factory_a(64, 64, 64, 64, 96, 'avg', 32, 'in3a_'))
            features.add(_factory_a(64, 64, 96, 64, 96, 'avg', 64, 'in3b_'))
            features.add(_factory_b(128, 160, 64, 96, 'in3c_'))
            features.add(_factory_a(224, 64, 96, 96, 128, 'avg', 128, 'in4a_'))
            features.add(_factory_a(192, 96, 128, 96, 128, 'avg', 128, 'in4b_'))
            features.add(_factory_a(160, 128, 160, 128, 160, 'avg', 128, 'in4c_'))
            features.add(_factory_a(96, 128, 192, 160, 192, 'avg', 128, 'in4d_'))
            features.add(_factory_b(128, 192, 192, 256, 'in4e_'))
            features.add(_factory_a(352, 192, 320, 160, 224, 'avg', 128, 'in5a_'))
            features.add(_factory_a(352, 192, 320, 192, 224, 'max', 128, 'in5b_'))
            features.add(nn.AvgPool2D(pool_size=7, strides=1))
            features.add(nn.Flatten())
            self.output = nn.Dense(classes)

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


def inception_bn(pretrained=False, ctx=cpu(), root=None, **kwargs):
    """Inception-BN; `pretrained` loads weights registered under 'inceptionbn' (none are
    published: build a local repository and ``model_store.register`` them)."""
    net = InceptionBN(**kwargs)
    if pretrained:
        net.load_parameters(get_model_file('inceptionbn', root=root), ctx=ctx)
    return net
