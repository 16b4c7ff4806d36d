"""``python -m ember parallel-compile``: a training script with three graphs, one of which fails
to compile once and compiles on its retry; the JSON summary; the real run compiles nothing.
A script that fails stops it unless NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE."""
import json
import subprocess
import sys
from pathlib import Path

from ember import config

REPO = Path(__file__).resolve().parents[1]

# A Custom operator whose shape inference fails the first time it runs outside the trial run
# (a marker file remembers that it did): the first compilation of its graph fails.
FLAKY_OP = '''
import os
import ember as mx

MARKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'failed-once')


class Twice(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        self.assign(out_data[0], req[0], in_data[0] * 2)

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        self.assign(in_grad[0], req[0], out_grad[0] * 2)


@mx.operator.register('flaky_twice')
class TwiceProp(mx.operator.CustomOpProp):
    def __init__(self):
        super().__init__(need_top_grad=True)

    def infer_shape(self, in_shape):
        extracting = os.environ.get('NEURON_EXTRACT_GRAPHS_ONLY') == '1'
        if not extracting and not os.path.exists(MARKER):
            open(MARKER, 'w').close()
            raise RuntimeError('a transient failure of the first compilation')
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return Twice()
'''

TRAIN = '''
import json, sys
import ember as mx
import flaky_op  # noqa: F401  (registers flaky_twice)
from ember import compiler


class WithCustom(mx.gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.dense = mx.gluon.nn.Dense(3, in_units=4)

    def hybrid_forward(self, F, x):
        return F.Custom(self.dense(x), op_type='flaky_twice')


mx.random.seed(1)
blocks = [mx.gluon.nn.Dense(3, in_units=4, prefix='a_'), mx.gluon.nn.Dense(5, in_units=4,
          prefix='b_'), WithCustom(prefix='c_')]
for block in blocks:
    block.initialize()
    block.hybridize()
trainer = mx.gluon.Trainer([p for b in blocks for p in b.collect_params().values()], 'sgd')
x = mx.nd.ones((2, 4))
with mx.autograd.record():                 # two training graphs
    loss = sum(block(x).sum() for block in blocks[:2])
loss.backward()
trainer.step(2, ignore_stale_grad=True)
outputs = blocks[2](x).asnumpy().tolist()  # and one for inference
if 'fail' in sys.argv:
    raise SystemExit('the script fails after recording its graphs')
print(json.dumps({'counters': compiler.counters(), 'outputs': outputs,
                  'loss': float(loss.asscalar())}))
'''


def _setup(tmp_path):
    (tmp_path / 'flaky_op.py').write_text(FLAKY_OP)
    (tmp_path / 'train.py').write_text(TRAIN)
    return config.child_environ(NEURON_CC_FLAGS=f'--cache_dir={tmp_path / "cache"}',
                                NEURON_PARALLEL_COMPILE_MAX_RETRIES=1,
                                MXNET_ENGINE_TYPE='NaiveEngine',     # for the Custom op
                                PYTHONPATH=f'{REPO}:{tmp_path}')


def _run(env, tmp_path, *argv, **extra):
    command = [sys.executable, '-m', 'ember', 'parallel-compile', '--workers', '2',
               '--summary', str(tmp_path / 'summary.json'), '--', sys.executable, 'train.py']
    return subprocess.run(command + list(argv), env={**env, **extra}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)


def test_three_graphs_one_retried_then_the_real_run_compiles_nothing(tmp_path):
    env = _setup(tmp_path)
    done = _run(env, tmp_path)
    assert done.returncode == 0, done.stderr
    summary = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{')]
    assert summary == json.loads((tmp_path / 'summary.json').read_text())
    assert len(summary) == 3 and all(r['status'] == 'compiled' for r in summary), summary
    retried = [r for r in summary if r['attempts'] == 2]
    assert [r['graph'] for r in retried] == ['c_custom0'], summary
    assert 'graphs' in done.stderr and '3/3' in done.stderr         # the progress bar
    real = subprocess.run([sys.executable, 'train.py'], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert real.returncode == 0, real.stderr
    result = json.loads(real.stdout.splitlines()[-1])
    assert result['counters']['compiles'] == 0 and result['counters']['loads'] == 3


def test_a_failing_script_stops_it_unless_told_to_compile_anyway(tmp_path):
    env = _setup(tmp_path)
    (tmp_path / 'failed-once').touch()            # no flaky compilation here
    stopped = _run(env, tmp_path, 'fail')
    assert stopped.returncode != 0
    assert 'NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE' in stopped.stderr
    assert not (tmp_path / 'summary.json').exists()
    going = _run(env, tmp_path, 'fail', NEURON_IGNORE_TRAINING_SCRIPT_ERROR_AND_COMPILE='1')
    assert going.returncode == 0, going.stderr
    assert len(json.loads((tmp_path / 'summary.json').read_text())) == 3
