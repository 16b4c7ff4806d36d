"""MXNet's ``mx.registry``: name -> class registries for a base class, and factories that
build instances from a name, a dict or JSON.

>>> from ember import registry
>>> class Shape: pass
>>> register = registry.get_register_func(Shape, 'shape')
>>> @register
... class Square(Shape):
...     def __init__(self, side=1):
...         self.side = side
>>> create = registry.get_create_func(Shape, 'shape')
>>> create('square', side=3).side, create('["square", {"side": 2}]').side
(3, 2)
>>> sorted(registry.get_registry(Shape))
['square']
"""
import json
import warnings

from ember.base import string_types

__all__ = ['get_registry', 'get_register_func', 'get_alias_func', 'get_create_func',
           'string_types']

_REGISTRY = {}


def get_registry(base_class) -> dict:
    """A copy of the registry of `base_class`: lower-case name -> class."""
    return dict(_REGISTRY.setdefault(base_class, {}))


def get_register_func(base_class, nickname):
    """A decorator ``register(klass, name=None)`` that records subclasses of `base_class`
    under their lower-cased name; `nickname` names the kind in messages."""
    registry = _REGISTRY.setdefault(base_class, {})

    def register(klass, name=None):
        if not (isinstance(klass, type) and issubclass(klass, base_class)):
            raise TypeError(f'can only register subclasses of {base_class.__name__} as '
                            f'{nickname}, got {klass!r}')
        name = (name or klass.__name__).lower()
        if name in registry and registry[name] is not klass:
            warnings.warn(f'{nickname} {klass.__module__}.{klass.__name__} registered as '
                          f'{name!r} replaces {registry[name].__module__}.'
                          f'{registry[name].__name__}', UserWarning, stacklevel=2)
        registry[name] = klass
        return klass
    register.__doc__ = f'Register a {nickname} for the {nickname} factory.'
    return register


def get_alias_func(base_class, nickname):
    """A decorator factory ``alias(*names)`` that registers a class under more names."""
    register = get_register_func(base_class, nickname)

    def alias(*aliases):
        def register_all(klass):
            for name in aliases:
                register(klass, name)
            return klass
        return register_all
    return alias


def get_create_func(base_class, nickname):
    """A factory ``create(name_or_instance, *args, **kwargs)``: an instance passes through;
    a name (any case), a dict of arguments with `nickname` as the name, or JSON of either
    (``'["name", {...}]'``, ``'{"nickname": "name", ...}'``) builds one."""
    registry = _REGISTRY.setdefault(base_class, {})

    def create(*args, **kwargs):
        if args:
            name, args = args[0], args[1:]
        else:
            name = kwargs.pop(nickname)
        if isinstance(name, base_class):
            if args or kwargs:
                raise ValueError(f'{nickname} is already an instance; extra arguments '
                                 f'{args or kwargs} cannot apply')
            return name
        if isinstance(name, dict):
            return create(**name)
        if not isinstance(name, str):
            raise TypeError(f'{nickname} must be a name, got {type(name).__name__}')
        if name.startswith('['):
            name, kwargs = json.loads(name)
            return create(name, **kwargs)
        if name.startswith('{'):
            return create(**json.loads(name))
        if name.lower() not in registry:
            raise ValueError(f'{name!r} is not a registered {nickname}; registered: '
                             f'{", ".join(sorted(registry)) or "none"}')
        return registry[name.lower()](*args, **kwargs)
    create.__doc__ = f'Create a {nickname} from its name, a dict or JSON.'
    return create
