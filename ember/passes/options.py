"""What every graph pass is told: one frozen record, the second argument of each pass's
``run(graph, options) -> graph``.

The record is everything outside the graph that may change a pass's result (besides the
configuration variables each pass reads itself), so it is what a compiled graph is keyed by
beside the graph.

>>> options = Options(shapes={'x': (2, 3)}, grad_req={'w': 'write'})
>>> options.wants_gradients, Options().wants_gradients
(True, False)
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ['Options']


@dataclass(frozen=True)
class Options:
    """What the passes may read."""
    shapes: dict = field(default_factory=dict)      # variable name -> shape
    dtypes: dict = field(default_factory=dict)      # variable name -> dtype
    grad_req: dict = field(default_factory=dict)    # argument name -> 'write', 'add', 'null'
    # the graph runs in training: the rewrites for inference (folding, fusing into a
    # convolution) would lose gradients
    is_train: bool = False
    device: object = None                           # None: the CPU
    params: dict = field(default_factory=dict)      # variable name -> value, for folding

    @property
    def wants_gradients(self) -> bool:
        """Whether some argument's gradient is asked for."""
        return any(req != 'null' for req in self.grad_req.values())
