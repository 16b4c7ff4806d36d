"""MXNet's ``mx.error``: structured error classes, registered by name.

>>> import ember as mx
>>> issubclass(mx.error.InternalError, mx.MXNetError)
True
>>> print(mx.error.InternalError('the plan lost a buffer'))  # doctest: +ELLIPSIS
the plan lost a buffer
Ember hint: ...
>>> mx.base.error_types['ValueError'] is ValueError
True
"""
from ember.base import MXNetError, register_error

__all__ = ['MXNetError', 'register', 'register_error', 'InternalError']

register = register_error


@register_error
class InternalError(MXNetError):
    """An error inside Ember itself rather than in how it was called."""

    def __init__(self, msg):
        if 'hint:' not in msg:
            msg += ('\nEmber hint: this is an internal error; please report it with the '
                    'program that raised it.')
        super().__init__(msg)


for _builtin in (ValueError, TypeError, AttributeError, IndexError, NotImplementedError):
    register_error(_builtin.__name__, _builtin)
