"""Datasets, samplers and the DataLoader (``mx.gluon.data``), as in MXNet 1.x; image
datasets and transforms in ``mx.gluon.data.vision``."""
from ember.gluon.data.dataloader import DataLoader, default_batchify_fn, default_mp_batchify_fn
from ember.gluon.data.dataset import ArrayDataset, Dataset, RecordFileDataset, SimpleDataset
from ember.gluon.data.sampler import (BatchSampler, FilterSampler, IntervalSampler,
                                      RandomSampler, Sampler, SequentialSampler)
from ember.gluon.data import vision

__all__ = ['Dataset', 'SimpleDataset', 'ArrayDataset', 'RecordFileDataset', 'DataLoader',
           'default_batchify_fn', 'default_mp_batchify_fn', 'Sampler', 'SequentialSampler',
           'RandomSampler', 'BatchSampler', 'IntervalSampler', 'FilterSampler', 'vision',
           'dataloader', 'dataset', 'sampler']
