"""Sparse arrays end to end: construction and its checks, the arrays' API, the engine,
autograd, Gluon training with row_sparse gradients, the graph executor and the storage
fallback's log (MXNET_STORAGE_FALLBACK_LOG_VERBOSE)."""
import logging
import pickle

import numpy as np
import pytest
import scipy.sparse

import ember as mx
from ember import autograd, config, gluon, nd
from ember.base import EmberError, MXNetError
from ember.op import sparse as sp

CSR_PARTS = ([1.0, 2.0, 3.0], [0, 2, 1], [0, 2, 2, 3])
DENSE = np.array([[1, 0, 2], [0, 0, 0], [0, 3, 0]], np.float32)


def csr():
    return nd.sparse.csr_matrix(CSR_PARTS, shape=(3, 3))


def rsp():
    return nd.sparse.row_sparse_array(([[1.0, 2.0], [3.0, 4.0]], [0, 2]), shape=(4, 2))


# ----------------------------------------------------------------------------------------------
# Construction

def test_constructors_agree():
    expected = csr().asnumpy()
    np.testing.assert_array_equal(expected, DENSE)
    coo = ([1.0, 2.0, 3.0], ([0, 0, 2], [0, 2, 1]))
    for made in (nd.sparse.csr_matrix(coo, shape=(3, 3)),
                 nd.sparse.csr_matrix(scipy.sparse.csr_matrix(DENSE)),
                 nd.sparse.csr_matrix(DENSE), nd.sparse.csr_matrix(nd.array(DENSE)),
                 nd.sparse.array(scipy.sparse.csr_matrix(DENSE)), nd.array(DENSE).tostype('csr')):
        assert made.stype == 'csr' and made.shape == (3, 3)
        np.testing.assert_array_equal(made.asnumpy(), expected)
    made = nd.sparse.row_sparse_array(np.array([[1, 2], [0, 0], [3, 4], [0, 0]], 'float32'))
    assert made.indices.asnumpy().tolist() == [0, 2]
    np.testing.assert_array_equal(made.asnumpy(), rsp().asnumpy())


def test_dtypes_follow_mxnet():
    assert csr().dtype == np.float32                       # lists: float32
    assert nd.sparse.csr_matrix(np.eye(2)).dtype == np.float64      # NumPy: its dtype
    assert nd.sparse.csr_matrix(CSR_PARTS, shape=(3, 3), dtype='float64').dtype == np.float64
    assert csr().indices.dtype == csr().indptr.dtype == np.int64
    assert rsp().indices.dtype == np.int64


def test_zeros_empty_and_shapes():
    for stype in ('csr', 'row_sparse'):
        z = nd.sparse.zeros(stype, (3, 4), dtype='float64')
        assert z.stype == stype and z.dtype == np.float64 and z.data.shape[0] == 0
        assert not z.asnumpy().any()
    assert nd.sparse.empty('csr', (2, 2)).indptr.asnumpy().tolist() == [0, 0, 0]
    assert nd.sparse.zeros('default', (2,)).stype == 'default'
    assert nd.sparse.csr_matrix((2, 5)).shape == (2, 5)
    with pytest.raises(EmberError, match='2-D'):
        nd.sparse.zeros('csr', (2, 2, 2))
    with pytest.raises(EmberError, match=r'csr storage holds 2-D arrays; got shape \(2, 2, 2\)'):
        nd.ones((2, 2, 2)).tostype('csr')
    with pytest.raises(ValueError, match="did you mean 'csr'"):
        nd.sparse.cast_storage(nd.ones((2, 2)), 'crs')


@pytest.mark.parametrize('parts,shape,fault', [
    (([1.0, 2.0], [0, 5], [0, 1, 2]), (2, 3), 'csr_matrix: column index 5 is out of range'),
    (([1.0, 2.0], [2, 0], [0, 2, 2]), (2, 3), 'csr_matrix: the column indices of row 0 are'),
    (([1.0, 2.0], [0, 1], [0, 2, 1, 2]), (3, 3), 'csr_matrix: indptr is not monotone'),
    (([1.0, 2.0, 3.0], [0, 1], [0, 1, 2]), (2, 3), 'csr_matrix: data has 3 entries and'),
    (([1.0, 2.0], [0, 1], [0, 1]), (2, 3), 'csr_matrix: indptr has 2 entries'),
    (([1.0, 2.0], [0, 1], [1, 1, 2]), (2, 3), 'csr_matrix: indptr must start at 0'),
])
def test_malformed_csr_is_refused_naming_the_fault(parts, shape, fault):
    with pytest.raises(EmberError, match=fault):
        nd.sparse.csr_matrix(parts, shape=shape)


@pytest.mark.parametrize('parts,shape,fault', [
    (([[1.0], [2.0]], [4, 0]), (3, 1), 'row_sparse_array: row index 4 is out of range'),
    (([[1.0], [2.0]], [2, 0]), (3, 1), 'row_sparse_array: row indices must be ascending'),
    (([[1.0], [2.0]], [1, 1]), (3, 1), 'row_sparse_array: row indices must be ascending'),
    (([[1.0], [2.0]], [0]), (3, 1), r'row_sparse_array: data of shape \(2, 1\) does not fit'),
    (([[1.0, 2.0]], [0]), (3, 1), r'does not fit 1 rows of an array of shape \(3, 1\)'),
])
def test_malformed_row_sparse_is_refused_naming_the_fault(parts, shape, fault):
    with pytest.raises(EmberError, match=fault):
        nd.sparse.row_sparse_array(parts, shape=shape)


def test_check_format_checks_the_parts():
    array = csr()
    array.check_format()
    array._parts.indices = np.array([0, 9, 1])        # as a faulty kernel might leave it
    with pytest.raises(EmberError, match='CSRNDArray: column index 9 is out of range'):
        array.check_format()
    array.check_format(full_check=False)               # sizes only
    g = rsp()
    g._parts.indices = np.array([2, 0])
    with pytest.raises(EmberError, match='RowSparseNDArray: row indices must be ascending'):
        g.check_format()


# ----------------------------------------------------------------------------------------------
# The arrays' API

def test_parts_scipy_repr_and_pickle():
    array = csr()
    assert array.data.asnumpy().tolist() == [1.0, 2.0, 3.0]
    assert array.indices.asnumpy().tolist() == [0, 2, 1]
    assert array.indptr.asnumpy().tolist() == [0, 2, 2, 3]
    assert (array.asscipy() != scipy.sparse.csr_matrix(DENSE)).nnz == 0
    assert repr(array) == '\n<CSRNDArray 3x3 @cpu(0)>'
    assert repr(rsp()) == '\n<RowSparseNDArray 4x2 @cpu(0)>'
    for original in (array, rsp()):
        copy = pickle.loads(pickle.dumps(original))
        assert copy.stype == original.stype
        np.testing.assert_array_equal(copy.asnumpy(), original.asnumpy())


def test_copies_devices_and_dtypes():
    array = csr()
    moved = array.copyto(mx.cpu(1))
    assert moved.stype == 'csr' and moved.context == mx.cpu(1)
    assert array.as_in_context(mx.cpu(0)) is array
    np.testing.assert_array_equal(moved.asnumpy(), DENSE)
    dense = nd.zeros((3, 3))
    array.copyto(dense)
    np.testing.assert_array_equal(dense.asnumpy(), DENSE)
    target = nd.sparse.zeros('row_sparse', (3, 3))
    array.copyto(target)                               # converted to the target's type
    assert target.indices.asnumpy().tolist() == [0, 2]
    wide = array.astype('float64')
    assert wide.stype == 'csr' and wide.dtype == np.float64
    copy = array.copy()
    copy *= 2
    assert array.data.asnumpy().tolist() == [1.0, 2.0, 3.0]      # the copy owns its values


def test_slicing_and_assignment():
    array = csr()
    np.testing.assert_array_equal(array[1:3].asnumpy(), DENSE[1:3])
    np.testing.assert_array_equal(array[-1].asnumpy(), DENSE[2:3])
    assert array[0:2].stype == 'csr'
    with pytest.raises(EmberError, match='contiguous row slices'):
        array[::2]
    with pytest.raises(EmberError, match='only x'):
        rsp()[1]
    target = rsp()
    target[:] = np.ones((4, 2))
    assert target.indices.asnumpy().tolist() == [0, 1, 2, 3]
    target[:] = 0
    assert target.indices.shape == (0,)
    dense = nd.zeros((3, 3))
    dense[:] = array
    np.testing.assert_array_equal(dense.asnumpy(), DENSE)


def test_retain_and_tostype():
    # as MXNet 1.9.1: every row asked for, zeros for those rsp() does not store (3)
    kept = nd.sparse.retain(rsp(), nd.array([2, 3], dtype='int64'))
    assert kept.stype == 'row_sparse' and kept.indices.asnumpy().tolist() == [2, 3]
    assert not kept.data.asnumpy()[1].any()
    np.testing.assert_array_equal(kept.data.asnumpy()[0], rsp().tostype('default').asnumpy()[2])
    assert rsp().retain(nd.array([0], dtype='int64')).indices.asnumpy().tolist() == [0]
    rows = nd.sparse.retain(nd.array(np.arange(8).reshape(4, 2)), nd.array([3, 1]))
    assert rows.stype == 'row_sparse' and rows.indices.asnumpy().tolist() == [1, 3]
    assert rows.data.asnumpy().tolist() == [[2, 3], [6, 7]]
    with pytest.raises(MXNetError, match='fall outside the 4 rows'):
        nd.sparse.retain(nd.ones((4, 2)), nd.array([4])).wait_to_read()
    assert csr().tostype('default').stype == 'default'
    assert rsp().tostype('csr').stype == 'csr'
    np.testing.assert_array_equal(rsp().tostype('csr').asnumpy(), rsp().asnumpy())


def test_operator_syntax_picks_mxnets_operators():
    a, d = csr(), nd.ones((3, 3))
    assert (a + a).stype == 'csr' and (a * d).stype == 'csr' and (a * 2).stype == 'csr'
    assert (a + d).stype == 'default' and (d - a).stype == 'default'
    assert (a + 1).stype == 'default' and (-a).stype == 'csr' and abs(a).stype == 'csr'
    np.testing.assert_array_equal((d - a).asnumpy(), 1 - DENSE)
    np.testing.assert_array_equal((2 - a).asnumpy(), 2 - DENSE)
    np.testing.assert_array_equal((a / 2).asnumpy(), DENSE / 2)
    g = rsp()
    g += rsp()
    assert g.stype == 'row_sparse' and g.data.asnumpy().tolist() == [[2, 4], [6, 8]]
    assert nd.sparse.add(a, a).stype == 'csr' and nd.sparse.multiply(a, d).stype == 'csr'
    difference, quotient = nd.sparse.subtract(a, a), nd.sparse.divide(a, 2)
    assert isinstance(difference, nd.sparse.CSRNDArray)
    np.testing.assert_array_equal(difference.asnumpy(), 0 * DENSE)
    np.testing.assert_array_equal(quotient.asnumpy(), DENSE / 2)
    assert isinstance(rsp(), nd.sparse.RowSparseNDArray)
    assert all(isinstance(x, nd.sparse.BaseSparseNDArray) for x in (a, rsp()))
    assert nd.sparse.sum(a, axis=0).asnumpy().tolist() == DENSE.sum(axis=0).tolist()
    with pytest.raises(AttributeError, match="did you mean 'dot'"):
        nd.sparse.dott


# ----------------------------------------------------------------------------------------------
# The engine: sparse arrays are written asynchronously and poisoned like dense ones

def test_failures_poison_sparse_results():
    bad = nd.random.normal(0, -1, shape=(4, 5))        # fails in its kernel
    as_csr = bad.tostype('csr')                        # skipped: its input carries the error
    product = nd.dot(as_csr, nd.ones((5, 2)))
    with pytest.raises(MXNetError, match='scale=-1.0 must be non-negative'):
        product.wait_to_read()
    nd.waitall()


def test_shape_errors_raise_at_the_call():
    with pytest.raises(MXNetError, match='dot'):
        nd.dot(csr(), nd.ones((4, 2)))


# ----------------------------------------------------------------------------------------------
# The storage fallback and its log

def _fallback_lines(caplog):
    return [r for r in caplog.records if 'storage fallback' in r.getMessage()]


def test_fallback_logs_once_per_signature(caplog):
    sp.reset_fallback_log()
    with config.override(MXNET_STORAGE_FALLBACK_LOG_VERBOSE=True), \
            caplog.at_level(logging.WARNING, logger='ember.op.sparse'):
        out = nd.exp(csr())
        nd.exp(csr())
        nd.exp(rsp())                                 # another storage signature
    np.testing.assert_allclose(out.asnumpy(), np.exp(DENSE), rtol=1e-6)
    lines = _fallback_lines(caplog)
    assert len(lines) == 2
    message = lines[0].getMessage()
    assert 'operator exp' in message and '(csr)' in message and 'no sparse kernel' in message
    sp.reset_fallback_log()


def test_fallback_log_is_silent_when_off(caplog):
    sp.reset_fallback_log()
    with config.override(MXNET_STORAGE_FALLBACK_LOG_VERBOSE=False), \
            caplog.at_level(logging.WARNING, logger='ember.op.sparse'):
        out = nd.exp(csr())
    np.testing.assert_allclose(out.asnumpy(), np.exp(DENSE), rtol=1e-6)
    assert not _fallback_lines(caplog)
    sp.reset_fallback_log()


def test_sparse_kernels_do_not_log(caplog):
    sp.reset_fallback_log()
    with caplog.at_level(logging.WARNING, logger='ember.op.sparse'):
        nd.dot(csr(), nd.ones((3, 2))).wait_to_read()
    assert not _fallback_lines(caplog)


# ----------------------------------------------------------------------------------------------
# Autograd

@pytest.mark.parametrize('stype', ['row_sparse', 'default'])
def test_dot_gradient_into_either_buffer(stype):
    w = nd.array(np.arange(6).reshape(3, 2))
    w.attach_grad(stype=stype)
    with autograd.record():
        y = nd.dot(csr(), w)
    y.backward(nd.array([[1, 2], [3, 4], [5, 6]]))
    assert w.grad.stype == stype
    np.testing.assert_array_equal(w.grad.asnumpy(), DENSE.T @ [[1, 2], [3, 4], [5, 6]])
    if stype == 'row_sparse':
        assert w.grad.indices.asnumpy().tolist() == [0, 1, 2]


def test_gradient_of_a_csr_input_at_its_stored_entries():
    x = csr()
    x.attach_grad()
    assert x.grad.stype == 'csr'
    with autograd.record():
        y = nd.dot(x, nd.ones((3, 2)))
    y.backward()
    np.testing.assert_array_equal(x.grad.asnumpy(), 2 * (DENSE != 0))


def test_embedding_sparse_gradient_and_grad_req_add():
    weight = nd.ones((10, 4))
    weight.attach_grad(grad_req='add', stype='row_sparse')
    for _ in range(2):
        with autograd.record():
            out = nd.Embedding(nd.array([1, 3, 3]), weight, input_dim=10, output_dim=4,
                               sparse_grad=True)
        out.backward()
    assert weight.grad.stype == 'row_sparse'
    assert weight.grad.indices.asnumpy().tolist() == [1, 3]
    assert weight.grad.data.asnumpy()[:, 0].tolist() == [2.0, 4.0]


def test_embedding_gradient_of_a_large_table_stores_only_the_rows_used():
    weight = nd.zeros((1_000_000, 2))
    weight.attach_grad(stype='row_sparse')
    with autograd.record():
        out = nd.Embedding(nd.array([[5, 999_999], [5, 7]]), weight, input_dim=1_000_000,
                           output_dim=2, sparse_grad=True)
    out.backward()
    assert weight.grad.indices.asnumpy().tolist() == [5, 7, 999_999]
    assert weight.grad._parts.data.nbytes == 3 * 2 * 4


# ----------------------------------------------------------------------------------------------
# Gluon

def _embedding_model(hybridize):
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Embedding(50, 4, sparse_grad=True), gluon.nn.Dense(1))
    net.initialize(mx.init.Uniform(0.1))
    if hybridize:
        net.hybridize()
    return net


@pytest.mark.parametrize('hybridize', [False, True], ids=['imperative', 'hybridized'])
@pytest.mark.parametrize('optimizer', ['sgd', 'adam'])
def test_gluon_embedding_trains_with_row_sparse_gradients(hybridize, optimizer):
    mx.random.seed(3)
    net = _embedding_model(hybridize)
    trainer = gluon.Trainer(net.collect_params(), optimizer, {'learning_rate': 0.1})
    x = nd.array([[1, 2, 3], [3, 4, 40]])
    y = nd.ones((2, 1))
    table = net[0].weight
    before = table.data().asnumpy()
    losses = []
    for _ in range(5):
        with autograd.record():
            loss = gluon.loss.L2Loss()(net(x), y)
        loss.backward()
        assert table.grad().stype == 'row_sparse'
        assert table.grad().indices.asnumpy().tolist() == [1, 2, 3, 4, 40]
        trainer.step(2)
        losses.append(float(loss.mean().asscalar()))
    after = table.data().asnumpy()
    untouched = [i for i in range(50) if i not in (1, 2, 3, 4, 40)]
    np.testing.assert_array_equal(after[untouched], before[untouched])    # lazy: only rows used
    assert not np.allclose(after[[1, 40]], before[[1, 40]])
    assert losses[-1] < losses[0]


def test_hybridized_and_imperative_sparse_gradients_agree():
    grads = []
    for hybridize in (False, True):
        mx.random.seed(5)
        net = _embedding_model(hybridize)
        with autograd.record():
            out = net(nd.array([[1, 2], [2, 9]]))
        out.backward()
        grads.append(net[0].weight.grad())
    assert grads[1].stype == 'row_sparse'
    np.testing.assert_allclose(grads[0].asnumpy(), grads[1].asnumpy(), rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# The graph executor

def test_executor_with_csr_data_and_row_sparse_weight():
    data = mx.sym.var('data', stype='csr')
    weight = mx.sym.var('w', stype='row_sparse')
    net = mx.sym.LogisticRegressionOutput(mx.sym.dot(data, weight), mx.sym.var('label'),
                                          name='out')
    exe = net.simple_bind(mx.cpu(), data=(4, 10), w=(10, 1), label=(4, 1),
                          grad_req={'w': 'write'})
    assert exe.arg_dict['data'].stype == 'csr' and exe.grad_dict['w'].stype == 'row_sparse'
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(4, 10)) * (rng.uniform(size=(4, 10)) < 0.3)
    x[:, 3] = 0                                       # a column nothing uses
    exe.arg_dict['w'][:] = nd.ones((10, 1))
    exe.forward(is_train=True, data=nd.array(x).tostype('csr'), label=nd.ones((4, 1)))
    exe.backward()
    grad = exe.grad_dict['w']
    assert grad.stype == 'row_sparse' and 3 not in grad.indices.asnumpy().tolist()
    p = 1 / (1 + np.exp(-x.sum(axis=1, keepdims=True)))
    np.testing.assert_allclose(grad.asnumpy(), x.T @ (p - 1), rtol=1e-5, atol=1e-7)
    plan = exe._compiled[True].graph.attrs
    assert 'row_sparse' in plan['stype']


def test_storage_pass_leaves_dense_graphs_alone():
    from ember.passes import infer_shape, infer_storage, infer_type
    from ember.passes.options import Options
    options = Options({'x': (2,)}, {'x': np.float32})
    graph = mx.sym.relu(mx.sym.var('x')).to_graph()
    graph = infer_type.run(infer_shape.run(graph, options), options)
    assert infer_storage.run(graph, options) is graph


# ----------------------------------------------------------------------------------------------
# row_sparse parameters: the weight lives in the Trainer's store


def _row_sparse_param(name='w', rows=6):
    param = gluon.Parameter(name, shape=(rows, 2), stype='row_sparse', grad_stype='row_sparse')
    param.initialize(init=mx.init.Constant(1.0))
    return param


def test_row_sparse_parameter_pulls_rows_and_trains_as_in_mxnet():
    param = _row_sparse_param()
    trainer = gluon.Trainer([param], 'sgd', {'learning_rate': 0.5}, kvstore='local')
    rows = param.row_sparse_data(nd.array([0, 2, 2]))
    assert rows.stype == 'row_sparse' and rows.indices.asnumpy().tolist() == [0, 2]
    with autograd.record():
        weight = param.row_sparse_data(nd.array([1, 3]))
        loss = (nd.sparse.dot(nd.array([[1, 0, 0, 0, 0, 0]]).tostype('csr'), weight) * 2).sum()
    loss.backward()
    grad = param.grad()
    assert grad.stype == 'row_sparse' and grad.indices.asnumpy().tolist() == [0]
    trainer.step(1)
    assert trainer._update_on_kvstore
    # MXNet 1.9.1 gives the same: row 0 (the only gradient row) moved by 0.5 * 2
    assert param.row_sparse_data(nd.arange(6)).asnumpy().tolist() == \
        [[0.0, 0.0]] + [[1.0, 1.0]] * 5


def test_row_sparse_weight_trains_like_a_dense_one():
    rng = np.random.default_rng(3)
    features, batches = 20, [rng.random((4, 20)) * (rng.random((4, 20)) < 0.2)
                             for _ in range(6)]
    targets = [rng.standard_normal((4, 2)) for _ in batches]
    start = rng.standard_normal((features, 2)).astype(np.float32)

    def train(stype):
        param = gluon.Parameter('weight', shape=(features, 2), stype=stype,
                                grad_stype='row_sparse' if stype != 'default' else 'default')
        param.initialize()
        param.set_data(nd.array(start))
        trainer = gluon.Trainer([param], 'sgd', {'learning_rate': 0.1}, kvstore='local')
        for x, y in zip(batches, targets):
            csr = nd.array(x).tostype('csr')
            with autograd.record():
                weight = param.row_sparse_data(nd.array(np.unique(csr.indices.asnumpy()))) \
                    if stype != 'default' else param.data()
                loss = ((nd.sparse.dot(csr, weight) - nd.array(y)) ** 2).sum()
            loss.backward()
            trainer.step(4)
        if stype == 'default':
            return param.data().asnumpy()
        return param._reduce().asnumpy()
    assert np.allclose(train('row_sparse'), train('default'), rtol=1e-5, atol=1e-6)


def test_row_sparse_parameter_saves_every_row(tmp_path):
    net = gluon.nn.Block()
    with net.name_scope():
        net.weight = net.params.get('weight', shape=(4, 3), stype='row_sparse')
    net.initialize(mx.init.One())
    gluon.Trainer(net.collect_params(), 'sgd', kvstore='local')
    net.save_parameters(str(tmp_path / 'p.params'))
    saved = nd.load(str(tmp_path / 'p.params'))
    assert saved['weight'].stype == 'row_sparse'
    assert saved['weight'].asnumpy().tolist() == [[1.0] * 3] * 4


def test_row_sparse_parameter_errors_name_the_parameter():
    param = _row_sparse_param('emb')
    with pytest.raises(EmberError, match=r"Parameter 'emb' on ctx None via data\(\) because "
                                         r"its storage type is row_sparse"):
        param.data()
    with pytest.raises(EmberError, match=r"'emb' on all contexts via list_data\(\)"):
        param.list_data()
    with pytest.raises(EmberError, match="row_sparse data for Parameter 'emb' when no Trainer"):
        param.row_sparse_data(nd.array([0]))
    with pytest.raises(EmberError, match="Cannot reduce row_sparse data for Parameter 'emb'"):
        param._reduce()
    gluon.Trainer([param], 'sgd', kvstore='local')
    with pytest.raises(EmberError, match="Parameter 'emb' because it was already set"):
        gluon.Trainer([param], 'sgd', kvstore='local')
    dense = gluon.Parameter('d', shape=(2,))
    dense.initialize(mx.init.Zero())
    with pytest.raises(EmberError, match=r"'d' via row_sparse_data\(\) because its storage "
                                         r"type is default"):
        dense.row_sparse_data(nd.array([0]))
    with pytest.raises(ValueError, match=r"w: stype='dense': expected 'default', 'row_sparse' "
                                         r"or 'csr'"):
        gluon.Parameter('w', shape=(2,), stype='dense')
    lonely = _row_sparse_param('lonely')
    gluon.Trainer([lonely], 'sgd', kvstore=None)
    with pytest.raises(TypeError, match="Cannot create None KVStore with row_sparse"):
        lonely.row_sparse_data(nd.array([0]))
    refused = _row_sparse_param('refused')
    gluon.Trainer([refused], 'sgd', kvstore='local', update_on_kvstore=False)
    with pytest.raises(ValueError, match='update_on_kvstore=False: row_sparse weights'):
        refused.row_sparse_data(nd.array([0]))


def test_hybrid_block_refuses_a_row_sparse_weight():
    class Dot(gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            self.w = self.params.get('weight', shape=(4, 2), stype='row_sparse')

        def hybrid_forward(self, F, x, weight):
            return F.dot(x, weight)
    block = Dot()
    block.initialize()
    with pytest.raises(EmberError, match=r"via data\(\) because its storage type is row_sparse"):
        block(nd.ones((1, 4)))


def test_embedding_of_a_row_sparse_table_reads_missing_rows_as_zeros(caplog):
    table = np.arange(12, dtype=np.float32).reshape(6, 2)
    rows = nd.sparse.row_sparse_array((table[[1, 4]], [1, 4]), shape=(6, 2))
    index = nd.array([[4, 0], [1, 9]])          # 0 is not stored; 9 clips to 5, not stored
    sp.reset_fallback_log()
    with config.override(MXNET_STORAGE_FALLBACK_LOG_VERBOSE=True), \
            caplog.at_level(logging.WARNING, logger='ember.op.sparse'):
        got = nd.Embedding(index, rows, input_dim=6, output_dim=2)
        got.wait_to_read()
    assert got.stype == 'default' and not _fallback_lines(caplog)
    dense = nd.Embedding(index, rows.tostype('default'), input_dim=6, output_dim=2)
    assert got.asnumpy().tolist() == dense.asnumpy().tolist() == \
        [[[8, 9], [0, 0]], [[2, 3], [0, 0]]]
