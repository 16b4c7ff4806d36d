"""Counting tokens in a string.

>>> sorted(count_tokens_from_str('a b c\\nb c c\\nA').items())
[('A', 1), ('a', 1), ('b', 2), ('c', 3)]
"""
from __future__ import annotations

import collections
import re

__all__ = ['count_tokens_from_str']


def count_tokens_from_str(source_str, token_delim=' ', seq_delim='\n', to_lower=False,
                          counter_to_update=None):
    """A ``collections.Counter`` of the tokens of `source_str` (split at `token_delim` and
    `seq_delim`, empty tokens dropped, lower-cased with `to_lower`), added to
    `counter_to_update` when given (and returned)."""
    pattern = re.escape(token_delim) + '|' + re.escape(seq_delim)
    tokens = [t for t in re.split(pattern, source_str) if t]
    if to_lower:
        tokens = [t.lower() for t in tokens]
    counter = collections.Counter() if counter_to_update is None else counter_to_update
    counter.update(tokens)
    return counter
