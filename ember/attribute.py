"""``mx.attribute``: ``AttrScope``, attributes for every symbol made inside a ``with`` block.

>>> from ember import symbol
>>> from ember.attribute import AttrScope
>>> with AttrScope(ctx_group='stage1'):
...     symbol.var('x').attr('ctx_group')
'stage1'
"""
from ember.symbol.attribute import AttrScope

__all__ = ['AttrScope']
