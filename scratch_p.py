import sys, time, numpy as np
sys.argv=['x']
sys.path.insert(0, 'benchmarks')
import sparse as B
import ember as mx
from ember import nd
data = B.problem(0.1)
values, indices, indptr, shape = data['csr']
x = nd.sparse.csr_matrix((values, indices, indptr), shape=shape)
w = nd.array(data['weight'])
import scipy.sparse
xs = scipy.sparse.csr_matrix((values, indices, indptr), shape=shape)
def t(f, n=10):
    f(); s=time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter()-s)/n*1e3
print('scipy', t(lambda: xs @ data['weight']))
parts = x._parts
print('parts.scipy', t(lambda: parts.scipy()))
print('parts.scipy @', t(lambda: parts.scipy() @ data['weight']))
print('ember dot', t(lambda: nd.dot(x, w).wait_to_read()))
small = nd.sparse.csr_matrix(np.eye(3))
print('ember small *2', t(lambda: (small*2).wait_to_read(), 200))
d = nd.ones((3,3))
print('ember dense *2', t(lambda: (d*2).wait_to_read(), 200))
print(xs.indices.dtype, parts.indices.dtype)
