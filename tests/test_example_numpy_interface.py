"""``examples/numpy_interface.py`` prints under Ember what it printed under MXNet 1.9.1
(``tests/data/mxnet-1.9.1/numpy_interface.txt``, recorded with MXNet's Python)."""
import os
import subprocess
import sys
from pathlib import Path

from ember import config

REPO = Path(__file__).resolve().parents[1]


def test_numpy_interface_example_prints_what_mxnet_printed():
    environ = config.child_environ()
    environ['PYTHONPATH'] = os.pathsep.join(filter(None, [str(REPO),
                                                         environ.get('PYTHONPATH')]))
    run = subprocess.run([sys.executable, str(REPO / 'examples' / 'numpy_interface.py')],
                         capture_output=True, text=True, env=environ, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    expected = (REPO / 'tests' / 'data' / 'mxnet-1.9.1' / 'numpy_interface.txt').read_text()
    assert run.stdout.splitlines() == expected.splitlines()
