"""MXNet's ``mxnet.numpy.arrayprint``: ``set_printoptions``.

>>> from ember import numpy as np
>>> import numpy
>>> saved = numpy.get_printoptions()
>>> np.set_printoptions(precision=2)
>>> print(np.array([1.23456]))
[1.23]
>>> numpy.set_printoptions(**saved)
"""
from ember.numpy._op import set_printoptions

__all__ = ['set_printoptions']
