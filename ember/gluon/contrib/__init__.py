"""Contributed Gluon blocks (MXNet 1.x's ``mx.gluon.contrib``)."""
from ember.gluon.contrib import nn, rnn

__all__ = ['nn', 'rnn']
