"""``mx.attribute``: ``AttrScope``, attributes for every symbol made inside a ``with`` block.

>>> from ember import symbol
>>> from ember.attribute import AttrScope
>>> with AttrScope(ctx_group='stage1'):
...     symbol.var('x').attr('ctx_group')
'stage1'
"""
from ember.base import classproperty, string_types, with_metaclass
from ember.symbol.attribute import AttrScope

__all__ = ['AttrScope', 'classproperty', 'string_types', 'with_metaclass']
