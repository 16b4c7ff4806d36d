"""Sparse kernels of the tensor operators (MXNet's ``FComputeEx``), with the storage types MXNet
1.9.1 infers for each combination of inputs.

Every kernel's cost grows with the stored entries of its sparse inputs, not with their shape
(apart from dense outputs, which it writes whole). Host kernels use SciPy's csr routines where
they fit and NumPy otherwise. The operators ``cast_storage`` and ``_sparse_retain`` are
declared here; the others are declared in their families and get their sparse kernels here.

>>> import numpy as np
>>> from ember.op import registry, sparse
>>> a = sparse.from_dense(np.array([[0., 2.], [3., 0.]]), 'csr')
>>> d = sparse.decide(registry.get('dot'), {'transpose_a': True, 'transpose_b': False,
...                   'forward_stype': None}, ('csr', 'default'), ((2, 2), (2, 1)), 1)
>>> d.out_stypes, d.fallback
(('row_sparse',), False)
"""
from __future__ import annotations

import numpy as np

from ember.backend import native
from ember.engine.threads import team_arguments
from ember.op import registry
from ember.op.indexing import slice_bounds
from ember.op.registry import Param, ShapeError, p_enum, register
from ember.op.sparse import (CSR_TYPE, DEFAULT, INDEX_DTYPE, ROW_SPARSE, STYPES, cast_into,
                             dense_of, is_parts, parts_for, parts_tuple, storage_rule)

__all__ = ['VALUE_OPS', 'times_dense', 'transposed_times', 'stored_columns']

SPARSE = (CSR_TYPE, ROW_SPARSE)
# csr x dense and the lazy updates in C (setup.py builds it where a compiler is found)
_compiled = native.compiled_module('_sparse')


def _host(xp):
    if xp is not np:
        raise NotImplementedError('this sparse kernel runs on the CPU only')


def _rows_of(csr, xp):
    """The row of each stored entry of a csr."""
    return xp.repeat(xp.arange(csr.shape[0], dtype=INDEX_DTYPE), xp.diff(csr.indptr))


def _write(result, out, xp):
    """Store a kernel's result (dense array, SciPy matrix or parts) into `out`."""
    if hasattr(result, 'tocsr'):          # a SciPy matrix
        result = result.tocsr()
        result.sort_indices()
        csr = parts_for(CSR_TYPE, result.shape, out.dtype, xp)
        csr.set(result.data, result.indices, result.indptr)
        result = csr
    if not is_parts(result) and not is_parts(out):
        out[...] = result.reshape(out.shape)
    elif type(result) is type(out):
        out.set(*parts_tuple(result))       # a kernel's own new parts: taken, not copied
    else:
        cast_into(result, out, xp)


# ----------------------------------------------------------------------------------------------
# Copies and zeros keep the storage type.

def _keep_sparse(attrs, stypes, shapes):
    return (stypes[0],) if stypes[0] in SPARSE else None


def _copy_kernel(attrs, ins, outs, ctx):
    cast_into(ins[0], outs[0], ctx.xp)


def _zeros_kernel(attrs, ins, outs, ctx):
    out = outs[0]
    empty = parts_for(out.stype, out.shape, out.dtype, ctx.xp)
    out.set(*parts_tuple(empty))


for _name in ('_copy', 'BlockGrad', '_copyto', 'MakeLoss'):    # MakeLoss: identity forward
    storage_rule(_name, _keep_sparse, _copy_kernel)
storage_rule('zeros_like', _keep_sparse, _zeros_kernel)


# ----------------------------------------------------------------------------------------------
# Operators with f(0) = 0 run their dense kernel on the stored values only.

VALUE_OPS = ('negative', 'abs', 'sign', 'sqrt', 'square', 'cbrt', 'log1p', 'expm1', 'floor',
             'ceil', 'round', 'rint', 'trunc', 'fix', 'relu', 'sin', 'tan', 'arcsin', 'arctan',
             'sinh', 'tanh', 'arcsinh', 'arctanh', 'degrees', 'radians', '_mul_scalar',
             '_div_scalar', 'clip')


def _values_kernel(dense_kernel):
    def kernel(attrs, ins, outs, ctx):
        x = ins[0]
        values = ctx.xp.empty_like(x.data)
        dense_kernel(attrs, [x.data], [values], ctx)
        outs[0].set(values, *parts_tuple(x)[1:])
    return kernel


def _clip_infer(attrs, stypes, shapes):
    if attrs['a_min'] <= 0 <= attrs['a_max']:
        return _keep_sparse(attrs, stypes, shapes)
    return None


for _name in VALUE_OPS:
    storage_rule(_name, _clip_infer if _name == 'clip' else _keep_sparse,
                 _values_kernel(registry.get(_name).kernel))


# ----------------------------------------------------------------------------------------------
# Operators whose output is dense whatever the inputs: the sparse inputs are expanded and the
# dense kernel runs, with no fallback (the output's size is the cost either way).

def _dense_kernel(dense_kernel):
    def kernel(attrs, ins, outs, ctx):
        dense_kernel(attrs, [dense_of(x, ctx.xp) for x in ins], outs, ctx)
    return kernel


def _dense_when(accepted):
    def infer(attrs, stypes, shapes):
        return (DEFAULT,) if stypes in accepted else None
    return infer


_SCALAR_SHIFTS = ('_plus_scalar', '_minus_scalar', '_rminus_scalar')
for _name in _SCALAR_SHIFTS:
    storage_rule(_name, _dense_when({(CSR_TYPE,), (ROW_SPARSE,)}),
                 _dense_kernel(registry.get(_name).kernel))

storage_rule('where', _dense_when({(CSR_TYPE, DEFAULT, DEFAULT)}),
             _dense_kernel(registry.get('where').kernel))

for _name in ('LinearRegressionOutput', 'LogisticRegressionOutput', 'MAERegressionOutput'):
    storage_rule(_name, _dense_when({(DEFAULT, CSR_TYPE)}),
                 _dense_kernel(registry.get(_name).kernel))
    storage_rule(f'_backward_{_name}', _dense_when({(DEFAULT, DEFAULT, CSR_TYPE)}),
                 _dense_kernel(registry.get(f'_backward_{_name}').kernel))


# ----------------------------------------------------------------------------------------------
# Element-wise arithmetic of two arrays of one shape.

_ADD_TYPES = {(CSR_TYPE, CSR_TYPE): CSR_TYPE, (ROW_SPARSE, ROW_SPARSE): ROW_SPARSE,
              (CSR_TYPE, DEFAULT): DEFAULT, (DEFAULT, CSR_TYPE): DEFAULT,
              (ROW_SPARSE, DEFAULT): DEFAULT, (DEFAULT, ROW_SPARSE): DEFAULT}
_MUL_TYPES = {(CSR_TYPE, CSR_TYPE): CSR_TYPE, (ROW_SPARSE, ROW_SPARSE): ROW_SPARSE,
              (CSR_TYPE, DEFAULT): CSR_TYPE, (DEFAULT, CSR_TYPE): CSR_TYPE,
              (ROW_SPARSE, DEFAULT): ROW_SPARSE, (DEFAULT, ROW_SPARSE): ROW_SPARSE}


def _table_infer(table):
    def infer(attrs, stypes, shapes):
        if shapes[0] != shapes[1]:
            return None
        found = table.get(stypes)
        return None if found is None else (found,)
    return infer


def _add_kernel(sign):
    def kernel(attrs, ins, outs, ctx):
        a, b = ins
        xp = ctx.xp
        if is_parts(a) and is_parts(b):
            _write(_add_sparse(a, b, sign, xp), outs[0], xp)
            return
        out = outs[0]
        if is_parts(a):
            xp.multiply(b, sign, out=out)
            _scatter_add(out, a, 1, xp)
        else:
            out[...] = a
            _scatter_add(out, b, sign, xp)
    return kernel


def _scatter_add(dense, parts, sign, xp):
    values = parts.data if sign > 0 else -parts.data
    if parts.stype == CSR_TYPE:
        dense[_rows_of(parts, xp), parts.indices] += values
    else:
        dense[parts.indices] += values


def _add_sparse(a, b, sign, xp):
    if a.stype == CSR_TYPE:
        _host(xp)
        return a.scipy() + b.scipy() if sign > 0 else a.scipy() - b.scipy()
    rows = xp.union1d(a.indices, b.indices)
    data = xp.zeros((rows.shape[0],) + a.shape[1:], a.dtype)
    data[xp.searchsorted(rows, a.indices)] += a.data
    data[xp.searchsorted(rows, b.indices)] += b.data if sign > 0 else -b.data
    result = parts_for(ROW_SPARSE, a.shape, a.dtype, xp)
    result.set(data, rows)
    return result


def _mul_kernel(attrs, ins, outs, ctx):
    a, b = ins
    xp, out = ctx.xp, outs[0]
    if not is_parts(a):
        a, b = b, a                         # the sparse one first: the product commutes
    if not is_parts(b):
        if a.stype == CSR_TYPE:
            values = a.data * b[_rows_of(a, xp), a.indices]
        else:
            values = a.data * b[a.indices]
        out.set(values, *parts_tuple(a)[1:])
    elif a.stype == CSR_TYPE:
        _host(xp)
        _write(a.scipy().multiply(b.scipy()), out, xp)
    else:
        rows, ka, kb = xp.intersect1d(a.indices, b.indices, assume_unique=True,
                                      return_indices=True)
        out.set(a.data[ka] * b.data[kb], rows)


for _kind, _sign in (('add', 1), ('sub', -1)):
    for _prefix in ('elemwise', 'broadcast'):
        storage_rule(f'{_prefix}_{_kind}', _table_infer(_ADD_TYPES), _add_kernel(_sign))
storage_rule('elemwise_mul', _table_infer(_MUL_TYPES), _mul_kernel)


# broadcast_mul / broadcast_div of a csr by a vector (a column, a row or one value): csr.

def _vector_axis(matrix, vector):
    """0 when `vector` runs along the rows (m, 1), 1 along the columns ((1, n) or (n,)),
    -1 for one value; None when it does not broadcast that way against `matrix`."""
    vector = tuple(vector)
    if len(matrix) != 2:
        return None
    rows, cols = matrix
    if vector in ((1,), (1, 1)):
        return -1
    if vector == (rows, 1):
        return 0
    if vector in ((1, cols), (cols,)):
        return 1
    return None


def _by_vector(attrs, stypes, shapes):
    return stypes == (CSR_TYPE, DEFAULT) and _vector_axis(shapes[0], shapes[1]) is not None


def _scale_rows_or_columns(divide):
    def kernel(attrs, ins, outs, ctx):
        matrix, vector = ins
        flat = vector.reshape(-1)
        axis = _vector_axis(matrix.shape, vector.shape)
        if axis == -1:
            factor = flat[0]
        else:
            factor = flat[_rows_of(matrix, ctx.xp) if axis == 0 else matrix.indices]
        values = matrix.data / factor if divide else matrix.data * factor
        outs[0].set(values, matrix.indices, matrix.indptr)
    return kernel


def _csr_by_vector(attrs, stypes, shapes):
    return (CSR_TYPE,) if _by_vector(attrs, stypes, shapes) else None


storage_rule('broadcast_mul', _csr_by_vector, _scale_rows_or_columns(False))
storage_rule('broadcast_div', _csr_by_vector, _scale_rows_or_columns(True))


# ----------------------------------------------------------------------------------------------
# add_n: row_sparse arrays sum to row_sparse; with a dense input the sum is dense.

def _add_n_infer(attrs, stypes, shapes):
    if all(s == ROW_SPARSE for s in stypes):
        return (ROW_SPARSE,)
    if DEFAULT in stypes:
        return (DEFAULT,)
    return None


def _add_n_kernel(attrs, ins, outs, ctx):
    xp, out = ctx.xp, outs[0]
    if all(is_parts(x) for x in ins):
        rows = ins[0].indices
        for x in ins[1:]:
            rows = xp.union1d(rows, x.indices)
        data = xp.zeros((rows.shape[0],) + out.shape[1:], out.dtype)
        for x in ins:
            data[xp.searchsorted(rows, x.indices)] += x.data
        out.set(data, rows)
        return
    dense = [x for x in ins if not is_parts(x)]
    xp.copyto(out, dense[0])
    for x in dense[1:]:
        xp.add(out, x, out=out)
    for x in ins:
        if is_parts(x):
            _scatter_add(out, x, 1, xp)


storage_rule('add_n', _add_n_infer, _add_n_kernel)


# ----------------------------------------------------------------------------------------------
# sum and mean along axes of a 2-D sparse array: dense.

def _reduce_infer(attrs, stypes, shapes):
    if stypes[0] not in SPARSE or len(shapes[0]) != 2 or attrs.get('exclude'):
        return None
    return (DEFAULT,)


def _reduce_kernel(mean):
    def kernel(attrs, ins, outs, ctx):
        x, out, xp = ins[0], outs[0], ctx.xp
        axes = _axes(attrs['axis'])
        wide = np.float64 if x.dtype.kind == 'f' else None
        if axes == (0, 1):
            total = xp.sum(x.data, dtype=wide)
        elif x.stype == CSR_TYPE:
            _host(xp)
            total = np.asarray(x.scipy().sum(axis=axes[0], dtype=wide)).reshape(-1)
        elif axes == (0,):
            total = xp.sum(x.data, axis=0, dtype=wide)
        else:
            total = xp.zeros(x.shape[0], wide or x.dtype)
            total[x.indices] = xp.sum(x.data, axis=1, dtype=wide)
        if mean:
            total = total / np.prod([x.shape[a] for a in axes])
        out[...] = xp.asarray(total).reshape(out.shape)
    return kernel


def _axes(axis):
    if axis is None or axis == ():
        return (0, 1)
    return tuple(sorted({a % 2 for a in axis}))


storage_rule('sum', _reduce_infer, _reduce_kernel(False))
storage_rule('mean', _reduce_infer, _reduce_kernel(True))


# ----------------------------------------------------------------------------------------------
# dot: csr x dense (dense), csr^T x dense (row_sparse), dense x csr (csr), csr x row_sparse.

def times_dense(csr, right, xp, out=None):
    """csr x right (a dense matrix) as a dense array (into `out` when given): the compiled
    kernel for float32, its rows split over the team by stored entries; SciPy else."""
    _host(xp)
    if (_compiled is not None and csr.dtype == right.dtype == np.float32
            and (out is None or out.flags.c_contiguous)):
        right = np.ascontiguousarray(right)
        width = right.shape[1]
        out = np.empty((csr.shape[0], width), np.float32) if out is None else out
        _compiled.csr_dot(csr.data, csr.indices, csr.indptr, right, out, width,
                          **_team(csr.nnz * width))
        return out
    result = csr.scipy() @ right
    if out is None:
        return result
    out[...] = result.reshape(out.shape)
    return out


def _team(work):
    # split from a million multiply-adds (about half a millisecond on one thread): below
    # that, waking the team costs more than it saves (2048 x 64 took 0.08 ms alone, 0.9 ms
    # on a team of two on a busy machine)
    return team_arguments(work >= 1 << 20, work) if _compiled.openmp else {}


def stored_columns(csr, xp):
    """(columns, local): the distinct stored columns of `csr`, ascending, and the position of
    each entry's column among them; counted where the columns are few against the entries,
    sorted otherwise, so that the cost follows the entries."""
    indices, width = csr.indices, csr.shape[1]
    if _columns_are_few(csr):
        columns = xp.flatnonzero(xp.bincount(indices, minlength=width))
        remap = xp.empty(width, INDEX_DTYPE)
        remap[columns] = xp.arange(columns.shape[0])
        return columns, remap[indices]
    columns, local = xp.unique(indices, return_inverse=True)
    return columns, local.reshape(-1)


def _columns_are_few(csr):
    return csr.shape[1] <= 16 * max(csr.indices.shape[0], 1)


def transposed_times(csr, right, xp):
    """(columns, values): csr^T x right at the columns csr stores, the other rows of the
    product being zero. Compiled for float32 (each stored column an output row, the output's
    rows split over the team, no transposition); else csr^T restricted to those columns is
    made as a csr (a counting transposition in SciPy) and multiplied by :func:`times_dense`."""
    _host(xp)
    if _compiled is not None and csr.dtype == right.dtype == np.float32 and right.shape[1]:
        return _compiled_transposed_times(csr, np.ascontiguousarray(right))
    import scipy.sparse
    columns, local = stored_columns(csr, xp)
    compact = scipy.sparse.csr_matrix((csr.data, local, csr.indptr),
                                      shape=(csr.shape[0], columns.shape[0]))
    flipped = compact.T.tocsr()
    transposed = parts_for(CSR_TYPE, flipped.shape, csr.dtype, xp)
    transposed.set(flipped.data, flipped.indices, flipped.indptr)
    return columns, times_dense(transposed, right, xp)


def _compiled_transposed_times(csr, right):
    indices = csr.indices
    if _columns_are_few(csr):       # a byte a column marks the stored ones
        remap = np.empty(csr.shape[1], INDEX_DTYPE)
        found = np.empty(min(indices.shape[0], csr.shape[1]), INDEX_DTYPE)
        columns = found[:_compiled.mark_columns(indices, found, remap)].copy()
    else:                           # far more columns than entries: sorted instead
        columns, indices = np.unique(indices, return_inverse=True)
        indices = indices.reshape(-1)
        remap = np.arange(columns.shape[0], dtype=INDEX_DTYPE)
    width = right.shape[1]
    values = np.empty((columns.shape[0], width), np.float32)
    _compiled.csr_t_dot(csr.data, indices, csr.indptr, right, remap, values, width,
                        **_team(csr.nnz * width))
    return columns, values


def _natural_dot_stype(stypes, transpose_a, transpose_b):
    if stypes in ((CSR_TYPE, DEFAULT), (CSR_TYPE, ROW_SPARSE)):
        if stypes[1] == ROW_SPARSE and transpose_b:
            return None
        return ROW_SPARSE if transpose_a and not transpose_b else DEFAULT
    if stypes == (DEFAULT, CSR_TYPE):
        return DEFAULT if transpose_a else CSR_TYPE
    return None


def _dot_infer(attrs, stypes, shapes):
    natural = _natural_dot_stype(stypes, attrs['transpose_a'], attrs['transpose_b'])
    if natural is None or len(shapes[0]) != 2:
        return None
    return (attrs.get('forward_stype') or natural,)


def _dot_kernel(attrs, ins, outs, ctx):
    lhs, rhs = ins
    xp, out = ctx.xp, outs[0]
    _host(xp)
    ta, tb = attrs['transpose_a'], attrs['transpose_b']
    if (is_parts(lhs) and not is_parts(rhs) and not is_parts(out) and not (ta or tb)
            and rhs.ndim == 2):
        times_dense(lhs, rhs, xp, out)      # the common case, straight into the output
        return
    if is_parts(lhs):
        result = _csr_dot(lhs, rhs, ta, tb, xp)
    else:
        csr = rhs.scipy()
        left = lhs.T if ta else lhs
        result = (csr.T @ left.T).T if not tb else (csr @ left.T).T
    _write(result, outs[0], xp)


def _csr_dot(lhs, rhs, ta, tb, xp):
    one_d = not is_parts(rhs) and rhs.ndim == 1
    if is_parts(rhs):
        return _csr_dot_row_sparse(lhs, rhs, ta, xp)
    right = rhs.reshape(-1, 1) if one_d else (rhs.T if tb else rhs)
    if not ta:
        return times_dense(lhs, right, xp)
    columns, values = transposed_times(lhs, right, xp)
    if tb:
        dense = xp.zeros((lhs.shape[1], right.shape[1]), lhs.dtype)
        dense[columns] = values
        return dense
    return _row_sparse((lhs.shape[1],) + (() if one_d else (right.shape[1],)), columns,
                       values.reshape((-1,) if one_d else values.shape), lhs.dtype, xp)


def _csr_dot_row_sparse(lhs, rhs, ta, xp):
    """csr x row_sparse: only the stored rows of rhs meet the stored entries of lhs."""
    import scipy.sparse
    matrix, width = lhs.scipy(), rhs.data.reshape(rhs.data.shape[0], -1)
    if ta:           # lhs^T x rhs: rows of lhs that rhs stores, by their columns
        picked = _as_parts(matrix[rhs.indices], xp)
        columns, values = transposed_times(picked, xp.ascontiguousarray(width), xp)
        return _row_sparse((lhs.shape[1],) + rhs.shape[1:], columns,
                           values.reshape((-1,) + rhs.shape[1:]), lhs.dtype, xp)
    position = np.searchsorted(rhs.indices, lhs.indices)
    present = position < rhs.indices.shape[0]
    present[present] = rhs.indices[position[present]] == lhs.indices[present]
    rows = _rows_of(lhs, xp)[present]
    kept = scipy.sparse.csr_matrix((lhs.data[present], (rows, position[present])),
                                   shape=(lhs.shape[0], rhs.indices.shape[0]))
    return times_dense(_as_parts(kept, xp), width, xp).reshape((lhs.shape[0],) + rhs.shape[1:])


def _as_parts(matrix, xp):
    matrix.sort_indices()
    parts = parts_for(CSR_TYPE, matrix.shape, matrix.dtype, xp)
    parts.set(matrix.data, matrix.indices, matrix.indptr)
    return parts


def _row_sparse(shape, rows, data, dtype, xp):
    parts = parts_for(ROW_SPARSE, shape, dtype, xp)
    parts.set(xp.ascontiguousarray(data), rows)
    return parts


storage_rule('dot', _dot_infer, _dot_kernel)


# _backward_dot of csr x dense: the lhs gradient at lhs's stored entries (csr), the rhs
# gradient lhs^T x out_grad (row_sparse), or lhs x out_grad (dense) when lhs was transposed.

def _backward_dot_infer(attrs, stypes, shapes):
    if attrs['transpose_b'] or stypes[:2] != (DEFAULT, CSR_TYPE):
        return None
    if stypes[2] == DEFAULT:
        return (CSR_TYPE, DEFAULT if attrs['transpose_a'] else ROW_SPARSE)
    if stypes[2] == ROW_SPARSE and not attrs['transpose_a']:
        return (CSR_TYPE, ROW_SPARSE)
    return None


def _rows_at(rhs, rows, xp):
    """Rows `rows` of a dense matrix, or of row_sparse parts (zeros where none is stored)."""
    if not is_parts(rhs):
        return rhs.reshape(rhs.shape[0], -1)[rows]
    stored = rhs.indices
    width = rhs.data.reshape(rhs.data.shape[0], -1)
    position = xp.searchsorted(stored, rows)
    present = position < stored.shape[0]
    present[present] = stored[position[present]] == rows[present]
    values = xp.zeros((rows.shape[0], width.shape[1]), width.dtype)
    values[present] = width[position[present]]
    return values


def _backward_dot_kernel(attrs, ins, outs, ctx):
    grad, lhs, rhs = ins
    xp = ctx.xp
    _host(xp)
    width = grad.reshape(grad.shape[0], -1)
    rows = _rows_of(lhs, xp)
    if attrs['transpose_a']:        # out = lhs^T rhs: d lhs[i, j] = rhs[i] . grad[j]
        sampled = xp.einsum('ij,ij->i', _rows_at(rhs, rows, xp), width[lhs.indices])
        outs[1][...] = times_dense(lhs, width, xp).reshape(rhs.shape)
    else:                           # out = lhs rhs: d lhs[i, j] = grad[i] . rhs[j]
        sampled = xp.einsum('ij,ij->i', width[rows], _rows_at(rhs, lhs.indices, xp))
        columns, values = transposed_times(lhs, width, xp)
        values = values.reshape((-1,) + rhs.shape[1:])
        _write(_row_sparse(rhs.shape, columns, values, rhs.dtype, xp), outs[1], xp)
    outs[0].set(sampled.astype(lhs.dtype, copy=False), lhs.indices, lhs.indptr)


storage_rule('_backward_dot', _backward_dot_infer, _backward_dot_kernel)


# ----------------------------------------------------------------------------------------------
# Embedding of a row_sparse table (a Parameter(stype='row_sparse') after row_sparse_data): each
# index looks its row up among the stored ones; a row not stored reads as zeros (MXNet's
# lookup), so the rows a batch pulled are enough and the table is never made dense.

def _embedding_rsp_infer(attrs, stypes, shapes):
    return (DEFAULT,) if stypes == (DEFAULT, ROW_SPARSE) else None


def _embedding_rsp_kernel(attrs, ins, outs, ctx):
    data, table = ins
    xp, out = ctx.xp, outs[0]
    index = xp.clip(data.reshape(-1).astype(INDEX_DTYPE), 0, attrs['input_dim'] - 1)
    rows = out.reshape(-1, attrs['output_dim'])
    if not table.nnz:
        rows.fill(0)
        return
    place = xp.minimum(xp.searchsorted(table.indices, index), table.nnz - 1)
    xp.take(table.data, place, axis=0, out=rows)
    rows[table.indices[place] != index] = 0


storage_rule('Embedding', _embedding_rsp_infer, _embedding_rsp_kernel)


# ----------------------------------------------------------------------------------------------
# Embedding's gradient with sparse_grad: the rows that the indices name, summed (row_sparse).

def _embedding_grad_infer(attrs, stypes, shapes):
    if attrs['sparse_grad'] and stypes == (DEFAULT, DEFAULT):
        return (ROW_SPARSE,)
    return None


def _embedding_grad_kernel(attrs, ins, outs, ctx):
    """The out_grad rows of equal indices summed: sorted by index, each run of equal indices
    is a row of a csr of ones whose product with out_grad is the sum (NumPy's add.at and
    reduceat take a Python-level step per row)."""
    grad, data = ins
    xp, width = ctx.xp, attrs['output_dim']
    index = xp.clip(data.reshape(-1).astype(INDEX_DTYPE), 0, attrs['input_dim'] - 1)
    if not index.shape[0]:
        outs[0].set(xp.zeros((0, width), outs[0].dtype), index)
        return
    order = xp.argsort(index, kind='stable')
    ordered = index[order]
    starts = xp.concatenate([xp.zeros(1, INDEX_DTYPE),
                             xp.flatnonzero(ordered[1:] != ordered[:-1]) + 1])
    runs = parts_for(CSR_TYPE, (starts.shape[0], index.shape[0]), grad.dtype, xp)
    runs.set(xp.ones(index.shape[0], grad.dtype), order,
             xp.concatenate([starts, xp.full(1, index.shape[0], INDEX_DTYPE)]))
    outs[0].set(times_dense(runs, grad.reshape(-1, width), xp), ordered[starts])


storage_rule('_backward_Embedding', _embedding_grad_infer, _embedding_grad_kernel,
             from_dense=True)


# ----------------------------------------------------------------------------------------------
# cast_storage and _sparse_retain, declared here.

def _cast_storage_kernel(attrs, ins, outs, ctx):
    ctx.xp.copyto(outs[0], ins[0])


register('cast_storage', _cast_storage_kernel,
         params=(Param('stype', p_enum(*STYPES), doc="'default', 'row_sparse' or 'csr'"),),
         gradient=lambda F, attrs, ins, outs, og: [F.cast_storage(og[0], stype='default')],
         doc='The same values in another storage type (dense, row_sparse or csr).')
def _cast_storage_infer(attrs, stypes, shapes):
    if attrs['stype'] == CSR_TYPE and len(shapes[0]) != 2:
        raise ShapeError(f'cast_storage: csr storage holds 2-D arrays; got shape '
                         f'{tuple(shapes[0])}')
    return (attrs['stype'],)


storage_rule('cast_storage', _cast_storage_infer,
             lambda attrs, ins, outs, ctx: cast_into(ins[0], outs[0], ctx.xp), from_dense=True)


def _retain_shape(attrs, in_shapes):
    data, indices = in_shapes
    if indices is not None and len(indices) != 1:
        raise ShapeError(f'indices must be 1-D; got shape {tuple(indices)}')
    return list(in_shapes), [data]


def _retain_dense_kernel(attrs, ins, outs, ctx):
    data, indices = ins
    rows = ctx.xp.clip(indices.astype(INDEX_DTYPE), 0, data.shape[0] - 1)
    outs[0].fill(0)
    outs[0][rows] = data[rows]


def _retain_kernel(attrs, ins, outs, ctx):
    """Each wanted index is looked up among the stored rows: the cost follows the wanted
    indices (times the log of the stored rows); wanted rows not stored come out as zeros (as
    MXNet 1.9.1 gives them). Dense data (MXNet refuses it) gives its wanted rows as
    row_sparse, as a KVStore's row_sparse_pull takes them."""
    data, indices = ins
    xp = ctx.xp
    wanted = indices.astype(INDEX_DTYPE, copy=False).reshape(-1)
    if wanted.shape[0] > 1 and not bool((wanted[1:] > wanted[:-1]).all()):
        wanted = xp.unique(wanted)
    if wanted.shape[0] and (int(wanted[0]) < 0 or int(wanted[-1]) >= data.shape[0]):
        raise ValueError(f'_sparse_retain: indices {int(wanted[0])}..{int(wanted[-1])} '
                         f'fall outside the {data.shape[0]} rows of data')
    rows = _retained_rows(data, wanted, xp) if is_parts(data) else data[wanted]
    outs[0].set(rows, wanted)


def _retained_rows(parts, wanted, xp):
    """The rows `wanted` (ascending, distinct) of row_sparse `parts`, zeros where none is
    stored: one merge of the two ascending lists in C for float32, searches in NumPy else."""
    width = int(np.prod(parts.shape[1:], dtype=np.int64))
    if _compiled is not None and xp is np and parts.dtype == np.float32 and width:
        rows = np.empty((wanted.shape[0],) + tuple(parts.shape[1:]), np.float32)
        _compiled.retain_rows(parts.indices, np.ascontiguousarray(parts.data),
                              np.ascontiguousarray(wanted), rows, width, parts.shape[0],
                              **_team(wanted.shape[0] * width))
        return rows
    stored = parts.indices
    position = xp.searchsorted(stored, wanted)
    found = position < stored.shape[0]
    found[found] = stored[position[found]] == wanted[found]
    rows = xp.zeros((wanted.shape[0],) + tuple(parts.shape[1:]), dtype=parts.data.dtype)
    rows[found] = parts.data[position[found]]
    return rows


register('_sparse_retain', _retain_dense_kernel, inputs=('data', 'indices'),
         infer_shape=_retain_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
         gradient=lambda F, attrs, ins, outs, og: [F._sparse_retain(og[0], ins[1]), None],
         doc='The rows of `data` whose indices are listed in `indices`; other rows zero.')
storage_rule('_sparse_retain',
             lambda attrs, stypes, shapes: (ROW_SPARSE,) if stypes[0] in (ROW_SPARSE, DEFAULT)
             and stypes[1] == DEFAULT else None,
             _retain_kernel, from_dense=True)


# ----------------------------------------------------------------------------------------------
# slice of a csr (contiguous rows, and columns): csr, costing the stored entries of the rows.

def _csr_slice_infer(attrs, stypes, shapes):
    steps = attrs['step'] or ()
    if stypes != (CSR_TYPE,) or any(s not in (None, 1) for s in steps):
        return None
    return (CSR_TYPE,)


def _csr_slice_kernel(attrs, ins, outs, ctx):
    x, xp = ins[0], ctx.xp
    (r0, r1), (c0, c1) = (_bounds(attrs, axis, x.shape[axis]) for axis in (0, 1))
    low, high = int(x.indptr[r0]), int(x.indptr[r1])
    data, indices = x.data[low:high], x.indices[low:high]
    indptr = x.indptr[r0:r1 + 1] - low
    if (c0, c1) != (0, x.shape[1]):
        kept = (indices >= c0) & (indices < c1)
        counts = _row_counts(kept, indptr, xp)
        indptr = xp.concatenate([xp.zeros(1, INDEX_DTYPE), xp.cumsum(counts)])
        data, indices = data[kept], indices[kept] - c0
    outs[0].set(data.copy(), indices, indptr)


def _row_counts(kept, indptr, xp):
    """How many entries of each row (rows delimited by indptr) are kept."""
    running = xp.concatenate([xp.zeros(1, INDEX_DTYPE), xp.cumsum(kept, dtype=INDEX_DTYPE)])
    return running[indptr[1:]] - running[indptr[:-1]]


def _bounds(attrs, axis, length):
    begin, end = attrs['begin'], attrs['end']
    if axis >= len(begin):
        return 0, length
    start, stop, _, count = slice_bounds(length, begin[axis], end[axis], None)
    return start, start + count


storage_rule('slice', _csr_slice_infer, _csr_slice_kernel)


# ----------------------------------------------------------------------------------------------
# Concat of csr arrays along the rows: csr, the parts stacked.

def _csr_concat_infer(attrs, stypes, shapes):
    if attrs['dim'] != 0 or any(s != CSR_TYPE for s in stypes):
        return None
    return (CSR_TYPE,)


def _csr_concat_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    offsets = xp.cumsum(xp.array([0] + [int(x.indptr[-1]) for x in ins[:-1]],
                                 dtype=INDEX_DTYPE))
    indptr = [xp.zeros(1, INDEX_DTYPE)] + [x.indptr[1:] + offset
                                           for x, offset in zip(ins, offsets)]
    outs[0].set(xp.concatenate([x.data for x in ins]).astype(outs[0].dtype, copy=False),
                xp.concatenate([x.indices for x in ins]), xp.concatenate(indptr))


storage_rule('Concat', _csr_concat_infer, _csr_concat_kernel)
