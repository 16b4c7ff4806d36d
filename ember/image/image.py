"""Image reading and augmentation on NDArrays (MXNet 1.x's ``mx.image``).

Images are NDArrays (H, W, C), uint8 as decoded, RGB unless ``to_rgb=False``. Decoding and
resizing run in OpenCV (``ember.backend.imaging``). The random augmenters draw from Python's
``random`` module and NumPy's global generator, as MXNet's do, so ``random.seed`` and
``np.random.seed`` make them repeat.

>>> import numpy as np
>>> from ember.backend import imaging
>>> png = imaging.encode(np.full((20, 30, 3), 90, np.uint8), '.png')
>>> image = imdecode(png)
>>> image.shape, resize_short(image, 10).shape, center_crop(image, (8, 8))[0].shape
((20, 30, 3), (10, 15, 3), (8, 8, 3))
>>> augment = CreateAugmenter((3, 8, 8), resize=10, mean=True, std=True)
>>> [type(aug).__name__ for aug in augment]
['ResizeAug', 'CenterCropAug', 'CastAug', 'ColorNormalizeAug']
"""
from __future__ import annotations

import json
import numbers
import random

import numpy as np

from ember import engine
from ember import ndarray as nd
from ember.backend import imaging
from ember.base import EmberError
from ember.device import cpu
from ember.ndarray.ndarray import NDArray, view_of
from ember.storage.borrowed import Borrowed

__all__ = ['imread', 'imdecode', 'imresize', 'scale_down', 'copyMakeBorder', 'resize_short',
           'fixed_crop', 'random_crop', 'center_crop', 'color_normalize', 'random_size_crop',
           'Augmenter', 'SequentialAug', 'RandomOrderAug', 'ResizeAug', 'ForceResizeAug',
           'RandomCropAug', 'RandomSizedCropAug', 'CenterCropAug', 'BrightnessJitterAug',
           'ContrastJitterAug', 'SaturationJitterAug', 'HueJitterAug', 'ColorJitterAug',
           'LightingAug', 'ColorNormalizeAug', 'RandomGrayAug', 'HorizontalFlipAug', 'CastAug',
           'CreateAugmenter', 'imrotate', 'random_rotate']


# ----------------------------------------------------------------------------------------------
# Reading and resizing

def _options(function, names, args, kwargs):
    """MXNet's image functions pass their options on to an operator, positionally or by
    name: the values of `names` (each a (name, default) pair)."""
    if len(args) > len(names):
        raise TypeError(f'{function}: takes at most {len(names)} options after its inputs '
                        f'({", ".join(n for n, _ in names)}), got {len(args)}')
    values = dict(names)
    for (name, _), value in zip(names, args):
        if name in kwargs:
            raise TypeError(f'{function}: got two values for {name!r}')
        values[name] = value
    unknown = set(kwargs) - set(values)
    if unknown:
        raise TypeError(f'{function}: unknown options {sorted(unknown)}; it takes '
                        f'{", ".join(n for n, _ in names)}')
    values.update(kwargs)
    return values


def imdecode(buf, *args, **kwargs):
    """Decode image bytes (bytes, bytearray, a uint8 NumPy array or NDArray) into an NDArray
    (H, W, C) uint8. Options (positional or by name): `flag` 1 colour (default), 0 gray;
    `to_rgb` True (default; False gives BGR); `out`."""
    options = _options('imdecode', (('flag', 1), ('to_rgb', True), ('out', None)), args,
                       kwargs)
    flag, to_rgb, out = options['flag'], options['to_rgb'], options['out']
    if isinstance(buf, nd.NDArray):
        buf = buf.asnumpy()
    if isinstance(buf, np.ndarray):
        buf = np.ascontiguousarray(buf.reshape(-1)).view(np.uint8)
    elif not isinstance(buf, (bytes, bytearray, memoryview)):
        raise TypeError(f'imdecode: buf must be bytes or a uint8 array, got '
                        f'{type(buf).__name__}')
    image = imaging.decode(buf, int(flag), bool(to_rgb))
    return _as_ndarray(image, out)


def _as_ndarray(image, out):
    """An NDArray over the freshly decoded `image` itself (no copy), or `image` in `out`."""
    if out is not None:
        out[:] = nd.array(image, dtype=image.dtype)
        return out
    image = np.ascontiguousarray(image)
    return NDArray(Borrowed(image), view_of(image.shape, image.dtype), engine.get().new_var(),
                   cpu())


def imread(filename, *args, **kwargs):
    """Read and decode the image file `filename` (options as :func:`imdecode`'s)."""
    try:
        with open(filename, 'rb') as file:
            buf = file.read()
    except FileNotFoundError:
        raise EmberError(f'imread: no such file {filename!r}') from None
    try:
        return imdecode(buf, *args, **kwargs)
    except imaging.ImageDecodeError as exc:
        raise imaging.ImageDecodeError(f'imread: {filename!r}: {exc}') from None


def imresize(src, w, h, *args, **kwargs):
    """`src` (H, W, C) resized to (h, w, C) with OpenCV. Options: `interp` (0 nearest,
    1 bilinear (default), 2 bicubic, 3 area, 4 Lanczos) and `out`."""
    options = _options('imresize', (('interp', 1), ('out', None)), args, kwargs)
    return nd._cvimresize(src, w=int(w), h=int(h), interp=int(options['interp']),
                          out=options['out'])


def copyMakeBorder(src, top, bot, left, right, *args, **kwargs):  # noqa: N802 (MXNet's name)
    """`src` padded with OpenCV's copyMakeBorder. Options: `type` (0, the default: the
    constant `value`), `value`, `values` (one per channel) and `out`."""
    options = _options('copyMakeBorder', (('type', 0), ('value', 0.0), ('values', ()),
                                          ('out', None)), args, kwargs)
    return nd._cvcopyMakeBorder(src, top=top, bot=bot, left=left, right=right, **options)


def scale_down(src_size, size):
    """`size` (w, h) shrunk, keeping its ratio, until it fits in `src_size` (w, h).

    >>> scale_down((640, 480), (720, 120))
    (640, 106)
    """
    w, h = size
    sw, sh = src_size
    if sh < h:
        w, h = float(w * sh) / h, sh
    if sw < w:
        w, h = sw, float(h * sw) / w
    return int(w), int(h)


def _interp_method(interp, sizes=()):
    """OpenCV's interpolation for MXNet's codes: 9 picks by direction, 10 at random."""
    if interp == 9:
        if not sizes:
            return 2
        old_h, old_w, new_h, new_w = sizes
        if new_h > old_h and new_w > old_w:
            return 2
        return 3 if new_h < old_h and new_w < old_w else 1
    if interp == 10:
        return random.randint(0, 4)
    if interp not in imaging.INTERPOLATIONS:
        raise ValueError(f'interp={interp!r}: expected 0-4, 9 (auto) or 10 (random)')
    return interp


def resize_short(src, size, interp=2):
    """`src` resized so that its shorter edge is `size`, keeping the aspect ratio."""
    h, w = src.shape[:2]
    if h > w:
        new_h, new_w = size * h // w, size
    else:
        new_h, new_w = size, size * w // h
    return imresize(src, new_w, new_h, interp=_interp_method(interp, (h, w, new_h, new_w)))


def fixed_crop(src, x0, y0, w, h, size=None, interp=2):
    """The box (x0, y0, w, h) of `src`, resized to `size` (w, h) when given (in one pass:
    OpenCV reads the box in place)."""
    if size is None or (w, h) == tuple(size):
        return src[y0:y0 + h, x0:x0 + w]
    interp = _interp_method(interp, (h, w, size[1], size[0]))
    return nd._cvcropresize(src, x=x0, y=y0, width=w, height=h, size=tuple(size),
                                 interp=interp)


def random_crop(src, size, interp=2):
    """A random box of `size` (w, h) (scaled down to fit): ``(image, (x0, y0, w, h))``."""
    h, w = src.shape[:2]
    new_w, new_h = scale_down((w, h), size)
    x0 = random.randint(0, w - new_w)
    y0 = random.randint(0, h - new_h)
    return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)


def center_crop(src, size, interp=2):
    """The centred box of `size` (w, h) (scaled down to fit): ``(image, (x0, y0, w, h))``."""
    h, w = src.shape[:2]
    new_w, new_h = scale_down((w, h), size)
    x0 = int((w - new_w) / 2)
    y0 = int((h - new_h) / 2)
    return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)


def color_normalize(src, mean, std=None):
    """``(src - mean) / std`` in place on `src` (a float image)."""
    if mean is not None:
        src -= mean
    if std is not None:
        src /= std
    return src


def imrotate(src, rotation_degrees, zoom_in=False, zoom_out=False):
    """float32 image(s) (C, H, W) or (N, C, H, W) rotated by `rotation_degrees` (a number,
    or one angle per image as an NDArray) about their centres, bilinearly sampled with zeros
    outside. `zoom_in` scales so that no outside shows; `zoom_out` so that the whole image
    stays in.

    >>> import ember as mx
    >>> image = mx.nd.arange(12).reshape((1, 3, 4))
    >>> imrotate(image, 180).asnumpy()[0].round(3).tolist()
    [[11.0, 10.0, 9.0, 8.0], [7.0, 6.0, 5.0, 4.0], [3.0, 2.0, 1.0, 0.0]]
    """
    if zoom_in and zoom_out:
        raise ValueError('imrotate: zoom_in and zoom_out cannot both be True')
    if src.dtype != np.float32:
        raise TypeError(f'imrotate: only float32 images are supported, got {src.dtype}')
    single = src.ndim == 3
    if single:
        if not isinstance(rotation_degrees, numbers.Number):
            raise TypeError('imrotate: the angle of a single image must be a number')
        src = src.expand_dims(axis=0)
    elif src.ndim != 4:
        raise ValueError(f'imrotate: expected (C, H, W) or (N, C, H, W), got shape {src.shape}')
    angles = _angles(rotation_degrees, src.shape[0])
    grid = _rotation_grid(angles, src.shape[2], src.shape[3], zoom_in, zoom_out)
    rotated = nd.BilinearSampler(src, nd.array(grid, ctx=src.context))
    return rotated[0] if single else rotated


def _angles(rotation_degrees, count):
    """The rotation of each image in radians, shape (count,)."""
    if isinstance(rotation_degrees, numbers.Number):
        degrees = np.full(count, float(rotation_degrees))
    else:
        degrees = np.asarray(rotation_degrees.asnumpy() if isinstance(rotation_degrees, NDArray)
                             else rotation_degrees, dtype=np.float64).reshape(-1)
    if degrees.size != count:
        raise ValueError(f'imrotate: {count} images need {count} angles, got {degrees.size}')
    return np.pi * degrees / 180


def _rotation_grid(angles, height, width, zoom_in, zoom_out):
    """BilinearSampler's (N, 2, H, W) grid: each output pixel's source, rotated about the
    centre in pixel units and normalised to [-1, 1] after the rotation (keeping the aspect)."""
    half_h, half_w = (height - 1) / 2, (width - 1) / 2
    rows = (np.arange(height, dtype=np.float32) - half_h)[:, None] * np.ones((1, width))
    cols = (np.arange(width, dtype=np.float32) - half_w)[None, :] * np.ones((height, 1))
    cos, sin = np.cos(angles)[:, None, None], np.sin(angles)[:, None, None]
    x = (cols * cos - rows * sin) / half_w
    y = (cols * sin + rows * cos) / half_h
    grid = np.stack([x, y], axis=1)
    if zoom_in or zoom_out:
        grid *= _zoom(angles, height, width, zoom_out)[:, None, None, None]
    return grid.astype(np.float32)


def _zoom(angles, height, width, zoom_out):
    """Per image, the scale that keeps the whole image in (zoom_out) or no border in."""
    radius, corner = np.hypot(height, width), np.arctan(height / width)
    turn = np.abs(angles)
    extent_x = np.maximum(np.abs(radius * np.cos(corner + turn)),
                          np.abs(radius * np.cos(corner - turn)))
    extent_y = np.maximum(np.abs(radius * np.sin(corner + turn)),
                          np.abs(radius * np.sin(corner - turn)))
    if zoom_out:
        return np.maximum(extent_x / width, extent_y / height)
    return np.minimum(width / extent_x, height / extent_y)


def random_rotate(src, angle_limits, zoom_in=False, zoom_out=False):
    """:func:`imrotate` by angles drawn uniformly from `angle_limits` (low, high) with NumPy's
    global generator (one per image of a batch)."""
    if src.ndim == 3:
        degrees = np.random.uniform(*angle_limits)
    else:
        degrees = nd.array(np.random.uniform(*angle_limits, size=src.shape[0]))
    return imrotate(src, degrees, zoom_in=zoom_in, zoom_out=zoom_out)


def random_size_crop(src, size, area, ratio, interp=2, **kwargs):
    """A box of random area (a fraction in `area`, or [area, 1]) and aspect ratio (log-uniform
    in `ratio`), resized to `size`; the centre crop after ten misses."""
    if 'min_area' in kwargs:
        area = kwargs.pop('min_area')
    if kwargs:
        raise TypeError(f'random_size_crop: unexpected arguments {sorted(kwargs)}')
    h, w = src.shape[:2]
    if isinstance(area, numbers.Number):
        area = (area, 1.0)
    for _ in range(10):
        target_area = random.uniform(area[0], area[1]) * h * w
        new_ratio = np.exp(random.uniform(np.log(ratio[0]), np.log(ratio[1])))
        new_w = int(round(np.sqrt(target_area * new_ratio)))
        new_h = int(round(np.sqrt(target_area / new_ratio)))
        if new_w <= w and new_h <= h:
            x0 = random.randint(0, w - new_w)
            y0 = random.randint(0, h - new_h)
            return fixed_crop(src, x0, y0, new_w, new_h, size, interp), (x0, y0, new_w, new_h)
    return center_crop(src, size, interp)


# ----------------------------------------------------------------------------------------------
# Augmenters

class Augmenter:
    """An image transform ``aug(src) -> image``; ``dumps()`` describes it as JSON."""

    def __init__(self, **kwargs):
        self._kwargs = {k: _jsonable(v) for k, v in kwargs.items()}

    def dumps(self):
        """``[name, parameters]`` as JSON text."""
        return json.dumps([type(self).__name__.lower(), self._kwargs])

    def __call__(self, src):
        raise NotImplementedError(f'{type(self).__name__} must define __call__')


def _jsonable(value):
    if isinstance(value, nd.NDArray):
        value = value.asnumpy()
    return value.tolist() if isinstance(value, np.ndarray) else value


class SequentialAug(Augmenter):
    """Each augmenter of `ts` in turn."""

    def __init__(self, ts):
        super().__init__()
        self.ts = ts

    def dumps(self):
        return [type(self).__name__.lower(), [t.dumps() for t in self.ts]]

    def __call__(self, src):
        for aug in self.ts:
            src = aug(src)
        return src


class RandomOrderAug(SequentialAug):
    """The augmenters of `ts` in a random order (``random.shuffle``)."""

    def __call__(self, src):
        random.shuffle(self.ts)
        return super().__call__(src)


class ResizeAug(Augmenter):
    """Resize the shorter edge to `size`."""

    def __init__(self, size, interp=2):
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src):
        return resize_short(src, self.size, self.interp)


class ForceResizeAug(Augmenter):
    """Resize to `size` (w, h), ignoring the aspect ratio."""

    def __init__(self, size, interp=2):
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src):
        sizes = (src.shape[0], src.shape[1], self.size[1], self.size[0])
        return imresize(src, *self.size, interp=_interp_method(self.interp, sizes))


class RandomCropAug(Augmenter):
    """A random crop of `size` (w, h)."""

    def __init__(self, size, interp=2):
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src):
        return random_crop(src, self.size, self.interp)[0]


class RandomSizedCropAug(Augmenter):
    """A crop of random area and aspect ratio, resized to `size` (see random_size_crop)."""

    def __init__(self, size, area, ratio, interp=2, **kwargs):
        area = kwargs.pop('min_area', area)
        if kwargs:
            raise TypeError(f'RandomSizedCropAug: unexpected arguments {sorted(kwargs)}')
        super().__init__(size=size, area=area, ratio=ratio, interp=interp)
        self.size, self.area, self.ratio, self.interp = size, area, ratio, interp

    def __call__(self, src):
        return random_size_crop(src, self.size, self.area, self.ratio, self.interp)[0]


class CenterCropAug(Augmenter):
    """The centred crop of `size` (w, h)."""

    def __init__(self, size, interp=2):
        super().__init__(size=size, interp=interp)
        self.size, self.interp = size, interp

    def __call__(self, src):
        return center_crop(src, self.size, self.interp)[0]


_LUMA = (0.299, 0.587, 0.114)


class BrightnessJitterAug(Augmenter):
    """Scale by ``1 + uniform(-brightness, brightness)``."""

    def __init__(self, brightness):
        super().__init__(brightness=brightness)
        self.brightness = brightness

    def __call__(self, src):
        src *= 1.0 + random.uniform(-self.brightness, self.brightness)
        return src


class ContrastJitterAug(Augmenter):
    """Blend with the mean grey level by ``1 + uniform(-contrast, contrast)``."""

    def __init__(self, contrast):
        super().__init__(contrast=contrast)
        self.contrast = contrast
        self.coef = nd.array([[_LUMA]])

    def __call__(self, src):
        alpha = 1.0 + random.uniform(-self.contrast, self.contrast)
        gray = src * self.coef
        gray = (3.0 * (1.0 - alpha) / gray.size) * nd.sum(gray)
        src *= alpha
        src += gray
        return src


class SaturationJitterAug(Augmenter):
    """Blend each pixel with its grey level by ``1 + uniform(-saturation, saturation)``."""

    def __init__(self, saturation):
        super().__init__(saturation=saturation)
        self.saturation = saturation
        self.coef = nd.array([[_LUMA]])

    def __call__(self, src):
        alpha = 1.0 + random.uniform(-self.saturation, self.saturation)
        gray = nd.sum(src * self.coef, axis=2, keepdims=True) * (1.0 - alpha)
        src *= alpha
        src += gray
        return src


_TO_YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
_FROM_YIQ = np.array([[1.0, 0.956, 0.621], [1.0, -0.272, -0.647], [1.0, -1.107, 1.705]])


class HueJitterAug(Augmenter):
    """Turn the hue by ``uniform(-hue, hue) * 180`` degrees in YIQ space."""

    def __init__(self, hue):
        super().__init__(hue=hue)
        self.hue = hue

    def __call__(self, src):
        alpha = random.uniform(-self.hue, self.hue)
        u, w = np.cos(alpha * np.pi), np.sin(alpha * np.pi)
        turn = np.array([[1.0, 0.0, 0.0], [0.0, u, -w], [0.0, w, u]])
        matrix = (_FROM_YIQ @ turn @ _TO_YIQ).T
        return nd.dot(src, nd.array(matrix))


class ColorJitterAug(RandomOrderAug):
    """Brightness, contrast and saturation jitter (those above 0) in a random order."""

    def __init__(self, brightness, contrast, saturation):
        steps = [cls(amount) for cls, amount in ((BrightnessJitterAug, brightness),
                                                 (ContrastJitterAug, contrast),
                                                 (SaturationJitterAug, saturation))
                 if amount > 0]
        super().__init__(steps)


class LightingAug(Augmenter):
    """AlexNet's PCA noise: add ``eigvec @ (alpha * eigval)``, alpha ~ N(0, alphastd)."""

    def __init__(self, alphastd, eigval, eigvec):
        super().__init__(alphastd=alphastd, eigval=eigval, eigvec=eigvec)
        self.alphastd = alphastd
        self.eigval, self.eigvec = np.asarray(eigval), np.asarray(eigvec)

    def __call__(self, src):
        alpha = np.random.normal(0, self.alphastd, size=(3,))
        src += nd.array(np.dot(self.eigvec * alpha, self.eigval))
        return src


class ColorNormalizeAug(Augmenter):
    """``(src - mean) / std``."""

    def __init__(self, mean, std):
        super().__init__(mean=mean, std=std)
        self.mean = mean if mean is None or isinstance(mean, nd.NDArray) else nd.array(mean)
        self.std = std if std is None or isinstance(std, nd.NDArray) else nd.array(std)

    def __call__(self, src):
        return color_normalize(src, self.mean, self.std)


class RandomGrayAug(Augmenter):
    """Turn the image grey with probability `p`."""

    def __init__(self, p):
        super().__init__(p=p)
        self.p = p
        self.mat = nd.array([[0.21, 0.21, 0.21], [0.72, 0.72, 0.72], [0.07, 0.07, 0.07]])

    def __call__(self, src):
        if random.random() < self.p:
            src = nd.dot(src, self.mat)
        return src


class HorizontalFlipAug(Augmenter):
    """Flip left-right with probability `p`."""

    def __init__(self, p):
        super().__init__(p=p)
        self.p = p

    def __call__(self, src):
        if random.random() < self.p:
            src = nd.flip(src, axis=1)
        return src


class CastAug(Augmenter):
    """Cast to `typ` (float32 by default)."""

    def __init__(self, typ='float32'):
        super().__init__(type=typ)
        self.typ = typ

    def __call__(self, src):
        return src.astype(self.typ)


_IMAGENET_MEAN = (123.68, 116.28, 103.53)
_IMAGENET_STD = (58.395, 57.12, 57.375)
_EIGVAL = np.array([55.46, 4.794, 1.148])
_EIGVEC = np.array([[-0.5675, 0.7192, 0.4009],
                    [-0.5808, -0.0045, -0.8140],
                    [-0.5836, -0.6948, 0.4203]])


def CreateAugmenter(data_shape, resize=0, rand_crop=False, rand_resize=False,  # noqa: N802
                    rand_mirror=False, mean=None, std=None, brightness=0, contrast=0,
                    saturation=0, hue=0, pca_noise=0, rand_gray=0, inter_method=2):
    """The standard list of augmenters for images of `data_shape` (C, H, W): resize, crop
    (random-sized, random or centre), mirror, cast to float32, colour jitter, hue, PCA
    lighting, grey, and normalisation (`mean`/`std` True: ImageNet's)."""
    augmenters = [ResizeAug(resize, inter_method)] if resize > 0 else []
    crop_size = (data_shape[2], data_shape[1])
    if rand_resize:
        if not rand_crop:
            raise ValueError('CreateAugmenter: rand_resize needs rand_crop=True')
        augmenters.append(RandomSizedCropAug(crop_size, 0.08, (3.0 / 4.0, 4.0 / 3.0),
                                             inter_method))
    elif rand_crop:
        augmenters.append(RandomCropAug(crop_size, inter_method))
    else:
        augmenters.append(CenterCropAug(crop_size, inter_method))
    if rand_mirror:
        augmenters.append(HorizontalFlipAug(0.5))
    augmenters.append(CastAug())
    if brightness or contrast or saturation:
        augmenters.append(ColorJitterAug(brightness, contrast, saturation))
    if hue:
        augmenters.append(HueJitterAug(hue))
    if pca_noise > 0:
        augmenters.append(LightingAug(pca_noise, _EIGVAL, _EIGVEC))
    if rand_gray > 0:
        augmenters.append(RandomGrayAug(rand_gray))
    mean = _channel_stat('mean', mean, _IMAGENET_MEAN)
    std = _channel_stat('std', std, _IMAGENET_STD)
    if mean is not None or std is not None:
        augmenters.append(ColorNormalizeAug(mean, std))
    return augmenters


def _channel_stat(name, value, imagenet):
    if value is True:
        return nd.array(imagenet)
    if value is None or value is False:
        return None
    if not isinstance(value, (np.ndarray, nd.NDArray)) or value.shape[0] not in (1, 3):
        raise ValueError(f'CreateAugmenter: {name} must be True, or an array of 1 or 3 values, '
                         f'got {value!r}')
    return value
