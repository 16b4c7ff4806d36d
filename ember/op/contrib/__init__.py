"""MXNet's contrib operators (registered as ``_contrib_*``, exposed as ``mx.nd.contrib``), one
module per family; importing the package registers them."""
from ember.op.contrib import (  # noqa: F401  (registration side effects)
    attention, deformable, detection, graph, hawkes, proposal, resize, roi, sync_batch_norm,
    tensor)
