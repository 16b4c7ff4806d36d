"""Write the sparse fixtures of tests/data/mxnet-1.9.1-sparse/ with MXNet 1.9.1 itself.

Run it with MXNet's interpreter (not Ember's), from the repository root::

    OMP_NUM_THREADS=2 ~/.cache/ember-bench/mxnet-1.9.1/bin/python tools/make_sparse_fixtures.py

With ``--check DIR`` it instead loads the files Ember wrote into DIR (``ember-*.nd``, written
by ``tests/test_sparse_io.py::test_files_for_mxnet`` when EMBER_SPARSE_FIXTURE_OUT names a
folder) and checks, in MXNet, that each holds what ``expected_arrays`` holds.
"""
import os
import sys

import mxnet as mx
import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tests', 'data',
                    'mxnet-1.9.1-sparse')


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


def as_mxnet(stype, values):
    array = mx.nd.array(values, dtype=values.dtype)
    return array if stype == 'default' else array.tostype(stype)


def write():
    os.makedirs(HERE, exist_ok=True)
    arrays = {name: as_mxnet(*spec) for name, spec in expected_arrays().items()}
    mx.nd.save(os.path.join(HERE, 'sparse.params'), arrays)
    mx.nd.save(os.path.join(HERE, 'sparse-list.nd'),
               [arrays['rsp'], arrays['csr'], arrays['dense']])


def check(folder):
    expected = expected_arrays()
    for name in sorted(os.listdir(folder)):
        if not name.startswith('ember-'):
            continue
        loaded = mx.nd.load(os.path.join(folder, name))
        items = loaded.items() if isinstance(loaded, dict) else zip(
            ['rsp', 'csr', 'dense'], loaded)
        for key, array in items:
            stype, values = expected[key]
            assert array.stype == stype, (name, key, array.stype)
            assert array.dtype == values.dtype, (name, key, array.dtype)
            np.testing.assert_array_equal(array.asnumpy(), values)
        print(f'{name}: MXNet 1.9.1 loads it with the expected values')


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--check':
        check(sys.argv[2])
    else:
        write()
