"""MXNet's ``mx.context`` module: devices, how many GPUs there are and their memory.

>>> import ember as mx
>>> mx.context.num_gpus() >= 0
True
"""
from ember import backend
from ember.backend import num_gpus
from ember.base import EmberError, classproperty, with_metaclass
from ember.device import Context, Device, cpu, cpu_pinned, current_context, current_device, gpu

__all__ = ['Context', 'Device', 'cpu', 'gpu', 'cpu_pinned', 'current_context', 'current_device',
           'num_gpus', 'gpu_memory_info', 'classproperty', 'with_metaclass']


def gpu_memory_info(device_id=0) -> tuple:
    """(free, total) bytes of memory of GPU `device_id`; raises when there is no such GPU.

    >>> gpu_memory_info(num_gpus())  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ember.base.EmberError: gpu_memory_info: no GPU ...
    """
    count = num_gpus()
    if not 0 <= device_id < count:
        raise EmberError(f'gpu_memory_info: no GPU {device_id}; this machine has {count}')
    device_backend = backend.for_device(gpu(device_id))
    return device_backend.free_memory(), device_backend.total_memory()
