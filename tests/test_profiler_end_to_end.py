"""The profiler sees real operators: MXNET_PROFILER_AUTOSTART writes them to profile.json at exit,
and MXNET_PROFILER_MODE decides whether imperative operators count."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ember import config

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = '''
import ember as mx
a = mx.nd.ones((4, 4))
b = mx.nd.dot(a, a) + 1
b.wait_to_read()
'''


def operator_events(tmp_path, mode):
    environ = config.child_environ(MXNET_PROFILER_AUTOSTART=True, MXNET_PROFILER_MODE=mode,
                                   PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, '-c', PROGRAM], env=environ, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    trace = json.loads((tmp_path / 'profile.json').read_text())
    return {e['name'] for e in trace['traceEvents'] if e.get('ph') == 'X'}


@pytest.mark.parametrize('mode', ['1'])
def test_autostart_records_imperative_operators_in_mode_1(tmp_path, mode):
    assert {'dot', '_plus_scalar'} <= operator_events(tmp_path, mode)


def test_mode_0_records_graph_operators_only(tmp_path):
    assert not {'dot', '_plus_scalar'} & operator_events(tmp_path, '0')
