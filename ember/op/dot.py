"""Products of arrays: ``dot`` (MXNet's rule: the last axis of ``lhs`` with the first of ``rhs``
for N-d arrays), ``batch_dot`` and ``khatri_rao``, with the gradients that need the operands'
shapes as ``_backward_*`` operators.

>>> from ember.op import registry
>>> op = registry.get('dot')
>>> op.infer_shape(op.parse_attrs({}), [(2, 3, 4), (4, 5)])[1]
[(2, 3, 5)]
"""
from __future__ import annotations

import string

from ember.base import prod
from ember.op.registry import (NUM_ARGS, Param, ShapeError, p_bool, p_enum, p_optional, register,
                               variadic_names)

__all__ = []


# ----------------------------------------------------------------------------------------------
# dot, batch_dot

def _matrix_view(shape, transpose, left):
    """(kept dims, contracted size) of an operand of dot, as MXNet's DotShape views it."""
    if len(shape) == 1:
        return (), shape[0]
    if left != transpose:   # lhs not transposed, or rhs transposed: contract the last axis
        return tuple(shape[:-1]), shape[-1]
    return tuple(shape[1:]), shape[0]


def _dot_infer(attrs, in_shapes):
    lhs, rhs = in_shapes
    if lhs is None or rhs is None:
        return list(in_shapes), [None]
    ta, tb = attrs['transpose_a'], attrs['transpose_b']
    if len(lhs) == 1 and len(rhs) == 1:
        if ta or tb or lhs != rhs:
            raise ShapeError(f'shape mismatch: {tuple(lhs)} X {tuple(rhs)} (vectors of equal '
                             f'length, not transposed)')
        return list(in_shapes), [(1,)]
    kept_l, k_l = _matrix_view(lhs, ta, True)
    kept_r, k_r = _matrix_view(rhs, tb, False)
    if k_l != k_r:
        raise ShapeError(f'shape mismatch: {tuple(lhs)} X {tuple(rhs)} with transpose_a={ta}, '
                         f'transpose_b={tb}: contracted dimensions {k_l} and {k_r} differ')
    return list(in_shapes), [kept_l + kept_r]


def _as_matrix(x, transpose, left):
    if x.ndim == 1:
        return x.reshape(1, -1) if left else x.reshape(-1, 1)
    if left != transpose:
        matrix = x.reshape(-1, x.shape[-1])
        return matrix if left else matrix.T
    matrix = x.reshape(x.shape[0], -1)
    return matrix.T if left else matrix


def _dot_kernel(attrs, ins, outs, ctx):
    a = _as_matrix(ins[0], attrs['transpose_a'], True)
    b = _as_matrix(ins[1], attrs['transpose_b'], False)
    out = outs[0].reshape(a.shape[0], b.shape[1])
    ctx.xp.matmul(a, b, out=out)


def _backward_dot_kernel(attrs, ins, outs, ctx):
    grad, lhs, rhs = ins
    ta, tb = attrs['transpose_a'], attrs['transpose_b']
    a, b = _as_matrix(lhs, ta, True), _as_matrix(rhs, tb, False)
    g = grad.reshape(a.shape[0], b.shape[1])
    grad_a, grad_b = g @ b.T, a.T @ g          # gradients of the matrix views
    outs[0][...] = (grad_a.T if ta and lhs.ndim > 1 else grad_a).reshape(lhs.shape)
    outs[1][...] = (grad_b.T if tb and rhs.ndim > 1 else grad_b).reshape(rhs.shape)


def _dot_grad(F, attrs, ins, outs, og):
    return list(F._backward_dot(og[0], ins[0], ins[1], transpose_a=attrs['transpose_a'],
                                transpose_b=attrs['transpose_b']))


DOT_PARAMS = (Param('transpose_a', p_bool, False), Param('transpose_b', p_bool, False),
              Param('forward_stype', p_optional(p_enum('default', 'csr', 'row_sparse')), None))

register('dot', _dot_kernel, inputs=('lhs', 'rhs'), infer_shape=_dot_infer, params=DOT_PARAMS,
         gradient=_dot_grad,
         doc='Matrix product; N-d arrays contract the last axis of lhs with the first of rhs.')
register('_backward_dot', _backward_dot_kernel, inputs=('out_grad', 'lhs', 'rhs'),
         outputs=('lhs_grad', 'rhs_grad'), params=DOT_PARAMS[:2],
         infer_shape=lambda attrs, shapes: (list(shapes), [shapes[1], shapes[2]]),
         infer_type=lambda attrs, dt: (list(dt), [dt[1], dt[2]]),
         doc='The gradients of dot with respect to lhs and rhs.')


def _batch_dot_infer(attrs, in_shapes):
    lhs, rhs = in_shapes
    if lhs is None or rhs is None:
        return list(in_shapes), [None]
    if len(lhs) < 3 or len(rhs) != len(lhs) or lhs[:-2] != rhs[:-2]:
        raise ShapeError(f'batch_dot needs arrays of rank >= 3 with equal batch dimensions, '
                         f'got {tuple(lhs)} X {tuple(rhs)}')
    m, k = (lhs[-1], lhs[-2]) if attrs['transpose_a'] else lhs[-2:]
    k2, n = (rhs[-1], rhs[-2]) if attrs['transpose_b'] else rhs[-2:]
    if k != k2:
        raise ShapeError(f'shape mismatch: {tuple(lhs)} X {tuple(rhs)}: contracted dimensions '
                         f'{k} and {k2} differ')
    return list(in_shapes), [tuple(lhs[:-2]) + (m, n)]


def _batch_dot_kernel(attrs, ins, outs, ctx):
    a, b = ins
    if attrs['transpose_a']:
        a = a.swapaxes(-1, -2)
    if attrs['transpose_b']:
        b = b.swapaxes(-1, -2)
    ctx.xp.matmul(a, b, out=outs[0])


def _batch_dot_grad(F, attrs, ins, outs, og):
    lhs, rhs, g = ins[0], ins[1], og[0]
    ta, tb = attrs['transpose_a'], attrs['transpose_b']
    grad_l = (F.batch_dot(rhs, g, transpose_a=tb, transpose_b=True) if ta
              else F.batch_dot(g, rhs, transpose_b=not tb))
    grad_r = (F.batch_dot(g, lhs, transpose_a=True, transpose_b=ta) if tb
              else F.batch_dot(lhs, g, transpose_a=not ta))
    return [grad_l, grad_r]


register('batch_dot', _batch_dot_kernel, inputs=('lhs', 'rhs'), infer_shape=_batch_dot_infer,
         params=DOT_PARAMS, gradient=_batch_dot_grad,
         doc='Matrix products of the matching matrices of two batches.')


# ----------------------------------------------------------------------------------------------
# khatri_rao

def _khatri_rao_infer(attrs, in_shapes):
    if any(s is None for s in in_shapes):
        return list(in_shapes), [None]
    columns = {s[1] if len(s) == 2 else None for s in in_shapes}
    if len(columns) != 1 or None in columns:
        raise ShapeError(f'khatri_rao: inputs must be matrices with one column count, got '
                         f'{[tuple(s) for s in in_shapes]}')
    return list(in_shapes), [(prod(s[0] for s in in_shapes), columns.pop())]


def _letters(count):
    return string.ascii_letters[:count]


def _khatri_rao_kernel(attrs, ins, outs, ctx):
    rows = _letters(len(ins))
    spec = ','.join(f'{r}z' for r in rows) + f'->{rows}z'
    outs[0][...] = ctx.xp.einsum(spec, *ins).reshape(outs[0].shape)


def _khatri_rao_backward_kernel(attrs, ins, outs, ctx):
    """Inputs (out_grad, *matrices) -> one gradient per matrix."""
    grad, mats = ins[0], ins[1:]
    rows = _letters(len(mats))
    grad = grad.reshape(tuple(m.shape[0] for m in mats) + (grad.shape[-1],))
    for index, out in enumerate(outs):
        others = [f'{r}z' for i, r in enumerate(rows) if i != index]
        spec = ','.join([f'{rows}z'] + others) + f'->{rows[index]}z'
        out[...] = ctx.xp.einsum(spec, grad, *(m for i, m in enumerate(mats) if i != index))


register('khatri_rao', _khatri_rao_kernel, inputs=variadic_names, variadic='num_args',
         infer_shape=_khatri_rao_infer, params=(NUM_ARGS,),
         gradient=lambda F, attrs, ins, outs, og: _listed(
             F._backward_khatri_rao(og[0], *ins, num_args=len(ins)), len(ins)),
         doc='The column-wise Kronecker product of matrices (I_k, R): (prod I_k, R).')
register('_backward_khatri_rao', _khatri_rao_backward_kernel,
         inputs=lambda attrs: ['out_grad'] + variadic_names(attrs),
         outputs=lambda attrs: [f'grad{i}' for i in range(attrs['num_args'])],
         variadic='num_args', params=(NUM_ARGS,),
         infer_shape=lambda attrs, s: (list(s), list(s[1:])),
         infer_type=lambda attrs, dt: (list(dt), list(dt[1:])))


def _listed(result, count):
    return [result] if count == 1 else list(result)
