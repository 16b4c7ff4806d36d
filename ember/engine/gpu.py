"""GPU operations on streams, ordered by events instead of host waits.

A thread that runs GPU operations has its own streams per device (:class:`Streams`):
``MXNET_GPU_WORKER_NSTREAMS`` of them, the first the one its kernels go to, the second (with
2) an auxiliary stream an operator may run independent work on (:func:`aux_stream`: a
convolution's weight gradient beside its data gradient). The engine hands an operation to a
worker when its variables allow; the kernels it launches then run on the worker's stream
while the worker takes the next operation, so the engine's "finished" means "queued on the
device". Ordering on the device follows from the variables too:

- :func:`before` makes the worker's stream wait (``cudaStreamWaitEvent``) for the event of the
  last write of each variable the operation reads, and for the last write and the reads since
  of each variable it writes, where those were queued on another stream (of this GPU, of
  another, or a copy stream);
- :func:`after` records one event on the stream and leaves it on the variables: a write
  replaces what the variable held, a read is added to its reads.

The host waits only where the user does: :func:`host_wait` (``wait_to_read``, ``asnumpy``)
synchronises the events of one variable, :func:`synchronize_all` (``waitall``) every stream.
An error of a kernel that the device reports late (an illegal address) surfaces there, named
by the operation whose event failed.

Everything here speaks to streams and events through the device backend
(``backend.for_device(dev).new_stream()``: ``record()``, ``wait(event)``, ``activate()``;
events: ``done``, ``synchronize()``), which tests replace by fakes.
"""
from __future__ import annotations

import contextlib
import threading

from ember import backend as _backend, config
from ember.base import EmberError
from ember.engine.var import Failure, OperatorError

__all__ = ['Streams', 'streams_of_thread', 'before', 'after', 'run_on_stream', 'host_wait',
           'synchronize_all', 'aux_stream', 'VarEvents', 'used_streams']


class Streams:
    """The streams one thread uses on one device: ``primary`` (its kernels) and ``aux``
    (the primary itself with one stream per worker)."""

    __slots__ = ('device', 'primary', 'aux')

    def __init__(self, device, backend, count):
        self.device = device
        self.primary = backend.new_stream()
        self.aux = backend.new_stream() if count > 1 else self.primary


class _Local(threading.local):
    def __init__(self):
        self.by_device = {}     # device -> Streams of this thread
        self.current = None     # the Streams of the operation running on this thread


_local = _Local()
_all: list = []                 # every Streams made, for synchronize_all
_all_lock = threading.Lock()


def streams_of_thread(device) -> Streams | None:
    """This thread's streams on `device`, made at first use (``MXNET_GPU_WORKER_NSTREAMS``
    of them); None where the device does not exist (no GPU: nothing pushed for it can hold
    device memory, so it runs as host code, as the engine's own tests do)."""
    by_device = _local.by_device
    if device in by_device:
        return by_device[device]
    try:
        device_backend = _backend.for_device(device)
    except EmberError:
        found = None
    else:
        found = Streams(device, device_backend, config.get('MXNET_GPU_WORKER_NSTREAMS'))
        with _all_lock:
            _all.append(found)
    by_device[device] = found
    return found


def used_streams() -> list:
    """Every thread's streams made so far."""
    with _all_lock:
        return list(_all)


class VarEvents:
    """The device events of one variable: its last write and the reads queued since."""

    __slots__ = ('write', 'write_name', 'reads')

    def __init__(self):
        self.write = None       # event after the last write
        self.write_name = None  # the operation that wrote it (for errors found at a wait)
        self.reads = {}         # stream -> event after its last read of the var

    def pending(self, for_write):
        """The events an access must come after: a read the write, a write the reads too."""
        events = [] if self.write is None else [self.write]
        if for_write:
            events.extend(self.reads.values())
        return events


def before(op, stream) -> None:
    """Queue on `stream` waits for what `op`'s variables were last given on other streams."""
    for var in op.reads:
        events = var.gpu
        if events is not None and events.write is not None:
            _wait(stream, events.write)
    for var in op.writes:
        events = var.gpu
        if events is not None:
            for event in events.pending(for_write=True):
                _wait(stream, event)


def _wait(stream, event):
    if event.stream is not stream and not event.done:
        stream.wait(event)


def after(op, stream) -> None:
    """Record an event after `op`'s kernels and leave it on its variables."""
    event = stream.record()
    name = op.label()
    for var in op.writes:
        events = var.gpu
        if events is None:
            events = var.gpu = VarEvents()
        events.write, events.write_name = event, name
        if events.reads:
            events.reads = {}
    for var in op.reads:
        events = var.gpu
        if events is None:
            events = var.gpu = VarEvents()
        events.reads[stream] = event


def run_on_stream(op, run):
    """Run `op` (``run(op)`` returns its failure or None) on this thread's streams of its
    device, between :func:`before` and :func:`after`; a failure of the streams themselves is
    the op's failure."""
    try:
        streams = streams_of_thread(op.device)
        if streams is None:
            return run(op)
        stream = streams.primary
        stream.activate()
        before(op, stream)
    except Exception as error:  # noqa: BLE001 - attached to the op's vars like a kernel's
        return Failure(error, op)
    previous, _local.current = _local.current, streams
    try:
        failure = run(op)
    finally:
        _local.current = previous
    try:
        after(op, stream)
    except Exception as error:  # noqa: BLE001 - as above
        return failure or Failure(error, op)
    return failure


@contextlib.contextmanager
def aux_stream():
    """Run the block's kernels on this thread's auxiliary stream, which first waits for the
    work queued so far on the primary one; the primary then waits for the block's work. With
    one stream per worker (or outside a GPU operation) the block runs where it is."""
    streams = _local.current
    if streams is None or streams.aux is streams.primary:
        yield
        return
    primary, aux = streams.primary, streams.aux
    aux.wait(primary.record())
    aux.activate()
    try:
        yield
    finally:
        primary.wait(aux.record())
        primary.activate()


def host_wait(var, write=False) -> None:
    """Block until the device work on `var` (its last write; with `write` its reads too) is
    done; a device error surfaces here as an OperatorError naming the operation."""
    events = var.gpu
    if events is None:
        return
    for event in events.pending(for_write=write):
        if not event.done:
            _synchronize(event, events.write_name)


def _synchronize(event, name):
    try:
        event.synchronize()
    except Exception as error:  # noqa: BLE001 - CUDA's error, surfaced where the user waits
        raise OperatorError(f'operator {name or "on the GPU"} failed on the device: '
                            f'{type(error).__name__}: {error}') from error


def synchronize_all() -> None:
    """Block until every stream of every thread is idle."""
    for streams in used_streams():
        for stream in {streams.primary, streams.aux}:
            try:
                stream.synchronize()
            except Exception as error:  # noqa: BLE001 - as in host_wait
                raise OperatorError(f'a GPU operation on {streams.device} failed on the '
                                    f'device: {type(error).__name__}: {error}') from error


def reset() -> None:
    """Forget every thread's streams (the engine that ran on them has stopped)."""
    synchronize_all()
    with _all_lock:
        retired, _all[:] = list(_all), []
    for streams in retired:
        for stream in {streams.primary, streams.aux}:
            retire = getattr(stream, 'retire', None)
            if retire is not None:
                retire()
    _local.by_device = {}
