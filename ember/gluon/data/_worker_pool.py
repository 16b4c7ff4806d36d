"""The DataLoader's worker processes: each builds whole batches and returns them through
shared memory (``_shared_memory``).

Batch ``i`` of an epoch goes to worker ``i % N`` through that worker's own task pipe, and its
result comes back through that worker's own result pipe, in order; so the main process waits
on one pipe and on that worker's process sentinel at a time, and a worker that dies is noticed
at once, never waited for. Workers ignore SIGINT: Ctrl-C reaches the main process, which stops
them and removes any segment they wrote. A worker whose parent is gone exits too.

Each worker runs with ``MXNET_MP_WORKER_NTHREADS`` engine threads, one kernel thread (OpenMP
is off in workers, as in MXNet) and ``MXNET_MP_OPENCV_NUM_THREADS`` OpenCV threads.
"""
from __future__ import annotations

import atexit
import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import traceback
import weakref

from ember import config, engine
from ember.backend import imaging
from ember.base import EmberError
from ember.gluon.data import _shared_memory as shm

__all__ = ['WorkerPool', 'WorkerDied']

_tokens = itertools.count()
_pools = weakref.WeakSet()
_PARENT_CHECK_SECONDS = 1.0


class WorkerDied(EmberError):
    """A DataLoader worker process ended while the main process waited for its batch."""


# ----------------------------------------------------------------------------------------------
# In the worker

def _worker_main(worker_id, dataset, batchify_fn, tasks, results, prefix, threads, parent):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    imaging.set_num_threads(threads['opencv'])
    shm.current_writer = shm.SegmentWriter(prefix)
    with config.override(MXNET_CPU_WORKER_NTHREADS=threads['engine'], OMP_NUM_THREADS=1):
        try:
            _serve(worker_id, dataset, batchify_fn, tasks, results, parent)
        except (BrokenPipeError, EOFError, ConnectionResetError):
            pass                      # the main process is gone
        engine.get().wait_all()
    if not _parent_alive(parent):
        # nobody will map what this worker sent last: remove it
        shm.remove_segments(f'{prefix}w{os.getpid()}-')


def _serve(worker_id, dataset, batchify_fn, tasks, results, parent):
    while _parent_alive(parent):
        if not tasks.poll(_PARENT_CHECK_SECONDS):
            continue
        task = tasks.recv()
        if task is None:
            return
        results.send(_build(worker_id, dataset, batchify_fn, *task))


def _parent_alive(parent):
    """Whether the main process still runs (any start method: a forkserver's workers are
    the server's children, not the main process's)."""
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _build(worker_id, dataset, batchify_fn, generation, index, indices):
    try:
        batch = batchify_fn([dataset[i] for i in indices])
        return ('batch', generation, index, shm.current_writer.pack(batch))
    except Exception as exc:  # noqa: BLE001  (sent to the main process, raised there)
        return ('error', generation, index, _portable(exc), type(exc).__name__, str(exc),
                traceback.format_exc())


def _portable(exc):
    try:
        payload = pickle.dumps(exc)
        pickle.loads(payload)
        return payload
    except Exception:  # noqa: BLE001  (an exception that does not pickle goes as text)
        return None


# ----------------------------------------------------------------------------------------------
# In the main process

class _Worker:
    def __init__(self, context, worker_id, args):
        self.tasks_in, self.tasks = context.Pipe(duplex=False)
        self.results, self.results_in = context.Pipe(duplex=False)
        self.process = context.Process(
            target=_worker_main, name=f'ember-data-worker-{worker_id}', daemon=True,
            args=(worker_id, *args[:2], self.tasks_in, self.results_in, *args[2:]))
        self.process.start()
        self.tasks_in.close()           # the worker's ends: only the worker holds them now
        self.results_in.close()
        self.id = worker_id

    def describe(self):
        return f'DataLoader worker {self.id} (pid {self.process.pid})'


class WorkerPool:
    """`num_workers` processes building batches of `dataset` with `batchify_fn`."""

    def __init__(self, num_workers, dataset, batchify_fn, context=None):
        self.context = multiprocessing.get_context(context or _default_context())
        self.prefix = shm.segment_prefix(next(_tokens))
        threads = {'engine': config.get('MXNET_MP_WORKER_NTHREADS'),
                   'opencv': config.get('MXNET_MP_OPENCV_NUM_THREADS')}
        engine.get().wait_all()
        args = (dataset, batchify_fn, self.prefix, threads, os.getpid())
        self.workers = []
        self.owner = os.getpid()        # a forked copy of this pool must not stop it
        self.closed = False
        self._lock = threading.Lock()
        self.generation = 0
        try:
            for worker_id in range(num_workers):
                self.workers.append(_Worker(self.context, worker_id, args))
        except BaseException:
            self.close()
            raise
        _pools.add(self)

    @property
    def pids(self):
        return [worker.process.pid for worker in self.workers]

    def new_generation(self):
        """Start an epoch: results of earlier epochs still in the pipes will be dropped."""
        self.generation += 1
        return self.generation

    def submit(self, generation, index, indices):
        worker = self.workers[index % len(self.workers)]
        try:
            worker.tasks.send((generation, index, list(indices)))
        except (BrokenPipeError, OSError):
            raise self._died(worker, index) from None

    def result(self, generation, index, timeout):
        """Batch `index` of `generation`, or the worker's exception raised here."""
        worker = self.workers[index % len(self.workers)]
        while True:
            message = self._receive(worker, index, timeout)
            kind, message_generation, message_index = message[:3]
            if message_generation == generation and message_index == index:
                break
            if kind == 'batch':
                shm.discard(message[3])       # a batch of an abandoned epoch
        if kind == 'error':
            raise _worker_exception(worker, index, *message[3:])
        return shm.unpack(message[3])

    def _receive(self, worker, index, timeout):
        ready = multiprocessing.connection.wait([worker.results, worker.process.sentinel],
                                                timeout)
        if worker.results in ready:
            try:
                return worker.results.recv()
            except (EOFError, OSError):
                pass
        if ready:
            raise self._died(worker, index)
        raise TimeoutError(
            f'{worker.describe()} sent nothing for batch {index} within {timeout} seconds: '
            f'its dataset or batchify_fn is slow (raise DataLoader(timeout=...)) or stuck; '
            f'a batch larger than the free shared memory in {shm.SHM_DIR} also stalls it')

    def _died(self, worker, index):
        worker.process.join(0.1)
        code = worker.process.exitcode
        how = (f'was killed by signal {signal.Signals(-code).name}' if code and code < 0
               else f'exited with code {code}')
        return WorkerDied(f'{worker.describe()} {how} while building batch {index}')

    def close(self):
        """Stop every worker (politely, then by force) and remove their segments."""
        with self._lock:
            if self.closed or os.getpid() != self.owner:
                return
            self.closed = True
        for worker in self.workers:
            try:
                worker.tasks.send(None)
            except (BrokenPipeError, OSError):
                pass
        for worker in self.workers:
            _stop(worker.process)
            worker.tasks.close()
            worker.results.close()
        shm.remove_segments(self.prefix)

    def __del__(self):
        if not getattr(self, 'closed', True):
            self.close()


def _stop(process):
    process.join(1.0)
    if process.is_alive():
        process.terminate()
        process.join(1.0)
    if process.is_alive():
        process.kill()
        process.join()


def _worker_exception(worker, index, payload, type_name, message, worker_traceback):
    where = f'raised in {worker.describe()} while building batch {index}:\n{worker_traceback}'
    if payload is not None:
        exc = pickle.loads(payload)
        exc.add_note(where)
        return exc
    return EmberError(f'{type_name}: {message} ({where})')


def _default_context():
    # fork shares the dataset without pickling it (a lambda in transform_first works) and
    # starts a worker in milliseconds; the engine and OpenCV make their threads safe for it
    return 'fork' if 'fork' in multiprocessing.get_all_start_methods() else 'spawn'


@atexit.register
def _close_all():
    for pool in list(_pools):
        pool.close()
