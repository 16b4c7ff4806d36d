"""Several processes and the compile cache: four compiling one graph at once compile it once;
a process killed (SIGKILL) at any point of a compilation never leaves an entry that another
process trusts, and its lock does not block the next one.

The processes are forks of this one (Ember's fork handlers make that safe), so that each costs
milliseconds rather than an interpreter start; every wait is bounded."""
import os
import random
import signal
import time

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.compiler import artefact as artefacts, counters, store as stores
from ember.executor import compile as compiling

pytestmark = pytest.mark.skipif(not hasattr(os, 'fork'), reason='needs fork')

WAIT = 60.0          # seconds any child may take


@pytest.fixture
def cache(tmp_path):
    compiling.LOADED.clear()
    with config.override(NEURON_CC_FLAGS=f'--cache_dir={tmp_path / "cache"}'):
        yield tmp_path / 'cache'
    compiling.LOADED.clear()


def conv_net():
    """The same parameters and names in every process."""
    mx.random.seed(7)
    net = mx.gluon.nn.HybridSequential(prefix='stress_')
    with net.name_scope():
        net.add(mx.gluon.nn.Conv2D(16, 3, padding=1, in_channels=16),
                mx.gluon.nn.BatchNorm(in_channels=16), mx.gluon.nn.Activation('relu'),
                mx.gluon.nn.Conv2D(16, 3, padding=1, in_channels=16))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


INPUT = np.random.default_rng(3).standard_normal((2, 16, 12, 12)).astype(np.float32)


def compile_and_run():
    """(compiles, loads, output sum) of one process compiling the graph."""
    compiling.LOADED.clear()
    before = counters()
    total = float(conv_net()(mx.nd.array(INPUT)).asnumpy().astype(np.float64).sum())
    after = counters()
    return after['compiles'] - before['compiles'], after['loads'] - before['loads'], total


def fork(child, *args):
    """Run `child(write, *args)` in a forked process; returns (pid, read end of its pipe)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:                                     # the child never returns into pytest
        status = 0
        try:
            os.close(reader)
            child(lambda text: os.write(writer, (text + '\n').encode()), *args)
        except BaseException as exc:  # noqa: BLE001
            os.write(writer, f'error {type(exc).__name__}: {exc}\n'.encode())
            status = 1
        finally:
            os._exit(status)
    os.close(writer)
    return pid, reader


def collect(pid, reader):
    """(exit status or -signal, what the child wrote)."""
    deadline = time.monotonic() + WAIT
    chunks = []
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f'child {pid} took more than {WAIT} s')
        time.sleep(0.01)
    while True:
        chunk = os.read(reader, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(reader)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return code, b''.join(chunks).decode()


def test_four_processes_compiling_one_graph_compile_it_once(cache, tmp_path):
    go = tmp_path / 'go'

    def child(write):
        write('ready')
        deadline = time.monotonic() + WAIT
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.002)
        compiles, loads, total = compile_and_run()
        write(f'{compiles} {loads} {total!r}')
    children = [fork(child) for _ in range(4)]
    go.touch()
    results = []
    for pid, reader in children:
        code, text = collect(pid, reader)
        assert code == 0, text
        results.append(text.split('\n')[1].split())
    assert sorted(int(r[0]) for r in results) == [0, 0, 0, 1]       # one compiled
    assert sorted(int(r[1]) for r in results) == [0, 1, 1, 1]       # the others loaded it
    assert len({r[2] for r in results}) == 1                         # and compute alike
    assert not list((cache / 'locks').iterdir())


def _killed_at(step):
    """A child that dies (SIGKILL) at filesystem operation `step` of its compilation: in the
    middle of a write (half the bytes written), or just before a rename or a mkdir."""
    import pathlib
    calls = [0]

    def deadly(original, partial=None):
        def call(*args, **kwargs):
            calls[0] += 1
            if calls[0] == step:
                if partial is not None:
                    partial(*args)
                os.kill(os.getpid(), signal.SIGKILL)
            return original(*args, **kwargs)
        return call

    def half(path, data, *rest):
        with open(path, 'wb' if isinstance(data, bytes) else 'w') as out:
            out.write(data[:len(data) // 2])
    os.rename = deadly(os.rename)
    pathlib.Path.mkdir = deadly(pathlib.Path.mkdir)
    pathlib.Path.write_bytes = deadly(pathlib.Path.write_bytes, half)
    pathlib.Path.write_text = deadly(pathlib.Path.write_text, half)


def _trusted_entries_load(root):
    """Every entry the cache trusts is a whole artefact; returns how many there are."""
    store = stores.Store(root)
    trusted = [info for info in store.entries() if info.kind is not None]
    for info in trusted:
        artefacts.loads(store.lookup(info.digest).payload)
    return len(trusted)


def test_a_process_killed_at_any_step_leaves_no_entry_that_is_trusted(cache):
    for step in range(1, 40):
        def child(write):
            _killed_at(step)
            write(repr(compile_and_run()))
        code, text = collect(*fork(child))
        trusted = _trusted_entries_load(cache)      # whole, where there is one
        if code == 0:                # past the last step: the child published and lived
            assert trusted == 1
            break
        assert code == -signal.SIGKILL, text
        assert trusted == 0, f'killed at step {step}, it left an entry that is trusted'
    else:
        pytest.fail('the compilation never got past step 40')
    assert step > 6, 'the compilation took fewer filesystem steps than a publication has'
    code, text = collect(*fork(lambda write: write(repr(compile_and_run()))))
    assert code == 0, text
    compiles, loads, _ = eval(text)
    assert (compiles, loads) == (0, 1)


def test_processes_killed_at_random_times_never_leave_a_bad_entry(cache):
    rng = random.Random(11)
    for _ in range(6):
        stores.Store(cache).clear()
        pid, reader = fork(lambda write: write(repr(compile_and_run())))
        time.sleep(rng.uniform(0.0, 0.4))
        os.kill(pid, signal.SIGKILL)
        collect(pid, reader)
        _trusted_entries_load(cache)
        code, text = collect(*fork(lambda write: write(repr(compile_and_run()))))
        assert code == 0, text                  # the dead child's lock did not block it
        assert sum(eval(text)[:2]) == 1         # it compiled, or loaded a whole entry
