"""RecordIO image records and the iterators of mx.io that read files: ImageRecordIter,
ImageRecordUInt8Iter, CSVIter and MNISTIter, against MXNet 1.9.1's output on the same files
(tests/data/image-mxnet), and with broken inputs."""
import shutil

import numpy as np
import pytest

import ember as mx
from ember.io import recordio
from data_files import IMAGE_FIXTURES

PASS_REC = str(IMAGE_FIXTURES / 'pass.rec')
CASES = {
    'resize_center': dict(data_shape=(3, 24, 24), resize=28, mean_r=123.0, mean_g=117.0,
                          mean_b=104.0, std_r=58.0, std_g=57.0, std_b=57.5),
    'no_round': dict(data_shape=(3, 20, 20), resize=26, round_batch=False),
    'mirror': dict(data_shape=(3, 24, 24), resize=24, mirror=True, scale=1 / 255.0),
    'scaled': dict(data_shape=(3, 24, 24), resize=30, mean_r=100.0, mean_g=90.0, mean_b=80.0,
                   std_r=2.0, std_g=4.0, std_b=8.0, scale=0.5),
    'area_resize': dict(data_shape=(3, 16, 16), resize=18, inter_method=3),
    'gray': dict(data_shape=(1, 20, 20), resize=22),
    'part1of2': dict(data_shape=(3, 24, 24), resize=28, num_parts=2, part_index=1),
    'part0of2_idx': dict(data_shape=(3, 24, 24), resize=28, num_parts=2, part_index=0,
                         path_imgidx=str(IMAGE_FIXTURES / 'pass.idx')),
    'labels2': dict(data_shape=(3, 24, 24), resize=28, label_width=2,
                    path_imgrec=str(IMAGE_FIXTURES / 'labels2.rec')),
}


def epoch(it):
    batches = list(it)
    return (np.stack([b.data[0].asnumpy() for b in batches]),
            np.stack([b.label[0].asnumpy() for b in batches]), [b.pad for b in batches])


@pytest.mark.parametrize('case', list(CASES))
def test_image_record_iter_matches_mxnet(case):
    want = np.load(IMAGE_FIXTURES / 'record_iter.npz')
    it = mx.io.ImageRecordIter(**dict(dict(path_imgrec=PASS_REC, batch_size=5,
                                           preprocess_threads=3), **CASES[case]))
    data, label, pad = epoch(it)
    it.reset()
    second_labels = epoch(it)[1]
    if case == 'no_round':
        # MXNet reports pad 0 and leaves the places after the data unwritten; Ember pads
        # with zeros and says so
        assert pad == [0, 0, 3] and not data[-1, 2:].any()
        data, label = data[:, :2], label[:, :2]
        want_data, want_label = want[f'{case}_data'][:, :2], want[f'{case}_label'][:, :2]
    else:
        assert pad == want[f'{case}_pad'].tolist()
        want_data, want_label = want[f'{case}_data'], want[f'{case}_label']
        assert np.array_equal(second_labels, want[f'{case}_epoch2_label'])
    assert np.array_equal(label, want_label)
    assert np.allclose(data, want_data, rtol=1e-6, atol=1e-6)
    it.close()


def test_uint8_iter_matches_mxnet():
    want = np.load(IMAGE_FIXTURES / 'record_iter.npz')
    it = mx.io.ImageRecordUInt8Iter(path_imgrec=PASS_REC, data_shape=(3, 24, 24),
                                    batch_size=5, resize=28)
    data, label, pad = epoch(it)
    assert data.dtype == np.uint8 and np.array_equal(data, want['uint8_data'])
    assert pad == want['uint8_pad'].tolist()


def test_random_augmentation_repeats_whatever_the_thread_count():
    def run(threads):
        it = mx.io.ImageRecordIter(path_imgrec=PASS_REC, data_shape=(3, 16, 16), batch_size=4,
                                   resize=20, rand_crop=True, rand_mirror=True, shuffle=True,
                                   seed=3, preprocess_threads=threads, max_rotate_angle=10,
                                   brightness=0.2, pca_noise=0.1, random_h=5)
        return epoch(it)
    one, three = run(1), run(3)
    assert np.array_equal(one[0], three[0]) and np.array_equal(one[1], three[1])
    centred = epoch(mx.io.ImageRecordIter(path_imgrec=PASS_REC, data_shape=(3, 16, 16),
                                          batch_size=4, resize=20, shuffle=True, seed=3))
    assert not np.array_equal(one[0], centred[0])          # the augmentation did something
    assert sorted(one[1].reshape(-1).tolist()) == sorted(centred[1].reshape(-1).tolist())


def test_random_resized_crop_fills_the_output():
    it = mx.io.ImageRecordIter(path_imgrec=PASS_REC, data_shape=(3, 16, 16), batch_size=6,
                               random_resized_crop=True, min_random_area=0.3,
                               max_aspect_ratio=0.25, max_random_contrast=0.2,
                               max_random_illumination=10, pad=2, fill_value=0)
    data, _, _ = epoch(it)
    assert data.shape == (2, 6, 3, 16, 16) and data.std() > 10


def test_image_record_iter_rejects_bad_parameters():
    with pytest.raises(TypeError, match=r"unknown parameters 'rand_mirrror' \(did you mean "
                                        r"'rand_mirror'\?\)"):
        mx.io.ImageRecordIter(path_imgrec=PASS_REC, data_shape=(3, 8, 8), batch_size=2,
                              rand_mirrror=True)
    with pytest.raises(ValueError, match='data_shape'):
        mx.io.ImageRecordIter(path_imgrec=PASS_REC, data_shape=(8, 8), batch_size=2)
    with pytest.raises(ValueError, match='part_index=2'):
        mx.io.ImageRecordIter(path_imgrec=PASS_REC, data_shape=(3, 8, 8), batch_size=2,
                              num_parts=2, part_index=2)
    small = mx.io.ImageRecordIter(path_imgrec=PASS_REC, data_shape=(3, 64, 64), batch_size=2)
    with pytest.raises(mx.EmberError, match=r'record at byte 0 \(image id 0\).*smaller than '
                                            r'the output 64x64'):
        small.next()


# ----------------------------------------------------------------------------------------------
# Broken files: each a clear error naming the file and where, never a crash


def image_iter(path, **extra):
    return mx.io.ImageRecordIter(path_imgrec=str(path), data_shape=(3, 16, 16), batch_size=2,
                                 resize=16, **extra)


def test_truncated_bad_magic_and_missing_records_name_file_and_offset(tmp_path):
    whole = (IMAGE_FIXTURES / 'pass.rec').read_bytes()
    cut = tmp_path / 'cut.rec'
    cut.write_bytes(whole[:3000])
    with pytest.raises(mx.EmberError, match=r"cut.rec' ends inside a record at byte 1364"):
        image_iter(cut)
    bad = tmp_path / 'bad.rec'
    bad.write_bytes(whole[:1364] + b'\x01\x02\x03\x04' + whole[1368:])
    with pytest.raises(mx.EmberError, match=r"bad.rec' is not a RecordIO file: found "
                                            r"0x04030201 at byte 1364"):
        image_iter(bad)
    with pytest.raises(FileNotFoundError, match=r"no such file '.*missing.rec'"):
        image_iter(tmp_path / 'missing.rec')
    idx = tmp_path / 'past.idx'
    idx.write_text('0\t0\n1\t999999\n')
    with pytest.raises(mx.EmberError, match=r"past.idx' puts the record of key 1 at byte "
                                            r"999999, past the end of '.*pass.rec' \(33528"):
        recordio.MXIndexedRecordIO(str(idx), PASS_REC, 'r').read_idx(1)
    it = image_iter(PASS_REC, path_imgidx=str(idx))
    with pytest.raises(mx.EmberError, match=r"pass.rec' has 33528 bytes; no record starts at "
                                            r"byte 999999"):
        it.next()
    (tmp_path / 'odd.idx').write_text('0\t0\n1\t5\n')
    with pytest.raises(mx.EmberError, match=r'pass.rec.* reading the record of key 1, which '
                                            r".*odd.idx' puts at byte 5"):
        recordio.MXIndexedRecordIO(str(tmp_path / 'odd.idx'), PASS_REC, 'r').read_idx(1)


def test_a_record_that_is_not_an_image_names_the_record(tmp_path):
    path = tmp_path / 'text.rec'
    shutil.copy(PASS_REC, path)
    writer = recordio.MXRecordIO(str(tmp_path / 'tail.rec'), 'w')
    writer.write(recordio.pack(recordio.IRHeader(0, 1.0, 42, 0), b'plain text, no pixels'))
    writer.close()
    path.write_bytes(path.read_bytes() + (tmp_path / 'tail.rec').read_bytes())
    it = mx.io.ImageRecordIter(path_imgrec=str(path), data_shape=(3, 16, 16), batch_size=13,
                               resize=16)
    with pytest.raises(mx.EmberError, match=r"text.rec': the record at byte 33528 \(image id "
                                            r"42\): the 21 bytes are not an image"):
        it.next()


# ----------------------------------------------------------------------------------------------
# pack_img / unpack_img and im2rec's records


def test_records_packed_by_mxnet_unpack_and_repack_byte_for_byte():
    reader = recordio.MXIndexedRecordIO(str(IMAGE_FIXTURES / 'packed.idx'),
                                        str(IMAGE_FIXTURES / 'packed.rec'), 'r')
    header, image = recordio.unpack_img(reader.read_idx(3))
    assert (header.flag, header.label, header.id) == (0, 2.0, 3)
    original = mx.image.imread(str(IMAGE_FIXTURES / 'images/cat/a.png'), to_rgb=False)
    assert np.array_equal(image, original.asnumpy())
    jpeg_record = reader.read_idx(8)
    header, flipped = recordio.unpack_img(jpeg_record, iscolor=1)
    assert header.label.tolist() == [1.5, -2.0] and header.id2 == 5 and flipped.shape == (40, 30, 3)
    # libjpeg-turbo encodes the same pixels and quality to the same bytes in both OpenCVs
    assert recordio.pack_img(recordio.IRHeader(0, [1.5, -2.0], 8, 5), image[:, ::-1],
                             quality=80, img_fmt='.jpg') == jpeg_record
    again = recordio.pack_img(recordio.IRHeader(0, 2.0, 3, 0), image, img_fmt='.png')
    assert again[:24] == reader.read_idx(3)[:24]
    assert np.array_equal(recordio.unpack_img(again)[1], image)


def test_csv_iter_matches_mxnet():
    want = np.load(IMAGE_FIXTURES / 'csv_iter.npz')
    folder = IMAGE_FIXTURES / 'csv'
    for round_batch in (True, False):
        it = mx.io.CSVIter(data_csv=str(folder / 'data.csv'), data_shape=(2, 3),
                           label_csv=str(folder / 'label.csv'), batch_size=4,
                           round_batch=round_batch)
        for number in range(2):
            data, label, pad = epoch(it)
            it.reset()
            key = f'round{int(round_batch)}_epoch{number}'
            assert pad == want[f'{key}_pad'].tolist()
            # without round_batch MXNet leaves stale rows in the padding: compare the rest
            last = None if round_batch else -1
            assert np.array_equal(data[:last], want[f'{key}_data'][:last])
            assert np.array_equal(label[:last], want[f'{key}_label'][:last])


def test_mnist_iter_matches_mxnet():
    want = np.load(IMAGE_FIXTURES / 'mnist_iter.npz')
    folder = IMAGE_FIXTURES / 'mnist'
    for flat in (False, True):
        it = mx.io.MNISTIter(image=str(folder / 'images-idx3-ubyte'),
                             label=str(folder / 'labels-idx1-ubyte'), batch_size=4,
                             shuffle=False, flat=flat)
        data, label, pad = epoch(it)
        assert np.array_equal(data, want[f'flat{int(flat)}_data'])
        assert np.array_equal(label, want[f'flat{int(flat)}_label'])
    with pytest.raises(mx.EmberError, match='not an MNIST idx file'):
        mx.io.MNISTIter(image=str(folder / 'labels-idx1-ubyte'),
                        label=str(folder / 'labels-idx1-ubyte'))


def test_int8_and_v1_iterators_follow_the_uint8_output():
    """MXNet 1.9.1's ImageRecordInt8Iter gives each pixel minus its channel's mean saturated
    to int8 (std and scale ignored), and its _v1 iterators the batches of the current ones
    (both checked against MXNet when this test was written)."""
    want = np.load(IMAGE_FIXTURES / 'record_iter.npz')
    pixels = want['uint8_data'].astype(np.int16)
    common = dict(path_imgrec=PASS_REC, data_shape=(3, 24, 24), batch_size=5, resize=28)
    data, _, pad = epoch(mx.io.ImageRecordInt8Iter(**common, mean_r=100.0, scale=0.5))
    assert data.dtype == np.int8 and pad == want['uint8_pad'].tolist()
    expected = pixels.copy()
    expected[:, :, 0] -= 100
    assert np.array_equal(data, np.clip(expected, -128, 127))
    data, _, _ = epoch(mx.io.ImageRecordUInt8Iter_v1(**common))
    assert data.dtype == np.uint8 and np.array_equal(data, want['uint8_data'])
    data, label, pad = epoch(mx.io.ImageRecordIter_v1(**dict(common, **CASES['resize_center'])))
    assert np.allclose(data, want['resize_center_data'], rtol=1e-6, atol=1e-6)
    assert np.array_equal(label, want['resize_center_label'])


# ----------------------------------------------------------------------------------------------
# mean_img: a file of the mean image, computed and saved when missing


def test_mean_img_is_computed_saved_and_subtracted_as_mxnet_does(tmp_path):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (10, 12, 3), dtype=np.uint8) for _ in range(5)]
    writer = recordio.MXRecordIO(str(tmp_path / 'e.rec'), 'w')
    for i, image in enumerate(images):
        writer.write(recordio.pack_img((0, float(i), i, 0), image, img_fmt='.png'))
    writer.close()
    mean_file = tmp_path / 'mean.nd'
    common = dict(path_imgrec=str(tmp_path / 'e.rec'), data_shape=(3, 8, 8), batch_size=2,
                  mean_img=str(mean_file), preprocess_threads=2)
    mx.io.ImageRecordIter(**common).close()
    saved = mx.nd.load(str(mean_file))
    assert list(saved) == ['mean_img']
    mean = saved['mean_img'].asnumpy()
    # center crops, BGR -> RGB, averaged; the first pixels as MXNet 1.9.1 computed them
    crops = np.stack(images)[:, 1:9, 2:10, ::-1].astype(np.float64)
    assert np.allclose(mean, crops.mean(0).transpose(2, 0, 1), rtol=1e-6)
    assert np.allclose(mean[:, 0, :3], [[126.4, 172.4, 82.4], [142.0, 124.4, 143.0],
                                        [93.2, 167.4, 130.0]], rtol=1e-6)
    # an existing file is used as it is: (pixel - mean_img) * scale / std (mean_r unused);
    # MXNet 1.9.1's output for the second image with the same file
    it = mx.io.ImageRecordIter(**common, std_r=2, std_g=4, std_b=8, scale=0.5, mean_r=50)
    batch = it.next().data[0].asnumpy()
    assert np.allclose(batch[1, :, 0, :3], [[-11.35, 7.15, -19.85], [-5.0, 0.325, 11.75],
                                            [3.9875, -6.0875, -2.125]], rtol=1e-5, atol=1e-5)
    it.close()
    mx.nd.save(str(mean_file), {'mean_img': mx.nd.zeros((3, 4, 4))})
    with pytest.raises(mx.EmberError, match=r"mean_img=.*mean\.nd' holds arrays of shapes "
                                            r"\[\(3, 4, 4\)\]; expected one array of "
                                            r"data_shape \(3, 8, 8\)"):
        mx.io.ImageRecordIter(**common)
