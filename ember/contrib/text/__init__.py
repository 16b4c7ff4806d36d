"""``mx.contrib.text``: token counting, vocabularies and token embeddings read from text files
(MXNet 1.x's first text API; the downloading GloVe and FastText loaders are not here)."""
from ember.contrib.text import embedding, utils, vocab

__all__ = ['embedding', 'utils', 'vocab']
