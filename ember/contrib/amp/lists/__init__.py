"""AMP's operator lists (:mod:`ember.contrib.amp.lists._tables`); ``symbol_fp16`` and
``symbol_bf16`` hold them as constants under MXNet's names."""
from ember.contrib.amp.lists import symbol_bf16, symbol_fp16
from ember.contrib.amp.lists._tables import *  # noqa: F401,F403
from ember.contrib.amp.lists._tables import __all__ as _names

__all__ = list(_names) + ['symbol_fp16', 'symbol_bf16']
