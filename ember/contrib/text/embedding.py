"""Token embeddings: a vector per token, read from a text file of lines ``token v1 v2 ...``.

:class:`CustomEmbedding` loads such a file (every token of the file, or only those of a
given :class:`~ember.contrib.text.vocab.Vocabulary`); :class:`CompositeEmbedding` joins
several embeddings side by side over one vocabulary. Tokens that are not there get the
unknown token's vector (``init_unknown_vec``, zeros by default). ``register`` / ``create``
keep a registry of embedding classes by name, as MXNet's do; MXNet's GloVe and FastText
(which download their files) are not in this build, so ``get_pretrained_file_names`` lists
only what is registered here.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), 'vectors.txt')
>>> with open(path, 'w') as f:
...     _ = f.write('cat 1 2\\ndog 3 4\\n')
>>> e = CustomEmbedding(path)
>>> e.idx_to_token, e.vec_len
(['<unk>', 'cat', 'dog'], 2)
>>> e.get_vecs_by_tokens(['dog', 'emu']).asnumpy().tolist()
[[3.0, 4.0], [0.0, 0.0]]
"""
from __future__ import annotations

import io
import logging
import warnings

import numpy as np

from ember import ndarray as nd
from ember import registry
from ember.contrib.text.vocab import Vocabulary
from ember.util import is_np_array

__all__ = ['register', 'create', 'get_pretrained_file_names', 'CustomEmbedding',
           'CompositeEmbedding', 'is_np_array']


class _TokenEmbedding(Vocabulary):
    """A vocabulary with a vector per index (``idx_to_vec``, an NDArray of (len, vec_len))."""

    pretrained_file_name_sha1 = {}

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._idx_to_vec = None
        self._vec_len = 0

    @property
    def vec_len(self):
        return self._vec_len

    @property
    def idx_to_vec(self):
        return self._idx_to_vec

    def _load_embedding(self, path, elem_delim, init_unknown_vec, encoding='utf8'):
        """Read `path`: one token and its vector per line. Lines of one number (a header) are
        skipped with a warning, and so are later repeats of a token; the unknown token keeps
        its vector from the file if it has one, else ``init_unknown_vec``."""
        vectors, unknown = [], None
        with io.open(path, 'r', encoding=encoding) as source:
            for number, line in enumerate(source, 1):
                fields = line.rstrip().split(elem_delim)
                if len(fields) < 2 or not fields[0]:
                    continue
                token, values = fields[0], [float(v) for v in fields[1:]]
                if len(values) == 1:
                    warnings.warn(f'line {number} of {path}: token {token!r} with a '
                                  f'1-dimensional vector is likely a header; skipped',
                                  stacklevel=3)
                    continue
                if self._vec_len and len(values) != self._vec_len:
                    raise ValueError(f'line {number} of {path}: token {token!r} has '
                                     f'{len(values)} values, the lines before {self._vec_len}')
                self._vec_len = len(values)
                if token == self.unknown_token:
                    unknown = values
                elif token in self._token_to_idx:
                    warnings.warn(f'line {number} of {path}: token {token!r} repeats; the '
                                  f'first vector is kept', stacklevel=3)
                else:
                    self._token_to_idx[token] = len(self._idx_to_token)
                    self._idx_to_token.append(token)
                    vectors.append(values)
        if not self._vec_len:
            raise ValueError(f'{path}: no token vectors found')
        logging.getLogger(__name__).info('loaded %d token vectors from %s', len(vectors), path)
        table = np.zeros((len(self._idx_to_token), self._vec_len), dtype=np.float32)
        table[len(self._idx_to_token) - len(vectors):] = vectors
        head = (unknown if unknown is not None else
                init_unknown_vec(shape=self._vec_len).asnumpy())
        table[0] = head
        self._idx_to_vec = nd.array(table)

    def _restrict_to(self, vocabulary):
        """Keep the vectors of `vocabulary`'s tokens only, indexed as it indexes them."""
        vectors = self.get_vecs_by_tokens(vocabulary.idx_to_token)
        self._adopt(vocabulary)
        self._idx_to_vec = vectors

    def _adopt(self, vocabulary):
        self._unknown_token = vocabulary.unknown_token
        self._reserved_tokens = vocabulary.reserved_tokens
        self._idx_to_token = list(vocabulary.idx_to_token)
        self._token_to_idx = dict(vocabulary.token_to_idx)

    def get_vecs_by_tokens(self, tokens, lower_case_backup=False):
        """The vector of a token, or the (len, vec_len) vectors of a list of tokens; unknown
        tokens get the unknown vector (with `lower_case_backup`, after trying the token in
        lower case)."""
        single = not isinstance(tokens, list)
        wanted = [tokens] if single else tokens
        lookup = self._token_to_idx
        if lower_case_backup:
            indices = [lookup[t] if t in lookup else lookup.get(t.lower(), 0) for t in wanted]
        else:
            indices = [lookup.get(t, 0) for t in wanted]
        vectors = nd.Embedding(nd.array(indices), self._idx_to_vec,
                               input_dim=self._idx_to_vec.shape[0], output_dim=self._vec_len)
        return vectors[0] if single else vectors

    def update_token_vectors(self, tokens, new_vectors):
        """Replace the vectors of known `tokens` (the unknown token only when named as it)."""
        wanted = tokens if isinstance(tokens, list) else [tokens]
        rows = new_vectors.reshape((len(wanted), -1)) if new_vectors.ndim == 1 else new_vectors
        if rows.shape != (len(wanted), self._vec_len):
            raise ValueError(f'update_token_vectors: new_vectors of shape {rows.shape} for '
                             f'{len(wanted)} tokens of length {self._vec_len}')
        indices = []
        for token in wanted:
            if token not in self._token_to_idx:
                raise ValueError(f'update_token_vectors: token {token!r} is unknown; to '
                                 f'update the unknown vector name {self.unknown_token!r}')
            indices.append(self._token_to_idx[token])
        table = self._idx_to_vec.asnumpy()
        table[indices] = rows.asnumpy()
        self._idx_to_vec = nd.array(table)

    @classmethod
    def _check_pretrained_file_names(cls, pretrained_file_name):
        if pretrained_file_name not in cls.pretrained_file_name_sha1:
            raise KeyError(f'{pretrained_file_name!r} is not a pretrained file of '
                           f'{cls.__name__}; known: {sorted(cls.pretrained_file_name_sha1)}')


_register = registry.get_register_func(_TokenEmbedding, 'token embedding')
_create = registry.get_create_func(_TokenEmbedding, 'token embedding')


def register(embedding_cls):
    """Class decorator: register a token embedding class under its lower-cased name, for
    :func:`create`."""
    return _register(embedding_cls)


def create(embedding_name, **kwargs):
    """An instance of the token embedding registered as `embedding_name`."""
    if embedding_name.lower() not in registry.get_registry(_TokenEmbedding):
        raise KeyError(f'token embedding {embedding_name!r} is not registered; registered: '
                       f'{sorted(registry.get_registry(_TokenEmbedding))} (register one with '
                       f'mx.contrib.text.embedding.register)')
    return _create(embedding_name, **kwargs)


def get_pretrained_file_names(embedding_name=None):
    """Registered embedding name -> its pretrained file names (of `embedding_name` alone when
    given, as a list)."""
    found = {name: list(klass.pretrained_file_name_sha1)
             for name, klass in registry.get_registry(_TokenEmbedding).items()
             if klass.pretrained_file_name_sha1}
    if embedding_name is None:
        return found
    if embedding_name.lower() not in found:
        raise KeyError(f'no pretrained files for {embedding_name!r}; those with some: '
                       f'{sorted(found)}')
    return found[embedding_name.lower()]


class CustomEmbedding(_TokenEmbedding):
    """The embedding in the file at `pretrained_file_path` (lines of a token and its values,
    split by `elem_delim`); with `vocabulary`, only its tokens, indexed as it does."""

    def __init__(self, pretrained_file_path, elem_delim=' ', encoding='utf8',
                 init_unknown_vec=nd.zeros, vocabulary=None, **kwargs):
        super().__init__(**kwargs)
        self._load_embedding(pretrained_file_path, elem_delim, init_unknown_vec, encoding)
        if vocabulary is not None:
            self._restrict_to(vocabulary)


class CompositeEmbedding(_TokenEmbedding):
    """`vocabulary`'s tokens with the vectors of every embedding of `token_embeddings`
    concatenated (each embedding's unknown vector where it lacks the token)."""

    def __init__(self, vocabulary, token_embeddings):
        if not isinstance(vocabulary, Vocabulary):
            raise TypeError(f'CompositeEmbedding: vocabulary must be a Vocabulary, got '
                            f'{type(vocabulary).__name__}')
        embeddings = (token_embeddings if isinstance(token_embeddings, list)
                      else [token_embeddings])
        for embedding in embeddings:
            if not isinstance(embedding, _TokenEmbedding):
                raise TypeError(f'CompositeEmbedding: {type(embedding).__name__} is not a '
                                f'token embedding')
        super().__init__()
        self._adopt(vocabulary)
        parts = [e.get_vecs_by_tokens(vocabulary.idx_to_token) for e in embeddings]
        self._idx_to_vec = nd.concat(*parts, dim=1)
        self._vec_len = self._idx_to_vec.shape[1]
