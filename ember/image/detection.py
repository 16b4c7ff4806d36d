"""Object detection data (MXNet 1.x's ``mx.image.detection``, also ``mx.image.det``): augmenters
that move the boxes with the image, and ``ImageDetIter``.

A label is an array (objects, 5+): class id, then xmin, ymin, xmax, ymax relative to the
image's width and height (0 to 1), then anything else. A raw label in a record or list file is
flat: the header width, the object width, the rest of the header, then the objects.

The random augmenters draw from Python's ``random`` module in MXNet's order, so
``random.seed`` repeats MXNet's crops, pads and flips.

>>> import numpy as np, ember as mx
>>> image = mx.nd.zeros((20, 40, 3), dtype='uint8')
>>> label = np.array([[0, 0.1, 0.2, 0.5, 0.8]])
>>> flipped, moved = DetHorizontalFlipAug(1.0)(image, label.copy())
>>> moved.tolist()
[[0.0, 0.5, 0.2, 0.9, 0.8]]
>>> [type(aug).__name__ for aug in CreateDetAugmenter((3, 32, 32), rand_crop=0.5)]
['DetRandomSelectAug', 'DetBorrowAug', 'DetBorrowAug']
"""
from __future__ import annotations

import json
import logging
import math
import random
import warnings

import numpy as np

from ember import io
from ember.io import recordio  # noqa: F401  (MXNet's module has it)
from ember import ndarray as nd
from ember.base import numeric_types
from ember.image.image import (Augmenter, CastAug, ColorJitterAug, ColorNormalizeAug,
                               ForceResizeAug, HueJitterAug, LightingAug, RandomGrayAug,
                               RandomOrderAug, ResizeAug, fixed_crop, _EIGVAL, _EIGVEC,
                               _IMAGENET_MEAN, _IMAGENET_STD)
from ember.image.image_iter import ImageIter
from ember.ndarray.register import make_function
from ember.op import registry
from ember.util import is_np_array

__all__ = ['DetAugmenter', 'DetBorrowAug', 'DetRandomSelectAug', 'DetHorizontalFlipAug',
           'DetRandomCropAug', 'DetRandomPadAug', 'CreateMultiRandCropAugmenter',
           'CreateDetAugmenter', 'ImageDetIter',
           # what MXNet's star import of this module brings besides
           'Augmenter', 'CastAug', 'ColorJitterAug', 'ColorNormalizeAug', 'ForceResizeAug',
           'HueJitterAug', 'ImageIter', 'LightingAug', 'RandomGrayAug', 'RandomOrderAug',
           'ResizeAug', 'copyMakeBorder', 'fixed_crop', 'is_np_array', 'numeric_types']

# MXNet's detection module pads with the OpenCV operator itself (keyword arguments)
copyMakeBorder = make_function(registry.get('_cvcopyMakeBorder'), 'copyMakeBorder')
copyMakeBorder.__module__ = __name__
_BORDER_CONSTANT_FILLED = 16     # the border type MXNet's pad augmenter asks for


class DetAugmenter:
    """A detection transform ``aug(src, label) -> (image, label)``; ``dumps()`` describes it."""

    def __init__(self, **kwargs):
        self._kwargs = {k: _listed(v) for k, v in kwargs.items()}

    def dumps(self):
        """``[name, parameters]`` as JSON text."""
        return json.dumps([type(self).__name__.lower(), self._kwargs])

    def __call__(self, src, label):
        raise NotImplementedError(f'{type(self).__name__} must define __call__')


def _listed(value):
    if isinstance(value, nd.NDArray):
        value = value.asnumpy()
    return value.tolist() if isinstance(value, np.ndarray) else value


class DetBorrowAug(DetAugmenter):
    """An image augmenter (``mx.image.Augmenter``) that leaves the boxes alone."""

    def __init__(self, augmenter):
        if not isinstance(augmenter, Augmenter):
            raise TypeError(f'DetBorrowAug: expected an mx.image.Augmenter, got '
                            f'{type(augmenter).__name__}')
        super().__init__(augmenter=augmenter.dumps())
        self.augmenter = augmenter

    def dumps(self):
        return [type(self).__name__.lower(), self.augmenter.dumps()]

    def __call__(self, src, label):
        return self.augmenter(src), label


class DetRandomSelectAug(DetAugmenter):
    """One augmenter of `aug_list` chosen at random, or none with probability `skip_prob`."""

    def __init__(self, aug_list, skip_prob=0):
        super().__init__(skip_prob=skip_prob)
        aug_list = list(aug_list) if isinstance(aug_list, (list, tuple)) else [aug_list]
        if not all(isinstance(aug, DetAugmenter) for aug in aug_list):
            raise ValueError('DetRandomSelectAug: aug_list must hold DetAugmenters only')
        self.aug_list = aug_list
        self.skip_prob = skip_prob if aug_list else 1

    def dumps(self):
        return [type(self).__name__.lower(), [aug.dumps() for aug in self.aug_list]]

    def __call__(self, src, label):
        if random.random() < self.skip_prob:
            return src, label
        random.shuffle(self.aug_list)
        return self.aug_list[0](src, label)


class DetHorizontalFlipAug(DetAugmenter):
    """Flip the image and its boxes left-right with probability `p` (the label in place)."""

    def __init__(self, p):
        super().__init__(p=p)
        self.p = p

    def __call__(self, src, label):
        if random.random() < self.p:
            src = nd.flip(src, axis=1)
            left = 1.0 - label[:, 1]
            label[:, 1] = 1.0 - label[:, 3]
            label[:, 3] = left
        return src, label


def _as_range(value, what, who):
    if isinstance(value, (tuple, list)):
        return tuple(value)
    if not isinstance(value, numeric_types):
        raise TypeError(f'{who}: {what} must be a number or a (low, high) pair, got {value!r}')
    logging.info('Using fixed %s: %s in %s', what, value, who)
    return (value, value)


def _areas(boxes):
    """Areas of (xmin, ymin, xmax, ymax) rows (0 for empty boxes)."""
    return np.maximum(0, boxes[:, 2] - boxes[:, 0]) * np.maximum(0, boxes[:, 3] - boxes[:, 1])


def _clipped(boxes, xmin, ymin, xmax, ymax):
    """The boxes cut to a window; boxes outside it become all zeros."""
    out = boxes.copy()
    out[:, 0] = np.maximum(boxes[:, 0], xmin)
    out[:, 1] = np.maximum(boxes[:, 1], ymin)
    out[:, 2] = np.minimum(boxes[:, 2], xmax)
    out[:, 3] = np.minimum(boxes[:, 3], ymax)
    out[(out[:, 0] >= out[:, 2]) | (out[:, 1] >= out[:, 3])] = 0
    return out


def _window_side(min_area, max_area, ratio):
    """The (rounded) height range of a window of aspect `ratio` and area in [min, max]."""
    return int(round(math.sqrt(min_area / ratio))), int(round(math.sqrt(max_area / ratio)))


class DetRandomCropAug(DetAugmenter):
    """Crop a random window (aspect ratio and area fraction within their ranges) that covers
    at least `min_object_covered` of every box it touches; boxes keeping less than
    `min_eject_coverage` of their area are dropped. After `max_attempts` failed tries the
    image is left whole."""

    def __init__(self, min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
                 area_range=(0.05, 1.0), min_eject_coverage=0.3, max_attempts=50):
        aspect_ratio_range = _as_range(aspect_ratio_range, 'aspect ratio', 'DetRandomCropAug')
        area_range = _as_range(area_range, 'area range', 'DetRandomCropAug')
        super().__init__(min_object_covered=min_object_covered,
                         aspect_ratio_range=aspect_ratio_range, area_range=area_range,
                         min_eject_coverage=min_eject_coverage, max_attempts=max_attempts)
        self.min_object_covered, self.min_eject_coverage = min_object_covered, min_eject_coverage
        self.max_attempts = max_attempts
        self.aspect_ratio_range, self.area_range = aspect_ratio_range, area_range
        self.enabled = False
        if area_range[1] <= 0 or area_range[0] > area_range[1]:
            warnings.warn(f'DetRandomCropAug is off: invalid area_range {area_range}')
        elif aspect_ratio_range[0] > aspect_ratio_range[1] or aspect_ratio_range[0] <= 0:
            warnings.warn(f'DetRandomCropAug is off: invalid aspect_ratio_range '
                          f'{aspect_ratio_range}')
        else:
            self.enabled = True

    def __call__(self, src, label):
        crop = self._random_crop_proposal(label, src.shape[0], src.shape[1])
        if crop:
            x, y, w, h, label = crop
            src = fixed_crop(src, x, y, w, h, None)
        return src, label

    def _satisfied(self, label, window, width, height):
        xmin, ymin, xmax, ymax = window
        if (xmax - xmin) * (ymax - ymin) < 2:
            return False
        boxes = label[:, 1:]
        areas = _areas(boxes)
        valid = np.flatnonzero(areas * width * height > 2)
        if valid.size < 1:
            return False
        inside = _clipped(boxes[valid], xmin / width, ymin / height, xmax / width,
                          ymax / height)
        coverage = _areas(inside) / areas[valid]
        coverage = coverage[coverage > 0]
        return coverage.size > 0 and coverage.min() > self.min_object_covered

    def _update_labels(self, label, crop_box, height, width):
        """The boxes in the crop's coordinates, those keeping enough of their area."""
        x, y, w, h = (crop_box[0] / width, crop_box[1] / height, crop_box[2] / width,
                      crop_box[3] / height)
        out = label.copy()
        out[:, (1, 3)] = (out[:, (1, 3)] - x) / w
        out[:, (2, 4)] = (out[:, (2, 4)] - y) / h
        out[:, 1:5] = np.clip(out[:, 1:5], 0, 1)
        coverage = _areas(out[:, 1:]) * w * h / _areas(label[:, 1:])
        keep = (out[:, 3] > out[:, 1]) & (out[:, 4] > out[:, 2]) & \
            (coverage > self.min_eject_coverage)
        return out[keep] if keep.any() else None

    def _random_crop_proposal(self, label, height, width):
        """(x, y, w, h, new label) of a window meeting the constraints, or ()."""
        if not self.enabled or height <= 0 or width <= 0:
            return ()
        min_area = self.area_range[0] * height * width
        max_area = self.area_range[1] * height * width
        for _ in range(self.max_attempts):
            ratio = random.uniform(*self.aspect_ratio_range)
            if ratio <= 0:
                continue
            h, max_h = _window_side(min_area, max_area, ratio)
            if round(max_h * ratio) > width:
                max_h = int((width + 0.4999999) / ratio)     # round(max_h * ratio) <= width
            max_h = min(max_h, height)
            h = min(h, max_h)
            if h < max_h:
                h = random.randint(h, max_h)
            w = int(round(h * ratio))
            area = w * h
            if area < min_area:             # rounding left the area just outside the range
                h += 1
                w, area = int(round(h * ratio)), int(round(h * ratio)) * h
            if area > max_area:
                h -= 1
                w, area = int(round(h * ratio)), int(round(h * ratio)) * h
            if not (min_area <= area <= max_area and 0 <= w <= width and 0 <= h <= height):
                continue
            y = random.randint(0, max(0, height - h))
            x = random.randint(0, max(0, width - w))
            if self._satisfied(label, (x, y, x + w, y + h), width, height):
                new_label = self._update_labels(label, (x, y, w, h), height, width)
                if new_label is not None:
                    return x, y, w, h, new_label
        return ()


class DetRandomPadAug(DetAugmenter):
    """Place the image at a random spot of a larger canvas (aspect ratio and area, relative
    to the image, within their ranges) filled with `pad_val`; the boxes follow."""

    def __init__(self, aspect_ratio_range=(0.75, 1.33), area_range=(1.0, 3.0), max_attempts=50,
                 pad_val=(128, 128, 128)):
        if not isinstance(pad_val, (list, tuple)) and not isinstance(pad_val, numeric_types):
            raise TypeError(f'DetRandomPadAug: pad_val must be a number or one per channel, '
                            f'got {pad_val!r}')
        aspect_ratio_range = _as_range(aspect_ratio_range, 'aspect ratio', 'DetRandomPadAug')
        area_range = _as_range(area_range, 'area range', 'DetRandomPadAug')
        super().__init__(aspect_ratio_range=aspect_ratio_range, area_range=area_range,
                         max_attempts=max_attempts, pad_val=pad_val)
        self.pad_val, self.max_attempts = pad_val, max_attempts
        self.aspect_ratio_range, self.area_range = aspect_ratio_range, area_range
        self.enabled = False
        if area_range[1] <= 1.0 or area_range[0] > area_range[1]:
            warnings.warn(f'DetRandomPadAug is off: invalid area_range {area_range}')
        elif aspect_ratio_range[0] <= 0 or aspect_ratio_range[0] > aspect_ratio_range[1]:
            warnings.warn(f'DetRandomPadAug is off: invalid aspect_ratio_range '
                          f'{aspect_ratio_range}')
        else:
            self.enabled = True

    def __call__(self, src, label):
        height, width, _ = src.shape
        pad = self._random_pad_proposal(label, height, width)
        if pad:
            x, y, w, h, label = pad
            values = self.pad_val if isinstance(self.pad_val, (list, tuple)) else (self.pad_val,)
            src = copyMakeBorder(src, top=y, bot=h - y - height, left=x, right=w - x - width,
                                 type=_BORDER_CONSTANT_FILLED, values=tuple(values))
        return src, label

    def _update_labels(self, label, pad_box, height, width):
        out = label.copy()
        out[:, (1, 3)] = (out[:, (1, 3)] * width + pad_box[0]) / pad_box[2]
        out[:, (2, 4)] = (out[:, (2, 4)] * height + pad_box[1]) / pad_box[3]
        return out

    def _random_pad_proposal(self, label, height, width):
        """(x, y, w, h, new label) of the canvas, or ()."""
        if not self.enabled or height <= 0 or width <= 0:
            return ()
        min_area = self.area_range[0] * height * width
        max_area = self.area_range[1] * height * width
        for _ in range(self.max_attempts):
            ratio = random.uniform(*self.aspect_ratio_range)
            if ratio <= 0:
                continue
            h, max_h = _window_side(min_area, max_area, ratio)
            if round(h * ratio) < width:
                h = int((width + 0.499999) / ratio)
            h = min(max(h, height), max_h)
            if h < max_h:
                h = random.randint(h, max_h)
            w = int(round(h * ratio))
            if h - height < 2 or w - width < 2:
                continue            # a border of a pixel or two does not help
            y = random.randint(0, max(0, h - height))
            x = random.randint(0, max(0, w - width))
            return x, y, w, h, self._update_labels(label, (x, y, w, h), height, width)
        return ()


def _aligned(params):
    """Parameters given as one value or lists of one length, as lists of that length."""
    lists = [p if isinstance(p, list) else [p] for p in params]
    count = max(len(p) for p in lists)
    for p in lists:
        if len(p) not in (1, count):
            raise ValueError(f'CreateMultiRandCropAugmenter: parameter lists must have one '
                             f'value or {count}, got {p!r}')
    return [p * count if len(p) == 1 else p for p in lists]


def CreateMultiRandCropAugmenter(min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),  # noqa: N802
                                 area_range=(0.05, 1.0), min_eject_coverage=0.3,
                                 max_attempts=50, skip_prob=0):
    """A DetRandomSelectAug over DetRandomCropAugs, one per value of the parameters given as
    lists (the others are shared)."""
    crops = [DetRandomCropAug(min_object_covered=moc, aspect_ratio_range=arr, area_range=ar,
                              min_eject_coverage=mec, max_attempts=ma)
             for moc, arr, ar, mec, ma in zip(*_aligned([
                 min_object_covered, aspect_ratio_range, area_range, min_eject_coverage,
                 max_attempts]))]
    return DetRandomSelectAug(crops, skip_prob=skip_prob)


def CreateDetAugmenter(data_shape, resize=0, rand_crop=0, rand_pad=0, rand_gray=0,  # noqa: N802
                       rand_mirror=False, mean=None, std=None, brightness=0, contrast=0,
                       saturation=0, pca_noise=0, hue=0, inter_method=2,
                       min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
                       area_range=(0.05, 3.0), min_eject_coverage=0.3, max_attempts=50,
                       pad_val=(127, 127, 127)):
    """The standard detection augmenters for images of `data_shape` (C, H, W): resize,
    random crop (probability `rand_crop`), mirror, random pad (`rand_pad`), force-resize, cast
    to float32, colour jitter, hue, PCA lighting, grey and normalisation (`mean`/`std` True:
    ImageNet's)."""
    augmenters = [DetBorrowAug(ResizeAug(resize, inter_method))] if resize > 0 else []
    if rand_crop > 0:
        augmenters.append(CreateMultiRandCropAugmenter(
            min_object_covered, aspect_ratio_range, area_range, min_eject_coverage,
            max_attempts, skip_prob=1 - rand_crop))
    if rand_mirror > 0:
        augmenters.append(DetHorizontalFlipAug(0.5))
    if rand_pad > 0:
        pad = DetRandomPadAug(aspect_ratio_range, (1.0, area_range[1]), max_attempts, pad_val)
        augmenters.append(DetRandomSelectAug([pad], 1 - rand_pad))
    augmenters.append(DetBorrowAug(ForceResizeAug((data_shape[2], data_shape[1]),
                                                  inter_method)))
    augmenters.append(DetBorrowAug(CastAug()))
    if brightness or contrast or saturation:
        augmenters.append(DetBorrowAug(ColorJitterAug(brightness, contrast, saturation)))
    if hue:
        augmenters.append(DetBorrowAug(HueJitterAug(hue)))
    if pca_noise > 0:
        augmenters.append(DetBorrowAug(LightingAug(pca_noise, _EIGVAL, _EIGVEC)))
    if rand_gray > 0:
        augmenters.append(DetBorrowAug(RandomGrayAug(rand_gray)))
    mean = _channel_stat('mean', mean, _IMAGENET_MEAN)
    std = _channel_stat('std', std, _IMAGENET_STD)
    if mean is not None or std is not None:
        augmenters.append(DetBorrowAug(ColorNormalizeAug(mean, std)))
    return augmenters


def _channel_stat(name, value, imagenet):
    if value is True:
        return np.array(imagenet)
    if value is None:
        return None
    if not isinstance(value, np.ndarray) or value.shape[0] not in (1, 3):
        raise ValueError(f'CreateDetAugmenter: {name} must be True, None or a NumPy array of '
                         f'1 or 3 values, got {value!r}')
    return value


class ImageDetIter(ImageIter):
    """Batches of augmented images (N, C, H, W) and their boxes (N, objects, width): the
    boxes of each image padded with rows of -1 to the largest count in the data set.

    The data come as in :class:`mx.image.ImageIter` (record file, list file or `imglist`);
    `aug_list` defaults to ``CreateDetAugmenter(data_shape, **kwargs)``.
    """

    def __init__(self, batch_size, data_shape, path_imgrec=None, path_imglist=None,
                 path_root=None, path_imgidx=None, shuffle=False, part_index=0, num_parts=1,
                 aug_list=None, imglist=None, data_name='data', label_name='label',
                 last_batch_handle='pad', **kwargs):
        super().__init__(batch_size=batch_size, data_shape=data_shape, path_imgrec=path_imgrec,
                         path_imglist=path_imglist, path_root=path_root,
                         path_imgidx=path_imgidx, shuffle=shuffle, part_index=part_index,
                         num_parts=num_parts, aug_list=[], imglist=imglist,
                         data_name=data_name, label_name=label_name,
                         last_batch_handle=last_batch_handle)
        self.auglist = CreateDetAugmenter(data_shape, **kwargs) if aug_list is None else aug_list
        self.label_shape = self._estimate_label_shape()
        self.provide_label = [io.DataDesc(label_name, (self.batch_size,) + self.label_shape)]

    def _estimate_label_shape(self):
        """(most objects of an image, object width) over the whole data set."""
        most, width = 0, None
        self.reset()
        try:
            while True:
                label = self._parse_label(self.next_sample()[0])
                most, width = max(most, label.shape[0]), label.shape[1]
        except StopIteration:
            pass
        self.reset()
        if width is None:
            raise RuntimeError('ImageDetIter: the data set holds no image with a valid label')
        return (most, width)

    @staticmethod
    def _parse_label(label):
        """The (objects, width) boxes of a raw label, the empty ones left out."""
        raw = (label.asnumpy() if isinstance(label, nd.NDArray) else np.asarray(label)).ravel()
        if raw.size < 7:
            raise RuntimeError(f'ImageDetIter: a raw label needs at least 7 values (header '
                               f'width, object width, one object), got {raw.size}')
        header, width = int(raw[0]), int(raw[1])
        if (raw.size - header) % width:
            raise RuntimeError(f'ImageDetIter: a label of {raw.size} values does not hold '
                               f'objects of width {width} after a header of {header}')
        boxes = raw[header:].reshape(-1, width)
        boxes = boxes[(boxes[:, 3] > boxes[:, 1]) & (boxes[:, 4] > boxes[:, 2])]
        if not boxes.size:
            raise RuntimeError('ImageDetIter: an image has no valid box')
        return boxes

    @staticmethod
    def _check_valid_label(label):
        if label.ndim != 2 or label.shape[1] < 5:
            raise RuntimeError(f'ImageDetIter: labels must be (objects, 5+), got shape '
                               f'{label.shape}')
        valid = (label[:, 0] >= 0) & (label[:, 3] > label[:, 1]) & (label[:, 4] > label[:, 2])
        if not valid.any():
            raise RuntimeError('ImageDetIter: the augmented image has no valid box')

    def reshape(self, data_shape=None, label_shape=None):
        """Change the data shape (C, H, W) or the label shape (objects, width)."""
        if data_shape is not None:
            self.check_data_shape(data_shape)
            self.provide_data = [io.DataDesc(self.provide_data[0][0],
                                             (self.batch_size,) + tuple(data_shape))]
            self.data_shape = tuple(data_shape)
        if label_shape is not None:
            self.check_label_shape(label_shape)
            self.provide_label = [io.DataDesc(self.provide_label[0][0],
                                              (self.batch_size,) + tuple(label_shape))]
            self.label_shape = tuple(label_shape)

    def check_label_shape(self, label_shape):
        """A new label shape may only hold more objects, of the same width."""
        if len(label_shape) != 2:
            raise ValueError(f'ImageDetIter: label_shape must be (objects, width), got '
                             f'{label_shape}')
        if label_shape[0] < self.label_shape[0]:
            raise ValueError(f'ImageDetIter: label_shape may not hold fewer objects than '
                             f'{self.label_shape[0]}, got {label_shape[0]}')
        if label_shape[1] != self.provide_label[0][1][2]:
            raise ValueError(f'ImageDetIter: objects have width {self.provide_label[0][1][2]}, '
                             f'not {label_shape[1]}')

    def sync_label_shape(self, it, verbose=False):
        """Give this iterator and `it` the larger object count of the two; returns `it`."""
        if not isinstance(it, ImageDetIter):
            raise TypeError(f'sync_label_shape: expected an ImageDetIter, got '
                            f'{type(it).__name__}')
        if self.label_shape[1] != it.label_shape[1]:
            raise ValueError(f'sync_label_shape: object widths differ: {self.label_shape[1]} '
                             f'and {it.label_shape[1]}')
        most = max(self.label_shape[0], it.label_shape[0])
        for iterator in (self, it):
            if iterator.label_shape[0] < most:
                iterator.reshape(None, (most, iterator.label_shape[1]))
        if verbose:
            logging.info('Resized label_shape to (%d, %d).', most, self.label_shape[1])
        return it

    def augmentation_transform(self, data, label):  # noqa: D102 (the boxes follow the image)
        for aug in self.auglist:
            data, label = aug(data, label)
        return data, label

    def _batchify(self, batch_data, batch_label, start=0):
        array = _array_function()
        filled = start
        try:
            while filled < self.batch_size:
                raw_label, raw = self.next_sample()
                data = self.imdecode(raw)
                try:
                    self.check_valid_image([data])
                    data, label = self.augmentation_transform(data,
                                                              self._parse_label(raw_label))
                    self._check_valid_label(label)
                except RuntimeError as exc:
                    logging.debug('ImageDetIter: skipping an image: %s', exc)
                    continue
                batch_data[filled] = self.postprocess_data(data)
                batch_label[filled][:label.shape[0]] = array(label)
                if label.shape[0] < batch_label[filled].shape[0]:
                    batch_label[filled][label.shape[0]:] = -1
                filled += 1
        except StopIteration:
            if not filled:
                raise
        return filled

    def _new_buffers(self):
        """Data of zeros and labels of -1 (no object), as mx.np arrays under npx.set_np()."""
        if is_np_array():
            from ember import numpy as mx_np
            return (mx_np.zeros((self.batch_size,) + self.data_shape),
                    mx_np.full(self.provide_label[0][1], -1.0))
        return (nd.zeros((self.batch_size,) + self.data_shape),
                nd.full(self.provide_label[0][1], -1.0))

    def draw_next(self, color=None, thickness=2, mean=None, std=None, clip=True,
                  waitKey=None, window_name='draw_next', id2labels=None):  # noqa: N803
        """Yield the next images (H, W, 3 uint8, BGR for OpenCV) with their boxes drawn;
        shown in an OpenCV window too when `waitKey` is given."""
        from ember.backend import imaging
        cv2 = imaging.opencv()
        if cv2 is None:
            warnings.warn('draw_next needs OpenCV, which is not installed')
            return
        while True:
            try:
                raw_label, raw = self.next_sample()
            except StopIteration:
                return
            data = self.imdecode(raw)
            try:
                self.check_valid_image([data])
                data, label = self.augmentation_transform(data, self._parse_label(raw_label))
            except RuntimeError as exc:
                logging.debug('draw_next: skipping an image: %s', exc)
                continue
            image = _viewable(data.asnumpy(), mean, std, clip)
            _draw_boxes(cv2, image, label, color, thickness, id2labels)
            if waitKey is not None:
                cv2.imshow(window_name, image)
                cv2.waitKey(waitKey)
            yield image


def _array_function():
    if is_np_array():
        from ember import numpy as mx_np
        return mx_np.array
    return nd.array


def _viewable(image, mean, std, clip):
    """A float (H, W, 3) RGB image back to uint8 BGR, undoing the normalisation."""
    image = image.astype(np.float64)
    if std is not None:
        image *= np.array(_IMAGENET_STD) if std is True else std
    if mean is not None:
        image += np.array(_IMAGENET_MEAN) if mean is True else mean
    image = image[:, :, ::-1]
    if clip:
        image = np.clip(image, 0, 255)
    return np.ascontiguousarray(image.astype(np.uint8))


def _draw_boxes(cv2, image, label, color, thickness, id2labels):
    height, width, _ = image.shape
    for box in label:
        if box[1] < 0:
            continue
        corners = (int(box[1] * width), int(box[2] * height))
        far = (int(box[3] * width), int(box[4] * height))
        bgr = tuple(color[::-1]) if color else tuple(np.random.rand(3) * 255)
        cv2.rectangle(image, corners, far, bgr, thickness)
        if id2labels is not None and int(box[0]) in id2labels:
            cv2.putText(image, str(id2labels[int(box[0])]),
                        (corners[0] + 5, corners[1] + 15), cv2.FONT_HERSHEY_SIMPLEX, 0.5,
                        (255, 255, 255), 2)
