"""Neural-network operators, one module per family; importing the package registers them.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('FullyConnected')
>>> attrs = op.parse_attrs({'num_hidden': 2})
>>> op.infer_shape(attrs, [(4, 3), None, None])
([(4, 3), (2, 3), (2,)], [(4, 2)])
"""
from ember.op.nn import (  # noqa: F401  (registration side effects)
    activation, bn_apply, conv, ctc, dropout, elemwise_math, fully_connected, loss, misc,
    normalization, pooling, rnn, softmax, sorting, sync_batchnorm)
