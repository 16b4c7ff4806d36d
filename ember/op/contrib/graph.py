"""Contrib operators over csr matrices read as graphs (an edge u -> v is a stored entry at row
u, column v), and the sparse-gradient embedding.

``getnnz`` counts stored entries (all, or per row / column), ``edge_id`` reads the values at
(u[i], v[i]) (-1 where no entry is stored), ``dgl_adjacency`` keeps the structure with every
value 1.0. Their csr kernels cost the stored entries; a dense input is read as the csr of its
nonzeros. ``SparseEmbedding`` is ``Embedding`` whose weight gradient is always row_sparse.

>>> import ember as mx, numpy as np
>>> g = mx.nd.sparse.csr_matrix((np.array([1., 2., 3.]), np.array([0, 2, 1]),
...                              np.array([0, 2, 2, 3])), shape=(3, 3))
>>> mx.nd.contrib.getnnz(g, axis=1).asnumpy().tolist()
[2, 0, 1]
>>> mx.nd.contrib.edge_id(g, mx.nd.array([0, 0, 2]), mx.nd.array([2, 1, 1])).asnumpy().tolist()
[2.0, -1.0, 3.0]
"""
from __future__ import annotations

import numpy as np

from ember.op.host import register
from ember.op.nn.misc import (EMBEDDING_PARAMS, _embedding_infer, _embedding_kernel,
                              _embedding_type)
from ember.op.registry import Param, ShapeError, p_int, p_optional
from ember.op.sparse import CSR_TYPE, INDEX_DTYPE, is_parts, storage_rule


def _csr_only(name):
    def infer(attrs, stypes, shapes):
        return (CSR_TYPE,) if stypes[0] == CSR_TYPE else None
    return infer


def _check_matrix(name, shape):
    if shape is not None and len(shape) != 2:
        raise ShapeError(f'{name}: data must be a 2-D (csr) matrix; got shape {tuple(shape)}')


# ----------------------------------------------------------------------------------------------
# getnnz

def _nnz_axis(attrs):
    axis = attrs['axis']
    if axis not in (None, 0, 1, -1, -2):
        raise ShapeError(f'getnnz: axis={axis}: expected None, 0 or 1')
    return None if axis is None else axis % 2


def _getnnz_shape(attrs, shapes):
    data = shapes[0]
    _check_matrix('getnnz', data)
    axis = _nnz_axis(attrs)
    if axis is None:
        return list(shapes), [(1,)]
    return list(shapes), [None if data is None else (data[1 - axis],)]


def _count(rows, columns, shape, axis, out):
    if axis is None:
        out[...] = rows.shape[0]
    else:
        which, length = (rows, shape[0]) if axis == 1 else (columns, shape[1])
        out[...] = np.bincount(which, minlength=length)[:length]


def _getnnz_dense(attrs, ins, outs, ctx):
    rows, columns = np.nonzero(ins[0])
    _count(rows, columns, ins[0].shape, _nnz_axis(attrs), outs[0])


def _getnnz_csr(attrs, ins, outs, ctx):
    csr, axis = ins[0], _nnz_axis(attrs)
    if axis == 1:       # the row lengths, from indptr alone
        outs[0][...] = np.diff(csr.indptr)
    else:
        _count(np.empty(csr.indices.shape[0]), csr.indices, csr.shape, axis, outs[0])


register('_contrib_getnnz', _getnnz_dense, params=(
             Param('axis', p_optional(p_int), None, 'None: all entries; 1: per row; 0: per '
                                                    'column.'),),
         infer_shape=_getnnz_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [INDEX_DTYPE]),
         doc='The number of stored entries of a csr matrix (int64): in all, per row or per '
             'column.')
storage_rule('_contrib_getnnz',
             lambda attrs, stypes, shapes: ('default',) if stypes[0] == CSR_TYPE else None,
             _getnnz_csr)


# ----------------------------------------------------------------------------------------------
# edge_id

def _edge_shape(attrs, shapes):
    data, u, v = shapes
    _check_matrix('edge_id', data)
    for name, shape in (('u', u), ('v', v)):
        if shape is not None and len(shape) != 1:
            raise ShapeError(f'edge_id: {name} must be 1-D; got shape {tuple(shape)}')
    if u is not None and v is not None and u != v:
        raise ShapeError(f'edge_id: u and v must have one shape; got {tuple(u)} and {tuple(v)}')
    ends = u or v
    return [data, ends, ends], [ends]


def _edge_dense(attrs, ins, outs, ctx):
    data, u, v = ins
    values = data[u.astype(INDEX_DTYPE), v.astype(INDEX_DTYPE)]
    outs[0][...] = np.where(values != 0, values, -1)


def _edge_csr(attrs, ins, outs, ctx):
    csr, u, v = ins
    u, v = u.astype(INDEX_DTYPE), v.astype(INDEX_DTYPE)
    if u.size and (u.min() < 0 or u.max() >= csr.shape[0] or v.min() < 0
                   or v.max() >= csr.shape[1]):
        raise ValueError(f'edge_id: vertex ids fall outside the {csr.shape} matrix')
    result = np.full(u.shape, -1, dtype=outs[0].dtype)
    for i, (row, column) in enumerate(zip(u.tolist(), v.tolist())):
        begin, end = int(csr.indptr[row]), int(csr.indptr[row + 1])
        stored = csr.indices[begin:end]
        hit = np.flatnonzero(stored == column)
        if hit.size:
            result[i] = csr.data[begin + hit[0]]
    outs[0][...] = result


register('_contrib_edge_id', _edge_dense, inputs=('data', 'u', 'v'), infer_shape=_edge_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[0]]),
         doc="The csr matrix's value at (u[i], v[i]) for each i; -1 where none is stored.")
storage_rule('_contrib_edge_id',
             lambda attrs, stypes, shapes: ('default',) if stypes[0] == CSR_TYPE else None,
             _edge_csr)


# ----------------------------------------------------------------------------------------------
# dgl_adjacency

def _adjacency_dense(attrs, ins, outs, ctx):
    outs[0][...] = (ins[0] != 0)


def _adjacency_csr(attrs, ins, outs, ctx):
    csr = ins[0]
    outs[0].set(np.ones(csr.indices.shape[0], dtype=np.float32), csr.indices.copy(),
                csr.indptr.copy())


def _adjacency_shape(attrs, shapes):
    _check_matrix('dgl_adjacency', shapes[0])
    return list(shapes), [shapes[0]]


register('_contrib_dgl_adjacency', _adjacency_dense, infer_shape=_adjacency_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [np.dtype(np.float32)]),
         doc='The adjacency matrix of a csr graph: its stored entries, each 1.0 (float32).')
storage_rule('_contrib_dgl_adjacency', _csr_only('dgl_adjacency'), _adjacency_csr)


# ----------------------------------------------------------------------------------------------
# SparseEmbedding

def _sparse_embedding_gradient(F, attrs, inputs, outputs, out_grads):
    rows = dict(attrs, sparse_grad=True)        # its weight gradient is row_sparse always
    return [None, F._backward_Embedding(out_grads[0], inputs[0], **rows)]


register('_contrib_SparseEmbedding', _embedding_kernel, infer_shape=_embedding_infer,
         infer_type=_embedding_type, inputs=('data', 'weight'), params=EMBEDDING_PARAMS,
         gradient=_sparse_embedding_gradient,
         doc='Embedding whose weight gradient is row_sparse: the rows the indices name.')
