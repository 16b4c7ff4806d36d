"""Training with MXNet 1.x's symbolic API: a network built with ``mx.sym``, fed by an
``NDArrayIter`` and trained with ``mx.mod.Module.fit``, then evaluated, used to predict, saved
and loaded back.

Runs unchanged on MXNet 1.9.1 and on Ember (``python -m ember run examples/module_training.py``);
``examples/compare.py`` runs both and compares what they print. The weights start from NumPy's
seeded generator, and printed values are rounded, so both print the same.
"""
import logging
import os
import tempfile

import numpy as np

import mxnet as mx

logging.basicConfig(level=logging.WARNING)
rng = np.random.RandomState(7)

# Three classes of points in 4 dimensions.
centres = rng.normal(scale=2.0, size=(3, 4))
train_label = rng.randint(0, 3, 300)
train_data = centres[train_label] + rng.normal(size=(300, 4))
val_label = rng.randint(0, 3, 60)
val_data = centres[val_label] + rng.normal(size=(60, 4))
train_iter = mx.io.NDArrayIter(train_data, train_label, batch_size=30, shuffle=False)
val_iter = mx.io.NDArrayIter(val_data, val_label, batch_size=30)
print('batch:', [(d.name, d.shape) for d in train_iter.provide_data],
      [(d.name, d.shape) for d in train_iter.provide_label])

# The network: two fully-connected layers and a softmax output.
data = mx.sym.var('data')
hidden = mx.sym.FullyConnected(data, num_hidden=16, name='fc1')
hidden = mx.sym.Activation(hidden, act_type='tanh', name='tanh1')
scores = mx.sym.FullyConnected(hidden, num_hidden=3, name='fc2')
net = mx.sym.SoftmaxOutput(scores, name='softmax')
print('arguments:', net.list_arguments())
print('outputs:', net.list_outputs())
arg_shapes, out_shapes, _ = net.infer_shape(data=(30, 4))
print('shapes:', dict(zip(net.list_arguments(), arg_shapes)), out_shapes)

# Weights from NumPy, so that every framework starts from the same point.
start = {name: mx.nd.array(rng.uniform(-0.3, 0.3, shape))
         for name, shape in zip(net.list_arguments(), arg_shapes)
         if name not in ('data', 'softmax_label')}

module = mx.mod.Module(net, data_names=['data'], label_names=['softmax_label'],
                       context=mx.cpu())
history = []


def record_epoch(epoch, symbol, arg_params, aux_params):
    """After each epoch: accuracy on the validation set."""
    history.append(module.score(val_iter, 'acc')[0][1])
    print('epoch %d: validation accuracy %.3f' % (epoch, history[-1]))


module.fit(train_iter, eval_data=val_iter, eval_metric='acc', optimizer='sgd',
           optimizer_params={'learning_rate': 0.5, 'momentum': 0.9}, arg_params=start,
           num_epoch=6, epoch_end_callback=record_epoch)

for name, value in module.score(train_iter, ['acc', 'ce']):
    print('train %s %.3f' % (name, value))
probabilities = module.predict(val_iter)
print('predictions:', probabilities.shape, np.round(probabilities.asnumpy()[:3], 2).tolist())
print('first predicted classes:', probabilities.asnumpy()[:8].argmax(axis=1).tolist())
print('their labels:           ', val_label[:8].tolist())

# Save a checkpoint and load it into a new module for prediction.
prefix = os.path.join(tempfile.mkdtemp(), 'mlp')
module.save_checkpoint(prefix, 6)
symbol, arg_params, aux_params = mx.model.load_checkpoint(prefix, 6)
loaded = mx.mod.Module(symbol, label_names=['softmax_label'])
loaded.bind(data_shapes=val_iter.provide_data, label_shapes=val_iter.provide_label,
            for_training=False)
loaded.set_params(arg_params, aux_params)
print('loaded module agrees:', bool(np.allclose(loaded.predict(val_iter).asnumpy(),
                                                probabilities.asnumpy(), atol=1e-5)))
