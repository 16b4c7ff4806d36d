"""mx.contrib.amp: the operator lists, converting symbols and hybridized blocks, and (in a new
process, as amp.init is once per process) the wrapped namespaces and dynamic loss scaling."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.contrib import amp
from ember.op import registry

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize('target', ['float16', 'bfloat16'])
def test_the_lists_are_disjoint_registered_and_cover_every_operator(target):
    lists = [amp.list_lp16_ops(target), amp.list_fp32_ops(target),
             [name for name, _, _ in amp.list_conditional_fp32_ops(target)],
             amp.list_widest_type_cast(target), amp.list_lp16_fp32_ops(target)]
    names = [name for names in lists for name in names]
    assert len(names) == len(set(names))
    assert set(names) == set(registry.all_ops())
    assert 'Convolution' in lists[0] and 'softmax' in lists[1] and 'exp' in lists[1]
    assert ('Activation', 'act_type', ['softrelu']) in amp.list_conditional_fp32_ops(target)


def test_a_bad_target_names_it_and_what_is_accepted():
    with pytest.raises(ValueError, match="'float8'.*float16 or bfloat16"):
        amp.convert_symbol(mx.sym.var('x'), target_dtype='float8')


def net_symbol():
    x = mx.sym.var('data')
    y = mx.sym.FullyConnected(x, num_hidden=8, name='fc1')
    y = mx.sym.Activation(y, act_type='softrelu', name='soft')
    z = mx.sym.FullyConnected(y, num_hidden=8, name='fc2')
    return mx.sym.softmax(z + y, name='out')


def test_convert_symbol_casts_by_the_lists_and_computes_nearly_alike():
    sym = net_symbol()
    low = amp.convert_symbol(sym, target_dtype='bfloat16', excluded_sym_names=['fc2'])
    graph = low.to_graph()
    ops = {n.name: n for n in graph.nodes}
    fc1, fc2 = ops['fc1'], ops['fc2']
    assert [graph.nodes[e.node].op.name for e in fc1.inputs] == ['amp_cast'] * 3
    assert all(graph.nodes[e.node].op is None for e in fc2.inputs[1:])     # excluded
    soft = ops['soft']             # softrelu: conditionally float32
    assert graph.nodes[soft.inputs[0].node].attrs['dtype'] == np.float32
    add = next(n for n in graph.nodes if n.op and n.op.name == 'broadcast_add'
               or n.op and n.op.name == 'elemwise_add')
    assert graph.nodes[add.inputs[0].node].op.name == 'amp_multicast'
    rng = np.random.default_rng(0)
    values = {'data': rng.standard_normal((2, 5)), 'fc1_weight': rng.standard_normal((8, 5)),
              'fc1_bias': rng.standard_normal(8), 'fc2_weight': rng.standard_normal((8, 8)),
              'fc2_bias': rng.standard_normal(8)}
    args = {k: mx.nd.array(v) for k, v in values.items()}
    wide = sym.bind(mx.cpu(), args).forward()[0].asnumpy()
    narrow = low.bind(mx.cpu(), args).forward()[0].asnumpy()
    assert narrow.dtype == np.float32
    np.testing.assert_allclose(narrow, wide, rtol=0.05, atol=0.02)


def test_lists_that_overlap_or_name_unknown_operators_are_refused():
    with pytest.raises(ValueError, match='both the target and the fp32 lists'):
        amp.convert_symbol(net_symbol(), 'float16', target_dtype_ops=['FullyConnected'],
                           fp32_ops=['FullyConnected'])
    with pytest.raises(ValueError, match="'NoSuchOp'"):
        amp.convert_symbol(net_symbol(), 'float16', target_dtype_ops=['NoSuchOp'])


def test_convert_hybrid_block_runs_the_graph_in_bfloat16():
    net = mx.gluon.nn.HybridSequential()
    net.add(mx.gluon.nn.Conv2D(4, 3, padding=1, in_channels=2), mx.gluon.nn.BatchNorm(),
            mx.gluon.nn.Activation('relu'), mx.gluon.nn.Dense(3))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    x = mx.nd.array(np.random.default_rng(1).standard_normal((2, 2, 6, 6)))
    wide = net(x).asnumpy()
    with pytest.raises(RuntimeError, match='hybridize'):
        fresh = mx.gluon.nn.HybridSequential()
        fresh.add(mx.gluon.nn.Dense(2))
        amp.convert_hybrid_block(fresh)
    low = amp.convert_hybrid_block(net, target_dtype='bfloat16')
    ops = {n.op.name for n in low._cached_graph[1].to_graph().nodes if n.op}
    assert 'amp_cast' in ops
    np.testing.assert_allclose(low(x).asnumpy(), wide, rtol=0.05, atol=0.05)


CHILD = '''
import json
import numpy as np
import ember as mx
from ember.contrib import amp
amp.init(target_dtype='bfloat16')
try:
    amp.init(target_dtype='float16')
    changed = True
except mx.MXNetError:
    changed = False
x = mx.nd.ones((2, 4))
dense = mx.gluon.nn.Dense(3, in_units=4)
dense.initialize(mx.init.One())
out = dense(x)
exp = mx.nd.exp(mx.nd.ones(2).astype('bfloat16'))
mixed = mx.nd.broadcast_add(mx.nd.ones(2), mx.nd.ones(2).astype('bfloat16'))
trainer = mx.gluon.Trainer(dense.collect_params(), 'sgd', {'learning_rate': 0.1})
amp.init_trainer(trainer)
scale = trainer._amp_loss_scaler.loss_scale
with mx.autograd.record():
    loss = dense(x).astype('float32').sum()
    with amp.scale_loss(loss, trainer) as scaled:
        mx.autograd.backward(scaled)
trainer.step(1)
after_step = dense.weight.data().asnumpy().copy()
with mx.autograd.record():
    loss = dense(x).astype('float32').sum()
    with amp.scale_loss(loss, trainer) as scaled:
        mx.autograd.backward(scaled)
amp.unscale(trainer)
unscaled = float(dense.weight.grad().astype('float32').asnumpy()[0, 0])
dense.weight.grad()[:] = float('inf')
trainer.step(1)
skipped = bool((dense.weight.data().asnumpy() == after_step).all())
print(json.dumps({'changed': changed, 'out': str(out.dtype.__name__), 'exp': exp.dtype.__name__,
                  'mixed': mixed.dtype.__name__, 'scale': scale,
                  'step': float(after_step[0, 0]), 'skipped': skipped, 'unscaled': unscaled,
                  'next_scale': trainer._amp_loss_scaler._next_loss_scale}))
'''


def test_init_casts_the_namespaces_and_scales_the_loss():
    child = subprocess.run([sys.executable, '-c', CHILD], cwd=REPO, capture_output=True,
                           text=True, timeout=120,
                           env=config.child_environ(PYTHONPATH=str(REPO)))
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout)
    assert result['changed'] is False
    assert result['out'] == 'bfloat16'            # FullyConnected ran in bfloat16
    assert result['exp'] == 'float32'             # exp in float32
    assert result['mixed'] == 'float32'           # the widest of the two
    assert result['scale'] == 2.0 ** 16
    assert result['step'] == pytest.approx(1 - 0.1 * 2, abs=0.01)   # the loss scale undone
    assert result['unscaled'] == 2.0              # d(sum of 2 rows)/dw, the scale divided out
    assert result['skipped'] and result['next_scale'] == 2.0 ** 15


# The functions the child process above runs, for `python -m ember api-coverage`.
EXERCISED_API = [amp.init, amp.init_trainer, amp.scale_loss, amp.unscale]


@pytest.mark.parametrize('target', ['float16', 'bfloat16'])
def test_the_list_modules_hold_the_lists_under_mxnets_names(target):
    short = {'float16': 'FP16', 'bfloat16': 'BF16'}[target]
    module = {'float16': amp.lists.symbol_fp16, 'bfloat16': amp.lists.symbol_bf16}[target]
    assert getattr(module, f'{short}_FUNCS') == amp.list_lp16_ops(target)
    # "every other operator", read at import: operators registered since (tests') come later
    assert set(getattr(module, f'{short}_FP32_FUNCS')) <= set(amp.list_lp16_fp32_ops(target))
    assert 'Flatten' in getattr(module, f'{short}_FP32_FUNCS')
    assert module.FP32_FUNCS == amp.list_fp32_ops(target)
    assert module.WIDEST_TYPE_CASTS == amp.list_widest_type_cast(target)
    assert module.LOSS_OUTPUT_FUNCTIONS == amp.list_loss_output_functions(target) == [
        'SoftmaxOutput', 'LinearRegressionOutput', 'LogisticRegressionOutput',
        'MAERegressionOutput']
    kept = amp.list_lp16_use_fp32_params(target)
    assert kept == (None if target == 'float16' else
                    {'BatchNorm': ('gamma', 'beta', 'moving_mean', 'moving_var')})


def test_the_loss_scaler_reads_overflow_through_multi_all_finite():
    from ember.contrib.amp import loss_scaler
    finite = loss_scaler.multi_all_finite(mx.nd.ones(3), mx.nd.array([1.0, np.inf]),
                                          num_arrays=2)
    assert finite.asnumpy().tolist() == [0.0]
    assert loss_scaler.multi_all_finite(mx.nd.ones(3), num_arrays=1).asnumpy().tolist() == [1.0]


def test_convert_model_marks_parameters_float32_and_binds_from_the_data():
    sym = net_symbol()
    args = {'fc1_weight': mx.nd.ones((8, 4)), 'fc1_bias': mx.nd.zeros(8),
            'fc2_weight': mx.nd.ones((8, 8)), 'fc2_bias': mx.nd.zeros(8)}
    low, arg_params, aux_params = amp.convert_model(sym, args, {}, target_dtype='bfloat16')
    assert arg_params is args and aux_params == {}
    assert low.attr_dict()['fc1_weight']['__dtype__'] == '0'
    assert 'data' not in low.attr_dict() or '__dtype__' not in low.attr_dict()['data']
    arg_types, _, _ = low.infer_type(data='float32')
    assert all(t == np.float32 for t in arg_types)


def bucket_symbol(length):
    data = mx.sym.mean(mx.sym.var('data'), axis=1)
    net = mx.sym.FullyConnected(data, num_hidden=2, name='fc')
    return mx.sym.SoftmaxOutput(net, name='softmax'), ('data',), ('softmax_label',)


def test_convert_bucketing_module_runs_every_bucket_in_bfloat16():
    wide = mx.mod.BucketingModule(bucket_symbol, default_bucket_key=5)
    with pytest.raises(RuntimeError, match='bind'):
        amp.convert_bucketing_module(wide)
    wide.bind(data_shapes=[('data', (4, 5, 3))], label_shapes=[('softmax_label', (4,))],
              for_training=False)
    wide.init_params(mx.init.Uniform(0.5))
    low = amp.convert_bucketing_module(wide, target_dtype='bfloat16')
    x = mx.nd.array(np.random.default_rng(0).uniform(size=(4, 2, 3)))
    batch = mx.io.DataBatch([x], [mx.nd.zeros((4,))], bucket_key=2,
                            provide_data=[('data', (4, 2, 3))],
                            provide_label=[('softmax_label', (4,))])
    wide.forward(batch)
    low.forward(batch)
    ops = [n.op.name for n in low._buckets[2].symbol.to_graph().nodes if n.op]
    assert 'amp_cast' in ops and sorted(low._buckets) == [2, 5]
    np.testing.assert_allclose(low.get_outputs()[0].asnumpy(),
                               wide.get_outputs()[0].asnumpy(), atol=0.02)
