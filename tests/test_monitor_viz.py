"""mx.monitor.Monitor on executors and in Module.fit; mx.viz without graphviz. (print_summary's
text and plot_network's drawing match MXNet's in test_api_values.py.)"""
import logging
import sys

import numpy as np
import pytest

import ember as mx


def _net():
    data = mx.sym.var('data')
    fc = mx.sym.FullyConnected(data, num_hidden=2, name='fc')
    return mx.sym.SoftmaxOutput(mx.sym.relu(fc, name='act'), name='softmax')


def test_monitor_collects_every_interval_batches_with_its_statistic():
    exe = _net().simple_bind(mx.cpu(), data=(2, 3), grad_req='null')
    exe.arg_dict['fc_weight'][:] = np.array([[1, 0, 0], [0, 1, 0]])
    monitor = mx.monitor.Monitor(2, stat_func=lambda x: x.sum(), pattern='.*(output|weight)$',
                                 sort=True, monitor_all=True)
    monitor.install(exe)
    found = []
    for _ in range(3):
        monitor.tic()
        exe.forward(data=mx.nd.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
        found.append(monitor.toc())
    assert found[1] == []
    names = [name for _, name, _ in found[0]]
    # (the executor runs fully-connected and relu as one operator, named act)
    assert names == sorted(names) and {'fc_weight', 'act_output'} <= set(names)
    values = {name: text for _, name, text in found[0]}
    assert values['act_output'] == '12.0\t' and values['fc_weight'] == '2.0\t'
    assert [step for step, _, _ in found[2]] == [3] * len(found[2])


def test_monitor_default_statistic_is_the_root_mean_square(caplog):
    exe = _net().simple_bind(mx.cpu(), data=(1, 4), grad_req='null')
    exe.arg_dict['fc_weight'][:] = 3.0
    monitor = mx.mon.Monitor(1, pattern='fc_weight')
    monitor.install(exe)
    monitor.tic()
    exe.forward(data=mx.nd.ones((1, 4)))
    with caplog.at_level(logging.INFO):
        monitor.toc_print()
    assert 'fc_weight' in caplog.text and '3.0' in caplog.text


def test_module_fit_runs_the_monitor(caplog):
    it = mx.io.NDArrayIter(np.ones((8, 3)), np.zeros(8), batch_size=4)
    module = mx.mod.Module(_net())
    monitor = mx.monitor.Monitor(1, pattern='softmax_output')
    with caplog.at_level(logging.INFO):
        module.fit(it, num_epoch=1, monitor=monitor)
    assert caplog.text.count('softmax_output') == 2


def test_plot_network_names_the_package_it_needs(monkeypatch):
    monkeypatch.setitem(sys.modules, 'graphviz', None)      # import graphviz fails
    with pytest.raises(ImportError, match='pip install graphviz'):
        mx.viz.plot_network(_net())


def test_plot_network_draws_with_graphviz_when_installed():
    graphviz = pytest.importorskip('graphviz')
    dot = mx.viz.plot_network(_net(), shape={'data': (1, 3)}, hide_weights=False)
    assert isinstance(dot, graphviz.Digraph) and 'fc_weight' in dot.source


def test_summary_checks_its_input(capsys):
    with pytest.raises(TypeError, match='expected a Symbol'):
        mx.viz.print_summary('net')
    mx.viz.print_summary(_net())
    assert 'Total params: 2' in capsys.readouterr().out    # no shapes: biases only, as MXNet
