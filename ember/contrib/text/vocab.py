"""Vocabulary: tokens indexed by frequency, after the unknown token and the reserved ones.

>>> import collections
>>> v = Vocabulary(collections.Counter('c c c b b a'.split()), reserved_tokens=['<pad>'])
>>> v.idx_to_token
['<unk>', '<pad>', 'c', 'b', 'a']
>>> v.to_indices(['b', 'zebra']), v.to_tokens(2)
([3, 0], 'c')
"""
from __future__ import annotations

__all__ = ['Vocabulary']


class Vocabulary:
    """Index 0 is `unknown_token`, then `reserved_tokens`, then the tokens of `counter` seen
    at least `min_freq` times, most frequent first (ties in token order), at most
    `most_freq_count` of them. Unknown tokens index as 0."""

    def __init__(self, counter=None, most_freq_count=None, min_freq=1, unknown_token='<unk>',
                 reserved_tokens=None):
        if min_freq < 1:
            raise ValueError(f'Vocabulary: min_freq={min_freq} must be at least 1')
        reserved = list(reserved_tokens) if reserved_tokens is not None else []
        if unknown_token in reserved:
            raise ValueError(f'Vocabulary: the unknown token {unknown_token!r} cannot also be '
                             f'reserved')
        if len(set(reserved)) != len(reserved):
            raise ValueError(f'Vocabulary: reserved_tokens {reserved} repeat a token')
        self._unknown_token = unknown_token
        self._reserved_tokens = reserved if reserved_tokens is not None else None
        self._idx_to_token = [unknown_token] + reserved
        self._token_to_idx = {t: i for i, t in enumerate(self._idx_to_token)}
        if counter is not None:
            self._index_counter(counter, most_freq_count, min_freq)

    def _index_counter(self, counter, most_freq_count, min_freq):
        ranked = sorted(counter.items(), key=lambda item: (-item[1], item[0]))
        taken = 0
        for token, count in ranked:
            if count < min_freq or (most_freq_count is not None and taken >= most_freq_count):
                break
            if token in self._token_to_idx:
                continue
            self._token_to_idx[token] = len(self._idx_to_token)
            self._idx_to_token.append(token)
            taken += 1

    def __len__(self):
        return len(self._idx_to_token)

    @property
    def token_to_idx(self):
        return self._token_to_idx

    @property
    def idx_to_token(self):
        return self._idx_to_token

    @property
    def unknown_token(self):
        return self._unknown_token

    @property
    def reserved_tokens(self):
        return self._reserved_tokens

    def to_indices(self, tokens):
        """The index of a token, or a list of indices of a list of tokens (0 when unknown)."""
        if isinstance(tokens, list):
            return [self._token_to_idx.get(t, 0) for t in tokens]
        return self._token_to_idx.get(tokens, 0)

    def to_tokens(self, indices):
        """The token of an index, or a list of tokens of a list of indices."""
        single = not isinstance(indices, list)
        wanted = [indices] if single else indices
        for index in wanted:
            if not 0 <= index < len(self._idx_to_token):
                raise ValueError(f'Vocabulary: index {index} is outside 0..'
                                 f'{len(self._idx_to_token) - 1}')
        tokens = [self._idx_to_token[i] for i in wanted]
        return tokens[0] if single else tokens
