"""Every program under examples/ runs on Ember (``python -m ember run``, so ``import mxnet``
gives Ember) and prints what MXNet 1.9.1 printed: ``examples/compare.py --record`` wrote
MXNet's output to tests/data/mxnet-1.9.1/examples/<name>.out."""
import subprocess
import sys
from pathlib import Path

import pytest

from ember import config

REPO = Path(__file__).resolve().parents[1]
RECORDED = REPO / 'tests' / 'data' / 'mxnet-1.9.1' / 'examples'
EXAMPLES = sorted(p for p in (REPO / 'examples').glob('*.py')
                  if p.name != 'compare.py' and not p.name.startswith('_'))


def test_there_are_examples_and_mxnets_outputs_of_them():
    assert {'gluon_crash_course', 'module_training'} <= {p.stem for p in EXAMPLES}
    recorded = {p.stem for p in RECORDED.glob('*.out')}
    assert recorded <= {p.stem for p in EXAMPLES}, 'outputs recorded for missing examples'


@pytest.mark.parametrize('path', EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_prints_what_mxnet_printed(path):
    done = subprocess.run([sys.executable, '-m', 'ember', 'run', str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env=config.child_environ(PYTHONPATH=str(REPO), OMP_NUM_THREADS='2'))
    assert done.returncode == 0, done.stderr[-3000:]
    expected = RECORDED / f'{path.stem}.out'
    if not expected.exists():
        pytest.skip(f'no MXNet output recorded for {path.name}: '
                    'run python examples/compare.py --record')
    assert done.stdout.splitlines() == expected.read_text().splitlines()
