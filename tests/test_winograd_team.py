"""The compiled kernels' parts on the calling thread's OpenMP team (ember._winograd.team).

Every compiled kernel gives the same bits whether its parts run on the OpenMP team, on the
kernel threads or one after the other; team() checks all of its calls' arguments before it
runs any; KMP_AFFINITY pins the team's threads; a fork after the team has run leaves a child
that can run it again.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from ember import config
from ember.engine import threads
from ember.op.nn.conv import compiled, line, pointwise, winograd, winograd_compiled
from ember.op.nn._common import make_window
from tolerance import assert_sums_close

_winograd = compiled.MODULE
needs_module = pytest.mark.skipif(_winograd is None, reason='ember._winograd is not built')
needs_openmp = pytest.mark.skipif(_winograd is None or not _winograd.openmp,
                                  reason='ember._winograd is built without OpenMP')


def _layer(rng, batch, size, channels, filters):
    x = rng.standard_normal((batch, size, size, channels)).astype(np.float32)
    w = rng.standard_normal((filters, 3, 3, channels)).astype(np.float32)
    return x, w, rng.standard_normal(filters).astype(np.float32)


def _every_kernel(threads_):
    """Each compiled kernel's output, its parts split `threads_` ways."""
    rng = np.random.default_rng(7)
    x, w, bias = _layer(rng, 2, 14, 32, 40)
    window = make_window((3, 3), (1, 1), (1, 1), (1, 1), (14, 14), (14, 14))
    results = {}
    out = np.empty(x.shape[:3] + (40,), np.float32)
    winograd.winograd(x, w, bias, out, window, True, 4, threads=threads_)
    results['convolve + transform_weights'] = out
    few = np.empty((1, 7, 7, 40), np.float32)       # few tiles: the filters are split
    winograd.winograd(np.ascontiguousarray(x[:1, :7, :7]), w, bias, few,
                      make_window((3, 3), (1, 1), (1, 1), (1, 1), (7, 7), (7, 7)), True,
                      4, threads=threads_)
    results['convolve, filters split'] = few
    dw = np.empty(w.shape, np.float32)
    dy = rng.standard_normal(out.shape).astype(np.float32)
    winograd_compiled.weight_gradient(dy, x, dw, window, True, threads=threads_)
    results['weight_gradient + finish_gradient'] = dw
    pw = rng.standard_normal((40, 1, 1, 32)).astype(np.float32)
    forward = np.empty(x.shape[:3] + (40,), np.float32)
    pointwise.convolve(x, pw, bias, forward, (1, 1), None, 'relu', threads=threads_)
    results['pointwise'] = forward
    pdw, pdb = np.empty(pw.shape, np.float32), np.empty(40, np.float32)
    pointwise.weight_gradient(dy, x, pdw, pdb, threads=threads_)
    results['pointwise_gradient'] = (pdw, pdb)
    lw = rng.standard_normal((40, 1, 7, 32)).astype(np.float32)
    line_out = np.empty(x.shape[:3] + (40,), np.float32)
    line.convolve(x, lw, bias, line_out, 2, 3, None, 'relu', threads=threads_)
    results['line'] = line_out
    return results


def _same_bits(a, b):
    if isinstance(a, tuple):
        return all(_same_bits(p, q) for p, q in zip(a, b))
    return a.tobytes() == b.tobytes()


@needs_module
@pytest.mark.parametrize('use_team', [True, False], ids=['OpenMP team', 'kernel threads'])
def test_each_kernel_gives_the_same_bits_however_its_parts_run(monkeypatch, use_team):
    monkeypatch.setattr(compiled, 'use_team', use_team)
    with config.override(MXNET_CPU_PARALLEL_SIZE=1):        # every kernel splits
        alone = _every_kernel(1)
        for count in (2, 3):
            split = _every_kernel(count)
            for name in alone:
                assert _same_bits(split[name], alone[name]), (name, count)


@needs_module
def test_run_compiled_splits_only_from_the_parallel_size_and_outside_a_split(monkeypatch):
    seen = []
    monkeypatch.setattr(compiled, 'MODULE', type(
        'Spy', (), {'openmp': 1, 'team': staticmethod(lambda *a: seen.append('team'))}))
    kernel = _winograd.finish_gradient
    calls = [('a',), ('b',)]
    monkeypatch.setattr(compiled, 'run_parts', lambda *a, **k: seen.append('pool'))
    with config.override(MXNET_CPU_PARALLEL_SIZE=100):
        compiled.run_compiled(kernel, 100, calls)
        assert seen == ['team']
        monkeypatch.setattr(compiled, 'use_team', False)
        compiled.run_compiled(kernel, 100, calls)
        assert seen == ['team', 'pool']
        ran = []
        compiled.run_compiled(lambda *args: ran.append(args), 99, calls)
        with threads.serial_region():
            compiled.run_compiled(lambda *args: ran.append(args), 100, calls)
        assert ran == calls * 2 and seen == ['team', 'pool']


@needs_module
def test_team_runs_every_call():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 6, 16)).astype(np.float32)
    w = rng.standard_normal((32, 1, 1, 16)).astype(np.float32)
    u = pointwise.packed_weights(w, None, None)
    out = np.zeros((1, 6, 6, 32), np.float32)
    calls = [(x, u, out, None, None, False, (lo, lo + 12), 4, 16) for lo in (0, 12, 24)]
    _winograd.team(_winograd.pointwise, calls)
    expected = x.reshape(36, 16) @ w.reshape(32, 16).T
    magnitude = abs(x.reshape(36, 16)) @ abs(w.reshape(32, 16)).T
    assert_sums_close(out.reshape(36, 32), expected, magnitude, terms=16)
    _winograd.team(_winograd.pointwise, [])                 # nothing to run


@needs_module
def test_team_checks_every_call_before_it_runs_one():
    x = np.ones((1, 4, 4, 16), np.float32)
    u = pointwise.packed_weights(np.ones((16, 1, 1, 16), np.float32), None, None)
    out = np.zeros((1, 4, 4, 16), np.float32)
    good = (x, u, out, None, None, False, (0, 16), 4, 16)
    with pytest.raises(ValueError, match=r'rows \[0, 99\): expected 0 <= lo <= hi <= 16'):
        _winograd.team(_winograd.pointwise, [good, good[:6] + ((0, 99),) + good[7:]])
    assert not out.any()                                    # the good call did not run
    with pytest.raises(TypeError, match=r"calls\[1\]: expected a tuple of the kernel's "
                                        r"arguments, got list"):
        _winograd.team(_winograd.pointwise, [good, list(good)])
    with pytest.raises(TypeError, match='kernel: expected one of this module.s kernels'):
        _winograd.team(print, [good])
    with pytest.raises(TypeError, match='kernel: expected'):
        _winograd.team(_winograd.instruction_set, [good])
    with pytest.raises(ValueError, match='cores: expected one core for each of the 2 calls, '
                                         'got 1'):
        _winograd.team(_winograd.pointwise, [good, good], (0,))
    with pytest.raises(ValueError, match='cores: expected core numbers >= 0, got -1'):
        _winograd.team(_winograd.pointwise, [good, good], (0, -1))
    assert not out.any()


def test_team_cores_follow_kmp_affinity():
    threads.stop_kernel_pool()
    try:
        with config.override(KMP_AFFINITY=None):
            assert threads.team_cores(2) is None
        threads.stop_kernel_pool()
        with config.override(KMP_AFFINITY='granularity=fine,compact,1,0'):
            cores = sorted(os.sched_getaffinity(0))
            assert threads.team_cores(3) == tuple(cores[i % len(cores)] for i in range(3))
    finally:
        threads.stop_kernel_pool()


def _run_script(body, env=None):
    """Runs `body` in a fresh interpreter; its stdout, which must end in 'ok'."""
    script = textwrap.dedent('''
        import os, sys, time
        import numpy as np
        from ember.op.nn.conv import compiled, pointwise
        _winograd = compiled.MODULE
        x = np.ones((1, 8, 8, 16), np.float32)
        u = pointwise.packed_weights(np.ones((16, 1, 1, 16), np.float32), None, None)
        out = np.zeros((1, 8, 8, 16), np.float32)
        def team(cores=None):
            claim = np.zeros(1, np.int64)
            call = (x, u, out, None, None, False, (0, 64), 4, 16, claim)
            _winograd.team(_winograd.pointwise, [call, call], cores)
            assert (out == 16).all()
        def wait_for(child):
            # the forked child exits with 0 within 30 s, else it hung
            deadline = time.time() + 30
            while time.time() < deadline:
                done, status = os.waitpid(child, os.WNOHANG)
                if done:
                    assert os.waitstatus_to_exitcode(status) == 0
                    return
                time.sleep(0.05)
            os.kill(child, 9)
            sys.exit('the child hung')
        ''') + textwrap.dedent(body)
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                            timeout=120, env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith('ok'), result.stdout
    return result.stdout


@needs_openmp
@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='pins threads on Linux')
def test_a_team_thread_pins_itself_to_its_core():
    """With cores, team thread 1 (not the caller) runs on cores[1] from then on."""
    core = max(os.sched_getaffinity(0))
    _run_script(f'''
        team((0, {core}))
        def allowed(task):
            with open(f'/proc/self/task/{{task}}/status') as status:
                line = next(l for l in status if l.startswith('Cpus_allowed_list'))
            return line.split()[1]
        tasks = [t for t in os.listdir('/proc/self/task') if int(t) != os.getpid()]
        assert '{core}' in [allowed(t) for t in tasks], [allowed(t) for t in tasks]
        assert os.sched_getaffinity(0) != {{{core}}} or len(os.sched_getaffinity(0)) == 1
        print('ok')
    ''')


@needs_openmp
def test_a_child_forked_after_the_team_ran_runs_it_again():
    """GNU libgomp's threads do not survive fork: Ember ends them before one (the child
    would otherwise wait for them at its first parallel region)."""
    _run_script('''
        import ember
        team()
        pid = os.fork()
        if pid == 0:
            out[:] = 0
            team()
            os._exit(0)
        wait_for(pid)
        team()
        print('ok')
    ''')


def test_a_forked_child_of_the_naive_engine_runs_onednn_again():
    """The NaiveEngine runs oneDNN on the forking thread, whose OpenMP team fork loses."""
    from ember.backend import onednn
    if not onednn.available():
        pytest.skip('oneDNN is not installed')
    _run_script('''
        import ember as mx
        x = mx.nd.ones((1, 8, 10, 10))
        w = mx.nd.ones((8, 8, 3, 3))
        def conv():
            y = mx.nd.Convolution(x, w, kernel=(3, 3), num_filter=8, no_bias=True)
            assert float(y.asnumpy()[0, 0, 0, 0]) == 72.0
        conv()
        pid = os.fork()
        if pid == 0:
            conv()
            os._exit(0)
        wait_for(pid)
        print('ok')
    ''', env={'MXNET_ENGINE_TYPE': 'NaiveEngine'})
