"""AlexNet, from "ImageNet Classification with Deep Convolutional Neural Networks" (Krizhevsky
et al., 2012), as in MXNet's model zoo. Takes 224x224 images.

>>> import ember as mx
>>> net = alexnet(classes=10)
>>> net.initialize()
>>> net(mx.nd.zeros((1, 3, 224, 224))).shape
(1, 10)
"""
from __future__ import annotations

from ember.device import cpu
from ember.gluon import nn
from ember.gluon.block import HybridBlock
from ember.gluon.model_zoo.model_store import get_model_file

__all__ = ['AlexNet', 'alexnet']


class AlexNet(HybridBlock):
    """AlexNet: five convolutions and three dense layers; `classes` outputs."""

    def __init__(self, classes=1000, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.features = nn.HybridSequential(prefix='')
            with self.features.name_scope():
                self.features.add(nn.Conv2D(64, kernel_size=11, strides=4, padding=2,
                                            activation='relu'))
                self.features.add(nn.MaxPool2D(pool_size=3, strides=2))
                self.features.add(nn.Conv2D(192, kernel_size=5, padding=2, activation='relu'))
                self.features.add(nn.MaxPool2D(pool_size=3, strides=2))
                self.features.add(nn.Conv2D(384, kernel_size=3, padding=1, activation='relu'))
                self.features.add(nn.Conv2D(256, kernel_size=3, padding=1, activation='relu'))
                self.features.add(nn.Conv2D(256, kernel_size=3, padding=1, activation='relu'))
                self.features.add(nn.MaxPool2D(pool_size=3, strides=2))
                self.features.add(nn.Flatten())
                self.features.add(nn.Dense(4096, activation='relu'))
                self.features.add(nn.Dropout(0.5))
                self.features.add(nn.Dense(4096, activation='relu'))
                self.features.add(nn.Dropout(0.5))
            self.output = nn.Dense(classes)

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


def alexnet(pretrained=False, ctx=cpu(), root=None, **kwargs):
    """AlexNet; `pretrained` loads the ImageNet weights from `root` (default
    ``$MXNET_HOME/models``) onto `ctx`."""
    net = AlexNet(**kwargs)
    if pretrained:
        net.load_parameters(get_model_file('alexnet', root=root), ctx=ctx)
    return net
