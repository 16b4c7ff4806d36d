"""Scoring (inference) speed of image-classification networks through the Module API.

The structure of MXNet 1.x's ``example/image-classification/benchmark_score.py``: build each
network's symbol, bind a Module for inference, initialize it with Xavier, feed random data,
warm up, then time batches and log ``batch size N, dtype D, images/sec: X``. It uses only
MXNet 1.x's API, so it runs unchanged under ``import mxnet as mx`` for a side-by-side
comparison; the networks are written here with ``mx.sym`` after MXNet's
``example/image-classification/symbols`` (densenet121 and squeezenet1.1 come from the Gluon
model zoo, as in MXNet's script).

    PYTHONPATH=. python benchmarks/benchmark_score.py --network resnet-50 --batch-size 32
    PYTHONPATH=. python benchmarks/benchmark_score.py --network lenet --batch-size 8 \
        --num-batches 1 --device cpu
"""
import argparse
import logging
import time

import numpy as np

import ember as mx

logging.basicConfig(level=logging.DEBUG)

NETWORKS = ['alexnet', 'vgg-16', 'resnetv1-50', 'resnet-50', 'resnet-152', 'inception-bn',
            'mobilenet', 'densenet121', 'squeezenet1.1']
SMALL_NETWORKS = ['mlp', 'lenet']       # MNIST-sized; for smoke runs
FROM_GLUON = ['densenet121', 'squeezenet1.1']
NO_FLOAT16 = ['inception-bn', 'alexnet']


# ----------------------------------------------------------------------------------------------
# Network definitions (after MXNet's example/image-classification/symbols)

def conv_bn(data, num_filter, kernel, stride=(1, 1), pad=(0, 0), name='', act=True):
    """Convolution, BatchNorm and (optionally) ReLU."""
    conv = mx.sym.Convolution(data, num_filter=num_filter, kernel=kernel, stride=stride,
                              pad=pad, no_bias=True, name=f'{name}_conv')
    bn = mx.sym.BatchNorm(conv, fix_gamma=False, eps=2e-5, momentum=0.9, name=f'{name}_bn')
    return mx.sym.Activation(bn, act_type='relu', name=f'{name}_relu') if act else bn


def cast_input(data, dtype):
    return mx.sym.Cast(data, dtype=np.float16) if dtype == 'float16' else data


def classifier(body, num_classes, dtype):
    """Flatten, a fully connected layer of `num_classes`, softmax (in float32)."""
    fc = mx.sym.FullyConnected(mx.sym.Flatten(body), num_hidden=num_classes, name='fc1')
    if dtype == 'float16':
        fc = mx.sym.Cast(fc, dtype=np.float32)
    return mx.sym.SoftmaxOutput(fc, name='softmax')


def mlp(num_classes, **_):
    data = mx.sym.Flatten(mx.sym.var('data'))
    for i, hidden in enumerate((128, 64)):
        data = mx.sym.FullyConnected(data, num_hidden=hidden, name=f'fc{i + 1}')
        data = mx.sym.Activation(data, act_type='relu', name=f'relu{i + 1}')
    out = mx.sym.FullyConnected(data, num_hidden=num_classes, name='fc3')
    return mx.sym.SoftmaxOutput(out, name='softmax')


def lenet(num_classes, dtype='float32', **_):
    body = cast_input(mx.sym.var('data'), dtype)
    for i, filters in enumerate((20, 50)):
        body = mx.sym.Convolution(body, kernel=(5, 5), num_filter=filters, name=f'conv{i + 1}')
        body = mx.sym.Activation(body, act_type='tanh')
        body = mx.sym.Pooling(body, pool_type='max', kernel=(2, 2), stride=(2, 2))
    body = mx.sym.FullyConnected(mx.sym.Flatten(body), num_hidden=500, name='fc0')
    return classifier(mx.sym.Activation(body, act_type='tanh'), num_classes, dtype)


def alexnet(num_classes, dtype='float32', **_):
    body = cast_input(mx.sym.var('data'), dtype)
    stages = [(96, (11, 11), (4, 4), (0, 0), True), (256, (5, 5), (1, 1), (2, 2), True)]
    for i, (filters, kernel, stride, pad, lrn) in enumerate(stages):
        body = mx.sym.Convolution(body, kernel=kernel, stride=stride, pad=pad,
                                  num_filter=filters, name=f'conv{i + 1}')
        body = mx.sym.Activation(body, act_type='relu')
        if lrn:
            body = mx.sym.LRN(body, alpha=0.0001, beta=0.75, knorm=2, nsize=5)
        body = mx.sym.Pooling(body, kernel=(3, 3), stride=(2, 2), pool_type='max')
    for i, filters in enumerate((384, 384, 256)):
        body = mx.sym.Convolution(body, kernel=(3, 3), pad=(1, 1), num_filter=filters,
                                  name=f'conv{i + 3}')
        body = mx.sym.Activation(body, act_type='relu')
    body = mx.sym.Pooling(body, kernel=(3, 3), stride=(2, 2), pool_type='max')
    body = mx.sym.Flatten(body)
    for i in range(2):
        body = mx.sym.FullyConnected(body, num_hidden=4096, name=f'fc{i + 6}')
        body = mx.sym.Dropout(mx.sym.Activation(body, act_type='relu'), p=0.5)
    return classifier(body, num_classes, dtype)


VGG_SPEC = {11: [1, 1, 2, 2, 2], 13: [2, 2, 2, 2, 2], 16: [2, 2, 3, 3, 3], 19: [2, 2, 4, 4, 4]}


def vgg(num_classes, num_layers=16, dtype='float32', **_):
    body = cast_input(mx.sym.var('data'), dtype)
    for stage, (layers, filters) in enumerate(zip(VGG_SPEC[num_layers],
                                                  (64, 128, 256, 512, 512))):
        for j in range(layers):
            body = mx.sym.Convolution(body, kernel=(3, 3), pad=(1, 1), num_filter=filters,
                                      name=f'conv{stage + 1}_{j + 1}')
            body = mx.sym.Activation(body, act_type='relu')
        body = mx.sym.Pooling(body, pool_type='max', kernel=(2, 2), stride=(2, 2))
    body = mx.sym.Flatten(body)
    for i in range(2):
        body = mx.sym.FullyConnected(body, num_hidden=4096, name=f'fc{i + 6}')
        body = mx.sym.Dropout(mx.sym.Activation(body, act_type='relu'), p=0.5)
    return classifier(body, num_classes, dtype)


RESNET_UNITS = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3],
                152: [3, 8, 36, 3]}


def bottleneck_v2(data, filters, stride, shortcut_conv, name):
    """Pre-activation bottleneck (ResNet v2, MXNet's symbols/resnet.py)."""
    bn1 = mx.sym.BatchNorm(data, fix_gamma=False, eps=2e-5, momentum=0.9, name=f'{name}_bn1')
    act1 = mx.sym.Activation(bn1, act_type='relu', name=f'{name}_relu1')
    body = mx.sym.Convolution(act1, num_filter=filters // 4, kernel=(1, 1), no_bias=True,
                              name=f'{name}_conv1')
    body = conv_bn(body, filters // 4, (3, 3), stride, (1, 1), f'{name}_b2', act=False)
    body = mx.sym.Activation(body, act_type='relu')
    body = mx.sym.BatchNorm(body, fix_gamma=False, eps=2e-5, name=f'{name}_bn3')
    body = mx.sym.Activation(body, act_type='relu')
    body = mx.sym.Convolution(body, num_filter=filters, kernel=(1, 1), no_bias=True,
                              name=f'{name}_conv3')
    shortcut = (mx.sym.Convolution(act1, num_filter=filters, kernel=(1, 1), stride=stride,
                                   no_bias=True, name=f'{name}_sc') if shortcut_conv else data)
    return body + shortcut


def bottleneck_v1(data, filters, stride, shortcut_conv, name):
    """Post-activation bottleneck (ResNet v1, MXNet's symbols/resnetv1.py)."""
    body = conv_bn(data, filters // 4, (1, 1), (1, 1), (0, 0), f'{name}_b1')
    body = conv_bn(body, filters // 4, (3, 3), stride, (1, 1), f'{name}_b2')
    body = conv_bn(body, filters, (1, 1), (1, 1), (0, 0), f'{name}_b3', act=False)
    shortcut = (conv_bn(data, filters, (1, 1), stride, (0, 0), f'{name}_sc', act=False)
                if shortcut_conv else data)
    return mx.sym.Activation(body + shortcut, act_type='relu', name=f'{name}_relu')


def resnet(num_classes, num_layers=50, dtype='float32', version=2, **_):
    unit = bottleneck_v2 if version == 2 else bottleneck_v1
    body = cast_input(mx.sym.var('data'), dtype)
    if version == 2:
        body = mx.sym.BatchNorm(body, fix_gamma=True, eps=2e-5, momentum=0.9, name='bn_data')
    body = conv_bn(body, 64, (7, 7), (2, 2), (3, 3), 'stem')
    body = mx.sym.Pooling(body, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='max')
    for stage, (units, filters) in enumerate(zip(RESNET_UNITS[num_layers],
                                                 (256, 512, 1024, 2048))):
        stride = (1, 1) if stage == 0 else (2, 2)
        body = unit(body, filters, stride, True, f'stage{stage + 1}_unit1')
        for i in range(2, units + 1):
            body = unit(body, filters, (1, 1), False, f'stage{stage + 1}_unit{i}')
    if version == 2:
        body = mx.sym.Activation(mx.sym.BatchNorm(body, fix_gamma=False, eps=2e-5, name='bn1'),
                                 act_type='relu')
    body = mx.sym.Pooling(body, global_pool=True, kernel=(7, 7), pool_type='avg')
    return classifier(body, num_classes, dtype)


def inception_factory_a(data, num_1x1, num_3x3red, num_3x3, num_d3x3red, num_d3x3, pool,
                        proj, name):
    c1x1 = conv_bn(data, num_1x1, (1, 1), name=f'{name}_1x1')
    c3x3 = conv_bn(conv_bn(data, num_3x3red, (1, 1), name=f'{name}_3x3r'), num_3x3, (3, 3),
                   pad=(1, 1), name=f'{name}_3x3')
    cd3x3 = conv_bn(data, num_d3x3red, (1, 1), name=f'{name}_d3x3r')
    cd3x3 = conv_bn(cd3x3, num_d3x3, (3, 3), pad=(1, 1), name=f'{name}_d3x3a')
    cd3x3 = conv_bn(cd3x3, num_d3x3, (3, 3), pad=(1, 1), name=f'{name}_d3x3b')
    pooling = mx.sym.Pooling(data, kernel=(3, 3), stride=(1, 1), pad=(1, 1), pool_type=pool)
    cproj = conv_bn(pooling, proj, (1, 1), name=f'{name}_proj')
    return mx.sym.Concat(c1x1, c3x3, cd3x3, cproj, name=f'{name}_concat')


def inception_factory_b(data, num_3x3red, num_3x3, num_d3x3red, num_d3x3, name):
    c3x3 = conv_bn(conv_bn(data, num_3x3red, (1, 1), name=f'{name}_3x3r'), num_3x3, (3, 3),
                   stride=(2, 2), pad=(1, 1), name=f'{name}_3x3')
    cd3x3 = conv_bn(data, num_d3x3red, (1, 1), name=f'{name}_d3x3r')
    cd3x3 = conv_bn(cd3x3, num_d3x3, (3, 3), pad=(1, 1), name=f'{name}_d3x3a')
    cd3x3 = conv_bn(cd3x3, num_d3x3, (3, 3), stride=(2, 2), pad=(1, 1), name=f'{name}_d3x3b')
    pooling = mx.sym.Pooling(data, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type='max')
    return mx.sym.Concat(c3x3, cd3x3, pooling, name=f'{name}_concat')


def inception_bn(num_classes, dtype='float32', **_):
    body = conv_bn(mx.sym.var('data'), 64, (7, 7), (2, 2), (3, 3), 'conv1')
    body = mx.sym.Pooling(body, kernel=(3, 3), stride=(2, 2), pool_type='max')
    body = conv_bn(body, 64, (1, 1), name='conv2red')
    body = conv_bn(body, 192, (3, 3), pad=(1, 1), name='conv2')
    body = mx.sym.Pooling(body, kernel=(3, 3), stride=(2, 2), pool_type='max')
    body = inception_factory_a(body, 64, 64, 64, 64, 96, 'avg', 32, 'in3a')
    body = inception_factory_a(body, 64, 64, 96, 64, 96, 'avg', 64, 'in3b')
    body = inception_factory_b(body, 128, 160, 64, 96, 'in3c')
    for name, spec in (('in4a', (224, 64, 96, 96, 128, 'avg', 128)),
                       ('in4b', (192, 96, 128, 96, 128, 'avg', 128)),
                       ('in4c', (160, 128, 160, 128, 160, 'avg', 128)),
                       ('in4d', (96, 128, 192, 160, 192, 'avg', 128))):
        body = inception_factory_a(body, *spec, name)
    body = inception_factory_b(body, 128, 192, 192, 256, 'in4e')
    body = inception_factory_a(body, 352, 192, 320, 160, 224, 'avg', 128, 'in5a')
    body = inception_factory_a(body, 352, 192, 320, 192, 224, 'max', 128, 'in5b')
    body = mx.sym.Pooling(body, kernel=(7, 7), stride=(1, 1), global_pool=True, pool_type='avg')
    return classifier(body, num_classes, dtype)


MOBILENET_SPEC = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + \
    [(512, 1)] * 5 + [(1024, 2), (1024, 1)]


def mobilenet(num_classes, dtype='float32', alpha=1.0, **_):
    body = cast_input(mx.sym.var('data'), dtype)
    channels = int(32 * alpha)
    body = conv_bn(body, channels, (3, 3), (2, 2), (1, 1), 'conv1')
    for i, (filters, stride) in enumerate(MOBILENET_SPEC):
        dw = mx.sym.Convolution(body, num_filter=channels, num_group=channels, kernel=(3, 3),
                                stride=(stride, stride), pad=(1, 1), no_bias=True,
                                name=f'dw{i}_conv')
        dw = mx.sym.BatchNorm(dw, fix_gamma=False, eps=2e-5, name=f'dw{i}_bn')
        body = mx.sym.Activation(dw, act_type='relu')
        channels = int(filters * alpha)
        body = conv_bn(body, channels, (1, 1), name=f'pw{i}')
    body = mx.sym.Pooling(body, kernel=(7, 7), global_pool=True, pool_type='avg')
    return classifier(body, num_classes, dtype)


def from_gluon(network, num_classes, dtype='float32', **_):
    """A Gluon model-zoo network, traced into a symbol (as MXNet's script does)."""
    net = mx.gluon.model_zoo.vision.get_model(network, classes=num_classes)
    net.hybridize()
    if dtype == 'float16':
        net.cast(dtype)
    body = net(cast_input(mx.sym.var('data'), dtype))
    if dtype == 'float16':
        body = mx.sym.Cast(body, dtype=np.float32)
    return mx.sym.SoftmaxOutput(body, name='softmax')


def get_symbol(network, batch_size, dtype):
    """(symbol, data shapes) of `network` for batches of `batch_size`."""
    image_shape = (3, 224, 224)
    if network in SMALL_NETWORKS:
        image_shape = (1, 28, 28)
    num_classes = 10 if network in SMALL_NETWORKS else 1000
    if network in FROM_GLUON:
        sym = from_gluon(network, num_classes, dtype)
    else:
        name, _, layers = network.partition('-')
        builders = {'mlp': mlp, 'lenet': lenet, 'alexnet': alexnet, 'vgg': vgg,
                    'resnet': resnet, 'resnetv1': resnet, 'inception': inception_bn,
                    'mobilenet': mobilenet}
        kwargs = {'num_layers': int(layers)} if layers.isdigit() else {}
        if name == 'resnetv1':
            kwargs['version'] = 1
        sym = builders[name](num_classes=num_classes, dtype=dtype, **kwargs)
    return sym, [('data', (batch_size,) + image_shape)]


# ----------------------------------------------------------------------------------------------
# Scoring

def score(network, dev, batch_size, num_batches, dtype, dry_run=5):
    """Images per second of `network` on `dev` scoring random batches."""
    sym, data_shape = get_symbol(network, batch_size, dtype)
    mod = mx.mod.Module(symbol=sym, context=dev)
    mod.bind(for_training=False, inputs_need_grad=False, data_shapes=data_shape)
    mod.init_params(initializer=mx.init.Xavier(magnitude=2.))

    data = [mx.random.uniform(-1.0, 1.0, shape=shape, ctx=dev) for _, shape in mod.data_shapes]
    batch = mx.io.DataBatch(data, [])   # no label

    for i in range(dry_run + num_batches):
        if i == dry_run:
            tic = time.time()
        mod.forward(batch, is_train=False)
        for output in mod.get_outputs():
            output.wait_to_read()
    return num_batches * batch_size / (time.time() - tic)


def parse_args():
    parser = argparse.ArgumentParser(description='Benchmark the scoring speed of networks')
    parser.add_argument('--network', type=str, default='all',
                        choices=['all'] + NETWORKS + SMALL_NETWORKS)
    parser.add_argument('--batch-size', type=int, default=0,
                        help='batch size to use; by default 1, 32, 64, 128 and 256')
    parser.add_argument('--num-batches', type=int, default=10,
                        help='number of timed batches (after 5 warm-up batches)')
    parser.add_argument('--dry-run', type=int, default=5, help='number of warm-up batches')
    parser.add_argument('--device', type=str, default='all', choices=['all', 'cpu', 'gpu'],
                        help='the devices to run on (all: the GPU when there is one, and '
                             'the CPU)')
    parser.add_argument('--dtype', type=str, default='all',
                        choices=['all', 'float32', 'float16'])
    return parser.parse_args()


def devices(choice):
    devs = [mx.gpu(0)] if choice in ('all', 'gpu') and mx.context.num_gpus() > 0 else []
    if choice in ('all', 'cpu'):
        devs.append(mx.cpu())
    return devs


def main():
    args = parse_args()
    networks = NETWORKS if args.network == 'all' else [args.network]
    batch_sizes = [1, 32, 64, 128, 256] if args.batch_size == 0 else [args.batch_size]
    dtypes = ['float32', 'float16'] if args.dtype == 'all' else [args.dtype]
    for net in networks:
        logging.info('network: %s', net)
        if net in FROM_GLUON:
            logging.info('network: %s is converted from gluon modelzoo', net)
        for dev in devices(args.device):
            logging.info('device: %s', dev)
            for batch_size in batch_sizes:
                for dtype in dtypes:
                    if dev.device_type == 'cpu' and dtype == 'float16':
                        continue    # MXNet's CPU kernels have no float16; neither do we time it
                    if net in NO_FLOAT16 and dtype == 'float16':
                        logging.info('Model definition for %s does not support float16', net)
                        continue
                    speed = score(network=net, dev=dev, batch_size=batch_size,
                                  num_batches=args.num_batches, dtype=dtype,
                                  dry_run=args.dry_run)
                    logging.info('batch size %2d, dtype %s, images/sec: %f', batch_size, dtype,
                                 speed)


if __name__ == '__main__':
    main()
