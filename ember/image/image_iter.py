"""``ImageIter``: batches of augmented images from a RecordIO file or an image list, decoded
in Python (MXNet 1.x's ``mx.image.ImageIter``; ``mx.io.ImageRecordIter`` is the fast path).

Images come from ``path_imgrec`` (with ``path_imgidx`` for shuffling and parts), from an
image list file ``path_imglist`` (lines ``index<TAB>labels...<TAB>path``) or from ``imglist``
(``[label, path]`` items), under ``path_root``. Each passes through ``aug_list`` (by default
``CreateAugmenter(data_shape, **kwargs)``) and becomes (C, H, W) in the batch.

>>> import os, tempfile, numpy as np
>>> from ember.backend import imaging
>>> root = tempfile.mkdtemp()
>>> for name in ('a.png', 'b.png', 'c.png'):
...     with open(os.path.join(root, name), 'wb') as f:
...         _ = f.write(imaging.encode(np.full((12, 10, 3), 100, np.uint8), '.png'))
>>> it = ImageIter(2, (3, 8, 8), imglist=[[0, 'a.png'], [1, 'b.png'], [2, 'c.png']],
...                path_root=root)
>>> [(b.data[0].shape, b.label[0].asnumpy().tolist(), b.pad) for b in it]
[((2, 3, 8, 8), [0.0, 1.0], 0), ((2, 3, 8, 8), [2.0, 0.0], 1)]
"""
from __future__ import annotations

import logging
import numbers
import os
import random

import numpy as np

from ember import ndarray as nd
from ember.backend import imaging
from ember.base import EmberError
from ember.image.image import CreateAugmenter, imdecode
from ember.io import DataBatch, DataDesc, DataIter, recordio

__all__ = ['ImageIter']

_LABEL_DTYPES = ('int32', 'float32', 'int64', 'float64')


def _read_image_list(path, dtype):
    labels, keys = {}, []
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            fields = line.strip().split('\t')
            if len(fields) < 3:
                raise EmberError(f'ImageIter: {path!r} line {number}: expected '
                                 f"'index<TAB>label...<TAB>path', got {line.rstrip()!r}")
            key = int(fields[0])
            labels[key] = (nd.array(np.array(fields[1:-1], np.float64), dtype=dtype),
                           fields[-1])
            keys.append(key)
    return labels, keys


def _from_items(imglist, dtype):
    labels, keys = {}, []
    for index, item in enumerate(imglist, 1):
        if len(item) > 2:
            label = nd.array(np.asarray(item[:-1], np.float64), dtype=dtype)
        elif isinstance(item[0], numbers.Number):
            label = nd.array([item[0]], dtype=dtype)
        else:
            label = nd.array(item[0], dtype=dtype)
        labels[str(index)] = (label, item[-1])
        keys.append(str(index))
    return labels, keys


class ImageIter(DataIter):
    """Batches (N, C, H, W) of augmented images and their labels (see the module docstring).

    ``last_batch_handle`` is 'pad' (fill from the start, report ``pad``), 'discard' or
    'roll_over' (keep the images of a short last batch for the next epoch's first batch).
    """

    def __init__(self, batch_size, data_shape, label_width=1, path_imgrec=None,
                 path_imglist=None, path_root=None, path_imgidx=None, shuffle=False,
                 part_index=0, num_parts=1, aug_list=None, imglist=None, data_name='data',
                 label_name='softmax_label', dtype='float32', last_batch_handle='pad',
                 **kwargs):
        super().__init__(batch_size)
        if not (path_imgrec or path_imglist or isinstance(imglist, list)):
            raise ValueError('ImageIter: give path_imgrec, path_imglist or imglist')
        if dtype not in _LABEL_DTYPES:
            raise ValueError(f'ImageIter: dtype={dtype!r}: labels may be '
                             f'{", ".join(_LABEL_DTYPES)}')
        if last_batch_handle not in ('pad', 'discard', 'roll_over'):
            raise ValueError(f"ImageIter: last_batch_handle={last_batch_handle!r}: expected "
                             f"'pad', 'discard' or 'roll_over'")
        self.imgrec, self.imgidx = self._open_records(path_imgrec, path_imgidx)
        self.imglist, keys = self._labels(path_imglist, imglist, dtype)
        self.path_root = path_root
        self.check_data_shape(data_shape)
        self.data_shape = tuple(data_shape)
        self.label_width = label_width
        self.shuffle = shuffle
        self.provide_data = [DataDesc(data_name, (batch_size,) + self.data_shape)]
        label_shape = (batch_size, label_width) if label_width > 1 else (batch_size,)
        self.provide_label = [DataDesc(label_name, label_shape)]
        self.seq = self._sequence(keys, shuffle, num_parts, path_imgidx)
        if num_parts > 1:
            if not 0 <= part_index < num_parts:
                raise ValueError(f'ImageIter: part_index={part_index}: expected 0 <= '
                                 f'part_index < num_parts ({num_parts})')
            share = len(self.seq) // num_parts
            self.seq = self.seq[part_index * share:(part_index + 1) * share]
        self.auglist = CreateAugmenter(data_shape, **kwargs) if aug_list is None else aug_list
        self.last_batch_handle = last_batch_handle
        self.num_image = len(self.seq) if self.seq is not None else None
        self.cur = 0
        self._allow_read = True
        self._cache_data = self._cache_label = self._cache_idx = None
        self.reset()

    @staticmethod
    def _open_records(path_imgrec, path_imgidx):
        if not path_imgrec:
            return None, None
        logging.info('ImageIter: loading recordio %s...', path_imgrec)
        if path_imgidx:
            records = recordio.MXIndexedRecordIO(path_imgidx, path_imgrec, 'r')
            return records, list(records.keys)
        return recordio.MXRecordIO(path_imgrec, 'r'), None

    @staticmethod
    def _labels(path_imglist, imglist, dtype):
        if path_imglist:
            return _read_image_list(path_imglist, dtype)
        if isinstance(imglist, list):
            return _from_items(imglist, dtype)
        return None, None

    def _sequence(self, keys, shuffle, num_parts, path_imgidx):
        if self.imgrec is None:
            return keys
        if shuffle or num_parts > 1 or path_imgidx:
            if self.imgidx is None:
                raise ValueError('ImageIter: shuffle and num_parts > 1 need path_imgidx')
            return list(self.imgidx)
        return None

    # ------------------------------------------------------------------------------------------

    def reset(self):
        if self.seq is not None and self.shuffle:
            random.shuffle(self.seq)
        if self.last_batch_handle != 'roll_over' or self._cache_data is None:
            if self.imgrec is not None:
                self.imgrec.reset()
            self.cur = 0
            self._allow_read = True

    def hard_reset(self):
        """Reset, dropping the images kept by 'roll_over'."""
        if self.seq is not None and self.shuffle:
            random.shuffle(self.seq)
        if self.imgrec is not None:
            self.imgrec.reset()
        self.cur = 0
        self._allow_read = True
        self._cache_data = self._cache_label = self._cache_idx = None

    def next_sample(self):
        """``(label, image bytes)`` of the next image; StopIteration at the end."""
        if not self._allow_read:
            raise StopIteration
        if self.seq is None:
            record = self.imgrec.read()
            if record is None:
                if self.last_batch_handle != 'discard':
                    self.imgrec.reset()
                raise StopIteration
            header, img = recordio.unpack(record)
            return header.label, img
        if self.cur >= self.num_image:
            if self.last_batch_handle != 'discard':
                self.cur = 0
            raise StopIteration
        idx = self.seq[self.cur]
        self.cur += 1
        if self.imgrec is not None:
            header, img = recordio.unpack(self.imgrec.read_idx(idx))
            return (header.label if self.imglist is None else self.imglist[idx][0]), img
        label, fname = self.imglist[idx]
        return label, self.read_image(fname)

    def _batchify(self, batch_data, batch_label, start=0):
        filled = start
        try:
            while filled < self.batch_size:
                label, raw = self.next_sample()
                data = self.imdecode(raw)
                try:
                    self.check_valid_image(data)
                except RuntimeError as exc:
                    logging.debug('ImageIter: skipping an invalid image: %s', exc)
                    continue
                batch_data[filled] = self.postprocess_data(self.augmentation_transform(data))
                batch_label[filled] = label
                filled += 1
        except StopIteration:
            if not filled:
                raise
        return filled

    def next(self):
        if self._cache_data is not None:
            batch_data, batch_label, filled = (self._cache_data, self._cache_label,
                                               self._cache_idx)
        else:
            batch_data, batch_label = self._new_buffers()
            filled = self._batchify(batch_data, batch_label)
        pad = self.batch_size - filled
        if pad:
            if self.last_batch_handle == 'discard':
                raise StopIteration
            if self.last_batch_handle == 'roll_over' and self._cache_data is None:
                self._cache_data, self._cache_label, self._cache_idx = (batch_data,
                                                                        batch_label, filled)
                raise StopIteration
            self._batchify(batch_data, batch_label, filled)
            if self.last_batch_handle == 'pad':
                self._allow_read = False
            else:
                self._cache_data = self._cache_label = self._cache_idx = None
        return DataBatch([batch_data], [batch_label], pad=pad)

    # ------------------------------------------------------------------------------------------
    # Hooks a subclass may override

    def _new_buffers(self):
        """(data, label) arrays of one batch, to be filled."""
        return (nd.zeros((self.batch_size,) + self.data_shape),
                nd.empty(self.provide_label[0].shape))

    def check_data_shape(self, data_shape):
        """Only (3, H, W) images."""
        if len(data_shape) != 3:
            raise ValueError(f'ImageIter: data_shape={tuple(data_shape)}: expected (C, H, W)')
        if data_shape[0] != 3:
            raise ValueError(f'ImageIter: data_shape={tuple(data_shape)}: this iterator takes '
                             f'3 channels')

    def check_valid_image(self, data):
        """Raise RuntimeError for an image to skip."""
        if len(data[0].shape) == 0:
            raise RuntimeError('the decoded image has no pixels')

    def imdecode(self, s):
        """Decode image bytes; a broken image raises naming its index or file."""
        try:
            return imdecode(s)
        except imaging.ImageDecodeError as exc:
            raise EmberError(f'ImageIter: broken image {self._locate()}: {exc}') from None

    def _locate(self):
        if self.seq is None:
            return 'at the current record'
        idx = self.seq[(self.cur - 1) % max(self.num_image, 1)]
        if self.imglist is not None:
            return f'file {self.imglist[idx][1]!r}'
        return f'of index {idx}'

    def read_image(self, fname):
        """The bytes of the image file `fname` under ``path_root``."""
        path = os.path.join(self.path_root, fname) if self.path_root else fname
        try:
            with open(path, 'rb') as file:
                return file.read()
        except FileNotFoundError:
            raise EmberError(f'ImageIter: no such image file {path!r}') from None

    def augmentation_transform(self, data):
        """`data` through every augmenter of ``auglist``."""
        for aug in self.auglist:
            data = aug(data)
        return data

    def postprocess_data(self, datum):
        """(H, W, C) -> (C, H, W)."""
        return nd.transpose(datum, axes=(2, 0, 1))
