"""``mx.gluon.contrib.data``: extra samplers (the text data sets, which download, are not
here)."""
from ember.gluon.contrib.data import sampler
from ember.gluon.contrib.data.sampler import IntervalSampler

__all__ = ['IntervalSampler', 'sampler']
