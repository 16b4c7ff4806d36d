"""Linear algebra (``mx.nd.linalg``): MXNet's ``_linalg_*`` operators.

Every operator works on the last two axes and batches over the others; ``gemm`` and ``gemm2``
take the matrix rows from ``axis`` instead (the columns stay last). Triangular inputs are read
from the triangle that ``lower`` names, as LAPACK does, and ``potrf``/``syevd`` read the lower
triangle of a symmetric matrix: their gradients are symmetric, MXNet's convention. Only
float32 and float64 are accepted. Packed triangles (``extracttrian``/``maketrian``) hold the
lower triangle row by row; an upper triangle is packed as the lower one of the transpose.

Gradients of the products and solves are written with the same operators (so they hybridize
and differentiate again); the factorizations have ``_backward_linalg_*`` kernels.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_linalg_gemm2')
>>> a, out = np.arange(6.).reshape(2, 3), np.empty((2, 2))
>>> op.kernel(op.parse_attrs({'transpose_b': True}), [a, a], [out], registry.KernelContext(None))
>>> out
array([[ 5., 14.],
       [14., 50.]])
"""
from __future__ import annotations

import numpy as np

from ember.op.host import register
from ember.op.registry import Param, ShapeError, p_bool, p_float, p_int

__all__ = ['packed_size', 'tri_indices']

_FLOATS = ('float32', 'float64')


# ----------------------------------------------------------------------------------------------
# Inference helpers.

def _float_type(count=1):
    """Every input and `count` outputs share the first known dtype, which must be a float."""
    def infer(attrs, in_dtypes):
        known = [d for d in in_dtypes if d is not None]
        dtype = known[0] if known else None
        for other in known:
            if other != dtype:
                raise ShapeError(f'inputs must have the same dtype, got {dtype} and {other}')
        if dtype is not None and np.dtype(dtype).name not in _FLOATS:
            raise ShapeError(f'linear algebra operators accept float32 and float64, got '
                             f'{np.dtype(dtype).name}')
        return [dtype] * len(in_dtypes), [dtype] * count
    return infer


def _matrix(shape, what='A'):
    if len(shape) < 2:
        raise ShapeError(f'{what} must have at least 2 dimensions (a matrix, or a batch of '
                         f'them), got shape {shape}')
    return shape


def _square(shape, what='A'):
    _matrix(shape, what)
    if shape[-1] != shape[-2]:
        raise ShapeError(f'{what} must hold square matrices, got shape {shape}')
    return shape


def _batch_of(shape):
    """MXNet's shape of one value per matrix: the batch axes, (1,) for a single matrix."""
    return tuple(shape[:-2]) or (1,)


def _known(infer, outputs=1):
    """Shape inference that runs once every input shape is known: infer(attrs, *shapes)
    returns the list of output shapes."""
    def wrapped(attrs, in_shapes):
        if any(s is None for s in in_shapes):
            return list(in_shapes), [None] * outputs
        return list(in_shapes), [tuple(s) for s in infer(attrs, *in_shapes)]
    return wrapped


# ----------------------------------------------------------------------------------------------
# gemm and gemm2: products with the matrix rows on `axis`.

def _rows_last(x, axis):
    """A view with the rows axis second to last (the columns stay last)."""
    return np.moveaxis(x, axis, -2) if axis % x.ndim != x.ndim - 2 else x


def _op(x, transpose):
    return np.swapaxes(x, -1, -2) if transpose else x


def _check_axis(shape, axis):
    if not -len(shape) <= axis < len(shape) - 1 or axis % len(shape) == len(shape) - 1:
        raise ShapeError(f'axis={axis} must name an axis other than the last (the columns) of '
                         f'shape {shape}')


def _product_shape(attrs, a, b):
    axis = attrs['axis']
    _matrix(a, 'A')
    _matrix(b, 'B')
    if len(a) != len(b):
        raise ShapeError(f'A and B must have the same number of dimensions, got {a} and {b}')
    _check_axis(a, axis)
    a_std, b_std = _std_shape(a, axis), _std_shape(b, axis)
    if a_std[:-2] != b_std[:-2]:
        raise ShapeError(f'A and B must have the same batch dimensions, got {a} and {b}')
    rows, inner = a_std[-2:][::-1] if attrs['transpose_a'] else a_std[-2:]
    inner_b, cols = b_std[-2:][::-1] if attrs['transpose_b'] else b_std[-2:]
    if inner != inner_b:
        raise ShapeError(f'op(A) has {inner} columns and op(B) has {inner_b} rows '
                         f'(shapes {a} and {b}, transpose_a={attrs["transpose_a"]}, '
                         f'transpose_b={attrs["transpose_b"]})')
    out = list(a)
    out[axis] = rows
    out[-1] = cols
    return tuple(out)


def _std_shape(shape, axis):
    dims = list(shape)
    rows = dims.pop(axis % len(shape))
    return tuple(dims[:-1] + [rows, dims[-1]])


def _gemm2_kernel(attrs, ins, outs, ctx):
    a, b = (_op(_rows_last(x, attrs['axis']), attrs[f'transpose_{n}'])
            for x, n in zip(ins, 'ab'))
    out = _rows_last(outs[0], attrs['axis'])
    np.matmul(a, b, out=out)
    if attrs['alpha'] != 1.0:
        out *= attrs['alpha']


def _gemm_kernel(attrs, ins, outs, ctx):
    _gemm2_kernel(attrs, ins[:2], outs, ctx)
    outs[0] += attrs['beta'] * ins[2]


def _product_grads(F, attrs, a, b, og):
    ta, tb, alpha, axis = attrs['transpose_a'], attrs['transpose_b'], attrs['alpha'], \
        attrs['axis']
    if ta:
        da = F._linalg_gemm2(b, og, transpose_a=tb, transpose_b=True, alpha=alpha, axis=axis)
    else:
        da = F._linalg_gemm2(og, b, transpose_b=not tb, alpha=alpha, axis=axis)
    if tb:
        db = F._linalg_gemm2(og, a, transpose_a=True, transpose_b=ta, alpha=alpha, axis=axis)
    else:
        db = F._linalg_gemm2(a, og, transpose_a=not ta, alpha=alpha, axis=axis)
    return [da, db]


def _gemm_shape(attrs, in_shapes):
    a, b, c = in_shapes
    if a is None or b is None:
        return list(in_shapes), [c]
    out = _product_shape(attrs, a, b)
    if c is not None and tuple(c) != out:
        raise ShapeError(f'C must have the shape of alpha*op(A)*op(B), {out}, got {c}')
    return [a, b, out], [out]


_TRANSPOSES = (Param('transpose_a', p_bool, False, 'Use the transpose of A.'),
               Param('transpose_b', p_bool, False, 'Use the transpose of B.'))
_ALPHA = Param('alpha', p_float, 1.0, 'Scale of the product.')
_AXIS = Param('axis', p_int, -2, 'The axis of the matrix rows (the columns are the last axis).')

register('_linalg_gemm', _gemm_kernel, inputs=('A', 'B', 'C'), infer_shape=_gemm_shape,
         infer_type=_float_type(),
         params=_TRANSPOSES + (_ALPHA, Param('beta', p_float, 1.0, 'Scale of C.'), _AXIS),
         gradient=lambda F, attrs, ins, outs, og: _product_grads(F, attrs, ins[0], ins[1], og[0])
         + [og[0] * attrs['beta']],
         aliases=('linalg_gemm',),
         doc='alpha*op(A)*op(B) + beta*C for each matrix of the batch.')
register('_linalg_gemm2', _gemm2_kernel, inputs=('A', 'B'),
         infer_shape=_known(lambda attrs, a, b: [_product_shape(attrs, a, b)]),
         infer_type=_float_type(),
         params=_TRANSPOSES + (_ALPHA, _AXIS),
         gradient=lambda F, attrs, ins, outs, og: _product_grads(F, attrs, ins[0], ins[1],
                                                                 og[0]),
         aliases=('linalg_gemm2',), doc='alpha*op(A)*op(B) for each matrix of the batch.')


# ----------------------------------------------------------------------------------------------
# syrk, trmm, trsm.

def _syrk_shape(attrs, a):
    _matrix(a)
    size = a[-1] if attrs['transpose'] else a[-2]
    return a[:-2] + (size, size)


def _syrk_kernel(attrs, ins, outs, ctx):
    a = ins[0]
    at = np.swapaxes(a, -1, -2)
    np.matmul(*((at, a) if attrs['transpose'] else (a, at)), out=outs[0])
    outs[0] *= attrs['alpha']


def _syrk_grad(F, attrs, ins, outs, og):
    a, g, alpha = ins[0], og[0], attrs['alpha']
    if attrs['transpose']:      # alpha * A^T A
        first = F._linalg_gemm2(a, g, alpha=alpha)
        return [F._linalg_gemm(a, g, first, transpose_b=True, alpha=alpha)]
    first = F._linalg_gemm2(g, a, alpha=alpha)
    return [F._linalg_gemm(g, a, first, transpose_a=True, alpha=alpha)]


register('_linalg_syrk', _syrk_kernel, infer_shape=_known(lambda attrs, a: [_syrk_shape(attrs, a)]),
         infer_type=_float_type(), inputs=('A',),
         params=(Param('transpose', p_bool, False, 'alpha*A^T*A instead of alpha*A*A^T.'),
                 _ALPHA),
         gradient=_syrk_grad, aliases=('linalg_syrk',),
         doc='alpha*A*A^T (or alpha*A^T*A with transpose) for each matrix of the batch.')


def _triangle(a, lower):
    return np.tril(a) if lower else np.triu(a)


def _triangular_shape(attrs, a, b):
    _square(a, 'A')
    _matrix(b, 'B')
    if a[:-2] != b[:-2]:
        raise ShapeError(f'A and B must have the same batch dimensions, got {a} and {b}')
    side = b[-1] if attrs['rightside'] else b[-2]
    if side != a[-1]:
        raise ShapeError(f'A is {a[-1]}x{a[-1]} but B has {side} '
                         f'{"columns" if attrs["rightside"] else "rows"} (shapes {a} and {b}, '
                         f'rightside={attrs["rightside"]})')
    return b


def _trmm_kernel(attrs, ins, outs, ctx):
    tri = _op(_triangle(ins[0], attrs['lower']), attrs['transpose'])
    b = ins[1]
    np.matmul(*((b, tri) if attrs['rightside'] else (tri, b)), out=outs[0])
    outs[0] *= attrs['alpha']


def _tri_mask(F, x, lower):
    return F._linalg_maketrian(F._linalg_extracttrian(x, lower=lower), lower=lower)


def _trmm_grad(F, attrs, ins, outs, og):
    a, b, g = ins[0], ins[1], og[0]
    t, right, lower, alpha = (attrs[k] for k in ('transpose', 'rightside', 'lower', 'alpha'))
    db = F._linalg_trmm(a, g, transpose=not t, rightside=right, lower=lower, alpha=alpha)
    if right:   # out = alpha * B * op(T)
        da = F._linalg_gemm2(g, b, transpose_a=True, alpha=alpha) if t else \
            F._linalg_gemm2(b, g, transpose_a=True, alpha=alpha)
    else:       # out = alpha * op(T) * B
        da = F._linalg_gemm2(b, g, transpose_b=True, alpha=alpha) if t else \
            F._linalg_gemm2(g, b, transpose_b=True, alpha=alpha)
    return [_tri_mask(F, da, lower), db]


def _trsm_kernel(attrs, ins, outs, ctx):
    tri = _op(_triangle(ins[0], attrs['lower']), attrs['transpose'])
    b = ins[1] * attrs['alpha']
    if attrs['rightside']:     # X op(T) = alpha B  <=>  op(T)^T X^T = alpha B^T
        outs[0][...] = np.swapaxes(np.linalg.solve(np.swapaxes(tri, -1, -2),
                                                   np.swapaxes(b, -1, -2)), -1, -2)
    else:
        outs[0][...] = np.linalg.solve(tri, b)


def _trsm_grad(F, attrs, ins, outs, og):
    a, x, g = ins[0], outs[0], og[0]
    t, right, lower, alpha = (attrs[k] for k in ('transpose', 'rightside', 'lower', 'alpha'))
    h = F._linalg_trsm(a, g, transpose=not t, rightside=right, lower=lower)
    if right:   # X = alpha B op(T)^-1: d op(T) = -X^T H with H = G op(T)^-T
        da = F._linalg_gemm2(h, x, transpose_a=True, alpha=-1.0) if t else \
            F._linalg_gemm2(x, h, transpose_a=True, alpha=-1.0)
    else:       # X = alpha op(T)^-1 B: d op(T) = -H X^T with H = op(T)^-T G
        da = F._linalg_gemm2(x, h, transpose_b=True, alpha=-1.0) if t else \
            F._linalg_gemm2(h, x, transpose_b=True, alpha=-1.0)
    return [_tri_mask(F, da, lower), h * alpha]


_TRIANGULAR_SHAPE = _known(lambda attrs, a, b: [_triangular_shape(attrs, a, b)])
_TRIANGULAR = (Param('transpose', p_bool, False, 'Use the transpose of A.'),
               Param('rightside', p_bool, False, 'A multiplies from the right.'),
               Param('lower', p_bool, True, 'A is lower triangular (else upper).'), _ALPHA)

register('_linalg_trmm', _trmm_kernel, inputs=('A', 'B'), infer_shape=_TRIANGULAR_SHAPE,
         infer_type=_float_type(), params=_TRIANGULAR, gradient=_trmm_grad,
         aliases=('linalg_trmm',),
         doc='alpha*op(A)*B (or alpha*B*op(A) with rightside) for triangular A.')
register('_linalg_trsm', _trsm_kernel, inputs=('A', 'B'), infer_shape=_TRIANGULAR_SHAPE,
         infer_type=_float_type(), params=_TRIANGULAR, gradient=_trsm_grad,
         aliases=('linalg_trsm',),
         doc='X with op(A)*X = alpha*B (or X*op(A) = alpha*B with rightside), A triangular.')


# ----------------------------------------------------------------------------------------------
# Factorizations: potrf, potri, gelqf, syevd.

def _symmetric_from_lower(a):
    lower = np.tril(a)
    return lower + np.swapaxes(np.tril(a, -1), -1, -2)


def _potrf_kernel(attrs, ins, outs, ctx):
    try:
        outs[0][...] = np.linalg.cholesky(_symmetric_from_lower(ins[0]))
    except np.linalg.LinAlgError:
        raise ValueError('potrf: the matrix is not symmetric positive definite') from None


def _copy_lower_to_upper(m):
    return np.tril(m) + np.swapaxes(np.tril(m, -1), -1, -2)


def _potrf_backward(attrs, ins, outs, ctx):
    # A = L L^T: dA = 1/2 L^-T sym(Phi(L^T dL)) L^-1 with Phi the lower half, diagonal halved
    g, l = ins
    lt = np.swapaxes(l, -1, -2)
    phi = np.tril(lt @ g)
    phi -= 0.5 * np.einsum('...ii->...i', phi)[..., None] * np.eye(l.shape[-1], dtype=l.dtype)
    s = np.linalg.solve(lt, np.swapaxes(np.linalg.solve(lt, np.swapaxes(phi, -1, -2)), -1, -2))
    outs[0][...] = 0.5 * (s + np.swapaxes(s, -1, -2))


def _potri_kernel(attrs, ins, outs, ctx):
    inverse = np.linalg.inv(np.tril(ins[0]))
    np.matmul(np.swapaxes(inverse, -1, -2), inverse, out=outs[0])


def _potri_backward(attrs, ins, outs, ctx):
    # Y = (L L^T)^-1: dL = -tril(Y (G + G^T) Y L)
    g, l, y = ins
    outs[0][...] = -np.tril(y @ (g + np.swapaxes(g, -1, -2)) @ y @ np.tril(l))


def _lq_shape(attrs, a):
    _matrix(a)
    if a[-2] > a[-1]:
        raise ShapeError(f'gelqf needs matrices with no more rows than columns, got {a}')
    return a, a[:-2] + (a[-2], a[-2])



def _gelqf_kernel(attrs, ins, outs, ctx):
    q, r = np.linalg.qr(np.swapaxes(ins[0], -1, -2))
    outs[0][...] = np.swapaxes(q, -1, -2)
    outs[1][...] = np.swapaxes(r, -1, -2)


def _gelqf_backward(attrs, ins, outs, ctx):
    # A = L Q: dA = L^-T (dQ + copyltu(M) Q), M = L^T dL - dQ Q^T
    dq, dl, q, l = ins
    m = np.swapaxes(l, -1, -2) @ dl - dq @ np.swapaxes(q, -1, -2)
    inner = dq + _copy_lower_to_upper(m) @ q
    outs[0][...] = np.linalg.solve(np.swapaxes(l, -1, -2), inner)


def _syevd_shape(attrs, a):
    _square(a)
    return a, a[:-1]



def _syevd_kernel(attrs, ins, outs, ctx):
    values, vectors = np.linalg.eigh(ins[0], UPLO='L')
    rows = np.swapaxes(vectors, -1, -2)
    # MXNet's sign: the entry of largest magnitude of each eigenvector is positive
    biggest = np.take_along_axis(rows, np.abs(rows).argmax(axis=-1)[..., None], axis=-1)
    outs[0][...] = rows * np.where(biggest < 0, -1, 1)
    outs[1][...] = values


def _syevd_backward(attrs, ins, outs, ctx):
    # A = U^T diag(w) U: dA = U^T (diag(dw) + sym(F o (dU U^T))) U, F_ij = 1/(w_j - w_i)
    du, dw, u, w = ins
    gaps = w[..., None, :] - w[..., :, None]
    with np.errstate(divide='ignore', invalid='ignore'):
        inverse_gaps = np.where(np.abs(gaps) > 0, 1.0 / gaps, 0.0)
    eye = np.eye(w.shape[-1], dtype=bool)
    inverse_gaps = np.where(eye, 0.0, inverse_gaps)
    inner = np.swapaxes(inverse_gaps * (u @ np.swapaxes(du, -1, -2)), -1, -2)
    inner = inner + dw[..., None] * eye
    full = np.swapaxes(u, -1, -2) @ inner @ u
    outs[0][...] = 0.5 * (full + np.swapaxes(full, -1, -2))


def _same_as(index):
    def infer(attrs, in_shapes):
        return list(in_shapes), [in_shapes[index]]
    return infer


def _backward_type(index, count=1):
    def infer(attrs, in_dtypes):
        return list(in_dtypes), [in_dtypes[index]] * count
    return infer


register('_linalg_potrf', _potrf_kernel, inputs=('A',), infer_shape=_known(
    lambda attrs, a: [_square(a)]), infer_type=_float_type(),
    gradient=lambda F, attrs, ins, outs, og: [F._backward_linalg_potrf(og[0], outs[0])],
    aliases=('linalg_potrf',),
    doc='The Cholesky factor L (lower triangular, A = L*L^T) of symmetric positive-definite A, '
        'read from its lower triangle.')
register('_backward_linalg_potrf', _potrf_backward, inputs=('out_grad', 'L'),
         infer_shape=_same_as(1), infer_type=_backward_type(1),
         doc='The gradient of potrf (symmetric).')
register('_linalg_potri', _potri_kernel, inputs=('A',), infer_shape=_known(
    lambda attrs, a: [_square(a)]), infer_type=_float_type(),
    gradient=lambda F, attrs, ins, outs, og: [F._backward_linalg_potri(og[0], ins[0], outs[0])],
    aliases=('linalg_potri',),
    doc='(A*A^T)^-1 from the lower-triangular Cholesky factor A (the output of potrf).')
register('_backward_linalg_potri', _potri_backward, inputs=('out_grad', 'A', 'inverse'),
         infer_shape=_same_as(1), infer_type=_backward_type(1), doc='The gradient of potri.')
register('_linalg_gelqf', _gelqf_kernel, inputs=('A',), outputs=('Q', 'L'),
         infer_shape=_known(_lq_shape, 2), infer_type=_float_type(2),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_linalg_gelqf(
             og[0], og[1], outs[0], outs[1])],
         aliases=('linalg_gelqf',),
         doc='The LQ factorization A = L*Q of a matrix with no more rows than columns: Q with '
             'orthonormal rows and lower-triangular L (outputs Q, L).')
register('_backward_linalg_gelqf', _gelqf_backward, inputs=('dQ', 'dL', 'Q', 'L'),
         infer_shape=_same_as(2), infer_type=_backward_type(2), doc='The gradient of gelqf.')
register('_linalg_syevd', _syevd_kernel, inputs=('A',), outputs=('U', 'L'),
         infer_shape=_known(_syevd_shape, 2), infer_type=_float_type(2),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_linalg_syevd(
             og[0], og[1], outs[0], outs[1])],
         aliases=('linalg_syevd',),
         doc='The eigendecomposition A = U^T*diag(L)*U of symmetric A (lower triangle read): '
             'eigenvectors in the rows of U, eigenvalues L ascending.')
register('_backward_linalg_syevd', _syevd_backward, inputs=('dU', 'dL', 'U', 'L'),
         infer_shape=_same_as(2), infer_type=_backward_type(2), doc='The gradient of syevd.')


# ----------------------------------------------------------------------------------------------
# inverse, det, slogdet, sumlogdiag.

def _inverse_kernel(attrs, ins, outs, ctx):
    outs[0][...] = np.linalg.inv(ins[0])


def _inverse_grad(F, attrs, ins, outs, og):
    y = outs[0]
    return [F._linalg_gemm2(F._linalg_gemm2(y, og[0], transpose_a=True), y, transpose_b=True,
                            alpha=-1.0)]


def _det_kernel(attrs, ins, outs, ctx):
    outs[0][...] = np.linalg.det(ins[0]).reshape(outs[0].shape)


def _slogdet_kernel(attrs, ins, outs, ctx):
    sign, logdet = np.linalg.slogdet(ins[0])
    outs[0][...] = np.reshape(sign, outs[0].shape)
    outs[1][...] = np.reshape(logdet, outs[1].shape)


def _scaled_inverse_transpose(a, scale):
    """scale * A^-T with one scale per matrix (shaped like MXNet's per-matrix outputs)."""
    inverse_t = np.swapaxes(np.linalg.inv(a), -1, -2)
    return inverse_t * np.reshape(scale, a.shape[:-2] + (1, 1))


def _det_backward(attrs, ins, outs, ctx):
    g, a, det = ins
    outs[0][...] = _scaled_inverse_transpose(a, g * det)


def _slogdet_backward(attrs, ins, outs, ctx):
    g, a = ins
    outs[0][...] = _scaled_inverse_transpose(a, g)


def _sumlogdiag_kernel(attrs, ins, outs, ctx):
    diagonal = np.einsum('...ii->...i', ins[0])
    outs[0][...] = np.log(diagonal).sum(axis=-1).reshape(outs[0].shape)


def _sumlogdiag_backward(attrs, ins, outs, ctx):
    g, a = ins
    diagonal = np.einsum('...ii->...i', a)
    scale = np.reshape(g, a.shape[:-2] + (1,)) / diagonal
    outs[0][...] = 0
    np.einsum('...ii->...i', outs[0])[...] = scale


def _per_matrix(count=1):
    return _known(lambda attrs, a: [_batch_of(_square(a))] * count, count)


register('_linalg_inverse', _inverse_kernel, inputs=('A',),
         infer_shape=_known(lambda attrs, a: [_square(a)]), infer_type=_float_type(),
         gradient=_inverse_grad, aliases=('linalg_inverse',), doc='The inverse of A.')
register('_linalg_det', _det_kernel, inputs=('A',), infer_shape=_per_matrix(),
         infer_type=_float_type(),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_linalg_det(og[0], ins[0],
                                                                          outs[0])],
         aliases=('linalg_det',), doc='The determinant of A (one value per matrix).')
register('_backward_linalg_det', _det_backward, inputs=('out_grad', 'A', 'det'),
         infer_shape=_same_as(1), infer_type=_backward_type(1), doc='The gradient of det.')
register('_linalg_slogdet', _slogdet_kernel, inputs=('A',), outputs=('sign', 'logdet'),
         infer_shape=_per_matrix(2), infer_type=_float_type(2),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_linalg_slogdet(og[1], ins[0])],
         aliases=('linalg_slogdet',),
         doc='The sign and the natural log of the absolute value of the determinant of A.')
register('_backward_linalg_slogdet', _slogdet_backward, inputs=('out_grad', 'A'),
         infer_shape=_same_as(1), infer_type=_backward_type(1), doc='The gradient of slogdet.')
register('_linalg_sumlogdiag', _sumlogdiag_kernel, inputs=('A',), infer_shape=_per_matrix(),
         infer_type=_float_type(),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_linalg_sumlogdiag(og[0],
                                                                                 ins[0])],
         aliases=('linalg_sumlogdiag',), doc='The sum of the logs of the diagonal of A.')
register('_backward_linalg_sumlogdiag', _sumlogdiag_backward, inputs=('out_grad', 'A'),
         infer_shape=_same_as(1), infer_type=_backward_type(1),
         doc='The gradient of sumlogdiag.')


# ----------------------------------------------------------------------------------------------
# Diagonals and packed triangles.

_OFFSET = Param('offset', p_int, 0, 'Which diagonal: 0 the main one, > 0 above, < 0 below.')
_LOWER = Param('lower', p_bool, True,
               'With offset 0: the lower triangle (else the upper one); a non-zero offset '
               'chooses the side itself.')


def _diagonal_length(shape, offset):
    _square(shape)
    length = min(shape[-2] + min(offset, 0), shape[-1] - max(offset, 0))
    if length <= 0:
        raise ShapeError(f'offset={offset} is outside matrices of shape {shape[-2:]}')
    return length


def _extractdiag_kernel(attrs, ins, outs, ctx):
    outs[0][...] = np.diagonal(ins[0], attrs['offset'], -2, -1)


def _diagonal_view(matrix, offset):
    """A writable view of diagonal `offset` of the last two axes."""
    view = np.diagonal(matrix, offset, -2, -1)
    view.flags.writeable = True
    return view


def _makediag_kernel(attrs, ins, outs, ctx):
    outs[0][...] = 0
    _diagonal_view(outs[0], attrs['offset'])[...] = ins[0]


register('_linalg_extractdiag', _extractdiag_kernel, inputs=('A',), params=(_OFFSET,),
         infer_shape=_known(lambda attrs, a: [a[:-2] + (_diagonal_length(a, attrs['offset']),)]),
         infer_type=_float_type(),
         gradient=lambda F, attrs, ins, outs, og: [F._linalg_makediag(og[0],
                                                                      offset=attrs['offset'])],
         aliases=('linalg_extractdiag',), doc='Diagonal `offset` of each matrix.')
register('_linalg_makediag', _makediag_kernel, inputs=('A',), params=(_OFFSET,),
         infer_shape=_known(lambda attrs, a: [a[:-1] + (a[-1] + abs(attrs['offset']),) * 2]),
         infer_type=_float_type(),
         gradient=lambda F, attrs, ins, outs, og: [F._linalg_extractdiag(
             og[0], offset=attrs['offset'])],
         aliases=('linalg_makediag',),
         doc='Square matrices with diagonal `offset` taken from the last axis, zeros elsewhere.')


def tri_indices(size, offset, lower):
    """(rows, cols) of the packed triangle of a `size` x `size` matrix, in packing order.

    >>> tri_indices(3, 0, False)
    (array([0, 0, 1, 0, 1, 2]), array([0, 1, 1, 2, 2, 2]))
    """
    upper = offset > 0 or (offset == 0 and not lower)
    rows, cols = np.tril_indices(size, -abs(offset))
    return (cols, rows) if upper else (rows, cols)


def packed_size(size, offset):
    """Entries of the packed triangle of a `size` x `size` matrix at `offset`."""
    side = size - abs(offset)
    return side * (side + 1) // 2


def _extracttrian_shape(attrs, a):
    _square(a)
    if abs(attrs['offset']) >= a[-1]:
        raise ShapeError(f'offset={attrs["offset"]} is outside {a[-1]}x{a[-1]} matrices')
    return [a[:-2] + (packed_size(a[-1], attrs['offset']),)]


def _maketrian_shape(attrs, a):
    count = a[-1]
    side = int(round((np.sqrt(8 * count + 1) - 1) / 2))
    if side * (side + 1) // 2 != count:
        raise ShapeError(f'the last axis holds {count} values, not a packed triangle '
                         f'(1, 3, 6, 10, ... values)')
    size = side + abs(attrs['offset'])
    return [a[:-1] + (size, size)]


def _extracttrian_kernel(attrs, ins, outs, ctx):
    rows, cols = tri_indices(ins[0].shape[-1], attrs['offset'], attrs['lower'])
    outs[0][...] = ins[0][..., rows, cols]


def _maketrian_kernel(attrs, ins, outs, ctx):
    rows, cols = tri_indices(outs[0].shape[-1], attrs['offset'], attrs['lower'])
    outs[0][...] = 0
    outs[0][..., rows, cols] = ins[0]


register('_linalg_extracttrian', _extracttrian_kernel, inputs=('A',), params=(_OFFSET, _LOWER),
         infer_shape=_known(_extracttrian_shape), infer_type=_float_type(),
         gradient=lambda F, attrs, ins, outs, og: [F._linalg_maketrian(og[0], **attrs)],
         aliases=('linalg_extracttrian',),
         doc='The triangle of each matrix at `offset`, packed into the last axis (the lower '
             'triangle row by row, the upper one column by column).')
register('_linalg_maketrian', _maketrian_kernel, inputs=('A',), params=(_OFFSET, _LOWER),
         infer_shape=_known(_maketrian_shape), infer_type=_float_type(),
         gradient=lambda F, attrs, ins, outs, og: [F._linalg_extracttrian(og[0], **attrs)],
         aliases=('linalg_maketrian',),
         doc='Square matrices whose triangle at `offset` is unpacked from the last axis (the '
             'inverse of extracttrian), zeros elsewhere.')
