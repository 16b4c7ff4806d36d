"""``mx.autograd.get_symbol``: what autograd recorded, turned into a Symbol.

Importing this module installs the builder into :mod:`ember.autograd` (which sits below the
symbol layer and cannot import it).
"""
from __future__ import annotations

from ember import autograd
from ember.symbol.graph import attr_text_of
from ember.symbol.symbol import Symbol, SymbolNode

__all__ = ['from_tape']


def from_tape(steps, head) -> Symbol:
    """A Symbol from ``autograd.tape_of``'s steps: variables and operator nodes by name."""
    nodes = []
    for step in steps:
        if step[0] != 'op':
            nodes.append(SymbolNode(None, step[1]))
            continue
        _, name, op, attrs, inputs = step
        nodes.append(SymbolNode(op, name, dict(attrs), [(nodes[i], k) for i, k in inputs],
                                attr_text_of(op, attrs)))
    return Symbol([(nodes[head[0]], head[1])])


autograd._symbol_maker = from_tape
