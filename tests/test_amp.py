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
dense.weight.grad()[:] = float('inf')
trainer.step(1)
skipped = bool((dense.weight.data().asnumpy() == after_step).all())
print(json.dumps({'changed': changed, 'out': str(out.dtype.__name__), 'exp': exp.dtype.__name__,
                  'mixed': mixed.dtype.__name__, 'scale': scale,
                  'step': float(after_step[0, 0]), 'skipped': skipped,
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
    assert result['skipped'] and result['next_scale'] == 2.0 ** 15
