"""DenseNet, from "Densely Connected Convolutional Networks" (Huang et al., 2016), as in
MXNet's model zoo. Takes 224x224 images (the final pooling is 7x7).

>>> net = densenet121(classes=10)
>>> [len(stage) for stage in list(net.features._children.values())[4:11:2]]
[6, 12, 24, 16]
"""
from __future__ import annotations

from ember.device import cpu
from ember.gluon import nn
from ember.gluon.block import HybridBlock
from ember.gluon.model_zoo.model_store import get_model_file
from ember.gluon.contrib.nn import HybridConcurrent, Identity

__all__ = ['DenseNet', 'densenet121', 'densenet161', 'densenet169', 'densenet201',
           'get_densenet']


def _make_dense_block(num_layers, bn_size, growth_rate, dropout, stage_index):
    out = nn.HybridSequential(prefix=f'stage{stage_index}_')
    with out.name_scope():
        for _ in range(num_layers):
            out.add(_make_dense_layer(growth_rate, bn_size, dropout))
    return out


def _make_dense_layer(growth_rate, bn_size, dropout):
    """BN, ReLU, 1x1 conv, BN, ReLU, 3x3 conv: `growth_rate` new channels appended to the input."""
    new_features = nn.HybridSequential(prefix='')
    new_features.add(nn.BatchNorm())
    new_features.add(nn.Activation('relu'))
    new_features.add(nn.Conv2D(bn_size * growth_rate, kernel_size=1, use_bias=False))
    new_features.add(nn.BatchNorm())
    new_features.add(nn.Activation('relu'))
    new_features.add(nn.Conv2D(growth_rate, kernel_size=3, padding=1, use_bias=False))
    if dropout:
        new_features.add(nn.Dropout(dropout))
    out = HybridConcurrent(axis=1, prefix='')
    out.add(Identity())
    out.add(new_features)
    return out


def _make_transition(num_output_features):
    out = nn.HybridSequential(prefix='')
    out.add(nn.BatchNorm())
    out.add(nn.Activation('relu'))
    out.add(nn.Conv2D(num_output_features, kernel_size=1, use_bias=False))
    out.add(nn.AvgPool2D(pool_size=2, strides=2))
    return out


class DenseNet(HybridBlock):
    """DenseNet: a stem of `num_init_features` channels, then dense blocks of
    `block_config[i]` layers adding `growth_rate` channels each (bottleneck width
    `bn_size` * growth_rate), with halving transitions between blocks."""

    def __init__(self, num_init_features, growth_rate, block_config, bn_size=4, dropout=0,
                 classes=1000, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential(prefix='')
            self.features.add(nn.Conv2D(num_init_features, kernel_size=7, strides=2, padding=3,
                                        use_bias=False))
            self.features.add(nn.BatchNorm())
            self.features.add(nn.Activation('relu'))
            self.features.add(nn.MaxPool2D(pool_size=3, strides=2, padding=1))
            num_features = num_init_features
            for i, num_layers in enumerate(block_config):
                self.features.add(_make_dense_block(num_layers, bn_size, growth_rate, dropout,
                                                    i + 1))
                num_features += num_layers * growth_rate
                if i != len(block_config) - 1:
                    self.features.add(_make_transition(num_features // 2))
                    num_features //= 2
            self.features.add(nn.BatchNorm())
            self.features.add(nn.Activation('relu'))
            self.features.add(nn.AvgPool2D(pool_size=7))
            self.features.add(nn.Flatten())
            self.output = nn.Dense(classes)

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


# depth -> (stem channels, growth rate, layers per dense block)
densenet_spec = {121: (64, 32, [6, 12, 24, 16]),
                 161: (96, 48, [6, 12, 36, 24]),
                 169: (64, 32, [6, 12, 32, 32]),
                 201: (64, 32, [6, 12, 48, 32])}


def get_densenet(num_layers, pretrained=False, ctx=cpu(), root=None, **kwargs):
    """DenseNet of depth `num_layers` (121, 161, 169 or 201)."""
    if num_layers not in densenet_spec:
        raise ValueError(f'get_densenet: num_layers={num_layers!r}: expected one of '
                         f'{sorted(densenet_spec)}')
    num_init_features, growth_rate, block_config = densenet_spec[num_layers]
    net = DenseNet(num_init_features, growth_rate, block_config, **kwargs)
    if pretrained:
        net.load_parameters(get_model_file(f'densenet{num_layers}', root=root), ctx=ctx)
    return net


def densenet121(**kwargs):
    """DenseNet-121 (see get_densenet for the keyword arguments)."""
    return get_densenet(121, **kwargs)


def densenet161(**kwargs):
    """DenseNet-161."""
    return get_densenet(161, **kwargs)


def densenet169(**kwargs):
    """DenseNet-169."""
    return get_densenet(169, **kwargs)


def densenet201(**kwargs):
    """DenseNet-201."""
    return get_densenet(201, **kwargs)
