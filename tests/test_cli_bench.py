"""``python -m ember bench``: the inference (score) and training benchmarks and their output."""
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ember import backend, cli, config
from ember.cli import bench
from ember.gluon import nn

REPO = Path(__file__).resolve().parents[1]


def tiny_block(classes):
    net = nn.HybridSequential()
    net.add(nn.Conv2D(4, 3, padding=1, activation='relu'), nn.GlobalAvgPool2D(),
            nn.Dense(classes))
    return net


TINY = bench.Network('tiny', 'Tiny net', 'tiny_zoo', image_size=8, classes=5,
                     factory=tiny_block)
WIDER = bench.Network('wider', 'A wider tiny net', 'wider_zoo', image_size=12, classes=3,
                      factory=tiny_block)


@pytest.fixture
def tiny(monkeypatch):
    """Networks small enough to measure in milliseconds, known to ``--network``."""
    monkeypatch.setitem(bench.NETWORKS, 'tiny', TINY)
    monkeypatch.setitem(bench.NETWORKS, 'wider', WIDER)
    return TINY


def run_bench(capsys, *args):
    """(exit status, stdout, stderr) of ``ember bench ARGS`` in this process."""
    status = cli.main(['bench', *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def exit_status(capsys, *args):
    """(exit status, stderr) of ``ember bench ARGS`` when argparse rejects them."""
    with pytest.raises(SystemExit) as exc:
        cli.main(['bench', *args])
    return exc.value.code, capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# Arguments.

def test_bench_is_a_command():
    assert cli.commands()['bench'] == 'ember.cli.bench'


def test_guide_names_and_zoo_names_pick_the_same_networks():
    guide = bench.parse_networks('alexnet,vgg-16,inception-bn,inception-v3,resnet-50,resnet-152')
    zoo = bench.parse_networks('alexnet,vgg16,inceptionbn,inceptionv3,resnet50_v1,resnet152_v1')
    assert guide == zoo == bench.parse_networks('all')
    assert [n.title for n in guide] == ['Alexnet', 'VGG 16', 'Inception-BN', 'Inception-v3',
                                        'Resnet 50', 'Resnet 152']
    assert {n.name: n.image_size for n in guide}['inception-v3'] == 299
    assert bench.parse_networks('Resnet-50, resnet50_v1') == (bench.NETWORKS['resnet-50'],)


@pytest.mark.parametrize('args, message', [
    (['score', '--network', 'resnet-51'], "unknown network 'resnet-51'; did you mean 'resnet-50'?"),
    (['train', '--network', 'inception_v3'], "did you mean 'inceptionv3'?"),
    (['score', '--network', 'lenet'], 'Accepted: all, alexnet, vgg-16'),
    (['score', '--batch-size', '0'], "batch size '0': expected positive integers"),
    (['score', '--batch-size', '8,eight'], "batch size 'eight' in '8,eight'"),
    (['train', '--batch-size', '-4'], "batch size '-4'"),
    (['score', '--dtype', 'float61'],
     "expected float32, float16, bfloat16; did you mean 'float16'?"),
    (['score', '--batches', '0'], "'0': expected an integer >= 1"),
    (['score', '--warmup', 'x'], "'x': expected an integer >= 0"),
    (['score', '--device', 'tpu'], "invalid choice: 'tpu'"),
    ([], 'the following arguments are required: ACTION'),
])
def test_bad_arguments_exit_2_with_a_clear_message(capsys, args, message):
    status, err = exit_status(capsys, *args)
    assert status == 2
    assert message in err


# ----------------------------------------------------------------------------------------------
# Measuring.

def test_warmup_batches_are_not_timed():
    now = [0.0]
    steps = []

    def step():
        steps.append(len(steps))
        now[0] += 100.0 if len(steps) <= 2 else 1.0    # two slow warm-up steps, then fast ones
    labels = []
    cell = bench.time_batches(step, TINY, 4, batches=3, warmup=2, on_batch=labels.append,
                              clock=lambda: now[0])
    assert len(steps) == 5
    assert labels == ['tiny batch 4 (warm-up)'] * 2 + ['tiny batch 4'] * 3
    assert (cell.batches, cell.seconds, cell.images_per_second) == (3, 3.0, 4.0)


def test_score_runs_the_prepared_network_in_the_requested_dtype():
    net = bench.prepare(TINY, 'float16')
    cell = bench.score_cell(net, TINY, batch_size=2, dtype='float16', batches=2, warmup=1)
    assert cell.images_per_second > 0
    assert {np.dtype(p.dtype) for p in net.collect_params().values()} == {np.dtype(np.float16)}
    from ember import autograd
    with autograd.predict_mode():
        out = net(bench.random_batch(TINY, 3, 'float16'))
    assert out.shape == (3, TINY.classes) and np.dtype(out.dtype) == np.float16


def test_training_steps_update_the_weights_and_scoring_does_not():
    net = bench.prepare(TINY)
    bench.score_cell(net, TINY, batch_size=2, batches=1, warmup=0)
    weights = {name: p.data().asnumpy() for name, p in net.collect_params().items()}
    bench.score_cell(net, TINY, batch_size=2, batches=2, warmup=0)
    assert all(np.array_equal(p.data().asnumpy(), weights[name])
               for name, p in net.collect_params().items())
    cell = bench.train_cell(net, TINY, batch_size=4, batches=2, warmup=0)
    assert cell.images_per_second > 0
    changed = [name for name, p in net.collect_params().items()
               if not np.array_equal(p.data().asnumpy(), weights[name])]
    assert sorted(changed) == sorted(weights)


# ----------------------------------------------------------------------------------------------
# Output.

def test_score_json_is_the_only_thing_on_stdout(tiny, capsys):
    status, out, err = run_bench(capsys, 'score', '--network', 'tiny', '--batch-size', '1,3',
                                 '--batches', '2', '--warmup', '1', '--json')
    assert status == 0
    report = json.loads(out)
    assert {'command', 'device', 'engine', 'kernels', 'dtype', 'warmup', 'batches', 'results',
            'peak_rss_mb', 'pool_peak_mb'} <= set(report)
    assert (report['command'], report['device'], report['dtype']) == ('score', 'cpu(0)', 'float32')
    assert report['engine'] == config.get('MXNET_ENGINE_TYPE')
    assert [(r['network'], r['batch_size'], r['batches']) for r in report['results']] == [
        ('tiny', 1, 2), ('tiny', 3, 2)]
    for result in report['results']:
        assert result['images_per_second'] == pytest.approx(
            result['batch_size'] * result['batches'] / result['seconds'])
        assert result['images_per_second'] > 0
    # stderr is not a terminal here: one line per cell, no bar
    assert err.splitlines()[:2] == [line for line in err.splitlines() if 'img/s' in line]
    assert err.startswith('tiny batch 1: ') and '\r' not in err


def test_score_prints_the_guide_table(tiny, capsys):
    status, out, _ = run_bench(capsys, 'score', '--network', 'tiny,wider_zoo', '--batch-size',
                               '2,1', '--batches', '1', '--warmup', '0', '--dtype', 'float16')
    assert status == 0
    lines = out.splitlines()
    header = lines.index('| Batch | Tiny net | A wider tiny net |')
    assert lines[header + 1] == '|-------|----------|------------------|'
    rows = [line.strip('|').split('|') for line in lines[header + 2:header + 4]]
    assert [int(row[0]) for row in rows] == [2, 1]
    assert all(float(value) > 0 for row in rows for value in row[1:])
    assert 'float16' in lines[0] and 'Peak memory: process RSS' in out


def test_render_table_marks_missing_cells():
    cells = [bench.Cell('alexnet', 1, 4, 2.0), bench.Cell('resnet-50', 32, 2, 8.0)]
    networks = bench.parse_networks('alexnet,resnet-50')
    assert bench.render_table(cells, networks, (1, 32)).splitlines()[2:] == [
        '| 1     | 2.00    | -         |',
        '| 32    | -       | 8.00      |']


def test_an_interrupted_run_prints_what_it_measured(tiny, capsys, monkeypatch):
    real_score_cell = bench.score_cell

    def interrupted_at_batch_4(net, network, batch_size, *args):
        if batch_size == 4:
            raise KeyboardInterrupt
        return real_score_cell(net, network, batch_size, *args)
    monkeypatch.setattr(bench, 'score_cell', interrupted_at_batch_4)
    status, out, _ = run_bench(capsys, 'score', '--network', 'tiny', '--batch-size', '1,4',
                               '--batches', '1', '--warmup', '0')
    assert status == 130
    lines = out.splitlines()
    assert lines[lines.index('| 4     | -        |') - 1].startswith('| 1     | ')


class FailsBelowFloat32(nn.HybridBlock):
    def hybrid_forward(self, F, x):
        raise TypeError('no kernel for this dtype')


def test_a_network_that_fails_in_reduced_precision_is_named(monkeypatch, capsys):
    failing = bench.Network('failing', 'Failing', 'failing', image_size=4,
                            factory=lambda classes: FailsBelowFloat32())
    monkeypatch.setitem(bench.NETWORKS, 'failing', failing)
    status, out, err = run_bench(capsys, 'score', '--network', 'failing', '--batch-size', '1',
                                 '--dtype', 'bfloat16', '--json')
    assert status == 1 and out == ''
    assert 'failing did not run in bfloat16: no kernel for this dtype' in err
    assert 'Accepted dtypes are float32, float16, bfloat16' in err


def test_progress_draws_a_bar_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    stream = Terminal()
    progress = bench.Progress(4, stream)
    for _ in range(4):
        progress.batch('resnet-50 batch 8')
    progress.cell(bench.Cell('resnet-50', 8, 4, 2.0))
    progress.close()
    text = stream.getvalue()
    assert f'\r[{"#" * 15}{"." * 15}] 2/4 batches' in text
    assert f'\r[{"#" * 30}] 4/4 batches' in text
    assert 'resnet-50 batch 8: 16.00 img/s (4 batches in 2.00 s)\n' in text


def test_progress_off_a_terminal_writes_one_line_per_cell():
    stream = io.StringIO()
    progress = bench.Progress(2, stream)
    progress.batch('alexnet batch 1')
    progress.cell(bench.Cell('alexnet', 1, 1, 0.5))
    progress.close()
    assert stream.getvalue() == 'alexnet batch 1: 2.00 img/s (1 batches in 0.50 s)\n'


def test_train_reports_speed_and_peak_memory(tiny, capsys):
    status, out, _ = run_bench(capsys, 'train', '--network', 'tiny', '--batch-size', '4',
                               '--batches', '2', '--warmup', '1', '--json')
    assert status == 0
    report = json.loads(out)
    assert report['command'] == 'train'
    assert report['optimizer'] == {'name': 'sgd', **bench.SGD_SETTINGS}
    assert report['optimizer']['momentum'] == 0.9
    assert report['results'][0]['batch_size'] == 4 and report['results'][0]['batches'] == 2
    assert report['results'][0]['images_per_second'] > 0
    assert report['peak_rss_mb'] > 10 and report['pool_peak_mb'] >= 0
    status, out, _ = run_bench(capsys, 'train', '--network', 'tiny', '--batch-size', '2',
                               '--batches', '1', '--warmup', '0')
    assert status == 0
    assert out.startswith('Training, images per second.') and '| 2     | ' in out
    assert 'Peak memory: process RSS' in out and 'storage pool' in out


def test_peak_memory_covers_what_the_pool_held():
    import ember as mx
    held = mx.nd.zeros((4, 2**20), ctx=mx.cpu())     # 16 MiB from the CPU pool
    held.wait_to_read()
    peak = bench.peak_memory(mx.cpu())
    assert peak['pool_peak_mb'] >= 16 and peak['peak_rss_mb'] >= 16
    del held


@pytest.mark.skipif(backend.num_gpus() > 0, reason='a GPU is visible')
def test_gpu_without_a_gpu_is_a_clear_error(tiny, capsys):
    status, out, err = run_bench(capsys, 'score', '--network', 'tiny', '--device', 'gpu')
    assert status == 2 and out == ''
    assert 'no GPU is visible' in err and 'use --device cpu' in err


# ----------------------------------------------------------------------------------------------
# The plot.

def test_plot_draws_a_png(tiny, capsys, tmp_path):
    pytest.importorskip('matplotlib')
    picture = tmp_path / 'speed.png'
    status, _, err = run_bench(capsys, 'score', '--network', 'tiny', '--batch-size', '1,2',
                               '--batches', '1', '--warmup', '0', '--plot', str(picture))
    assert status == 0 and f'wrote {picture}' in err
    assert picture.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_plot_without_matplotlib_says_to_install_the_extra(tiny, capsys, monkeypatch, tmp_path):
    for name in ['matplotlib', 'matplotlib.figure'] + list(sys.modules):
        if name.split('.')[0] == 'matplotlib':
            monkeypatch.setitem(sys.modules, name, None)    # importing it now fails
    status, err = exit_status(capsys, 'score', '--network', 'tiny', '--plot', 'out.png')
    assert status == 2
    assert "matplotlib is not installed; install the plot extra: pip install 'ember[plot]'" in err
    with pytest.raises(RuntimeError, match=r"pip install 'ember\[plot\]'"):
        bench.plot([bench.Cell('tiny', 1, 1, 1.0)], [TINY], [1], str(tmp_path / 'x.png'), '')
    assert not (tmp_path / 'x.png').exists()


# ----------------------------------------------------------------------------------------------
# A real network, as a user runs it.

def test_alexnet_scores_in_a_fresh_process(tmp_path):
    env = config.child_environ(PYTHONPATH=str(REPO))
    for name in [n for n in env if n.startswith(config.PREFIXES) or n in config.REGISTRY]:
        del env[name]       # measure under the defaults, whatever this process was given
    env['HOME'] = str(tmp_path)     # the default compile cache, under ~/.mxnet, goes there
    done = subprocess.run([sys.executable, '-m', 'ember', 'bench', 'score', '--network',
                           'alexnet', '--batch-size', '1', '--batches', '1', '--warmup', '0',
                           '--json'], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report['device'] == 'cpu(0)' and report['engine'] == 'ThreadedEnginePerDevice'
    assert report['kernels'] in ('onednn', 'numpy') and report['dtype'] == 'float32'
    [result] = report['results']
    assert (result['network'], result['batch_size'], result['batches']) == ('alexnet', 1, 1)
    assert result['images_per_second'] > 0 and result['seconds'] > 0
    assert report['peak_rss_mb'] > 0
    assert done.stderr.startswith('alexnet batch 1: ')
