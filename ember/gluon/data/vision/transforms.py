"""Image transforms as Gluon blocks (MXNet 1.x's ``gluon.data.vision.transforms``).

Images are NDArrays (H, W, C) or batches (N, H, W, C), uint8 or float; ``ToTensor`` makes
float32 tensors (C, H, W) for ``Normalize``. Transforms that run an ``mx.nd.image`` operator
are HybridBlocks; ``Compose`` hybridizes each run of them into one graph.

>>> import ember as mx
>>> from ember.gluon.data.vision import transforms
>>> chain = transforms.Compose([transforms.Resize(20), transforms.CenterCrop(16),
...                             transforms.ToTensor(), transforms.Normalize(0.5, 0.25)])
>>> chain(mx.nd.ones((30, 40, 3), dtype='uint8') * 255).shape
(3, 16, 16)
"""
from __future__ import annotations

import numbers
import random

import numpy as np

from ember import image
from ember.base import numeric_types  # noqa: F401  (MXNet's module has it)
from ember.util import is_np_array  # noqa: F401
from ember.gluon.block import Block, HybridBlock
from ember.gluon.nn import HybridSequential, Sequential

__all__ = ['Compose', 'Cast', 'ToTensor', 'Normalize', 'RandomResizedCrop', 'CropResize',
           'CenterCrop', 'Resize', 'RandomFlipLeftRight', 'RandomFlipTopBottom',
           'RandomBrightness', 'RandomContrast', 'RandomSaturation', 'RandomHue',
           'RandomColorJitter', 'RandomLighting', 'RandomApply', 'Rotate', 'RandomRotation',
           # what MXNet's star import of this module brings besides
           'Block', 'HybridBlock', 'HybridSequential', 'Sequential', 'is_np_array',
           'numeric_types']


class Compose(Sequential):
    """The transforms in order; consecutive HybridBlocks run as one hybridized graph."""

    def __init__(self, transforms):
        super().__init__()
        run = []
        for transform in list(transforms) + [None]:
            if isinstance(transform, HybridBlock):
                run.append(transform)
                continue
            self._add_run(run)
            run = []
            if transform is not None:
                self.add(transform)

    def _add_run(self, run):
        if len(run) == 1:
            self.add(run[0])
        elif run:
            graph = HybridSequential()
            graph.add(*run)
            graph.hybridize()
            self.add(graph)


class Cast(HybridBlock):
    """Cast to `dtype`."""

    def __init__(self, dtype='float32'):
        super().__init__()
        self._dtype = dtype

    def hybrid_forward(self, F, x):
        return F.cast(x, self._dtype)


class ToTensor(HybridBlock):
    """(H, W, C) in [0, 255] to float32 (C, H, W) in [0, 1] (batches too)."""

    def hybrid_forward(self, F, x):
        return F.image.to_tensor(x)


class Normalize(HybridBlock):
    """``(x - mean) / std`` per channel of a tensor (C, H, W) or batch (N, C, H, W)."""

    def __init__(self, mean=0.0, std=1.0):
        super().__init__()
        self._mean, self._std = mean, std

    def hybrid_forward(self, F, x):
        return F.image.normalize(x, self._mean, self._std)


def _pair(size):
    return (size, size) if isinstance(size, numbers.Number) else tuple(size)


class RandomResizedCrop(Block):
    """A crop of random area (a fraction in `scale`) and aspect ratio (in `ratio`), resized
    to `size` (w, h) or (size, size)."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0),
                 interpolation=1):
        super().__init__()
        self._args = (_pair(size), scale, ratio, interpolation)

    def forward(self, x):
        return image.random_size_crop(x, *self._args)[0]


class CropResize(HybridBlock):
    """The box (x, y, width, height), resized to `size` when given."""

    def __init__(self, x, y, width, height, size=None, interpolation=None):
        super().__init__()
        self._box = (x, y, width, height)
        self._size, self._interpolation = size, interpolation

    def hybrid_forward(self, F, x):
        out = F.image.crop(x, *self._box)
        if self._size:
            interp = 1 if self._interpolation is None else self._interpolation
            out = F.image.resize(out, self._size, False, interp)
        return out


class CenterCrop(Block):
    """The centred crop of `size` (w, h) or (size, size), scaled down to fit and resized."""

    def __init__(self, size, interpolation=1):
        super().__init__()
        self._args = (_pair(size), interpolation)

    def forward(self, x):
        return image.center_crop(x, *self._args)[0]


class Resize(HybridBlock):
    """Resize to `size` (w, h); one number: both edges, or the short edge with
    `keep_ratio`."""

    def __init__(self, size, keep_ratio=False, interpolation=1):
        super().__init__()
        self._size, self._keep, self._interpolation = size, keep_ratio, interpolation

    def hybrid_forward(self, F, x):
        return F.image.resize(x, self._size, self._keep, self._interpolation)


class RandomFlipLeftRight(HybridBlock):
    """Flip left-right with probability 0.5."""

    def hybrid_forward(self, F, x):
        return F.image.random_flip_left_right(x)


class RandomFlipTopBottom(HybridBlock):
    """Flip top-bottom with probability 0.5."""

    def hybrid_forward(self, F, x):
        return F.image.random_flip_top_bottom(x)


class _RandomFactor(HybridBlock):
    """An ``nd.image.random_*`` operator with factors in [max(0, 1 - amount), 1 + amount]."""

    _operator = ''

    def __init__(self, amount):
        super().__init__()
        self._args = (max(0.0, 1 - amount), 1 + amount)

    def hybrid_forward(self, F, x):
        return getattr(F.image, self._operator)(x, *self._args)


class RandomBrightness(_RandomFactor):
    """Scale brightness by a factor in [1 - brightness, 1 + brightness]."""
    _operator = 'random_brightness'

    def __init__(self, brightness):
        super().__init__(brightness)


class RandomContrast(_RandomFactor):
    """Scale contrast by a factor in [1 - contrast, 1 + contrast]."""
    _operator = 'random_contrast'

    def __init__(self, contrast):
        super().__init__(contrast)


class RandomSaturation(_RandomFactor):
    """Scale saturation by a factor in [1 - saturation, 1 + saturation]."""
    _operator = 'random_saturation'

    def __init__(self, saturation):
        super().__init__(saturation)


class RandomHue(_RandomFactor):
    """Turn the hue by a factor in [1 - hue, 1 + hue] of a full turn (as MXNet)."""
    _operator = 'random_hue'

    def __init__(self, hue):
        super().__init__(hue)


def _float32_only(x):
    if x.dtype != np.float32:
        raise TypeError(f'rotations take float32 images (C, H, W) or batches, got {x.dtype}; '
                        f'rotate after ToTensor')


class Rotate(Block):
    """Rotate images (C, H, W) or batches by `rotation_degrees` (see ``mx.image.imrotate``:
    `zoom_in` shows no border, `zoom_out` keeps the whole image)."""

    def __init__(self, rotation_degrees, zoom_in=False, zoom_out=False):
        super().__init__()
        self._args = (rotation_degrees, zoom_in, zoom_out)

    def forward(self, x):
        _float32_only(x)
        return image.imrotate(x, *self._args)


class RandomRotation(Block):
    """Rotate by an angle drawn from `angle_limits` (low, high) with probability
    `rotate_with_proba` (NumPy's global generator decides, then draws the angle)."""

    def __init__(self, angle_limits, zoom_in=False, zoom_out=False, rotate_with_proba=1.0):
        super().__init__()
        lower, upper = angle_limits
        if lower >= upper:
            raise ValueError(f'RandomRotation: angle_limits must be (low, high) with low < '
                             f'high, got {angle_limits!r}')
        if not 0 <= rotate_with_proba <= 1:
            raise ValueError(f'RandomRotation: rotate_with_proba must be in [0, 1], got '
                             f'{rotate_with_proba!r}')
        self._args = (angle_limits, zoom_in, zoom_out)
        self._rotate_with_proba = rotate_with_proba

    def forward(self, x):
        if np.random.random() > self._rotate_with_proba:
            return x
        _float32_only(x)
        return image.random_rotate(x, *self._args)


class RandomColorJitter(HybridBlock):
    """Brightness, contrast, saturation and hue jitter in a random order."""

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0):
        super().__init__()
        self._args = (brightness, contrast, saturation, hue)

    def hybrid_forward(self, F, x):
        return F.image.random_color_jitter(x, *self._args)


class RandomLighting(HybridBlock):
    """AlexNet's PCA lighting noise with standard deviation `alpha`."""

    def __init__(self, alpha):
        super().__init__()
        self._alpha = alpha

    def hybrid_forward(self, F, x):
        return F.image.random_lighting(x, self._alpha)


class RandomApply(Sequential):
    """Apply `transforms` with probability `p` (Python's ``random``)."""

    def __init__(self, transforms, p=0.5):
        super().__init__()
        self.transforms = transforms
        self.p = p

    def forward(self, x, *args):
        if self.p < random.random():
            return x
        return self.transforms(x)
