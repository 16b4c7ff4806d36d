"""``mx.np.linalg``: NumPy's linear algebra on ``mx.np`` arrays, with gradients.

Decompositions return float results (float32 for integer input). ``svd`` returns the reduced
factors ``(u, s, vh)`` as MXNet's does; ``qr`` the reduced ``(q, r)``. ``lstsq``,
``matrix_rank`` and ``cond`` run NumPy's on the host (no gradient), as in MXNet.

>>> from ember import numpy as np
>>> a = np.array([[2., 1.], [1., 3.]])
>>> (np.linalg.inv(a) @ a).round(4)
array([[1., 0.],
       [0., 1.]])
>>> w, v = np.linalg.eigh(a)
>>> w.round(3)
array([1.382, 3.618])
"""
from __future__ import annotations

import functools

import numpy as onp

from ember.ndarray.ndarray import NDArray
from ember.numpy import _op
from ember.numpy.multiarray import NotForSymbol, apply, fallback, is_symbol
from ember.numpy import fallback_linalg  # noqa: F401  (MXNet's module of NumPy fallbacks)

__all__ = ['norm', 'svd', 'cholesky', 'qr', 'inv', 'det', 'slogdet', 'solve', 'tensorinv',
           'tensorsolve', 'pinv', 'eigvals', 'eig', 'eigvalsh', 'eigh', 'lstsq',
           'matrix_power', 'matrix_rank', 'multi_dot', 'cond']


def _arg(a):
    return _op._array_arg(a)


def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002  (NumPy's name)
    """Vector and matrix norms (``ord``: None, 'fro', 'nuc', inf, -inf, 0, 1, -1, 2, -2, or a
    number for vectors)."""
    axis = _op._axis_attr(axis)
    return apply('_npi_norm', [_arg(x)], {'ord': ord, 'axis': axis, 'keepdims': keepdims})


def svd(a, full_matrices=False, compute_uv=True, hermitian=False):
    """Reduced singular value decomposition ``(u, s, vh)`` with ``a = u @ diag(s) @ vh``;
    only s with ``compute_uv=False``."""
    if full_matrices:
        raise ValueError('svd: full_matrices=True: Ember gives the reduced factors, as MXNet')
    u, s, vh = apply('_npi_svd', [_arg(a)])
    return (u, s, vh) if compute_uv else s


def cholesky(a):
    """The lower Cholesky factor L of symmetric positive-definite matrices (a = L @ L.T)."""
    return apply('_npi_cholesky', [_arg(a)])


def qr(a, mode='reduced'):
    """Reduced QR decomposition ``(q, r)``."""
    if mode != 'reduced':
        raise ValueError(f"qr: mode={mode!r}: Ember gives the 'reduced' form")
    q, r = apply('_npi_qr', [_arg(a)], {'mode': mode})
    return q, r


def inv(a):
    """Matrix inverses."""
    return apply('_npi_inv', [_arg(a)])


def det(a):
    """Determinants."""
    return apply('_npi_det', [_arg(a)])


def slogdet(a):
    """``(sign, log|det|)`` of matrices."""
    sign, logdet = apply('_npi_slogdet', [_arg(a)])
    return sign, logdet


def solve(a, b):
    """x with ``a @ x = b`` (b a vector or a stack of columns)."""
    a = _arg(a)
    return apply('_npi_solve', [a, _op._array_arg(b, a)])


def pinv(a, rcond=1e-15, hermitian=False):
    """Moore-Penrose pseudo-inverses."""
    if isinstance(rcond, NDArray):
        rcond = float(rcond.item())
    return apply('_npi_pinv', [_arg(a)], {'rcond': rcond, 'hermitian': hermitian})


def eigvals(a):
    """Eigenvalues of matrices with real eigenvalues (no gradient)."""
    return apply('_npi_eigvals', [_arg(a)])


def eig(a):
    """Eigenvalues and right eigenvectors of matrices with real eigenvalues (no gradient)."""
    w, v = apply('_npi_eig', [_arg(a)])
    return w, v


def eigvalsh(a, UPLO='L'):
    """Eigenvalues (ascending) of symmetric matrices, from the `UPLO` triangle."""
    return apply('_npi_eigvalsh', [_arg(a)], {'UPLO': UPLO})


def eigh(a, UPLO='L'):
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices."""
    w, v = apply('_npi_eigh', [_arg(a)], {'UPLO': UPLO})
    return w, v


def tensorinv(a, ind=2):
    """The inverse of an N-d array seen as a matrix: its first `ind` axes against the rest."""
    a = _arg(a)
    if is_symbol(a):
        raise NotForSymbol('np.linalg.tensorinv needs the shape: call it on arrays')
    rows = int(onp.prod(a.shape[:ind]))
    if rows != int(onp.prod(a.shape[ind:])):
        raise ValueError(f'tensorinv: the first {ind} axes of shape {a.shape} hold {rows} '
                         f'elements, the others {a.size // max(rows, 1)}')
    matrix = inv(_op.reshape(a, (rows, -1)))
    return _op.reshape(matrix, a.shape[ind:] + a.shape[:ind])


def tensorsolve(a, b, axes=None):
    """x with ``tensordot(a, x, x.ndim) = b``."""
    a, b = _arg(a), _arg(b)
    if is_symbol(a) or is_symbol(b):
        raise NotForSymbol('np.linalg.tensorsolve needs the shapes: call it on arrays')
    if axes is not None:
        order = [i for i in range(a.ndim) if i not in [x % a.ndim for x in axes]]
        a = _op.transpose(a, tuple(order + [x % a.ndim for x in axes]))
    solution_shape = a.shape[b.ndim:]
    count = int(onp.prod(solution_shape))
    if int(onp.prod(a.shape[:b.ndim])) != count:
        raise ValueError(f'tensorsolve: a of shape {a.shape} is not square for b of shape '
                         f'{b.shape}')
    x = solve(_op.reshape(a, (count, count)), _op.reshape(b, (count,)))
    return _op.reshape(x, solution_shape)


def matrix_power(a, n):
    """The n-th power of square matrices (n < 0: of their inverse)."""
    a = _arg(a)
    n = int(n)
    if n == 0:
        return _op.broadcast_to(_op.eye(a.shape[-1], dtype=a.dtype, ctx=a.context), a.shape)
    power = inv(a) if n < 0 else a
    result, remaining = None, abs(n)
    while remaining:
        if remaining & 1:
            result = power if result is None else _op.matmul(result, power)
        remaining >>= 1
        if remaining:
            power = _op.matmul(power, power)
    return result


def multi_dot(arrays, *, out=None):
    """The product of matrices (1-D ends as row and column vectors), left to right."""
    arrays = [_arg(a) for a in arrays]
    if len(arrays) < 2:
        raise ValueError('multi_dot needs at least two arrays')
    result = functools.reduce(_op.dot, arrays)
    return _op._finish(result, None, True, out)


lstsq = fallback(onp.linalg.lstsq, 'lstsq')
matrix_rank = fallback(onp.linalg.matrix_rank, 'matrix_rank')
cond = fallback(onp.linalg.cond, 'cond')
