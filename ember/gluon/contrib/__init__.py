"""Contributed Gluon blocks (MXNet 1.x's ``mx.gluon.contrib``)."""
from ember.gluon.contrib import cnn, data, estimator, nn, rnn

__all__ = ['cnn', 'data', 'estimator', 'nn', 'rnn']
