"""The process-wide budget of weights that inference layers keep between calls.

Winograd F(4x4) keeps its transformed weights (4x the weights) and the 1-D Winograd its own;
together they stay within :func:`kept_budget` (``TUNING.kept_budget``, or ``TUNING.kept_share``
of the largest graph's variables where that is more: :func:`note_graph`). A layer past it
transforms into scratch on every call. The packed weights of the 1x1 and GEMM kernels and the
scaled copies for the NumPy algorithms are the weights' own size and are not budgeted. When a
layer measures its algorithms, what the losers kept goes (:func:`discard_others`).

>>> kept_budget() >= tuning.TUNING.kept_budget
True
"""
from __future__ import annotations

from ember.backend import onednn
from ember.op.nn.conv import tuning
from ember.op.nn.conv.state import LINE, ONEDNN, PLAIN, STATE, TRANSFORMED

__all__ = ['kept_budget', 'note_graph', 'room_for', 'kept_bytes', 'plain_weight_bytes',
           'discard_others']

# the two stores that share the budget
_BUDGETED = (STATE.kept[TRANSFORMED], STATE.kept[LINE])


def kept_budget() -> int:
    """Bytes of transformed weights all layers may keep: ``TUNING.kept_budget``, or
    ``TUNING.kept_share`` of the largest graph's variables (:func:`note_graph`) where that
    is more."""
    t = tuning.TUNING
    return max(t.kept_budget, int(t.kept_share * STATE.largest_graph))


def note_graph(variable_bytes: int) -> None:
    """Counts a graph of `variable_bytes` (``KernelContext.variable_bytes``) that a
    convolution runs in towards :func:`kept_budget`."""
    if variable_bytes > STATE.largest_graph:
        STATE.largest_graph = variable_bytes


def room_for(store, nbytes) -> bool:
    """Whether `store` (one of the budgeted stores) may keep `nbytes` more: they share
    :func:`kept_budget`."""
    others = sum(other.nbytes() for other in _BUDGETED if other is not store)
    return store.has_room(nbytes, kept_budget() - others)


def kept_bytes() -> int:
    """Bytes of transformed and packed weights kept between calls."""
    return sum(store.nbytes() for name, store in STATE.kept.items() if name != PLAIN)


def plain_weight_bytes() -> int:
    """Bytes of scaled, contiguous weights kept for the NumPy algorithms."""
    return STATE.kept[PLAIN].nbytes()


def discard_others(weight_version, keep=None) -> None:
    """Forgets what the algorithms kept for `weight_version` (a weight token) but the store
    named `keep` (the chosen algorithm's ``kept_store``), oneDNN's reordered copy included:
    the losers of a measurement. The scaled copies go whatever the choice: the winner makes
    its own again if it needs one."""
    for name, store in STATE.kept.items():
        if name != keep:
            store.discard(weight_version)
    if keep != ONEDNN and weight_version is not None:
        onednn.discard_kept(weight_version)
