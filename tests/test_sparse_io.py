"""Sparse arrays in MXNet's .params/.nd files (fixtures written by MXNet 1.9.1, see
tests/data/mxnet-1.9.1-sparse/README.md) and mx.io.LibSVMIter."""
import io

import numpy as np
import pytest

import ember as mx
from ember import nd
from ember.base import EmberError
from ember.ndarray import io as nd_io

from data_files import DATA

FIXTURES = DATA / 'mxnet-1.9.1-sparse'


def test_mxnet_files_load_with_their_storage_types():
    loaded = nd.load(str(FIXTURES / 'sparse.params'))
    stypes = {name: array.stype for name, array in loaded.items()}
    assert stypes == {'csr': 'csr', 'csr_f64': 'csr', 'csr_empty': 'csr', 'rsp': 'row_sparse',
                      'rsp_3d': 'row_sparse', 'rsp_empty': 'row_sparse', 'dense': 'default'}
    assert loaded['csr_f64'].dtype == np.float64 and loaded['rsp_3d'].shape == (4, 2, 2)
    assert loaded['rsp'].indices.asnumpy().tolist() == [1, 4]
    assert not loaded['csr'].asnumpy()[2].any() and loaded['csr'].asnumpy().any()
    np.testing.assert_array_equal(loaded['csr_f64'].asnumpy(), loaded['csr'].asnumpy())
    for array in loaded.values():
        if array.stype != 'default':
            array.check_format()
    listed = nd.load(str(FIXTURES / 'sparse-list.nd'))
    assert [a.stype for a in listed] == ['row_sparse', 'csr', 'default']


@pytest.mark.parametrize('name', ['sparse.params', 'sparse-list.nd'])
def test_saving_gives_mxnets_bytes_back(name):
    original = (FIXTURES / name).read_bytes()
    loaded = nd.load_frombuffer(original)
    buffer = io.BytesIO()
    nd.save(buffer, loaded)
    assert buffer.getvalue() == original


def test_arrays_made_in_ember_save_to_mxnets_bytes():
    """The same values, made sparse by Ember's own conversion, give the file MXNet wrote."""
    loaded = nd.load(str(FIXTURES / 'sparse.params'))
    rebuilt = {name: nd.array(a.asnumpy(), dtype=a.dtype).tostype(a.stype)
               if a.stype != 'default' else a for name, a in loaded.items()}
    buffer = io.BytesIO()
    nd.save(buffer, rebuilt)
    assert buffer.getvalue() == (FIXTURES / 'sparse.params').read_bytes()


def test_numpy_level_records():
    record = nd_io.loads((FIXTURES / 'sparse-list.nd').read_bytes())[1]
    assert isinstance(record, nd_io.SparseRecord) and record.stype == 'csr'
    assert record.dense().shape == (5, 7)


def _csr_file(indices, indptr):
    """A one-array list file holding a 2x3 csr with the given parts."""
    buffer = io.BytesIO()
    record = nd_io.SparseRecord('csr', (2, 3), np.ones(len(indices), np.float32),
                                np.array(indices), np.array(indptr))
    nd_io.save_arrays(buffer, [record])
    return buffer.getvalue()


@pytest.mark.parametrize('indices,indptr,fault', [
    ([0, 7], [0, 1, 2], 'column index 7 is out of range'),
    ([2, 1], [0, 2, 2], 'the column indices of row 0 are not in ascending order'),
    ([0, 1], [0, 2, 1], 'indptr must start at 0 and end at the number of stored values'),
])
def test_corrupt_sparse_records_name_the_array_and_fault(indices, indptr, fault):
    with pytest.raises(EmberError, match=fr'<bytes>: offset \d+: array 0 \(csr\): {fault}'):
        nd_io.loads(_csr_file(indices, indptr))


def test_truncated_sparse_record():
    blob = (FIXTURES / 'sparse-list.nd').read_bytes()
    with pytest.raises(EmberError, match='truncated'):
        nd_io.loads(blob[:120])


def test_mixed_lists_and_dicts_round_trip(tmp_path):
    arrays = {'w': nd.ones((2, 2)), 'g': nd.sparse.row_sparse_array(([[1.0]], [1]),
                                                                      shape=(3, 1)),
              'x': nd.sparse.csr_matrix(([2.0], [1], [0, 0, 1]), shape=(2, 2))}
    nd.save(str(tmp_path / 'mixed.params'), arrays)
    nd.save(str(tmp_path / 'mixed.nd'), list(arrays.values()))
    loaded = nd.load(str(tmp_path / 'mixed.params'))
    listed = nd.load(str(tmp_path / 'mixed.nd'))
    for name, original in arrays.items():
        assert loaded[name].stype == original.stype
        np.testing.assert_array_equal(loaded[name].asnumpy(), original.asnumpy())
    assert [a.stype for a in listed] == ['default', 'row_sparse', 'csr']


# ----------------------------------------------------------------------------------------------
# LibSVMIter

LINES = '1 0:1.5 2:3\n0 1:2\n-1 3:4 4:0.5\n2.5\n1 0:1 1:1 2:1\n'


@pytest.fixture
def libsvm_file(tmp_path):
    path = tmp_path / 'data.libsvm'
    path.write_text(LINES)
    return str(path)


def _dense_lines():
    rows = []
    for line in LINES.splitlines():
        row = np.zeros(5, np.float32)
        for token in line.split()[1:]:
            index, value = token.split(':')
            row[int(index)] = float(value)
        rows.append(row)
    return np.array(rows)


def test_libsvm_batches_wrap_as_mxnets(libsvm_file):
    it = mx.io.LibSVMIter(data_libsvm=libsvm_file, data_shape=(5,), batch_size=2)
    assert it.provide_data[0].shape == (2, 5) and it.provide_label[0].shape == (2,)
    dense = _dense_lines()
    batches = list(it)
    assert [b.pad for b in batches] == [0, 0, 1]
    assert all(b.data[0].stype == 'csr' for b in batches)
    np.testing.assert_array_equal(batches[0].data[0].asnumpy(), dense[0:2])
    np.testing.assert_array_equal(batches[2].data[0].asnumpy(), dense[[4, 0]])
    assert batches[1].label[0].asnumpy().tolist() == [-1.0, 2.5]
    it.reset()              # the wrapped sample opens no epoch twice: MXNet starts after it
    second = list(it)
    np.testing.assert_array_equal(second[0].data[0].asnumpy(), dense[1:3])
    assert [b.pad for b in second] == [0, 0]


def test_libsvm_without_round_batch_and_in_parts(libsvm_file):
    it = mx.io.LibSVMIter(data_libsvm=libsvm_file, data_shape=(5,), batch_size=2,
                          round_batch=False)
    last = list(it)[-1]
    assert last.pad == 1 and not last.data[0].asnumpy()[1].any()
    part = mx.io.LibSVMIter(data_libsvm=libsvm_file, data_shape=(5,), batch_size=3,
                            num_parts=2, part_index=1, round_batch=False)
    np.testing.assert_array_equal(next(part).data[0].asnumpy()[:2], _dense_lines()[3:5])


def test_libsvm_label_file(tmp_path, libsvm_file):
    labels = tmp_path / 'labels.libsvm'
    labels.write_text('0 1:1\n0 0:1\n0\n0 1:2\n0 0:3\n')
    it = mx.io.LibSVMIter(data_libsvm=libsvm_file, data_shape=(5,), label_libsvm=str(labels),
                          label_shape=(2,), batch_size=5)
    label = next(it).label[0]
    assert label.stype == 'csr' and label.asnumpy()[4].tolist() == [3.0, 0.0]


@pytest.mark.parametrize('text,fault', [
    ('1 0:1 7:2\n', r'data.libsvm:1: column index 7 is out of range'),
    ('1 0:1\n1 a:2\n', r"data.libsvm:2: 'a:2' is not index:value"),
    ('x 0:1\n', r"data.libsvm:1: 'x' is not a number"),
    ('1 2:1 2:3\n', 'a column index appears twice'),
])
def test_libsvm_errors_name_the_line(tmp_path, text, fault):
    path = tmp_path / 'data.libsvm'
    path.write_text(text)
    with pytest.raises(EmberError, match=fault):
        mx.io.LibSVMIter(data_libsvm=str(path), data_shape=(5,), batch_size=1)
