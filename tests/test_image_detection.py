"""mx.image.detection beyond the runs checked against MXNet 1.9.1 in test_api_values ('image
detection augmenters', 'image detection iter', 'image rotations'): custom augmenters, label
shapes, drawing, and bad input."""
import random

import numpy as np
import pytest

import ember as mx
from data_files import IMAGE_FIXTURES

IMAGES = str(IMAGE_FIXTURES / 'images')
BOXES = [[0, 0.1, 0.2, 0.5, 0.7], [1, 0.4, 0.1, 0.9, 0.6]]


def _imglist(counts):
    names = ['cat/a.png', 'cat/b.png', 'dog/d.png']
    return [[[2, 5] + sum(BOXES[:count], []), name] for count, name in zip(counts, names)]


class Shrink(mx.image.Augmenter):
    """A user's image augmenter: halve the image."""

    def __call__(self, src):
        return mx.image.imresize(src, src.shape[1] // 2, src.shape[0] // 2)


class DropLastBox(mx.image.det.DetAugmenter):
    """A user's detection augmenter: forget the last box."""

    def __call__(self, src, label):
        return src, label[:-1] if len(label) > 1 else label


def test_custom_augmenters_run_in_the_iterator():
    augs = [mx.image.det.DetBorrowAug(Shrink()), DropLastBox(),
            mx.image.det.DetBorrowAug(mx.image.ForceResizeAug((16, 16))),
            mx.image.det.DetBorrowAug(mx.image.CastAug())]
    it = mx.image.ImageDetIter(2, (3, 16, 16), imglist=_imglist([2, 1, 2]), path_root=IMAGES,
                               aug_list=augs)
    assert it.label_shape == (2, 5)
    batch = next(it)
    label = batch.label[0].asnumpy()
    assert batch.data[0].shape == (2, 3, 16, 16) and label.shape == (2, 2, 5)
    np.testing.assert_allclose(label[0], [BOXES[0], [-1] * 5], rtol=1e-6)
    assert DropLastBox(size=3).dumps() == '["droplastbox", {"size": 3}]'


def test_reshape_and_sync_label_shape():
    two = mx.image.ImageDetIter(1, (3, 8, 8), imglist=_imglist([2, 1, 1]), path_root=IMAGES)
    one = mx.image.ImageDetIter(1, (3, 8, 8), imglist=_imglist([1, 1, 1]), path_root=IMAGES)
    assert (two.label_shape, one.label_shape) == ((2, 5), (1, 5))
    assert two.sync_label_shape(one) is one and one.label_shape == (2, 5)
    assert next(one).label[0].shape == (1, 2, 5)
    one.reshape(label_shape=(4, 5))
    assert next(one).label[0].shape == (1, 4, 5)
    one.reshape(data_shape=(3, 10, 12))         # the augmenters then need to give that size
    assert one.provide_data[0][1] == (1, 3, 10, 12)
    with pytest.raises(ValueError, match='fewer objects'):
        one.reshape(label_shape=(1, 5))
    with pytest.raises(ValueError, match='width 5, not 6'):
        one.reshape(label_shape=(4, 6))


def test_draw_next_draws_the_boxes():
    it = mx.image.ImageDetIter(1, (3, 20, 20), imglist=_imglist([1, 2, 1]), path_root=IMAGES)
    images = list(it.draw_next(color=(255, 0, 0), thickness=1))
    assert len(images) == 3 and images[0].shape == (20, 20, 3) and images[0].dtype == np.uint8
    box = np.array(BOXES[0][1:]) * 20
    x1, y1 = int(box[0]), int(box[1])
    assert images[0][y1, x1].tolist() == [0, 0, 255]          # BGR: the red box's corner


def test_bad_labels_and_augmenters_are_named():
    with pytest.raises(RuntimeError, match='at least 7 values'):
        mx.image.ImageDetIter._parse_label(np.array([2, 5, 0, 0.1]))
    with pytest.raises(RuntimeError, match='objects of width 5'):
        mx.image.ImageDetIter._parse_label(np.array([2, 5] + BOXES[0] + [0.3]))
    with pytest.raises(RuntimeError, match='no valid box'):
        mx.image.ImageDetIter._parse_label(np.array([2, 5, 0, 0.5, 0.5, 0.4, 0.9]))
    with pytest.raises(TypeError, match='mx.image.Augmenter'):
        mx.image.det.DetBorrowAug(DropLastBox())
    with pytest.raises(ValueError, match='DetAugmenters only'):
        mx.image.det.DetRandomSelectAug([Shrink()])
    with pytest.warns(UserWarning, match='is off'):
        assert not mx.image.det.DetRandomCropAug(area_range=(0.5, 0.2)).enabled
    with pytest.raises(ValueError, match='mean must be True'):
        mx.image.CreateDetAugmenter((3, 8, 8), mean=[1, 2, 3])


def test_random_select_can_skip_and_crops_keep_enough_of_each_box():
    random.seed(1)
    image = mx.nd.zeros((40, 50, 3), dtype='uint8')
    label = np.array(BOXES)
    skip = mx.image.det.DetRandomSelectAug([mx.image.det.DetHorizontalFlipAug(1.0)], 1.0)
    assert skip(image, label.copy())[1].tolist() == BOXES
    crop = mx.image.det.DetRandomCropAug(min_object_covered=0.5, min_eject_coverage=0.5)
    for _ in range(5):
        src, boxes = crop(image, label.copy())
        assert src.shape[2] == 3 and boxes.shape[1] == 5
        assert (boxes[:, 1:] >= 0).all() and (boxes[:, 1:] <= 1).all()
