"""Datasets, samplers and the DataLoader (``mx.gluon.data``), as in MXNet 1.x."""
from ember.gluon.data.dataloader import DataLoader, default_batchify_fn, default_mp_batchify_fn
from ember.gluon.data.dataset import ArrayDataset, Dataset, SimpleDataset
from ember.gluon.data.sampler import (BatchSampler, IntervalSampler, RandomSampler, Sampler,
                                      SequentialSampler)

__all__ = ['Dataset', 'SimpleDataset', 'ArrayDataset', 'DataLoader', 'default_batchify_fn',
           'default_mp_batchify_fn', 'Sampler', 'SequentialSampler', 'RandomSampler',
           'BatchSampler', 'IntervalSampler', 'dataloader', 'dataset', 'sampler']
