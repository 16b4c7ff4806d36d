"""Contributed Gluon blocks (MXNet 1.x's ``mx.gluon.contrib``)."""
from ember.gluon.contrib import estimator, nn, rnn

__all__ = ['estimator', 'nn', 'rnn']
