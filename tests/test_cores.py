"""NEURON_RT_VISIBLE_CORES: its syntax, pinning and thread pools, and per-core locks that die
with their process. The pinning happens when the engine starts, so each case runs in a fresh
interpreter."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ember import config

ROOT = Path(__file__).resolve().parents[1]
CORE = config.process_cores()[0]

# Holds the cores, reports its pinning and what a child it starts sees, then waits for stdin.
HOLDER = """
import json, os, subprocess, sys
import ember as mx
mx.nd.ones((2,)).asnumpy()          # starts the engine, which claims the cores
child = subprocess.run([sys.executable, '-c', sys.argv[1]], capture_output=True, text=True)
print(json.dumps({'affinity': sorted(os.sched_getaffinity(0)),
                  'process_cores': list(mx.config.process_cores()),
                  'kernel_threads': mx.engine.kernel_threads(),
                  'held': list(mx.cores.held()), 'child': child.stdout.strip(),
                  'child_error': child.stderr[-300:]}), flush=True)
sys.stdin.read()
"""
CLAIM = ("import os, ember as mx; mx.nd.ones((2,)).asnumpy(); "
         "print(sorted(os.sched_getaffinity(0)))")


def environ(lock_dir, cores):
    return config.child_environ(PYTHONPATH=str(ROOT), NEURON_RT_VISIBLE_CORES=cores,
                                MXNET_CORE_LOCK_DIR=str(lock_dir), OMP_NUM_THREADS=None)


def claim(lock_dir, cores):
    return subprocess.run([sys.executable, '-c', CLAIM], env=environ(lock_dir, cores),
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_syntax_contiguity_and_alignment():
    var = config.lookup('NEURON_RT_VISIBLE_CORES')
    assert config.parse_value(var, '3') == (3,)
    assert config.parse_value(var, '8-15') == tuple(range(8, 16))
    assert config.parse_value(var, '4,5') == (4, 5)
    assert config.parse_value(var, '1-3') == (1, 2, 3)     # 3 is not a group size with a rule
    with pytest.raises(config.ConfigError, match='core 2 does not follow core 0'):
        config.parse_value(var, '0,2')
    with pytest.raises(config.ConfigError, match="2 cores starting at a multiple of 2, e.g. "
                                                 "'2-3' or '4-5'"):
        config.parse_value(var, '3-4')
    with pytest.raises(config.ConfigError, match='8 cores starting at a multiple of 8'):
        config.parse_value(var, '4-11')


def test_a_process_pins_itself_and_its_pools_and_holds_the_core_until_it_dies(tmp_path):
    holder = subprocess.Popen([sys.executable, '-c', HOLDER, CLAIM],
                              env=environ(tmp_path, str(CORE)), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        report = json.loads(holder.stdout.readline())
        assert report['affinity'] == [CORE] and report['process_cores'] == [CORE]
        assert report['kernel_threads'] == 1 and report['held'] == [CORE]
        # a process the holder started works on the holder's cores
        assert report['child'] == str([CORE]), report['child_error']
        other = claim(tmp_path, str(CORE))
        assert other.returncode != 0
        assert f'core {CORE} is held by process {holder.pid}' in other.stderr
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    after = claim(tmp_path, str(CORE))       # the lock died with its process
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == str([CORE])


def test_a_core_outside_the_process_is_an_error(tmp_path):
    beyond = max(os.sched_getaffinity(0)) + 1
    missing = claim(tmp_path, str(beyond))
    assert missing.returncode != 0
    assert f'core {beyond} is not available to this process' in missing.stderr
