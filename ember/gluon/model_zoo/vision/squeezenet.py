"""SqueezeNet, from "SqueezeNet: AlexNet-level accuracy with 50x fewer parameters and <0.5MB
model size" (Iandola et al., 2016), versions 1.0 and 1.1, as in MXNet's model zoo. Takes
224x224 images (the final pooling is 13x13).

>>> import ember as mx
>>> net = squeezenet1_1(classes=10)
>>> net.initialize()
>>> net(mx.nd.zeros((1, 3, 224, 224))).shape
(1, 10)
"""
from __future__ import annotations

from ember.device import cpu
from ember.gluon import nn
from ember.gluon.block import HybridBlock
from ember.gluon.model_zoo.model_store import get_model_file
from ember.gluon.contrib.nn import HybridConcurrent

__all__ = ['SqueezeNet', 'squeezenet1_0', 'squeezenet1_1', 'get_squeezenet']

# Fire modules per version: (squeeze, expand 1x1, expand 3x3) channels, 'pool' for a max-pool.
_FIRE_16 = (16, 64, 64)
_FIRE_32 = (32, 128, 128)
_FIRE_48 = (48, 192, 192)
_FIRE_64 = (64, 256, 256)
_LAYOUTS = {
    '1.0': ((96, 7), ['pool', _FIRE_16, _FIRE_16, _FIRE_32, 'pool', _FIRE_32, _FIRE_48,
                      _FIRE_48, _FIRE_64, 'pool', _FIRE_64]),
    '1.1': ((64, 3), ['pool', _FIRE_16, _FIRE_16, 'pool', _FIRE_32, _FIRE_32, 'pool',
                      _FIRE_48, _FIRE_48, _FIRE_64, _FIRE_64]),
}


def _make_fire_conv(channels, kernel_size, padding=0):
    out = nn.HybridSequential(prefix='')
    out.add(nn.Conv2D(channels, kernel_size, padding=padding))
    out.add(nn.Activation('relu'))
    return out


def _make_fire(squeeze_channels, expand1x1_channels, expand3x3_channels):
    """A 1x1 squeeze convolution feeding 1x1 and 3x3 expand convolutions, concatenated."""
    out = nn.HybridSequential(prefix='')
    out.add(_make_fire_conv(squeeze_channels, 1))
    paths = HybridConcurrent(axis=1, prefix='')
    paths.add(_make_fire_conv(expand1x1_channels, 1))
    paths.add(_make_fire_conv(expand3x3_channels, 3, 1))
    out.add(paths)
    return out


class SqueezeNet(HybridBlock):
    """SqueezeNet `version` ('1.0' or '1.1') with `classes` outputs."""

    def __init__(self, version, classes=1000, **kwargs):
        super().__init__(**kwargs)
        if version not in _LAYOUTS:
            raise ValueError(f"SqueezeNet: version={version!r}: expected '1.0' or '1.1'")
        (stem_channels, stem_kernel), modules = _LAYOUTS[version]
        with self.name_scope():
            self.features = nn.HybridSequential(prefix='')
            self.features.add(nn.Conv2D(stem_channels, kernel_size=stem_kernel, strides=2))
            self.features.add(nn.Activation('relu'))
            for module in modules:
                if module == 'pool':
                    self.features.add(nn.MaxPool2D(pool_size=3, strides=2, ceil_mode=True))
                else:
                    self.features.add(_make_fire(*module))
            self.features.add(nn.Dropout(0.5))

            self.output = nn.HybridSequential(prefix='')
            self.output.add(nn.Conv2D(classes, kernel_size=1))
            self.output.add(nn.Activation('relu'))
            self.output.add(nn.AvgPool2D(13))
            self.output.add(nn.Flatten())

    def hybrid_forward(self, F, x):
        return self.output(self.features(x))


def get_squeezenet(version, pretrained=False, ctx=cpu(), root=None, **kwargs):
    """SqueezeNet `version` ('1.0' or '1.1')."""
    net = SqueezeNet(version, **kwargs)
    if pretrained:
        net.load_parameters(get_model_file(f'squeezenet{version}', root=root), ctx=ctx)
    return net


def squeezenet1_0(**kwargs):
    """SqueezeNet 1.0 (see get_squeezenet for the keyword arguments)."""
    return get_squeezenet('1.0', **kwargs)


def squeezenet1_1(**kwargs):
    """SqueezeNet 1.1."""
    return get_squeezenet('1.1', **kwargs)
