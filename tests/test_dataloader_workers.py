"""The DataLoader's worker processes: batches through shared memory, errors and tracebacks
from workers, dead and stuck workers, Ctrl-C, and the thread counts inside the workers."""
import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.gluon import data as gdata
from ember.gluon.data import _shared_memory, _worker_pool

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def leftover_segments(pid=None):
    return glob.glob(os.path.join(_shared_memory.SHM_DIR, f'ember-dl-{pid or os.getpid()}-*'))


class Squares(gdata.Dataset):
    """Sample i is (an image-like array of i's, i); samples in `fail` raise, `kill` kills
    the worker, `slow` sleeps."""

    def __init__(self, length=20, fail=(), kill=(), slow=()):
        self.length, self.fail, self.kill, self.slow = length, fail, kill, slow

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        if i in self.fail:
            raise ValueError(f'sample {i} is broken')
        if i in self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        if i in self.slow:
            time.sleep(30)
        return mx.nd.full((2, 3), i), i


def test_workers_return_the_batches_of_one_process_without_copies():
    dataset = Squares(21)
    serial = [(x.asnumpy(), y.asnumpy()) for x, y in gdata.DataLoader(dataset, 4)]
    with gdata.DataLoader(dataset, 4, num_workers=3, prefetch=1) as loader:
        for _ in range(2):                  # the same workers serve both epochs
            batches = list(loader)
            assert len(batches) == len(serial)
            for (x, y), (want_x, want_y) in zip(batches, serial):
                assert np.array_equal(x.asnumpy(), want_x) and np.array_equal(y.asnumpy(),
                                                                              want_y)
        # the stacked data stayed where the worker wrote it: no pickling, no copy
        assert isinstance(batches[0][0].handle, _shared_memory.SharedStorage)
        pids = loader._pool.pids
    assert not leftover_segments()
    assert all(not _alive(pid) for pid in pids)


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not _is_zombie(pid)


def _is_zombie(pid):
    try:
        with open(f'/proc/{pid}/stat') as stat:
            return stat.read().split(')')[-1].split()[0] == 'Z'
    except FileNotFoundError:
        return False


def test_an_abandoned_epoch_leaves_nothing_behind():
    loader = gdata.DataLoader(Squares(40), 4, num_workers=2, prefetch=4)
    first = iter(loader)
    next(first)                               # four batches are still in flight
    labels = [y.asnumpy().tolist() for _, y in loader]
    assert labels[0] == [0, 1, 2, 3] and len(labels) == 10
    with pytest.raises(RuntimeError, match='overtaken by a newer one'):
        next(first)
    loader.close()
    assert not leftover_segments()


def test_a_worker_exception_arrives_with_the_worker_traceback():
    loader = gdata.DataLoader(Squares(fail=(6,)), 4, num_workers=2)
    with pytest.raises(ValueError, match='sample 6 is broken') as caught:
        list(loader)
    note = '\n'.join(getattr(caught.value, '__notes__', []))
    assert 'raised in DataLoader worker 1' in note and 'while building batch 1' in note
    assert 'in __getitem__' in note                       # the worker's own traceback
    assert [y.asnumpy().tolist() for _, y in gdata.DataLoader(Squares(8), 4, num_workers=1)]
    loader.close()


def test_a_killed_worker_is_an_error_naming_it_not_a_hang():
    loader = gdata.DataLoader(Squares(kill=(5,)), 4, num_workers=2, timeout=60)
    with pytest.raises(_worker_pool.WorkerDied, match=r'DataLoader worker 1 \(pid \d+\) was '
                                                      r'killed by signal SIGKILL while '
                                                      r'building batch 1'):
        list(loader)
    assert loader._pool is None and not leftover_segments()


def test_a_stuck_worker_times_out_naming_it():
    loader = gdata.DataLoader(Squares(slow=(0,)), 4, num_workers=1, timeout=0.5)
    with pytest.raises(TimeoutError, match=r'DataLoader worker 0 \(pid \d+\) sent nothing for '
                                           r'batch 0 within 0.5 seconds'):
        next(iter(loader))
    assert loader._pool is None


def thread_counts(_):
    from ember import engine
    from ember.backend import imaging
    return np.array([engine.get().settings.cpu_workers, imaging.num_threads(),
                     engine.kernel_threads()])


def test_mp_variables_set_the_thread_counts_inside_workers():
    ones = gdata.SimpleDataset(list(range(2))).transform(thread_counts)
    with config.override(MXNET_MP_WORKER_NTHREADS=3, MXNET_MP_OPENCV_NUM_THREADS=5):
        counts = next(iter(gdata.DataLoader(ones, 1, num_workers=1))).asnumpy()[0]
    assert counts.tolist() == [3, 5, 1]
    counts = next(iter(gdata.DataLoader(ones, 1, num_workers=1))).asnumpy()[0]
    assert counts.tolist() == [1, 1, 1]      # the defaults: one engine thread, OpenCV serial


def test_pin_memory_and_auto_reload_with_workers():
    loader = gdata.DataLoader(Squares(8), 4, num_workers=1, pin_memory=True, auto_reload=True)
    for _ in range(2):
        batches = list(loader)
        assert [x.context for x, _ in batches] == [mx.cpu_pinned(0)] * 2
    assert loader._next_epoch is not None      # the third epoch is already on its way
    loader.close()
    assert not leftover_segments()


class Doubles(gdata.Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        return np.full(3, 2 * i, np.float32)


def test_spawned_workers_need_only_a_picklable_dataset():
    with gdata.DataLoader(Doubles(), 3, num_workers=1, mp_context='spawn') as loader:
        batches = [x.asnumpy()[:, 0].tolist() for x in loader]
    assert batches == [[0, 2, 4], [6, 8, 10]]


CTRL_C_SCRIPT = textwrap.dedent('''
    import os, sys, time
    import ember as mx
    from ember.gluon import data as gdata

    class Slow(gdata.Dataset):
        def __len__(self):
            return 1000
        def __getitem__(self, i):
            time.sleep(0.2)
            return mx.nd.ones((64, 64)) * i

    loader = gdata.DataLoader(Slow(), 2, num_workers=2, prefetch=6)
    batches = iter(loader)
    next(batches)
    print('pids', *loader._pool.pids, flush=True)
    try:
        for batch in batches:
            pass
    except KeyboardInterrupt:
        print('interrupted', flush=True)
        sys.exit(3)
''')


def test_ctrl_c_stops_the_workers_and_removes_their_shared_memory():
    env = config.child_environ(PYTHONPATH=REPO)
    child = subprocess.Popen([sys.executable, '-c', CTRL_C_SCRIPT], stdout=subprocess.PIPE,
                             text=True, env=env, start_new_session=True)
    try:
        line = child.stdout.readline()
        assert line.startswith('pids'), line
        pids = [int(p) for p in line.split()[1:]]
        time.sleep(0.3)                            # batches in flight and in shared memory
        os.killpg(child.pid, signal.SIGINT)        # as a terminal's Ctrl-C: the whole group
        out, _ = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 3 and 'interrupted' in out
    assert not any(_alive(pid) for pid in pids)
    assert not leftover_segments(child.pid)


def test_workers_of_a_killed_main_process_exit_and_clean_up():
    env = config.child_environ(PYTHONPATH=REPO)
    child = subprocess.Popen([sys.executable, '-c', CTRL_C_SCRIPT], stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        pids = [int(p) for p in child.stdout.readline().split()[1:]]
        time.sleep(0.5)                            # a batch or two sent and not yet received
        child.kill()
        child.wait(timeout=30)
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        if child.poll() is None:
            child.kill()
    assert pids and not any(_alive(pid) for pid in pids)
    assert not leftover_segments(child.pid)
