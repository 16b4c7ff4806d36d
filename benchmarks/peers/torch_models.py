"""PyTorch equivalents of the Gluon model zoo networks that benchmarks/compare.py runs.

Each network has the layers, shapes, biases and paddings of MXNet 1.9.1's Gluon model zoo
(and of ember.gluon.model_zoo.vision), so the three frameworks do the same arithmetic:
ResNet V1 bottlenecks put the stride on the first 1x1 convolution and give the 1x1
convolutions a bias; Inception-v3 has no auxiliary classifier and BatchNorm epsilon 1e-3;
Gluon's MaxPool2D default is 2x2/2 without ceil mode, its AvgPool2D counts the padding.

Needs only torch: it runs inside the PyTorch virtual environment, not Ember's, so check the
examples there with ``python -m doctest benchmarks/peers/torch_models.py``.

>>> build('resnet50_v1').eval()(torch.zeros(1, 3, 224, 224)).shape
torch.Size([1, 1000])
"""
from __future__ import annotations

import torch
from torch import nn

CLASSES = 1000


def build(name, classes=CLASSES):
    """The network `name` (a key of NETWORKS) with `classes` outputs and random weights.

    >>> sum(p.numel() for p in build('alexnet', classes=10).parameters())
    57044810
    """
    if name not in NETWORKS:
        raise ValueError(f'torch_models.build: network {name!r}: expected one of '
                         f'{", ".join(NETWORKS)}')
    return NETWORKS[name](classes)


# ---- AlexNet and VGG ------------------------------------------------------------------------

def alexnet(classes):
    def conv(cin, cout, kernel, stride=1, padding=0):
        return [nn.Conv2d(cin, cout, kernel, stride, padding), nn.ReLU(inplace=True)]
    return nn.Sequential(
        *conv(3, 64, 11, 4, 2), nn.MaxPool2d(3, 2),
        *conv(64, 192, 5, 1, 2), nn.MaxPool2d(3, 2),
        *conv(192, 384, 3, 1, 1), *conv(384, 256, 3, 1, 1), *conv(256, 256, 3, 1, 1),
        nn.MaxPool2d(3, 2), nn.Flatten(),
        nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, classes))


VGG16_STAGES = ((2, 64), (2, 128), (3, 256), (3, 512), (3, 512))


def vgg16(classes):
    layers, cin = [], 3
    for count, channels in VGG16_STAGES:
        for _ in range(count):
            layers += [nn.Conv2d(cin, channels, 3, 1, 1), nn.ReLU(inplace=True)]
            cin = channels
        layers.append(nn.MaxPool2d(2, 2))
    layers += [nn.Flatten(), nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True),
               nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
               nn.Dropout(0.5), nn.Linear(4096, classes)]
    return nn.Sequential(*layers)


# ---- ResNet V1 ------------------------------------------------------------------------------

class BottleneckV1(nn.Module):
    """Gluon's BottleneckV1: 1x1/stride (bias), 3x3 (no bias), 1x1 (bias), each with BN."""

    def __init__(self, cin, channels, stride, downsample):
        super().__init__()
        mid = channels // 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, mid, 1, stride), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, 1, 1, bias=False), nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, channels, 1, 1), nn.BatchNorm2d(channels))
        self.downsample = nn.Sequential(
            nn.Conv2d(cin, channels, 1, stride, bias=False),
            nn.BatchNorm2d(channels)) if downsample else None
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        residual = x if self.downsample is None else self.downsample(x)
        return self.relu(self.body(x) + residual)


def resnet_v1(layers, classes, channels=(64, 256, 512, 1024, 2048)):
    features = [nn.Conv2d(3, channels[0], 7, 2, 3, bias=False), nn.BatchNorm2d(channels[0]),
                nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    for stage, count in enumerate(layers):
        cin, cout = channels[stage], channels[stage + 1]
        stride = 1 if stage == 0 else 2
        features.append(BottleneckV1(cin, cout, stride, cin != cout))
        features += [BottleneckV1(cout, cout, 1, False) for _ in range(count - 1)]
    features += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels[-1], classes)]
    return nn.Sequential(*features)


# ---- Inception-v3 ---------------------------------------------------------------------------

def basic_conv(cin, cout, kernel, stride=1, padding=0):
    """Gluon's _make_basic_conv: convolution without bias, BN (epsilon 1e-3), ReLU."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
                         nn.BatchNorm2d(cout, eps=0.001), nn.ReLU(inplace=True))


class Concurrent(nn.Module):
    """Gluon's HybridConcurrent(axis=1): every branch on the same input, outputs concatenated."""

    def __init__(self, *branches):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return torch.cat([branch(x) for branch in self.branches], dim=1)


def chain(cin, *settings, pool=None):
    """A pool ('avg' 3x3/1 pad 1, 'max' 3x3/2) then basic convolutions, each setting
    (channels, kernel, stride, padding)."""
    layers = []
    if pool == 'avg':
        layers.append(nn.AvgPool2d(3, 1, 1))
    elif pool == 'max':
        layers.append(nn.MaxPool2d(3, 2))
    for cout, kernel, stride, padding in settings:
        layers.append(basic_conv(cin, cout, kernel, stride, padding))
        cin = cout
    return nn.Sequential(*layers)


def block_a(cin, pool_features):
    return Concurrent(chain(cin, (64, 1, 1, 0)),
                      chain(cin, (48, 1, 1, 0), (64, 5, 1, 2)),
                      chain(cin, (64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 1, 1)),
                      chain(cin, (pool_features, 1, 1, 0), pool='avg'))


def block_b(cin):
    return Concurrent(chain(cin, (384, 3, 2, 0)),
                      chain(cin, (64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 2, 0)),
                      chain(cin, pool='max'))


def block_c(cin, c7):
    row, col = ((1, 7), 1, (0, 3)), ((7, 1), 1, (3, 0))
    return Concurrent(chain(cin, (192, 1, 1, 0)),
                      chain(cin, (c7, 1, 1, 0), (c7, *row), (192, *col)),
                      chain(cin, (c7, 1, 1, 0), (c7, *col), (c7, *row), (c7, *col),
                            (192, *row)),
                      chain(cin, (192, 1, 1, 0), pool='avg'))


def block_d(cin):
    return Concurrent(chain(cin, (192, 1, 1, 0), (320, 3, 2, 0)),
                      chain(cin, (192, 1, 1, 0), (192, (1, 7), 1, (0, 3)),
                            (192, (7, 1), 1, (3, 0)), (192, 3, 2, 0)),
                      chain(cin, pool='max'))


def split_1x3_3x1(cin):
    return Concurrent(chain(cin, (384, (1, 3), 1, (0, 1))), chain(cin, (384, (3, 1), 1, (1, 0))))


def block_e(cin):
    return Concurrent(chain(cin, (320, 1, 1, 0)),
                      nn.Sequential(chain(cin, (384, 1, 1, 0)), split_1x3_3x1(384)),
                      nn.Sequential(chain(cin, (448, 1, 1, 0), (384, 3, 1, 1)),
                                    split_1x3_3x1(384)),
                      chain(cin, (192, 1, 1, 0), pool='avg'))


def inception_v3(classes):
    return nn.Sequential(
        basic_conv(3, 32, 3, 2), basic_conv(32, 32, 3), basic_conv(32, 64, 3, 1, 1),
        nn.MaxPool2d(3, 2), basic_conv(64, 80, 1), basic_conv(80, 192, 3), nn.MaxPool2d(3, 2),
        block_a(192, 32), block_a(256, 64), block_a(288, 64), block_b(288),
        block_c(768, 128), block_c(768, 160), block_c(768, 160), block_c(768, 192),
        block_d(768), block_e(1280), block_e(2048),
        nn.AvgPool2d(8), nn.Dropout(0.5), nn.Flatten(), nn.Linear(2048, classes))


NETWORKS = {
    'alexnet': alexnet,
    'vgg16': vgg16,
    'resnet50_v1': lambda classes: resnet_v1((3, 4, 6, 3), classes),
    'resnet152_v1': lambda classes: resnet_v1((3, 8, 36, 3), classes),
    'inceptionv3': inception_v3,
}
