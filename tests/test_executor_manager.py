"""mx.executor_manager: the batch split by work load over devices, gradients per device, the
devices' mean copied back, and one executor group per bucket sharing the parameters."""
import numpy as np
import pytest

import ember as mx
from ember import executor_manager


def regression(num_hidden=2):
    net = mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=num_hidden, name='fc')
    return mx.sym.LinearRegressionOutput(net, name='out')


def batches(rows=8, columns=3, batch_size=8):
    rng = np.random.default_rng(0)
    data, label = rng.normal(size=(rows, columns)), rng.normal(size=(rows, 2))
    return mx.io.NDArrayIter(mx.nd.array(data), mx.nd.array(label), batch_size=batch_size,
                             label_name='out_label'), data, label


def test_work_loads_split_the_batch_and_the_gradients_add_up_to_the_whole_batch():
    it, data, label = batches()
    net = regression()
    manager = executor_manager.DataParallelExecutorManager(
        net, [mx.cpu(0), mx.cpu(1)], it, net.list_arguments(), ['fc_weight', 'fc_bias'], [],
        work_load_list=[1, 3])
    assert manager.slices == [slice(0, 2), slice(2, 8)]
    weight = np.arange(6.0).reshape(2, 3) / 10
    manager.set_params({'fc_weight': mx.nd.array(weight), 'fc_bias': mx.nd.zeros(2)}, {})
    manager.load_data_batch(next(iter(it)))
    manager.forward(is_train=True)
    manager.backward()
    # LinearRegressionOutput's gradient: (prediction - label) over the outputs per row (2)
    residual = data @ weight.T - label
    grad = sum(g.asnumpy() for g in manager.grad_arrays[0])
    np.testing.assert_allclose(grad, residual.T @ data / 2, rtol=1e-5, atol=1e-5)
    metric = mx.metric.MSE()
    manager.update_metric(metric, [mx.nd.array(label)])
    per_device = [np.mean(residual[:2] ** 2), np.mean(residual[2:] ** 2)]  # one update each
    assert metric.get()[1] == pytest.approx(np.mean(per_device), rel=1e-5)
    out = {'fc_weight': mx.nd.zeros((2, 3)), 'fc_bias': mx.nd.zeros(2)}
    manager.param_arrays[0][1][:] = mx.nd.array(weight + 1)   # the devices now disagree
    manager.copy_to(out, {})
    np.testing.assert_allclose(out['fc_weight'].asnumpy(), weight + 0.5, rtol=1e-6)


def test_a_bucket_gets_its_own_group_sharing_the_parameter_arrays():
    it, _, _ = batches()
    it.default_bucket_key = 3
    manager = executor_manager.DataParallelExecutorManager(
        regression(), [mx.cpu()], it, regression().list_arguments(), ['fc_weight', 'fc_bias'],
        [], sym_gen=lambda key: regression())
    batch = mx.io.DataBatch([mx.nd.ones((8, 3))], [mx.nd.zeros((8, 2))], bucket_key=4,
                            provide_data=[mx.io.DataDesc('data', (8, 3))],
                            provide_label=[mx.io.DataDesc('out_label', (8, 2))])
    manager.load_data_batch(batch)
    assert manager.curr_execgrp is manager.execgrp_bucket[4] is not manager.execgrp
    bucket, default = (g.train_execs[0].arg_dict for g in (manager.curr_execgrp,
                                                            manager.execgrp))
    assert bucket['fc_weight'] is default['fc_weight']
    default['data'][:] = 0
    assert bucket['data'].asnumpy().sum() == 0      # the data array is shared too
    with pytest.raises(ValueError, match='bucketing'):
        manager.install_monitor(mx.monitor.Monitor(1))


def test_bad_work_loads_and_duplicate_names_are_refused():
    it, _, _ = batches(batch_size=2)
    with pytest.raises(ValueError, match='work_load_list'):
        executor_manager.DataParallelExecutorManager(regression(), [mx.cpu()], it, [], [], [],
                                                     work_load_list=[1, 1])
    with pytest.raises(ValueError, match='empty'):
        executor_manager.DataParallelExecutorManager(
            regression(), [mx.cpu(0), mx.cpu(1), mx.cpu(2)], it, [], [], [])
    twice = mx.sym.FullyConnected(mx.sym.FullyConnected(mx.sym.var('data'), num_hidden=2,
                                                        name='fc'), num_hidden=2, name='fc')
    with pytest.raises(ValueError, match="'fc_weight' appears twice"):
        executor_manager.DataParallelExecutorGroup(twice, [], [], [mx.cpu()], [slice(0, 2)], it)
    assert mx.model.DataParallelExecutorManager is executor_manager.DataParallelExecutorManager
    assert executor_manager.mx_real_t is np.float32 and executor_manager.cpu is mx.cpu
    assert executor_manager.DataDesc is mx.io.DataDesc
