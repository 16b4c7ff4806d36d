"""Image datasets and transforms (MXNet 1.x's ``mx.gluon.data.vision``)."""
from ember.gluon.data.vision import transforms
from ember.gluon.data.vision.datasets import (CIFAR10, CIFAR100, MNIST, FashionMNIST,
                                              ImageFolderDataset, ImageListDataset,
                                              ImageRecordDataset)

__all__ = ['MNIST', 'FashionMNIST', 'CIFAR10', 'CIFAR100', 'ImageFolderDataset',
           'ImageRecordDataset', 'ImageListDataset', 'transforms', 'datasets']
