"""One table of sparse operator calls: each row names an operator, the storage types of its
inputs and the storage type MXNet 1.9.1 gives its output (checked against MXNet itself when
the table was written), and whether the call has a sparse kernel or falls back.

Each row runs in float64 on sparse inputs and on dense copies of them, and the two results
must agree; the output's storage type must be MXNet's. Rows marked ``kernel`` must not fall
back. ``test_every_storage_rule_has_a_row`` fails when an operator gains a storage rule
without a row here (the optimizers' rules are checked in test_lazy_updates below).
"""
from __future__ import annotations

import subprocess
import sys
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

import ember as mx
from ember import config
from ember.base import MXNetError
from ember.ndarray.ndarray import invoke
from ember.op import registry
from ember.op import sparse as sp
from ember.op import sparse_ops as _sparse_ops
from ember.op.sparse_ops import VALUE_OPS
from ember.op.sparse_optimizer import LAZY_OPS
from tolerance import assert_sums_close

CSR, RSP, DNS = 'csr', 'row_sparse', 'default'


@dataclass(frozen=True)
class Row:
    op: str
    stypes: tuple               # storage type of each input
    out: tuple                  # MXNet 1.9.1's storage type of each output
    attrs: dict = field(default_factory=dict)
    shapes: tuple = ()          # per input; default (4, 5) each
    kernel: bool = True         # has a sparse kernel (else: the fallback)
    draw: Callable | None = None        # rng -> dense values of the inputs
    ref: Callable | None = None         # dense results -> what the sparse call must give
    tag: str = ''

    @property
    def id(self):
        text = f'{self.op}({",".join(self.stypes)})'
        return f'{text}-{self.tag}' if self.tag else text


def values_for(stype, shape, rng, positive=False):
    """Values in [0.1, 0.9] (random signs unless positive) with about half the entries (csr)
    or rows (row_sparse) zero."""
    values = rng.uniform(0.1, 0.9, shape) * (1 if positive else rng.choice([-1, 1], shape))
    if stype == CSR:
        values[rng.uniform(size=shape) < 0.5] = 0
    elif stype == RSP:
        values[rng.uniform(size=shape[0]) < 0.5] = 0
        values[0] = 0                  # at least one missing row, one stored row
        values[-1] = rng.uniform(0.1, 0.9, shape[1:])
    return values


def unary_rows():
    rows = []
    for name in VALUE_OPS:
        attrs = {'scalar': 2.5} if name.endswith('_scalar') else {}
        attrs = {'a_min': -0.5, 'a_max': 0.5} if name == 'clip' else attrs
        for stype in (CSR, RSP):
            rows.append(Row(name, (stype,), (stype,), attrs))
    for name in ('_plus_scalar', '_minus_scalar', '_rminus_scalar'):
        rows += [Row(name, (s,), (DNS,), {'scalar': 1.5}) for s in (CSR, RSP)]
    for name in ('_copy', 'BlockGrad', 'zeros_like', '_copyto'):
        rows += [Row(name, (s,), (s,)) for s in (CSR, RSP)]
    return rows + [
        Row('clip', (CSR,), (DNS,), {'a_min': 0.2, 'a_max': 0.5}, kernel=False,
            tag='zero outside'),
        Row('exp', (CSR,), (DNS,), kernel=False),
        Row('sigmoid', (RSP,), (DNS,), kernel=False),
    ]


def _elemwise_table():
    """MXNet 1.9.1's output storage types of elemwise_add/sub/mul, per input pair."""
    add = {(CSR, CSR): CSR, (RSP, RSP): RSP, (CSR, DNS): DNS, (DNS, CSR): DNS,
           (RSP, DNS): DNS, (DNS, RSP): DNS, (CSR, RSP): None, (RSP, CSR): None}
    mul = {(CSR, CSR): CSR, (RSP, RSP): RSP, (CSR, DNS): CSR, (DNS, CSR): CSR,
           (RSP, DNS): RSP, (DNS, RSP): RSP, (CSR, RSP): None, (RSP, CSR): None}
    return {'elemwise_add': add, 'elemwise_sub': add, 'elemwise_mul': mul}


def binary_rows():
    rows = []
    for name, table in _elemwise_table().items():
        for pair, out in table.items():
            rows.append(Row(name, pair, (out or DNS,), kernel=out is not None))
    rows.append(Row('elemwise_div', (CSR, DNS), (DNS,), kernel=False))
    rows += [Row('broadcast_add', (DNS, CSR), (DNS,)), Row('broadcast_sub', (CSR, DNS), (DNS,)),
             Row('broadcast_add', (RSP, DNS), (DNS,)), Row('broadcast_sub', (DNS, RSP), (DNS,))]
    for name in ('broadcast_mul', 'broadcast_div'):
        for vector in ((4, 1), (1, 5), (5,), (1,)):
            rows.append(Row(name, (CSR, DNS), (CSR,), shapes=((4, 5), vector),
                            tag=str(vector), draw=_away_from_zero(1)))
    rows.append(Row('broadcast_mul', (DNS, CSR), (DNS,), kernel=False))
    return rows


def _away_from_zero(index):
    def draw(rng, row):
        values = [values_for(s, shape, rng) for s, shape in zip(row.stypes, _shapes(row))]
        values[index] = np.abs(values[index]) + 0.5
        return values
    return draw


def reduction_rows():
    rows = []
    for name in ('sum', 'mean'):
        for axis in (0, 1, None, (0, 1)):
            rows.append(Row(name, (CSR,), (DNS,), {'axis': axis}, tag=str(axis)))
        rows += [Row(name, (CSR,), (DNS,), {'axis': 1, 'keepdims': True}, tag='keepdims'),
                 Row(name, (RSP,), (DNS,), {'axis': 0}, tag='0'),
                 Row(name, (RSP,), (DNS,), {'axis': 1}, tag='1')]
    return rows + [
        Row('add_n', (RSP, RSP, RSP), (RSP,)),
        Row('add_n', (DNS, RSP, DNS), (DNS,)),
        Row('add_n', (CSR, DNS), (DNS,)),
        Row('add_n', (CSR, CSR), (DNS,), kernel=False),
    ]


def dot_rows():
    shapes = ((4, 5), (5, 3))
    rows = [
        Row('dot', (CSR, DNS), (DNS,), shapes=shapes),
        Row('dot', (CSR, DNS), (RSP,), {'transpose_a': True}, ((4, 5), (4, 3)), tag='T'),
        Row('dot', (CSR, DNS), (DNS,), {'transpose_b': True}, ((4, 5), (3, 5)), tag='_T'),
        Row('dot', (CSR, DNS), (DNS,), {'transpose_a': True, 'transpose_b': True},
            ((4, 5), (3, 4)), tag='T_T'),
        Row('dot', (CSR, DNS), (DNS,), shapes=((4, 5), (5,)), tag='vector'),
        Row('dot', (CSR, DNS), (RSP,), {'transpose_a': True}, ((4, 5), (4,)), tag='T vector'),
        Row('dot', (CSR, DNS), (DNS,), {'transpose_a': True, 'forward_stype': 'default'},
            ((4, 5), (4, 3)), tag='forward_stype'),
        Row('dot', (DNS, CSR), (CSR,), shapes=((3, 4), (4, 5))),
        Row('dot', (DNS, CSR), (CSR,), {'transpose_b': True}, ((3, 5), (4, 5)), tag='_T'),
        Row('dot', (DNS, CSR), (DNS,), {'transpose_a': True}, ((4, 3), (4, 5)), tag='T'),
        Row('dot', (CSR, RSP), (DNS,), shapes=shapes),
        Row('dot', (CSR, RSP), (RSP,), {'transpose_a': True}, ((4, 5), (4, 3)), tag='T'),
        Row('dot', (RSP, DNS), (DNS,), shapes=((4, 5), (5, 3)), kernel=False),
    ]
    for rhs in (DNS, RSP):
        rows.append(Row('_backward_dot', (DNS, CSR, rhs), (CSR, RSP),
                        shapes=((4, 3), (4, 5), (5, 3)), ref=_backward_dot_ref, tag=rhs))
    rows.append(Row('_backward_dot', (DNS, CSR, DNS), (CSR, DNS), {'transpose_a': True},
                    ((5, 3), (4, 5), (4, 3)), ref=_backward_dot_ref, tag='T'))
    return rows


def _backward_dot_ref(inputs, dense_results):
    """The gradient of a csr lhs is kept at its stored entries (as a sparse gradient is)."""
    lhs = inputs[1]
    return [dense_results[0] * (lhs != 0), dense_results[1]]


def _embedding_draw(rng, row):
    return [rng.normal(size=(3, 4)), np.array([1.0, 7.0, 1.0])]


def _retain_draw(rng, row):
    return [values_for(RSP, (6, 2), rng), np.array([5.0, 0.0, 2.0])]


def other_rows():
    embedding = {'input_dim': 8, 'output_dim': 4, 'sparse_grad': True}
    rows = [
        Row('where', (CSR, DNS, DNS), (DNS,)),
        Row('_backward_Embedding', (DNS, DNS), (RSP,), embedding, draw=_embedding_draw),
        Row('_sparse_retain', (RSP, DNS), (RSP,), draw=_retain_draw),
        Row('_sparse_retain', (DNS, DNS), (RSP,), draw=_retain_draw, tag='rows of a dense array'),
        Row('slice', (CSR,), (CSR,), {'begin': (1,), 'end': (3,)}, tag='rows'),
        Row('slice', (CSR,), (CSR,), {'begin': (1, 1), 'end': (4, 3)}, tag='rows and columns'),
        Row('slice', (CSR,), (DNS,), {'begin': (0,), 'end': (4,), 'step': (2,)}, kernel=False,
            tag='step'),
    ]
    for source, target in ((DNS, CSR), (DNS, RSP), (CSR, DNS), (RSP, DNS), (CSR, RSP),
                           (RSP, CSR), (CSR, CSR)):
        rows.append(Row('cast_storage', (source,), (target,), {'stype': target}, tag=target))
    for name in ('LinearRegressionOutput', 'LogisticRegressionOutput', 'MAERegressionOutput'):
        rows += [Row(name, (DNS, CSR), (DNS,)),
                 Row(f'_backward_{name}', (DNS, DNS, CSR), (DNS,))]
    return rows + layer_rows()


def _every_entry_stored(low, high):
    """Values in [low, high) everywhere: a sparse array storing every entry (for functions
    that are infinite or undefined at zero)."""
    return lambda rng, row: [rng.uniform(low, high, shape) for shape in _shapes(row)]


def _fallbacks(*specs):
    return [Row(name, (stype,), (DNS,), kernel=False, draw=draw) for name, stype, draw in specs]


def layer_rows():
    """Operators of MXNet's sparse namespace that keep sparse storage or fall back."""
    stored = _every_entry_stored(1.1, 1.9)
    embedding = {'input_dim': 4, 'output_dim': 5}
    fc_shapes = ((4, 5), (3, 5), (3,))
    return _fallbacks(('arccos', CSR, None), ('arccos', RSP, None), ('arccosh', RSP, stored),
                      ('cos', CSR, None), ('cosh', RSP, None), ('gamma', CSR, stored),
                      ('gammaln', RSP, stored), ('log', CSR, stored), ('log10', RSP, stored),
                      ('log2', CSR, stored), ('rsqrt', RSP, stored)) + [
        Row('MakeLoss', (CSR,), (CSR,)), Row('MakeLoss', (RSP,), (RSP,)),
        Row('norm', (CSR,), (DNS,), kernel=False), Row('norm', (RSP,), (DNS,), kernel=False),
        Row('norm', (CSR,), (DNS,), {'axis': 1}, kernel=False, tag='axis'),
        Row('Concat', (CSR, CSR), (CSR,), {'dim': 0}, shapes=((4, 5), (2, 5))),
        Row('Concat', (CSR, CSR), (DNS,), {'dim': 1}, kernel=False, tag='columns'),
        Row('Concat', (RSP, RSP), (DNS,), {'dim': 0}, kernel=False),
        Row('FullyConnected', (CSR, DNS, DNS), (DNS,), {'num_hidden': 3}, fc_shapes,
            kernel=False),
        Row('FullyConnected', (CSR, RSP, DNS), (DNS,), {'num_hidden': 3}, fc_shapes,
            kernel=False),
        Row('Embedding', (DNS, RSP), (DNS,), embedding, draw=_indices_and_rows),
        Row('Embedding', (DNS, DNS), (DNS,), dict(embedding, sparse_grad=True),
            draw=_indices_and_rows, tag='sparse_grad'),
    ]


def graph_rows():
    """The contrib operators over csr graphs (tests/test_ops_contrib.py checks their values
    against MXNet's; here the csr kernels against the dense reading)."""
    rows = [Row('_contrib_getnnz', (CSR,), (DNS,), {'axis': axis}, tag=str(axis))
            for axis in (None, 0, 1)]
    return rows + [Row('_contrib_dgl_adjacency', (CSR,), (CSR,)),
                   Row('_contrib_edge_id', (CSR, DNS, DNS), (DNS,), shapes=((4, 5), (6,), (6,)),
                       draw=_graph_and_edges)]


def _graph_and_edges(rng, row):
    return [values_for(CSR, (4, 5), rng), rng.integers(0, 4, 6).astype(float),
            rng.integers(0, 5, 6).astype(float)]


def _indices_and_rows(rng, row):
    return [np.array([1.0, 3.0, 1.0]), values_for(row.stypes[1], (4, 5), rng)]


ROWS = (unary_rows() + binary_rows() + reduction_rows() + dot_rows() + other_rows()
        + graph_rows())


def _shapes(row):
    return row.shapes or ((4, 5),) * len(row.stypes)


def _inputs(row, rng):
    if row.draw is not None:
        return row.draw(rng, row)
    positive = row.op in ('sqrt',)
    return [values_for(s, shape, rng, positive) for s, shape in zip(row.stypes, _shapes(row))]


def _as_array(values, stype):
    array = mx.nd.array(values, dtype=np.float64)
    return array if stype == DNS else array.tostype(stype)


DENSE_SETTINGS = {'sparse_grad': False, 'stype': DNS, 'forward_stype': None}


def test_row_ids_are_unique():
    ids = [row.id for row in ROWS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize('row', ROWS, ids=lambda row: row.id)
def test_sparse_operator(row):
    rng = np.random.default_rng(zlib.crc32(row.id.encode()))
    values = _inputs(row, rng)
    op = registry.get(row.op)
    given = dict(row.attrs, **({op.variadic: len(values)} if op.variadic else {}))
    attrs = op.parse_attrs(given)
    shapes = [v.shape for v in values]
    dispatch = sp.decide(op, attrs, row.stypes, shapes, len(row.out))
    assert dispatch.fallback is not row.kernel, f'{row.id}: fallback {dispatch.fallback}'
    outputs = invoke(op, [_as_array(v, s) for v, s in zip(values, row.stypes)], attrs)
    assert tuple(o.stype for o in outputs) == row.out
    # the same call asking for dense storage everywhere
    dense_attrs = op.parse_attrs({**given, **{k: DENSE_SETTINGS[k] for k in given
                                              if k in DENSE_SETTINGS}})
    dense = [o.asnumpy() for o in invoke(op, [mx.nd.array(v, dtype=np.float64)
                                              for v in values], dense_attrs)]
    expected = dense if row.ref is None else row.ref(values, dense)
    for got, want in zip(outputs, expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-12, atol=1e-12)
        if got.stype != DNS:
            got.check_format()


# The names MXNet's sparse namespaces give operators whose registered name is internal.
SPARSE_NAMES = {'_sparse_retain': ['retain']}


def _namespace_names(op_name):
    """The names of the operator in mx.nd.sparse and mx.sym.sparse."""
    op = registry.get(op_name)
    public = [n for n, other in registry.all_ops().items()
              if other is op and not n.startswith('_')]
    return sorted(public + SPARSE_NAMES.get(op_name, []))


def _symbolic(fn, row, arrays):
    names = [f'in{i}' for i in range(len(arrays))]
    out = fn(*[mx.sym.var(n, stype=a.stype) for n, a in zip(names, arrays)], **row.attrs)
    return out.bind(mx.cpu(), dict(zip(names, arrays))).forward()


@pytest.mark.parametrize('row', [r for r in ROWS if _namespace_names(r.op)],
                         ids=lambda row: row.id)
def test_sparse_namespaces_give_the_operator_result(row):
    """mx.nd.sparse.<name> and mx.sym.sparse.<name> (bound to the sparse inputs) give the
    operator's result in the same storage type."""
    rng = np.random.default_rng(zlib.crc32(row.id.encode()))
    values = _inputs(row, rng)
    arrays = [_as_array(v, s) for v, s in zip(values, row.stypes)]
    op = registry.get(row.op)
    given = dict(row.attrs, **({op.variadic: len(values)} if op.variadic else {}))
    expected = invoke(op, arrays, op.parse_attrs(given))
    for name in _namespace_names(row.op):
        result = getattr(mx.nd.sparse, name)(*arrays, **row.attrs)
        outputs = result if isinstance(result, list) else [result]
        symbolic = _symbolic(getattr(mx.sym.sparse, name), row, arrays)
        for form, got in (('nd', outputs), ('sym', symbolic)):
            assert [o.stype for o in got] == list(row.out), f'{form}.sparse.{name}'
            for mine, want in zip(got, expected):
                np.testing.assert_allclose(mine.asnumpy(), want.asnumpy(), rtol=1e-12,
                                           err_msg=f'{form}.sparse.{name}')


def test_every_storage_rule_has_a_row():
    covered = {registry.get(row.op).name for row in ROWS} | set(LAZY_OPS)
    missing = sorted(set(sp._RULES) - covered)
    assert not missing, f'operators with a storage rule but no row: {missing}'


# ----------------------------------------------------------------------------------------------
# Lazy updates: the rows the gradient stores are stepped as the dense update steps them; the
# other rows of the weight and states keep their values. lazy_update=False is the dense update.

UPDATES = [
    ('sgd_update', 0, {'lr': 0.1, 'wd': 0.1}),
    ('sgd_mom_update', 1, {'lr': 0.1, 'wd': 0.1, 'momentum': 0.9}),
    ('adam_update', 2, {'lr': 0.1, 'wd': 0.1, 'rescale_grad': 0.5, 'clip_gradient': 0.3}),
    ('ftrl_update', 2, {'lr': 0.1, 'wd': 0.1, 'lamda1': 0.01}),
    ('adagrad_update', 1, {'lr': 0.1, 'wd': 0.1}),
]


def _update(name, weight, grad, states, attrs, weight_stype=DNS, state_stype=DNS,
            namespace='nd'):
    w = _as_array(weight, weight_stype)
    g = _as_array(grad, RSP if grad is not None else DNS)
    s = [_as_array(v, state_stype) for v in states]
    if namespace == 'sym.sparse':
        return _symbolic_update(name, [w, g] + s, attrs)
    getattr(mx.nd if namespace == 'nd' else mx.nd.sparse, name)(w, g, *s, out=w, **attrs)
    return w.asnumpy(), [x.asnumpy() for x in s]


def _symbolic_update(name, arrays, attrs):
    """The update as a graph node: the states are auxiliary arrays it updates in place."""
    names = [f'in{i}' for i in range(len(arrays))]
    out = getattr(mx.sym.sparse, name)(*[mx.sym.var(n, stype=a.stype)
                                         for n, a in zip(names, arrays)], **attrs)
    bound = dict(zip(names, arrays))
    aux = out.list_auxiliary_states()
    new = out.bind(mx.cpu(), {n: a for n, a in bound.items() if n not in aux},
                   aux_states={n: bound[n] for n in aux}).forward()[0]
    return new.asnumpy(), [a.asnumpy() for a in arrays[2:]]


@pytest.mark.parametrize('namespace', ['nd', 'nd.sparse', 'sym.sparse'])
@pytest.mark.parametrize('name,count,attrs', UPDATES, ids=[u[0] for u in UPDATES])
@pytest.mark.parametrize('stype', [DNS, RSP], ids=['dense weight', 'row_sparse weight'])
def test_lazy_updates(name, count, attrs, stype, namespace):
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    weight = rng.normal(size=(6, 3))
    grad = values_for(RSP, (6, 3), rng)
    states = [np.abs(rng.normal(size=(6, 3))) for _ in range(count)]
    rows = np.flatnonzero(np.any(grad != 0, axis=1))
    got_w, got_s = _update(name, weight, grad, states, attrs, stype, stype, namespace)
    dense_w = weight.copy()
    dense_s = [v.copy() for v in states]
    w = mx.nd.array(dense_w, dtype=np.float64)
    s = [mx.nd.array(v, dtype=np.float64) for v in dense_s]
    getattr(mx.nd, name)(w, mx.nd.array(grad, dtype=np.float64), *s, out=w, **attrs)
    want_w, want_s = weight.copy(), [v.copy() for v in states]
    want_w[rows] = w.asnumpy()[rows]
    for target, new in zip(want_s, s):
        target[rows] = new.asnumpy()[rows]
    np.testing.assert_allclose(got_w, want_w, rtol=1e-12)
    for got, want in zip(got_s, want_s):
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize('name', ['sgd_update', 'sgd_mom_update', 'adam_update'])
def test_standard_update_without_lazy(name):
    """lazy_update=False steps every row, the gradient being zero where it stores nothing."""
    count, attrs = next((c, a) for n, c, a in UPDATES if n == name)
    rng = np.random.default_rng(1)
    weight, grad = rng.normal(size=(5, 2)), values_for(RSP, (5, 2), rng)
    states = [np.abs(rng.normal(size=(5, 2))) for _ in range(count)]
    got_w, got_s = _update(name, weight, grad, states, dict(attrs, lazy_update=False))
    w = mx.nd.array(weight, dtype=np.float64)
    s = [mx.nd.array(v, dtype=np.float64) for v in states]
    getattr(mx.nd, name)(w, mx.nd.array(grad, dtype=np.float64), *s, out=w, **attrs)
    np.testing.assert_allclose(got_w, w.asnumpy(), rtol=1e-12)
    assert not np.allclose(got_w[0], weight[0])       # a row the gradient does not store


def test_lazy_update_touches_only_the_stored_rows_of_a_large_weight():
    """A two-row gradient of a million-row weight: the weight is stepped in place, the other
    rows keep their values (the cost is the two rows; tests check behaviour, not time)."""
    weight = mx.nd.ones((1_000_000, 2))
    grad = mx.nd.sparse.row_sparse_array((np.ones((2, 2)), [3, 999_999]), shape=(1_000_000, 2),
                                         dtype='float32')
    handle = weight.handle
    mx.nd.sgd_update(weight, grad, out=weight, lr=0.5)
    assert weight.handle is handle
    values = weight.asnumpy()
    assert values[[3, 999_999]].tolist() == [[0.5, 0.5]] * 2
    assert values.sum() == 2 * 1_000_000 - 2


# ----------------------------------------------------------------------------------------------
# The compiled kernels (ember._sparse) against SciPy and NumPy's steps in float32.


needs_compiled = pytest.mark.skipif(_sparse_ops._compiled is None,
                                    reason='ember._sparse is not built (no C compiler)')


def _random_csr(rng, rows, cols, density):
    """A float32 csr of about `density` stored entries."""
    import scipy.sparse
    matrix = scipy.sparse.random(rows, cols, density, format='csr', dtype=np.float32,
                                 random_state=np.random.RandomState(rng.integers(1 << 30)))
    return sp.from_dense(matrix.toarray(), CSR)


@needs_compiled
@pytest.mark.parametrize('threads', [1, 3])
def test_compiled_csr_dot_matches_scipy(threads, sparse_build):
    rng = np.random.default_rng(threads)
    dense = _random_csr(rng, 37, 50, 0.2).to_dense(np)
    dense[5:9] = 0                                        # empty rows stay empty
    csr = sp.from_dense(dense, CSR)
    right = rng.standard_normal((50, 6)).astype(np.float32)
    out = np.full((37, 6), np.nan, np.float32)
    _sparse_ops._compiled.csr_dot(csr.data, csr.indices, csr.indptr, right, out, 6,
                                  threads=threads, cores=None)
    expected = csr.scipy().astype(np.float64) @ right.astype(np.float64)
    magnitude = abs(csr.scipy()).astype(np.float64) @ np.abs(right).astype(np.float64)
    assert_sums_close(out, expected, magnitude, 50)
    columns, values = _sparse_ops.transposed_times(csr, rng.standard_normal(
        (37, 6)).astype(np.float32), np)
    assert columns.tolist() == sorted(set(csr.indices.tolist()))
    assert values.shape[0] == columns.size


@needs_compiled
def test_compiled_csr_dot_refuses_bad_indices():
    csr = sp.from_dense(np.eye(3, dtype=np.float32), CSR)
    bad = csr.indices.copy()
    bad[1] = 7
    with pytest.raises(ValueError, match='column index is out of range'):
        _sparse_ops._compiled.csr_dot(csr.data, bad, csr.indptr, np.ones((3, 2), np.float32),
                                      np.empty((3, 2), np.float32), 2)


@needs_compiled
@pytest.mark.parametrize('name,states', [('sgd_update', 0), ('sgd_mom_update', 1),
                                         ('adam_update', 2)])
@pytest.mark.parametrize('width', [5, 37])       # 37: whole vectors of every build, and a tail
def test_compiled_lazy_update_rounds_as_numpy(name, states, width, sparse_build):
    from ember.op import sparse_optimizer
    rng = np.random.default_rng(len(name))
    attrs = registry.get(name).parse_attrs(
        {'lr': 0.1, 'wd': 0.01, 'rescale_grad': 0.5, 'clip_gradient': 0.4,
         **({'momentum': 0.9} if states == 1 else {})})
    weight = rng.standard_normal((9, width)).astype(np.float32)
    arrays = [np.abs(rng.standard_normal((9, width))).astype(np.float32)
              for _ in range(states)]
    rows = np.array([1, 4, 8])
    grad = rng.standard_normal((3, width)).astype(np.float32)
    step = sparse_optimizer.LAZY_OPS[name][0]
    want_states = [a[rows].copy() for a in arrays]
    want = step(np, attrs, weight[rows].copy(), grad, *want_states)
    _sparse_ops._compiled.lazy_update(sparse_optimizer._COMPILED_KINDS[name], weight.reshape(-1),
                                      grad.reshape(-1), rows, tuple(a.reshape(-1) for a in arrays),
                                      attrs['lr'], attrs['wd'], attrs['rescale_grad'],
                                      attrs['clip_gradient'], attrs.get('momentum', 0.0),
                                      attrs.get('beta1', 0.0), attrs.get('beta2', 0.0),
                                      attrs.get('epsilon', 0.0), threads=2, cores=None)
    np.testing.assert_array_equal(weight[rows], want)
    for got, expected in zip(arrays, want_states):
        np.testing.assert_array_equal(got[rows], expected)


def _csr_with_gaps(rng, rows, cols, density):
    """A float32 csr with empty rows and columns stored by no row."""
    dense = _random_csr(rng, rows, cols, density).to_dense(np)
    dense[rows // 3:rows // 3 + 2] = 0
    dense[:, cols // 2:cols // 2 + 5] = 0
    return sp.from_dense(dense, CSR)


def _scipy_transposed_times(csr, right):
    """transposed_times on the SciPy path (the fallback without the compiled module)."""
    compiled = _sparse_ops._compiled
    try:
        _sparse_ops._compiled = None
        return _sparse_ops.transposed_times(csr, right, np)
    finally:
        _sparse_ops._compiled = compiled


@needs_compiled
@pytest.mark.parametrize('shape,width,density', [
    ((30, 40), 6, 0.2),
    ((60, 3000), 256, 0.05),        # several blocks of output rows, a team split inside one
    ((9, 400_000), 3, 2e-5),        # far more columns than entries: found by sorting
    ((5, 7), 2, 0.0),
], ids=['small', 'blocks', 'wide', 'empty'])
@pytest.mark.parametrize('threads', [1, 3])
def test_compiled_transposed_times_matches_scipy(shape, width, density, threads, sparse_build,
                                                 monkeypatch):
    rng = np.random.default_rng(width)
    csr = _csr_with_gaps(rng, *shape, density)
    right = rng.standard_normal((shape[0], width)).astype(np.float32)
    monkeypatch.setattr(_sparse_ops, '_team', lambda work: {'threads': threads, 'cores': None})
    columns, values = _sparse_ops.transposed_times(csr, right, np)
    want_columns, want_values = _scipy_transposed_times(csr, right)
    assert columns.tolist() == want_columns.tolist() == sorted(set(csr.indices.tolist()))
    assert values.dtype == np.float32 and values.shape == (columns.size, width)
    magnitude = abs(csr.scipy()).T.astype(np.float64) @ np.abs(right).astype(np.float64)
    assert_sums_close(values, want_values, magnitude[columns], shape[0])


@needs_compiled
def test_dot_transposed_float32_gives_the_dense_product():
    """dot(csr, dense, transpose_a=True) in float32 (the compiled kernel, its work over the
    team's threshold) against NumPy's product of the dense copies."""
    rng = np.random.default_rng(7)
    csr = _csr_with_gaps(rng, 400, 500, 0.05)
    right = rng.standard_normal((400, 128)).astype(np.float32)
    assert csr.nnz * 128 >= 1 << 20
    x = mx.nd.sparse.csr_matrix((csr.data, csr.indices, csr.indptr), shape=(400, 500))
    got = mx.nd.dot(x, mx.nd.array(right), transpose_a=True)
    assert got.stype == RSP
    dense = csr.to_dense(np).astype(np.float64)
    assert_sums_close(got.asnumpy(), dense.T @ right, np.abs(dense).T @ np.abs(right), 400)


@needs_compiled
def test_compiled_transposed_product_refuses_bad_parts():
    csr = sp.from_dense(np.eye(3, dtype=np.float32), CSR)
    right, out = np.ones((3, 2), np.float32), np.empty((3, 2), np.float32)
    remap = np.arange(3, dtype=np.int64)
    kernel = _sparse_ops._compiled.csr_t_dot
    bad = csr.indices.copy()
    bad[1] = 7                                              # past the columns
    with pytest.raises(ValueError, match='out of range'):
        kernel(csr.data, bad, csr.indptr, right, remap, out, 2, threads=2, cores=None)
    with pytest.raises(ValueError, match='out of range'):  # remapped past out's rows
        kernel(csr.data, csr.indices, csr.indptr, right, np.array([0, 1, 3]), out, 2)
    two = sp.from_dense(np.array([[1, 1, 0], [0, 0, 0], [0, 0, 1]], np.float32), CSR)
    descending = two.indices[[1, 0, 2]].copy()
    with pytest.raises(ValueError, match='descend'):
        kernel(two.data, descending, two.indptr, right, remap, out, 2)
    with pytest.raises(ValueError, match='do not fit'):
        kernel(csr.data, csr.indices, csr.indptr[::-1].copy(), right, remap, out, 2)
    with pytest.raises(ValueError, match='column index 7 is out of range for 3 columns'):
        _sparse_ops._compiled.mark_columns(bad, np.empty(3, np.int64), np.empty(3, np.int64))


def _rsp_rows(stored, width, table, rng):
    values = rng.standard_normal((len(stored), width)).astype(np.float32)
    return sp.from_dense(_dense_rows(values, stored, table), RSP), values


def _dense_rows(values, stored, table):
    dense = np.zeros((table, values.shape[1]), np.float32)
    dense[stored] = values
    return dense


@needs_compiled
@pytest.mark.parametrize('case', ['mixed', 'none stored', 'all stored', 'empty', 'large'])
@pytest.mark.parametrize('threads', [1, 3])
def test_compiled_retain_matches_the_dense_rows(case, threads, monkeypatch):
    rng = np.random.default_rng(len(case))
    table, width = (60_000, 64) if case == 'large' else (50, 3)
    stored = np.sort(rng.choice(table, table // 5, replace=False))
    wanted = {'mixed': lambda: np.sort(rng.choice(table, table // 4, replace=False)),
              'none stored': lambda: np.setdiff1d(np.arange(table), stored)[::3],
              'all stored': lambda: stored, 'empty': lambda: np.zeros(0, np.int64),
              'large': lambda: np.sort(rng.choice(table, 20_000, replace=False))}[case]()
    assert case != 'large' or wanted.size * width >= 1 << 20      # over the team's threshold
    parts, values = _rsp_rows(stored, width, table, rng)
    monkeypatch.setattr(_sparse_ops, '_team', lambda work: {'threads': threads, 'cores': None})
    rows = _sparse_ops._retained_rows(parts, wanted, np)
    np.testing.assert_array_equal(rows, _dense_rows(values, stored, table)[wanted])
    kept = mx.nd.sparse.retain(mx.nd.sparse.row_sparse_array((values, stored), shape=(
        table, width)), mx.nd.array(wanted[::-1], dtype='int64'))   # any order is sorted
    assert kept.indices.asnumpy().tolist() == wanted.tolist()
    np.testing.assert_array_equal(kept.data.asnumpy(), rows)


@pytest.mark.parametrize('wanted', [[3, 50], [-1, 2]])
def test_retain_of_row_sparse_refuses_indices_out_of_range(wanted):
    rsp = mx.nd.sparse.row_sparse_array((np.ones((2, 2), np.float32), [1, 3]), shape=(50, 2))
    with pytest.raises(MXNetError, match='fall outside the 50 rows of data'):
        mx.nd.sparse.retain(rsp, mx.nd.array(wanted, dtype='int64')).wait_to_read()


@needs_compiled
def test_compiled_retain_refuses_unsorted_or_out_of_range_wanted():
    stored, data = np.array([1, 3]), np.ones((2, 2), np.float32)
    kernel = _sparse_ops._compiled.retain_rows
    for wanted in ([3, 1], [1, 1], [1, 5], [-2, 1]):
        with pytest.raises(ValueError, match='ascending distinct indices below 5'):
            kernel(stored, data, np.array(wanted), np.empty((2, 2), np.float32), 2, 5)
    with pytest.raises(ValueError, match='do not fit'):
        kernel(stored, data, np.array([1]), np.empty((2, 2), np.float32), 2, 5)


@needs_compiled
@pytest.mark.parametrize('isa,build', [('AVX2', 'avx2'), ('SSE41', 'baseline')])
def test_max_cpu_isa_caps_the_sparse_build(isa, build):
    module = _sparse_ops._compiled
    before = module.instruction_set()
    try:
        module.use_instruction_set(build)
    except ValueError:
        pytest.skip(f'this CPU does not run the {build} build')
    finally:
        module.use_instruction_set(before)
    code = 'from ember.op import sparse_ops as s; print(s._compiled.instruction_set())'
    done = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          env=config.child_environ(ONEDNN_MAX_CPU_ISA=isa), check=True,
                          timeout=120)
    assert done.stdout.split()[-1] == build


# The sparse namespaces' functions these tests run by name, for `python -m ember api-coverage`.
EXERCISED_API = sorted({f'ember.{space}.sparse.{name}' for space in ('ndarray', 'symbol')
                        for row in ROWS for name in _namespace_names(row.op)}
                       | {f'ember.ndarray.sparse.{u[0]}' for u in UPDATES}
                       | {f'ember.symbol.sparse.{u[0]}' for u in UPDATES})
