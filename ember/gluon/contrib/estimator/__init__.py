"""``mx.gluon.contrib.estimator``: MXNet 1.x's Estimator, a training loop with event handlers.

>>> import numpy as np, ember as mx
>>> from ember.gluon.contrib.estimator import Estimator
>>> x = np.random.default_rng(0).normal(size=(32, 3)).astype('float32')
>>> y = (x @ np.array([1.0, -2.0, 0.5], 'float32'))[:, None]
>>> loader = mx.gluon.data.DataLoader(mx.gluon.data.ArrayDataset(x, y), batch_size=8)
>>> net = mx.gluon.nn.Dense(1)
>>> est = Estimator(net, mx.gluon.loss.L2Loss(),
...                 trainer=mx.gluon.Trainer(net.collect_params(), 'sgd',
...                                          {'learning_rate': 0.2}))
>>> est.logger.setLevel('WARNING')
>>> est.fit(loader, epochs=20)
>>> est.train_metrics[0].get()[1] < 0.01
True
"""
from ember.gluon.contrib.estimator import batch_processor, estimator, event_handler, utils
from ember.gluon.contrib.estimator.batch_processor import *  # noqa: F401,F403
from ember.gluon.contrib.estimator.estimator import *  # noqa: F401,F403
from ember.gluon.contrib.estimator.event_handler import *  # noqa: F401,F403

__all__ = (estimator.__all__ + event_handler.__all__ + batch_processor.__all__
           + ['batch_processor', 'estimator', 'event_handler', 'utils'])
