"""Sentences as bucketed batches for the symbolic RNNs (MXNet's ``mx.rnn.io``).

>>> sentences, vocab = encode_sentences([['a', 'b'], ['b', 'c', 'a']], start_label=1)
>>> sentences, sorted(vocab.items())
([[1, 2], [2, 3, 1]], [('\\n', -1), ('a', 1), ('b', 2), ('c', 3)])
"""
from __future__ import annotations

import bisect
import logging
import random

import numpy as np

from ember import ndarray
from ember.io import DataBatch, DataDesc, DataIter

__all__ = ['encode_sentences', 'BucketSentenceIter', 'DataBatch', 'DataDesc', 'DataIter']


def encode_sentences(sentences, vocab=None, invalid_label=-1, invalid_key='\n', start_label=0,
                     unknown_token=None):
    """Sentences (lists of words) as lists of ids, and the vocabulary (word -> id). A new
    vocabulary numbers words from `start_label`, skipping `invalid_label` (given to
    `invalid_key`); with a given one, an unknown word is an error unless `unknown_token`
    names the word that stands for it (every unknown word gets that word's one id; MXNet
    1.9.1 gave the token a new id at each unknown word)."""
    new_vocab = vocab is None
    vocab = {invalid_key: invalid_label} if new_vocab else vocab
    next_id, encoded = start_label, []
    for sentence in sentences:
        ids = []
        for word in sentence:
            if word not in vocab:
                if not new_vocab and not unknown_token:
                    raise KeyError(f'encode_sentences: unknown word {word!r}; give '
                                   'unknown_token to stand for words not in the vocabulary')
                if next_id == invalid_label:
                    next_id += 1
                word = unknown_token or word
                if word not in vocab:
                    vocab[word] = next_id
                    next_id += 1
            ids.append(vocab[word])
        encoded.append(ids)
    return encoded, vocab


class BucketSentenceIter(DataIter):
    """Batches of sentences of similar length for a BucketingModule: each sentence goes to
    the smallest bucket (length) that holds it, padded with `invalid_label`; the label is
    the sentence shifted by one word. Batches come from the buckets in random order (Python's
    ``random``; within a bucket, NumPy's). Sentences longer than every bucket are dropped.
    `layout` 'NT' gives (batch, time) batches, 'TN' (time, batch).

    >>> it = BucketSentenceIter([[1, 2], [3, 4], [5, 6, 7]], batch_size=2, buckets=[2, 3])
    >>> batch = next(it)
    >>> batch.bucket_key, batch.data[0].shape, it.default_bucket_key
    (2, (2, 2), 3)
    """

    def __init__(self, sentences, batch_size, buckets=None, invalid_label=-1, data_name='data',
                 label_name='softmax_label', dtype='float32', layout='NT'):
        super().__init__(batch_size)
        if layout not in ('NT', 'TN'):
            raise ValueError(f"BucketSentenceIter: layout={layout!r}: expected 'NT' (batch "
                             "major) or 'TN' (time major)")
        if not buckets:
            counts = np.bincount([len(s) for s in sentences])
            buckets = [length for length, count in enumerate(counts) if count >= batch_size]
        self.buckets, self.data = self._fill(sorted(buckets), sentences, invalid_label, dtype)
        self.data_name, self.label_name = data_name, label_name
        self.dtype, self.invalid_label, self.layout = dtype, invalid_label, layout
        self.major_axis = layout.find('N')
        self.default_bucket_key = max(self.buckets)
        shape = self._shape(batch_size, self.default_bucket_key)
        self.provide_data = [DataDesc(name=data_name, shape=shape, layout=layout)]
        self.provide_label = [DataDesc(name=label_name, shape=shape, layout=layout)]
        self.idx = [(i, j) for i, bucket in enumerate(self.data)
                    for j in range(0, len(bucket) - batch_size + 1, batch_size)]
        self.curr_idx = 0
        self.nddata, self.ndlabel = [], []
        self.reset()

    @staticmethod
    def _fill(buckets, sentences, invalid_label, dtype):
        rows = [[] for _ in buckets]
        dropped = 0
        for sentence in sentences:
            index = bisect.bisect_left(buckets, len(sentence))
            if index == len(buckets):
                dropped += 1
                continue
            row = np.full((buckets[index],), invalid_label, dtype=dtype)
            row[:len(sentence)] = sentence
            rows[index].append(row)
        if dropped:
            logging.warning('BucketSentenceIter: dropped %d sentences longer than the largest '
                            'bucket', dropped)
        kept = [i for i, bucket_rows in enumerate(rows) if bucket_rows]
        return ([buckets[i] for i in kept],
                [np.asarray(rows[i], dtype=dtype) for i in kept])

    def _shape(self, batch, length):
        return (batch, length) if self.major_axis == 0 else (length, batch)

    def reset(self):
        self.curr_idx = 0
        random.shuffle(self.idx)
        for bucket in self.data:
            np.random.shuffle(bucket)
        self.nddata, self.ndlabel = [], []
        for bucket in self.data:
            label = np.empty_like(bucket)
            label[:, :-1] = bucket[:, 1:]
            label[:, -1] = self.invalid_label
            self.nddata.append(ndarray.array(bucket, dtype=self.dtype))
            self.ndlabel.append(ndarray.array(label, dtype=self.dtype))

    def next(self):
        if self.curr_idx == len(self.idx):
            raise StopIteration
        i, j = self.idx[self.curr_idx]
        self.curr_idx += 1
        data = self.nddata[i][j:j + self.batch_size]
        label = self.ndlabel[i][j:j + self.batch_size]
        if self.major_axis == 1:
            data, label = data.T, label.T
        return DataBatch([data], [label], pad=0, bucket_key=self.buckets[i],
                         provide_data=[DataDesc(name=self.data_name, shape=data.shape,
                                                layout=self.layout)],
                         provide_label=[DataDesc(name=self.label_name, shape=label.shape,
                                                 layout=self.layout)])
