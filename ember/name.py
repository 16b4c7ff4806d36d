"""``mx.name``: automatic symbol names (``NameManager``, ``Prefix``), as in MXNet 1.x.

>>> import ember.name
>>> with ember.name.Prefix('net_'):
...     ember.name.NameManager.current.get(None, 'conv')
'net_conv0'
"""
from ember.base import classproperty, with_metaclass
from ember.symbol.name import NameManager, Prefix

__all__ = ['NameManager', 'Prefix', 'classproperty', 'with_metaclass']
