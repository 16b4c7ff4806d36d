"""The artefact of a compilation: the optimised graph (with its shapes, dtypes, memory plan,
segments, gradient split and the recipe of its folded parameters), the algorithm chosen for
each measured convolution, and what sized the measurement. It holds no parameter values:
whoever binds it gives the folded variables their values (:func:`bind_folded`).

Artefacts are pickled with operators written by name and read back with an unpickler that
builds only Ember's, NumPy's and a few built-in classes.

>>> import numpy as np
>>> from ember import symbol as sym
>>> from ember.executor import pipeline
>>> g = pipeline.compile_graph(sym.relu(sym.var('x')).to_graph(), {'x': (2,)},
...                            {'x': np.float32})
>>> again = loads(dumps(Artefact(g, [], 0)))
>>> [n.op.name for n in again.graph.nodes if n.op], again.graph.attrs['memory_plan'] == \\
...     g.attrs['memory_plan']
(['relu'], True)
"""
from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field

from ember.base import EmberError
from ember.op import registry
from ember.passes.fold_batch_norm import Folded

__all__ = ['Artefact', 'FoldPlan', 'dumps', 'loads', 'bind_folded', 'CorruptArtefact']


class CorruptArtefact(EmberError):
    """An artefact's bytes do not make an artefact (a partial write, another format)."""


@dataclass(frozen=True)
class FoldPlan:
    """A graph's folded variables without values: their sources and the refold recipe."""
    sources: tuple
    refold: object


@dataclass(frozen=True)
class Artefact:
    """`graph`: the compiled graph ('folded' as a :class:`FoldPlan`); `choices`: the
    convolution choices measured while compiling (``Choices.export`` form); `largest_graph`:
    the bytes of variables measurement assumed (the kept-weight budget depends on it)."""
    graph: object
    choices: list
    largest_graph: int
    info: dict = field(default_factory=dict)

    @classmethod
    def of(cls, graph, choices, largest_graph, info=None) -> 'Artefact':
        """An artefact of compiled `graph` whose 'folded' attribute may hold values."""
        return cls(_without_values(graph), list(choices), int(largest_graph), dict(info or {}))


def _without_values(graph):
    folded = graph.attrs.get('folded')
    if not isinstance(folded, Folded):
        return graph
    return graph.replace(attrs={**graph.attrs, 'folded': FoldPlan(folded.sources,
                                                                  folded.refold)})


def bind_folded(graph, params):
    """`graph` whose folded variables take their values from `params` (name -> array)."""
    plan = graph.attrs.get('folded')
    if not isinstance(plan, FoldPlan):
        return graph
    folded = Folded(plan.refold(params), plan.sources, plan.refold, params)
    return graph.replace(attrs={**graph.attrs, 'folded': folded})


# ----------------------------------------------------------------------------------------------

class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, registry.OpDef):
            return ('op', obj.name)
        return None


# module prefixes whose classes an artefact may hold
_ALLOWED = ('ember.', 'numpy', 'ml_dtypes', 'collections')
_BUILTINS = frozenset({'frozenset', 'set', 'tuple', 'list', 'dict', 'slice', 'complex',
                       'bytearray', 'range'})


class _Unpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        kind, name = pid
        if kind != 'op':
            raise CorruptArtefact(f'artefact: unknown reference {pid!r}')
        return registry.get(name)

    def find_class(self, module, name):
        if module == 'builtins' and name in _BUILTINS:
            return super().find_class(module, name)
        if module.startswith(_ALLOWED):
            return super().find_class(module, name)
        raise CorruptArtefact(f'artefact: refusing to build {module}.{name}')


def dumps(artefact) -> bytes:
    """Pickled `artefact` (or another object of Ember's), operators by name."""
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(artefact)
    return buffer.getvalue()


def loads(data: bytes, expected=Artefact):
    """The object pickled in `data` by :func:`dumps`, which must be an `expected`."""
    try:
        found = _Unpickler(io.BytesIO(data)).load()
    except CorruptArtefact:
        raise
    except Exception as exc:   # noqa: BLE001 - any failure to unpickle is a corrupt entry
        raise CorruptArtefact(f'artefact: cannot be read ({type(exc).__name__}: {exc})') \
            from None
    if not isinstance(found, expected):
        raise CorruptArtefact(f'artefact: holds a {type(found).__name__}, not a '
                              f'{expected.__name__}')
    return found
