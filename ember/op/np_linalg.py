"""``mx.np``'s products and ``mx.np.linalg``: dot, matmul, tensordot, einsum, inv, det,
slogdet, cholesky, qr, svd, eigh, solve, pinv, norm, eig, on NumPy's LAPACK kernels (CuPy's on
a GPU), over stacks of matrices where NumPy allows them.

Each gradient is written out in NumPy next to its kernel. Factorizations that read one
triangle of their input (cholesky, eigh with ``UPLO='L'``) pass the gradient of that function
exactly: the entries of the other triangle get none, and the diagonal and the triangle read get
what a symmetric perturbation would give.

>>> import numpy as np
>>> from ember.op import registry
>>> op = registry.get('_npi_matmul')
>>> op.infer_shape({}, [(5, 1, 2, 3), (4, 3, 6)])[1]
[(5, 4, 2, 6)]
"""
from __future__ import annotations

import numpy as np

from ember.op.np_rules import (broadcast_all, float_of, gradient_shapes, normalize_axis,
                               outputs_of, p_any, p_int_tuple, promote, reduced_shape,
                               sum_to_shape)
from ember.op.np_rules import unknown as _unknown
from ember.op.registry import (Param, ShapeError, p_bool, p_float, p_int, p_optional, p_str,
                               register)

__all__ = ['einsum_gradients']


def _t(x):
    return x.swapaxes(-1, -2)


def _grad_types(count):
    """Backward dtypes: the forward inputs' (the last `count` inputs)."""
    return lambda attrs, dtypes: (list(dtypes), list(dtypes[len(dtypes) - count:]))


def _promote_type(attrs, dtypes):
    if any(d is None for d in dtypes):
        return list(dtypes), [None]
    result = dtypes[0]
    for d in dtypes[1:]:
        result = promote(result, d)
    return list(dtypes), [result]


def _cast_to(out, *arrays):
    return [a.astype(out.dtype, copy=False) for a in arrays]


def _backward(name, kernel, forward_inputs, params=(), outputs=None, extra_inputs=(),
              forward_shapes=None):
    """Register `_backward_<name>`: inputs (ograd, extra..., forward inputs), one gradient per
    forward input (or `outputs`), each shaped and typed like its input; the ograd's shape
    comes from `forward_shapes(attrs, shapes)` where unknown."""
    count = len(forward_inputs)

    def gradient_shapes_of(attrs, shapes):
        return list(shapes[len(shapes) - count:])
    register(f'_backward{name}', kernel, inputs=tuple(extra_inputs) + tuple(forward_inputs),
             outputs=outputs or tuple(f'{n}_grad' for n in forward_inputs), params=params,
             infer_shape=gradient_shapes(1, forward_shapes or (lambda attrs, s: None),
                                         gradient_shapes_of),
             infer_type=_grad_types(count), doc=f'Gradient of ``{name}``.')


def _forward_of(infer):
    """The forward outputs' shapes from the forward inputs (the last of the shapes)."""
    def forward(attrs, shapes):
        inputs = shapes[-2:]
        return None if any(s is None for s in inputs) else infer(attrs, inputs)[1]
    return forward


# ----------------------------------------------------------------------------------------------
# tensordot, dot, matmul

def _tensordot_axes(a_ndim, b_ndim, attrs):
    a_axes = tuple(normalize_axis(a, a_ndim)[0] for a in attrs['a_axes'])
    b_axes = tuple(normalize_axis(b, b_ndim)[0] for b in attrs['b_axes'])
    if len(a_axes) != len(b_axes):
        raise ShapeError(f'tensordot: {len(a_axes)} axes of a against {len(b_axes)} of b')
    return a_axes, b_axes


def _tensordot_shape(attrs, shapes):
    a, b = shapes
    if a is None or b is None:
        return list(shapes), [None]
    a_axes, b_axes = _tensordot_axes(len(a), len(b), attrs)
    for i, j in zip(a_axes, b_axes):
        if a[i] != b[j]:
            raise ShapeError(f'tensordot: axis {i} of a ({a[i]}) does not match axis {j} of b '
                             f'({b[j]})')
    free_a = tuple(d for i, d in enumerate(a) if i not in a_axes)
    free_b = tuple(d for j, d in enumerate(b) if j not in b_axes)
    return list(shapes), [free_a + free_b]


def _tensordot_kernel(attrs, ins, outs, ctx):
    a, b = _cast_to(outs[0], *ins)
    a_axes, b_axes = _tensordot_axes(a.ndim, b.ndim, attrs)
    outs[0][...] = ctx.xp.tensordot(a, b, axes=(a_axes, b_axes))


def tensordot_gradients(xp, g, a, b, a_axes, b_axes):
    """(da, db) of ``tensordot(a, b, (a_axes, b_axes))`` for output gradient `g`."""
    free_a = [i for i in range(a.ndim) if i not in a_axes]
    free_b = [j for j in range(b.ndim) if j not in b_axes]
    na = len(free_a)
    # g axes: free_a then free_b. da = g . b over free_b; its axes: free_a, then b's
    # contracted axes in b's order, which pair with a's contracted axes.
    da = xp.tensordot(g, b, axes=(list(range(na, g.ndim)), free_b))
    paired_a = [a_axes[b_axes.index(j)] for j in sorted(b_axes)]
    da = xp.transpose(da, np.argsort(free_a + paired_a))
    db = xp.tensordot(a, g, axes=(free_a, list(range(na))))
    paired_b = [b_axes[a_axes.index(i)] for i in sorted(a_axes)]
    db = xp.transpose(db, np.argsort(paired_b + free_b))
    return da, db


def _backward_tensordot_kernel(attrs, ins, outs, ctx):
    g, a, b = ins
    a_axes, b_axes = _tensordot_axes(a.ndim, b.ndim, attrs)
    dtype = g.dtype
    da, db = tensordot_gradients(ctx.xp, g, a.astype(dtype, copy=False),
                                 b.astype(dtype, copy=False), a_axes, b_axes)
    outs[0][...] = da
    outs[1][...] = db


_TENSORDOT = (Param('a_axes', p_int_tuple), Param('b_axes', p_int_tuple))
register('_npi_tensordot', _tensordot_kernel, inputs=('a', 'b'), params=_TENSORDOT,
         infer_shape=_tensordot_shape, infer_type=_promote_type,
         gradient=lambda F, attrs, ins, outs, og: F._backward_npi_tensordot(
             og[0], ins[0], ins[1], **attrs),
         doc='``np.tensordot`` over paired axes of a and b.')
_backward('_npi_tensordot', _backward_tensordot_kernel, ('a', 'b'), _TENSORDOT,
          ('a_grad', 'b_grad'), ('ograd',), _forward_of(_tensordot_shape))


def dot_axes(a_ndim, b_ndim):
    """np.dot as tensordot: the last axis of a with the second-to-last of b (its only one when
    1-D); None when either is 0-d (a product)."""
    if a_ndim == 0 or b_ndim == 0:
        return None
    return (a_ndim - 1,), (max(b_ndim - 2, 0),)


def _dot_shape(attrs, shapes):
    a, b = shapes
    if a is None or b is None:
        return list(shapes), [None]
    axes = dot_axes(len(a), len(b))
    if axes is None:
        return list(shapes), [broadcast_all([a, b])]
    return _tensordot_shape({'a_axes': axes[0], 'b_axes': axes[1]}, shapes)


def _dot_kernel(attrs, ins, outs, ctx):
    a, b = _cast_to(outs[0], *ins)
    outs[0][...] = ctx.xp.dot(a, b)


def _backward_dot_kernel(attrs, ins, outs, ctx):
    g, a, b = ins
    a, b = a.astype(g.dtype, copy=False), b.astype(g.dtype, copy=False)
    axes = dot_axes(a.ndim, b.ndim)
    if axes is None:
        da, db = g * b, g * a
    else:
        da, db = tensordot_gradients(ctx.xp, g, a, b, *axes)
    outs[0][...] = sum_to_shape(ctx.xp, da, outs[0].shape)
    outs[1][...] = sum_to_shape(ctx.xp, db, outs[1].shape)


register('_npi_dot', _dot_kernel, inputs=('a', 'b'), infer_shape=_dot_shape,
         infer_type=_promote_type,
         gradient=lambda F, attrs, ins, outs, og: F._backward_npi_dot(og[0], ins[0], ins[1]),
         doc='``np.dot``: products of matrices, vectors and scalars.')
_backward('_npi_dot', _backward_dot_kernel, ('a', 'b'), extra_inputs=('ograd',),
          forward_shapes=_forward_of(_dot_shape))


def _matmul_shape(attrs, shapes):
    a, b = shapes
    if a is None or b is None:
        return list(shapes), [None]
    if not a or not b:
        raise ShapeError('matmul: scalars are not allowed; use multiply')
    a2, b2 = (a if len(a) > 1 else (1,) + tuple(a)), (b if len(b) > 1 else tuple(b) + (1,))
    if a2[-1] != b2[-2]:
        raise ShapeError(f'matmul: {a2[-1]} columns of a against {b2[-2]} rows of b')
    batch = broadcast_all([a2[:-2], b2[:-2]])
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return list(shapes), [out]


def _matmul_kernel(attrs, ins, outs, ctx):
    a, b = _cast_to(outs[0], *ins)
    ctx.xp.matmul(a, b, out=outs[0])


def _backward_matmul_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    g, a, b = ins
    a, b = a.astype(g.dtype, copy=False), b.astype(g.dtype, copy=False)
    a2 = a if a.ndim > 1 else a[None, :]
    b2 = b if b.ndim > 1 else b[:, None]
    g2 = g
    if a.ndim == 1:
        g2 = xp.expand_dims(g2, -2 if b.ndim > 1 else -1)
    if b.ndim == 1:
        g2 = xp.expand_dims(g2, -1)
    da = sum_to_shape(xp, xp.matmul(g2, _t(b2)), a2.shape)
    db = sum_to_shape(xp, xp.matmul(_t(a2), g2), b2.shape)
    outs[0][...] = da.reshape(a.shape)
    outs[1][...] = db.reshape(b.shape)


register('_npi_matmul', _matmul_kernel, inputs=('a', 'b'), infer_shape=_matmul_shape,
         infer_type=_promote_type,
         gradient=lambda F, attrs, ins, outs, og: F._backward_npi_matmul(og[0], ins[0], ins[1]),
         doc='``np.matmul``: matrix products broadcast over stacks.')
_backward('_npi_matmul', _backward_matmul_kernel, ('a', 'b'), extra_inputs=('ograd',),
          forward_shapes=_forward_of(_matmul_shape))


# ----------------------------------------------------------------------------------------------
# einsum

def _einsum_parts(subscripts, ndims):
    """(input subscripts per operand, output subscripts) with '...' replaced by letters."""
    text = subscripts.replace(' ', '')
    if '->' in text:
        lhs, rhs = text.split('->')
    else:
        lhs = text
        letters = [c for c in lhs.replace('...', '') if c.isalpha()]
        rhs = ('...' if '...' in lhs else '') + ''.join(
            sorted(c for c in set(letters) if letters.count(c) == 1))
    terms = lhs.split(',')
    if len(terms) != len(ndims):
        raise ShapeError(f'einsum: {subscripts!r} names {len(terms)} operands, got '
                         f'{len(ndims)}')
    used = set(c for c in text if c.isalpha())
    spare = [c for c in 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz' if c not in used]
    ellipsis = max((n - len(t.replace('...', '')) for t, n in zip(terms, ndims)
                    if '...' in t), default=0)
    fill = ''.join(spare[:ellipsis])
    terms = [t.replace('...', fill[len(fill) - (n - len(t.replace('...', ''))):])
             for t, n in zip(terms, ndims)]
    return terms, rhs.replace('...', fill)


def einsum_gradients(xp, subscripts, operands, g):
    """Gradients of ``einsum(subscripts, *operands)`` for output gradient `g`."""
    terms, out = _einsum_parts(subscripts, [o.ndim for o in operands])
    sizes = {}
    for term, operand in zip(terms, operands):
        for letter, size in zip(term, operand.shape):
            sizes[letter] = max(sizes.get(letter, 1), size)
    grads = []
    for index, (term, operand) in enumerate(zip(terms, operands)):
        others = [(t, o) for i, (t, o) in enumerate(zip(terms, operands)) if i != index]
        unique = ''.join(dict.fromkeys(term))
        seen = set(out) | set(''.join(t for t, _ in others))
        lonely = ''.join(c for c in unique if c not in seen)
        pieces = [g] + [o for _, o in others] + [xp.ones(sizes[c], g.dtype) for c in lonely]
        spec = ','.join([out] + [t for t, _ in others] + list(lonely)) + '->' + unique
        grad_unique = xp.einsum(spec, *pieces)
        grads.append(_place(xp, grad_unique, term, unique, operand.shape))
    return grads


def _place(xp, grad_unique, term, unique, shape):
    """The gradient of an operand whose subscripts repeat letters (a diagonal): zeros off it."""
    full_shape = tuple(grad_unique.shape[unique.index(c)] for c in term)
    if term == unique:
        return sum_to_shape(xp, grad_unique, shape)
    result = xp.zeros(full_shape, grad_unique.dtype)
    view = xp.einsum(f'{term}->{unique}', result)
    view[...] = grad_unique
    return sum_to_shape(xp, result, shape)


def _einsum_shape(attrs, shapes):
    if any(s is None for s in shapes):
        return list(shapes), [None]
    stand_ins = [np.broadcast_to(np.zeros((), np.float32), s) for s in shapes]
    try:
        path = np.einsum(attrs['subscripts'], *stand_ins, optimize=False)
    except ValueError as exc:
        raise ShapeError(f'einsum {attrs["subscripts"]!r}: {exc}') from None
    return list(shapes), [tuple(np.shape(path))]


def _einsum_kernel(attrs, ins, outs, ctx):
    operands = _cast_to(outs[0], *ins)
    outs[0][...] = ctx.xp.einsum(attrs['subscripts'], *operands,
                                 optimize=bool(attrs['optimize']))


def _backward_einsum_kernel(attrs, ins, outs, ctx):
    g, operands = ins[0], [x.astype(ins[0].dtype, copy=False) for x in ins[1:]]
    for out, grad in zip(outs, einsum_gradients(ctx.xp, attrs['subscripts'], operands, g)):
        out[...] = grad


def _einsum_inputs(attrs):
    return [f'arg{i}' for i in range(attrs['num_args'])]


_EINSUM = (Param('num_args', p_int), Param('subscripts', p_str),
           Param('optimize', p_any, False))
register('_npi_einsum', _einsum_kernel, inputs=_einsum_inputs, variadic='num_args',
         params=_EINSUM, infer_shape=_einsum_shape, infer_type=_promote_type,
         gradient=lambda F, attrs, ins, outs, og: outputs_of(F._backward_npi_einsum(
             og[0], *ins, **attrs)),
         doc='``np.einsum``: Einstein summation over operands.')
register('_backward_npi_einsum', _backward_einsum_kernel,
         inputs=lambda attrs: ['ograd'] + _einsum_inputs(attrs), variadic='num_args',
         outputs=lambda attrs: [f'grad{i}' for i in range(attrs['num_args'])], params=_EINSUM,
         infer_shape=gradient_shapes(
             1, lambda attrs, s: None if any(x is None for x in s[1:]) else
             _einsum_shape(attrs, s[1:])[1], lambda attrs, s: list(s[1:])),
         infer_type=lambda attrs, dtypes: (list(dtypes), list(dtypes[1:])),
         doc='Gradients of ``_npi_einsum``, one einsum per operand.')


# ----------------------------------------------------------------------------------------------
# Square-matrix functions

def _square(shape, name):
    if shape is None:
        return None
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ShapeError(f'{name}: expected square matrices (..., M, M), got {tuple(shape)}')
    return tuple(shape)


def _float_type(count=1):
    def infer(attrs, dtypes):
        dtype = None if dtypes[0] is None else float_of(dtypes[0])
        return list(dtypes), [dtype] * count
    return infer


def _unary_linalg(name, kernel, shape_rule, backward, outputs=('output',), doc=''):
    """Register `_npi_<name>` of one matrix input; `backward(xp, grads, a, outs, attrs)`."""
    def gradient(F, attrs, ins, outs, og):
        return [getattr(F, f'_backward_npi_{name}')(*og, *outs, ins[0], **attrs)]

    def backward_kernel(attrs, ins, bouts, ctx):
        count = len(outputs)
        grads, results, a = ins[:count], ins[count:2 * count], ins[-1]
        dtype = float_of(a.dtype)
        bouts[0][...] = backward(ctx.xp, [g.astype(dtype, copy=False) for g in grads],
                                 a.astype(dtype, copy=False), results, attrs)
    params = _PARAMS.get(name, ())
    register(f'_npi_{name}', kernel, inputs=('a',), outputs=outputs, params=params,
             infer_shape=lambda attrs, shapes: (list(shapes), shape_rule(shapes[0], attrs)),
             infer_type=_float_type(len(outputs)),
             gradient=gradient if backward else None, doc=doc)
    if backward:
        register(f'_backward_npi_{name}', backward_kernel,
                 inputs=tuple(f'ograd{i}' for i in range(len(outputs)))
                 + tuple(f'out{i}' for i in range(len(outputs))) + ('a',),
                 params=params, infer_shape=gradient_shapes(
                     len(outputs), lambda attrs, s: s[len(outputs):2 * len(outputs)],
                     lambda attrs, s: [s[-1]]),
                 infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[-1]]),
                 doc=f'Gradient of ``_npi_{name}``.')


_PARAMS = {
    'eigh': (Param('UPLO', p_str, 'L'),),
    'eigvalsh': (Param('UPLO', p_str, 'L'),),
    'qr': (Param('mode', p_str, 'reduced'),),
    'pinv': (Param('rcond', p_float, 1e-15), Param('hermitian', p_bool, False)),
}


def _as_float(outs, ins):
    return ins[0].astype(outs[0].dtype, copy=False)


def _inv_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.linalg.inv(_as_float(outs, ins))


def _inv_backward(xp, grads, a, outs, attrs):
    inv = outs[0]
    return -_t(inv) @ grads[0] @ _t(inv)


_unary_linalg('inv', _inv_kernel, lambda s, attrs: [_square(s, 'inv')], _inv_backward,
              doc='``np.linalg.inv``: matrix inverses.')


def _det_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.linalg.det(_as_float(outs, ins))


def _det_backward(xp, grads, a, outs, attrs):
    return (grads[0] * outs[0])[..., None, None] * _t(xp.linalg.inv(a))


_unary_linalg('det', _det_kernel, lambda s, attrs: [None if s is None else
                                                    _square(s, 'det')[:-2]],
              _det_backward, doc='``np.linalg.det``: determinants.')


def _slogdet_kernel(attrs, ins, outs, ctx):
    sign, logdet = ctx.xp.linalg.slogdet(_as_float(outs, ins))
    outs[0][...] = sign
    outs[1][...] = logdet


def _slogdet_backward(xp, grads, a, outs, attrs):
    return grads[1][..., None, None] * _t(xp.linalg.inv(a))


_unary_linalg('slogdet', _slogdet_kernel,
              lambda s, attrs: [None if s is None else _square(s, 'slogdet')[:-2]] * 2,
              _slogdet_backward, outputs=('sign', 'logabsdet'),
              doc='``np.linalg.slogdet``: sign and log of the absolute determinant.')


def _lower_read(xp, sym_grad, uplo='L'):
    """Gradient with respect to the entries a function of one triangle actually reads."""
    full = sym_grad + _t(sym_grad)
    eye = xp.eye(sym_grad.shape[-1], dtype=bool)
    tri = xp.tril(full, -1) if uplo == 'L' else xp.triu(full, 1)
    return tri + xp.where(eye, sym_grad, 0)


def _cholesky_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.linalg.cholesky(_as_float(outs, ins))


def _cholesky_backward(xp, grads, a, outs, attrs):
    lower, g = outs[0], grads[0]
    phi = _t(lower) @ g
    phi = xp.tril(phi) - 0.5 * xp.tril(xp.triu(phi))     # the diagonal counts half
    inv = xp.linalg.inv(lower)
    sym = _t(inv) @ phi @ inv
    return _lower_read(xp, 0.5 * (sym + _t(sym)))


_unary_linalg('cholesky', _cholesky_kernel, lambda s, attrs: [_square(s, 'cholesky')],
              _cholesky_backward, doc='``np.linalg.cholesky``: lower Cholesky factors.')


def _eigh_kernel(attrs, ins, outs, ctx):
    w, v = ctx.xp.linalg.eigh(_as_float(outs, ins), UPLO=attrs['UPLO'])
    outs[0][...] = w
    outs[1][...] = v


def _eigh_backward(xp, grads, a, outs, attrs):
    w, v = outs
    gw, gv = grads
    gap = w[..., None, :] - w[..., :, None]
    eye = xp.eye(w.shape[-1], dtype=bool)
    with np.errstate(all='ignore'):
        inner = xp.where(eye, 0, (_t(v) @ gv) / xp.where(eye, 1, gap))
    inner = inner + xp.where(eye, gw[..., None, :], 0)
    sym = v @ inner @ _t(v)
    return _lower_read(xp, 0.5 * (sym + _t(sym)), attrs['UPLO'])


_unary_linalg('eigh', _eigh_kernel,
              lambda s, attrs: [None if s is None else _square(s, 'eigh')[:-1],
                                _square(s, 'eigh')],
              _eigh_backward, outputs=('w', 'v'),
              doc='``np.linalg.eigh``: eigenvalues (ascending) and eigenvectors of symmetric '
                  'matrices.')


def _eigvalsh_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.linalg.eigvalsh(_as_float(outs, ins), UPLO=attrs['UPLO'])


def _eigvalsh_backward(xp, grads, a, outs, attrs):
    _, v = xp.linalg.eigh(a, UPLO=attrs['UPLO'])
    sym = (v * grads[0][..., None, :]) @ _t(v)
    return _lower_read(xp, sym, attrs['UPLO'])


_unary_linalg('eigvalsh', _eigvalsh_kernel,
              lambda s, attrs: [None if s is None else _square(s, 'eigvalsh')[:-1]],
              _eigvalsh_backward, doc='``np.linalg.eigvalsh``: eigenvalues of symmetric '
                                      'matrices.')


def _real_eig(xp, a, vectors):
    found = xp.linalg.eig(a) if vectors else (xp.linalg.eigvals(a),)
    if any(xp.iscomplexobj(f) and bool(xp.any(f.imag != 0)) for f in found):
        raise ValueError('eig: the matrix has complex eigenvalues; mx.np has no complex dtype '
                         '(symmetric matrices: use eigh)')
    return [f.real for f in found]


def _eig_kernel(attrs, ins, outs, ctx):
    for out, value in zip(outs, _real_eig(ctx.xp, _as_float(outs, ins), len(outs) == 2)):
        out[...] = value


_unary_linalg('eig', _eig_kernel,
              lambda s, attrs: [None if s is None else _square(s, 'eig')[:-1],
                                _square(s, 'eig')],
              None, outputs=('w', 'v'),
              doc='``np.linalg.eig`` of matrices with real eigenvalues (no gradient).')
_unary_linalg('eigvals', _eig_kernel,
              lambda s, attrs: [None if s is None else _square(s, 'eigvals')[:-1]],
              None, doc='``np.linalg.eigvals`` of matrices with real eigenvalues.')


def _svd_shapes(shape, attrs):
    if shape is None:
        return [None] * 3
    if len(shape) < 2:
        raise ShapeError(f'svd: expected matrices (..., M, N), got {tuple(shape)}')
    batch, (m, n) = tuple(shape[:-2]), shape[-2:]
    k = min(m, n)
    return [batch + (m, k), batch + (k,), batch + (k, n)]


def _svd_kernel(attrs, ins, outs, ctx):
    a = _as_float(outs, ins)
    u, s, vh = ctx.xp.linalg.svd(a, full_matrices=False)
    outs[0][...], outs[1][...], outs[2][...] = u, s, vh


def _svd_backward(xp, grads, a, outs, attrs):
    u, s, vh = outs
    gu, gs, gvh = grads
    v, gv = _t(vh), _t(gvh)
    s2 = s * s
    eye = xp.eye(s.shape[-1], dtype=bool)
    with np.errstate(all='ignore'):
        f = xp.where(eye, 0, 1.0 / xp.where(eye, 1, s2[..., None, :] - s2[..., :, None]))
    ut_gu, vt_gv = _t(u) @ gu, _t(v) @ gv
    core = (f * (ut_gu - _t(ut_gu))) * s[..., None, :] \
        + s[..., :, None] * (f * (vt_gv - _t(vt_gv))) + xp.where(eye, gs[..., None, :], 0)
    grad = u @ core @ vh
    inv_s = 1.0 / s
    m, n = a.shape[-2:]
    if m > s.shape[-1]:
        grad = grad + (gu - u @ ut_gu) * inv_s[..., None, :] @ vh
    if n > s.shape[-1]:
        grad = grad + (u * inv_s[..., None, :]) @ _t(gv - v @ vt_gv)
    return grad


_unary_linalg('svd', _svd_kernel, _svd_shapes, _svd_backward, outputs=('u', 's', 'vh'),
              doc='``np.linalg.svd`` (reduced: u (M, K), s (K,), vh (K, N)).')


def _qr_shapes(shape, attrs):
    if shape is None:
        return [None, None]
    if len(shape) < 2:
        raise ShapeError(f'qr: expected matrices (..., M, N), got {tuple(shape)}')
    if attrs['mode'] != 'reduced':
        raise ShapeError(f"qr: mode={attrs['mode']!r}: Ember gives the 'reduced' form")
    batch, (m, n) = tuple(shape[:-2]), shape[-2:]
    k = min(m, n)
    return [batch + (m, k), batch + (k, n)]


def _qr_kernel(attrs, ins, outs, ctx):
    q, r = ctx.xp.linalg.qr(_as_float(outs, ins), mode='reduced')
    outs[0][...], outs[1][...] = q, r


def _qr_square_backward(xp, q, r, gq, gr):
    m = r @ _t(gr) - _t(gq) @ q
    copyltu = xp.tril(m, -1) + _t(xp.tril(m, -1)) + xp.where(
        xp.eye(m.shape[-1], dtype=bool), m, 0)
    return _t(xp.linalg.solve(r, _t(gq + q @ copyltu)))


def _qr_backward(xp, grads, a, outs, attrs):
    q, r = outs
    gq, gr = grads
    m, n = a.shape[-2:]
    if m >= n:
        return _qr_square_backward(xp, q, r, gq, gr)
    y, u, gv = a[..., m:], r[..., :m], gr[..., m:]
    gx = _qr_square_backward(xp, q, u, gq + y @ _t(gv), gr[..., :m])
    return xp.concatenate([gx, q @ gv], axis=-1)


_unary_linalg('qr', _qr_kernel, _qr_shapes, _qr_backward, outputs=('q', 'r'),
              doc='``np.linalg.qr`` (reduced: q (M, K), r (K, N)).')


def _pinv_shape(shape, attrs):
    if shape is None:
        return [None]
    if len(shape) < 2:
        raise ShapeError(f'pinv: expected matrices (..., M, N), got {tuple(shape)}')
    return [tuple(shape[:-2]) + (shape[-1], shape[-2])]


def _pinv_kernel(attrs, ins, outs, ctx):
    outs[0][...] = ctx.xp.linalg.pinv(_as_float(outs, ins), rcond=attrs['rcond'],
                                      hermitian=attrs['hermitian'])


def _pinv_backward(xp, grads, a, outs, attrs):
    p, g = outs[0], grads[0]
    m, n = a.shape[-2:]
    eye_m, eye_n = xp.eye(m, dtype=a.dtype), xp.eye(n, dtype=a.dtype)
    return (-_t(p) @ g @ _t(p) + (eye_m - a @ p) @ _t(g) @ p @ _t(p)
            + _t(p) @ p @ _t(g) @ (eye_n - p @ a))


_unary_linalg('pinv', _pinv_kernel, _pinv_shape, _pinv_backward,
              doc='``np.linalg.pinv``: Moore-Penrose pseudo-inverses.')


# ----------------------------------------------------------------------------------------------
# solve

def _solve_shape(attrs, shapes):
    a, b = shapes
    if a is None or b is None:
        return list(shapes), [None]
    _square(a, 'solve')
    if len(b) == 1:
        if b[0] != a[-1]:
            raise ShapeError(f'solve: b of shape {tuple(b)} does not fit a of shape {tuple(a)}')
        return list(shapes), [tuple(a[:-2]) + (a[-1],)]
    if b[-2] != a[-1]:
        raise ShapeError(f'solve: b of shape {tuple(b)} does not fit a of shape {tuple(a)}')
    return list(shapes), [broadcast_all([a[:-2], b[:-2]]) + tuple(b[-2:])]


def _solve_kernel(attrs, ins, outs, ctx):
    a, b = _cast_to(outs[0], *ins)
    outs[0][...] = ctx.xp.linalg.solve(a, b)


def _backward_solve_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    g, x, a, b = ins
    dtype = g.dtype
    a = a.astype(dtype, copy=False)
    vector = b.ndim == 1
    g2, x2 = (g[..., None], x[..., None]) if vector else (g, x)
    gb = xp.linalg.solve(_t(a), g2)
    ga = -gb @ _t(x2)
    outs[0][...] = sum_to_shape(xp, ga, a.shape)
    outs[1][...] = sum_to_shape(xp, gb[..., 0] if vector else gb, b.shape)


register('_npi_solve', _solve_kernel, inputs=('a', 'b'), infer_shape=_solve_shape,
         infer_type=lambda attrs, dtypes: (list(dtypes), [
             None if _unknown(dtypes) else float_of(promote(*dtypes))]),
         gradient=lambda F, attrs, ins, outs, og: F._backward_npi_solve(og[0], outs[0], ins[0],
                                                                         ins[1]),
         doc='``np.linalg.solve``: x with a @ x = b.')
_backward('_npi_solve', _backward_solve_kernel, ('a', 'b'), extra_inputs=('ograd', 'x'),
          forward_shapes=lambda attrs, s: [s[1]])


# ----------------------------------------------------------------------------------------------
# norm

def _norm_axes(attrs, ndim):
    axis, order = attrs['axis'], attrs['ord']
    if axis is None:
        if order is None:
            return tuple(range(ndim)), 'flat'
        if ndim == 1:
            return (0,), 'vector'
        if ndim == 2:
            return (0, 1), 'matrix'
        raise ShapeError(f'norm: ord={order!r} needs axis for a {ndim}-d array')
    axes = axis if isinstance(axis, tuple) else (axis,)
    resolved = tuple(normalize_axis(a, ndim)[0] for a in axes)
    if len(resolved) == 1:
        return resolved, 'vector'
    if len(resolved) == 2:
        return resolved, 'matrix'
    raise ShapeError(f'norm: axis {axis} names {len(axes)} axes; expected 1 or 2')


def _norm_shape(attrs, shapes):
    shape = shapes[0]
    if shape is None:
        return list(shapes), [None]
    axes, _ = _norm_axes(attrs, len(shape))
    return list(shapes), [reduced_shape(shape, axes, attrs['keepdims'])]


def _norm_kernel(attrs, ins, outs, ctx):
    x = ins[0].astype(outs[0].dtype, copy=False)
    axes, kind = _norm_axes(attrs, x.ndim)
    order = attrs['ord']
    xp = ctx.xp
    if kind == 'flat':
        value = xp.sqrt(xp.sum(x * x, axis=axes, keepdims=attrs['keepdims']))
    else:
        value = xp.linalg.norm(x, ord=order, axis=axes if kind == 'matrix' else axes[0],
                               keepdims=attrs['keepdims'])
    outs[0][...] = value


def _vector_norm_grad(xp, x, y, g, order, axis):
    if order in (None, 2, 2.0):
        with np.errstate(all='ignore'):
            return g * xp.where(y == 0, 0, x / y)
    if order == 1:
        return g * xp.sign(x)
    if order == 0:
        return xp.zeros_like(x)
    if order in (np.inf, -np.inf):
        hit = xp.abs(x) == y
        return g * xp.sign(x) * hit / xp.sum(hit, axis=axis, keepdims=True)
    with np.errstate(all='ignore'):
        return g * xp.sign(x) * xp.abs(x) ** (order - 1) / y ** (order - 1)


def _matrix_norm_grad(xp, moved, order):
    """d norm / d x of matrices on the last two axes."""
    if order in (None, 'fro'):
        y = xp.sqrt(xp.sum(moved * moved, axis=(-2, -1), keepdims=True))
        with np.errstate(all='ignore'):
            return xp.where(y == 0, 0, moved / y)
    if order in ('nuc', 2, -2):
        u, _, vh = xp.linalg.svd(moved, full_matrices=False)
        if order == 'nuc':
            return u @ vh
        pick = 0 if order == 2 else vh.shape[-2] - 1
        return u[..., :, pick:pick + 1] @ vh[..., pick:pick + 1, :]
    if order in (1, -1, np.inf, -np.inf):
        along = -2 if order in (1, -1) else -1
        sums = xp.sum(xp.abs(moved), axis=along, keepdims=True)
        reduce = xp.max if order > 0 else xp.min
        hit = sums == reduce(sums, axis=(-2, -1), keepdims=True)
        return xp.sign(moved) * hit / xp.sum(hit, axis=(-2, -1), keepdims=True)
    raise ValueError(f'norm: ord={order!r} is not a matrix norm')


def _backward_norm_kernel(attrs, ins, outs, ctx):
    xp = ctx.xp
    g, y, x = ins
    dtype = float_of(x.dtype)
    x = x.astype(dtype, copy=False)
    axes, kind = _norm_axes(attrs, x.ndim)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    g = g.astype(dtype, copy=False).reshape(kept)
    y = y.astype(dtype, copy=False).reshape(kept)
    if kind == 'matrix':
        target = (-2, -1)
        grad = xp.moveaxis(g, axes, target) * _matrix_norm_grad(
            xp, xp.moveaxis(x, axes, target), attrs['ord'])
        outs[0][...] = xp.moveaxis(grad, target, axes)
    else:
        outs[0][...] = _vector_norm_grad(xp, x, y, g, attrs['ord'] if kind == 'vector' else
                                         None, axes)


def p_norm_order(value):
    value = p_any(value)
    if value is None or value in ('fro', 'nuc') or isinstance(value, (int, float)):
        return value
    raise ValueError("None, 'fro', 'nuc' or a number")


_NORM = (Param('ord', p_norm_order, None), Param('axis', p_optional(p_any), None),
         Param('keepdims', p_bool, False))
register('_npi_norm', _norm_kernel, inputs=('x',), params=_NORM, infer_shape=_norm_shape,
         infer_type=_float_type(),
         gradient=lambda F, attrs, ins, outs, og: [F._backward_npi_norm(og[0], outs[0], ins[0],
                                                                        **attrs)],
         doc='``np.linalg.norm``: vector and matrix norms.')
register('_backward_npi_norm', _backward_norm_kernel, inputs=('ograd', 'y', 'x'), params=_NORM,
         infer_shape=gradient_shapes(1, lambda attrs, s: [s[1]], lambda attrs, s: [s[2]]),
         infer_type=lambda attrs, dtypes: (list(dtypes), [dtypes[2]]),
         doc='Gradient of ``_npi_norm``.')
