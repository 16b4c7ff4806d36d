"""The graph executor: bind a symbol, run the passes, plan memory, push segments to the engine.

Importing this package attaches ``bind``, ``simple_bind`` and ``eval`` to ``mx.sym.Symbol``.
:mod:`ember.executor.pipeline` lists the passes in order; :mod:`ember.executor.program` turns a
planned graph into engine pushes; :class:`Executor` is MXNet 1.x's executor API.

>>> import ember as mx
>>> import ember.executor
>>> exe = mx.sym.relu(mx.sym.var('x')).simple_bind(mx.cpu(), x=(2,), grad_req='null')
>>> exe.forward(x=mx.nd.array([-1, 2]))[0].asnumpy()
array([0., 2.], dtype=float32)
"""
from ember.executor.executor import Executor
from ember.executor import bind as _bind  # noqa: F401  (attaches Symbol.bind and friends)
from ember.executor import pipeline
from ember.passes import gradient as _gradient
from ember.symbol import control_flow as _control_flow

# control-flow subgraphs differentiate their bodies with the gradient pass
_control_flow.set_gradient_pass(_gradient.with_gradients)

from ember.base import py_str  # noqa: E402,F401  (MXNet's mx.executor has these names)
from ember.ndarray import NDArray  # noqa: E402,F401

__all__ = ['Executor', 'pipeline', 'NDArray', 'py_str']
