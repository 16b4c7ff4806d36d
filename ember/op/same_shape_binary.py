"""MXNet's same-shape binary operators (``_equal``, ``_maximum``, ``_power``, ... and their
legacy capitalised names ``_Equal``, ``_Maximum``, ``_Power``), which old symbol files use:
the broadcasting operators' kernels and gradients, with inputs of one shape.

>>> from ember.op import registry
>>> registry.get('_Maximum').name, registry.get('_maximum').infer_shape({}, [(2, 3), None])
('_maximum', ([(2, 3), (2, 3)], [(2, 3)]))
"""
from __future__ import annotations

from dataclasses import fields

from ember.op import registry
from ember.op.registry import OpDef, register, same_shape

__all__ = []

# same-shape name: (broadcasting operator, legacy alias)
_NAMES = {
    '_equal': ('broadcast_equal', '_Equal'), '_not_equal': ('broadcast_not_equal', '_Not_Equal'),
    '_greater': ('broadcast_greater', '_Greater'),
    '_greater_equal': ('broadcast_greater_equal', '_Greater_Equal'),
    '_lesser': ('broadcast_lesser', '_Lesser'),
    '_lesser_equal': ('broadcast_lesser_equal', '_Lesser_Equal'),
    '_logical_and': ('broadcast_logical_and', '_Logical_And'),
    '_logical_or': ('broadcast_logical_or', '_Logical_Or'),
    '_logical_xor': ('broadcast_logical_xor', '_Logical_Xor'),
    '_maximum': ('broadcast_maximum', '_Maximum'), '_minimum': ('broadcast_minimum', '_Minimum'),
    '_power': ('broadcast_power', '_Power'), '_mod': ('broadcast_mod', '_Mod'),
}

for _name, (_broadcast, _alias) in _NAMES.items():
    _op = registry.get(_broadcast)
    _copied = {f.name: getattr(_op, f.name) for f in fields(OpDef)
               if f.name not in ('name', 'kernel', 'aliases', 'doc', 'infer_shape')}
    register(_name, _op.kernel, infer_shape=same_shape, aliases=(_alias,),
             doc=f'{_broadcast} of two arrays of one shape.', **_copied)

_add = registry.get('elemwise_add')
register('_grad_add', _add.kernel, infer_shape=same_shape, inputs=_add.inputs,
         gradient=_add.gradient, elemwise=True,
         doc='The sum of two gradients of one shape (elemwise_add).')
