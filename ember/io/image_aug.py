"""The augmentation of ``ImageRecordIter``: MXNet's default image augmenter, on OpenCV.

One :class:`DefaultAugmenter` turns a decoded image (uint8, OpenCV's BGR order, (H, W, C))
into an image of the output's height and width, in MXNet's order of steps: resize the short
edge, an affine transform (rotation, shear, scale, aspect ratio), pad, crop (centre, random,
random size, or random area and ratio resized to the output), then HLS and colour jitter and
PCA lighting. Mirroring, mean, std and scale are applied when the image is written into the
batch (:func:`write_chw`). Each call draws from the NumPy Generator it is given.

>>> import numpy as np
>>> aug = DefaultAugmenter.from_params((3, 4, 4), dict(resize=6))
>>> aug(np.zeros((12, 9, 3), np.uint8), np.random.default_rng(0)).shape
(4, 4, 3)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from ember.backend import imaging
from ember.base import EmberError

__all__ = ['DefaultAugmenter', 'write_chw', 'AUGMENT_DEFAULTS']

# The augmentation parameters of MXNet's ImageRecordIter and their defaults.
AUGMENT_DEFAULTS = dict(
    resize=-1, rand_crop=False, random_resized_crop=False, max_rotate_angle=0,
    max_aspect_ratio=0.0, min_aspect_ratio=None, max_shear_ratio=0.0, max_crop_size=-1,
    min_crop_size=-1, max_random_scale=1.0, min_random_scale=1.0, max_random_area=1.0,
    min_random_area=1.0, max_img_size=1e10, min_img_size=0.0, brightness=0.0, contrast=0.0,
    saturation=0.0, pca_noise=0.0, random_h=0, random_s=0, random_l=0, rotate=-1,
    fill_value=255, inter_method=1, pad=0)

_GRAY = np.array([0.114, 0.587, 0.299], np.float32)      # luma weights in B, G, R order
_EIGVAL = np.array([55.46, 4.794, 1.148], np.float32)
_EIGVEC = np.array([[-0.5675, 0.7192, 0.4009],
                    [-0.5808, -0.0045, -0.8140],
                    [-0.5836, -0.6948, 0.4203]], np.float32)


class AugmentError(EmberError, ValueError):
    """An image that the augmentation cannot turn into the output's shape."""


def interpolation(code, old_hw, new_hw, rng):
    """OpenCV's interpolation for MXNet's `inter_method` (9: by the direction of the resize,
    10: a random one)."""
    if code == 9:
        if new_hw[0] > old_hw[0] and new_hw[1] > old_hw[1]:
            return 2
        if new_hw[0] < old_hw[0] and new_hw[1] < old_hw[1]:
            return 3
        return 1
    if code == 10:
        return int(rng.integers(0, 5))
    return code


@dataclass(frozen=True)
class DefaultAugmenter:
    """MXNet's default augmenter for an output of `height` x `width`; the other fields are
    ImageRecordIter's parameters of the same names."""

    height: int
    width: int
    resize: int
    rand_crop: bool
    random_resized_crop: bool
    max_rotate_angle: int
    max_aspect_ratio: float
    min_aspect_ratio: float | None
    max_shear_ratio: float
    max_crop_size: int
    min_crop_size: int
    max_random_scale: float
    min_random_scale: float
    max_random_area: float
    min_random_area: float
    max_img_size: float
    min_img_size: float
    brightness: float
    contrast: float
    saturation: float
    pca_noise: float
    random_h: int
    random_s: int
    random_l: int
    rotate: int
    fill_value: int
    inter_method: int
    pad: int

    @classmethod
    def from_params(cls, data_shape, params):
        values = dict(AUGMENT_DEFAULTS, **params)
        if values['inter_method'] not in (0, 1, 2, 3, 4, 9, 10):
            raise ValueError(f"ImageRecordIter: inter_method={values['inter_method']}: "
                             f"expected 0-4 (nearest, bilinear, bicubic, area, Lanczos), 9 "
                             f"(auto) or 10 (random)")
        names = {f.name for f in fields(cls)} - {'height', 'width'}
        return cls(int(data_shape[1]), int(data_shape[2]),
                   **{k: v for k, v in values.items() if k in names})

    def __call__(self, image, rng):
        image = self._resized_short(image, rng)
        if self._affine_needed():
            image = self._affine(image, rng)
        if self.pad > 0:
            image = imaging.copy_make_border(image, self.pad, self.pad, self.pad, self.pad,
                                             0, float(self.fill_value))
        image = self._cropped(image, rng)
        if self.random_h or self.random_s or self.random_l:
            image = self._hls_jittered(image, rng)
        if self.brightness > 0 or self.contrast > 0 or self.saturation > 0 or \
                self.pca_noise > 0:
            image = self._color_jittered(image, rng)
        return image

    # ------------------------------------------------------------------------------------------
    # Geometry

    def _resize(self, image, width, height, rng):
        code = interpolation(self.inter_method, image.shape[:2], (height, width), rng)
        return imaging.resize(image, width, height, code)

    def _resized_short(self, image, rng):
        if self.resize == -1:
            return image
        rows, cols = image.shape[:2]
        if rows > cols:
            height, width = self.resize * rows // cols, self.resize
        else:
            height, width = self.resize, self.resize * cols // rows
        return self._resize(image, width, height, rng)

    def _affine_needed(self):
        return not self.random_resized_crop and (
            self.max_rotate_angle > 0 or self.max_shear_ratio > 0 or self.rotate > 0
            or self.max_random_scale != 1 or self.min_random_scale != 1
            or self.max_aspect_ratio != 0 or self.max_img_size != 1e10
            or self.min_img_size != 0)

    def _affine(self, image, rng):
        """Rotation, shear, scale and aspect ratio in one warp, as MXNet's augmenter does."""
        shear = rng.uniform(-self.max_shear_ratio, self.max_shear_ratio)
        angle = rng.integers(-self.max_rotate_angle, self.max_rotate_angle + 1)
        if self.rotate > 0:
            angle = self.rotate
        cos, sin = math.cos(angle / 180.0 * math.pi), math.sin(angle / 180.0 * math.pi)
        scale = rng.uniform(self.min_random_scale, self.max_random_scale)
        ratio = rng.uniform(*self._aspect_range()) if self.max_aspect_ratio != 0 else 1.0
        height_scale = 2 * scale / (1 + ratio)
        width_scale = ratio * height_scale
        rows, cols = image.shape[:2]
        new_width = int(max(self.min_img_size, min(self.max_img_size, scale * cols)))
        new_height = int(max(self.min_img_size, min(self.max_img_size, scale * rows)))
        matrix = np.array([[height_scale * cos - shear * sin * width_scale,
                            height_scale * sin + shear * cos * width_scale, 0.0],
                           [-sin * width_scale, cos * width_scale, 0.0]], np.float32)
        matrix[0, 2] = (new_width - (matrix[0, 0] * cols + matrix[0, 1] * rows)) / 2
        matrix[1, 2] = (new_height - (matrix[1, 0] * cols + matrix[1, 1] * rows)) / 2
        cv2 = imaging.require_opencv('ImageRecordIter (rotation, shear, scale, aspect ratio)')
        code = interpolation(self.inter_method, (rows, cols), (new_height, new_width), rng)
        fill = (float(self.fill_value),) * 4
        warped = cv2.warpAffine(image, matrix, (new_width, new_height), flags=code,
                                borderMode=cv2.BORDER_CONSTANT, borderValue=fill)
        return warped[:, :, None] if warped.ndim == 2 else warped

    def _aspect_range(self):
        if self.min_aspect_ratio is None:
            return 1 - self.max_aspect_ratio, 1 + self.max_aspect_ratio
        return self.min_aspect_ratio, self.max_aspect_ratio

    def _cropped(self, image, rng):
        if self.random_resized_crop:
            return self._random_area_crop(image, rng)
        if self.max_crop_size != -1 or self.min_crop_size != -1:
            return self._random_size_crop(image, rng)
        rows, cols = image.shape[:2]
        if rows < self.height or cols < self.width:
            raise AugmentError(f'the image of {cols}x{rows} (width x height) is smaller than '
                               f'the output {self.width}x{self.height}; give resize or pad')
        y, x = rows - self.height, cols - self.width
        if self.rand_crop:
            y, x = int(rng.integers(0, y + 1)), int(rng.integers(0, x + 1))
        else:
            y, x = y // 2, x // 2
        return image[y:y + self.height, x:x + self.width]

    def _random_size_crop(self, image, rng):
        rows, cols = image.shape[:2]
        low = self.min_crop_size if self.min_crop_size != -1 else self.max_crop_size
        high = self.max_crop_size if self.max_crop_size != -1 else self.min_crop_size
        size = int(rng.integers(low, high + 1))
        if size > rows or size > cols:
            raise AugmentError(f'the crop of {size} pixels does not fit the {cols}x{rows} '
                               f'image; lower max_crop_size or give resize')
        y, x = (rows - size) // 2, (cols - size) // 2
        if self.rand_crop:
            y, x = int(rng.integers(0, rows - size + 1)), int(rng.integers(0, cols - size + 1))
        return self._resize(image[y:y + size, x:x + size], self.width, self.height, rng)

    def _random_area_crop(self, image, rng):
        """A random area and aspect ratio (10 tries), resized to the output; else the centred
        square."""
        rows, cols = image.shape[:2]
        if self.max_random_area != 1 or self.min_random_area != 1 or \
                self.max_aspect_ratio != 0:
            for _ in range(10):
                area = rng.uniform(self.min_random_area, self.max_random_area) * rows * cols
                ratio = rng.uniform(*self._aspect_range()) if self.max_aspect_ratio else 1.0
                height = int(round(math.sqrt(area / ratio)))
                width = int(round(math.sqrt(area * ratio)))
                if 0 < height <= rows and 0 < width <= cols:
                    y = int(rng.integers(0, rows - height + 1))
                    x = int(rng.integers(0, cols - width + 1))
                    window = image[y:y + height, x:x + width]
                    return self._resize(window, self.width, self.height, rng)
            side = min(rows, cols)
            y, x = (rows - side) // 2, (cols - side) // 2
            image = image[y:y + side, x:x + side]
        return self._resize(image, self.width, self.height, rng)

    # ------------------------------------------------------------------------------------------
    # Colour

    def _hls_jittered(self, image, rng):
        cv2 = imaging.require_opencv('ImageRecordIter (random_h, random_s, random_l)')
        shifts = np.array([rng.integers(-self.random_h, self.random_h + 1),
                           rng.integers(-self.random_l, self.random_l + 1),
                           rng.integers(-self.random_s, self.random_s + 1)], np.int32)
        hls = cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_BGR2HLS).astype(np.int32)
        hls = np.clip(hls + shifts, 0, np.array([180, 255, 255])).astype(np.uint8)
        return cv2.cvtColor(hls, cv2.COLOR_HLS2BGR)

    def _color_jittered(self, image, rng):
        """Brightness, contrast and saturation in a random order, then PCA lighting, on float
        values (mx.image's formulas), stored back as uint8."""
        values = image.astype(np.float32)
        for step in rng.permutation(3):
            amount = (self.brightness, self.contrast, self.saturation)[step]
            if amount <= 0:
                continue
            alpha = np.float32(1.0 + rng.uniform(-amount, amount))
            gray = values[..., :3] @ _GRAY
            if step == 0:
                values *= alpha
            elif step == 1:
                values = values * alpha + (1 - alpha) * gray.mean()
            else:
                values[..., :3] = values[..., :3] * alpha + (1 - alpha) * gray[..., None]
        if self.pca_noise > 0:
            alpha = rng.normal(0, self.pca_noise, 3).astype(np.float32)
            values[..., :3] += ((_EIGVEC * (alpha * _EIGVAL)).sum(axis=1))[::-1]
        return np.clip(values, 0, 255).astype(np.uint8)


def write_chw(image, out, mean, factor, mirror):
    """Write `image` (H, W, C) in OpenCV's BGR order into `out` (C, H, W) in RGB order as
    ``(pixel - mean[c]) * factor[c]``, flipped left-right when `mirror`; `mean` and `factor`
    are per output channel, or None for a plain copy (uint8 output). An int8 `out` gets
    ``pixel - mean[c]`` saturated to [-128, 127] (no factor), as MXNet's int8 iterator."""
    for channel, plane in enumerate(_rgb_planes(image, mirror)):
        if mean is None:
            np.copyto(out[channel], plane, casting='unsafe')
        elif out.dtype == np.int8:      # pixel - mean, saturated: MXNet's int8 output
            np.copyto(out[channel], np.clip(np.rint(plane - mean[channel]), -128, 127),
                      casting='unsafe')
        else:
            np.subtract(plane, mean[channel], out=out[channel], dtype=out.dtype)
            np.multiply(out[channel], factor[channel], out=out[channel])


def _rgb_planes(image, mirror):
    """The channels of a BGR image as contiguous planes in RGB order: the arithmetic then runs
    on contiguous rows (about 3x faster than through the strided channel-last view)."""
    cv2 = imaging.opencv()
    if cv2 is None or image.shape[2] == 1:
        source = image[:, ::-1] if mirror else image
        return [source[:, :, c] for c in reversed(range(image.shape[2]))]
    source = cv2.flip(image, 1) if mirror else np.ascontiguousarray(image)
    return cv2.split(source)[::-1]
