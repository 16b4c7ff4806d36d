"""mx.image (decoding, resizing, cropping, augmenters, ImageIter) and mx.nd.image, against
what MXNet 1.9.1 computed on the same files (tests/data/image-mxnet)."""
import random

import numpy as np
import pytest

import ember as mx
from ember.backend import imaging
from data_files import IMAGE_FIXTURES

IMAGES = IMAGE_FIXTURES / 'images'
EIGVAL = np.array([55.46, 4.794, 1.148])
EIGVEC = np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140],
                   [-0.5836, -0.6948, 0.4203]])


def fixture(name):
    return np.load(IMAGE_FIXTURES / f'{name}.npz')


def assert_image_close(got, want, name, bicubic=False):
    """uint8 images equal (bicubic: one grey level apart in places, OpenCV 3.4 against 5);
    float images to float32 rounding."""
    got = got.asnumpy() if isinstance(got, mx.nd.NDArray) else got
    assert got.shape == want.shape and got.dtype == want.dtype, name
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if want.dtype == np.uint8:
        assert diff.max() <= (1 if bicubic else 0), f'{name}: off by {diff.max()}'
        assert (diff > 0).mean() < 0.1, name
    else:
        assert np.allclose(got, want, rtol=1e-5, atol=1e-4 * (1 + 50 * bicubic)), name


@pytest.fixture(scope='module')
def jpeg():
    return (IMAGES / 'cat/b.jpg').read_bytes()


def test_decoding_and_resizing_match_mxnet(jpeg):
    want = fixture('image_functions')
    image = mx.image.imdecode(jpeg)
    floats = image.astype('float32')
    got = {'imdecode': image, 'imdecode_gray': mx.image.imdecode(jpeg, flag=0),
           'imdecode_bgr': mx.image.imdecode(jpeg, to_rgb=0),
           'imread_png': mx.image.imread(str(IMAGES / 'dog/d.png')),
           'resize_short': mx.image.resize_short(image, 20),
           'resize_short_area': mx.image.resize_short(image, 20, interp=3),
           'center_crop': mx.image.center_crop(image, (20, 30))[0],
           'fixed_crop': mx.image.fixed_crop(image, 3, 5, 20, 18, size=(15, 12)),
           'color_normalize': mx.image.color_normalize(floats.copy(), mx.nd.array([120, 110, 100]),
                                                       mx.nd.array([60, 55, 50])),
           'border': mx.image.copyMakeBorder(image, 1, 2, 3, 4, type=0, value=7)}
    for interp in range(5):
        got[f'imresize_{interp}'] = mx.image.imresize(image, 25, 19, interp=interp)
        got[f'imresize_float_{interp}'] = mx.image.imresize(floats, 25, 19, interp=interp)
    for name, value in got.items():
        bicubic = name in ('resize_short', 'fixed_crop') or name.endswith('_2')
        assert_image_close(value, want[name], name, bicubic)


def augmenters(image, floats):
    aug = mx.image
    return {
        'ResizeAug': (aug.ResizeAug(20), image),
        'ForceResizeAug': (aug.ForceResizeAug((22, 17), interp=1), image),
        'RandomCropAug': (aug.RandomCropAug((20, 18)), image),
        'RandomSizedCropAug': (aug.RandomSizedCropAug((16, 16), 0.3, (0.75, 1.33)), image),
        'CenterCropAug': (aug.CenterCropAug((20, 18)), image),
        'HorizontalFlipAug': (aug.HorizontalFlipAug(1.0), image),
        'BrightnessJitterAug': (aug.BrightnessJitterAug(0.3), floats),
        'ContrastJitterAug': (aug.ContrastJitterAug(0.3), floats),
        'SaturationJitterAug': (aug.SaturationJitterAug(0.3), floats),
        'HueJitterAug': (aug.HueJitterAug(0.3), floats),
        'ColorJitterAug': (aug.ColorJitterAug(0.3, 0.3, 0.3), floats),
        'LightingAug': (aug.LightingAug(0.1, EIGVAL, EIGVEC), floats),
        'ColorNormalizeAug': (aug.ColorNormalizeAug(mx.nd.array([120, 110, 100]),
                                                    mx.nd.array([60, 55, 50])), floats),
        'RandomGrayAug': (aug.RandomGrayAug(1.0), floats),
        'CastAug': (aug.CastAug(), image)}


@pytest.fixture
def seeded_generators():
    """Python's and NumPy's global generators, restored afterwards."""
    state = random.getstate(), np.random.get_state()
    yield
    random.setstate(state[0])
    np.random.set_state(state[1])


def test_augmenters_draw_as_mxnet_does(jpeg, seeded_generators):
    want = fixture('image_functions')
    image = mx.image.imdecode(jpeg)
    for name, (aug, source) in augmenters(image, image.astype('float32')).items():
        random.seed(11)
        np.random.seed(11)
        assert_image_close(aug(source.copy()), want[f'aug_{name}'], name,
                           bicubic=name in ('ResizeAug', 'RandomSizedCropAug'))
    chain = mx.image.CreateAugmenter((3, 16, 16), resize=20, rand_crop=True, rand_mirror=True,
                                     mean=True, std=True, brightness=0.2, contrast=0.2,
                                     saturation=0.2, hue=0.1, pca_noise=0.1, rand_gray=0.2)
    random.seed(5)
    np.random.seed(5)
    result = image
    for aug in chain:
        result = aug(result)
    # one grey level of bicubic difference, divided by ImageNet's std
    assert np.abs(result.asnumpy() - want['aug_CreateAugmenter']).max() < 1.01 / 57.12
    assert mx.image.SequentialAug(chain[:2]).dumps()[0] == 'sequentialaug'


def test_nd_image_operators_match_mxnet():
    want = fixture('nd_image')
    image = mx.image.imread(str(IMAGES / 'cat/c.png'))
    floats = image.astype('float32')
    ops = mx.nd.image
    tensor = ops.to_tensor(image)
    got = {'to_tensor': tensor, 'to_tensor_batch': ops.to_tensor(mx.nd.stack(image, image)),
           'normalize': ops.normalize(tensor, mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3)),
           'normalize_one': ops.normalize(tensor, mean=(0.5,), std=(0.25,)),
           'resize_keep': ops.resize(image, 20, keep_ratio=True),
           'crop': ops.crop(image, 5, 7, 20, 12),
           'crop_batch': ops.crop(mx.nd.stack(image, image), 5, 7, 20, 12),
           'flip_left_right': ops.flip_left_right(image),
           'flip_top_bottom': ops.flip_top_bottom(image),
           'adjust_lighting': ops.adjust_lighting(floats, alpha=(0.1, -0.2, 0.3)),
           'adjust_lighting_u8': ops.adjust_lighting(image, alpha=(0.1, -0.2, 0.3))}
    for interp in range(5):
        got[f'resize_{interp}'] = ops.resize(image, (30, 21), interp=interp)
    for kind, source in (('u8', image), ('f32', floats)):
        for name, factor in (('brightness', 1.3), ('contrast', 0.6), ('hue', 0.2)):
            got[f'{name}_{kind}'] = getattr(ops, 'random_' + name)(source, factor, factor)
    for name, value in got.items():
        # hue's float results round to the next grey level in places
        assert_image_close(value, want[name], name, bicubic=name in ('resize_2', 'hue_u8'))


def test_image_operators_follow_their_documentation_where_mxnet_does_not():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (3, 5, 3)).astype(np.uint8)
    flipped = mx.nd.image.flip_left_right(mx.nd.array(image, dtype='uint8')).asnumpy()
    assert np.array_equal(flipped, image[:, ::-1])          # MXNet zeroes the middle column
    floats = image.astype(np.float32)
    saturated = mx.nd.image.random_saturation(mx.nd.array(floats), 0.6, 0.6).asnumpy()
    gray = floats @ np.array([0.299, 0.587, 0.114], np.float32)
    assert np.allclose(saturated, 0.6 * floats + 0.4 * gray[..., None], rtol=1e-5)
    batch = mx.nd.array(np.stack([image, image]), dtype='uint8')
    assert np.array_equal(mx.nd.image.flip_top_bottom(batch).asnumpy()[1], image[::-1])


def test_random_image_operators_draw_per_image_within_their_range():
    images = mx.nd.ones((6, 4, 4, 3)) * 100
    bright = mx.nd.image.random_brightness(images, 0.5, 1.5).asnumpy()
    factors = bright[:, 0, 0, 0] / 100
    assert ((factors >= 0.5) & (factors <= 1.5)).all() and len(set(factors)) > 1
    flips = mx.nd.image.random_flip_left_right(mx.nd.array(np.arange(8 * 2 * 3).reshape(
        1, 1, 8, 6).repeat(8, 0).reshape(8, 1, 8, 6)[..., :3])).asnumpy()
    assert len({tuple(f.reshape(-1)) for f in flips}) == 2
    lit = mx.nd.image.random_lighting(images, alpha_std=0.1).asnumpy()
    assert lit.shape == images.shape and not np.allclose(lit, 100)


def test_image_operator_errors_name_the_problem():
    image = mx.nd.ones((4, 6, 3))
    with pytest.raises(ValueError, match=r'crop: the box x=4, y=0, width=3'):
        mx.nd.image.crop(image, 4, 0, 3, 2)
    with pytest.raises(ValueError, match='expected an image'):
        mx.nd.image.to_tensor(mx.nd.ones((4, 6)))
    with pytest.raises(ValueError, match='interp=7'):
        mx.nd.image.resize(image, (2, 2), interp=7)
    with pytest.raises(ValueError, match='min_factor=2.0 exceeds'):
        mx.nd.image.random_contrast(image, 2, 1)
    with pytest.raises(imaging.ImageDecodeError, match='not an image'):
        mx.image.imdecode(b'definitely not a picture')
    with pytest.raises(mx.EmberError, match='no such file'):
        mx.image.imread('/no/such/image.png')


def test_image_symbols_infer_and_bind():
    data = mx.sym.var('image')
    net = mx.sym.image.normalize(mx.sym.image.to_tensor(data), mean=(0.5,), std=(0.5,))
    assert net.infer_shape(image=(6, 4, 3))[1] == [(3, 6, 4)]
    image = np.random.default_rng(1).integers(0, 256, (6, 4, 3)).astype(np.float32)
    out = net.eval(image=mx.nd.array(image))[0].asnumpy()
    assert np.allclose(out, (image.transpose(2, 0, 1) / 255 - 0.5) / 0.5, atol=1e-6)


def test_image_iter_reads_records_and_lists(tmp_path):
    rec = str(IMAGE_FIXTURES / 'png.rec')
    it = mx.image.ImageIter(4, (3, 16, 16), path_imgrec=rec,
                            path_imgidx=str(IMAGE_FIXTURES / 'png.idx'), resize=20)
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 0]
    assert batches[1].label[0].asnumpy().tolist() == [0, 0, 1, 1]
    listed = mx.image.ImageIter(5, (3, 16, 16), path_imglist=str(IMAGE_FIXTURES / 'im2rec.lst'),
                                path_root=str(IMAGES), resize=16,
                                last_batch_handle='roll_over')
    assert [b.pad for b in listed] == [0, 0]
    listed.reset()
    first = listed.next()
    assert first.label[0].asnumpy().tolist() == [1, 1, 0, 0, 0]   # two kept from epoch one
    broken = tmp_path / 'broken.png'
    broken.write_bytes(b'no image here')
    bad = mx.image.ImageIter(1, (3, 8, 8), imglist=[[0, str(broken)]])
    with pytest.raises(mx.EmberError, match=r"broken image file '.*broken.png'"):
        bad.next()


def test_without_opencv_pillow_steps_in_or_the_error_names_the_package(monkeypatch):
    image = np.random.default_rng(2).integers(0, 256, (6, 5, 3)).astype(np.uint8)
    png = imaging.encode(image, '.png')
    monkeypatch.setitem(imaging._modules, 'cv2', None)
    if imaging.available() == 'pillow':
        assert np.array_equal(imaging.decode(png, to_rgb=False), image)
        assert np.array_equal(imaging.decode(imaging.encode(image, '.png'), 0),
                              imaging.decode(png, 0))
        assert imaging.resize(image, 3, 2, interp=1).shape == (2, 3, 3)
    monkeypatch.setitem(imaging._modules, 'PIL', None)
    with pytest.raises(mx.EmberError, match=r'pip install opencv-python-headless'):
        mx.image.imdecode(png)
    with pytest.raises(mx.EmberError, match='copyMakeBorder needs OpenCV'):
        imaging.copy_make_border(image, 1, 1, 1, 1)


def _report_opencv_threads(conn):
    conn.send(imaging.num_threads())
    conn.close()


def test_a_forked_child_gets_mp_opencv_threads_and_the_parent_keeps_its_own():
    """OpenCV's pool is shut down around fork (a child forked while a pool thread held its
    lock hung); the child starts MXNET_MP_OPENCV_NUM_THREADS threads, as MXNet's did."""
    import multiprocessing
    from ember import config
    context = multiprocessing.get_context('fork')
    before = imaging.num_threads()
    for value, expected in ((3, 3), (0, 1)):
        receive, send = context.Pipe(duplex=False)
        with config.override(MXNET_MP_OPENCV_NUM_THREADS=value):
            child = context.Process(target=_report_opencv_threads, args=(send,))
            child.start()
        assert receive.recv() == expected
        child.join()
        assert imaging.num_threads() == before


def _image_forms(name, image, **attrs):
    """[mx.nd.image.<name>, bound mx.sym.image.<name>] of `image`, as NumPy arrays."""
    imperative = getattr(mx.nd.image, name)(image, **attrs).asnumpy()
    symbol = getattr(mx.sym.image, name)(mx.sym.var('x'), **attrs)
    return [imperative, symbol.bind(mx.cpu(), {'x': image}).forward()[0].asnumpy()]


def test_random_image_operators_in_both_namespaces():
    rng = np.random.default_rng(2)
    image = mx.nd.array(rng.uniform(0, 255, (6, 8, 3)), dtype='float32')
    pixels = image.asnumpy()
    fixed = {'random_brightness': (1.3, pixels * 1.3),
             'random_contrast': (1.0, pixels), 'random_saturation': (1.0, pixels),
             'random_hue': (0.0, pixels)}
    for name, (factor, want) in fixed.items():
        for got in _image_forms(name, image, min_factor=factor, max_factor=factor):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=name)
    for name, attrs in (('random_color_jitter', dict(brightness=0, contrast=0, saturation=0,
                                                      hue=0)),
                        ('random_lighting', dict(alpha_std=0.0))):
        for got in _image_forms(name, image, **attrs):
            np.testing.assert_allclose(got, pixels, rtol=1e-5, atol=1e-3, err_msg=name)
    for got, want in zip(_image_forms('resize', image, size=(4, 3), interp=0),
                         [mx.image.imresize(image, 4, 3, interp=0).asnumpy()] * 2):
        np.testing.assert_allclose(got, want)
    mx.random.seed(5)
    for name, flipped in (('random_flip_left_right', pixels[:, ::-1]),
                          ('random_flip_top_bottom', pixels[::-1])):
        seen = set()
        for _ in range(10):
            for got in _image_forms(name, image):
                seen.add(np.array_equal(got, flipped))
                assert np.array_equal(got, flipped) or np.array_equal(got, pixels), name
        assert seen == {True, False}, name


# The operators the test above runs by name, for `python -m ember api-coverage`.
EXERCISED_API = [f'ember.{space}.image.{name}' for space in ('ndarray', 'symbol') for name in (
    'random_brightness', 'random_contrast', 'random_saturation', 'random_hue',
    'random_color_jitter', 'random_lighting', 'resize', 'random_flip_left_right',
    'random_flip_top_bottom')]
