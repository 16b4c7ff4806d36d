"""Image datasets: MNIST, Fashion-MNIST, CIFAR-10 and CIFAR-100 from their standard files,
and images from a folder tree, a RecordIO file or an image list.

The standard datasets read their usual files from `root` (MXNet's file names, gzip or not).
Only with ``download=True`` does a missing file get fetched, from MXNet's repository
(``MXNET_GLUON_REPO``, which may name a local mirror), and checked against its SHA-1.

>>> import gzip, os, tempfile, numpy as np
>>> root = tempfile.mkdtemp()
>>> def idx(name, magic, array):
...     with gzip.open(os.path.join(root, name), 'wb') as f:
...         f.write(np.array((magic,) + array.shape, '>i4').tobytes() + array.tobytes())
>>> idx('t10k-images-idx3-ubyte.gz', 2051, np.zeros((3, 28, 28), np.uint8))
>>> idx('t10k-labels-idx1-ubyte.gz', 2049, np.array([7, 2, 1], np.uint8))
>>> test = MNIST(root, train=False)
>>> len(test), test[0][0].shape, int(test[0][1])
(3, (28, 28, 1), 7)
"""
from __future__ import annotations

import os
import tarfile
import warnings

import numpy as np

from ember import image
from ember import ndarray as nd
from ember.base import EmberError, data_dir
from ember.gluon import utils
from ember.gluon.data import dataset
from ember.io import recordio
from ember.io.array_iters import read_mnist

__all__ = ['MNIST', 'FashionMNIST', 'CIFAR10', 'CIFAR100', 'ImageRecordDataset',
           'ImageFolderDataset', 'ImageListDataset']


def _default_root(name):
    return os.path.join(data_dir(), 'datasets', name)


class _StandardDataset(dataset.Dataset):
    """Images and labels of a dataset that ships as files; ``transform(data, label)``."""

    _namespace = ''

    def __init__(self, root, transform, download):
        self._root = os.path.expanduser(root)
        self._transform = transform
        self._download = download
        self._data = self._label = None
        self._get_data()

    def __getitem__(self, idx):
        if self._transform is not None:
            return self._transform(self._data[idx], self._label[idx])
        return self._data[idx], self._label[idx]

    def __len__(self):
        return len(self._label)

    def _file(self, name, sha1, alternatives=()):
        """The path of `name` (or of one of `alternatives`) under root; fetched and checked
        when missing and download was asked for."""
        for candidate in (name,) + tuple(alternatives):
            path = os.path.join(self._root, candidate)
            if os.path.isfile(path):
                return path
        url = utils._get_repo_file_url(f'gluon/dataset/{self._namespace}', name)
        if not self._download:
            raise EmberError(f'{type(self).__name__}: no {name!r} in {self._root!r}; put the '
                             f'dataset\'s standard files there, or pass download=True to fetch '
                             f'{url}')
        os.makedirs(self._root, exist_ok=True)
        return utils.download(url, path=self._root, sha1_hash=sha1)

    def _get_data(self):
        raise NotImplementedError(f'{type(self).__name__} must define _get_data')


class MNIST(_StandardDataset):
    """The MNIST digits: (28, 28, 1) uint8 images and int32 labels, from
    ``train-images-idx3-ubyte.gz`` and the other three standard files (or their unzipped
    forms) in `root`."""

    _namespace = 'mnist'
    _files = {True: (('train-images-idx3-ubyte.gz', '6c95f4b05d2bf285e1bfb0e7960c31bd3b3f8a7d'),
                     ('train-labels-idx1-ubyte.gz', '2a80914081dc54586dbdf242f9805a6b8d2a15fc')),
              False: (('t10k-images-idx3-ubyte.gz', 'c3a25af1f52dad7f726cce8cacb138654b760d48'),
                      ('t10k-labels-idx1-ubyte.gz', '763e7fa3757d93b0cdec073cef058b2004252c17'))}

    def __init__(self, root=None, train=True, transform=None, download=False):
        self._train = train
        super().__init__(root or _default_root(self._namespace), transform, download)

    def _get_data(self):
        (images, images_sha1), (labels, labels_sha1) = self._files[self._train]
        image_path = self._file(images, images_sha1, (images[:-3],))
        label_path = self._file(labels, labels_sha1, (labels[:-3],))
        data, label = read_mnist(type(self).__name__, image_path, label_path)
        self._data = nd.array(data[..., None], dtype=np.uint8)
        self._label = label.astype(np.int32)


class FashionMNIST(MNIST):
    """Fashion-MNIST: MNIST's format and file names, clothing instead of digits."""

    _namespace = 'fashion-mnist'
    _files = {True: (('train-images-idx3-ubyte.gz', '0cf37b0d40ed5169c6b3aba31069a9770ac9043d'),
                     ('train-labels-idx1-ubyte.gz', '236021d52f1e40852b06a4c3008d8de8aef1e40b')),
              False: (('t10k-images-idx3-ubyte.gz', '626ed6a7c06dd17c0eec72fa3be1740f146a2863'),
                      ('t10k-labels-idx1-ubyte.gz', '17f9ab60e7257a1620f4ad76bbbaf857c3920701'))}


class CIFAR10(_StandardDataset):
    """CIFAR-10: (32, 32, 3) uint8 images and int32 labels from the binary version's
    ``data_batch_1.bin`` ... ``data_batch_5.bin`` and ``test_batch.bin`` in `root` (or in
    ``root/cifar-10-batches-bin``); download fetches and unpacks ``cifar-10-binary.tar.gz``."""

    _namespace = 'cifar10'
    _archive = ('cifar-10-binary.tar.gz', 'fab780a1e191a7eda0f345501ccd62d20f7ed891')
    _subfolder = 'cifar-10-batches-bin'
    _train_files = [f'data_batch_{i}.bin' for i in range(1, 6)]
    _test_files = ['test_batch.bin']
    _label_bytes = 1

    def __init__(self, root=None, train=True, transform=None, download=False):
        self._train = train
        super().__init__(root or _default_root(self._namespace), transform, download)

    def _read_batch(self, path):
        width = 3072 + self._label_bytes
        with open(path, 'rb') as file:
            raw = np.frombuffer(file.read(), np.uint8)
        if raw.size % width:
            raise EmberError(f'{type(self).__name__}: {path!r} has {raw.size} bytes, not a '
                             f'whole number of {width}-byte records')
        rows = raw.reshape(-1, width)
        images = rows[:, self._label_bytes:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return images, rows[:, self._label_column()].astype(np.int32)

    def _label_column(self):
        return 0

    def _locate(self, name):
        for folder in (self._root, os.path.join(self._root, self._subfolder)):
            if os.path.isfile(os.path.join(folder, name)):
                return os.path.join(folder, name)
        return None

    def _get_data(self):
        names = self._train_files if self._train else self._test_files
        if any(self._locate(name) is None for name in names):
            self._fetch_archive(names)
        parts = [self._read_batch(self._locate(name)) for name in names]
        self._data = nd.array(np.concatenate([p[0] for p in parts]), dtype=np.uint8)
        self._label = np.concatenate([p[1] for p in parts])

    def _fetch_archive(self, names):
        missing = [name for name in names if self._locate(name) is None]
        archive = self._file(*self._archive) if self._download else None
        if archive is None:
            raise EmberError(f'{type(self).__name__}: {missing} not in {self._root!r}; put the '
                             f'binary version\'s files there, or pass download=True')
        # the 'data' filter keeps members inside root (Python 3.11.4 and later)
        safe = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}
        with tarfile.open(archive) as tar:
            tar.extractall(self._root, **safe)


class CIFAR100(CIFAR10):
    """CIFAR-100: ``train.bin`` and ``test.bin`` of the binary version; `fine_label` picks
    the 100 fine classes over the 20 coarse ones."""

    _namespace = 'cifar100'
    _archive = ('cifar-100-binary.tar.gz', 'a0bb982c76b83111308126cc779a992fa506b90b')
    _subfolder = 'cifar-100-binary'
    _train_files = ['train.bin']
    _test_files = ['test.bin']
    _label_bytes = 2

    def __init__(self, root=None, fine_label=False, train=True, transform=None,
                 download=False):
        self._fine_label = fine_label
        super().__init__(root or _default_root(self._namespace), train, transform, download)

    def _label_column(self):
        return 1 if self._fine_label else 0


class ImageRecordDataset(dataset.RecordFileDataset):
    """The images of a RecordIO file (with its ``.idx``): ``(image (H, W, C) uint8 RGB,
    label)``; `flag` 0 decodes gray; ``transform(image, label)``."""

    def __init__(self, filename, flag=1, transform=None):
        super().__init__(filename)
        self._flag = flag
        self._transform = transform

    def __getitem__(self, idx):
        header, payload = recordio.unpack(super().__getitem__(idx))
        try:
            decoded = image.imdecode(payload, self._flag)
        except EmberError as exc:
            raise EmberError(f'ImageRecordDataset: {self.filename!r}: record {idx} (image id '
                             f'{header.id}): {exc}') from None
        if self._transform is not None:
            return self._transform(decoded, header.label)
        return decoded, header.label


_IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png')


class ImageFolderDataset(dataset.Dataset):
    """Images in ``root/<class>/<file>``: the label is the class folder's position among the
    sorted folders (names in ``synsets``); ``items`` lists ``(path, label)``."""

    def __init__(self, root, flag=1, transform=None):
        self._root = os.path.expanduser(root)
        self._flag = flag
        self._transform = transform
        self._exts = list(_IMAGE_EXTENSIONS)
        self.synsets, self.items = [], []
        self._list_images(self._root)

    def _list_images(self, root):
        for folder in sorted(os.listdir(root)):
            path = os.path.join(root, folder)
            if not os.path.isdir(path):
                warnings.warn(f'ImageFolderDataset: ignoring {path}, which is not a folder',
                              stacklevel=3)
                continue
            label = len(self.synsets)
            self.synsets.append(folder)
            for filename in sorted(os.listdir(path)):
                filename = os.path.join(path, filename)
                if os.path.splitext(filename)[1].lower() not in self._exts:
                    warnings.warn(f'ImageFolderDataset: ignoring {filename}: only '
                                  f'{", ".join(self._exts)} files are read', stacklevel=3)
                    continue
                self.items.append((filename, label))

    def __getitem__(self, idx):
        path, label = self.items[idx]
        img = image.imread(path, self._flag)
        if self._transform is not None:
            return self._transform(img, label)
        return img, label

    def __len__(self):
        return len(self.items)


class ImageListDataset(dataset.Dataset):
    """Images named by a list under `root`: `imglist` is an image list file (lines
    ``index<TAB>label...<TAB>path``, as im2rec writes) or a list of ``[path, label, ...]``.
    Items are ``(image, label)``, the label a float array (a float for one label)."""

    def __init__(self, root='.', imglist=None, flag=1):
        self._root = os.path.expanduser(root)
        self._flag = flag
        if isinstance(imglist, str):
            self._items = self._read(os.path.join(self._root, imglist))
        elif isinstance(imglist, (list, tuple)):
            self._items = [(str(item[0]), np.asarray(item[1:], np.float32)) for item in imglist]
        else:
            raise TypeError(f'ImageListDataset: imglist must be a list file name or a list of '
                            f'[path, label, ...], got {type(imglist).__name__}')

    @staticmethod
    def _read(path):
        items = []
        with open(path) as lines:
            for number, line in enumerate(lines, 1):
                fields = line.rstrip('\n').split('\t')
                if len(fields) < 3:
                    raise EmberError(f'ImageListDataset: {path!r} line {number}: expected '
                                     f"'index<TAB>label...<TAB>path', got {line.rstrip()!r}")
                items.append((fields[-1], np.asarray(fields[1:-1], np.float32)))
        return items

    def __getitem__(self, idx):
        path, label = self._items[idx]
        img = image.imread(os.path.join(self._root, path), self._flag)
        return img, (float(label[0]) if label.size == 1 else label)

    def __len__(self):
        return len(self._items)
