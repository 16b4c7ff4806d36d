"""What the convolution subsystem remembers between calls, process-wide, in one object.

:data:`STATE` holds the measured choices (:class:`~ember.op.nn.conv.choices.Choices`), the
arrays derived from inference layers' weights, kept per weight token (:class:`KeptByToken`,
one store per kind: :data:`STORES`), and the size of the largest graph a convolution ran in
(which sizes the budget of kept weights, :mod:`ember.op.nn.conv.kept`). ``STATE.reset()``
forgets all of it; it runs when a start-up variable of the operators is overridden
(``config.register_reset('op', ...)``). Everything else in the subsystem is a pure function of
its arguments (and of :mod:`ember.op.nn.conv.tuning`).

>>> STATE.kept[PACKED] is STATE.kept[PACKED], sorted(STATE.kept) == sorted(STORES)
(True, True)
"""
from __future__ import annotations

import threading
import weakref

from ember import config
from ember.op.nn.conv.choices import Choices

__all__ = ['KeptByToken', 'ConvState', 'STATE', 'STORES', 'TRANSFORMED', 'PACKED', 'LINE',
           'PLAIN', 'ONEDNN']

# The stores of kept arrays, by what they hold (an Algorithm's `kept_store` names one):
TRANSFORMED = 'transformed'     # Winograd F(4x4)'s transformed, packed weights
PACKED = 'packed'               # weights packed in panels for the compiled products (1x1, GEMM)
LINE = 'line'                   # the 1-D Winograd's transformed, packed weights
PLAIN = 'plain'                 # scaled, contiguous weights for the NumPy algorithms
STORES = (TRANSFORMED, PACKED, LINE, PLAIN)
# oneDNN's reordered weights, kept by the backend (ember.backend.onednn), not here
ONEDNN = 'onednn'


class KeptByToken:
    """Arrays derived from a convolution's weight in inference (a scaled contiguous copy,
    Winograd's transformed weights), kept per weight token ``((engine variable, version),
    ...)`` of the arrays the weight is made from: an array is handed out while those variables
    live and their versions stay; arrays of variables that are gone make room for new ones.

    >>> import numpy as np
    >>> from ember import engine
    >>> kept, var = KeptByToken(), engine.get().new_var()
    >>> kept.get(((var, 0),), lambda: np.ones(2)).sum(), kept.get(((var, 0),)) is not None
    (np.float64(2.0), True)
    >>> kept.get(((var, 1),)) is None          # a new version: the old array is stale
    True
    """

    def __init__(self):
        self.entries: dict = {}     # variables' ids -> (weak references, versions, array)
        self.lock = threading.Lock()

    def get(self, token, make=None):
        """The array kept for `token`; else `make()` kept for it (returned as is when
        `token` is None), or None without `make`."""
        if token is not None:
            key, versions = self._key(token), tuple(version for _, version in token)
            with self.lock:
                entry = self.entries.get(key)
            if entry is not None and entry[1] == versions \
                    and all(ref() is var for ref, (var, _) in zip(entry[0], token)):
                return entry[2]
        if make is None:
            return None
        array = make()
        if token is not None:
            self.keep(token, array)
        return array

    def keep(self, token, array):
        with self.lock:
            self._drop_dead()
            self.entries[self._key(token)] = (tuple(weakref.ref(var) for var, _ in token),
                                              tuple(version for _, version in token), array)

    def has_room(self, nbytes, budget) -> bool:
        """Whether `nbytes` more stay within `budget` bytes."""
        with self.lock:
            self._drop_dead()
            return sum(e[2].nbytes for e in self.entries.values()) + nbytes <= budget

    def discard(self, token):
        if token is not None:
            with self.lock:
                self.entries.pop(self._key(token), None)

    def nbytes(self) -> int:
        with self.lock:
            return sum(e[2].nbytes for e in self.entries.values())

    def clear(self):
        with self.lock:
            self.entries.clear()

    @staticmethod
    def _key(token):
        return tuple(id(var) for var, _ in token)

    def _drop_dead(self):
        for key in [k for k, e in self.entries.items() if any(r() is None for r in e[0])]:
            del self.entries[key]


class ConvState:
    """The subsystem's memory: `choices`, `kept` (store name -> :class:`KeptByToken`) and
    `largest_graph` (bytes of variables). The stores and the choices are never replaced,
    only cleared, so a module may hold on to one."""

    def __init__(self):
        self.choices = Choices()
        self.kept = {name: KeptByToken() for name in STORES}
        self.largest_graph = 0

    def reset(self) -> None:
        """Forget the choices, every kept array and the graphs seen."""
        self.choices.clear()
        for store in self.kept.values():
            store.clear()
        self.largest_graph = 0


STATE = ConvState()

config.register_reset('op', STATE.reset)
