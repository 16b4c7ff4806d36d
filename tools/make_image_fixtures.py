"""Write the MXNet 1.9.1 fixtures of Ember's data-input tests into a folder.

Run it with MXNet's environment, which needs OpenCV's Python package for ``im2rec`` and
``recordio.pack_img`` (``pip install 'opencv-python-headless<4.9' numpy==1.23.5`` there):

    OMP_NUM_THREADS=2 ~/.cache/ember-bench/mxnet-1.9.1/bin/python \
        tools/make_image_fixtures.py tests/data/image-mxnet

Everything is drawn from fixed seeds, so running it again writes the same arrays (the JPEG
bytes depend on the OpenCV build). tests/data/image-mxnet/README.md says what each file is.
"""
import os
import random
import shutil
import subprocess
import sys

import cv2
import mxnet as mx
import numpy as np

IMAGE_SIZES = {'cat/a': (40, 30), 'cat/b': (33, 47), 'cat/c': (48, 48),
               'dog/d': (36, 52), 'dog/e': (45, 31), 'dog/f': (30, 44)}   # name: (height, width)


def smooth_image(rng, height, width):
    """A colour image with gradients, edges and noise: JPEG has something to do."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    planes = [128 + 100 * np.sin(x / rng.uniform(3, 9) + y / rng.uniform(4, 11) + phase)
              for phase in rng.uniform(0, 6, 3)]
    image = np.stack(planes, axis=2) + rng.normal(0, 12, (height, width, 3))
    image[height // 3: height // 2, width // 4: width // 2] = rng.integers(0, 256, 3)
    return np.clip(image, 0, 255).astype(np.uint8)


def write_images(out):
    """images/<class>/<name>.jpg and .png: the same BGR pixels twice."""
    rng = np.random.default_rng(2024)
    root = os.path.join(out, 'images')
    for name, (height, width) in IMAGE_SIZES.items():
        os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
        image = smooth_image(rng, height, width)
        cv2.imwrite(os.path.join(root, name + '.png'), image)
        cv2.imwrite(os.path.join(root, name + '.jpg'), image, [cv2.IMWRITE_JPEG_QUALITY, 90])
    return root


def im2rec(*args):
    tool = os.path.join(os.path.dirname(mx.__file__), 'tools', 'im2rec.py')
    subprocess.run([sys.executable, tool, *args], check=True, stdout=subprocess.DEVNULL)


def write_records(out, root):
    """MXNet's im2rec: a list, then records re-encoded, passed through, resized to PNG, and
    with two labels packed."""
    prefix = os.path.join(out, 'im2rec')
    im2rec(prefix, root, '--list', '--recursive', '--no-shuffle')
    for variant, options in (('jpg', []), ('pass', ['--pass-through']),
                             ('png', ['--resize', '24', '--encoding', '.png', '--quality', '3'])):
        shutil.copy(prefix + '.lst', os.path.join(out, variant + '.lst'))
        im2rec(os.path.join(out, variant), root, *options)
    with open(prefix + '.lst') as lines, open(os.path.join(out, 'labels2.lst'), 'w') as two:
        for line in lines:
            index, label, path = line.rstrip('\n').split('\t')
            two.write(f'{index}\t{label}\t{float(index) * 0.5:f}\t{path}\n')
    im2rec(os.path.join(out, 'labels2'), root, '--pack-label', '--pass-through')


def write_packed(out, root):
    """mx.recordio.pack_img of two images with a scalar and an array label, indexed."""
    writer = mx.recordio.MXIndexedRecordIO(os.path.join(out, 'packed.idx'),
                                           os.path.join(out, 'packed.rec'), 'w')
    image = cv2.imread(os.path.join(root, 'cat/a.png'))
    writer.write_idx(3, mx.recordio.pack_img(mx.recordio.IRHeader(0, 2.0, 3, 0), image,
                                             img_fmt='.png'))
    writer.write_idx(8, mx.recordio.pack_img(mx.recordio.IRHeader(0, [1.5, -2.0], 8, 5),
                                             image[:, ::-1], quality=80, img_fmt='.jpg'))
    writer.close()


def batches(it):
    data, label, pad = [], [], []
    for batch in it:
        data.append(batch.data[0].asnumpy())
        label.append(batch.label[0].asnumpy())
        pad.append(batch.pad)
    return np.stack(data), np.stack(label), np.array(pad)


def record_iter_outputs(out):
    """ImageRecordIter's deterministic paths on the passed-through images (12 of them, in
    batches of 5: the last batch is short)."""
    common = dict(path_imgrec=os.path.join(out, 'pass.rec'), batch_size=5,
                  preprocess_threads=1, shuffle=False, verbose=False)
    cases = {
        'resize_center': dict(data_shape=(3, 24, 24), resize=28, mean_r=123.0, mean_g=117.0,
                              mean_b=104.0, std_r=58.0, std_g=57.0, std_b=57.5),
        'no_round': dict(data_shape=(3, 20, 20), resize=26, round_batch=False),
        'mirror': dict(data_shape=(3, 24, 24), resize=24, mirror=True, scale=1 / 255.0),
        'scaled': dict(data_shape=(3, 24, 24), resize=30, mean_r=100.0, mean_g=90.0,
                       mean_b=80.0, std_r=2.0, std_g=4.0, std_b=8.0, scale=0.5),
        'area_resize': dict(data_shape=(3, 16, 16), resize=18, inter_method=3),
        'gray': dict(data_shape=(1, 20, 20), resize=22),
        'part1of2': dict(data_shape=(3, 24, 24), resize=28, num_parts=2, part_index=1),
        'part0of2_idx': dict(data_shape=(3, 24, 24), resize=28, num_parts=2, part_index=0,
                             path_imgidx=os.path.join(out, 'pass.idx')),
        'labels2': dict(data_shape=(3, 24, 24), resize=28, label_width=2,
                        path_imgrec=os.path.join(out, 'labels2.rec')),
    }
    arrays = {}
    for name, extra in cases.items():
        it = mx.io.ImageRecordIter(**dict(common, **extra))
        data, label, pad = batches(it)
        arrays.update({f'{name}_data': data, f'{name}_label': label, f'{name}_pad': pad})
        it.reset()      # a second epoch: where round_batch starts it
        arrays[f'{name}_epoch2_label'] = batches(it)[1]
    uint8 = mx.io.ImageRecordUInt8Iter(data_shape=(3, 24, 24), resize=28, **common)
    arrays['uint8_data'], arrays['uint8_label'], arrays['uint8_pad'] = batches(uint8)
    np.savez_compressed(os.path.join(out, 'record_iter.npz'), **arrays)


def image_function_outputs(out, root):
    """mx.image's functions and the deterministic augmenters, on one JPEG."""
    with open(os.path.join(root, 'cat/b.jpg'), 'rb') as f:
        buf = f.read()
    image = mx.image.imdecode(buf)
    floats = image.astype('float32')
    arrays = {'imdecode': image.asnumpy(),
              'imdecode_gray': mx.image.imdecode(buf, flag=0).asnumpy(),
              'imdecode_bgr': mx.image.imdecode(buf, to_rgb=0).asnumpy(),
              'imread_png': mx.image.imread(os.path.join(root, 'dog/d.png')).asnumpy(),
              'resize_short': mx.image.resize_short(image, 20).asnumpy(),
              'resize_short_area': mx.image.resize_short(image, 20, interp=3).asnumpy(),
              'center_crop': mx.image.center_crop(image, (20, 30))[0].asnumpy(),
              'fixed_crop': mx.image.fixed_crop(image, 3, 5, 20, 18, size=(15, 12)).asnumpy(),
              'color_normalize': mx.image.color_normalize(
                  floats.copy(), mx.nd.array([120, 110, 100]), mx.nd.array([60, 55, 50])
              ).asnumpy(),
              'border': mx.image.copyMakeBorder(image, 1, 2, 3, 4, type=0, value=7).asnumpy()}
    for interp in range(5):
        arrays[f'imresize_{interp}'] = mx.image.imresize(image, 25, 19, interp=interp).asnumpy()
        arrays[f'imresize_float_{interp}'] = mx.image.imresize(floats, 25, 19,
                                                               interp=interp).asnumpy()
    arrays.update(augmenter_outputs(image))
    np.savez_compressed(os.path.join(out, 'image_functions.npz'), **arrays)


def seeded(seed, fn):
    random.seed(seed)
    np.random.seed(seed)
    return fn()


def augmenter_outputs(image):
    """Each augmenter on the same image, Python's and NumPy's generators seeded alike."""
    floats = image.astype('float32')
    image_aug = mx.image
    augmenters = {
        'ResizeAug': (image_aug.ResizeAug(20), image),
        'ForceResizeAug': (image_aug.ForceResizeAug((22, 17), interp=1), image),
        'RandomCropAug': (image_aug.RandomCropAug((20, 18)), image),
        'RandomSizedCropAug': (image_aug.RandomSizedCropAug((16, 16), 0.3, (0.75, 1.33)),
                               image),
        'CenterCropAug': (image_aug.CenterCropAug((20, 18)), image),
        'HorizontalFlipAug': (image_aug.HorizontalFlipAug(1.0), image),
        'BrightnessJitterAug': (image_aug.BrightnessJitterAug(0.3), floats),
        'ContrastJitterAug': (image_aug.ContrastJitterAug(0.3), floats),
        'SaturationJitterAug': (image_aug.SaturationJitterAug(0.3), floats),
        'HueJitterAug': (image_aug.HueJitterAug(0.3), floats),
        'ColorJitterAug': (image_aug.ColorJitterAug(0.3, 0.3, 0.3), floats),
        'LightingAug': (image_aug.LightingAug(0.1, np.array([55.46, 4.794, 1.148]),
                                              np.array([[-0.5675, 0.7192, 0.4009],
                                                        [-0.5808, -0.0045, -0.8140],
                                                        [-0.5836, -0.6948, 0.4203]])), floats),
        'ColorNormalizeAug': (image_aug.ColorNormalizeAug(mx.nd.array([120, 110, 100]),
                                                          mx.nd.array([60, 55, 50])), floats),
        'RandomGrayAug': (image_aug.RandomGrayAug(1.0), floats),
        'CastAug': (image_aug.CastAug(), image),
    }
    arrays = {}
    for name, (aug, source) in augmenters.items():
        arrays[f'aug_{name}'] = seeded(11, lambda: aug(source.copy()).asnumpy())
    full = image_aug.CreateAugmenter((3, 16, 16), resize=20, rand_crop=True, rand_mirror=True,
                                     mean=True, std=True, brightness=0.2, contrast=0.2,
                                     saturation=0.2, hue=0.1, pca_noise=0.1, rand_gray=0.2)

    def run_all():
        result = image
        for aug in full:
            result = aug(result)
        return result.asnumpy()
    arrays['aug_CreateAugmenter'] = seeded(5, run_all)
    return arrays


def nd_image_outputs(out, root):
    """mx.nd.image's operators where they are deterministic (and MXNet's kernel is right)."""
    image = mx.image.imread(os.path.join(root, 'cat/c.png'))          # 48 x 48: even width
    floats = image.astype('float32')
    tensor = mx.nd.image.to_tensor(image)
    arrays = {'to_tensor': tensor.asnumpy(),
              'to_tensor_batch': mx.nd.image.to_tensor(mx.nd.stack(image, image)).asnumpy(),
              'normalize': mx.nd.image.normalize(tensor, mean=(0.4, 0.5, 0.6),
                                                 std=(0.2, 0.25, 0.3)).asnumpy(),
              'normalize_one': mx.nd.image.normalize(tensor, mean=(0.5,), std=(0.25,)).asnumpy(),
              'resize_keep': mx.nd.image.resize(image, 20, keep_ratio=True).asnumpy(),
              'crop': mx.nd.image.crop(image, 5, 7, 20, 12).asnumpy(),
              'crop_batch': mx.nd.image.crop(mx.nd.stack(image, image), 5, 7, 20, 12).asnumpy(),
              'flip_left_right': mx.nd.image.flip_left_right(image).asnumpy(),
              'flip_top_bottom': mx.nd.image.flip_top_bottom(image).asnumpy(),
              'adjust_lighting': mx.nd.image.adjust_lighting(floats, alpha=(0.1, -0.2, 0.3)
                                                             ).asnumpy(),
              'adjust_lighting_u8': mx.nd.image.adjust_lighting(image, alpha=(0.1, -0.2, 0.3)
                                                                ).asnumpy()}
    for interp in range(5):
        arrays[f'resize_{interp}'] = mx.nd.image.resize(image, (30, 21), interp=interp).asnumpy()
    for kind, source in (('u8', image), ('f32', floats)):
        for op, factor in (('brightness', 1.3), ('contrast', 0.6), ('hue', 0.2)):
            fn = getattr(mx.nd.image, 'random_' + op)
            arrays[f'{op}_{kind}'] = fn(source, factor, factor).asnumpy()
    np.savez_compressed(os.path.join(out, 'nd_image.npz'), **arrays)


def transform_outputs(out, root):
    """gluon.data.vision.transforms that draw nothing."""
    from mxnet.gluon.data.vision import transforms
    image = mx.image.imread(os.path.join(root, 'dog/e.png'))
    chain = transforms.Compose([transforms.Resize(30), transforms.CenterCrop((24, 20)),
                                transforms.ToTensor(),
                                transforms.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.4))])
    arrays = {'compose': chain(image).asnumpy(),
              'resize_pair': transforms.Resize((20, 26))(image).asnumpy(),
              'resize_keep': transforms.Resize(20, keep_ratio=True)(image).asnumpy(),
              'center_crop_big': transforms.CenterCrop(40)(image).asnumpy(),
              'cast': transforms.Cast('float16')(image).asnumpy()}
    np.savez_compressed(os.path.join(out, 'transforms.npz'), **arrays)


def write_mnist(out):
    """Ten 28x28 images and labels in MNIST's idx format, and MNISTIter's batches of them."""
    rng = np.random.default_rng(7)
    folder = os.path.join(out, 'mnist')
    os.makedirs(folder, exist_ok=True)
    images = rng.integers(0, 256, (10, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 10, dtype=np.uint8)
    with open(os.path.join(folder, 'images-idx3-ubyte'), 'wb') as f:
        f.write(np.array([2051, 10, 28, 28], '>i4').tobytes() + images.tobytes())
    with open(os.path.join(folder, 'labels-idx1-ubyte'), 'wb') as f:
        f.write(np.array([2049, 10], '>i4').tobytes() + labels.tobytes())
    arrays = {}
    for flat in (False, True):
        it = mx.io.MNISTIter(image=os.path.join(folder, 'images-idx3-ubyte'),
                             label=os.path.join(folder, 'labels-idx1-ubyte'), batch_size=4,
                             shuffle=False, flat=flat, silent=True)
        data, label, pad = batches(it)
        arrays.update({f'flat{int(flat)}_data': data, f'flat{int(flat)}_label': label,
                       f'flat{int(flat)}_pad': pad})
    np.savez_compressed(os.path.join(out, 'mnist_iter.npz'), **arrays)


def write_csv(out):
    """Ten rows of six numbers (and labels) as CSV, and CSVIter's batches of them."""
    folder = os.path.join(out, 'csv')
    os.makedirs(folder, exist_ok=True)
    data = np.arange(60, dtype=np.float32).reshape(10, 6) / 4
    np.savetxt(os.path.join(folder, 'data.csv'), data, delimiter=',', fmt='%g')
    np.savetxt(os.path.join(folder, 'label.csv'), np.arange(10) % 3, delimiter=',', fmt='%d')
    arrays = {}
    for round_batch in (True, False):
        it = mx.io.CSVIter(data_csv=os.path.join(folder, 'data.csv'), data_shape=(2, 3),
                           label_csv=os.path.join(folder, 'label.csv'), batch_size=4,
                           round_batch=round_batch)
        epochs = [batches(it)]
        it.reset()
        epochs.append(batches(it))
        for epoch, (values, label, pad) in enumerate(epochs):
            key = f'round{int(round_batch)}_epoch{epoch}'
            arrays.update({f'{key}_data': values, f'{key}_label': label, f'{key}_pad': pad})
    np.savez_compressed(os.path.join(out, 'csv_iter.npz'), **arrays)


def main(out):
    os.makedirs(out, exist_ok=True)
    root = write_images(out)
    write_records(out, root)
    write_packed(out, root)
    record_iter_outputs(out)
    image_function_outputs(out, root)
    nd_image_outputs(out, root)
    transform_outputs(out, root)
    write_mnist(out)
    write_csv(out)


if __name__ == '__main__':
    main(sys.argv[1])
