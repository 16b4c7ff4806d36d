"""``'horovod'`` and ``'byteps'``: stores that those packages would provide.

Both packages bind to MXNet's own arrays (``horovod.mxnet``, ``byteps.mxnet``): they call
MXNet's C library on MXNet NDArrays, which Ember's arrays are not. Creating either store says
which package is missing, or, where it is installed, that its MXNet binding cannot take
Ember's arrays; Ember's MPI stores (``'dist_sync'``, ``'dist_device_sync'``) do the same
all-reduce work over ``mpi4py``.
"""
from __future__ import annotations

import importlib.util

from ember.base import EmberError
from ember.kvstore.base import KVStoreBase

__all__ = ['Horovod', 'BytePS']


class _PackageStore(KVStoreBase):
    PACKAGE = ''
    BINDING = ''

    def __init__(self):
        name = type(self).__name__.lower()
        if importlib.util.find_spec(self.PACKAGE) is None:
            raise EmberError(f'kvstore {name!r} needs the {self.PACKAGE} package, which is not '
                             f'installed (pip install {self.PACKAGE}); Ember\'s own MPI stores '
                             f"'dist_sync' and 'dist_device_sync' need only mpi4py")
        raise EmberError(f'kvstore {name!r}: {self.PACKAGE} is installed, but its binding '
                         f'{self.BINDING} works on MXNet NDArrays through MXNet\'s C library, '
                         f"not on Ember's arrays; use 'dist_sync' or 'dist_device_sync' "
                         f'(all-reduce over MPI) instead')


class Horovod(_PackageStore):
    """Horovod's all-reduce store (``'horovod'``)."""

    PACKAGE = 'horovod'
    BINDING = 'horovod.mxnet'


class BytePS(_PackageStore):
    """BytePS's parameter-server store (``'byteps'``)."""

    PACKAGE = 'byteps'
    BINDING = 'byteps.mxnet'
