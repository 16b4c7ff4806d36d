"""mx.nd's two-way functions (arrays or numbers on either side) and the array makers of
mx.nd.ndarray and mx.nd.utils, against NumPy."""
import numpy as np
import pytest

import ember as mx

LHS = np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -2.5]])
RHS = np.array([[1.5, -1.0, 0.25]])


def modulo(a, b):
    """MXNet's modulo: x mod 0 is 0 (checked against MXNet 1.9.1), not NumPy's NaN."""
    return np.where(np.asarray(b) == 0, 0.0, np.mod(a, np.where(np.asarray(b) == 0, 1, b)))


TWO_WAY = [
    ('add', np.add), ('subtract', np.subtract), ('multiply', np.multiply),
    ('divide', np.divide), ('true_divide', np.true_divide), ('modulo', modulo),
    ('maximum', np.maximum), ('minimum', np.minimum), ('equal', np.equal),
    ('not_equal', np.not_equal), ('greater', np.greater), ('greater_equal', np.greater_equal),
    ('lesser', np.less), ('lesser_equal', np.less_equal), ('logical_and', np.logical_and),
    ('logical_or', np.logical_or), ('logical_xor', np.logical_xor),
]

# The functions the table test runs by name, for `python -m ember api-coverage`.
EXERCISED_API = [f'ember.ndarray.{name}' for name, _ in TWO_WAY]


@pytest.mark.parametrize('name, reference', TWO_WAY, ids=[n for n, _ in TWO_WAY])
def test_two_way_functions_take_arrays_and_numbers(name, reference):
    fn = getattr(mx.nd, name)
    assert getattr(mx.nd.ndarray, name) is fn      # MXNet's module holds the same function
    a, b = mx.nd.array(LHS), mx.nd.array(RHS)
    with np.errstate(divide='ignore'):      # -1 / 0 is -inf in both
        expected = [reference(LHS, RHS), reference(LHS, 1.5), reference(-1.0, LHS)]
    for got, want in zip([fn(a, b), fn(a, 1.5), fn(-1.0, a)], expected):
        np.testing.assert_allclose(got.asnumpy(), np.asarray(want, dtype=np.float32),
                                   rtol=1e-6, err_msg=name)
    assert fn(3.0, 2.0) == reference(3.0, 2.0)


def test_power_takes_base_and_exp():
    base = mx.nd.array([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(mx.nd.power(base=base, exp=2).asnumpy(), [[1, 4, 9]])
    np.testing.assert_allclose(mx.nd.power(2, base).asnumpy(), [[2, 4, 8]])
    np.testing.assert_allclose(mx.nd.ndarray.power(base, mx.nd.array([[2.0], ])).asnumpy(),
                               [[1, 4, 9]])


def test_dense_makers_of_ndarray_module_and_the_storage_aware_ones():
    dense = mx.nd.ndarray.zeros((2, 3), dtype='int32')
    assert dense.stype == 'default' and dense.dtype == np.int32 and not dense.asnumpy().any()
    assert mx.nd.ndarray.empty((4,), mx.cpu(), 'float16').shape == (4,)
    assert mx.nd.ndarray.empty(3).dtype == np.float32
    assert mx.nd.ndarray.array([1, 2]).asnumpy().tolist() == [1.0, 2.0]
    csr = mx.nd.utils.zeros((2, 3), stype='csr')
    assert csr.stype == 'csr' and csr.asnumpy().tolist() == [[0.0] * 3] * 2
    assert mx.nd.utils.empty((2, 2), stype='row_sparse').stype == 'row_sparse'
    assert mx.nd.utils.empty((2, 2)).stype == 'default'
    copied = mx.nd.utils.array(csr, dtype='float64')
    assert copied.stype == 'csr' and copied.dtype == np.float64
    assert mx.nd.utils.array([[1, 2]]).stype == 'default'
    assert mx.nd.zeros is mx.nd.utils.zeros and mx.nd.array is mx.nd.utils.array


def test_utils_saves_and_loads(tmp_path):
    path = str(tmp_path / 'arrays')
    mx.nd.utils.save(path, {'a': mx.nd.array([1, 2]), 'b': mx.nd.utils.zeros((2, 2), stype='csr')})
    loaded = mx.nd.utils.load(path)
    assert loaded['a'].asnumpy().tolist() == [1, 2] and loaded['b'].stype == 'csr'
    with open(path, 'rb') as file:
        again = mx.nd.utils.load_frombuffer(file.read())
    assert sorted(again) == ['a', 'b']


def _bound(symbol, **arrays):
    return [o.asnumpy() for o in symbol.bind(mx.cpu(), arrays).forward()]


def test_symbol_functions_give_the_ndarray_results():
    values = mx.nd.array([[0.1, 0.5, 0.9, 1.0], [0.2, 0.3, 0.35, 0.7]])
    a = mx.sym.var('a')
    for got, want in [
            (_bound(mx.sym.histogram(a, bins=3, range=(0, 1)), a=values),
             mx.nd.histogram(values, bins=3, range=(0, 1))),
            (_bound(mx.sym.linspace(0, 1, 5, endpoint=False)), [mx.nd.linspace(0, 1, 5, False)]),
            (_bound(mx.sym.split_v2(a, (1, 3), axis=1), a=values),
             mx.nd.split_v2(values, (1, 3), axis=1))]:
        assert len(got) == len(want)
        for mine, theirs in zip(got, want):
            np.testing.assert_allclose(mine, theirs.asnumpy(), rtol=1e-6)


def test_kl_sparse_reg_is_the_identity_forward_in_mx_nd():
    values = mx.nd.array([[0.1, 0.4], [0.3, 0.8]])
    out = mx.nd.IdentityAttachKLSparseReg(values, mx.nd.full((2,), 0.5), sparseness_target=0.2)
    np.testing.assert_array_equal(out.asnumpy(), values.asnumpy())


def test_indexing_key_helpers_read_keys_as_mxnet():
    # values as MXNet 1.9.1's mx.nd.ndarray helpers give them
    from ember.ndarray import ndarray as nd_module
    expand = mx.nd.indexing_key_expand_implicit_axes
    assert expand((0, Ellipsis, None), (2, 3, 4)) == ((0, slice(None), slice(None), None), -1)
    assert expand(1, (2, 3)) == ((1, slice(None)), -1)
    key, prepend = expand((np.array([True, False, True]),), (3, 2))
    assert key[0].tolist() == [0, 2] and key[1] == slice(None) and prepend == -1
    assert expand((np.array(False), 0), (2,))[1] == 0
    assert mx.nd.get_oshape_of_gather_nd_op((4, 5, 6), (2, 7)) == (7, 6)
    assert mx.nd.get_oshape_of_gather_nd_op((4,), (1, 3)) == (3,)
    dispatch = mx.nd.get_indexing_dispatch_code
    assert [dispatch((0, ())), dispatch((None, 1)), dispatch((range(2),))] == [2, 0, 1]
    with pytest.raises(ValueError, match="'a'"):
        dispatch((0, 'a'))
    with pytest.raises(IndexError, match='axis 1'):
        nd_module.check_boolean_array_dimension((2, 3), 1, (4,))
