import sys, time, numpy as np
sys.path.insert(0, 'benchmarks')
import sparse as B
import ember as mx
from ember import nd
from ember.op import registry, sparse as sp
data = B.problem(0.1)
def t(f, n=20):
    f(); s=time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter()-s)/n*1e3
table = nd.zeros((data['table'], 64)); mean, var = nd.zeros(table.shape), nd.zeros(table.shape)
grad = nd.sparse.row_sparse_array((data['grad_values'], data['grad_rows']), shape=table.shape)
print('ember adam', t(lambda: (nd.adam_update(table, grad, mean, var, out=table, lr=0.01), table.wait_to_read())))
op = registry.get('adam_update'); attrs = op.parse_attrs({'lr': 0.01})
rule = sp.rule_of(op)
ins = [table._data(), grad._data(), mean._data(), var._data()]
ctx = registry.KernelContext(mx.cpu())
print('kernel only', t(lambda: rule.kernel(attrs, ins, [ins[0]], ctx)))
rsp = nd.sparse.row_sparse_array(data['rsp'][:2], shape=data['rsp'][2]); wanted = nd.array(data['wanted'], dtype='int64')
print('ember retain', t(lambda: nd.sparse.retain(rsp, wanted).wait_to_read()))
r = registry.get('_sparse_retain'); rr = sp.rule_of(r)
out = sp.parts_for('row_sparse', rsp.shape, np.float32)
print('retain kernel', t(lambda: rr.kernel({}, [rsp._data(), wanted._data()], [out], ctx)))
import cProfile, pstats
cProfile.run('for _ in range(50): rule.kernel(attrs, ins, [ins[0]], ctx)', '/tmp/prof')
pstats.Stats('/tmp/prof').sort_stats('cumtime').print_stats(12)
