"""gluon.data.vision: datasets read from their standard files (small ones written here, never
the network), image datasets, transforms against MXNet 1.9.1 (tests/data/image-mxnet), and
RecordFileDataset, FilterSampler, transform_first."""
import gzip
import hashlib
import pickle
import shutil
import tarfile

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.gluon import data as gdata
from ember.gluon.data import vision
from ember.gluon.data.vision import transforms
from data_files import IMAGE_FIXTURES

IMAGES = IMAGE_FIXTURES / 'images'


def write_idx(path, magic, array, zipped=True):
    body = np.array((magic,) + array.shape, '>i4').tobytes() + array.tobytes()
    opener = gzip.open if zipped else open
    with opener(path, 'wb') as out:
        out.write(body)


@pytest.fixture
def mnist_root(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5], np.uint8)
    write_idx(tmp_path / 'train-images-idx3-ubyte.gz', 2051, images)
    write_idx(tmp_path / 'train-labels-idx1-ubyte.gz', 2049, labels)
    write_idx(tmp_path / 't10k-images-idx3-ubyte', 2051, images[:2], zipped=False)
    write_idx(tmp_path / 't10k-labels-idx1-ubyte', 2049, labels[:2], zipped=False)
    return tmp_path, images, labels


def test_mnist_reads_the_standard_files_zipped_or_not(mnist_root):
    root, images, labels = mnist_root
    train = vision.MNIST(str(root), transform=lambda x, y: (x.astype('float32') / 255, y))
    assert len(train) == 5
    x, y = train[2]
    assert x.shape == (28, 28, 1) and y == 4 and y.dtype == np.int32
    assert np.allclose(x.asnumpy()[:, :, 0], images[2] / 255)
    test = vision.FashionMNIST(str(root), train=False)
    assert len(test) == 2 and test[1][0].dtype == np.uint8


def test_missing_files_are_fetched_only_when_asked_and_checked(mnist_root, tmp_path):
    root, _, _ = mnist_root
    with pytest.raises(mx.EmberError, match=r"MNIST: no 'train-images-idx3-ubyte.gz' in "
                                            r".*empty'.*pass download=True to fetch"):
        vision.MNIST(str(tmp_path / 'empty'))
    mirror = tmp_path / 'mirror' / 'gluon' / 'dataset' / 'mnist'
    mirror.mkdir(parents=True)
    for name in ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'):
        shutil.copy(root / name, mirror)
    with config.override(MXNET_GLUON_REPO=str(tmp_path / 'mirror')):
        # the files here are not the real MNIST: their SHA-1 differs and they are refused
        with pytest.raises(mx.EmberError, match='does not match the expected SHA-1 '
                                                '6c95f4b05d2bf285e1bfb0e7960c31bd3b3f8a7d'):
            vision.MNIST(str(tmp_path / 'fetched'), download=True)

        class Ours(vision.MNIST):
            _files = {True: tuple((name, sha1(mirror / name)) for name in (
                'train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'))}
        assert len(Ours(str(tmp_path / 'fetched'), download=True)) == 5
    assert (tmp_path / 'fetched' / 'train-labels-idx1-ubyte.gz').exists()


def sha1(path):
    return hashlib.sha1(path.read_bytes()).hexdigest()


def cifar_rows(count, label_bytes, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, (count, label_bytes), dtype=np.uint8)
    pixels = rng.integers(0, 256, (count, 3072), dtype=np.uint8)
    return np.concatenate([labels, pixels], axis=1), labels, pixels


def test_cifar10_and_cifar100_read_the_binary_version(tmp_path):
    folder = tmp_path / 'c10' / 'cifar-10-batches-bin'
    folder.mkdir(parents=True)
    for i in range(1, 6):
        (folder / f'data_batch_{i}.bin').write_bytes(cifar_rows(2, 1, i)[0].tobytes())
    rows, labels, pixels = cifar_rows(3, 1, 9)
    (folder / 'test_batch.bin').write_bytes(rows.tobytes())
    test = vision.CIFAR10(str(tmp_path / 'c10'), train=False)
    assert len(test) == 3 and len(vision.CIFAR10(str(tmp_path / 'c10'))) == 10
    image, label = test[1]
    assert label == labels[1, 0]
    assert np.array_equal(image.asnumpy(), pixels[1].reshape(3, 32, 32).transpose(1, 2, 0))
    rows, labels, _ = cifar_rows(4, 2, 3)
    archive_dir = tmp_path / 'src' / 'cifar-100-binary'
    archive_dir.mkdir(parents=True)
    (archive_dir / 'train.bin').write_bytes(rows.tobytes())
    with tarfile.open(tmp_path / 'cifar-100-binary.tar.gz', 'w:gz') as tar:
        tar.add(archive_dir, arcname='cifar-100-binary')
    repo = tmp_path / 'repo' / 'gluon' / 'dataset' / 'cifar100'
    repo.mkdir(parents=True)
    shutil.copy(tmp_path / 'cifar-100-binary.tar.gz', repo)

    class Ours(vision.CIFAR100):
        _archive = ('cifar-100-binary.tar.gz', sha1(repo / 'cifar-100-binary.tar.gz'))
    with config.override(MXNET_GLUON_REPO=str(tmp_path / 'repo')):
        fine = Ours(str(tmp_path / 'c100'), fine_label=True, download=True)
    assert [fine[i][1] for i in range(4)] == labels[:, 1].tolist()
    coarse = vision.CIFAR100(str(tmp_path / 'c100'))
    assert [coarse[i][1] for i in range(4)] == labels[:, 0].tolist()
    (folder / 'test_batch.bin').write_bytes(b'\0' * 100)
    with pytest.raises(mx.EmberError, match='not a whole number of 3073-byte records'):
        vision.CIFAR10(str(tmp_path / 'c10'), train=False)


def test_image_datasets_from_folders_records_and_lists():
    folder = vision.ImageFolderDataset(str(IMAGES))
    assert folder.synsets == ['cat', 'dog'] and len(folder) == 12
    image, label = folder[7]
    assert image.shape == (36, 52, 3) and label == 1
    records = vision.ImageRecordDataset(str(IMAGE_FIXTURES / 'pass.rec'))
    rec_image, rec_label = records[7]
    assert np.array_equal(rec_image.asnumpy(), image.asnumpy()) and rec_label == 1.0
    gray = vision.ImageRecordDataset(str(IMAGE_FIXTURES / 'pass.rec'), flag=0)
    assert gray[0][0].shape == (40, 30, 1)
    listed = vision.ImageListDataset(str(IMAGES), '../labels2.lst')
    assert listed[3][1].tolist() == [0.0, 1.5]
    assert listed[3][0].shape == vision.ImageListDataset(
        str(IMAGES), [['cat/b.png', 0]])[0][0].shape
    raw = gdata.RecordFileDataset(str(IMAGE_FIXTURES / 'pass.rec'))
    assert len(raw) == 12 and raw[11][:4] == b'\0\0\0\0'
    with pytest.raises(IndexError, match='index 12 is out of range for the 12 records'):
        raw[12]
    assert pickle.loads(pickle.dumps(raw))[3] == raw[3]


def test_image_records_through_worker_processes():
    train = vision.ImageRecordDataset(str(IMAGE_FIXTURES / 'pass.rec')).transform_first(
        transforms.Compose([transforms.Resize((20, 20)), transforms.ToTensor()]))
    serial = [x.asnumpy() for x, _ in gdata.DataLoader(train, 5)]
    with gdata.DataLoader(train, 5, num_workers=2) as loader:
        parallel = [(x.asnumpy(), y.asnumpy()) for x, y in loader]
    assert all(np.array_equal(a, b[0]) for a, b in zip(serial, parallel))
    assert parallel[1][1].tolist() == [0, 1, 1, 1, 1]


def test_transforms_match_mxnet():
    want = np.load(IMAGE_FIXTURES / 'transforms.npz')
    image = mx.image.imread(str(IMAGES / 'dog/e.png'))
    chain = transforms.Compose([transforms.Resize(30), transforms.CenterCrop((24, 20)),
                                transforms.ToTensor(),
                                transforms.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))])
    got = {'compose': chain(image), 'resize_pair': transforms.Resize((20, 26))(image),
           'resize_keep': transforms.Resize(20, keep_ratio=True)(image),
           'center_crop_big': transforms.CenterCrop(40)(image),
           'cast': transforms.Cast('float16')(image)}
    for name, value in got.items():
        assert value.dtype == want[name].dtype, name
        assert np.allclose(value.asnumpy(), want[name], rtol=1e-6, atol=1e-6), name


def test_random_transforms_keep_shapes_and_stay_in_range():
    image = mx.image.imread(str(IMAGES / 'cat/c.png'))
    chain = transforms.Compose([
        transforms.RandomResizedCrop(24), transforms.RandomFlipLeftRight(),
        transforms.RandomFlipTopBottom(), transforms.RandomColorJitter(0.3, 0.3, 0.3, 0.1),
        transforms.RandomBrightness(0.2), transforms.RandomContrast(0.2),
        transforms.RandomSaturation(0.2), transforms.RandomHue(0.05),
        transforms.RandomLighting(0.1), transforms.ToTensor(),
        transforms.RandomApply(transforms.Normalize(0.5, 0.5), p=1.0)])
    out = chain(image)
    assert out.shape == (3, 24, 24) and out.dtype == np.float32
    assert -1.0 <= float(out.min().asscalar()) and float(out.max().asscalar()) <= 1.0
    crop = transforms.CropResize(2, 3, 20, 10, size=(8, 4))(image)
    assert crop.shape == (4, 8, 3)


def test_filter_sampler_and_transform_first():
    dataset = gdata.SimpleDataset([(i, str(i)) for i in range(10)])
    odd = gdata.FilterSampler(lambda sample: sample[0] % 2 == 1, dataset)
    assert list(odd) == [1, 3, 5, 7, 9] and len(odd) == 5
    scaled = dataset.transform_first(lambda x: x * 10)
    assert scaled[3] == (30, '3')
    eager = dataset.transform_first(lambda x: -x, lazy=False)
    assert isinstance(eager, gdata.SimpleDataset) and eager[2] == (-2, '2')
    loader = gdata.DataLoader(scaled, sampler=odd, batch_size=2)
    assert [x.asnumpy().tolist() for x, _ in loader] == [[10, 30], [50, 70], [90]]


def test_broken_records_name_the_file_and_the_record(tmp_path):
    from ember.io import recordio
    writer = recordio.MXIndexedRecordIO(str(tmp_path / 'r.idx'), str(tmp_path / 'r.rec'), 'w')
    writer.write_idx(0, recordio.pack(recordio.IRHeader(0, 1.0, 5, 0), b'no pixels here'))
    writer.close()
    dataset = vision.ImageRecordDataset(str(tmp_path / 'r.rec'))
    with pytest.raises(mx.EmberError, match=r"r.rec': record 0 \(image id 5\): the 14 bytes "
                                            r'are not an image'):
        dataset[0]
    (tmp_path / 'r.idx').write_text('0\t4096\n')
    with pytest.raises(mx.EmberError, match=r"r.rec' has \d+ bytes; no record starts at byte "
                                            r'4096'):
        vision.ImageRecordDataset(str(tmp_path / 'r.rec'))[0]
    with pytest.raises(FileNotFoundError, match=r"no such file '.*other.idx'"):
        gdata.RecordFileDataset(str(tmp_path / 'other.rec'))
