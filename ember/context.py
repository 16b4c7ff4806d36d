"""MXNet's ``mx.context`` module: devices and how many GPUs there are."""
from ember.backend import num_gpus
from ember.device import Context, Device, cpu, cpu_pinned, current_context, current_device, gpu

__all__ = ['Context', 'Device', 'cpu', 'gpu', 'cpu_pinned', 'current_context', 'current_device',
           'num_gpus']
