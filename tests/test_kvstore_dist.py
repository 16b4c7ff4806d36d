"""The distributed stores on 2 and 4 MPI ranks of this machine (loopback), the launcher and
its failure reports. Each run has a timeout, so that a hang fails instead of stalling the
suite. The ranks run tests/kvstore_worker.py; most checks share one run per rank count."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ember import config

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / 'tests' / 'kvstore_worker.py')
TIMEOUT = 240


def _mpiexec():
    if importlib.util.find_spec('mpi4py') is None:
        return None
    from ember.cli.launch import LaunchError, find_mpiexec
    try:
        return find_mpiexec()
    except LaunchError:
        return None


MPIEXEC = _mpiexec()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="needs mpi4py and the mpich wheel "
                                                        "(pip install 'ember[dist]')")


def run(command, timeout=TIMEOUT, lock_dir=None):
    # a private lock directory: another test run on this machine may pin the same cores
    environ = config.child_environ(PYTHONPATH=str(ROOT), OMP_NUM_THREADS='1',
                                   MXNET_CPU_PRIORITY_NTHREADS='2',
                                   MXNET_CORE_LOCK_DIR=lock_dir)
    return subprocess.run(command, env=environ, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def launch(ranks, *arguments, timeout=TIMEOUT, lock_dir=None):
    return run([sys.executable, '-m', 'ember', 'launch', '-n', str(ranks)] + list(arguments),
               timeout, lock_dir)


CORES = config.process_cores()
# --cores-per-rank 1 for 2 ranks needs two consecutive cores (a single core is always aligned)
PINNED = len(CORES) >= 2 and CORES[1] == CORES[0] + 1


def scenarios(tmp_path_factory, ranks, names, pin=False):
    out = tmp_path_factory.mktemp(f'ranks{ranks}')
    options = ['--cores-per-rank', '1'] if pin else []
    done = launch(ranks, *options, WORKER, str(out), *names,
                  lock_dir=str(tmp_path_factory.mktemp('locks')))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((out / f'rank-{r}.json').read_text()) for r in range(ranks)]


@pytest.fixture(scope='module')
def two(tmp_path_factory):
    return scenarios(tmp_path_factory, 2, ['where', 'dist_sync', 'dist_device_sync',
                                           'buckets', 'module', 'async', 'compression',
                                           'bigarray', 'bad_input', 'overlap', 'keep',
                                           'repeat'],
                     pin=PINNED)


@pytest.fixture(scope='module')
def four(tmp_path_factory):
    return scenarios(tmp_path_factory, 4, ['dist_sync', 'dist_device_sync', 'module'])


# Weights after training agree with one device's to float32 rounding of the summed gradients
# (the relative differences seen are 1e-7).
CLOSE = 1e-5


@pytest.mark.parametrize('count', ['two', 'four'])
@pytest.mark.parametrize('case', ['dist_sync', 'dist_device_sync', 'module'])
def test_data_parallel_training_ends_where_one_device_does(request, count, case):
    for rank, found in enumerate(request.getfixturevalue(count)):
        assert found[case]['difference'] < CLOSE, (rank, found[case])


def test_all_reduce_in_buckets_of_bucket_cap_mb(two):
    # 200-byte buckets over the CNN's gradients, last parameter first: the dense bias (12
    # bytes), the dense weight alone (432 > 200), then the conv bias and weight (16 + 144).
    for found in two:
        assert found['buckets']['buckets'] == [[3], [108], [4, 36]]
        assert found['buckets']['difference'] < CLOSE


def test_a_bucket_starts_while_later_gradients_are_computed(two):
    for found in two:
        assert found['overlap'] == {'overlap': True, 'sums': [2.0, 2.0]}


def test_dist_async_converges(two):
    for found in two:
        assert found['async']['update_on_kvstore'] is True
        assert found['async']['accuracy'] >= 0.9


def test_two_bit_compression_sums_the_workers_codes(two):
    assert all(found['compression']['exact'] for found in two)


def test_big_keys_are_sliced_over_the_ranks_and_small_ones_live_on_one(two):
    for rank, found in enumerate(two):
        big = found['bigarray']
        assert big['big_shards'] == [[0, 0, 13], [1, 13, 25]]
        assert big['small_shards'] == [[0, 0, 5]]
        assert big['sums_right']
        total = sum(range(1, len(two) + 1))
        assert big['rows'] == [[3, 20], [total, total]]     # row_sparse_pull of a sliced key
    # each rank's optimizer updates only its slice; rank 0 also owns the small key
    assert two[0]['bigarray']['updated_shapes'] == [['big', [13]], ['small', [5]]]
    assert two[1]['bigarray']['updated_shapes'] == [['big', [12]]]


def test_bad_input_is_a_clear_error_on_every_rank(two):
    for rank, found in enumerate(two):
        bad = found['bad_input']
        assert bad['mismatch_kind'] == 'DisagreementError'
        assert ("rank 0: init of key 'bad' (shape (2,), float32); rank 1: init of key 'bad' "
                "(shape (3,), float32)") in bad['mismatch']
        assert f"push of key 'never' on rank {rank}: the key has not been initialized" in \
            bad['before_init']
        assert bad['still_works']


def test_a_pull_after_an_all_reduce_serves_the_sum_while_it_is_there(two):
    total = float(sum(range(1, len(two) + 1)))
    for found in two:
        assert found['keep']['pulled'] == [total] * 6
        # key 's' lives on rank 0, whose array changed: every rank hears why
        assert 'rank 0 no longer has its last pushpull sum' in found['keep']['error']


def test_a_repeated_pushpull_sums_what_each_call_gives(two):
    ranks = len(two)
    for rank, found in enumerate(two):
        sums = found['repeat']['sums']
        for step in range(3):
            once = sum(rank + step for rank in range(ranks))
            assert sums[step] == [once * ranks, step * ranks * ranks]
        assert sums[3] == [float(ranks)] * 5
        # ready arrays all-reduce on the thread that asks, others on an engine worker, and
        # the two agree (rank 1's `out` call waited for a slow write)
        assert found['repeat']['on_main_thread'] == ([False, True] if rank else [True])


def test_a_raising_rank_stops_every_rank_and_is_named(tmp_path):
    done = launch(2, WORKER, str(tmp_path), 'raise', timeout=120)
    assert done.returncode == 1
    assert '[1] RuntimeError: rank 1 fails on purpose' in done.stdout + done.stderr
    assert 'ember launch: rank 1 failed first, with exit status 1' in done.stderr


def test_a_dying_rank_is_named(tmp_path):
    done = launch(2, WORKER, str(tmp_path), 'die', timeout=120)
    assert done.returncode == 9
    assert 'ember launch: rank 1 died with exit code 9 (killed by SIGKILL)' in done.stderr


def test_plain_mpiexec_and_a_rank_that_leaves_early(tmp_path):
    # rank 1 ends while rank 0 still all-reduces: rank 0 learns it at its next collective
    done = run([MPIEXEC, '-n', '2', sys.executable, WORKER, str(tmp_path), 'exit_early'],
               timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    # whichever rank reports first names both: rank 0's collective and rank 1 exiting
    assert 'rank 0: allreduce of key 0' in output and 'rank 1: exiting' in output


@pytest.mark.skipif(not PINNED, reason='needs two consecutive cores')
def test_cores_per_rank_pins_each_rank_to_its_own_core(two):
    assert [found['where'] for found in two] == [[CORES[0]], [CORES[1]]]


def test_an_unknown_host_is_named(tmp_path):
    unknown = launch(2, '--hosts', 'localhost,no-such-host.invalid', WORKER, str(tmp_path))
    assert unknown.returncode == 2
    assert "host 'no-such-host.invalid' does not resolve" in unknown.stderr


def test_bandwidth_reports_time_and_gb_per_second():
    done = run([sys.executable, '-m', 'ember', 'bandwidth', '--network', 'mobilenet0.25',
                '--image-shape', '3,32,32', '--num-classes', '10', '--kvstore', 'dist_sync',
                '-n', '2', '--num-batches', '2'], timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mobilenet0.25: 83 arrays" in done.stdout
    lines = [line for line in done.stdout.splitlines() if '] iter ' in line]
    assert len(lines) == 2 and all('GB/s per device' in line for line in lines)
    assert all(float(line.rsplit('error ', 1)[1]) < 1e-6 for line in lines)
    assert 'communication per batch' in done.stdout


CREATE = "import ember as mx; mx.kv.create('dist_sync')"


@pytest.mark.parametrize('variables,message', [
    ({'DMLC_ROLE': 'server'}, "DMLC_ROLE='server': Ember's distributed stores run every MPI "
                              "rank as a worker"),
    ({'DMLC_NUM_WORKER': '3'}, 'DMLC_NUM_WORKER=3, but MPI started 1 rank'),
])
def test_launch_variables_are_checked_against_mpi(variables, message):
    environ = config.child_environ(PYTHONPATH=str(ROOT), **variables)
    done = subprocess.run([sys.executable, '-c', CREATE], env=environ, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]


def test_ranks_end_when_the_launcher_is_killed(tmp_path):
    script = tmp_path / 'forever.py'
    script.write_text('import os, time\n'
                      f'open(os.path.join({str(tmp_path)!r}, f"pid-{{os.getpid()}}"), "w")\n'
                      'time.sleep(600)\n')
    environ = config.child_environ(PYTHONPATH=str(ROOT), MXNET_CORE_LOCK_DIR=str(tmp_path))
    launcher = subprocess.Popen([sys.executable, '-m', 'ember', 'launch', '-n', '2',
                                 str(script)], env=environ, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob('pid-*'))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(p.name[4:]) for p in tmp_path.glob('pid-*')]
    assert len(pids) == 2
    launcher.kill()                     # SIGKILL: no handler of the launcher runs
    launcher.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    alive = [pid for pid in pids if _alive(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, 'ranks outlived their killed launcher'


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not reaped by its parent) is not running
    with open(f'/proc/{pid}/stat') as stat:
        return stat.read().split(')')[-1].split()[0] != 'Z'
