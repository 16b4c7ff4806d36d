"""``ImageRecordIter`` and ``ImageRecordUInt8Iter``: batches of images from a RecordIO file.

Records are decoded and augmented by ``preprocess_threads`` threads (OpenCV and NumPy work
outside the GIL), each writing its image straight into the batch's array; a producer thread
keeps up to ``prefetch_buffer`` batches ready ahead of the consumer. Each image draws its
random numbers from a generator seeded by (``seed_aug``, epoch, position in the epoch), so a
run's batches do not depend on which thread decoded what.

The last batch of an epoch that runs past the end is filled from the start of the next epoch
when ``round_batch`` (the next epoch then begins after those images, as in MXNet), else with
zeros; ``pad`` counts the filled places either way. ``num_parts`` / ``part_index`` give each
worker of a distributed job its share: by records when there is an index, else by bytes of the
file (dmlc's split, which MXNet uses).

``mean_img`` names a file of the mean image (``{'mean_img': array (C, H, W)}``, as ``nd.save``
writes it): each output pixel is ``(pixel - mean_img) * scale / std`` (per-channel means are
then unused). When the file does not exist, the mean of this part's images (decoded and
augmented, before any normalisation) is computed once and saved there. MXNet 1.9.1 saves that
mean already multiplied by ``scale / std``, yet subtracts the file as is; Ember saves the
mean of the pixels, so both agree wherever scale and std are 1.

>>> import os, tempfile, numpy as np
>>> from ember.io import recordio
>>> folder = tempfile.mkdtemp()
>>> writer = recordio.MXRecordIO(os.path.join(folder, 'd.rec'), 'w')
>>> for label in range(3):
...     image = np.full((10, 12, 3), 40 * label, np.uint8)
...     writer.write(recordio.pack_img((0, float(label), label, 0), image, img_fmt='.png'))
>>> writer.close()
>>> it = ImageRecordIter(path_imgrec=os.path.join(folder, 'd.rec'), data_shape=(3, 8, 8),
...                      batch_size=2, mean_r=40)
>>> [(b.data[0].shape, b.label[0].asnumpy().tolist(), b.pad) for b in it]
[((2, 3, 8, 8), [0.0, 1.0], 0), ((2, 3, 8, 8), [2.0, 0.0], 1)]
>>> it.reset()
>>> float(it.next().data[0][0, 0, 0, 0].asscalar())    # the 2nd epoch starts at image 1
0.0
"""
from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ember import ndarray as nd
from ember.backend import imaging
from ember.base import EmberError
from ember.io import recordio
from ember.io.image_aug import AUGMENT_DEFAULTS, AugmentError, DefaultAugmenter, write_chw
from ember.io.io import DataBatch, DataDesc, DataIter

__all__ = ['ImageRecordIter', 'ImageRecordUInt8Iter', 'ImageRecordInt8Iter', 'ImageRecordIter_v1',
           'ImageRecordUInt8Iter_v1', 'partition']

# Accepted for compatibility; they tune MXNet's C++ reader and change nothing here.
_IGNORED = ('verbose', 'ctx', 'device_id', 'shuffle_chunk_size', 'shuffle_chunk_seed',
            'aug_seq', 'data_name_', 'mean_a', 'std_a')
_NORMALISE = dict(mean_r=0.0, mean_g=0.0, mean_b=0.0, std_r=1.0, std_g=1.0, std_b=1.0,
                  scale=1.0, mirror=False, rand_mirror=False, max_random_contrast=0.0,
                  max_random_illumination=0.0)


def partition(offsets, part_index, num_parts, file_size, indexed):
    """The records of part `part_index` of `num_parts`: contiguous runs of records when the
    file is indexed, else the records starting in that part's share of the file's bytes."""
    if not 0 <= part_index < num_parts:
        raise ValueError(f'ImageRecordIter: part_index={part_index}: expected 0 <= part_index '
                         f'< num_parts ({num_parts})')
    if num_parts == 1:
        return list(offsets)
    if indexed:
        step = -(-len(offsets) // num_parts)
        return list(offsets[step * part_index:step * (part_index + 1)])
    step = -(-file_size // num_parts)
    step = (step + 3) // 4 * 4
    begin, end = step * part_index, step * (part_index + 1)
    return [offset for offset in offsets if begin <= offset < end]


def _read_list(path):
    """{image index: labels} of an image list (lines ``index<TAB>labels...<TAB>path``)."""
    labels = {}
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            fields = line.rstrip('\n').split('\t')
            if len(fields) < 3:
                raise EmberError(f'ImageRecordIter: {path!r} line {number}: expected '
                                 f"'index<TAB>label...<TAB>path', got {line.rstrip()!r}")
            labels[int(fields[0])] = np.array(fields[1:-1], np.float32)
    return labels


class _Epochs:
    """The order of records in each epoch, and where round_batch makes an epoch start."""

    def __init__(self, count, shuffle, seed):
        self.count, self.shuffle, self.seed = count, shuffle, seed
        self.epoch = 0
        self.start = 0

    def order(self, epoch):
        if not self.shuffle:
            return np.arange(self.count)
        return np.random.default_rng([self.seed, epoch]).permutation(self.count)


class ImageRecordIter(DataIter):
    """Batches of images (N, C, H, W) and labels from an image RecordIO file (MXNet's
    ``mx.io.ImageRecordIter``, with its parameters; see the module docstring)."""

    _OUTPUT_DTYPE = None

    def __init__(self, path_imgrec=None, data_shape=None, batch_size=None, path_imgidx='',
                 path_imglist='', label_width=1, shuffle=False, seed=0, seed_aug=None,
                 preprocess_threads=4, prefetch_buffer=4, num_parts=1, part_index=0,
                 round_batch=True, dtype=None, data_name='data', label_name='softmax_label',
                 mean_img='', **params):
        super().__init__(int(batch_size or 0))
        self._check_required(path_imgrec, data_shape, batch_size)
        self.data_shape = tuple(int(d) for d in data_shape)
        self.label_width = int(label_width)
        self.round_batch = bool(round_batch)
        self._dtype = np.dtype(self._OUTPUT_DTYPE or dtype or np.float32)
        self._augment, self._normalise = self._split_params(params)
        self._records = recordio.RecordFile(path_imgrec)
        self._offsets = self._part_offsets(path_imgidx, part_index, num_parts)
        self._list_labels = _read_list(path_imglist) if path_imglist else None
        self._epochs = _Epochs(len(self._offsets), shuffle, seed)
        self._seed_aug = seed if seed_aug is None else seed_aug
        self.provide_data = [DataDesc(data_name, (self.batch_size,) + self.data_shape,
                                      self._dtype)]
        label_shape = (self.batch_size,) + ((self.label_width,) if self.label_width > 1 else ())
        self.provide_label = [DataDesc(label_name, label_shape, np.float32)]
        self._pool = ThreadPoolExecutor(max(1, int(preprocess_threads)),
                                        thread_name_prefix='ember-imgrec',
                                        initializer=_yield_to_compute)
        self._prefetch = max(1, int(prefetch_buffer))
        self._producer = None
        self._batch = None
        self._mean_img = self._mean_image(mean_img) if mean_img and \
            self._dtype != np.uint8 else None
        self.reset()

    # ------------------------------------------------------------------------------------------
    # Set-up

    @staticmethod
    def _check_required(path_imgrec, data_shape, batch_size):
        if not path_imgrec:
            raise ValueError('ImageRecordIter: path_imgrec is required (the .rec file)')
        if data_shape is None or len(tuple(data_shape)) != 3:
            raise ValueError(f'ImageRecordIter: data_shape={data_shape!r}: expected '
                             f'(channels, height, width)')
        if tuple(data_shape)[0] not in (1, 3):
            raise ValueError(f'ImageRecordIter: data_shape={tuple(data_shape)}: expected 1 '
                             f'(gray) or 3 (RGB) channels')
        if batch_size is None or int(batch_size) < 1:
            raise ValueError(f'ImageRecordIter: batch_size={batch_size!r}: expected an '
                             f'integer >= 1')

    def _split_params(self, params):
        unknown = set(params) - set(AUGMENT_DEFAULTS) - set(_NORMALISE) - set(_IGNORED)
        if unknown:
            import difflib
            known = sorted(set(AUGMENT_DEFAULTS) | set(_NORMALISE))
            hints = [f'{name!r}' + (f' (did you mean {close[0]!r}?)' if close else '')
                     for name in sorted(unknown)
                     for close in [difflib.get_close_matches(name, known, n=1)]]
            raise TypeError(f'ImageRecordIter: unknown parameters {", ".join(hints)}')
        augment = {k: v for k, v in params.items() if k in AUGMENT_DEFAULTS}
        normalise = dict(_NORMALISE, **{k: v for k, v in params.items() if k in _NORMALISE})
        return DefaultAugmenter.from_params(self.data_shape, augment), normalise

    def _part_offsets(self, path_imgidx, part_index, num_parts):
        if path_imgidx:
            offsets = [offset for _, offset in recordio.read_index(path_imgidx)]
        else:
            offsets = self._records.offsets()
        return partition(offsets, int(part_index), int(num_parts), self._records.size,
                         indexed=bool(path_imgidx))

    def _mean_image(self, path):
        """The mean image of file `path`, computed from this part's images and saved there
        when the file does not exist."""
        path = os.fspath(path)
        if not os.path.exists(path):
            mean = self._computed_mean()
            nd.save(path, {'mean_img': nd.array(mean)})
            return mean
        try:
            loaded = nd.load(path)
        except Exception as exc:  # noqa: BLE001  (any unreadable file: say which)
            raise EmberError(f'ImageRecordIter: mean_img={path!r}: not an NDArray file '
                             f'({exc})') from None
        arrays = list(loaded.values()) if isinstance(loaded, dict) else list(loaded)
        if isinstance(loaded, dict) and 'mean_img' in loaded:
            arrays = [loaded['mean_img']]
        if len(arrays) != 1 or tuple(arrays[0].shape) != self.data_shape:
            found = [tuple(a.shape) for a in arrays]
            raise EmberError(f'ImageRecordIter: mean_img={path!r} holds arrays of shapes '
                             f'{found}; expected one array of data_shape {self.data_shape}')
        return arrays[0].asnumpy().astype(np.float32)

    def _computed_mean(self):
        ones = np.ones((self.data_shape[0], 1, 1), np.float32)

        def image(place):
            out = np.empty(self.data_shape, np.float32)
            self._load_one(place, 0, place, out, 0 * ones, ones, jitter=False)
            return out
        total = np.zeros(self.data_shape, np.float64)
        for out in self._pool.map(image, range(len(self._offsets))):
            total += out
        return (total / max(1, len(self._offsets))).astype(np.float32)

    def _channel_values(self):
        """(mean, factor) for write_chw, or (None, None) for raw uint8: the mean per output
        channel (C, 1, 1), or the mean image (C, H, W)."""
        if self._dtype == np.uint8:
            return None, None
        p = self._normalise
        means = (p['mean_r'], p['mean_g'], p['mean_b'])[:self.data_shape[0]]
        stds = (p['std_r'], p['std_g'], p['std_b'])[:self.data_shape[0]]
        if self.data_shape[0] == 1:
            means, stds = (p['mean_r'],), (p['std_r'],)
        column = (-1, 1, 1)
        mean = np.array(means, np.float32).reshape(column)
        if self._mean_img is not None:
            mean = self._mean_img
        factor = (p['scale'] / np.array(stds, np.float32)).reshape(column)
        return mean, factor.astype(np.float32)

    # ------------------------------------------------------------------------------------------
    # Iteration

    def reset(self):
        """Start the next epoch (after the images a round_batch pad took from it)."""
        if self._producer is not None and not self._producer.finished:
            self._epochs.start = 0      # an epoch cut short: the next one starts afresh
        self._stop_producer()
        epoch = self._epochs.epoch
        self._epochs.epoch += 1
        self._producer = _Producer(self, epoch, self._epochs.start)

    def _stop_producer(self):
        if self._producer is not None:
            self._producer.stop()
            self._producer = None

    def close(self):
        """Stop the producer and decoding threads."""
        self._stop_producer()
        self._pool.shutdown(wait=True)

    def __del__(self):
        producer = getattr(self, '_producer', None)
        if producer is not None:
            producer.stop()
        pool = getattr(self, '_pool', None)
        if pool is not None:
            pool.shutdown(wait=False)

    def iter_next(self):
        self._batch = self._producer.take()
        return self._batch is not None

    def next(self):
        if not self.iter_next():
            raise StopIteration
        return self._batch

    def getdata(self):
        return self._batch.data

    def getlabel(self):
        return self._batch.label

    def getpad(self):
        return self._batch.pad

    def getindex(self):
        return self._batch.index

    # ------------------------------------------------------------------------------------------
    # One batch (runs on the producer thread)

    def _plan_epoch(self, epoch, start):
        """[(record position, epoch of its draws, place in the epoch)] of each batch, and the
        start of the next epoch."""
        order = self._epochs.order(epoch)
        count, size = len(order), self.batch_size
        if count == 0:
            raise EmberError(f'ImageRecordIter: {self._records.uri!r} holds no records for '
                             f'this part of the data')
        plan = [(int(order[i]), epoch, i) for i in range(start, count)]
        batches = [plan[i:i + size] for i in range(0, len(plan), size)]
        next_start = 0
        if batches and len(batches[-1]) < size:
            missing = size - len(batches[-1])
            if self.round_batch:
                following = self._epochs.order(epoch + 1)
                batches[-1] += [(int(following[i % count]), epoch + 1, i % count)
                                for i in range(missing)]
                next_start = missing % count
        return batches, next_start

    def _make_batch(self, items, real_count):
        data = nd.empty((self.batch_size,) + self.data_shape, dtype=self._dtype)
        label = np.zeros(self.provide_label[0].shape, np.float32)
        out = data._data()      # a fresh array no other code can see yet: filled in place
        mean, factor = self._channel_values()
        tasks = [self._pool.submit(self._load_one, position, epoch, place, out[slot], mean,
                                   factor)
                 for slot, (position, epoch, place) in enumerate(items)]
        for slot, task in enumerate(tasks):
            label[slot] = task.result()
        if len(items) < self.batch_size:
            out[len(items):] = 0
        return DataBatch([data], [nd.array(label)], pad=self.batch_size - real_count)

    def _load_one(self, position, epoch, place, out, mean, factor, jitter=True):
        offset = self._offsets[position]
        record = self._records.read_at(offset)
        header, payload = recordio.unpack(record)
        seed = (self._seed_aug % (1 << 64)) << 64 | epoch << 32 | place
        rng = np.random.default_rng(seed)
        try:
            image = imaging.decode(payload, 0 if self.data_shape[0] == 1 else 1, to_rgb=False)
            image = self._augment(image, rng)
        except (imaging.ImageDecodeError, AugmentError) as exc:
            raise EmberError(f'ImageRecordIter: {self._records.uri!r}: the record at byte '
                             f'{offset} (image id {header.id}): {exc}') from None
        mirror = jitter and (self._normalise['mirror'] or (self._normalise['rand_mirror']
                                                          and rng.random() < 0.5))
        if mean is not None and jitter and (self._normalise['max_random_contrast']
                                 or self._normalise['max_random_illumination']):
            mean, factor = self._jittered(rng, mean, factor)
        write_chw(image, out, mean, factor, mirror)
        return self._label_of(header, offset)

    def _jittered(self, rng, mean, factor):
        """MXNet's per-image contrast and illumination: (x - mean) * contrast + illumination,
        expressed as a shifted mean and a scaled factor."""
        contrast = 1 + rng.uniform(-1, 1) * self._normalise['max_random_contrast']
        illumination = rng.uniform(-1, 1) * self._normalise['max_random_illumination']
        return mean - illumination / contrast, factor * contrast

    def _label_of(self, header, offset):
        if self._list_labels is not None:
            labels = self._list_labels.get(int(header.id))
            if labels is None:
                raise EmberError(f'ImageRecordIter: the image list has no entry for image id '
                                 f'{header.id} (record at byte {offset})')
        else:
            labels = np.atleast_1d(np.asarray(header.label, np.float32))
        if labels.size < self.label_width:
            raise EmberError(f'ImageRecordIter: {self._records.uri!r}: the record at byte '
                             f'{offset} has {labels.size} labels; label_width is '
                             f'{self.label_width}')
        return labels[0] if self.label_width == 1 else labels[:self.label_width]


def _yield_to_compute():
    """Lower this thread's priority (Linux: a thread's own nice value), so that decoding takes
    the cores in the gaps of the training's kernels instead of stalling their OpenMP teams."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):
        pass


class _Producer:
    """One epoch's batches, made ahead on a thread of their own into a bounded queue."""

    _DONE = object()

    def __init__(self, it, epoch, start):
        self.it = it
        self.ready = queue.Queue(it._prefetch)
        self.stopping = threading.Event()
        self.finished = False
        self.next_start = 0     # where the next epoch begins, once this one is done
        self.thread = threading.Thread(target=self._run, args=(epoch, start), daemon=True,
                                       name='ember-imgrec-producer')
        self.thread.start()

    def _run(self, epoch, start):
        _yield_to_compute()
        try:
            batches, next_start = self.it._plan_epoch(epoch, start)
            for items in batches:
                if self.stopping.is_set():
                    return
                real = sum(1 for _, item_epoch, _ in items if item_epoch == epoch)
                self._put(self.it._make_batch(items, real))
            self.next_start = next_start
            self._put(self._DONE)
        except BaseException as exc:  # noqa: BLE001  (re-raised where the consumer waits)
            self._put(exc)

    def _put(self, item):
        while not self.stopping.is_set():
            try:
                self.ready.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def take(self):
        """The next batch, None at the end of the epoch; raises what the producer raised."""
        if self.finished:
            return None
        item = self.ready.get()
        if item is self._DONE:
            self.finished = True
            self.it._epochs.start = self.next_start
            return None
        if isinstance(item, BaseException):
            self.finished = True
            raise item
        return item

    def stop(self):
        self.stopping.set()
        while True:
            try:
                self.ready.get_nowait()
            except queue.Empty:
                break
        self.thread.join()


class ImageRecordUInt8Iter(ImageRecordIter):
    """ImageRecordIter whose data are the augmented pixels as uint8 (no mean, std or scale)."""

    _OUTPUT_DTYPE = np.uint8


class ImageRecordInt8Iter(ImageRecordIter):
    """ImageRecordIter whose data are int8: each pixel minus its channel's mean, saturated to
    [-128, 127] (std and scale do not apply), as MXNet's (deprecated) int8 iterator gives."""

    _OUTPUT_DTYPE = np.int8


class ImageRecordIter_v1(ImageRecordIter):  # noqa: N801 (MXNet's name)
    """MXNet's first image record iterator (deprecated there): the same batches as
    ImageRecordIter for the same parameters."""


class ImageRecordUInt8Iter_v1(ImageRecordUInt8Iter):  # noqa: N801 (MXNet's name)
    """MXNet's first uint8 image record iterator (deprecated there): the same batches as
    ImageRecordUInt8Iter."""
