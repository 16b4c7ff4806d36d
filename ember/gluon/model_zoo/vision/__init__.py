"""The model zoo's vision networks (``mx.gluon.model_zoo.vision``), as in MXNet 1.9.

Networks are built by name with :func:`get_model` or by their constructor functions
(``resnet50_v1(pretrained=True)``). Keyword arguments go to the network (``classes``) and to
the weight loading (``pretrained``, ``ctx``, ``root``).

>>> from ember.gluon.model_zoo import vision
>>> type(vision.get_model('resnet18_v1', classes=10)).__name__
'ResNetV1'
"""
from __future__ import annotations

import difflib

from ember.gluon.contrib.nn import HybridConcurrent, Identity
from ember.gluon.model_zoo.vision.alexnet import *  # noqa: F401,F403
from ember.gluon.model_zoo.vision.alexnet import __all__ as _alexnet
from ember.gluon.model_zoo.vision.densenet import *  # noqa: F401,F403
from ember.gluon.model_zoo.vision.densenet import __all__ as _densenet
from ember.gluon.model_zoo.vision.inception import *  # noqa: F401,F403
from ember.gluon.model_zoo.vision.inception import __all__ as _inception
from ember.gluon.model_zoo.vision.inception_bn import *  # noqa: F401,F403
from ember.gluon.model_zoo.vision.inception_bn import __all__ as _inception_bn
from ember.gluon.model_zoo.vision.mobilenet import *  # noqa: F401,F403
from ember.gluon.model_zoo.vision.mobilenet import __all__ as _mobilenet
from ember.gluon.model_zoo.vision.resnet import *  # noqa: F401,F403
from ember.gluon.model_zoo.vision.resnet import __all__ as _resnet
from ember.gluon.model_zoo.vision.squeezenet import *  # noqa: F401,F403
from ember.gluon.model_zoo.vision.squeezenet import __all__ as _squeezenet
from ember.gluon.model_zoo.vision.vgg import *  # noqa: F401,F403
from ember.gluon.model_zoo.vision.vgg import __all__ as _vgg

__all__ = (['get_model', 'HybridConcurrent', 'Identity'] + _alexnet + _densenet + _inception
           + _inception_bn + _mobilenet + _resnet + _squeezenet + _vgg
           + ['densenet', 'inception', 'mobilenet', 'resnet', 'squeezenet', 'vgg'])

_MODELS = {
    'resnet18_v1': resnet18_v1, 'resnet34_v1': resnet34_v1, 'resnet50_v1': resnet50_v1,
    'resnet101_v1': resnet101_v1, 'resnet152_v1': resnet152_v1,
    'resnet18_v2': resnet18_v2, 'resnet34_v2': resnet34_v2, 'resnet50_v2': resnet50_v2,
    'resnet101_v2': resnet101_v2, 'resnet152_v2': resnet152_v2,
    'vgg11': vgg11, 'vgg13': vgg13, 'vgg16': vgg16, 'vgg19': vgg19,
    'vgg11_bn': vgg11_bn, 'vgg13_bn': vgg13_bn, 'vgg16_bn': vgg16_bn, 'vgg19_bn': vgg19_bn,
    'alexnet': alexnet,
    'densenet121': densenet121, 'densenet161': densenet161,
    'densenet169': densenet169, 'densenet201': densenet201,
    'squeezenet1.0': squeezenet1_0, 'squeezenet1.1': squeezenet1_1,
    'inceptionv3': inception_v3, 'inceptionbn': inception_bn,
    'mobilenet1.0': mobilenet1_0, 'mobilenet0.75': mobilenet0_75,
    'mobilenet0.5': mobilenet0_5, 'mobilenet0.25': mobilenet0_25,
    'mobilenetv2_1.0': mobilenet_v2_1_0, 'mobilenetv2_0.75': mobilenet_v2_0_75,
    'mobilenetv2_0.5': mobilenet_v2_0_5, 'mobilenetv2_0.25': mobilenet_v2_0_25,
}


def _canonical_name(name):
    """Lower case; 'mobilenet_v2_1.0' is accepted for MXNet's 'mobilenetv2_1.0'."""
    name = name.lower()
    if name.startswith('mobilenet_v2_'):
        name = 'mobilenetv2_' + name[len('mobilenet_v2_'):]
    return name


def get_model(name, **kwargs):
    """The network called `name` (e.g. 'resnet50_v1', 'mobilenet0.5', 'squeezenet1.1');
    `kwargs` go to its constructor function: ``classes``, ``pretrained``, ``ctx``, ``root``.

    >>> get_model('resnet50v1')
    Traceback (most recent call last):
    ...
    ValueError: Model 'resnet50v1' is not supported; did you mean 'resnet50_v1'? ...
    """
    key = _canonical_name(name)
    if key not in _MODELS:
        close = difflib.get_close_matches(key, _MODELS, n=1)
        hint = f" did you mean '{close[0]}'?" if close else ''
        raise ValueError(f'Model {name!r} is not supported;{hint} Available options are\n\t'
                         + '\n\t'.join(sorted(_MODELS)))
    return _MODELS[key](**kwargs)
