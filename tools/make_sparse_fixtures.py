"""The sparse fixtures of tests/data/mxnet-1.9.1-sparse/, and the check that MXNet 1.9.1 loads
what Ember writes. Three modes, from the repository root:

    MXNET=~/.cache/ember-bench/mxnet-1.9.1/bin/python
    # with MXNet's interpreter: write the fixtures
    OMP_NUM_THREADS=2 $MXNET tools/make_sparse_fixtures.py
    # with Ember's: write Ember's files of the same arrays into DIR
    python3 tools/make_sparse_fixtures.py --ember DIR
    # with MXNet's: load Ember's files from DIR and check every array
    OMP_NUM_THREADS=2 $MXNET tools/make_sparse_fixtures.py --check DIR
"""
import os
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
HERE = os.path.join(ROOT, 'tests', 'data', 'mxnet-1.9.1-sparse')
LIST_ORDER = ('rsp', 'csr', 'dense')


def expected_arrays():
    """name -> (storage type, dense values) of every array the fixtures hold."""
    rng = np.random.RandomState(7)
    csr = rng.uniform(-1, 1, (5, 7)).astype(np.float32)
    csr[rng.uniform(size=csr.shape) < 0.7] = 0
    csr[2] = 0                                            # an empty row
    rsp = np.zeros((6, 3), np.float32)
    rsp[[1, 4]] = rng.uniform(-1, 1, (2, 3))
    rsp3 = np.zeros((4, 2, 2), np.float64)
    rsp3[2] = rng.uniform(-1, 1, (2, 2))
    return {
        'csr': ('csr', csr),
        'csr_f64': ('csr', csr.astype(np.float64)),
        'csr_empty': ('csr', np.zeros((3, 4), np.float32)),
        'rsp': ('row_sparse', rsp),
        'rsp_3d': ('row_sparse', rsp3),
        'rsp_empty': ('row_sparse', np.zeros((5, 2), np.float32)),
        'dense': ('default', np.arange(6, dtype=np.float32).reshape(2, 3)),
    }


def write(mx, folder, prefix=''):
    """Save the arrays with framework `mx` (MXNet or Ember: the same API)."""
    os.makedirs(folder, exist_ok=True)
    arrays = {}
    for name, (stype, values) in expected_arrays().items():
        array = mx.nd.array(values, dtype=values.dtype)
        arrays[name] = array if stype == 'default' else array.tostype(stype)
    mx.nd.save(os.path.join(folder, f'{prefix}sparse.params'), arrays)
    mx.nd.save(os.path.join(folder, f'{prefix}sparse-list.nd'),
               [arrays[name] for name in LIST_ORDER])


def check(mx, folder):
    expected = expected_arrays()
    for name in sorted(os.listdir(folder)):
        loaded = mx.nd.load(os.path.join(folder, name))
        items = loaded.items() if isinstance(loaded, dict) else zip(LIST_ORDER, loaded)
        for key, array in items:
            stype, values = expected[key]
            assert array.stype == stype, (name, key, array.stype)
            assert array.dtype == values.dtype, (name, key, array.dtype)
            np.testing.assert_array_equal(array.asnumpy(), values)
        print(f'{name}: loads with the expected storage types, dtypes and values')


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--ember':
        sys.path.insert(0, ROOT)
        import ember
        write(ember, sys.argv[2], prefix='ember-')
    elif len(sys.argv) == 3 and sys.argv[1] == '--check':
        import mxnet
        check(mxnet, sys.argv[2])
    else:
        import mxnet
        write(mxnet, HERE)
