"""examples/ssd_head.py prints on Ember what it printed on MXNet 1.9.1."""
import subprocess
import sys
from pathlib import Path

from data_files import DATA
from ember import config

ROOT = Path(__file__).resolve().parents[1]


def test_ssd_head_prints_what_mxnet_printed():
    env = config.child_environ(PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, str(ROOT / 'examples' / 'ssd_head.py')],
                            capture_output=True, text=True, env=env, timeout=240, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    expected = (DATA / 'mxnet-1.9.1-ops' / 'ssd_head.txt').read_text().splitlines()
    assert result.stdout.splitlines() == expected
