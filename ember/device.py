"""Devices: where arrays live and operators run (MXNet's Context).

>>> import ember as mx
>>> mx.cpu() == mx.cpu(0)
True
>>> with mx.Context('cpu', 0):
...     mx.current_context()
cpu(0)
"""
from __future__ import annotations

import threading

__all__ = ['Device', 'Context', 'cpu', 'gpu', 'cpu_pinned', 'current_device', 'current_context',
           'set_current_device']

_KINDS = {'cpu': 1, 'gpu': 2, 'cpu_pinned': 3}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}


class Device:
    """A device kind and id. Immutable, hashable, and a context manager for the default device."""

    __slots__ = ('device_type', 'device_id', '_tokens', '_hash')
    devtype2str = _KIND_NAMES
    devstr2type = _KINDS

    def __init__(self, device_type, device_id=0):
        if isinstance(device_type, Device):
            device_type, device_id = device_type.device_type, device_type.device_id
        if device_type not in _KINDS:
            raise ValueError(f'device type {device_type!r}: expected one of '
                             f'{", ".join(map(repr, _KINDS))}')
        if not isinstance(device_id, int) or isinstance(device_id, bool) or device_id < 0:
            raise ValueError(f'device id {device_id!r}: expected an integer >= 0')
        object.__setattr__(self, 'device_type', device_type)
        object.__setattr__(self, 'device_id', device_id)
        object.__setattr__(self, '_tokens', [])
        # hashed on every parameter lookup (Parameter.data per graph input per call)
        object.__setattr__(self, '_hash', hash((device_type, device_id)))

    def __setattr__(self, name, value):
        raise AttributeError('Device is immutable')

    def __reduce__(self):
        # pickle and copy rebuild through __init__ (slots would be set one by one otherwise)
        return Device, (self.device_type, self.device_id)

    @property
    def device_typeid(self) -> int:
        return _KINDS[self.device_type]

    @property
    def is_cpu(self) -> bool:
        return self.device_type != 'gpu'

    def __eq__(self, other):
        return other is self or (isinstance(other, Device)
                                 and self.device_type == other.device_type
                                 and self.device_id == other.device_id)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f'{self.device_type}({self.device_id})'

    __str__ = __repr__

    def __enter__(self):
        self._tokens.append(current_device())
        _state.device = self
        return self

    def __exit__(self, *exc):
        _state.device = self._tokens.pop()
        return False

    def empty_cache(self) -> None:
        """Return this device's cached pool memory to the system."""
        if _hooks.empty_cache is None:
            raise RuntimeError('no storage layer is loaded')
        _hooks.empty_cache(self)


Context = Device


class _State(threading.local):
    device = None


_state = _State()


class _Hooks:
    """Set by later layers (storage) so that Device methods reach them without importing up."""
    empty_cache = None


_hooks = _Hooks()
_DEFAULT = Device('cpu', 0)


def current_device() -> Device:
    """The device that new arrays go to when none is named."""
    return _state.device or _DEFAULT


current_context = current_device


def set_current_device(dev: Device) -> Device:
    """Make `dev` this thread's default device; returns the previous one."""
    if not isinstance(dev, Device):
        raise TypeError(f'expected a Device such as mx.cpu(0), got {dev!r}')
    previous = current_device()
    _state.device = dev
    return previous


def cpu(device_id: int = 0) -> Device:
    return Device('cpu', device_id)


def gpu(device_id: int = 0) -> Device:
    return Device('gpu', device_id)


def cpu_pinned(device_id: int = 0) -> Device:
    return Device('cpu_pinned', device_id)
