"""A single-shot detector (SSD) head in the style of MXNet's Gluon tutorials.

Two feature maps of a small convolutional body each get anchors (MultiBoxPrior), a class
predictor and a box predictor. Training matches anchors to the ground truth with hard negative
mining (MultiBoxTarget) and minimises softmax cross-entropy plus an L1 box loss; inference
decodes the boxes and suppresses overlaps (MultiBoxDetection), then keeps the best few of
each image with box_nms.

Everything is deterministic (weights and data come from NumPy's seeded generator) and printed
rounded, so the script prints the same lines under MXNet 1.9.1 and under Ember:

    python examples/ssd_head.py
"""
import numpy as np

try:
    import mxnet as mx
except ImportError:          # Ember implements MXNet 1.x's API
    import ember as mx

nn = mx.gluon.nn

NUM_CLASSES = 2
SIZES = [[0.2, 0.272], [0.37, 0.447]]
RATIOS = [[1, 2, 0.5]] * 2
ANCHORS_PER_CELL = len(SIZES[0]) + len(RATIOS[0]) - 1


def class_predictor():
    return nn.Conv2D(ANCHORS_PER_CELL * (NUM_CLASSES + 1), kernel_size=3, padding=1)


def box_predictor():
    return nn.Conv2D(ANCHORS_PER_CELL * 4, kernel_size=3, padding=1)


def flatten_prediction(F, pred):
    return F.flatten(F.transpose(pred, axes=(0, 2, 3, 1)))


class TinySSD(mx.gluon.HybridBlock):
    """A body of two convolutions and one prediction head per feature map."""

    def __init__(self, **kwargs):
        super(TinySSD, self).__init__(**kwargs)
        with self.name_scope():
            self.stage1 = nn.HybridSequential()
            self.stage1.add(nn.Conv2D(8, kernel_size=3, padding=1, activation='relu'),
                            nn.MaxPool2D(2))
            self.stage2 = nn.HybridSequential()
            self.stage2.add(nn.Conv2D(8, kernel_size=3, padding=1, strides=2,
                                      activation='relu'))
            self.class_heads = nn.HybridSequential()
            self.box_heads = nn.HybridSequential()
            for _ in range(2):
                self.class_heads.add(class_predictor())
                self.box_heads.add(box_predictor())

    def hybrid_forward(self, F, x):
        anchors, classes, boxes = [], [], []
        for i, stage in enumerate([self.stage1, self.stage2]):
            x = stage(x)
            anchors.append(F.contrib.MultiBoxPrior(x, sizes=SIZES[i], ratios=RATIOS[i]))
            classes.append(flatten_prediction(F, self.class_heads[i](x)))
            boxes.append(flatten_prediction(F, self.box_heads[i](x)))
        anchors = F.concat(*anchors, dim=1)
        classes = F.reshape(F.concat(*classes, dim=1), shape=(0, -1, NUM_CLASSES + 1))
        return anchors, classes, F.concat(*boxes, dim=1)


def set_weights(net, rng):
    """Deterministic weights: the same numbers whatever framework runs the script."""
    params = net.collect_params()
    for name in sorted(params.keys()):
        param = params[name]
        scale = 0.0 if name.endswith('bias') else 0.2
        param.set_data(mx.nd.array(rng.normal(0, scale, param.shape).astype('float32')))


def make_batch(rng):
    images = rng.uniform(0, 1, (2, 3, 32, 32)).astype('float32')
    labels = np.array([[[0, 0.10, 0.15, 0.45, 0.50], [1, 0.55, 0.50, 0.90, 0.95]],
                       [[1, 0.20, 0.20, 0.60, 0.70], [-1, -1, -1, -1, -1]]], dtype='float32')
    return mx.nd.array(images), mx.nd.array(labels)


def show(title, rows, digits=3):
    print(title)
    for row in rows:
        print('  ' + ' '.join('%.*f' % (digits, v) for v in row))


def main():
    rng = np.random.RandomState(0)
    net = TinySSD()
    net.initialize()
    images, labels = make_batch(rng)
    net(images)                                   # shapes of the deferred parameters
    set_weights(net, rng)
    net.hybridize()

    anchors, classes, boxes = net(images)
    print('anchors', anchors.shape, 'class predictions', classes.shape,
          'box predictions', boxes.shape)
    show('first anchors', anchors[0, :3].asnumpy())

    class_loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    box_loss = mx.gluon.loss.L1Loss()
    trainer = mx.gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.2})
    for step in range(4):
        with mx.autograd.record():
            anchors, classes, boxes = net(images)
            box_target, box_mask, class_target = mx.nd.contrib.MultiBoxTarget(
                anchors, labels, classes.transpose((0, 2, 1)), negative_mining_ratio=3)
            loss = class_loss(classes, class_target) + box_loss(boxes * box_mask,
                                                                box_target * box_mask)
        loss.backward()
        trainer.step(images.shape[0])
        positives = (class_target > 0).sum(axis=1).asnumpy()
        negatives = (class_target == 0).sum(axis=1).asnumpy()
        print('step %d loss %.3f positives %s negatives %s' % (
            step, loss.mean().asscalar(), positives.astype(int).tolist(),
            negatives.astype(int).tolist()))

    anchors, classes, boxes = net(images)
    probabilities = mx.nd.softmax(classes).transpose((0, 2, 1))
    detections = mx.nd.contrib.MultiBoxDetection(probabilities, boxes, anchors,
                                                 nms_threshold=0.45, threshold=0.3)
    kept = mx.nd.contrib.box_nms(detections, overlap_thresh=0.3, topk=20, coord_start=2,
                                 score_index=1, id_index=0, force_suppress=True)
    for image in range(2):
        rows = kept[image].asnumpy()
        rows = rows[rows[:, 0] >= 0][:3]
        show('image %d: best detections (class, score, box)' % image, rows)
        valid = detections[image].asnumpy()
        print('  detections above threshold: %d' % int((valid[:, 0] >= 0).sum()))
    overlaps = mx.nd.contrib.box_iou(labels[0, :, 1:], kept[0, :2, 2:])
    show('IoU of image 0 labels with its best two boxes', overlaps.asnumpy())


if __name__ == '__main__':
    main()
